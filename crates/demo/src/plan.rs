//! What the demo runs: configurations (policy x rail count), benchmark segments (sizes,
//! iterations, window), and the `hxcomm run` command line of each job.

use crate::results::Bench;

pub const POLICIES: [&str; 4] = ["bind", "rr", "stripe", "adaptive"];
pub const RAIL_COUNTS: [u32; 3] = [1, 2, 4];
/// Seconds after which the launcher stops a job (a hung job must not hang the demo).
pub const JOB_TIMEOUT_S: u32 = 90;

/// Where the ranks run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// In testbed `name`'s two hosts; rails chosen with HX_RAILS=r0,...
    Testbed { name: String },
    /// On this host, with HX_LOOPBACK_RAILS TCP connections per peer (HX_TRANSPORTS=tcp).
    Loopback,
}

/// One `hxcomm bench` invocation: a range of sizes with its iteration count and window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub sizes: &'static str,
    pub iterations: u32,
    pub warmup: u32,
    pub window: u32,
    /// Untimed iterations of the segment's first size, if more than `warmup` (`--warmup-first`).
    pub warmup_first: Option<u32>,
    /// `--floor`: the plain TCP figure of the same process pair around each size, which says
    /// what speed the machine was at (verdict::placed_in_machine): every latency segment, and
    /// the bandwidth segments that start at 1 B (`hxcomm bench` measures a bandwidth floor up
    /// to 256 B only); none on rails without a rate limit (64 KiB-4 MiB).
    pub floor: bool,
}

/// Untimed iterations of 1 B, the first size of a bandwidth job (~16 ms here): with `warmup`
/// (4) alone, the first size of a job spread by +-8% between jobs (fresh connections and
/// processes), and the demo's 1 B bw/bibw verdicts were a draw; with 64, +-2% (8 jobs each, 2
/// rails at 1 Gbit/s, 2026-11-24).
pub const BANDWIDTH_WARMUP_FIRST: u32 = 64;

/// The runs of every segment when `--runs` is not given (the median of three is the smallest
/// that ignores one bad run; `--quick` makes one).
pub const DEFAULT_RUNS: usize = 3;

/// The segments of one benchmark on the 1 Gbit/s rails.
///
/// Latency: 1 B to 4 KiB 1000 iterations, 8 to 64 KiB 200 (5-15 ms per size). With 100 (0.6 ms
/// per small size) one descheduled rank moved a point by 10-40%, and the verdicts (within 5%)
/// at 1 B-2 KiB were a draw: on one rail, where every policy takes the same path, adaptive came
/// out 1.1-1.4x rr in 12 of 17 sizes of one demo run (1 of 17 with 1000 iterations).
///
/// Bandwidth: every segment runs `--runs` times (3 by default) and the report keeps the median,
/// so one run no longer has to be long enough on its own. With the previous single run (100
/// iterations up to 4 KiB, 10 up to 64 KiB, 3 up to 4 MiB: ~100 MB per large point, 0.84 s at
/// one rail) three runs of everything would take ~300 s, and the demo must stay under 3
/// minutes. Now a run gives each size about the same bytes instead of the same iterations: 2-8
/// MiB per point from 1 KiB to 64 KiB (32, 8 and 2 iterations of a window of 64), and from 128
/// KiB one timed iteration of 8-32 MiB after one untimed one (window 64 at 128-256 KiB, 16 at
/// 512 KiB, 8 from 1 MiB). What that keeps:
/// - from 128 KiB every iteration carries 8-32 MiB (17-70 ms of wire at 4 rails), as the old
///   window of 8 x 1 MiB did. Not less: each iteration ends in an ack round trip with the rails
///   idle, and at 4 rails 4 MiB iterations measured 1-3% below 8 MiB ones (adaptive at 512 KiB
///   11%), 8 MiB ones 1-2% below 16 MiB (3 runs each, 2026-11-23). Not a window below 8
///   either: rr sends whole messages round robin, and bibw at 4 rails with a window of 4 gave rr
///   half the wire at 2 and 4 MiB (473 MB/s in 3 of 3 runs, against 790-930 with 8 or more);
/// - the tbf burst (128 KiB per rail) is spent in the untimed iterations (>= 1 MiB everywhere
///   from 4 KiB), so no point runs faster than the wire;
/// - every timed point lasts >= ~9 ms at 4 rails (the old 8 KiB point: 11 ms) and 35-140 ms at
///   one rail from 4 KiB; what varies between runs on this 2-core VM is whole runs (a job
///   lands in a slow mode, a rank is descheduled), which the median of 3 removes and a longer
///   run does not. `results.json` keeps every run's figure beside the median.
///
/// Up to 1 KiB the message rate, not the wire, is the limit (~7 us per message here): 32
/// iterations of 64 messages (~15 ms per size) instead of 100.
pub fn segments(bench: Bench, quick: bool) -> Vec<Segment> {
    let seg = |sizes, iterations, warmup, window| Segment {
        sizes,
        iterations,
        warmup,
        window,
        warmup_first: None,
        floor: bench == Bench::Latency,
    };
    // Bandwidth has a floor up to 256 B: the segments that start at 1 B ask for it.
    let small = |s: Segment| Segment { floor: true, ..s };
    match (bench, quick) {
        (Bench::Latency, false) => vec![seg("1:4k", 1000, 100, 1), seg("8k:64k", 200, 20, 1)],
        (Bench::Latency, true) => vec![seg("1:4k", 50, 5, 1)],
        (_, false) => vec![
            small(Segment {
                warmup_first: Some(BANDWIDTH_WARMUP_FIRST),
                ..seg("1:4k", 32, 4, 64)
            }),
            seg("8k:16k", 8, 2, 64),
            seg("32k:64k", 2, 1, 64),
            seg("128k:256k", 1, 1, 64),
            seg("512k", 1, 1, 16),
            seg("1M:4M", 1, 1, 8),
        ],
        (_, true) => vec![small(seg("1:64k", 3, 1, 16)), seg("4M:4M", 2, 1, 4)],
    }
}

