//! `hxcomm demo`: the project's main job in one command. As root it brings up a 2-host, 4-rail,
//! 1 Gbit/s testbed (`hxd`), runs latency, bw and bibw for every policy over 1, 2 and 4 rails
//! (every segment `--runs` times, the median per size kept), then the same testbed without a
//! rate limit for bw and bibw from 64 KiB to 4 MiB over 1 and 4 rails; prints a summary against
//! the wire limit and the single-rail figure and its own verdicts (adaptive within 5% of the
//! best fixed policy at each size), writes JSON, Markdown and SVG plots into `./hxcomm-report/`,
//! and takes the testbed down, also on error or Ctrl-C. Without root it does the first part over
//! loopback rails on this host.

pub mod job;
pub mod lock;
pub mod plan;
pub mod report;
pub mod results;
pub mod svg;
pub mod verdict;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use hx_testbed::proc;

use plan::{Mode, Segment, POLICIES, RAIL_COUNTS, UNLIMITED_BENCHES, UNLIMITED_RAIL_COUNTS};
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
    /// Runs of every benchmark segment; the report keeps the median per size (the lower middle
    /// for an even count). Default 3 (the full demo then takes about 2.5 minutes on a 2-core
    /// machine), 1 with --quick.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=99))]
    pub runs: Option<u32>,
    /// Leave out the second part (bw and bibw from 64 KiB to 4 MiB on 1 and 4 rails without a
    /// rate limit), which runs by default after the 1 Gbit/s part.
    #[arg(long)]
    pub no_unlimited: bool,
    /// Runs of adaptive and of the policy it missed against in the second look at each miss
    /// at 2 and 4 rails that nothing else explains (README); 0 takes none. Default 3, 0 with
    /// --quick.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=9))]
    pub second_look_runs: Option<u32>,
}

impl DemoArgs {
    /// The runs of each policy in a second look (0: none).
    pub fn second_look_runs(&self) -> usize {
        self.second_look_runs.map_or(
            if self.quick {
                0
            } else {
                plan::SECOND_LOOK_RUNS
            },
            |n| n as usize,
        )
    }

    /// The runs of every segment.
    pub fn runs(&self) -> usize {
        self.runs
            .map_or(if self.quick { 1 } else { plan::DEFAULT_RUNS }, |n| {
                n as usize
            })
    }
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

    let runs = args.runs();
    let unlimited_part = matches!(mode, Mode::Testbed { .. }) && !args.no_unlimited;
    println!(
        "hxcomm demo: every segment {runs} time{}, the median per size kept{}",
        if runs == 1 { "" } else { "s" },
        if unlimited_part {
            "; then bw and bibw on 1 and 4 rails without a rate limit"
        } else {
            ""
        }
    );

    // Part 1: the 1 Gbit/s rails (or loopback).
    let part1 = Part {
        label: if matches!(mode, Mode::Testbed { .. }) {
            "1gbit"
        } else {
            "loopback"
        },
        probe_placement: false,
        rail_counts: &RAIL_COUNTS,
        benches: &Bench::ALL,
        segments: &|b| plan::segments(b, args.quick),
        runs,
    };
    let wire = matches!(mode, Mode::Testbed { .. });
    // Measured, judged, and the unexplained misses looked at again on the same testbed.
    let part1_done = || -> Result<(Vec<ConfigResult>, Vec<verdict::Group>), String> {
        let configs = measure(&mode, &exe, &part1)?;
        let mut groups = verdict::groups(part1.label, &configs, &Bench::ALL);
        if wire {
            // Every policy sends a message up to the eager limit whole (hxcomm's default; if
            // the user set another, none is assumed).
            let whole_up_to = match std::env::var_os("HX_EAGER_LIMIT") {
                Some(_) => 0,
                None => hx_protocol::Config::default().eager_limit as u64,
            };
            verdict::mark_faster_than_wire(&mut groups, results::RAIL_MB_PER_S, whole_up_to);
        }
        let look_runs = args.second_look_runs();
        if look_runs > 0 {
            let budget = Duration::from_secs(plan::SECOND_LOOK_BUDGET_S);
            second_look(&mode, &exe, &part1, look_runs, &mut groups, 2, budget)?;
        }
        Ok((configs, groups))
    };
    let (configs, mut groups) = match &mode {
        Mode::Testbed { name } => {
            with_testbed(&hx_testbed::TestbedSpec::new(name, 2, 4), part1_done)?
        }
        Mode::Loopback => part1_done()?,
    };

