//! latency / bw / bibw between ranks 0 and 1 (other ranks, if any, only join the barriers).

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use hx_engine::{Engine, Request};
use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::time::TimeVal;

use crate::breakdown::floor;
use crate::pattern;
use crate::P2pOpts;

const EP: u16 = 1;
const TAG_DATA: u64 = 1;
const TAG_ACK: u64 = 2;
const TAG_CPU: u64 = 3;
const TAG_FLOOR: u64 = 4;
/// `--floor`'s messages are at most this big: the floor says which speed the machine is at, and
/// larger ones would spend a rate-limited rail's token bucket before hxcomm's figure (256 B
/// ping-ponged every ~5 us stay below 1 Gbit/s; bw's window of 64 x 256 B, 4 times, is half
/// the testbed's bucket).
const FLOOR_MAX_BYTES: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Latency,
    Bw,
    Bibw,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Latency => "latency",
            Kind::Bw => "bw",
            Kind::Bibw => "bibw",
        }
    }
}

fn cpu_seconds() -> f64 {
    let Ok(ru) = getrusage(UsageWho::RUSAGE_SELF) else {
        return 0.0;
    };
    let t = |tv: TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 * 1e-6;
    t(ru.user_time()) + t(ru.system_time())
}

/// Wall and CPU seconds of the timed iterations (the warmup excluded from both, so CPU per
/// byte divides the CPU of the bytes it counts).
struct Timed {
    secs: f64,
    cpu: f64,
}

/// Marks the start of the timed iterations.
struct Clock {
    wall: Instant,
    cpu: f64,
}

impl Clock {
    fn start() -> Self {
        Clock {
            wall: Instant::now(),
            cpu: cpu_seconds(),
        }
    }

    fn stop(&self) -> Timed {
        Timed {
            secs: self.wall.elapsed().as_secs_f64(),
            cpu: cpu_seconds() - self.cpu,
        }
    }
}

fn err(e: hx_engine::Error) -> String {
    e.to_string()
}

