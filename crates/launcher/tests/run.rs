//! Tests of `hxcomm run` through the library's `run_with_output`, with small `sh -c` programs as
//! ranks. The rank that must talk to the bootstrap service, and the launcher that the signal
//! tests signal in a process of its own, are the helper binary `hx-launcher-test-child`
//! (tests/bin/child.rs), not this test executable run again (issue 11).

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hx_launcher::{run_with_output, OutputSinks, RunArgs};

#[path = "../../../tests/util/skip.rs"]
mod skip;

/// The helper binary with the probe rank and the signalled launcher (tests/bin/child.rs).
const CHILD: &str = env!("CARGO_BIN_EXE_hx-launcher-test-child");

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buf {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Runs a job with captured, tagged output: (exit code, stdout, stderr).
fn run_captured(mut args: RunArgs) -> (i32, String, String) {
    let (out, err) = (Buf::default(), Buf::default());
    args.tag_output = true;
    let code = run_with_output(
        args,
        Some(OutputSinks {
            stdout: Arc::new(Mutex::new(out.clone())),
            stderr: Arc::new(Mutex::new(err.clone())),
        }),
    );
    (code, out.text(), err.text())
}

fn sh(n: u32, script: &str) -> RunArgs {
    RunArgs::new(n, ["sh", "-c", script])
}

fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "hx-launcher-test-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// True if `pid` no longer runs (gone, or a zombie waiting for init).
fn gone(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

fn read_pids(dir: &PathBuf) -> Vec<i32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if let Ok(s) = std::fs::read_to_string(&p) {
            v.extend(s.split_whitespace().filter_map(|w| w.parse::<i32>().ok()));
        }
    }
    v
}

#[test]
fn ranks_see_rank_size_and_bootstrap() {
    let (code, out, err) = run_captured(sh(
        4,
        r#"echo "rank=$HX_RANK size=$HX_SIZE local=$HX_LOCAL_RANK/$HX_LOCAL_SIZE boot=$HX_BOOTSTRAP secretlen=${#HX_JOB_SECRET}""#,
    ));
    assert_eq!(code, 0, "stderr: {err}");
    for r in 0..4 {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("[{r}] ")))
            .unwrap_or_else(|| panic!("no line of rank {r} in {out:?}"));
        assert!(
            line.contains(&format!("rank={r} size=4 local={r}/4 boot=127.0.0.1:")),
            "{line}"
        );
        assert!(line.ends_with("secretlen=64"), "{line}");
    }
}

/// The CPUs this process may use (its Cpus_allowed_list).
fn allowed_list() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn ranks_get_a_cpu_each_when_they_fit() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let script = r#"grep Cpus_allowed_list /proc/self/status"#;
    if cpus >= 2 && allowed_list().contains(['-', ',']) {
        let (code, out, err) = run_captured(sh(2, script));
        assert_eq!(code, 0, "stderr: {err}");
        let lists: Vec<&str> = (0..2)
            .map(|r| {
                let l = out
                    .lines()
                    .find(|l| l.starts_with(&format!("[{r}] ")))
                    .unwrap();
                l.rsplit(['\t', ' ']).next().unwrap()
            })
            .collect();
        assert!(
            lists.iter().all(|l| l.parse::<usize>().is_ok()) && lists[0] != lists[1],
            "two ranks, one CPU each: {out}"
        );
    } else {
        eprintln!("ranks_get_a_cpu_each_when_they_fit: skipped, fewer than 2 CPUs allowed");
    }
    // More ranks than CPUs: not bound, as the launcher itself.
    let (code, out, err) = run_captured(sh(cpus as u32 + 1, script));
    assert_eq!(code, 0, "stderr: {err}");
    let own = allowed_list();
    assert!(
        out.lines().all(|l| l.ends_with(&own)),
        "{out} (launcher: {own})"
    );
}

