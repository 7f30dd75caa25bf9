//! `hxcomm bench is`: an integer sort in the manner of NAS IS, checked.
//!
//! Keys come from NAS IS's generator (the linear congruential `randlc`, a = 5^13 mod 2^46, each
//! key the scaled sum of four draws, so roughly bell-shaped over [0, max key)); each rank jumps
//! ahead to its share of the one global sequence, so the keys, and their checksum, do not depend
//! on the rank count (bench/mpi_is.c makes the same keys). Every iteration: bucket counts by
//! allreduce, bucket ranges assigned to ranks by cumulative count, keys to their rank by
//! all-to-all with varying sizes (counts first), counting sort of the received keys. After every
//! iteration (untimed) it verifies that each rank's keys are sorted, that rank r's largest is at
//! most rank r+1's smallest (boundaries exchanged), and that the key count, the key sum and a
//! hash sum are those of the generated keys.

use std::time::Instant;

use clap::Args;
use hx_engine::Engine;

use crate::coll::{Coll, EngineTransport, Op, Transport};

const EP: u16 = 4;
const SEED: u64 = 314_159_265;
const MULT: u64 = 1_220_703_125;
const MASK46: u64 = (1 << 46) - 1;
/// The finding of a rank that found nothing itself while another rank did.
pub(crate) const ELSEWHERE: &str = "another rank found an error (see its stderr)";

#[derive(Args, Debug, Clone)]
pub struct IsOpts {
    /// NAS problem class: S (2^16 keys, max key 2^11), W (2^20, 2^16), A (2^23, 2^19),
    /// B (2^25, 2^21), C (2^27, 2^23).
    #[arg(long, default_value = "A")]
    pub class: String,
    /// Total keys in the job (overrides the class).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Keys lie in [0, MAX_KEY); a power of two (overrides the class).
    #[arg(long)]
    pub max_key: Option<u64>,
    /// Timed iterations (after one untimed warm-up iteration).
    #[arg(long, default_value_t = 10)]
    pub iterations: u32,
    /// Print one JSON line instead of the text summary.
    #[arg(long)]
    pub json: bool,
}

/// The problem: total keys, max key, buckets (a power of two, at most 1024, at most max key).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Problem {
    pub keys: u64,
    pub max_key: u64,
    pub buckets: usize,
    pub iterations: u32,
}

impl Problem {
    pub fn from_opts(o: &IsOpts) -> Result<Problem, String> {
        let (keys, max_key) = match o.class.to_ascii_uppercase().as_str() {
            "S" => (1 << 16, 1 << 11),
            "W" => (1 << 20, 1 << 16),
            "A" => (1 << 23, 1 << 19),
            "B" => (1 << 25, 1 << 21),
            "C" => (1 << 27, 1 << 23),
            c => return Err(format!("--class {c}: expected S, W, A, B or C")),
        };
        let keys = o.keys.unwrap_or(keys);
        let max_key = o.max_key.unwrap_or(max_key);
        if keys == 0 {
            return Err("--keys must be at least 1".into());
        }
        if keys > u32::MAX as u64 {
            return Err(format!("--keys {keys}: at most {}", u32::MAX));
        }
        if !max_key.is_power_of_two() || !(4..=1 << 31).contains(&max_key) {
            return Err(format!(
                "--max-key {max_key}: expected a power of two from 4 to 2^31"
            ));
        }
        if o.iterations == 0 {
            return Err("--iterations must be at least 1".into());
        }
        Ok(Problem {
            keys,
            max_key,
            buckets: max_key.min(1024) as usize,
            iterations: o.iterations,
        })
    }
}

/// `a^k mod 2^46`, square and multiply (the low 46 bits of a product need only the low 64).
fn pow46(mut a: u64, mut k: u64) -> u64 {
    let mut r = 1u64;
    while k > 0 {
        if k & 1 == 1 {
            r = r.wrapping_mul(a) & MASK46;
        }
        a = a.wrapping_mul(a) & MASK46;
        k >>= 1;
    }
    r
}

/// This rank's share [lo, hi) of `total` items split as evenly as possible over `size`.
pub fn share(total: u64, rank: u32, size: u32) -> (u64, u64) {
    let lo = total * rank as u64 / size as u64;
    let hi = total * (rank as u64 + 1) / size as u64;
    (lo, hi)
}

/// Keys [lo, hi) of NAS IS's global key sequence.
pub fn generate(p: &Problem, lo: u64, hi: u64) -> Vec<u32> {
    let mut x = SEED.wrapping_mul(pow46(MULT, 4 * lo)) & MASK46;
    let scale = 1.0 / (1u64 << 46) as f64;
    let k = (p.max_key / 4) as f64;
    let mut draw = || {
        x = x.wrapping_mul(MULT) & MASK46;
        x as f64 * scale
    };
    (lo..hi)
        .map(|_| {
            let mut s = draw();
            s += draw();
            s += draw();
            s += draw();
            (k * s) as u32
        })
        .collect()
}

