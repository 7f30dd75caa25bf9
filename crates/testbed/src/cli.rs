//! The `hxcomm net` subcommands.

use crate::spec::{parse_rates, TestbedSpec};
use crate::state::TestbedInfo;
use crate::{net, state, TestbedError};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

/// Arguments of `hxcomm net`.
#[derive(Args, Debug)]
pub struct NetArgs {
    #[command(subcommand)]
    pub command: NetCommand,
}

/// `hxcomm net up|down|status|link`.
#[derive(Subcommand, Debug)]
pub enum NetCommand {
    /// Bring up (or replace) a testbed: H host namespaces joined by R rate-limited rails, or a
    /// hyper-crossbar (`--topology hxb:2x2x2 --links-per-dim 2`).
    Up(UpArgs),
    /// Remove everything `up` made for this name, and nothing else.
    Down(NameArg),
    /// Show hosts, rails, rates and per-rail byte counters.
    Status(StatusArgs),
    /// Cut or restore one rail of one host (for fault tests).
    Link(LinkArgs),
}

#[derive(Args, Debug)]
pub struct NameArg {
    /// Testbed name: the prefix of its namespaces and interfaces.
    #[arg(long, default_value = "hx")]
    pub name: String,
}

#[derive(Args, Debug)]
pub struct UpArgs {
    /// Number of hosts (namespaces PREFIX0..).
    #[arg(long, default_value_t = 2, conflicts_with = "topology")]
    pub hosts: u32,
    /// Number of rails (rail i is 10.10.i.0/24, interface r<i>).
    #[arg(long, default_value_t = 4, conflicts_with = "topology")]
    pub rails: u32,
    /// A hyper-crossbar instead of --hosts/--rails: `hxb:2x2x2` (hosts numbered by
    /// coordinates, one switch per line and link, NICs `x<dim>l<link>`, addresses and relay
    /// routes as `hxcomm topo` prints them); `hxb:N` is N hosts x --links-per-dim rails.
    #[arg(long)]
    pub topology: Option<String>,
    /// With --topology: links (NICs) per host and dimension (default 1).
    #[arg(long, requires = "topology")]
    pub links_per_dim: Option<u32>,
    /// With --topology: line neighbours also reached through every other dimension (3-hop
    /// detours; README "Detours"); `hxcomm run --net` then sets HX_DETOURS=1.
    #[arg(long, requires = "topology")]
    pub detours: bool,
    /// Egress rate of every rail interface (tbf): `1gbit`, `none`, or one per rail (NIC, in
    /// the order x0l0, x0l1, .., x1l0, ..) (`1gbit,1gbit,2gbit,4gbit`).
    #[arg(long, default_value = "1gbit")]
    pub rate: String,
    /// MTU of the rails.
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    /// Delay added on every rail interface (netem), e.g. `20us`.
    #[arg(long)]
    pub delay: Option<String>,
    #[command(flatten)]
    pub name: NameArg,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub name: NameArg,
    /// Every testbed that is up, not only --name.
    #[arg(long)]
    pub all: bool,
    /// Machine-readable output (one JSON object; with --all a JSON array).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct LinkArgs {
    /// Host: an index (1) or a name (hx1).
    pub host: String,
    /// Rail: an index (2) or an interface name (r2, or x1l0 in a hyper-crossbar).
    pub rail: String,
    /// New state of the interface.
    pub state: LinkState,
    #[command(flatten)]
    pub name: NameArg,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    Up,
    Down,
}

/// Runs a `net` subcommand; returns the process exit code.
pub fn run(args: NetArgs) -> i32 {
    if !crate::is_root() {
        eprintln!("hxcomm net: {}", TestbedError::NotRoot);
        return 1;
    }
    let result = match args.command {
        NetCommand::Up(a) => cmd_up(a),
        NetCommand::Down(a) => cmd_down(&a.name),
        NetCommand::Status(a) => cmd_status(a),
        NetCommand::Link(a) => cmd_link(a),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("hxcomm net: {e}");
            1
        }
    }
}