pub fn run(kind: Kind, o: &P2pOpts) -> Result<(), String> {
    let sizes = crate::parse_sizes(&o.sizes)?;
    let mut e = Engine::init().map_err(err)?;
    if e.size() < 2 {
        return Err(format!(
            "{} needs 2 ranks: hxcomm run -n 2 -- hxcomm bench {}",
            kind.name(),
            kind.name()
        ));
    }
    e.open_endpoint(EP).map_err(err)?;
    let me = e.rank();
    let peer = 1 - me.min(1);
    let active = me < 2;
    let policy = e.settings().protocol.policy.name();
    let rails = e.rails(peer);
    let mut raw = match (o.floor, active) {
        (true, true) => Some(open_floor(&mut e, me, peer)?),
        _ => None,
    };
    if me == 0 && !o.json {
        println!(
            "# hxcomm {} ({} rails to rank 1: {}, policy {policy}{})",
            kind.name(),
            rails,
            e.rail_names(peer).join(","),
            if o.validate { ", validated" } else { "" }
        );
        match kind {
            Kind::Latency if raw.is_some() => {
                println!("# Size          Latency (us)   Plain TCP (us)")
            }
            Kind::Latency => println!("# Size          Latency (us)"),
            _ if raw.is_some() => println!("# Size      Bandwidth (MB/s)  Plain TCP (MB/s)"),
            _ => println!("# Size      Bandwidth (MB/s)"),
        }
    }
    let window = o.window.max(1) as usize;
    for (i, &size) in sizes.iter().enumerate() {
        let default_iters = match kind {
            Kind::Latency if size > 64 * 1024 => 100,
            Kind::Latency => 1000,
            _ if size > 64 * 1024 => 20,
            _ => 100,
        };
        let iters = o.iterations.unwrap_or(default_iters).max(1);
        let warmup = match o.warmup_first {
            Some(w) if i == 0 => w,
            None if i == 0 => {
                first_size_warmup(kind, size, window, o.warmup.unwrap_or((iters / 10).max(2)))
            }
            _ => o.warmup.unwrap_or((iters / 10).max(2)),
        };
        e.barrier().map_err(err)?;
        if !active {
            continue;
        }
        let before = match raw.as_mut() {
            Some(s) => floor_figure(s, kind, me, size, window, iters)?,
            None => None,
        };
        let Timed { secs, cpu } = match kind {
            Kind::Latency => latency(&mut e, me, peer, size, iters, warmup, o.validate)?,
            Kind::Bw | Kind::Bibw => bandwidth(
                &mut e, kind, me, peer, size, window, iters, warmup, o.validate, o.timeline,
            )?,
        };
        let after = match raw.as_mut() {
            Some(s) => floor_figure(s, kind, me, size, window, iters)?,
            None => None,
        };
        // Rank 1 reports its CPU time so rank 0 can print the pair's cost per byte.
        let mut peer_cpu = [0u8; 8];
        if me == 1 {
            e.send(EP, 0, EP, TAG_CPU, &cpu.to_le_bytes())
                .map_err(err)?;
            continue;
        }
        e.recv(EP, Some(1), Some(TAG_CPU), &mut peer_cpu)
            .map_err(err)?;
        let cpu_total = cpu + f64::from_le_bytes(peer_cpu);
        let (value, unit, moved) = match kind {
            Kind::Latency => (
                secs * 1e6 / (2.0 * iters as f64),
                "usec",
                2 * size * iters as usize,
            ),
            Kind::Bw => {
                let bytes = (size * window * iters as usize) as f64;
                (bytes / secs / 1e6, "mb_per_s", bytes as usize)
            }
            Kind::Bibw => {
                let bytes = (2 * size * window * iters as usize) as f64;
                (bytes / secs / 1e6, "mb_per_s", bytes as usize)
            }
        };
        let cpu_per_gb = if moved > 0 {
            cpu_total / (moved as f64 / 1e9)
        } else {
            0.0
        };
        let round2 = |v: f64| (v * 100.0).round() / 100.0;
        let floor = before.zip(after).map(|(b, a)| (b + a) / 2.0);
        if o.json {
            let mut line = serde_json::json!({
                "bench": kind.name(), "bytes": size, unit: round2(value),
                "rails": rails, "policy": policy, "iterations": iters,
                "window": if kind == Kind::Latency { 1 } else { window },
                "cpu_s": (cpu_total * 1e4).round() / 1e4,
                "cpu_s_per_gb": (cpu_per_gb * 1e3).round() / 1e3,
                "validated": o.validate,
            });
            if let (Some(f), Some(b), Some(a)) = (floor, before, after) {
                line[format!("floor_{unit}")] = round2(f).into();
                line[format!("floor_before_{unit}")] = round2(b).into();
                line[format!("floor_after_{unit}")] = round2(a).into();
            }
            println!("{line}");
        } else if let Some(f) = floor {
            println!("{size:<10}{value:>18.2}{f:>17.2}");
        } else {
            println!("{size:<10}{value:>18.2}");
        }
    }
    e.finalize().map_err(err)
}

/// `--floor`: a plain TCP connection between rail 0's own addresses (rank 1 listens, rank 0
/// connects), made once the engine has connected that rail.
fn open_floor(e: &mut Engine, me: u32, peer: u32) -> Result<TcpStream, String> {
    if e.is_shm_peer(peer) {
        return Err(format!(
            "--floor needs a TCP rail: rank {peer} is reached through shared memory \
             (HX_TRANSPORTS=tcp gives rails on one host)"
        ));
    }
    // The hello (and the port that answers it) connects the rails, on first use.
    let mut hello = [0u8; 2];
    if me == 0 {
        e.send(EP, peer, EP, TAG_FLOOR, &[]).map_err(err)?;
    } else {
        e.recv(EP, Some(peer), Some(TAG_FLOOR), &mut hello)
            .map_err(err)?;
    }
    let t0 = Instant::now();
    let (local, remote) = loop {
        if let Some(a) = e.rail_socket_addrs(peer, 0) {
            break a;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            return Err(format!(
                "--floor: rail 0 to rank {peer} is not a connected TCP rail after 10 s"
            ));
        }
        e.progress().map_err(err)?;
        std::thread::sleep(Duration::from_micros(100));
    };
    if me == 1 {
        let l = floor::listen(local.ip())?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        e.send(EP, peer, EP, TAG_FLOOR, &port.to_le_bytes())
            .map_err(err)?;
        floor::accept(&l)
    } else {
        let st = e
            .recv(EP, Some(peer), Some(TAG_FLOOR), &mut hello)
            .map_err(err)?;
        if st.len != 2 {
            return Err(format!(
                "--floor: a port of {} bytes from rank {peer}",
                st.len
            ));
        }
        let port = u16::from_le_bytes(hello);
        floor::connect(local.ip(), SocketAddr::new(remote.ip(), port))
    }
}