/// The benchmarks of the second part, on rails without a rate limit.
pub const UNLIMITED_BENCHES: [Bench; 2] = [Bench::Bw, Bench::Bibw];
/// Rail counts of the second part (issue 10: 1 and 4 unlimited rails).
pub const UNLIMITED_RAIL_COUNTS: [u32; 2] = [1, 4];

/// The segments of the second part: bw and bibw, 64 KiB to 4 MiB, on rails without a rate
/// limit (veth without tbf: the 2 cores, not a wire, are the limit, at 2-7 GB/s). 64-256 MiB
/// per point (~20-50 ms), one untimed iteration of 4-16 MiB first; the median of the runs
/// matters more here, where a neighbour's process takes a core from the ranks.
pub fn unlimited_segments(bench: Bench, quick: bool) -> Vec<Segment> {
    let seg = |sizes, iterations, warmup, window| Segment {
        sizes,
        iterations,
        warmup,
        window,
        warmup_first: None,
        floor: false,
    };
    match (bench, quick) {
        (Bench::Latency, _) => vec![],
        (_, false) => vec![
            seg("64k:128k", 16, 1, 64),
            seg("256k:512k", 4, 1, 64),
            seg("1M:4M", 4, 1, 16),
        ],
        (_, true) => vec![seg("64k:4M", 2, 1, 4)],
    }
}

