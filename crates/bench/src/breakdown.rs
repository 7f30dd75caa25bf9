//! `hxcomm bench breakdown`: where the one-way time of a small message goes, between two ranks
//! over a TCP rail or shared memory, in the terms of seed 003 (DP-II: T_startup + T_send +
//! T_net + T_delivery) and finer.
//!
//! Ranks 0 and 1 ping-pong `--sizes` bytes (default 8), first untraced (the plain latency),
//! then with the engine's tracing on ([`Engine::enable_trace`]), once with the receiver spinning
//! in `wait` and once sleeping on the engine's fd (`poll`, then `test`). Each message yields
//! stamps along its way — the isend call, the send syscall (TCP) or ring publish (shared memory),
//! the kernel's transmit stamps at the queueing layer and the driver, its receive stamp, the
//! wakeup (sleeping receiver), the receive syscall, the end of the engine's parsing, matching
//! and completion, and the return of `wait` — and the parts are the differences between
//! consecutive stamps. Both ranks' stamps are CLOCK_REALTIME on one machine (all ranks of a
//! testbed are), so they subtract; across machines only the parts within one side are valid.
//!
//! The parts' medians must add up to the measured one-way time (half the round trip of the same
//! traced run) within 10%; the table says so. With the receiver sleeping, some messages find it
//! awake (no wakeup) and medians of the two humps mixed do not add up: the messages it slept for
//! and those that found it awake are broken down apart, each against its own messages' one way
//! (per message, first stamp to last), and the round trip's one way beside the two totals
//! weighted by their shares. Beside it: the raw floor, a plain TCP ping-pong
//! between the rail's own addresses (busy-polling and blocking; and sockperf's if installed),
//! or for shared memory a cache-line ping-pong between the two processes.

pub(crate) mod floor;
mod stats;

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use clap::Args;
use hx_engine::trace::{now_ns, TraceSamples, TxKind};
use hx_engine::{Engine, Request};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use serde_json::json;

use stats::{us, Summary};

const EP: u16 = 1;
const TAG_PING: u64 = 1;
const TAG_CTL: u64 = 2;

#[derive(Args, Debug, Clone)]
pub struct BreakdownOpts {
    /// Message sizes MIN:MAX in bytes (powers of two between them; k/M suffixes allowed).
    #[arg(long, default_value = "8")]
    pub sizes: String,
    /// Timed round trips per mode (each gives two one-way samples, one per direction).
    #[arg(long, default_value_t = 10000)]
    pub iterations: u32,
    /// Untimed round trips before each timed set (default: a tenth, at least 100).
    #[arg(long)]
    pub warmup: Option<u32>,
    /// How the receiver waits: `spin` (polls the engine in wait), `block` (sleeps on the
    /// engine's fd in poll, then test), or both.
    #[arg(long, default_value = "spin,block")]
    pub modes: String,
    /// Leave out the raw floors (plain TCP ping-pong, sockperf, cache-line ping-pong).
    #[arg(long)]
    pub no_floor: bool,
    /// One JSON object per size and mode instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Spin,
    Block,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Spin => "spin",
            Mode::Block => "block",
        }
    }
}

// The stamps along one message's way, in order.
const ISEND: usize = 0;
const WRITE: usize = 1;
const QDISC: usize = 2;
const DRIVER: usize = 3;
const PUBLISH: usize = 4;
const RX: usize = 5;
const WAKE: usize = 6;
const READ: usize = 7;
const RECVD: usize = 8;
const PARSED: usize = 9;
const DONE: usize = 10;
const NPOINTS: usize = 11;
const POINT_NAMES: [&str; NPOINTS] = [
    "isend", "write", "qdisc", "driver", "publish", "rx", "wake", "read", "recvd", "parsed", "done",
];

type Points = [u64; NPOINTS];

/// What a part between two stamps is, and its term in seed 003's model.
fn describe(from: usize, to: usize) -> (String, &'static str) {
    let (what, seed) = match (from, to) {
        (ISEND, WRITE) => ("hxcomm send: isend to the send syscall", "T_startup"),
        (ISEND, PUBLISH) => (
            "hxcomm send: isend to the ring publish (copy included)",
            "T_startup",
        ),
        (WRITE, QDISC) => ("kernel send: syscall, TCP/IP to the qdisc", "T_send"),
        (WRITE, DRIVER) => ("kernel send: syscall to the driver", "T_send"),
        (QDISC, DRIVER) => ("kernel send: qdisc to the driver", "T_send"),
        (DRIVER, RX) => ("wire and receiving driver (receive stamp)", "T_net"),
        (QDISC, RX) => ("driver, wire, receiving driver", "T_net"),
        (RX, READ) => (
            "receiving kernel: IP, TCP, socket, until the recv syscall",
            "T_net",
        ),
        (RX, WAKE) => (
            "receiving kernel and wakeup: socket, epoll, scheduler, poll returns",
            "T_net",
        ),
        (PUBLISH, RECVD) => (
            "ring: cache-line transfer, receiver's poll loop, copy out",
            "T_net",
        ),
        (PUBLISH, WAKE) => ("wakeup: eventfd signal, scheduler, poll returns", "T_net"),
        (WAKE, READ) => ("engine round from wakeup to the recv syscall", "T_delivery"),
        (WAKE, RECVD) => ("engine round from wakeup to the ring read", "T_delivery"),
        (READ, RECVD) => ("recv syscall", "T_delivery"),
        (RECVD, PARSED) => ("hxcomm receive: parse, match, complete", "T_delivery"),
        (PARSED, DONE) => ("to the application: wait/test returns", "T_delivery"),
        _ => ("", "T_delivery"),
    };
    let what = if what.is_empty() {
        format!("{} to {}", POINT_NAMES[from], POINT_NAMES[to])
    } else {
        what.to_string()
    };
    (what, seed)
}

fn err(e: hx_engine::Error) -> String {
    e.to_string()
}

fn parse_modes(s: &str) -> Result<Vec<Mode>, String> {
    let mut v = Vec::new();
    for m in s.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        let m = match m {
            "spin" => Mode::Spin,
            "block" => Mode::Block,
            _ => return Err(format!("--modes {s:?}: {m:?} is neither spin nor block")),
        };
        if !v.contains(&m) {
            v.push(m);
        }
    }
    if v.is_empty() {
        return Err("--modes: none given".into());
    }
    Ok(v)
}

/// One rank's side of a ping-pong run.
#[derive(Default)]
struct Side {
    /// Per timed round trip: the stamps of the message this rank sent, and of the one it got.
    sent: Vec<Points>,
    got: Vec<Points>,
    /// Round-trip times (rank 0), ns.
    rtt: Vec<u64>,
}

struct Ctx<'a> {
    e: &'a mut Engine,
    me: u32,
    peer: u32,
    samples: TraceSamples,
}

