//! Ranks started by MPICH's Hydra (`mpiexec.hydra`, Debian's `mpich`) instead of `hxcomm run`:
//! they find rank, size, peers and the job secret through PMI-1 with no hxcomm setting. On this
//! host (shared memory; TCP over loopback rails; Hydra's `-pmi-port` mode), on the testbed (as
//! root: four namespaces, Hydra's ssh launcher through bench/netns-rsh), a rank that fails to
//! start, and a PMI server that closes early, sends garbage or goes silent.
//!
//! Without `mpiexec.hydra` (or root, for the testbed) the Hydra tests skip through
//! tests/util/skip.rs (printed, listed in HX_SKIP_LOG), or fail when `CI=true` (CI runs as root
//! and installs `mpich`).

mod util;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use util::skip::{need_root, need_tool};
use util::{build_pingpong, hxcomm, no_process_with};

const HYDRA: &str = "mpiexec.hydra";

/// Variables of an outer launcher that must not leak into the jobs these tests start.
const OUTER: [&str; 10] = [
    "HX_RANK",
    "HX_SIZE",
    "HX_BOOTSTRAP",
    "HX_JOB_SECRET",
    "HX_LOCAL_SIZE",
    "PMI_FD",
    "PMI_PORT",
    "PMI_ID",
    "PMI_RANK",
    "PMI_SIZE",
];

/// Whether the running test can use Hydra: skips visibly without it, or fails under CI.
fn need_hydra() -> bool {
    need_tool(HYDRA, &["--version"], "mpich")
}

