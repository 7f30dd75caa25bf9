//! Rail and rank failures on the emulated cluster (needs root and network namespaces; skips
//! otherwise, through tests/util/skip.rs, and fails instead when `CI=true`). Rails are cut during validated transfers under every policy; the jobs must finish
//! byte-exact, and a restored rail must come back.

mod util;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use hx_testbed::{Testbed, TestbedSpec};
use util::{hxcomm, no_process_with, rank_pids};

fn testbed(tag: &str, rails: u32) -> Option<Testbed> {
    if !util::skip::need_netns() {
        return None;
    }
    let name = format!("f{tag}{}", std::process::id() % 1000);
    Some(Testbed::up(&TestbedSpec::new(&name, 2, rails)).expect("testbed up"))
}

/// Runs `hxcomm run -n 2 --net` with `args` as rank program, applying `during` while it runs.
fn run_with(tb: &Testbed, policy: &str, args: &[&str], during: impl FnOnce()) -> Output {
    let child = Command::new(hxcomm())
        .args([
            "run",
            "-n",
            "2",
            "--net",
            "--name",
            tb.name(),
            "--policy",
            policy,
        ])
        .args(["--env", "HX_LOG=info", "--timeout", "120", "--"])
        .arg(hxcomm())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    during();
    child.wait_with_output().unwrap()
}

#[test]
fn rail_cut_and_restored_under_every_policy() {
    let Some(tb) = testbed("c", 4) else {
        return;
    };
    for policy in ["bind", "rr", "stripe", "adaptive"] {
        // bind keeps this pair on rail (0 + 1) % 4 = 1: cut that one so bind must fail over too.
        let out = run_with(
            &tb,
            policy,
            &[
                "bench",
                "bw",
                "--validate",
                "--sizes",
                "1M:1M",
                "--iterations",
                "40",
            ],
            || {
                std::thread::sleep(Duration::from_millis(1500));
                tb.link(0, 1, false).unwrap();
                std::thread::sleep(Duration::from_millis(2500));
                tb.link(0, 1, true).unwrap();
            },
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{policy}: {stdout}\n{stderr}");
        assert!(stdout.contains("1048576"), "{policy}: {stdout}");
        assert!(
            stderr.contains("rail r1 to rank"),
            "{policy}: cut not noticed: {stderr}"
        );
        tb.link(0, 1, true).unwrap();
    }
}

#[test]
fn three_of_four_rails_cut_still_completes() {
    let Some(tb) = testbed("t", 4) else {
        return;
    };
    let out = run_with(
        &tb,
        "adaptive",
        &[
            "bench",
            "stress",
            "--messages",
            "2000",
            "--max-size",
            "256k",
            "--seed",
            "5",
        ],
        || {
            std::thread::sleep(Duration::from_millis(1000));
            for rail in 0..3 {
                tb.link(1, rail, false).unwrap();
            }
        },
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.matches("received and verified").count(),
        2,
        "{stdout}"
    );
}

#[test]
fn killed_rank_on_the_testbed_ends_the_job() {
    let Some(tb) = testbed("k", 2) else {
        return;
    };
    let marker = "616161";
    let t = Instant::now();
    let out = run_with(
        &tb,
        "adaptive",
        &[
            "bench",
            "stress",
            "--messages",
            "100000000",
            "--max-size",
            "64k",
            "--seed",
            marker,
        ],
        || {
            let pids = rank_pids(marker, 2, Duration::from_secs(20));
            std::thread::sleep(Duration::from_millis(500));
            unsafe { libc::kill(pids[0].0, libc::SIGKILL) };
        },
    );
    assert!(!out.status.success());
    assert!(t.elapsed() < Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rank 0"), "{stderr}");
    assert!(no_process_with(marker, Duration::from_secs(3)));
}

/// 4 ranks on 2 hosts: pairs on one host use shared memory, pairs across hosts the rails, in one
/// job; 10,000 random validated messages.
#[test]
fn mixed_placement_shared_memory_and_rails() {
    let Some(tb) = testbed("m", 4) else {
        return;
    };
    let out = Command::new(hxcomm())
        .args([
            "run",
            "-n",
            "4",
            "--net",
            "--name",
            tb.name(),
            "--ranks-per-host",
            "2",
        ])
        .args(["--timeout", "120", "--"])
        .arg(hxcomm())
        .args([
            "bench",
            "stress",
            "--messages",
            "10000",
            "--max-size",
            "256k",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut received = 0;
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        received += v["received"].as_u64().unwrap();
        let me = v["rank"].as_u64().unwrap();
        for (peer, rails) in v["rail_tx_bytes"].as_array().unwrap().iter().enumerate() {
            let n = rails.as_array().unwrap().len();
            if peer as u64 == me {
                continue;
            }
            // Ranks 0,1 share host 0 and 2,3 host 1.
            let same_host = peer as u64 / 2 == me / 2;
            assert_eq!(
                n,
                if same_host { 1 } else { 4 },
                "rank {me} to {peer}: {stdout}"
            );
        }
    }
    assert_eq!(received, 10000);
}
