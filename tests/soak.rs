//! Soak test (not in the default run; bounded to HX_SOAK_SECONDS, default 300):
//!
//!     cargo test --release --test soak -- --ignored --nocapture
//!
//! 4 ranks on 2 hosts x 4 rails, random all-to-all validated traffic, one random rail cut and
//! restored every few seconds. Reports messages and bytes moved, failovers, and memory at start
//! and end; fails on any lost or corrupted message or if memory grows more than 4x.

mod util;

use std::process::Command;
use std::time::{Duration, Instant};

use hx_testbed::{Testbed, TestbedSpec};
use util::hxcomm;

#[test]
#[ignore]
fn soak() {
    if !util::skip::need_root() {
        return;
    }
    let secs: u64 = std::env::var("HX_SOAK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let tb = Testbed::up(&TestbedSpec::new(
        &format!("soak{}", std::process::id() % 100),
        2,
        4,
    ))
    .unwrap();
    let mut job = Command::new(hxcomm())
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
        .args([
            "--env",
            "HX_LOG=warn",
            "--timeout",
            &(secs + 120).to_string(),
            "--",
        ])
        .arg(hxcomm())
        .args([
            "bench",
            "stress",
            "--seconds",
            &secs.to_string(),
            "--max-size",
            "1M",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    // Let every rank find all its rails before the first cut.
    std::thread::sleep(Duration::from_secs(3));
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut cuts = 0;
    while t0.elapsed() < Duration::from_secs(secs.saturating_sub(3)) {
        if job.try_wait().unwrap().is_some() {
            break;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (host, rail) = ((x % 2) as u32, ((x >> 8) % 4) as u32);
        tb.link(host, rail, false).unwrap();
        std::thread::sleep(Duration::from_millis(1500 + (x >> 16) % 1500));
        tb.link(host, rail, true).unwrap();
        cuts += 1;
        std::thread::sleep(Duration::from_millis(1500));
    }
    let out = job.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{cuts} rail cuts; per rank:\n{stdout}");
    assert!(out.status.success());
    let (mut msgs, mut bytes, mut failures) = (0, 0, 0);
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        msgs += v["received"].as_u64().unwrap();
        bytes += v["bytes_received"].as_u64().unwrap();
        failures += v["rail_failures"].as_u64().unwrap();
        let (a, b) = (
            v["rss_kib_start"].as_u64().unwrap(),
            v["rss_kib_end"].as_u64().unwrap(),
        );
        assert!(b < 4 * a.max(16 * 1024), "memory grew from {a} to {b} KiB");
    }
    println!("soak: {msgs} messages, {bytes} bytes verified, {failures} rail failovers, {cuts} cuts in {secs} s");
    assert!(msgs > 0);
}
