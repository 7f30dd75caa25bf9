//! Remote memory access (libfabric's FI_RMA): reads and writes of a peer's registered memory,
//! carried by the rendezvous machinery so that they stripe over the rails, survive a rail's
//! failure and go by direct copy on one host like any large message.
//!
//! * A write is an Rts flagged [`FLAG_RMA`] that names a region of the target (key, address,
//!   length) instead of a tag to match. The target answers with a Cts for that memory, or with
//!   a refusal, and the data follows as a rendezvous message's would. The write completes once
//!   the target has acknowledged all of its data, i.e. once it is placed (libfabric's
//!   delivery-complete).
//! * A read is an Rts flagged [`FLAG_RMA`] | [`FLAG_READ`] with no data. The target answers with
//!   an Rts of its own flagged [`FLAG_READ`] (or refused) whose `tag` is the request's sequence
//!   number; the reader's Cts then pulls the region's bytes into its buffer, and the read
//!   completes when all of them are there.
//!
//! Both take a sequence number like a message, so a copy resent after a rail's failure is
//! recognised; the requests are ordered with the pair's messages, their data is not (a message
//! sent after a write may be matched before the write's data is placed: wait for the write's
//! completion, as Open MPI does before its FIN). The target's memory comes from the driver's
//! [`Regions`]. Over a lossless link (shared memory), where written is not yet placed, the
//! target says when a write is placed (a `Delivered` word, as for delivery-complete sends).

use hx_wire::{FrameHeader, FrameKind, FLAG_READ, FLAG_REFUSED, FLAG_RMA};

use crate::core::{Delivery, ReqKind, Request, SendState};
use crate::tx::{Body as TxBody, TxItem};
use crate::{Buffer, Completion, Core, EpId, ProtoError, Rank, ReqId, Status, TagMatch};

/// What a peer asks to do with a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Why a target refused an access. Travels as a code in the refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmaRefusal {
    /// The target registers no memory for remote access.
    NoRegions,
    /// No region under that key.
    UnknownKey,
    /// The range is not inside the region.
    OutOfRange,
    /// The region does not allow this access.
    Denied,
    /// A code this version does not know.
    Other(u64),
}

impl RmaRefusal {
    pub fn code(self) -> u64 {
        match self {
            RmaRefusal::NoRegions => 1,
            RmaRefusal::UnknownKey => 2,
            RmaRefusal::OutOfRange => 3,
            RmaRefusal::Denied => 4,
            RmaRefusal::Other(c) => c,
        }
    }

    pub fn from_code(c: u64) -> RmaRefusal {
        match c {
            1 => RmaRefusal::NoRegions,
            2 => RmaRefusal::UnknownKey,
            3 => RmaRefusal::OutOfRange,
            4 => RmaRefusal::Denied,
            c => RmaRefusal::Other(c),
        }
    }
}

impl std::fmt::Display for RmaRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RmaRefusal::NoRegions => f.write_str("it has no memory registered for remote access"),
            RmaRefusal::UnknownKey => f.write_str("no region has that key"),
            RmaRefusal::OutOfRange => f.write_str("the range is not inside the region"),
            RmaRefusal::Denied => f.write_str("the region does not allow that access"),
            RmaRefusal::Other(c) => write!(f, "reason code {c}"),
        }
    }
}

/// The driver's registered memory, as the target of peers' reads and writes.
pub trait Regions<B>: Send {
    /// The `len` bytes at `addr` of region `key`, for a peer to read or write (memory lent in
    /// place, or a copy for a read), or why not.
    fn resolve(&mut self, key: u64, addr: u64, len: usize, access: Access)
        -> Result<B, RmaRefusal>;

    /// A write into a buffer [`resolve`](Self::resolve) gave is complete (all of it placed).
    /// Memory lent in place needs nothing more; a copy goes where it belongs here.
    fn placed(&mut self, _key: u64, _addr: u64, _buf: B) {}
}

/// A read this process asked for, waiting for the target's answer.
#[derive(Clone, Copy)]
pub(crate) struct ReadWait {
    pub req: ReqId,
    pub key: u64,
    pub len: usize,
}

