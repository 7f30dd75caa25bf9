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
        for (i, &p) in peers.iter().enumerate() {
            let data = sends[i].take().unwrap_or_else(|| mk_send(p));
            reqs.push(
                e.isend(EP, p, EP, round as u64, data)
                    .map_err(|e| e.to_string())?,
            );
        }
        let mut got = Vec::with_capacity(recvs.len());
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
    fn cpu_line() {
        let stat = "cpu  10 1 20 300 4 0 50 0 0 0\ncpu0 5 0 10 150 2 0 25 0 0 0\n";
        assert_eq!(parse_cpu(stat), [385, 304, 50]);
        assert_eq!(parse_cpu("intr 1\n"), [0; 3]);
        assert_eq!(pct(1, 4), 25.0);
        assert_eq!(pct(1, 0), 0.0);
    }
}
