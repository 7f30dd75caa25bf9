//! `hxcomm topo check`, sans-I/O: compares what a host has (interfaces with their IPv4
//! addresses, the kernel's main route table, sysctl values), given as plain data, with what the
//! topology asks of it ([`Topology::addresses`], [`Topology::routes`], [`Topology::sysctls`]),
//! and lists every difference with the command that fixes it. The command text is that of
//! [`Topology::host_commands`] (`hxcomm topo routes`), with the host's own interface name where
//! its NIC is named otherwise.
//!
//! Interfaces are matched by address, not by name: real clusters name their NICs as they like
//! and the engine goes by addresses, so an address of the plan on `eth2` instead of `x0l0` is a
//! note, not an error, and that NIC's routes and `rp_filter` are then expected on `eth2`.
//! [`parse_proc_net_route`] reads the text of /proc/net/route; reading the files is the
//! caller's (the CLI's) business.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::Ipv4Addr;

use crate::plan::{Subnet, RAIL_NET};
use crate::routes::Route;
use crate::topo::{Error, Topology};

/// One network interface as found on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Its name.
    pub name: String,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Has carrier (`IFF_LOWER_UP`); only looked at when `up`.
    pub carrier: bool,
    /// Its IPv4 addresses with their prefix lengths.
    pub addrs: Vec<(Ipv4Addr, u8)>,
}

/// One route of the kernel's main table (IPv4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoute {
    /// The destination prefix (host bits zero).
    pub dest: Subnet,
    /// The gateway; `None` for a route on the link (a connected route).
    pub gateway: Option<Ipv4Addr>,
    /// The device, `*` for a route without one (unreachable, blackhole).
    pub dev: String,
    /// The metric (the kernel prefers the lowest among routes to one prefix).
    pub metric: u32,
}

/// Everything [`check`] looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Every interface, with or without IPv4 addresses.
    pub interfaces: Vec<Interface>,
    /// The main route table.
    pub routes: Vec<KernelRoute>,
    /// Sysctl values by key in `sysctl` form (`net.ipv4.conf.x0l0.rp_filter`), values trimmed.
    /// A key that is absent could not be read.
    pub sysctls: BTreeMap<String, String>,
    /// Whether the rule of [`crate::detour_rule`] is there; `None` if the rules could not be
    /// read.
    pub detour_rule: Option<bool>,
    /// The routes of table [`crate::DETOUR_TABLE`].
    pub detour_routes: Vec<KernelRoute>,
}

/// What kind of difference a [`Problem`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// No host of the topology can be told from the addresses (none, or two hosts equally).
    NoHost,
    /// `--host N` given, but the addresses are another host's.
    WrongHost,
    /// An address of the plan is on no interface.
    MissingAddress,
    /// An address of the plan is on an interface of another name than the plan's (a note).
    OtherName,
    /// An address of the plan has another prefix length than its line subnet.
    WrongPrefix,
    /// An address of the plan is on more than one interface.
    DuplicateAddress,
    /// An interface holding an address of the plan is down.
    Down,
    /// An interface holding an address of the plan is up but has no carrier.
    NoCarrier,
    /// An address of another host of the topology.
    ForeignAddress,
    /// An address in 10.10.0.0/16 that is no address of the plan.
    ExtraAddress,
    /// A sysctl with a value other than required (or unreadable).
    Sysctl,
    /// A route of the plan that the main table lacks.
    MissingRoute,
    /// A route of the plan that the main table has with another gateway or device.
    WrongRoute,
    /// A route into 10.10.0.0/16 that is neither the plan's nor connected to an address here.
    ExtraRoute,
}

impl Kind {
    /// A short name, as in `--json`: `missing-route`, `down`, ...
    pub fn name(self) -> &'static str {
        match self {
            Kind::NoHost => "no-host",
            Kind::WrongHost => "wrong-host",
            Kind::MissingAddress => "missing-address",
            Kind::OtherName => "other-name",
            Kind::WrongPrefix => "wrong-prefix",
            Kind::DuplicateAddress => "duplicate-address",
            Kind::Down => "down",
            Kind::NoCarrier => "no-carrier",
            Kind::ForeignAddress => "foreign-address",
            Kind::ExtraAddress => "extra-address",
            Kind::Sysctl => "sysctl",
            Kind::MissingRoute => "missing-route",
            Kind::WrongRoute => "wrong-route",
            Kind::ExtraRoute => "extra-route",
        }
    }

    /// Whether this is a note (worth saying, nothing to fix) rather than a problem.
    pub fn is_note(self) -> bool {
        matches!(self, Kind::OtherName)
    }
}

/// One difference between the host and the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// What kind.
    pub kind: Kind,
    /// What is wrong, one line.
    pub what: String,
    /// The shell command that fixes it, if a command can.
    pub fix: Option<String>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind.is_note() {
            write!(f, "note: {}", self.what)
        } else {
            f.write_str(&self.what)?;
            match &self.fix {
                Some(c) => write!(f, "; fix: {c}"),
                None => Ok(()),
            }
        }
    }
}

/// The outcome of [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The host checked against: `--host`, or the one the addresses say; `None` if neither.
    pub host: Option<u32>,
    /// Its coordinates (empty when `host` is `None`).
    pub coords: Vec<u32>,
    /// NICs of the plan found (their address on some interface).
    pub nics: usize,
    /// Routes the plan installs on this host.
    pub routes: usize,
    /// Sysctls the plan sets.
    pub sysctls: usize,
    /// Every difference, in the order their fixes apply (interfaces and addresses, sysctls,
    /// routes: a route needs its device up). Notes included.
    pub problems: Vec<Problem>,
}