impl Ctx<'_> {
    /// Waits for `req`: spinning in `wait`, or sleeping on the engine's fd. `wake` gets the time
    /// of the last return from poll.
    fn wait(&mut self, req: Request, mode: Mode, wake: &mut u64) -> Result<(), String> {
        if mode == Mode::Spin {
            return self.e.wait(req).map(|_| ()).map_err(err);
        }
        let t0 = Instant::now();
        loop {
            if self.e.test(req).map_err(err)?.is_some() {
                return Ok(());
            }
            // SAFETY: the engine's epoll fd stays open while `self.e` lives, past this call.
            let fd = unsafe { BorrowedFd::borrow_raw(self.e.fd()) };
            let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(1000u16)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(format!("poll on the engine's fd: {e}")),
            }
            *wake = now_ns();
            if t0.elapsed() > Duration::from_secs(60) {
                return Err("no message for 60 s".into());
            }
        }
    }

    fn send(&mut self, buf: &[u8], mode: Mode) -> Result<(), String> {
        // SAFETY: `buf` outlives the wait below, which returns only once the engine is done
        // with it.
        let r = unsafe {
            self.e
                .isend_raw(EP, self.peer, EP, TAG_PING, buf.as_ptr(), buf.len())
        }
        .map_err(err)?;
        self.wait(r, mode, &mut 0)
    }

    fn recv(&mut self, buf: &mut [u8], mode: Mode, wake: &mut u64) -> Result<(), String> {
        // SAFETY: as in `send`.
        let r = unsafe {
            self.e.irecv_raw(
                EP,
                Some(self.peer),
                Some(TAG_PING),
                buf.as_mut_ptr(),
                buf.len(),
            )
        }
        .map_err(err)?;
        self.wait(r, mode, wake)
    }

    /// `iters` timed round trips after `warmup`; with `traced`, the stamps of each message.
    fn pingpong(
        &mut self,
        size: usize,
        iters: u32,
        warmup: u32,
        mode: Mode,
        traced: bool,
    ) -> Result<Side, String> {
        let sbuf = vec![0x3cu8; size];
        let mut rbuf = vec![0u8; size];
        let mut side = Side::default();
        if traced {
            side.sent.reserve(iters as usize);
            side.got.reserve(iters as usize);
        }
        side.rtt.reserve(iters as usize);
        self.e.barrier().map_err(err)?;
        if traced {
            self.e.take_trace(&mut self.samples);
        }
        for i in 0..warmup + iters {
            let mut wake = 0;
            let (t_send, t_done);
            if self.me == 0 {
                t_send = now_ns();
                self.send(&sbuf, mode)?;
                self.recv(&mut rbuf, mode, &mut wake)?;
                t_done = now_ns();
            } else {
                self.recv(&mut rbuf, mode, &mut wake)?;
                t_done = now_ns();
                t_send = now_ns();
                self.send(&sbuf, mode)?;
            }
            if traced {
                self.e.take_trace(&mut self.samples);
            }
            if i < warmup {
                continue;
            }
            if self.me == 0 {
                side.rtt.push(t_done.saturating_sub(t_send));
            }
            if traced {
                side.sent.push(self.sent_points(t_send));
                side.got.push(self.got_points(t_done, wake));
            }
        }
        Ok(side)
    }

    /// The stamps of the message sent at `t_send`: the first write after it, and the kernel's
    /// transmit stamps of that write's last byte.
    fn sent_points(&self, t_send: u64) -> Points {
        let mut p = [0; NPOINTS];
        p[ISEND] = t_send;
        let first = self
            .samples
            .links
            .iter()
            .filter(|l| l.peer == self.peer)
            .flat_map(|l| l.writes.iter().map(move |w| (l, w)))
            .filter(|(_, w)| w.t_before >= t_send)
            .min_by_key(|(_, w)| w.t_before);
        let Some((l, w)) = first else { return p };
        if l.tx.is_empty() && w.t_before == w.t_after {
            // Shared memory: the stamp is the ring publish.
            p[PUBLISH] = w.t_before;
            return p;
        }
        p[WRITE] = w.t_before;
        for s in l.tx.iter().filter(|s| s.key == w.key as u32) {
            match s.kind {
                TxKind::Sched => p[QDISC] = s.t,
                TxKind::Driver => p[DRIVER] = s.t,
            }
        }
        p
    }

    /// The stamps of the message whose wait returned at `t_done`: the last read before it.
    fn got_points(&self, t_done: u64, wake: u64) -> Points {
        let mut p = [0; NPOINTS];
        p[DONE] = t_done;
        p[WAKE] = wake;
        let last = self
            .samples
            .links
            .iter()
            .filter(|l| l.peer == self.peer)
            .flat_map(|l| l.reads.iter())
            .filter(|r| r.t_after <= t_done)
            .max_by_key(|r| r.t_after);
        if let Some(r) = last {
            p[RX] = r.t_kernel;
            p[READ] = r.t_before;
            p[RECVD] = r.t_after;
            p[PARSED] = r.t_parsed;
        }
        p
    }

    /// Ping-pongs until both ranks have seen a kernel receive stamp (at most 50 x 100 round
    /// trips). Linux turns receive stamps on through deferred work: on a busy machine the
    /// first milliseconds of a traced run can come without them (a CI run lost more than half
    /// of a 300-round-trip run's), and a missing stamp drops its part from the breakdown.
    fn settle_rx_stamps(&mut self, size: usize) -> Result<(), String> {
        let sbuf = vec![0x3cu8; size];
        let mut rbuf = vec![0u8; size];
        for _ in 0..50 {
            let mut seen = false;
            for _ in 0..100 {
                if self.me == 0 {
                    self.send(&sbuf, Mode::Spin)?;
                    self.recv(&mut rbuf, Mode::Spin, &mut 0)?;
                } else {
                    self.recv(&mut rbuf, Mode::Spin, &mut 0)?;
                    self.send(&sbuf, Mode::Spin)?;
                }
                self.e.take_trace(&mut self.samples);
                let peer = self.peer;
                seen |= self
                    .samples
                    .links
                    .iter()
                    .filter(|l| l.peer == peer)
                    .any(|l| l.reads.iter().any(|r| r.t_kernel != 0));
            }
            // Rank 0's answer to rank 1, both answers back: the ranks stop together.
            let mut flag = [u8::from(seen)];
            if self.me == 0 {
                self.e.send(EP, 1, EP, TAG_CTL, &flag).map_err(err)?;
                self.e
                    .recv(EP, Some(1), Some(TAG_CTL), &mut flag)
                    .map_err(err)?;
            } else {
                let mut theirs = [0u8];
                self.e
                    .recv(EP, Some(0), Some(TAG_CTL), &mut theirs)
                    .map_err(err)?;
                flag[0] &= theirs[0];
                self.e.send(EP, 0, EP, TAG_CTL, &flag).map_err(err)?;
            }
            if flag[0] == 1 {
                return Ok(());
            }
        }
        // Still none: the analysis reports the stamp as missing.
        Ok(())
    }

    /// Rank 1 sends `v` (u64s) to rank 0, which receives it.
    fn gather(&mut self, v: &[u64]) -> Result<Vec<u64>, String> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        if self.me == 1 {
            let n = (bytes.len() as u64).to_le_bytes();
            self.e.send(EP, 0, EP, TAG_CTL, &n).map_err(err)?;
            self.e.send(EP, 0, EP, TAG_CTL, &bytes).map_err(err)?;
            return Ok(Vec::new());
        }
        let mut n = [0u8; 8];
        self.e
            .recv(EP, Some(1), Some(TAG_CTL), &mut n)
            .map_err(err)?;
        let n = u64::from_le_bytes(n);
        if n > 1 << 30 || n % 8 != 0 {
            return Err(format!("rank 1 announced {n} bytes of stamps"));
        }
        let mut buf = vec![0u8; n as usize];
        self.e
            .recv(EP, Some(1), Some(TAG_CTL), &mut buf)
            .map_err(err)?;
        Ok(buf
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect())
    }

    fn ctl_send(&mut self, v: &[u8]) -> Result<(), String> {
        self.e.send(EP, self.peer, EP, TAG_CTL, v).map_err(err)
    }

    fn ctl_recv(&mut self, max: usize) -> Result<Vec<u8>, String> {
        let mut b = vec![0u8; max];
        let st = self
            .e
            .recv(EP, Some(self.peer), Some(TAG_CTL), &mut b)
            .map_err(err)?;
        b.truncate(st.len);
        Ok(b)
    }
}

