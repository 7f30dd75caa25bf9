//! Builds libhxcomm and the launcher, compiles examples/pingpong.c with `cc` against
//! include/hxcomm.h, and runs it as two ranks under `hxcomm run`.
//!
//! Cargo does not hand an integration test the package's cdylib or another package's binary, so
//! the test runs `cargo build` itself, with the profile and target directory it was built with.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{cargo_build, profile_dir, workspace_root};
#[path = "../../../tests/util/skip.rs"]
mod skip;

/// Whether `cc` is there: a missing compiler fails under CI=true, else the test is skipped
/// visibly (tests/util/skip.rs).
fn need_cc() -> bool {
    skip::need_tool("cc", &["--version"], "gcc")
}

/// Compiles examples/pingpong.c once per test process (tests run in parallel and would otherwise
/// rewrite the executable while another runs it); returns the executable.
fn build_pingpong() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(compile_pingpong).clone()
}

fn compile_pingpong() -> PathBuf {
    cargo_build(&["-p", "hxcomm-capi", "--lib"]);
    cargo_build(&["-p", "hxcomm", "--bin", "hxcomm"]);
    let lib_dir = profile_dir();
    assert!(
        lib_dir.join("libhxcomm.so").exists(),
        "no libhxcomm.so in {}",
        lib_dir.display()
    );
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pingpong");
    common::cc(&workspace_root().join("examples/pingpong.c"), &exe, &[])
}

