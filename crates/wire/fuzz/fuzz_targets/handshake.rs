//! The acceptor's side of the rail handshake fed arbitrary bytes in arbitrary pieces: it ends in
//! NeedMore, Peer or Rejected, never a panic, and never accepts without the secret.
#![no_main]

use hx_transport::handshake::{Pending, Verdict};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let secret = [9u8; 32];
    let mut p = Pending::new().unwrap();
    let mut rest = data;
    while !rest.is_empty() {
        let space = p.space();
        if space.is_empty() {
            break;
        }
        let cut = (rest[0] as usize % space.len()).max(1).min(rest.len());
        space[..cut].copy_from_slice(&rest[..cut]);
        rest = &rest[cut..];
        match p.received(cut, &secret) {
            Verdict::NeedMore => {}
            Verdict::Peer { .. } => panic!("accepted a hello without the secret"),
            Verdict::Rejected(_) => break,
        }
    }
});