impl Report {
    /// Whether all is well: no problem other than notes.
    pub fn ok(&self) -> bool {
        self.problems.iter().all(|p| p.kind.is_note())
    }

    /// Problems other than notes.
    pub fn errors(&self) -> usize {
        self.problems.iter().filter(|p| !p.kind.is_note()).count()
    }
}

fn rail_space() -> Subnet {
    Subnet {
        addr: RAIL_NET,
        prefix: 16,
    }
}

fn mask(prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p => u32::MAX << (32 - u32::from(p.min(32))),
    }
}

/// The network `ip/prefix` is on.
fn network(ip: Ipv4Addr, prefix: u8) -> Subnet {
    Subnet {
        addr: Ipv4Addr::from(u32::from(ip) & mask(prefix)),
        prefix,
    }
}

fn where_(dim: usize, link: u32) -> String {
    format!("dimension {dim} link {link}")
}

/// Compares `seen` with what `topo` asks of host `host` (or, if `None`, of the host whose
/// addresses `seen` has most of). An error only for a `host` beyond the topology; everything
/// else is in the report.
pub fn check(topo: &Topology, host: Option<u32>, seen: &Observed) -> Result<Report, Error> {
    if let Some(h) = host {
        topo.check_host(h)?;
    }
    let mut problems = Vec::new();
    // Every address in 10.10.0.0/16 here: (interface index, address, prefix).
    let rail: Vec<(usize, Ipv4Addr, u8)> = seen
        .interfaces
        .iter()
        .enumerate()
        .flat_map(|(i, f)| f.addrs.iter().map(move |&(ip, p)| (i, ip, p)))
        .filter(|&(_, ip, _)| rail_space().contains(ip))
        .collect();
    let mut count: BTreeMap<u32, usize> = BTreeMap::new();
    for &(_, ip, _) in &rail {
        if let Some((h, _, _)) = topo.locate(ip) {
            *count.entry(h).or_default() += 1;
        }
    }
    let most = count.values().copied().max().unwrap_or(0);
    let leaders: Vec<u32> = count
        .iter()
        .filter(|&(_, &n)| n == most)
        .map(|(&h, _)| h)
        .collect();
    let describe = |h: u32| {
        let c: Vec<String> = topo
            .coords(h)
            .unwrap_or_default()
            .iter()
            .map(|c| c.to_string())
            .collect();
        format!("host {h} ({})", c.join(","))
    };
    let tally = || {
        let v: Vec<String> = count
            .iter()
            .map(|(&h, &n)| format!("{} {n}", describe(h)))
            .collect();
        v.join(", ")
    };
    let routes_cmd = format!(
        "hxcomm topo routes --topology {} --links-per-dim {} --host N | sh",
        topo.spec(),
        topo.links_per_dim()
    );
    let empty = |host, problems| Report {
        host,
        coords: host.and_then(|h| topo.coords(h).ok()).unwrap_or_default(),
        nics: 0,
        routes: 0,
        sysctls: 0,
        problems,
    };
    let h = match host {
        Some(h) if !count.is_empty() && !leaders.contains(&h) => {
            problems.push(Problem {
                kind: Kind::WrongHost,
                what: format!(
                    "--host {h} says this is {}, but its addresses of {} are those of {}: check \
                     it as that host (leave out --host), or configure it as host {h}",
                    describe(h),
                    topo.spec(),
                    tally()
                ),
                fix: Some(routes_cmd.replace("--host N", &format!("--host {h}"))),
            });
            return Ok(empty(Some(h), problems));
        }
        Some(h) => h,
        None if leaders.len() == 1 => leaders[0],
        None => {
            let what = if count.is_empty() {
                format!(
                    "no address of {} x {} on any interface, so which host this is cannot be \
                     told; give --host N to see what it lacks, or configure it",
                    topo.spec(),
                    topo.links_per_dim()
                )
            } else {
                format!(
                    "addresses of several hosts of {} in equal numbers ({}): which host this is \
                     cannot be told; give --host N",
                    topo.spec(),
                    tally()
                )
            };
            problems.push(Problem {
                kind: Kind::NoHost,
                what,
                fix: Some(routes_cmd),
            });
            extra_addresses(topo, seen, &rail, None, &mut problems);
            return Ok(empty(None, problems));
        }
    };

    // The plan's NICs: which interface holds each address (None if none does).
    let plan = topo.addresses(h)?;
    let by_name = |n: &str| seen.interfaces.iter().find(|f| f.name == n);
    let mut real: Vec<Option<String>> = Vec::with_capacity(plan.len());
    let mut nics = 0;
    let mut reported: BTreeSet<String> = BTreeSet::new();
    for a in &plan {
        let at = where_(a.dim, a.link);
        let want = format!("{}/{}", a.ip, a.prefix);
        let holders: Vec<(&Interface, u8)> = seen
            .interfaces
            .iter()
            .flat_map(|f| {
                f.addrs
                    .iter()
                    .filter(|&&(ip, _)| ip == a.ip)
                    .map(move |&(_, p)| (f, p))
            })
            .collect();
        let Some(&(nic, prefix)) = holders
            .iter()
            .find(|(f, _)| f.name == a.iface)
            .or(holders.first())
        else {
            let named = by_name(&a.iface);
            let add = format!("ip addr replace {want} dev {}", a.iface);
            let (state, fix) = match named {
                Some(f) if f.up => ("", add),
                Some(_) => (
                    ", which is down",
                    format!("ip link set dev {} up && {add}", a.iface),
                ),
                None => (
                    ": no such interface here; use the NIC cabled to that line's switch",
                    format!("ip link set dev {} up && {add}", a.iface),
                ),
            };
            problems.push(Problem {
                kind: Kind::MissingAddress,
                what: format!(
                    "{at}: no address {want} (expected on interface {}{state})",
                    a.iface
                ),
                fix: Some(fix),
            });
            real.push(named.map(|f| f.name.clone()));
            continue;
        };
        nics += 1;
        real.push(Some(nic.name.clone()));
        for &(other, p) in &holders {
            if !std::ptr::eq(other, nic) {
                problems.push(Problem {
                    kind: Kind::DuplicateAddress,
                    what: format!(
                        "{at}: {}/{p} is on {} as well as on {}",
                        a.ip, other.name, nic.name
                    ),
                    fix: Some(format!("ip addr del {}/{p} dev {}", a.ip, other.name)),
                });
            }
        }
        if nic.name != a.iface {
            problems.push(Problem {
                kind: Kind::OtherName,
                what: format!(
                    "{at}: {want} is on {}, which the plan calls {} (fine: the engine goes by \
                     addresses; its routes and rp_filter are checked on {})",
                    nic.name, a.iface, nic.name
                ),
                fix: None,
            });
        }
        if prefix != a.prefix {
            problems.push(Problem {
                kind: Kind::WrongPrefix,
                what: format!(
                    "{at}: {}/{prefix} on {}: the line subnet is a /{}",
                    a.ip, nic.name, a.prefix
                ),
                fix: Some(format!(
                    "ip addr del {}/{prefix} dev {} && ip addr replace {want} dev {}",
                    a.ip, nic.name, nic.name
                )),
            });
        }
        if !reported.contains(&nic.name) {
            if !nic.up {
                reported.insert(nic.name.clone());
                problems.push(Problem {
                    kind: Kind::Down,
                    what: format!("{at}: {} ({want}) is down", nic.name),
                    fix: Some(format!("ip link set dev {} up", nic.name)),
                });
            } else if !nic.carrier {
                reported.insert(nic.name.clone());
                problems.push(Problem {
                    kind: Kind::NoCarrier,
                    what: format!(
                        "{at}: {} ({want}) is up but has no carrier: check its cable, the \
                         switch port, or the peer",
                        nic.name
                    ),
                    fix: None,
                });
            }
        }
    }
    extra_addresses(topo, seen, &rail, Some(h), &mut problems);
    // The plan's interface name -> the name here.
    let rename = |plan_name: &str| -> Option<String> {
        let (d, l) = topo.parse_iface(plan_name)?;
        let i = plan.iter().position(|a| a.dim == d && a.link == l)?;
        real[i].clone()
    };

    let sysctls = topo.sysctls();
    for s in &sysctls {
        let key = match s
            .key
            .strip_prefix("net.ipv4.conf.")
            .and_then(|k| k.strip_suffix(".rp_filter"))
        {
            Some(name) if topo.parse_iface(name).is_some() => match rename(name) {
                Some(n) => format!("net.ipv4.conf.{n}.rp_filter"),
                // No such NIC here: its missing address says so already.
                None => continue,
            },
            _ => s.key.clone(),
        };
        let rp = key.ends_with(".rp_filter");
        let value = seen.sysctls.get(&key).map(String::as_str);
        let good = match value {
            Some(v) if rp => v == "0" || v == "2",
            Some(v) => v == s.value,
            None => false,
        };
        if good {
            continue;
        }
        let what = match value {
            None => format!(
                "{key} cannot be read (no such setting here), needs {}",
                s.value
            ),
            Some(v) if rp => format!(
                "{key} is {v}, needs 2 (loose) or 0 (off): replies on a relayed path may arrive \
                 on another NIC than the route back leaves by"
            ),
            Some(v) => format!("{key} is {v}, needs {}", s.value),
        };
        problems.push(Problem {
            kind: Kind::Sysctl,
            what,
            fix: Some(format!("sysctl -w {key}={}", s.value)),
        });
    }

    let routes = renamed(topo.routes(h)?, &rename);
    for r in &routes {
        let best = seen
            .routes
            .iter()
            .filter(|k| k.dest == r.dest)
            .min_by_key(|k| k.metric);
        let fix = Some(format!("ip route replace {r}"));
        match best {
            None => {
                let why = match by_name(&r.dev) {
                    Some(f) if !f.up => format!(
                        " ({} is down: the kernel keeps no route through a downed device)",
                        r.dev
                    ),
                    Some(_) => String::new(),
                    None => format!(" (no interface {} here)", r.dev),
                };
                problems.push(Problem {
                    kind: Kind::MissingRoute,
                    what: format!("no route {} via {} dev {}{why}", r.dest, r.via, r.dev),
                    fix,
                });
            }
            Some(k) if k.gateway != Some(r.via) || k.dev != r.dev => {
                let via = k.gateway.map_or("directly".into(), |g| format!("via {g}"));
                problems.push(Problem {
                    kind: Kind::WrongRoute,
                    what: format!(
                        "route {} goes {via} dev {}; the plan's: via {} dev {}",
                        r.dest, k.dev, r.via, r.dev
                    ),
                    fix,
                });
            }
            Some(_) => {}
        }
    }
    // Routes into the rail space that are neither the plan's nor connected to an address here
    // (those of a wrong or extra address go with it).
    let connected: BTreeSet<(Subnet, &str)> = seen
        .interfaces
        .iter()
        .flat_map(|f| {
            f.addrs
                .iter()
                .map(move |&(ip, p)| (network(ip, p), f.name.as_str()))
        })
        .collect();
    let own_lines: Vec<Subnet> = plan.iter().map(|a| network(a.ip, a.prefix)).collect();
    for k in &seen.routes {
        let inside = k.dest.prefix >= 16 && rail_space().contains(k.dest.addr);
        if !inside
            || routes.iter().any(|r| r.dest == k.dest)
            || (k.gateway.is_none()
                && (own_lines.contains(&k.dest) || connected.contains(&(k.dest, k.dev.as_str()))))
        {
            continue;
        }
        let via = k.gateway.map_or(String::new(), |g| format!(" via {g}"));
        let dev = if k.dev == "*" {
            String::new()
        } else {
            format!(" dev {}", k.dev)
        };
        let metric = match k.metric {
            0 => String::new(),
            m => format!(" metric {m}"),
        };
        problems.push(Problem {
            kind: Kind::ExtraRoute,
            what: format!(
                "route {}{via}{dev}{metric} is not in the plan (it takes rail traffic elsewhere)",
                k.dest
            ),
            fix: Some(format!("ip route del {}{via}{dev}{metric}", k.dest)),
        });
    }

    let detours = detour_problems(topo, h, seen, &rename, &mut problems)?;

    Ok(Report {
        host: Some(h),
        coords: topo.coords(h)?,
        nics,
        routes: routes.len() + detours,
        sysctls: sysctls.len(),
        problems,
    })
}

