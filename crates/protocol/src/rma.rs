//! Remote memory access (libfabric's FI_RMA): reads and writes of a peer's registered memory,
//! carried by the rendezvous machinery so that they stripe over the rails, survive a rail's
//! failure and go by direct copy on one host like any large message.
//!
//! * A write is an Rts flagged [`FLAG_RMA`] that names a region of the target (key, address,
//!   length) instead of a tag to match. The target answers with a Cts for that memory, or with
//!   a refusal, and the data follows as a rendezvous message's would. The write completes once
//!   the target has acknowledged all of its data, i.e. once it is placed (libfabric's
//!   delivery-complete). A write no longer than the eager limit, while the target's eager
//!   credit allows, is an Eager frame flagged [`FLAG_RMA`] that carries its bytes: the target
//!   places them on arrival and says so with a `Delivered` word (or refuses with a Cts), so
//!   it completes in one round trip.
//! * A read is an Rts flagged [`FLAG_RMA`] | [`FLAG_READ`] with no data. The target answers with
//!   an Rts of its own flagged [`FLAG_READ`] (or refused) whose `tag` is the request's sequence
//!   number; the reader's Cts then pulls the region's bytes into its buffer, and the read
//!   completes when all of them are there. A read no longer than the eager limit, while the
//!   reader's eager credit allows, is answered by an Eager frame flagged [`FLAG_READ`] that
//!   carries the bytes (one round trip instead of two).
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
use crate::{
    AtomicOp, AtomicType, Buffer, Completion, Core, EpId, ProtoError, Rank, ReqId, Status, TagMatch,
};

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
    /// An atomic operation or type the target does not know, or an element not aligned to
    /// its width.
    Unsupported,
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
            RmaRefusal::Unsupported => 5,
            RmaRefusal::Other(c) => c,
        }
    }

    pub fn from_code(c: u64) -> RmaRefusal {
        match c {
            1 => RmaRefusal::NoRegions,
            2 => RmaRefusal::UnknownKey,
            3 => RmaRefusal::OutOfRange,
            4 => RmaRefusal::Denied,
            5 => RmaRefusal::Unsupported,
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
            RmaRefusal::Unsupported => {
                f.write_str("the atomic operation, its type or its alignment is not supported")
            }
            RmaRefusal::Other(c) => write!(f, "reason code {c}"),
        }
    }
}

/// The driver's registered memory, as the target of peers' reads, writes and atomics.
pub trait Regions<B: Buffer>: Send {
    /// The `len` bytes at `addr` of region `key`, for a peer to read or write (memory lent in
    /// place, or a copy for a read), or why not.
    fn resolve(&mut self, key: u64, addr: u64, len: usize, access: Access)
        -> Result<B, RmaRefusal>;

    /// A write into a buffer [`resolve`](Self::resolve) gave is complete (all of it placed).
    /// Memory lent in place needs nothing more; a copy goes where it belongs here. This runs
    /// when the driver takes the core's finished requests, which may be after the writer was
    /// told its write is placed (the word back leaves with the next write): a driver that needs
    /// the writer's completion to mean "visible here" lends its memory in place, as the engine
    /// does.
    fn placed(&mut self, _key: u64, _addr: u64, _buf: B) {}

    /// Applies `op` to the element of type `ty` at `addr` of region `key`; returns its old
    /// value (in the low bytes). This default goes through [`resolve`](Self::resolve) and
    /// [`placed`](Self::placed), atomic against other atomics of this process (they are
    /// applied one at a time) but not against the process's own CPU atomics on that memory;
    /// a driver that lends memory in place should use CPU atomics.
    fn atomic(
        &mut self,
        key: u64,
        addr: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        compare: u64,
    ) -> Result<u64, RmaRefusal> {
        let width = ty.width();
        let access = if op.writes() {
            Access::Write
        } else {
            Access::Read
        };
        // Read access too, for the old value: resolve for reading, then write back.
        let mut mem = self.resolve(key, addr, width, Access::Read)?;
        if op.writes() {
            // Checks write access as well.
            drop(self.resolve(key, addr, width, access)?);
        }
        let mut w = [0u8; 8];
        w[..width].copy_from_slice(mem.as_slice());
        let old = u64::from_le_bytes(w);
        if op.writes() {
            let new = crate::apply_atomic(op, ty, old, operand, compare);
            mem.as_mut_slice()
                .copy_from_slice(&new.to_le_bytes()[..width]);
            self.placed(key, addr, mem);
        }
        Ok(old)
    }
}

