//! `hxcomm demo`: the project's main job in one command. As root it brings up a 2-host, 4-rail,
//! 1 Gbit/s testbed (`hxd`), runs latency, bw and bibw for every policy over 1, 2 and 4 rails,
//! prints a summary against the wire limit and the single-rail figure, writes JSON and SVG plots
//! into `./hxcomm-report/`, and takes the testbed down, also on error or Ctrl-C. Without root it
//! does the same over loopback rails on this host.

pub mod job;
pub mod lock;
pub mod plan;
pub mod report;
pub mod results;
pub mod svg;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use hx_testbed::proc;

use plan::{Mode, POLICIES, RAIL_COUNTS};
use results::{Bench, ConfigResult};

/// Arguments of `hxcomm demo`.
#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Directory for results.json, summary.md and the SVG plots.
    #[arg(long, default_value = "hxcomm-report")]
    pub out: PathBuf,
    /// Run on loopback rails even as root.
    #[arg(long)]
    pub loopback: bool,
    /// Name of the demo's own testbed (namespaces NAME0, NAME1).
    #[arg(long, default_value = "hxd")]
    pub name: String,
    /// Fewer sizes and iterations (a smoke test, not a measurement).
    #[arg(long)]
    pub quick: bool,
}

/// Runs the demo; returns the process exit code (130 when stopped by a signal).
pub fn run(args: DemoArgs) -> i32 {
    proc::catch_signals(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP]);
    match demo(&args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hxcomm demo: {e}");
            if proc::interrupted().is_some() {
                130
            } else {
                1
            }
        }
    }
}

/// The three load averages from /proc/loadavg ("" if unreadable).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn have_ip() -> bool {
    std::process::Command::new("ip")
        .arg("-V")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Namespaces of testbed `name` that still exist (`NAME<digits>`, `NAMEsw`).
pub fn leftover_namespaces(name: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            n.strip_prefix(name).is_some_and(|rest| {
                rest == "sw" || (!rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()))
            })
        })
        .collect()
}

/// A copy of the running executable (/proc/self/exe) in a private directory, removed on drop.
struct ExeCopy {
    dir: PathBuf,
    path: PathBuf,
}

impl ExeCopy {
    fn new() -> Result<ExeCopy, String> {
        let dir = std::env::temp_dir().join(format!("hxcomm-demo-{}", std::process::id()));
        let path = dir.join("hxcomm");
        let copy = || -> std::io::Result<()> {
            std::fs::create_dir_all(&dir)?;
            std::fs::copy("/proc/self/exe", &path)?;
            Ok(())
        };
        match copy() {
            Ok(()) => Ok(ExeCopy { dir, path }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                // No /proc or no room: fall back to the binary's path.
                let path = std::env::current_exe().map_err(|e2| {
                    format!("cannot copy the hxcomm binary ({e}) nor find it ({e2})")
                })?;
                Ok(ExeCopy {
                    dir: PathBuf::new(),
                    path,
                })
            }
        }
    }
}

