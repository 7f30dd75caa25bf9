//! An all-to-all right after start: every rank sends one message to every other rank and checks
//! what it receives. It measures what a job pays for its first contact with every peer, which
//! is when connections are made (on first use), and the socket count that leaves per rank.
//!
//! With `--throughput` it measures the exchange as a rate instead: every round starts with a
//! barrier, the buffers are filled (and the receive buffers' pages touched) before the round's
//! clock starts and checked after it stops, so a round after the first times the all-to-all's
//! data movement alone; each rank prints its round times and the median of the rounds after the
//! first as MB/s sent per rank ((ranks - 1) x size over that time), and the machine's idle and
//! softirq share of CPU time over its timed parts (/proc/stat, which is global: on an emulated
//! cluster of namespaces it says whether the cores or the links were the limit).

use std::time::Instant;

use clap::Args;
use hx_engine::Engine;

use crate::pattern;

const EP: u16 = 3;

#[derive(Args, Debug, Clone)]
pub struct AlltoallOpts {
    /// Bytes per message.
    #[arg(long, default_value = "4k")]
    pub size: String,
    /// Rounds (the first one makes the connections).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// Time only the exchange: a barrier before each round, buffers prepared before and
    /// checked after the timed part; prints the median of the rounds after the first as a rate.
    #[arg(long)]
    pub throughput: bool,
    /// With `--throughput`: per round, when each receive and send finished (ms from the round's
    /// start, polled every 2 ms) and the bytes written on each rail (path) to each peer.
    #[arg(long)]
    pub detail: bool,
    /// Order of the sends: `all` (every send posted at once) or `near-first` (the sends to the
    /// peers with the fewest rails, i.e. the line neighbours on a hyper-crossbar, first; the
    /// others when this rank's sends to those have finished; one group on a flat network).
    /// On hxb:2x2x2 x 2 at 100 Mbit/s near-first was slower (3.48 s a round against 3.07-3.43).
    #[arg(long, default_value = "all")]
    pub schedule: String,
}

/// The pattern seed of the message from `from` to `to` in `round`.
fn seed(from: u32, to: u32, round: usize) -> u64 {
    (from as u64) << 32 | (to as u64) << 8 | round as u64
}

/// `part` as a percentage of `whole` (0 when `whole` is 0).
fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// The median of `v` (the mean of the middle two for an even count); `None` if empty.
fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Checks the receive buffers of one round: `(peer, status length, buffer)`.
fn check_round(
    me: u32,
    round: usize,
    len: usize,
    got: Vec<(u32, usize, Vec<u8>)>,
) -> Result<(), String> {
    for (p, n, buf) in got {
        if n != len {
            return Err(format!("from rank {p}: {n} bytes, expected {len}"));
        }
        if let Some(at) = pattern::check(&buf, seed(p, me, round)) {
            return Err(format!("from rank {p}: byte {at} differs"));
        }
    }
    Ok(())
}

/// The machine's CPU time from /proc/stat's `cpu` line: (total, idle + iowait, softirq), in
/// ticks; zeros if it cannot be read.
fn cpu_ticks() -> [u64; 3] {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    parse_cpu(&text)
}

/// (total, idle + iowait, softirq) from the text of /proc/stat.
fn parse_cpu(text: &str) -> [u64; 3] {
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return [0; 3];
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    [v.iter().sum(), at(3) + at(4), at(6)]
}

/// One round's buffers per peer, prepared ahead (`None`: made inside the timed part).
type Prepared = Vec<Option<Vec<u8>>>;

/// The send groups: indices of `rails` (rails to each peer); with `near_first` the peers with the
/// fewest rails (on a hyper-crossbar: hop distance x links per dimension, so the line
/// neighbours) and then the rest, else one group.
///
/// The idea tried: posted all at once, the far peers' messages (more paths, so more TCP flows
/// per link) finish first and the round's end is left to the line neighbours', which can use
/// only their dimension's links. Sending those first did not help (see BENCHMARKS.md).
fn phases(rails: &[usize], near_first: bool) -> Vec<Vec<usize>> {
    if !near_first {
        return vec![(0..rails.len()).collect()];
    }
    let Some(&fewest) = rails.iter().min() else {
        return vec![];
    };
    let (near, far): (Vec<usize>, Vec<usize>) = (0..rails.len()).partition(|&i| rails[i] == fewest);
    [near, far].into_iter().filter(|g| !g.is_empty()).collect()
}

