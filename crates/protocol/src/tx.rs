//! Transmit side: per-rail queues of frames whose payloads are slices of the callers' buffers, the
//! placement of rendezvous data on rails according to the policy, and the per-rail log of frames
//! written but not yet acknowledged, which is what a broken rail's traffic is resent from.

use std::io::IoSlice;

use hx_wire::{FrameHeader, FrameKind, FLAG_ACK_REQ, HEADER_LEN};

use crate::core::{Peer, PullJob, ReqKind, Request};
use crate::{Buffer, Completion, Core, EpId, Policy, ProtoError, Rank, ReqId};

/// Frames in a rail's log beyond which the next frame asks for an acknowledgement.
const LOG_ACK_REQ: usize = 64;
/// Adaptive: from this size up, a message of a stream that goes both ways over links that keep
/// up (the CPU, not the wire, the limit) leaves in one part per rail, as stripe sends it,
/// rather than whole on one rail. Both ways over 4 unlimited rails that moved 4 MiB 1.08-1.15x
/// faster (2 MiB 1.01-1.13x, 1 MiB 1.00x); one way it did not (0.96-1.01x), nor a lone message
/// (a ping-pong of 2-4 MiB took 1.08-1.20x as long as with rails pulling its chunks).
const SPLIT_BOTH_WAYS_MIN: usize = 2 << 20;

pub(crate) enum Body {
    None,
    /// Bytes `off..off + len` of a request's buffer.
    Req(ReqId, usize, usize),
    /// A copy (an eager message already completed to its sender, kept for resending).
    Owned(Vec<u8>),
}

/// An inline send's frame header as [`Core::inline_start`] made it; derefs to the bytes to
/// write (the 48-byte form).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InlineHeader {
    bytes: [u8; HEADER_LEN],
}

impl std::ops::Deref for InlineHeader {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.bytes[3] as usize]
    }
}

pub(crate) struct TxItem {
    hdr: [u8; HEADER_LEN],
    body: Body,
    /// An eager send that completes when this frame is written.
    completes: Option<ReqId>,
    sent: usize,
    /// A chunk just pulled (adaptive) and never written on any rail: handed back, its bytes
    /// may be cut differently. A resent chunk keeps its bounds: the receiver knows chunks by
    /// their offset.
    pulled: bool,
}

impl TxItem {
    pub fn new(h: FrameHeader, body: Body, completes: Option<ReqId>) -> Self {
        TxItem {
            hdr: h.to_bytes(),
            body,
            completes,
            sent: 0,
            pulled: false,
        }
    }

    fn payload_len(&self) -> usize {
        match &self.body {
            Body::None => 0,
            Body::Req(_, _, len) => *len,
            Body::Owned(v) => v.len(),
        }
    }

    /// The header's length as written: HEADER_LEN, or MIN_HEADER_LEN for an inline send's
    /// frame (its header says which).
    fn hlen(&self) -> usize {
        self.hdr[3] as usize
    }

    pub fn total_len(&self) -> usize {
        self.hlen() + self.payload_len()
    }

    pub fn kind(&self) -> u8 {
        self.hdr[4]
    }

    /// Frames that are logged, acknowledged and resent after a rail failure.
    pub fn reliable(&self) -> bool {
        FrameKind::from_u8(self.kind()).is_ok_and(FrameKind::reliable)
    }

    fn set_ack(&mut self, ack: u64) {
        self.hdr[40..48].copy_from_slice(&ack.to_le_bytes());
        if self.kind() == FrameKind::Ack as u8 {
            self.hdr[32..40].copy_from_slice(&ack.to_le_bytes());
        }
    }

    /// Small frames that steer transfers rather than carry data.
    pub fn is_control(&self) -> bool {
        matches!(
            FrameKind::from_u8(self.kind()),
            Ok(FrameKind::Rts
                | FrameKind::Cts
                | FrameKind::Credit
                | FrameKind::Ack
                | FrameKind::Fin
                | FrameKind::Delivered
                | FrameKind::Atomic
                | FrameKind::AtomicAnswer)
        )
    }

    pub fn not_started(&self) -> bool {
        self.sent == 0
    }

    pub(crate) fn reset(&mut self) {
        self.sent = 0;
        self.pulled = false;
    }
}

impl<B: Buffer> Core<B> {
    /// May a small eager message of `len` bytes to `peer` leave now, ahead of nothing: a known
    /// peer that has not failed, nothing queued, parked or to be pulled for it, and eager
    /// credit left (what [`inline_start`](Self::inline_start) and [`lane_ok`](Self::lane_ok)
    /// both need).
    #[inline]
    pub(crate) fn leaves_at_once(&self, peer: Rank, len: usize) -> bool {
        if peer == self.me || len > self.cfg.eager_limit {
            return false;
        }
        let Some(p) = self.peers.get(peer as usize) else {
            return false;
        };
        let cost = len as u64 + crate::EAGER_OVERHEAD;
        p.failed.is_none()
            && p.parked.is_empty()
            && p.pull_q.is_empty()
            && p.rails.iter().all(|r| r.tx.is_empty())
            && p.credit_used + cost <= self.cfg.eager_credits as u64 + p.credit_granted
    }

    /// Does `rail` to `peer` have bytes to write (queued, or data it may pull)?
    pub fn tx_pending(&self, peer: Rank, rail: usize) -> bool {
        let p = &self.peers[peer as usize];
        let r = &p.rails[rail];
        r.up && (!r.tx.is_empty() || !p.pull_q.is_empty())
    }

    /// A small eager message to a peer whose rails have nothing queued may skip the request,
    /// the queue and the flush: the caller writes the returned header's bytes and the payload
    /// on the returned rail itself, then reports with [`inline_written`](Self::inline_written).
    /// The header is the 48-byte form (immediate data in its value field). `None`:
    /// use [`send_with_data`](Self::send_with_data). Rail, sequence number, eager credit and
    /// piggybacked acknowledgement are taken here, as `send_with_data` and the flush would.
    pub fn inline_start(
        &mut self,
        peer: Rank,
        src_ep: EpId,
        dst_ep: EpId,
        tag: u64,
        data: Option<u64>,
        len: usize,
    ) -> Option<(usize, InlineHeader)> {
        if !self.leaves_at_once(peer, len) {
            return None;
        }
        let cost = len as u64 + crate::EAGER_OVERHEAD;
        let p = &self.peers[peer as usize];
        let rail = match &p.rails[..] {
            // A shared-memory peer's only rail: every policy's choice (see pick_rail_for).
            [r] if r.up && (r.settled || self.cfg.policy != Policy::Bind) => 0,
            _ => self.pick_rail_for(peer, len)?,
        };
        let p = &mut self.peers[peer as usize];
        p.credit_used += cost;
        let mut flags = if data.is_some() {
            hx_wire::FLAG_DATA
        } else {
            0
        };
        let mut ack = 0;
        let seq = p.tx_seq;
        p.tx_seq += 1;
        let r = &mut p.rails[rail];
        if !p.lossless {
            ack = r.rcvd;
            r.ack_sent = r.rcvd;
            if r.log.len() >= LOG_ACK_REQ {
                flags |= FLAG_ACK_REQ;
            }
        }
        // The short header: 48 bytes, any immediate data in the value field. Over shared
        // memory a message of up to 8 bytes and its record word then fill one cache line
        // instead of spilling into a second: 5% of the one-way time with lines crossing cores
        // fast, 18% when they cross slowly.
        let hdr = hx_wire::eager_header_short(hx_wire::EagerHeader {
            flags,
            src_ep,
            dst_ep,
            len: len as u32,
            seq,
            tag,
            ack,
            data: data.unwrap_or(0),
        });
        Some((rail, InlineHeader { bytes: hdr }))
    }

    /// The caller wrote `written` bytes of `hdr` followed by `payload` (from
    /// [`inline_start`](Self::inline_start)) on `rail`; what is left is queued as a copy, and
    /// over a lossy link the frame is kept for a resend until acknowledged.
    #[inline]
    pub fn inline_written(
        &mut self,
        peer: Rank,
        rail: usize,
        hdr: &InlineHeader,
        payload: &[u8],
        written: usize,
    ) {
        let total = hdr.len() + payload.len();
        let written = written.min(total);
        let p = &mut self.peers[peer as usize];
        p.rails[rail].tx_bytes += written as u64;
        if written == total && p.lossless {
            return;
        }
        self.inline_rest(peer, rail, hdr, payload, written);
    }

    /// What [`inline_written`](Self::inline_written) does for a partial write or a lossy link.
    fn inline_rest(
        &mut self,
        peer: Rank,
        rail: usize,
        hdr: &InlineHeader,
        payload: &[u8],
        written: usize,
    ) {
        let total = hdr.len() + payload.len();
        let mut copy = self.spare_bufs.pop().unwrap_or_default();
        copy.clear();
        copy.extend_from_slice(payload);
        let item = TxItem {
            hdr: hdr.bytes,
            body: Body::Owned(copy),
            completes: None,
            sent: written,
            pulled: false,
        };
        if written == total {
            self.item_written(peer, rail, item);
            return;
        }
        let r = &mut self.peers[peer as usize].rails[rail];
        r.queued += total - written;
        r.tx.push_front(item);
        self.mark_dirty(peer);
    }

    /// A send that [`inline_start`](Self::inline_start) let leave at once, as a finished
    /// request (for callers that need one). Without tracking of finished requests it lives in
    /// a small table of its own (`InlineDone`): a whole request
    /// made, completed and taken again was about a quarter of a small send's instructions.
    pub fn inline_request(&mut self, peer: Rank, src_ep: EpId, tag: u64, buf: B) -> ReqId {
        if self.finished.is_none() {
            let h = self
                .inline_done
                .insert(crate::core::InlineDone { buf, tag, src_ep });
            return crate::core::inline_handle(h);
        }
        let req = self.reqs.insert(Request {
            detached: false,
            buf,
            kind: ReqKind::Send(crate::core::SendState {
                peer,
                unacked: 0,
                delivery: crate::core::Delivery::NotAsked,
                src_ep,
                tag,
                region: None,
            }),
            completion: Completion::Pending,
        });
        self.send_done(req, src_ep, tag);
        req
    }

    /// `rail` to `peer` has at most a few frames to write and no large-message data to pull:
    /// a write needs only a few slices.
    pub fn tx_few(&self, peer: Rank, rail: usize) -> bool {
        let p = &self.peers[peer as usize];
        p.pull_q.is_empty() && p.rails.get(rail).is_some_and(|r| r.tx.len() <= 3)
    }

    /// Does any rail to `peer` have bytes to write, or is anything parked waiting for a rail?
    pub fn peer_tx_pending(&self, peer: Rank) -> bool {
        let p = &self.peers[peer as usize];
        !p.pull_q.is_empty() || !p.parked.is_empty() || p.rails.iter().any(|r| !r.tx.is_empty())
    }

    /// Frames written to `peer` and not yet acknowledged, over all rails.
    pub fn unacked_frames(&self, peer: Rank) -> usize {
        self.peers[peer as usize]
            .rails
            .iter()
            .map(|r| r.log.len())
            .sum()
    }