impl Drop for ExeCopy {
    fn drop(&mut self) {
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn demo(args: &DemoArgs) -> Result<(), String> {
    let t0 = Instant::now();
    // Every job runs a private copy of this very binary: a `cargo build` in the same tree
    // during the demo replaces target/release/hxcomm, and a measurement must not mix builds.
    let exe_copy = ExeCopy::new()?;
    let exe = exe_copy.path.to_string_lossy().into_owned();
    let _lock = lock::BenchLock::acquire(Path::new(lock::BENCH_LOCK), &|| {
        proc::interrupted().is_some()
    })?;
    let root = hx_testbed::is_root();
    let mode = if root && !args.loopback && have_ip() {
        hx_testbed::spec::validate_name(&args.name).map_err(|e| e.to_string())?;
        Mode::Testbed {
            name: args.name.clone(),
        }
    } else {
        Mode::Loopback
    };
    let what = match &mode {
        Mode::Testbed { name } => {
            println!(
                "hxcomm demo: testbed {name}: 2 hosts ({name}0, {name}1) x 4 rails at 1 Gbit/s, MTU 1500; \
                 ranks 0 and 1 on different hosts"
            );
            "testbed, 1 Gbit/s rails"
        }
        Mode::Loopback => {
            let why = if args.loopback {
                "--loopback given"
            } else if !root {
                "not root, so no network namespaces"
            } else {
                "no `ip` command"
            };
            println!(
                "hxcomm demo: {why}: running on loopback rails on this host (HX_LOOPBACK_RAILS=1,2,4, HX_TRANSPORTS=tcp); \
                 no rate limit, so bandwidth is bounded by CPU and memory, not a wire: no wire-limit percentages"
            );
            "loopback rails, no rate limit"
        }
    };
    let date = report::utc_now();
    let load = load_average();
    if load
        .split_whitespace()
        .next()
        .and_then(|l| l.parse::<f64>().ok())
        .is_some_and(|l| l >= 0.5)
    {
        println!(
            "hxcomm demo: note: load average {load} at start: other processes compete for the CPU, \
             so figures (latency most) may be noisy"
        );
    }

    // The testbed guard takes the testbed down when dropped: on return, error and unwind.
    let testbed = match &mode {
        Mode::Testbed { name } => {
            let spec = hx_testbed::TestbedSpec::new(name, 2, 4);
            match hx_testbed::Testbed::up(&spec) {
                Ok(t) => Some(t),
                Err(e) => {
                    let _ = hx_testbed::down(name);
                    return Err(format!("bringing up testbed {name}: {e}"));
                }
            }
        }
        Mode::Loopback => None,
    };
    let measured = measure_all(&mode, &exe, args.quick);
    if let Some(tb) = testbed {
        let name = tb.name().to_string();
        let down = tb.down();
        let left = leftover_namespaces(&name);
        match (&down, left.is_empty()) {
            (Ok(()), true) => println!("hxcomm demo: testbed {name} taken down"),
            _ => eprintln!(
                "hxcomm demo: taking testbed {name} down: {}; namespaces left: {left:?} (try `hxcomm net down --name {name}`)",
                down.as_ref().err().map_or("ok".into(), |e| e.to_string())
            ),
        }
    }
    let configs = measured?;

    let wire = matches!(mode, Mode::Testbed { .. });
    let rows = results::summarize(&configs, wire);
    let text = results::format_text(&rows);
    let md = results::format_markdown(&rows);
    let seconds = t0.elapsed().as_secs_f64();
    let json = report::results_json(&mode, &load, args.quick, &date, seconds, &configs, &rows);
    let plots = report::plots(&configs, wire, what);
    let files = report::write(&args.out, &json, &text, &md, &plots)?;

    println!();
    println!("Summary ({what}; latency at 8 B, bandwidth at 4 MiB; x1 = multiple of the same policy on 1 rail;");
    println!(
        "half-bw = smallest message size reaching half of that configuration's peak bandwidth):"
    );
    print!("{text}");
    if wire {
        println!("{}", report::WIRE_BASIS);
    }
    let dir = std::fs::canonicalize(&args.out).unwrap_or(args.out.clone());
    println!(
        "\nReport: {}/ ({}); {:.0} s in total.",
        dir.display(),
        files.join(", "),
        seconds
    );
    Ok(())
}

fn measure_all(mode: &Mode, exe: &str, quick: bool) -> Result<Vec<ConfigResult>, String> {
    let mut out = Vec::new();
    for &rails in &RAIL_COUNTS {
        for policy in POLICIES {
            proc::check_interrupted()?;
            let t = Instant::now();
            let mut r = ConfigResult {
                policy: policy.into(),
                rails,
                ..Default::default()
            };
            for bench in Bench::ALL {
                for seg in plan::segments(bench, quick) {
                    let mut runs = Vec::new();
                    for _ in 0..plan::repeats(bench) {
                        proc::check_interrupted()?;
                        runs.push(run_segment(mode, exe, policy, rails, bench, &seg)?);
                    }
                    r.series_mut(bench).extend(results::median_by_size(&runs));
                }
            }
            r.seconds = t.elapsed().as_secs_f64();
            let fig = |b: Bench, bytes: u64| {
                results::at(r.series(b), bytes).map_or("-".into(), |v| format!("{v:.1}"))
            };
            println!(
                "  {policy:<8} {rails} rail{}: latency 8 B {} us, bw 4 MiB {} MB/s, bibw 4 MiB {} MB/s  ({:.1} s)",
                if rails == 1 { " " } else { "s" },
                results::at(&r.latency, results::LATENCY_BYTES).map_or("-".into(), |v| format!("{v:.2}")),
                fig(Bench::Bw, results::BW_BYTES),
                fig(Bench::Bibw, results::BW_BYTES),
                r.seconds
            );
            out.push(r);
        }
    }
    Ok(out)
}

/// One job: its points, checked to be there and on the rails asked for.
fn run_segment(
    mode: &Mode,
    exe: &str,
    policy: &str,
    rails: u32,
    bench: Bench,
    seg: &plan::Segment,
) -> Result<Vec<results::Point>, String> {
    let args = plan::job_args(mode, exe, policy, rails, bench, seg);
    let deadline = Duration::from_secs(plan::JOB_TIMEOUT_S as u64 + 10);
    let stdout = job::run(exe, &args, deadline)?;
    let points = results::parse_lines(&stdout, bench)?;
    if points.is_empty() {
        return Err(format!(
            "`hxcomm {}` printed no results:\n{stdout}",
            args.join(" ")
        ));
    }
    if let Some(p) = points.iter().find(|p| p.rails != Some(rails as u64)) {
        eprintln!(
            "hxcomm demo: warning: {policy} asked for {rails} rails, the ranks report {:?}",
            p.rails
        );
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftovers_match_only_this_testbed() {
        // Whatever exists here, names of another prefix never match.
        assert!(leftover_namespaces("zzqq9")
            .iter()
            .all(|n| n.starts_with("zzqq9")));
    }
}