/// Polls until every request is done; returns when each receive and send finished (seconds since
/// `t0`). The requests stay for the caller to wait on (they are complete then).
fn finish_times(
    e: &mut Engine,
    recvs: &[(u32, hx_engine::Request)],
    sends: &[hx_engine::Request],
    t0: Instant,
) -> Result<(Vec<f64>, Vec<f64>), String> {
    use std::os::fd::BorrowedFd;
    let all: Vec<hx_engine::Request> = recvs
        .iter()
        .map(|r| r.1)
        .chain(sends.iter().copied())
        .collect();
    let mut at = vec![None::<f64>; all.len()];
    let mut fin = Vec::new();
    while at.iter().any(|a| a.is_none()) {
        e.progress().map_err(|e| e.to_string())?;
        fin.clear();
        e.take_finished(&mut fin);
        let now = t0.elapsed().as_secs_f64();
        for (i, r) in all.iter().enumerate() {
            if at[i].is_none() && fin.contains(r) {
                at[i] = Some(now);
            }
        }
        if at.iter().any(|a| a.is_none()) {
            // SAFETY: the engine's fd lives as long as `e`.
            let fd = unsafe { BorrowedFd::borrow_raw(e.fd()) };
            let mut pfd = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
            let _ = nix::poll::poll(&mut pfd, nix::poll::PollTimeout::from(2u8));
        }
    }
    let at: Vec<f64> = at.into_iter().map(|a| a.unwrap_or(0.0)).collect();
    let (r, s) = at.split_at(recvs.len());
    Ok((r.to_vec(), s.to_vec()))
}

/// Open file descriptors of this process that are sockets.
fn sockets() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