/// The plain TCP figure beside one size (rank 0's; rank 1 takes part and gets 0). Latency: a
/// ping-pong, every size (messages of at most [`FLOOR_MAX_BYTES`]). bw, bibw: OSU's window
/// over plain TCP, an eighth of the iterations (at least 4), sizes up to
/// [`FLOOR_MAX_BYTES`] only (None above): there the message rate, which the machine's speed
/// sets, is the limit; above it a rate-limited rail's wire or token bucket is, and a floor's
/// bytes would spend rail 0's bucket before hxcomm's figure.
fn floor_figure(
    s: &mut TcpStream,
    kind: Kind,
    me: u32,
    size: usize,
    window: usize,
    iters: u32,
) -> Result<Option<f64>, String> {
    match kind {
        Kind::Latency => floor_oneway_us(s, me, size, iters).map(Some),
        _ if size > FLOOR_MAX_BYTES => Ok(None),
        _ => floor::tcp_window(
            s,
            me == 0,
            size,
            window,
            (iters / 8).max(4),
            kind == Kind::Bibw,
        )
        .map(Some),
    }
}

/// Half the median round trip of a plain busy-polling TCP ping-pong of `size` bytes (at most
/// [`FLOOR_MAX_BYTES`]), a quarter of the iterations: rank 0's figure; rank 1 answers and
/// gets 0.
fn floor_oneway_us(s: &mut TcpStream, me: u32, size: usize, iters: u32) -> Result<f64, String> {
    let iters = (iters / 4).max(50);
    let mut rtt = floor::tcp_pingpong(s, me == 0, size.min(FLOOR_MAX_BYTES), iters, 10, true)?;
    if rtt.is_empty() {
        return Ok(0.0);
    }
    rtt.sort_unstable();
    Ok(rtt[rtt.len() / 2] as f64 / 2e3)
}

fn verify(buf: &[u8], seed: u64, what: &str) -> Result<(), String> {
    match pattern::check(buf, seed) {
        None => Ok(()),
        Some(i) => Err(format!(
            "validation failed: {what}: byte {i} of {} differs",
            buf.len()
        )),
    }
}

fn latency(
    e: &mut Engine,
    me: u32,
    peer: u32,
    size: usize,
    iters: u32,
    warmup: u32,
    validate: bool,
) -> Result<Timed, String> {
    let mut sbuf = vec![0u8; size];
    let mut rbuf = vec![0u8; size];
    pattern::fill(&mut sbuf, size as u64);
    let mut clock = Clock::start();
    for i in 0..iters + warmup {
        if i == warmup {
            clock = Clock::start();
        }
        if validate {
            pattern::fill(
                &mut sbuf,
                (size as u64) << 32 | i as u64 | (me as u64) << 63,
            );
        }
        if me == 0 {
            e.send(EP, peer, EP, TAG_DATA, &sbuf).map_err(err)?;
            e.recv(EP, Some(peer), Some(TAG_DATA), &mut rbuf)
                .map_err(err)?;
        } else {
            e.recv(EP, Some(peer), Some(TAG_DATA), &mut rbuf)
                .map_err(err)?;
            e.send(EP, peer, EP, TAG_DATA, &sbuf).map_err(err)?;
        }
        if validate {
            let seed = (size as u64) << 32 | i as u64 | (peer as u64) << 63;
            verify(&rbuf, seed, &format!("latency {size} B iteration {i}"))?;
        }
    }
    Ok(clock.stop())
}

