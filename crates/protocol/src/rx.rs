//! Receive side: each rail is a byte stream parsed into frames. Small frames are read in bulk
//! into a staging area; once a large payload's destination is known, the driver reads the rest of
//! it straight into that buffer (no intermediate copy). Frames resent after a rail failure are
//! recognised and dropped (or, for a payload cut off mid-way, delivered again in full).

use hx_wire::{
    eager_view, EagerView, FrameHeader, FrameKind, FLAG_ACK_REQ, FLAG_DATA, FLAG_READ, FLAG_RMA,
    HEADER_LEN, MIN_HEADER_LEN,
};

fn data_of(h: &FrameHeader) -> Option<u64> {
    (h.flags & FLAG_DATA != 0).then_some(h.data)
}

/// Who sent what, from an express receive's view of an Eager header.
fn status_of(peer: crate::Rank, v: &EagerView) -> crate::Status {
    crate::Status {
        source: peer,
        src_ep: v.src_ep,
        tag: v.tag,
        len: v.len,
        truncated: false,
        data: (v.flags & FLAG_DATA != 0).then_some(v.data),
    }
}

/// Who sent what, from an Eager or Rts header.
fn msg_of(peer: crate::Rank, h: &FrameHeader) -> crate::Status {
    crate::Status {
        source: peer,
        src_ep: h.src_ep,
        tag: h.tag,
        len: h.value as usize,
        truncated: false,
        data: data_of(h),
    }
}

use crate::core::{Body, EagerRma, ReqKind, Unexp};
use crate::rma::RmaArrival;
use crate::slab::Handle;
use crate::{Buffer, Completion, Core, EpId, Filter, ProtoError, Rank, ReqId};

/// Payloads at least this long are read directly into their destination.
const DIRECT_MIN: usize = 4096;
/// Acknowledge at least every this many frames or bytes.
const ACK_EVERY_FRAMES: u64 = 32;
const ACK_EVERY_BYTES: usize = 1 << 20;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dest {
    Req(ReqId),
    Unexp(Handle),
    /// An atomic's operands, into the rail's [`RxState::operands`].
    Operands,
    Discard,
}

#[derive(Clone, Copy)]
pub(crate) struct Payload {
    pub(crate) dest: Dest,
    /// Where the next byte goes in the destination.
    off: usize,
    remaining: usize,
    pub(crate) kind: FrameKind,
    flags: u8,
    pub(crate) seq: u64,
    /// Offset of the chunk (Data) and length of the frame's payload.
    chunk_off: u64,
    len: usize,
}

pub(crate) struct RxState {
    stage: Vec<u8>,
    start: usize,
    end: usize,
    pub(crate) cur: Option<Payload>,
    direct: bool,
    /// The last frame with a payload had one larger than the staging area: read the next
    /// header alone, so that its payload goes straight to its destination instead of partly
    /// through the stage (a copy of up to the stage's size per chunk of a large message).
    bulk: bool,
    /// The atomic whose operands are arriving, and where they go.
    atomic: Option<crate::rma::AtomicArrival>,
    operands: [u8; hx_wire::ATOMIC_PAYLOAD],
}

impl RxState {
    pub fn new(size: usize) -> Self {
        RxState {
            stage: vec![0; size.max(2 * HEADER_LEN)],
            start: 0,
            end: 0,
            cur: None,
            direct: false,
            bulk: false,
            atomic: None,
            operands: [0; hx_wire::ATOMIC_PAYLOAD],
        }
    }

    pub fn reset(&mut self) {
        self.start = 0;
        self.end = 0;
        self.cur = None;
        self.direct = false;
        self.bulk = false;
        self.atomic = None;
    }

    /// An eager payload that was arriving when the rail broke.
    pub fn take_partial_eager(&mut self) -> Option<(u64, Dest)> {
        match self.cur.take() {
            Some(p) if p.kind == FrameKind::Eager && p.dest != Dest::Discard => {
                Some((p.seq, p.dest))
            }
            _ => None,
        }
    }
}

