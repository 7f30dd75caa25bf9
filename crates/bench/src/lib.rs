//! `hxcomm bench`: point-to-point benchmarks in the manner of the OSU micro-benchmarks, run as two
//! ranks under the launcher (`hxcomm run -n 2 -- hxcomm bench bw`), plus `stress`, a validated
//! random-traffic test for any number of ranks.

mod alltoall;
mod breakdown;
mod cg;
mod coll;
mod compare;
mod is;
mod p2p;
mod pattern;
mod stress;

use clap::{Args, Subcommand};

/// Arguments of `hxcomm bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub which: Which,
}

#[derive(Subcommand, Debug)]
pub enum Which {
    /// Ping-pong latency (half the round trip), OSU style.
    Latency(P2pOpts),
    /// Where a small message's one-way time goes (hxcomm, kernel send, wire, receive, wakeup),
    /// TCP rail or shared memory, beside the raw floor.
    Breakdown(breakdown::BreakdownOpts),
    /// One-way bandwidth: a window of nonblocking sends, then an ack.
    Bw(P2pOpts),
    /// Bidirectional bandwidth: both ranks send a window at once.
    Bibw(P2pOpts),
    /// Random validated traffic between all ranks (sizes, tags, any-source receives).
    Stress(stress::StressOpts),
    /// Every rank sends to every other rank right after start (connections on first use), checked.
    Alltoall(alltoall::AlltoallOpts),
    /// hxcomm beside iperf3, sockperf and (--mpi) Open MPI and MPICH over the same testbed rails (root).
    Compare(compare::CompareOpts),
    /// Integer sort in the manner of NAS IS (allreduce, all-to-all with varying sizes), checked.
    Is(is::IsOpts),
    /// Conjugate gradient on a 2D Laplacian plus shift (halo exchanges, allreduces), checked.
    Cg(cg::CgOpts),
}

#[derive(Args, Debug, Clone)]
pub struct P2pOpts {
    /// Message sizes MIN:MAX in bytes (powers of two between them; k/M suffixes allowed).
    #[arg(long, default_value = "1:4M")]
    pub sizes: String,
    /// Timed iterations per size (default: 1000 for latency, 100 for bandwidth; fewer above 64 KiB).
    #[arg(long)]
    pub iterations: Option<u32>,
    /// Untimed iterations before timing (default: a tenth of the iterations, at least 2).
    #[arg(long)]
    pub warmup: Option<u32>,
    /// Untimed iterations of the first size only (default: as the others, and at least enough
    /// to take a shared-memory ring past the point where it is populated, HX_SHM_PREFAULT: 64 KiB
    /// each way). A job's first size also warms what the later ones find warm (fresh
    /// connections, caches, a ring's pages): with 4, a sweep starting at 1 B spread its 1 B figure
    /// by +-8% between jobs here, with 64 by +-2%; with the default 100 of 1,000 iterations, the
    /// populate (~1.4 ms once) fell inside the timed loop and the 1 B figure read 0.83-0.99 us
    /// where the next sizes read 0.15-0.27.
    #[arg(long)]
    pub warmup_first: Option<u32>,
    /// Messages in flight per iteration (bw, bibw).
    #[arg(long, default_value_t = 64)]
    pub window: u32,
    /// Fill and check every byte of every message; a mismatch is an error.
    #[arg(long)]
    pub validate: bool,
    /// One JSON object per line instead of the OSU table.
    #[arg(long)]
    pub json: bool,
    /// Over a TCP rail: before and after each size, the same measurement over plain TCP between
    /// the same two processes (rail 0's own addresses, busy-polling), printed beside hxcomm's
    /// (`floor_usec` / `floor_mb_per_s`: the mean of the two; and each). latency: a ping-pong
    /// of the size (at most 256 B), a quarter of the iterations; bw, bibw: OSU's window over
    /// plain TCP, an eighth of the iterations, up to 256 B only (above, a rate-limited rail and
    /// not the machine sets the figure). This VM's speed changes by the second (8 B over a
    /// rail 4.3, 5.5 or 7-9 us), and the floor says which speed a figure met.
    #[arg(long)]
    pub floor: bool,
    /// bw/bibw: also print one JSON line per iteration with its wall-clock end time (Unix
    /// seconds) and throughput, to see a transfer through a rail failure.
    #[arg(long)]
    pub timeline: bool,
}

/// Runs a benchmark; returns the process exit code.
pub fn run(args: BenchArgs) -> i32 {
    let result = match args.which {
        Which::Latency(o) => p2p::run(p2p::Kind::Latency, &o),
        Which::Breakdown(o) => breakdown::run(&o),
        Which::Bw(o) => p2p::run(p2p::Kind::Bw, &o),
        Which::Bibw(o) => p2p::run(p2p::Kind::Bibw, &o),
        Which::Stress(o) => stress::run(&o),
        Which::Alltoall(o) => alltoall::run(&o),
        Which::Compare(o) => compare::run(&o),
        Which::Is(o) => is::run(&o),
        Which::Cg(o) => cg::run(&o),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hxcomm bench: {e}");
            1
        }
    }
}

/// Parses `1:4M`-style size ranges into the powers of two between them (and 0 if MIN is 0).
pub fn parse_sizes(s: &str) -> Result<Vec<usize>, String> {
    let one = |v: &str| -> Result<usize, String> {
        let v = v.trim();
        let (num, mult) = match v.chars().last() {
            Some('k') | Some('K') => (&v[..v.len() - 1], 1024),
            Some('m') | Some('M') => (&v[..v.len() - 1], 1024 * 1024),
            Some('g') | Some('G') => (&v[..v.len() - 1], 1024 * 1024 * 1024),
            _ => (v, 1),
        };
        num.parse::<usize>()
            .map(|n| n * mult)
            .map_err(|_| format!("bad size {v:?} in --sizes {s:?}"))
    };
    let (lo, hi) = match s.split_once(':') {
        Some((a, b)) => (one(a)?, one(b)?),
        None => {
            let v = one(s)?;
            (v, v)
        }
    };
    if lo > hi {
        return Err(format!("--sizes {s}: MIN is above MAX"));
    }
    let mut out = Vec::new();
    if lo == 0 {
        out.push(0);
    }
    let mut x = lo.max(1).next_power_of_two();
    if lo > 0 && !lo.is_power_of_two() {
        out.push(lo);
    }
    while x <= hi {
        out.push(x);
        x *= 2;
    }
    if out.last() != Some(&hi) && hi > 0 {
        out.push(hi);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_sizes("1:8").unwrap(), vec![1, 2, 4, 8]);
        assert_eq!(parse_sizes("4k:16K").unwrap(), vec![4096, 8192, 16384]);
        assert_eq!(parse_sizes("4M").unwrap(), vec![4 << 20]);
        assert_eq!(parse_sizes("0:2").unwrap(), vec![0, 1, 2]);
        assert_eq!(parse_sizes("3:10").unwrap(), vec![3, 4, 8, 10]);
        assert!(parse_sizes("8:1").is_err());
        assert!(parse_sizes("x").is_err());
    }
}
