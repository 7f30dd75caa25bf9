//! tests/c/parked.c: two processes of one host through the provider over shared memory, where
//! a CQ poll serves a lone small receive straight from the ring; checks that such a receive
//! keeps every matching rule of a posted one (order, probe, cancel, truncation, rendezvous,
//! messages that came first, another tag ahead in the ring, CQ data and source).

mod common;

#[test]
fn parked_receives_keep_the_matching_rules() {
    let dir = common::provider_dir();
    let exe = common::compile_c(&dir, "parked");
    let (ok, text) = common::run_c(&exe, &dir, &[], &"5a".repeat(32));
    assert!(ok, "parked failed:\n{text}");
    assert!(text.contains("parked ok"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
