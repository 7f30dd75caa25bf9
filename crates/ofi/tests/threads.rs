//! tests/c/threads.c: FI_THREAD_SAFE through libfabric's loader: two threads drive two endpoints
//! of one domain at once, each sending to and receiving from the other (eager and rendezvous
//! sizes), every byte checked.

mod common;
use std::process::Command;

#[test]
fn two_threads_on_one_domain() {
    let dir = common::provider_dir();
    let exe = common::compile_c(&dir, "threads");
    let out = Command::new(&exe)
        .env("FI_PROVIDER_PATH", &dir)
        .env("HX_JOB_SECRET", "43".repeat(32))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "threads failed:\n{text}");
    assert!(text.contains("threads ok"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
