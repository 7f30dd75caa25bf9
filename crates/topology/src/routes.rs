//! Per-host route tables and sysctls that make the kernels forward along the intended paths.

use std::fmt;
use std::net::Ipv4Addr;

use crate::plan::{Subnet, RAIL_NET};
use crate::topo::{Error, Topology};

/// One route: `ip route replace <dest> via <via> dev <dev> [src <src>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The destination prefix.
    pub dest: Subnet,
    /// The next hop, an address on `dev`'s line subnet.
    pub via: Ipv4Addr,
    /// The outgoing interface.
    pub dev: String,
    /// The preferred source for packets this host originates: its own address on `dev`, so an
    /// unbound socket gets the source address of its path.
    pub src: Option<Ipv4Addr>,
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} via {} dev {}", self.dest, self.via, self.dev)?;
        if let Some(s) = self.src {
            write!(f, " src {s}")?;
        }
        Ok(())
    }
}

/// The routing table that holds the detour routes ([`Topology::detour_routes`]), also the
/// preference of the rule that consults it for packets this host originates only (`ip rule
/// add iif lo lookup 26744 pref 26744`; 26744 is "hx"): forwarded traffic keeps the plan's
/// dimension-order routes of the main table.
pub const DETOUR_TABLE: u32 = 26744;

/// The rule that sends this host's own packets to [`DETOUR_TABLE`] first.
pub fn detour_rule() -> String {
    format!("iif lo lookup {DETOUR_TABLE} pref {DETOUR_TABLE}")
}

/// One sysctl setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysctl {
    /// The key, e.g. `net.ipv4.ip_forward`.
    pub key: String,
    /// The value.
    pub value: &'static str,
}

/// What a slot (one line subnet's worth of address space) of 10.10.0.0/16 asks of a route.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// A line subnet reached through next hop `via` (route label: via decides the device).
    Via(usize),
    /// One of the host's own line subnets: its connected /N route is more specific than any
    /// aggregate, so an aggregate may cover it.
    Own,
    /// Beyond the plan: no route may cover it (a packet there must not wander).
    Unused,
}

impl Topology {
    /// One route per line subnet that `host` is not on (those it is on are connected routes
    /// that the kernel adds with the addresses): `subnet_count() - nics_per_host()` routes.
    /// For a line of dimension `d`, the next hop is the neighbour across the first dimension
    /// `f` in rotation order `d+1, ..., d-1` in which `host` and the line differ, over the
    /// line's link; every host of the line has that same first hop, so one route serves the
    /// whole line. [`Topology::routes`] aggregates these.
    pub fn line_routes(&self, host: u32) -> Result<Vec<Route>, Error> {
        self.check_host(host)?;
        let mut v = Vec::new();
        for (index, route) in self.slot_routes(host).into_iter().enumerate() {
            if let Some(r) = route {
                let dest = Subnet {
                    addr: Ipv4Addr::from(self.subnet_base(index as u32)),
                    prefix: self.subnet_prefix(),
                };
                v.push(Route { dest, ..r });
            }
        }
        Ok(v)
    }

    /// For each subnet index, the route towards it (dest left as 0.0.0.0/0), or `None` for the
    /// host's own lines.
    fn slot_routes(&self, host: u32) -> Vec<Option<Route>> {
        let none = Subnet {
            addr: Ipv4Addr::UNSPECIFIED,
            prefix: 0,
        };
        let mut v = vec![None; self.subnet_count() as usize];
        for d in 0..self.ndims() {
            for line in 0..self.lines(d) {
                let Some(t) = self.line_host(d, line, 0) else {
                    continue;
                };
                // The first differing dimension after d; d itself comes last, and if only d
                // differs the host is on the line (connected).
                let Some(f) = self.next_dim(host, t, d).filter(|&f| f != d) else {
                    continue;
                };
                let nb = self.with_coord(host, f, self.coord(t, f));
                for link in 0..self.links {
                    v[self.subnet_index(d, link, line) as usize] = Some(Route {
                        dest: none,
                        via: self.addr_unchecked(nb, f, link),
                        dev: self.iface_name(f, link),
                        src: Some(self.addr_unchecked(host, f, link)),
                    });
                }
            }
        }
        v
    }

