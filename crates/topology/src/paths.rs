//! Dimension-order paths between two hosts, one per destination address.

use std::net::Ipv4Addr;

use crate::topo::{Error, Topology};

/// One NIC attachment: host `host`'s NIC of dimension `dim`, link `link`, and its cable to the
/// switch of its line. This is the unit of link-disjointness; it is undirected (a path that
/// sends over the cable and one that receives over it share it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId {
    /// The host.
    pub host: u32,
    /// The dimension of the NIC.
    pub dim: usize,
    /// The link within the dimension.
    pub link: u32,
}

/// One hop: from `from` to `to` over their line of dimension `dim`, link `link`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    /// The sending host.
    pub from: u32,
    /// The receiving host (shares every coordinate with `from` except `dim`).
    pub to: u32,
    /// The dimension of the line crossed.
    pub dim: usize,
    /// The link used.
    pub link: u32,
    /// `from`'s outgoing interface.
    pub iface: String,
    /// `to`'s address on this line: the next hop (the destination itself on the last hop if
    /// `dim` is the destination address's dimension).
    pub next_hop: Ipv4Addr,
}

impl Hop {
    /// The two NIC attachments this hop uses: `from`'s and `to`'s.
    pub fn links(&self) -> [LinkId; 2] {
        [
            LinkId {
                host: self.from,
                dim: self.dim,
                link: self.link,
            },
            LinkId {
                host: self.to,
                dim: self.dim,
                link: self.link,
            },
        ]
    }
}

/// The intended path from `src` to one address of `dst`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path {
    /// Source host.
    pub src: u32,
    /// Destination host.
    pub dst: u32,
    /// The destination address's dimension.
    pub dst_dim: usize,
    /// The destination address's link (every hop of the path uses this link index).
    pub link: u32,
    /// The destination address.
    pub dst_addr: Ipv4Addr,
    /// The address a socket at `src` binds to for this path: `src`'s address on the first
    /// hop's interface. Traffic back to it from `dst` (by `dst`'s routes) arrives on that same
    /// interface, so the active side may also bind to the device.
    pub src_addr: Ipv4Addr,
    /// `src`'s interface of the first hop.
    pub src_iface: String,
    /// The hops, 1 to the number of dimensions.
    pub hops: Vec<Hop>,
}

impl Path {
    /// Number of hops (1 ..= dimensions).
    pub fn hop_count(&self) -> usize {
        self.hops.len()
    }

    /// Every NIC attachment the path uses, two per hop.
    pub fn links(&self) -> Vec<LinkId> {
        self.hops.iter().flat_map(Hop::links).collect()
    }

    /// Whether the path ends on the NIC that holds the destination address (its last hop
    /// crosses dimension `dst_dim`). False exactly when `src` and `dst` agree in coordinate
    /// `dst_dim`; then the path is the same as that of another address of `dst` (see the crate
    /// documentation), and the packet arrives on another NIC of `dst`, which accepts it as
    /// one of its own addresses.
    pub fn ends_on_own_nic(&self) -> bool {
        self.hops.last().is_some_and(|h| h.dim == self.dst_dim)
    }
}

impl Topology {
    /// The dimension of the first hop from `at` towards the address of `dst` in dimension `d`:
    /// the first dimension in rotation order `d+1, d+2, ..., d` (mod D) where the coordinates
    /// differ, or `None` if `at == dst`.
    pub(crate) fn next_dim(&self, at: u32, dst: u32, d: usize) -> Option<usize> {
        let n = self.ndims();
        (1..=n)
            .map(|i| (d + i) % n)
            .find(|&g| self.coord(at, g) != self.coord(dst, g))
    }

    /// With detours on, for line neighbours `src` and `dst` (they differ in dimension `d`
    /// only) and an address of another dimension than `d`: `Some(d)`.
    pub(crate) fn detour_dim(&self, src: u32, dst: u32, dim: usize) -> Option<usize> {
        if !self.detours {
            return None;
        }
        let mut differ = (0..self.ndims()).filter(|&g| self.coord(src, g) != self.coord(dst, g));
        match (differ.next(), differ.next()) {
            (Some(d), None) if d != dim => Some(d),
            _ => None,
        }
    }

