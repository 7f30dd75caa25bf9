//! `hxcomm topo routes|show|paths|check`: the plan, one host's configuration and the paths
//! between two hosts as text, and whether this host has that configuration.

use clap::{Args, Subcommand};

use crate::check::{check, Report};
use crate::Topology;

/// `hxcomm topo`.
#[derive(Args, Debug)]
pub struct TopoArgs {
    /// What to print.
    #[command(subcommand)]
    pub command: TopoCommand,
}

/// `hxcomm topo routes|show|paths|check`.
#[derive(Subcommand, Debug)]
pub enum TopoCommand {
    /// Print the commands (ip link/addr, sysctl, ip route; one per line, ready for a shell)
    /// that configure one host of a topology.
    Routes(RoutesArgs),
    /// Print the plan: hosts with coordinates and addresses, interfaces, subnets.
    Show(SpecArgs),
    /// Print the distinct (link-disjoint) paths from one host to another, one a line: the
    /// destination address's dimension and link, hops, source interface, source address (what
    /// a socket of the path binds to) and destination address (what it connects to).
    Paths(PathsArgs),
    /// Check this host (or the network namespace this runs in) against the plan: its NIC
    /// addresses, the routes of `topo routes` in the main table, the sysctls. Prints `OK: ...`
    /// or one line per problem with the command that fixes it; exit code 0 when all is well,
    /// 1 when there are problems, 2 on bad usage or when the host cannot be read.
    Check(CheckArgs),
}

/// The topology.
#[derive(Args, Debug)]
pub struct SpecArgs {
    /// `hxb:S0xS1x...` (1 to 4 dimensions of 2 to 254 hosts); `hxb:N` is the flat layout.
    #[arg(long)]
    pub topology: String,
    /// Links (NICs) per host and dimension.
    #[arg(long, default_value_t = 1)]
    pub links_per_dim: u32,
    /// Line neighbours also reached through every other dimension (3-hop detours; routes for
    /// the host's own packets in table 26744, see README "Detours"). As HX_DETOURS=1.
    #[arg(long)]
    pub detours: bool,
}

/// `hxcomm topo routes`.
#[derive(Args, Debug)]
pub struct RoutesArgs {
    #[command(flatten)]
    /// The topology.
    pub spec: SpecArgs,
    /// The host (0 .. number of hosts, numbered by coordinates, last dimension fastest).
    #[arg(long)]
    pub host: u32,
}

/// `hxcomm topo paths`.
#[derive(Args, Debug)]
pub struct PathsArgs {
    #[command(flatten)]
    /// The topology.
    pub spec: SpecArgs,
    /// The source host.
    #[arg(long)]
    pub from: u32,
    /// The destination host.
    #[arg(long)]
    pub to: u32,
}

/// `hxcomm topo check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    /// The topology.
    pub spec: SpecArgs,
    /// The host this should be; by default the one whose addresses the interfaces have.
    #[arg(long)]
    pub host: Option<u32>,
    /// Print one JSON object (`ok`, `host`, `coords`, counts, `problems` as an array).
    #[arg(long)]
    pub json: bool,
}

/// Runs `hxcomm topo`; the exit code.
pub fn run(args: TopoArgs) -> i32 {
    let spec = match &args.command {
        TopoCommand::Routes(a) => &a.spec,
        TopoCommand::Show(a) => a,
        TopoCommand::Paths(a) => &a.spec,
        TopoCommand::Check(a) => &a.spec,
    };
    let topo = match Topology::parse(&spec.topology, spec.links_per_dim) {
        Ok(t) => t.with_detours(spec.detours),
        Err(e) => {
            eprintln!("hxcomm topo: {e}");
            return 2;
        }
    };
    let text = match &args.command {
        TopoCommand::Routes(a) => topo.host_commands(a.host).map(|v| v.join("\n") + "\n"),
        TopoCommand::Show(_) => Ok(show(&topo)),
        TopoCommand::Paths(a) => paths(&topo, a.from, a.to),
        TopoCommand::Check(a) => return run_check(&topo, a),
    };
    match text {
        Ok(t) => {
            print!("{t}");
            0
        }
        Err(e) => {
            eprintln!("hxcomm topo: {e}");
            2
        }
    }
}

/// `hxcomm topo check`: reads this host, compares, prints; the exit code.
fn run_check(topo: &Topology, args: &CheckArgs) -> i32 {
    let (seen, warnings) = match crate::observe::observe() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("hxcomm topo check: {e}");
            return 2;
        }
    };
    let report = match check(topo, args.host, &seen) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("hxcomm topo check: {e}");
            return 2;
        }
    };
    if args.json {
        println!("{}", report_json(topo, &report, &warnings));
    } else {
        for w in &warnings {
            eprintln!("hxcomm topo check: {w}");
        }
        print!("{}", report_text(topo, &report));
    }
    if report.ok() {
        0
    } else {
        1
    }
}

