//! A thin epoll wrapper. Registrations are edge-triggered: the engine reads until a short read and
//! writes until a short write, so one wakeup per change suffices.

use std::io;
use std::os::fd::RawFd;

pub struct Poller {
    fd: RawFd,
}

pub const IN: u32 = libc::EPOLLIN as u32;
pub const OUT: u32 = libc::EPOLLOUT as u32;
pub const HUP: u32 = (libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32;

impl Poller {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Poller { fd })
    }

    pub fn fd(&self) -> RawFd {
        self.fd
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: valid epoll fd and event struct.
        if unsafe { libc::epoll_ctl(self.fd, op, fd, &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(
            libc::EPOLL_CTL_ADD,
            fd,
            events | libc::EPOLLET as u32,
            token,
        )
    }

    /// Level-triggered, for fds that are themselves epoll sets (shared-memory links): an
    /// edge-triggered registration of a nested epoll can miss wakeups while a stale entry sits
    /// in its ready list; polling it level-triggered re-checks it every time.
    pub fn add_level(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    pub fn remove(&self, fd: RawFd) {
        // SAFETY: removing an fd; errors (already closed) are harmless here.
        unsafe {
            libc::epoll_ctl(self.fd, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut());
        }
    }

    /// Waits up to `timeout_ms` (0: poll, -1: forever) and fills `out`.
    pub fn wait(&self, out: &mut Vec<libc::epoll_event>, timeout_ms: i32) -> io::Result<usize> {
        out.clear();
        if out.capacity() == 0 {
            out.reserve(64);
        }
        let cap = out.capacity().min(i32::MAX as usize) as i32;
        // SAFETY: `out` has room for `cap` events; we set its length to what the kernel wrote.
        let n = unsafe { libc::epoll_wait(self.fd, out.as_mut_ptr(), cap, timeout_ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        unsafe { out.set_len(n as usize) };
        Ok(n as usize)
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.fd) };
    }
}
