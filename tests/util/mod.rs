//! Helpers for end-to-end tests: find rank processes and their listening sockets through /proc.

#![allow(dead_code)]

pub mod skip;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub fn hxcomm() -> &'static str {
    env!("CARGO_BIN_EXE_hxcomm")
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

fn env_var(pid: i32, name: &str) -> Option<String> {
    let b = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    b.split(|&c| c == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")).map(str::to_string))
}

/// Processes whose command line has `marker` and that are ranks (have HX_RANK): (pid, rank).
pub fn ranks_with(marker: &str) -> Vec<(i32, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmd = cmdline(pid);
        if !cmd.contains(marker) || cmd.contains(" run ") {
            continue;
        }
        if let Some(r) = env_var(pid, "HX_RANK").and_then(|r| r.parse().ok()) {
            out.push((pid, r));
        }
    }
    out.sort_by_key(|&(_, r)| r);
    out
}

pub fn rank_pids(marker: &str, n: usize, timeout: Duration) -> Vec<(i32, u32)> {
    let deadline = Instant::now() + timeout;
    loop {
        let r = ranks_with(marker);
        if r.len() == n {
            return r;
        }
        assert!(Instant::now() < deadline, "ranks did not start: {r:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn no_process_with(marker: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let left: Vec<i32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
            .filter(|&pid| pid != std::process::id() as i32 && cmdline(pid).contains(marker))
            .collect();
        if left.is_empty() {
            return true;
        }
        if Instant::now() > deadline {
            eprintln!("left behind: {left:?}");
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// TCP ports on which process `pid` listens (IPv4).
pub fn listening_ports(pid: i32) -> Vec<u16> {
    let mut inodes = Vec::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in rd.flatten() {
            if let Ok(t) = std::fs::read_link(e.path()) {
                let t = t.to_string_lossy().into_owned();
                if let Some(i) = t.strip_prefix("socket:[").and_then(|s| s.strip_suffix(']')) {
                    inodes.push(i.to_string());
                }
            }
        }
    }
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // local_address is "IP:PORT" in hex; state 0A is LISTEN; inode is field 9.
            if f.len() > 9 && f[3] == "0A" && inodes.iter().any(|i| i == f[9]) {
                u16::from_str_radix(f[1].split(':').nth(1)?, 16).ok()
            } else {
                None
            }
        })
        .collect()
}

/// stdout and stderr of a finished command, for assertion messages.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The JSON summaries of an `n`-rank `hxcomm bench stress --json` job of `messages` messages,
/// checked: the job succeeded, every rank reported once, and all messages were sent and received
/// (each checked byte by byte by the ranks themselves).
pub fn stress_summaries(
    out: &std::process::Output,
    n: usize,
    messages: u64,
) -> Vec<serde_json::Value> {
    let text = output_text(out);
    assert!(out.status.success(), "{text}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut ranks: Vec<u64> = lines.iter().map(|v| v["rank"].as_u64().unwrap()).collect();
    ranks.sort_unstable();
    assert_eq!(ranks, (0..n as u64).collect::<Vec<_>>(), "{text}");
    let received: u64 = lines.iter().map(|v| v["received"].as_u64().unwrap()).sum();
    let sent: u64 = lines.iter().map(|v| v["sent"].as_u64().unwrap()).sum();
    assert_eq!((sent, received), (messages, messages), "{text}");
    lines
}

/// Compiles examples/pingpong.c against libhxcomm (built here: cargo hands an integration test
/// no cdylib).
pub fn build_pingpong(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let profile = profile_dir
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(root)
        .args(["build", "-p", "hxcomm-capi", "--lib", "--target-dir"])
        .arg(profile_dir.parent().unwrap());
    if profile == "release" {
        cmd.arg("--release");
    } else if profile != "debug" {
        cmd.args(["--profile", &profile]);
    }
    assert!(
        cmd.status().unwrap().success(),
        "cargo build -p hxcomm-capi"
    );
    let out = dir.join("pingpong");
    let cc = Command::new("cc")
        .args(["-std=c99", "-O2", "-I"])
        .arg(root.join("include"))
        .arg(root.join("examples/pingpong.c"))
        .arg("-L")
        .arg(&profile_dir)
        .arg("-lhxcomm")
        .arg(format!("-Wl,-rpath,{}", profile_dir.display()))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    out
}
