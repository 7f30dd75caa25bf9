//! tests/c/threads.c: FI_THREAD_SAFE through libfabric's loader: two threads drive two endpoints
//! of one domain at once, each sending to and receiving from the other (eager and rendezvous
//! sizes), every byte checked.

mod common;

#[test]
fn two_threads_on_one_domain() {
    let dir = common::provider_dir();
    let exe = common::compile_c(&dir, "threads");
    let (ok, text) = common::run_c(&exe, &dir, &[], &"43".repeat(32));
    assert!(ok, "threads failed:\n{text}");
    assert!(text.contains("threads ok"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