/// HX_RAILS for the first `rails` rails of the testbed: `r0,r1,..`.
pub fn rail_names(rails: u32) -> String {
    (0..rails)
        .map(|i| format!("r{i}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The bytes of a segment's size (`512`, `4k`, `1M`).
fn size_bytes(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'k' => (&s[..s.len() - 1], 1024),
        b'M' => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// The smallest and largest size of a segment.
pub fn size_range(seg: &Segment) -> Option<(u64, u64)> {
    match seg.sizes.split_once(':') {
        Some((a, b)) => Some((size_bytes(a)?, size_bytes(b)?)),
        None => size_bytes(seg.sizes).map(|v| (v, v)),
    }
}

/// Which of `segments` measures `bytes` (its index).
pub fn segment_of(segments: &[Segment], bytes: u64) -> Option<usize> {
    segments
        .iter()
        .position(|s| size_range(s).is_some_and(|(lo, hi)| (lo..=hi).contains(&bytes)))
}

/// Times the iterations of the first look that a second look at a miss runs
/// (verdict::SecondLook).
pub const SECOND_LOOK_FACTOR: u32 = 4;
/// Runs of each policy in a second look (`hxcomm demo --second-look-runs`).
pub const SECOND_LOOK_RUNS: usize = 3;
/// What the second looks may take together, after which the misses left keep their first
/// verdict only (the demo stays under 3 minutes).
pub const SECOND_LOOK_BUDGET_S: u64 = 25;
/// The same for the misses of the unlimited-rail part.
pub const SECOND_LOOK_UNLIMITED_BUDGET_S: u64 = 12;

/// A second look's segment: `seg` with [`SECOND_LOOK_FACTOR`] times its iterations and no
/// floor (its job names the sizes to look at again).
pub fn second_look_segment(seg: &Segment) -> Segment {
    Segment {
        iterations: seg.iterations * SECOND_LOOK_FACTOR,
        floor: false,
        ..*seg
    }
}

/// The arguments of `hxcomm` (the launcher, then the rank program, both `exe`) for one job of
/// `seg` over `sizes` (`seg.sizes`, or a second look's range).
pub fn job_args(
    mode: &Mode,
    exe: &str,
    policy: &str,
    rails: u32,
    bench: Bench,
    seg: &Segment,
    sizes: &str,
) -> Vec<String> {
    let mut a: Vec<String> = vec!["run".into(), "-n".into(), "2".into()];
    match mode {
        Mode::Testbed { name } => {
            a.extend(["--net".into(), "--name".into(), name.clone()]);
            a.extend(["--env".into(), format!("HX_RAILS={}", rail_names(rails))]);
        }
        Mode::Loopback => {
            // TCP only: with shared memory (the default on one host) there would be no rails.
            a.extend(["--env".into(), format!("HX_LOOPBACK_RAILS={rails}")]);
            a.extend(["--env".into(), "HX_TRANSPORTS=tcp".into()]);
        }
    }
    a.extend(["--policy".into(), policy.into()]);
    a.extend(["--timeout".into(), JOB_TIMEOUT_S.to_string(), "--".into()]);
    a.extend([exe.into(), "bench".into(), bench.name().into()]);
    a.extend(["--sizes".into(), sizes.into()]);
    a.extend(["--iterations".into(), seg.iterations.to_string()]);
    a.extend(["--warmup".into(), seg.warmup.to_string()]);
    if let Some(w) = seg.warmup_first {
        a.extend(["--warmup-first".into(), w.to_string()]);
    }
    if bench != Bench::Latency {
        a.extend(["--window".into(), seg.window.to_string()]);
    }
    if seg.floor {
        // Both modes run over TCP rails.
        a.push("--floor".into());
    }
    a.push("--json".into());
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn testbed_job_line() {
        let mode = Mode::Testbed { name: "hxd".into() };
        let seg = segments(Bench::Bw, false)[5];
        let a = job_args(&mode, "/x/hxcomm", "stripe", 2, Bench::Bw, &seg, seg.sizes).join(" ");
        assert_eq!(
            a,
            "run -n 2 --net --name hxd --env HX_RAILS=r0,r1 --policy stripe --timeout 90 -- \
             /x/hxcomm bench bw --sizes 1M:4M --iterations 1 --warmup 1 --window 8 --json"
        );
    }

    #[test]
    fn a_second_look_runs_one_segment_longer_for_the_sizes_asked() {
        let segs = segments(Bench::Bibw, false);
        assert_eq!(size_range(&segs[0]), Some((1, 4096)));
        assert_eq!(size_range(&segs[4]), Some((512 * 1024, 512 * 1024)));
        assert_eq!(segment_of(&segs, 1024), Some(0));
        assert_eq!(segment_of(&segs, 32 * 1024), Some(2));
        assert_eq!(segment_of(&segs, 4 << 20), Some(5));
        assert_eq!(segment_of(&segs, 8 << 20), None);
        let mode = Mode::Testbed { name: "hxd".into() };
        let seg = second_look_segment(&segs[0]);
        let a = job_args(&mode, "/x/hxcomm", "rr", 4, Bench::Bibw, &seg, "8:1024");
        assert_eq!(
            a.join(" "),
            "run -n 2 --net --name hxd --env HX_RAILS=r0,r1,r2,r3 --policy rr --timeout 90 -- \
             /x/hxcomm bench bibw --sizes 8:1024 --iterations 128 --warmup 4 --warmup-first 64 \
             --window 64 --json"
        );
    }

    #[test]
    fn a_bandwidth_sweep_from_1_byte_warms_its_first_size_longer() {
        let seg = segments(Bench::Bibw, false)[0];
        let a = job_args(&Mode::Loopback, "h", "rr", 2, Bench::Bibw, &seg, seg.sizes).join(" ");
        assert!(
            a.ends_with("h bench bibw --sizes 1:4k --iterations 32 --warmup 4 --warmup-first 64 --window 64 --floor --json"),
            "{a}"
        );
    }

    #[test]
    fn loopback_job_line() {
        let seg = segments(Bench::Latency, false)[0];
        let a = job_args(
            &Mode::Loopback,
            "h",
            "bind",
            4,
            Bench::Latency,
            &seg,
            seg.sizes,
        )
        .join(" ");
        assert_eq!(
            a,
            "run -n 2 --env HX_LOOPBACK_RAILS=4 --env HX_TRANSPORTS=tcp --policy bind --timeout 90 -- \
             h bench latency --sizes 1:4k --iterations 1000 --warmup 100 --floor --json"
        );
    }

    #[test]
    fn floors_where_they_are_measured() {
        for quick in [false, true] {
            assert!(segments(Bench::Latency, quick).iter().all(|s| s.floor));
            for b in [Bench::Bw, Bench::Bibw] {
                // Only the segment from 1 B: the bandwidth floor stops at 256 B.
                let floors: Vec<bool> = segments(b, quick).iter().map(|s| s.floor).collect();
                assert!(floors[0] && floors[1..].iter().all(|f| !f), "{floors:?}");
                assert!(segments(b, quick)[0].sizes.starts_with("1:"));
                assert!(unlimited_segments(b, quick).iter().all(|s| !s.floor));
            }
        }
    }

    #[test]
    fn segments_cover_1_to_4m_without_gaps() {
        for quick in [false, true] {
            for b in [Bench::Bw, Bench::Bibw] {
                let s = segments(b, quick);
                assert_eq!(s.first().unwrap().sizes.split(':').next(), Some("1"));
                assert!(s.last().unwrap().sizes.ends_with("4M"));
            }
        }
        assert_eq!(rail_names(4), "r0,r1,r2,r3");
        assert_eq!(rail_names(1), "r0");
    }

    /// The powers of two of a `MIN:MAX` range with k/M suffixes, as `hxcomm bench` reads it.
    fn sizes(range: &str) -> Vec<u64> {
        let num = |v: &str| -> u64 {
            match v.strip_suffix(['k', 'K']) {
                Some(n) => n.parse::<u64>().unwrap() << 10,
                None => match v.strip_suffix('M') {
                    Some(n) => n.parse::<u64>().unwrap() << 20,
                    None => v.parse().unwrap(),
                },
            }
        };
        let (lo, hi) = range.split_once(':').unwrap_or((range, range));
        let (lo, hi) = (num(lo), num(hi));
        (0..63)
            .map(|e| 1u64 << e)
            .filter(|s| (lo..=hi).contains(s))
            .collect()
    }

    fn covered(segs: &[Segment]) -> Vec<u64> {
        segs.iter().flat_map(|s| sizes(s.sizes)).collect()
    }

    #[test]
    fn every_size_exactly_once() {
        let pow = |lo: u32, hi: u32| (lo..=hi).map(|e| 1u64 << e).collect::<Vec<_>>();
        for b in [Bench::Bw, Bench::Bibw] {
            assert_eq!(covered(&segments(b, false)), pow(0, 22));
            assert_eq!(covered(&unlimited_segments(b, false)), pow(16, 22));
            assert_eq!(covered(&unlimited_segments(b, true)), pow(16, 22));
        }
        assert_eq!(covered(&segments(Bench::Latency, false)), pow(0, 16));
        assert!(unlimited_segments(Bench::Latency, false).is_empty());
    }

    #[test]
    fn bandwidth_iterations_carry_enough_bytes() {
        // From 128 KiB every timed iteration carries >= 8 MiB (the ack round trip < 1% at 4
        // rails), and from 4 KiB the untimed iterations >= 1 MiB (the tbf bursts spent).
        for s in segments(Bench::Bw, false) {
            for size in sizes(s.sizes) {
                let per_iteration = size * s.window as u64;
                if size >= 128 << 10 {
                    assert!(per_iteration >= 8 << 20, "{s:?} at {size}");
                    assert!(s.window >= 8, "{s:?}");
                }
                if size >= 4 << 10 {
                    assert!(
                        per_iteration * s.warmup as u64 >= 1 << 20,
                        "{s:?} at {size}"
                    );
                }
            }
        }
    }
}
