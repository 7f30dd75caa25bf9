//! The report directory: results.json, summary.md/.txt and SVG plots.

use std::path::Path;

use serde_json::{json, Value};

use crate::plan::{
    segments, unlimited_segments, Mode, Segment, POLICIES, RAIL_COUNTS, UNLIMITED_BENCHES,
    UNLIMITED_RAIL_COUNTS,
};
use crate::results::{self, Bench, ConfigResult, Row, RAIL_MB_PER_S};
use crate::svg::{self, Panel, Plot, Reference, Series};
use crate::verdict::{self, Bar, Group};

/// What every file of the report says about the run itself.
pub struct Run<'a> {
    pub mode: &'a Mode,
    pub load: &'a str,
    pub load_end: &'a str,
    pub quick: bool,
    /// Runs of every segment (the median kept).
    pub runs: usize,
    pub date: &'a str,
    pub seconds: f64,
}

/// The basis of the wire-limit percentages, as printed and recorded.
pub const WIRE_BASIS: &str = "wire limit = R x 119.5 MB/s (bibw: 2 x R x 119.5): TCP payload of one 1 Gbit/s rail at MTU 1500 (1448 of every 1514 bytes on the wire; iperf3 measures the same on this testbed)";

/// Date and time (UTC) as 2026-11-22T10:30:00Z.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    utc(secs)
}

