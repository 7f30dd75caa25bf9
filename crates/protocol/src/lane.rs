//! Small messages that skip framing: a driver with a lane beside a peer's only rail (shared
//! memory: hx_transport's `ShmLink::lane_send`) carries an eager message there as its
//! envelope and bytes, in order with the rail's frames by the lane's own rule. The core spends
//! no sequence number on it; it charges the same eager credit as a framed message, and the
//! receiver matches it (or holds it as unexpected) at the point of the stream where it came.

use crate::core::{Body, EagerRma, ReqKind, Unexp};
use crate::{Buffer, Completion, Core, EpId, Filter, Rank, Status};

/// A lane message's sequence number in the unexpected queue: none (it was never framed).
const NO_SEQ: u64 = u64::MAX;

impl Filter {
    /// May an express receive on `ep` with this filter, which posted nothing (the conditions
    /// of [`Core::rx_express_into`] hold), take the lane message `(src_ep, dst_ep, tag)` of
    /// `len` bytes from `peer` whole into its buffer of `cap` bytes? If so the taker copies it
    /// and tells [`Core::lane_received`]; if not, a full round hands it to
    /// [`Core::lane_arrived`].
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn takes_lane_message(
        &self,
        ep: EpId,
        cap: usize,
        peer: Rank,
        src_ep: EpId,
        dst_ep: EpId,
        tag: u64,
        len: usize,
    ) -> bool {
        dst_ep == ep && len <= cap && self.takes_from(peer, src_ep, tag)
    }
}

impl<B: Buffer> Core<B> {
    /// May a small eager message of `len` bytes to `peer` go through a lane now? Only when a
    /// framed one could leave at once (what [`inline_start`](Self::inline_start) checks: the
    /// peer's only rail is up with nothing queued, and eager credit is left), so nothing the
    /// core holds for the peer would have gone first.
    #[inline]
    pub fn lane_ok(&self, peer: Rank, len: usize) -> bool {
        self.leaves_at_once(peer, len)
            && self.peers[peer as usize].lossless
            && matches!(&self.peers[peer as usize].rails[..], [r] if r.up)
    }

    /// A message that [`lane_ok`](Self::lane_ok) allowed went through the lane: its credit.
    #[inline]
    pub fn lane_sent(&mut self, peer: Rank, len: usize) {
        let p = &mut self.peers[peer as usize];
        p.credit_used += len as u64 + crate::EAGER_OVERHEAD;
        p.rails[0].tx_bytes += len as u64;
    }

    /// The longest message that goes eagerly (`HX_EAGER_LIMIT`): a lane carries no longer.
    pub fn eager_limit(&self) -> usize {
        self.cfg.eager_limit
    }

    /// Eager credit (bytes, each message's overhead included) that messages to `peer` may
    /// spend through its lane before the core hears of them ([`lane_sent_many`]): what is left
    /// while [`lane_ok`] allows a message at all, else 0. Nothing else the core holds for the
    /// peer can go first meanwhile, as long as the core is not called.
    ///
    /// [`lane_sent_many`]: Self::lane_sent_many
    /// [`lane_ok`]: Self::lane_ok
    pub fn lane_credit(&self, peer: Rank) -> u64 {
        if !self.lane_ok(peer, 0) {
            return 0;
        }
        let p = &self.peers[peer as usize];
        (self.cfg.eager_credits as u64 + p.credit_granted).saturating_sub(p.credit_used)
    }

    /// `count` messages of `bytes` in all went through `peer`'s lane within the credit
    /// [`lane_credit`](Self::lane_credit) gave: as that many [`lane_sent`](Self::lane_sent).
    pub fn lane_sent_many(&mut self, peer: Rank, count: u64, bytes: u64) {
        let p = &mut self.peers[peer as usize];
        p.credit_used += bytes + count * crate::EAGER_OVERHEAD;
        p.rails[0].tx_bytes += bytes;
    }