impl<B: Buffer> Core<B> {
    /// Where the next bytes read from `rail` of `peer` should go. Read at most this slice's
    /// length, then report with [`rx_done`](Self::rx_done).
    pub fn rx_space(&mut self, peer: Rank, rail: usize) -> &mut [u8] {
        let rx = &mut self.peers[peer as usize].rails[rail].rx;
        if rx.start == rx.end {
            rx.start = 0;
            rx.end = 0;
        }
        rx.direct = false;
        if let Some(p) = rx.cur {
            if rx.start == rx.end && p.remaining >= DIRECT_MIN {
                let end = p.off + p.remaining;
                let slice = match p.dest {
                    Dest::Req(id) => self
                        .reqs
                        .get_mut(id)
                        .and_then(|r| r.buf.as_mut_slice().get_mut(p.off..end)),
                    Dest::Unexp(id) => self.unexp.get_mut(id).and_then(|u| match &mut u.body {
                        Body::Eager { data, .. } => data.get_mut(p.off..end),
                        Body::Rts | Body::Rma { .. } => None,
                    }),
                    Dest::Operands | Dest::Discard => None,
                };
                if let Some(s) = slice {
                    rx.direct = true;
                    return s;
                }
            }
        }
        if rx.bulk && rx.cur.is_none() && rx.end == 0 {
            return &mut rx.stage[..HEADER_LEN];
        }
        if rx.end == rx.stage.len() {
            rx.stage.copy_within(rx.start..rx.end, 0);
            rx.end -= rx.start;
            rx.start = 0;
        }
        &mut rx.stage[rx.end..]
    }

    /// Bytes of the payload being read on `rail` of `peer` that are still to come straight into
    /// its destination (0 between frames, or while bytes wait in the stage). The sender has put
    /// them on this rail's stream already (a frame's bytes are contiguous there), so a driver may
    /// sleep until that many are readable.
    pub fn rx_payload_left(&self, peer: Rank, rail: usize) -> usize {
        let rx = &self.peers[peer as usize].rails[rail].rx;
        match rx.cur {
            Some(p) if rx.start == rx.end && p.dest != Dest::Discard => p.remaining,
            _ => 0,
        }
    }

    /// `n` bytes were read into the slice [`rx_space`](Self::rx_space) gave. Parses them. An
    /// error means the rail's stream is corrupt: the driver should close it.
    pub fn rx_done(&mut self, peer: Rank, rail: usize, n: usize) -> Result<(), ProtoError> {
        let r = &mut self.peers[peer as usize].rails[rail];
        r.rx_bytes += n as u64;
        let rx = &mut r.rx;
        if rx.direct {
            rx.direct = false;
            let p = rx.cur.as_mut().expect("direct read without payload");
            let n = n.min(p.remaining);
            p.off += n;
            p.remaining -= n;
            if p.remaining == 0 {
                let p = rx.cur.take().unwrap();
                self.payload_complete(peer, rail, &p);
            }
            return Ok(());
        }
        rx.end = (rx.end + n).min(rx.stage.len());
        self.parse(peer, rail)
    }

    /// The express path for links whose bytes can be read in place (shared memory): `bytes`
    /// are readable on `rail` of `peer`. If they start with a whole eager frame that the parser
    /// would deliver in order straight into a posted receive (a lossless peer, nothing staged
    /// or out of order), it is delivered from `bytes`, with the state changes of
    /// [`rx_done`](Self::rx_done) and without its staging copy and parse loop; returns the
    /// frame's length for the driver to consume. `None`: read through `rx_space`/`rx_done`,
    /// which also reports whatever is wrong with the bytes.
    pub fn rx_express(&mut self, peer: Rank, rail: usize, bytes: &[u8]) -> Option<usize> {
        let v = self.express_frame(peer, rail, bytes)?;
        let req = self.take_posted(v.dst_ep, peer, v.src_ep, v.tag)?;
        self.express_taken(peer, rail, v.len);
        // What set_matched, write_dest and payload_complete do for a whole eager payload
        // (a lossless peer counts no frames for acknowledgement).
        if let Some(r) = self.reqs.get_mut(req) {
            let buf = r.buf.as_mut_slice();
            let n = v.len.min(buf.len());
            buf[..n].copy_from_slice(&bytes[v.hlen..v.hlen + n]);
            let st = crate::Status {
                truncated: v.len > n,
                ..status_of(peer, &v)
            };
            if let ReqKind::Recv(rv) = &mut r.kind {
                rv.status = Some(st);
                rv.unreceived = 0;
            }
            r.completion = Completion::Done(st);
            if let Some(f) = &mut self.finished {
                f.push(req);
            }
        }
        Some(v.hlen + v.len)
    }