    /// `host`'s route table: the line routes of [`Topology::line_routes`], merged into the
    /// fewest aligned prefixes that a binary split of 10.10.0.0/16 finds, where a prefix may
    /// cover the host's own line subnets (their connected routes are more specific) but never
    /// address space beyond the plan. Sorted by destination. Empty for one dimension.
    pub fn routes(&self, host: u32) -> Result<Vec<Route>, Error> {
        self.check_host(host)?;
        let per_slot = self.slot_routes(host);
        // Label each slot by its next hop; routes with one next hop share device and source.
        let mut labels: Vec<Ipv4Addr> = Vec::new();
        let mut slots: Vec<Slot> = per_slot
            .iter()
            .map(|r| match r {
                None => Slot::Own,
                Some(r) => Slot::Via(match labels.iter().position(|&v| v == r.via) {
                    Some(i) => i,
                    None => {
                        labels.push(r.via);
                        labels.len() - 1
                    }
                }),
            })
            .collect();
        let block = match self.subnet_prefix() {
            p if p >= 16 => 1u32 << (32 - u32::from(p)),
            _ => return Ok(Vec::new()),
        };
        let total = (1u32 << 16) / block;
        slots.resize(total as usize, Slot::Unused);
        let mut out = Vec::new();
        self.aggregate(&slots, 0, total, block, &per_slot, &mut out);
        Ok(out)
    }

    fn aggregate(
        &self,
        slots: &[Slot],
        lo: u32,
        size: u32,
        block: u32,
        per_slot: &[Option<Route>],
        out: &mut Vec<Route>,
    ) {
        let range = &slots[lo as usize..(lo + size) as usize];
        let mut label = None;
        let mut uniform = true;
        let mut unused = false;
        for s in range {
            match *s {
                Slot::Unused => unused = true,
                Slot::Own => {}
                Slot::Via(l) => match label {
                    None => label = Some(l),
                    Some(x) if x != l => uniform = false,
                    Some(_) => {}
                },
            }
        }
        if uniform && !unused {
            if label.is_some() {
                let first = range
                    .iter()
                    .position(|s| matches!(s, Slot::Via(_)))
                    .unwrap_or(0);
                if let Some(r) = &per_slot[lo as usize + first] {
                    let bits = (size * block).trailing_zeros();
                    out.push(Route {
                        dest: Subnet {
                            addr: Ipv4Addr::from(u32::from(RAIL_NET) + lo * block),
                            prefix: (32 - bits) as u8,
                        },
                        ..r.clone()
                    });
                }
            }
            return;
        }
        // Mixed next hops, or space beyond the plan inside: split, unless nothing in here
        // needs a route at all.
        if size == 1 || !range.iter().any(|s| matches!(s, Slot::Via(_))) {
            return;
        }
        let half = size / 2;
        self.aggregate(slots, lo, half, block, per_slot, out);
        self.aggregate(slots, lo + half, half, block, per_slot, out);
    }

    /// With detours on ([`Topology::with_detours`]), `host`'s routes for its own packets to
    /// its line neighbours' addresses of the other dimensions: one /32 per neighbour in
    /// dimension `d`, other dimension `e` and link, via the detour relay's address across `e`
    /// (its neighbour at the next coordinate of `e`) over the same link, in
    /// [`DETOUR_TABLE`]. From there the main tables of the relays carry the packet along the
    /// relay's line of `d` and back across `e` (see [`Topology::path`]). Empty without
    /// detours; `sum over d of (size(d) - 1) x (D - 1) x links` routes with them (hxb:2x2x2 x 2:
    /// 12, hxb:16x16x10 x 2: 156). Sorted by destination.
    pub fn detour_routes(&self, host: u32) -> Result<Vec<Route>, Error> {
        self.check_host(host)?;
        let mut v = Vec::new();
        if !self.detours {
            return Ok(v);
        }
        for d in 0..self.ndims() {
            for pos in (0..self.dims[d]).filter(|&p| p != self.coord(host, d)) {
                let nb = self.with_coord(host, d, pos);
                for e in (0..self.ndims()).filter(|&e| e != d) {
                    let relay = self.detour_relay(host, e);
                    for link in 0..self.links {
                        v.push(Route {
                            dest: Subnet {
                                addr: self.addr_unchecked(nb, e, link),
                                prefix: 32,
                            },
                            via: self.addr_unchecked(relay, e, link),
                            dev: self.iface_name(e, link),
                            src: Some(self.addr_unchecked(host, e, link)),
                        });
                    }
                }
            }
        }
        v.sort_by_key(|r| u32::from(r.dest.addr));
        Ok(v)
    }

