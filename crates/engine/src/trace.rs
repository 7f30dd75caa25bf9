//! Per-message tracing for `hxcomm bench breakdown`: where the one-way time of a message goes.
//!
//! [`Engine::enable_trace`] turns tracing on for the links up at the time: each TCP write is
//! stamped just before and after its send syscall, and the kernel stamps the write's last byte
//! at the queueing layer and at the driver (SO_TIMESTAMPING software transmit stamps, read back
//! from the socket's error queue); each TCP read is stamped before and after its receive syscall,
//! with the kernel's software receive stamp of the data; a shared-memory link stamps each ring
//! publish and each read that brought data. After a read, the engine stamps the end of its own
//! work on it (parsing frames, matching, completing requests). [`Engine::take_trace`] hands out
//! what was recorded since the last call. All stamps are `CLOCK_REALTIME` nanoseconds
//! ([`now_ns`]), so two processes on one machine can subtract each other's.
//!
//! With tracing off (the default), the send and receive paths test one field per call and the
//! engine one process-wide counter per read that brought data.

use std::net::SocketAddr;

pub use hx_transport::trace::{now_ns, LinkTrace, ReadRecord, TxKind, TxStamp, WriteRecord};

use crate::engine::Engine;
use crate::error::io_err;
use crate::{Error, Rank};

/// What one traced link recorded, with the link it came from.
#[derive(Debug)]
pub struct LinkSamples {
    pub peer: Rank,
    pub rail: usize,
    pub writes: Vec<WriteRecord>,
    pub tx: Vec<TxStamp>,
    pub reads: Vec<ReadRecord>,
}

/// Records taken by [`Engine::take_trace`], per traced link (reused between calls: entries keep
/// their vectors, which `take_trace` clears and refills).
#[derive(Debug, Default)]
pub struct TraceSamples {
    pub links: Vec<LinkSamples>,
}

impl TraceSamples {
    fn slot(&mut self, peer: Rank, rail: usize) -> &mut LinkSamples {
        let i = match self
            .links
            .iter()
            .position(|l| l.peer == peer && l.rail == rail)
        {
            Some(i) => i,
            None => {
                self.links.push(LinkSamples {
                    peer,
                    rail,
                    writes: Vec::new(),
                    tx: Vec::new(),
                    reads: Vec::new(),
                });
                self.links.len() - 1
            }
        };
        &mut self.links[i]
    }
}

impl Engine {
    /// Turns per-message tracing on for every link up now (links made later are not traced);
    /// returns how many links are traced. Costs a few clock reads per message and, on TCP, the
    /// kernel's timestamping and a receive control message; meant for `hxcomm bench breakdown`.
    pub fn enable_trace(&mut self) -> Result<usize, Error> {
        let mut n = 0;
        for p in &mut self.peers {
            for r in &mut p.rails {
                if let Some(l) = r.link.as_mut() {
                    if l.set_trace(true).map_err(io_err("SO_TIMESTAMPING"))? {
                        n += 1;
                    }
                }
            }
        }
        Ok(n)
    }

    /// Turns tracing off everywhere and drops what was not taken.
    pub fn disable_trace(&mut self) {
        for p in &mut self.peers {
            for r in &mut p.rails {
                if let Some(l) = r.link.as_mut() {
                    if l.trace(false).is_some() {
                        // Only fails on a socket that is gone; it stops tracing either way.
                        let _ = l.set_trace(false);
                    }
                }
            }
        }
    }

    /// Moves what the traced links recorded since the last call into `out` (whose vectors are
    /// cleared first), gathering the kernel's transmit stamps that have come in (a syscall per
    /// traced TCP link).
    pub fn take_trace(&mut self, out: &mut TraceSamples) {
        for l in &mut out.links {
            l.writes.clear();
            l.tx.clear();
            l.reads.clear();
        }
        for (peer, p) in self.peers.iter_mut().enumerate() {
            for (rail, r) in p.rails.iter_mut().enumerate() {
                let Some(t) = r.link.as_mut().and_then(|l| l.trace(true)) else {
                    continue;
                };
                let s = out.slot(peer as Rank, rail);
                s.writes.append(&mut t.writes);
                s.tx.append(&mut t.tx);
                s.reads.append(&mut t.reads);
            }
        }
    }

    /// The local and remote addresses of a TCP rail to `peer` (None for shared memory or a
    /// rail that is not up): where a raw TCP ping-pong beside hxcomm's would run.
    pub fn rail_socket_addrs(&self, peer: Rank, rail: usize) -> Option<(SocketAddr, SocketAddr)> {
        let l = self
            .peers
            .get(peer as usize)?
            .rails
            .get(rail)?
            .link
            .as_ref()?;
        if l.polled() {
            return None;
        }
        hx_transport::trace::socket_addrs(l.fd())
    }

    /// Whether `peer` is reached through shared memory.
    pub fn is_shm_peer(&self, peer: Rank) -> bool {
        self.peers.get(peer as usize).is_some_and(|p| p.shm)
    }

    /// Stamps the end of the engine's work on the last read of a traced link.
    #[cold]
    pub(crate) fn trace_parsed(&mut self, peer: Rank, rail: usize) {
        let t = now_ns();
        if let Some(tr) = self.peers[peer as usize]
            .rails
            .get_mut(rail)
            .and_then(|r| r.link.as_mut())
            .and_then(|l| l.trace(false))
        {
            tr.parsed(t);
        }
    }
}
