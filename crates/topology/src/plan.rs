//! The address plan: one subnet per line and link inside 10.10.0.0/16, interface names, and
//! the reverse lookup from an address to its host, dimension and link.

use std::fmt;
use std::net::Ipv4Addr;

use crate::topo::{Error, Topology};

/// The rails' address space: 10.10.0.0/16.
pub const RAIL_NET: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 0);
const RAIL_SPACE: u64 = 1 << 16;
/// The smallest line subnet: a /27 (30 hosts), so that addresses read the same across
/// topologies with lines of up to 30 hosts.
const MIN_BLOCK: u32 = 32;

/// How a topology's addresses are laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// One dimension: today's rails. Link `l` is 10.10.l.0/24, host `k` is 10.10.l.(k+1) on
    /// interface `r<l>`.
    Flat,
    /// Several dimensions: consecutive line subnets of `block` addresses from 10.10.0.0.
    Lines {
        block: u32,
        prefix: u8,
        /// Index of the first subnet of each dimension.
        dim_offset: Vec<u32>,
        /// Lines per dimension.
        lines: Vec<u32>,
        /// Subnets in all.
        subnets: u32,
    },
}

impl Plan {
    pub(crate) fn new(dims: &[u32], links: u32, hosts: u64) -> Result<Plan, Error> {
        let spec = {
            let s: Vec<String> = dims.iter().map(|n| n.to_string()).collect();
            format!("hxb:{}", s.join("x"))
        };
        if dims.len() == 1 {
            if links > 256 {
                return Err(Error::DoesNotFit(format!(
                    "{spec} with {links} links: a one-dimensional topology keeps the flat plan \
                     (link l = 10.10.l.0/24), so at most 256 links fit in 10.10.0.0/16"
                )));
            }
            return Ok(Plan::Flat);
        }
        let max_line = *dims.iter().max().unwrap_or(&2);
        let block = (max_line + 2).next_power_of_two().max(MIN_BLOCK);
        let prefix = 32 - block.trailing_zeros() as u8;
        let lines: Vec<u64> = dims.iter().map(|&n| hosts / u64::from(n)).collect();
        let subnets: u64 = lines.iter().sum::<u64>() * u64::from(links);
        let need = subnets * u64::from(block);
        if need > RAIL_SPACE {
            return Err(Error::DoesNotFit(format!(
                "{spec} with {links} link(s) per dimension needs {subnets} line subnets of /{prefix} \
                 ({need} addresses), more than the {RAIL_SPACE} of 10.10.0.0/16"
            )));
        }
        // Everything below fits in 65536, so u32 is safe from here on.
        let mut dim_offset = Vec::with_capacity(dims.len());
        let mut at = 0u32;
        for &l in &lines {
            dim_offset.push(at);
            at += l as u32 * links;
        }
        Ok(Plan::Lines {
            block,
            prefix,
            dim_offset,
            lines: lines.iter().map(|&l| l as u32).collect(),
            subnets: subnets as u32,
        })
    }
}

/// An IPv4 prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Subnet {
    /// The network address (host bits zero).
    pub addr: Ipv4Addr,
    /// The prefix length.
    pub prefix: u8,
}

impl Subnet {
    /// Whether `ip` lies inside.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        };
        u32::from(ip) & mask == u32::from(self.addr)
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// One address of a host: the NIC of dimension `dim`, link `link`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// Interface name (see [`Topology::iface_name`]).
    pub iface: String,
    /// The address.
    pub ip: Ipv4Addr,
    /// Prefix length of the line subnet it is on.
    pub prefix: u8,
    /// Dimension.
    pub dim: usize,
    /// Link within the dimension.
    pub link: u32,
}

impl Topology {
    /// The interface name of dimension `dim`, link `link`: `x<dim>l<link>` (`x1l0` = dimension
    /// 1, link 0), at most 8 characters. A one-dimensional topology keeps today's rail names
    /// `r<link>`.
    pub fn iface_name(&self, dim: usize, link: u32) -> String {
        match self.plan {
            Plan::Flat => format!("r{link}"),
            Plan::Lines { .. } => format!("x{dim}l{link}"),
        }
    }

