//! The watchdog: kills the ranks' process groups if the launcher dies without doing it itself
//! (`kill -9` of the launcher, an out-of-memory kill).
//!
//! Why it exists: `PR_SET_PDEATHSIG` reaches only a rank's first process; anything that rank
//! started (a shell's children, a wrapper's program) would survive the launcher. So the launcher
//! forks one small process, in its own process group, that holds the read end of a pipe. The
//! launcher writes each rank's process group id into the pipe when it starts the rank and its
//! negation when it has killed and is about to reap it. When the pipe reports end-of-file the
//! launcher is gone (or done), and the watchdog sends SIGKILL to every group still listed.
//!
//! A rank registers itself, from its own process between fork and exec
//! ([`Watchdog::register_child`]), before its program runs: were the launcher to register it
//! only once `spawn` has returned, a `kill -9` in between (the launcher descheduled on a loaded
//! host while the rank already starts children) would leave that rank's group unknown to the
//! watchdog, and its children running for good. The launcher confirms the entry when `spawn`
//! returns, or drops it when `spawn` failed (the child's pid was then reaped by std and may be
//! reused).
//!
//! The child is forked from a multi-threaded process and never calls exec, so between fork and
//! `_exit` it uses only async-signal-safe system calls (no allocation, no locks, no Rust I/O).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::fcntl::OFlag;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{pipe2, setpgid, Pid};

/// Set in a message from a child registering itself (its pid in the other bits; pids are below
/// 2^22): an entry that the launcher has not confirmed yet.
const FROM_CHILD: i32 = 1 << 30;
/// Message: the last spawn failed, forget the entries no launcher confirmed.
const SPAWN_FAILED: i32 = 0;

pub struct Watchdog {
    pid: libc::pid_t,
    tx: Option<OwnedFd>,
}

impl Watchdog {
    /// Starts a watchdog for at most `capacity` process groups.
    pub fn start(capacity: usize) -> io::Result<Self> {
        let (rx, tx) = pipe2(OFlag::O_CLOEXEC)?;
        // Allocated before the fork: the child must not allocate. A slot holds a group id, or
        // its negation while only the rank itself has registered it (not confirmed yet).
        let mut slots: Vec<libc::pid_t> = vec![0; capacity];
        // SAFETY: fork; the child runs only `child_main`, which is async-signal-safe.
        let pid = unsafe { libc::fork() };
        if pid == -1 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the child; `slots` is this process's own copy.
            unsafe { child_main(rx.as_raw_fd(), slots.as_mut_ptr(), slots.len()) }
        }
        drop(rx);
        // The child moves to a group of its own too, but it may not have run yet: without this,
        // a signal to our group (or, in an agent, the launcher's kill of the agent's group) in
        // the meantime would take the watchdog with it. (The second of the two calls is a no-op.)
        let _ = setpgid(Pid::from_raw(pid), Pid::from_raw(pid));
        Ok(Watchdog { pid, tx: Some(tx) })
    }

    /// Makes the child that `cmd` starts register its process group (its pid: the child must
    /// be started with `process_group(0)`) itself, between fork and exec, so that the watchdog
    /// knows it before the child's program runs. Call [`Watchdog::add`] with the pid when
    /// `spawn` succeeded (confirms the entry) and [`Watchdog::spawn_failed`] when it failed.
    /// Register other `pre_exec` hooks (parent-death signal, orphan check) first.
    pub fn register_child(&self, cmd: &mut Command) {
        let Some(tx) = &self.tx else {
            return;
        };
        // Inherited across fork; closed at exec (O_CLOEXEC).
        let fd = tx.as_raw_fd();
        // SAFETY: in the child only async-signal-safe calls (getpid, signal, write) run between
        // fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let v = (libc::getpid() | FROM_CHILD).to_le_bytes();
                // std has restored SIGPIPE's default action for the program: a watchdog that
                // is gone must not kill the child here (EPIPE instead; nothing to do then).
                let old = libc::signal(libc::SIGPIPE, libc::SIG_IGN);
                // 4 bytes <= PIPE_BUF: atomic.
                while libc::write(fd, v.as_ptr().cast(), 4) == -1
                    && *libc::__errno_location() == libc::EINTR
                {}
                libc::signal(libc::SIGPIPE, old);
                Ok(())
            });
        }
    }

    /// The spawn of a command prepared with [`Watchdog::register_child`] failed: forget the
    /// entry its child may have made (that pid is reaped already and may be reused).
    pub fn spawn_failed(&self) {
        self.send(SPAWN_FAILED);
    }

    fn send(&self, v: i32) {
        if let Some(tx) = &self.tx {
            // 4 bytes <= PIPE_BUF, so the write is atomic. A dead watchdog gives EPIPE (SIGPIPE
            // is ignored by Rust programs), nothing else.
            let _ = nix::unistd::write(tx, &v.to_le_bytes());
        }
    }

    /// A rank whose process group is `pgid` was started (confirms its own registration, if it
    /// made one).
    pub fn add(&self, pgid: libc::pid_t) {
        self.send(pgid);
    }

    /// The rank with group `pgid` is about to be reaped: forget it (its id may be reused later).
    pub fn remove(&self, pgid: libc::pid_t) {
        self.send(-pgid);
    }
}

impl Drop for Watchdog {
    /// The launcher has dealt with every rank itself: stop the watchdog and reap it. Killed
    /// before its pipe closes, so that it never acts on what is left in its list (an entry of a
    /// spawn that failed just before).
    fn drop(&mut self) {
        // Our own child.
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        let _ = waitpid(Pid::from_raw(self.pid), None);
        self.tx = None;
    }
}

