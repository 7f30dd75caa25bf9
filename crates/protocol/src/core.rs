//! Requests, matching and sequencing: the state that one process keeps about all its peers.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use rustc_hash::FxHashSet;

use hx_wire::{FrameHeader, FrameKind};

use crate::rx::{Dest, RxState};
use crate::slab::{Handle, Slab};
use crate::tx::{Body as TxBody, TxItem};
use crate::{Buffer, Completion, Config, EpId, Policy, ProtoError, Rank, ReqId, Status};

pub(crate) struct Request<B> {
    pub buf: B,
    pub kind: ReqKind,
    pub completion: Completion,
    /// Nobody will ask for it: freed when it finishes instead of reported.
    pub detached: bool,
}

pub(crate) enum ReqKind {
    Send(SendState),
    Recv(RecvState),
}

pub(crate) struct SendState {
    pub peer: Rank,
    /// Rendezvous payload bytes the receiver has not acknowledged yet.
    pub unacked: usize,
    /// An eager send that completes once the receiver says it has the message.
    pub delivery: Delivery,
    /// For its status, whichever way it completes.
    pub src_ep: EpId,
    pub tag: u64,
    /// The answer to a peer's read of our region with this key (see `rma.rs`).
    pub region: Option<u64>,
}

/// Where an eager send that waits for the receiver's word (a delivery-complete send) stands:
/// it completes once it is both sent (written, or acknowledged on a lossy rail) and told.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Delivery {
    /// A send that does not wait for it.
    NotAsked,
    Waiting,
    Sent,
    Told,
    /// An eager write the target refused (the reason's code) before its frame had all left:
    /// it fails once it has, so its buffer is not read after its completion.
    Refused(u64),
}

pub(crate) struct RecvState {
    pub ep: EpId,
    /// What it takes (also in its posted entry, which matching reads): kept for failures
    /// of its source and for stall dumps.
    pub src: Option<Rank>,
    pub tag: TagMatch,
    /// Set when matched.
    pub status: Option<Status>,
    /// Payload bytes (as sent) still to arrive.
    pub unreceived: usize,
    /// `(peer, seq)` of the rendezvous this receive is the target of.
    pub rdv: Option<(Rank, u64)>,
    /// Offsets of the data chunks received in full (resent chunks are counted once). Boxed
    /// and made on the first chunk: most receives are eager and never need it, and a
    /// SipHash set costs its keys and 48 bytes in every request.
    #[allow(clippy::box_collection)] // 8 bytes in every request instead of 48
    pub chunks: Option<Box<HashSet<u64>>>,
    /// A peer's write into our region (key, address): the buffer goes back to the driver's
    /// [`Regions`](crate::Regions) when it is placed (`None` once the region was released).
    pub rma_write: Option<(u64, u64)>,
    /// A peer's write, released or not: a writer that waits for our word gets it.
    pub rma_target: bool,
}

/// A message that arrived before a matching receive was posted, or before its turn in sequence.
pub(crate) struct Unexp {
    pub src: Rank,
    pub src_ep: EpId,
    pub dst_ep: EpId,
    pub tag: u64,
    pub seq: u64,
    pub len: usize,
    /// Immediate data the sender attached.
    pub data: Option<u64>,
    pub body: Body,
    /// An eager frame of remote memory access, which goes to no receive.
    pub rma: EagerRma,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum EagerRma {
    No,
    /// The answer to a read of ours (`tag` the read's sequence number): into that read.
    ReadAnswer,
    /// A peer's write of `len` bytes at `addr` of its region `tag`: into that region.
    Write {
        addr: u64,
    },
}

pub(crate) enum Body {
    Eager {
        data: Vec<u8>,
        filled: usize,
        /// A receive matched it while its payload was still arriving.
        claimed: Option<ReqId>,
    },
    Rts,
    /// A remote memory access request or a read's answer (see `rma.rs`): the Rts's flags and
    /// the address it carries (a refusal's reason code in an answer).
    Rma {
        flags: u8,
        addr: u64,
    },
}

/// A send that left at once ([`Core::inline_request`]): done from the start, it needs only
/// what its status and its caller's buffer take.
pub(crate) struct InlineDone<B> {
    pub buf: B,
    pub tag: u64,
    pub src_ep: EpId,
}

/// Handles of [`InlineDone`] sends have this bit of the index set (a slab never reaches 2^31
/// slots, so no request's handle has it).
const INLINE_BIT: u32 = 1 << 31;

pub(crate) fn inline_handle(h: Handle) -> ReqId {
    Handle {
        idx: h.idx | INLINE_BIT,
        gen: h.gen,
    }
}

/// The [`InlineDone`] table's handle, if `req` is one of its.
#[inline]
fn inline_slot(req: ReqId) -> Option<Handle> {
    (req.idx & INLINE_BIT != 0).then_some(Handle {
        idx: req.idx & !INLINE_BIT,
        gen: req.gen,
    })
}

/// A posted receive with what it takes, so that matching an arriving message does not look
/// the request up (a slab lookup per receive looked at, on every small message's path).
#[derive(Clone, Copy)]
pub(crate) struct Posted {
    pub req: ReqId,
    pub filter: Filter,
}

#[derive(Default)]
pub(crate) struct EpQueues {
    pub posted: VecDeque<Posted>,
    pub unexpected: VecDeque<Handle>,
}

/// The queues of each endpoint, indexed by its id: looked up on every message's path (a hash
/// lookup was ~15 instructions, three or more per small message). Grown on first use; endpoint
/// ids are 16 bits, so even a peer naming every one costs at most 64 Ki empty entries (4 MiB).
#[derive(Default)]
pub(crate) struct EpTable(Vec<EpQueues>);

impl EpTable {
    #[inline]
    pub fn get(&self, ep: EpId) -> Option<&EpQueues> {
        self.0.get(ep as usize)
    }

    #[inline]
    pub fn get_mut(&mut self, ep: EpId) -> Option<&mut EpQueues> {
        self.0.get_mut(ep as usize)
    }

    #[inline]
    pub fn entry(&mut self, ep: EpId) -> &mut EpQueues {
        let i = ep as usize;
        if i >= self.0.len() {
            self.grow(i + 1);
        }
        &mut self.0[i]
    }