    /// The express path of a blocking receive that has posted nothing: if `bytes` start with a
    /// whole eager frame that [`rx_express`](Self::rx_express) could take, addressed to `ep`,
    /// taken by `filter` and fitting in `buf`, the payload is copied into `buf` and the frame's
    /// length and the message's status returned. No request exists for it at any point. `None`:
    /// post a receive as usual.
    ///
    /// The caller has seen [`ep_quiet`](Self::ep_quiet) for `ep` since it last posted a receive
    /// or read a frame by another way (a posted receive or an unexpected message would come
    /// first); what happens in between (writes, failures) can only empty its queues.
    pub fn rx_express_into(
        &mut self,
        peer: Rank,
        rail: usize,
        bytes: &[u8],
        ep: EpId,
        filter: Filter,
        buf: &mut [u8],
    ) -> Option<(usize, crate::Status)> {
        let v = self.express_frame(peer, rail, bytes)?;
        if v.dst_ep != ep || v.len > buf.len() || !filter.takes_from(peer, v.src_ep, v.tag) {
            return None;
        }
        debug_assert!(self.ep_quiet(ep), "express receive on a busy endpoint");
        self.express_taken(peer, rail, v.len);
        buf[..v.len].copy_from_slice(&bytes[v.hlen..v.hlen + v.len]);
        Some((v.hlen + v.len, status_of(peer, &v)))
    }

    /// The frame at the start of `bytes`, if an express path may take it in place: a whole
    /// eager frame, next in sequence from a lossless peer with nothing staged or out of order.
    #[inline]
    fn express_frame(&self, peer: Rank, rail: usize, bytes: &[u8]) -> Option<EagerView> {
        let p = self.peers.get(peer as usize)?;
        if !p.lossless {
            return None;
        }
        self.next_eager(p, &p.rails.get(rail)?.rx, bytes)
    }

    /// `bytes` start with a whole eager frame, the next in sequence from `p`, read on a rail
    /// (`rx`) with nothing staged before it and nothing out of order.
    #[inline]
    fn next_eager(&self, p: &crate::core::Peer, rx: &RxState, bytes: &[u8]) -> Option<EagerView> {
        if rx.start != rx.end || rx.cur.is_some() || !p.reorder.is_empty() {
            return None;
        }
        let v = eager_view(bytes)?;
        // A message whose sender waits for our word takes the full path (payload_complete).
        if v.len > self.cfg.eager_limit
            || v.seq != p.rx_seq
            || bytes.len() - v.hlen < v.len
            || v.flags & hx_wire::FLAG_DELIVERY != 0
        {
            return None;
        }
        Some(v)
    }

    /// Is `rail` of `peer` between frames with nothing staged, so that a read into
    /// [`rx_space`](Self::rx_space) lands at the start of the stage (what
    /// [`rx_done_express`](Self::rx_done_express) needs)?
    pub fn rx_idle(&self, peer: Rank, rail: usize) -> bool {
        let rx = &self.peers[peer as usize].rails[rail].rx;
        rx.start == rx.end && rx.cur.is_none() && !rx.bulk
    }