/// A multiset checksum: key count, key sum and a sum of hashed keys (wrapping).
fn checksum(keys: &[u32]) -> [u64; 3] {
    let mut s = [keys.len() as u64, 0, 0];
    for &k in keys {
        s[1] = s[1].wrapping_add(k as u64);
        s[2] = s[2].wrapping_add(mix(k as u64));
    }
    s
}

/// splitmix64's finalizer.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What a run measured and found (the same on every rank).
#[derive(Debug, Clone)]
pub struct Report {
    pub problem: Problem,
    pub ranks: u32,
    /// Per timed iteration: the slowest rank's time.
    pub iteration_s: Vec<f64>,
    /// The slowest rank's compute and communication time, per iteration on average.
    pub compute_s: f64,
    pub comm_s: f64,
    /// Count, sum and hash sum of all keys.
    pub checksum: [u64; 3],
    /// Empty if verified, else what was wrong (first finding).
    pub failure: Option<String>,
}

struct Times {
    total: f64,
    compute: f64,
    comm: f64,
}

/// One sort of `keys`; returns this rank's sorted keys and the time it took.
fn sort_once<T: Transport>(
    c: &mut Coll<T>,
    p: &Problem,
    keys: &[u32],
) -> Result<(Vec<u32>, Times), String> {
    let (me, n) = (c.rank() as usize, c.size() as usize);
    let shift = p.max_key.trailing_zeros() - p.buckets.trailing_zeros();
    let comm0 = c.comm_time();
    let t0 = Instant::now();
    // Local bucket counts. (Buckets are at most 1024: the mask, a no-op since every key is
    // below the max key, lets the compiler drop the bounds checks.)
    let mut counts = [0u64; 1024];
    for &k in keys {
        counts[(k >> shift) as usize & 1023] += 1;
    }
    let counts = &counts[..p.buckets];
    let mut totals = counts.to_vec();
    c.allreduce(&mut totals, Op::Sum)?;
    // Consecutive buckets to ranks, each rank's range ending where the cumulative count reaches
    // its share (as NAS IS does).
    let mut first = vec![p.buckets; n + 1];
    first[0] = 0;
    let (mut j, mut cum) = (0usize, 0u64);
    for (b, &t) in totals.iter().enumerate() {
        cum += t;
        while j + 1 < n && cum * n as u64 >= (j as u64 + 1) * p.keys {
            first[j + 1] = b + 1;
            j += 1;
        }
    }
    let mut owner = [0u32; 1024];
    for r in 0..n {
        for o in &mut owner[first[r]..first[r + 1]] {
            *o = r as u32;
        }
    }
    let mut bytes_to = vec![0usize; n];
    for (b, &cnt) in counts.iter().enumerate() {
        bytes_to[owner[b] as usize] += cnt as usize * 4;
    }
    let mut sends: Vec<Vec<u8>> = bytes_to.iter().map(|&b| vec![0; b]).collect();
    let mut at = vec![0usize; n];
    for &k in keys {
        let d = owner[(k >> shift) as usize & 1023] as usize;
        sends[d][at[d]..at[d] + 4].copy_from_slice(&k.to_le_bytes());
        at[d] += 4;
    }
    let got = c.alltoallv(sends)?;
    // Counting sort over this rank's key range.
    let lo = (first[me] as u64) << shift;
    let hi = (first[me + 1] as u64) << shift;
    let mut hist = vec![0u32; (hi - lo) as usize];
    let mut total = 0usize;
    for b in &got {
        if b.len() % 4 != 0 {
            return Err(format!("alltoallv: {} bytes, not whole keys", b.len()));
        }
        total += b.len() / 4;
        for k in b.chunks_exact(4) {
            let k = u32::from_le_bytes(k.try_into().expect("4 bytes")) as u64;
            if k < lo || k >= hi {
                return Err(format!(
                    "rank {me} received key {k} outside its range [{lo}, {hi})"
                ));
            }
            hist[(k - lo) as usize] += 1;
        }
    }
    let mut sorted = Vec::with_capacity(total);
    for (i, &h) in hist.iter().enumerate() {
        sorted.extend(std::iter::repeat_n(lo as u32 + i as u32, h as usize));
    }
    let total_s = t0.elapsed().as_secs_f64();
    let comm = (c.comm_time() - comm0).as_secs_f64();
    Ok((
        sorted,
        Times {
            total: total_s,
            compute: total_s - comm,
            comm,
        },
    ))
}