/// A remote memory access frame (an Rts with [`FLAG_RMA`] or [`FLAG_READ`]) whose turn in
/// sequence has come.
pub(crate) struct RmaArrival {
    pub peer: Rank,
    pub seq: u64,
    pub src_ep: EpId,
    pub flags: u8,
    /// The region's key, or (a read's answer) the read request's sequence number.
    pub tag: u64,
    pub addr: u64,
    pub len: usize,
}

impl<B: Buffer> Core<B> {
    /// Lets peers read and write the memory `regions` resolves. Turns on tracking of finished
    /// requests ([`track_finished`](Self::track_finished)), where the requests that serve
    /// peers are freed.
    pub fn set_regions(&mut self, regions: Box<dyn Regions<B>>) {
        self.regions = Some(regions);
        self.track_finished();
    }

    /// Starts reading `buf.len()` bytes at `addr` of `peer`'s region `key` into `buf`. Completes
    /// once all of them are in `buf` (as a receive would, with the length read), or fails
    /// with [`ProtoError::Refused`] if the peer refused.
    pub fn read(&mut self, peer: Rank, key: u64, addr: u64, buf: B) -> Result<ReqId, ProtoError> {
        self.rma(peer, key, addr, buf, Access::Read)
    }

    /// Starts writing `buf` to `addr` of `peer`'s region `key`. Completes once the peer has
    /// placed all of it (delivery-complete), or fails with [`ProtoError::Refused`].
    pub fn write(&mut self, peer: Rank, key: u64, addr: u64, buf: B) -> Result<ReqId, ProtoError> {
        self.rma(peer, key, addr, buf, Access::Write)
    }

    fn rma(
        &mut self,
        peer: Rank,
        key: u64,
        addr: u64,
        buf: B,
        access: Access,
    ) -> Result<ReqId, ProtoError> {
        self.check_peer(peer)?;
        let len = buf.as_slice().len();
        if len > u32::MAX as usize * 16 {
            return Err(ProtoError::Invalid(format!(
                "remote access of {len} bytes too large"
            )));
        }
        if self.finished.is_none() {
            // The target side's requests are freed there; one side of a pair implies the other.
            self.track_finished();
        }
        let kind = match access {
            Access::Write => ReqKind::Send(SendState {
                peer,
                unacked: len,
                delivery: Delivery::NotAsked,
                src_ep: 0,
                tag: key,
            }),
            Access::Read => ReqKind::Recv(crate::core::RecvState {
                ep: 0,
                src: Some(peer),
                tag: TagMatch::exact(key),
                status: None,
                unreceived: 0,
                rdv: None,
                chunks: None,
                rma_write: None,
            }),
        };
        let req = self.reqs.insert(Request {
            detached: false,
            buf,
            kind,
            completion: Completion::Pending,
        });
        let done = Status {
            source: peer,
            src_ep: 0,
            tag: key,
            len,
            truncated: false,
            data: None,
        };
        if let Some(reason) = &self.peers[peer as usize].failed {
            let err = ProtoError::PeerFailed {
                peer,
                reason: reason.clone(),
            };
            self.complete(req, Completion::Failed(err));
            return Ok(req);
        }
        if len == 0 {
            // Nothing moves; like libfabric's providers, the key is not checked either.
            self.complete(req, Completion::Done(done));
            return Ok(req);
        }
        if peer == self.me {
            let c = match self.local_access(key, addr, req, access) {
                Ok(()) => Completion::Done(done),
                Err(why) => Completion::Failed(ProtoError::Refused {
                    peer,
                    key,
                    len,
                    why,
                }),
            };
            self.complete(req, c);
            return Ok(req);
        }
        let p = &mut self.peers[peer as usize];
        let seq = p.tx_seq;
        p.tx_seq += 1;
        let mut h = FrameHeader::new(FrameKind::Rts);
        h.flags = FLAG_RMA;
        h.seq = seq;
        h.tag = key;
        h.data = addr;
        h.value = len as u64;
        let rail = match access {
            Access::Write => {
                p.wait_cts.insert(seq, req);
                if p.lossless {
                    // Written is not placed: wait for the target's word (a direct copy
                    // places it itself).
                    p.delivery_wait.insert(seq, (req, 0, key));
                    if let Some(Request {
                        kind: ReqKind::Send(s),
                        ..
                    }) = self.reqs.get_mut(req)
                    {
                        s.delivery = Delivery::Waiting;
                    }
                }
                self.pick_rail_for(peer, len)
            }
            Access::Read => {
                h.flags |= FLAG_READ;
                p.rma_reads.insert(seq, ReadWait { req, key, len });
                self.pick_rail(peer)
            }
        };
        self.enqueue_on(peer, rail, TxItem::new(h, TxBody::None, None));
        Ok(req)
    }