    #[cold]
    fn grow(&mut self, len: usize) {
        self.0.resize_with(len, EpQueues::default);
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut EpQueues> {
        self.0.iter_mut()
    }
}

/// Large-message data that rails pull chunk by chunk (adaptive policy).
pub(crate) struct PullJob {
    pub req: ReqId,
    pub seq: u64,
    pub next: usize,
    pub end: usize,
    /// A chunk handed back that may have been written before (resent after a rail broke):
    /// taken whole, not cut again, since the receiver knows chunks by their offset.
    pub whole: bool,
    /// `end` is the end of the message: the chunk that reaches it asks for an acknowledgement.
    pub last: bool,
}

pub(crate) struct Rail {
    pub up: bool,
    /// It has been connected, or found unreachable, at least once. Until then, bind waits for
    /// it instead of falling back to another rail.
    pub settled: bool,
    pub tx: VecDeque<TxItem>,
    /// Bytes queued on this rail and not yet written.
    pub queued: usize,
    pub tx_bytes: u64,
    /// Bytes read from this rail (by the byte-stream paths that a socket's reads take).
    pub rx_bytes: u64,
    /// Reliable frames written on this connection and not yet acknowledged, oldest first.
    pub log: VecDeque<TxItem>,
    /// Their bytes: roughly what is in flight on this rail (socket buffers and wire).
    pub log_bytes: usize,
    /// Frames of this connection the peer acknowledged / we wrote reliably.
    pub acked: u64,
    pub logged: u64,
    /// Reliable frames received on this connection, and the count last told to the peer.
    pub rcvd: u64,
    pub ack_sent: u64,
    pub ack_queued: bool,
    pub bytes_since_ack: usize,
    pub rx: RxState,
    /// The peer closed this rail in order (it sent Bye).
    pub bye: bool,
    /// Bytes the last `tx_iovecs` showed, until `tx_done` reports the write (0: none pending).
    pub offered: usize,
    /// Adaptive: the most bytes this rail pulls in the driver's current rounds of turns
    /// (`usize::MAX` outside them; see [`Core::tx_round`]), and what it pulled in them so far.
    pub turn_cap: usize,
    pub round_pulled: usize,
    /// Adaptive: what the link holds of what was written to it and has not delivered yet, as
    /// the driver last reported it ([`Core::set_link_backlog`]), and how fast it drains.
    pub link_backlog: usize,
    pub drain: DrainRate,
    pub keep_up: crate::keep_up::KeepUp,
}

/// A link's drain rate, measured between the driver's backlog reports while the link stays
/// busy: bytes written minus the backlog's growth, over the time between. Only while the
/// link reads little the other way, in that interval and the one before, and used only while
/// every link does (otherwise the rounds share equally): its acknowledgements wait behind
/// the other direction's data in the link's queues and arrive in bunches. Equal 1 Gbit/s
/// links measured both ways read 120 to 400 bytes/us, up to 2x apart, so one was weighed at
/// half the others and a stream of 64 KiB messages both ways went at 0.8x; a single sample
/// just after the other direction paused read 1,345, and kept the other three links at a
/// quarter until the next (rare, both ways) sample.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct DrainRate {
    /// Bytes per microsecond, smoothed (0: not measured yet).
    pub rate: f64,
    /// Where the interval being measured began: time (us), bytes written, backlog, bytes
    /// read from the link.
    pub at: u64,
    pub written: u64,
    pub backlog: usize,
    pub read: u64,
    /// The last interval read little the other way (and so may the next be measured).
    pub quiet: bool,
}

impl Rail {
    /// Adaptive: large messages are cut for it: it is up, or still connecting for the first
    /// time (otherwise the first rail to connect is a lone rail to the pull rules and takes a
    /// whole burst in whole chunks before the others are there).
    pub fn shares(&self) -> bool {
        self.up || !self.settled
    }
}

pub(crate) struct Peer {
    pub rails: Vec<Rail>,
    pub tx_seq: u64,
    pub rx_seq: u64,
    /// Arrivals ahead of `rx_seq`, held until their turn.
    pub reorder: BTreeMap<u64, Handle>,
    pub wait_cts: HashMap<u64, ReqId>,
    /// Eager delivery-complete sends by sequence number, waiting for the receiver's word:
    /// (request, source endpoint, tag).
    pub delivery_wait: HashMap<u64, (ReqId, EpId, u64)>,
    /// Sequence numbers of delivery-flagged messages taken since the last word back: held
    /// until something else goes to the peer (carrying them in the same write) or the driver's
    /// next write ([`release_words`](Core::release_words)).
    pub words_back: Vec<u64>,
    pub rdv_recv: HashMap<u64, ReqId>,
    /// Reads of the peer's memory we asked for, by the request's sequence number, waiting for
    /// its answer.
    pub rma_reads: HashMap<u64, crate::rma::ReadWait>,
    /// Atomics of ours on the peer's memory, by id, waiting for its answer; and the next id.
    pub atomics: BTreeMap<u64, crate::rma::AtomicWait>,
    pub atomic_next: u64,
    /// What we answered to the peer's atomics that it may not have heard yet, by id.
    pub answers: BTreeMap<u64, Result<u64, crate::RmaRefusal>>,
    /// The highest lowest-unanswered id the peer has sent with its atomics: below it, it has
    /// every answer.
    pub atomic_floor: u64,
    /// Rendezvous receives (by seq) whose buffer was offered for a direct copy: only these may
    /// be completed by a FIN.
    pub direct_granted: HashSet<u64>,
    pub pull_q: VecDeque<PullJob>,
    pub rr_next: usize,
    pub failed: Option<String>,
    pub dirty: bool,
    /// Frames waiting for a rail while every rail to the peer is down.
    pub parked: VecDeque<TxItem>,
    /// Eager payloads cut off by a rail failure, by sequence number: the resent copy goes there.
    pub incomplete: HashMap<u64, Dest>,
    /// Sender side: eager bytes sent, and the receiver's latest report of bytes it freed.
    pub credit_used: u64,
    pub credit_granted: u64,
    /// Receiver side: eager bytes from this peer freed, and the last count reported to it.
    pub consumed: u64,
    pub credit_sent: u64,
    /// Same host and direct copies allowed: rendezvous data may bypass the link.
    pub direct: bool,
    /// Its links never lose what they accepted (shared memory: a write is a delivery unless the
    /// peer dies, and then nothing could be resent anyway): no log, no acknowledgements.
    pub lossless: bool,
}

/// A rendezvous message the driver should copy straight into the receiver's memory (same host:
/// `process_vm_writev`), then report with [`Core::direct_done`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectWrite {
    pub peer: Rank,
    /// Address of the receive buffer in the peer process.
    pub remote_addr: u64,
    /// Bytes to copy (the message, or the receiver's capacity if that is smaller).
    pub len: usize,
    pub(crate) req: ReqId,
    pub(crate) seq: u64,
    pub(crate) msg_len: usize,
}

/// Counters for tests and reports.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub tx_bytes_per_rail: Vec<u64>,
}

impl Peer {
    /// Adaptive: a stream of large messages, enough waiting here or for their CTS to give every
    /// rail whole ones for a while (see `Core::pull_turn`).
    pub fn streaming(&self) -> bool {
        let rails = self.rails.iter().filter(|r| r.shares()).count();
        rails > 1 && self.pull_q.len() + self.wait_cts.len() >= 2 * rails
    }

    /// Adaptive: `rail`'s link carries writes as fast as they are made (the CPU, not the wire,
    /// is the limit; see [`KeepUp`](crate::keep_up::KeepUp)), and no link to this peer was
    /// lately seen slow: a token bucket that one rail ran dry, the others will too once they
    /// carry what it did.
    pub fn keeps_up(&self, rail: usize) -> bool {
        self.rails
            .get(rail)
            .is_some_and(|r| r.up && r.keep_up.keeps_up())
            && !self.rails.iter().any(|r| r.keep_up.slow())
    }

    fn new() -> Peer {
        Peer {
            rails: Vec::new(),
            tx_seq: 0,
            rx_seq: 0,
            reorder: BTreeMap::new(),
            wait_cts: HashMap::new(),
            delivery_wait: HashMap::new(),
            words_back: Vec::new(),
            rdv_recv: HashMap::new(),
            rma_reads: HashMap::new(),
            atomics: BTreeMap::new(),
            atomic_next: 0,
            answers: BTreeMap::new(),
            atomic_floor: 0,
            direct_granted: HashSet::new(),
            pull_q: VecDeque::new(),
            rr_next: 0,
            failed: None,
            dirty: false,
            parked: VecDeque::new(),
            incomplete: HashMap::new(),
            credit_used: 0,
            credit_granted: 0,
            consumed: 0,
            credit_sent: 0,
            direct: false,
            lossless: false,
        }
    }
}

/// The protocol state of one process. `B` is the caller's buffer type.
pub struct Core<B> {
    pub(crate) me: Rank,
    pub(crate) cfg: Config,
    pub(crate) peers: Vec<Peer>,
    pub(crate) reqs: Slab<Request<B>>,
    pub(crate) inline_done: Slab<InlineDone<B>>,
    pub(crate) unexp: Slab<Unexp>,
    pub(crate) eps: EpTable,
    pub(crate) dirty: Vec<Rank>,
    pub(crate) spare_bufs: Vec<Vec<u8>>,
    /// tx_round's per-rail figures (busy time, rate, rail), kept to spare an allocation a round.
    pub(crate) round_scratch: Vec<(f64, f64, usize)>,
    pub(crate) resends: u64,
    pub(crate) direct_q: VecDeque<DirectWrite>,
    /// Data of the message being sent to self (passed to `send_to_self`).
    pub(crate) self_data: Option<u64>,
    /// Held messages taken out of matching by `claim`.
    pub(crate) claimed: FxHashSet<Handle>,
    /// Requests finished since the driver last asked (only while tracking is on).
    pub(crate) finished: Option<Vec<ReqId>>,
    /// Peers with words back held (`Peer::words_back`), possibly sent since.
    pub(crate) words_peers: Vec<Rank>,
    /// Memory peers may read and write (remote memory access), if the driver lends any.
    pub(crate) regions: Option<Box<dyn crate::Regions<B>>>,
}