    /// The dimension and link an interface name stands for.
    pub fn parse_iface(&self, name: &str) -> Option<(usize, u32)> {
        let (dim, link) = match self.plan {
            Plan::Flat => (0, name.strip_prefix('r')?),
            Plan::Lines { .. } => {
                let (d, l) = name.strip_prefix('x')?.split_once('l')?;
                (parse_small(d)? as usize, l)
            }
        };
        let link = parse_small(link)?;
        (dim < self.ndims() && link < self.links).then_some((dim, link))
    }

    /// How many lines dimension `dim` has (hosts divided by its size), 0 if there is no such
    /// dimension.
    pub fn lines(&self, dim: usize) -> u32 {
        self.dims.get(dim).map_or(0, |&n| self.hosts / n)
    }

    /// The line of dimension `dim` that `host` is on. Lines of dimension `d` are numbered by
    /// the other coordinates in rotation order `d+1, d+2, ..., d-1` (mod the number of
    /// dimensions), the first of these the most significant; the host's position on the line
    /// is its coordinate `d`. (Rotation order keeps the lines a route table can treat alike
    /// next to each other, so routes aggregate.)
    pub fn line_of(&self, host: u32, dim: usize) -> Result<u32, Error> {
        self.check_host(host)?;
        self.check_dim(dim)?;
        Ok(self.line_unchecked(host, dim))
    }

    pub(crate) fn line_unchecked(&self, host: u32, dim: usize) -> u32 {
        let n = self.ndims();
        (1..n).fold(0, |acc, i| {
            let g = (dim + i) % n;
            acc * self.dims[g] + self.coord(host, g)
        })
    }

    /// The host at position `pos` of line `line` of dimension `dim`.
    pub fn line_host(&self, dim: usize, line: u32, pos: u32) -> Option<u32> {
        let n = self.ndims();
        if dim >= n || line >= self.lines(dim) || pos >= self.dims[dim] {
            return None;
        }
        let mut coords = vec![0; n];
        coords[dim] = pos;
        let mut rest = line;
        for i in (1..n).rev() {
            let g = (dim + i) % n;
            coords[g] = rest % self.dims[g];
            rest /= self.dims[g];
        }
        self.host(&coords).ok()
    }

    fn check_dim(&self, dim: usize) -> Result<(), Error> {
        if dim < self.ndims() {
            Ok(())
        } else {
            Err(Error::BadCoords(format!(
                "no dimension {dim}: the topology has {}",
                self.ndims()
            )))
        }
    }

    /// The prefix length of every line subnet.
    pub fn subnet_prefix(&self) -> u8 {
        match self.plan {
            Plan::Flat => 24,
            Plan::Lines { prefix, .. } => prefix,
        }
    }

    /// How many line subnets the plan has (lines of all dimensions times links).
    pub fn subnet_count(&self) -> u32 {
        match &self.plan {
            Plan::Flat => self.links,
            Plan::Lines { subnets, .. } => *subnets,
        }
    }

    /// The index of the subnet of (dim, link, line) in plan order; valid inputs assumed.
    pub(crate) fn subnet_index(&self, dim: usize, link: u32, line: u32) -> u32 {
        match &self.plan {
            Plan::Flat => link,
            Plan::Lines {
                dim_offset, lines, ..
            } => dim_offset[dim] + link * lines[dim] + line,
        }
    }

    /// The first address of subnet number `index` in plan order.
    pub(crate) fn subnet_base(&self, index: u32) -> u32 {
        let base = u32::from(RAIL_NET);
        match &self.plan {
            Plan::Flat => base + (index << 8),
            Plan::Lines { block, .. } => base + index * block,
        }
    }

    /// The subnet of line `line` of dimension `dim`, link `link`: subnets are numbered
    /// consecutively from 10.10.0.0 by dimension, then link, then line.
    pub fn line_subnet(&self, dim: usize, line: u32, link: u32) -> Option<Subnet> {
        if dim >= self.ndims() || line >= self.lines(dim) || link >= self.links {
            return None;
        }
        Some(Subnet {
            addr: Ipv4Addr::from(self.subnet_base(self.subnet_index(dim, link, line))),
            prefix: self.subnet_prefix(),
        })
    }