fn flatten(v: &[Points]) -> Vec<u64> {
    v.iter().flat_map(|p| p.iter().copied()).collect()
}

fn unflatten(v: &[u64]) -> Vec<Points> {
    v.chunks_exact(NPOINTS)
        .map(|c| {
            let mut p = [0; NPOINTS];
            p.copy_from_slice(c);
            p
        })
        .collect()
}

/// The sender's and receiver's stamps of one message, together.
fn merge(a: &Points, b: &Points) -> Points {
    let mut p = *a;
    for (x, y) in p.iter_mut().zip(b) {
        if *x == 0 {
            *x = *y;
        }
    }
    p
}

/// The per-part result of one mode.
#[derive(Debug, Clone)]
pub struct Part {
    pub from: usize,
    pub to: usize,
    pub summary: Summary,
}

/// A population of fewer messages than this is not summarised (no median of 3).
pub const MIN_SUMMARISED: usize = 20;

/// Whether the receiver slept for a message (blocking mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receiver {
    /// It slept in poll and the message's arrival woke it.
    Slept,
    /// It found the message without sleeping for it (no poll, or one that returned before the
    /// message was there): its wakeup is 0.
    Awake,
}

impl Receiver {
    fn name(self) -> &'static str {
        match self {
            Receiver::Slept => "slept",
            Receiver::Awake => "awake",
        }
    }
}

/// The parts of one set of messages along one chain of stamps, and the messages' own one-way
/// times (per message, from the first stamp to the last).
#[derive(Debug)]
pub struct Population {
    pub chain: Vec<usize>,
    pub parts: Vec<Part>,
    /// Per message: the last stamp minus the first (isend to done).
    pub total: Summary,
    pub used: usize,
    /// Messages with a stamp of the chain missing.
    pub dropped: usize,
}

impl Population {
    fn of<'a>(msgs: impl Iterator<Item = &'a Points>, chain: Vec<usize>) -> Population {
        let mut parts: Vec<Vec<i64>> = vec![Vec::new(); chain.len().saturating_sub(1)];
        let mut totals = Vec::new();
        let mut dropped = 0;
        for m in msgs {
            if !chain.iter().all(|&p| m[p] != 0) {
                dropped += 1;
                continue;
            }
            for (i, w) in chain.windows(2).enumerate() {
                parts[i].push(m[w[1]] as i64 - m[w[0]] as i64);
            }
            totals.push(m[DONE] as i64 - m[ISEND] as i64);
        }
        let parts = chain
            .windows(2)
            .zip(parts.iter_mut())
            .map(|(w, v)| Part {
                from: w[0],
                to: w[1],
                summary: Summary::of(v),
            })
            .collect();
        Population {
            chain,
            parts,
            used: totals.len(),
            total: Summary::of(&mut totals),
            dropped,
        }
    }

    /// Enough messages for medians and percentiles to mean something.
    pub fn summarised(&self) -> bool {
        self.used >= MIN_SUMMARISED
    }

    fn sum_p50(&self) -> f64 {
        self.parts.iter().map(|p| p.summary.p50).sum()
    }

    fn sum_mean(&self) -> f64 {
        self.parts.iter().map(|p| p.summary.mean).sum()
    }

    /// Sum of the parts' medians over the median of the same messages' one-way times.
    fn ratio(&self) -> f64 {
        div(self.sum_p50(), self.total.p50)
    }

    fn by_seed(&self) -> Vec<(&'static str, f64)> {
        SEED_TERMS
            .iter()
            .map(|(t, _)| {
                let s = self
                    .parts
                    .iter()
                    .filter(|p| describe(p.from, p.to).1 == *t)
                    .map(|p| p.summary.p50)
                    .sum::<f64>();
                // An empty sum is -0.0.
                (*t, s + 0.0)
            })
            .collect()
    }

    fn parts_json(&self) -> Vec<serde_json::Value> {
        self.parts
            .iter()
            .map(|p| {
                let (what, seed) = describe(p.from, p.to);
                json!({
                    "part": format!("{}-{}", POINT_NAMES[p.from], POINT_NAMES[p.to]),
                    "what": what, "seed": seed,
                    "p50_us": us(p.summary.p50), "p90_us": us(p.summary.p90),
                    "p99_us": us(p.summary.p99), "mean_us": us(p.summary.mean),
                })
            })
            .collect()
    }

    fn seed_json(&self) -> serde_json::Map<String, serde_json::Value> {
        self.by_seed()
            .into_iter()
            .map(|(t, v)| (t.to_string(), json!(us(v))))
            .collect()
    }

    /// One population of a blocking run: its own parts and its own one-way total, or, with
    /// fewer than [`MIN_SUMMARISED`] messages, only its count.
    fn json(&self, receiver: Receiver, of: usize) -> serde_json::Value {
        let chain: Vec<_> = self.chain.iter().map(|&p| POINT_NAMES[p]).collect();
        let head = json!({
            "receiver": receiver.name(), "messages": self.used, "dropped": self.dropped,
            "fraction": round3(div(self.used as f64, of as f64)), "chain": chain,
            "summarised": self.summarised(),
        });
        let mut o = head.as_object().cloned().unwrap_or_default();
        if !self.summarised() {
            o.insert(
                "note".into(),
                json!(format!(
                    "{} messages: too few to summarise (fewer than {MIN_SUMMARISED})",
                    self.used
                )),
            );
            return o.into();
        }
        let ratio = self.ratio();
        let rm = div(self.sum_mean(), self.total.mean);
        let rest = json!({
            "parts": self.parts_json(), "seed_terms_p50_us": self.seed_json(),
            "sum_p50_us": us(self.sum_p50()),
            "total_p50_us": us(self.total.p50), "total_p90_us": us(self.total.p90),
            "total_p99_us": us(self.total.p99), "total_mean_us": us(self.total.mean),
            "total": "per message, isend to done, these messages only",
            "ratio": round3(ratio), "within_10pct": within_10pct(ratio),
            "sum_mean_us": us(self.sum_mean()), "ratio_mean": round3(rm),
            "within_10pct_mean": within_10pct(rm),
        });
        o.extend(rest.as_object().cloned().unwrap_or_default());
        o.into()
    }
}