/// Adaptive: messages at least this long rotate over rails even when the pair is quiet.
const ROTATE_FROM: usize = 4 * 1024;
/// Adaptive: a rail whose queue exceeds the shortest by this much gets no new messages.
const BACKLOG_SLACK: usize = 256 * 1024;

/// Which tags a receive takes: those equal to `tag` in every bit not set in `ignore`
/// (libfabric's tag and ignore mask; MPI_ANY_TAG ignores the tag bits of a tag that also
/// carries the communicator).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagMatch {
    pub tag: u64,
    pub ignore: u64,
}

impl TagMatch {
    pub const ANY: TagMatch = TagMatch {
        tag: 0,
        ignore: u64::MAX,
    };

    #[inline]
    pub fn exact(tag: u64) -> TagMatch {
        TagMatch { tag, ignore: 0 }
    }

    /// `None` is any tag.
    #[inline]
    pub fn from_option(tag: Option<u64>) -> TagMatch {
        tag.map_or(TagMatch::ANY, TagMatch::exact)
    }

    #[inline]
    pub fn matches(&self, tag: u64) -> bool {
        (self.tag ^ tag) & !self.ignore == 0
    }
}

/// Which messages a receive (or probe) takes: source, source endpoint, tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Filter {
    pub src: Option<Rank>,
    pub src_ep: Option<EpId>,
    pub tag: TagMatch,
}

impl Filter {
    #[inline]
    pub fn new(src: Option<Rank>, tag: Option<u64>) -> Filter {
        Filter {
            src,
            src_ep: None,
            tag: TagMatch::from_option(tag),
        }
    }

    fn takes(&self, u: &Unexp) -> bool {
        self.takes_from(u.src, u.src_ep, u.tag)
    }

    /// Does it take a message from `src`'s endpoint `src_ep` with `tag`?
    #[inline]
    pub fn takes_from(&self, src: Rank, src_ep: EpId, tag: u64) -> bool {
        self.src.is_none_or(|s| s == src)
            && self.src_ep.is_none_or(|e| e == src_ep)
            && self.tag.matches(tag)
    }
}

impl<B: Buffer> Core<B> {
    pub fn new(me: Rank, size: u32, cfg: Config) -> Self {
        let peers = (0..size).map(|_| Peer::new()).collect();
        Core {
            me,
            cfg,
            peers,
            reqs: Slab::new(),
            inline_done: Slab::new(),
            unexp: Slab::new(),
            eps: EpTable::default(),
            dirty: Vec::new(),
            spare_bufs: Vec::new(),
            round_scratch: Vec::new(),
            resends: 0,
            direct_q: VecDeque::new(),
            finished: None,
            words_peers: Vec::new(),
            claimed: FxHashSet::default(),
            self_data: None,
            regions: None,
        }
    }

    pub fn rank(&self) -> Rank {
        self.me
    }

