//! `hxcomm run --hosts / --hostfile`: ranks on other hosts through an rsh command and the
//! per-host agent (`hxcomm run-agent`).
//!
//! Without root, "hosts" are loopback addresses (127.0.0.1, 127.0.0.2, ...) and the rsh command
//! is a script that runs the agent here (its stdin and stdout are the same pipes ssh would give
//! it): environment, output, the secret kept off command lines, bad input, first failure,
//! SIGTERM and `kill -9` of the launcher. As root, on a testbed of its own: validated random
//! traffic and the C example over the namespace agent bench/netns-rsh, and the same over real
//! ssh (an sshd in each namespace, keys made for the test) with a `kill -9` of the launcher that
//! must leave no process in any namespace. Without root (or sshd, or cc) the root tests skip
//! through tests/util/skip.rs (printed, listed in HX_SKIP_LOG), and fail instead when `CI=true`.

mod util;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use util::skip::{need, need_root};
use util::{build_pingpong, hxcomm, no_process_with};

/// Variables of an outer launcher that must not leak into the jobs these tests start.
const OUTER: [&str; 10] = [
    "HX_RANK",
    "HX_SIZE",
    "HX_BOOTSTRAP",
    "HX_JOB_SECRET",
    "HX_LOCAL_RANK",
    "HX_LOCAL_SIZE",
    "PMI_FD",
    "PMI_PORT",
    "PMI_RANK",
    "PMI_SIZE",
];