    /// The express path of a blocking receive over a rail read through a stage (a socket):
    /// the driver read `n` bytes into the slice [`rx_space`](Self::rx_space) gave while
    /// [`rx_idle`](Self::rx_idle) held. If they start with a whole eager frame that
    /// [`rx_express_into`](Self::rx_express_into) would take (from any peer: frames from a
    /// lossy one are counted for acknowledgement, and its piggybacked acknowledgement taken),
    /// the payload is copied into `buf` and the message's status returned; no request exists
    /// for it at any point. Every other byte is parsed as [`rx_done`](Self::rx_done) parses
    /// it, and what that finds wrong is the second part (the frame taken, if any, is still
    /// the caller's: it came before the error).
    pub fn rx_done_express(
        &mut self,
        peer: Rank,
        rail: usize,
        n: usize,
        ep: EpId,
        filter: Filter,
        buf: &mut [u8],
    ) -> (Option<crate::Status>, Result<(), ProtoError>) {
        let Some(v) = self.staged_express_frame(peer, rail, n, ep, filter, buf.len()) else {
            return (None, self.rx_done(peer, rail, n));
        };
        self.peers[peer as usize].rails[rail].rx_bytes += n as u64;
        // Parsing would look at the acknowledgement first and fail the rail on a bad one.
        if let Err(e) = self.handle_ack(peer, rail, v.ack) {
            return (None, Err(e));
        }
        let len = v.hlen + v.len;
        let rx = &mut self.peers[peer as usize].rails[rail].rx;
        buf[..v.len].copy_from_slice(&rx.stage[v.hlen..len]);
        rx.start = len;
        rx.end = n;
        let mut h = FrameHeader::new(FrameKind::Eager);
        h.flags = v.flags;
        h.payload_len = v.len as u32;
        self.frame_received(peer, rail, &h);
        self.express_taken(peer, rail, v.len);
        let rest = if len < n {
            self.parse(peer, rail)
        } else {
            Ok(())
        };
        (Some(status_of(peer, &v)), rest)
    }

    /// The frame at the start of the first `n` staged bytes of `rail`, if
    /// [`rx_done_express`](Self::rx_done_express) may take it for a receive on `ep` taking
    /// `filter` into `cap` bytes.
    fn staged_express_frame(
        &self,
        peer: Rank,
        rail: usize,
        n: usize,
        ep: EpId,
        filter: Filter,
        cap: usize,
    ) -> Option<EagerView> {
        let p = self.peers.get(peer as usize)?;
        let rx = &p.rails.get(rail)?.rx;
        if rx.end != 0 {
            return None;
        }
        let v = self.next_eager(p, rx, rx.stage.get(..n)?)?;
        (v.dst_ep == ep && v.len <= cap && filter.takes_from(peer, v.src_ep, v.tag)).then_some(v)
    }

    /// The state changes of receiving an express frame of `len` payload bytes.
    #[inline]
    fn express_taken(&mut self, peer: Rank, rail: usize, len: usize) {
        let p = &mut self.peers[peer as usize];
        p.rx_seq += 1;
        if len > 0 {
            let rx = &mut p.rails[rail].rx;
            rx.bulk = len >= rx.stage.len();
        }
        self.eager_consumed(peer, len);
    }

    fn parse(&mut self, peer: Rank, rail: usize) -> Result<(), ProtoError> {
        loop {
            let rx = &mut self.peers[peer as usize].rails[rail].rx;
            let avail = rx.end - rx.start;
            if let Some(mut p) = rx.cur {
                if avail == 0 {
                    return Ok(());
                }
                let take = avail.min(p.remaining);
                let (from, off) = (rx.start, p.off);
                rx.start += take;
                p.off += take;
                p.remaining -= take;
                rx.cur = (p.remaining > 0).then_some(p);
                // Split borrows: the staging area lives in `peers`, destinations elsewhere.
                let rx = &mut self.peers[peer as usize].rails[rail].rx;
                if p.dest == Dest::Operands {
                    for i in off..(off + take).min(rx.operands.len()) {
                        rx.operands[i] = rx.stage[from + i - off];
                    }
                } else {
                    let stage = &rx.stage[from..from + take];
                    write_dest(&mut self.reqs, &mut self.unexp, p.dest, off, stage);
                }
                if p.remaining == 0 {
                    self.payload_complete(peer, rail, &p);
                }
                continue;
            }
            if avail < MIN_HEADER_LEN {
                if avail >= 4 {
                    // Fail early on garbage rather than waiting for a full header.
                    if let Err(err @ hx_wire::WireError::BadMagic { .. }) =
                        FrameHeader::parse(&rx.stage[rx.start..rx.end])
                    {
                        return Err(ProtoError::Wire { peer, rail, err });
                    }
                }
                return Ok(());
            }
            let (h, hlen) = match FrameHeader::parse(&rx.stage[rx.start..rx.end]) {
                Ok(v) => v,
                Err(hx_wire::WireError::Truncated { .. }) => return Ok(()),
                Err(err) => return Err(ProtoError::Wire { peer, rail, err }),
            };
            rx.start += hlen;
            if h.payload_len > 0 {
                rx.bulk = h.payload_len as usize >= rx.stage.len();
            }
            self.handle_ack(peer, rail, h.ack)?;
            match self.handle_header(peer, rail, &h)? {
                Some(p) if p.remaining > 0 => {
                    self.peers[peer as usize].rails[rail].rx.cur = Some(p);
                }
                Some(p) => self.payload_complete(peer, rail, &p),
                None => self.frame_received(peer, rail, &h),
            }
        }
    }

