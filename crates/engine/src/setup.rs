//! Rail discovery and routes. A process listens on loopback and on every rail interface (one
//! port for all) and describes itself in an [`Address`]; a pair of processes on different hosts
//! uses the rails whose subnets they share, numbered in subnet order so that both sides agree on
//! the numbering without talking. Processes on the same host use `HX_LOOPBACK_RAILS` loopback
//! connections (or shared memory).
//!
//! On a hyper-crossbar (`HX_TOPOLOGY`) a pair uses the topology's disjoint paths instead, one
//! rail each, most of them relayed by other hosts' kernels: both sides number them as the paths
//! from the lower-numbered host to the higher one, so a rail is the same TCP 4-tuple whichever
//! side connects it (lower host: its path's source address, higher host: the path's
//! destination address).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use hx_topology::Topology;
use hx_transport::ifaces::{self, Iface};
use hx_wire::Address;

use crate::{Error, Settings};

/// How to reach a peer on one rail.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub local: Ipv4Addr,
    pub device: Option<String>,
    pub remote: SocketAddr,
    pub label: String,
}

impl Route {
    /// The single shared-memory link to a peer on this host.
    pub(crate) fn shm() -> Route {
        Route {
            local: Ipv4Addr::LOCALHOST,
            device: None,
            remote: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)),
            label: "shm".into(),
        }
    }
}

/// A name for this host that differs between network namespaces (each testbed host is one).
pub(crate) fn host_id() -> String {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{hostname}/{netns}")
}

/// Whether Yama (the kernel's ptrace restriction) lets same-host peers copy into this
/// process with process_vm_writev, and what that takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DirectCopy {
    /// No Yama, or `ptrace_scope` 0: any process of the same user may, nothing to do.
    Allowed,
    /// `ptrace_scope` 1: only after `prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`, which lets any
    /// process of the same user attach to this one (what Open MPI's vader does for CMA).
    NeedsPtracerAny,
    /// `ptrace_scope` 2 or 3 (admin only, or never): large messages go through the ring.
    Refused,
}

impl DirectCopy {
    pub(crate) fn from_scope(scope: Option<&str>) -> DirectCopy {
        match scope.map(str::trim) {
            None | Some("0") => DirectCopy::Allowed,
            Some("1") => DirectCopy::NeedsPtracerAny,
            Some(_) => DirectCopy::Refused,
        }
    }

    /// This host's, read once.
    pub(crate) fn here() -> DirectCopy {
        static HERE: std::sync::OnceLock<DirectCopy> = std::sync::OnceLock::new();
        *HERE.get_or_init(|| {
            let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok();
            DirectCopy::from_scope(scope.as_deref())
        })
    }
}

/// This host's rail interfaces: up, not loopback, not the management network (the one the
/// bootstrap service is reached through), filtered by HX_RAILS; sorted by subnet.
pub(crate) fn rail_interfaces(
    settings: &Settings,
    bootstrap_ip: Option<Ipv4Addr>,
) -> Result<Vec<Iface>, Error> {
    let all = ifaces::list().map_err(crate::error::io_err("listing interfaces"))?;
    let mut rails: Vec<Iface> = all
        .iter()
        .filter(|i| i.up && !i.loopback && !i.addr.is_loopback())
        .filter(|i| bootstrap_ip.is_none_or(|b| !i.contains(b)))
        .cloned()
        .collect();
    if let Some(names) = &settings.rails {
        for n in names {
            if !rails.iter().any(|i| &i.name == n) {
                let have: Vec<&str> = rails.iter().map(|i| i.name.as_str()).collect();
                return Err(Error::Config(format!(
                    "HX_RAILS names {n}, which is not a rail interface here (have: {})",
                    if have.is_empty() {
                        "none".to_string()
                    } else {
                        have.join(", ")
                    }
                )));
            }
        }
        rails.retain(|i| names.contains(&i.name));
    }
    rails.sort_by_key(|i| (i.network(), i.name.clone()));
    rails.dedup_by_key(|i| i.network());
    if let Some(i) = rails.iter().find(|i| hxb_nic_name(&i.name)) {
        // Without the topology only the hosts of one line would share a subnet: the rest
        // would find no rail in common, and line neighbours would use one dimension's NICs.
        return Err(Error::Config(format!(
            "interface {} ({}/{}) is named like a hyper-crossbar NIC (x<dimension>l<link>): \
             set HX_TOPOLOGY (and HX_LINKS_PER_DIM) to the topology, e.g. HX_TOPOLOGY=hxb:2x2x2 \
             HX_LINKS_PER_DIM=2, so that peers are reached over its relayed paths",
            i.name, i.addr, i.prefix
        )));
    }
    Ok(rails)
}

