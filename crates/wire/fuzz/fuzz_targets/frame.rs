//! Frame header, address and handshake decoders on arbitrary bytes: never panic, and whatever parses
//! re-encodes to the same bytes.
#![no_main]

use hx_wire::{Address, Challenge, FrameHeader, Hello, MIN_HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((h, len)) = FrameHeader::parse(data) {
        assert!(len >= MIN_HEADER_LEN && len <= data.len());
        let (again, _) = FrameHeader::parse(&h.to_bytes()).expect("re-parse");
        assert_eq!(again, h);
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
