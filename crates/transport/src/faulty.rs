//! Wraps any link and misbehaves on purpose, with a seeded RNG so failures replay: short reads and
//! writes, spurious WouldBlock, a reset after a byte budget, or flipped bytes.

use std::io::{self, IoSlice};
use std::os::fd::RawFd;

use crate::Link;

#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Cut reads and writes to a random shorter length.
    pub short_io: bool,
    /// Return WouldBlock on about one call in this many (0: never).
    pub would_block_one_in: u32,
    /// After this many bytes written, fail every call with ConnectionReset.
    pub reset_after: Option<u64>,
    /// Flip one byte in about one read in this many (0: never).
    pub corrupt_one_in: u32,
}

pub struct FaultyLink<L> {
    inner: L,
    faults: Faults,
    state: u64,
    written: u64,
}

impl<L: Link> FaultyLink<L> {
    pub fn new(inner: L, faults: Faults, seed: u64) -> Self {
        FaultyLink {
            inner,
            faults,
            state: seed | 1,
            written: 0,
        }
    }

    fn rand(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }

    fn check(&mut self) -> io::Result<()> {
        if let Some(limit) = self.faults.reset_after {
            if self.written >= limit {
                return Err(io::ErrorKind::ConnectionReset.into());
            }
        }
        let n = self.faults.would_block_one_in;
        if n > 0 && self.rand().is_multiple_of(n as u64) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(())
    }
}

impl<L: Link> Link for FaultyLink<L> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.check()?;
        let len = if self.faults.short_io && buf.len() > 1 {
            1 + (self.rand() as usize % buf.len())
        } else {
            buf.len()
        };
        let n = self.inner.read(&mut buf[..len])?;
        let c = self.faults.corrupt_one_in;
        if n > 0 && c > 0 && self.rand().is_multiple_of(c as u64) {
            let i = self.rand() as usize % n;
            buf[i] ^= 0x5a;
        }
        Ok(n)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.check()?;
        let mut budget = usize::MAX;
        if let Some(limit) = self.faults.reset_after {
            budget = (limit - self.written) as usize;
        }
        if self.faults.short_io {
            let total: usize = bufs.iter().map(|b| b.len()).sum();
            if total > 1 {
                budget = budget.min(1 + self.rand() as usize % total);
            }
        }
        let n = if budget == usize::MAX {
            self.inner.write_vectored(bufs)?
        } else {
            // Write only the first `budget` bytes.
            let mut cut: Vec<IoSlice<'_>> = Vec::with_capacity(bufs.len());
            let mut left = budget;
            for b in bufs {
                if left == 0 {
                    break;
                }
                let t = b.len().min(left);
                cut.push(IoSlice::new(&b[..t]));
                left -= t;
            }
            self.inner.write_vectored(&cut)?
        };
        self.written += n as u64;
        Ok(n)
    }

    fn fd(&self) -> RawFd {
        self.inner.fd()
    }

    fn describe(&self) -> String {
        format!("faulty({})", self.inner.describe())
    }
}
