//! The provider as libfabric's own `fi_info` tool sees it.

mod common;
use std::process::Command;

fn fi_info(args: &[&str]) -> (bool, String) {
    let dir = common::provider_dir();
    let out = Command::new("fi_info")
        .args(args)
        .env("FI_PROVIDER_PATH", &dir)
        .output()
        .expect("fi_info (libfabric-bin) must be installed");
    let _ = std::fs::remove_dir_all(&dir);
    // Other providers' help texts are not always UTF-8.
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn lists_hxcomm_rdm() {
    let (ok, out) = fi_info(&["-p", "hxcomm"]);
    assert!(ok, "{out}");
    assert!(out.contains("provider: hxcomm"), "{out}");
    assert!(out.contains("FI_EP_RDM"), "{out}");
    assert!(
        !out.contains("ofi_rxm"),
        "utility providers must not layer over us: {out}"
    );
    // Without hints (plain fi_info) too, exactly once.
    let (ok, out) = fi_info(&[]);
    assert!(ok);
    assert_eq!(out.matches("provider: hxcomm\n").count(), 1, "{out}");
}

#[test]
fn msg_endpoints_are_not_offered() {
    let (ok, out) = fi_info(&["-p", "hxcomm", "-t", "FI_EP_MSG"]);
    assert!(!ok, "{out}");
    assert!(!out.contains("provider: hxcomm"), "{out}");
}

#[test]
fn settings_are_documented() {
    let (ok, out) = fi_info(&["-e"]);
    assert!(ok);
    assert!(out.contains("FI_HXCOMM_POLICY"), "{out}");
    assert!(out.contains("Another name for HX_POLICY"), "{out}");
    assert!(out.contains("FI_HXCOMM_JOB_SECRET"), "{out}");
}