    // Part 2: the same testbed without a rate limit (the CPU, not a wire, is the limit).
    let (unlimited, unlimited_groups) = match &mode {
        Mode::Testbed { name } if unlimited_part => {
            println!(
                "hxcomm demo: testbed {name} again without a rate limit (`--rate none`): bw and bibw, 64 KiB to 4 MiB, 1 and 4 rails"
            );
            let part2 = Part {
                label: "unlimited",
                // Where the CPUs, not a wire, are the limit, a stream runs at ~8 or ~2 GB/s by
                // where the VM puts them.
                probe_placement: true,
                rail_counts: &UNLIMITED_RAIL_COUNTS,
                benches: &UNLIMITED_BENCHES,
                segments: &|b| plan::unlimited_segments(b, args.quick),
                runs,
            };
            // Single short runs here move with the machine (whole runs at 6 or at 8 GB/s, for
            // every policy alike): the misses get a second look too, 4 rails first (on 1 rail
            // every policy takes the same path).
            with_testbed(
                &hx_testbed::TestbedSpec::new(name, 2, 4).with_rate(None),
                || {
                    let configs = measure(&mode, &exe, &part2)?;
                    let mut groups = verdict::groups("unlimited", &configs, &UNLIMITED_BENCHES);
                    let look_runs = args.second_look_runs();
                    if look_runs > 0 {
                        let budget = Duration::from_secs(plan::SECOND_LOOK_UNLIMITED_BUDGET_S);
                        second_look(&mode, &exe, &part2, look_runs, &mut groups, 1, budget)?;
                    }
                    Ok((configs, groups))
                },
            )?
        }
        _ => (vec![], vec![]),
    };

    let rows = results::summarize(&configs, wire);
    let text = results::format_text(&rows);
    let md = results::format_markdown(&rows);
    groups.extend(unlimited_groups);
    let mut bars = vec![verdict::bar(
        &format!("{}, 2 and 4 rails, every size", part1.label),
        &groups,
        part1.label,
        &[2, 4],
    )];
    if !unlimited.is_empty() {
        bars.push(verdict::bar(
            "unlimited, 1 and 4 rails, bw and bibw, 64 KiB-4 MiB",
            &groups,
            "unlimited",
            &UNLIMITED_RAIL_COUNTS,
        ));
    }
    let vtext = verdict::format_text(&groups);
    let vmd = verdict::format_markdown(&groups);
    let seconds = t0.elapsed().as_secs_f64();
    let load_end = load_average();
    let run = report::Run {
        mode: &mode,
        load: &load,
        load_end: &load_end,
        quick: args.quick,
        runs,
        date: &date,
        seconds,
    };
    let json = report::results_json(&run, &configs, &rows, &unlimited, &groups, &bars);
    let mut plots = report::plots(&configs, wire, what);
    plots.extend(report::unlimited_plots(&unlimited));
    let summary_md = report::summary_markdown(&run, what, &md, wire, &vmd, &bars);
    let summary_txt = report::summary_text(&text, wire, &vtext, &bars);
    let files = report::write(&args.out, &json, &summary_txt, &summary_md, &plots)?;