    fn violation(peer: Rank, rail: usize, seq: u64, what: &'static str) -> ProtoError {
        ProtoError::Unexpected {
            peer,
            rail,
            seq,
            what,
        }
    }

    /// Counts a reliable frame for acknowledgement, and asks for an explicit ack when due.
    fn frame_received(&mut self, peer: Rank, rail: usize, h: &FrameHeader) {
        if self.peers[peer as usize].lossless {
            return;
        }
        if !h.kind.reliable() {
            return;
        }
        let r = &mut self.peers[peer as usize].rails[rail];
        r.rcvd += 1;
        r.bytes_since_ack += HEADER_LEN + h.payload_len as usize;
        if h.flags & FLAG_ACK_REQ != 0
            || r.rcvd - r.ack_sent >= ACK_EVERY_FRAMES
            || r.bytes_since_ack >= ACK_EVERY_BYTES
        {
            self.queue_ack(peer, rail);
        }
    }

    /// Queues an acknowledgement on every rail to `peer` that has something to acknowledge.
    fn ack_all_rails(&mut self, peer: Rank) {
        for rail in 0..self.peers[peer as usize].rails.len() {
            let r = &self.peers[peer as usize].rails[rail];
            if r.up && r.rcvd > r.ack_sent {
                self.queue_ack(peer, rail);
            }
        }
    }

    fn payload(dest: Dest, h: &FrameHeader) -> Payload {
        Payload {
            dest,
            off: if h.kind == FrameKind::Data {
                h.value as usize
            } else {
                0
            },
            remaining: h.payload_len as usize,
            kind: h.kind,
            flags: h.flags,
            seq: h.seq,
            chunk_off: h.value,
            len: h.payload_len as usize,
        }
    }