#[test]
fn env_and_policy_delivered() {
    let mut a = sh(2, r#"echo "foo=$FOO policy=$HX_POLICY""#);
    a.env = vec!["FOO=bar baz=1".into()];
    a.policy = Some("stripe".into());
    let (code, out, _) = run_captured(a);
    assert_eq!(code, 0);
    assert!(out.contains("[0] foo=bar baz=1 policy=stripe"), "{out}");
    assert!(out.contains("[1] foo=bar baz=1 policy=stripe"), "{out}");
}

#[test]
fn tag_output_prefixes_every_line() {
    let (code, out, err) = run_captured(sh(
        2,
        r#"echo one; echo two; echo oops >&2; printf 'no newline'"#,
    ));
    assert_eq!(code, 0);
    for r in 0..2 {
        for l in ["one", "two", "no newline"] {
            assert!(out.contains(&format!("[{r}] {l}\n")), "{out:?}");
        }
        assert!(err.contains(&format!("[{r}] oops\n")), "{err:?}");
    }
    assert_eq!(out.lines().count(), 6, "{out:?}");
    assert!(out
        .lines()
        .all(|l| l.starts_with("[0] ") || l.starts_with("[1] ")));
}

#[test]
fn failing_rank_stops_the_others() {
    let dir = temp_dir("fail");
    // Rank 1 fails after the others are up. Rank 0 ignores SIGTERM (needs the SIGKILL), ranks 2
    // and 3 run a child of their own (must be killed with the group).
    let script = format!(
        r#"d={d}
case $HX_RANK in
1) sleep 0.5; exit 3 ;;
0) trap '' TERM; sleep 30 & echo "$$ $!" > $d/pid.$HX_RANK; wait; wait ;;
*) sleep 30 & echo "$$ $!" > $d/pid.$HX_RANK; wait ;;
esac"#,
        d = dir.display()
    );
    let t0 = Instant::now();
    let (code, _, _) = run_captured(sh(4, &script));
    let took = t0.elapsed();
    assert_eq!(code, 3);
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let pids = read_pids(&dir);
    assert_eq!(pids.len(), 6, "{pids:?}");
    for p in pids {
        assert!(gone(p), "pid {p} still running");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn rank_killed_by_signal() {
    let t0 = Instant::now();
    let (code, _, _) = run_captured(sh(
        3,
        r#"if [ "$HX_RANK" = 2 ]; then kill -9 $$; fi; exec sleep 30"#,
    ));
    assert_eq!(code, 128 + 9);
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn job_timeout() {
    let mut a = sh(2, "exec sleep 30");
    a.timeout = Some(0.5);
    let t0 = Instant::now();
    let (code, _, _) = run_captured(a);
    assert_eq!(code, hx_launcher::TIMEOUT_EXIT);
    assert!(t0.elapsed() < Duration::from_secs(4));
}

#[test]
fn setup_errors() {
    assert_eq!(
        run_captured(RunArgs::new(2, ["no-such-program-hx-test"])).0,
        127
    );
    let mut a = sh(2, "true");
    a.policy = Some("fastest".into());
    assert_eq!(run_captured(a).0, 2);
    let mut a = sh(2, "true");
    a.net = true;
    a.name = "hxnosuchtestbed".into();
    assert_eq!(run_captured(a).0, 2);
}

/// Every rank (the probe of tests/bin/child.rs, chosen by HX_LAUNCHER_PROBE given with `--env`)
/// puts, fences and gets every rank's key through the bootstrap service.
#[test]
fn all_ranks_reach_the_bootstrap_service() {
    let mut a = RunArgs::new(4, [CHILD]);
    a.env = vec!["HX_LAUNCHER_PROBE=1".into()];
    let (code, out, err) = run_captured(a);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    for r in 0..4 {
        assert!(
            out.contains(&format!("[{r}] probe ok rank {r} of 4")),
            "{out}"
        );
    }
}

/// Starts a launcher in a child process (tests/bin/child.rs with HX_LAUNCHER_SIGNAL_DIR, so the
/// signal hits only it), waits for its 2 ranks and their children to be up, sends it `sig`, and
/// returns its exit status and the ranks' pids.
fn signal_launcher(sig: i32) -> (std::process::ExitStatus, Duration, Vec<i32>) {
    let dir = temp_dir("sig");
    let mut child = std::process::Command::new(CHILD)
        .env("HX_LAUNCHER_SIGNAL_DIR", &dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while read_pids(&dir).len() < 4 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "ranks did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pids = read_pids(&dir);
    // SAFETY: signals our own child.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
    let t1 = Instant::now();
    let status = child.wait().unwrap();
    let took = t1.elapsed();
    let _ = std::fs::remove_dir_all(dir);
    (status, took, pids)
}

/// SIGTERM to the launcher stops every rank and gives 143.
#[test]
fn sigterm_to_launcher_stops_ranks() {
    let (status, took, pids) = signal_launcher(libc::SIGTERM);
    assert!(took < Duration::from_secs(5));
    assert_eq!(status.code(), Some(143));
    for p in pids {
        assert!(gone(p), "pid {p} still running");
    }
}

/// SIGKILL to the launcher: the parent-death signal takes the ranks, the watchdog their children.
#[test]
fn sigkill_to_launcher_leaves_no_orphans() {
    use std::os::unix::process::ExitStatusExt;
    let (status, _, pids) = signal_launcher(libc::SIGKILL);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let t0 = Instant::now();
    while !pids.iter().all(|&p| gone(p)) {
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "still running: {:?}",
            pids.iter().filter(|&&p| !gone(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `--net` needs root and a testbed; skipped (visibly, tests/util/skip.rs) without root, and a
/// failure instead under CI=true.
#[test]
fn net_ranks_run_in_namespaces() {
    if !skip::need_netns() {
        return;
    }
    // A testbed of its own (it waited for one named hx that nothing made, and never ran).
    let name = format!("l{}", std::process::id() % 100_000);
    let _tb = hx_testbed::Testbed::up(&hx_testbed::TestbedSpec::new(&name, 2, 1)).unwrap();
    let mut a = sh(
        2,
        r#"echo "ns=$(ip netns identify $$) boot=$HX_BOOTSTRAP local=$HX_LOCAL_RANK""#,
    );
    a.net = true;
    a.name = name.clone();
    let (code, out, err) = run_captured(a);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("[0] ns={name}0 boot=10.200.")),
        "{out}"
    );
    assert!(
        out.contains(&format!("[1] ns={name}1 boot=10.200.")),
        "{out}"
    );
    assert!(out.contains("local=0"), "{out}");

    // Two ranks per host, and every rank reaches the service on the management network.
    let mut a = RunArgs::new(4, [CHILD]);
    a.env = vec!["HX_LAUNCHER_PROBE=1".into()];
    a.net = true;
    a.name = name.clone();
    a.ranks_per_host = Some(2);
    let (code, out, err) = run_captured(a);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    for r in 0..4 {
        assert!(
            out.contains(&format!("[{r}] probe ok rank {r} of 4")),
            "{out}"
        );
    }
}
