//! The shape of a hyper-crossbar: dimensions, sizes, links per dimension, host numbering.

use std::fmt;

/// The most dimensions a topology may have.
pub const MAX_DIMS: usize = 4;
/// The most hosts on one line (a line subnet is at most a /24: 254 usable addresses).
pub const MAX_LINE: u32 = 254;

/// What is wrong with a topology or a question asked of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The text is not `hxb:N` or `hxb:NxMx...`.
    Syntax {
        /// The text given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A size or the number of links per dimension is out of range.
    Range(String),
    /// The topology does not fit the address plan inside 10.10.0.0/16.
    DoesNotFit(String),
    /// A host number at or beyond the number of hosts.
    NoSuchHost {
        /// The host asked for.
        host: u32,
        /// How many hosts there are.
        hosts: u32,
    },
    /// Coordinates of the wrong length or beyond a dimension's size.
    BadCoords(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Syntax { spec, reason } => write!(f, "topology {spec:?}: {reason}"),
            Error::Range(m) | Error::DoesNotFit(m) | Error::BadCoords(m) => f.write_str(m),
            Error::NoSuchHost { host, hosts } => {
                write!(f, "no host {host}: the topology has hosts 0..{hosts}")
            }
        }
    }
}

impl std::error::Error for Error {}

/// A hyper-crossbar: `dims.len()` dimensions of the given sizes, `links` links per host and
/// dimension. See the crate documentation for the numbering, the address plan and the paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub(crate) dims: Vec<u32>,
    pub(crate) links: u32,
    pub(crate) hosts: u32,
    pub(crate) plan: crate::plan::Plan,
    pub(crate) detours: bool,
}