/// The plan's routes with each device under this host's name for that NIC.
fn renamed(routes: Vec<Route>, rename: &dyn Fn(&str) -> Option<String>) -> Vec<Route> {
    routes
        .into_iter()
        .map(|r| {
            let dev = rename(&r.dev).unwrap_or(r.dev);
            Route { dev, ..r }
        })
        .collect()
}

/// The detour rule and table (see [`Topology::detour_routes`]): with detours, the rule and
/// every route must be there and nothing else in the table; without, neither. Returns how
/// many detour routes the plan has.
fn detour_problems(
    topo: &Topology,
    h: u32,
    seen: &Observed,
    rename: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<Problem>,
) -> Result<usize, Error> {
    let table = crate::DETOUR_TABLE;
    let rule = crate::detour_rule();
    if !topo.detours() {
        if seen.detour_rule == Some(true) {
            problems.push(Problem {
                kind: Kind::ExtraRoute,
                what: format!(
                    "rule {rule} sends this host's packets to the detour table, but the plan \
                     has no detours (--detours)"
                ),
                fix: Some(format!("ip rule del pref {table}")),
            });
        }
        return Ok(0);
    }
    match seen.detour_rule {
        Some(true) => {}
        Some(false) => problems.push(Problem {
            kind: Kind::MissingRoute,
            what: format!("no rule {rule}: this host's packets would not take their detours"),
            fix: Some(format!("ip rule add {rule}")),
        }),
        None => problems.push(Problem {
            kind: Kind::MissingRoute,
            what: format!("the rules could not be read, so rule {rule} is not known to be there"),
            fix: None,
        }),
    }
    let want = renamed(topo.detour_routes(h)?, rename);
    for r in &want {
        let fix = Some(format!("ip route replace table {table} {r}"));
        match seen.detour_routes.iter().find(|k| k.dest == r.dest) {
            None => problems.push(Problem {
                kind: Kind::MissingRoute,
                what: format!(
                    "no detour route {} via {} dev {} in table {table}",
                    r.dest, r.via, r.dev
                ),
                fix,
            }),
            Some(k) if k.gateway != Some(r.via) || k.dev != r.dev => problems.push(Problem {
                kind: Kind::WrongRoute,
                what: format!(
                    "detour route {} in table {table} goes {} dev {}; the plan's: via {} dev {}",
                    r.dest,
                    k.gateway.map_or("directly".into(), |g| format!("via {g}")),
                    k.dev,
                    r.via,
                    r.dev
                ),
                fix,
            }),
            Some(_) => {}
        }
    }
    for k in &seen.detour_routes {
        if !want.iter().any(|r| r.dest == k.dest) {
            problems.push(Problem {
                kind: Kind::ExtraRoute,
                what: format!(
                    "route {} in table {table} is not one of the plan's detours",
                    k.dest
                ),
                fix: Some(format!("ip route del table {table} {}", k.dest)),
            });
        }
    }
    Ok(want.len())
}

