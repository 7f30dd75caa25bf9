//! Transmit side: per-rail queues of frames whose payloads are slices of the callers' buffers, and
//! the placement of rendezvous data on rails according to the policy.

use std::io::IoSlice;

use hx_wire::{FrameHeader, FrameKind, HEADER_LEN};

use crate::core::{PullJob, ReqKind};
use crate::{Buffer, Completion, Core, Policy, Rank, ReqId};

pub(crate) struct TxItem {
    hdr: [u8; HEADER_LEN],
    /// Bytes `off..off + len` of a request's buffer follow the header.
    payload: Option<(ReqId, usize, usize)>,
    /// An eager send that completes when this frame is written.
    completes: Option<ReqId>,
    sent: usize,
}

impl TxItem {
    pub fn new(
        h: FrameHeader,
        payload: Option<(ReqId, usize, usize)>,
        completes: Option<ReqId>,
    ) -> Self {
        TxItem {
            hdr: h.to_bytes(),
            payload,
            completes,
            sent: 0,
        }
    }

    fn payload_len(&self) -> usize {
        self.payload.map_or(0, |p| p.2)
    }

    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.payload_len()
    }
}

impl<B: Buffer> Core<B> {
    /// Does `rail` to `peer` have bytes to write (queued, or data it may pull)?
    pub fn tx_pending(&self, peer: Rank, rail: usize) -> bool {
        let p = &self.peers[peer as usize];
        !p.rails[rail].tx.is_empty() || !p.pull_q.is_empty()
    }

    /// Does any rail to `peer` have bytes to write?
    pub fn peer_tx_pending(&self, peer: Rank) -> bool {
        let p = &self.peers[peer as usize];
        !p.pull_q.is_empty() || p.rails.iter().any(|r| !r.tx.is_empty())
    }

    /// Fills `out` with the next bytes `rail` to `peer` should write; returns how many slices.
    /// A rail whose queue is empty first pulls a chunk of pending large-message data: it is
    /// asked only when its socket has room, which is what makes faster rails carry more.
    pub fn tx_iovecs<'a>(&'a mut self, peer: Rank, rail: usize, out: &mut [IoSlice<'a>]) -> usize {
        if self.peers[peer as usize].rails[rail].tx.is_empty() {
            self.pull(peer, rail);
        }
        let this: &'a Core<B> = self;
        let mut n = 0;
        for item in &this.peers[peer as usize].rails[rail].tx {
            if n == out.len() {
                break;
            }
            if item.sent < HEADER_LEN {
                out[n] = IoSlice::new(&item.hdr[item.sent..]);
                n += 1;
            }
            if let Some((req, off, len)) = item.payload {
                if len == 0 || n == out.len() {
                    continue;
                }
                let done = item.sent.saturating_sub(HEADER_LEN);
                let bytes = this
                    .reqs
                    .get(req)
                    .and_then(|r| r.buf.as_slice().get(off + done..off + len));
                match bytes {
                    Some(b) => {
                        out[n] = IoSlice::new(b);
                        n += 1;
                    }
                    // Cannot happen while the request lives; stop rather than send a short frame.
                    None => break,
                }
            }
        }
        n
    }

    /// Records that `n` bytes of what [`tx_iovecs`](Self::tx_iovecs) showed were written.
    pub fn tx_done(&mut self, peer: Rank, rail: usize, mut n: usize) {
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
            self.item_written(&item);
        }
    }

    fn item_written(&mut self, item: &TxItem) {
        if let Some(req) = item.completes {
            if let Some(r) = self.reqs.get_mut(req) {
                let len = r.buf.as_slice().len();
                if let ReqKind::Send(s) = &mut r.kind {
                    s.unwritten = 0;
                }
                let st = crate::Status {
                    source: self.me,
                    src_ep: u16::from_le_bytes([item.hdr[6], item.hdr[7]]),
                    tag: u64::from_le_bytes(item.hdr[24..32].try_into().unwrap()),
                    len,
                    truncated: false,
                };
                r.completion = Completion::Done(st);
            }
            return;
        }
        if let Some((req, _, len)) = item.payload {
            self.data_written(req, len);
        }
    }

    fn data_written(&mut self, req: ReqId, len: usize) {
        let me = self.me;
        if let Some(r) = self.reqs.get_mut(req) {
            let total = r.buf.as_slice().len();
            if let ReqKind::Send(s) = &mut r.kind {
                s.unwritten -= len;
                if s.unwritten == 0 {
                    r.completion = Completion::Done(crate::Status {
                        source: me,
                        src_ep: 0,
                        tag: 0,
                        len: total,
                        truncated: false,
                    });
                }
            }
        }
    }

    /// The receiver is ready for rendezvous message `req`: place its data on the rails.
    pub(crate) fn start_data(&mut self, peer: Rank, req: ReqId, seq: u64) {
        let len = match self.reqs.get(req) {
            Some(r) => r.buf.as_slice().len(),
            None => return,
        };
        if len == 0 {
            self.data_written(req, 0);
            return;
        }
        let n = self.peers[peer as usize].rails.len();
        match self.cfg.policy {
            Policy::Adaptive => {
                self.peers[peer as usize].pull_q.push_back(PullJob {
                    req,
                    seq,
                    next: 0,
                    end: len,
                });
                self.mark_dirty(peer);
            }
            Policy::Bind | Policy::RoundRobin => {
                let rail = self.pick_rail(peer);
                self.enqueue_data(peer, rail, req, seq, 0, len);
            }
            Policy::Stripe => {
                let part = len.div_ceil(n);
                for rail in 0..n {
                    let off = rail * part;
                    if off >= len {
                        break;
                    }
                    self.enqueue_data(peer, rail, req, seq, off, part.min(len - off));
                }
            }
        }
    }

    fn enqueue_data(
        &mut self,
        peer: Rank,
        rail: usize,
        req: ReqId,
        seq: u64,
        off: usize,
        len: usize,
    ) {
        let max = self.cfg.max_chunk;
        let mut at = off;
        while at < off + len {
            let n = max.min(off + len - at);
            self.enqueue(peer, rail, data_item(req, seq, at, n));
            at += n;
        }
    }

    /// Adaptive: `rail` has room; give it the next chunk. Chunks shrink towards a message's end
    /// (guided self-scheduling) so that all rails finish together.
    fn pull(&mut self, peer: Rank, rail: usize) {
        let p = &mut self.peers[peer as usize];
        let rails = p.rails.len();
        let Some(job) = p.pull_q.front_mut() else {
            return;
        };
        let left = job.end - job.next;
        let n = (left / (2 * rails))
            .clamp(self.cfg.min_chunk, self.cfg.max_chunk)
            .min(left);
        let item = data_item(job.req, job.seq, job.next, n);
        job.next += n;
        if job.next == job.end {
            p.pull_q.pop_front();
        }
        let r = &mut p.rails[rail];
        r.queued += item.total_len();
        r.tx.push_back(item);
    }
}

fn data_item(req: ReqId, seq: u64, off: usize, len: usize) -> TxItem {
    let mut h = FrameHeader::new(FrameKind::Data);
    h.seq = seq;
    h.value = off as u64;
    h.payload_len = len as u32;
    TxItem::new(h, Some((req, off, len)), None)
}
