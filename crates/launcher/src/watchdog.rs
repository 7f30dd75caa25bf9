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
//! The child is forked from a multi-threaded process and never calls exec, so between fork and
//! `_exit` it uses only async-signal-safe system calls (no allocation, no locks, no Rust I/O).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::fcntl::OFlag;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{pipe2, Pid};

pub struct Watchdog {
    pid: libc::pid_t,
    tx: Option<OwnedFd>,
}

impl Watchdog {
    /// Starts a watchdog for at most `capacity` process groups.
    pub fn start(capacity: usize) -> io::Result<Self> {
        let (rx, tx) = pipe2(OFlag::O_CLOEXEC)?;
        // Allocated before the fork: the child must not allocate.
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
        Ok(Watchdog { pid, tx: Some(tx) })
    }

    fn send(&self, v: i32) {
        if let Some(tx) = &self.tx {
            // 4 bytes <= PIPE_BUF, so the write is atomic. A dead watchdog gives EPIPE (SIGPIPE
            // is ignored by Rust programs), nothing else.
            let _ = nix::unistd::write(tx, &v.to_le_bytes());
        }
    }

    /// A rank whose process group is `pgid` was started.
    pub fn add(&self, pgid: libc::pid_t) {
        self.send(pgid);
    }

    /// The rank with group `pgid` is about to be reaped: forget it (its id may be reused later).
    pub fn remove(&self, pgid: libc::pid_t) {
        self.send(-pgid);
    }
}

impl Drop for Watchdog {
    /// The launcher has dealt with every rank itself: stop the watchdog and reap it.
    fn drop(&mut self) {
        self.tx = None;
        // Our own child.
        let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
        let _ = waitpid(Pid::from_raw(self.pid), None);
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
            if v > 0 {
                for i in 0..cap {
                    if *slots.add(i) == 0 {
                        *slots.add(i) = v;
                        break;
                    }
                }
            } else if v < 0 {
                for i in 0..cap {
                    if *slots.add(i) == -v {
                        *slots.add(i) = 0;
                    }
                }
            }
            continue;
        }
        if n == -1 && *libc::__errno_location() == libc::EINTR {
            continue;
        }
        break;
    }
    for i in 0..cap {
        let p = *slots.add(i);
        if p > 0 {
            libc::kill(-p, libc::SIGKILL);
        }
    }
    libc::_exit(0)
}
