//! Hyper-crossbar topologies for hxcomm (issue 9), sans-I/O: host coordinates, the address
//! plan, interface names, dimension-order paths between hosts and the per-host route tables
//! and sysctls that make the hosts' kernels relay along those paths. Nothing here touches a
//! socket, an interface or a file; the testbed, the engine and `hxcomm topo` use it.
//!
//! # Topologies
//!
//! `hxb:S0xS1x...xS(D-1)` with `L` links per dimension ([`Topology::parse`]): `D` = 1 to 4
//! dimensions, each of 2 to 254 hosts; `N = S0 * S1 * ...` hosts. Every host has `D * L` NICs:
//! `L` in each dimension. In dimension `d`, the hosts that share all other coordinates form a
//! *line*; each line has `L` switches (one per link), and each host of the line is attached
//! to each of them by its NIC of that dimension and link. `hxb:8` is today's flat layout: one
//! line, every host on every rail, `L` rails.
//!
//! Hosts are numbered `0..N` in row-major order of their coordinates `(c0, ..., c(D-1))`: the
//! last dimension varies fastest, `host = ((c0 * S1 + c1) * S2 + c2) ...`
//! ([`Topology::coords`], [`Topology::host`]). The lines of dimension `d` are numbered by the
//! other coordinates taken in rotation order `d+1, d+2, ..., d-1` (mod D), the first most
//! significant ([`Topology::line_of`]); a host's position on its line of dimension `d` is its
//! coordinate `d`.
//!
//! # Address plan
//!
//! Everything lies in 10.10.0.0/16 (the project's rail space; 10.200.0.x stays management).
//!
//! * One dimension: today's rails, unchanged. Link `l` is 10.10.l.0/24 on interface `r<l>`,
//!   host `k` is 10.10.l.(k+1). (Up to 254 hosts and 256 links.)
//! * Two or more dimensions: one subnet per (dimension, link, line), numbered consecutively
//!   from 10.10.0.0 in that order (all of dimension 0 first, within it link 0's lines first),
//!   each a /27 (lines of up to 30 hosts; a topology with a longer line gets the smallest
//!   power-of-two block that holds it, up to /24). The host at position `p` of a line has
//!   address base + p + 1. A topology that needs more than 65536 addresses is refused, saying
//!   how many subnets of which size it needs. hxb:16x16x10 with 2 links per dimension has
//!   (160 + 160 + 256) x 2 = 1152 line subnets, 36864 addresses: 10.10.0.0 to 10.10.143.255.
//!   With 3 links it needs 1728 x 32 = 55296 and fits; with 4 it does not.
//!
//! Interfaces of a multi-dimensional topology are named `x<d>l<l>`: `x0l1` is the NIC of
//! dimension 0, link 1 (at most 8 characters, well under Linux's 15). A one-dimensional
//! topology keeps today's `r<l>`. [`Topology::addresses`] lists a host's addresses,
//! [`Topology::line_subnet`] gives a line's subnet and [`Topology::locate`] tells whose an
//! address is.
//!
//! # Paths
//!
//! From `src` to `dst`'s address of dimension `d`, link `l` ([`Topology::paths`]), the path
//! corrects the coordinates in which `src` and `dst` differ, one per hop, in rotation order
//! `d+1, d+2, ..., d-1, d` (mod D), every hop over link `l` of the line it crosses; a
//! coordinate that already agrees costs no hop. So a path has 1 to D hops, and when `d` is
//! among the differing dimensions it ends by crossing dimension `d`, onto the very NIC that
//! holds the address. The source address is `src`'s address on the first hop's NIC.
//!
//! Disjointness, with a *link* being one host's NIC attachment (the NIC and its cable to the
//! line switch, [`LinkId`]) counted undirected: a path that sends over an attachment and one
//! that receives over it share it. Let `K` be the dimensions in which `src` and `dst` differ.
//! The paths to the addresses of dimensions in `K` — `|K| * L` of them
//! ([`Topology::disjoint_paths`]) — share no link, pairwise (links of different link
//! indices never meet; for one link index two paths cross each dimension `f` from hosts that
//! differ in a coordinate of `K` already corrected by one and not yet by the other). Checked
//! exhaustively for every ordered pair of hxb:2x2x2 and hxb:3x3x2 with 1 and 2 links. The
//! path to an address of a dimension `d` outside `K` (where `src` and `dst` agree) is the very
//! path of the same link's address in the nearest dimension of `K` before `d` in rotation
//! order (`d-1`, `d-2`, ...): same first hop, same last hop, same NIC of arrival (the packet
//! is accepted there as addressed to the host). So between hosts that differ in every
//! coordinate (the opposite corners of 2x2x2) all `D * L` paths are disjoint; between hosts
//! on one line, all `D * L` addresses are reached over `L` one-hop paths, one per link.
//!
//! Binding: replies from `dst` to a path's source address come back (by `dst`'s routes) by a
//! path that ends on the NIC the forward path leaves by, so the active side may bind its
//! socket to the source address and to that device. The passive side must not bind to a
//! device: its replies leave by the first hop of its own path, which is in general another
//! NIC than the one data arrives on.
//!
//! # Route tables
//!
//! Forwarding is by destination only, and dimension-order routing is consistent (the rest of
//! a path from any host on it is that host's own path), so a route table per host does it
//! ([`Topology::routes`]). For a line subnet of dimension `d` that the host is not on, the
//! next hop is the host's neighbour across the first dimension `f` in rotation order after
//! `d` in which the host and the line differ, over the line's link; every address of that line
//! has the same next hop, so one route per line subnet suffices
//! ([`Topology::line_routes`]: `subnets - D*L` routes, e.g. 1146 for hxb:16x16x10 x 2).
//! [`Topology::routes`] merges these into aligned prefixes by a binary split of
//! 10.10.0.0/16, letting a prefix cover the host's own line subnets (their connected routes
//! are more specific) but never space beyond the plan. The line numbering in rotation order
//! keeps lines with one next hop adjacent. Each route carries `src` = the host's own address
//! on the outgoing NIC. The tables are checked by forwarding, hop by hop with longest-prefix
//! match over connected and static routes, from every host to every address of every other
//! host of hxb:2x2x2, hxb:3x3x2, hxb:2x3x2x2 and hxb:4 (1 and 2 links), against the intended
//! path, and for random pairs of random topologies of 2 to 4 dimensions (proptest). Checked
//! once by hand against Linux as well (network namespaces joined by one bridge per line and
//! link, configured by `hxcomm topo routes`): `ip route get` followed hop by hop gave exactly
//! the intended path, and ping reached, for every address of every other host (hxb:2x2x2 x 2:
//! 336, hxb:3x3x2 x 1: 918); the testbed step makes that a test.
//!
//! Sizes (routes per host: one per line subnet / aggregated, over all hosts; the
//! `table_sizes` test): hxb:2x2x2 x 1: 9 / 6, x 2: 18 / 12; hxb:3x3x2 x 1: 18 / 12 to 13,
//! x 2: 36 / 24 to 26; hxb:16x16x10 x 2: 1146 / 200 to 202. The lower bound for dimension-order
//! tables is one route per (dimension, link, other dimension, other coordinate value): 156 for
//! hxb:16x16x10 x 2; the difference is lines per group that are not a power of two. One host's
//! table of hxb:16x16x10 x 2 takes about half a millisecond (release build).
//!
//! A relaying host also needs [`Topology::sysctls`]: `ip_forward=1`, `rp_filter=2` on `all`,
//! `default` and every interface (replies may arrive on another NIC than the one the route
//! back uses), `arp_ignore=1` and `arp_announce=2`. [`Topology::host_commands`] renders all of
//! it as shell commands (`hxcomm topo routes`).
//!
//! # Detours
//!
//! [`Topology::with_detours`] adds, for line neighbours (hosts that differ in one dimension
//! `d`), a 3-hop path to each address of another dimension `e`: across `e` to the source's
//! neighbour at the next coordinate of `e`, along that relay's line of `d`, back across `e`,
//! all over the address's link. Those `(D - 1) x L` detours and the `L` direct links share no
//! link ([`Topology::disjoint_paths`] returns all `D x L`). Only the first hop needs a route of
//! its own: [`Topology::detour_routes`] (a /32 per neighbour address, in [`DETOUR_TABLE`],
//! consulted for the host's own packets only by [`detour_rule`]); the relays' main tables
//! already carry the rest, and forwarded traffic never sees the detour table, so every other
//! path is unchanged. Checked with the tables above (the source's table first, then main).
//!
//! # Checking a host
//!
//! [`check::check`] compares what a host has, given as plain data ([`check::Observed`]: its
//! interfaces with their IPv4 addresses, its main route table, sysctl values), with what the
//! plan asks of it, and returns every difference ([`check::Problem`]) with the command that
//! fixes it, in the words of [`Topology::host_commands`]: a missing or misprefixed address, a
//! NIC that is down or without carrier, another host's address or one outside the plan in
//! 10.10.0.0/16, a route of [`Topology::routes`] missing or different (or a foreign one into
//! 10.10.0.0/16), a sysctl of [`Topology::sysctls`] with another value (`rp_filter` 0 passes
//! as well as 2: the kernel uses the larger of `all` and the interface's). The host is told by
//! its addresses unless given; NICs are matched by address, so a NIC of another name than the
//! plan's is a note and its routes and `rp_filter` are expected under its own name.
//! [`check::parse_proc_net_route`] reads /proc/net/route's text. `hxcomm topo check` (the
//! `cli` feature) reads the host and prints the report.
//!
//! # Example
//!
//! ```
//! use hx_topology::Topology;
//!
//! let t = Topology::parse("hxb:2x2x2", 2).unwrap();
//! assert_eq!(t.coords(7).unwrap(), vec![1, 1, 1]);
//! let a = &t.addresses(7).unwrap()[0];
//! assert_eq!((a.iface.as_str(), a.ip.to_string(), a.prefix), ("x0l0", "10.10.0.98".into(), 27));
//! assert_eq!(t.locate(a.ip), Some((7, 0, 0)));
//! // Opposite corners differ in every coordinate: six paths of three hops, no link shared.
//! let paths = t.disjoint_paths(0, 7).unwrap();
//! assert_eq!(paths.len(), 6);
//! assert!(paths.iter().all(|p| p.hop_count() == 3));
//! // Host 0's table: 12 routes plus the 6 connected subnets of its own lines.
//! assert_eq!(t.routes(0).unwrap().len(), 12);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "cli")]
mod observe;
mod paths;
mod plan;
mod routes;
mod topo;

pub use paths::{Hop, LinkId, Path};
pub use plan::{Address, Subnet, RAIL_NET};
pub use routes::{detour_rule, Route, Sysctl, DETOUR_TABLE};
pub use topo::{Error, Topology, MAX_DIMS, MAX_LINE};