    pub fn size(&self) -> u32 {
        self.peers.len() as u32
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Adds a peer, reached over no rail yet; returns its number (the next after the last).
    pub fn add_peer(&mut self) -> Rank {
        self.peers.push(Peer::new());
        (self.peers.len() - 1) as Rank
    }

    /// Declares that `peer` is reached over `n` rails that are not connected yet: frames to it
    /// wait (parked) until [`rail_up`](Self::rail_up) puts the first in service.
    pub fn set_rails_down(&mut self, peer: Rank, n: usize) {
        self.set_rails(peer, n);
        for r in &mut self.peers[peer as usize].rails {
            r.up = false;
            r.settled = false;
        }
    }

    /// Declares that `peer` is reached over `n` rails (numbered 0..n).
    pub fn set_rails(&mut self, peer: Rank, n: usize) {
        let stage = self.cfg.stage_size;
        let p = &mut self.peers[peer as usize];
        p.rails = (0..n)
            .map(|_| Rail {
                up: true,
                settled: true,
                tx: VecDeque::new(),
                queued: 0,
                tx_bytes: 0,
                rx_bytes: 0,
                log: VecDeque::new(),
                log_bytes: 0,
                acked: 0,
                logged: 0,
                rcvd: 0,
                ack_sent: 0,
                ack_queued: false,
                bytes_since_ack: 0,
                rx: RxState::new(stage),
                bye: false,
                offered: 0,
                turn_cap: usize::MAX,
                round_pulled: 0,
                link_backlog: 0,
                drain: DrainRate::default(),
                keep_up: crate::keep_up::KeepUp::default(),
            })
            .collect();
    }

    pub fn rails(&self, peer: Rank) -> usize {
        self.peers[peer as usize].rails.len()
    }

    pub fn stats(&self, peer: Rank) -> Stats {
        Stats {
            tx_bytes_per_rail: self.peers[peer as usize]
                .rails
                .iter()
                .map(|r| r.tx_bytes)
                .collect(),
        }
    }

    pub(crate) fn check_peer(&self, peer: Rank) -> Result<(), ProtoError> {
        if peer as usize >= self.peers.len() {
            return Err(ProtoError::Invalid(format!(
                "rank {peer} out of range (job size {})",
                self.peers.len()
            )));
        }
        if peer != self.me && self.peers[peer as usize].rails.is_empty() {
            return Err(ProtoError::Invalid(format!("no rail to rank {peer}")));
        }
        Ok(())
    }

    /// Starts sending `buf` to endpoint `dst_ep` of `peer`. The buffer stays with the request until
    /// it completes.
    pub fn send(
        &mut self,
        peer: Rank,
        src_ep: EpId,
        dst_ep: EpId,
        tag: u64,
        buf: B,
    ) -> Result<ReqId, ProtoError> {
        self.send_with_data(peer, src_ep, dst_ep, tag, None, buf)
    }

    /// As [`send`](Self::send), with immediate data the receiver gets in its status.
    pub fn send_with_data(
        &mut self,
        peer: Rank,
        src_ep: EpId,
        dst_ep: EpId,
        tag: u64,
        data: Option<u64>,
        buf: B,
    ) -> Result<ReqId, ProtoError> {
        self.start_send(peer, src_ep, dst_ep, tag, data, buf, false)
    }

    /// As [`send_with_data`](Self::send_with_data), completing only once the receiver has
    /// the message (libfabric's FI_DELIVERY_COMPLETE): an eager one carries
    /// [`FLAG_DELIVERY`](hx_wire::FLAG_DELIVERY) and completes when the receiver's
    /// [`Delivered`](FrameKind::Delivered) comes back (it has taken the message into a receive
    /// or holds it until one comes); a rendezvous one completes, as always, once its data is in
    /// the receive buffer. A send to this very rank is held as a message that came, and
    /// completes at once.
    pub fn send_delivered(
        &mut self,
        peer: Rank,
        src_ep: EpId,
        dst_ep: EpId,
        tag: u64,
        data: Option<u64>,
        buf: B,
    ) -> Result<ReqId, ProtoError> {
        self.start_send(peer, src_ep, dst_ep, tag, data, buf, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn start_send(
        &mut self,
        peer: Rank,
        src_ep: EpId,
        dst_ep: EpId,
        tag: u64,
        data: Option<u64>,
        buf: B,
        delivery: bool,
    ) -> Result<ReqId, ProtoError> {
        self.check_peer(peer)?;
        let len = buf.as_slice().len();
        if len > u32::MAX as usize * 16 {
            return Err(ProtoError::Invalid(format!(
                "message of {len} bytes too large"
            )));
        }
        let req = self.reqs.insert(Request {
            detached: false,
            buf,
            kind: ReqKind::Send(SendState {
                peer,
                unacked: len,
                delivery: Delivery::NotAsked,
                src_ep,
                tag,
                region: None,
            }),
            completion: Completion::Pending,
        });
        if let Some(reason) = &self.peers[peer as usize].failed {
            let err = ProtoError::PeerFailed {
                peer,
                reason: reason.clone(),
            };
            self.reqs.get_mut(req).unwrap().completion = Completion::Failed(err);
            if let Some(f) = &mut self.finished {
                f.push(req);
            }
            return Ok(req);
        }
        if peer == self.me {
            self.self_data = data;
            self.send_to_self(req, src_ep, dst_ep, tag);
            return Ok(req);
        }
        let p = &mut self.peers[peer as usize];
        let seq = p.tx_seq;
        p.tx_seq += 1;
        let mut h = FrameHeader::new(FrameKind::Eager);
        h.src_ep = src_ep;
        h.dst_ep = dst_ep;
        h.seq = seq;
        h.tag = tag;
        h.value = len as u64;
        if let Some(d) = data {
            h.flags |= hx_wire::FLAG_DATA;
            h.data = d;
        }
        let rail = self.pick_rail_for(peer, len);
        if self.eager_credit(peer, len) {
            h.payload_len = len as u32;
            if delivery {
                h.flags |= hx_wire::FLAG_DELIVERY;
                self.wait_for_word(peer, seq, req, src_ep, tag);
            }
            self.enqueue_on(
                peer,
                rail,
                TxItem::new(h, TxBody::Req(req, 0, len), Some(req)),
            );
        } else {
            h.kind = FrameKind::Rts;
            self.peers[peer as usize].wait_cts.insert(seq, req);
            self.enqueue_on(peer, rail, TxItem::new(h, TxBody::None, None));
        }
        Ok(req)
    }

    /// Send `req` (sequence number `seq` to `peer`) completes only once the target's
    /// `Delivered` word for it comes, besides having left.
    pub(crate) fn wait_for_word(
        &mut self,
        peer: Rank,
        seq: u64,
        req: ReqId,
        src_ep: EpId,
        tag: u64,
    ) {
        self.peers[peer as usize]
            .delivery_wait
            .insert(seq, (req, src_ep, tag));
        if let Some(Request {
            kind: ReqKind::Send(s),
            ..
        }) = self.reqs.get_mut(req)
        {
            s.delivery = Delivery::Waiting;
        }
    }

    /// May `len` bytes go to `peer` eagerly (within the eager limit and the memory it lent us
    /// for held messages)? If so, that memory is taken.
    pub(crate) fn eager_credit(&mut self, peer: Rank, len: usize) -> bool {
        let p = &mut self.peers[peer as usize];
        let cost = len as u64 + crate::EAGER_OVERHEAD;
        let eager = len <= self.cfg.eager_limit
            && p.credit_used + cost <= self.cfg.eager_credits as u64 + p.credit_granted;
        if eager {
            p.credit_used += cost;
        }
        eager
    }

    /// Send `req` (from `src_ep`, tagged `tag`) is complete: its whole buffer left.
    pub(crate) fn send_done(&mut self, req: ReqId, src_ep: EpId, tag: u64) {
        if let Some(r) = self.reqs.get_mut(req) {
            r.completion = Completion::Done(Status {
                source: self.me,
                src_ep,
                tag,
                len: r.buf.as_slice().len(),
                truncated: false,
                data: None,
            });
            if let Some(f) = &mut self.finished {
                f.push(req);
            }
        }
    }

    fn send_to_self(&mut self, req: ReqId, src_ep: EpId, dst_ep: EpId, tag: u64) {
        let r = self.reqs.get_mut(req).unwrap();
        let len = r.buf.as_slice().len();
        let mut data = self.spare_bufs.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(r.buf.as_slice());
        self.send_done(req, src_ep, tag);
        let u = self.unexp.insert(Unexp {
            src: self.me,
            src_ep,
            dst_ep,
            tag,
            seq: 0,
            len,
            data: self.self_data.take(),
            body: Body::Eager {
                data,
                filled: len,
                claimed: None,
            },
            rma: EagerRma::No,
        });
        self.deliver_in_order(u);
    }

    /// Posts a receive on endpoint `ep` for a message from `src` (any if `None`) with tag `tag`
    /// (any if `None`).
    pub fn recv(
        &mut self,
        ep: EpId,
        src: Option<Rank>,
        tag: Option<u64>,
        buf: B,
    ) -> Result<ReqId, ProtoError> {
        self.recv_matching(ep, Filter::new(src, tag), buf)
    }

    /// Posts a receive for the messages `filter` takes.
    pub fn recv_matching(&mut self, ep: EpId, filter: Filter, buf: B) -> Result<ReqId, ProtoError> {
        let Filter { src, tag, .. } = filter;
        if let Some(s) = src {
            if s as usize >= self.peers.len() {
                return Err(ProtoError::Invalid(format!(
                    "source rank {s} out of range (job size {})",
                    self.peers.len()
                )));
            }
        }
        let req = self.reqs.insert(Request {
            detached: false,
            buf,
            kind: ReqKind::Recv(RecvState {
                ep,
                src,
                tag,
                status: None,
                unreceived: 0,
                rdv: None,
                chunks: None,
                rma_write: None,
                rma_target: false,
            }),
            completion: Completion::Pending,
        });
        // (A receive from any source posted after every peer failed waits: in an open process
        // a new peer may still come, and only the pending ones are failed, in fail_peer.)
        let dead = src.and_then(|s| self.peers[s as usize].failed.clone().map(|r| (s, r)));
        let q = self.eps.entry(ep);
        let found = q
            .unexpected
            .iter()
            .position(|&u| filter.takes(self.unexp.get(u).unwrap()));
        match found {
            Some(i) => {
                let u = q.unexpected.remove(i).unwrap();
                self.match_unexp(u, req);
            }
            None => {
                if let Some((s, reason)) = dead {
                    let err = ProtoError::PeerFailed { peer: s, reason };
                    self.reqs.get_mut(req).unwrap().completion = Completion::Failed(err);
                    if let Some(f) = &mut self.finished {
                        f.push(req);
                    }
                    return Ok(req);
                }
                q.posted.push_back(Posted { req, filter });
            }
        }
        Ok(req)
    }

    /// When this process has peers and every one of them has failed: one of them and why.
    fn all_others_failed(&self) -> Option<(Rank, String)> {
        let mut last = None;
        for (i, p) in self.peers.iter().enumerate() {
            if i as Rank == self.me {
                continue;
            }
            last = Some((i as Rank, p.failed.clone()?));
        }
        last
    }

    /// Where a request stands. A send that left at once without tracking of finished
    /// requests ([`inline_request`](Self::inline_request)) is not here: [`done`](Self::done)
    /// and [`take`](Self::take) know it.
    pub fn poll(&self, req: ReqId) -> Option<&Completion> {
        self.reqs.get(req).map(|r| &r.completion)
    }

    /// Whether a request has finished (`None`: no such request).
    #[inline]
    pub fn done(&self, req: ReqId) -> Option<bool> {
        match inline_slot(req) {
            Some(h) => self.inline_done.get(h).map(|_| true),
            None => self
                .reqs
                .get(req)
                .map(|r| !matches!(r.completion, Completion::Pending)),
        }
    }

    pub fn is_pending(&self, req: ReqId) -> bool {
        matches!(self.poll(req), Some(Completion::Pending))
    }

    /// Removes a finished request and gives its buffer back. A pending request stays.
    #[inline]
    pub fn take(&mut self, req: ReqId) -> Option<(Completion, B)> {
        if let Some(h) = inline_slot(req) {
            let d = self.inline_done.remove(h)?;
            let st = Status {
                source: self.me,
                src_ep: d.src_ep,
                tag: d.tag,
                len: d.buf.as_slice().len(),
                truncated: false,
                data: None,
            };
            return Some((Completion::Done(st), d.buf));
        }
        self.reqs
            .remove_unless(req, |r| matches!(r.completion, Completion::Pending))
            .map(|r| (r.completion, r.buf))
    }

    /// Cancels a posted receive that has not matched yet. Returns its buffer.
    pub fn cancel_recv(&mut self, req: ReqId) -> Option<B> {
        let ep = match &self.reqs.get(req)?.kind {
            ReqKind::Recv(r) if r.status.is_none() => r.ep,
            _ => return None,
        };
        let q = self.eps.get_mut(ep)?;
        let i = q.posted.iter().position(|p| p.req == req)?;
        q.posted.remove(i);
        self.reqs.remove(req).map(|r| r.buf)
    }

    /// Is there a message that a receive with these filters would match right now?
    pub fn probe(&self, ep: EpId, src: Option<Rank>, tag: Option<u64>) -> Option<Status> {
        self.probe_matching(ep, Filter::new(src, tag))
    }

    /// Is there a message that a receive with this filter would match right now?
    pub fn probe_matching(&self, ep: EpId, filter: Filter) -> Option<Status> {
        let q = self.eps.get(ep)?;
        q.unexpected.iter().find_map(|&u| {
            let m = self.unexp.get(u)?;
            filter.takes(m).then_some(Status {
                source: m.src,
                src_ep: m.src_ep,
                tag: m.tag,
                len: m.len,
                truncated: false,
                data: m.data,
            })
        })
    }

    /// Takes the first message a receive with these filters would match out of matching (a
    /// matched probe: MPI_Mprobe, FI_CLAIM). Receive it with [`recv_claimed`](Self::recv_claimed)
    /// or drop it with [`discard_claimed`](Self::discard_claimed).
    pub fn claim(&mut self, ep: EpId, filter: Filter) -> Option<(Handle, Status)> {
        let st = self.probe_matching(ep, filter)?;
        let q = self.eps.get_mut(ep)?;
        let unexp = &self.unexp;
        let i = q
            .unexpected
            .iter()
            .position(|&u| unexp.get(u).is_some_and(|m| filter.takes(m)))?;
        let u = q.unexpected.remove(i)?;
        self.claimed.insert(u);
        Some((u, st))
    }

    /// Receives a claimed message into `buf`.
    pub fn recv_claimed(&mut self, claim: Handle, buf: B) -> Result<ReqId, ProtoError> {
        if !self.claimed.remove(&claim) {
            return Err(ProtoError::Invalid(format!(
                "no claimed message {:#x}",
                claim.to_u64()
            )));
        }
        let Some(m) = self.unexp.get(claim) else {
            // Its sender failed before all of it arrived (fail_peer freed it).
            return Err(ProtoError::Invalid(
                "the claimed message is gone: its sender failed before all of it arrived".into(),
            ));
        };
        let (src, tag, ep) = (m.src, m.tag, m.dst_ep);
        let req = self.reqs.insert(Request {
            detached: false,
            buf,
            kind: ReqKind::Recv(RecvState {
                ep,
                src: Some(src),
                tag: TagMatch::exact(tag),
                status: None,
                unreceived: 0,
                rdv: None,
                chunks: None,
                rma_write: None,
                rma_target: false,
            }),
            completion: Completion::Pending,
        });
        self.match_unexp(claim, req);
        if let Some(reason) = self.peers[src as usize].failed.clone() {
            if self.is_pending(req) {
                // Its sender died before all of it arrived.
                self.complete(
                    req,
                    Completion::Failed(ProtoError::PeerFailed { peer: src, reason }),
                );
            }
        }
        Ok(req)
    }

    /// Drops a claimed message: its bytes are received into nothing (a rendezvous sender still
    /// completes). Returns the request to release once it completes.
    pub fn discard_claimed(&mut self, claim: Handle) -> Result<ReqId, ProtoError> {
        self.recv_claimed(claim, B::empty())
    }

    /// From now on, remember which requests finish, for [`take_finished`](Self::take_finished).
    pub fn track_finished(&mut self) {
        self.finished.get_or_insert_with(Vec::new);
    }

    /// Appends the requests that finished since the last call (with tracking on). A request
    /// may appear more than once; look at its completion.
    pub fn take_finished(&mut self, out: &mut Vec<ReqId>) {
        out.extend(self.drain_finished());
    }

    /// Whether requests finished since the last drain (tracking on).
    pub fn has_finished(&self) -> bool {
        self.finished.as_ref().is_some_and(|f| !f.is_empty())
    }

    /// The requests that finished since the last call, without a copy. Detached ones are
    /// freed here instead.
    pub fn drain_finished(&mut self) -> impl Iterator<Item = ReqId> + '_ {
        let reqs = &mut self.reqs;
        let regions = &mut self.regions;
        self.finished
            .iter_mut()
            .flat_map(|f| f.drain(..))
            .filter(move |&r| match reqs.get(r) {
                Some(q) if q.detached => {
                    if q.completion != Completion::Pending {
                        let q = reqs.remove(r).expect("just looked at");
                        if let (ReqKind::Recv(rv), Some(g), Completion::Done(_)) =
                            (&q.kind, regions.as_mut(), &q.completion)
                        {
                            if let Some((key, addr)) = rv.rma_write {
                                g.placed(key, addr, q.buf);
                            }
                        }
                    }
                    false
                }
                _ => true,
            })
    }

    /// Gives up interest in `req` (a send whose buffer it owns, as fi_inject's copy): it is
    /// freed when it finishes, never reported. Needs tracking on (the finished list is where it
    /// is freed); returns false, changing nothing, without it or for an unknown request.
    /// The buffer of a send still in flight (None for a receive, a finished or an unknown
    /// request): its owner may swap it for an identical one it owns.
    pub fn pending_send_buf_mut(&mut self, req: ReqId) -> Option<&mut B> {
        let r = self.reqs.get_mut(req)?;
        (r.completion == Completion::Pending && matches!(r.kind, ReqKind::Send(_)))
            .then_some(&mut r.buf)
    }

    pub fn detach(&mut self, req: ReqId) -> bool {
        if self.finished.is_none() {
            return false;
        }
        if let Some(h) = inline_slot(req) {
            // Done from the start (made before tracking began): nothing left to report.
            return self.inline_done.remove(h).is_some();
        }
        let Some(r) = self.reqs.get_mut(req) else {
            return false;
        };
        if r.completion == Completion::Pending {
            r.detached = true;
        } else {
            self.reqs.remove(req);
        }
        true
    }

    /// Is a peer marked for writing, or a direct copy waiting?
    #[inline]
    pub fn has_tx_work(&self) -> bool {
        !self.dirty.is_empty() || !self.direct_q.is_empty()
    }

    /// Peers with frames queued since the last call: the driver should try to write to them.
    pub fn take_dirty(&mut self, out: &mut Vec<Rank>) {
        for &p in &self.dirty {
            self.peers[p as usize].dirty = false;
        }
        out.append(&mut self.dirty);
    }

    /// Fails every operation that involves `peer` (its connection broke, or it died).
    pub fn fail_peer(&mut self, peer: Rank, reason: &str) {
        let p = &mut self.peers[peer as usize];
        if p.failed.is_some() {
            return;
        }
        p.failed = Some(reason.to_string());
        for r in &mut p.rails {
            r.tx.clear();
            r.log.clear();
            r.queued = 0;
            r.log_bytes = 0;
            r.rx.reset();
        }
        p.parked.clear();
        p.incomplete.clear();
        p.pull_q.clear();
        p.wait_cts.clear();
        p.delivery_wait.clear();
        p.words_back.clear();
        p.rdv_recv.clear();
        p.rma_reads.clear();
        p.atomics.clear();
        p.answers.clear();
        p.direct_granted.clear();
        let held: Vec<Handle> = std::mem::take(&mut p.reorder).into_values().collect();
        // Copies not made yet: their sends fail below.
        self.direct_q.retain(|w| w.peer != peer);
        for u in held {
            self.free_unexp(u);
        }
        let err = ProtoError::PeerFailed {
            peer,
            reason: reason.to_string(),
        };
        // When the last peer fails, receives from any source that are waiting fail too (like
        // ULFM's interrupted any-source receives): only a send to itself could still match them,
        // and waiting forever helps no one. One posted afterwards waits (a new peer may come).
        let none_left = self.all_others_failed().is_some();
        let mut failed_recvs = Vec::new();
        for (h, r) in self.reqs.iter_mut() {
            if r.completion != Completion::Pending {
                continue;
            }
            let involved = match &r.kind {
                ReqKind::Send(s) => s.peer == peer,
                ReqKind::Recv(rv) => match &rv.status {
                    Some(st) => st.source == peer,
                    None => rv.src == Some(peer) || (rv.src.is_none() && none_left),
                },
            };
            if involved {
                r.completion = Completion::Failed(err.clone());
                if let Some(f) = &mut self.finished {
                    f.push(h);
                }
                if let ReqKind::Recv(_) = r.kind {
                    failed_recvs.push(h);
                }
            }
        }
        for q in self.eps.values_mut() {
            q.posted.retain(|p| !failed_recvs.contains(&p.req));
        }
        // Claimed partial eager messages from the failed peer: their receives failed above.
        let mut dead = Vec::new();
        for (h, u) in self.unexp.iter_mut() {
            if u.src == peer {
                if let Body::Eager { filled, .. } = u.body {
                    if filled < u.len {
                        dead.push(h);
                    }
                }
            }
        }
        for q in self.eps.values_mut() {
            q.unexpected.retain(|u| !dead.contains(u));
        }
        for u in dead {
            self.free_unexp(u);
        }
    }

    /// Allows (or stops) direct copies of rendezvous data to `peer` (a process on this host whose
    /// memory the driver can write).
    pub fn set_direct(&mut self, peer: Rank, on: bool) {
        self.peers[peer as usize].direct = on;
    }

    /// Declares `peer`'s links lossless (see `Peer::lossless`); both sides must agree, before
    /// the first frame, as they do for shared memory.
    pub fn set_lossless(&mut self, peer: Rank, on: bool) {
        self.peers[peer as usize].lossless = on;
    }

    /// Does a direct copy wait for the driver ([`take_direct`](Self::take_direct))?
    pub fn direct_pending(&self) -> bool {
        !self.direct_q.is_empty()
    }

    /// Does a direct copy to `peer` wait for the driver?
    pub fn direct_pending_to(&self, peer: Rank) -> bool {
        self.direct_q.iter().any(|w| w.peer == peer)
    }

    /// The next direct copy the driver should make.
    pub fn take_direct(&mut self) -> Option<DirectWrite> {
        self.direct_q.pop_front()
    }

    /// The receiver's side of a direct copy from `from` for rendezvous `seq`: the buffer it
    /// offered, if it did. Lets the simulator copy without raw pointers.
    pub(crate) fn granted_buffer(&mut self, from: Rank, seq: u64) -> Option<&mut [u8]> {
        let p = self.peers.get(from as usize)?;
        if !p.direct_granted.contains(&seq) {
            return None;
        }
        let req = *p.rdv_recv.get(&seq)?;
        Some(self.reqs.get_mut(req)?.buf.as_mut_slice())
    }

    /// The bytes a direct copy reads.
    pub fn direct_source(&self, w: &DirectWrite) -> &[u8] {
        self.reqs
            .get(w.req)
            .and_then(|r| r.buf.as_slice().get(..w.len))
            .unwrap_or(&[])
    }

    /// The driver made (`ok`) or could not make a direct copy. Done: tell the receiver and
    /// complete the send. Not done: send the data through the link instead.
    pub fn direct_done(&mut self, w: DirectWrite, ok: bool) {
        // The peer failed since the copy was handed out (fail_peer failed the send): the
        // request already has its outcome.
        let pending = self
            .reqs
            .get(w.req)
            .is_some_and(|r| r.completion == Completion::Pending);
        if !pending {
            return;
        }
        if !ok {
            self.peers[w.peer as usize].direct = false;
            self.start_data_frames(w.peer, w.req, w.seq);
            return;
        }
        let mut h = FrameHeader::new(FrameKind::Fin);
        h.seq = w.seq;
        h.value = w.msg_len as u64;
        let rail = self.pick_rail(w.peer);
        self.enqueue_on(w.peer, rail, TxItem::new(h, TxBody::None, None));
        // A write that waited for the target's word: the copy placed it.
        self.peers[w.peer as usize].delivery_wait.remove(&w.seq);
        if let Some(r) = self.reqs.get_mut(w.req) {
            let (mut src_ep, mut tag) = (0, 0);
            if let ReqKind::Send(s) = &mut r.kind {
                s.unacked = 0;
                (src_ep, tag) = (s.src_ep, s.tag);
            }
            r.completion = Completion::Done(Status {
                source: self.me,
                src_ep,
                tag,
                len: w.msg_len,
                truncated: false,
                data: None,
            });
            if let Some(f) = &mut self.finished {
                f.push(w.req);
            }
        }
    }

    /// Queues an orderly close (Bye) on every rail to `peer`; nothing may be sent after it.
    pub fn send_bye(&mut self, peer: Rank) {
        for rail in self.live_rails(peer) {
            let bye = TxItem::new(FrameHeader::new(FrameKind::Bye), TxBody::None, None);
            self.enqueue_on(peer, Some(rail), bye);
        }
    }

    /// Has `peer` closed `rail` in order?
    pub fn bye_received(&self, peer: Rank, rail: usize) -> bool {
        self.peers[peer as usize]
            .rails
            .get(rail)
            .is_some_and(|r| r.bye)
    }

    pub fn peer_failed(&self, peer: Rank) -> Option<&str> {
        self.peers[peer as usize].failed.as_deref()
    }

    /// Number of requests alive (pending or finished but not taken).
    pub fn live_requests(&self) -> usize {
        self.reqs.len() + self.inline_done.len()
    }

    /// Bytes this process still has to send or expects to receive in bulk (queued on rails,
    /// waiting to be pulled, or owed to matched rendezvous receives). While this is large,
    /// waiting is for bandwidth, not for a reply, and spinning would only burn CPU.
    pub fn bulk_bytes(&self) -> usize {
        let mut n = 0;
        for p in &self.peers {
            n += p.pull_q.iter().map(|j| j.end - j.next).sum::<usize>();
            n += p.rails.iter().map(|r| r.queued).sum::<usize>();
            for &req in p.rdv_recv.values() {
                if let Some(ReqKind::Recv(rv)) = self.reqs.get(req).map(|r| &r.kind) {
                    n += rv.unreceived;
                }
            }
        }
        n
    }

    /// Bytes of eager payload held for receives not yet posted (or waiting for their turn).
    pub fn held_bytes(&self) -> usize {
        self.unexp
            .iter()
            .map(|(_, u)| match &u.body {
                Body::Eager { data, .. } => data.len(),
                Body::Rts | Body::Rma { .. } => 0,
            })
            .sum()
    }

    /// Number of messages held unexpected or out of order.
    pub fn held_messages(&self) -> usize {
        self.unexp.len()
    }

    // ---- internals shared by rx and tx ----

    pub(crate) fn mark_dirty(&mut self, peer: Rank) {
        let p = &mut self.peers[peer as usize];
        if !p.dirty {
            p.dirty = true;
            self.dirty.push(peer);
        }
    }

    pub(crate) fn alloc_buf(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.spare_bufs.pop().unwrap_or_default();
        v.clear();
        v.resize(len, 0);
        v
    }

    pub(crate) fn free_unexp(&mut self, u: Handle) {
        if let Some(Unexp {
            src,
            len,
            body: Body::Eager { data, .. },
            ..
        }) = self.unexp.remove(u)
        {
            if src != self.me {
                self.eager_consumed(src, len);
            }
            if self.spare_bufs.len() < 64 && data.capacity() <= 4 * self.cfg.eager_limit {
                self.spare_bufs.push(data);
            }
        }
    }

    /// Eager data from `peer` no longer takes memory here: tell it, in batches, so it may send
    /// more eagerly.
    #[inline]
    pub(crate) fn eager_consumed(&mut self, peer: Rank, len: usize) {
        self.eager_cost_consumed(peer, len as u64 + crate::EAGER_OVERHEAD);
    }

    /// Eager credit of `cost` bytes (overheads included) consumed from `peer`.
    pub(crate) fn eager_cost_consumed(&mut self, peer: Rank, cost: u64) {
        let p = &mut self.peers[peer as usize];
        p.consumed += cost;
        let batch = (self.cfg.eager_credits as u64 / 4).clamp(1, 256 * 1024);
        if p.consumed - p.credit_sent >= batch && p.failed.is_none() {
            self.grant_credit(peer);
        }
    }

    /// Tells `peer` how much eager data we have consumed (a Credit frame).
    fn grant_credit(&mut self, peer: Rank) {
        let p = &mut self.peers[peer as usize];
        p.credit_sent = p.consumed;
        let mut h = FrameHeader::new(FrameKind::Credit);
        h.value = p.consumed;
        let rail = self.pick_rail(peer);
        self.enqueue_on(peer, rail, TxItem::new(h, TxBody::None, None));
    }

    pub(crate) fn complete(&mut self, req: ReqId, c: Completion) {
        if let Some(r) = self.reqs.get_mut(req) {
            r.completion = c;
            if let Some(f) = &mut self.finished {
                f.push(req);
            }
        }
    }

    /// An arrival whose turn in sequence has come: match it or queue it as unexpected.
    pub(crate) fn deliver_in_order(&mut self, u: Handle) {
        let m = self.unexp.get(u).unwrap();
        if let Body::Rma { flags, addr } = m.body {
            let a = crate::rma::RmaArrival {
                peer: m.src,
                seq: m.seq,
                src_ep: m.src_ep,
                flags,
                tag: m.tag,
                addr,
                len: m.len,
            };
            self.free_unexp(u);
            self.rma_arrived(a);
            return;
        }
        if let EagerRma::Write { addr } = m.rma {
            let (src, seq, src_ep, key, len) = (m.src, m.seq, m.src_ep, m.tag, m.len);
            match self.eager_write(src, seq, src_ep, key, addr, len) {
                // Not through match_unexp: the request keeps what eager_write set.
                Some(req) => match self.unexp.get_mut(u) {
                    Some(Unexp {
                        body: Body::Eager { filled, .. },
                        ..
                    }) if *filled == len => self.finish_claimed(u, req),
                    Some(Unexp {
                        body: Body::Eager { claimed, .. },
                        ..
                    }) => *claimed = Some(req),
                    _ => {}
                },
                None => self.free_unexp(u),
            }
            return;
        }
        if m.rma == EagerRma::ReadAnswer {
            let (src, seq) = (m.src, m.tag);
            // Checked when its header came: the read is there, of this length.
            match self.peers[src as usize].rma_reads.remove(&seq) {
                Some(w) => {
                    let m = self.unexp.get_mut(u).unwrap();
                    m.tag = w.key;
                    m.data = None;
                    self.match_unexp(u, w.req);
                }
                None => self.free_unexp(u),
            }
            return;
        }
        let (ep, src, src_ep, tag) = (m.dst_ep, m.src, m.src_ep, m.tag);
        match self.take_posted(ep, src, src_ep, tag) {
            Some(req) => self.match_unexp(u, req),
            None => q_push(&mut self.eps, ep, u),
        }
    }

    /// Nothing is posted or waiting on `ep`: a new receive there would be the first to match
    /// what arrives next.
    pub fn ep_quiet(&self, ep: EpId) -> bool {
        self.eps
            .get(ep)
            .is_none_or(|q| q.posted.is_empty() && q.unexpected.is_empty())
    }

    /// Finds and removes the first posted receive on `ep` that matches.
    pub(crate) fn take_posted(
        &mut self,
        ep: EpId,
        src: Rank,
        src_ep: EpId,
        tag: u64,
    ) -> Option<ReqId> {
        let q = self.eps.get_mut(ep)?;
        // Usually the oldest posted receive matches.
        if q.posted.front()?.filter.takes_from(src, src_ep, tag) {
            return q.posted.pop_front().map(|p| p.req);
        }
        let i = q
            .posted
            .iter()
            .position(|p| p.filter.takes_from(src, src_ep, tag))?;
        q.posted.remove(i).map(|p| p.req)
    }

    /// Records in a receive the message it matched (`msg`: who sent what; `truncated` is
    /// worked out here).
    pub(crate) fn set_matched(&mut self, req: ReqId, msg: Status, rdv: Option<(Rank, u64)>) {
        let r = self.reqs.get_mut(req).unwrap();
        let cap = r.buf.as_slice().len();
        if let ReqKind::Recv(rv) = &mut r.kind {
            rv.status = Some(Status {
                truncated: msg.len > cap,
                ..msg
            });
            rv.unreceived = msg.len;
            rv.rdv = rdv;
        }
    }

    /// A receive met a held message.
    fn match_unexp(&mut self, u: Handle, req: ReqId) {
        let m = self.unexp.get(u).unwrap();
        let (len, seq) = (m.len, m.seq);
        let msg = Status {
            source: m.src,
            src_ep: m.src_ep,
            tag: m.tag,
            len: m.len,
            truncated: false,
            data: m.data,
        };
        match &m.body {
            Body::Rts => {
                self.free_unexp(u);
                self.start_rdv_recv(seq, req, msg);
            }
            Body::Rma { .. } => unreachable!("remote memory access is never matched"),
            Body::Eager { filled, .. } => {
                let done = *filled == len;
                self.set_matched(req, msg, None);
                if done {
                    self.finish_claimed(u, req);
                } else if let Some(Unexp {
                    body: Body::Eager { claimed, .. },
                    ..
                }) = self.unexp.get_mut(u)
                {
                    *claimed = Some(req);
                }
            }
        }
    }

    /// Copies a fully arrived held message into the receive that claimed it.
    pub(crate) fn finish_claimed(&mut self, u: Handle, req: ReqId) {
        if let (Some(m), Some(r)) = (self.unexp.get(u), self.reqs.get_mut(req)) {
            if let Body::Eager { data, .. } = &m.body {
                let dst = r.buf.as_mut_slice();
                let n = dst.len().min(data.len());
                dst[..n].copy_from_slice(&data[..n]);
            }
            if let ReqKind::Recv(rv) = &mut r.kind {
                rv.unreceived = 0;
                let st = rv.status.unwrap();
                r.completion = Completion::Done(st);
                if let Some(f) = &mut self.finished {
                    f.push(req);
                }
                if let (true, Some((from, seq))) = (rv.rma_target, rv.rdv) {
                    // An eager write held for its turn is placed now: say so.
                    self.word_back(from, seq);
                }
            }
        }
        self.free_unexp(u);
    }

    /// The receiver's side of a matched rendezvous: ask the sender for the data.
    pub(crate) fn start_rdv_recv(&mut self, seq: u64, req: ReqId, msg: Status) {
        let (peer, src_ep, len) = (msg.source, msg.src_ep, msg.len);
        self.set_matched(req, msg, Some((peer, seq)));
        if len == 0 {
            let st = self.recv_status(req);
            self.complete(req, Completion::Done(st));
        } else {
            self.peers[peer as usize].rdv_recv.insert(seq, req);
        }
        let mut h = FrameHeader::new(FrameKind::Cts);
        h.seq = seq;
        h.dst_ep = src_ep;
        if len > 0 && self.peers[peer as usize].direct {
            // Offer the buffer for a direct copy; the sender falls back to data frames if it
            // cannot.
            let buf = self.reqs.get_mut(req).unwrap().buf.as_mut_slice();
            h.flags |= hx_wire::FLAG_DIRECT;
            h.value = buf.as_mut_ptr() as u64;
            h.tag = buf.len() as u64;
            self.peers[peer as usize].direct_granted.insert(seq);
        }
        let rail = self.pick_rail(peer);
        self.enqueue_on(peer, rail, TxItem::new(h, TxBody::None, None));
    }

    pub(crate) fn recv_status(&self, req: ReqId) -> Status {
        match &self.reqs.get(req).unwrap().kind {
            ReqKind::Recv(rv) => rv.status.unwrap(),
            ReqKind::Send(_) => unreachable!("recv_status on a send"),
        }
    }

    /// Rail for a small message or control frame; `None` while every rail to `peer` is down.
    pub(crate) fn pick_rail(&mut self, peer: Rank) -> Option<usize> {
        self.pick_rail_for(peer, 0)
    }

    /// Rail for a message of `len` bytes (eager, or the RTS of a large one).
    pub(crate) fn pick_rail_for(&mut self, peer: Rank, len: usize) -> Option<usize> {
        let me = self.me;
        let p = &mut self.peers[peer as usize];
        let n = p.rails.len();
        if n == 1 {
            // Every policy's choice, without its divisions (a shared-memory peer's only rail).
            let r = &p.rails[0];
            let waits = self.cfg.policy == Policy::Bind && !r.settled;
            return (r.up && !waits).then_some(0);
        }
        let bound = (me as usize + peer as usize) % n.max(1);
        // The first live rail at or after `from`.
        let live_from =
            |p: &Peer, from: usize| (0..n).map(|i| (from + i) % n).find(|&r| p.rails[r].up);
        match self.cfg.policy {
            // A rail still connecting for the first time is waited for.
            Policy::Bind if !p.rails.get(bound).is_none_or(|r| r.settled) => None,
            Policy::Bind => live_from(p, bound),
            Policy::RoundRobin | Policy::Stripe => {
                let r = live_from(p, p.rr_next % n.max(1))?;
                p.rr_next = (r + 1) % n;
                Some(r)
            }
            Policy::Adaptive => {
                // A quiet pair (nothing queued or in flight: ping-pong) keeps to one rail. In a
                // stream, messages rotate over the rails whose sockets take data right away, and
                // when every rail has a backlog, go to the shortest.
                // Messages of several KiB rotate even then: each takes a while on the wire,
                // and the next one should not wait behind it.
                // In flight counts on the bound rail only (a ping-pong's reply acknowledges
                // it; a stream has its last message in flight there): a few unacknowledged
                // bytes on another rail (a barrier, an earlier message) say nothing about this
                // one, and counting them made a ping-pong rotate for good (its replies then ack
                // each rail only now and then): 1.14x bind's latency at 2 rails.
                let quiet = p.rails.iter().all(|r| r.queued == 0)
                    && p.rails.get(bound).is_some_and(|r| r.log_bytes == 0);
                // Not where links keep up with writes (the CPU is the limit): there a rail's
                // next message does not wait for the last, and another rail costs its sockets'
                // cold state (1.2-1.7x at 16-32 KiB over 4 unlimited rails while rails ran
                // cubic from the start, whose HyStart ends a fresh socket's slow start early).
                if quiet && (len < ROTATE_FROM || p.keeps_up(bound)) {
                    return live_from(p, bound);
                }
                // Rotate over the rails whose backlog is within a slack of the shortest: in a
                // healthy stream that is every rail (as rr), while a stalled rail's backlog grows
                // past the slack and it stops getting messages.
                let shortest = (0..n)
                    .filter(|&r| p.rails[r].up)
                    .map(|r| p.rails[r].queued)
                    .min()?;
                let limit = shortest + BACKLOG_SLACK;
                let r = (0..n)
                    .map(|i| (p.rr_next + i) % n)
                    .find(|&r| p.rails[r].up && p.rails[r].queued <= limit)?;
                p.rr_next = (r + 1) % n;
                Some(r)
            }
        }
    }

    /// Queues a frame on `rail`, or parks it until a rail to `peer` comes back.
    pub(crate) fn enqueue_on(&mut self, peer: Rank, rail: Option<usize>, item: TxItem) {
        if !self.peers[peer as usize].words_back.is_empty() {
            // Held words back go first, on the same rail: one write carries both.
            self.words_out(peer, rail);
            self.words_peers.retain(|&q| q != peer);
        }
        let p = &mut self.peers[peer as usize];
        match rail {
            Some(r) if p.rails[r].up => {
                let r = &mut p.rails[r];
                r.queued += item.total_len();
                if item.is_control() {
                    // Control frames (RTS, CTS, credit) pass queued data: a CTS stuck behind
                    // megabytes going the other way would make a two-way transfer one-way.
                    let at =
                        r.tx.iter()
                            .position(|q| q.not_started() && !q.is_control())
                            .unwrap_or(r.tx.len());
                    r.tx.insert(at, item);
                } else {
                    r.tx.push_back(item);
                }
            }
            _ => p.parked.push_back(item),
        }
        self.mark_dirty(peer);
    }
}

fn q_push(eps: &mut EpTable, ep: EpId, u: Handle) {
    eps.entry(ep).unexpected.push_back(u);
}

impl<B: Buffer> Core<B> {
    /// A one-paragraph picture of what is in flight, for diagnosing a stuck job.
    pub fn debug_dump(&self) -> String {
        let mut s = format!("rank {}:", self.me);
        for (i, p) in self.peers.iter().enumerate() {
            if p.rails.is_empty() {
                continue;
            }
            s += &format!(
                " [peer {i} tx_seq {} rx_seq {} reorder {:?} wait_cts {:?} rdv_recv {:?} pull {} parked {}",
                p.tx_seq,
                p.rx_seq,
                p.reorder.keys().collect::<Vec<_>>(),
                p.wait_cts.keys().collect::<Vec<_>>(),
                p.rdv_recv.keys().collect::<Vec<_>>(),
                p.pull_q.len(),
                p.parked.len()
            );
            s += &format!(
                " delivery_wait {:?} credit used {} granted {}",
                p.delivery_wait.keys().collect::<Vec<_>>(),
                p.credit_used,
                p.credit_granted
            );
            for (r, rail) in p.rails.iter().enumerate() {
                s += &format!(
                    " rail{r}(up {} q {} log {} acked {} logged {} rcvd {} ack_sent {} ackq {})",
                    rail.up,
                    rail.tx.len(),
                    rail.log.len(),
                    rail.acked,
                    rail.logged,
                    rail.rcvd,
                    rail.ack_sent,
                    rail.ack_queued
                );
            }
            s += "]";
        }
        let pending: Vec<String> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.completion == Completion::Pending)
            .map(|(_, r)| match &r.kind {
                ReqKind::Send(st) => format!(
                    "send(peer {} len {} unacked {} delivery {:?})",
                    st.peer,
                    r.buf.as_slice().len(),
                    st.unacked,
                    st.delivery
                ),
                ReqKind::Recv(rv) => format!(
                    "recv(ep {} src {:?} tag {:?} matched {} unreceived {})",
                    rv.ep,
                    rv.src,
                    rv.tag,
                    rv.status.is_some(),
                    rv.unreceived
                ),
            })
            .collect();
        s += &format!(" pending {pending:?}");
        s
    }
}
