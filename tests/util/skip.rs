//! The one way a test skips (issue 11), shared by every test crate of the workspace (`mod util;`
//! in tests/, `#[path = "../../../tests/util/skip.rs"] mod skip;` in crates/*/tests; the shell
//! scripts use `tests/skips.sh --skip`, which does the same).
//!
//! A test that needs what this machine lacks (root, network namespaces, a tool) calls [`need`],
//! [`need_root`] or [`need_tool`] and returns when they say no. libtest then counts it as passed,
//! so the skip is made visible: [`skip`] prints `skipped: <test>: <reason>` and appends the line
//! `<test>: <reason>` to the file named by `HX_SKIP_LOG`, if set (`.ci/run` and `tests/skips.sh`
//! set it to a fresh file and list it at the end: `skipped: N tests`, or `skipped: none`).
//!
//! With `CI=true` there is no skip: CI runs as root and `.ci/run` installs every tool the tests
//! use, so a missing one is a broken CI setup and the test fails (panics with the reason).

#![allow(dead_code)] // each test binary uses part of it

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Skips (the rest of) the running test because of `reason`: a failure under `CI=true`;
/// otherwise printed and logged to `HX_SKIP_LOG`. The test's name is its thread's (libtest runs
/// each test on a thread named after it).
pub fn skip(reason: &str) {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let log = std::env::var_os("HX_SKIP_LOG");
    skip_as(&test_name(), reason, ci, log.as_deref().map(Path::new));
}

/// [`skip`] with everything explicit: the test's name, whether this is CI, and the log file.
pub fn skip_as(test: &str, reason: &str, ci: bool, log: Option<&Path>) {
    assert!(!ci, "{test}: {reason}, and CI=true requires it");
    println!("skipped: {test}: {reason}");
    let Some(path) = log.filter(|p| !p.as_os_str().is_empty()) else {
        return;
    };
    let line = format!("{test}: {}\n", reason.replace('\n', " "));
    // One short line in one write in append mode: the lines of tests running at the same time
    // (threads of one binary, or several binaries) do not mix.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        panic!("{test}: HX_SKIP_LOG={}: {e}", path.display());
    }
}

/// `ok`, or else [`skip`] with `reason`: `if !need(have_x, "no x") { return; }`.
pub fn need(ok: bool, reason: &str) -> bool {
    if !ok {
        skip(reason);
    }
    ok
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
    })
}

/// Root (network namespaces, the testbed), or else [`skip`].
pub fn need_root() -> bool {
    need(is_root(), "needs root (network namespaces)")
}

/// Whether `program args` (say, `--version`) runs and succeeds.
pub fn have(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// [`have`]`(program, args)`, or else [`skip`] naming the Debian package that has it.
pub fn need_tool(program: &str, args: &[&str], package: &str) -> bool {
    need(
        have(program, args),
        &format!("no `{program}` (apt-get install -y {package})"),
    )
}

/// Root and `ip` (iproute2): what the testbed needs; or else [`skip`].
pub fn need_netns() -> bool {
    need_root() && need_tool("ip", &["-V"], "iproute2")
}

/// The running test's name: its thread's, or the executable's outside libtest's threads.
pub fn test_name() -> String {
    match std::thread::current().name() {
        Some(n) if n != "main" => n.to_string(),
        _ => std::env::args()
            .next()
            .map(|a| {
                Path::new(&a)
                    .file_name()
                    .map_or(a.clone(), |f| f.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "?".into()),
    }
}
