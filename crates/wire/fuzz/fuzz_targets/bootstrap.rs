//! The bootstrap service's request and response decoders on arbitrary bytes: a clean error or a
//! value that consumed no more than it was given, never a panic.
#![no_main]

use hx_bootstrap::{decode_request, decode_response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((_, used)) = decode_request(data) {
        assert!(used <= data.len());
    }
    if let Ok((_, used)) = decode_response(data) {
        assert!(used <= data.len());
    }
});
