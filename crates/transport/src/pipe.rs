//! An in-memory link: a Unix socket pair. Behaves like a local TCP connection (nonblocking,
//! pollable, EOF on close) without touching the network; used by tests and the conformance suite.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

use crate::Link;

pub struct PipeLink {
    s: UnixStream,
    label: String,
}

/// Two connected links.
pub fn pair(label: &str) -> io::Result<(PipeLink, PipeLink)> {
    let (a, b) = UnixStream::pair()?;
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    Ok((
        PipeLink {
            s: a,
            label: format!("{label}/a"),
        },
        PipeLink {
            s: b,
            label: format!("{label}/b"),
        },
    ))
}

impl Link for PipeLink {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.s.read(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.s.write_vectored(bufs)
    }
    fn fd(&self) -> RawFd {
        self.s.as_raw_fd()
    }
    fn describe(&self) -> String {
        self.label.clone()
    }
}