#[allow(clippy::too_many_arguments)]
fn bandwidth(
    e: &mut Engine,
    kind: Kind,
    me: u32,
    peer: u32,
    size: usize,
    window: usize,
    iters: u32,
    warmup: u32,
    validate: bool,
    timeline: bool,
) -> Result<Timed, String> {
    // Without validation one buffer per direction serves the whole window, as in OSU.
    let slots = if validate { window } else { 1 };
    let mut sbufs: Vec<Vec<u8>> = (0..slots).map(|_| vec![0u8; size]).collect();
    let mut rbufs: Vec<Vec<u8>> = (0..slots).map(|_| vec![0u8; size]).collect();
    let sends = kind == Kind::Bibw || me == 0;
    let recvs = kind == Kind::Bibw || me == 1;
    let seed = |sender: u32, it: u32, w: usize| {
        (size as u64) << 40 ^ (it as u64) << 20 ^ (w as u64) << 1 ^ sender as u64
    };
    let mut reqs: Vec<Request> = Vec::with_capacity(2 * window);
    let mut ack = [0u8; 4];
    let mut clock = Clock::start();
    let mut last = Instant::now();
    for it in 0..iters + warmup {
        if it == warmup {
            clock = Clock::start();
        }
        if timeline && me == 0 && it > 0 {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            let bytes = (size * window) as f64 * if kind == Kind::Bibw { 2.0 } else { 1.0 };
            println!(
                "{{\"timeline\":\"{}\",\"iteration\":{},\"t\":{now:.4},\"mb_per_s\":{:.2}}}",
                kind.name(),
                it - 1,
                bytes / last.elapsed().as_secs_f64() / 1e6
            );
            last = Instant::now();
        }
        reqs.clear();
        if recvs {
            for w in 0..window {
                let b = &mut rbufs[w % slots];
                // SAFETY: the buffers outlive the wait_all below.
                let r =
                    unsafe { e.irecv_raw(EP, Some(peer), Some(TAG_DATA), b.as_mut_ptr(), b.len()) };
                reqs.push(r.map_err(err)?);
            }
        }
        if sends {
            for w in 0..window {
                let b = &mut sbufs[w % slots];
                if validate {
                    pattern::fill(b, seed(me, it, w));
                }
                // SAFETY: as above.
                let r = unsafe { e.isend_raw(EP, peer, EP, TAG_DATA, b.as_ptr(), b.len()) };
                reqs.push(r.map_err(err)?);
            }
        }
        e.wait_all(&reqs).map_err(err)?;
        if validate && recvs {
            for (w, b) in rbufs.iter().enumerate() {
                verify(
                    b,
                    seed(peer, it, w),
                    &format!("{} {size} B iteration {it} message {w}", kind.name()),
                )?;
            }
        }
        if kind == Kind::Bw {
            if me == 1 {
                e.send(EP, peer, EP, TAG_ACK, &ack).map_err(err)?;
            } else {
                e.recv(EP, Some(peer), Some(TAG_ACK), &mut ack)
                    .map_err(err)?;
            }
        }
    }
    Ok(clock.stop())
}

/// The first size's warmup by default: `warmup`, raised until each direction has carried twice
/// the bytes after which a shared-memory ring is populated (each record at least a 64-byte
/// line), so that one-time cost lands before the timing.
fn first_size_warmup(kind: Kind, size: usize, window: usize, warmup: u32) -> u32 {
    let record = (size + 64).max(64) as u64;
    let msgs = (2 * hx_engine::SHM_POPULATE_AFTER).div_ceil(record);
    let per_iter = match kind {
        Kind::Latency => 1,
        Kind::Bw | Kind::Bibw => window as u64,
    };
    warmup.max(msgs.div_ceil(per_iter).min(u32::MAX as u64) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_size_warms_a_ring_past_its_populate() {
        // 8 B: 72-byte records, 2 x 32 KiB each way: 911 round trips, or 15 windows of 64.
        let need = (2 * hx_engine::SHM_POPULATE_AFTER).div_ceil(72) as u32;
        assert_eq!(first_size_warmup(Kind::Latency, 8, 64, 100), need);
        assert_eq!(first_size_warmup(Kind::Bw, 8, 64, 10), need.div_ceil(64));
        // Large messages pass it at once: the usual warmup stands.
        assert_eq!(first_size_warmup(Kind::Latency, 4 << 20, 64, 10), 10);
        assert_eq!(first_size_warmup(Kind::Bibw, 1 << 20, 64, 2), 2);
    }
}