/// The spec `net up` asks for: --hosts/--rails, or --topology with --links-per-dim.
fn up_spec(a: UpArgs) -> Result<TestbedSpec, TestbedError> {
    let mut spec = match &a.topology {
        Some(t) => {
            let t = hx_topology::Topology::parse(t, a.links_per_dim.unwrap_or(1))
                .map_err(|e| TestbedError::InvalidSpec(format!("--topology: {e}")))?;
            if a.detours && t.ndims() == 1 {
                return Err(TestbedError::InvalidSpec(
                    "--detours needs a topology of two or more dimensions".into(),
                ));
            }
            TestbedSpec::hxb(&a.name.name, &t.with_detours(a.detours))
        }
        _ => TestbedSpec::new(&a.name.name, a.hosts, a.rails),
    };
    spec.rates = parse_rates(&a.rate, spec.rails)?;
    spec.mtu = a.mtu;
    spec.delay = a.delay;
    Ok(spec)
}

fn cmd_up(a: UpArgs) -> Result<(), TestbedError> {
    let spec = up_spec(a)?;
    let info = net::up(&spec)?;
    println!(
        "testbed {}: {}{} hosts ({}), {}, {} layout, mtu {}, rates {}{}; management \
         10.200.{}.0/24 (root {})",
        info.name(),
        topology_text(&info),
        spec.hosts,
        info.host_names().join(" "),
        nics_text(&info),
        if info.bridged { "bridge" } else { "veth" },
        spec.mtu,
        rates_text(&info),
        spec.delay
            .as_ref()
            .map(|d| format!(", delay {d}"))
            .unwrap_or_default(),
        info.mgmt_net,
        info.mgmt_addr()
    );
    Ok(())
}

fn cmd_down(name: &str) -> Result<(), TestbedError> {
    if net::down(name)? {
        println!("testbed {name}: removed");
    } else {
        println!("testbed {name}: nothing to remove");
    }
    Ok(())
}

/// `hxb:2x2x2 x 2 links per dimension: ` for a hyper-crossbar, nothing for the flat layout.
fn topology_text(info: &TestbedInfo) -> String {
    let t = &info.topology;
    if t.ndims() == 1 {
        return String::new();
    }
    format!(
        "{} x {} link{} per dimension{}: ",
        t.spec(),
        t.links_per_dim(),
        if t.links_per_dim() == 1 { "" } else { "s" },
        if t.detours() { ", with detours" } else { "" }
    )
}

/// `4 rails`, or `6 NICs each (x0l0 .. x2l1)` for a hyper-crossbar.
fn nics_text(info: &TestbedInfo) -> String {
    let n = info.spec.rails;
    if info.topology.ndims() == 1 {
        return format!("{n} rails");
    }
    let names: Vec<String> = (0..n).map(|i| info.iface(i)).collect();
    format!("{n} NICs each ({})", names.join(" "))
}

fn rate_text(r: &Option<String>) -> &str {
    r.as_deref().unwrap_or("none")
}

fn rates_text(info: &TestbedInfo) -> String {
    let r = &info.spec.rates;
    if r.windows(2).all(|w| w[0] == w[1]) {
        rate_text(&r[0]).to_string()
    } else {
        r.iter().map(rate_text).collect::<Vec<_>>().join(",")
    }
}