    println!();
    println!("Summary ({what}; latency at 8 B, bandwidth at 4 MiB; x1 = multiple of the same policy on 1 rail;");
    println!(
        "half-bw = smallest message size reaching half of that configuration's peak bandwidth):"
    );
    print!("{text}");
    if wire {
        println!("{}", report::WIRE_BASIS);
    }
    println!("\nVerdicts ({}):", verdict::RULE);
    print!("{vtext}");
    for b in &bars {
        println!("{}", b.line());
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

/// Brings up the testbed of `spec`, runs `f`, and takes the testbed down (also when `f` fails;
/// the guard takes it down on unwind).
fn with_testbed<T>(
    spec: &hx_testbed::TestbedSpec,
    f: impl FnOnce() -> Result<T, String>,
) -> Result<T, String> {
    let name = spec.name.clone();
    let tb = match hx_testbed::Testbed::up(spec) {
        Ok(t) => t,
        Err(e) => {
            let _ = hx_testbed::down(&name);
            return Err(format!("bringing up testbed {name}: {e}"));
        }
    };
    let out = f();
    let down = tb.down();
    let left = leftover_namespaces(&name);
    match (&down, left.is_empty()) {
        (Ok(()), true) => println!("hxcomm demo: testbed {name} taken down"),
        _ => eprintln!(
            "hxcomm demo: taking testbed {name} down: {}; namespaces left: {left:?} (try `hxcomm net down --name {name}`)",
            down.as_ref().err().map_or("ok".into(), |e| e.to_string())
        ),
    }
    out
}

/// The points of every run of one segment.
type Runs = Vec<Vec<results::Point>>;

/// One part of the demo: which rail counts, benchmarks and segments, and how many runs.
struct Part<'a> {
    label: &'static str,
    /// Probe where the VM had put the CPUs around every job ([`with_placement`]).
    probe_placement: bool,
    rail_counts: &'a [u32],
    benches: &'a [Bench],
    segments: &'a dyn Fn(Bench) -> Vec<Segment>,
    runs: usize,
}

/// Every policy over every rail count of `part`. Per rail count the runs are interleaved (run 1
/// of every policy, then run 2, ..), and within a run every segment is run by every policy in
/// turn, so that a slow spell of the machine hits one run of each policy rather than every run
/// of one; the median of the runs is kept per size.
fn measure(mode: &Mode, exe: &str, part: &Part) -> Result<Vec<ConfigResult>, String> {
    let mut out = Vec::new();
    for &rails in part.rail_counts {
        // collected[policy][bench][segment]: the points of every run.
        let mut collected: Vec<Vec<Vec<Runs>>> = POLICIES
            .iter()
            .map(|_| {
                part.benches
                    .iter()
                    .map(|&b| vec![Vec::new(); (part.segments)(b).len()])
                    .collect()
            })
            .collect();
        let mut seconds = vec![0.0; POLICIES.len()];
        for run in 1..=part.runs {
            let t_run = Instant::now();
            // Every segment is run by every policy back to back (a second or so apart, not the
            // tens of seconds of a policy's whole run): this VM changes speed between runs and
            // within them, and adaptive's verdict compares its figure with the others' of the
            // same run. Each run starts with the next policy, so that a neighbour's load
            // arriving or leaving does not always favour the same one.
            for (bi, &bench) in part.benches.iter().enumerate() {
                for (si, seg) in (part.segments)(bench).iter().enumerate() {
                    for k in 0..POLICIES.len() {
                        let pi = (k + run - 1) % POLICIES.len();
                        proc::check_interrupted()?;
                        let t = Instant::now();
                        let points = with_placement(part.probe_placement, || {
                            run_segment(mode, exe, POLICIES[pi], rails, bench, seg, seg.sizes)
                        })?;
                        collected[pi][bi][si].push(points);
                        seconds[pi] += t.elapsed().as_secs_f64();
                    }
                }
            }
            println!(
                "  {} {rails} rail{}: run {run}/{} of every policy ({:.1} s, load average {})",
                part.label,
                if rails == 1 { "" } else { "s" },
                part.runs,
                t_run.elapsed().as_secs_f64(),
                load_average()
            );
        }
        for (pi, policy) in POLICIES.iter().enumerate() {
            let mut r = ConfigResult {
                policy: (*policy).into(),
                rails,
                seconds: seconds[pi],
                ..Default::default()
            };
            for (bi, &bench) in part.benches.iter().enumerate() {
                for runs in &collected[pi][bi] {
                    r.series_mut(bench).extend(results::median_by_size(runs));
                }
            }
            let fig = |b: Bench, bytes: u64, d: usize| {
                results::at(r.series(b), bytes).map_or("-".into(), |v| format!("{v:.d$}"))
            };
            let lat = if part.benches.contains(&Bench::Latency) {
                format!(
                    "latency 8 B {} us, ",
                    fig(Bench::Latency, results::LATENCY_BYTES, 2)
                )
            } else {
                String::new()
            };
            println!(
                "  {:<9} {policy:<8} {rails} rail{}: {lat}bw 4 MiB {} MB/s, bibw 4 MiB {} MB/s  ({:.1} s)",
                part.label,
                if rails == 1 { " " } else { "s" },
                fig(Bench::Bw, results::BW_BYTES, 1),
                fig(Bench::Bibw, results::BW_BYTES, 1),
                r.seconds
            );
            out.push(r);
        }
    }
    Ok(out)
}

/// Runs a second look ([`verdict::SecondLook`]) at the misses of `part` on `min_rails` and
/// more rails that nothing else explains: per rail count (the most first), benchmark, segment
/// and best fixed policy, the missed sizes' range again, adaptive and that policy in turn (the
/// order alternating), `runs` times each with [`plan::SECOND_LOOK_FACTOR`] times the
/// iterations, within `budget` in all. Where `part` probes the placement, so does every job
/// here, and the look compares the runs that saw the same ([`verdict::SecondLook::placed`]).
fn second_look(
    mode: &Mode,
    exe: &str,
    part: &Part,
    runs: usize,
    groups: &mut [verdict::Group],
    min_rails: u32,
    budget: Duration,
) -> Result<(), String> {
    // (group, segment, best policy) -> the sizes to look at again.
    let mut batches: Vec<(usize, usize, String, Vec<u64>)> = Vec::new();
    for (gi, g) in groups
        .iter()
        .enumerate()
        .filter(|(_, g)| g.rails >= min_rails)
    {
        let segs = (part.segments)(g.bench);
        for p in g.points.iter().filter(|p| verdict::wants_second_look(p)) {
            let (Some(si), Some(bp)) = (plan::segment_of(&segs, p.bytes), &p.best_policy) else {
                continue;
            };
            match batches
                .iter_mut()
                .find(|b| b.0 == gi && b.1 == si && &b.2 == bp)
            {
                Some(b) => b.3.push(p.bytes),
                None => batches.push((gi, si, bp.clone(), vec![p.bytes])),
            }
        }
    }
    if batches.is_empty() {
        return Ok(());
    }
    batches.sort_by_key(|b| std::cmp::Reverse(groups[b.0].rails));
    let t0 = Instant::now();
    let mut left = 0;
    for (gi, si, best, sizes) in batches {
        let (rails, bench) = (groups[gi].rails, groups[gi].bench);
        if t0.elapsed() >= budget {
            left += sizes.len();
            continue;
        }
        let seg = plan::second_look_segment(&(part.segments)(bench)[si]);
        let range = format!(
            "{}:{}",
            sizes.iter().min().unwrap_or(&0),
            sizes.iter().max().unwrap_or(&0)
        );
        // figures[0]: adaptive's runs, [1]: the best policy's, per size; each run with the
        // placement its job saw, when the part probes it.
        let mut figures: [Vec<(u64, LookRuns)>; 2] = [
            sizes.iter().map(|&b| (b, LookRuns::default())).collect(),
            sizes.iter().map(|&b| (b, LookRuns::default())).collect(),
        ];
        // A batch is looked at whole or not at all: over the budget, or a job that fails
        // (the second look is extra: the first look's results stand, with a warning).
        let mut whole = true;
        'runs: for run in 0..runs {
            for k in 0..2 {
                let which = (k + run) % 2;
                let policy = if which == 0 {
                    verdict::CANDIDATE
                } else {
                    best.as_str()
                };
                proc::check_interrupted()?;
                if t0.elapsed() >= budget {
                    whole = false;
                    break 'runs;
                }
                let job = || run_segment(mode, exe, policy, rails, bench, &seg, &range);
                let points = match with_placement(part.probe_placement, job) {
                    Ok(p) => p,
                    Err(e) => {
                        eprintln!(
                            "hxcomm demo: warning: a second look ({policy}, {rails} rails, {} \
                             {range}) failed, its misses stay as measured: {e}",
                            bench.name()
                        );
                        whole = false;
                        break 'runs;
                    }
                };
                for p in points {
                    if let Some(f) = figures[which].iter_mut().find(|f| f.0 == p.bytes) {
                        f.1.values.push(p.value);
                        f.1.placements.extend(p.placement);
                    }
                }
            }
        }
        if !whole {
            left += sizes.len();
            continue;
        }
        let mut said = Vec::new();
        for p in groups[gi]
            .points
            .iter_mut()
            .filter(|p| sizes.contains(&p.bytes))
        {
            let empty = LookRuns::default();
            let runs = |w: usize| {
                figures[w]
                    .iter()
                    .find(|f| f.0 == p.bytes)
                    .map_or(&empty, |f| &f.1)
            };
            let (a, b) = (runs(0), runs(1));
            p.second_look = verdict::SecondLook::placed(
                &a.values,
                &b.values,
                &a.placements,
                &b.placements,
                plan::SECOND_LOOK_FACTOR,
                verdict::Better::of(bench),
            );
            if let Some(l) = &p.second_look {
                said.push(format!("{} {:.2}", results::fmt_size(p.bytes), l.ratio));
            }
        }
        println!(
            "  second look, {} {rails} rails {} against {best} ({} runs each, {}x the iterations): {}",
            part.label,
            bench.name(),
            runs,
            plan::SECOND_LOOK_FACTOR,
            said.join(", ")
        );
    }
    if left > 0 {
        println!(
            "  second look, {}: {left} misses left as measured (the {} s budget spent, or a job failed)",
            part.label,
            budget.as_secs()
        );
    }
    Ok(())
}

