//! The C API from C: the programs in tests/c/ compiled with `cc -Werror` against
//! include/hxcomm.h, linked with libhxcomm.so, and run alone (a job of one) or as two ranks under
//! `hxcomm run` (over shared memory and over two loopback TCP rails).
//!
//! As in c_example.rs, the test runs `cargo build` for the cdylib and the launcher itself.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

mod common;
use common::{cargo_build, profile_dir, workspace_root};
#[path = "../../../tests/util/skip.rs"]
mod skip;

fn c_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

/// Builds libhxcomm.so and the launcher once per test process.
fn built() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        cargo_build(&["-p", "hxcomm-capi", "--lib"]);
        cargo_build(&["-p", "hxcomm", "--bin", "hxcomm"]);
        assert!(profile_dir().join("libhxcomm.so").exists());
    });
}

/// Whether `cc` is there: a missing compiler fails under CI=true, else the test is skipped
/// visibly (tests/util/skip.rs).
fn need_cc() -> bool {
    skip::need_tool("cc", &["--version"], "gcc")
}

/// Compiles tests/c/NAME.c (warnings are errors); returns the executable.
fn compile(name: &str) -> PathBuf {
    built();
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("c_api_{name}"));
    let inc = c_dir();
    let extra = [
        "-D_DEFAULT_SOURCE".as_ref(),
        "-pthread".as_ref(),
        "-I".as_ref(),
        inc.as_os_str(),
    ];
    common::cc(&c_dir().join(format!("{name}.c")), &exe, &extra)
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `exe` alone: a job of one, whatever launcher runs the tests.
fn run_alone(exe: &Path) -> (Output, String) {
    let mut c = Command::new("timeout");
    c.args(["-k", "5", "60"]).arg(exe);
    for v in [
        "HX_RANK",
        "HX_SIZE",
        "HX_BOOTSTRAP",
        "PMI_FD",
        "PMI_PORT",
        "PMI_RANK",
        "PMI_SIZE",
    ] {
        c.env_remove(v);
    }
    let out = c.output().expect("running a C test");
    let t = text(&out);
    (out, t)
}

/// Runs `exe args` as two ranks under `hxcomm run`, with extra launcher arguments.
fn run_two(exe: &Path, extra: &[&str], args: &[&str]) -> (Output, String) {
    let out = Command::new(profile_dir().join("hxcomm"))
        .args(["run", "-n", "2", "--timeout", "120"])
        .args(extra)
        .arg("--")
        .arg(exe)
        .args(args)
        .output()
        .expect("running hxcomm run");
    let t = text(&out);
    (out, t)
}

const TCP: &[&str] = &["--env", "HX_TRANSPORTS=tcp", "--env", "HX_LOOPBACK_RAILS=2"];

/// Closed endpoints, finalized contexts, double close/finalize, foreign pointers:
/// HX_ERR_HANDLE, not SIGSEGV (issue 11; crashed before the registry).
#[test]
fn stale_handles_are_errors() {
    if !need_cc() {
        return;
    }
    let (out, t) = run_alone(&compile("handles"));
    assert!(out.status.success(), "handles: {:?}\n{t}", out.status);
    assert!(t.contains("handles OK"), "{t}");
}

/// Four threads on one context, every byte checked: with HX_THREAD_MULTIPLE (blocking read in
/// one thread while another writes) and with hx_init (nonblocking calls from several threads;
/// corrupted the protocol before the context lock), over shared memory and TCP.
#[test]
fn threads_share_a_context() {
    if !need_cc() {
        return;
    }
    let exe = compile("threads");
    for mode in ["multiple", "serialized"] {
        for extra in [&[][..], TCP] {
            let (out, t) = run_two(&exe, extra, &[mode]);
            assert!(out.status.success(), "threads {mode} {extra:?}:\n{t}");
            for r in 0..2 {
                let want = format!("rank {r}: threads {mode} OK");
                assert!(t.contains(&want), "missing {want:?}:\n{t}");
            }
        }
    }
}