/// `a / b`, 0 when `b` is not positive.
fn div(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

fn within_10pct(ratio: f64) -> bool {
    (ratio - 1.0).abs() <= 0.10
}

/// The chain of stamps for `shm`/TCP in `mode`, the parts over all messages, and, blocking,
/// over the messages the receiver slept for and those that found it awake apart.
#[derive(Debug)]
pub struct Breakdown {
    pub chain: Vec<usize>,
    /// All messages; blocking, those that found the receiver awake count 0 for the wakeup.
    pub all: Population,
    /// Messages the receiver slept for (blocking mode).
    pub slept: Option<usize>,
    /// Blocking mode: the messages the receiver slept for (the whole chain) and those that
    /// found it awake (the chain without the wakeup stamp), each broken down on its own: the
    /// medians of the two mixed do not add up.
    pub split: Option<[Population; 2]>,
    pub missing: Vec<(usize, usize)>,
}

fn analyse(msgs: &[Points], shm: bool, mode: Mode) -> Breakdown {
    let mut chain: Vec<usize> = if shm {
        vec![ISEND, PUBLISH, WAKE, RECVD, PARSED, DONE]
    } else {
        vec![
            ISEND, WRITE, QDISC, DRIVER, RX, WAKE, READ, RECVD, PARSED, DONE,
        ]
    };
    if mode == Mode::Spin {
        chain.retain(|&p| p != WAKE);
    }
    // A stamp that (nearly) never came on this path (say, a driver that does not stamp) leaves
    // the chain: its neighbours' parts join.
    let mut missing = Vec::new();
    chain.retain(|&p| {
        let have = msgs.iter().filter(|m| m[p] != 0).count();
        let keep = matches!(p, ISEND | WAKE | DONE) || have * 2 > msgs.len();
        if !keep {
            missing.push((p, have));
        }
        keep
    });
    let wake_at = chain.iter().position(|&p| p == WAKE).filter(|&i| i > 0);
    let Some(i) = wake_at else {
        return Breakdown {
            all: Population::of(msgs.iter(), chain.clone()),
            chain,
            slept: None,
            split: None,
            missing,
        };
    };
    // A receiver that found the message without sleeping for it (no wakeup, or one before the
    // message was there, for something else) waited nothing: its wakeup part is 0.
    let before = chain[i - 1];
    let (mut slept, mut awake) = (Vec::new(), Vec::new());
    for m in msgs {
        if m[WAKE] >= m[before] && m[before] != 0 {
            slept.push(*m);
        } else {
            let mut m = *m;
            m[WAKE] = m[before];
            awake.push(m);
        }
    }
    let awake_chain: Vec<usize> = chain.iter().copied().filter(|&p| p != WAKE).collect();
    Breakdown {
        all: Population::of(slept.iter().chain(&awake), chain.clone()),
        slept: Some(slept.len()),
        split: Some([
            Population::of(slept.iter(), chain.clone()),
            Population::of(awake.iter(), awake_chain),
        ]),
        chain,
        missing,
    }
}

/// A floor measurement: name and one-way p50 (us).
#[derive(Debug, Clone)]
struct Floor {
    name: String,
    mode: Option<Mode>,
    p50_us: f64,
}

pub fn run(o: &BreakdownOpts) -> Result<(), String> {
    let sizes = crate::parse_sizes(&o.sizes)?;
    let modes = parse_modes(&o.modes)?;
    let iters = o.iterations.max(1);
    let warmup = o.warmup.unwrap_or((iters / 10).max(100));
    let mut e = Engine::init().map_err(err)?;
    if e.size() != 2 {
        return Err(format!(
            "breakdown needs exactly 2 ranks (has {}): hxcomm run -n 2 -- hxcomm bench breakdown",
            e.size()
        ));
    }
    e.open_endpoint(EP).map_err(err)?;
    let me = e.rank();
    let peer = 1 - me;
    let mut cx = Ctx {
        e: &mut e,
        me,
        peer,
        samples: TraceSamples::default(),
    };
    // Connect (on first use) before anything is measured or traced.
    cx.pingpong(8, 10, 0, Mode::Spin, false)?;
    let shm = cx.e.is_shm_peer(peer);
    let rail_names = cx.e.rail_names(peer).join(",");
    let transport = if shm { "shm" } else { "tcp" };
    if me == 0 && !o.json {
        println!(
            "# hxcomm breakdown: one way, rank 0 <-> rank 1 over {transport} (rail {rail_names}), {iters} round trips per mode after {warmup} warmup"
        );
        println!(
            "# Stamps: CLOCK_REALTIME of both ranks on one host (testbed hosts share the machine). Across real machines only the parts within one side are valid (or use the round-trip split)."
        );
    }
    for &size in &sizes {
        let mut results = Vec::new();
        for &mode in &modes {
            let plain = cx.pingpong(size, iters, warmup, mode, false)?;
            results.push((mode, plain, Side::default()));
        }
        let traced_links = cx.e.enable_trace().map_err(err)?;
        if traced_links == 0 {
            return Err("no link to trace".into());
        }
        // Let the kernel's timestamping settle (enabling receive stamps takes effect
        // asynchronously) before the traced runs.
        cx.pingpong(size, warmup, 0, Mode::Spin, true)?;
        if !shm {
            cx.settle_rx_stamps(size)?;
        }
        for r in &mut results {
            r.2 = cx.pingpong(size, iters, warmup, r.0, true)?;
        }
        cx.e.disable_trace();
        let floors = if o.no_floor {
            Vec::new()
        } else {
            floors(&mut cx, shm, size, iters, warmup, &modes)?
        };
        // Rank 1's stamps to rank 0.
        let mut theirs = Vec::new();
        for r in &results {
            let sent = cx.gather(&flatten(&r.2.sent))?;
            let got = cx.gather(&flatten(&r.2.got))?;
            theirs.push((unflatten(&sent), unflatten(&got)));
        }
        if me != 0 {
            continue;
        }
        let spin_oneway = results
            .iter()
            .find(|r| r.0 == Mode::Spin)
            .map(|r| (oneway(&r.1.rtt), oneway(&r.2.rtt)));
        for ((mode, plain, traced), (t_sent, t_got)) in results.iter().zip(&theirs) {
            let mut msgs = Vec::with_capacity(2 * iters as usize);
            // Pings: our send, their receive; pongs: their send, our receive.
            msgs.extend(traced.sent.iter().zip(t_got).map(|(a, b)| merge(a, b)));
            msgs.extend(t_sent.iter().zip(&traced.got).map(|(a, b)| merge(a, b)));
            let b = analyse(&msgs, shm, *mode);
            let report = Report {
                size,
                transport,
                rails: &rail_names,
                mode: *mode,
                b: &b,
                measured: oneway(&traced.rtt),
                measured_mean: oneway_summary(&traced.rtt).mean,
                untraced: oneway(&plain.rtt),
                spin: spin_oneway.filter(|_| *mode == Mode::Block),
                floors: floors
                    .iter()
                    .filter(|f| f.mode.is_none_or(|m| m == *mode))
                    .cloned()
                    .collect(),
                iters,
            };
            if o.json {
                println!("{}", report.json());
            } else {
                report.print();
            }
        }
    }
    cx.e.barrier().map_err(err)?;
    e.finalize().map_err(err)
}

/// Half the median round trip, ns.
fn oneway(rtt: &[u64]) -> f64 {
    oneway_summary(rtt).p50
}

/// Half the round trips, ns.
fn oneway_summary(rtt: &[u64]) -> Summary {
    let mut v: Vec<i64> = rtt.iter().map(|&x| x as i64 / 2).collect();
    Summary::of(&mut v)
}

fn floors(
    cx: &mut Ctx,
    shm: bool,
    size: usize,
    iters: u32,
    warmup: u32,
    modes: &[Mode],
) -> Result<Vec<Floor>, String> {
    let mut out = Vec::new();
    cx.e.barrier().map_err(err)?;
    if shm {
        let page = if cx.me == 0 {
            let (f, path) = floor::create_page_file()?;
            cx.ctl_send(path.as_bytes())?;
            let _ = cx.ctl_recv(8)?;
            let _ = std::fs::remove_file(&path);
            floor::SharedPage::map(&f)?
        } else {
            let path = cx.ctl_recv(256)?;
            let path = String::from_utf8_lossy(&path).into_owned();
            let f = floor::open_page_file(&path)?;
            let p = floor::SharedPage::map(&f)?;
            cx.ctl_send(b"mapped")?;
            p
        };
        cx.e.barrier().map_err(err)?;
        let batch = 1000;
        let n = (iters as u64 * 10).max(batch);
        let mut v: Vec<i64> = page
            .pingpong(cx.me == 0, n, warmup as u64 * 10, batch)?
            .iter()
            .map(|&x| x as i64)
            .collect();
        out.push(Floor {
            name: "cache-line ping-pong between the two processes (unpinned)".into(),
            mode: Some(Mode::Spin),
            p50_us: Summary::of(&mut v).p50 / 1e3,
        });
        if modes.contains(&Mode::Block) {
            cx.e.barrier().map_err(err)?;
            let rtt = page.futex_pingpong(cx.me == 0, iters, warmup)?;
            out.push(Floor {
                name: "futex ping-pong on the shared page (both sleep)".into(),
                mode: Some(Mode::Block),
                p50_us: oneway(&rtt) / 1e3,
            });
        }
        return Ok(out);
    }
    // A plain TCP connection between the rail's own addresses.
    let Some((local, _remote)) = cx.e.rail_socket_addrs(cx.peer, 0) else {
        return Ok(out);
    };
    let mut s = if cx.me == 1 {
        let l = floor::listen(local.ip())?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        cx.ctl_send(&port.to_le_bytes())?;
        floor::accept(&l)?
    } else {
        let port = cx.ctl_recv(2)?;
        let port = u16::from_le_bytes([port[0], *port.get(1).unwrap_or(&0)]);
        let (_, remote) =
            cx.e.rail_socket_addrs(cx.peer, 0)
                .ok_or("rail 0 went down")?;
        floor::connect(local.ip(), SocketAddr::new(remote.ip(), port))?
    };
    for &mode in modes {
        let busy = mode == Mode::Spin;
        let rtt = floor::tcp_pingpong(&mut s, cx.me == 0, size, iters, warmup, busy)?;
        if cx.me == 1 {
            continue;
        }
        out.push(Floor {
            name: format!(
                "plain TCP ping-pong, {size} B, same addresses, {}",
                if busy { "busy-poll" } else { "blocking" }
            ),
            mode: Some(mode),
            p50_us: oneway(&rtt) / 1e3,
        });
    }
    drop(s);
    // sockperf between the same addresses, if both ranks have it.
    let mine = floor::have("sockperf");
    cx.ctl_send(&[mine as u8])?;
    let theirs = cx.ctl_recv(1)?.first() == Some(&1);
    if !(mine && theirs) {
        return Ok(out);
    }
    if cx.me == 1 {
        let (mut server, port) = floor::sockperf_server(local.ip())?;
        let sent = cx.ctl_send(&port.to_le_bytes());
        // Rank 0 says when it is done (or fails); the server is ours to stop either way.
        let done = sent.and_then(|_| cx.ctl_recv(1));
        let _ = server.kill();
        let _ = server.wait();
        done?;
        return Ok(out);
    }
    let port = cx.ctl_recv(2)?;
    let port = u16::from_le_bytes([port[0], *port.get(1).unwrap_or(&0)]);
    let (_, remote) =
        cx.e.rail_socket_addrs(cx.peer, 0)
            .ok_or("rail 0 went down")?;
    let mut result = Ok(());
    for &mode in modes {
        let busy = mode == Mode::Spin;
        match floor::sockperf_client(SocketAddr::new(remote.ip(), port), busy, 2) {
            Ok(v) => out.push(Floor {
                name: format!(
                    "sockperf ping-pong --tcp, 14 B (its minimum), {}, p50",
                    if busy {
                        "--nonblocked (busy-poll)"
                    } else {
                        "blocking"
                    }
                ),
                mode: Some(mode),
                p50_us: v,
            }),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    cx.ctl_send(b"d")?;
    result.map(|_| out)
}

struct Report<'a> {
    size: usize,
    transport: &'a str,
    rails: &'a str,
    mode: Mode,
    b: &'a Breakdown,
    measured: f64,
    measured_mean: f64,
    untraced: f64,
    /// The spinning run's (untraced, traced) one-way, for a blocking run's wakeup cost.
    spin: Option<(f64, f64)>,
    floors: Vec<Floor>,
    iters: u32,
}

const SEED_TERMS: [(&str, f64); 4] = [
    ("T_startup", 0.44),
    ("T_send", 0.7),
    ("T_net", 16.82),
    ("T_delivery", 0.36),
];

/// Blocking: how the slept and awake populations' own one-way times make up the whole.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Mix {
    /// Share of the (complete) messages the receiver slept for.
    slept: f64,
    /// slept x the slept messages' median total + (1 - slept) x the awake ones'.
    p50: f64,
    /// The same with means: the mean of all messages' totals.
    mean: f64,
}

impl Mix {
    fn of([s, a]: &[Population; 2]) -> Mix {
        let f = div(s.used as f64, (s.used + a.used) as f64);
        Mix {
            slept: f,
            p50: f * s.total.p50 + (1.0 - f) * a.total.p50,
            mean: f * s.total.mean + (1.0 - f) * a.total.mean,
        }
    }
}

const COLS: (usize, usize, usize) = (18, 68, 11);

fn row(name: &str, what: &str, seed: &str, v: f64, tail: &str) {
    let (a, b, c) = COLS;
    println!("{name:<a$} {what:<b$} {seed:<c$} {:>8.3}{tail}", v / 1e3);
}

fn verdict(ratio: f64) -> &'static str {
    if within_10pct(ratio) {
        "within 10%"
    } else {
        "NOT within 10%"
    }
}