    /// The sysctls a host needs: IP forwarding on; reverse-path filtering loose (2) on `all`,
    /// `default` and every interface of the plan, because replies on a relayed path may arrive
    /// on another NIC than the one the route back leaves by (loose still drops sources with no
    /// route at all; every rail address has one); and ARP answered and asked only with the
    /// address of the interface concerned (`arp_ignore=1`, `arp_announce=2`), so that a
    /// relayed or rebound source address never lands in a neighbour's ARP cache on the wrong
    /// line. Empty for one dimension: nothing is relayed there.
    pub fn sysctls(&self) -> Vec<Sysctl> {
        if self.ndims() == 1 {
            return Vec::new();
        }
        let s = |key: String, value| Sysctl { key, value };
        let mut v = vec![
            s("net.ipv4.ip_forward".into(), "1"),
            s("net.ipv4.conf.all.rp_filter".into(), "2"),
            s("net.ipv4.conf.default.rp_filter".into(), "2"),
        ];
        for d in 0..self.ndims() {
            for l in 0..self.links {
                v.push(s(
                    format!("net.ipv4.conf.{}.rp_filter", self.iface_name(d, l)),
                    "2",
                ));
            }
        }
        v.push(s("net.ipv4.conf.all.arp_ignore".into(), "1"));
        v.push(s("net.ipv4.conf.all.arp_announce".into(), "2"));
        v
    }

