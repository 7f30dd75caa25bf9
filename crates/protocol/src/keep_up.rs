//! Adaptive striping: does a link carry what is written to it as fast as it is written (the
//! CPU, not the wire, is the limit: veth, loopback)? There, cutting a message for several
//! rails gains nothing and costs a write, a read and often a wakeup per piece (a 256 KiB
//! ping-pong over 4 unlimited rails took twice as long as over one), and moving a quiet pair's
//! messages from rail to rail costs their sockets' warm state (mostly a fresh connection's
//! congestion window; rails run reno, whose slow start no early exit cuts short, as cubic's
//! HyStart did).
//!
//! The driver tells, right after a flush that wrote enough of a large message's data to judge,
//! how much of it the link still holds (a socket's unsent and unacknowledged bytes). A link
//! that keeps up holds almost nothing; a NIC whose wire is the limit holds most of it. (Only
//! flushes with pulled data: the receiver of an eager message in a ping-pong acknowledges it
//! with its reply, so the socket holds it, delivered, until then.) A token bucket (the testbed's tbf,
//! 128 KiB at 1 Gbit/s) looks fast while it has tokens, and a ping-pong that stopped cutting
//! its messages then empties it within a few. So a backlog left after a flush is timed until
//! the driver next looks, and a link whose timed backlogs mostly drain slower than
//! [`SLOW_DRAIN`] counts as not keeping up for the next [`SLOW_MEMORY`] judgements, whatever
//! the bucket shows meanwhile. Not every slow drain: veth behind a softirq deferred to
//! ksoftirqd, on a machine whose cores are busy, now and then holds a write for a few
//! milliseconds (here 18 of 147 timed backlogs in a ping-pong sweep; at 1 Gbit/s 6467 of 6506).

/// Less than this share of a flush left in the link right after it: the link keeps up.
const LEFT_MAX: f32 = 0.25;
/// Flushes of fewer bytes to a rail say nothing about its link (a control frame).
pub(crate) const MIN_BYTES: u64 = 4 * 1024;
/// Once judged to keep up, a link is judged again every this many flushes worth it (each
/// costs the driver a syscall); otherwise after every one.
const EVERY: u32 = 4;
/// A backlog at least this large left after a flush is timed until the driver next looks.
const TIMED_MIN: usize = 16 * 1024;
/// Drained slower than this (bytes per microsecond; 400 = 3.2 Gbit/s), the link is slow.
/// A rate-limited 1 Gbit/s link drains at 125, veth behind a deferred softirq at 600 or more.
const SLOW_DRAIN: f64 = 400.0;
/// Backlogs timed over longer than this (microseconds) say nothing: the driver looked late.
const TIMED_MAX_US: u64 = 20_000;
/// The share of slow drains among the recent timed backlogs (smoothed by 1/4) that makes a
/// slow link, and the judgements a slow link outweighs.
const SLOW_SHARE: f32 = 0.5;
const SLOW_MEMORY: u32 = 256;

#[derive(Debug, Clone, Copy)]
pub(crate) struct KeepUp {
    /// Bytes written to the rail (`Rail::tx_bytes`) when the driver's current flush began,
    /// and whether the flush pulled large-message data for it.
    flush_start: u64,
    pub pulled: bool,
    /// Smoothed share of a flush the link still held right after it (NaN: not judged yet),
    /// and whether the last judgement found it holding much.
    left: f32,
    held: bool,
    /// Flushes worth judging since the last judgement.
    skipped: u32,
    /// A backlog left after a flush (time in microseconds, bytes), to time.
    timed: Option<(u64, usize)>,
    /// Smoothed share of slow drains among timed backlogs, and judgements left during which
    /// the link counts as slow.
    slow_share: f32,
    slow_for: u32,
    /// The last timed backlog drained fast: what a flush left was held by something other
    /// than the wire (the receiver's window, still small on a fresh socket, held half of each
    /// 128 KiB write over veth), so a large share left says nothing against the link.
    drained_fast: bool,
}

impl Default for KeepUp {
    fn default() -> Self {
        KeepUp {
            flush_start: 0,
            pulled: false,
            left: f32::NAN,
            held: true,
            skipped: 0,
            timed: None,
            // As likely slow as not: the first slow drain is a verdict, the first fast one
            // clears it.
            slow_share: SLOW_SHARE,
            slow_for: 0,
            drained_fast: false,
        }
    }
}

impl KeepUp {
    pub fn keeps_up(&self) -> bool {
        (self.left < LEFT_MAX || self.drained_fast) && !self.slow()
    }

    /// The link was lately seen to drain slowly.
    pub fn slow(&self) -> bool {
        self.slow_for > 0
    }

    /// A flush begins; `tx_bytes` have been written to the rail so far.
    pub fn flush_starts(&mut self, tx_bytes: u64) {
        self.flush_start = tx_bytes;
        self.pulled = false;
    }