/// Out-of-range sources refused by probe as by read, capacities above HX_MAX_MESSAGE refused,
/// matched probe, hx_cancel, hx_version (probe and hx_iread(SIZE_MAX) returned HX_OK before).
#[test]
fn probe_limits_cancel_version() {
    if !need_cc() {
        return;
    }
    let (out, t) = run_alone(&compile("probe_limits"));
    assert!(out.status.success(), "probe_limits: {:?}\n{t}", out.status);
    assert!(t.contains("probe_limits OK"), "{t}");
}

/// hx_endpoint_id, hx_fd (== hx_endpoint_fd) and hx_progress: a rank sleeping in poll() on
/// hx_fd is woken by a late message.
#[test]
fn fd_and_progress_from_c() {
    if !need_cc() {
        return;
    }
    let exe = compile("fd_progress");
    for extra in [&[][..], TCP] {
        let (out, t) = run_two(&exe, extra, &[]);
        assert!(out.status.success(), "fd_progress {extra:?}:\n{t}");
        assert!(
            t.contains("rank 0: fd_progress OK") && t.contains("rank 1: fd_progress OK"),
            "{t}"
        );
        assert!(t.contains("by hx_fd"), "{t}");
    }
}

/// A same-host peer (and a TCP one) that exits without hx_finalize is noticed by a rank blocked
/// in hx_read on it: the read fails naming it (over shared memory it hung before, issue 11).
#[test]
fn peer_that_exits_without_finalize_is_noticed() {
    if !need_cc() {
        return;
    }
    let exe = compile("peer_exit");
    for extra in [&[][..], TCP] {
        let (_, t) = run_two(&exe, extra, &[]);
        assert!(
            t.contains("rank 0: peer_exit OK"),
            "peer_exit {extra:?}:\n{t}"
        );
        let why = t
            .lines()
            .find(|l| l.contains("rank 0: read failed"))
            .unwrap_or_default();
        assert!(
            why.contains("rank 1"),
            "the error names the peer: {why}\n{t}"
        );
    }
}

/// The function names a C declaration in `text` declares: `... hx_name(` at the start of a line.
fn declared(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('#') && !l.starts_with("/*"))
        .filter_map(|l| {
            let i = l.find("hx_")?;
            let rest = &l[i..];
            let end = rest.find('(')?;
            let name = &rest[..end];
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
                .then(|| name.to_string())
        })
        .collect()
}

/// Every function the header declares exists in libhxcomm.so with the declared type (symbols.c
/// spells each type out by hand and is compiled with -Werror and linked with -lhxcomm), and the
/// header, symbols.c and the library's exported hx_ functions name the same set.
#[test]
fn header_functions_exist_in_the_library() {
    if !need_cc() {
        return;
    }
    let (out, t) = run_alone(&compile("symbols"));
    assert!(out.status.success(), "symbols: {t}");
    assert!(t.contains("symbols OK"), "{t}");

    let header = std::fs::read_to_string(workspace_root().join("include/hxcomm.h")).unwrap();
    let in_header = declared(&header);
    let sym_c = std::fs::read_to_string(c_dir().join("symbols.c")).unwrap();
    let in_test: BTreeSet<String> = sym_c
        .lines()
        .filter_map(|l| l.strip_prefix("FN("))
        .filter_map(|l| l.split(',').next())
        .map(str::to_string)
        .collect();
    assert!(in_header.len() >= 30, "header parse: {in_header:?}");
    assert_eq!(in_header, in_test, "header vs tests/c/symbols.c");

    match Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(profile_dir().join("libhxcomm.so"))
        .output()
    {
        Ok(o) if o.status.success() => {
            let exported: BTreeSet<String> = String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().nth(2))
                .filter(|s| s.starts_with("hx_"))
                .map(str::to_string)
                .collect();
            assert_eq!(in_header, exported, "header vs libhxcomm.so's exports");
        }
        _ => skip::skip("the export list check: no `nm` (apt-get install -y binutils)"),
    }
}