    /// The shell commands that configure `host`: a comment naming it, then per interface `ip
    /// link set dev IF up` and `ip addr replace ADDR/PREFIX dev IF`, then `sysctl -w` for
    /// [`Topology::sysctls`], then `ip route replace` for [`Topology::routes`], and with
    /// detours the rule and the routes of [`Topology::detour_routes`] in [`DETOUR_TABLE`].
    /// Idempotent: run twice, the same state.
    pub fn host_commands(&self, host: u32) -> Result<Vec<String>, Error> {
        let coords: Vec<String> = self.coords(host)?.iter().map(|c| c.to_string()).collect();
        let mut v = vec![format!(
            "# hxcomm topo: host {host} ({}) of {self}",
            coords.join(",")
        )];
        for a in self.addresses(host)? {
            v.push(format!("ip link set dev {} up", a.iface));
            v.push(format!(
                "ip addr replace {}/{} dev {}",
                a.ip, a.prefix, a.iface
            ));
        }
        for s in self.sysctls() {
            v.push(format!("sysctl -w {}={}", s.key, s.value));
        }
        for r in self.routes(host)? {
            v.push(format!("ip route replace {r}"));
        }
        if self.detours {
            v.push(format!(
                "ip rule del pref {DETOUR_TABLE} 2>/dev/null; ip rule add {}",
                detour_rule()
            ));
            for r in self.detour_routes(host)? {
                v.push(format!("ip route replace table {DETOUR_TABLE} {r}"));
            }
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Path;
    use std::collections::HashSet;
    use std::time::{Duration, Instant};

    /// One host's forwarding state as the kernel would have it.
    struct Fib {
        local: HashSet<Ipv4Addr>,
        /// (prefix, Some(via) or None for connected, dev)
        entries: Vec<(Subnet, Option<Ipv4Addr>, String)>,
        /// The detour table, consulted first for packets the host originates.
        own: Vec<(Subnet, Option<Ipv4Addr>, String)>,
    }

    fn fib(t: &Topology, h: u32, aggregated: bool) -> Fib {
        let addrs = t.addresses(h).unwrap();
        let mut entries = Vec::new();
        for a in &addrs {
            let line = t.line_of(h, a.dim).unwrap();
            entries.push((
                t.line_subnet(a.dim, line, a.link).unwrap(),
                None,
                a.iface.clone(),
            ));
        }
        let routes = if aggregated {
            t.routes(h).unwrap()
        } else {
            t.line_routes(h).unwrap()
        };
        for r in routes {
            assert!(
                !entries.iter().any(|e| e.0 == r.dest),
                "route {r} has the prefix of a connected subnet"
            );
            // The next hop must be on the device's connected subnet, src must be ours on it.
            let (dim, link) = t.parse_iface(&r.dev).unwrap();
            let line = t.line_of(h, dim).unwrap();
            assert!(
                t.line_subnet(dim, line, link).unwrap().contains(r.via),
                "{r}"
            );
            assert_eq!(r.src, Some(t.address(h, dim, link).unwrap()));
            entries.push((r.dest, Some(r.via), r.dev));
        }
        let own = t
            .detour_routes(h)
            .unwrap()
            .into_iter()
            .map(|r| {
                let (dim, link) = t.parse_iface(&r.dev).unwrap();
                let line = t.line_of(h, dim).unwrap();
                assert!(t.line_subnet(dim, line, link).unwrap().contains(r.via));
                assert_eq!(r.src, Some(t.address(h, dim, link).unwrap()));
                (r.dest, Some(r.via), r.dev)
            })
            .collect();
        Fib {
            local: addrs.iter().map(|a| a.ip).collect(),
            entries,
            own,
        }
    }

    /// Follows the tables from `src` to `ip`: the hops as (from, to, dim, link).
    fn forward(t: &Topology, fibs: &[Fib], src: u32, ip: Ipv4Addr) -> Vec<(u32, u32, usize, u32)> {
        let mut hops = Vec::new();
        let mut at = src;
        while !fibs[at as usize].local.contains(&ip) {
            // A detour takes 3 hops, more than D in two dimensions.
            assert!(hops.len() <= t.ndims() + 1, "loop towards {ip}: {hops:?}");
            let f = &fibs[at as usize];
            // The detour rule applies to the source's own packets only, before the main table.
            let own = (at == src).then(|| f.own.iter().find(|e| e.0.contains(ip)));
            let best = own
                .flatten()
                .or_else(|| {
                    f.entries
                        .iter()
                        .filter(|e| e.0.contains(ip))
                        .max_by_key(|e| e.0.prefix)
                })
                .unwrap_or_else(|| panic!("host {at}: no route to {ip}"));
            let (dim, link) = t.parse_iface(&best.2).unwrap();
            let gateway = best.1.unwrap_or(ip);
            let (to, gdim, glink) = t.locate(gateway).unwrap();
            assert_eq!(
                (gdim, glink),
                (dim, link),
                "next hop {gateway} not on {}",
                best.2
            );
            hops.push((at, to, dim, link));
            at = to;
        }
        hops
    }

    /// Routing is right by construction and by test: for every ordered pair and every address
    /// of the destination, following each host's table hop by hop (longest prefix, connected
    /// routes included) takes exactly the intended path, both with one route per line and
    /// with the aggregated tables; and with detours, where the distinct paths between line
    /// neighbours are D x links and still share no link.
    #[test]
    fn tables_forward_along_the_intended_paths() {
        for (spec, links, detours) in ["hxb:2x2x2", "hxb:3x3x2", "hxb:4", "hxb:2x3x2x2", "hxb:3x4"]
            .into_iter()
            .flat_map(|s| [1, 2].map(|l| (s, l)))
            .flat_map(|(s, l)| [false, true].map(|d| (s, l, d)))
        {
            {
                let t = Topology::parse(spec, links).unwrap().with_detours(detours);
                for s in 0..t.hosts() {
                    for d in (0..t.hosts()).filter(|&d| d != s) {
                        let dis = t.disjoint_paths(s, d).unwrap();
                        let differ = (0..t.ndims())
                            .filter(|&g| t.coord(s, g) != t.coord(d, g))
                            .count();
                        let n = if t.detours() && differ == 1 {
                            t.ndims()
                        } else {
                            differ
                        };
                        assert_eq!(dis.len(), n * links as usize, "{t}: {s}->{d}");
                        let mut used = HashSet::new();
                        for l in dis.iter().flat_map(Path::links) {
                            assert!(used.insert(l), "{t}: {s}->{d}: {l:?} used twice");
                        }
                    }
                }
                for aggregated in [false, true] {
                    let fibs: Vec<Fib> = (0..t.hosts()).map(|h| fib(&t, h, aggregated)).collect();
                    for s in 0..t.hosts() {
                        for d in (0..t.hosts()).filter(|&d| d != s) {
                            for p in t.paths(s, d).unwrap() {
                                let want: Vec<_> = p
                                    .hops
                                    .iter()
                                    .map(|h| (h.from, h.to, h.dim, h.link))
                                    .collect();
                                assert_eq!(
                                    forward(&t, &fibs, s, p.dst_addr),
                                    want,
                                    "{t}: {s}->{d}"
                                );
                                // Replies to the source address come back over the NIC the path
                                // leaves by, so the active side may bind to its device.
                                let back = forward(&t, &fibs, d, p.src_addr);
                                let last = back.last().unwrap();
                                assert_eq!((last.2, last.3), (p.hops[0].dim, p.link));
                            }
                        }
                    }
                }
            }
        }
    }

    proptest::proptest! {
        /// Random topologies of up to 4 dimensions: the aggregated tables, followed hop by hop,
        /// take the intended path to every address of a random destination, and the distinct
        /// paths share no NIC attachment.
        #[test]
        fn random_topologies_route_right(
            dims in proptest::collection::vec(2u32..6, 2..=4),
            links in 1u32..4,
            a in proptest::prelude::any::<u32>(),
            b in proptest::prelude::any::<u32>(),
        ) {
            let Ok(t) = Topology::new(&dims, links) else { return Ok(()); };
            let (s, d) = (a % t.hosts(), b % t.hosts());
            if s == d {
                return Ok(());
            }
            let mut cache: std::collections::HashMap<u32, Fib> = std::collections::HashMap::new();
            let mut used = HashSet::new();
            for p in t.paths(s, d).unwrap() {
                // Follow the tables, building each host's FIB when the packet gets there.
                let mut at = s;
                let mut hops = Vec::new();
                loop {
                    let f = cache.entry(at).or_insert_with(|| fib(&t, at, true));
                    if f.local.contains(&p.dst_addr) {
                        break;
                    }
                    proptest::prop_assert!(hops.len() < t.ndims(), "loop: {:?}", hops);
                    let best = f.entries.iter().filter(|e| e.0.contains(p.dst_addr))
                        .max_by_key(|e| e.0.prefix).expect("no route");
                    let (dim, link) = t.parse_iface(&best.2).unwrap();
                    let (to, _, _) = t.locate(best.1.unwrap_or(p.dst_addr)).unwrap();
                    hops.push((at, to, dim, link));
                    at = to;
                }
                let want: Vec<_> = p.hops.iter().map(|h| (h.from, h.to, h.dim, h.link)).collect();
                proptest::prop_assert_eq!(hops, want);
                if p.ends_on_own_nic() {
                    for l in p.links() {
                        proptest::prop_assert!(used.insert(l), "{:?} used twice", l);
                    }
                }
            }
        }
    }

    /// Route table sizes per host, (one route per line subnet, aggregated), smallest and
    /// largest over all hosts; the crate documentation quotes these.
    #[test]
    fn table_sizes() {
        let sizes = |spec: &str, links| {
            let t = Topology::parse(spec, links).unwrap();
            let mut lines = HashSet::new();
            let (mut lo, mut hi) = (usize::MAX, 0);
            for h in 0..t.hosts() {
                lines.insert(t.line_routes(h).unwrap().len());
                let n = t.routes(h).unwrap().len();
                (lo, hi) = (lo.min(n), hi.max(n));
            }
            assert_eq!(lines.len(), 1, "{spec}: line routes vary by host");
            let lines = lines.into_iter().next().unwrap();
            assert_eq!(lines as u32, t.subnet_count() - t.nics_per_host() as u32);
            (lines, lo, hi)
        };
        assert_eq!(sizes("hxb:8", 2), (0, 0, 0));
        assert_eq!(sizes("hxb:2x2x2", 1), (9, 6, 6));
        assert_eq!(sizes("hxb:2x2x2", 2), (18, 12, 12));
        assert_eq!(sizes("hxb:3x3x2", 1), (18, 12, 13));
        assert_eq!(sizes("hxb:3x3x2", 2), (36, 24, 26));
        assert_eq!(sizes("hxb:16x16x10", 2), (1146, 200, 202));
    }

    /// Generating one host's table of 16x16x10 with 2 links takes well under a second.
    #[test]
    fn big_table_is_fast() {
        let t = Topology::parse("hxb:16x16x10", 2).unwrap();
        let start = Instant::now();
        let c = t.host_commands(1234).unwrap();
        let took = start.elapsed();
        assert!(c.len() > 100);
        eprintln!(
            "hxb:16x16x10 x 2, host 1234: {} commands in {took:?}",
            c.len()
        );
        assert!(took < Duration::from_millis(500), "{took:?}");
    }

    #[test]
    fn commands_and_sysctls() {
        let t = Topology::parse("hxb:2x2x2", 2).unwrap();
        let c = t.host_commands(0).unwrap();
        assert!(c[0].starts_with("# hxcomm topo: host 0 (0,0,0) of hxb:2x2x2"));
        assert!(c.contains(&"ip addr replace 10.10.0.1/27 dev x0l0".to_string()));
        assert!(c.contains(&"sysctl -w net.ipv4.ip_forward=1".to_string()));
        assert!(c.contains(&"sysctl -w net.ipv4.conf.x2l1.rp_filter=2".to_string()));
        assert!(c.iter().any(|l| l.starts_with("ip route replace 10.10.")));
        let s = t.sysctls();
        assert_eq!(
            s.iter().filter(|s| s.key.ends_with("rp_filter")).count(),
            2 + 6
        );
        let flat = Topology::parse("hxb:8", 3).unwrap();
        assert!(flat.sysctls().is_empty());
        let c = flat.host_commands(2).unwrap();
        assert!(c.contains(&"ip addr replace 10.10.2.3/24 dev r2".to_string()));
        assert!(!c.iter().any(|l| l.starts_with("ip route")));
        assert!(t.host_commands(8).is_err());
    }

    #[test]
    fn detour_table_sizes_and_commands() {
        let t = Topology::parse("hxb:2x2x2", 2).unwrap();
        assert!(t.detour_routes(0).unwrap().is_empty());
        assert!(!t
            .host_commands(0)
            .unwrap()
            .iter()
            .any(|c| c.contains("rule")));
        let t = t.with_detours(true);
        let r = t.detour_routes(0).unwrap();
        assert_eq!(r.len(), 12);
        // Host 0's neighbour across dimension 2 is host 1; its address of dimension 0 link 0 is
        // reached through host 0's relay across dimension 0 (host 4) on x0l0.
        let to1 = r
            .iter()
            .find(|r| r.dest.addr == t.address(1, 0, 0).unwrap())
            .unwrap();
        assert_eq!(to1.via, t.address(4, 0, 0).unwrap());
        assert_eq!(to1.dev, "x0l0");
        assert_eq!(to1.dest.prefix, 32);
        let c = t.host_commands(0).unwrap();
        assert!(c.contains(&format!(
            "ip rule del pref {DETOUR_TABLE} 2>/dev/null; ip rule add iif lo lookup {DETOUR_TABLE} pref {DETOUR_TABLE}"
        )));
        assert_eq!(c.iter().filter(|c| c.contains("table 26744")).count(), 12);
        let big = Topology::parse("hxb:16x16x10", 2)
            .unwrap()
            .with_detours(true);
        assert_eq!(big.detour_routes(1234).unwrap().len(), 156);
        // One dimension has no other dimension to detour through.
        assert!(!Topology::parse("hxb:8", 2)
            .unwrap()
            .with_detours(true)
            .detours());
    }
}