    /// `host`'s address in dimension `dim`, link `link`: its line's subnet base + position + 1.
    pub fn address(&self, host: u32, dim: usize, link: u32) -> Result<Ipv4Addr, Error> {
        self.check_host(host)?;
        self.check_dim(dim)?;
        if link >= self.links {
            return Err(Error::BadCoords(format!(
                "no link {link}: the topology has {} per dimension",
                self.links
            )));
        }
        Ok(self.addr_unchecked(host, dim, link))
    }

    pub(crate) fn addr_unchecked(&self, host: u32, dim: usize, link: u32) -> Ipv4Addr {
        let s = self.subnet_index(dim, link, self.line_unchecked(host, dim));
        Ipv4Addr::from(self.subnet_base(s) + self.coord(host, dim) + 1)
    }

    /// Every address of `host`, dimension by dimension, link by link.
    pub fn addresses(&self, host: u32) -> Result<Vec<Address>, Error> {
        self.check_host(host)?;
        let mut v = Vec::with_capacity(self.nics_per_host());
        for dim in 0..self.ndims() {
            for link in 0..self.links {
                v.push(Address {
                    iface: self.iface_name(dim, link),
                    ip: self.addr_unchecked(host, dim, link),
                    prefix: self.subnet_prefix(),
                    dim,
                    link,
                });
            }
        }
        Ok(v)
    }

    /// Which host, dimension and link an address belongs to, if any.
    pub fn locate(&self, ip: Ipv4Addr) -> Option<(u32, usize, u32)> {
        let off = u32::from(ip).checked_sub(u32::from(RAIL_NET))?;
        if u64::from(off) >= RAIL_SPACE {
            return None;
        }
        match &self.plan {
            Plan::Flat => {
                let (link, k) = (off >> 8, off & 0xff);
                (link < self.links && k >= 1 && k <= self.hosts).then_some((k - 1, 0, link))
            }
            Plan::Lines {
                block,
                dim_offset,
                lines,
                subnets,
                ..
            } => {
                let (s, p) = (off / block, off % block);
                if s >= *subnets || p == 0 {
                    return None;
                }
                let dim = dim_offset.iter().rposition(|&o| o <= s)?;
                let rel = s - dim_offset[dim];
                let (link, line) = (rel / lines[dim], rel % lines[dim]);
                let host = self.line_host(dim, line, p - 1)?;
                Some((host, dim, link))
            }
        }
    }
}