/// Checks a sort's result on every rank; returns the first finding, the same on every rank.
fn verify<T: Transport>(
    c: &mut Coll<T>,
    sorted: &[u32],
    want: &[u64; 3],
) -> Result<Option<String>, String> {
    let me = c.rank();
    let mut bad = sorted
        .windows(2)
        .position(|w| w[0] > w[1])
        .map(|i| format!("rank {me}: keys {i} and {} out of order", i + 1));
    let mut sum = checksum(sorted);
    c.allreduce(&mut sum, Op::Sum)?;
    let ends = [
        sorted.len() as u64,
        sorted.first().map_or(0, |&k| k as u64),
        sorted.last().map_or(0, |&k| k as u64),
    ];
    let all = c.allgather_u64(&ends)?;
    let mut prev: Option<(usize, u64)> = None;
    for (r, e) in all.iter().enumerate() {
        if e[0] == 0 {
            continue;
        }
        if let Some((pr, pmax)) = prev {
            if pmax > e[1] && bad.is_none() {
                bad = Some(format!(
                    "rank {pr}'s largest key {pmax} is above rank {r}'s smallest {}",
                    e[1]
                ));
            }
        }
        prev = Some((r, e[2]));
    }
    if sum != *want && bad.is_none() {
        bad = Some(format!(
            "keys not preserved: count/sum/hash sum {sum:?} after, {want:?} before"
        ));
    }
    // Every rank learns whether any rank found something (a rank's own finding goes to its
    // stderr; rank 0 prints the summary).
    let mut flag = [u64::from(bad.is_some())];
    c.allreduce(&mut flag, Op::Max)?;
    Ok(match (flag[0], bad) {
        (0, _) => None,
        (_, Some(b)) => Some(b),
        (_, None) => Some(ELSEWHERE.into()),
    })
}

/// The whole kernel on any transport: generate, one warm-up and `iterations` timed sorts, each
/// verified.
pub fn kernel<T: Transport>(c: &mut Coll<T>, p: &Problem) -> Result<Report, String> {
    let (me, n) = (c.rank(), c.size());
    let (lo, hi) = share(p.keys, me, n);
    let keys = generate(p, lo, hi);
    let mut want = checksum(&keys);
    c.allreduce(&mut want, Op::Sum)?;
    let mut failure = None;
    let mut times = Vec::new();
    let (mut compute, mut comm) = (0.0, 0.0);
    for it in 0..=p.iterations {
        c.barrier()?;
        let (sorted, t) = sort_once(c, p, &keys)?;
        if it > 0 {
            times.push(t.total);
            compute += t.compute;
            comm += t.comm;
        }
        if failure.is_none() {
            failure = verify(c, &sorted, &want)?.map(|f| format!("iteration {it}: {f}"));
        }
    }
    c.allreduce(&mut times, Op::Max)?;
    let mut split = [compute, comm];
    c.allreduce(&mut split, Op::Max)?;
    let iters = p.iterations as f64;
    Ok(Report {
        problem: *p,
        ranks: n,
        iteration_s: times,
        compute_s: split[0] / iters,
        comm_s: split[1] / iters,
        checksum: want,
        failure,
    })
}

impl Report {
    pub fn seconds_per_iteration(&self) -> f64 {
        self.iteration_s.iter().sum::<f64>() / self.iteration_s.len() as f64
    }

    pub fn mkeys_per_s(&self) -> f64 {
        self.problem.keys as f64 / self.seconds_per_iteration() / 1e6
    }

    pub fn print(&self, json: bool) {
        let p = &self.problem;
        let ok = self.failure.is_none();
        if json {
            println!(
                "{}",
                serde_json::json!({"bench": "is", "impl": "hxcomm", "ranks": self.ranks,
                    "keys": p.keys, "max_key": p.max_key, "buckets": p.buckets,
                    "iterations": p.iterations,
                    "seconds_per_iteration": self.seconds_per_iteration(),
                    "compute_s": self.compute_s, "comm_s": self.comm_s,
                    "mkeys_per_s": self.mkeys_per_s(),
                    "key_sum": self.checksum[1], "hash_sum": self.checksum[2],
                    "verified": ok, "failure": self.failure})
            );
            return;
        }
        println!(
            "IS (hxcomm): {} ranks, {} keys, max key {}, {} buckets, {} iterations",
            self.ranks, p.keys, p.max_key, p.buckets, p.iterations
        );
        println!(
            "IS (hxcomm): {:.6} s per iteration (compute {:.6} s, communication {:.6} s), {:.2} Mkeys/s",
            self.seconds_per_iteration(),
            self.compute_s,
            self.comm_s,
            self.mkeys_per_s()
        );
        match &self.failure {
            None => println!(
                "IS (hxcomm): verification SUCCESSFUL: keys sorted across ranks; count {}, key sum {}, hash sum {:#018x} preserved",
                self.checksum[0], self.checksum[1], self.checksum[2]
            ),
            Some(f) => println!("IS (hxcomm): verification FAILED: {f}"),
        }
    }
}