/// The watchdog process. Only async-signal-safe calls from here on.
unsafe fn child_main(rx: libc::c_int, slots: *mut libc::pid_t, cap: usize) -> ! {
    // Own process group: a Ctrl-C or a kill of the launcher's group does not stop the watchdog.
    libc::setpgid(0, 0);
    libc::signal(libc::SIGINT, libc::SIG_IGN);
    libc::signal(libc::SIGTERM, libc::SIG_IGN);
    libc::signal(libc::SIGHUP, libc::SIG_IGN);
    // Keep only the pipe, as stdin: no copies of the launcher's sockets or of other pipes' write
    // ends (which would hide another job's end-of-file).
    if libc::dup2(rx, 0) == -1 {
        libc::_exit(1);
    }
    if libc::syscall(libc::SYS_close_range, 1u32, u32::MAX, 0u32) != 0 {
        for fd in 1..65536 {
            libc::close(fd);
        }
    }
    let mut buf = [0u8; 4];
    loop {
        let n = libc::read(0, buf.as_mut_ptr().cast(), 4);
        if n == 4 {
            let v = i32::from_le_bytes(buf);
            if v == SPAWN_FAILED {
                for i in 0..cap {
                    if *slots.add(i) < 0 {
                        *slots.add(i) = 0;
                    }
                }
            } else if v < 0 {
                // Removed, confirmed or not.
                for i in 0..cap {
                    if *slots.add(i) == v || *slots.add(i) == -v {
                        *slots.add(i) = 0;
                    }
                }
            } else if v & FROM_CHILD != 0 {
                // From the child itself: kept negative until confirmed (unless the launcher
                // was first).
                let p = v & !FROM_CHILD;
                if find(slots, cap, p).is_none() && find(slots, cap, -p).is_none() {
                    if let Some(i) = find(slots, cap, 0) {
                        *slots.add(i) = -p;
                    }
                }
            } else {
                // From the launcher: confirms, or adds.
                match find(slots, cap, -v) {
                    Some(i) => *slots.add(i) = v,
                    None if find(slots, cap, v).is_none() => {
                        if let Some(i) = find(slots, cap, 0) {
                            *slots.add(i) = v;
                        }
                    }
                    None => {}
                }
            }
            continue;
        }
        if n == -1 && *libc::__errno_location() == libc::EINTR {
            continue;
        }
        break;
    }
    // Confirmed or not: an unconfirmed entry is a rank whose spawn had not returned yet.
    for i in 0..cap {
        let p = (*slots.add(i)).abs();
        if p > 0 {
            libc::kill(-p, libc::SIGKILL);
        }
    }
    libc::_exit(0)
}

/// The first slot holding `v`.
unsafe fn find(slots: *mut libc::pid_t, cap: usize, v: libc::pid_t) -> Option<usize> {
    (0..cap).find(|&i| *slots.add(i) == v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::process::{Child, Stdio};
    use std::time::{Duration, Instant};

    impl Watchdog {
        /// As if the launcher died: the pipe closes with the watchdog running; waits until it
        /// has acted and exited.
        fn abandon(mut self) {
            self.tx = None;
            let _ = waitpid(Pid::from_raw(self.pid), None);
            std::mem::forget(self);
        }
    }

    /// A shell in a group of its own, registered with `w` by itself, with a `sleep` child in
    /// the same group: (the shell, the sleep's pid).
    fn group_with_child(w: &Watchdog) -> (Child, i32) {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 60 & echo $!; wait"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .process_group(0);
        w.register_child(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (child, line.trim().parse().unwrap())
    }

    /// Gone or a zombie (its parent, the shell, may be gone too) within 5 s.
    fn gone(pid: i32) -> bool {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                Err(_) => return true,
                Ok(s)
                    if s.rsplit_once(')')
                        .is_some_and(|x| x.1.trim_start().starts_with('Z')) =>
                {
                    return true
                }
                Ok(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        false
    }

    fn kill_group(child: &mut Child) {
        let _ = kill(Pid::from_raw(-(child.id() as i32)), Signal::SIGKILL);
        let _ = child.wait();
    }

    #[test]
    fn a_child_registered_only_by_itself_is_killed_with_its_group() {
        // The launcher dies before it could `add` the rank: the rank's own entry is enough.
        let w = Watchdog::start(2).unwrap();
        let (mut child, sleep) = group_with_child(&w);
        w.abandon();
        assert!(gone(sleep), "the rank's child survived the launcher");
        let _ = child.wait();
    }

    #[test]
    fn entries_confirmed_removed_and_of_failed_spawns() {
        // Confirmed: killed, also after a later failed spawn.
        let w = Watchdog::start(3).unwrap();
        let (mut a, a_sleep) = group_with_child(&w);
        w.add(a.id() as i32);
        w.add(a.id() as i32); // idempotent
        let (mut b, b_sleep) = group_with_child(&w);
        // `b` plays a spawn that failed after its child registered: forgotten.
        w.spawn_failed();
        let mut bad = Command::new("/nonexistent/hx-watchdog-test");
        bad.process_group(0);
        w.register_child(&mut bad);
        assert!(bad.spawn().is_err());
        w.spawn_failed();
        // Removed: not killed.
        let (mut c, c_sleep) = group_with_child(&w);
        w.add(c.id() as i32);
        w.remove(c.id() as i32);
        w.abandon();
        assert!(gone(a_sleep), "a confirmed group survived");
        let _ = a.wait();
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !gone_now(b_sleep),
            "the entry of a failed spawn was acted on"
        );
        assert!(!gone_now(c_sleep), "a removed group was killed");
        kill_group(&mut b);
        kill_group(&mut c);
    }

    fn gone_now(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(')')
                .is_some_and(|x| x.1.trim_start().starts_with('Z'))
        })
    }
}