    /// The relay of `host`'s detours across dimension `e`: its neighbour there at the next
    /// coordinate (both ends of a pair name the same one, so a detour and its way back use
    /// the same links).
    pub(crate) fn detour_relay(&self, host: u32, e: usize) -> u32 {
        self.with_coord(host, e, (self.coord(host, e) + 1) % self.dims[e])
    }

    /// The path from `src` to `dst`'s address of dimension `dim`, link `link`. With detours
    /// (see [`Topology::with_detours`]) a line neighbour's address of another dimension is
    /// reached by a 3-hop detour through that dimension.
    pub fn path(&self, src: u32, dst: u32, dim: usize, link: u32) -> Result<Path, Error> {
        self.check_host(src)?;
        let dst_addr = self.address(dst, dim, link)?;
        if src == dst {
            return Err(Error::BadCoords(format!(
                "no path from host {src} to itself"
            )));
        }
        let mut hops = Vec::with_capacity(self.ndims());
        let mut at = src;
        if let Some(d) = self.detour_dim(src, dst, dim) {
            // Out across `dim` to the relay, along the relay's line of `d`, back across `dim`.
            let relay = self.detour_relay(src, dim);
            let across = self.with_coord(relay, d, self.coord(dst, d));
            for (from, to, g) in [(src, relay, dim), (relay, across, d), (across, dst, dim)] {
                hops.push(Hop {
                    from,
                    to,
                    dim: g,
                    link,
                    iface: self.iface_name(g, link),
                    next_hop: self.addr_unchecked(to, g, link),
                });
            }
            at = dst;
        }
        while let Some(g) = self.next_dim(at, dst, dim) {
            let to = self.with_coord(at, g, self.coord(dst, g));
            hops.push(Hop {
                from: at,
                to,
                dim: g,
                link,
                iface: self.iface_name(g, link),
                next_hop: self.addr_unchecked(to, g, link),
            });
            at = to;
        }
        let first = &hops[0];
        Ok(Path {
            src,
            dst,
            dst_dim: dim,
            link,
            dst_addr,
            src_addr: self.addr_unchecked(src, first.dim, link),
            src_iface: first.iface.clone(),
            hops,
        })
    }

    /// The intended path from `src` to every address of `dst`, in the order of
    /// [`Topology::addresses`]; empty if `src == dst`.
    pub fn paths(&self, src: u32, dst: u32) -> Result<Vec<Path>, Error> {
        self.check_host(src)?;
        self.check_host(dst)?;
        if src == dst {
            return Ok(Vec::new());
        }
        let mut v = Vec::with_capacity(self.nics_per_host());
        for dim in 0..self.ndims() {
            for link in 0..self.links {
                v.push(self.path(src, dst, dim, link)?);
            }
        }
        Ok(v)
    }