fn status_json(info: &TestbedInfo) -> Result<serde_json::Value, TestbedError> {
    let counters = net::counters(info)?;
    let t = &info.topology;
    let multi = t.ndims() > 1;
    let hosts: Vec<_> = counters
        .iter()
        .enumerate()
        .map(|(k, rails)| {
            let k = k as u32;
            let mut h = json!({
                "name": info.spec.host_name(k),
                "coords": t.coords(k).unwrap_or_default(),
                "mgmt": info.host_mgmt_addr(k).to_string(),
                "rails": rails.iter().enumerate().map(|(i, c)| {
                    let (dim, link) = info.nic(i as u32);
                    json!({
                        "rail": i,
                        "if": info.iface(i as u32),
                        "dim": dim,
                        "link": link,
                        "addr": info.rail_addr(k, i as u32).to_string(),
                        "prefix": t.subnet_prefix(),
                        "up": c.up,
                        "carrier": c.carrier,
                        "tx_bytes": c.tx_bytes,
                        "rx_bytes": c.rx_bytes,
                        "tx_packets": c.tx_packets,
                        "rx_packets": c.rx_packets,
                    })
                }).collect::<Vec<_>>(),
            });
            if multi {
                let routes: Vec<String> = t
                    .routes(k)
                    .unwrap_or_default()
                    .iter()
                    .map(|r| r.to_string())
                    .collect();
                h["routes"] = json!(routes);
                if t.detours() {
                    let detours: Vec<String> = t
                        .detour_routes(k)
                        .unwrap_or_default()
                        .iter()
                        .map(|r| r.to_string())
                        .collect();
                    h["detour_routes"] = json!(detours);
                }
            }
            h
        })
        .collect();
    let rails: Vec<_> = (0..info.spec.rails)
        .map(|i| {
            let (dim, link) = info.nic(i);
            let mut r = json!({
                "rail": i,
                "if": info.iface(i),
                "dim": dim,
                "link": link,
                "rate": info.spec.rates[i as usize],
            });
            if !multi {
                r["subnet"] = json!(format!("10.10.{i}.0/24"));
            }
            r
        })
        .collect();
    let mut v = json!({
        "name": info.name(),
        "topology": t.spec(),
        "detours": t.detours(),
        "dims": t.dims(),
        "links_per_dim": t.links_per_dim(),
        "layout": if info.bridged { "bridge" } else { "veth" },
        "mtu": info.spec.mtu,
        "delay": info.spec.delay,
        "mgmt_net": format!("10.200.{}.0/24", info.mgmt_net),
        "mgmt_addr": info.mgmt_addr().to_string(),
        "rails": rails,
        "hosts": hosts,
    });
    if multi {
        let lines: Vec<_> = net::segments(info)
            .iter()
            .map(|s| {
                let (dim, link) = info.nic(s.nic);
                let line = t.line_of(s.hosts[0], dim).unwrap_or_default();
                json!({
                    "dim": dim,
                    "link": link,
                    "line": line,
                    "subnet": t.line_subnet(dim, line, link).map(|n| n.to_string()),
                    "bridge": format!("br{}", s.index),
                    "hosts": s.hosts,
                })
            })
            .collect();
        v["lines"] = json!(lines);
    }
    Ok(v)
}