    /// After a flush (`tx_bytes` written to the rail so far): should the driver report the
    /// backlog now?
    pub fn wants_judging(&mut self, tx_bytes: u64) -> bool {
        if !self.pulled || tx_bytes.saturating_sub(self.flush_start) < MIN_BYTES {
            return false;
        }
        self.skipped += 1;
        self.held || self.skipped >= EVERY
    }

    /// Right after a flush (`tx_bytes` written to the rail so far), at `now` (microseconds),
    /// the link held `backlog`.
    pub fn judge(&mut self, tx_bytes: u64, backlog: usize, now: u64) {
        let written = tx_bytes.saturating_sub(self.flush_start);
        if written == 0 {
            return;
        }
        let left = (backlog as f64 / written as f64).min(1.0) as f32;
        self.left = if self.left.is_nan() {
            left
        } else {
            (self.left + left) / 2.0
        };
        self.skipped = 0;
        self.held = left >= LEFT_MAX;
        if !self.held {
            self.slow_for = self.slow_for.saturating_sub(1);
        }
        if backlog >= TIMED_MIN {
            self.timed = Some((now.max(1), backlog));
        }
    }

    /// Does the driver owe a look at the backlog before the next flush writes?
    pub fn timing(&self) -> bool {
        self.timed.is_some()
    }