/// Runs `mpiexec.hydra ARGS` (killed after 120 s) with `env` added.
fn mpiexec(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new("timeout");
    c.args(["-k", "5", "120", HYDRA]).args(args);
    for v in OUTER {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdin(Stdio::null()).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Checks the JSON summaries of an `n`-rank stress job of `messages` messages: every rank
/// reported once, all messages arrived (each checked byte by byte by the ranks themselves), and
/// every rank sent to each other rank over `rails` links. Returns the total payload bytes.
fn check_stress(out: &Output, n: usize, messages: u64, rails: usize) -> u64 {
    let lines = util::stress_summaries(out, n, messages);
    for v in &lines {
        let me = v["rank"].as_u64().unwrap() as usize;
        for (peer, per_rail) in v["rail_tx_bytes"].as_array().unwrap().iter().enumerate() {
            if peer != me {
                assert_eq!(
                    per_rail.as_array().unwrap().len(),
                    rails,
                    "rank {me} to {peer}: {}",
                    text(out)
                );
            }
        }
    }
    lines
        .iter()
        .map(|v| v["bytes_received"].as_u64().unwrap())
        .sum()
}

fn stress_args<'a>(seed: &'a str, messages: &'a str) -> Vec<&'a str> {
    let mut a = vec![hxcomm(), "bench", "stress", "--messages", messages];
    a.extend(["--max-size", "1M", "--seed", seed, "--json"]);
    a
}

/// 4 ranks of validated random traffic under Hydra on this host: over shared memory, over TCP
/// with two loopback rails per peer, and in Hydra's `-pmi-port` mode with the job secret given
/// through `mpiexec -genv`.
#[test]
fn stress_under_hydra_on_one_host() {
    if !need_hydra() {
        return;
    }
    let _lock =
        hx_demo::lock::BenchLock::acquire(Path::new(hx_demo::lock::BENCH_LOCK), &|| false).unwrap();
    let seed = format!("{}", 7_000_000 + std::process::id());
    let mut raw = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut raw).unwrap();
    let secret: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    // (what, mpiexec options, environment, links per peer)
    type Run<'a> = (&'a str, Vec<&'a str>, Vec<(&'a str, &'a str)>, usize);
    let runs: [Run; 3] = [
        ("shared memory", vec!["-n", "4"], vec![], 1),
        (
            "tcp",
            vec!["-n", "4"],
            vec![("HX_TRANSPORTS", "tcp"), ("HX_LOOPBACK_RAILS", "2")],
            2,
        ),
        (
            "tcp, -pmi-port, -genv HX_JOB_SECRET",
            vec!["-pmi-port", "-genv", "HX_JOB_SECRET", &secret, "-n", "4"],
            vec![("HX_TRANSPORTS", "tcp")],
            1,
        ),
    ];
    for (what, pre, env, rails) in runs {
        let t0 = Instant::now();
        let mut args = pre.clone();
        args.extend(stress_args(&seed, "1000"));
        let out = mpiexec(&args, &env);
        let bytes = check_stress(&out, 4, 1000, rails);
        println!(
            "{what}: 1000 messages, {bytes} bytes checked, {:.2} s",
            t0.elapsed().as_secs_f64()
        );
        assert!(
            no_process_with(&format!("--seed {seed} "), Duration::from_secs(5)),
            "{what}: ranks left behind"
        );
    }
}

/// One rank of four cannot start (HX_RAILS names no interface): it says why, and Hydra stops
/// the job at once (the rank leaves PMI without finalize), instead of the others waiting for
/// their bootstrap timeout.
#[test]
fn a_rank_that_cannot_start_stops_the_hydra_job() {
    if !need_hydra() {
        return;
    }
    let _lock =
        hx_demo::lock::BenchLock::acquire(Path::new(hx_demo::lock::BENCH_LOCK), &|| false).unwrap();
    let seed = format!("{}", 9_000_000 + std::process::id());
    let script = format!(
        "if [ \"$PMI_RANK\" = 2 ]; then export HX_RAILS=no-such-if; fi; exec {} bench stress --seconds 600 --seed {seed}",
        hxcomm()
    );
    let t0 = Instant::now();
    let out = mpiexec(
        &["-n", "4", "sh", "-c", &script],
        &[("HX_BOOTSTRAP_TIMEOUT", "60")],
    );
    let took = t0.elapsed();
    assert!(!out.status.success(), "{}", text(&out));
    let all = text(&out);
    assert!(all.contains("HX_RAILS names no-such-if"), "{all}");
    assert!(
        took < Duration::from_secs(20),
        "took {took:?} (the others waited for their timeout?): {all}"
    );
    assert!(
        no_process_with(&format!("--seed {seed} "), Duration::from_secs(5)),
        "ranks left behind"
    );
}

/// A PMI server on the other end of a socket pair whose far end a rank inherits as PMI_FD;
/// `reply` answers each line (`None`: close).
fn run_rank_against(
    reply: impl Fn(&str) -> Option<String> + Send + 'static,
    env: &[(&str, &str)],
) -> (Output, Duration) {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two descriptors into `fds`; both close-on-exec, so children
    // that other tests start meanwhile inherit neither.
    assert_eq!(
        unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        },
        0
    );
    // SAFETY: fresh descriptors owned by nobody else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let stream = UnixStream::from(ours);
    std::thread::spawn(move || {
        let mut w = stream.try_clone().unwrap();
        let mut r = BufReader::new(stream);
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            match reply(line.trim_end()) {
                Some(out) => {
                    if w.write_all(out.as_bytes()).is_err() {
                        return;
                    }
                }
                None => return,
            }
        }
    });
    let mut c = Command::new(hxcomm());
    c.args(["bench", "stress", "--messages", "10"]);
    for v in OUTER {
        c.env_remove(v);
    }
    c.env("PMI_FD", fds[1].to_string())
        .env("PMI_RANK", "0")
        .env("PMI_SIZE", "2");
    let child_fd = fds[1];
    // SAFETY: runs in the child between fork and exec; fcntl is async-signal-safe. Only the
    // child's copy of its end loses close-on-exec.
    unsafe {
        c.pre_exec(move || {
            if libc::fcntl(child_fd, libc::F_SETFD, 0) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let t0 = Instant::now();
    let child = c.stdin(Stdio::null()).output().unwrap();
    drop(theirs);
    (child, t0.elapsed())
}

/// Replies of a well-behaved server for the handshake, and `then` for everything after it.
fn handshake_then(then: &'static str) -> impl Fn(&str) -> Option<String> + Send + 'static {
    move |l: &str| {
        if l.starts_with("cmd=init ") {
            Some("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n".into())
        } else if l == "cmd=get_maxes" {
            Some("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n".into())
        } else if l == "cmd=get_my_kvsname" {
            Some("cmd=my_kvsname kvsname=kvs_test\n".into())
        } else if then.is_empty() {
            None
        } else {
            Some(then.into())
        }
    }
}

/// A rank whose PMI server closes early, sends garbage, refuses, or goes silent ends fast with a
/// message naming PMI and its rank.
#[test]
fn a_bad_pmi_server_ends_the_rank_fast() {
    type Case = (
        &'static str,
        Box<dyn Fn(&str) -> Option<String> + Send>,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "closes at once",
            Box::new(|_: &str| None),
            "closed the connection",
        ),
        (
            "garbage",
            Box::new(|_: &str| Some("\u{1}\u{2}garbage\n".into())),
            "malformed reply",
        ),
        (
            "wrong command",
            Box::new(|_: &str| Some("cmd=barrier_out\n".into())),
            "expected cmd=response_to_init",
        ),
        (
            "endless line",
            Box::new(|_: &str| Some("x".repeat(100_000))),
            "no end of line within 4096",
        ),
        (
            "refuses the version",
            Box::new(|_: &str| Some("cmd=response_to_init rc=-1\n".into())),
            "refused PMI version",
        ),
        (
            "closes after the handshake",
            Box::new(handshake_then("")),
            "closed the connection",
        ),
        (
            "garbage after the handshake",
            Box::new(handshake_then("cmd=put_result rc=notanumber\n")),
            "malformed reply",
        ),
        (
            "refuses the put",
            Box::new(handshake_then("cmd=put_result rc=1 msg=full\n")),
            "refused",
        ),
    ];
    for (what, reply, expect) in cases {
        let (out, took) = run_rank_against(reply, &[]);
        let all = text(&out);
        assert!(!out.status.success(), "{what}: {all}");
        assert!(
            all.contains("PMI server (PMI_FD=") && all.contains("rank 0") && all.contains(expect),
            "{what}: {all}"
        );
        assert!(took < Duration::from_secs(5), "{what}: took {took:?}");
        println!(
            "{what}: {took:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    // Silent after the handshake: bounded by HX_BOOTSTRAP_TIMEOUT.
    let (out, took) = run_rank_against(
        |l: &str| {
            if l.starts_with("cmd=put") {
                std::thread::sleep(Duration::from_secs(10));
                return None;
            }
            handshake_then("")(l)
        },
        &[("HX_BOOTSTRAP_TIMEOUT", "1")],
    );
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("rank 0") && all.contains("no reply within 1.0 s"),
        "{all}"
    );
    assert!(took < Duration::from_secs(5), "silent: took {took:?}");
}

/// As root: four testbed hosts, one rank each, started by Hydra through its ssh launcher and the
/// namespace agent, Hydra's proxies talking to mpiexec over the management network: the ranks
/// leave that network out (two rails per peer, not three) and run validated random traffic;
/// then the C example (examples/pingpong.c, every byte checked) between two of the hosts.
#[test]
fn stress_under_hydra_on_the_testbed() {
    if !need_root() || !need_hydra() {
        return;
    }
    let _lock =
        hx_demo::lock::BenchLock::acquire(Path::new(hx_demo::lock::BENCH_LOCK), &|| false).unwrap();
    let tb_name = format!("p{}", std::process::id() % 10000);
    let tb = hx_testbed::Testbed::up(&hx_testbed::TestbedSpec::new(&tb_name, 4, 2)).unwrap();
    let before = tb.counters().unwrap();
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/netns-rsh");
    let agent = agent.to_str().unwrap();
    let mgmt = tb.mgmt_addr().to_string();
    let hosts = tb.host_names().join(",");
    let seed = format!("{}", 8_000_000 + std::process::id());
    let mut args = vec!["-launcher", "ssh", "-launcher-exec", agent];
    args.extend(["-localhost", &mgmt, "-hosts", &hosts, "-n", "4"]);
    args.extend(stress_args(&seed, "2000"));
    let t0 = Instant::now();
    let out = mpiexec(&args, &[]);
    let bytes = check_stress(&out, 4, 2000, 2);
    let after = tb.counters().unwrap();
    let rail_tx: Vec<u64> = (0..2)
        .map(|r| {
            before
                .iter()
                .zip(&after)
                .map(|(b, a)| a[r].tx_bytes - b[r].tx_bytes)
                .sum()
        })
        .collect();
    println!(
        "testbed: 2000 messages, {bytes} bytes checked, rail tx bytes {rail_tx:?}, {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        rail_tx.iter().all(|&b| b > bytes / 4),
        "both rails carry traffic: {rail_tx:?}"
    );
    assert!(
        no_process_with(&format!("--seed {seed} "), Duration::from_secs(5)),
        "ranks left behind"
    );

    // The C example (examples/pingpong.c) between the first and the last host, under Hydra.
    let have_cc = util::skip::have("cc", &["--version"]);
    if util::skip::need(
        have_cc,
        "C example: no C compiler (`cc`, apt-get install -y gcc)",
    ) {
        let dir = std::env::temp_dir().join(format!("hx-pmi-c-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = build_pingpong(&dir);
        let names = tb.host_names();
        let pair = format!("{},{}", names[0], names[names.len() - 1]);
        let mut args = vec!["-launcher", "ssh", "-launcher-exec", agent];
        args.extend(["-localhost", &mgmt, "-hosts", &pair, "-n", "2"]);
        args.extend(["-prepend-rank", exe.to_str().unwrap(), "5"]);
        let out = mpiexec(&args, &[]);
        let all = text(&out);
        assert!(out.status.success(), "{all}");
        for want in [
            "[0] rank 0: pingpong OK",
            "[1] rank 1: pingpong OK",
            "size  4194304:",
        ] {
            assert!(all.contains(want), "missing {want:?}: {all}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
    tb.down().unwrap();
}
