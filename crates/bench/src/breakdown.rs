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
//! traced run) within 10%; the table says so. Beside it: the raw floor, a plain TCP ping-pong
//! between the rail's own addresses (busy-polling and blocking; and sockperf's if installed),
//! or for shared memory a cache-line ping-pong between the two processes.

mod floor;
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

/// The chain of stamps for `shm`/TCP in `mode`, the parts' samples, and the samples dropped
/// (a stamp missing).
#[derive(Debug)]
pub struct Breakdown {
    pub chain: Vec<usize>,
    pub parts: Vec<Part>,
    pub total: Summary,
    pub used: usize,
    pub dropped: usize,
    /// Messages the receiver slept for (blocking mode).
    pub slept: Option<usize>,
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
    let mut parts: Vec<Vec<i64>> = vec![Vec::new(); chain.len().saturating_sub(1)];
    let mut totals = Vec::new();
    let mut dropped = 0;
    let mut slept = 0;
    let wake_at = chain.iter().position(|&p| p == WAKE).filter(|&i| i > 0);
    for m in msgs {
        let mut m = *m;
        // A receiver that found the message without sleeping for it (no wakeup, or one before
        // the message was there, for something else) waited nothing: its wakeup part is 0.
        if let Some(i) = wake_at {
            let before = m[chain[i - 1]];
            if m[WAKE] >= before && before != 0 {
                slept += 1;
            } else {
                m[WAKE] = before;
            }
        }
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
    Breakdown {
        chain,
        parts,
        used: totals.len(),
        total: Summary::of(&mut totals),
        dropped,
        slept: wake_at.map(|_| slept),
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

impl Report<'_> {
    fn sum_p50(&self) -> f64 {
        self.b.parts.iter().map(|p| p.summary.p50).sum()
    }

    fn sum_mean(&self) -> f64 {
        self.b.parts.iter().map(|p| p.summary.mean).sum()
    }

    /// Sum of the parts' medians over the measured median one way.
    fn ratio(&self) -> f64 {
        if self.measured > 0.0 {
            self.sum_p50() / self.measured
        } else {
            0.0
        }
    }

    /// Sum of the parts' means over the measured mean one way: means add up, so this checks
    /// that the stamps account for the whole time (clocks comparable, no gap left out).
    fn ratio_mean(&self) -> f64 {
        if self.measured_mean > 0.0 {
            self.sum_mean() / self.measured_mean
        } else {
            0.0
        }
    }

    fn by_seed(&self) -> Vec<(&'static str, f64)> {
        SEED_TERMS
            .iter()
            .map(|(t, _)| {
                let s = self
                    .b
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

    fn json(&self) -> serde_json::Value {
        let parts: Vec<_> = self
            .b
            .parts
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
            .collect();
        let seed: serde_json::Map<_, _> = self
            .by_seed()
            .into_iter()
            .map(|(t, v)| (t.to_string(), json!(us(v))))
            .collect();
        let floors: Vec<_> = self
            .floors
            .iter()
            .map(|f| json!({"name": f.name, "p50_us": (f.p50_us * 1e3).round() / 1e3}))
            .collect();
        let ratio = self.ratio();
        json!({
            "bench": "breakdown", "bytes": self.size, "transport": self.transport,
            "rails": self.rails, "mode": self.mode.name(), "round_trips": self.iters,
            "messages": self.b.used, "dropped": self.b.dropped, "slept": self.b.slept,
            "chain": self.b.chain.iter().map(|&p| POINT_NAMES[p]).collect::<Vec<_>>(),
            "parts": parts, "seed_terms_p50_us": seed,
            "sum_p50_us": us(self.sum_p50()), "total_p50_us": us(self.b.total.p50),
            "sum_mean_us": us(self.sum_mean()), "measured_mean_us": us(self.measured_mean),
            "measured_oneway_us": us(self.measured), "ratio": (ratio * 1e3).round() / 1e3,
            "ratio_mean": (self.ratio_mean() * 1e3).round() / 1e3,
            "within_10pct": (ratio - 1.0).abs() <= 0.10,
            "within_10pct_mean": (self.ratio_mean() - 1.0).abs() <= 0.10,
            "untraced_oneway_us": us(self.untraced),
            "wakeup_us": self.spin.map(|(u, t)| json!({
                "untraced": us(self.untraced - u), "traced": us(self.measured - t)})),
            "floors": floors,
            "clock": "CLOCK_REALTIME, both ranks on one host; across machines only per-side parts are valid",
        })
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
            b.used,
            b.dropped
        );
        if let Some(n) = b.slept {
            println!(
                "# the receiver slept for {n} of {} messages (the others found it awake: wakeup 0)",
                b.used
            );
        }
        for (p, have) in &b.missing {
            println!(
                "# stamp {:?} came for {have} messages only: left out",
                POINT_NAMES[*p]
            );
        }
        println!(
            "{:<18} {:<68} {:<11} {:>8} {:>8} {:>8}",
            "part", "what", "seed term", "p50 us", "p90 us", "p99 us"
        );
        for p in &b.parts {
            let (what, seed) = describe(p.from, p.to);
            println!(
                "{:<18} {:<68} {:<11} {:>8.3} {:>8.3} {:>8.3}",
                format!("{}-{}", POINT_NAMES[p.from], POINT_NAMES[p.to]),
                what,
                seed,
                p.summary.p50 / 1e3,
                p.summary.p90 / 1e3,
                p.summary.p99 / 1e3
            );
        }
        let ratio = self.ratio();
        println!(
            "{:<18} {:<68} {:<11} {:>8.3}",
            "sum",
            "sum of the parts' medians",
            "",
            self.sum_p50() / 1e3
        );
        println!(
            "{:<18} {:<68} {:<11} {:>8.3}   sum / measured = {ratio:.3} ({})",
            "measured",
            "one way: half the median round trip of this traced run",
            "",
            self.measured / 1e3,
            if (ratio - 1.0).abs() <= 0.10 {
                "within 10%"
            } else {
                "NOT within 10%"
            }
        );
        let rm = self.ratio_mean();
        println!(
            "{:<18} {:<68} {:<11} {:>8.3}   measured mean {:.3}, ratio {rm:.3} ({})",
            "sum of means",
            "the parts' means (means add up: checks that nothing is left out)",
            "",
            self.sum_mean() / 1e3,
            self.measured_mean / 1e3,
            if (rm - 1.0).abs() <= 0.10 {
                "within 10%"
            } else {
                "NOT within 10%"
            }
        );
        println!(
            "{:<18} {:<68} {:<11} {:>8.3}",
            "untraced",
            "one way, tracing off: half the median round trip",
            "",
            self.untraced / 1e3
        );
        if let Some((u, t)) = self.spin {
            println!(
                "{:<18} {:<68} {:<11} {:>8.3}   (traced: {:.3})",
                "wakeup",
                "sleeping receiver: one way blocking minus spinning",
                "",
                (self.untraced - u) / 1e3,
                (self.measured - t) / 1e3
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
            println!(
                "{:<18} {:<68} {:<11} {:>8.3}{x}",
                "floor", f.name, "", f.p50_us
            );
        }
        let terms: Vec<String> = self
            .by_seed()
            .iter()
            .map(|(t, v)| format!("{t} {:.3}", v / 1e3))
            .collect();
        let seed: Vec<String> = SEED_TERMS
            .iter()
            .map(|(t, v)| format!("{t} {v:.2}"))
            .collect();
        println!("# by seed term (us): {}", terms.join(", "));
        println!(
            "# seed 003 (DP-II, 1 B, Gigabit Ethernet, 2003): {} = 18.32",
            seed.join(", ")
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
        assert_eq!((b.used, b.dropped), (10, 1));
        assert_eq!(b.parts.len(), 8);
        let sum: f64 = b.parts.iter().map(|p| p.summary.p50).sum();
        assert_eq!(sum, b.total.p50);
        assert!(b.parts.iter().all(|p| p.summary.p50 >= 10.0));
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
        assert!(b.parts.iter().any(|p| (p.from, p.to) == (WRITE, DRIVER)));
        assert_eq!(b.used, 4);
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
        assert_eq!((b.used, b.dropped, b.slept), (5, 0, Some(3)));
        let wake: Vec<_> = b.parts.iter().map(|p| p.summary.p90).collect();
        assert_eq!(wake[1], 3.0);
        assert_eq!(b.parts[1].summary.p50, 3.0);
        assert_eq!(b.parts[2].summary.n, 5);
        // Spinning, no wake in the chain.
        let b = analyse(&[woke], true, Mode::Spin);
        assert_eq!(b.chain, [ISEND, PUBLISH, RECVD, PARSED, DONE]);
        assert_eq!(b.slept, None);
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
