//! Benchmark results: parsing `hxcomm bench --json` lines, and the summary math (wire limit,
//! multiples of one rail, half-bandwidth size).

use serde_json::Value;

/// One rail at 1 Gbit/s carries about 119.5 MB/s of TCP payload at MTU 1500 (1448 payload
/// bytes per 1514-byte frame on the wire; measured with iperf3 on the testbed).
pub const RAIL_MB_PER_S: f64 = 119.5;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Bench {
    Latency,
    Bw,
    Bibw,
}

impl Bench {
    pub const ALL: [Bench; 3] = [Bench::Latency, Bench::Bw, Bench::Bibw];

    pub fn name(self) -> &'static str {
        match self {
            Bench::Latency => "latency",
            Bench::Bw => "bw",
            Bench::Bibw => "bibw",
        }
    }

    /// The JSON field that carries the figure.
    fn field(self) -> &'static str {
        match self {
            Bench::Latency => "usec",
            _ => "mb_per_s",
        }
    }
}

/// One message size of one benchmark.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub bytes: u64,
    /// Microseconds (latency) or MB/s (bw, bibw; MB = 10^6 bytes).
    pub value: f64,
    pub cpu_s_per_gb: Option<f64>,
    /// Rails to the peer as the rank reported them.
    pub rails: Option<u64>,
    pub policy: Option<String>,
    /// Every run's figure at this size, in run order, when this point is their median
    /// ([`median_by_size`]); empty for a single parsed run.
    pub runs: Vec<f64>,
    /// With `--floor`: the plain TCP figure of the same process pair around this one (latency:
    /// a ping-pong, one-way us; bw, bibw: OSU's window, MB/s).
    pub floor: Option<f64>,
    /// Every run's floor, in the order of `runs`, when every run has one.
    pub floor_runs: Vec<f64>,
    /// Unlimited rails: a cache line's one-way time (ns) between the first two CPUs around the
    /// job (the longer of before and after), which says where the VM had put its CPUs
    /// (hx_testbed::cacheline).
    pub placement: Option<f64>,
    /// Every run's placement, in the order of `runs`, when every run has one.
    pub placement_runs: Vec<f64>,
}

/// Parses the `--json` output of one benchmark run: every line that is a JSON object with
/// `"bench": bench` gives a point; other lines (launcher messages) are ignored. A matching
/// line without a numeric figure is an error.
pub fn parse_lines(text: &str, bench: Bench) -> Result<Vec<Point>, String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with('{') {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["bench"].as_str() != Some(bench.name()) {
            continue;
        }
        let bytes = v["bytes"]
            .as_u64()
            .ok_or_else(|| format!("no \"bytes\" in {line}"))?;
        let value = v[bench.field()]
            .as_f64()
            .ok_or_else(|| format!("no \"{}\" in {line}", bench.field()))?;
        out.push(Point {
            bytes,
            value,
            cpu_s_per_gb: v["cpu_s_per_gb"].as_f64(),
            rails: v["rails"].as_u64(),
            policy: v["policy"].as_str().map(str::to_string),
            runs: vec![],
            floor: v[format!("floor_{}", bench.field())].as_f64(),
            floor_runs: vec![],
            placement: None,
            placement_runs: vec![],
        });
    }
    Ok(out)
}

/// Merges repeated runs of one benchmark: per message size, the run with the median figure
/// (the lower middle for an even count), in size order, with every run's figure in `runs`. One descheduled rank can turn a
/// 2 us ping-pong into 200 us for a whole run on a busy machine; the median of three runs
/// shows what the code does rather than what a neighbour did.
pub fn median_by_size(runs: &[Vec<Point>]) -> Vec<Point> {
    let mut sizes: Vec<u64> = runs.iter().flatten().map(|p| p.bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .into_iter()
        .filter_map(|b| {
            let mut at: Vec<&Point> = runs.iter().flatten().filter(|p| p.bytes == b).collect();
            let all: Vec<f64> = at.iter().map(|p| p.value).collect();
            let floors: Vec<f64> = at.iter().filter_map(|p| p.floor).collect();
            let floor_runs = if floors.len() == all.len() {
                floors
            } else {
                vec![]
            };
            let placements: Vec<f64> = at.iter().filter_map(|p| p.placement).collect();
            let placement_runs = if placements.len() == all.len() {
                placements
            } else {
                vec![]
            };
            at.sort_by(|x, y| x.value.total_cmp(&y.value));
            at.get((at.len().max(1) - 1) / 2).map(|p| Point {
                runs: all,
                floor_runs,
                placement_runs,
                ..(*p).clone()
            })
        })
        .collect()
}

/// The wire limit of a bandwidth benchmark over `rails` 1 Gbit/s rails (both directions for
/// bibw); none for latency.
pub fn wire_limit(bench: Bench, rails: u32) -> Option<f64> {
    match bench {
        Bench::Latency => None,
        Bench::Bw => Some(rails as f64 * RAIL_MB_PER_S),
        Bench::Bibw => Some(2.0 * rails as f64 * RAIL_MB_PER_S),
    }
}

/// The figure at exactly `bytes`.
pub fn at(points: &[Point], bytes: u64) -> Option<f64> {
    points.iter().find(|p| p.bytes == bytes).map(|p| p.value)
}

/// The highest bandwidth of a series.
pub fn peak(points: &[Point]) -> Option<f64> {
    points.iter().map(|p| p.value).reduce(f64::max)
}

/// The smallest message size that reaches half of the series' peak bandwidth.
pub fn half_bw_size(points: &[Point]) -> Option<u64> {
    let half = peak(points)? / 2.0;
    points
        .iter()
        .filter(|p| p.value >= half)
        .map(|p| p.bytes)
        .min()
}

/// `value` as a percentage of `limit`.
pub fn percent(value: f64, limit: f64) -> f64 {
    100.0 * value / limit
}

/// A size as the benchmarks print it: 512, 64K, 4M.
pub fn fmt_size(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{}M", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{}K", bytes >> 10)
    } else {
        bytes.to_string()
    }
}