pub fn run(o: &AlltoallOpts) -> Result<(), String> {
    let len = crate::parse_sizes(&o.size)?
        .last()
        .copied()
        .ok_or("bad --size")?;
    let t_init = Instant::now();
    let mut e = Engine::init().map_err(|e| e.to_string())?;
    let init_s = t_init.elapsed().as_secs_f64();
    e.open_endpoint(EP).map_err(|e| e.to_string())?;
    let (me, size) = (e.rank(), e.size());
    let sockets_before = sockets();
    if o.detail {
        e.track_finished();
    }
    let phased = match o.schedule.as_str() {
        "near-first" => true,
        "all" => false,
        x => return Err(format!("--schedule {x}: expected all or near-first")),
    };
    let mut round_s = Vec::new();
    // Machine CPU ticks over the timed parts of the rounds after the first.
    let mut ticks = [0u64; 3];
    for round in 0..o.rounds.max(1) {
        let peers: Vec<u32> = (1..size).map(|k| (me + k) % size).collect();
        let mk_send = |p: u32| {
            let mut data = vec![0u8; len];
            pattern::fill(&mut data, seed(me, p, round));
            data
        };
        // In throughput mode everything but the exchange happens off the clock.
        let (mut sends, mut bufs): (Prepared, Prepared) = if o.throughput {
            let s = peers.iter().map(|&p| Some(mk_send(p))).collect();
            let b = peers.iter().map(|_| Some(vec![0xa5u8; len])).collect();
            e.barrier().map_err(|e| e.to_string())?;
            (s, b)
        } else {
            (vec![None; peers.len()], vec![None; peers.len()])
        };
        let c0 = cpu_ticks();
        let t = Instant::now();
        let mut reqs = Vec::new();
        let mut recvs = Vec::new();
        for (i, &p) in peers.iter().enumerate() {
            let buf = bufs[i].take().unwrap_or_else(|| vec![0; len]);
            let r = e
                .irecv(EP, Some(p), Some(round as u64), buf)
                .map_err(|e| e.to_string())?;
            recvs.push((p, r));
        }
        let rails: Vec<usize> = peers.iter().map(|&p| e.rails(p)).collect();
        for (k, group) in phases(&rails, phased).into_iter().enumerate() {
            if k > 0 {
                // This rank's sends of the group before are done: the next group's start.
                e.wait_all(&reqs).map_err(|e| e.to_string())?;
                reqs.clear();
            }
            for i in group {
                let p = peers[i];
                let data = sends[i].take().unwrap_or_else(|| mk_send(p));
                reqs.push(
                    e.isend(EP, p, EP, round as u64, data)
                        .map_err(|e| e.to_string())?,
                );
            }
        }
        let mut got = Vec::with_capacity(recvs.len());
        if o.detail {
            let tx0: Vec<Vec<u64>> = peers.iter().map(|&p| e.rail_tx_bytes(p)).collect();
            let (rt, st) = finish_times(&mut e, &recvs, &reqs, t)?;
            let mut line = format!("rank {me} round {round} detail:");
            for (i, &p) in peers.iter().enumerate() {
                let tx = e.rail_tx_bytes(p);
                let names = e.rail_names(p);
                let rails: Vec<String> = names
                    .iter()
                    .zip(tx.iter().zip(tx0[i].iter().chain(std::iter::repeat(&0))))
                    .map(|(n, (a, b))| format!("{n}={:.2}", (a - b) as f64 / 1e6))
                    .collect();
                line += &format!(
                    " | peer {p} recv {:.0} send {:.0} MB {}",
                    rt[i] * 1e3,
                    st[i] * 1e3,
                    rails.join(",")
                );
            }
            println!("{line}");
        }
        for (p, r) in recvs {
            let (st, buf) = e.wait_owned(r).map_err(|e| e.to_string())?;
            let buf = buf.unwrap_or_default();
            if o.throughput {
                got.push((p, st.len, buf));
            } else {
                check_round(me, round, len, vec![(p, st.len, buf)])?;
            }
        }
        e.wait_all(&reqs).map_err(|e| e.to_string())?;
        round_s.push(t.elapsed().as_secs_f64());
        if o.throughput && round > 0 {
            let c1 = cpu_ticks();
            for i in 0..3 {
                ticks[i] += c1[i].saturating_sub(c0[i]);
            }
        }
        check_round(me, round, len, got)?;
    }
    let sockets_after = sockets();
    let t_fin = Instant::now();
    e.finalize().map_err(|e| e.to_string())?;
    if o.throughput {
        let later = median(&round_s[1.min(round_s.len() - 1)..]).unwrap_or(0.0);
        let sent = (size as usize - 1) * len;
        println!(
            "rank {me}: throughput: rounds_s {}; median of rounds after the first {later:.4} s, \
             {sent} bytes sent: {:.1} MB/s per rank; machine idle {:.1}%, softirq {:.1}% \
             (/proc/stat over the timed rounds after the first)",
            round_s
                .iter()
                .map(|s| format!("{s:.4}"))
                .collect::<Vec<_>>()
                .join(","),
            if later > 0.0 {
                sent as f64 / later / 1e6
            } else {
                0.0
            },
            pct(ticks[1], ticks[0]),
            pct(ticks[2], ticks[0])
        );
    }
    println!(
        "rank {me}: all-to-all of {len} bytes with {} ranks verified; init {init_s:.3} s, rounds {}, finalize {:.3} s; sockets {sockets_before} before, {sockets_after} after",
        size,
        round_s
            .iter()
            .map(|s| format!("{s:.3} s"))
            .collect::<Vec<_>>()
            .join(", "),
        t_fin.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_seeds() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_ne!(seed(1, 2, 0), seed(2, 1, 0));
        assert_ne!(seed(1, 2, 0), seed(1, 2, 1));
        let mut b = vec![0u8; 100];
        pattern::fill(&mut b, seed(0, 1, 3));
        assert!(check_round(1, 3, 100, vec![(0, 100, b.clone())]).is_ok());
        assert!(check_round(1, 3, 100, vec![(0, 99, b.clone())]).is_err());
        assert!(check_round(1, 2, 100, vec![(0, 100, b)]).is_err());
    }

    #[test]
    fn send_phases() {
        assert_eq!(phases(&[2, 4, 6, 2], false), vec![vec![0, 1, 2, 3]]);
        assert_eq!(
            phases(&[2, 4, 6, 2, 4], true),
            vec![vec![0, 3], vec![1, 2, 4]]
        );
        assert_eq!(phases(&[6, 6, 6], true), vec![vec![0, 1, 2]]);
        assert_eq!(phases(&[], true), Vec::<Vec<usize>>::new());
    }

    #[test]
    fn cpu_line() {
        let stat = "cpu  10 1 20 300 4 0 50 0 0 0\ncpu0 5 0 10 150 2 0 25 0 0 0\n";
        assert_eq!(parse_cpu(stat), [385, 304, 50]);
        assert_eq!(parse_cpu("intr 1\n"), [0; 3]);
        assert_eq!(pct(1, 4), 25.0);
        assert_eq!(pct(1, 0), 0.0);
    }
}