    /// Fills `out` with the next bytes `rail` to `peer` should write; returns how many slices.
    /// A rail with no data frame waiting to start first pulls chunks of pending large-message
    /// data: it is asked only when its socket has room, which is what makes faster rails carry
    /// more.
    pub fn tx_iovecs<'a>(&'a mut self, peer: Rank, rail: usize, out: &mut [IoSlice<'a>]) -> usize {
        let r = &mut self.peers[peer as usize].rails[rail];
        if !r.up {
            return 0;
        }
        r.offered = 0;
        // Pulled behind control frames and the frame a full socket stopped in the middle of:
        // written alone, those took a second write per EPOLLOUT (4 unlimited rails both ways,
        // 4 MiB: 4 writes in 10 were such rests, of 9-200 KiB).
        let p = &self.peers[peer as usize];
        let r = &p.rails[rail];
        let data = FrameKind::Data as u8;
        if !p.pull_q.is_empty() && !r.tx.iter().any(|i| i.sent == 0 && i.kind() == data) {
            let slots = out.len().saturating_sub(2 * r.tx.len()) / 2;
            self.pull_turn(peer, rail, slots);
        }
        // Frames not started yet carry the freshest acknowledgement.
        let r = &mut self.peers[peer as usize].rails[rail];
        let (rcvd, want_ack) = (r.rcvd, r.log.len() >= LOG_ACK_REQ);
        let mut patched = false;
        for item in r.tx.iter_mut().take(out.len()) {
            if item.sent == 0 {
                item.set_ack(rcvd);
                if want_ack {
                    item.hdr[5] |= FLAG_ACK_REQ;
                }
                patched = true;
            }
        }
        if patched {
            r.ack_sent = rcvd;
        }
        // What the slices below will show, in bytes (they take one slot for a header not yet
        // written, one for a payload not yet written): tx_done tells whether the link took it all.
        let (mut slots, mut offered) = (0, 0);
        for item in &r.tx {
            let hlen = item.hlen();
            let hdr = usize::from(item.sent < hlen);
            let body = usize::from(item.total_len() > item.sent.max(hlen));
            if slots + hdr + body > out.len() {
                if hdr == 1 && slots < out.len() {
                    offered += hlen - item.sent;
                }
                break;
            }
            slots += hdr + body;
            offered += item.total_len() - item.sent;
        }
        r.offered = offered;
        let this: &'a Core<B> = self;
        let mut n = 0;
        for item in &this.peers[peer as usize].rails[rail].tx {
            if n == out.len() {
                break;
            }
            let hlen = item.hlen();
            if item.sent < hlen {
                out[n] = IoSlice::new(&item.hdr[item.sent..hlen]);
                n += 1;
            }
            let done = item.sent.saturating_sub(hlen);
            let bytes = match &item.body {
                Body::None => None,
                Body::Owned(v) => v.get(done..),
                Body::Req(req, off, len) => this
                    .reqs
                    .get(*req)
                    .and_then(|r| r.buf.as_slice().get(off + done..off + len)),
            };
            match bytes {
                Some([]) => {}
                Some(b) if n < out.len() => {
                    out[n] = IoSlice::new(b);
                    n += 1;
                }
                Some(_) => break,
                None if item.payload_len() == 0 => {}
                // Cannot happen while the request lives; stop rather than send a short frame.
                None => break,
            }
        }
        n
    }

    /// Records that `n` bytes of what [`tx_iovecs`](Self::tx_iovecs) showed were written.
    pub fn tx_done(&mut self, peer: Rank, rail: usize, mut n: usize) {
        let full = n < std::mem::take(&mut self.peers[peer as usize].rails[rail].offered);
        while n > 0 {
            let r = &mut self.peers[peer as usize].rails[rail];
            let Some(item) = r.tx.front_mut() else {
                break;
            };
            let take = n.min(item.total_len() - item.sent);
            item.sent += take;
            n -= take;
            r.queued -= take;
            r.tx_bytes += take as u64;
            if item.sent < item.total_len() {
                break;
            }
            let item = r.tx.pop_front().unwrap();
            self.item_written(peer, rail, item);
        }
        if full && self.cfg.policy == Policy::Adaptive {
            self.hand_back(peer, rail);
        }
    }

    /// Adaptive: `rail`'s socket is full. The chunks it pulled and did not start writing go
    /// back to the pull queue, for whichever rail has room first: a rail holds at most the one
    /// frame it is in the middle of, so a turn may pull as much as a write can carry without a
    /// slow rail sitting on work a faster one would have taken.
    fn hand_back(&mut self, peer: Rank, rail: usize) {
        let p = &mut self.peers[peer as usize];
        if p.rails.iter().filter(|r| r.shares()).count() < 2 {
            return;
        }
        let mut back = false;
        loop {
            let r = &mut p.rails[rail];
            let Some(item) = r.tx.back() else {
                break;
            };
            let (Body::Req(req, off, len), 0) = (&item.body, item.sent) else {
                break;
            };
            if item.kind() != FrameKind::Data as u8 {
                break;
            }
            let (req, off, len, fresh) = (*req, *off, *len, item.pulled);
            let seq = u64::from_le_bytes(item.hdr[16..24].try_into().unwrap());
            r.queued -= item.total_len();
            r.tx.pop_back();
            back = true;
            if let Some(j) = p
                .pull_q
                .iter_mut()
                .find(|j| fresh && j.req == req && !j.whole && j.next == off + len)
            {
                j.next = off;
                continue;
            }
            let last = self
                .reqs
                .get(req)
                .is_some_and(|r| r.buf.as_slice().len() == off + len);
            p.pull_q.push_front(PullJob {
                req,
                seq,
                next: off,
                end: off + len,
                whole: !fresh,
                last,
            });
        }
        if !back {
            return;
        }
        // The frames handed back were stamped with the latest acknowledgement; what the peer
        // will see is the one in the frame being written.
        let r = &mut p.rails[rail];
        match r.tx.front() {
            Some(f) => r.ack_sent = u64::from_le_bytes(f.hdr[40..48].try_into().unwrap()),
            None => self.queue_ack(peer, rail),
        }
        self.mark_dirty(peer);
    }

    fn item_written(&mut self, peer: Rank, rail: usize, mut item: TxItem) {
        if !item.reliable() {
            if item.kind() == FrameKind::Ack as u8 {
                let r = &mut self.peers[peer as usize].rails[rail];
                r.ack_queued = false;
                // Frames that arrived after this ack was stamped still need one.
                if r.rcvd > r.ack_sent {
                    self.queue_ack(peer, rail);
                }
            }
            return;
        }
        if self.peers[peer as usize].lossless {
            // Written is delivered: complete now, log nothing.
            if let Some(req) = item.completes.take() {
                self.eager_sent(req, &item);
            }
            match item.body {
                Body::Req(req, _, len) if item.kind() == FrameKind::Data as u8 => {
                    self.data_acked(req, len)
                }
                Body::Owned(v) if self.spare_bufs.len() < 64 => self.spare_bufs.push(v),
                _ => {}
            }
            return;
        }
        if let Some(req) = item.completes.take() {
            // An eager send is complete once written; keep a copy in case the rail breaks
            // before the peer acknowledges it.
            if let Body::Req(_, off, len) = item.body {
                let mut copy = self.spare_bufs.pop().unwrap_or_default();
                copy.clear();
                if let Some(r) = self.reqs.get(req) {
                    copy.extend_from_slice(&r.buf.as_slice()[off..off + len]);
                }
                item.body = Body::Owned(copy);
            }
            self.eager_sent(req, &item);
        }
        item.reset();
        let r = &mut self.peers[peer as usize].rails[rail];
        r.log_bytes += item.total_len();
        r.log.push_back(item);
        r.logged += 1;
    }

    /// Eager send `req` (carried by `item`) has left: complete, unless it waits for the
    /// receiver's word and that has not come yet.
    fn eager_sent(&mut self, req: ReqId, item: &TxItem) {
        if let Some(ReqKind::Send(s)) = self.reqs.get_mut(req).map(|r| &mut r.kind) {
            match s.delivery {
                crate::core::Delivery::Waiting => {
                    s.delivery = crate::core::Delivery::Sent;
                    return;
                }
                crate::core::Delivery::Refused(code) => {
                    let peer = s.peer;
                    self.fail_refused_write(peer, req, code);
                    return;
                }
                _ => {}
            }
        }
        let src_ep = u16::from_le_bytes([item.hdr[6], item.hdr[7]]);
        let tag = u64::from_le_bytes(item.hdr[24..32].try_into().unwrap());
        self.send_done(req, src_ep, tag);
    }

    /// The receiver has taken a delivery-flagged eager message `seq`: the word back is held
    /// (see [`release_words`](Self::release_words)).
    pub(crate) fn word_back(&mut self, peer: Rank, seq: u64) {
        let words = &mut self.peers[peer as usize].words_back;
        if words.is_empty() {
            self.words_peers.push(peer);
        }
        words.push(seq);
    }

    /// Are words back held for some peer? The driver calls
    /// [`release_words`](Self::release_words) before it writes when so.
    #[inline]
    pub fn words_waiting(&self) -> bool {
        !self.words_peers.is_empty()
    }

    /// Queues every held word back. The driver calls this before each write, so a word waits
    /// at most for the end of the round that took its message; the words of that round go
    /// together (one frame per run of sequence numbers), and whatever else is queued for
    /// their peer meanwhile carries them in the same write.
    pub fn release_words(&mut self) {
        let peers = std::mem::take(&mut self.words_peers);
        for &peer in &peers {
            if !self.peers[peer as usize].words_back.is_empty() {
                let rail = self.pick_rail(peer);
                self.words_out(peer, rail);
            }
        }
        self.words_peers = peers;
        self.words_peers.clear();
    }

    /// Queues `peer`'s held words on `rail`: one Delivered frame per run of consecutive
    /// sequence numbers (`seq` the first, `value` how many).
    pub(crate) fn words_out(&mut self, peer: Rank, rail: Option<usize>) {
        let mut words = std::mem::take(&mut self.peers[peer as usize].words_back);
        let mut i = 0;
        while i < words.len() {
            let first = words[i];
            let mut n = 1;
            while i + (n as usize) < words.len() && words[i + n as usize] == first + n {
                n += 1;
            }
            i += n as usize;
            let mut d = FrameHeader::new(FrameKind::Delivered);
            d.seq = first;
            d.value = n;
            self.enqueue_on(peer, rail, TxItem::new(d, Body::None, None));
        }
        // Keep the allocation.
        words.clear();
        let held = &mut self.peers[peer as usize].words_back;
        if held.is_empty() {
            *held = words;
        }
    }

    /// The receiver says it has taken the `count` eager messages from `seq` on (a count of 0
    /// from an older sender means one): their delivery-complete sends complete, or will once
    /// they have left.
    pub(crate) fn delivered(&mut self, peer: Rank, seq: u64, count: u64) {
        let count = count.max(1);
        let waiting = &self.peers[peer as usize].delivery_wait;
        if count <= waiting.len() as u64 {
            // The usual word: a run no longer than what waits, looked up one by one.
            for k in 0..count {
                self.delivered_one(peer, seq.wrapping_add(k));
            }
            return;
        }
        // Bounded by what is waiting, whatever count the frame claims.
        let mut seqs: Vec<u64> = waiting
            .keys()
            .copied()
            .filter(|s| s.wrapping_sub(seq) < count)
            .collect();
        seqs.sort_unstable();
        for s in seqs {
            self.delivered_one(peer, s);
        }
    }

    fn delivered_one(&mut self, peer: Rank, seq: u64) {
        // A second word for one message (its frame was sent again after a rail failure) finds
        // nothing.
        let Some((req, src_ep, tag)) = self.peers[peer as usize].delivery_wait.remove(&seq) else {
            return;
        };
        let Some(ReqKind::Send(s)) = self.reqs.get_mut(req).map(|r| &mut r.kind) else {
            return;
        };
        if s.delivery == crate::core::Delivery::Sent {
            self.send_done(req, src_ep, tag);
        } else {
            s.delivery = crate::core::Delivery::Told;
        }
    }

    /// The peer has received `count` reliable frames on `rail` (cumulative).
    pub(crate) fn handle_ack(
        &mut self,
        peer: Rank,
        rail: usize,
        count: u64,
    ) -> Result<(), ProtoError> {
        if self.peers[peer as usize].lossless {
            return Ok(());
        }
        let mut r = &mut self.peers[peer as usize].rails[rail];
        if count <= r.acked {
            return Ok(());
        }
        if count > r.logged {
            return Err(ProtoError::Unexpected {
                peer,
                rail,
                seq: count,
                what: "acknowledgement of frames never sent",
            });
        }
        while r.acked < count {
            r.acked += 1;
            let item = r
                .log
                .pop_front()
                .expect("log holds every unacknowledged frame");
            r.log_bytes -= item.total_len();
            match item.body {
                Body::Req(req, _, len) => {
                    self.data_acked(req, len);
                }
                Body::Owned(v) => {
                    if self.spare_bufs.len() < 64 {
                        self.spare_bufs.push(v);
                    }
                }
                Body::None => {}
            }
            r = &mut self.peers[peer as usize].rails[rail];
        }
        Ok(())
    }