/// Parses the text of `ip -4 route show table N` (one route a line: `DEST[/PREFIX] [via GW] dev
/// DEV ... [metric M]`); returns the routes and the number of lines it could not parse.
pub fn parse_ip_route_show(text: &str) -> (Vec<KernelRoute>, usize) {
    let mut out = Vec::new();
    let mut skipped = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let value = |key: &str| f.windows(2).find(|w| w[0] == key).map(|w| w[1]);
        let parsed = (|| {
            let (addr, prefix) = match f.first()?.split_once('/') {
                Some((a, p)) => (a.parse::<Ipv4Addr>().ok()?, p.parse::<u8>().ok()?),
                None => (f[0].parse::<Ipv4Addr>().ok()?, 32),
            };
            if prefix > 32 {
                return None;
            }
            let gateway = match value("via") {
                Some(g) => Some(g.parse().ok()?),
                None => None,
            };
            Some(KernelRoute {
                dest: network(addr, prefix),
                gateway,
                dev: value("dev").unwrap_or("*").to_string(),
                metric: match value("metric") {
                    Some(m) => m.parse().ok()?,
                    None => 0,
                },
            })
        })();
        match parsed {
            Some(r) => out.push(r),
            None => skipped += 1,
        }
    }
    (out, skipped)
}

