//! `hxcomm bench breakdown` end to end: over shared memory and loopback TCP (no root), and as
//! root over a rail between two testbed hosts. Checks the JSON's shape, not timings (the
//! machine is shared): every part is there and its median non-negative, and the parts' medians
//! add up to the measured one-way time within a generous tolerance.

mod util;

use std::process::Command;
use std::sync::Mutex;

use hx_testbed::{Testbed, TestbedSpec};
use serde_json::Value;
use util::hxcomm;

/// One breakdown at a time: each runs two busy-polling ranks, and three of them at once on a
/// 2-core machine time-slice each other (a CI run saw 217 us per message in one direction).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs the breakdown under `hxcomm run` with `run_args` and returns its JSON lines.
fn breakdown(run_args: &[&str]) -> Vec<Value> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(hxcomm())
        .args(["run", "-n", "2", "--timeout", "120"])
        .args(run_args)
        .arg("--")
        .arg(hxcomm())
        .args([
            "bench",
            "breakdown",
            "--iterations",
            "300",
            "--warmup",
            "50",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn check(lines: &[Value], transport: &str, parts: &[&str], block_parts: &[&str]) {
    assert_eq!(lines.len(), 2, "one line per mode: {lines:?}");
    for l in lines {
        let mode = l["mode"].as_str().unwrap();
        assert_eq!(l["transport"], transport, "{l}");
        assert_eq!(l["bytes"], 8, "{l}");
        let want: Vec<&str> = if mode == "block" {
            block_parts.to_vec()
        } else {
            parts.to_vec()
        };
        let got: Vec<&str> = l["parts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["part"].as_str().unwrap())
            .collect();
        assert_eq!(got, want, "{mode}: {l}");
        for p in l["parts"].as_array().unwrap() {
            for k in ["p50_us", "p90_us", "p99_us"] {
                let v = p[k].as_f64().unwrap();
                assert!(v >= 0.0, "{mode}: {} {k} = {v}", p["part"]);
            }
            assert!(!p["seed"].as_str().unwrap().is_empty());
        }
        assert!(l["messages"].as_u64().unwrap() >= 300, "{l}");
        let sum = l["sum_p50_us"].as_f64().unwrap();
        let measured = l["measured_oneway_us"].as_f64().unwrap();
        assert!(sum > 0.0 && measured > 0.0, "{l}");
        // Generous: a shared 2-core machine; the 10% bar is for quiet benchmark runs.
        let ratio = sum / measured;
        assert!(
            (0.5..=1.5).contains(&ratio),
            "{mode}: sum {sum} vs {measured}: {l}"
        );
        let means = l["sum_mean_us"].as_f64().unwrap() / l["measured_mean_us"].as_f64().unwrap();
        assert!((0.5..=1.5).contains(&means), "{mode}: means: {l}");
        assert!(l["untraced_oneway_us"].as_f64().unwrap() > 0.0);
        assert!(!l["floors"].as_array().unwrap().is_empty(), "{l}");
        if mode == "block" {
            assert!(l["wakeup_us"].is_object(), "{l}");
            assert!(l["slept"].as_u64().is_some(), "{l}");
        }
    }
}

const TCP_SPIN: &[&str] = &[
    "isend-write",
    "write-qdisc",
    "qdisc-driver",
    "driver-rx",
    "rx-read",
    "read-recvd",
    "recvd-parsed",
    "parsed-done",
];
const TCP_BLOCK: &[&str] = &[
    "isend-write",
    "write-qdisc",
    "qdisc-driver",
    "driver-rx",
    "rx-wake",
    "wake-read",
    "read-recvd",
    "recvd-parsed",
    "parsed-done",
];

#[test]
fn breakdown_over_shared_memory() {
    let lines = breakdown(&[]);
    check(
        &lines,
        "shm",
        &[
            "isend-publish",
            "publish-recvd",
            "recvd-parsed",
            "parsed-done",
        ],
        &[
            "isend-publish",
            "publish-wake",
            "wake-recvd",
            "recvd-parsed",
            "parsed-done",
        ],
    );
}

#[test]
fn breakdown_over_loopback_tcp() {
    let lines = breakdown(&["--env", "HX_TRANSPORTS=tcp"]);
    check(&lines, "tcp", TCP_SPIN, TCP_BLOCK);
}

#[test]
fn breakdown_over_a_testbed_rail() {
    if !util::skip::need_root() {
        return;
    }
    let name = format!("bk{}", std::process::id() % 1000);
    let mut spec = TestbedSpec::new(&name, 2, 1);
    spec.rates = vec![None];
    let tb = Testbed::up(&spec).expect("testbed up");
    let lines = breakdown(&["--net", "--name", tb.name()]);
    check(&lines, "tcp", TCP_SPIN, TCP_BLOCK);
    assert!(lines.iter().all(|l| l["rails"] == "r0"), "{lines:?}");
}