    fn data_acked(&mut self, req: ReqId, len: usize) {
        let me = self.me;
        if let Some(r) = self.reqs.get_mut(req) {
            let total = r.buf.as_slice().len();
            if let ReqKind::Send(s) = &mut r.kind {
                s.unacked -= len.min(s.unacked);
                if s.unacked == 0 && r.completion == Completion::Pending {
                    if s.delivery == crate::core::Delivery::Waiting {
                        // A write over a lossless link: written is not yet placed; the
                        // target's word completes it.
                        s.delivery = crate::core::Delivery::Sent;
                        return;
                    }
                    if let Some(f) = &mut self.finished {
                        f.push(req);
                    }
                    r.completion = Completion::Done(crate::Status {
                        source: me,
                        src_ep: s.src_ep,
                        tag: s.tag,
                        len: total,
                        data: None,
                        truncated: false,
                    });
                }
            }
        }
    }

    /// The receiver is ready for rendezvous message `req` (its CTS is `cts`): have the driver
    /// copy it directly if the receiver offered that, else place its data on the rails.
    pub(crate) fn start_data(&mut self, peer: Rank, req: ReqId, cts: &FrameHeader) {
        let direct = cts.flags & hx_wire::FLAG_DIRECT != 0 && self.peers[peer as usize].direct;
        match self.reqs.get(req) {
            Some(r) if direct => {
                let msg_len = r.buf.as_slice().len();
                self.direct_q.push_back(crate::DirectWrite {
                    peer,
                    remote_addr: cts.value,
                    len: msg_len.min(cts.tag as usize),
                    req,
                    seq: cts.seq,
                    msg_len,
                });
            }
            _ => self.start_data_frames(peer, req, cts.seq),
        }
    }

    pub(crate) fn start_data_frames(&mut self, peer: Rank, req: ReqId, seq: u64) {
        let len = match self.reqs.get(req) {
            Some(r) => r.buf.as_slice().len(),
            None => return,
        };
        if len == 0 {
            self.data_acked(req, 0);
            return;
        }
        let lone_rail = self.peers[peer as usize].rails.len() == 1;
        match self.cfg.policy {
            // One rail, and never another: nothing to share, so no pulling (bind's path).
            Policy::Adaptive if lone_rail => {
                self.enqueue_data(peer, Some(0), req, seq, 0, len, len)
            }
            Policy::Adaptive if len >= SPLIT_BOTH_WAYS_MIN && self.splits_both_ways(peer) => {
                self.split_over_rails(peer, req, seq, len)
            }
            Policy::Adaptive => {
                self.peers[peer as usize].pull_q.push_back(PullJob {
                    req,
                    seq,
                    next: 0,
                    end: len,
                    whole: false,
                    last: true,
                });
                self.mark_dirty(peer);
            }
            Policy::Bind | Policy::RoundRobin => {
                let rail = self.pick_rail(peer);
                self.enqueue_data(peer, rail, req, seq, 0, len, len);
            }
            Policy::Stripe => self.split_over_rails(peer, req, seq, len),
        }
    }

    /// Stripe's placement: one part of the message per live rail.
    fn split_over_rails(&mut self, peer: Rank, req: ReqId, seq: u64, len: usize) {
        let live: Vec<usize> = self.live_rails(peer);
        if live.is_empty() {
            self.enqueue_data(peer, None, req, seq, 0, len, len);
            return;
        }
        let part = len.div_ceil(live.len());
        for (i, &rail) in live.iter().enumerate() {
            let off = i * part;
            if off >= len {
                break;
            }
            self.enqueue_data(peer, Some(rail), req, seq, off, part.min(len - off), len);
        }
    }

    /// Adaptive: is `peer` in a stream both ways (messages of ours wait to leave, and the
    /// peer's large messages are arriving) over links that all keep up? See
    /// [`SPLIT_BOTH_WAYS_MIN`].
    fn splits_both_ways(&self, peer: Rank) -> bool {
        let p = &self.peers[peer as usize];
        p.streaming()
            && !p.rdv_recv.is_empty()
            && (0..p.rails.len()).all(|r| !p.rails[r].up || p.keeps_up(r))
    }