/// `hxb:2x2x2 x 2`, and `host 3 (0,1,1) of ` before it when the host is known.
fn subject(t: &Topology, r: &Report) -> String {
    let spec = format!(
        "{} x {}{}",
        t.spec(),
        t.links_per_dim(),
        if t.detours() { " with detours" } else { "" }
    );
    match r.host {
        Some(h) => {
            let c: Vec<String> = r.coords.iter().map(|c| c.to_string()).collect();
            format!("host {h} ({}) of {spec}", c.join(","))
        }
        None => spec,
    }
}

/// `OK: host 0 (0,0,0) of hxb:2x2x2 x 2: 6 NICs, 12 routes, 11 sysctls`, or a header and one
/// line per problem (`what; fix: command`); notes after either, as `note: ...`.
pub fn report_text(t: &Topology, r: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let errors = r.errors();
    if errors == 0 {
        let _ = writeln!(
            s,
            "OK: {}: {} NICs, {} routes, {} sysctls",
            subject(t, r),
            r.nics,
            r.routes,
            r.sysctls
        );
    } else {
        let _ = writeln!(
            s,
            "{}: {errors} problem{}",
            subject(t, r),
            if errors == 1 { "" } else { "s" }
        );
    }
    for p in r.problems.iter().filter(|p| !p.kind.is_note()) {
        let _ = writeln!(s, "  {p}");
    }
    for p in r.problems.iter().filter(|p| p.kind.is_note()) {
        let _ = writeln!(s, "  {p}");
    }
    s
}

/// The report as one JSON object: `ok`, `topology`, `links_per_dim`, `host` (or null),
/// `coords`, `nics`, `routes`, `sysctls`, `problems` (each `kind`, `note`, `what`, `fix` or
/// null) and `warnings`.
pub fn report_json(t: &Topology, r: &Report, warnings: &[String]) -> String {
    let problems: Vec<String> = r
        .problems
        .iter()
        .map(|p| {
            format!(
                "{{\"kind\":{},\"note\":{},\"what\":{},\"fix\":{}}}",
                json_str(p.kind.name()),
                p.kind.is_note(),
                json_str(&p.what),
                p.fix.as_deref().map_or("null".into(), json_str)
            )
        })
        .collect();
    let coords: Vec<String> = r.coords.iter().map(|c| c.to_string()).collect();
    let warnings: Vec<String> = warnings.iter().map(|w| json_str(w)).collect();
    format!(
        "{{\"ok\":{},\"topology\":{},\"links_per_dim\":{},\"host\":{},\"coords\":[{}],\
         \"nics\":{},\"routes\":{},\"sysctls\":{},\"problems\":[{}],\"warnings\":[{}]}}",
        r.ok(),
        json_str(&t.spec()),
        t.links_per_dim(),
        r.host.map_or("null".into(), |h| h.to_string()),
        coords.join(","),
        r.nics,
        r.routes,
        r.sysctls,
        problems.join(","),
        warnings.join(",")
    )
}

/// A JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The plan, compactly: a summary, the interfaces, the subnets per interface, and one line per
/// host with its coordinates and its addresses in interface order.
pub fn show(t: &Topology) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let subnets = t.subnet_count();
    let _ = writeln!(
        s,
        "{t}: {} hosts, {} NICs each, {subnets} line subnets of /{} in 10.10.0.0/16",
        t.hosts(),
        t.nics_per_host(),
        t.subnet_prefix()
    );
    let ifaces: Vec<String> = (0..t.ndims())
        .flat_map(|d| (0..t.links_per_dim()).map(move |l| (d, l)))
        .map(|(d, l)| t.iface_name(d, l))
        .collect();
    let naming = if t.ndims() == 1 {
        "r<link>"
    } else {
        "x<dimension>l<link>"
    };
    let _ = writeln!(s, "interfaces ({naming}): {}", ifaces.join(" "));
    let _ = writeln!(s, "subnets (a line = hosts sharing all other coordinates):");
    for d in 0..t.ndims() {
        for l in 0..t.links_per_dim() {
            let lines = t.lines(d);
            let first = t.line_subnet(d, 0, l);
            let last = t.line_subnet(d, lines - 1, l);
            if let (Some(a), Some(b)) = (first, last) {
                let _ = if lines == 1 {
                    writeln!(s, "  {}: 1 line, {a}", t.iface_name(d, l))
                } else {
                    writeln!(s, "  {}: {lines} lines, {a} .. {b}", t.iface_name(d, l))
                };
            }
        }
    }
    let _ = writeln!(s, "hosts (coordinates: addresses in interface order):");
    for h in 0..t.hosts() {
        let (Ok(c), Ok(a)) = (t.coords(h), t.addresses(h)) else {
            continue;
        };
        let c: Vec<String> = c.iter().map(|x| x.to_string()).collect();
        let a: Vec<String> = a.iter().map(|x| x.ip.to_string()).collect();
        let _ = writeln!(s, "  {h} ({}): {}", c.join(","), a.join(" "));
    }
    s
}

