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
}

/// The segments of one benchmark. Bandwidth: a window of 64 (OSU) up to 512 KiB, with 100
/// iterations up to 4 KiB (fewer would let the 128 KiB tbf burst of each rail show as more than
/// the wire rate) and 10 or 3 above (bytes, not iterations, take the time); from 1 MiB a
/// window of 8 (8-32 MB in flight per iteration, still ~17 ms of wire time at 4 rails, so the
/// per-iteration ack costs <1%) — with 64 a single 4 MiB iteration would be 2.2 s on one rail
/// and the demo could not finish in 3 minutes.
pub fn segments(bench: Bench, quick: bool) -> Vec<Segment> {
    let seg = |sizes, iterations, warmup, window| Segment {
        sizes,
        iterations,
        warmup,
        window,
    };
    match (bench, quick) {
        (Bench::Latency, false) => vec![seg("1:64k", 100, 10, 1)],
        (Bench::Latency, true) => vec![seg("1:4k", 50, 5, 1)],
        (_, false) => vec![
            seg("1:4k", 100, 10, 64),
            seg("8k:64k", 10, 2, 64),
            seg("128k:512k", 3, 1, 64),
            seg("1M:4M", 3, 1, 8),
        ],
        (_, true) => vec![seg("1:64k", 3, 1, 16), seg("4M:4M", 2, 1, 4)],
    }
}

/// Runs of each latency segment; the report keeps the median per size.
pub fn repeats(bench: Bench) -> usize {
    if bench == Bench::Latency {
        3
    } else {
        1
    }
}

/// HX_RAILS for the first `rails` rails of the testbed: `r0,r1,..`.
pub fn rail_names(rails: u32) -> String {
    (0..rails)
        .map(|i| format!("r{i}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The arguments of `hxcomm` (the launcher, then the rank program, both `exe`) for one job.
pub fn job_args(
    mode: &Mode,
    exe: &str,
    policy: &str,
    rails: u32,
    bench: Bench,
    seg: &Segment,
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
    a.extend(["--sizes".into(), seg.sizes.into()]);
    a.extend(["--iterations".into(), seg.iterations.to_string()]);
    a.extend(["--warmup".into(), seg.warmup.to_string()]);
    if bench != Bench::Latency {
        a.extend(["--window".into(), seg.window.to_string()]);
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
        let seg = segments(Bench::Bw, false)[3];
        let a = job_args(&mode, "/x/hxcomm", "stripe", 2, Bench::Bw, &seg).join(" ");
        assert_eq!(
            a,
            "run -n 2 --net --name hxd --env HX_RAILS=r0,r1 --policy stripe --timeout 90 -- \
             /x/hxcomm bench bw --sizes 1M:4M --iterations 3 --warmup 1 --window 8 --json"
        );
    }

    #[test]
    fn loopback_job_line() {
        let seg = segments(Bench::Latency, false)[0];
        let a = job_args(&Mode::Loopback, "h", "bind", 4, Bench::Latency, &seg).join(" ");
        assert_eq!(
            a,
            "run -n 2 --env HX_LOOPBACK_RAILS=4 --env HX_TRANSPORTS=tcp --policy bind --timeout 90 -- \
             h bench latency --sizes 1:64k --iterations 100 --warmup 10 --json"
        );
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
}