/// An atomic this process asked for, waiting for the target's answer.
#[derive(Clone, Copy)]
pub(crate) struct AtomicWait {
    pub req: ReqId,
    pub key: u64,
    pub width: usize,
}

/// Most answers a target keeps for atomics whose initiator has not yet said it has them
/// (it says so with every request): what it resends when a request comes again after a rail
/// failure, instead of applying it twice.
const MAX_ANSWERS: usize = 1 << 16;

/// An atomic request whose operands are arriving on a rail.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AtomicArrival {
    pub id: u64,
    pub op: u16,
    pub ty: u16,
    pub key: u64,
    pub addr: u64,
    /// The initiator's lowest unanswered id.
    pub lowest: u64,
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
                region: None,
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
                rma_target: false,
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
            Access::Write if self.eager_credit(peer, len) => {
                // Small enough to go with the request: placed on arrival, and the target's
                // word (or its refusal) comes back; one round trip, not two.
                h.kind = FrameKind::Eager;
                h.payload_len = len as u32;
                self.wait_for_word(peer, seq, req, 0, key);
                let rail = self.pick_rail_for(peer, len);
                self.enqueue_on(
                    peer,
                    rail,
                    TxItem::new(h, TxBody::Req(req, 0, len), Some(req)),
                );
                return Ok(req);
            }
            Access::Write => {
                let p = &mut self.peers[peer as usize];
                p.wait_cts.insert(seq, req);
                if p.lossless {
                    // Written is not placed: wait for the target's word (a direct copy
                    // places it itself).
                    self.wait_for_word(peer, seq, req, 0, key);
                }
                self.pick_rail_for(peer, len)
            }
            Access::Read => {
                h.flags |= FLAG_READ;
                let p = &mut self.peers[peer as usize];
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
        // Through a copy: the local buffer may lie inside the region (a shifted copy within
        // one window), and two views of overlapping memory must not be alive at once.
        match access {
            Access::Read => {
                let bytes = mem.as_slice().to_vec();
                r.buf.as_mut_slice().copy_from_slice(&bytes);
            }
            Access::Write => {
                let bytes = r.buf.as_slice().to_vec();
                mem.as_mut_slice().copy_from_slice(&bytes);
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
                        rma_target: true,
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
                    Ok(buf) if self.eager_credit(peer, a.len) => {
                        // Small enough to go with the answer: one round trip, not two.
                        h.kind = FrameKind::Eager;
                        h.value = a.len as u64;
                        h.payload_len = a.len as u32;
                        let mut copy = self.spare_bufs.pop().unwrap_or_default();
                        copy.clear();
                        copy.extend_from_slice(&buf.as_slice()[..a.len]);
                        let rail = self.pick_rail_for(peer, a.len);
                        self.enqueue_on(peer, rail, TxItem::new(h, TxBody::Owned(copy), None));
                        return;
                    }
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
                                region: Some(a.tag),
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

    /// A peer's eager write (`len` bytes at `addr` of region `key`) whose turn has come: the
    /// request its bytes go into (placed when it completes, and the writer told), or `None`
    /// when refused (the writer told why; the bytes are dropped).
    pub(crate) fn eager_write(
        &mut self,
        peer: Rank,
        seq: u64,
        src_ep: EpId,
        key: u64,
        addr: u64,
        len: usize,
    ) -> Option<ReqId> {
        let got = match self.regions.as_mut() {
            Some(r) => r.resolve(key, addr, len, Access::Write),
            None => Err(RmaRefusal::NoRegions),
        };
        match got {
            Ok(buf) => {
                let req = self.reqs.insert(Request {
                    detached: true,
                    buf,
                    kind: ReqKind::Recv(crate::core::RecvState {
                        ep: 0,
                        src: Some(peer),
                        tag: TagMatch::exact(key),
                        status: None,
                        unreceived: 0,
                        rdv: None,
                        chunks: None,
                        rma_write: Some((key, addr)),
                        rma_target: true,
                    }),
                    completion: Completion::Pending,
                });
                let msg = Status {
                    source: peer,
                    src_ep,
                    tag: key,
                    len,
                    truncated: false,
                    data: None,
                };
                // `rdv` names the write for the word back once it is placed.
                self.set_matched(req, msg, Some((peer, seq)));
                Some(req)
            }
            Err(why) => {
                let mut h = FrameHeader::new(FrameKind::Cts);
                h.flags = FLAG_REFUSED;
                h.seq = seq;
                h.dst_ep = src_ep;
                h.data = why.code();
                let rail = self.pick_rail(peer);
                self.enqueue_on(peer, rail, TxItem::new(h, TxBody::None, None));
                None
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

    /// Starts an atomic `op` on the element of type `ty` at `addr` of `peer`'s region `key`,
    /// with `operand` (and `compare`, for the ops that take one) in their low bytes. Completes
    /// once the target has applied it, with the element's old value in its status's `data`
    /// and, little-endian, in `result` (as much of it as `result` holds; pass an empty buffer
    /// when it is not wanted); fails with [`ProtoError::Refused`] if the peer refused.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &mut self,
        peer: Rank,
        key: u64,
        addr: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        compare: u64,
        result: B,
    ) -> Result<ReqId, ProtoError> {
        self.check_peer(peer)?;
        if self.finished.is_none() {
            self.track_finished();
        }
        let req = self.reqs.insert(Request {
            detached: false,
            buf: result,
            kind: ReqKind::Send(SendState {
                peer,
                unacked: 0,
                delivery: Delivery::NotAsked,
                src_ep: 0,
                tag: key,
                region: None,
            }),
            completion: Completion::Pending,
        });
        let width = ty.width();
        if let Some(reason) = &self.peers[peer as usize].failed {
            let err = ProtoError::PeerFailed {
                peer,
                reason: reason.clone(),
            };
            self.complete(req, Completion::Failed(err));
            return Ok(req);
        }
        if peer == self.me {
            let got = match self.regions.as_mut() {
                Some(r) => r.atomic(key, addr, op, ty, operand, compare),
                None => Err(RmaRefusal::NoRegions),
            };
            self.atomic_done(peer, AtomicWait { req, key, width }, got);
            return Ok(req);
        }
        let p = &mut self.peers[peer as usize];
        if p.atomics.len() >= MAX_ANSWERS {
            // The target keeps an answer per atomic we have not heard back about.
            self.reqs.remove(req);
            return Err(ProtoError::Busy(format!(
                "{MAX_ANSWERS} atomics to rank {peer} are waiting for their answers"
            )));
        }
        let id = p.atomic_next;
        p.atomic_next += 1;
        p.atomics.insert(id, AtomicWait { req, key, width });
        let mut h = FrameHeader::new(FrameKind::Atomic);
        h.seq = id;
        h.src_ep = op.code();
        h.dst_ep = ty.code();
        h.tag = key;
        h.data = addr;
        h.value = *p.atomics.keys().next().expect("just inserted");
        h.payload_len = hx_wire::ATOMIC_PAYLOAD as u32;
        let mut operands = Vec::with_capacity(hx_wire::ATOMIC_PAYLOAD);
        operands.extend_from_slice(&operand.to_le_bytes());
        operands.extend_from_slice(&compare.to_le_bytes());
        let rail = self.pick_rail(peer);
        self.enqueue_on(peer, rail, TxItem::new(h, TxBody::Owned(operands), None));
        Ok(req)
    }

    /// A peer's atomic on our memory, its operands arrived: apply it once and answer (again,
    /// from what was answered, if it comes a second time after a rail failure).
    pub(crate) fn atomic_arrived(&mut self, peer: Rank, a: AtomicArrival, operands: [u8; 16]) {
        let p = &mut self.peers[peer as usize];
        // The initiator has the answers below the highest "lowest unanswered id" it has sent
        // (a frame resent after a rail failure carries the lower one it was first sent with:
        // its own id may be answered and forgotten here since).
        p.atomic_floor = p.atomic_floor.max(a.lowest);
        let floor = p.atomic_floor;
        if p.answers.first_key_value().is_some_and(|(&k, _)| k < floor) {
            p.answers = p.answers.split_off(&floor);
        }
        if a.id < floor {
            return;
        }
        let got = match p.answers.get(&a.id) {
            Some(&got) => got,
            None => {
                let operand = u64::from_le_bytes(operands[..8].try_into().unwrap());
                let compare = u64::from_le_bytes(operands[8..].try_into().unwrap());
                let got = match (AtomicOp::from_code(a.op), AtomicType::from_code(a.ty)) {
                    (Some(op), Some(ty)) => match self.regions.as_mut() {
                        Some(r) => r.atomic(a.key, a.addr, op, ty, operand, compare),
                        None => Err(RmaRefusal::NoRegions),
                    },
                    _ => Err(RmaRefusal::Unsupported),
                };
                let p = &mut self.peers[peer as usize];
                if p.answers.len() >= MAX_ANSWERS {
                    // Only a peer that broke its limit (see `atomic`) gets here: forgetting an
                    // answer could apply an atomic twice, so this one is not answered.
                    return;
                }
                p.answers.insert(a.id, got);
                got
            }
        };
        let mut h = FrameHeader::new(FrameKind::AtomicAnswer);
        h.seq = a.id;
        match got {
            Ok(old) => h.value = old,
            Err(why) => {
                h.flags = FLAG_REFUSED;
                h.data = why.code();
            }
        }
        let rail = self.pick_rail(peer);
        self.enqueue_on(peer, rail, TxItem::new(h, TxBody::None, None));
    }

    /// The target's answer to an atomic of ours (a second one, after a rail failure, finds
    /// nothing waiting).
    pub(crate) fn atomic_answered(&mut self, peer: Rank, h: &FrameHeader) {
        let Some(w) = self.peers[peer as usize].atomics.remove(&h.seq) else {
            return;
        };
        let got = if h.flags & FLAG_REFUSED != 0 {
            Err(RmaRefusal::from_code(h.data))
        } else {
            Ok(h.value)
        };
        self.atomic_done(peer, w, got);
    }

    fn atomic_done(&mut self, peer: Rank, w: AtomicWait, got: Result<u64, RmaRefusal>) {
        let c = match got {
            Ok(old) => {
                if let Some(r) = self.reqs.get_mut(w.req) {
                    let out = r.buf.as_mut_slice();
                    let n = out.len().min(w.width);
                    out[..n].copy_from_slice(&old.to_le_bytes()[..n]);
                }
                Completion::Done(Status {
                    source: peer,
                    src_ep: 0,
                    tag: w.key,
                    len: w.width,
                    truncated: false,
                    data: Some(old),
                })
            }
            Err(why) => Completion::Failed(ProtoError::Refused {
                peer,
                key: w.key,
                len: w.width,
                why,
            }),
        };
        self.complete(w.req, c);
    }

    /// The driver no longer lends region `key` (its registration is closed; the memory may be
    /// freed next). Peers' accesses to it still under way stop touching it: a read's answer
    /// finishes on a copy of the bytes, a write's remaining data is received and dropped (it
    /// completes for the writer, as a write racing a close may). A direct copy the peer was
    /// offered into it cannot be called back. Returns how many accesses were cut loose.
    pub fn release_region(&mut self, key: u64) -> usize {
        let mut n = 0;
        for (_, r) in self.reqs.iter_mut() {
            if r.completion != Completion::Pending {
                continue;
            }
            match &mut r.kind {
                ReqKind::Send(s) if s.region == Some(key) => {
                    s.region = None;
                    r.buf = B::owned(r.buf.as_slice().to_vec());
                    n += 1;
                }
                ReqKind::Recv(rv) if rv.rma_write.is_some_and(|(k, _)| k == key) => {
                    rv.rma_write = None;
                    r.buf = B::owned(vec![0; r.buf.as_slice().len()]);
                    n += 1;
                }
                _ => {}
            }
        }
        n
    }

    /// An eager write of ours that the target refused (a Cts with no write waiting for it):
    /// the target decides when the header arrives, possibly before the whole frame has left
    /// here, and the frame still reads the request's buffer until it has.
    pub(crate) fn eager_write_refused(&mut self, peer: Rank, seq: u64, req: ReqId, code: u64) {
        self.peers[peer as usize].delivery_wait.remove(&seq);
        if let Some(Request {
            kind: ReqKind::Send(s),
            ..
        }) = self.reqs.get_mut(req)
        {
            if s.delivery == Delivery::Waiting {
                // Failed by eager_sent once the frame is out.
                s.delivery = Delivery::Refused(code);
                return;
            }
        }
        self.fail_refused_write(peer, req, code);
    }

    /// A write of ours that the target refused (its Cts said so).
    pub(crate) fn write_refused(&mut self, peer: Rank, seq: u64, req: ReqId, code: u64) {
        // A write over a lossless link waited for the target's word too.
        self.peers[peer as usize].delivery_wait.remove(&seq);
        self.fail_refused_write(peer, req, code);
    }

    /// Fails write `req` to `peer` with the target's refusal `code`.
    pub(crate) fn fail_refused_write(&mut self, peer: Rank, req: ReqId, code: u64) {
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
        for kind in [FrameKind::Rts, FrameKind::Eager] {
            let mut c = Cluster::new(2, 1, Config::default(), 3);
            let mut h = FrameHeader::new(kind);
            h.flags = FLAG_READ;
            h.tag = 42;
            h.value = 10;
            let mut bytes = h.to_bytes().to_vec();
            if kind == FrameKind::Eager {
                h.payload_len = 10;
                bytes = h.to_bytes().to_vec();
                bytes.extend_from_slice(&[0; 10]);
            }
            c.inject(1, 0, 0, &bytes);
            let err = loop {
                match c.step() {
                    Err(e) => break e,
                    Ok(false) => panic!("accepted"),
                    Ok(true) => {}
                }
            };
            assert!(err.to_string().contains("read answer for no read"), "{err}");
        }
    }

    /// Everything `from` has queued for `to` on rail 0, handed to `to` as read from rail 0;
    /// returns the headers of the frames that went.
    fn exchange(cores: &mut [Core<Vec<u8>>; 2], from: usize, to: usize) -> Vec<FrameHeader> {
        let mut bytes = Vec::new();
        loop {
            let mut iov = [std::io::IoSlice::new(&[]); 8];
            let n = cores[from].tx_iovecs(to as Rank, 0, &mut iov);
            if n == 0 {
                break;
            }
            let len: usize = iov[..n].iter().map(|s| s.len()).sum();
            for s in &iov[..n] {
                bytes.extend_from_slice(s);
            }
            cores[from].tx_done(to as Rank, 0, len);
        }
        // The headers, from the first whole frame on (a frame cut by an earlier partial
        // write continues first).
        let mut heads = Vec::new();
        let mut rest = &bytes[..];
        while let Ok((h, hlen)) = FrameHeader::parse(rest) {
            heads.push(h);
            rest = rest
                .get(hlen + h.payload_len as usize..)
                .unwrap_or_default();
        }
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let space = cores[to].rx_space(from as Rank, 0);
            let n = space.len().min(rest.len());
            space[..n].copy_from_slice(&rest[..n]);
            cores[to].rx_done(from as Rank, 0, n).unwrap();
            rest = &rest[n..];
        }
        heads
    }

    /// Two cores joined by one rail, lossless (shared memory) or not; rank 1 has `mem` as
    /// region 7, rank 0 tracks finished requests.
    fn joined(
        lossless: bool,
        mem: &std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    ) -> [Core<Vec<u8>>; 2] {
        let mut cores = [0u32, 1].map(|r| {
            let mut c = Core::new(r, 2, Config::default());
            c.set_rails(1 - r, 1);
            c.set_lossless(1 - r, lossless);
            c
        });
        cores[1].set_regions(Box::new(Mem(mem.clone())));
        cores[0].track_finished();
        cores
    }

    #[test]
    fn a_small_read_is_answered_with_its_bytes_in_one_round_trip() {
        for lossless in [true, false] {
            let mem = std::sync::Arc::new(std::sync::Mutex::new(
                (0..=255u8).cycle().take(1 << 20).collect::<Vec<u8>>(),
            ));
            let mut cores = joined(lossless, &mem);
            let limit = Config::default().eager_limit;
            for (len, eager) in [(8, true), (limit, true), (limit + 1, false)] {
                let r = cores[0].read(1, 7, 3, vec![0; len]).unwrap();
                let asked = exchange(&mut cores, 0, 1);
                assert_eq!(asked[0].flags, FLAG_RMA | FLAG_READ);
                let answer = exchange(&mut cores, 1, 0);
                let kind = if eager {
                    FrameKind::Eager
                } else {
                    FrameKind::Rts
                };
                assert_eq!(
                    (answer[0].kind, answer[0].flags),
                    (kind, FLAG_READ),
                    "{len}"
                );
                assert_eq!(answer[0].tag, asked[0].seq, "names the read");
                if !eager {
                    // The reader pulls the data: a second round trip.
                    assert!(cores[0].is_pending(r));
                    exchange(&mut cores, 0, 1);
                    exchange(&mut cores, 1, 0);
                }
                let (done, got) = cores[0].take(r).unwrap();
                assert!(
                    matches!(done, Completion::Done(s) if s.len == len && s.tag == 7),
                    "{len}: {done:?}"
                );
                assert_eq!(got[..], mem.lock().unwrap()[3..3 + len], "{len}");
                // Acknowledgements and credit back, so nothing stays logged.
                exchange(&mut cores, 0, 1);
                exchange(&mut cores, 1, 0);
            }
            cores[1].take_finished(&mut Vec::new());
            assert_eq!(
                cores[1].live_requests(),
                0,
                "the target's requests are freed"
            );
        }
    }

    #[test]
    fn a_small_write_completes_in_one_round_trip() {
        for lossless in [true, false] {
            let mem = std::sync::Arc::new(std::sync::Mutex::new(vec![0u8; 1 << 20]));
            let mut cores = joined(lossless, &mem);
            let limit = Config::default().eager_limit;
            for (len, key, eager) in [
                (8, 7, true),
                (limit, 7, true),
                (limit + 1, 7, false),
                (8, 9, true),
            ] {
                let body: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8).collect();
                let r = cores[0].write(1, key, 5, body.clone()).unwrap();
                let asked = exchange(&mut cores, 0, 1);
                let kind = if eager {
                    FrameKind::Eager
                } else {
                    FrameKind::Rts
                };
                assert_eq!((asked[0].kind, asked[0].flags), (kind, FLAG_RMA), "{len}");
                if !eager {
                    // The target's Cts, then the data: a second round trip.
                    exchange(&mut cores, 1, 0);
                    exchange(&mut cores, 0, 1);
                }
                assert!(
                    cores[0].is_pending(r),
                    "{len}: done before the target said so"
                );
                cores[1].release_words();
                let answer = exchange(&mut cores, 1, 0);
                let (done, _) = cores[0].take(r).unwrap();
                if key == 9 {
                    assert!(
                        answer
                            .iter()
                            .any(|h| (h.kind, h.flags) == (FrameKind::Cts, FLAG_REFUSED)),
                        "{answer:?}"
                    );
                    assert!(
                        answer.iter().all(|h| h.kind != FrameKind::Delivered),
                        "a refused write is not said to be placed: {answer:?}"
                    );
                    assert!(
                        matches!(
                            done,
                            Completion::Failed(ProtoError::Refused {
                                why: RmaRefusal::UnknownKey,
                                ..
                            })
                        ),
                        "{done:?}"
                    );
                    continue;
                }
                assert!(
                    matches!(done, Completion::Done(s) if s.len == len),
                    "{len}: {done:?}"
                );
                if eager {
                    assert!(
                        answer.iter().any(|h| h.kind == FrameKind::Delivered),
                        "{len}: {answer:?}"
                    );
                }
                // Placed when the target's driver takes its finished requests.
                cores[1].take_finished(&mut Vec::new());
                assert_eq!(mem.lock().unwrap()[5..5 + len], body[..], "{len}");
                exchange(&mut cores, 0, 1);
                exchange(&mut cores, 1, 0);
            }
            cores[1].take_finished(&mut Vec::new());
            assert_eq!(
                cores[1].live_requests(),
                0,
                "the target's requests are freed"
            );
        }
    }

    /// The target refuses an eager write when its header arrives, which may be before the
    /// whole frame has left the writer: the write fails only once it has (the frame reads the
    /// request's buffer until then), and the rail goes on.
    #[test]
    fn an_eager_write_refused_mid_frame_fails_once_its_frame_is_out() {
        for lossless in [true, false] {
            let mem = std::sync::Arc::new(std::sync::Mutex::new(vec![0u8; 1 << 16]));
            let mut cores = joined(lossless, &mem);
            let r = cores[0].write(1, 9, 0, vec![5; 20_000]).unwrap();
            // The header and a little of the payload leave; the target reads them.
            let mut part = Vec::new();
            {
                let mut iov = [std::io::IoSlice::new(&[]); 8];
                let n = cores[0].tx_iovecs(1, 0, &mut iov);
                for s in &iov[..n] {
                    part.extend_from_slice(s);
                }
            }
            part.truncate(300);
            cores[0].tx_done(1, 0, part.len());
            let space = cores[1].rx_space(0, 0);
            space[..part.len()].copy_from_slice(&part);
            cores[1].rx_done(0, 0, part.len()).unwrap();
            let answer = exchange(&mut cores, 1, 0);
            assert!(answer.iter().any(|h| h.flags == FLAG_REFUSED), "{answer:?}");
            assert!(
                cores[0].is_pending(r),
                "failed while its frame was still being written"
            );
            // The rest of the frame goes, and behind it a message.
            cores[0].send(1, 0, 0, 3, vec![7; 10]).unwrap();
            let rx = cores[1].recv(0, Some(0), Some(3), vec![0; 10]).unwrap();
            exchange(&mut cores, 0, 1);
            assert_eq!(
                cores[1].take(rx).unwrap().1,
                vec![7; 10],
                "the rail went on"
            );
            let (done, _) = cores[0].take(r).unwrap();
            assert!(
                matches!(
                    done,
                    Completion::Failed(ProtoError::Refused {
                        why: RmaRefusal::UnknownKey,
                        ..
                    })
                ),
                "{done:?}"
            );
            exchange(&mut cores, 1, 0);
        }
    }

    #[test]
    fn an_eager_read_answer_of_another_length_is_a_violation() {
        let mut cores = [0u32, 1].map(|r| {
            let mut c = Core::<Vec<u8>>::new(r, 2, Config::default());
            c.set_rails(1 - r, 1);
            c
        });
        cores[0].track_finished();
        let _r = cores[0].read(1, 7, 0, vec![0; 16]).unwrap();
        let asked = exchange(&mut cores, 0, 1);
        let mut h = FrameHeader::new(FrameKind::Eager);
        h.flags = FLAG_READ;
        h.tag = asked[0].seq;
        h.value = 17;
        h.payload_len = 17;
        let mut bytes = h.to_bytes().to_vec();
        bytes.extend_from_slice(&[1; 17]);
        let space = cores[0].rx_space(1, 0);
        space[..bytes.len()].copy_from_slice(&bytes);
        let err = cores[0].rx_done(1, 0, bytes.len()).unwrap_err();
        assert!(
            err.to_string().contains("read answer of another length"),
            "{err}"
        );
    }

    #[test]
    fn atomics_of_a_peer_and_of_itself() {
        let (mut c, mem) = pair();
        mem.lock().unwrap()[16..24].copy_from_slice(&40u64.to_le_bytes());
        let add = |c: &mut Cluster, on: u32, n: u64| {
            let r = c.cores[0]
                .atomic(on, 7, 16, AtomicOp::Sum, AtomicType::U64, n, 0, vec![0; 8])
                .unwrap();
            finish(c, r)
        };
        let (done, old) = add(&mut c, 1, 2);
        assert!(matches!(done, Completion::Done(s) if s.data == Some(40)));
        assert_eq!(old, 40u64.to_le_bytes());
        let r = c.cores[0]
            .atomic(
                1,
                7,
                16,
                AtomicOp::Cswap,
                AtomicType::U32,
                9,
                42,
                Vec::new(),
            )
            .unwrap();
        assert!(matches!(finish(&mut c, r).0, Completion::Done(s) if s.data == Some(42)));
        assert_eq!(mem.lock().unwrap()[16..20], 9u32.to_le_bytes());
        // Refused: no such key; and a process without regions.
        let r = c.cores[0]
            .atomic(1, 8, 16, AtomicOp::Sum, AtomicType::U64, 1, 0, vec![0; 8])
            .unwrap();
        assert!(matches!(
            finish(&mut c, r).0,
            Completion::Failed(ProtoError::Refused {
                why: RmaRefusal::UnknownKey,
                ..
            })
        ));
        let r = c.cores[0]
            .atomic(0, 7, 16, AtomicOp::Read, AtomicType::U64, 0, 0, vec![0; 8])
            .unwrap();
        assert!(matches!(
            c.cores[0].poll(r),
            Some(Completion::Failed(ProtoError::Refused {
                why: RmaRefusal::NoRegions,
                ..
            }))
        ));
        // Its own memory.
        let r = c.cores[1]
            .atomic(1, 7, 16, AtomicOp::Read, AtomicType::U64, 0, 0, vec![0; 8])
            .unwrap();
        assert!(matches!(c.cores[1].poll(r), Some(Completion::Done(s)) if s.data == Some(9)));
        assert_eq!(c.cores[1].live_requests(), 1);
    }

    #[test]
    fn an_atomic_of_an_unknown_kind_is_refused_not_applied() {
        let (mut c, mem) = pair();
        let before = mem.lock().unwrap().clone();
        let mut h = FrameHeader::new(FrameKind::Atomic);
        h.src_ep = 999;
        h.tag = 7;
        h.payload_len = 16;
        let mut bytes = h.to_bytes().to_vec();
        bytes.extend_from_slice(&[1; 16]);
        c.cores[0].track_finished();
        // An id the initiator never used: its answer is dropped there, nothing fails.
        c.inject(0, 1, 0, &bytes);
        c.run_until(100_000, |_| false).unwrap();
        assert!(*mem.lock().unwrap() == before);
    }

    #[test]
    fn an_atomic_resent_after_its_answer_was_forgotten_is_not_applied_again() {
        let (mut c, mem) = pair();
        // No acknowledgements of the frames made up here.
        c.enable_lossless();
        let atomic = |id: u64, lowest: u64| {
            let mut h = FrameHeader::new(FrameKind::Atomic);
            h.seq = id;
            h.src_ep = AtomicOp::Sum.code();
            h.dst_ep = AtomicType::U64.code();
            h.tag = 7;
            h.data = 64;
            h.value = lowest;
            h.payload_len = 16;
            let mut b = h.to_bytes().to_vec();
            b.extend_from_slice(&1u64.to_le_bytes());
            b.extend_from_slice(&0u64.to_le_bytes());
            b
        };
        let counter = |m: &std::sync::Mutex<Vec<u8>>| {
            u64::from_le_bytes(m.lock().unwrap()[64..72].try_into().unwrap())
        };
        let before = counter(&mem);
        // Atomic 5 applied; the initiator heard back and sent 6, saying it waits for nothing
        // below 6; then 5 comes again (resent from a broken rail, with its old "lowest").
        for frame in [atomic(5, 5), atomic(6, 6), atomic(5, 5), atomic(6, 5)] {
            c.inject(0, 1, 0, &frame);
            c.run_until(100_000, |_| false).unwrap();
        }
        assert_eq!(counter(&mem), before + 2, "each applied once");
    }

    #[test]
    fn a_region_released_mid_access_is_not_touched_again() {
        let (mut c, mem) = pair();
        let before = mem.lock().unwrap().clone();
        let r = c.cores[0].read(1, 7, 0, vec![0; 600_000]).unwrap();
        let w = c.cores[0].write(1, 7, 0, vec![9; 600_000]).unwrap();
        for _ in 0..40 {
            c.step().unwrap();
        }
        assert!(c.cores[1].release_region(7) > 0, "accesses under way");
        // The read finishes on what the region held; the write completes, nothing placed.
        let (done, got) = finish(&mut c, r);
        assert!(matches!(done, Completion::Done(_)));
        assert_eq!(got[..], before[..600_000]);
        assert!(matches!(finish(&mut c, w).0, Completion::Done(_)));
        assert!(*mem.lock().unwrap() == before);
        assert_eq!(c.cores[1].live_requests(), 0);
    }

    #[test]
    fn zero_bytes_complete_at_once() {
        let (mut c, _) = pair();
        let r = c.cores[0].read(1, 99, 0, Vec::new()).unwrap();
        assert!(matches!(c.cores[0].poll(r), Some(Completion::Done(_))));
        assert!(!c.step().unwrap(), "nothing to send");
    }
}