impl Topology {
    /// Parses `hxb:S0xS1x...` (1 to [`MAX_DIMS`] sizes, each 2..=[`MAX_LINE`]) with `links`
    /// links per dimension (at least 1), and checks that it fits the address plan.
    pub fn parse(spec: &str, links: u32) -> Result<Topology, Error> {
        let syntax = |reason: String| Error::Syntax {
            spec: spec.to_string(),
            reason,
        };
        let body = spec.strip_prefix("hxb:").ok_or_else(|| {
            syntax("expected hxb:SIZE or hxb:SIZExSIZEx... (e.g. hxb:16x16x10)".into())
        })?;
        if body.is_empty() {
            return Err(syntax("no sizes after hxb:".into()));
        }
        let mut dims = Vec::new();
        for part in body.split('x') {
            if dims.len() == MAX_DIMS {
                return Err(syntax(format!("more than {MAX_DIMS} dimensions")));
            }
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax(format!("size {part:?} is not a number")));
            }
            let n: u32 = part
                .parse()
                .map_err(|_| syntax(format!("size {part} is too large")))?;
            dims.push(n);
        }
        Topology::new(&dims, links).map_err(|e| match e {
            Error::Range(m) | Error::DoesNotFit(m) => syntax(m),
            e => e,
        })
    }

    /// The topology with these dimension sizes and `links` links per dimension.
    pub fn new(dims: &[u32], links: u32) -> Result<Topology, Error> {
        if dims.is_empty() || dims.len() > MAX_DIMS {
            return Err(Error::Range(format!(
                "{} dimensions: 1 to {MAX_DIMS} are supported",
                dims.len()
            )));
        }
        for (d, &n) in dims.iter().enumerate() {
            if n < 2 {
                return Err(Error::Range(format!(
                    "dimension {d} has size {n}: every dimension needs at least 2 hosts \
                     (leave a dimension of 1 out)"
                )));
            }
            if n > MAX_LINE {
                return Err(Error::Range(format!(
                    "dimension {d} has size {n}: a line holds at most {MAX_LINE} hosts \
                     (one /24 subnet)"
                )));
            }
        }
        if links == 0 {
            return Err(Error::Range(
                "0 links per dimension: at least 1 is needed".into(),
            ));
        }
        let hosts: u64 = dims.iter().map(|&n| u64::from(n)).product();
        let plan = crate::plan::Plan::new(dims, links, hosts)?;
        Ok(Topology {
            dims: dims.to_vec(),
            links,
            hosts: hosts as u32, // Plan::new refuses anything near u32::MAX
            plan,
            detours: false,
        })
    }

    /// The sizes of the dimensions.
    pub fn dims(&self) -> &[u32] {
        &self.dims
    }

    /// The number of dimensions.
    pub fn ndims(&self) -> usize {
        self.dims.len()
    }

    /// Links per host and dimension.
    pub fn links_per_dim(&self) -> u32 {
        self.links
    }

    /// The same topology with detours on or off: line neighbours reached also through every
    /// other dimension (see the crate documentation, "Detours"). Off unless asked for.
    pub fn with_detours(mut self, on: bool) -> Topology {
        self.detours = on && self.ndims() > 1;
        self
    }

    /// Whether line neighbours take detours (see [`Topology::with_detours`]).
    pub fn detours(&self) -> bool {
        self.detours
    }

    /// The number of hosts (the product of the sizes).
    pub fn hosts(&self) -> u32 {
        self.hosts
    }

    /// NICs per host: dimensions times links per dimension.
    pub fn nics_per_host(&self) -> usize {
        self.dims.len() * self.links as usize
    }

    /// The spec this topology parses from, e.g. `hxb:16x16x10`.
    pub fn spec(&self) -> String {
        let sizes: Vec<String> = self.dims.iter().map(|n| n.to_string()).collect();
        format!("hxb:{}", sizes.join("x"))
    }

    pub(crate) fn check_host(&self, host: u32) -> Result<(), Error> {
        if host < self.hosts {
            Ok(())
        } else {
            Err(Error::NoSuchHost {
                host,
                hosts: self.hosts,
            })
        }
    }

    /// Coordinate `d` of `host` (unchecked beyond arithmetic: callers pass valid values).
    pub(crate) fn coord(&self, host: u32, d: usize) -> u32 {
        let below: u32 = self.dims[d + 1..].iter().product();
        (host / below) % self.dims[d]
    }

    /// The coordinates of `host`. Hosts are numbered in row-major order: the last dimension
    /// varies fastest, so `host = ((c0 * n1 + c1) * n2 + c2) ...` and sorting hosts by their
    /// coordinate tuples sorts them by number.
    pub fn coords(&self, host: u32) -> Result<Vec<u32>, Error> {
        self.check_host(host)?;
        Ok((0..self.dims.len()).map(|d| self.coord(host, d)).collect())
    }

    /// The host at these coordinates (the inverse of [`Topology::coords`]).
    pub fn host(&self, coords: &[u32]) -> Result<u32, Error> {
        if coords.len() != self.dims.len() {
            return Err(Error::BadCoords(format!(
                "{} coordinates given, the topology has {} dimensions",
                coords.len(),
                self.dims.len()
            )));
        }
        let mut h = 0u32;
        for (d, (&c, &n)) in coords.iter().zip(&self.dims).enumerate() {
            if c >= n {
                return Err(Error::BadCoords(format!(
                    "coordinate {c} in dimension {d} of size {n}"
                )));
            }
            h = h * n + c;
        }
        Ok(h)
    }

    /// `host` with coordinate `d` replaced by `c` (valid inputs assumed).
    pub(crate) fn with_coord(&self, host: u32, d: usize, c: u32) -> u32 {
        let below: u32 = self.dims[d + 1..].iter().product();
        let old = self.coord(host, d);
        host - old * below + c * below
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} with {} link(s) per dimension{}",
            self.spec(),
            self.links,
            if self.detours { " and detours" } else { "" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_numbers() {
        let t = Topology::parse("hxb:16x16x10", 2).unwrap();
        assert_eq!(t.dims(), &[16, 16, 10]);
        assert_eq!(t.hosts(), 2560);
        assert_eq!(t.nics_per_host(), 6);
        assert_eq!(t.spec(), "hxb:16x16x10");
        assert_eq!(t.coords(0).unwrap(), vec![0, 0, 0]);
        assert_eq!(t.coords(1).unwrap(), vec![0, 0, 1]);
        assert_eq!(t.coords(10).unwrap(), vec![0, 1, 0]);
        assert_eq!(t.coords(2559).unwrap(), vec![15, 15, 9]);
        assert_eq!(t.host(&[15, 15, 9]).unwrap(), 2559);
        assert_eq!(t.with_coord(0, 1, 3), t.host(&[0, 3, 0]).unwrap());
        let flat = Topology::parse("hxb:8", 1).unwrap();
        assert_eq!(flat.ndims(), 1);
        assert_eq!(flat.coords(7).unwrap(), vec![7]);
    }

    #[test]
    fn refuses_bad_input() {
        for (spec, links, what) in [
            ("hxb:", 1, "no sizes"),
            ("16x16", 1, "expected hxb:"),
            ("hxb:16x", 1, "not a number"),
            ("hxb:x16", 1, "not a number"),
            ("hxb:16x-1", 1, "not a number"),
            ("hxb:16x+1", 1, "not a number"),
            ("hxb: 16", 1, "not a number"),
            ("hxb:0x4", 1, "at least 2"),
            ("hxb:4x1", 1, "at least 2"),
            ("hxb:2x2x2x2x2", 1, "more than 4"),
            ("hxb:300", 1, "at most 254"),
            ("hxb:99999999999", 1, "too large"),
            ("hxb:4x4", 0, "0 links"),
            ("hxb:254x254", 1, "10.10.0.0/16"),
            ("hxb:16x16x10", 4, "10.10.0.0/16"),
            ("hxb:8", 300, "10.10.0.0/16"),
        ] {
            let e = Topology::parse(spec, links).unwrap_err().to_string();
            assert!(e.contains(what), "{spec} x {links}: {e}");
        }
        let t = Topology::parse("hxb:2x3", 1).unwrap();
        assert!(t.coords(6).is_err());
        assert!(t.host(&[0]).is_err());
        assert!(t.host(&[2, 0]).is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in "\\PC{0,24}", links in 0u32..600) {
            let _ = Topology::parse(&s, links);
            let _ = Topology::parse(&format!("hxb:{s}"), links);
        }

        #[test]
        fn coords_round_trip(dims in proptest::collection::vec(2u32..7, 1..=4), pick in any::<u32>()) {
            let t = Topology::new(&dims, 1).unwrap();
            let h = pick % t.hosts();
            let c = t.coords(h).unwrap();
            prop_assert_eq!(t.host(&c).unwrap(), h);
            for (d, &cd) in c.iter().enumerate() {
                prop_assert_eq!(t.coord(h, d), cd);
            }
        }
    }
}