fn print_status(info: &TestbedInfo) -> Result<(), TestbedError> {
    let counters = net::counters(info)?;
    let t = &info.topology;
    let multi = t.ndims() > 1;
    println!(
        "testbed {}: {}{} hosts, {}, {} layout, mtu {}, delay {}, management 10.200.{}.0/24 \
         (root {})",
        info.name(),
        topology_text(info),
        info.spec.hosts,
        nics_text(info),
        if info.bridged { "bridge" } else { "veth" },
        info.spec.mtu,
        info.spec.delay.as_deref().unwrap_or("none"),
        info.mgmt_net,
        info.mgmt_addr()
    );
    if multi {
        let sizes: Vec<usize> = (0..t.hosts())
            .map(|k| t.routes(k).map_or(0, |r| r.len()))
            .collect();
        println!(
            "{} line subnets of /{} (one switch each: bridge br<n> in {}sw), {} to {} relay \
             routes per host",
            t.subnet_count(),
            t.subnet_prefix(),
            info.name(),
            sizes.iter().min().unwrap_or(&0),
            sizes.iter().max().unwrap_or(&0),
        );
        if t.detours() {
            println!(
                "detours: {} routes per host in table {} for the host's own packets (rule {})",
                t.detour_routes(0).map_or(0, |r| r.len()),
                hx_topology::DETOUR_TABLE,
                hx_topology::detour_rule()
            );
        }
        println!("{:<6} {:<4} {:<5} rate", "nic", "dim", "link");
        for i in 0..info.spec.rails {
            let (dim, link) = info.nic(i);
            println!(
                "{:<6} {:<4} {:<5} {}",
                info.iface(i),
                dim,
                link,
                rate_text(&info.spec.rates[i as usize])
            );
        }
    } else {
        println!("{:<6} {:<14} rate", "rail", "subnet");
        for i in 0..info.spec.rails {
            println!(
                "{:<6} {:<14} {}",
                format!("r{i}"),
                format!("10.10.{i}.0/24"),
                rate_text(&info.spec.rates[i as usize])
            );
        }
    }
    let coords = |k: u32| -> String {
        let c: Vec<String> = t
            .coords(k)
            .unwrap_or_default()
            .iter()
            .map(|c| c.to_string())
            .collect();
        format!("({})", c.join(","))
    };
    if multi {
        println!(
            "{:<12} {:<9} {:<14} {:<5} {:<17} {:<10} {:>16} {:>16}",
            "host", "coords", "mgmt", "nic", "addr", "state", "tx_bytes", "rx_bytes"
        );
    } else {
        println!(
            "{:<12} {:<14} {:<5} {:<14} {:<10} {:>16} {:>16}",
            "host", "mgmt", "rail", "addr", "state", "tx_bytes", "rx_bytes"
        );
    }
    for (k, rails) in counters.iter().enumerate() {
        let k = k as u32;
        for (i, c) in rails.iter().enumerate() {
            let i = i as u32;
            let state = match (c.up, c.carrier) {
                (true, true) => "up",
                (true, false) => "no-carrier",
                _ => "down",
            };
            let (host, mgmt) = (info.spec.host_name(k), info.host_mgmt_addr(k).to_string());
            if multi {
                println!(
                    "{:<12} {:<9} {:<14} {:<5} {:<17} {:<10} {:>16} {:>16}",
                    host,
                    coords(k),
                    mgmt,
                    info.iface(i),
                    format!("{}/{}", info.rail_addr(k, i), t.subnet_prefix()),
                    state,
                    c.tx_bytes,
                    c.rx_bytes
                );
            } else {
                println!(
                    "{:<12} {:<14} {:<5} {:<14} {:<10} {:>16} {:>16}",
                    host,
                    mgmt,
                    format!("r{i}"),
                    info.rail_addr(k, i).to_string(),
                    state,
                    c.tx_bytes,
                    c.rx_bytes
                );
            }
        }
    }
    Ok(())
}

fn cmd_status(a: StatusArgs) -> Result<(), TestbedError> {
    let infos = if a.all {
        state::all()
    } else {
        match crate::info(&a.name.name)? {
            Some(i) => vec![i],
            None => {
                let others: Vec<String> = state::all().into_iter().map(|t| t.spec.name).collect();
                let hint = if others.is_empty() {
                    String::new()
                } else {
                    format!(" (up: {})", others.join(", "))
                };
                return Err(TestbedError::NotFound(format!(
                    "no testbed named {} is up{hint}",
                    a.name.name
                )));
            }
        }
    };
    if a.json {
        let v: Vec<_> = infos.iter().map(status_json).collect::<Result<_, _>>()?;
        let out = if a.all {
            json!(v)
        } else {
            v.into_iter().next().unwrap_or_default()
        };
        println!("{out}");
    } else if infos.is_empty() {
        println!("no testbed is up");
    } else {
        for (n, info) in infos.iter().enumerate() {
            if n > 0 {
                println!();
            }
            print_status(info)?;
        }
    }
    Ok(())
}

/// `1` or `hx1` (for testbed `hx`) -> 1.
pub fn parse_host(s: &str, name: &str) -> Option<u32> {
    s.parse()
        .ok()
        .or_else(|| s.strip_prefix(name).and_then(|d| d.parse().ok()))
}

/// `2` or `r2` -> 2 (flat layout; [`TestbedInfo::parse_nic`] also knows `x1l0`).
pub fn parse_rail(s: &str) -> Option<u32> {
    s.strip_prefix('r').unwrap_or(s).parse().ok()
}

