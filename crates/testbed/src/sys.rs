//! Running `ip` and `tc`, the global lock, existence checks.

use crate::TestbedError;
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::path::Path;
use std::process::Command;

/// Where state files and the lock live.
pub const STATE_DIR: &str = "/run/hxcomm";
/// Where `ip netns` keeps named namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// Runs `program args...`; a failure becomes an error naming the command and its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String, TestbedError> {
    tracing::debug!("{} {}", program, args.join(" "));
    let shown = || format!("{} {}", program, args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| TestbedError::Command {
            command: shown(),
            message: format!("cannot start {program}: {e}"),
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(TestbedError::Command {
            command: shown(),
            message: if stderr.is_empty() {
                format!("{}", out.status)
            } else {
                stderr
            },
        })
    }
}

/// `ip args...`
pub fn ip(args: &[&str]) -> Result<String, TestbedError> {
    run("ip", args)
}

/// `tc args...`
pub fn tc(args: &[&str]) -> Result<String, TestbedError> {
    run("tc", args)
}

/// Whether the named network namespace exists.
pub fn netns_exists(name: &str) -> bool {
    Path::new(NETNS_DIR).join(name).exists()
}

/// Whether a link of that name exists in the root namespace (or in `netns`).
pub fn link_exists(netns: Option<&str>, dev: &str) -> bool {
    let mut args: Vec<&str> = Vec::new();
    if let Some(ns) = netns {
        args.extend(["-n", ns]);
    }
    args.extend(["-o", "link", "show", "dev", dev]);
    Command::new("ip")
        .args(&args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The alias of a link, if it has one.
pub fn link_alias(netns: Option<&str>, dev: &str) -> Option<String> {
    let mut args: Vec<&str> = Vec::new();
    if let Some(ns) = netns {
        args.extend(["-n", ns]);
    }
    args.extend(["-j", "link", "show", "dev", dev]);
    let out = Command::new("ip").args(&args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v.get(0)?.get("ifalias")?.as_str().map(str::to_string)
}

/// An exclusive lock over every testbed operation on this machine (`flock` on
/// /run/hxcomm/lock), so parallel `up`s never pick the same management subnet or race on
/// /etc/hosts. Released on drop.
pub struct Lock {
    _file: Flock<File>,
}

impl Lock {
    pub fn acquire() -> Result<Lock, TestbedError> {
        std::fs::create_dir_all(STATE_DIR)
            .map_err(|e| TestbedError::Io(format!("create {STATE_DIR}: {e}")))?;
        let path = format!("{STATE_DIR}/lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| TestbedError::Io(format!("open {path}: {e}")))?;
        let file = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| {
            TestbedError::Io(format!("flock {path}: {}", std::io::Error::from(e)))
        })?;
        Ok(Lock { _file: file })
    }
}