/// `x<digits>l<digits>`: hx-topology's name for a NIC of a multi-dimensional hyper-crossbar.
fn hxb_nic_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('x') else {
        return false;
    };
    let Some((d, l)) = rest.split_once('l') else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(d) && digits(l)
}

/// This host's place in a hyper-crossbar (`HX_TOPOLOGY`): which host of the topology it is
/// and the interface holding each of its addresses.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    pub topo: Topology,
    pub host: u32,
    /// (address, interface) for every address the plan gives this host, in plan order.
    pub nics: Vec<(Ipv4Addr, String)>,
}

impl Place {
    fn nic(&self, ip: Ipv4Addr) -> Option<&str> {
        self.nics
            .iter()
            .find(|(a, _)| *a == ip)
            .map(|(_, n)| n.as_str())
    }

    fn describe(&self) -> String {
        describe_topology(&self.topo)
    }
}

fn describe_topology(t: &Topology) -> String {
    format!(
        "HX_TOPOLOGY={} with {} link(s) per dimension{}",
        t.spec(),
        t.links_per_dim(),
        if t.detours() { " and HX_DETOURS=1" } else { "" }
    )
}

/// Which host of `topo` this is, found from the interfaces' addresses, and its NICs in plan
/// order; every address the plan gives it must be on an interface that is up, with the plan's
/// prefix. Anything else is an error saying what is missing (no fallback to fewer paths).
pub(crate) fn topology_interfaces(
    topo: &Topology,
    bootstrap_ip: Option<Ipv4Addr>,
) -> Result<(Place, Vec<Iface>), Error> {
    let all = ifaces::list().map_err(crate::error::io_err("listing interfaces"))?;
    let all: Vec<Iface> = all
        .into_iter()
        .filter(|i| !i.loopback && !i.addr.is_loopback())
        .filter(|i| bootstrap_ip.is_none_or(|b| !i.contains(b)))
        .collect();
    let (place, rails) = place_in(topo, &all)?;
    if topo.detours() {
        check_detour_routes(topo, place.host)?;
    }
    Ok((place, rails))
}

/// With detours, this host's kernel must send its own packets to each detour address through
/// the detour's relay: without the rule and routes of `topo routes --detours` the detour rails
/// would still connect, straight over the line's own links, and share them (a silent fallback
/// to fewer paths). Asks the kernel as `ip route get` does, for every detour address at once
/// (one `ip -batch`, once per process).
fn check_detour_routes(topo: &Topology, host: u32) -> Result<(), Error> {
    let want = topo
        .detour_routes(host)
        .map_err(|e| Error::Setup(format!("detour routes: {e}")))?;
    if want.is_empty() {
        return Ok(());
    }
    let fix = format!(
        "add them with `hxcomm topo routes --topology {} --links-per-dim {} --detours --host \
         {host} | sh` (a testbed: `net up ... --detours`), or leave HX_DETOURS unset",
        topo.spec(),
        topo.links_per_dim()
    );
    let batch: String = want
        .iter()
        .map(|r| format!("route get {}\n", r.dest.addr))
        .collect();
    let out = run_ip_batch(&batch).map_err(|e| {
        Error::Setup(format!(
            "HX_DETOURS=1: cannot ask the kernel for this host's detour routes ({e}); `ip` \
             (iproute2) is needed to check them"
        ))
    })?;
    let got = parse_route_get_vias(&out);
    for r in &want {
        match got.iter().find(|(dst, _)| *dst == r.dest.addr) {
            Some((_, Some(via))) if *via == r.via => {}
            other => {
                let how = match other {
                    Some((_, Some(via))) => format!("via {via}"),
                    Some((_, None)) => "directly".to_string(),
                    None => "nowhere (no answer)".to_string(),
                };
                return Err(Error::Setup(format!(
                    "HX_DETOURS=1 on host {host} of {} x {}: the kernel sends this host's \
                     packets to {} {how}, not via the detour's relay {} (rule `{}` and the \
                     routes of table {} missing?); {fix}",
                    topo.spec(),
                    topo.links_per_dim(),
                    r.dest.addr,
                    r.via,
                    hx_topology::detour_rule(),
                    hx_topology::DETOUR_TABLE
                )));
            }
        }
    }
    Ok(())
}