/// The distinct paths from `from` to `to` ([`Topology::disjoint_paths`]), a header line
/// (`# dim link hops src_iface src_addr dst_addr`) and one line per path with those fields,
/// separated by spaces (for scripts: e.g. an iperf3 client per path, `-B src_addr` to
/// `dst_addr`).
pub fn paths(t: &Topology, from: u32, to: u32) -> Result<String, crate::Error> {
    use std::fmt::Write;
    let mut s = String::from("# dim link hops src_iface src_addr dst_addr\n");
    for p in t.disjoint_paths(from, to)? {
        let _ = writeln!(
            s,
            "{} {} {} {} {} {}",
            p.dst_dim,
            p.link,
            p.hop_count(),
            p.src_iface,
            p.src_addr,
            p.dst_addr
        );
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_the_corners_and_of_a_line() {
        let t = Topology::parse("hxb:2x2x2", 2).unwrap();
        let s = paths(&t, 0, 7).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "# dim link hops src_iface src_addr dst_addr");
        assert_eq!(lines.len(), 7, "{s}");
        // Address of dimension 0, link 0: first hop over dimension 1, so host 0's x1l0.
        assert_eq!(lines[1], "0 0 3 x1l0 10.10.1.1 10.10.0.98");
        assert_eq!(lines[2], "0 1 3 x1l1 10.10.1.129 10.10.0.226");
        assert_eq!(lines[6], "2 1 3 x0l1 10.10.0.129 10.10.2.226");
        // Every source address and every destination address once.
        let col = |i: usize| -> std::collections::HashSet<&str> {
            lines[1..]
                .iter()
                .map(|l| l.split(' ').nth(i).unwrap())
                .collect()
        };
        assert_eq!((col(4).len(), col(5).len()), (6, 6));
        // Line neighbours (differ in dimension 2 only): one 1-hop path per link.
        let s = paths(&t, 0, 1).unwrap();
        assert_eq!(
            s,
            "# dim link hops src_iface src_addr dst_addr\n\
             2 0 1 x2l0 10.10.2.1 10.10.2.2\n\
             2 1 1 x2l1 10.10.2.129 10.10.2.130\n"
        );
        assert!(paths(&t, 0, 8).is_err());
        assert_eq!(paths(&t, 3, 3).unwrap().lines().count(), 1);
    }

    #[test]
    fn show_is_compact() {
        let t = Topology::parse("hxb:2x2x2", 2).unwrap();
        let s = show(&t);
        assert!(
            s.contains("8 hosts, 6 NICs each, 24 line subnets of /27"),
            "{s}"
        );
        assert!(s.contains("interfaces (x<dimension>l<link>): x0l0 x0l1 x1l0 x1l1 x2l0 x2l1"));
        assert!(
            s.contains("  x0l0: 4 lines, 10.10.0.0/27 .. 10.10.0.96/27"),
            "{s}"
        );
        assert!(s.contains("  7 (1,1,1): "));
        assert_eq!(s.lines().count(), 3 + 6 + 1 + 8);
        let flat = show(&Topology::parse("hxb:4", 2).unwrap());
        assert!(flat.contains("  r1: 1 line, 10.10.1.0/24"), "{flat}");
        assert!(flat.contains("  3 (3): 10.10.0.4 10.10.1.4"), "{flat}");
    }

    #[test]
    fn check_reports_as_text_and_json() {
        use crate::check::{Kind, Problem};
        let t = Topology::parse("hxb:2x2x2", 2).unwrap();
        let mut r = Report {
            host: Some(3),
            coords: vec![0, 1, 1],
            nics: 6,
            routes: 12,
            sysctls: 11,
            problems: vec![Problem {
                kind: Kind::OtherName,
                what: "dimension 0 link 0: ...".into(),
                fix: None,
            }],
        };
        assert_eq!(
            report_text(&t, &r),
            "OK: host 3 (0,1,1) of hxb:2x2x2 x 2: 6 NICs, 12 routes, 11 sysctls\n  \
             note: dimension 0 link 0: ...\n"
        );
        r.problems.insert(
            0,
            Problem {
                kind: Kind::Down,
                what: "dimension 1 link 0: x1l0 (\"a\\b\") is down".into(),
                fix: Some("ip link set dev x1l0 up".into()),
            },
        );
        let text = report_text(&t, &r);
        assert!(text.starts_with("host 3 (0,1,1) of hxb:2x2x2 x 2: 1 problem\n  dimension 1"));
        assert!(text.contains(" is down; fix: ip link set dev x1l0 up\n  note: "));
        let j = report_json(&t, &r, &["w\n".into()]);
        assert!(
            j.starts_with(
                "{\"ok\":false,\"topology\":\"hxb:2x2x2\",\"links_per_dim\":2,\"host\":3,\
             \"coords\":[0,1,1],\"nics\":6,\"routes\":12,\"sysctls\":11,\"problems\":[\
             {\"kind\":\"down\",\"note\":false,\"what\":\"dimension 1 link 0: x1l0 \
             (\\\"a\\\\b\\\") is down\",\"fix\":\"ip link set dev x1l0 up\"},"
            ),
            "{j}"
        );
        assert!(
            j.ends_with("\"fix\":null}],\"warnings\":[\"w\\n\"]}"),
            "{j}"
        );
        assert_eq!(json_str("\u{1}"), "\"\\u0001\"");
    }
}
