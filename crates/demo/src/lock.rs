//! The benchmark lock: measurements on this machine take an exclusive flock(2) on
//! /tmp/hxcomm-bench.lock so that two never overlap.
//!
//! Started as `flock /tmp/hxcomm-bench.lock hxcomm demo`, the demo inherits the descriptor on
//! which flock(1) holds the lock; opening the file again would make a second open file
//! description and wait for ever on our own parent. So an inherited descriptor of that file is
//! used when there is one (flock on the same open file description succeeds at once).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{open, Flock, FlockArg, OFlag};
use nix::sys::stat::Mode;

pub const BENCH_LOCK: &str = "/tmp/hxcomm-bench.lock";

/// Held until dropped.
#[derive(Debug)]
pub struct BenchLock {
    /// The descriptor we opened and locked; `None` when an inherited descriptor holds the lock
    /// (it stays open).
    _owned: Option<Flock<OwnedFd>>,
}

impl BenchLock {
    /// Takes the lock at `path`, waiting while another process holds it (printing once that it
    /// waits). `give_up` is polled while waiting: when it returns true, waiting stops with an
    /// error.
    pub fn acquire(path: &Path, give_up: &dyn Fn() -> bool) -> Result<BenchLock, String> {
        if let Some(fd) = inherited_fd(path) {
            // SAFETY: flock on a descriptor we were given; no memory involved.
            if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(BenchLock { _owned: None });
            }
        }
        if path.as_os_str().as_encoded_bytes().contains(&0) {
            return Err(format!("bad lock path {}", path.display()));
        }
        let mut fd = open(
            path,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o666),
        )
        .map_err(|e| {
            format!(
                "cannot open {}: {}",
                path.display(),
                std::io::Error::from(e)
            )
        })?;
        let start = Instant::now();
        let mut said = false;
        loop {
            let e = match Flock::lock(fd, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => {
                    if said {
                        eprintln!(
                            "hxcomm demo: got {} after {:.0} s",
                            path.display(),
                            start.elapsed().as_secs_f64()
                        );
                    }
                    return Ok(BenchLock { _owned: Some(lock) });
                }
                Err((f, e)) => {
                    fd = f;
                    e
                }
            };
            if e != Errno::EWOULDBLOCK {
                return Err(format!(
                    "flock {}: {}",
                    path.display(),
                    std::io::Error::from(e)
                ));
            }
            if !said {
                eprintln!(
                    "hxcomm demo: waiting for {} (another measurement is running)",
                    path.display()
                );
                said = true;
            }
            if give_up() {
                return Err(format!("stopped while waiting for {}", path.display()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A descriptor of this process that refers to `path`, if any.
fn inherited_fd(path: &Path) -> Option<libc::c_int> {
    let want: PathBuf = std::fs::canonicalize(path).ok()?;
    for entry in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if target == want {
            if let Some(fd) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
                return Some(fd);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_is_exclusive_across_processes_and_shared_through_our_own_fd() {
        let path = std::env::temp_dir().join(format!("hxdemo-lock-test-{}", std::process::id()));
        let first = BenchLock::acquire(&path, &|| false).unwrap();
        assert!(first._owned.is_some());
        // Our own descriptor counts as "inherited": a second acquire shares it at once.
        let second = BenchLock::acquire(&path, &|| true).unwrap();
        assert!(second._owned.is_none());
        drop(second);
        drop(first);
        // Another process holding the lock makes us wait (here: give up at once).
        let Ok(mut holder) = std::process::Command::new("flock")
            .arg(&path)
            .args(["sleep", "2"])
            .spawn()
        else {
            return; // no flock(1) here
        };
        std::thread::sleep(Duration::from_millis(300));
        let err = BenchLock::acquire(&path, &|| true).unwrap_err();
        assert!(err.contains("stopped while waiting"), "{err}");
        holder.wait().unwrap();
        let again = BenchLock::acquire(&path, &|| true).unwrap();
        drop(again);
        let _ = std::fs::remove_file(&path);
    }
}