pub fn run(o: &IsOpts) -> Result<(), String> {
    let p = Problem::from_opts(o)?;
    let e = Engine::init().map_err(|e| e.to_string())?;
    let mut c = Coll::new(EngineTransport::new(e, EP)?);
    let report = kernel(&mut c, &p)?;
    if c.rank() == 0 {
        report.print(o.json);
    } else if let Some(f) = report.failure.as_ref().filter(|f| !f.ends_with(ELSEWHERE)) {
        eprintln!("hxcomm bench is: rank {}: {f}", c.rank());
    }
    c.t.engine.finalize().map_err(|e| e.to_string())?;
    match report.failure {
        None => Ok(()),
        Some(f) => Err(format!("is: verification failed: {f}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::mem;

    fn problem(keys: u64, max_key: u64) -> Problem {
        Problem {
            keys,
            max_key,
            buckets: max_key.min(1024) as usize,
            iterations: 2,
        }
    }

    #[test]
    fn keys_match_nas_generator_and_do_not_depend_on_split() {
        let p = problem(1000, 1 << 11);
        let all = generate(&p, 0, 1000);
        let parts: Vec<u32> = [(0, 333), (333, 700), (700, 1000)]
            .iter()
            .flat_map(|&(a, b)| generate(&p, a, b))
            .collect();
        assert_eq!(all, parts);
        assert!(all.iter().all(|&k| (k as u64) < p.max_key));
        // The first randlc draw from NAS's seed: 314159265 * 5^13 mod 2^46.
        assert_eq!(
            SEED.wrapping_mul(MULT) & MASK46,
            ((SEED as u128 * MULT as u128) % (1u128 << 46)) as u64
        );
        // Bell-shaped: the middle half of the range holds most keys.
        let mid = all.iter().filter(|&&k| (512..1536).contains(&k)).count();
        assert!(mid > 700, "{mid}");
    }

    #[test]
    fn sorts_and_verifies_on_any_rank_count() {
        for n in 1..=5u32 {
            for p in [problem(5000, 1 << 11), problem(777, 4), problem(3, 1 << 8)] {
                let reports = mem::run(n, |mut c| kernel(&mut c, &p).unwrap());
                for r in &reports {
                    assert_eq!(r.failure, None, "n={n} {p:?}");
                    assert_eq!(r.checksum[0], p.keys);
                    assert_eq!(r.checksum, reports[0].checksum);
                }
            }
        }
    }

    #[test]
    fn verification_catches_a_lost_or_misplaced_key() {
        let p = problem(4000, 1 << 11);
        let out = mem::run(3, |mut c| {
            let (lo, hi) = share(p.keys, c.rank(), c.size());
            let keys = generate(&p, lo, hi);
            let mut want = checksum(&keys);
            c.allreduce(&mut want, Op::Sum).unwrap();
            let (mut sorted, _) = sort_once(&mut c, &p, &keys).unwrap();
            let good = verify(&mut c, &sorted, &want).unwrap();
            if c.rank() == 1 {
                sorted.pop();
            }
            let lost = verify(&mut c, &sorted, &want).unwrap();
            if c.rank() == 0 {
                sorted.push(2047);
            }
            let unordered = verify(&mut c, &sorted, &want).unwrap();
            (good, lost, unordered)
        });
        for (good, lost, unordered) in out {
            assert_eq!(good, None);
            assert!(lost.is_some());
            assert!(unordered.is_some());
        }
    }

    #[test]
    fn bad_options_are_errors() {
        let o = |class: &str, keys, max_key, iterations| IsOpts {
            class: class.into(),
            keys,
            max_key,
            iterations,
            json: false,
        };
        assert!(Problem::from_opts(&o("A", None, None, 10)).is_ok());
        assert!(Problem::from_opts(&o("s", None, None, 10)).is_ok());
        assert!(Problem::from_opts(&o("Q", None, None, 10)).is_err());
        assert!(Problem::from_opts(&o("S", Some(0), None, 10)).is_err());
        assert!(Problem::from_opts(&o("S", None, Some(1000), 10)).is_err());
        assert!(Problem::from_opts(&o("S", None, None, 0)).is_err());
    }
}
