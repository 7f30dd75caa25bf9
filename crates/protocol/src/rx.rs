//! Receive side: each rail is a byte stream parsed into frames. Small frames are read in bulk
//! into a staging area; once a large payload's destination is known, the driver reads the rest of
//! it straight into that buffer (no intermediate copy).

use hx_wire::{FrameHeader, FrameKind, HEADER_LEN};

use crate::core::{Body, ReqKind, Unexp};
use crate::slab::Handle;
use crate::{Buffer, Completion, Core, ProtoError, Rank, ReqId};

/// Payloads at least this long are read directly into their destination.
const DIRECT_MIN: usize = 4096;

#[derive(Clone, Copy)]
pub(crate) enum Dest {
    Req(ReqId),
    Unexp(Handle),
}

#[derive(Clone, Copy)]
pub(crate) struct Payload {
    dest: Dest,
    off: usize,
    remaining: usize,
}

pub(crate) struct RxState {
    stage: Vec<u8>,
    start: usize,
    end: usize,
    cur: Option<Payload>,
    direct: bool,
}

impl RxState {
    pub fn new(size: usize) -> Self {
        RxState {
            stage: vec![0; size.max(2 * HEADER_LEN)],
            start: 0,
            end: 0,
            cur: None,
            direct: false,
        }
    }

    pub fn reset(&mut self) {
        self.start = 0;
        self.end = 0;
        self.cur = None;
        self.direct = false;
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
                        Body::Rts => None,
                    }),
                };
                if let Some(s) = slice {
                    rx.direct = true;
                    return s;
                }
            }
        }
        if rx.end == rx.stage.len() {
            rx.stage.copy_within(rx.start..rx.end, 0);
            rx.end -= rx.start;
            rx.start = 0;
        }
        &mut rx.stage[rx.end..]
    }

    /// `n` bytes were read into the slice [`rx_space`](Self::rx_space) gave. Parses them. An
    /// error means the rail's stream is corrupt: the driver should close it.
    pub fn rx_done(&mut self, peer: Rank, rail: usize, n: usize) -> Result<(), ProtoError> {
        let rx = &mut self.peers[peer as usize].rails[rail].rx;
        if rx.direct {
            rx.direct = false;
            let p = rx.cur.as_mut().expect("direct read without payload");
            let n = n.min(p.remaining);
            p.off += n;
            p.remaining -= n;
            let (dest, left) = (p.dest, p.remaining);
            if left == 0 {
                rx.cur = None;
            }
            self.account(dest, n);
            return Ok(());
        }
        rx.end = (rx.end + n).min(rx.stage.len());
        self.parse(peer, rail)
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
                let stage = &self.peers[peer as usize].rails[rail].rx.stage[from..from + take];
                write_dest(&mut self.reqs, &mut self.unexp, p.dest, off, stage);
                self.account(p.dest, take);
                continue;
            }
            if avail < HEADER_LEN {
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
            if let Some(p) = self.handle_header(peer, rail, &h)? {
                self.peers[peer as usize].rails[rail].rx.cur = Some(p);
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
                    return Err(Self::violation(
                        peer,
                        rail,
                        h.seq,
                        "duplicate sequence number",
                    ));
                }
                if h.seq - p.rx_seq > (1 << 20) {
                    return Err(Self::violation(
                        peer,
                        rail,
                        h.seq,
                        "sequence number far ahead",
                    ));
                }
                let in_order = h.seq == p.rx_seq;
                let dest = if in_order {
                    p.rx_seq += 1;
                    let d = self.arrive_in_order(peer, h);
                    self.drain_reorder(peer);
                    d
                } else {
                    let u = self.hold(peer, h);
                    self.peers[peer as usize].reorder.insert(h.seq, u);
                    (h.kind == FrameKind::Eager).then_some(Dest::Unexp(u))
                };
                match dest {
                    Some(d) if len > 0 => Ok(Some(Payload {
                        dest: d,
                        off: 0,
                        remaining: len,
                    })),
                    Some(d) => {
                        self.account(d, 0);
                        Ok(None)
                    }
                    None => Ok(None),
                }
            }
            FrameKind::Cts => {
                let Some(req) = self.peers[peer as usize].wait_cts.remove(&h.seq) else {
                    return Err(Self::violation(
                        peer,
                        rail,
                        h.seq,
                        "CTS for no pending send",
                    ));
                };
                self.start_data(peer, req, h.seq);
                Ok(None)
            }
            FrameKind::Data => {
                let Some(&req) = self.peers[peer as usize].rdv_recv.get(&h.seq) else {
                    return Err(Self::violation(peer, rail, h.seq, "data for no rendezvous"));
                };
                let total = match self.reqs.get(req).map(|r| &r.kind) {
                    Some(ReqKind::Recv(rv)) => rv.status.map_or(0, |s| s.len),
                    _ => 0,
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
                Ok(Some(Payload {
                    dest: Dest::Req(req),
                    off: h.value as usize,
                    remaining: h.payload_len as usize,
                }))
            }
            FrameKind::Bye => {
                self.peers[peer as usize].rails[rail].bye = true;
                Ok(None)
            }
            FrameKind::Heartbeat => Ok(None),
        }
    }

    /// An eager message or RTS whose turn has come, with its header just read.
    fn arrive_in_order(&mut self, peer: Rank, h: &FrameHeader) -> Option<Dest> {
        let len = h.value as usize;
        if let Some(req) = self.take_posted(h.dst_ep, peer, h.tag) {
            if h.kind == FrameKind::Rts {
                self.start_rdv_recv(peer, h.seq, req, h.src_ep, h.tag, len);
                return None;
            }
            self.set_matched(req, peer, h.src_ep, h.tag, len, None);
            return Some(Dest::Req(req));
        }
        let u = self.hold(peer, h);
        self.eps
            .entry(h.dst_ep)
            .or_default()
            .unexpected
            .push_back(u);
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
            body,
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

    /// `n` payload bytes reached `dest`: complete what is complete.
    fn account(&mut self, dest: Dest, n: usize) {
        match dest {
            Dest::Req(req) => {
                let Some(r) = self.reqs.get_mut(req) else {
                    return;
                };
                let ReqKind::Recv(rv) = &mut r.kind else {
                    return;
                };
                rv.unreceived -= n.min(rv.unreceived);
                if rv.unreceived == 0 && r.completion == Completion::Pending {
                    r.completion = Completion::Done(rv.status.unwrap());
                    if let Some((p, seq)) = rv.rdv {
                        self.peers[p as usize].rdv_recv.remove(&seq);
                    }
                }
            }
            Dest::Unexp(u) => {
                let Some(m) = self.unexp.get_mut(u) else {
                    return;
                };
                let len = m.len;
                if let Body::Eager {
                    filled, claimed, ..
                } = &mut m.body
                {
                    *filled += n;
                    if *filled == len {
                        if let Some(req) = *claimed {
                            self.finish_claimed(u, req);
                        }
                    }
                }
            }
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
            Body::Rts => None,
        }),
    };
    if let Some(buf) = buf {
        if off < buf.len() {
            let n = data.len().min(buf.len() - off);
            buf[off..off + n].copy_from_slice(&data[..n]);
        }
    }
}