impl Report<'_> {
    /// Sum of the parts' medians over the measured median one way (spinning).
    fn ratio(&self) -> f64 {
        div(self.b.all.sum_p50(), self.measured)
    }

    /// Sum of the parts' means over the measured mean one way: means add up, so this checks
    /// that the stamps account for the whole time (clocks comparable, no gap left out).
    fn ratio_mean(&self) -> f64 {
        div(self.b.all.sum_mean(), self.measured_mean)
    }

    fn json(&self) -> serde_json::Value {
        let b = self.b;
        let floors: Vec<_> = self
            .floors
            .iter()
            .map(|f| json!({"name": f.name, "p50_us": round3(f.p50_us)}))
            .collect();
        let head = json!({
            "bench": "breakdown", "bytes": self.size, "transport": self.transport,
            "rails": self.rails, "mode": self.mode.name(), "round_trips": self.iters,
            "messages": b.all.used, "dropped": b.all.dropped, "slept": b.slept,
            "chain": b.chain.iter().map(|&p| POINT_NAMES[p]).collect::<Vec<_>>(),
        });
        let mut o = head.as_object().cloned().unwrap_or_default();
        let ratio = self.ratio();
        let body = match &b.split {
            None => json!({
                "parts": b.all.parts_json(), "seed_terms_p50_us": b.all.seed_json(),
                "sum_p50_us": us(b.all.sum_p50()), "total_p50_us": us(b.all.total.p50),
                "sum_mean_us": us(b.all.sum_mean()), "measured_mean_us": us(self.measured_mean),
                "measured_oneway_us": us(self.measured), "ratio": round3(ratio),
                "ratio_mean": round3(self.ratio_mean()),
                "within_10pct": within_10pct(ratio),
                "within_10pct_mean": within_10pct(self.ratio_mean()),
            }),
            Some(split) => {
                let total = split[0].used + split[1].used;
                let pops: Vec<_> = split
                    .iter()
                    .zip([Receiver::Slept, Receiver::Awake])
                    .map(|(p, r)| p.json(r, total))
                    .collect();
                let m = Mix::of(split);
                let summarised: Vec<_> = split.iter().filter(|p| p.summarised()).collect();
                json!({
                    "receivers": pops,
                    "receivers_note": "the receiver slept for some messages and found others awake (wakeup 0): the medians of the two mixed do not add up, so each is broken down on its own, against its own messages' median one way (isend to done)",
                    "within_10pct": !summarised.is_empty()
                        && summarised.iter().all(|p| within_10pct(p.ratio())),
                    "measured_oneway_us": us(self.measured),
                    "measured_mean_us": us(self.measured_mean),
                    "sum_mean_us": us(b.all.sum_mean()),
                    "ratio_mean": round3(self.ratio_mean()),
                    "within_10pct_mean": within_10pct(self.ratio_mean()),
                    "mix": {
                        "slept_fraction": round3(m.slept),
                        "p50_us": us(m.p50), "ratio": round3(div(m.p50, self.measured)),
                        "mean_us": us(m.mean), "ratio_mean": round3(div(m.mean, self.measured_mean)),
                        "what": "slept_fraction x the slept messages' total + (1 - slept_fraction) x the awake ones' (p50: their medians, mean: their means), against measured_oneway_us (half the median round trip) and measured_mean_us (half the mean); means add, medians of a two-humped whole need not",
                    },
                })
            }
        };
        o.extend(body.as_object().cloned().unwrap_or_default());
        let tail = json!({
            "untraced_oneway_us": us(self.untraced),
            "wakeup_us": self.spin.map(|(u, t)| json!({
                "untraced": us(self.untraced - u), "traced": us(self.measured - t)})),
            "floors": floors,
            "clock": "CLOCK_REALTIME, both ranks on one host; across machines only per-side parts are valid",
        });
        o.extend(tail.as_object().cloned().unwrap_or_default());
        o.into()
    }

    fn print_parts(pop: &Population) {
        let (a, b, c) = COLS;
        println!(
            "{:<a$} {:<b$} {:<c$} {:>8} {:>8} {:>8}",
            "part", "what", "seed term", "p50 us", "p90 us", "p99 us"
        );
        for p in &pop.parts {
            let (what, seed) = describe(p.from, p.to);
            println!(
                "{:<a$} {:<b$} {:<c$} {:>8.3} {:>8.3} {:>8.3}",
                format!("{}-{}", POINT_NAMES[p.from], POINT_NAMES[p.to]),
                what,
                seed,
                p.summary.p50 / 1e3,
                p.summary.p90 / 1e3,
                p.summary.p99 / 1e3
            );
        }
        row("sum", "sum of the parts' medians", "", pop.sum_p50(), "");
    }

    fn print_seed_terms(pop: &Population) {
        let terms: Vec<String> = pop
            .by_seed()
            .iter()
            .map(|(t, v)| format!("{t} {:.3}", v / 1e3))
            .collect();
        println!("# by seed term (us): {}", terms.join(", "));
    }

    fn print(&self) {
        let b = self.b;
        println!();
        println!(
            "## {} B, {} ({}), {}: {} messages ({} dropped)",
            self.size,
            self.transport,
            self.rails,
            match self.mode {
                Mode::Spin => "receiver spinning (wait)",
                Mode::Block => "receiver sleeping on the engine's fd (poll, test)",
            },
            b.all.used,
            b.all.dropped
        );
        for (p, have) in &b.missing {
            println!(
                "# stamp {:?} came for {have} messages only: left out",
                POINT_NAMES[*p]
            );
        }
        match &b.split {
            None => {
                Self::print_parts(&b.all);
                let ratio = self.ratio();
                row(
                    "measured",
                    "one way: half the median round trip of this traced run",
                    "",
                    self.measured,
                    &format!("   sum / measured = {ratio:.3} ({})", verdict(ratio)),
                );
                let rm = self.ratio_mean();
                row(
                    "sum of means",
                    "the parts' means (means add up: checks that nothing is left out)",
                    "",
                    b.all.sum_mean(),
                    &format!(
                        "   measured mean {:.3}, ratio {rm:.3} ({})",
                        self.measured_mean / 1e3,
                        verdict(rm)
                    ),
                );
            }
            Some(split) => self.print_split(split),
        }
        row(
            "untraced",
            "one way, tracing off: half the median round trip",
            "",
            self.untraced,
            "",
        );
        if let Some((u, t)) = self.spin {
            row(
                "wakeup",
                "sleeping receiver: one way blocking minus spinning",
                "",
                self.untraced - u,
                &format!("   (traced: {:.3})", (self.measured - t) / 1e3),
            );
        }
        for f in &self.floors {
            let x = if f.p50_us > 0.0 {
                format!(
                    "   hxcomm untraced / floor = {:.2}x",
                    self.untraced / 1e3 / f.p50_us
                )
            } else {
                String::new()
            };
            row("floor", &f.name, "", f.p50_us * 1e3, &x);
        }
        if b.split.is_none() {
            Self::print_seed_terms(&b.all);
        }
        let seed: Vec<String> = SEED_TERMS
            .iter()
            .map(|(t, v)| format!("{t} {v:.2}"))
            .collect();
        println!(
            "# seed 003 (DP-II, 1 B, Gigabit Ethernet, 2003): {} = 18.32",
            seed.join(", ")
        );
    }

    /// Blocking: the slept and awake messages apart, then how they make up the whole.
    fn print_split(&self, split: &[Population; 2]) {
        let total = split[0].used + split[1].used;
        let pct = |n: usize| 100.0 * div(n as f64, total as f64);
        println!(
            "# the receiver slept for {} of {total} messages ({:.1}%); the others found it awake (wakeup 0). The medians of the two mixed need not add up: each is broken down on its own, against its own messages' one way (isend to done).",
            split[0].used,
            pct(split[0].used)
        );
        for (pop, r) in split.iter().zip([Receiver::Slept, Receiver::Awake]) {
            println!();
            println!(
                "### receiver {}: {} messages ({:.1}%, {} dropped){}",
                r.name(),
                pop.used,
                pct(pop.used),
                pop.dropped,
                match r {
                    Receiver::Slept => "",
                    Receiver::Awake => "; no wakeup stamp in its chain",
                }
            );
            if !pop.summarised() {
                println!(
                    "# {} messages: too few to summarise (fewer than {MIN_SUMMARISED})",
                    pop.used
                );
                continue;
            }
            Self::print_parts(pop);
            let ratio = pop.ratio();
            row(
                "total",
                "one way of these messages: median of isend to done",
                "",
                pop.total.p50,
                &format!("   sum / total = {ratio:.3} ({})", verdict(ratio)),
            );
            let rm = div(pop.sum_mean(), pop.total.mean);
            row(
                "sum of means",
                "the parts' means (means add up: checks that nothing is left out)",
                "",
                pop.sum_mean(),
                &format!(
                    "   total mean {:.3}, ratio {rm:.3} ({})",
                    pop.total.mean / 1e3,
                    verdict(rm)
                ),
            );
            Self::print_seed_terms(pop);
        }
        println!();
        println!("### all {total} messages");
        let m = Mix::of(split);
        let [s, a] = split;
        row(
            "measured",
            "one way: half the median round trip of this traced run",
            "",
            self.measured,
            &format!("   mean {:.3}", self.measured_mean / 1e3),
        );
        row(
            "mix",
            &format!(
                "slept {:.1}% x {:.3} + awake {:.1}% x {:.3} (the totals' medians)",
                100.0 * m.slept,
                s.total.p50 / 1e3,
                100.0 * (1.0 - m.slept),
                a.total.p50 / 1e3
            ),
            "",
            m.p50,
            &format!(
                "   mix / measured = {:.3} (a median of a two-humped whole need not match)",
                div(m.p50, self.measured)
            ),
        );
        let rm = div(m.mean, self.measured_mean);
        row(
            "mix of means",
            &format!(
                "slept {:.1}% x {:.3} + awake {:.1}% x {:.3} (the totals' means)",
                100.0 * m.slept,
                s.total.mean / 1e3,
                100.0 * (1.0 - m.slept),
                a.total.mean / 1e3
            ),
            "",
            m.mean,
            &format!(
                "   / measured mean {:.3} = {rm:.3} ({})",
                self.measured_mean / 1e3,
                verdict(rm)
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(stamps: &[(usize, u64)]) -> Points {
        let mut p = [0; NPOINTS];
        for &(i, t) in stamps {
            p[i] = t;
        }
        p
    }

    #[test]
    fn modes() {
        assert_eq!(parse_modes("spin").unwrap(), [Mode::Spin]);
        assert_eq!(
            parse_modes("block, spin,block").unwrap(),
            [Mode::Block, Mode::Spin]
        );
        assert!(parse_modes("").is_err());
        assert!(parse_modes("nap").is_err());
    }

    #[test]
    fn merged_sides() {
        let a = msg(&[(ISEND, 1), (WRITE, 2)]);
        let b = msg(&[(RECVD, 5), (DONE, 6)]);
        assert_eq!(
            merge(&a, &b),
            msg(&[(ISEND, 1), (WRITE, 2), (RECVD, 5), (DONE, 6)])
        );
        assert_eq!(unflatten(&flatten(&[a, b])), [a, b]);
        assert!(unflatten(&[1, 2, 3]).is_empty());
    }

    #[test]
    fn tcp_parts_add_up() {
        let full = |k: u64| {
            msg(&[
                (ISEND, 100),
                (WRITE, 110),
                (QDISC, 120 + k),
                (DRIVER, 130 + k),
                (RX, 140 + k),
                (READ, 150 + k),
                (RECVD, 160 + k),
                (PARSED, 170 + k),
                (DONE, 180 + k),
            ])
        };
        let mut msgs: Vec<Points> = (0..10).map(full).collect();
        msgs.push(msg(&[(ISEND, 1), (DONE, 2)])); // incomplete: dropped
        let b = analyse(&msgs, false, Mode::Spin);
        assert_eq!(b.chain.len(), 9);
        assert_eq!((b.all.used, b.all.dropped), (10, 1));
        assert_eq!(b.all.parts.len(), 8);
        let sum: f64 = b.all.parts.iter().map(|p| p.summary.p50).sum();
        assert_eq!(sum, b.all.total.p50);
        assert!(b.all.parts.iter().all(|p| p.summary.p50 >= 10.0));
        assert!(b.split.is_none());
    }

    #[test]
    fn missing_stamp_leaves_the_chain() {
        // No qdisc stamps at all: writev -> driver is one part.
        let msgs: Vec<Points> = (0..4)
            .map(|_| {
                msg(&[
                    (ISEND, 1),
                    (WRITE, 2),
                    (DRIVER, 4),
                    (RX, 5),
                    (READ, 6),
                    (RECVD, 7),
                    (PARSED, 8),
                    (DONE, 9),
                ])
            })
            .collect();
        let b = analyse(&msgs, false, Mode::Spin);
        assert_eq!(b.missing, [(QDISC, 0)]);
        assert!(b
            .all
            .parts
            .iter()
            .any(|p| (p.from, p.to) == (WRITE, DRIVER)));
        assert_eq!(b.all.used, 4);
    }

    #[test]
    fn shm_block_wakeups() {
        let woke = msg(&[
            (ISEND, 1),
            (PUBLISH, 2),
            (WAKE, 5),
            (RECVD, 6),
            (PARSED, 7),
            (DONE, 8),
        ]);
        // Woken before the publish: by something else; the message was read while awake.
        let early = msg(&[
            (ISEND, 1),
            (PUBLISH, 4),
            (WAKE, 3),
            (RECVD, 6),
            (PARSED, 7),
            (DONE, 8),
        ]);
        let none = msg(&[(ISEND, 1), (PUBLISH, 4), (RECVD, 6), (PARSED, 7), (DONE, 8)]);
        let b = analyse(&[woke, woke, woke, early, none], true, Mode::Block);
        assert_eq!(b.chain, [ISEND, PUBLISH, WAKE, RECVD, PARSED, DONE]);
        assert_eq!((b.all.used, b.all.dropped, b.slept), (5, 0, Some(3)));
        let wake: Vec<_> = b.all.parts.iter().map(|p| p.summary.p90).collect();
        assert_eq!(wake[1], 3.0);
        assert_eq!(b.all.parts[1].summary.p50, 3.0);
        assert_eq!(b.all.parts[2].summary.n, 5);
        // Apart: the slept ones along the whole chain, the awake ones without the wakeup.
        let [s, a] = b.split.as_ref().unwrap();
        assert_eq!((s.used, a.used), (3, 2));
        assert_eq!(s.chain, [ISEND, PUBLISH, WAKE, RECVD, PARSED, DONE]);
        assert_eq!(a.chain, [ISEND, PUBLISH, RECVD, PARSED, DONE]);
        assert_eq!(a.parts[1].summary.p50, 2.0);
        // Three and two messages: too few to summarise.
        assert!(!s.summarised() && !a.summarised());
        // Spinning, no wake in the chain.
        let b = analyse(&[woke], true, Mode::Spin);
        assert_eq!(b.chain, [ISEND, PUBLISH, RECVD, PARSED, DONE]);
        assert_eq!(b.slept, None);
        assert!(b.split.is_none());
    }

    /// Half the messages find the receiver asleep (a 2 us wakeup, then a short engine round
    /// and a long `test` after completion), half awake (no wakeup, a long round while it arms,
    /// then a short return): every part's median comes from whichever population is lower, so
    /// the medians over all messages add up to 0.4 of the median one way, while each
    /// population's medians add up to its own messages' median one way.
    fn bimodal() -> Vec<Points> {
        let mut msgs = Vec::new();
        for i in 0..100u64 {
            let j = (i * 7) % 11; // a little jitter, not the same in every part
            let (wake, recvd, done) = if i % 2 == 0 {
                (2000 + 3 * j, 100 + j, 1000 + 2 * j)
            } else {
                (0, 1000 + 2 * j, 100 + j)
            };
            let t0 = 1_000_000 * (i + 1);
            let publish = t0 + 200;
            let woke = publish + wake;
            let recvd = woke + recvd;
            let parsed = recvd + 200;
            msgs.push(msg(&[
                (ISEND, t0),
                (PUBLISH, publish),
                // Awake: the last poll returned before the publish (for something else).
                (WAKE, if wake == 0 { t0 - 50 } else { woke }),
                (RECVD, recvd),
                (PARSED, parsed),
                (DONE, parsed + done),
            ]));
        }
        msgs
    }

    #[test]
    fn bimodal_block_split_adds_up() {
        let msgs = bimodal();
        let b = analyse(&msgs, true, Mode::Block);
        assert_eq!(b.slept, Some(50));
        // All messages mixed: the parts' medians do not add up.
        let all = &b.all;
        assert_eq!(all.used, 100);
        let r = all.ratio();
        assert!(r < 0.5, "mixed medians should not add up: {r} ({all:?})");
        // Each population on its own does, against its own messages' median one way.
        let [s, a] = b.split.as_ref().unwrap();
        assert_eq!((s.used, a.used, s.dropped, a.dropped), (50, 50, 0, 0));
        assert!(s.summarised() && a.summarised());
        assert_eq!(s.parts.len(), 5);
        assert_eq!(a.parts.len(), 4);
        assert_eq!((a.parts[1].from, a.parts[1].to), (PUBLISH, RECVD));
        for p in [s, a] {
            assert!(within_10pct(p.ratio()), "{} ({p:?})", p.ratio());
            assert!((p.sum_mean() - p.total.mean).abs() < 1e-6);
        }
        assert!((3400.0..3600.0).contains(&s.total.p50), "{:?}", s.total);
        assert!((1450.0..1600.0).contains(&a.total.p50), "{:?}", a.total);
        // Half x each total makes up the whole; with means exactly (means add up).
        let m = Mix::of(b.split.as_ref().unwrap());
        assert_eq!(m.slept, 0.5);
        assert!((m.p50 - (s.total.p50 + a.total.p50) / 2.0).abs() < 1e-6);
        assert!((m.mean - all.total.mean).abs() < 1e-6);
        assert!((m.mean - all.sum_mean()).abs() < 1e-6);
    }

    fn report<'a>(b: &'a Breakdown, mode: Mode, measured: f64) -> Report<'a> {
        Report {
            size: 8,
            transport: "shm",
            rails: "shm",
            mode,
            b,
            measured,
            measured_mean: measured,
            untraced: measured * 0.9,
            spin: (mode == Mode::Block).then_some((500.0, 600.0)),
            floors: Vec::new(),
            iters: 50,
        }
    }

    #[test]
    fn block_json_has_both_receivers() {
        let msgs = bimodal();
        let b = analyse(&msgs, true, Mode::Block);
        let j = report(&b, Mode::Block, 2500.0).json();
        assert_eq!(j["mode"], "block");
        assert_eq!(j["slept"], 50);
        // No mixed medians at the top.
        assert!(
            j.get("parts").is_none() && j.get("sum_p50_us").is_none(),
            "{j}"
        );
        let rs = j["receivers"].as_array().unwrap();
        assert_eq!(rs.len(), 2);
        assert_eq!(
            (rs[0]["receiver"].as_str(), rs[1]["receiver"].as_str()),
            (Some("slept"), Some("awake"))
        );
        for r in rs {
            assert_eq!(r["summarised"], true, "{r}");
            assert_eq!(r["within_10pct"], true, "{r}");
            assert_eq!(r["fraction"], 0.5);
            let sum: f64 = r["parts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["p50_us"].as_f64().unwrap())
                .sum();
            assert!(
                (sum - r["sum_p50_us"].as_f64().unwrap()).abs() < 0.01,
                "{r}"
            );
        }
        assert_eq!(rs[0]["parts"][1]["part"], "publish-wake");
        assert_eq!(rs[1]["parts"][1]["part"], "publish-recvd");
        assert_eq!(j["within_10pct"], true);
        assert_eq!(j["mix"]["slept_fraction"], 0.5);
        let mix = j["mix"]["p50_us"].as_f64().unwrap();
        assert!((2.4..2.6).contains(&mix), "{j}");
        assert!(j["wakeup_us"].is_object());
        // Too few messages: said so, no medians.
        let few = analyse(&msgs[..30], true, Mode::Block);
        let j = report(&few, Mode::Block, 2500.0).json();
        let rs = j["receivers"].as_array().unwrap();
        assert_eq!(rs[0]["messages"], 15);
        assert_eq!(rs[0]["summarised"], false);
        assert!(rs[0].get("parts").is_none(), "{j}");
        assert!(rs[0]["note"].as_str().unwrap().contains("too few"), "{j}");
        assert_eq!(j["within_10pct"], false);
        // Spinning: one breakdown, as before.
        let b = analyse(&msgs, true, Mode::Spin);
        let j = report(&b, Mode::Spin, 2500.0).json();
        assert_eq!(j["mode"], "spin");
        assert!(j.get("receivers").is_none());
        assert_eq!(j["parts"].as_array().unwrap().len(), 4);
        for k in [
            "sum_p50_us",
            "measured_oneway_us",
            "ratio",
            "ratio_mean",
            "within_10pct",
        ] {
            assert!(!j[k].is_null(), "{k}: {j}");
        }
    }

    #[test]
    fn every_part_described() {
        for (a, b) in [
            (ISEND, WRITE),
            (ISEND, PUBLISH),
            (WRITE, QDISC),
            (QDISC, DRIVER),
            (DRIVER, RX),
            (RX, READ),
            (RX, WAKE),
            (WAKE, READ),
            (READ, RECVD),
            (RECVD, PARSED),
            (PARSED, DONE),
            (PUBLISH, RECVD),
            (PUBLISH, WAKE),
            (WAKE, RECVD),
        ] {
            let fallback = format!("{} to {}", POINT_NAMES[a], POINT_NAMES[b]);
            assert_ne!(describe(a, b).0, fallback);
        }
        assert_eq!(describe(ISEND, DONE).0, "isend to done");
    }
}