    /// Acts on one frame header; returns where its payload goes, if it has one.
    fn handle_header(
        &mut self,
        peer: Rank,
        rail: usize,
        h: &FrameHeader,
    ) -> Result<Option<Payload>, ProtoError> {
        let len = h.value as usize;
        match h.kind {
            FrameKind::Eager | FrameKind::Rts => {
                if h.kind == FrameKind::Eager && len > self.cfg.eager_limit {
                    return Err(Self::violation(
                        peer,
                        rail,
                        h.seq,
                        "eager message above the eager limit",
                    ));
                }
                if h.kind == FrameKind::Rts && len > (1 << 40) {
                    return Err(Self::violation(peer, rail, h.seq, "message too large"));
                }
                let p = &mut self.peers[peer as usize];
                if h.seq < p.rx_seq || p.reorder.contains_key(&h.seq) {
                    // Resent after a rail failure. Deliver again only what was cut off, or what
                    // another rail is still receiving (whichever copy ends first completes it).
                    let mut dest = p.incomplete.remove(&h.seq).unwrap_or(Dest::Discard);
                    if dest == Dest::Discard && h.kind == FrameKind::Eager {
                        for r in p.rails.iter_mut() {
                            if let Some(c) = r.rx.cur.as_mut() {
                                if c.kind == FrameKind::Eager && c.seq == h.seq {
                                    dest = std::mem::replace(&mut c.dest, Dest::Discard);
                                }
                            }
                        }
                    }
                    return Ok((h.kind == FrameKind::Eager).then(|| Self::payload(dest, h)));
                }
                if let Err(what) = self.check_read_answer(peer, h) {
                    return Err(Self::violation(peer, rail, h.seq, what));
                }
                let p = &mut self.peers[peer as usize];
                if h.seq - p.rx_seq > (1 << 20) {
                    return Err(Self::violation(
                        peer,
                        rail,
                        h.seq,
                        "sequence number far ahead",
                    ));
                }
                let dest = if h.seq == p.rx_seq {
                    p.rx_seq += 1;
                    let d = self.arrive_in_order(peer, h);
                    self.drain_reorder(peer);
                    d
                } else {
                    let u = self.hold(peer, h);
                    self.peers[peer as usize].reorder.insert(h.seq, u);
                    (h.kind == FrameKind::Eager).then_some(Dest::Unexp(u))
                };
                Ok(dest.map(|d| Self::payload(d, h)))
            }
            FrameKind::Cts => {
                let p = &mut self.peers[peer as usize];
                match p.wait_cts.remove(&h.seq) {
                    Some(req) if h.flags & hx_wire::FLAG_REFUSED != 0 => {
                        self.write_refused(peer, h.seq, req, h.data)
                    }
                    Some(req) => self.start_data(peer, req, h),
                    // The refusal of an eager write, which waited for the target's word.
                    None if h.flags & hx_wire::FLAG_REFUSED != 0
                        && p.delivery_wait.contains_key(&h.seq) =>
                    {
                        let (req, _, _) = p.delivery_wait[&h.seq];
                        self.eager_write_refused(peer, h.seq, req, h.data)
                    }
                    // A resent CTS for data already under way.
                    None if h.seq < p.tx_seq => {}
                    None => {
                        return Err(Self::violation(
                            peer,
                            rail,
                            h.seq,
                            "CTS for no pending send",
                        ))
                    }
                }
                Ok(None)
            }
            FrameKind::Data => {
                let p = &mut self.peers[peer as usize];
                // Data frames mean the sender did not (or could not) copy directly: no FIN
                // may complete this receive any more.
                p.direct_granted.remove(&h.seq);
                let Some(&req) = p.rdv_recv.get(&h.seq) else {
                    if h.seq < p.rx_seq {
                        // A resent chunk of a message already complete.
                        return Ok(Some(Self::payload(Dest::Discard, h)));
                    }
                    return Err(Self::violation(peer, rail, h.seq, "data for no rendezvous"));
                };
                let (total, dup) = match self.reqs.get(req).map(|r| &r.kind) {
                    Some(ReqKind::Recv(rv)) => (
                        rv.status.map_or(0, |s| s.len),
                        rv.chunks.as_ref().is_some_and(|c| c.contains(&h.value)),
                    ),
                    _ => (0, false),
                };
                let end = h.value + h.payload_len as u64;
                if end > total as u64 {
                    return Err(Self::violation(
                        peer,
                        rail,
                        h.seq,
                        "data beyond message end",
                    ));
                }
                let dest = if dup { Dest::Discard } else { Dest::Req(req) };
                Ok(Some(Self::payload(dest, h)))
            }
            FrameKind::Bye => {
                self.peers[peer as usize].rails[rail].bye = true;
                Ok(None)
            }
            FrameKind::Fin => {
                // The sender copied the message into our buffer directly.
                let p = &mut self.peers[peer as usize];
                if !p.direct_granted.remove(&h.seq) {
                    return Err(Self::violation(
                        peer,
                        rail,
                        h.seq,
                        "FIN for no direct copy offered",
                    ));
                }
                let Some(req) = p.rdv_recv.remove(&h.seq) else {
                    return Err(Self::violation(peer, rail, h.seq, "FIN for no rendezvous"));
                };
                if let Some(r) = self.reqs.get_mut(req) {
                    if let ReqKind::Recv(rv) = &mut r.kind {
                        rv.unreceived = 0;
                        if r.completion == Completion::Pending {
                            r.completion = Completion::Done(rv.status.unwrap());
                            if let Some(f) = &mut self.finished {
                                f.push(req);
                            }
                        }
                    }
                }
                Ok(None)
            }
            FrameKind::Credit => {
                let p = &mut self.peers[peer as usize];
                p.credit_granted = p.credit_granted.max(h.value);
                Ok(None)
            }
            FrameKind::Delivered => {
                self.delivered(peer, h.seq, h.value);
                Ok(None)
            }
            FrameKind::Atomic => {
                self.peers[peer as usize].rails[rail].rx.atomic = Some(crate::rma::AtomicArrival {
                    id: h.seq,
                    op: h.src_ep,
                    ty: h.dst_ep,
                    key: h.tag,
                    addr: h.data,
                    lowest: h.value,
                });
                Ok(Some(Self::payload(Dest::Operands, h)))
            }
            FrameKind::AtomicAnswer => {
                self.atomic_answered(peer, h);
                Ok(None)
            }
            FrameKind::Heartbeat | FrameKind::Ack => Ok(None),
        }
    }