fn run_ip_batch(batch: &str) -> std::io::Result<String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("ip")
        .args(["-4", "-o", "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(batch.as_bytes())?;
    let out = child.wait_with_output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The destination and gateway (`None`: on the link) of each line of `ip -o route get` output.
fn parse_route_get_vias(text: &str) -> Vec<(Ipv4Addr, Option<Ipv4Addr>)> {
    text.lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = usize::from(w.first() == Some(&"local"));
            let dst = w.get(at)?.parse().ok()?;
            let via = w
                .windows(2)
                .find(|p| p[0] == "via")
                .and_then(|p| p[1].parse().ok());
            Some((dst, via))
        })
        .collect()
}

/// [`topology_interfaces`] on a given list of interfaces.
pub(crate) fn place_in(topo: &Topology, all: &[Iface]) -> Result<(Place, Vec<Iface>), Error> {
    let what = describe_topology(topo);
    let mut hosts: Vec<(u32, &Iface)> = all
        .iter()
        .filter_map(|i| topo.locate(i.addr).map(|(h, _, _)| (h, i)))
        .collect();
    hosts.sort_by_key(|(h, _)| *h);
    let Some(&(host, _)) = hosts.first() else {
        let have: Vec<String> = all
            .iter()
            .map(|i| format!("{} {}/{}", i.name, i.addr, i.prefix))
            .collect();
        return Err(Error::Config(format!(
            "{what}: no interface here has an address of its plan (have: {}); \
             `hxcomm topo show` prints the plan",
            if have.is_empty() {
                "none".to_string()
            } else {
                have.join(", ")
            }
        )));
    };
    if let Some((other, i)) = hosts.iter().find(|(h, _)| *h != host) {
        return Err(Error::Config(format!(
            "{what}: this machine has addresses of two hosts of the topology: host {host} \
             and host {other} ({} on {}); do the sizes and links per dimension match the \
             network?",
            i.addr, i.name
        )));
    }
    let plan = topo
        .addresses(host)
        .map_err(|e| Error::Config(format!("{what}: {e}")))?;
    let mut nics = Vec::with_capacity(plan.len());
    let mut rails = Vec::with_capacity(plan.len());
    for a in &plan {
        let found = all.iter().find(|i| i.addr == a.ip);
        let problem = match found {
            None => Some("no interface has it".to_string()),
            Some(i) if i.prefix != a.prefix => Some(format!(
                "{} has it with prefix /{} instead of /{}",
                i.name, i.prefix, a.prefix
            )),
            Some(i) if !i.up => Some(format!("{} is down", i.name)),
            Some(_) => None,
        };
        if let Some(p) = problem {
            return Err(Error::Config(format!(
                "{what}: this is host {host} {:?}, whose NIC of dimension {} link {} (named {} \
                 by the plan) should have {}/{}, but {p}; `hxcomm topo check` lists everything \
                 that differs",
                topo.coords(host).unwrap_or_default(),
                a.dim,
                a.link,
                a.iface,
                a.ip,
                a.prefix
            )));
        }
        let i = found.expect("checked above");
        nics.push((a.ip, i.name.clone()));
        rails.push(i.clone());
    }
    Ok((
        Place {
            topo: topo.clone(),
            host,
            nics,
        },
        rails,
    ))
}

