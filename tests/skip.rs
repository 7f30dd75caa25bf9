//! The skip helper of every test (tests/util/skip.rs; issue 11): without `CI=true` a skip is
//! printed and logged as "<test>: <reason>" to HX_SKIP_LOG; with `CI=true` it is a failure with
//! the reason. A binary of its own: the second test changes CI and HX_SKIP_LOG in this process,
//! which would race with the skips of other tests in a shared binary.

mod util;

use std::path::{Path, PathBuf};

use util::skip;

fn fresh_log(tag: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("skip-log-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn log_text(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// The panic message of `f`, which must panic.
fn panic_message(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let e = std::panic::catch_unwind(f).expect_err("no panic");
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// `skip_as`, everything explicit: appends one line per skip outside CI (and none without a log
/// file); under CI panics with test, reason and CI=true, and logs nothing.
#[test]
fn skip_logs_outside_ci_and_fails_under_ci() {
    let log = fresh_log("explicit");
    skip::skip_as("t1", "needs root (network namespaces)", false, Some(&log));
    skip::skip_as("t2", "no `cc` (apt-get install -y gcc)", false, Some(&log));
    skip::skip_as("t3", "not logged", false, None);
    let want = "t1: needs root (network namespaces)\nt2: no `cc` (apt-get install -y gcc)\n";
    assert_eq!(log_text(&log), want);

    let l = log.clone();
    let msg = panic_message(move || skip::skip_as("t4", "no `mpiexec.hydra`", true, Some(&l)));
    assert_eq!(msg, "t4: no `mpiexec.hydra`, and CI=true requires it");
    assert_eq!(log_text(&log), want, "logged under CI");
    let _ = std::fs::remove_file(log);
}

/// As tests call it: `need`/`need_tool` read CI and HX_SKIP_LOG from the environment and name
/// the running test (its libtest thread).
#[test]
fn need_reads_ci_and_hx_skip_log_and_names_the_test() {
    let (ci, old_log) = (std::env::var_os("CI"), std::env::var_os("HX_SKIP_LOG"));
    let log = fresh_log("env");
    std::env::set_var("HX_SKIP_LOG", &log);
    std::env::remove_var("CI");
    let me = "need_reads_ci_and_hx_skip_log_and_names_the_test";
    assert_eq!(skip::test_name(), me);

    assert!(skip::need(true, "never logged"));
    assert!(!skip::need(false, "a reason"));
    assert!(!skip::need_tool(
        "hx-no-such-tool",
        &["--version"],
        "nothing"
    ));
    std::env::set_var("CI", "false");
    assert!(!skip::need(false, "CI=false is not CI"));
    let want = format!(
        "{me}: a reason\n{me}: no `hx-no-such-tool` (apt-get install -y nothing)\n{me}: CI=false is not CI\n"
    );
    assert_eq!(log_text(&log), want);

    std::env::set_var("CI", "true");
    let msg = panic_message(|| {
        skip::need(false, "needs root (network namespaces)");
    });
    assert_eq!(
        msg,
        format!("{me}: needs root (network namespaces), and CI=true requires it")
    );
    let msg = panic_message(|| {
        skip::need_tool("hx-no-such-tool", &["--version"], "nothing");
    });
    assert!(msg.contains("no `hx-no-such-tool`"), "{msg}");
    assert!(skip::need_tool("sh", &["-c", "exit 0"], "dash"));
    assert_eq!(log_text(&log), want, "logged under CI");

    match ci {
        Some(v) => std::env::set_var("CI", v),
        None => std::env::remove_var("CI"),
    }
    match old_log {
        Some(v) => std::env::set_var("HX_SKIP_LOG", v),
        None => std::env::remove_var("HX_SKIP_LOG"),
    }
    let _ = std::fs::remove_file(log);
}
