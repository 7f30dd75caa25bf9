//! Pure parts of `compare`: parsing the output of iperf3, sockperf, `hxcomm bench --json` and
//! bench/mpi_osu.c, the rail-rate arithmetic, and medians and ratios. No I/O, tested below.

use hx_testbed::spec::parse_rate;
use serde_json::Value;

/// What one iperf3 client (`-J`) reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Iperf {
    /// Receiver throughput of the client-to-server direction, MB/s (10^6 B/s).
    pub fwd_mb_per_s: f64,
    /// Receiver throughput of the server-to-client direction with `--bidir`.
    pub rev_mb_per_s: Option<f64>,
    /// Bytes received, both directions.
    pub bytes: f64,
    /// CPU seconds of client and server process (iperf3's own getrusage over the test).
    pub cpu_s: f64,
}

/// Parses iperf3's `-J` output (one client).
pub fn iperf3(json: &str) -> Result<Iperf, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("iperf3 -J output: {e}"))?;
    if let Some(err) = v.get("error").and_then(Value::as_str) {
        return Err(format!("iperf3: {err}"));
    }
    let end = v.get("end").ok_or("iperf3 -J output has no \"end\"")?;
    let num = |sec: &str, key: &str| {
        end.get(sec)
            .and_then(|s| s.get(key))
            .and_then(Value::as_f64)
    };
    let fwd_bps = num("sum_received", "bits_per_second")
        .ok_or("iperf3 -J output has no end.sum_received.bits_per_second")?;
    let mut bytes = num("sum_received", "bytes").unwrap_or(0.0);
    let rev_bps = num("sum_received_bidir_reverse", "bits_per_second");
    bytes += num("sum_received_bidir_reverse", "bytes").unwrap_or(0.0);
    let seconds = num("sum_sent", "seconds")
        .or_else(|| num("sum_received", "seconds"))
        .unwrap_or(0.0);
    let cpu = end.get("cpu_utilization_percent");
    let pct = |k: &str| {
        cpu.and_then(|c| c.get(k))
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
    };
    Ok(Iperf {
        fwd_mb_per_s: fwd_bps / 8e6,
        rev_mb_per_s: rev_bps.map(|b| b / 8e6),
        bytes,
        cpu_s: (pct("host_total") + pct("remote_total")) / 100.0 * seconds,
    })
}

/// sockperf ping-pong's figures, in microseconds (half the round trip, as sockperf reports).
#[derive(Debug, Clone, PartialEq)]
pub struct Sockperf {
    pub avg_us: f64,
    pub p50_us: Option<f64>,
}