/// The rails to `peer` on a hyper-crossbar: one per disjoint path between the two hosts.
fn topology_routes(place: &Place, peer: &Address) -> Result<Vec<Route>, Error> {
    let t = &place.topo;
    let what = || place.describe();
    let Some(first) = peer.rails.first() else {
        return Err(Error::Setup(format!(
            "{peer} has no rail address; with {} every process needs the topology's NICs",
            what()
        )));
    };
    let Some((host, _, _)) = t.locate(first.ip) else {
        return Err(Error::Setup(format!(
            "{peer}: its address {} is not in the plan of {} (does it run with another \
             HX_TOPOLOGY, or none?)",
            first.ip,
            what()
        )));
    };
    let plan = t
        .addresses(host)
        .map_err(|e| Error::Setup(format!("{peer}: {e}")))?;
    for (i, r) in peer.rails.iter().enumerate() {
        if plan
            .get(i)
            .is_none_or(|a| a.ip != r.ip || a.prefix != r.prefix)
        {
            return Err(Error::Setup(format!(
                "{peer}: its addresses are not those {} gives host {host} (address {i}: {}/{}; \
                 does it run with another topology?)",
                what(),
                r.ip,
                r.prefix
            )));
        }
    }
    if host == place.host {
        return Err(Error::Setup(format!(
            "{peer} is host {host} of the topology, as this process is, but on another host \
             (two machines or namespaces with the same addresses?)"
        )));
    }
    let (lo, hi) = (place.host.min(host), place.host.max(host));
    let paths = t
        .disjoint_paths(lo, hi)
        .map_err(|e| Error::Setup(format!("paths to {peer}: {e}")))?;
    let i_am_lo = place.host == lo;
    Ok(paths
        .iter()
        .map(|p| {
            // The lower host connects from the path's source (its first hop's NIC, on which
            // the replies arrive too, so it may bind the device); the higher one from the
            // destination address, unbound: its traffic back leaves by its own routes.
            let (local, remote, device) = if i_am_lo {
                (p.src_addr, p.dst_addr, place.nic(p.src_addr))
            } else {
                (p.dst_addr, p.src_addr, None)
            };
            Route {
                local,
                device: device.map(str::to_string),
                remote: SocketAddr::V4(SocketAddrV4::new(remote, peer.port)),
                label: format!("{}:{}h", place.nic(local).unwrap_or("?"), p.hop_count()),
            }
        })
        .collect())
}

/// A 64-bit key for "this host" as shared memory sees it (boot id and network namespace); two
/// processes may share memory iff their keys are equal.
pub(crate) fn host_hash() -> u64 {
    let key = hx_transport::shm::host_key().unwrap_or_else(|_| host_id());
    let h = hx_bootstrap::hmac_sha256(b"hxcomm-host", &[key.as_bytes()]);
    u64::from_le_bytes(h[..8].try_into().expect("8 bytes"))
}

