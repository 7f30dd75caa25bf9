//! Transports: how bytes move between two processes on one rail. The engine sees only [`Link`]:
//! a nonblocking byte stream with a pollable file descriptor. Implementations: TCP
//! ([`tcp`]), an in-process socket pair for tests ([`pipe`]), and a fault-injecting wrapper
//! ([`faulty`]). Setup helpers (device-bound listeners and connections, the authenticated rail
//! handshake, interface discovery) live here too, since they are about sockets, not protocol.

pub mod faulty;
pub mod handshake;
pub mod ifaces;
pub mod pipe;
pub mod tcp;

use std::io::{self, IoSlice};
use std::os::fd::RawFd;

/// One direction-agnostic byte stream of a rail. All calls are nonblocking: when nothing can be
/// done they return `ErrorKind::WouldBlock`. `Ok(0)` from `read` means the peer closed.
pub trait Link: Send {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
    /// File descriptor that becomes readable/writable with the link (for epoll).
    fn fd(&self) -> RawFd;
    /// For logs: what this link connects.
    fn describe(&self) -> String;
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (**self).read(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (**self).write_vectored(bufs)
    }
    fn fd(&self) -> RawFd {
        (**self).fd()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}