    /// An access to this very process's regions: a copy.
    fn local_access(
        &mut self,
        key: u64,
        addr: u64,
        req: ReqId,
        access: Access,
    ) -> Result<(), RmaRefusal> {
        let regions = self.regions.as_mut().ok_or(RmaRefusal::NoRegions)?;
        let r = self.reqs.get_mut(req).expect("just made");
        let len = r.buf.as_slice().len();
        let mut mem = regions.resolve(key, addr, len, access)?;
        match access {
            Access::Read => r.buf.as_mut_slice().copy_from_slice(mem.as_slice()),
            Access::Write => {
                mem.as_mut_slice().copy_from_slice(r.buf.as_slice());
                regions.placed(key, addr, mem);
            }
        }
        Ok(())
    }

    /// Checks, when its header arrives, that a read's answer answers a read of ours with what
    /// it asked for (the request is only forgotten when the answer's turn comes).
    pub(crate) fn check_read_answer(
        &self,
        peer: Rank,
        h: &FrameHeader,
    ) -> Result<(), &'static str> {
        if h.flags & (FLAG_RMA | FLAG_READ) != FLAG_READ {
            return Ok(());
        }
        match self.peers[peer as usize].rma_reads.get(&h.tag) {
            None => Err("read answer for no read"),
            Some(w) if h.flags & FLAG_REFUSED == 0 && h.value != w.len as u64 => {
                Err("read answer of another length")
            }
            Some(_) => Ok(()),
        }
    }

    /// A read or write request, or a read's answer, whose turn has come.
    pub(crate) fn rma_arrived(&mut self, a: RmaArrival) {
        if a.flags & FLAG_RMA != 0 {
            self.serve(a);
        } else {
            self.read_answered(a);
        }
    }

    /// A peer's read or write of our memory.
    fn serve(&mut self, a: RmaArrival) {
        let access = if a.flags & FLAG_READ != 0 {
            Access::Read
        } else {
            Access::Write
        };
        let got = match self.regions.as_mut() {
            Some(r) => r.resolve(a.tag, a.addr, a.len, access),
            None => Err(RmaRefusal::NoRegions),
        };
        let peer = a.peer;
        match (access, got) {
            (Access::Write, Ok(buf)) => {
                let req = self.reqs.insert(Request {
                    detached: true,
                    buf,
                    kind: ReqKind::Recv(crate::core::RecvState {
                        ep: 0,
                        src: Some(peer),
                        tag: TagMatch::exact(a.tag),
                        status: None,
                        unreceived: 0,
                        rdv: None,
                        chunks: None,
                        rma_write: Some((a.tag, a.addr)),
                    }),
                    completion: Completion::Pending,
                });
                let msg = Status {
                    source: peer,
                    src_ep: a.src_ep,
                    tag: a.tag,
                    len: a.len,
                    truncated: false,
                    data: None,
                };
                self.start_rdv_recv(a.seq, req, msg);
            }
            (Access::Write, Err(why)) => {
                let mut h = FrameHeader::new(FrameKind::Cts);
                h.flags = FLAG_REFUSED;
                h.seq = a.seq;
                h.dst_ep = a.src_ep;
                h.data = why.code();
                let rail = self.pick_rail(peer);
                self.enqueue_on(peer, rail, TxItem::new(h, TxBody::None, None));
            }
            (Access::Read, got) => {
                let p = &mut self.peers[peer as usize];
                let seq = p.tx_seq;
                p.tx_seq += 1;
                let mut h = FrameHeader::new(FrameKind::Rts);
                h.flags = FLAG_READ;
                h.seq = seq;
                h.tag = a.seq;
                h.dst_ep = a.src_ep;
                match got {
                    Ok(buf) => {
                        h.value = a.len as u64;
                        let req = self.reqs.insert(Request {
                            detached: true,
                            buf,
                            kind: ReqKind::Send(SendState {
                                peer,
                                unacked: a.len,
                                delivery: Delivery::NotAsked,
                                src_ep: 0,
                                tag: a.tag,
                            }),
                            completion: Completion::Pending,
                        });
                        self.peers[peer as usize].wait_cts.insert(seq, req);
                    }
                    Err(why) => {
                        h.flags |= FLAG_REFUSED;
                        h.data = why.code();
                    }
                }
                let rail = self.pick_rail_for(peer, h.value as usize);
                self.enqueue_on(peer, rail, TxItem::new(h, TxBody::None, None));
            }
        }
    }

    /// The target's answer to a read of ours: pull the data, or fail the read.
    fn read_answered(&mut self, a: RmaArrival) {
        let Some(w) = self.peers[a.peer as usize].rma_reads.remove(&a.tag) else {
            // Checked when the header came; a second answer under the same request.
            return;
        };
        if a.flags & FLAG_REFUSED != 0 {
            let err = ProtoError::Refused {
                peer: a.peer,
                key: w.key,
                len: w.len,
                why: RmaRefusal::from_code(a.addr),
            };
            self.complete(w.req, Completion::Failed(err));
            return;
        }
        let msg = Status {
            source: a.peer,
            src_ep: a.src_ep,
            tag: w.key,
            len: w.len,
            truncated: false,
            data: None,
        };
        self.start_rdv_recv(a.seq, w.req, msg);
    }

    /// A write of ours that the target refused (its Cts said so).
    pub(crate) fn write_refused(&mut self, peer: Rank, req: ReqId, code: u64) {
        let (key, len) = match self.reqs.get_mut(req) {
            Some(Request {
                kind: ReqKind::Send(s),
                buf,
                ..
            }) => {
                s.unacked = 0;
                (s.tag, buf.as_slice().len())
            }
            _ => return,
        };
        let err = ProtoError::Refused {
            peer,
            key,
            len,
            why: RmaRefusal::from_code(code),
        };
        self.complete(req, Completion::Failed(err));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::Cluster;
    use crate::Config;

    /// One region per key, addresses as offsets; writes land in place when placed.
    struct Mem(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Regions<Vec<u8>> for Mem {
        fn resolve(
            &mut self,
            key: u64,
            addr: u64,
            len: usize,
            _access: Access,
        ) -> Result<Vec<u8>, RmaRefusal> {
            let m = self.0.lock().unwrap();
            if key != 7 {
                return Err(RmaRefusal::UnknownKey);
            }
            let a = addr as usize;
            m.get(a..a + len)
                .map(<[u8]>::to_vec)
                .ok_or(RmaRefusal::OutOfRange)
        }

        fn placed(&mut self, _key: u64, addr: u64, buf: Vec<u8>) {
            let a = addr as usize;
            self.0.lock().unwrap()[a..a + buf.len()].copy_from_slice(&buf);
        }
    }

    fn pair() -> (Cluster, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
        let mut c = Cluster::new(2, 2, Config::default(), 5);
        let mem = std::sync::Arc::new(std::sync::Mutex::new(
            (0..=255u8).cycle().take(1 << 20).collect(),
        ));
        c.cores[1].set_regions(Box::new(Mem(mem.clone())));
        c.cores[0].track_finished();
        (c, mem)
    }

    fn finish(c: &mut Cluster, req: ReqId) -> (Completion, Vec<u8>) {
        c.run_until(1_000_000, |c| !c.cores[0].is_pending(req))
            .unwrap();
        c.run_until(1_000_000, |_| false).unwrap();
        c.cores[1].take_finished(&mut Vec::new());
        c.cores[0].take(req).unwrap()
    }

    #[test]
    fn reads_and_writes_of_a_peer_and_of_itself() {
        let (mut c, mem) = pair();
        let r = c.cores[0].read(1, 7, 1000, vec![0; 300_000]).unwrap();
        let (done, got) = finish(&mut c, r);
        assert!(matches!(done, Completion::Done(s) if s.len == 300_000));
        assert_eq!(got[..], mem.lock().unwrap()[1000..301_000]);
        let r = c.cores[0].write(1, 7, 10, vec![9; 70_000]).unwrap();
        assert!(matches!(finish(&mut c, r).0, Completion::Done(_)));
        assert!(mem.lock().unwrap()[10..70_010].iter().all(|&b| b == 9));
        assert_eq!(
            c.cores[1].live_requests(),
            0,
            "the target's requests are freed"
        );
        // Its own regions, without the network.
        let r = c.cores[1].read(1, 7, 10, vec![0; 5]).unwrap();
        assert_eq!(c.cores[1].take(r).unwrap().1, vec![9; 5]);
        let r = c.cores[1].write(1, 7, 0, vec![4; 3]).unwrap();
        assert!(matches!(c.cores[1].take(r).unwrap().0, Completion::Done(_)));
        assert_eq!(mem.lock().unwrap()[..4], [4, 4, 4, 3]);
    }

    #[test]
    fn refusals_name_the_peer_and_the_reason() {
        let (mut c, _) = pair();
        let refused = |c: &mut Cluster, r| match finish(c, r).0 {
            Completion::Failed(ProtoError::Refused { peer: 1, why, .. }) => why,
            other => panic!("{other:?}"),
        };
        let r = c.cores[0].read(1, 8, 0, vec![0; 10]).unwrap();
        assert_eq!(refused(&mut c, r), RmaRefusal::UnknownKey);
        let r = c.cores[0].write(1, 7, (1 << 20) - 5, vec![0; 10]).unwrap();
        assert_eq!(refused(&mut c, r), RmaRefusal::OutOfRange);
        // A process that lends no memory.
        let r = c.cores[1].write(0, 7, 0, vec![0; 10]).unwrap();
        c.cores[1].track_finished();
        c.run_until(1_000_000, |c| !c.cores[1].is_pending(r))
            .unwrap();
        let err = match c.cores[1].take(r).unwrap().0 {
            Completion::Failed(e) => e,
            other => panic!("{other:?}"),
        };
        assert!(
            matches!(
                err,
                ProtoError::Refused {
                    why: RmaRefusal::NoRegions,
                    peer: 0,
                    key: 7,
                    len: 10
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("no memory registered"), "{err}");
    }

    #[test]
    fn a_peer_that_fails_fails_its_accesses() {
        let (mut c, _) = pair();
        let r = c.cores[0].read(1, 7, 0, vec![0; 100_000]).unwrap();
        let w = c.cores[0].write(1, 7, 0, vec![0; 100_000]).unwrap();
        for _ in 0..3 {
            c.step().unwrap();
        }
        c.cores[0].fail_peer(1, "gone");
        for req in [r, w] {
            assert!(matches!(
                c.cores[0].poll(req),
                Some(Completion::Failed(ProtoError::PeerFailed { peer: 1, .. }))
            ));
        }
        let late = c.cores[0].read(1, 7, 0, vec![0; 8]).unwrap();
        assert!(matches!(c.cores[0].poll(late), Some(Completion::Failed(_))));
    }

    #[test]
    fn a_read_answer_nobody_asked_for_is_a_violation() {
        let mut c = Cluster::new(2, 1, Config::default(), 3);
        let mut h = FrameHeader::new(FrameKind::Rts);
        h.flags = FLAG_READ;
        h.tag = 42;
        h.value = 10;
        c.inject(1, 0, 0, &h.to_bytes());
        let err = loop {
            match c.step() {
                Err(e) => break e,
                Ok(false) => panic!("accepted"),
                Ok(true) => {}
            }
        };
        assert!(err.to_string().contains("read answer for no read"), "{err}");
    }

    #[test]
    fn zero_bytes_complete_at_once() {
        let (mut c, _) = pair();
        let r = c.cores[0].read(1, 99, 0, Vec::new()).unwrap();
        assert!(matches!(c.cores[0].poll(r), Some(Completion::Done(_))));
        assert!(!c.step().unwrap(), "nothing to send");
    }
}