fn tmp_dir(tag: &str) -> PathBuf {
    let d =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("hosts-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// An rsh for loopback "hosts": records its arguments in DIR/argv.HOST and runs the command
/// here, as sshd would (through a shell).
fn fake_rsh(dir: &Path) -> PathBuf {
    script(
        dir,
        "fake-rsh",
        &format!(
            "host=$1; shift\nprintf '%s\\n' \"$host\" \"$@\" > {}/argv.$host\nexec sh -c \"$*\"\n",
            dir.display()
        ),
    )
}

fn run_cmd(args: &[&str]) -> Command {
    let mut c = Command::new("timeout");
    c.args(["-k", "5", "120", hxcomm(), "run"]).args(args);
    for v in OUTER {
        c.env_remove(v);
    }
    c.stdin(Stdio::null());
    c
}

fn run(args: &[&str]) -> (Output, String) {
    let out = run_cmd(args).output().unwrap();
    let text = text(&out);
    (out, text)
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Checks the JSON summaries of an `n`-rank stress job of `messages` messages (every rank
/// reported, all messages arrived, each checked by the ranks themselves); with `host_of`, every
/// pair of ranks on different hosts used `rails` links, each of which carried bytes.
fn check_stress(out: &Output, n: usize, messages: u64, host_of: Option<(&[usize], usize)>) {
    let lines = util::stress_summaries(out, n, messages);
    let Some((host_of, rails)) = host_of else {
        return;
    };
    for v in &lines {
        let me = v["rank"].as_u64().unwrap() as usize;
        for (peer, per_rail) in v["rail_tx_bytes"].as_array().unwrap().iter().enumerate() {
            if host_of[peer] != host_of[me] {
                let per_rail = per_rail.as_array().unwrap();
                assert_eq!(per_rail.len(), rails, "rank {me} to {peer}: {}", text(out));
                assert!(
                    per_rail.iter().all(|b| b.as_u64().unwrap() > 0),
                    "rank {me} to {peer}: a rail carried nothing: {}",
                    text(out)
                );
            }
        }
    }
}

/// Ranks on three loopback "hosts" see their rank, size, local rank and size, the bootstrap
/// service, the secret, `--env` and the launcher's HX_* settings; output comes back tagged; the
/// secret is on no command line; validated random traffic completes.
#[test]
fn hosts_job_through_an_rsh_command() {
    let dir = tmp_dir("env");
    let rsh = fake_rsh(&dir);
    let script = r#"echo "rank=$HX_RANK size=$HX_SIZE local=$HX_LOCAL_RANK/$HX_LOCAL_SIZE boot=$HX_BOOTSTRAP foo=$FOO fwd=$HX_TEST_FORWARDED"; echo "secret=$HX_JOB_SECRET" >&2"#;
    let out = run_cmd(&[
        "--hosts",
        "127.0.0.1:2,127.0.0.2,127.0.0.3:3",
        "--rsh",
        rsh.to_str().unwrap(),
        "-n",
        "5",
        "--tag-output",
        "--env",
        "FOO=a b",
        "--",
        "sh",
        "-c",
        script,
    ])
    .env("HX_TEST_FORWARDED", "yes")
    .output()
    .unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let want = [(0, "0/2"), (1, "1/2"), (2, "0/1"), (3, "0/2"), (4, "1/2")];
    for (r, local) in want {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("[{r}] ")))
            .unwrap_or_else(|| panic!("no line of rank {r}: {t}"));
        assert!(
            line.contains(&format!("rank={r} size=5 local={local} boot=127.0.0.1:")),
            "{line}"
        );
        assert!(line.ends_with("foo=a b fwd=yes"), "{line}");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let secrets: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.split_once("] secret=").map(|x| x.1))
        .collect();
    assert_eq!(secrets.len(), 5, "{t}");
    assert!(
        secrets.iter().all(|s| s.len() == 64 && *s == secrets[0]),
        "{t}"
    );
    // The rsh's command line: host and `exec .../hxcomm run-agent`, nothing of the job.
    for h in ["127.0.0.1", "127.0.0.2", "127.0.0.3"] {
        let argv = std::fs::read_to_string(dir.join(format!("argv.{h}"))).unwrap();
        assert!(argv.ends_with("run-agent\n"), "{argv}");
        assert!(
            !argv.contains(secrets[0]),
            "secret on the rsh command line: {argv}"
        );
        assert!(!argv.contains("HX_"), "{argv}");
    }

    let (out, t) = run(&[
        "--hosts",
        "127.0.0.1:2,127.0.0.2,127.0.0.3",
        "--rsh",
        rsh.to_str().unwrap(),
        "-n",
        "4",
        "--timeout",
        "60",
        "--",
        hxcomm(),
        "bench",
        "stress",
        "--messages",
        "1000",
        "--max-size",
        "256k",
        "--json",
    ]);
    check_stress(&out, 4, 1000, None);
    drop(t);
    let _ = std::fs::remove_dir_all(dir);
}

/// Bad input ends the job fast with a message naming the host and where it was given, and
/// leaves no process behind.
#[test]
fn hosts_bad_input() {
    let dir = tmp_dir("bad");
    let rsh = fake_rsh(&dir);
    let rsh = rsh.to_str().unwrap();
    let hf = dir.join("hosts");
    let hf_s = hf.to_str().unwrap().to_owned();
    let check = |args: &[&str], code: i32, want: &[&str]| {
        let t0 = Instant::now();
        let (out, t) = run(args);
        let took = t0.elapsed();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {t}");
        for w in want {
            assert!(t.contains(w), "{args:?}: missing {w:?} in {t}");
        }
        assert!(took < Duration::from_secs(5), "{args:?} took {took:?}");
    };
    let file = |content: &str| std::fs::write(&hf, content).unwrap();

    file("127.0.0.1 slots=2\n# comment\nno-such-host-hx.invalid:2\n");
    check(
        &["--hostfile", &hf_s, "--rsh", rsh, "-n", "2", "--", "true"],
        2,
        &[&format!(
            "{hf_s} line 3: unknown host no-such-host-hx.invalid: cannot resolve it"
        )],
    );
    file("127.0.0.1 slots=two\n");
    check(
        &["--hostfile", &hf_s, "-n", "1", "--", "true"],
        2,
        &[&format!(
            "{hf_s} line 1: bad slot count \"two\" for 127.0.0.1"
        )],
    );
    check(
        &["--hosts", "127.0.0.1:0", "-n", "1", "--", "true"],
        2,
        &["--hosts entry 1 (\"127.0.0.1:0\"): bad slot count \"0\""],
    );
    file("127.0.0.1\n127.0.0.2:2\n\n127.0.0.1 slots=3\n");
    check(
        &["--hostfile", &hf_s, "-n", "1", "--", "true"],
        2,
        &[&format!(
            "{hf_s} line 4: duplicate host 127.0.0.1 (already given at {hf_s} line 1)"
        )],
    );
    check(
        &["--hosts", "127.0.0.1:2,127.0.0.2", "-n", "4", "--", "true"],
        2,
        &["-n 4 is more than the 3 slots", "--oversubscribe"],
    );
    check(
        &[
            "--hosts",
            "127.0.0.1",
            "--hostfile",
            &hf_s,
            "-n",
            "1",
            "--",
            "true",
        ],
        2,
        &["cannot be used with"],
    );

    // A host whose rsh fails (as ssh does: a message, status 255).
    let marker = format!("hxmark{}", std::process::id());
    let bin_a = dir.join("bin-a");
    std::fs::create_dir_all(&bin_a).unwrap();
    script(&bin_a, &marker, "sleep 30\n");
    let failing = script(
        &dir,
        "failing-rsh",
        &format!(
            "if [ \"$1\" = 127.0.0.2 ]; then echo \"ssh: connect to host $1 port 22: Connection refused\" >&2; exit 255; fi\nhost=$1; shift\nPATH={}:$PATH exec sh -c \"$*\"\n",
            bin_a.display()
        ),
    );
    let failing = failing.to_str().unwrap();
    check(
        &[
            "--hosts",
            "127.0.0.1,127.0.0.2",
            "--rsh",
            failing,
            "-n",
            "2",
            "--",
            &marker,
        ],
        255,
        &[
            "host 127.0.0.2: ssh: connect to host 127.0.0.2 port 22: Connection refused",
            "host 127.0.0.2 (--hosts entry 2",
            "exited with status 255 before the agent started",
        ],
    );
    assert!(no_process_with(&marker, Duration::from_secs(3)));

    // A rank that cannot start on one host: the program is on 127.0.0.1's PATH only.
    let split = script(
        &dir,
        "split-rsh",
        &format!(
            "host=$1; shift\nif [ \"$host\" = 127.0.0.1 ]; then PATH={}:$PATH; export PATH; fi\nexec sh -c \"$*\"\n",
            bin_a.display()
        ),
    );
    check(
        &[
            "--hosts",
            "127.0.0.1,127.0.0.2",
            "--rsh",
            split.to_str().unwrap(),
            "-n",
            "2",
            "--",
            &marker,
        ],
        127,
        &[&format!(
            "cannot start rank 1 on host 127.0.0.2: program \"{marker}\" not found on PATH"
        )],
    );
    assert!(no_process_with(&marker, Duration::from_secs(3)));
    let absent = format!("{}/{marker}", dir.join("bin-b").display());
    check(
        &[
            "--hosts",
            "127.0.0.1",
            "--rsh",
            rsh,
            "-n",
            "1",
            "--",
            &absent,
        ],
        127,
        &["cannot start rank 0 on host 127.0.0.1", "does not exist"],
    );

    // No hxcomm where --remote-hxcomm says.
    check(
        &[
            "--hosts",
            "127.0.0.1",
            "--rsh",
            rsh,
            "--remote-hxcomm",
            "/nonexistent/hxcomm",
            "-n",
            "1",
            "--",
            "true",
        ],
        127,
        &["no executable /nonexistent/hxcomm on that host"],
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Starts `hxcomm run ARGS` with `n` marked ranks (each runs a marked child too) and waits until
/// all are up.
fn start_marked(args: &[&str], marker_prog: &Path, n: usize) -> Child {
    let body = format!("{} 300 & wait", marker_prog.display());
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["--", "sh", "-c", &body]);
    let child = run_cmd(&a)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while procs_with_arg(marker_prog.to_str().unwrap()).len() < n {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "ranks did not start"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

/// Live processes one of whose arguments is exactly `arg`: (pid, parent pid, command line).
fn procs_with_arg(arg: &str) -> Vec<(i32, i32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if !raw.split(|&b| b == 0).any(|a| a == arg.as_bytes()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let rest: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if rest.first() == Some(&"Z") {
            continue;
        }
        let ppid = rest.get(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        out.push((pid, ppid, String::from_utf8_lossy(&raw).replace('\0', " ")));
    }
    out
}

/// The first failing rank stops the ranks of every host; SIGTERM and `kill -9` to the launcher
/// leave nothing running.
#[test]
fn hosts_failure_and_signals_stop_every_host() {
    let dir = tmp_dir("sig");
    let rsh = fake_rsh(&dir);
    let rsh = rsh.to_str().unwrap();
    let marker = format!("hxsig{}", std::process::id());
    // Not `exec`: the script's shell keeps the marker in its command line.
    let prog = script(&dir, &marker, "sleep \"$@\"\n");
    let hosts = [
        "--hosts",
        "127.0.0.1:2,127.0.0.2:2",
        "--rsh",
        rsh,
        "-n",
        "4",
    ];

    let body = format!(
        "if [ $HX_RANK = 3 ]; then sleep 0.5; exit 5; fi; {} 300 & wait",
        prog.display()
    );
    let mut a = hosts.to_vec();
    a.extend(["--", "sh", "-c", &body]);
    let t0 = Instant::now();
    let (out, t) = run(&a);
    assert_eq!(out.status.code(), Some(5), "{t}");
    assert!(
        t.contains("rank 3 (host 127.0.0.2) exited with status 5"),
        "{t}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{t}");
    assert!(no_process_with(&marker, Duration::from_secs(3)));

    let mut child = start_marked(&hosts, &prog, 4);
    // SAFETY: signals our own child (timeout(1), which passes SIGTERM on to hxcomm run).
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    assert!(no_process_with(&marker, Duration::from_secs(5)));

    // kill -9 of the launcher itself (not of timeout(1)), as soon as the ranks' children run:
    // every rank must be known to its agent's watchdog by then (it registers itself before its
    // program runs).
    let child = start_marked(&hosts, &prog, 4);
    let launcher = launcher_pid(child.id() as i32);
    // SAFETY: a process we started.
    unsafe { libc::kill(launcher, libc::SIGKILL) };
    let t1 = Instant::now();
    let left = left_after(&marker, Duration::from_secs(5));
    if left.is_none() {
        println!(
            "after kill -9 of the launcher: every marked process gone in {:?}",
            t1.elapsed()
        );
    }
    let _ = wait_child(child);
    assert!(left.is_none(), "{}", left.unwrap_or_default());
    let _ = std::fs::remove_dir_all(dir);
}

/// None once no process has `marker` in its command line, within `limit`; else what was left
/// then (pid, parent, group, state, command line), and whether and when each went later (up to
/// 10 s more): a slow end and a process nothing kills are different bugs.
fn left_after(marker: &str, limit: Duration) -> Option<String> {
    let t0 = Instant::now();
    let marked = || {
        let mut v = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            if pid != std::process::id() as i32 && cmd.contains(marker) {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let f: Vec<&str> = stat
                    .rsplit_once(')')
                    .map_or("", |x| x.1)
                    .split_whitespace()
                    .collect();
                let (state, ppid, pgid) = (f.first(), f.get(1), f.get(2));
                v.push((
                    pid,
                    format!("pid {pid} ppid {ppid:?} pgid {pgid:?} state {state:?}: {cmd}"),
                ));
            }
        }
        v
    };
    loop {
        let left = marked();
        if left.is_empty() {
            return None;
        }
        if t0.elapsed() > limit {
            let mut report = format!("left {:?} after kill -9 of the launcher:\n", t0.elapsed());
            for (_, l) in &left {
                report += &format!("  {l}\n");
            }
            while t0.elapsed() < limit + Duration::from_secs(10) {
                let now: Vec<i32> = marked().iter().map(|x| x.0).collect();
                if left.iter().all(|x| !now.contains(&x.0)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let still: Vec<i32> = marked().iter().map(|x| x.0).collect();
            report += &format!(
                "{:?} later, still there: {:?}",
                t0.elapsed(),
                left.iter()
                    .filter(|x| still.contains(&x.0))
                    .map(|x| x.0)
                    .collect::<Vec<_>>()
            );
            return Some(report);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn wait_child(mut c: Child) -> std::process::ExitStatus {
    c.wait().unwrap()
}

/// The `hxcomm run` process under `timeout` (pid `parent`).
fn launcher_pid(parent: i32) -> i32 {
    let children =
        std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).unwrap();
    children
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|b| String::from_utf8_lossy(&b).contains("\0run\0"))
        })
        .expect("hxcomm run under timeout")
}

/// A testbed of this test's own, down when dropped.
fn testbed(tag: &str, hosts: u32) -> hx_testbed::Testbed {
    let name = format!("{tag}{}", std::process::id() % 10000);
    hx_testbed::Testbed::up(&hx_testbed::TestbedSpec::new(&name, hosts, 2)).unwrap()
}

fn hostfile(dir: &Path, lines: &str) -> String {
    let p = dir.join("hostfile");
    std::fs::write(&p, lines).unwrap();
    p.to_str().unwrap().to_owned()
}

/// As root, on a 3-host, 2-rail testbed through bench/netns-rsh: 6 ranks of validated random
/// traffic (2 per host, both rails between hosts carrying traffic), and the C example between
/// two hosts.
#[test]
fn hosts_on_the_testbed_through_netns_rsh() {
    if !need_root() {
        return;
    }
    let _lock =
        hx_demo::lock::BenchLock::acquire(Path::new(hx_demo::lock::BENCH_LOCK), &|| false).unwrap();
    let dir = tmp_dir("tb");
    let tb = testbed("hr", 3);
    let h = tb.host_names();
    let hf = hostfile(
        &dir,
        &format!(
            "# testbed\n{} slots=2\n{}:2\n{} slots=2\n",
            h[0], h[1], h[2]
        ),
    );
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/netns-rsh");
    let agent = agent.to_str().unwrap();
    let t0 = Instant::now();
    let (out, t) = run(&[
        "--hostfile",
        &hf,
        "--rsh",
        agent,
        "-n",
        "6",
        "--timeout",
        "90",
        "--",
        hxcomm(),
        "bench",
        "stress",
        "--messages",
        "3000",
        "--max-size",
        "1M",
        "--seed",
        "12",
        "--json",
    ]);
    check_stress(&out, 6, 3000, Some((&[0, 0, 1, 1, 2, 2], 2)));
    println!("stress, 6 ranks on 3 testbed hosts: {:?}", t0.elapsed());
    drop(t);

    pingpong_between(&dir, &h[0], &h[2], agent);
    drop(tb);
    let _ = std::fs::remove_dir_all(dir);
}

/// The C example (examples/pingpong.c) as two ranks on hosts `a` and `b` through `rsh`, checked;
/// without `cc` a failure under CI=true, else a visible skip (of this part).
fn pingpong_between(dir: &Path, a: &str, b: &str, rsh: &str) {
    let have_cc = util::skip::have("cc", &["--version"]);
    if !need(
        have_cc,
        "C example: no C compiler (`cc`, apt-get install -y gcc)",
    ) {
        return;
    }
    let exe = build_pingpong(dir);
    let hf = hostfile(dir, &format!("{a}\n{b}\n"));
    let (out, t) = run(&[
        "--hostfile",
        &hf,
        "--rsh",
        rsh,
        "-n",
        "2",
        "--tag-output",
        "--timeout",
        "90",
        "--",
        exe.to_str().unwrap(),
        "5",
    ]);
    assert!(out.status.success(), "{t}");
    for want in [
        "[0] rank 0: pingpong OK",
        "[1] rank 1: pingpong OK",
        "size  4194304:",
    ] {
        assert!(t.contains(want), "missing {want:?}: {t}");
    }
}

/// A launcher that a failing assertion must not leave running: killed (by pid) when dropped.
struct Killed(Option<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// sshd processes started by a test, stopped (by pid) when dropped.
struct Sshds(Vec<Child>);

impl Drop for Sshds {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn sshd_path() -> Option<PathBuf> {
    ["/usr/sbin/sshd", "/usr/bin/sshd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// As root, with Debian's openssh-server: an sshd in each of 3 testbed hosts (keys made for the
/// test), a job over real ssh, then `kill -9` of the launcher during a job: no rank, rank child,
/// agent or ssh process may be left in any namespace.
#[test]
fn hosts_over_real_ssh_and_kill_9_of_the_launcher() {
    if !need_root() {
        return;
    }
    let have_ssh = util::skip::have("ssh", &["-V"]);
    let sshd = sshd_path().filter(|_| have_ssh);
    if !need(
        sshd.is_some(),
        "no sshd or ssh (apt-get install -y openssh-server openssh-client)",
    ) {
        return;
    }
    let sshd = sshd.unwrap();
    let _lock =
        hx_demo::lock::BenchLock::acquire(Path::new(hx_demo::lock::BENCH_LOCK), &|| false).unwrap();
    let dir = tmp_dir("ssh");
    // Keys and configuration of this test only.
    for key in ["host_key", "user_key"] {
        let st = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(dir.join(key))
            .status()
            .unwrap();
        assert!(st.success(), "ssh-keygen");
    }
    std::fs::copy(dir.join("user_key.pub"), dir.join("authorized_keys")).unwrap();
    // sshd's privilege separation directory.
    std::fs::create_dir_all("/run/sshd").unwrap();
    let tb = testbed("hs", 3);
    let mut sshds = Sshds(Vec::new());
    for k in 0..3u32 {
        let conf = dir.join(format!("sshd_{k}.conf"));
        std::fs::write(
            &conf,
            format!(
                "ListenAddress {}\nPort 22\nHostKey {d}/host_key\nAuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nStrictModes no\nUsePAM no\nPidFile {d}/sshd_{k}.pid\n",
                tb.host_mgmt_addr(k),
                d = dir.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join(format!("sshd_{k}.log"))).unwrap();
        let c = tb
            .command(k, sshd.to_str().unwrap())
            .args(["-D", "-e", "-f"])
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        sshds.0.push(c);
    }
    // Wait for every sshd to listen.
    for k in 0..3u32 {
        let addr = std::net::SocketAddr::new(tb.host_mgmt_addr(k).into(), 22);
        let t0 = Instant::now();
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "sshd on {addr} did not start: {}",
                std::fs::read_to_string(dir.join(format!("sshd_{k}.log"))).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let h = tb.host_names();
    let hf = hostfile(&dir, &format!("{}:2\n{} slots=1\n{}\n", h[0], h[1], h[2]));
    let rsh = format!(
        "ssh -i {} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR",
        dir.join("user_key").display()
    );

    // A job over ssh: validated random traffic on all three hosts.
    let (out, t) = run(&[
        "--hostfile",
        &hf,
        "--rsh",
        &rsh,
        "-n",
        "4",
        "--timeout",
        "90",
        "--",
        hxcomm(),
        "bench",
        "stress",
        "--messages",
        "2000",
        "--max-size",
        "256k",
        "--json",
    ]);
    check_stress(&out, 4, 2000, Some((&[0, 0, 1, 2], 2)));
    drop(t);

    // kill -9 of the launcher: the marker is in the path of the agent, of the ranks and of their
    // children (symlinks to hxcomm and sleep), and so on the ssh command lines too.
    let marker = format!("hxk9m{}", std::process::id());
    let mdir = dir.join(&marker);
    std::fs::create_dir_all(&mdir).unwrap();
    std::os::unix::fs::symlink(hxcomm(), mdir.join("hxcomm")).unwrap();
    std::os::unix::fs::symlink("/bin/sleep", mdir.join("sleep")).unwrap();
    let body = format!(
        "{m}/sleep 300 & exec {m}/hxcomm bench stress --seconds 100 --max-size 64k",
        m = mdir.display()
    );
    let remote = mdir.join("hxcomm");
    let mut child = Killed(Some(
        Command::new(hxcomm())
            .args(["run", "--hostfile", &hf, "--rsh", &rsh, "--remote-hxcomm"])
            .arg(&remote)
            .args(["-n", "4", "--", "sh", "-c", &body])
            .env_remove("HX_RANK")
            .env_remove("HX_BOOTSTRAP")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    // 4 ranks, each with a marked child, and 3 agents.
    let exe = remote.to_str().unwrap().to_owned();
    let sleep = mdir.join("sleep").to_str().unwrap().to_owned();
    let t0 = Instant::now();
    loop {
        let procs = procs_with_arg(&exe);
        // (The launcher's command line names the program too: a rank starts with it.)
        let ranks: Vec<_> = procs
            .iter()
            .filter(|p| p.2.starts_with(&format!("{exe} bench stress")))
            .collect();
        // (Each agent has a forked watchdog child with the same command line.)
        let agent_like: Vec<_> = procs
            .iter()
            .filter(|p| p.2.ends_with("run-agent "))
            .collect();
        let agents: Vec<_> = agent_like
            .iter()
            .filter(|p| !agent_like.iter().any(|q| q.0 == p.1))
            .collect();
        // The ranks are not the launcher's descendants: their parents are the agents, whose
        // parents are sshd's session processes.
        let of_agents = ranks.iter().all(|r| agents.iter().any(|a| a.0 == r.1));
        if ranks.len() == 4 && of_agents && agents.len() == 3 && procs_with_arg(&sleep).len() == 4 {
            for a in &agents {
                let pcmd = std::fs::read(format!("/proc/{}/cmdline", a.1)).unwrap_or_default();
                assert!(
                    String::from_utf8_lossy(&pcmd).starts_with("sshd"),
                    "parent of agent {a:?}: {}",
                    String::from_utf8_lossy(&pcmd)
                );
            }
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "ranks did not start: {procs:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let child = child.0.take().unwrap();
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let t1 = Instant::now();
    let gone = no_process_with(&marker, Duration::from_secs(5));
    println!(
        "after kill -9 of the launcher: everything gone in {:?}",
        t1.elapsed()
    );
    let _ = wait_child(child);
    assert!(gone, "processes left after kill -9 of the launcher");

    // The C example over ssh too, between two hosts.
    pingpong_between(&dir, &h[0], &h[2], &rsh);
    drop(sshds);
    drop(tb);
    let _ = std::fs::remove_dir_all(dir);
}