    pub(crate) fn live_rails(&self, peer: Rank) -> Vec<usize> {
        let p = &self.peers[peer as usize];
        (0..p.rails.len()).filter(|&r| p.rails[r].up).collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn enqueue_data(
        &mut self,
        peer: Rank,
        rail: Option<usize>,
        req: ReqId,
        seq: u64,
        off: usize,
        len: usize,
        msg_len: usize,
    ) {
        let max = self.cfg.max_chunk;
        let mut at = off;
        while at < off + len {
            let n = max.min(off + len - at);
            self.enqueue_on(peer, rail, data_item(req, seq, at, n, at + n == msg_len));
            at += n;
        }
    }

    /// Adaptive striping has work for `peer`'s rails to pull, and more than one rail to share it.
    pub fn pull_pending(&self, peer: Rank) -> bool {
        let p = &self.peers[peer as usize];
        self.cfg.policy == Policy::Adaptive
            && !p.pull_q.is_empty()
            && p.rails.iter().filter(|r| r.up).nth(1).is_some()
    }

    /// Does the adaptive policy judge `peer`'s links (`KeepUp`)?
    /// Only over two rails or more: the driver's per-flush looks are skipped otherwise (every
    /// other policy, a shared-memory peer).
    pub fn judges_links(&self, peer: Rank) -> bool {
        self.cfg.policy == Policy::Adaptive && self.peers[peer as usize].rails.len() > 1
    }

    /// Adaptive: the pull rounds about to start want each link's backlog
    /// ([`set_link_backlog`](Self::set_link_backlog)) to share the work out: work is pending,
    /// and some rail's link does not keep up with writes (those that do take all they can).
    pub fn wants_link_backlogs(&self, peer: Rank) -> bool {
        let p = &self.peers[peer as usize];
        self.pull_pending(peer)
            && (p.streaming() || (0..p.rails.len()).any(|r| p.rails[r].up && !p.keeps_up(r)))
    }

    /// Adaptive: at `now` (microseconds on any steady clock), `rail`'s link holds `backlog`
    /// bytes of what was written to it and has not delivered them yet (a socket's unsent and
    /// unacknowledged bytes). The driver reports it before [`tx_round`](Self::tx_round); links
    /// that cannot tell leave it at 0. Reports also measure how fast each link drains.
    pub fn set_link_backlog(&mut self, peer: Rank, rail: usize, backlog: usize, now: u64) {
        // Intervals shorter than this say more about bursts than about the link's rate.
        const MIN_INTERVAL_US: u64 = 500;
        let Some(r) = self.peers[peer as usize].rails.get_mut(rail) else {
            return;
        };
        r.link_backlog = backlog;
        let d = &mut r.drain;
        // A link that ran dry in between (or was replaced) measures nothing.
        let written = r.tx_bytes.checked_sub(d.written);
        let busy = d.backlog > 0 && backlog > 0 && d.at > 0 && now > d.at && written.is_some();
        if busy && now < d.at + MIN_INTERVAL_US {
            return;
        }
        // Nor one that carried data the other way meanwhile or just before (see DrainRate).
        let quiet = r.rx_bytes.saturating_sub(d.read) <= REVERSE_QUIET;
        if let (true, true, true, Some(written)) = (busy, quiet, d.quiet, written) {
            let drained = written as f64 - (backlog as f64 - d.backlog as f64);
            if drained > 0.0 {
                let sample = drained / (now - d.at) as f64;
                d.rate = if d.rate == 0.0 {
                    sample
                } else {
                    d.rate + (sample - d.rate) / 8.0
                };
            }
        }
        d.at = now.max(1);
        d.written = r.tx_bytes;
        d.backlog = backlog;
        d.read = r.rx_bytes;
        d.quiet = quiet;
    }

    /// Adaptive: after a flush of `peer`'s rails (between [`tx_round`](Self::tx_round)'s start
    /// and end), should the driver report how much of what it wrote `rail`'s link still holds
    /// ([`backlog_after_write`](Self::backlog_after_write))? Only after flushes that wrote
    /// enough to tell, and once a link is judged, only now and then (each report costs a
    /// syscall).
    pub fn wants_backlog_after_write(&mut self, peer: Rank, rail: usize) -> bool {
        let p = &mut self.peers[peer as usize];
        // (A stream takes whole messages per rail whatever the links do: nothing to judge for.)
        if self.cfg.policy != Policy::Adaptive || p.rails.len() < 2 || p.streaming() {
            return false;
        }
        match p.rails.get_mut(rail) {
            Some(r) if r.up => r.keep_up.wants_judging(r.tx_bytes),
            _ => false,
        }
    }

    /// Adaptive: right after this flush's writes, at `now` (microseconds on any steady clock),
    /// `rail`'s link still holds `backlog` bytes (a socket's unsent and unacknowledged bytes):
    /// whether it keeps up with writes (`KeepUp`).
    pub fn backlog_after_write(&mut self, peer: Rank, rail: usize, backlog: usize, now: u64) {
        if let Some(r) = self.peers[peer as usize].rails.get_mut(rail) {
            r.keep_up.judge(r.tx_bytes, backlog, now);
        }
    }

    /// Adaptive: before a flush writes to `rail`, does the core want to know how much its link
    /// still holds ([`backlog_before_write`](Self::backlog_before_write))? Only after a flush
    /// that left much behind: how fast it drains tells a token bucket with tokens from a link
    /// that keeps up.
    pub fn wants_backlog_before_write(&self, peer: Rank, rail: usize) -> bool {
        self.peers[peer as usize]
            .rails
            .get(rail)
            .is_some_and(|r| r.keep_up.timing())
    }

    /// Adaptive: before this flush writes, at `now`, `rail`'s link holds `backlog` bytes.
    pub fn backlog_before_write(&mut self, peer: Rank, rail: usize, backlog: usize, now: u64) {
        if let Some(r) = self.peers[peer as usize].rails.get_mut(rail) {
            r.keep_up.time_drain(backlog, now);
        }
    }

    /// The driver starts (`start`) or ends rounds of turns on `peer`'s rails, one write each
    /// per round until no rail takes more. Adaptive: in them each rail pulls at most its share
    /// of what is waiting, the share after which every link would be done at the same time
    /// (backlogs and rates as last reported; equal rates if any is unknown). Otherwise each
    /// socket's first write takes whatever it has room for, and once a burst has gone into the
    /// sockets some have a lot more to carry than others: on wire-limited rails the burst ends
    /// when the last drains. Outside rounds (a rail's socket drained) a turn pulls what one
    /// write carries, and a full socket hands back what it did not take.
    pub fn tx_round(&mut self, peer: Rank, start: bool) {
        let p = &mut self.peers[peer as usize];
        for r in &mut p.rails {
            r.turn_cap = usize::MAX;
            if start {
                r.keep_up.flush_starts(r.tx_bytes);
            }
        }
        if !start || p.pull_q.is_empty() || self.cfg.policy != Policy::Adaptive {
            return;
        }
        let mut up = std::mem::take(&mut self.round_scratch);
        up.clear();
        // Measured rates in whole powers of two of the fastest: equal links measure up to a
        // fifth apart, and shares that follow that noise cost more at a burst's end than
        // finer weights gain on unequal links. Unknown (a link not measured yet): all equal.
        let fastest = p.rails.iter().filter(|r| r.up).map(|r| r.drain.rate);
        let fastest = fastest.fold(0.0, f64::max);
        // Both ways at once all equal: rates measured before say little (see DrainRate).
        let known = p
            .rails
            .iter()
            .all(|r| !r.up || (r.drain.rate > 0.0 && r.drain.quiet));
        for (i, r) in p.rails.iter().enumerate().filter(|(_, r)| r.up) {
            let rate = if known {
                (r.drain.rate / fastest).log2().round().exp2()
            } else {
                1.0
            };
            up.push((r.link_backlog as f64 / rate, rate, i));
        }
        if up.len() >= 2 {
            Self::share_round(p, &mut up);
        }
        self.round_scratch = up;
    }

    /// Water-filling: the time `t` by which all links would be done, found by adding the links
    /// in the order they run dry; a link already busy past `t` takes nothing.
    fn share_round(p: &mut Peer, up: &mut [(f64, f64, usize)]) {
        up.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut left = p.pull_q.iter().map(|j| j.end - j.next).sum::<usize>() as f64;
        let (mut t, mut rate_sum) = (up[0].0, 0.0);
        for (k, &(busy, rate, _)) in up.iter().enumerate() {
            left -= (busy - t) * rate_sum;
            t = busy;
            rate_sum += rate;
            let next = up.get(k + 1).map_or(f64::INFINITY, |n| n.0);
            if t + left / rate_sum <= next {
                t += left / rate_sum;
                break;
            }
        }
        for &(busy, rate, i) in up.iter() {
            let r = &mut p.rails[i];
            r.turn_cap = ((t - busy).max(0.0) * rate).ceil() as usize;
            r.round_pulled = 0;
        }
    }

    /// Adaptive: `rail` has room and nothing queued; it pulls work. Chunks shrink towards a
    /// message's end (guided self-scheduling) so that all rails finish together.
    ///
    /// How much per turn: a lone rail takes whole chunks (`max_chunk` each) of everything
    /// waiting, in one write. Several rails: one chunk of each waiting message, so that
    /// medium-size messages still leave over every rail, as many as one write carries (on fast
    /// links the CPU, not the wire, is the limit: few writes per byte); in a stream, whole
    /// messages one after another instead (see below). A rail whose socket
    /// takes less hands the chunks it did not start back ([`hand_back`](Self::hand_back)), so
    /// a slow rail never sits on work a faster one would pull. At most `slots` chunks (each
    /// takes two iovecs); a chunk handed back is taken whole.
    fn pull_turn(&mut self, peer: Rank, rail: usize, slots: usize) {
        let (min, max) = (self.cfg.min_chunk, self.cfg.max_chunk);
        let p = &mut self.peers[peer as usize];
        let rails = p.rails.iter().filter(|r| r.shares()).count().max(1);
        let mut chunks = 0;
        let mut i = 0;
        // Guided self-scheduling: a lone message in chunks of 1/(2 x rails) of what is left of
        // it; many messages in flight in chunks sized by all that is waiting (1/(4 x rails)
        // of it: few frames and few reads at the receiver, yet small last chunks so that
        // unequal rails still finish together).
        let mut waiting: usize = if rails > 1 {
            p.pull_q.iter().map(|j| j.end - j.next).sum()
        } else {
            0
        };
        // A stream of messages (enough waiting here or for their CTS to give every rail whole
        // ones for a while): each leaves whole, in chunks of up to `max`, as round robin sends
        // them. Splitting them gains nothing while the other rails have their own, and costs
        // frames, writes and (at the receiver) copies out of the stage for chunks smaller than
        // it: 64 KiB messages both ways over 4 unlimited rails went 0.75x round robin's rate.
        // A turn takes them one after another, not a chunk of each in turn: messages larger
        // than a chunk then leave whole on one rail too, and complete one by one instead of
        // all at the end (4 unlimited rails, 1 MiB one way: 1.14x, both ways 1.11x).
        // The last few (fewer in flight than rails x 2) are split again, so rails finish
        // together.
        let stream = p.streaming();
        // No chunk shorter than MIN_CHUNK_LINK_US of this rail's link: on a fast link a short
        // chunk costs more (a frame, a write, a read, often a wakeup) than carrying it beside
        // others saves. On 1 Gbit/s that is 12 KiB (below min_chunk: no change); on unlimited
        // veth rails, where the CPU is the limit, the last messages of a burst went in 16 KiB
        // chunks (bw with 8 messages in flight: 0.83-0.87x round robin's rate at 128-512 KiB).
        // Unknown rate: min_chunk.
        let min = ((p.rails[rail].drain.rate * MIN_CHUNK_LINK_US) as usize).clamp(min, max);
        // A link that keeps up with writes (the CPU is the limit) takes whole chunks of all
        // that waits, as a lone rail does: pieces for other rails would only add writes and
        // reads (4 unlimited rails, ping-pong: 1.4-1.6x bind's time at 64-128 KiB).
        // (Not in a stream: there every rail has whole messages of its own already, and one
        // that took all would leave the others idle: 256-512 KiB one way, 0.4x.)
        let keeps_up = !stream && p.keeps_up(rail);
        let mut budget = match keeps_up {
            true => usize::MAX,
            false => p.rails[rail]
                .turn_cap
                .saturating_sub(p.rails[rail].round_pulled),
        };
        while i < p.pull_q.len() && chunks < slots.max(1) && budget > 0 {
            let job = &mut p.pull_q[i];
            let left = job.end - job.next;
            let n = if job.whole {
                left
            } else if rails == 1 || keeps_up {
                left.min(max)
            } else if stream {
                // Whole, unless this rail's share of the round is smaller (a slower link).
                left.min(max).min(budget.max(min))
            } else {
                (left / (2 * rails))
                    .max(waiting / (4 * rails))
                    .clamp(min, max)
                    .min(budget.max(min))
                    .min(left)
            };
            waiting = waiting.saturating_sub(n);
            budget = budget.saturating_sub(n);
            let last = job.last && job.next + n == job.end;
            let mut item = data_item(job.req, job.seq, job.next, n, last);
            // A chunk handed back may have been written before (resent after a rail broke).
            item.pulled = !job.whole;
            job.next += n;
            if job.next == job.end {
                p.pull_q.remove(i);
            } else if rails > 1 && !stream && !keeps_up {
                i += 1;
            }
            let r = &mut p.rails[rail];
            r.queued += item.total_len();
            r.round_pulled += n;
            r.keep_up.pulled = true;
            r.tx.push_back(item);
            chunks += 1;
        }
    }

    /// Queues an explicit acknowledgement on `rail`, ahead of queued data.
    pub(crate) fn queue_ack(&mut self, peer: Rank, rail: usize) {
        let lossless = self.peers[peer as usize].lossless;
        let r = &mut self.peers[peer as usize].rails[rail];
        if r.ack_queued || !r.up || lossless {
            return;
        }
        r.ack_queued = true;
        r.bytes_since_ack = 0;
        let item = TxItem::new(FrameHeader::new(FrameKind::Ack), Body::None, None);
        let at = match r.tx.front() {
            Some(f) if f.sent > 0 => 1,
            _ => 0,
        };
        r.queued += item.total_len();
        r.tx.insert(at, item);
        self.mark_dirty(peer);
    }

    /// `rail` to `peer` broke. Everything it had not had acknowledged, and everything still
    /// queued on it, goes to the other rails (or waits for one to come back); the receiver drops
    /// what turns out to be duplicates.
    pub fn rail_down(&mut self, peer: Rank, rail: usize) {
        let p = &mut self.peers[peer as usize];
        let Some(r) = p.rails.get_mut(rail) else {
            return;
        };
        if !r.up {
            return;
        }
        r.up = false;
        let mut resend: Vec<TxItem> = r.log.drain(..).chain(r.tx.drain(..)).collect();
        r.queued = 0;
        r.log_bytes = 0;
        r.ack_queued = false;
        r.acked = 0;
        r.logged = 0;
        r.rcvd = 0;
        r.ack_sent = 0;
        r.bytes_since_ack = 0;
        // A payload cut off mid-way will come again: remember where it was going.
        if let Some((seq, dest)) = r.rx.take_partial_eager() {
            p.incomplete.insert(seq, dest);
        }
        r.rx.reset();
        self.resends += resend.iter().filter(|i| i.reliable()).count() as u64;
        for mut item in resend.drain(..) {
            if !item.reliable() {
                continue;
            }
            item.reset();
            item.hdr[5] &= !FLAG_ACK_REQ;
            let rail = self.pick_rail(peer);
            self.enqueue_on(peer, rail, item);
        }
    }

    /// `rail` to `peer` is connected again (a fresh stream): it carries traffic from now on.
    pub fn rail_up(&mut self, peer: Rank, rail: usize) {
        let p = &mut self.peers[peer as usize];
        let Some(r) = p.rails.get_mut(rail) else {
            return;
        };
        if r.up {
            return;
        }
        r.up = true;
        r.settled = true;
        r.rx.reset();
        r.tx.clear();
        r.log.clear();
        r.queued = 0;
        r.log_bytes = 0;
        r.offered = 0;
        self.unpark(peer);
        self.mark_dirty(peer);
    }

    /// `rail` to `peer` could not be connected the first time: policies stop waiting for it.
    pub fn rail_unreachable(&mut self, peer: Rank, rail: usize) {
        if let Some(r) = self.peers[peer as usize].rails.get_mut(rail) {
            if !r.settled {
                r.settled = true;
                self.unpark(peer);
            }
        }
    }

    /// Frames that waited for a rail go where the policy sends them now.
    fn unpark(&mut self, peer: Rank) {
        let parked: Vec<TxItem> = self.peers[peer as usize].parked.drain(..).collect();
        for item in parked {
            let rail = self.pick_rail(peer);
            self.enqueue_on(peer, rail, item);
        }
    }

    pub fn rail_is_up(&self, peer: Rank, rail: usize) -> bool {
        self.peers[peer as usize]
            .rails
            .get(rail)
            .is_some_and(|r| r.up)
    }

    /// Frames resent because a rail broke (since start).
    pub fn resent_frames(&self) -> u64 {
        self.resends
    }
}

/// Adaptive: the shortest chunk a rail pulls, in microseconds of its link's measured rate.
const MIN_CHUNK_LINK_US: f64 = 100.0;
/// Bytes read from a link during a drain measurement (at least 500 us) up to which it still
/// counts as carrying nothing the other way: acknowledgements and control frames (a
/// clear-to-send for each of 64 messages is 3 KiB), not data (1 Gbit/s carries 60 KiB in 500 us).
const REVERSE_QUIET: u64 = 16 * 1024;

fn data_item(req: ReqId, seq: u64, off: usize, len: usize, last: bool) -> TxItem {
    let mut h = FrameHeader::new(FrameKind::Data);
    h.seq = seq;
    h.value = off as u64;
    h.payload_len = len as u32;
    if last {
        h.flags |= FLAG_ACK_REQ;
    }
    TxItem::new(h, Body::Req(req, off, len), None)
}

#[cfg(test)]
mod pull_tests {
    use super::*;
    use crate::Config;

    /// A core with one peer over `rails` rails (all up) and `jobs` messages of `len` bytes
    /// waiting to be pulled (request ids need not exist: only the chunking is looked at).
    fn core(rails: usize, jobs: usize, len: usize) -> Core<Vec<u8>> {
        let cfg = Config {
            policy: Policy::Adaptive,
            ..Config::default()
        };
        let mut c = Core::new(0, 2, cfg);
        c.set_rails(1, rails);
        for j in 0..jobs {
            c.peers[1].pull_q.push_back(PullJob {
                req: ReqId::from_u64(j as u64),
                seq: j as u64,
                next: 0,
                end: len,
                whole: false,
                last: true,
            });
        }
        c
    }

    /// (seq, offset, length) of the chunks queued on `rail`.
    fn chunks(c: &Core<Vec<u8>>, rail: usize) -> Vec<(u64, u64, usize)> {
        c.peers[1].rails[rail]
            .tx
            .iter()
            .map(|i| {
                let (h, _) = FrameHeader::parse(&i.hdr).unwrap();
                (h.seq, h.value, i.payload_len())
            })
            .collect()
    }

    #[test]
    fn a_lone_rail_takes_whole_chunks_of_every_message_in_one_turn() {
        let mut c = core(1, 3, 600 * 1024);
        c.pull_turn(1, 0, 32);
        let k = 256 * 1024;
        let want: Vec<(u64, u64, usize)> = (0..3u64)
            .flat_map(|s| [(s, 0, k), (s, k as u64, k), (s, 2 * k as u64, 88 * 1024)])
            .collect();
        assert_eq!(chunks(&c, 0), want);
        assert!(c.peers[1].pull_q.is_empty());
    }