    /// A message came through `peer`'s lane, after everything parsed from its rail so far:
    /// into the first posted receive that takes it (completed at once), else held as
    /// unexpected. Nothing is wrong with any envelope (the lane carries only what a sender's
    /// core allowed; a peer's garbage is just another message).
    pub fn lane_arrived(
        &mut self,
        peer: Rank,
        src_ep: EpId,
        dst_ep: EpId,
        tag: u64,
        data: Option<u64>,
        bytes: &[u8],
    ) {
        let len = bytes.len();
        self.peers[peer as usize].rails[0].rx_bytes += len as u64;
        let msg = Status {
            source: peer,
            src_ep,
            tag,
            len,
            truncated: false,
            data,
        };
        if let Some(req) = self.take_posted(dst_ep, peer, src_ep, tag) {
            self.set_matched(req, msg, None);
            self.eager_consumed(peer, len);
            if let Some(r) = self.reqs.get_mut(req) {
                let buf = r.buf.as_mut_slice();
                let n = len.min(buf.len());
                buf[..n].copy_from_slice(&bytes[..n]);
                if let ReqKind::Recv(rv) = &mut r.kind {
                    rv.unreceived = 0;
                    if r.completion == Completion::Pending {
                        r.completion = Completion::Done(rv.status.unwrap_or(msg));
                        if let Some(f) = &mut self.finished {
                            f.push(req);
                        }
                    }
                }
            }
            return;
        }
        let mut body = self.alloc_buf(len);
        body.copy_from_slice(bytes);
        let u = self.unexp.insert(Unexp {
            src: peer,
            src_ep,
            dst_ep,
            tag,
            seq: NO_SEQ,
            len,
            data,
            body: Body::Eager {
                data: body,
                filled: len,
                claimed: None,
            },
            rma: EagerRma::No,
        });
        self.eps.entry(dst_ep).unexpected.push_back(u);
    }

    /// A lane message of `len` bytes from `peer` that an express receive took (as
    /// [`Filter::takes_lane_message`] allows): counted as received, its eager credit as
    /// consumed.
    #[inline]
    pub fn lane_received(&mut self, peer: Rank, len: usize) {
        self.peers[peer as usize].rails[0].rx_bytes += len as u64;
        self.eager_consumed(peer, len);
    }

    /// `count` lane messages of `bytes` in all that express receives took: as that many
    /// [`lane_received`](Self::lane_received).
    pub fn lane_received_many(&mut self, peer: Rank, count: u64, bytes: u64) {
        self.peers[peer as usize].rails[0].rx_bytes += bytes;
        self.eager_cost_consumed(peer, bytes + count * crate::EAGER_OVERHEAD);
    }
}

#[cfg(test)]
mod tests {
    use crate::tx::inline_tests::pair;
    use crate::{Completion, Filter};

    #[test]
    fn the_lane_only_when_a_framed_message_could_leave_at_once() {
        let (mut a, _) = pair();
        assert!(a.lane_ok(1, 8));
        assert!(!a.lane_ok(0, 8), "self");
        assert!(!a.lane_ok(5, 8), "unknown peer");
        assert!(!a.lane_ok(1, a.cfg.eager_limit + 1));
        a.send(1, 0, 0, 1, vec![1]).unwrap();
        assert!(!a.lane_ok(1, 8), "something queued goes first");
        let (mut a, _) = pair();
        a.set_lossless(1, false);
        assert!(!a.lane_ok(1, 8), "a lossy peer's frames are acknowledged");
        let (mut a, _) = pair();
        a.rail_down(1, 0);
        assert!(!a.lane_ok(1, 8), "rail down");
        let (mut a, _) = pair();
        // The lane spends eager credit as a framed message would.
        let credits = a.cfg.eager_credits as u64;
        let mut sent = 0;
        while a.lane_ok(1, 32) {
            a.lane_sent(1, 32);
            sent += 1;
        }
        assert_eq!(sent, credits / (32 + crate::EAGER_OVERHEAD));
    }