    /// An eager message or RTS whose turn has come, with its header just read.
    fn arrive_in_order(&mut self, peer: Rank, h: &FrameHeader) -> Option<Dest> {
        let len = h.value as usize;
        if h.kind == FrameKind::Rts && h.flags & (FLAG_RMA | FLAG_READ) != 0 {
            self.rma_arrived(RmaArrival {
                peer,
                seq: h.seq,
                src_ep: h.src_ep,
                flags: h.flags,
                tag: h.tag,
                addr: h.data,
                len,
            });
            return None;
        }
        if h.kind == FrameKind::Eager && h.flags & FLAG_RMA != 0 {
            // An eager write: into the region, if the target has it.
            self.eager_consumed(peer, len);
            return Some(
                self.eager_write(peer, h.seq, h.src_ep, h.tag, h.data, len)
                    .map_or(Dest::Discard, Dest::Req),
            );
        }
        if h.kind == FrameKind::Eager && h.flags & FLAG_READ != 0 {
            // Checked when its header came: a read of ours, of this length.
            self.eager_consumed(peer, len);
            let Some(w) = self.peers[peer as usize].rma_reads.remove(&h.tag) else {
                return Some(Dest::Discard);
            };
            let msg = crate::Status {
                source: peer,
                src_ep: h.src_ep,
                tag: w.key,
                len: w.len,
                truncated: false,
                data: None,
            };
            self.set_matched(w.req, msg, None);
            return Some(Dest::Req(w.req));
        }
        if let Some(req) = self.take_posted(h.dst_ep, peer, h.src_ep, h.tag) {
            if h.kind == FrameKind::Rts {
                self.start_rdv_recv(h.seq, req, msg_of(peer, h));
                return None;
            }
            self.set_matched(req, msg_of(peer, h), None);
            // Straight into the receiver's buffer: it holds no memory here.
            self.eager_consumed(peer, len);
            return Some(Dest::Req(req));
        }
        let u = self.hold(peer, h);
        self.eps.entry(h.dst_ep).unexpected.push_back(u);
        (h.kind == FrameKind::Eager).then_some(Dest::Unexp(u))
    }

    fn hold(&mut self, peer: Rank, h: &FrameHeader) -> Handle {
        let len = h.value as usize;
        let body = if h.kind == FrameKind::Eager {
            Body::Eager {
                data: self.alloc_buf(len),
                filled: 0,
                claimed: None,
            }
        } else if h.flags & (FLAG_RMA | FLAG_READ) != 0 {
            Body::Rma {
                flags: h.flags,
                addr: h.data,
            }
        } else {
            Body::Rts
        };
        self.unexp.insert(Unexp {
            src: peer,
            src_ep: h.src_ep,
            dst_ep: h.dst_ep,
            tag: h.tag,
            seq: h.seq,
            len,
            data: data_of(h),
            body,
            rma: match h.flags & (FLAG_RMA | FLAG_READ) {
                _ if h.kind != FrameKind::Eager => EagerRma::No,
                FLAG_READ => EagerRma::ReadAnswer,
                FLAG_RMA => EagerRma::Write { addr: h.data },
                _ => EagerRma::No,
            },
        })
    }

    fn drain_reorder(&mut self, peer: Rank) {
        loop {
            let p = &mut self.peers[peer as usize];
            let Some(u) = p.reorder.remove(&p.rx_seq) else {
                return;
            };
            p.rx_seq += 1;
            self.deliver_in_order(u);
        }
    }