/// The results of one configuration: a policy over a number of rails.
#[derive(Clone, Debug, Default)]
pub struct ConfigResult {
    pub policy: String,
    pub rails: u32,
    pub latency: Vec<Point>,
    pub bw: Vec<Point>,
    pub bibw: Vec<Point>,
    pub seconds: f64,
}

impl ConfigResult {
    pub fn series(&self, bench: Bench) -> &[Point] {
        match bench {
            Bench::Latency => &self.latency,
            Bench::Bw => &self.bw,
            Bench::Bibw => &self.bibw,
        }
    }

    pub fn series_mut(&mut self, bench: Bench) -> &mut Vec<Point> {
        match bench {
            Bench::Latency => &mut self.latency,
            Bench::Bw => &mut self.bw,
            Bench::Bibw => &mut self.bibw,
        }
    }
}

/// The sizes the summary table quotes.
pub const LATENCY_BYTES: u64 = 8;
pub const BW_BYTES: u64 = 4 << 20;

/// One figure of the summary: value, % of the wire limit, multiple of the same policy's
/// single-rail figure, half-bandwidth size.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Figure {
    pub value: Option<f64>,
    pub pct_wire: Option<f64>,
    pub x_one_rail: Option<f64>,
    pub half_bw: Option<u64>,
}

/// One row of the summary table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub policy: String,
    pub rails: u32,
    pub latency: Figure,
    pub bw: Figure,
    pub bibw: Figure,
}

/// The summary rows. `wire` says whether rails are 1 Gbit/s (testbed) so that wire-limit
/// percentages mean something.
pub fn summarize(results: &[ConfigResult], wire: bool) -> Vec<Row> {
    let figure = |r: &ConfigResult, bench: Bench| -> Figure {
        let bytes = if bench == Bench::Latency {
            LATENCY_BYTES
        } else {
            BW_BYTES
        };
        let value = at(r.series(bench), bytes);
        let one = results
            .iter()
            .find(|o| o.policy == r.policy && o.rails == 1)
            .and_then(|o| at(o.series(bench), bytes));
        Figure {
            value,
            pct_wire: match (value, wire_limit(bench, r.rails), wire) {
                (Some(v), Some(l), true) => Some(percent(v, l)),
                _ => None,
            },
            x_one_rail: match (value, one) {
                (Some(v), Some(o)) if o > 0.0 => Some(v / o),
                _ => None,
            },
            half_bw: if bench == Bench::Latency {
                None
            } else {
                half_bw_size(r.series(bench))
            },
        }
    };
    results
        .iter()
        .map(|r| Row {
            policy: r.policy.clone(),
            rails: r.rails,
            latency: figure(r, Bench::Latency),
            bw: figure(r, Bench::Bw),
            bibw: figure(r, Bench::Bibw),
        })
        .collect()
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

fn opt_size(v: Option<u64>) -> String {
    v.map_or("-".into(), fmt_size)
}

/// The header and cells of the summary table.
pub fn table_cells(rows: &[Row]) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let header = vec![
        "policy",
        "rails",
        "lat 8B us",
        "x1",
        "bw 4M MB/s",
        "% wire",
        "x1",
        "half-bw",
        "bibw 4M MB/s",
        "% wire",
        "x1",
        "half-bw",
    ];
    let cells = rows
        .iter()
        .map(|r| {
            vec![
                r.policy.clone(),
                r.rails.to_string(),
                opt(r.latency.value, 2),
                opt(r.latency.x_one_rail, 2),
                opt(r.bw.value, 1),
                opt(r.bw.pct_wire, 1),
                opt(r.bw.x_one_rail, 2),
                opt_size(r.bw.half_bw),
                opt(r.bibw.value, 1),
                opt(r.bibw.pct_wire, 1),
                opt(r.bibw.x_one_rail, 2),
                opt_size(r.bibw.half_bw),
            ]
        })
        .collect();
    (header, cells)
}