/// The rails between this process and `peer`, in the order both sides derive from their
/// addresses without talking: same host, `loopback_rails` loopback connections; otherwise one
/// per subnet both have, in subnet order.
pub(crate) fn routes(
    me: &Address,
    my_devices: &[String],
    place: Option<&Place>,
    peer: &Address,
    loopback_rails: usize,
) -> Result<Vec<Route>, Error> {
    if me.host == peer.host {
        return Ok((0..loopback_rails)
            .map(|i| Route {
                local: Ipv4Addr::LOCALHOST,
                device: None,
                remote: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, peer.port)),
                label: format!("lo#{i}"),
            })
            .collect());
    }
    if let Some(place) = place {
        return topology_routes(place, peer);
    }
    let mut out = Vec::new();
    for (i, mine) in me.rails.iter().enumerate() {
        if let Some(theirs) = peer
            .rails
            .iter()
            .find(|t| t.network() == mine.network() && t.prefix == mine.prefix)
        {
            out.push(Route {
                local: mine.ip,
                device: my_devices.get(i).cloned(),
                remote: SocketAddr::V4(SocketAddrV4::new(theirs.ip, peer.port)),
                label: my_devices
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| mine.ip.to_string()),
            });
        }
    }
    if out.is_empty() {
        let list = |a: &Address| {
            a.rails
                .iter()
                .map(|r| format!("{}/{}", r.ip, r.prefix))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(Error::Setup(format!(
            "no rail in common with {peer}: mine [{}], theirs [{}]",
            list(me),
            list(peer)
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {

    #[test]
    fn route_get_answers_parse() {
        let text =
            "10.10.0.33 via 10.10.0.2 dev x0l0 table 26744 src 10.10.0.1 uid 0 \\    cache \n\
                    10.10.2.2 dev x2l0 src 10.10.2.1 uid 0 \\    cache \n\
                    local 10.10.0.1 dev lo table local src 10.10.0.1 uid 0 \\    cache <local> \n\
                    garbage\n";
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(
            parse_route_get_vias(text),
            vec![
                (ip("10.10.0.33"), Some(ip("10.10.0.2"))),
                (ip("10.10.2.2"), None),
                (ip("10.10.0.1"), None),
            ]
        );
    }
    #[test]
    fn direct_copy_follows_yama() {
        use super::DirectCopy;
        use super::DirectCopy::*;
        assert_eq!(DirectCopy::from_scope(None), Allowed);
        assert_eq!(DirectCopy::from_scope(Some("0\n")), Allowed);
        assert_eq!(DirectCopy::from_scope(Some("1\n")), NeedsPtracerAny);
        assert_eq!(DirectCopy::from_scope(Some("2\n")), Refused);
        assert_eq!(DirectCopy::from_scope(Some("3")), Refused);
    }

    use super::*;
    use hx_wire::RailIp;

    fn addr(host: u64, rails: &[[u8; 4]]) -> Address {
        Address {
            flags: 0,
            ep: 0,
            instance: 1,
            host,
            pid: 0,
            port: 2000,
            rails: rails
                .iter()
                .map(|a| RailIp {
                    ip: Ipv4Addr::from(*a),
                    prefix: 24,
                })
                .collect(),
        }
    }

    #[test]
    fn rails_pair_by_subnet() {
        let a = addr(1, &[[10, 9, 9, 1], [10, 10, 0, 1], [10, 10, 1, 1]]);
        let devs: Vec<String> = ["x", "r0", "r1"].iter().map(|s| s.to_string()).collect();
        let b = addr(2, &[[10, 10, 0, 2], [10, 10, 1, 2]]);
        let r = routes(&a, &devs, None, &b, 1).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].remote, "10.10.0.2:2000".parse().unwrap());
        assert_eq!(r[1].device.as_deref(), Some("r1"));
        assert_eq!(r[1].label, "r1");
        let lo = routes(&a, &devs, None, &addr(1, &[]), 3).unwrap();
        assert_eq!(lo.len(), 3);
        assert_eq!(lo[2].remote, "127.0.0.1:2000".parse().unwrap());
        assert!(routes(&a, &devs, None, &addr(3, &[[192, 0, 2, 1]]), 1).is_err());
    }
}

#[cfg(test)]
mod topology_tests {
    use super::*;
    use hx_wire::RailIp;

    fn ifaces_of(t: &Topology, host: u32) -> Vec<Iface> {
        t.addresses(host)
            .unwrap()
            .into_iter()
            .map(|a| Iface {
                name: a.iface,
                addr: a.ip,
                prefix: a.prefix,
                up: true,
                loopback: false,
            })
            .collect()
    }

    fn address_of(t: &Topology, host: u32, port: u16) -> Address {
        Address {
            flags: 0,
            ep: 0,
            instance: 100 + u64::from(host),
            host: 1000 + u64::from(host),
            pid: 0,
            port,
            rails: t
                .addresses(host)
                .unwrap()
                .into_iter()
                .take(hx_wire::ADDRESS_MAX_RAILS)
                .map(|a| RailIp {
                    ip: a.ip,
                    prefix: a.prefix,
                })
                .collect(),
        }
    }

    #[test]
    fn both_ends_of_every_pair_agree_on_each_rail() {
        for (spec, links) in [("hxb:2x2x2", 2), ("hxb:3x3x2", 1), ("hxb:4", 3)] {
            let t = Topology::parse(spec, links).unwrap();
            for a in 0..t.hosts() {
                for b in 0..t.hosts() {
                    if a == b {
                        continue;
                    }
                    let (pa, _) = place_in(&t, &ifaces_of(&t, a)).unwrap();
                    let (pb, _) = place_in(&t, &ifaces_of(&t, b)).unwrap();
                    assert_eq!((pa.host, pb.host), (a, b));
                    let (aa, ab) = (address_of(&t, a, 4000), address_of(&t, b, 5000));
                    let ra = routes(&aa, &[], Some(&pa), &ab, 1).unwrap();
                    let rb = routes(&ab, &[], Some(&pb), &aa, 1).unwrap();
                    let differing = (0..t.ndims())
                        .filter(|&d| t.coords(a).unwrap()[d] != t.coords(b).unwrap()[d])
                        .count();
                    assert_eq!(ra.len(), differing * links as usize, "{spec} {a}->{b}");
                    assert_eq!(ra.len(), rb.len());
                    for (x, y) in ra.iter().zip(&rb) {
                        // One 4-tuple whichever side connects.
                        assert_eq!(x.remote, SocketAddr::V4(SocketAddrV4::new(y.local, 5000)));
                        assert_eq!(y.remote, SocketAddr::V4(SocketAddrV4::new(x.local, 4000)));
                        // Only the lower host binds a device: its path's first NIC.
                        let (low, high) = if a < b { (x, y) } else { (y, x) };
                        assert!(high.device.is_none());
                        let dev = low.device.as_deref().unwrap();
                        assert_eq!(pa.nic(low.local).or(pb.nic(low.local)), Some(dev));
                    }
                }
            }
        }
    }

    #[test]
    fn corners_of_2x2x2_get_six_paths_of_three_hops() {
        let t = Topology::parse("hxb:2x2x2", 2).unwrap();
        let (p0, rails) = place_in(&t, &ifaces_of(&t, 0)).unwrap();
        assert_eq!(rails.len(), 6);
        let r = routes(
            &address_of(&t, 0, 1),
            &[],
            Some(&p0),
            &address_of(&t, 7, 2),
            1,
        )
        .unwrap();
        assert_eq!(r.len(), 6);
        assert!(r.iter().all(|r| r.label.ends_with(":3h")), "{r:?}");
        let mut locals: Vec<_> = r.iter().map(|r| r.local).collect();
        locals.sort();
        locals.dedup();
        assert_eq!(locals.len(), 6, "each path leaves by its own NIC");
    }

    #[test]
    fn what_does_not_match_the_topology_is_an_error() {
        let t = Topology::parse("hxb:2x2x2", 2).unwrap();
        let msg = |r: Result<(Place, Vec<Iface>), Error>| r.unwrap_err().to_string();
        // A missing NIC, a NIC down, a wrong prefix.
        let mut v = ifaces_of(&t, 3);
        v.remove(4);
        let m = msg(place_in(&t, &v));
        assert!(
            m.contains("dimension 2 link 0") && m.contains("no interface"),
            "{m}"
        );
        let mut v = ifaces_of(&t, 3);
        v[1].up = false;
        assert!(msg(place_in(&t, &v)).contains("x0l1 is down"));
        let mut v = ifaces_of(&t, 3);
        v[0].prefix = 24;
        assert!(msg(place_in(&t, &v)).contains("prefix /24 instead of /27"));
        // Addresses of two hosts; none of the plan.
        let mut v = ifaces_of(&t, 3);
        v.push(ifaces_of(&t, 5)[0].clone());
        assert!(msg(place_in(&t, &v)).contains("host 3 and host 5"));
        let eth = Iface {
            name: "eth0".into(),
            addr: Ipv4Addr::new(192, 0, 2, 1),
            prefix: 24,
            up: true,
            loopback: false,
        };
        assert!(msg(place_in(&t, &[eth])).contains("no interface here has an address"));
        // A peer outside the plan, or claiming this very host.
        let (p3, _) = place_in(&t, &ifaces_of(&t, 3)).unwrap();
        let me = address_of(&t, 3, 1);
        let mut stranger = address_of(&t, 4, 2);
        stranger.rails[0].ip = Ipv4Addr::new(10, 9, 0, 1);
        let m = routes(&me, &[], Some(&p3), &stranger, 1)
            .unwrap_err()
            .to_string();
        assert!(m.contains("not in the plan"), "{m}");
        let mut twin = address_of(&t, 3, 2);
        twin.host = 9999;
        let m = routes(&me, &[], Some(&p3), &twin, 1)
            .unwrap_err()
            .to_string();
        assert!(m.contains("as this process is"), "{m}");
        let mut mixed = address_of(&t, 4, 2);
        mixed.rails[2].ip = t.addresses(5).unwrap()[2].ip;
        let m = routes(&me, &[], Some(&p3), &mixed, 1)
            .unwrap_err()
            .to_string();
        assert!(m.contains("not those"), "{m}");
    }

    #[test]
    fn hyper_crossbar_nic_names_without_a_topology_are_refused() {
        assert!(hxb_nic_name("x0l1") && hxb_nic_name("x12l3"));
        assert!(!hxb_nic_name("xl1") && !hxb_nic_name("x0l") && !hxb_nic_name("eth0"));
        assert!(!hxb_nic_name("r0") && !hxb_nic_name("x0y1"));
    }
}
