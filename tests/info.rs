//! `hxcomm info`: version, every setting with its value and source, the interfaces with why
//! each is or is not a rail, shared memory; a malformed setting is an error naming it.

use std::process::Command;

fn info(env: &[(&str, &str)]) -> (bool, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hxcomm"));
    c.arg("info");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn info_reports_settings_interfaces_and_shared_memory() {
    let (ok, t) = info(&[("HX_POLICY", "rr")]);
    assert!(ok, "{t}");
    assert!(
        t.starts_with(&format!("hxcomm {}", env!("CARGO_PKG_VERSION"))),
        "{t}"
    );
    let policy = t.lines().find(|l| l.contains("HX_POLICY")).unwrap();
    assert!(
        policy.contains("rr") && policy.contains("environment (HX_POLICY)"),
        "{policy}"
    );
    let spin = t.lines().find(|l| l.contains("HX_SPIN_US")).unwrap();
    assert!(spin.contains("200") && spin.contains("default"), "{spin}");
    assert!(t.contains("lo ") && t.contains("left out: loopback"), "{t}");
    assert!(t.contains("Shared memory:"), "{t}");
}

#[test]
fn info_names_a_malformed_setting() {
    let (ok, t) = info(&[("HX_SPIN_US", "soon")]);
    assert!(!ok, "{t}");
    assert!(t.contains("HX_SPIN_US"), "{t}");
}