fn cmd_link(a: LinkArgs) -> Result<(), TestbedError> {
    let name = &a.name.name;
    let info = crate::info(name)?
        .ok_or_else(|| TestbedError::NotFound(format!("no testbed named {name} is up")))?;
    let host = parse_host(&a.host, name).ok_or_else(|| {
        TestbedError::InvalidSpec(format!(
            "host {:?}: give an index or a name like {name}1",
            a.host
        ))
    })?;
    let rail = info
        .parse_nic(&a.rail)
        .or_else(|| parse_rail(&a.rail))
        .ok_or_else(|| {
            TestbedError::InvalidSpec(format!(
                "rail {:?}: give an index or an interface name like {}",
                a.rail,
                info.iface(info.spec.rails - 1)
            ))
        })?;
    net::link(&info, host, rail, a.state == LinkState::Up)?;
    println!(
        "{} {}: {}",
        info.spec.host_name(host),
        info.iface(rail),
        if a.state == LinkState::Up {
            "up"
        } else {
            "down"
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        c: Top,
    }
    #[derive(Subcommand)]
    enum Top {
        Net(NetArgs),
    }

    fn parse(args: &[&str]) -> NetCommand {
        let mut v = vec!["x", "net"];
        v.extend_from_slice(args);
        match Cli::try_parse_from(v).unwrap().c {
            Top::Net(n) => n.command,
        }
    }

    #[test]
    fn cli_shapes() {
        match parse(&[
            "up",
            "--hosts",
            "3",
            "--rate",
            "1gbit,none",
            "--rails",
            "2",
            "--name",
            "q",
        ]) {
            NetCommand::Up(u) => {
                assert_eq!((u.hosts, u.rails, u.mtu), (3, 2, 1500));
                assert_eq!(u.name.name, "q");
                assert_eq!(
                    parse_rates(&u.rate, u.rails).unwrap(),
                    vec![Some("1gbit".into()), None]
                );
            }
            _ => panic!(),
        }
        match parse(&["link", "hx1", "r2", "down"]) {
            NetCommand::Link(l) => {
                assert_eq!(parse_host(&l.host, &l.name.name), Some(1));
                assert_eq!(parse_rail(&l.rail), Some(2));
                assert_eq!(l.state, LinkState::Down);
            }
            _ => panic!(),
        }
        match parse(&[
            "up",
            "--topology",
            "hxb:2x2x2",
            "--links-per-dim",
            "2",
            "--rate",
            "none",
            "--name",
            "p",
        ]) {
            NetCommand::Up(u) => {
                let s = up_spec(u).unwrap();
                assert_eq!((s.hosts, s.rails), (8, 6));
                assert_eq!(s.dims, Some(vec![2, 2, 2]));
                assert_eq!(s.rates, vec![None; 6]);
                assert_eq!(s.topology().unwrap().links_per_dim(), 2);
            }
            _ => panic!(),
        }
        // hxb:N is today's flat layout, the same spec as --hosts N --rails L.
        match parse(&["up", "--topology", "hxb:3", "--links-per-dim", "2"]) {
            NetCommand::Up(u) => {
                let s = up_spec(u).unwrap();
                assert_eq!(s, TestbedSpec::new("hx", 3, 2));
            }
            _ => panic!(),
        }
        let mut v = vec!["x", "net", "up", "--topology", "hxb:2x2", "--hosts", "3"];
        assert!(Cli::try_parse_from(&v).is_err(), "--topology with --hosts");
        v.truncate(3);
        v.extend(["--links-per-dim", "2"]);
        assert!(Cli::try_parse_from(&v).is_err(), "--links-per-dim alone");
        match parse(&["status", "--json"]) {
            NetCommand::Status(s) => assert!(s.json && s.name.name == "hx"),
            _ => panic!(),
        }
        assert_eq!(parse_host("3", "hx"), Some(3));
        assert_eq!(parse_host("hy3", "hx"), None);
        assert_eq!(parse_rail("x"), None);
    }
}