/// Seconds since the epoch as an ISO 8601 UTC time (civil-from-days, H. Hinnant).
pub fn utc(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn points_json(bench: Bench, r: &ConfigResult, wire: bool) -> Value {
    let limit = results::wire_limit(bench, r.rails).filter(|_| wire);
    r.series(bench)
        .iter()
        .map(|p| {
            let mut v = json!({ "bytes": p.bytes, "cpu_s_per_gb": p.cpu_s_per_gb });
            if !p.runs.is_empty() {
                v["runs"] = json!(p.runs);
            }
            if let Some(f) = p.floor {
                v["floor"] = json!(f);
            }
            if !p.floor_runs.is_empty() {
                v["floor_runs"] = json!(p.floor_runs);
            }
            if !p.placement_runs.is_empty() {
                v["cache_line_ns_runs"] = json!(p.placement_runs);
            }
            if bench == Bench::Latency {
                v["usec"] = json!(p.value);
            } else {
                v["mb_per_s"] = json!(p.value);
                if let Some(l) = limit {
                    v["pct_wire"] = json!((results::percent(p.value, l) * 100.0).round() / 100.0);
                }
            }
            v
        })
        .collect()
}

fn figure_json(f: &results::Figure) -> Value {
    json!({"value": f.value, "pct_wire": f.pct_wire, "x_one_rail": f.x_one_rail,
           "half_bw_bytes": f.half_bw})
}

fn plan_json(benches: &[Bench], segs: &dyn Fn(Bench) -> Vec<Segment>, runs: usize) -> Value {
    benches
        .iter()
        .map(|b| {
            let segs: Vec<Value> = segs(*b)
                .iter()
                .map(|s| {
                    json!({"sizes": s.sizes, "iterations": s.iterations, "warmup": s.warmup,
                           "warmup_first": s.warmup_first, "window": s.window,
                           "runs_median_of": runs})
                })
                .collect();
            (b.name().to_string(), Value::from(segs))
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn config_json(r: &ConfigResult, wire: bool) -> Value {
    json!({
        "policy": r.policy, "rails": r.rails, "seconds": (r.seconds * 100.0).round() / 100.0,
        "latency": points_json(Bench::Latency, r, wire),
        "bw": points_json(Bench::Bw, r, wire),
        "bibw": points_json(Bench::Bibw, r, wire),
        "half_bw_bytes": {"bw": results::half_bw_size(&r.bw), "bibw": results::half_bw_size(&r.bibw)},
        "peak_mb_per_s": {"bw": results::peak(&r.bw), "bibw": results::peak(&r.bibw)},
    })
}

/// The whole run as one JSON document: the 1 Gbit/s (or loopback) configurations with their
/// summary, the unlimited-rail configurations (empty when that part did not run), and the
/// verdicts of both.
pub fn results_json(
    run: &Run,
    configs: &[ConfigResult],
    rows: &[Row],
    unlimited: &[ConfigResult],
    groups: &[Group],
    bars: &[Bar],
) -> Value {
    let wire = matches!(run.mode, Mode::Testbed { .. });
    let quick = run.quick;
    json!({
        "tool": "hxcomm demo",
        "date": run.date,
        "load_average_at_start": run.load,
        "load_average_at_end": run.load_end,
        "mode": match run.mode { Mode::Testbed { .. } => "testbed", Mode::Loopback => "loopback" },
        "testbed": match run.mode {
            Mode::Testbed { name } => json!({"name": name, "hosts": 2, "rails": 4, "rate": "1gbit", "mtu": 1500}),
            Mode::Loopback => Value::Null,
        },
        "wire_limit": if wire { json!({"mb_per_s_per_rail": RAIL_MB_PER_S, "basis": WIRE_BASIS}) } else { Value::Null },
        "units": {"latency": "usec (half round trip)", "bw": "MB/s (10^6 bytes)", "bibw": "MB/s, both directions summed"},
        "runs": run.runs,
        "plan": plan_json(&Bench::ALL, &|b| segments(b, quick), run.runs),
        "seconds": (run.seconds * 10.0).round() / 10.0,
        "configs": configs.iter().map(|r| config_json(r, wire)).collect::<Vec<_>>(),
        "summary": rows.iter().map(|r| json!({
            "policy": r.policy, "rails": r.rails,
            "latency_8b": figure_json(&r.latency), "bw_4m": figure_json(&r.bw), "bibw_4m": figure_json(&r.bibw),
        })).collect::<Vec<_>>(),
        "unlimited": if unlimited.is_empty() { Value::Null } else { json!({
            "testbed": match run.mode {
                Mode::Testbed { name } => json!({"name": name, "hosts": 2, "rails": 4, "rate": "none", "mtu": 1500}),
                Mode::Loopback => Value::Null,
            },
            "plan": plan_json(&UNLIMITED_BENCHES, &|b| unlimited_segments(b, quick), run.runs),
            "configs": unlimited.iter().map(|r| config_json(r, false)).collect::<Vec<_>>(),
        })},
        "verdicts": verdict::to_json(groups, bars),
    })
}

/// summary.md: what ran, the summary table, and the verdicts.
pub fn summary_markdown(
    run: &Run,
    what: &str,
    table_md: &str,
    wire: bool,
    verdicts_md: &str,
    bars: &[Bar],
) -> String {
    let mut out = format!(
        "# hxcomm demo, {} ({what}; {} run{} per segment, medians; {:.0} s; load average {} at start, {} at the end)\n\n",
        run.date,
        run.runs,
        if run.runs == 1 { "" } else { "s" },
        run.seconds,
        run.load,
        run.load_end
    );
    out += "Latency at 8 B, bandwidth at 4 MiB; x1 = multiple of the same policy on 1 rail; half-bw = smallest message size reaching half of that configuration's peak bandwidth.\n\n";
    out += table_md;
    if wire {
        out += &format!("\n{WIRE_BASIS}.\n");
    }
    out += &format!("\n## Verdicts\n\n{}.\n\n", verdict::RULE);
    out += verdicts_md;
    out += "\n";
    for b in bars {
        out += &format!("- {}\n", b.line());
    }
    out
}

/// summary.txt: the summary table and the verdicts as the terminal shows them.
pub fn summary_text(table: &str, wire: bool, verdicts: &str, bars: &[Bar]) -> String {
    let mut out = table.to_string();
    if wire {
        out += &format!("{WIRE_BASIS}\n");
    }
    out += &format!("\nVerdicts ({}):\n{verdicts}", verdict::RULE);
    for b in bars {
        out += &format!("{}\n", b.line());
    }
    out
}

fn series_of(r: &ConfigResult, bench: Bench, label: String) -> Series {
    Series {
        label,
        points: r.series(bench).iter().map(|p| (p.bytes, p.value)).collect(),
    }
}

fn rails_label(n: u32) -> String {
    if n == 1 {
        "1 rail".into()
    } else {
        format!("{n} rails")
    }
}

/// The plots: for bw and bibw, one panel per policy (a line per rail count) and one panel per
/// rail count (a line per policy); latency, one panel per rail count. File name and plot.
pub fn plots(configs: &[ConfigResult], wire: bool, what: &str) -> Vec<(String, Plot)> {
    let find = |p: &str, n: u32| configs.iter().find(|c| c.policy == p && c.rails == n);
    let mut out = Vec::new();
    for bench in [Bench::Bw, Bench::Bibw] {
        let limit = |n: u32| -> Vec<Reference> {
            match results::wire_limit(bench, n) {
                Some(v) if wire => vec![Reference {
                    label: format!("wire limit, {}: {v:.0} MB/s", rails_label(n)),
                    value: v,
                }],
                _ => vec![],
            }
        };
        let y_label = if bench == Bench::Bw {
            "bandwidth (MB/s)"
        } else {
            "bandwidth, both directions (MB/s)"
        };
        let by_policy = POLICIES
            .iter()
            .map(|p| Panel {
                title: format!("policy {p}"),
                series: RAIL_COUNTS
                    .iter()
                    .filter_map(|&n| find(p, n).map(|c| series_of(c, bench, rails_label(n))))
                    .collect(),
                references: RAIL_COUNTS.iter().flat_map(|&n| limit(n)).collect(),
            })
            .collect();
        out.push((
            format!("{}-by-policy.svg", bench.name()),
            Plot {
                title: format!("hxcomm {} by policy ({what})", bench.name()),
                y_label: y_label.into(),
                log_y: false,
                panels: by_policy,
            },
        ));
        let by_rails = RAIL_COUNTS
            .iter()
            .map(|&n| Panel {
                title: rails_label(n),
                series: POLICIES
                    .iter()
                    .filter_map(|p| find(p, n).map(|c| series_of(c, bench, p.to_string())))
                    .collect(),
                references: limit(n),
            })
            .collect();
        out.push((
            format!("{}-by-rails.svg", bench.name()),
            Plot {
                title: format!("hxcomm {} by rail count ({what})", bench.name()),
                y_label: y_label.into(),
                log_y: false,
                panels: by_rails,
            },
        ));
    }
    let latency = RAIL_COUNTS
        .iter()
        .map(|&n| Panel {
            title: rails_label(n),
            series: POLICIES
                .iter()
                .filter_map(|p| find(p, n).map(|c| series_of(c, Bench::Latency, p.to_string())))
                .collect(),
            references: vec![],
        })
        .collect();
    out.push((
        "latency.svg".into(),
        Plot {
            title: format!("hxcomm latency ({what})"),
            y_label: "latency (us, log10)".into(),
            log_y: true,
            panels: latency,
        },
    ));
    out
}

/// The unlimited-rail part: one panel per benchmark and rail count, a line per policy.
pub fn unlimited_plots(unlimited: &[ConfigResult]) -> Vec<(String, Plot)> {
    if unlimited.is_empty() {
        return vec![];
    }
    let panels = UNLIMITED_BENCHES
        .iter()
        .flat_map(|&bench| {
            UNLIMITED_RAIL_COUNTS.iter().map(move |&n| Panel {
                title: format!("{}, {}", bench.name(), rails_label(n)),
                series: POLICIES
                    .iter()
                    .filter_map(|p| {
                        unlimited
                            .iter()
                            .find(|c| c.policy == *p && c.rails == n)
                            .map(|c| series_of(c, bench, p.to_string()))
                    })
                    .collect(),
                references: vec![],
            })
        })
        .collect();
    vec![(
        "unlimited-by-rails.svg".into(),
        Plot {
            title: "hxcomm bw and bibw on rails without a rate limit (testbed, --rate none)".into(),
            y_label: "bandwidth (MB/s; bibw: both directions)".into(),
            log_y: false,
            panels,
        },
    )]
}

/// Writes every file of the report into `dir`; returns the file names.
pub fn write(
    dir: &Path,
    json: &Value,
    summary_text: &str,
    summary_md: &str,
    plots: &[(String, Plot)],
) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut files: Vec<(String, String)> = vec![
        (
            "results.json".into(),
            serde_json::to_string_pretty(json).unwrap_or_default() + "\n",
        ),
        ("summary.txt".into(), summary_text.to_string()),
        ("summary.md".into(), summary_md.to_string()),
    ];
    for (name, plot) in plots {
        files.push((name.clone(), svg::render(plot)));
    }
    for (name, body) in &files {
        let p = dir.join(name);
        std::fs::write(&p, body).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    Ok(files.into_iter().map(|(n, _)| n).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Point;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951782400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1795350896), "2026-11-22T12:34:56Z");
    }

    fn cfg(policy: &str, rails: u32) -> ConfigResult {
        let pts = |scale: f64| -> Vec<Point> {
            (0..=22)
                .map(|e| Point {
                    bytes: 1 << e,
                    value: scale * (e + 1) as f64,
                    cpu_s_per_gb: Some(1.0),
                    rails: Some(rails as u64),
                    policy: Some(policy.into()),
                    runs: vec![],
                    floor: None,
                    floor_runs: vec![],
                    placement: None,
                    placement_runs: vec![],
                })
                .collect()
        };
        ConfigResult {
            policy: policy.into(),
            rails,
            latency: pts(0.1),
            bw: pts(rails as f64),
            bibw: pts(2.0 * rails as f64),
            seconds: 1.0,
        }
    }

    #[test]
    fn report_files_and_plots_have_every_series() {
        let configs: Vec<ConfigResult> = POLICIES
            .iter()
            .flat_map(|p| RAIL_COUNTS.iter().map(move |&n| cfg(p, n)))
            .collect();
        let ps = plots(&configs, true, "testbed");
        assert_eq!(ps.len(), 5);
        let (name, plot) = &ps[0];
        assert_eq!(name, "bw-by-policy.svg");
        let svg = svg::render(plot);
        assert_eq!(svg.matches("<polyline class=\"series\"").count(), 12);
        assert_eq!(svg.matches("data-label=\"4 rails\"").count(), 4);
        assert!(svg.contains("wire limit, 4 rails: 478 MB/s"));
        let svg = svg::render(&ps[3].1);
        assert_eq!(ps[3].0, "bibw-by-rails.svg");
        assert_eq!(svg.matches("data-label=\"adaptive\"").count(), 3);
        assert!(svg.contains("wire limit, 2 rails: 478 MB/s"));
        // Loopback: no wire-limit lines.
        assert!(!svg::render(&plots(&configs, false, "loopback")[0].1).contains("wire limit"));

        let rows = results::summarize(&configs, true);
        let unlimited: Vec<ConfigResult> = POLICIES
            .iter()
            .flat_map(|p| UNLIMITED_RAIL_COUNTS.iter().map(move |&n| cfg(p, n)))
            .collect();
        let mut groups = verdict::groups("1gbit", &configs, &Bench::ALL);
        groups.extend(verdict::groups("unlimited", &unlimited, &UNLIMITED_BENCHES));
        assert_eq!(groups.len(), 9 + 4);
        let bars = vec![verdict::bar("b", &groups, "1gbit", &[2, 4])];
        let mode = Mode::Testbed { name: "hxd".into() };
        let run = Run {
            mode: &mode,
            load: "0.00 0.00 0.00",
            load_end: "0.10 0.00 0.00",
            quick: false,
            runs: 3,
            date: "d",
            seconds: 1.0,
        };
        let j = results_json(&run, &configs, &rows, &unlimited, &groups, &bars);
        assert_eq!(j["configs"].as_array().unwrap().len(), 12);
        assert_eq!(j["configs"][0]["bw"][22]["bytes"], 4 << 20);
        assert!(j["configs"][0]["bw"][22]["pct_wire"].as_f64().is_some());
        assert_eq!(
            j["plan"]["bw"].as_array().unwrap().len(),
            segments(Bench::Bw, false).len()
        );
        assert_eq!(j["plan"]["latency"][0]["runs_median_of"], 3);
        assert_eq!(j["mode"], "testbed");
        assert_eq!(j["unlimited"]["testbed"]["rate"], "none");
        assert_eq!(j["unlimited"]["configs"].as_array().unwrap().len(), 8);
        assert!(j["unlimited"]["configs"][0]["bw"][22]["pct_wire"].is_null());
        assert_eq!(j["verdicts"]["groups"].as_array().unwrap().len(), 13);
        assert_eq!(j["verdicts"]["groups"][9]["part"], "unlimited");
        // Without the second part there is no "unlimited" section.
        let j0 = results_json(&run, &configs, &rows, &[], &groups[..9], &bars);
        assert!(j0["unlimited"].is_null());
        let up = unlimited_plots(&unlimited);
        assert_eq!(up.len(), 1);
        let svg = svg::render(&up[0].1);
        assert_eq!(svg.matches("<polyline class=\"series\"").count(), 16);
        assert!(unlimited_plots(&[]).is_empty());

        let vmd = verdict::format_markdown(&groups);
        let md = summary_markdown(&run, "testbed", "|t|\n", true, &vmd, &bars);
        assert!(md.starts_with("# hxcomm demo, d (testbed; 3 runs per segment"));
        assert!(md.contains("## Verdicts"));
        assert!(md.contains("| unlimited | 4 | bibw |"), "{md}");
        let txt = summary_text("t\n", true, "v\n", &bars);
        assert!(txt.contains("Verdicts ("));

        let dir = std::env::temp_dir().join(format!("hxdemo-report-{}", std::process::id()));
        let files = write(&dir, &j, "t", &md, &ps).unwrap();
        assert!(files.contains(&"results.json".to_string()));
        for f in &files {
            assert!(dir.join(f).metadata().unwrap().len() > 0);
        }
        let back: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap())
                .unwrap();
        // (Compared field by field: floats may differ in the last bit after a round trip.)
        assert_eq!(back["configs"].as_array().map(Vec::len), Some(12));
        assert_eq!(back["summary"][11]["policy"], "adaptive");
        assert_eq!(back["configs"][11]["bw"][22]["mb_per_s"], 92.0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
