//! What tests/shm.rs and its connecting process (tests/bin/shm_child.rs) share: the secret,
//! timeouts, and blocking reads and writes over a `ShmLink` that wait the way the engine does.

#![allow(dead_code)] // each of the two uses part of it

use std::io::{ErrorKind, IoSlice};
use std::os::fd::RawFd;
use std::time::Duration;

use hx_transport::shm::ShmLink;
use hx_transport::Link;

pub const SECRET: [u8; 32] = [7; 32];
pub const SLEEPY: u64 = 20_000;
pub const T: Duration = Duration::from_secs(10);

fn poll_in(fd: RawFd, ms: i32) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// Waits the way the engine will: arm, and sleep only if arm agrees.
pub fn wait(l: &mut ShmLink, spin: bool) {
    if !spin && l.arm() {
        poll_in(l.fd(), 1000);
    }
}

pub fn read_exact(l: &mut ShmLink, buf: &mut [u8], spin: bool) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match l.read(&mut buf[at..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait(l, spin),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub fn write_all(l: &mut ShmLink, mut buf: &[u8], spin: bool) -> std::io::Result<()> {
    while !buf.is_empty() {
        match l.write_vectored(&[IoSlice::new(buf)]) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait(l, spin),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
