//! The PMI-1 reply decoder (what a PMI server such as Hydra or Slurm sends a rank) on arbitrary
//! bytes: split into lines as the client reads them, each line decoded, every value unescaped.
//! Clean errors or values, never a panic or a read past the input; a line is never longer than
//! the bound.
#![no_main]

use hx_bootstrap::pmi::{decode_reply, decode_value, split_line, Reply, MAX_REPLY_LINE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    loop {
        match split_line(rest) {
            Ok(Some((line, used))) => {
                assert!(used <= rest.len() && used <= MAX_REPLY_LINE);
                assert_eq!(used, line.len() + 1);
                if let Ok(reply) = decode_reply(line) {
                    assert!(!reply.cmd().is_empty());
                    if let Reply::GetResult { value: Some(v), .. } = &reply {
                        let _ = decode_value(v);
                    }
                }
                rest = &rest[used..];
            }
            Ok(None) => {
                assert!(rest.len() < MAX_REPLY_LINE);
                // What is left may still be a line without its newline.
                let _ = decode_reply(rest);
                break;
            }
            Err(_) => {
                assert!(rest.len() >= MAX_REPLY_LINE);
                break;
            }
        }
    }
});