/// Addresses in 10.10.0.0/16 that are not `host`'s (all of them if `host` is `None`):
/// another host's, or no address of the plan at all.
fn extra_addresses(
    topo: &Topology,
    seen: &Observed,
    rail: &[(usize, Ipv4Addr, u8)],
    host: Option<u32>,
    problems: &mut Vec<Problem>,
) {
    for &(i, ip, prefix) in rail {
        let dev = &seen.interfaces[i].name;
        let fix = Some(format!("ip addr del {ip}/{prefix} dev {dev}"));
        match topo.locate(ip) {
            Some((o, _, _)) if Some(o) == host => {}
            Some((o, d, l)) if host.is_some() => {
                let c: Vec<String> = topo
                    .coords(o)
                    .unwrap_or_default()
                    .iter()
                    .map(|c| c.to_string())
                    .collect();
                problems.push(Problem {
                    kind: Kind::ForeignAddress,
                    what: format!(
                        "{ip}/{prefix} on {dev} is host {o}'s ({}) address of {}, not this \
                         host's: addresses of two hosts here",
                        c.join(","),
                        where_(d, l)
                    ),
                    fix,
                });
            }
            Some(_) => {}
            None => problems.push(Problem {
                kind: Kind::ExtraAddress,
                what: format!(
                    "{ip}/{prefix} on {dev} is in 10.10.0.0/16 but no address of {}",
                    topo.spec()
                ),
                fix,
            }),
        }
    }
}