    /// The distinct paths from `src` to `dst`: those of [`Topology::paths`] that end on the
    /// NIC of their destination address. There are (dimensions in which `src` and `dst`
    /// differ) x (links per dimension) of them and they share no [`LinkId`].
    pub fn disjoint_paths(&self, src: u32, dst: u32) -> Result<Vec<Path>, Error> {
        Ok(self
            .paths(src, dst)?
            .into_iter()
            .filter(Path::ends_on_own_nic)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn cases() -> Vec<Topology> {
        let mut v = Vec::new();
        for spec in ["hxb:2x2x2", "hxb:3x3x2"] {
            for links in [1, 2] {
                v.push(Topology::parse(spec, links).unwrap());
            }
        }
        v
    }

    #[test]
    fn dimension_order_from_corner_to_corner() {
        let t = Topology::parse("hxb:2x2x2", 2).unwrap();
        let ps = t.paths(0, 7).unwrap();
        assert_eq!(ps.len(), 6);
        let dims: Vec<Vec<usize>> = ps
            .iter()
            .map(|p| p.hops.iter().map(|h| h.dim).collect())
            .collect();
        // Address of dimension 0: corrects 1, 2, then 0; dimension 1: 2, 0, 1; dimension 2: 0, 1, 2.
        assert_eq!(dims[0], vec![1, 2, 0]);
        assert_eq!(dims[1], vec![1, 2, 0]);
        assert_eq!(dims[2], vec![2, 0, 1]);
        assert_eq!(dims[4], vec![0, 1, 2]);
        assert!(ps.iter().all(|p| p.hop_count() == 3 && p.ends_on_own_nic()));
        assert_eq!(ps[1].src_iface, "x1l1");
        assert_eq!(ps[1].src_addr, t.address(0, 1, 1).unwrap());
        assert_eq!(ps[1].hops.last().unwrap().next_hop, ps[1].dst_addr);
        assert!(t.paths(3, 3).unwrap().is_empty());
        assert!(t.paths(0, 8).is_err());
    }

    /// Every path moves one coordinate per hop, in rotation order after the destination
    /// address's dimension, over that address's link, and arrives at `dst`.
    #[test]
    fn paths_follow_the_rule() {
        for t in cases() {
            let n = t.ndims();
            for (s, d, differ) in ordered_pairs(&t) {
                for p in t.paths(s, d).unwrap() {
                    let want: Vec<usize> = (1..=n)
                        .map(|i| (p.dst_dim + i) % n)
                        .filter(|g| differ.contains(g))
                        .collect();
                    let got: Vec<usize> = p.hops.iter().map(|h| h.dim).collect();
                    assert_eq!(got, want);
                    assert!((1..=n).contains(&p.hop_count()));
                    assert_eq!(p.hops[0].from, s);
                    assert_eq!(p.hops.last().unwrap().to, d);
                    for w in p.hops.windows(2) {
                        assert_eq!(w[0].to, w[1].from);
                    }
                    for h in &p.hops {
                        assert_eq!(h.link, p.link);
                        assert_eq!(t.locate(h.next_hop), Some((h.to, h.dim, h.link)));
                        assert_eq!(t.line_of(h.from, h.dim), t.line_of(h.to, h.dim));
                    }
                    assert_eq!(t.locate(p.src_addr), Some((s, p.hops[0].dim, p.link)));
                }
            }
        }
    }

    /// The disjointness result, exhaustively: for every ordered pair, the paths to the
    /// addresses whose dimension differs between the pair are pairwise disjoint in NIC
    /// attachments (undirected, so disjoint per direction too), there are (differing
    /// dimensions) x links of them, and the path to an address whose dimension agrees is
    /// identical to the path to the address of the same link whose dimension is the nearest
    /// differing one before it in rotation order.
    #[test]
    fn distinct_paths_share_no_link() {
        for t in cases() {
            let n = t.ndims();
            for (s, d, differ) in ordered_pairs(&t) {
                let all = t.paths(s, d).unwrap();
                let dis = t.disjoint_paths(s, d).unwrap();
                assert_eq!(dis.len(), differ.len() * t.links_per_dim() as usize);
                let mut used = HashSet::new();
                for p in &dis {
                    for l in p.links() {
                        assert!(used.insert(l), "{t}: {s}->{d}: {l:?} used twice");
                    }
                }
                for p in all.iter().filter(|p| !p.ends_on_own_nic()) {
                    assert!(!differ.contains(&p.dst_dim));
                    let e = (1..=n)
                        .map(|i| (p.dst_dim + n - i) % n)
                        .find(|g| differ.contains(g))
                        .unwrap();
                    let twin = dis
                        .iter()
                        .find(|q| q.dst_dim == e && q.link == p.link)
                        .unwrap();
                    assert_eq!(p.hops, twin.hops);
                    assert_eq!(p.src_addr, twin.src_addr);
                }
            }
        }
    }

    /// Every ordered pair of distinct hosts of `t`, with the dimensions in which they differ.
    fn ordered_pairs(t: &Topology) -> Vec<(u32, u32, Vec<usize>)> {
        let mut out = Vec::new();
        for s in 0..t.hosts() {
            for d in (0..t.hosts()).filter(|&d| d != s) {
                let differ = (0..t.ndims())
                    .filter(|&g| t.coord(s, g) != t.coord(d, g))
                    .collect();
                out.push((s, d, differ));
            }
        }
        out
    }
}
