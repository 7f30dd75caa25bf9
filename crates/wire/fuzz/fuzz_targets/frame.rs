//! Frame header, address and handshake decoders on arbitrary bytes: never panic, and whatever parses
//! re-encodes to the same bytes; the express path's eager view agrees with the full parse.
#![no_main]

use hx_wire::{
    eager_view, Address, Challenge, FrameHeader, FrameKind, Hello, FLAG_READ, FLAG_RMA,
    MIN_HEADER_LEN,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((h, len)) = FrameHeader::parse(data) {
        assert!(len >= MIN_HEADER_LEN && len <= data.len());
        let (again, _) = FrameHeader::parse(&h.to_bytes()).expect("re-parse");
        assert_eq!(again, h);
    }
    match (eager_view(data), FrameHeader::parse(data)) {
        (Some(v), Ok((h, hlen))) => {
            assert_eq!(h.kind, FrameKind::Eager);
            assert_eq!(
                (v.hlen, v.flags, v.src_ep, v.dst_ep),
                (hlen, h.flags, h.src_ep, h.dst_ep)
            );
            assert_eq!(
                (v.len as u64, v.seq, v.tag, v.data),
                (h.value, h.seq, h.tag, h.data)
            );
        }
        (Some(v), Err(e)) => panic!("eager view {v:?} of a header the parse refuses: {e}"),
        // Eager reads' answers and writes are left to the full parse.
        (None, Ok((h, _))) => {
            assert!(h.kind != FrameKind::Eager || h.flags & (FLAG_READ | FLAG_RMA) != 0)
        }
        (None, Err(_)) => {}
    }
    if let Ok(h) = Hello::parse(data) {
        assert_eq!(Hello::parse(&h.to_bytes()), Ok(h));
    }
    if let Ok(a) = Address::parse(data) {
        assert_eq!(Address::parse(&a.to_bytes()), Ok(a.clone()));
        let _ = a.to_string();
    }
    let _ = Challenge::parse(data);
});