    #[test]
    fn a_stream_of_messages_leaves_whole_and_its_last_few_split() {
        // 4 rails, twelve 64 KiB messages waiting (at least 2 per rail): whole ones, as round
        // robin would send them, which keeps frames large and the receiver's copies out.
        let k = 64 * 1024;
        let mut c = core(4, 12, k);
        c.tx_round(1, false);
        c.pull_turn(1, 0, 3);
        assert_eq!(chunks(&c, 0), vec![(0, 0, k), (1, 0, k), (2, 0, k)]);
        // Messages still waiting for their CTS count as part of the stream.
        let mut c = core(4, 3, k);
        for seq in 100..105 {
            c.peers[1].wait_cts.insert(seq, ReqId::from_u64(seq));
        }
        c.tx_round(1, false);
        c.pull_turn(1, 0, 32);
        assert_eq!(chunks(&c, 0), vec![(0, 0, k), (1, 0, k), (2, 0, k)]);
        // The last few are split, so that every rail carries a part and they finish together.
        let mut c = core(4, 3, k);
        c.tx_round(1, false);
        c.pull_turn(1, 0, 32);
        let min = c.cfg.min_chunk;
        assert_eq!(chunks(&c, 0), vec![(0, 0, min), (1, 0, min), (2, 0, min)]);
        // A rail whose share of the round is smaller than a message takes its share only.
        let mut c = core(4, 12, k);
        c.tx_round(1, false);
        c.peers[1].rails[0].turn_cap = 20 * 1024;
        c.pull_turn(1, 0, 32);
        assert_eq!(chunks(&c, 0), vec![(0, 0, 20 * 1024)]);
    }

    #[test]
    fn with_company_a_turn_takes_one_chunk_of_each_waiting_message() {
        // 4 rails, five 1 MiB messages (fewer than 2 per rail): 5 MiB waiting, so full chunks
        // (256 KiB), one of each message per turn, as many as one write carries.
        let mut c = core(4, 5, 1 << 20);
        let k = 256 * 1024;
        c.pull_turn(1, 0, 32);
        assert_eq!(
            chunks(&c, 0),
            (0..5u64).map(|s| (s, 0, k)).collect::<Vec<_>>()
        );
        // The next rail takes the second chunks of the same messages (smaller: less is left):
        // each leaves on every rail.
        c.pull_turn(1, 1, 32);
        let second: Vec<_> = chunks(&c, 1).iter().map(|&(s, off, _)| (s, off)).collect();
        assert_eq!(second, (0..5u64).map(|s| (s, k as u64)).collect::<Vec<_>>());
        // At most `slots` chunks a turn.
        let mut c = core(4, 5, 1 << 20);
        c.pull_turn(1, 0, 4);
        assert_eq!(chunks(&c, 0).len(), 4);
    }

    #[test]
    fn in_a_stream_a_turn_takes_whole_messages_one_after_another() {
        // Ten 1 MiB messages over 4 rails: a stream. A turn takes the chunks of one message in a
        // row, then the next message's: each leaves whole on one rail, as round robin sends it.
        let mut c = core(4, 10, 1 << 20);
        let k = 256 * 1024;
        c.pull_turn(1, 0, 6);
        let first: Vec<_> = (0..6u64).map(|i| (i / 4, i % 4 * k as u64, k)).collect();
        assert_eq!(chunks(&c, 0), first);
        // The next rail goes on where the first stopped.
        c.pull_turn(1, 1, 2);
        assert_eq!(
            chunks(&c, 1),
            vec![(1, 2 * k as u64, k), (1, 3 * k as u64, k)]
        );
        c.pull_turn(1, 2, 1);
        assert_eq!(chunks(&c, 2), vec![(2, 0, k)]);
    }

    #[test]
    fn a_lone_message_leaves_in_chunks_that_shrink_towards_its_end() {
        // One 256 KiB message over 4 rails: 32 KiB (a share of 1/8), then less, not below
        // min_chunk; one chunk per turn, so every rail carries part of it.
        let mut c = core(4, 1, 256 * 1024);
        for rail in 0..4 {
            c.pull_turn(1, rail, 32);
        }
        let got: Vec<_> = (0..4).map(|r| chunks(&c, r)).collect();
        assert_eq!(got[0], vec![(0, 0, 32 * 1024)]);
        assert_eq!(got[1], vec![(0, 32 * 1024, 28 * 1024)]);
        assert!(got.iter().all(|g| g.len() == 1 && g[0].2 >= 16 * 1024));
    }

    #[test]
    fn on_a_fast_link_no_chunk_is_shorter_than_its_link_time_floor() {
        let kib = 1024;
        // Measured at 1000 bytes/us (an unlimited veth rail): a lone 128 KiB message leaves in
        // chunks of at least 100 us of that link, 98 KiB, instead of 16 KiB ones.
        let mut c = core(4, 1, 128 * kib);
        for r in 0..4 {
            c.peers[1].rails[r].drain.rate = 1000.0;
        }
        for rail in 0..4 {
            c.pull_turn(1, rail, 32);
        }
        let floor = (1000.0 * MIN_CHUNK_LINK_US) as usize;
        assert_eq!(chunks(&c, 0), vec![(0, 0, floor)]);
        assert_eq!(chunks(&c, 1), vec![(0, floor as u64, 128 * kib - floor)]);
        assert!(chunks(&c, 2).is_empty() && chunks(&c, 3).is_empty());
        // At 1 Gbit/s (125 bytes/us) the floor is below min_chunk: 16 KiB chunks, as before.
        const { assert!(125.0 * MIN_CHUNK_LINK_US < 16.0 * 1024.0) };
        let mut c = core(4, 1, 128 * kib);
        for r in 0..4 {
            c.peers[1].rails[r].drain.rate = 125.0;
        }
        c.pull_turn(1, 0, 32);
        assert_eq!(chunks(&c, 0), vec![(0, 0, 16 * kib)]);
        // A link faster than max_chunk per 100 us: whole chunks of up to max_chunk.
        let mut c = core(4, 1, 512 * kib);
        c.peers[1].rails[0].drain.rate = 1e9;
        c.pull_turn(1, 0, 32);
        assert_eq!(chunks(&c, 0), vec![(0, 0, 256 * kib)]);
    }

    #[test]
    fn links_carrying_data_the_other_way_measure_no_drain_rate_and_share_equally() {
        // Every 1 ms each rail is written 125 KiB and its backlog stays at 256 KiB: it drains
        // 128 bytes/us. Meanwhile rail 0 reads nothing, rail 1 acknowledgements and control
        // frames (2 KiB), rail 2 the other direction's data (64 KiB).
        let kib = 1024;
        let mut c = core(3, 0, 0);
        for step in 0..10u64 {
            for (rail, read) in [0, 2 * kib, 64 * kib].into_iter().enumerate() {
                let r = &mut c.peers[1].rails[rail];
                r.tx_bytes += 125 * kib as u64;
                r.rx_bytes += read as u64;
                c.set_link_backlog(1, rail, 256 * kib, 1000 * (step + 1));
            }
        }
        let rate = |c: &Core<Vec<u8>>, rail: usize| c.peers[1].rails[rail].drain.rate;
        assert!((rate(&c, 0) - 128.0).abs() < 0.01, "{}", rate(&c, 0));
        assert!((rate(&c, 1) - 128.0).abs() < 0.01, "{}", rate(&c, 1));
        assert_eq!(rate(&c, 2), 0.0);
        // Unmeasured, rail 2 counts as equal to the others in the rounds' shares.
        c.peers[1].pull_q.push_back(PullJob {
            req: ReqId::from_u64(0),
            seq: 0,
            next: 0,
            end: 3 * 64 * kib,
            whole: false,
            last: true,
        });
        for rail in 0..3 {
            c.set_link_backlog(1, rail, 0, 20_000);
        }
        c.tx_round(1, true);
        let caps: Vec<usize> = c.peers[1].rails.iter().map(|r| r.turn_cap).collect();
        assert_eq!(caps, vec![64 * kib; 3]);
        // Right after it read data, an interval that reads nothing is not taken either: the
        // acknowledgements held back behind that data come in it (here 380 bytes/us).
        c.peers[1].rails[2].rx_bytes += 64 * kib as u64;
        c.set_link_backlog(1, 2, 256 * kib, 21_000);
        c.peers[1].rails[2].tx_bytes += 125 * kib as u64;
        c.set_link_backlog(1, 2, kib, 22_000);
        assert_eq!(rate(&c, 2), 0.0);
        // Once it reads little for longer, it is measured.
        for step in 0..10u64 {
            let r = &mut c.peers[1].rails[2];
            r.tx_bytes += 125 * kib as u64;
            c.set_link_backlog(1, 2, 256 * kib, 23_000 + 1000 * step);
        }
        assert!((rate(&c, 2) - 128.0).abs() < 1.0, "{}", rate(&c, 2));
        // One way, unequal links get unequal shares (here 2:1:1). Once one of them reads the
        // other direction's data, the rates say little and the shares are equal again.
        c.peers[1].rails[0].drain.rate = 256.0;
        let caps = |c: &mut Core<Vec<u8>>, now: u64| {
            for rail in 0..3 {
                c.set_link_backlog(1, rail, 0, now);
            }
            c.tx_round(1, true);
            let caps: Vec<usize> = c.peers[1].rails.iter().map(|r| r.turn_cap).collect();
            caps
        };
        assert_eq!(caps(&mut c, 40_000), vec![96 * kib, 48 * kib, 48 * kib]);
        c.peers[1].rails[1].rx_bytes += 64 * kib as u64;
        assert_eq!(caps(&mut c, 41_000), vec![64 * kib; 3]);
    }

    #[test]
    fn in_rounds_each_rail_pulls_what_evens_out_the_links_backlogs() {
        // 4 rails, sixteen 64 KiB messages (1 MiB); the sockets still hold 0, 100, 200 and
        // 300 KiB of earlier writes. Even levels: (1 MiB + 600 KiB) / 4 = 400 KiB per link.
        let kib = 1024;
        let mut c = core(4, 16, 64 * kib);
        for (rail, held) in [0, 100, 200, 300].into_iter().enumerate() {
            c.set_link_backlog(1, rail, held * kib, 1);
        }
        assert!(c.pull_pending(1));
        c.tx_round(1, true);
        let mut pulled = [0usize; 4];
        for _ in 0..8 {
            for (rail, sum) in pulled.iter_mut().enumerate() {
                c.pull_turn(1, rail, 32);
                *sum += chunks(&c, rail).iter().map(|ch| ch.2).sum::<usize>();
                // Written whole: the socket took it.
                let r = &mut c.peers[1].rails[rail];
                r.tx.clear();
                r.queued = 0;
            }
        }
        c.tx_round(1, false);
        assert_eq!(pulled.iter().sum::<usize>(), 1024 * kib);
        assert!(c.peers[1].pull_q.is_empty());
        // Every link ends within one minimum chunk (16 KiB) of 400 KiB.
        for (rail, held) in [0, 100, 200, 300].into_iter().enumerate() {
            let level = (held * kib + pulled[rail]) as i64;
            assert!(
                (level - 400 * kib as i64).abs() <= 16 * kib as i64,
                "{pulled:?}"
            );
        }
        // Unequal links (1, 1, 2 and 4 units a second), the fastest still holding 256 KiB:
        // shares by rate of what would have them all done at the same time.
        let mut c = core(4, 16, 64 * kib);
        for (rail, rate) in [1.0, 1.0, 2.0, 4.0].into_iter().enumerate() {
            c.peers[1].rails[rail].drain.rate = rate;
            c.set_link_backlog(1, rail, if rail == 3 { 256 * kib } else { 0 }, 1);
        }
        c.tx_round(1, true);
        let caps: Vec<usize> = c.peers[1].rails.iter().map(|r| r.turn_cap).collect();
        // (1 MiB + 256 KiB) / 8 units = 160 KiB per unit.
        let want = [160 * kib, 160 * kib, 320 * kib, 4 * 160 * kib - 256 * kib];
        for (cap, want) in caps.iter().zip(want) {
            assert!(cap.abs_diff(want) <= 1, "{caps:?}");
        }
        // Rails 1-3 still connecting for the first time: rail 0 alone is up, but it cuts
        // chunks for four and takes one of each message per turn, not whole messages; shares
        // are for rails that are up (the others may never come: a turn must not wait for them).
        let mut c = core(4, 2, 1 << 20);
        for r in &mut c.peers[1].rails[1..] {
            (r.up, r.settled) = (false, false);
        }
        assert!(!c.pull_pending(1));
        c.pull_turn(1, 0, 32);
        let got = chunks(&c, 0);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got.iter().all(|ch| ch.2 < 1 << 20), "{got:?}");
        // Found unreachable: rail 0 is a lone rail, taking whole chunks of everything.
        let mut c = core(4, 2, 1 << 20);
        for rail in 1..4 {
            c.peers[1].rails[rail].up = false;
        }
        c.pull_turn(1, 0, 32);
        assert_eq!(chunks(&c, 0).len(), 8);
        // Outside rounds a turn is not capped: one rail takes a chunk of every message.
        let mut c = core(4, 16, 64 * kib);
        c.set_link_backlog(1, 0, 300 * kib, 1);
        c.pull_turn(1, 0, 32);
        assert_eq!(chunks(&c, 0).len(), 16);
    }