fn parse_small(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn flat_plan_is_todays_rails() {
        let t = Topology::parse("hxb:8", 4).unwrap();
        assert_eq!(t.address(0, 0, 0).unwrap(), ip("10.10.0.1"));
        assert_eq!(t.address(7, 0, 3).unwrap(), ip("10.10.3.8"));
        assert_eq!(t.iface_name(0, 2), "r2");
        assert_eq!(t.line_subnet(0, 0, 3).unwrap().to_string(), "10.10.3.0/24");
        assert_eq!(t.locate(ip("10.10.3.8")), Some((7, 0, 3)));
        assert_eq!(t.locate(ip("10.10.3.9")), None);
        assert_eq!(t.locate(ip("10.10.3.0")), None);
        assert_eq!(t.locate(ip("10.10.4.1")), None);
        assert_eq!(t.parse_iface("r3"), Some((0, 3)));
        assert_eq!(t.parse_iface("r4"), None);
    }

    #[test]
    fn line_plan_16x16x10() {
        let t = Topology::parse("hxb:16x16x10", 2).unwrap();
        assert_eq!(t.subnet_count(), 1152);
        assert_eq!(t.subnet_prefix(), 27);
        // Dimension 0 lines: 160 per link; first subnet 10.10.0.0/27.
        assert_eq!(t.line_subnet(0, 0, 0).unwrap().to_string(), "10.10.0.0/27");
        assert_eq!(t.line_subnet(0, 1, 0).unwrap().to_string(), "10.10.0.32/27");
        assert_eq!(t.line_subnet(0, 0, 1).unwrap().to_string(), "10.10.20.0/27");
        // The last subnet: dimension 2 (256 lines), link 1, line 255: index 1151.
        assert_eq!(
            t.line_subnet(2, 255, 1).unwrap().to_string(),
            "10.10.143.224/27"
        );
        assert!(t.line_subnet(2, 256, 1).is_none());
        assert!(t.line_subnet(3, 0, 0).is_none());
        assert_eq!(t.address(0, 0, 0).unwrap(), ip("10.10.0.1"));
        // Host (15, 0, 0) is position 15 of dimension-0 line 0.
        let h = t.host(&[15, 0, 0]).unwrap();
        assert_eq!(t.address(h, 0, 0).unwrap(), ip("10.10.0.16"));
        assert_eq!(t.iface_name(2, 1), "x2l1");
        assert_eq!(t.parse_iface("x2l1"), Some((2, 1)));
        assert_eq!(t.parse_iface("x3l0"), None);
        assert_eq!(t.parse_iface("x0l2"), None);
        assert_eq!(t.parse_iface("x0l"), None);
        // Past the plan, unused positions, network addresses: nobody.
        assert_eq!(t.locate(ip("10.10.144.1")), None);
        assert_eq!(t.locate(ip("10.10.0.17")), None);
        assert_eq!(t.locate(ip("10.10.0.0")), None);
        assert_eq!(t.locate(ip("10.11.0.1")), None);
        assert_eq!(t.locate(ip("10.9.255.255")), None);
    }

    #[test]
    fn every_address_is_unique_and_located() {
        for (spec, links) in [("hxb:2x2x2", 2), ("hxb:3x3x2", 1), ("hxb:4x3x2x2", 3)] {
            let t = Topology::parse(spec, links).unwrap();
            let mut seen = HashSet::new();
            for h in 0..t.hosts() {
                let a = t.addresses(h).unwrap();
                assert_eq!(a.len(), t.nics_per_host());
                for x in a {
                    assert!(seen.insert(x.ip), "{spec}: {} twice", x.ip);
                    assert_eq!(t.locate(x.ip), Some((h, x.dim, x.link)));
                    let line = t.line_of(h, x.dim).unwrap();
                    let sn = t.line_subnet(x.dim, line, x.link).unwrap();
                    assert!(sn.contains(x.ip));
                    assert_eq!(t.line_host(x.dim, line, t.coord(h, x.dim)), Some(h));
                    assert!(x.iface.len() <= 15);
                    assert_eq!(t.parse_iface(&x.iface), Some((x.dim, x.link)));
                }
            }
            // Hosts on one line share all other coordinates.
            for d in 0..t.ndims() {
                for line in 0..t.lines(d) {
                    let hs: Vec<u32> = (0..t.dims()[d])
                        .map(|p| t.line_host(d, line, p).unwrap())
                        .collect();
                    for &h in &hs {
                        assert_eq!(t.line_of(h, d).unwrap(), line);
                        for g in (0..t.ndims()).filter(|&g| g != d) {
                            assert_eq!(t.coord(h, g), t.coord(hs[0], g));
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #[test]
        fn locate_inverts_address(dims in proptest::collection::vec(2u32..9, 1..=4),
                                  links in 1u32..4, pick in any::<u32>(), d in 0usize..4, l in 0u32..4) {
            let Ok(t) = Topology::new(&dims, links) else { return Ok(()); };
            let h = pick % t.hosts();
            let (d, l) = (d % dims.len(), l % links);
            let a = t.address(h, d, l).unwrap();
            prop_assert_eq!(t.locate(a), Some((h, d, l)));
        }

        #[test]
        fn locate_never_panics(dims in proptest::collection::vec(2u32..30, 1..=4),
                               links in 1u32..4, raw in any::<u32>()) {
            if let Ok(t) = Topology::new(&dims, links) {
                if let Some((h, d, l)) = t.locate(Ipv4Addr::from(raw)) {
                    prop_assert_eq!(t.address(h, d, l).unwrap(), Ipv4Addr::from(raw));
                }
            }
        }
    }
}
