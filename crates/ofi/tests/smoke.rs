//! tests/c/smoke.c: a libfabric program (installed headers, -lfabric) driving the provider
//! end to end through libfabric's loader, in one process, over the hxcomm engine (two endpoints
//! of one domain talk through the engine's loopback path to itself).

mod common;
use std::process::Command;

#[test]
fn c_smoke_program() {
    let dir = common::provider_dir();
    let exe = common::compile_c(&dir, "smoke");
    // Without a job secret the domain is refused, and says why.
    let out = Command::new(&exe)
        .arg("map")
        .env("FI_PROVIDER_PATH", &dir)
        .env_remove("HX_JOB_SECRET")
        .env_remove("OMPI_MCA_orte_precondition_transports")
        .env_remove("HX_ALLOW_NO_SECRET")
        .env_remove("FI_LOG_LEVEL")
        .env("HX_LOG", "info")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "ran without a secret:\n{text}");
    assert!(
        text.contains("Permission denied") || text.contains("-13"),
        "{text}"
    );
    // ...on stderr even when libfabric's own log is off (its default): not just an errno.
    assert!(
        text.contains("hxcomm: fi_domain: no job secret: set HX_JOB_SECRET"),
        "the reason is missing:\n{text}"
    );
    for av in ["map", "table"] {
        let (ok, text) = common::run_c(&exe, &dir, &[av], &"42".repeat(32));
        assert!(ok, "smoke {av} failed:\n{text}");
        assert!(text.contains("smoke ok"), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