    /// Flushes that each pull 64 KiB for `rail` until the core asks how much the link still
    /// holds (a link judged to keep up is asked only every few flushes); the driver answers
    /// `backlog` bytes, at `now`.
    fn judged(c: &mut Core<Vec<u8>>, rail: usize, backlog: usize, now: u64) {
        for _ in 0..8 {
            c.tx_round(1, true);
            let r = &mut c.peers[1].rails[rail];
            r.tx_bytes += 64 * 1024;
            r.keep_up.pulled = true;
            let asked = c.wants_backlog_after_write(1, rail);
            if asked {
                c.backlog_after_write(1, rail, backlog, now);
            }
            c.tx_round(1, false);
            if asked {
                return;
            }
        }
        panic!("rail {rail} was never judged");
    }

    #[test]
    fn where_links_keep_up_a_quiet_pair_stays_on_its_rail_and_a_message_is_not_cut() {
        let kib = 1024;
        // Unjudged links: a quiet pair's 16 KiB messages rotate (a rate-limited rail's next
        // one should not wait behind the last), a lone 256 KiB message is cut for every rail.
        let mut c = core(4, 0, 0);
        let picks: Vec<_> = (0..4).map(|_| c.pick_rail_for(1, 16 * kib)).collect();
        assert_eq!(picks, [Some(0), Some(1), Some(2), Some(3)]);
        let mut c = core(4, 1, 256 * kib);
        c.pull_turn(1, 0, 32);
        assert_eq!(chunks(&c, 0), vec![(0, 0, 32 * kib)]);
        // Every link emptied right after a flush (veth, loopback: the CPU is the limit).
        for rail in 0..4 {
            judged(&mut c, rail, 0, 1);
        }
        assert!(!c.wants_link_backlogs(1), "no ioctl before rounds");
        c.pull_turn(1, 1, 32);
        assert_eq!(chunks(&c, 1), vec![(0, 32 * kib as u64, 224 * kib)]);
        // Once that has left (a quiet pair again), 16 KiB messages keep to the pair's rail.
        for r in &mut c.peers[1].rails {
            r.tx.clear();
            r.queued = 0;
        }
        let bound = 1; // (rank 0 + rank 1) % 4
        for _ in 0..4 {
            assert_eq!(c.pick_rail_for(1, 16 * kib), Some(bound));
        }
        // One link seen draining slowly (a token bucket out of tokens): rotate again, on every
        // rail, since the others' buckets run dry too once they carry what it did.
        judged(&mut c, 2, 48 * kib, 10);
        assert!(c.wants_backlog_before_write(1, 2));
        c.backlog_before_write(1, 2, 0, 10 + 48 * kib as u64 / 125);
        assert!(c.peers[1].rails[2].keep_up.slow());
        let picks: Vec<_> = (0..4).map(|_| c.pick_rail_for(1, 16 * kib)).collect();
        assert!(picks.iter().any(|&p| p != Some(bound)), "{picks:?}");
        assert!(c.wants_link_backlogs(1) || !c.pull_pending(1));
    }

    #[test]
    fn a_large_message_of_a_stream_both_ways_over_links_that_keep_up_leaves_in_one_part_per_rail() {
        let mib = 1 << 20;
        // `len` bytes to send once its CTS comes, with `waiting` more messages of ours behind
        // it; `reverse`: one of the peer's large messages is arriving.
        let start = |len: usize, judge: bool, waiting: u64, reverse: bool| {
            let mut c = core(4, 0, 0);
            if judge {
                for rail in 0..4 {
                    judged(&mut c, rail, 0, 1);
                }
            }
            for seq in 1000..1000 + waiting {
                c.peers[1].wait_cts.insert(seq, ReqId::from_u64(seq));
            }
            if reverse {
                c.peers[1].rdv_recv.insert(7, ReqId::from_u64(7));
            }
            let req = c.send(1, 0, 0, 5, vec![3u8; len]).unwrap();
            let seq = *c.peers[1]
                .wait_cts
                .iter()
                .find(|(_, &r)| r == req)
                .unwrap()
                .0;
            c.peers[1].wait_cts.remove(&seq);
            // (Leaves out the request-to-send, so that only the data frames are left to see.)
            for rail in 0..4 {
                c.peers[1].rails[rail].tx.clear();
            }
            c.start_data_frames(1, req, seq);
            c
        };
        let data_on = |c: &Core<Vec<u8>>, rail: usize| -> Vec<(u64, usize)> {
            chunks(c, rail)
                .into_iter()
                .filter(|&(_, _, n)| n > 0)
                .map(|(_, off, n)| (off, n))
                .collect()
        };
        let c = start(4 * mib, true, 10, true);
        assert!(c.peers[1].pull_q.is_empty());
        let k = 256 * 1024;
        for rail in 0..4 {
            let want: Vec<(u64, usize)> =
                (0..4).map(|i| ((rail * mib + i * k) as u64, k)).collect();
            assert_eq!(data_on(&c, rail), want, "rail {rail}");
        }
        // Otherwise the rails pull it as before: one way, a lone message, links not judged to
        // keep up, or a smaller message.
        for (len, judge, waiting, reverse) in [
            (4 * mib, true, 10, false),
            (4 * mib, true, 0, true),
            (4 * mib, false, 10, true),
            (mib, true, 10, true),
        ] {
            let c = start(len, judge, waiting, reverse);
            assert_eq!(
                c.peers[1].pull_q.len(),
                1,
                "{len} {judge} {waiting} {reverse}"
            );
            assert!((0..4).all(|r| data_on(&c, r).is_empty()));
        }
    }

    #[test]
    fn links_are_judged_only_by_adaptive_and_not_in_a_stream() {
        // A stream: every rail takes whole messages of its own whatever the links do.
        let mut c = core(4, 12, 64 * 1024);
        c.tx_round(1, true);
        c.peers[1].rails[0].tx_bytes += 64 * 1024;
        c.peers[1].rails[0].keep_up.pulled = true;
        assert!(!c.wants_backlog_after_write(1, 0));
        // Round robin never asks.
        let mut c = core(4, 1, 256 * 1024);
        c.cfg.policy = Policy::RoundRobin;
        c.tx_round(1, true);
        c.peers[1].rails[0].tx_bytes += 64 * 1024;
        c.peers[1].rails[0].keep_up.pulled = true;
        assert!(!c.wants_backlog_after_write(1, 0));
        // A flush with no pulled data (eager messages, control frames) says nothing.
        let mut c = core(4, 1, 256 * 1024);
        c.tx_round(1, true);
        c.peers[1].rails[0].tx_bytes += 64 * 1024;
        assert!(!c.wants_backlog_after_write(1, 0));
    }

    #[test]
    fn a_ping_pong_keeps_to_its_rail_whatever_another_rail_has_in_flight() {
        let mut c = core(2, 0, 0);
        // Rank 0 and 1 are bound to rail 1; rail 0 still holds an unacknowledged frame.
        c.peers[1].rails[0].log_bytes = 200;
        for _ in 0..4 {
            assert_eq!(c.pick_rail_for(1, 8), Some(1));
        }
        // Something in flight on the bound rail itself (a stream): small messages rotate.
        c.peers[1].rails[1].log_bytes = 64;
        let picks: Vec<_> = (0..4).map(|_| c.pick_rail_for(1, 8)).collect();
        assert!(
            picks.contains(&Some(0)) && picks.contains(&Some(1)),
            "{picks:?}"
        );
    }

    #[test]
    fn a_full_rail_hands_back_the_chunks_it_did_not_start() {
        let k = 256 * 1024;
        let mut c = core(3, 4, 1 << 20);
        c.pull_turn(1, 0, 32);
        assert_eq!(chunks(&c, 0).len(), 4);
        // The socket took the first header and 100 bytes of its payload, no more.
        c.peers[1].rails[0].offered = c.peers[1].rails[0].queued;
        c.tx_done(1, 0, HEADER_LEN + 100);
        assert_eq!(
            chunks(&c, 0),
            vec![(0, 0, k)],
            "only the frame it is writing"
        );
        assert_eq!(
            c.peers[1].rails[0].queued,
            HEADER_LEN + k - HEADER_LEN - 100
        );
        let q: Vec<_> = c.peers[1]
            .pull_q
            .iter()
            .map(|j| (j.seq, j.next, j.end, j.whole))
            .collect();
        assert_eq!(
            q,
            vec![
                (0, k, 1 << 20, false),
                (1, 0, 1 << 20, false),
                (2, 0, 1 << 20, false),
                (3, 0, 1 << 20, false)
            ],
            "merged back into their messages"
        );
        // Another rail pulls them.
        c.pull_turn(1, 1, 32);
        assert_eq!(
            chunks(&c, 1),
            vec![(0, k as u64, k), (1, 0, k), (2, 0, k), (3, 0, k)]
        );
        // A write the socket takes whole hands nothing back.
        c.peers[1].rails[1].offered = c.peers[1].rails[1].queued;
        let n = c.peers[1].rails[1].queued;
        c.tx_done(1, 1, n);
        assert!(c.peers[1].rails[1].tx.is_empty());
        assert_eq!(
            c.peers[1].pull_q.iter().map(|j| j.next).collect::<Vec<_>>(),
            vec![2 * k, k, k, k]
        );
    }

    #[test]
    fn a_rail_in_the_middle_of_a_frame_pulls_behind_it() {
        let k = 256 * 1024;
        let mut c = core(2, 4, 1 << 20);
        // (The requests do not exist: the slices stop at the first payload, and what the
        // socket was offered is set by hand.)
        c.tx_iovecs(1, 0, &mut [IoSlice::new(&[]); 64]);
        assert_eq!(chunks(&c, 0).len(), 16);
        // The socket filled in the middle of the first frame; the rest went back to the queue,
        // and an acknowledgement was queued behind the frame meanwhile.
        c.peers[1].rails[0].offered = c.peers[1].rails[0].queued;
        c.tx_done(1, 0, HEADER_LEN + 100);
        assert_eq!(chunks(&c, 0), vec![(0, 0, k)]);
        c.queue_ack(1, 0);
        assert_eq!(c.peers[1].rails[0].tx.len(), 2);
        // Once it has room again, one write carries the frame's rest, the acknowledgement and
        // newly pulled chunks (before, the rest and the acknowledgement went alone).
        c.tx_iovecs(1, 0, &mut [IoSlice::new(&[]); 64]);
        let kinds: Vec<u8> = c.peers[1].rails[0].tx.iter().map(|i| i.kind()).collect();
        let (data, ack) = (FrameKind::Data as u8, FrameKind::Ack as u8);
        assert_eq!(kinds[..3], [data, ack, data], "{kinds:?}");
        let got = chunks(&c, 0);
        assert_eq!(got[0], (0, 0, k));
        assert_eq!(
            got[2],
            (0, k as u64, k),
            "the message's next chunk, not a new one"
        );
        assert_eq!(
            got.len(),
            2 + 15,
            "every chunk handed back, pulled again: {got:?}"
        );
        assert!(got[2..].iter().all(|&(_, _, len)| len == k), "{got:?}");
    }