fn run(n: u32, extra: &[&str], exe: &Path) -> (Output, String) {
    let out = Command::new(profile_dir().join("hxcomm"))
        .args(["run", "-n", &n.to_string(), "--timeout", "120"])
        .args(extra)
        .arg("--")
        .arg(exe)
        .arg("5")
        .output()
        .expect("running hxcomm run");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// The header's struct layouts and constants, seen from C, match the library's.
#[test]
fn header_layout_from_c() {
    if !need_cc() {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let src = dir.join("layout.c");
    std::fs::write(
        &src,
        r#"#include <stddef.h>
#include "hxcomm.h"
#ifdef __cplusplus
#define _Static_assert static_assert
#endif
_Static_assert(sizeof(hx_target) == 8, "hx_target");
_Static_assert(sizeof(hx_status) == 32, "hx_status");
_Static_assert(offsetof(hx_status, tag) == 8, "tag");
_Static_assert(offsetof(hx_status, length) == 16, "length");
_Static_assert(offsetof(hx_status, truncated) == 24, "truncated");
_Static_assert(HX_ERR_PANIC == 9 && HX_ERR_TRUNCATED == 2 && HX_ERR_PEER == 3, "codes");
int main(void) { return 0; }
"#,
    )
    .unwrap();
    for (compiler, std) in [("cc", "-std=c11"), ("c++", "-std=c++17")] {
        let mut cmd = Command::new(compiler);
        cmd.args([std, "-Wall", "-Werror", "-fsyntax-only", "-I"])
            .arg(workspace_root().join("include"));
        if compiler == "c++" {
            cmd.args(["-x", "c++"]);
        }
        match cmd.arg(&src).output() {
            Ok(o) => assert!(
                o.status.success(),
                "{compiler}: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(_) if compiler == "c++" => {
                skip::skip("the C++ check: no `c++` (apt-get install -y g++)")
            }
            Err(e) => panic!("{compiler}: {e}"),
        }
    }
}

#[test]
fn pingpong_c_example_under_the_launcher() {
    if !need_cc() {
        return;
    }
    let exe = build_pingpong();

    // Default settings, then 4 loopback rails with striping.
    for extra in [
        &[][..],
        &["--policy", "stripe", "--env", "HX_LOOPBACK_RAILS=4"][..],
    ] {
        let (out, text) = run(2, extra, &exe);
        assert!(out.status.success(), "pingpong {extra:?} failed:\n{text}");
        for want in [
            "rank 0: pingpong OK",
            "rank 1: pingpong OK",
            "rank 0: hello from rank 1",
            "rank 1: hello from rank 0",
            "size  4194304:",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
        // Rank 1 says hello 100 ms late: rank 0 must have been woken by hxcomm's fd in poll().
        let woken = text
            .lines()
            .find_map(|l| l.strip_prefix("rank 0: hello from rank 1 after "))
            .and_then(|l| l.split(' ').next())
            .and_then(|n| n.parse::<u32>().ok());
        assert!(
            matches!(woken, Some(n) if n >= 1),
            "rank 0 was not woken by hx_fd:\n{text}"
        );
        eprintln!("{text}");
    }

    // A malformed setting: hx_init fails with a message naming the variable.
    let (out, text) = run(2, &["--env", "HX_POLICY=bogus"], &exe);
    assert!(
        !out.status.success(),
        "pingpong with HX_POLICY=bogus succeeded:\n{text}"
    );
    assert!(
        text.contains("hx_init")
            && text.contains("configuration error")
            && text.contains("HX_POLICY"),
        "{text}"
    );

    // Wrong job size: a clear message and a non-zero exit.
    let (out, text) = run(3, &[], &exe);
    assert!(
        !out.status.success(),
        "pingpong with 3 ranks succeeded:\n{text}"
    );
    assert!(text.contains("needs exactly 2 ranks"), "{text}");
}

const HYDRA: &str = "mpiexec.hydra";

/// Whether MPICH's Hydra is there: skips visibly without it, fails under CI.
fn need_hydra() -> bool {
    skip::need_tool(HYDRA, &["--version"], "mpich")
}

/// `mpiexec.hydra ARGS` (killed after 120 s), without the variables of an outer launcher.
fn mpiexec(args: &[&str]) -> (Output, String) {
    let mut c = Command::new("timeout");
    c.args(["-k", "5", "120", HYDRA]).args(args);
    for v in [
        "HX_RANK",
        "HX_SIZE",
        "HX_BOOTSTRAP",
        "HX_JOB_SECRET",
        "PMI_FD",
        "PMI_PORT",
        "PMI_ID",
        "PMI_RANK",
        "PMI_SIZE",
    ] {
        c.env_remove(v);
    }
    let out = c.output().expect("running mpiexec.hydra");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

fn assert_pingpong_ok(out: &Output, text: &str, what: &str) {
    assert!(out.status.success(), "{what}: pingpong failed:\n{text}");
    for want in [
        "rank 0: pingpong OK",
        "rank 1: pingpong OK",
        "size  4194304:",
    ] {
        assert!(text.contains(want), "{what}: missing {want:?} in:\n{text}");
    }
}

/// The C example started by MPICH's Hydra instead of `hxcomm run` (PMI-1, no hxcomm setting):
/// on this host, and as root between two testbed hosts through Hydra's ssh launcher and the
/// namespace agent bench/netns-rsh.
#[test]
fn pingpong_c_example_under_hydra() {
    if !need_cc() || !need_hydra() {
        return;
    }
    let exe = build_pingpong();
    let exe_s = exe.to_str().unwrap();
    let (out, text) = mpiexec(&["-n", "2", exe_s, "5"]);
    assert_pingpong_ok(&out, &text, "one host");
    eprintln!("{text}");

    if !skip::need(
        skip::is_root(),
        "on the testbed: needs root (network namespaces)",
    ) {
        return;
    }
    let hxcomm = profile_dir().join("hxcomm");
    let tb = format!("c{}", std::process::id() % 10000);
    let up = Command::new(&hxcomm)
        .args(["net", "up", "--name", &tb, "--hosts", "2", "--rails", "2"])
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "net up: {}",
        String::from_utf8_lossy(&up.stderr)
    );
    let status = Command::new(&hxcomm)
        .args(["net", "status", "--name", &tb, "--json"])
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    let mgmt = status
        .split("\"mgmt_addr\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no mgmt_addr in {status}"))
        .to_string();
    let agent = workspace_root().join("bench/netns-rsh");
    let hosts = format!("{tb}0,{tb}1");
    let (out, text) = mpiexec(&[
        "-launcher",
        "ssh",
        "-launcher-exec",
        agent.to_str().unwrap(),
        "-localhost",
        &mgmt,
        "-hosts",
        &hosts,
        "-n",
        "2",
        exe_s,
        "5",
    ]);
    let down = Command::new(&hxcomm)
        .args(["net", "down", "--name", &tb])
        .output()
        .unwrap();
    assert_pingpong_ok(&out, &text, "testbed");
    assert!(down.status.success(), "net down");
    eprintln!("{text}");
}