/// Removes ANSI colour sequences (`ESC [ ... m`), which sockperf writes even into a pipe.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\x1b' && it.peek() == Some(&'[') {
            for d in it.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn number_after(s: &str, key: &str) -> Option<f64> {
    let i = s.find(key)? + key.len();
    let rest = s[i..].trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Parses `sockperf ping-pong` output: `avg-latency=6.693` (older: `avg-lat=`) and the
/// `percentile 50.000 = 6.589` line.
pub fn sockperf(out: &str) -> Result<Sockperf, String> {
    let out = strip_ansi(out);
    let avg = out
        .lines()
        .find_map(|l| number_after(l, "avg-latency=").or_else(|| number_after(l, "avg-lat=")))
        .ok_or_else(|| {
            format!(
                "no avg-latency in sockperf output: {}",
                out.lines().last().unwrap_or("")
            )
        })?;
    let p50 = out
        .lines()
        .find_map(|l| number_after(l, "percentile 50.000 ="));
    Ok(Sockperf {
        avg_us: avg,
        p50_us: p50,
    })
}

/// One line of bench/mpi_osu.c (`MPI_OSU bench=bw bytes=... mb_per_s=... usec=...`).
#[derive(Debug, Clone, PartialEq)]
pub struct MpiLine {
    pub bench: String,
    pub bytes: u64,
    pub mb_per_s: f64,
    pub usec: f64,
    pub cpu_s_per_gb: f64,
    pub hosts: (String, String),
}

/// All `MPI_OSU` lines of a run's output (other lines, e.g. launcher warnings, are skipped).
pub fn mpi_osu(out: &str) -> Result<Vec<MpiLine>, String> {
    let mut v = Vec::new();
    for line in out.lines() {
        let Some(rest) = line.trim().strip_prefix("MPI_OSU ") else {
            continue;
        };
        let get = |k: &str| {
            rest.split_whitespace()
                .find_map(|kv| kv.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
        };
        let f = |k: &str| -> Result<f64, String> {
            get(k)
                .and_then(|x| x.parse().ok())
                .ok_or_else(|| format!("mpi_osu line without a number {k}=: {line}"))
        };
        v.push(MpiLine {
            bench: get("bench").unwrap_or("").to_string(),
            bytes: f("bytes")? as u64,
            mb_per_s: f("mb_per_s")?,
            usec: f("usec")?,
            cpu_s_per_gb: f("cpu_s_per_gb")?,
            hosts: (
                get("host0").unwrap_or("").to_string(),
                get("host1").unwrap_or("").to_string(),
            ),
        });
    }
    if v.is_empty() {
        return Err("no MPI_OSU lines in the output".into());
    }
    Ok(v)
}

/// One line of `hxcomm bench ... --json`.
#[derive(Debug, Clone, PartialEq)]
pub struct HxLine {
    /// MB/s for bw and bibw, microseconds for latency.
    pub value: f64,
    pub cpu_s_per_gb: f64,
    pub rails: u64,
    pub policy: String,
}

/// The first line of `bench` in `hxcomm bench --json` output.
pub fn hx_json(out: &str, bench: &str) -> Result<HxLine, String> {
    for line in out.lines().filter(|l| l.trim_start().starts_with('{')) {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v.get("bench").and_then(Value::as_str) != Some(bench) {
            continue;
        }
        let value = v
            .get("mb_per_s")
            .or_else(|| v.get("usec"))
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("hxcomm bench line without mb_per_s/usec: {line}"))?;
        return Ok(HxLine {
            value,
            cpu_s_per_gb: v.get("cpu_s_per_gb").and_then(Value::as_f64).unwrap_or(0.0),
            rails: v.get("rails").and_then(Value::as_u64).unwrap_or(0),
            policy: v
                .get("policy")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        });
    }
    Err(format!("no {bench} line in hxcomm bench --json output"))
}

/// Nominal TCP-payload-free wire rate of each rail in MB/s (10^6 B/s) from a testbed `--rate`,
/// read by the testbed's own [`parse_rate`] so that this table and `hxcomm net up` agree (tc
/// units: `1gbit`, `100mbit`, `2.5gbit`, and `100mbps` = 100 megabytes/s); a comma list for
/// unequal rails; `None` for `none`. A list shorter than `rails` repeats its last entry, as a
/// single rate applies to all rails.
pub fn rail_rates(rate: &str, rails: usize) -> Result<Option<Vec<f64>>, String> {
    if rate.trim().eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let one = |s: &str| parse_rate(s.trim()).map(|bits| bits as f64 / 8e6);
    let list: Vec<f64> = rate
        .split(',')
        .map(one)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let last = *list.last().ok_or("empty --rate")?;
    Ok(Some(
        (0..rails)
            .map(|i| list.get(i).copied().unwrap_or(last))
            .collect(),
    ))
}

/// Parses `--rails 1,2,4`.
pub fn rail_counts(s: &str) -> Result<Vec<usize>, String> {
    let v: Vec<usize> = s
        .split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| (1..=64).contains(&n))
                .ok_or_else(|| format!("bad rail count {x:?} in --rails {s:?}"))
        })
        .collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err("--rails is empty".into());
    }
    Ok(v)
}