/// One policy's runs at one size in a second look, and the placement each run's job saw (in
/// the same order; shorter when a probe failed, and then not used).
#[derive(Default)]
struct LookRuns {
    values: Vec<f64>,
    placements: Vec<f64>,
}

/// `job`'s points, with (when `probe`) a cache line's one-way time between the first two CPUs
/// around it, the longer of before and after (hx_testbed::cacheline): one round of 20,000 round
/// trips each side, 2-10 ms. A probe that fails leaves the points without one.
fn with_placement(
    probe: bool,
    job: impl FnOnce() -> Result<Vec<results::Point>, String>,
) -> Result<Vec<results::Point>, String> {
    if !probe {
        return job();
    }
    let look = || hx_testbed::cacheline::probe_first_two(20_000, 1);
    let before = look();
    let mut points = job()?;
    match (before, look()) {
        (Some(Ok(a)), Some(Ok(b))) => {
            for p in &mut points {
                p.placement = Some((a.max(b) * 10.0).round() / 10.0);
            }
        }
        (Some(Err(e)), _) | (_, Some(Err(e))) => {
            eprintln!("hxcomm demo: warning: the cache-line probe failed: {e}")
        }
        _ => {}
    }
    Ok(points)
}

/// One job of `seg` over `sizes`: its points, checked to be there and on the rails asked for.
fn run_segment(
    mode: &Mode,
    exe: &str,
    policy: &str,
    rails: u32,
    bench: Bench,
    seg: &plan::Segment,
    sizes: &str,
) -> Result<Vec<results::Point>, String> {
    let args = plan::job_args(mode, exe, policy, rails, bench, seg, sizes);
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
