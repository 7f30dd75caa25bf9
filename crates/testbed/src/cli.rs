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
    /// Bring up (or replace) a testbed: H host namespaces joined by R rate-limited rails.
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
    #[arg(long, default_value_t = 2)]
    pub hosts: u32,
    /// Number of rails (rail i is 10.10.i.0/24, interface r<i>).
    #[arg(long, default_value_t = 4)]
    pub rails: u32,
    /// Egress rate of every rail interface (tbf): `1gbit`, `none`, or one per rail
    /// (`1gbit,1gbit,2gbit,4gbit`).
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
    /// Rail: an index (2) or an interface name (r2).
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

fn cmd_up(a: UpArgs) -> Result<(), TestbedError> {
    let spec = TestbedSpec {
        name: a.name.name,
        hosts: a.hosts,
        rails: a.rails,
        rates: parse_rates(&a.rate, a.rails)?,
        mtu: a.mtu,
        delay: a.delay,
    };
    let info = net::up(&spec)?;
    println!(
        "testbed {}: {} hosts ({}), {} rails, {} layout, mtu {}, rates {}{}; management 10.200.{}.0/24 \
         (root {})",
        info.name(),
        spec.hosts,
        info.host_names().join(" "),
        spec.rails,
        if info.bridged { "bridge" } else { "veth" },
        spec.mtu,
        rates_text(&info),
        spec.delay.as_ref().map(|d| format!(", delay {d}")).unwrap_or_default(),
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
    let hosts: Vec<_> = counters
        .iter()
        .enumerate()
        .map(|(k, rails)| {
            let k = k as u32;
            json!({
                "name": info.spec.host_name(k),
                "mgmt": info.host_mgmt_addr(k).to_string(),
                "rails": rails.iter().enumerate().map(|(i, c)| json!({
                    "rail": i,
                    "if": format!("r{i}"),
                    "addr": info.rail_addr(k, i as u32).to_string(),
                    "up": c.up,
                    "carrier": c.carrier,
                    "tx_bytes": c.tx_bytes,
                    "rx_bytes": c.rx_bytes,
                    "tx_packets": c.tx_packets,
                    "rx_packets": c.rx_packets,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let rails: Vec<_> = (0..info.spec.rails)
        .map(|i| {
            json!({
                "rail": i,
                "subnet": format!("10.10.{i}.0/24"),
                "rate": info.spec.rates[i as usize],
            })
        })
        .collect();
    Ok(json!({
        "name": info.name(),
        "layout": if info.bridged { "bridge" } else { "veth" },
        "mtu": info.spec.mtu,
        "delay": info.spec.delay,
        "mgmt_net": format!("10.200.{}.0/24", info.mgmt_net),
        "mgmt_addr": info.mgmt_addr().to_string(),
        "rails": rails,
        "hosts": hosts,
    }))
}

fn print_status(info: &TestbedInfo) -> Result<(), TestbedError> {
    let counters = net::counters(info)?;
    println!(
        "testbed {}: {} hosts, {} rails, {} layout, mtu {}, delay {}, management 10.200.{}.0/24 \
         (root {})",
        info.name(),
        info.spec.hosts,
        info.spec.rails,
        if info.bridged { "bridge" } else { "veth" },
        info.spec.mtu,
        info.spec.delay.as_deref().unwrap_or("none"),
        info.mgmt_net,
        info.mgmt_addr()
    );
    println!("{:<6} {:<14} rate", "rail", "subnet");
    for i in 0..info.spec.rails {
        println!(
            "{:<6} {:<14} {}",
            format!("r{i}"),
            format!("10.10.{i}.0/24"),
            rate_text(&info.spec.rates[i as usize])
        );
    }
    println!(
        "{:<12} {:<14} {:<5} {:<14} {:<10} {:>16} {:>16}",
        "host", "mgmt", "rail", "addr", "state", "tx_bytes", "rx_bytes"
    );
    for (k, rails) in counters.iter().enumerate() {
        let k = k as u32;
        for (i, c) in rails.iter().enumerate() {
            let state = match (c.up, c.carrier) {
                (true, true) => "up",
                (true, false) => "no-carrier",
                _ => "down",
            };
            println!(
                "{:<12} {:<14} {:<5} {:<14} {:<10} {:>16} {:>16}",
                info.spec.host_name(k),
                info.host_mgmt_addr(k).to_string(),
                format!("r{i}"),
                info.rail_addr(k, i as u32).to_string(),
                state,
                c.tx_bytes,
                c.rx_bytes
            );
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

/// `2` or `r2` -> 2.
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
    let rail = parse_rail(&a.rail).ok_or_else(|| {
        TestbedError::InvalidSpec(format!(
            "rail {:?}: give an index or a name like r2",
            a.rail
        ))
    })?;
    net::link(&info, host, rail, a.state == LinkState::Up)?;
    println!(
        "{} r{rail}: {}",
        info.spec.host_name(host),
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
        match parse(&["status", "--json"]) {
            NetCommand::Status(s) => assert!(s.json && s.name.name == "hx"),
            _ => panic!(),
        }
        assert_eq!(parse_host("3", "hx"), Some(3));
        assert_eq!(parse_host("hy3", "hx"), None);
        assert_eq!(parse_rail("x"), None);
    }
}