    #[test]
    fn lane_messages_meet_receives_in_order() {
        let (_, mut b) = pair();
        let any = Filter::new(None, None);
        // Posted first: taken at once, completed, credit counted as consumed.
        let r = b.recv(0, None, Some(4), vec![0; 8]).unwrap();
        b.lane_arrived(0, 3, 0, 4, Some(99), b"abc");
        let Some((Completion::Done(st), buf)) = b.take(r) else {
            panic!("not completed");
        };
        assert_eq!((st.source, st.src_ep, st.tag, st.len), (0, 3, 4, 3));
        assert_eq!(
            (st.data, st.truncated, &buf[..3]),
            (Some(99), false, &b"abc"[..])
        );
        // Too long for the receive: truncated to its buffer.
        let r = b.recv(0, None, None, vec![0; 2]).unwrap();
        b.lane_arrived(0, 3, 0, 5, None, b"xyz");
        let Some((Completion::Done(st), buf)) = b.take(r) else {
            panic!("not completed");
        };
        assert!(st.truncated && st.len == 3 && buf == b"xy");
        // Unposted: held, in order, and found by probe and later receives.
        b.lane_arrived(0, 3, 0, 6, None, b"first");
        b.lane_arrived(0, 3, 0, 6, None, b"second");
        assert_eq!(b.probe(0, Some(0), Some(6)).map(|s| s.len), Some(5));
        for want in [&b"first"[..], b"second"] {
            let r = b.recv(0, Some(0), Some(6), vec![0; 8]).unwrap();
            let Some((Completion::Done(st), buf)) = b.take(r) else {
                panic!("not completed");
            };
            assert_eq!(&buf[..st.len], want);
        }
        assert!(b.ep_quiet(0));
        // The express path: only what the receive takes, into a buffer large enough.
        assert!(any.takes_lane_message(0, 8, 0, 3, 0, 7, 8));
        assert!(
            !any.takes_lane_message(0, 8, 0, 3, 1, 7, 8),
            "another endpoint"
        );
        assert!(!any.takes_lane_message(0, 8, 0, 3, 0, 7, 9), "too long");
        let tag8 = Filter::new(None, Some(8));
        assert!(!tag8.takes_lane_message(0, 8, 0, 3, 0, 7, 8), "another tag");
        let from1 = Filter::new(Some(1), None);
        assert!(
            !from1.takes_lane_message(0, 8, 0, 3, 0, 7, 8),
            "another peer"
        );
        // What it took is counted as a framed message's receipt would be.
        let before = b.peers[0].rails[0].rx_bytes;
        b.lane_received(0, 8);
        assert_eq!(b.peers[0].rails[0].rx_bytes, before + 8);
    }

    #[test]
    fn counted_in_bulk_as_one_by_one() {
        let (mut a, _) = pair();
        let (mut one, _) = pair();
        let credit = a.lane_credit(1);
        assert_eq!(credit, a.cfg.eager_credits as u64);
        a.lane_sent_many(1, 3, 24);
        for len in [8, 16, 0] {
            one.lane_sent(1, len);
        }
        assert_eq!(a.lane_credit(1), one.lane_credit(1));
        assert_eq!(a.lane_credit(1), credit - 24 - 3 * crate::EAGER_OVERHEAD);
        assert_eq!(a.peers[1].rails[0].tx_bytes, one.peers[1].rails[0].tx_bytes);
        // No credit while the lane may not be used at all.
        a.send(1, 0, 0, 1, vec![1]).unwrap();
        assert_eq!(a.lane_credit(1), 0, "something queued goes first");
        // Receipts: the same count, and a credit grant once a batch was consumed.
        let (_, mut b) = pair();
        let (_, mut b1) = pair();
        let n = (b.cfg.eager_credits as u64 / 4) / (8 + crate::EAGER_OVERHEAD) + 1;
        b.lane_received_many(0, n, 8 * n);
        for _ in 0..n {
            b1.lane_received(0, 8);
        }
        assert_eq!(b.peers[0].consumed, b1.peers[0].consumed);
        assert_eq!(b.peers[0].credit_sent, b1.peers[0].credit_sent);
        assert!(b.peers[0].credit_sent > 0, "a credit grant is due");
        assert_eq!(b.peers[0].rails[0].rx_bytes, b1.peers[0].rails[0].rx_bytes);
    }
}