    /// Before the next flush writes, at `now`, the link held `backlog`: how fast did it drain
    /// what the last judged flush left?
    pub fn time_drain(&mut self, backlog: usize, now: u64) {
        let Some((at, left)) = self.timed.take() else {
            return;
        };
        let span = now.saturating_sub(at);
        if span == 0 || span > TIMED_MAX_US || backlog >= left {
            return;
        }
        let slow = (left - backlog) as f64 / (span as f64) < SLOW_DRAIN;
        self.drained_fast = !slow;
        self.slow_share += (f32::from(u8::from(slow)) - self.slow_share) / 4.0;
        if self.slow_share < SLOW_SHARE {
            self.slow_for = 0;
        } else if slow {
            self.slow_for = SLOW_MEMORY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    /// A flush that pulled `written` bytes for the rail; returns the rail's count after it.
    fn flush(k: &mut KeepUp, written: u64) -> u64 {
        let start = k.flush_start + 1_000_000;
        k.flush_starts(start);
        k.pulled = true;
        start + written
    }

    fn asks(k: &mut KeepUp, written: u64) -> bool {
        let tx_bytes = flush(k, written);
        k.wants_judging(tx_bytes)
    }

    fn judge(k: &mut KeepUp, written: u64, backlog: usize, now: u64) {
        let tx_bytes = flush(k, written);
        k.judge(tx_bytes, backlog, now);
    }

    fn judged(k: &mut KeepUp, written: u64, backlog: usize, now: u64) {
        assert!(asks(k, written) || !k.left.is_nan());
        judge(k, written, backlog, now);
    }

    #[test]
    fn unknown_links_do_not_keep_up_until_judged() {
        let mut k = KeepUp::default();
        assert!(!k.keeps_up());
        assert!(!asks(&mut k, MIN_BYTES - 1), "a control frame says nothing");
        k.flush_starts(0);
        assert!(
            !k.wants_judging(64 * KIB),
            "nor does a flush with no pulled data"
        );
        assert!(asks(&mut k, 64 * KIB));
        judge(&mut k, 64 * KIB, 400, 10);
        assert!(k.keeps_up());
        assert!(!k.timing(), "a small backlog is not timed");
    }

    #[test]
    fn a_wire_limited_link_does_not_keep_up() {
        let mut k = KeepUp::default();
        judged(&mut k, 256 * KIB, 250 * 1024, 10);
        assert!(!k.keeps_up());
        // It drains at 125 bytes/us (1 Gbit/s).
        k.time_drain(0, 10 + 250 * 1024 / 125);
        assert!(!k.keeps_up());
    }

    #[test]
    fn once_judged_a_link_is_judged_every_few_flushes() {
        let mut k = KeepUp::default();
        judged(&mut k, 64 * KIB, 0, 1);
        let asked = (0..4 * EVERY).filter(|_| asks(&mut k, 64 * KIB)).count();
        // Asked, never answered: every flush from the EVERY-th on.
        assert_eq!(asked as u32, 3 * EVERY + 1);
        judge(&mut k, 64 * KIB, 0, 2);
        let asked = (0..4 * EVERY)
            .filter(|_| {
                let ask = asks(&mut k, 64 * KIB);
                if ask {
                    judge(&mut k, 64 * KIB, 0, 3);
                }
                ask
            })
            .count();
        assert_eq!(asked as u32, 4);
    }

    #[test]
    fn one_slow_flush_on_a_fast_link_is_outweighed_soon() {
        let mut k = KeepUp::default();
        judged(&mut k, 64 * KIB, 0, 1);
        // A deferred softirq: all of it still there right after the write, gone 80 us later.
        judge(&mut k, 64 * KIB, 64 * 1024, 100);
        assert!(!k.keeps_up());
        assert!(k.timing());
        k.time_drain(0, 180);
        assert!(!k.timing());
        let mut judgements = 0;
        while !k.keeps_up() {
            judge(&mut k, 64 * KIB, 0, 200);
            judgements += 1;
        }
        assert!(judgements <= 3, "{judgements}");
    }

    /// Judges a flush of 64 KiB that leaves `held` KiB, drained at `rate` bytes/us by the
    /// next look.
    fn drained(k: &mut KeepUp, now: &mut u64, held: usize, rate: u64) {
        judge(k, 64 * KIB, held * 1024, *now);
        *now += (held as u64 * KIB) / rate + 30;
        k.time_drain(0, *now);
    }

    #[test]
    fn a_token_bucket_with_tokens_is_caught_once_it_runs_dry() {
        let mut k = KeepUp::default();
        let mut now = 1;
        // Tokens: the writes pass at once.
        judged(&mut k, 64 * KIB, 0, now);
        assert!(k.keeps_up());
        // Out of tokens: 48 KiB of each 64 wait, and drain at 125 bytes/us. The first such
        // flush is judged within EVERY, then every flush until one passes at once again.
        assert!((0..EVERY).any(|_| asks(&mut k, 64 * KIB)));
        let mut flushes = 0;
        while k.slow_for == 0 {
            assert!(flushes == 0 || asks(&mut k, 64 * KIB));
            drained(&mut k, &mut now, 48, 125);
            flushes += 1;
        }
        assert_eq!(flushes, 1, "a fresh link is as likely slow as not");
        // Split over rails again, the bucket refills and writes pass at once: still slow for
        // SLOW_MEMORY judgements.
        for _ in 0..SLOW_MEMORY - 1 {
            judge(&mut k, 16 * KIB, 0, now);
            assert!(!k.keeps_up());
        }
        judge(&mut k, 16 * KIB, 0, now);
        assert!(k.keeps_up());
        // Whole messages again empty the bucket: the first slow drain is enough now.
        drained(&mut k, &mut now, 48, 125);
        assert!(!k.keeps_up());
        assert_eq!(k.slow_for, SLOW_MEMORY);
    }

    #[test]
    fn one_slow_drain_is_not_a_slow_link() {
        let mut k = KeepUp::default();
        let mut now = 1;
        judged(&mut k, 64 * KIB, 0, now);
        // Deferred softirqs drain fast, mostly.
        for _ in 0..2 {
            drained(&mut k, &mut now, 64, 2_000);
        }
        judge(&mut k, 64 * KIB, 0, now);
        judge(&mut k, 64 * KIB, 0, now);
        assert!(k.keeps_up());
        // Deferred for 2 ms, once.
        drained(&mut k, &mut now, 64, 30);
        assert!(!k.slow());
        assert!(asks(&mut k, 64 * KIB), "in doubt, the next flush is judged");
        judge(&mut k, 64 * KIB, 0, now);
        judge(&mut k, 64 * KIB, 0, now);
        assert!(k.keeps_up());
    }

    #[test]
    fn a_late_look_or_a_growing_backlog_times_nothing() {
        let mut k = KeepUp::default();
        judged(&mut k, 64 * KIB, 0, 1);
        judge(&mut k, 64 * KIB, 64 * 1024, 100);
        k.time_drain(0, 100 + TIMED_MAX_US + 1);
        let mut j = 0;
        while !k.keeps_up() {
            judge(&mut k, 64 * KIB, 0, 200);
            j += 1;
        }
        assert!(j <= 3, "a late look is no evidence of a slow link");
        judge(&mut k, 64 * KIB, 64 * 1024, 300);
        k.time_drain(70 * 1024, 400);
        assert!(!k.timing());
        assert_eq!(k.slow_for, 0);
    }

    #[test]
    fn a_backlog_that_drains_fast_does_not_count_against_the_link() {
        let mut k = KeepUp::default();
        let mut now = 1;
        judged(&mut k, 128 * KIB, 0, now);
        assert!(k.keeps_up());
        // Half of each 128 KiB write waits for the receiver's window, and goes within 40 us.
        for _ in 0..8 {
            judge(&mut k, 128 * KIB, 64 * 1024, now);
            assert!(k.timing());
            now += 40;
            k.time_drain(0, now);
            assert!(k.keeps_up());
            judge(&mut k, 128 * KIB, 0, now);
            assert!(k.keeps_up());
        }
        // The same backlogs drained at 1 Gbit/s (the wire): at once not keeping up, and after
        // a few a slow link.
        for i in 0..3 {
            judge(&mut k, 128 * KIB, 64 * 1024, now);
            now += 64 * 1024 / 125;
            k.time_drain(0, now);
            assert!(!k.keeps_up());
            assert_eq!(k.slow(), i == 2);
        }
    }

    #[test]
    fn fast_drains_clear_a_slow_verdict() {
        let mut k = KeepUp::default();
        let mut now = 1;
        for _ in 0..3 {
            drained(&mut k, &mut now, 64, 100);
        }
        assert_eq!(k.slow_for, SLOW_MEMORY);
        let mut fast = 0;
        while k.slow() {
            drained(&mut k, &mut now, 64, 1_000);
            fast += 1;
        }
        assert!(fast <= 2, "{fast}");
    }
}
