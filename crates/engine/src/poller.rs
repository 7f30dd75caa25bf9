//! A thin epoll wrapper over nix. Registrations are edge-triggered: the engine reads until a
//! short read and writes until a short write, so one wakeup per change suffices.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};

pub struct Poller {
    ep: Epoll,
}

pub const IN: u32 = libc::EPOLLIN as u32;
pub const OUT: u32 = libc::EPOLLOUT as u32;
pub const HUP: u32 = (libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32;

/// One ready registration: its event bits (`IN`, `OUT`, `HUP`) and its token.
pub type Event = EpollEvent;

/// The bits and token of `ev`.
pub fn split(ev: &Event) -> (u32, u64) {
    (ev.events().bits() as u32, ev.data())
}

/// The fds registered here are the engine's own (links, listeners, its eventfd), registered
/// while open and removed (or closed, which removes them) by the engine.
fn borrow(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: only used for the duration of one epoll_ctl call on an fd the caller holds open
    // (see above); epoll keeps no reference to the borrow.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

impl Poller {
    pub fn new() -> io::Result<Self> {
        Ok(Poller {
            ep: Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.ep.0.as_fd().as_raw_fd()
    }

    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.add_level(fd, events | libc::EPOLLET as u32, token)
    }

    /// Level-triggered, for fds that are themselves epoll sets (shared-memory links): an
    /// edge-triggered registration of a nested epoll can miss wakeups while a stale entry sits
    /// in its ready list; polling it level-triggered re-checks it every time.
    pub fn add_level(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let flags = EpollFlags::from_bits_retain(events as i32);
        Ok(self.ep.add(borrow(fd), EpollEvent::new(flags, token))?)
    }

    pub fn remove(&self, fd: RawFd) {
        // Errors (already closed, never added) are harmless here.
        let _ = self.ep.delete(borrow(fd));
    }

    /// Waits up to `timeout_ms` (0: poll, -1: forever) and fills `out` (its length is the
    /// most events one call returns; 64 if it was empty). Returns how many it filled.
    pub fn wait(&self, out: &mut Vec<Event>, timeout_ms: i32) -> io::Result<usize> {
        if out.is_empty() {
            out.resize(64, EpollEvent::empty());
        }
        let timeout = if timeout_ms < 0 {
            EpollTimeout::NONE
        } else {
            EpollTimeout::try_from(timeout_ms).unwrap_or(EpollTimeout::MAX)
        };
        match self.ep.wait(out, timeout) {
            Ok(n) => Ok(n),
            Err(nix::errno::Errno::EINTR) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }
}