    #[test]
    fn a_chunk_handed_back_after_its_message_left_the_queue_waits_on_its_own() {
        // Three 16 KiB messages on 2 rails: each is one chunk, and pulling empties the queue.
        let k = 16 * 1024;
        let mut c = core(2, 3, k);
        c.pull_turn(1, 0, 32);
        assert!(c.peers[1].pull_q.is_empty());
        c.peers[1].rails[0].offered = c.peers[1].rails[0].queued;
        c.tx_done(1, 0, 10);
        let q: Vec<_> = c.peers[1]
            .pull_q
            .iter()
            .map(|j| (j.seq, j.next, j.end, j.whole))
            .collect();
        assert_eq!(q, vec![(1, 0, k, false), (2, 0, k, false)]);
        c.pull_turn(1, 1, 32);
        assert_eq!(chunks(&c, 1), vec![(1, 0, k), (2, 0, k)]);
        // A chunk that may have been written before (resent after a rail broke) keeps its
        // bounds, even where it would fit back into its message: the receiver knows chunks by
        // their offset.
        let mut c = core(2, 2, 1 << 20);
        c.pull_turn(1, 0, 32);
        let k = chunks(&c, 0)[1].2;
        c.peers[1].rails[0].tx[1].pulled = false;
        c.peers[1].rails[0].offered = c.peers[1].rails[0].queued;
        c.tx_done(1, 0, 10);
        let q: Vec<_> = c.peers[1]
            .pull_q
            .iter()
            .map(|j| (j.seq, j.next, j.end, j.whole))
            .collect();
        assert_eq!(
            q,
            vec![
                (1, 0, k, true),
                (0, k, 1 << 20, false),
                (1, k, 1 << 20, false)
            ]
        );
        // Under another policy nothing moves (stripe and rr place data once).
        let mut c = core(2, 3, k);
        c.cfg.policy = Policy::Stripe;
        c.pull_turn(1, 0, 32);
        c.peers[1].rails[0].offered = c.peers[1].rails[0].queued;
        c.tx_done(1, 0, 10);
        assert_eq!(chunks(&c, 0).len(), 3);
    }
}

#[cfg(test)]
pub(crate) mod inline_tests {
    use super::*;
    use crate::Config;
    use hx_wire::MIN_HEADER_LEN;

    /// Two cores joined by one lossless rail.
    pub(crate) fn pair() -> (Core<Vec<u8>>, Core<Vec<u8>>) {
        let mut a = Core::new(0, 2, Config::default());
        let mut b = Core::new(1, 2, Config::default());
        a.set_rails(1, 1);
        b.set_rails(0, 1);
        a.set_lossless(1, true);
        b.set_lossless(0, true);
        (a, b)
    }

