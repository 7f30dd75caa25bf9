//! tests/c/delivery.c: FI_DELIVERY_COMPLETE sends (as Open MPI's btl/ofi asks for them) complete
//! only once the receiver holds the message, at 0 and 8 bytes and 16 KiB; a send without the
//! flag on the same endpoint completes without a receive; an endpoint closed with such a send
//! in flight lets it finish on a copy of its buffer (the sender frees the original).

mod common;

#[test]
fn delivery_complete_sends_wait_for_the_receiver() {
    let dir = common::provider_dir();
    let exe = common::compile_c(&dir, "delivery");
    let secret = "6b".repeat(32);
    let (ok, text) = common::run_c(&exe, &dir, &[], &secret);
    assert!(ok, "delivery failed:\n{text}");
    assert!(text.contains("delivery ok"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