/// Median (mean of the two middle values for an even count); `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// `a / b` when both are known and `b > 0`.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// Timed iterations for a bandwidth test of `window` messages of `size` bytes that should last
/// about `secs` at `mb_per_s`: at least 2.
pub fn bw_iterations(secs: f64, mb_per_s: f64, size: usize, window: usize) -> u32 {
    let per_iter = (size * window) as f64 / 1e6;
    ((secs * mb_per_s / per_iter).round() as u32).max(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `end` of a real `iperf3 -c 10.10.0.2 -t 1 -J --bidir` on one 1 Gbit/s testbed rail
    /// (streams and intervals left out).
    const IPERF_BIDIR: &str = r#"{
 "start": {"test_start": {"protocol": "TCP", "num_streams": 1, "duration": 1, "reverse": 0}},
 "end": {
  "sum_sent": {"start": 0, "end": 1.00009, "seconds": 1.00009, "bytes": 122814464,
               "bits_per_second": 982427293.543581, "retransmits": 0, "sender": true},
  "sum_received": {"start": 0, "end": 1.004678, "seconds": 1.004678, "bytes": 119563376,
                   "bits_per_second": 952053302.6502024, "sender": true},
  "sum_sent_bidir_reverse": {"start": 0, "end": 1.00009, "seconds": 1.00009, "bytes": 121514800,
                             "bits_per_second": 972030917.2174505, "retransmits": 0, "sender": false},
  "sum_received_bidir_reverse": {"start": 0, "end": 1.004678, "seconds": 1.004678,
                                 "bytes": 119325424, "bits_per_second": 950158550.3016888,
                                 "sender": false},
  "cpu_utilization_percent": {"host_total": 1.5530618647132755, "host_user": 0.11529323846118494,
                              "host_system": 1.4376687187664223, "remote_total": 1.5074346537777439,
                              "remote_user": 0.016124424820864607,
                              "remote_system": 1.4912106954703306},
  "sender_tcp_congestion": "bbr", "receiver_tcp_congestion": "bbr"
 }
}"#;

    #[test]
    fn iperf3_bidir_and_one_way() {
        let r = iperf3(IPERF_BIDIR).unwrap();
        assert!((r.fwd_mb_per_s - 119.0067).abs() < 1e-3, "{r:?}");
        assert!((r.rev_mb_per_s.unwrap() - 118.7698).abs() < 1e-3);
        assert_eq!(r.bytes, 119563376.0 + 119325424.0);
        let cpu = (1.5530618647132755 + 1.5074346537777439) / 100.0 * 1.00009;
        assert!((r.cpu_s - cpu).abs() < 1e-12);
        // One way: no reverse section.
        let one_way = IPERF_BIDIR
            .replace("sum_received_bidir_reverse", "x_unused")
            .replace("sum_sent_bidir_reverse", "y_unused");
        let r = iperf3(&one_way).unwrap();
        assert_eq!(r.rev_mb_per_s, None);
        assert_eq!(r.bytes, 119563376.0);
    }

    #[test]
    fn iperf3_errors() {
        let e = iperf3(r#"{"start":{},"intervals":[],"end":{},"error":"unable to connect to server: Connection refused"}"#)
            .unwrap_err();
        assert!(e.contains("Connection refused"), "{e}");
        assert!(iperf3("not json").is_err());
        assert!(iperf3(r#"{"end":{}}"#).is_err());
    }

    const SOCKPERF: &str = "sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m
sockperf[CLIENT] send on:sockperf: using recvfrom() to block on socket(s)

[ 0] IP = 10.10.0.2       PORT = 11111 # TCP
sockperf: Warmup stage (sending a few dummy messages)...
sockperf: Starting test...
sockperf: Test end (interrupted by timer)
sockperf: Test ended
sockperf: [Total Run] RunTime=2.000 sec; Warm up time=400 msec; SentMessages=153437; ReceivedMessages=153436
sockperf: ========= Printing statistics for Server No: 0
sockperf: [Valid Duration] RunTime=1.550 sec; SentMessages=115710; ReceivedMessages=115710
sockperf: \x1b[2;35m====> avg-latency=6.693 (std-dev=5.299)\x1b[0m
sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0
sockperf: Summary: Latency is 6.693 usec
sockperf: \x1b[2;35mTotal 115710 observations\x1b[0m; each percentile contains 1157.10 observations
sockperf: ---> <MAX> observation =  871.371
sockperf: ---> percentile 99.999 =  870.591
sockperf: ---> percentile 90.000 =    6.924
sockperf: ---> percentile 50.000 =    6.589
sockperf: ---> percentile 25.000 =    6.434
sockperf: ---> <MIN> observation =    3.594
";

    #[test]
    fn sockperf_output() {
        let s = sockperf(SOCKPERF).unwrap();
        assert_eq!(s.avg_us, 6.693);
        assert_eq!(s.p50_us, Some(6.589));
        let old = sockperf("sockperf: ====> avg-lat=  5.012 (std-dev=1.1)\n").unwrap();
        assert_eq!(old.avg_us, 5.012);
        assert_eq!(old.p50_us, None);
        assert!(sockperf("sockperf: connection refused\n").is_err());
        assert_eq!(strip_ansi("a\x1b[2;35mb\x1b[0mc"), "abc");
    }

    #[test]
    fn mpi_lines() {
        let out = "Warning: Permanently added 'hxc1'\n\
            MPI_OSU bench=bw bytes=4194304 iterations=2 window=64 mb_per_s=239.05 usec=0.000 cpu_s=6.7098 cpu_s_per_gb=12.498 host0=vm host1=vm\n\
            MPI_OSU bench=latency bytes=8 iterations=10000 window=1 mb_per_s=0.00 usec=5.961 cpu_s=0.2625 cpu_s_per_gb=1640.438 host0=vm host1=vm\n";
        let v = mpi_osu(out).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].bench, "bw");
        assert_eq!(v[0].bytes, 4194304);
        assert_eq!(v[0].mb_per_s, 239.05);
        assert_eq!(v[0].cpu_s_per_gb, 12.498);
        assert_eq!(v[1].bench, "latency");
        assert_eq!(v[1].usec, 5.961);
        assert_eq!(v[1].hosts, ("vm".to_string(), "vm".to_string()));
        assert!(mpi_osu("mpirun: error\n").is_err());
        assert!(mpi_osu("MPI_OSU bench=bw bytes=8 mb_per_s=x usec=0 cpu_s_per_gb=0\n").is_err());
    }

    #[test]
    fn hx_lines() {
        let out = "{\"bench\":\"bw\",\"bytes\":4194304,\"cpu_s\":2.1,\"cpu_s_per_gb\":0.812,\"iterations\":9,\"mb_per_s\":477.8,\"policy\":\"adaptive\",\"rails\":4}\n";
        let h = hx_json(out, "bw").unwrap();
        assert_eq!(
            h,
            HxLine {
                value: 477.8,
                cpu_s_per_gb: 0.812,
                rails: 4,
                policy: "adaptive".into()
            }
        );
        assert!(hx_json(out, "bibw").is_err());
        let lat = hx_json(
            "{\"bench\":\"latency\",\"usec\":2.05,\"rails\":1}\n",
            "latency",
        )
        .unwrap();
        assert_eq!(lat.value, 2.05);
    }

    #[test]
    fn rates_and_rails() {
        assert_eq!(rail_rates("1gbit", 4).unwrap(), Some(vec![125.0; 4]));
        assert_eq!(
            rail_rates("1gbit,2gbit", 3).unwrap(),
            Some(vec![125.0, 250.0, 250.0])
        );
        assert_eq!(rail_rates("100Mbit", 1).unwrap(), Some(vec![12.5]));
        assert_eq!(rail_rates("2.5gbit", 1).unwrap(), Some(vec![312.5]));
        // tc's (and the testbed's) mbps is megabytes per second: 100mbps = 800 Mbit/s.
        assert_eq!(rail_rates("100mbps", 1).unwrap(), Some(vec![100.0]));
        assert_eq!(rail_rates("none", 4).unwrap(), None);
        assert!(rail_rates("fast", 1).is_err());
        assert_eq!(rail_counts("1,2, 4").unwrap(), vec![1, 2, 4]);
        assert!(rail_counts("0").is_err() && rail_counts("a").is_err());
    }

    #[test]
    fn medians_and_ratios() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 2.0]), Some(2.0));
        assert_eq!(
            ratio(Some(477.8), Some(478.0)).map(|r| (r * 1e4).round()),
            Some(9996.0)
        );
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
        assert_eq!(ratio(None, Some(1.0)), None);
        // 4 rails at 119.5 MB/s for ~5 s, 64 x 4 MiB per iteration: 478 MB/s * 5 s / 268 MB = 9.
        assert_eq!(bw_iterations(5.0, 478.0, 4 << 20, 64), 9);
        assert_eq!(bw_iterations(0.1, 119.5, 4 << 20, 64), 2);
    }
}