/// Parses the text of /proc/net/route (the main table, IPv4): a header line, then per route
/// `Iface Destination Gateway Flags RefCnt Use Metric Mask MTU Window IRTT`, addresses as 8
/// hex digits of the address's bytes read as a native-endian u32 (little-endian on x86).
/// Returns the routes and the number of lines that could not be parsed (skipped).
pub fn parse_proc_net_route(text: &str) -> (Vec<KernelRoute>, usize) {
    const RTF_GATEWAY: u32 = 0x2;
    let addr = |s: &str| -> Option<Ipv4Addr> {
        if s.len() != 8 {
            return None;
        }
        let v = u32::from_str_radix(s, 16).ok()?;
        Some(Ipv4Addr::from(v.to_ne_bytes()))
    };
    let mut out = Vec::new();
    let mut skipped = 0;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() || f[0] == "Iface" {
            continue;
        }
        let parsed = (|| {
            if f.len() < 8 {
                return None;
            }
            let dest = addr(f[1])?;
            let gw = addr(f[2])?;
            let flags = u32::from_str_radix(f[3], 16).ok()?;
            let metric: u32 = f[6].parse().ok()?;
            let m = u32::from(addr(f[7])?);
            let prefix = m.leading_ones() as u8;
            if m != mask(prefix) {
                return None;
            }
            Some(KernelRoute {
                dest: network(dest, prefix),
                gateway: (flags & RTF_GATEWAY != 0 && !gw.is_unspecified()).then_some(gw),
                dev: f[0].to_string(),
                metric,
            })
        })();
        match parsed {
            Some(r) => out.push(r),
            None => skipped += 1,
        }
    }
    (out, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    /// Exactly what the plan asks of `host`, as the kernel would show it.
    fn healthy(t: &Topology, host: u32) -> Observed {
        let mut interfaces = vec![
            Interface {
                name: "lo".into(),
                up: true,
                carrier: true,
                addrs: vec![(Ipv4Addr::LOCALHOST, 8)],
            },
            Interface {
                name: "mgmt".into(),
                up: true,
                carrier: true,
                addrs: vec![(ip("10.200.3.1"), 24)],
            },
        ];
        let mut routes = vec![KernelRoute {
            dest: network(ip("10.200.3.0"), 24),
            gateway: None,
            dev: "mgmt".into(),
            metric: 0,
        }];
        for a in t.addresses(host).unwrap() {
            interfaces.push(Interface {
                name: a.iface.clone(),
                up: true,
                carrier: true,
                addrs: vec![(a.ip, a.prefix)],
            });
            routes.push(KernelRoute {
                dest: network(a.ip, a.prefix),
                gateway: None,
                dev: a.iface,
                metric: 0,
            });
        }
        for r in t.routes(host).unwrap() {
            routes.push(KernelRoute {
                dest: r.dest,
                gateway: Some(r.via),
                dev: r.dev,
                metric: 0,
            });
        }
        let mut sysctls: BTreeMap<String, String> = t
            .sysctls()
            .into_iter()
            .map(|s| (s.key, s.value.to_string()))
            .collect();
        sysctls.insert("net.ipv4.conf.lo.rp_filter".into(), "0".into());
        Observed {
            interfaces,
            routes,
            sysctls,
            detour_rule: Some(t.detours()),
            detour_routes: t
                .detour_routes(host)
                .unwrap()
                .into_iter()
                .map(|r| KernelRoute {
                    dest: r.dest,
                    gateway: Some(r.via),
                    dev: r.dev,
                    metric: 0,
                })
                .collect(),
        }
    }

    fn t222() -> Topology {
        Topology::parse("hxb:2x2x2", 2).unwrap()
    }

    fn iface<'a>(o: &'a mut Observed, name: &str) -> &'a mut Interface {
        o.interfaces.iter_mut().find(|f| f.name == name).unwrap()
    }

    /// The report's problems as (kind, fix), notes included.
    fn kinds(r: &Report) -> Vec<(Kind, Option<String>)> {
        r.problems.iter().map(|p| (p.kind, p.fix.clone())).collect()
    }

    #[test]
    fn a_correct_host_passes() {
        for (spec, links) in [("hxb:2x2x2", 2), ("hxb:3x3x2", 1), ("hxb:4", 2)] {
            let t = Topology::parse(spec, links).unwrap();
            for h in 0..t.hosts() {
                let o = healthy(&t, h);
                for given in [None, Some(h)] {
                    let r = check(&t, given, &o).unwrap();
                    assert!(
                        r.ok() && r.problems.is_empty(),
                        "{spec} {h}: {:?}",
                        r.problems
                    );
                    assert_eq!(r.host, Some(h));
                    assert_eq!(r.coords, t.coords(h).unwrap());
                    assert_eq!(r.nics, t.nics_per_host());
                    assert_eq!(r.routes, t.routes(h).unwrap().len());
                    assert_eq!(r.sysctls, t.sysctls().len());
                }
            }
        }
        // rp_filter off passes as well as loose.
        let t = t222();
        let mut o = healthy(&t, 3);
        o.sysctls
            .insert("net.ipv4.conf.all.rp_filter".into(), "0".into());
        o.sysctls
            .insert("net.ipv4.conf.x1l1.rp_filter".into(), "0".into());
        assert!(check(&t, None, &o).unwrap().problems.is_empty());
        assert!(check(&t, Some(8), &o).is_err());
    }

    #[test]
    fn a_missing_route_and_a_wrong_one() {
        let t = t222();
        let routes = t.routes(5).unwrap();
        let mut o = healthy(&t, 5);
        o.routes.retain(|k| k.dest != routes[0].dest);
        let k = o
            .routes
            .iter_mut()
            .find(|k| k.dest == routes[1].dest)
            .unwrap();
        k.gateway = Some(ip("10.10.0.99"));
        let r = check(&t, None, &o).unwrap();
        assert!(!r.ok());
        assert_eq!(
            kinds(&r),
            vec![
                (
                    Kind::MissingRoute,
                    Some(format!("ip route replace {}", routes[0]))
                ),
                (
                    Kind::WrongRoute,
                    Some(format!("ip route replace {}", routes[1]))
                ),
            ]
        );
        // The fixes are `topo routes`' own lines.
        let cmds = t.host_commands(5).unwrap();
        assert!(r
            .problems
            .iter()
            .all(|p| cmds.contains(p.fix.as_ref().unwrap())));
        assert!(
            r.problems[1].what.contains("via 10.10.0.99"),
            "{}",
            r.problems[1]
        );
        // A lower-metric route of another gateway wins in the kernel: wrong.
        let mut o = healthy(&t, 5);
        o.routes.push(KernelRoute {
            dest: routes[2].dest,
            gateway: Some(ip("10.10.0.99")),
            dev: routes[2].dev.clone(),
            metric: 0,
        });
        for k in o
            .routes
            .iter_mut()
            .filter(|k| k.gateway == Some(routes[2].via))
        {
            k.metric = 100;
        }
        let r = check(&t, None, &o).unwrap();
        assert_eq!(kinds(&r).len(), 1);
        assert_eq!(r.problems[0].kind, Kind::WrongRoute);
    }

    #[test]
    fn a_down_interface_takes_its_routes_along() {
        let t = t222();
        let mut o = healthy(&t, 0);
        iface(&mut o, "x1l0").up = false;
        // As Linux does: the routes through a downed device go.
        o.routes.retain(|k| k.dev != "x1l0");
        let r = check(&t, None, &o).unwrap();
        let through: Vec<_> = t
            .routes(0)
            .unwrap()
            .into_iter()
            .filter(|r| r.dev == "x1l0")
            .collect();
        assert!(!through.is_empty());
        let mut want = vec![(Kind::Down, Some("ip link set dev x1l0 up".to_string()))];
        want.extend(
            through
                .iter()
                .map(|r| (Kind::MissingRoute, Some(format!("ip route replace {r}")))),
        );
        assert_eq!(kinds(&r), want);
        assert!(
            r.problems[1].what.contains("x1l0 is down"),
            "{}",
            r.problems[1]
        );
        // Up without carrier: said, no command fixes it.
        let mut o = healthy(&t, 0);
        iface(&mut o, "x2l1").carrier = false;
        let r = check(&t, None, &o).unwrap();
        assert_eq!(kinds(&r), vec![(Kind::NoCarrier, None)]);
    }

    #[test]
    fn sysctls() {
        let t = t222();
        let mut o = healthy(&t, 6);
        o.sysctls
            .insert("net.ipv4.conf.x0l1.rp_filter".into(), "1".into());
        o.sysctls.insert("net.ipv4.ip_forward".into(), "0".into());
        o.sysctls.remove("net.ipv4.conf.all.arp_announce");
        let r = check(&t, None, &o).unwrap();
        assert_eq!(
            kinds(&r),
            vec![
                (Kind::Sysctl, Some("sysctl -w net.ipv4.ip_forward=1".into())),
                (
                    Kind::Sysctl,
                    Some("sysctl -w net.ipv4.conf.x0l1.rp_filter=2".into())
                ),
                (
                    Kind::Sysctl,
                    Some("sysctl -w net.ipv4.conf.all.arp_announce=2".into())
                ),
            ]
        );
        assert!(r.problems[1].what.contains("is 1, needs 2 (loose) or 0"));
        assert!(r.problems[2].what.contains("cannot be read"));
        let cmds = t.host_commands(6).unwrap();
        assert!(r
            .problems
            .iter()
            .all(|p| cmds.contains(p.fix.as_ref().unwrap())));
    }

    #[test]
    fn addresses_missing_misprefixed_duplicated_foreign_extra() {
        let t = t222();
        // Missing (interface there and up).
        let mut o = healthy(&t, 2);
        let a = t.addresses(2).unwrap();
        iface(&mut o, "x0l1").addrs.clear();
        let r = check(&t, None, &o).unwrap();
        assert_eq!(
            kinds(&r),
            vec![(
                Kind::MissingAddress,
                Some(format!("ip addr replace {}/27 dev x0l1", a[1].ip))
            )]
        );
        assert!(r.problems[0]
            .what
            .starts_with("dimension 0 link 1: no address"));
        assert_eq!(r.nics, 5);
        // Missing with no such interface: its rp_filter is not asked for.
        o.interfaces.retain(|f| f.name != "x0l1");
        o.sysctls.remove("net.ipv4.conf.x0l1.rp_filter");
        let r = check(&t, None, &o).unwrap();
        assert_eq!(r.problems.len(), 1);
        assert!(r.problems[0].what.contains("no such interface"));
        assert!(r.problems[0]
            .fix
            .as_ref()
            .unwrap()
            .starts_with("ip link set dev x0l1 up && ip addr replace"));

        // Wrong prefix.
        let mut o = healthy(&t, 2);
        iface(&mut o, "x2l0").addrs[0].1 = 24;
        let r = check(&t, None, &o).unwrap();
        let ip4 = a[4].ip;
        assert_eq!(
            kinds(&r),
            vec![(
                Kind::WrongPrefix,
                Some(format!(
                    "ip addr del {ip4}/24 dev x2l0 && ip addr replace {ip4}/27 dev x2l0"
                ))
            )]
        );

        // On two interfaces.
        let mut o = healthy(&t, 2);
        iface(&mut o, "mgmt").addrs.push((ip4, 27));
        let r = check(&t, None, &o).unwrap();
        assert_eq!(
            kinds(&r),
            vec![(
                Kind::DuplicateAddress,
                Some(format!("ip addr del {ip4}/27 dev mgmt"))
            )]
        );

        // Another host's address, and one outside the plan.
        let mut o = healthy(&t, 2);
        let other = t.address(7, 1, 0).unwrap();
        iface(&mut o, "x1l0").addrs.push((other, 27));
        iface(&mut o, "mgmt").addrs.push((ip("10.10.200.1"), 24));
        let r = check(&t, None, &o).unwrap();
        assert_eq!(
            kinds(&r),
            vec![
                (
                    Kind::ExtraAddress,
                    Some("ip addr del 10.10.200.1/24 dev mgmt".into())
                ),
                (
                    Kind::ForeignAddress,
                    Some(format!("ip addr del {other}/27 dev x1l0"))
                ),
            ]
        );
        assert!(r.problems[1].what.contains("host 7's (1,1,1)"));
        assert_eq!(r.host, Some(2));
    }

    #[test]
    fn other_names_are_a_note_and_routes_follow_them() {
        let t = t222();
        let mut o = healthy(&t, 1);
        let rename = |s: &str| s.replace("x1l1", "eth7");
        for f in &mut o.interfaces {
            f.name = rename(&f.name);
        }
        for k in &mut o.routes {
            k.dev = rename(&k.dev);
        }
        o.sysctls = o
            .sysctls
            .into_iter()
            .map(|(k, v)| (rename(&k), v))
            .collect();
        let r = check(&t, None, &o).unwrap();
        assert!(r.ok());
        assert_eq!(kinds(&r), vec![(Kind::OtherName, None)]);
        assert!(r.problems[0]
            .to_string()
            .starts_with("note: dimension 1 link 1: "));
        // Fixes name the interface as it is here.
        o.sysctls
            .insert("net.ipv4.conf.eth7.rp_filter".into(), "1".into());
        let through = t.routes(1).unwrap().into_iter().find(|r| r.dev == "x1l1");
        let through = through.unwrap();
        o.routes.retain(|k| k.dest != through.dest);
        let r = check(&t, None, &o).unwrap();
        let fixes: Vec<_> = r.problems.iter().filter_map(|p| p.fix.clone()).collect();
        assert_eq!(
            fixes,
            vec![
                "sysctl -w net.ipv4.conf.eth7.rp_filter=2".to_string(),
                format!("ip route replace {}", rename(&through.to_string())),
            ]
        );
    }

    #[test]
    fn an_extra_route_into_the_rail_space() {
        let t = t222();
        let mut o = healthy(&t, 4);
        o.routes.push(KernelRoute {
            dest: network(ip("10.10.0.64"), 28),
            gateway: Some(ip("10.200.3.254")),
            dev: "mgmt".into(),
            metric: 5,
        });
        // Outside 10.10.0.0/16 or covering it from outside: not ours to judge.
        o.routes.push(KernelRoute {
            dest: network(ip("0.0.0.0"), 0),
            gateway: Some(ip("10.200.3.254")),
            dev: "mgmt".into(),
            metric: 0,
        });
        let r = check(&t, None, &o).unwrap();
        assert_eq!(
            kinds(&r),
            vec![(
                Kind::ExtraRoute,
                Some("ip route del 10.10.0.64/28 via 10.200.3.254 dev mgmt metric 5".into())
            )]
        );
    }

    #[test]
    fn which_host() {
        let t = t222();
        // --host that disagrees with the addresses: one problem, nothing else.
        let o = healthy(&t, 3);
        let r = check(&t, Some(4), &o).unwrap();
        assert_eq!(r.host, Some(4));
        assert_eq!(r.problems.len(), 1);
        assert_eq!(r.problems[0].kind, Kind::WrongHost);
        assert!(
            r.problems[0].what.contains("host 3 (0,1,1) 6"),
            "{}",
            r.problems[0]
        );
        // Nothing of the plan here.
        let mut o = healthy(&t, 3);
        o.interfaces.retain(|f| !f.name.starts_with('x'));
        let r = check(&t, None, &o).unwrap();
        assert_eq!(r.host, None);
        assert_eq!(kinds(&r).len(), 1);
        assert_eq!(r.problems[0].kind, Kind::NoHost);
        // ... but with --host, what it lacks: six addresses.
        let r = check(&t, Some(3), &o).unwrap();
        assert_eq!(
            r.problems
                .iter()
                .filter(|p| p.kind == Kind::MissingAddress)
                .count(),
            6
        );
        // Two hosts in equal numbers.
        let mut o = healthy(&t, 3);
        for (f, a) in o
            .interfaces
            .iter_mut()
            .filter(|f| f.name.starts_with('x'))
            .zip(t.addresses(5).unwrap())
            .take(3)
        {
            f.addrs = vec![(a.ip, a.prefix)];
        }
        let r = check(&t, None, &o).unwrap();
        assert_eq!(kinds(&r)[0].0, Kind::NoHost);
        assert!(r.problems[0].what.contains("in equal numbers"));
        // The majority decides; the minority is foreign.
        let mut o = healthy(&t, 3);
        iface(&mut o, "x0l0").addrs = vec![(t.address(5, 0, 0).unwrap(), 27)];
        let r = check(&t, None, &o).unwrap();
        assert_eq!(r.host, Some(3));
        let k: BTreeSet<Kind> = r.problems.iter().map(|p| p.kind).collect();
        assert_eq!(
            k,
            [Kind::MissingAddress, Kind::ForeignAddress]
                .into_iter()
                .collect()
        );
    }

    fn hex(a: &str) -> String {
        format!("{:08X}", u32::from_ne_bytes(ip(a).octets()))
    }

    #[test]
    fn parses_proc_net_route() {
        let mut text = String::from(
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n",
        );
        let line = |dev: &str, d: &str, g: &str, flags: u32, metric: u32, m: &str| {
            format!(
                "{dev}\t{}\t{}\t{flags:04X}\t0\t0\t{metric}\t{}\t0\t0\t0\n",
                hex(d),
                hex(g),
                hex(m)
            )
        };
        text += &line("x0l0", "10.10.0.0", "0.0.0.0", 1, 0, "255.255.255.224");
        text += &line("x1l0", "10.10.0.32", "10.10.0.66", 3, 0, "255.255.255.224");
        text += &line("mgmt", "0.0.0.0", "10.200.3.254", 3, 100, "0.0.0.0");
        text += "garbage\n";
        text += &line("x0l0", "10.10.0.0", "0.0.0.0", 1, 0, "255.0.255.0");
        text += "x0l0\tZZZZZZZZ\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        let (routes, skipped) = parse_proc_net_route(&text);
        assert_eq!(skipped, 3);
        assert_eq!(
            routes,
            vec![
                KernelRoute {
                    dest: network(ip("10.10.0.0"), 27),
                    gateway: None,
                    dev: "x0l0".into(),
                    metric: 0
                },
                KernelRoute {
                    dest: network(ip("10.10.0.32"), 27),
                    gateway: Some(ip("10.10.0.66")),
                    dev: "x1l0".into(),
                    metric: 0
                },
                KernelRoute {
                    dest: network(ip("0.0.0.0"), 0),
                    gateway: Some(ip("10.200.3.254")),
                    dev: "mgmt".into(),
                    metric: 100
                },
            ]
        );
        assert_eq!(parse_proc_net_route(""), (vec![], 0));
    }

    proptest::proptest! {
        /// Arbitrary text never panics the parser, and whatever it returns is a valid prefix.
        #[test]
        fn parse_never_panics(s in "\\PC{0,200}") {
            let (routes, _) = parse_proc_net_route(&s);
            for r in routes {
                proptest::prop_assert_eq!(network(r.dest.addr, r.dest.prefix), r.dest);
            }
        }
    }

    #[test]
    fn detours_are_checked_both_ways() {
        let t = t222().with_detours(true);
        let mut o = healthy(&t, 3);
        let r = check(&t, None, &o).unwrap();
        assert!(r.ok(), "{:?}", r.problems);
        assert_eq!(r.routes, t.routes(3).unwrap().len() + 12);
        // Without the rule, and with one detour route gone and one foreign.
        o.detour_rule = Some(false);
        let gone = o.detour_routes.remove(0);
        o.detour_routes.push(KernelRoute {
            dest: network(ip("10.10.0.1"), 32),
            gateway: Some(gone.gateway.unwrap()),
            dev: gone.dev.clone(),
            metric: 0,
        });
        let r = check(&t, None, &o).unwrap();
        let got: Vec<(Kind, Option<String>)> =
            r.problems.iter().map(|p| (p.kind, p.fix.clone())).collect();
        let want_route = t.detour_routes(3).unwrap().remove(0);
        assert_eq!(
            got,
            vec![
                (
                    Kind::MissingRoute,
                    Some("ip rule add iif lo lookup 26744 pref 26744".into())
                ),
                (
                    Kind::MissingRoute,
                    Some(format!("ip route replace table 26744 {want_route}"))
                ),
                (
                    Kind::ExtraRoute,
                    Some("ip route del table 26744 10.10.0.1/32".into())
                ),
            ]
        );
        // A plan without detours on a host that has the rule.
        let mut o = healthy(&t222(), 3);
        o.detour_rule = Some(true);
        let r = check(&t222(), None, &o).unwrap();
        assert_eq!(r.problems.len(), 1);
        assert_eq!(r.problems[0].kind, Kind::ExtraRoute);
        assert_eq!(r.problems[0].fix.as_deref(), Some("ip rule del pref 26744"));
    }

    #[test]
    fn ip_route_show_text() {
        let text = "10.10.0.2 via 10.10.0.33 dev x0l0 src 10.10.0.1 \n\
                    10.10.4.0/27 dev x1l0 proto kernel scope link metric 5\n\
                    \n\
                    garbage here\n\
                    10.10.9.9/40 dev x\n";
        let (r, skipped) = parse_ip_route_show(text);
        assert_eq!(skipped, 2);
        assert_eq!(
            r,
            vec![
                KernelRoute {
                    dest: network(ip("10.10.0.2"), 32),
                    gateway: Some(ip("10.10.0.33")),
                    dev: "x0l0".into(),
                    metric: 0
                },
                KernelRoute {
                    dest: network(ip("10.10.4.0"), 27),
                    gateway: None,
                    dev: "x1l0".into(),
                    metric: 5
                },
            ]
        );
    }
}