/// The table for a terminal, columns aligned.
pub fn format_text(rows: &[Row]) -> String {
    let (header, cells) = table_cells(rows);
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &cells {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let line = |items: Vec<&str>| -> String {
        items
            .iter()
            .zip(&width)
            .enumerate()
            .map(|(i, (c, w))| {
                if i == 0 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(header.clone()) + "\n";
    for row in &cells {
        out += &line(row.iter().map(String::as_str).collect());
        out += "\n";
    }
    out
}

/// The table in Markdown.
pub fn format_markdown(rows: &[Row]) -> String {
    let (header, cells) = table_cells(rows);
    let mut out = format!("| {} |\n", header.join(" | "));
    out += &format!(
        "|{}\n",
        header
            .iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { "---|" } else { "---:|" })
            .collect::<String>()
    );
    for row in &cells {
        out += &format!("| {} |\n", row.join(" | "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(bytes: u64, value: f64) -> Point {
        Point {
            bytes,
            value,
            cpu_s_per_gb: None,
            rails: None,
            policy: None,
            runs: vec![],
            floor: None,
            floor_runs: vec![],
            placement: None,
            placement_runs: vec![],
        }
    }

    #[test]
    fn parses_bench_json_lines_and_skips_the_rest() {
        let text = r#"hxcomm run: something
{"bench":"bw","bytes":4194304,"mb_per_s":477.8,"rails":4,"policy":"adaptive","cpu_s_per_gb":3.7}
{"bench":"latency","bytes":8,"usec":1.84,"rails":4,"policy":"adaptive"}
{"bench":"bw","bytes":1,"mb_per_s":0.59,"rails":4,"policy":"adaptive"}
not json {"bench":"bw"}
{broken
"#;
        let bw = parse_lines(text, Bench::Bw).unwrap();
        assert_eq!(bw.len(), 2);
        assert_eq!(bw[0].bytes, 4194304);
        assert_eq!(bw[0].value, 477.8);
        assert_eq!(bw[0].cpu_s_per_gb, Some(3.7));
        assert_eq!(bw[0].rails, Some(4));
        assert_eq!(bw[0].policy.as_deref(), Some("adaptive"));
        let lat = parse_lines(text, Bench::Latency).unwrap();
        assert_eq!(
            lat,
            vec![Point {
                rails: Some(4),
                policy: Some("adaptive".into()),
                ..pt(8, 1.84)
            }]
        );
        assert!(parse_lines(text, Bench::Bibw).unwrap().is_empty());
        assert!(parse_lines(r#"{"bench":"bw","bytes":1}"#, Bench::Bw).is_err());
        assert!(parse_lines(r#"{"bench":"bw","mb_per_s":1.0}"#, Bench::Bw).is_err());
    }

    #[test]
    fn median_of_repeated_runs_per_size() {
        let runs = vec![
            vec![pt(8, 2.0), pt(16, 200.0)],
            vec![pt(8, 190.0), pt(16, 2.2)],
            vec![pt(8, 2.1), pt(16, 2.1), pt(32, 5.0)],
        ];
        let m = median_by_size(&runs);
        let values: Vec<(u64, f64)> = m.iter().map(|p| (p.bytes, p.value)).collect();
        assert_eq!(values, vec![(8, 2.1), (16, 2.2), (32, 5.0)]);
        assert_eq!(m[0].runs, vec![2.0, 190.0, 2.1]);
        assert_eq!(m[2].runs, vec![5.0]);
        let m = median_by_size(&[vec![pt(1, 3.0)], vec![pt(1, 1.0)]]);
        assert_eq!((m[0].value, &m[0].runs), (1.0, &vec![3.0, 1.0]));
        assert!(median_by_size(&[]).is_empty());
    }

    #[test]
    fn floors_follow_their_runs() {
        let text = r#"{"bench":"latency","bytes":8,"usec":4.55,"floor_usec":4.0,"floor_before_usec":4.03}"#;
        let p = parse_lines(text, Bench::Latency).unwrap();
        assert_eq!(p[0].floor, Some(4.0));
        let text = r#"{"bench":"bw","bytes":64,"mb_per_s":10.1,"floor_mb_per_s":11.2}"#;
        assert_eq!(parse_lines(text, Bench::Bw).unwrap()[0].floor, Some(11.2));
        let f = |v: f64, floor: Option<f64>| Point { floor, ..pt(8, v) };
        let m = median_by_size(&[
            vec![f(7.3, Some(6.6))],
            vec![f(4.4, Some(3.9))],
            vec![f(5.5, Some(5.0))],
        ]);
        assert_eq!((m[0].value, m[0].floor), (5.5, Some(5.0)));
        assert_eq!(m[0].floor_runs, vec![6.6, 3.9, 5.0]);
        // A run without a floor: no floors at all, rather than floors out of step with runs.
        let m = median_by_size(&[vec![f(7.3, Some(6.6))], vec![f(4.4, None)]]);
        assert!(m[0].floor_runs.is_empty());
    }

    #[test]
    fn placements_follow_their_runs() {
        let f = |v: f64, placement: Option<f64>| Point {
            placement,
            ..pt(4 << 20, v)
        };
        let m = median_by_size(&[vec![f(8100.0, Some(52.0))], vec![f(2100.0, Some(240.0))]]);
        assert_eq!(m[0].placement_runs, vec![52.0, 240.0]);
        let m = median_by_size(&[vec![f(8100.0, Some(52.0))], vec![f(2100.0, None)]]);
        assert!(m[0].placement_runs.is_empty());
    }

    #[test]
    fn wire_limits_and_percentages() {
        assert_eq!(wire_limit(Bench::Bw, 4), Some(478.0));
        assert_eq!(wire_limit(Bench::Bibw, 4), Some(956.0));
        assert_eq!(wire_limit(Bench::Bw, 1), Some(119.5));
        assert_eq!(wire_limit(Bench::Latency, 4), None);
        assert!((percent(477.8, 478.0) - 99.958).abs() < 1e-3);
    }

    #[test]
    fn half_bandwidth_size_is_the_smallest_reaching_half_the_peak() {
        let s = vec![
            pt(1, 1.0),
            pt(2, 50.0),
            pt(4, 240.0),
            pt(8, 400.0),
            pt(16, 480.0),
            pt(32, 470.0),
        ];
        assert_eq!(peak(&s), Some(480.0));
        assert_eq!(half_bw_size(&s), Some(4));
        // A dip after reaching half does not move it.
        let s = vec![pt(1, 300.0), pt(2, 100.0), pt(4, 600.0)];
        assert_eq!(half_bw_size(&s), Some(1));
        assert_eq!(half_bw_size(&[]), None);
    }

    #[test]
    fn sizes_print_like_the_benchmarks() {
        assert_eq!(fmt_size(512), "512");
        assert_eq!(fmt_size(65536), "64K");
        assert_eq!(fmt_size(4 << 20), "4M");
        assert_eq!(fmt_size(1536), "1536");
    }

    fn config(policy: &str, rails: u32, lat: f64, bw: f64, bibw: f64) -> ConfigResult {
        ConfigResult {
            policy: policy.into(),
            rails,
            latency: vec![pt(8, lat)],
            bw: vec![pt(1 << 20, bw / 2.0), pt(BW_BYTES, bw)],
            bibw: vec![pt(1 << 20, bibw / 4.0), pt(BW_BYTES, bibw)],
            seconds: 1.0,
        }
    }

    #[test]
    fn summary_rows_relate_to_the_wire_and_to_one_rail() {
        let results = vec![
            config("stripe", 1, 2.0, 119.0, 230.0),
            config("stripe", 4, 2.2, 476.0, 920.0),
            config("bind", 4, 1.9, 119.0, 238.0),
        ];
        let rows = summarize(&results, true);
        let r = &rows[1];
        assert_eq!((r.policy.as_str(), r.rails), ("stripe", 4));
        assert!((r.bw.pct_wire.unwrap() - 100.0 * 476.0 / 478.0).abs() < 1e-9);
        assert!((r.bw.x_one_rail.unwrap() - 4.0).abs() < 1e-9);
        assert!((r.bibw.pct_wire.unwrap() - 100.0 * 920.0 / 956.0).abs() < 1e-9);
        assert!((r.latency.x_one_rail.unwrap() - 1.1).abs() < 1e-9);
        assert_eq!(r.latency.pct_wire, None);
        assert_eq!(r.bw.half_bw, Some(1 << 20));
        assert_eq!(r.bibw.half_bw, Some(BW_BYTES));
        // bind has no single-rail row here: no multiple.
        assert_eq!(rows[2].bw.x_one_rail, None);
        // Loopback: no wire, no percentages.
        assert_eq!(summarize(&results, false)[1].bw.pct_wire, None);
        let text = format_text(&rows);
        assert_eq!(text.lines().count(), 4);
        assert!(text.lines().nth(2).unwrap().starts_with("stripe"));
        assert!(text.contains("99.6"), "{text}");
        let md = format_markdown(&rows);
        assert_eq!(md.lines().count(), 5);
        assert!(md.lines().all(|l| l.starts_with('|') && l.ends_with('|')));
    }
}
