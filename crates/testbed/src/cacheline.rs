//! The time a cache line takes between two CPUs: the probe `hxcomm bench compare` and the
//! demo run beside their unlimited-rail figures. On this project's VMs a cache line goes from
//! one vCPU to the other in ~30-60 ns or, for minutes at a time, in ~180-250 ns (where the host
//! puts them), and a stream whose bytes cross between the CPUs (hxcomm's two ranks, iperf3 with
//! clients and servers apart) moves ~8 GB/s in the first placement and ~2 GB/s in the second
//! (BENCHMARKS.md, issue 10).

use std::hint::spin_loop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::proc;

/// A one-way time at or above this is the far placement (~180-250 ns here; the near one reads
/// ~30-60).
pub const FAR_NS: f64 = 150.0;

/// [`oneway_ns`] between the first two CPUs this process may use; None with fewer. A round of
/// 100,000 round trips takes ~10 ms in the near placement here and ~50 ms in the far one.
pub fn probe_first_two(round_trips: u64, rounds: usize) -> Option<Result<f64, String>> {
    let cpus = proc::allowed_cpus();
    (cpus.len() >= 2).then(|| oneway_ns(cpus[0], cpus[1], round_trips, rounds))
}

/// A counter alone on its (prefetch-pair of) cache lines.
#[repr(align(128))]
#[derive(Default)]
struct Line(AtomicU64);

#[derive(Default)]
struct Lines {
    ping: Line,
    pong: Line,
    /// Set by a side that cannot go on, so the other stops waiting.
    failed: Line,
}

/// A side gives up after this long without an answer (the other side failed to start, or
/// was descheduled for that long).
const STALL: Duration = Duration::from_secs(5);

/// Median over `rounds` of the one-way time (ns) of a cache line between a thread on `a` and
/// one on `b`: `round_trips` ping-pongs each, after a tenth as many untimed.
pub fn oneway_ns(a: usize, b: usize, round_trips: u64, rounds: usize) -> Result<f64, String> {
    if round_trips == 0 || rounds == 0 {
        return Err("cache-line probe: needs at least one round trip and one round".into());
    }
    let lines = Arc::new(Lines::default());
    let warmup = round_trips / 10;
    let total = warmup + round_trips * rounds as u64;
    let side = |cpu: usize, initiator: bool| {
        let l = lines.clone();
        std::thread::spawn(move || -> Result<Vec<f64>, String> {
            let run = || -> Result<Vec<f64>, String> {
                proc::bind_current_thread(cpu).map_err(|e| format!("bind to CPU {cpu}: {e}"))?;
                let mut out = Vec::with_capacity(rounds);
                let mut t0 = Instant::now();
                for i in 1..=total {
                    if i == warmup + 1 {
                        t0 = Instant::now();
                    }
                    if initiator {
                        l.ping.0.store(i, Ordering::Release);
                        wait(&l, &l.pong, i)?;
                    } else {
                        wait(&l, &l.ping, i)?;
                        l.pong.0.store(i, Ordering::Release);
                    }
                    if initiator && i > warmup && (i - warmup).is_multiple_of(round_trips) {
                        let t = Instant::now();
                        out.push((t - t0).as_nanos() as f64 / round_trips as f64 / 2.0);
                        t0 = t;
                    }
                }
                Ok(out)
            };
            let r = run();
            if r.is_err() {
                l.failed.0.store(1, Ordering::Release);
            }
            r
        })
    };
    let (pa, pb) = (side(a, true), side(b, false));
    let ra = pa
        .join()
        .map_err(|_| "cache-line probe: a thread panicked")?;
    let rb = pb
        .join()
        .map_err(|_| "cache-line probe: a thread panicked")?;
    rb?;
    let mut v = ra?;
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

/// Spins until `c` reads `want`; fails when the other side failed or after [`STALL`].
fn wait(l: &Lines, c: &Line, want: u64) -> Result<(), String> {
    let mut n = 0u32;
    let mut since: Option<Instant> = None;
    while c.0.load(Ordering::Acquire) != want {
        spin_loop();
        n = n.wrapping_add(1);
        if n.is_multiple_of(4096) {
            if l.failed.0.load(Ordering::Acquire) != 0 {
                return Err("cache-line probe: the other side failed".into());
            }
            match since {
                None => since = Some(Instant::now()),
                Some(t) if t.elapsed() > STALL => {
                    return Err(format!("cache-line probe: no answer in {STALL:?}"))
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_line_between_two_cpus_takes_a_positive_time() {
        let cpus = proc::allowed_cpus();
        let (a, b) = (cpus[0], *cpus.get(1).unwrap_or(&cpus[0]));
        // On one CPU the two threads take turns through the scheduler: slow but it finishes.
        let n = if a == b { 20 } else { 2000 };
        let ns = oneway_ns(a, b, n, 3).unwrap();
        assert!(ns > 0.0 && ns.is_finite(), "{ns}");
    }

    #[test]
    fn a_side_that_cannot_start_fails_the_probe_without_hanging() {
        let t0 = Instant::now();
        let e = oneway_ns(0, libc::CPU_SETSIZE as usize, 1000, 1).unwrap_err();
        assert!(
            e.contains("bind to CPU") || e.contains("other side failed"),
            "{e}"
        );
        assert!(t0.elapsed() < STALL * 2);
        assert!(oneway_ns(0, 0, 0, 1).is_err());
    }
}
