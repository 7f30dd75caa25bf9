//! tests/c/bad_input.c: malformed addresses, unknown fi_addr_t, a peer that dies with a receive
//! from it and one from any source posted, a stranger without the job secret, each through libfabric in separate
//! processes over the hxcomm engine.

mod common;
use std::process::Command;

#[test]
fn bad_input_and_failures() {
    let dir = common::provider_dir();
    let exe = common::compile_c(&dir, "bad_input");
    let out = Command::new(&exe)
        .args(["31".repeat(32), "32".repeat(32)])
        .env("FI_PROVIDER_PATH", &dir)
        .env("HX_TRANSPORTS", "tcp")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("bad input ok"), "{stdout}\n{stderr}");
    // The dead peer is named, the stranger refused for its secret, in words a user can act on.
    assert!(stdout.contains("closed its connections"), "{stdout}");
    assert!(stdout.contains("any-source receive failed"), "{stdout}");
    assert!(stderr.contains("wrong job secret"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