    /// A frame's payload has fully arrived at `p.dest`: complete what is complete.
    fn payload_complete(&mut self, peer: Rank, rail: usize, p: &Payload) {
        if p.kind == FrameKind::Eager && p.flags & hx_wire::FLAG_DELIVERY != 0 {
            // The message is ours now (in a receive, held, or a copy sent again): say so.
            self.word_back(peer, p.seq);
        }
        // Count the frame first, so that acknowledgements sent on completion cover it.
        let mut h = FrameHeader::new(p.kind);
        h.flags = p.flags;
        h.payload_len = p.len as u32;
        if p.dest == Dest::Discard && p.kind == FrameKind::Data {
            // A resent chunk of a finished message: its sender waits for this acknowledgement.
            h.flags |= FLAG_ACK_REQ;
        }
        self.frame_received(peer, rail, &h);
        if p.kind == FrameKind::Atomic {
            let rx = &mut self.peers[peer as usize].rails[rail].rx;
            if let Some(a) = rx.atomic.take() {
                let operands = rx.operands;
                self.atomic_arrived(peer, a, operands);
            }
            return;
        }
        match p.dest {
            Dest::Req(req) => {
                let Some(r) = self.reqs.get_mut(req) else {
                    return;
                };
                let ReqKind::Recv(rv) = &mut r.kind else {
                    return;
                };
                if p.kind == FrameKind::Data {
                    if rv.chunks.get_or_insert_default().insert(p.chunk_off) {
                        rv.unreceived -= p.len.min(rv.unreceived);
                    }
                } else {
                    rv.unreceived = 0;
                }
                if rv.unreceived == 0 && r.completion == Completion::Pending {
                    r.completion = Completion::Done(rv.status.unwrap());
                    if let Some(f) = &mut self.finished {
                        f.push(req);
                    }
                    rv.chunks = None;
                    let rma_write = rv.rma_target;
                    if let Some((from, seq)) = rv.rdv {
                        if rma_write
                            && (self.peers[from as usize].lossless || p.kind == FrameKind::Eager)
                        {
                            // Over a lossless link, and for an eager write, the writer
                            // completes on this word, not when it has written (see rma.rs).
                            self.word_back(from, seq);
                        }
                        self.peers[from as usize].rdv_recv.remove(&seq);
                        self.peers[from as usize].direct_granted.remove(&seq);
                        // The sender completes when its data is acknowledged, on every rail
                        // that carried some (an eager write: on the word, which carries an
                        // acknowledgement itself).
                        if p.kind != FrameKind::Eager {
                            self.ack_all_rails(from);
                        }
                    }
                }
            }
            Dest::Unexp(u) => {
                if let Some(m) = self.unexp.get_mut(u) {
                    let len = m.len;
                    if let Body::Eager {
                        filled, claimed, ..
                    } = &mut m.body
                    {
                        *filled = len;
                        if let Some(req) = *claimed {
                            self.finish_claimed(u, req);
                        }
                    }
                }
            }
            Dest::Operands | Dest::Discard => {}
        }
    }
}

/// Copies payload bytes into their destination; bytes past the end of a (too small) receive
/// buffer are dropped and the receive reports truncation.
fn write_dest<B: Buffer>(
    reqs: &mut crate::slab::Slab<crate::core::Request<B>>,
    unexp: &mut crate::slab::Slab<Unexp>,
    dest: Dest,
    off: usize,
    data: &[u8],
) {
    let buf: Option<&mut [u8]> = match dest {
        Dest::Req(id) => reqs.get_mut(id).map(|r| r.buf.as_mut_slice()),
        Dest::Unexp(id) => unexp.get_mut(id).and_then(|u| match &mut u.body {
            Body::Eager { data, .. } => Some(data.as_mut_slice()),
            Body::Rts | Body::Rma { .. } => None,
        }),
        Dest::Operands | Dest::Discard => None,
    };
    if let Some(buf) = buf {
        if off < buf.len() {
            let n = data.len().min(buf.len() - off);
            buf[off..off + n].copy_from_slice(&data[..n]);
        }
    }
}