    /// Hands `bytes` to `b` as if read from rail 0.
    fn deliver(b: &mut Core<Vec<u8>>, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let space = b.rx_space(0, 0);
            let n = space.len().min(bytes.len());
            space[..n].copy_from_slice(&bytes[..n]);
            b.rx_done(0, 0, n).unwrap();
            bytes = &bytes[n..];
        }
    }

    /// Everything `a` has queued for `b`, as written.
    fn drain(a: &mut Core<Vec<u8>>) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let mut iov = [IoSlice::new(&[]); 8];
            let n = a.tx_iovecs(1, 0, &mut iov);
            if n == 0 {
                return out;
            }
            let len: usize = iov[..n].iter().map(|s| s.len()).sum();
            for s in &iov[..n] {
                out.extend_from_slice(s);
            }
            a.tx_done(1, 0, len);
        }
    }

    /// Everything `c` has queued for `peer` on rail 0, as written.
    fn drain_to(c: &mut Core<Vec<u8>>, peer: Rank) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let mut iov = [IoSlice::new(&[]); 8];
            let n = c.tx_iovecs(peer, 0, &mut iov);
            if n == 0 {
                return out;
            }
            let len: usize = iov[..n].iter().map(|s| s.len()).sum();
            for s in &iov[..n] {
                out.extend_from_slice(s);
            }
            c.tx_done(peer, 0, len);
        }
    }

    /// Hands `bytes` to `c` as if read from `peer` on rail 0.
    fn deliver_from(c: &mut Core<Vec<u8>>, peer: Rank, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let space = c.rx_space(peer, 0);
            let n = space.len().min(bytes.len());
            space[..n].copy_from_slice(&bytes[..n]);
            c.rx_done(peer, 0, n).unwrap();
            bytes = &bytes[n..];
        }
    }

    #[test]
    fn a_delivered_send_completes_once_the_receiver_has_it() {
        // Eager sizes (below 32 KiB), over a lossless and over a lossy rail: done once the
        // receiver's word comes back, which it sends once it holds the message, with or
        // without a receive posted; not before.
        for lossless in [true, false] {
            for len in [0usize, 5, 30_000] {
                let (mut a, mut b) = pair();
                a.set_lossless(1, lossless);
                b.set_lossless(0, lossless);
                let body: Vec<u8> = (0..len).map(|i| i as u8).collect();
                let s = a.send_delivered(1, 0, 0, 5, Some(7), body.clone()).unwrap();
                let frame = drain(&mut a);
                assert!(a.is_pending(s), "{len} B: done when written");
                deliver(&mut b, &frame);
                // The word is held for a reply or the next round, then goes.
                assert!(drain_to(&mut b, 0).is_empty(), "{len} B: word not held");
                assert!(b.words_waiting());
                b.release_words();
                assert!(!b.words_waiting());
                let back = drain_to(&mut b, 0);
                assert!(!back.is_empty(), "{len} B: no word back");
                assert!(a.is_pending(s), "{len} B: done before the word came");
                deliver_from(&mut a, 1, &back);
                let (c, _) = a.take(s).unwrap();
                assert!(
                    matches!(c, Completion::Done(st) if st.len == len && st.tag == 5),
                    "{len} B, lossless {lossless}: {c:?}"
                );
                // The receiver held it: a receive posted now takes every byte.
                let r = b.recv(0, Some(0), None, vec![0; 65_536]).unwrap();
                let (c, buf) = b.take(r).unwrap();
                let Completion::Done(st) = c else {
                    panic!("{len} B: receive not done: {c:?}");
                };
                assert_eq!((st.tag, st.len, st.data), (5, len, Some(7)));
                assert_eq!(&buf[..len], &body[..]);
            }
        }
    }

    #[test]
    fn held_words_back_go_as_one_frame_per_run_and_ahead_of_a_reply() {
        let (mut a, mut b) = pair();
        let sends: Vec<ReqId> = (0..5)
            .map(|i| {
                a.send_delivered(1, 0, 0, i, None, vec![i as u8; 3])
                    .unwrap()
            })
            .collect();
        deliver(&mut b, &drain(&mut a));
        // A reply takes the five words with it: one Delivered frame (the run's first sequence
        // number, a count of 5) ahead of the reply, in the same write.
        let reply = b.send(0, 0, 0, 99, vec![1, 2, 3]).unwrap();
        let mut iov = [IoSlice::new(&[]); 8];
        let n = b.tx_iovecs(0, 0, &mut iov);
        let bytes: Vec<u8> = iov[..n].iter().flat_map(|s| s.iter().copied()).collect();
        b.tx_done(0, 0, bytes.len());
        let (word, hlen) = FrameHeader::parse(&bytes).unwrap();
        assert_eq!(
            (word.kind, word.seq, word.value),
            (FrameKind::Delivered, 0, 5)
        );
        let (next, _) = FrameHeader::parse(&bytes[hlen..]).unwrap();
        assert_eq!(next.kind, FrameKind::Eager);
        assert!(drain_to(&mut b, 0).is_empty(), "more than one write");
        assert!(!b.words_waiting(), "the reply took them all");
        b.release_words();
        assert!(drain_to(&mut b, 0).is_empty(), "a word went twice");
        deliver_from(&mut a, 1, &bytes);
        for s in sends {
            assert!(matches!(a.take(s).unwrap().0, Completion::Done(_)));
        }
        let r = a.recv(0, Some(1), None, vec![0; 8]).unwrap();
        assert!(matches!(a.take(r).unwrap().0, Completion::Done(st) if st.tag == 99));
        assert!(matches!(b.take(reply).unwrap().0, Completion::Done(_)));
    }

    #[test]
    fn a_word_claiming_more_than_is_waiting_completes_only_what_waits() {
        let (mut a, mut b) = pair();
        let s = a.send_delivered(1, 0, 0, 1, None, vec![7; 4]).unwrap();
        let plain = a.send(1, 0, 0, 2, vec![8; 4]).unwrap();
        deliver(&mut b, &drain(&mut a));
        // A forged word, from 0 on for u64::MAX messages: taken as what waits (no loop over
        // the claimed range).
        let mut d = FrameHeader::new(FrameKind::Delivered);
        d.value = u64::MAX;
        deliver_from(&mut a, 1, &d.to_bytes());
        assert!(matches!(a.take(s).unwrap().0, Completion::Done(_)));
        assert!(matches!(a.take(plain).unwrap().0, Completion::Done(_)));
    }

    #[test]
    fn the_words_back_of_a_delivered_stream_are_acknowledged_over_a_lossy_rail() {
        // Each Delivered is logged for a resend by its sender (the receiver of the stream)
        // and must be counted and acknowledged by the stream's sender like any reliable
        // frame: counted on one side only, the log grew without bound and Open MPI's btl/ofi
        // two-way test stopped.
        let (mut a, mut b) = pair();
        a.set_lossless(1, false);
        b.set_lossless(0, false);
        let n = 1000;
        let sends: Vec<ReqId> = (0..n)
            .map(|i| {
                a.send_delivered(1, 0, 0, i, None, vec![i as u8; 8])
                    .unwrap()
            })
            .collect();
        let recvs: Vec<ReqId> = (0..n)
            .map(|_| b.recv(0, Some(0), None, vec![0; 8]).unwrap())
            .collect();
        for _ in 0..8 {
            deliver(&mut b, &drain(&mut a));
            b.release_words();
            deliver_from(&mut a, 1, &drain_to(&mut b, 0));
        }
        for (i, s) in sends.into_iter().enumerate() {
            assert!(
                matches!(a.take(s).unwrap().0, Completion::Done(_)),
                "send {i}"
            );
        }
        for (i, r) in recvs.into_iter().enumerate() {
            let (c, buf) = b.take(r).unwrap();
            assert!(
                matches!(c, Completion::Done(st) if st.tag == i as u64),
                "recv {i}"
            );
            assert_eq!(buf, vec![i as u8; 8]);
        }
        let logged = |c: &Core<Vec<u8>>, peer: usize| c.peers[peer].rails[0].log.len();
        assert!(logged(&a, 1) <= 64, "sender keeps {} frames", logged(&a, 1));
        assert!(
            logged(&b, 0) <= 64,
            "receiver keeps {} of its {n} words back unacknowledged",
            logged(&b, 0)
        );
    }

    #[test]
    fn a_delivered_rendezvous_send_completes_once_its_data_is_placed() {
        let (mut a, mut b) = pair();
        let body: Vec<u8> = (0..40_000).map(|i| i as u8).collect();
        let s = a.send_delivered(1, 0, 0, 5, None, body.clone()).unwrap();
        deliver(&mut b, &drain(&mut a));
        deliver_from(&mut a, 1, &drain_to(&mut b, 0));
        assert!(a.is_pending(s), "done before the receiver matched it");
        let r = b.recv(0, Some(0), None, vec![0; 65_536]).unwrap();
        for _ in 0..4 {
            deliver_from(&mut a, 1, &drain_to(&mut b, 0));
            deliver(&mut b, &drain(&mut a));
        }
        let (c, buf) = b.take(r).unwrap();
        assert!(
            matches!(c, Completion::Done(st) if st.len == 40_000),
            "{c:?}"
        );
        assert_eq!(&buf[..40_000], &body[..]);
        assert!(matches!(a.take(s).unwrap().0, Completion::Done(_)));
    }

    #[test]
    fn a_cut_off_inline_send_is_finished_from_the_queue_and_keeps_its_place() {
        let (mut a, mut b) = pair();
        let r1 = b.recv(0, Some(0), None, vec![0; 16]).unwrap();
        let r2 = b.recv(0, Some(0), None, vec![0; 16]).unwrap();
        let (rail, hdr) = a.inline_start(1, 0, 0, 7, Some(99), 5).unwrap();
        assert_eq!(
            (rail, hdr.len()),
            (0, MIN_HEADER_LEN),
            "immediate data in the short header"
        );
        let mut frame = hdr.to_vec();
        frame.extend_from_slice(b"hello");
        // The ring took 20 bytes: the rest is queued, so the next send cannot go inline.
        a.inline_written(1, 0, &hdr, b"hello", 20);
        assert!(a.inline_start(1, 0, 0, 8, None, 3).is_none());
        a.send(1, 0, 0, 8, b"abc".to_vec()).unwrap();
        deliver(&mut b, &frame[..20]);
        let rest = drain(&mut a);
        deliver(&mut b, &rest);
        let (c1, buf1) = b.take(r1).unwrap();
        let (c2, buf2) = b.take(r2).unwrap();
        let (Completion::Done(s1), Completion::Done(s2)) = (c1, c2) else {
            panic!("receives not done");
        };
        assert_eq!((s1.tag, s1.len, s1.data), (7, 5, Some(99)));
        assert_eq!(&buf1[..5], b"hello");
        assert_eq!((s2.tag, s2.len), (8, 3));
        assert_eq!(&buf2[..3], b"abc");
        // Written in full, the next one goes inline again.
        assert!(a.inline_start(1, 0, 0, 9, None, 1).is_some());
    }

    /// The frame of an inline send of `body` from `a` to rank 1 with `tag`.
    fn inline_frame(a: &mut Core<Vec<u8>>, tag: u64, body: &[u8]) -> Vec<u8> {
        let (rail, hdr) = a.inline_start(1, 0, 0, tag, None, body.len()).unwrap();
        assert_eq!(hdr.len(), MIN_HEADER_LEN, "the short header");
        let mut frame = hdr.to_vec();
        frame.extend_from_slice(body);
        a.inline_written(1, rail, &hdr, body, frame.len());
        frame
    }

    #[test]
    fn a_blocking_receive_takes_an_express_frame_only_when_it_would_match_first() {
        let (mut a, mut b) = pair();
        let any = crate::Filter::new(None, None);
        let mut buf = [0u8; 8];
        // Taken in place: status, payload, and the next frame's sequence expected.
        let f = inline_frame(&mut a, 5, b"abc");
        let (n, st) = b.rx_express_into(0, 0, &f, 0, any, &mut buf).unwrap();
        assert_eq!((n, st.source, st.tag, st.len), (f.len(), 0, 5, 3));
        assert_eq!(&buf[..3], b"abc");
        // Not for it: another endpoint, another tag or source, too long for the buffer, or
        // only part of the frame there. Nothing changes.
        let f = inline_frame(&mut a, 6, b"defg");
        assert!(b.rx_express_into(0, 0, &f, 1, any, &mut buf).is_none());
        let tag5 = crate::Filter::new(None, Some(5));
        assert!(b.rx_express_into(0, 0, &f, 0, tag5, &mut buf).is_none());
        let from1 = crate::Filter::new(Some(1), None);
        assert!(b.rx_express_into(0, 0, &f, 0, from1, &mut buf).is_none());
        assert!(b.rx_express_into(0, 0, &f, 0, any, &mut buf[..3]).is_none());
        assert!(b
            .rx_express_into(0, 0, &f[..f.len() - 1], 0, any, &mut buf)
            .is_none());
        // A posted receive on the endpoint comes first: the endpoint is not quiet, which the
        // caller checks before an express receive.
        assert!(b.ep_quiet(0));
        let r = b.recv(0, None, None, vec![0; 8]).unwrap();
        assert!(!b.ep_quiet(0));
        deliver(&mut b, &f);
        let (Completion::Done(st), got) = b.take(r).unwrap() else {
            panic!("posted receive not done");
        };
        assert_eq!((st.tag, &got[..4]), (6, &b"defg"[..]));
        // A message already waiting on the endpoint comes first too.
        let f = inline_frame(&mut a, 7, b"h");
        deliver(&mut b, &f);
        let g = inline_frame(&mut a, 8, b"i");
        assert!(!b.ep_quiet(0));
        let r = b.recv(0, None, None, vec![0; 8]).unwrap();
        assert!(b.ep_quiet(0));
        assert!(matches!(b.take(r), Some((Completion::Done(st), _)) if st.tag == 7));
        let (_, st) = b.rx_express_into(0, 0, &g, 0, any, &mut buf).unwrap();
        assert_eq!((st.tag, buf[0]), (8, b'i'));
        // Over a lossy link, never (acknowledgements and resends need the parser).
        b.set_lossless(0, false);
        a.set_lossless(1, false);
        let f = inline_frame(&mut a, 9, b"j");
        assert!(b.rx_express_into(0, 0, &f, 0, any, &mut buf).is_none());
    }

    #[test]
    fn over_a_lossy_rail_an_inline_send_is_kept_until_acknowledged() {
        let (mut a, mut b) = pair();
        a.set_lossless(1, false);
        b.set_lossless(0, false);
        let r = b.recv(0, Some(0), None, vec![0; 8]).unwrap();
        let (rail, hdr) = a.inline_start(1, 0, 0, 3, None, 4).unwrap();
        let mut frame = hdr.to_vec();
        frame.extend_from_slice(b"ping");
        a.inline_written(1, rail, &hdr, b"ping", frame.len());
        assert_eq!(a.unacked_frames(1), 1, "kept for a resend");
        deliver(&mut b, &frame);
        assert!(matches!(b.take(r), Some((Completion::Done(_), _))));
        // The reply carries the acknowledgement.
        let (rail, hdr) = b.inline_start(0, 0, 0, 4, None, 4).unwrap();
        let mut reply = hdr.to_vec();
        reply.extend_from_slice(b"pong");
        b.inline_written(0, rail, &hdr, b"pong", reply.len());
        let space = a.rx_space(1, 0);
        space[..reply.len()].copy_from_slice(&reply);
        a.rx_done(1, 0, reply.len()).unwrap();
        assert_eq!(a.unacked_frames(1), 0, "acknowledged by the reply");
    }

    /// Reads `bytes` into `b`'s stage for rail 0 of peer 0 as one read and tries the express
    /// path of a receive on endpoint 0 taking `filter` into `buf`.
    fn staged(
        b: &mut Core<Vec<u8>>,
        bytes: &[u8],
        filter: crate::Filter,
        buf: &mut [u8],
    ) -> Option<crate::Status> {
        assert!(b.rx_idle(0, 0), "the stage is empty between frames");
        let space = b.rx_space(0, 0);
        space[..bytes.len()].copy_from_slice(bytes);
        let (st, parsed) = b.rx_done_express(0, 0, bytes.len(), 0, filter, buf);
        parsed.unwrap();
        st
    }

    #[test]
    fn over_a_socket_an_express_receive_counts_and_takes_acknowledgements() {
        let (mut a, mut b) = pair();
        a.set_lossless(1, false);
        b.set_lossless(0, false);
        let any = crate::Filter::new(None, None);
        let mut buf = [0u8; 8];
        // b's message to a is kept by b until a acknowledges it; a's next frame carries that.
        let (rail, hdr) = b.inline_start(0, 0, 0, 1, None, 1).unwrap();
        b.inline_written(0, rail, &hdr, b"x", hdr.len() + 1);
        let mut to_a = hdr.to_vec();
        to_a.push(b'x');
        let r = a.recv(0, None, None, vec![0; 8]).unwrap();
        let space = a.rx_space(1, 0);
        space[..to_a.len()].copy_from_slice(&to_a);
        a.rx_done(1, 0, to_a.len()).unwrap();
        assert!(matches!(a.take(r), Some((Completion::Done(_), _))));
        assert_eq!(b.unacked_frames(0), 1);
        // Taken from the stage: payload, status, the acknowledgement it carried, and the
        // frame counted for b's own acknowledgement of it.
        let f = inline_frame(&mut a, 5, b"abc");
        let st = staged(&mut b, &f, any, &mut buf).expect("taken");
        assert_eq!((st.source, st.tag, st.len), (0, 5, 3));
        assert_eq!(&buf[..3], b"abc");
        assert_eq!(b.unacked_frames(0), 0, "acknowledged by the frame taken");
        assert_eq!(a.unacked_frames(1), 1);
        let (rail, hdr) = b.inline_start(0, 0, 0, 2, None, 1).unwrap();
        b.inline_written(0, rail, &hdr, b"y", hdr.len() + 1);
        let mut to_a = hdr.to_vec();
        to_a.push(b'y');
        let space = a.rx_space(1, 0);
        space[..to_a.len()].copy_from_slice(&to_a);
        a.rx_done(1, 0, to_a.len()).unwrap();
        assert_eq!(a.unacked_frames(1), 0, "b counted the frame it took");
        // Two frames in one read: the first is taken, the second parsed as usual (queued as
        // unexpected, the endpoint is no longer quiet) and received in order after it.
        let mut two = inline_frame(&mut a, 6, b"de");
        two.extend(inline_frame(&mut a, 7, b"fg"));
        let st = staged(&mut b, &two, any, &mut buf).expect("first taken");
        assert_eq!((st.tag, &buf[..2]), (6, &b"de"[..]));
        assert!(!b.ep_quiet(0));
        let r = b.recv(0, None, None, vec![0; 8]).unwrap();
        let (Completion::Done(st), got) = b.take(r).unwrap() else {
            panic!("second message not received");
        };
        assert_eq!((st.tag, &got[..2]), (7, &b"fg"[..]));
        // Not for this receive (another tag, too long, cut short): parsed as rx_done would,
        // nothing lost.
        let tag9 = crate::Filter::new(None, Some(9));
        let f = inline_frame(&mut a, 8, b"hi");
        assert!(staged(&mut b, &f, tag9, &mut buf).is_none());
        assert!(!b.ep_quiet(0), "queued as unexpected");
        let r = b.recv(0, None, None, vec![0; 8]).unwrap();
        assert!(matches!(b.take(r), Some((Completion::Done(st), _)) if st.tag == 8));
        let f = inline_frame(&mut a, 9, b"long body");
        assert!(staged(&mut b, &f, any, &mut buf[..4]).is_none());
        let r = b.recv(0, None, None, vec![0; 16]).unwrap();
        assert!(matches!(b.take(r), Some((Completion::Done(st), _)) if st.len == 9));
        let f = inline_frame(&mut a, 10, b"jk");
        assert!(staged(&mut b, &f[..f.len() - 1], any, &mut buf).is_none());
        assert!(!b.rx_idle(0, 0), "part of a frame staged");
        let r = b.recv(0, None, None, vec![0; 8]).unwrap();
        deliver(&mut b, &f[f.len() - 1..]);
        assert!(matches!(b.take(r), Some((Completion::Done(st), _)) if st.tag == 10));
        // A bad acknowledgement fails the rail, as parsing would.
        assert!(b.rx_idle(0, 0));
        let mut f = inline_frame(&mut a, 11, b"l");
        f[40..48].copy_from_slice(&1000u64.to_le_bytes());
        let space = b.rx_space(0, 0);
        space[..f.len()].copy_from_slice(&f);
        let (st, parsed) = b.rx_done_express(0, 0, f.len(), 0, any, &mut buf);
        assert!(st.is_none() && parsed.is_err());
    }

    #[test]
    fn only_small_messages_to_idle_peers_go_inline() {
        let (mut a, _) = pair();
        let big = a.cfg.eager_limit + 1;
        assert!(a.inline_start(1, 0, 0, 1, None, big).is_none());
        assert!(a.inline_start(0, 0, 0, 1, None, 1).is_none(), "self");
        assert!(
            a.inline_start(5, 0, 0, 1, None, 1).is_none(),
            "unknown peer"
        );
        a.send(1, 0, 0, 1, vec![1]).unwrap();
        assert!(a.inline_start(1, 0, 0, 1, None, 1).is_none(), "queued");
        let (mut a, _) = pair();
        a.rail_down(1, 0);
        assert!(a.inline_start(1, 0, 0, 1, None, 1).is_none(), "rail down");
        let (mut a, _) = pair();
        // Eager credit spent: the message waits its turn as a rendezvous.
        let credits = a.cfg.eager_credits;
        a.peers[1].credit_used = credits as u64;
        assert!(a.inline_start(1, 0, 0, 1, None, 1).is_none(), "no credit");
    }
}
