//! What a testbed looks like: hosts, rails, rates, MTU, delay; parsing and validation.

use crate::TestbedError;
use hx_topology::Topology;

/// The longest prefix: `PREFIX-mgmt` and `PREFIX-m<k>` must fit in 15 characters.
pub const MAX_NAME_LEN: usize = 10;
/// Host k has 10.200.N.(k+1) and 10.10.i.(k+1); .254 is the root side of the management net.
pub const MAX_HOSTS: u32 = 253;
/// Rail i is 10.10.i.0/24.
pub const MAX_RAILS: u32 = 256;

/// The shape of an emulated cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestbedSpec {
    /// Prefix of every name: namespaces `NAME0..`, `NAMEsw`, bridge `NAME-mgmt`.
    pub name: String,
    pub hosts: u32,
    /// NICs per host: the rails of the flat layout, or dimensions x links per dimension of a
    /// hyper-crossbar, in the order of [`Topology::addresses`].
    pub rails: u32,
    /// The sizes of a multi-dimensional hyper-crossbar (`hxb:2x2x2` is `[2, 2, 2]`, with
    /// `rails / dims.len()` links per dimension); `None` is today's flat layout (`hxb:HOSTS`,
    /// every host on every rail).
    pub dims: Option<Vec<u32>>,
    /// One entry per NIC (rail), a tc rate such as `1gbit`; `None` = no rate limit.
    pub rates: Vec<Option<String>>,
    pub mtu: u32,
    /// netem delay added on every rail interface, e.g. `20us`.
    pub delay: Option<String>,
    /// Line neighbours also reached through the other dimensions (`--detours`: the hosts get
    /// hx-topology's detour rule and routes, the ranks `HX_DETOURS=1`).
    pub detours: bool,
}

impl TestbedSpec {
    /// `hosts` x `rails`, every rail at 1gbit, MTU 1500, no delay.
    pub fn new(name: &str, hosts: u32, rails: u32) -> Self {
        TestbedSpec {
            name: name.to_string(),
            hosts,
            rails,
            rates: vec![Some("1gbit".to_string()); rails as usize],
            mtu: 1500,
            delay: None,
            dims: None,
            detours: false,
        }
    }

    /// The testbed of a topology: `hxb:N` with L links is the flat `N` hosts x `L` rails of
    /// [`TestbedSpec::new`]; more dimensions give one switch per line and link. Every NIC at
    /// 1gbit, MTU 1500, no delay.
    pub fn hxb(name: &str, topology: &Topology) -> Self {
        let mut s = TestbedSpec::new(name, topology.hosts(), topology.nics_per_host() as u32);
        if topology.ndims() > 1 {
            s.dims = Some(topology.dims().to_vec());
        }
        s.detours = topology.detours();
        s
    }

    /// The topology the testbed wires: `hxb:HOSTS` with `rails` links for the flat layout.
    pub fn topology(&self) -> Result<Topology, TestbedError> {
        let dims = self.dims.clone().unwrap_or_else(|| vec![self.hosts]);
        let n = dims.len() as u32;
        if !self.rails.is_multiple_of(n) {
            return Err(invalid(format!(
                "{} NICs per host do not divide into {n} dimensions",
                self.rails
            )));
        }
        let t =
            Topology::new(&dims, self.rails / n).map_err(|e| invalid(format!("topology: {e}")))?;
        if t.hosts() != self.hosts {
            return Err(invalid(format!(
                "{} has {} hosts, the spec says {}",
                t.spec(),
                t.hosts(),
                self.hosts
            )));
        }
        if self.detours && t.ndims() == 1 {
            return Err(invalid(
                "--detours needs a topology of two or more dimensions".into(),
            ));
        }
        Ok(t.with_detours(self.detours))
    }

    /// Sets every rail to `rate` (`None` = unlimited).
    pub fn with_rate(mut self, rate: Option<&str>) -> Self {
        self.rates = vec![rate.map(str::to_string); self.rails as usize];
        self
    }

    /// Checks every field; the error names the field and the allowed values.
    pub fn validate(&self) -> Result<(), TestbedError> {
        validate_name(&self.name)?;
        if !(2..=MAX_HOSTS).contains(&self.hosts) {
            return Err(invalid(format!(
                "hosts must be 2..={MAX_HOSTS}, got {}",
                self.hosts
            )));
        }
        if !(1..=MAX_RAILS).contains(&self.rails) {
            return Err(invalid(format!(
                "rails must be 1..={MAX_RAILS}, got {}",
                self.rails
            )));
        }
        if self.rates.len() != self.rails as usize {
            return Err(invalid(format!(
                "{} rates given for {} rails (give one rate, or one per rail)",
                self.rates.len(),
                self.rails
            )));
        }
        for r in self.rates.iter().flatten() {
            parse_rate(r)?;
        }
        if !(576..=65535).contains(&self.mtu) {
            return Err(invalid(format!(
                "mtu must be 576..=65535, got {}",
                self.mtu
            )));
        }
        if let Some(d) = &self.delay {
            parse_delay(d)?;
        }
        self.topology().map(|_| ())
    }

    /// Namespace of host `k`.
    pub fn host_name(&self, k: u32) -> String {
        format!("{}{}", self.name, k)
    }
}

fn invalid(msg: String) -> TestbedError {
    TestbedError::InvalidSpec(msg)
}

/// A prefix: 1..=10 characters, a letter first, then letters, digits or `_`.
pub fn validate_name(name: &str) -> Result<(), TestbedError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "name {name:?}: use 1 to {MAX_NAME_LEN} characters, a letter first, then letters, digits or _"
        )))
    }
}

/// Splits `2.5gbit` into 2.5 and `gbit` (lower case); `what` and `example` word the error.
fn number_and_unit(s: &str, what: &str, example: &str) -> Result<(f64, String), TestbedError> {
    let lower = s.trim().to_ascii_lowercase();
    let split = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (num, unit) = lower.split_at(split);
    let value: f64 = num.parse().map_err(|_| {
        invalid(format!(
            "{what} {s:?}: expected a number and a unit, e.g. {example}"
        ))
    })?;
    Ok((value, unit.to_string()))
}

/// Parses a tc rate (`1gbit`, `500mbit`, `100mbps`, `2.5gbit`) into bits per second. As in tc,
/// `bit` units are bits and `bps` units are bytes per second: `100mbps` is 800 Mbit/s. Every
/// reader of a `--rate` (the testbed, `bench compare`'s table) goes through this one function.
pub fn parse_rate(s: &str) -> Result<u64, TestbedError> {
    let (value, unit) = number_and_unit(s, "rate", "1gbit")?;
    let mult: f64 = match unit.as_str() {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        "bps" => 8.0,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        _ => {
            return Err(invalid(format!(
                "rate {s:?}: unit must be bit, kbit, mbit, gbit, tbit, bps, kbps, mbps or gbps"
            )))
        }
    };
    let bits = value * mult;
    if !(8000.0..=1e13).contains(&bits) {
        return Err(invalid(format!(
            "rate {s:?}: must be between 8kbit and 10tbit"
        )));
    }
    Ok(bits as u64)
}

/// Parses a rate option: `none`, one rate for every rail, or a comma list with one per rail.
pub fn parse_rates(s: &str, rails: u32) -> Result<Vec<Option<String>>, TestbedError> {
    let items: Vec<Option<String>> = s
        .split(',')
        .map(|r| {
            let r = r.trim();
            if r.eq_ignore_ascii_case("none") {
                Ok(None)
            } else {
                parse_rate(r).map(|_| Some(r.to_ascii_lowercase()))
            }
        })
        .collect::<Result<_, _>>()?;
    if items.len() == 1 {
        Ok(vec![items[0].clone(); rails as usize])
    } else if items.len() == rails as usize {
        Ok(items)
    } else {
        Err(invalid(format!(
            "--rate {s:?}: {} rates for {rails} rails (give one rate, or one per rail)",
            items.len()
        )))
    }
}

/// Parses a netem delay (`20us`, `1ms`, `0.5ms`) into microseconds.
pub fn parse_delay(s: &str) -> Result<f64, TestbedError> {
    let (value, unit) = number_and_unit(s, "delay", "20us")?;
    let mult = match unit.as_str() {
        "us" | "usec" => 1.0,
        "ms" | "msec" => 1e3,
        "s" | "sec" => 1e6,
        _ => return Err(invalid(format!("delay {s:?}: unit must be us, ms or s"))),
    };
    let us = value * mult;
    if !(0.0..=10e6).contains(&us) {
        return Err(invalid(format!("delay {s:?}: must be between 0 and 10s")));
    }
    Ok(us)
}

/// tbf burst and queue limit in bytes for a rate. Measured here with iperf3 at 1gbit, MTU 1500,
/// while other builds loaded the 2 cores: a 64 KiB burst gives 119.4 MB/s on one rail but only
/// 116.5-118.5 MB/s per rail (with retransmits) on 4 rails at once, because a late tbf watchdog
/// loses tokens; a 128 KiB burst (~1 ms at 1 Gbit/s) gives 119.43-119.48 MB/s per rail on 1 and 4
/// rails with no retransmits (wire limit for TCP payload at tbf's 1514-byte frames: 119.55). A
/// 256 KiB queue drops (1000+ retransmits in 5 s); 1 MiB (8.4 ms) does not. The queue is that
/// long in time at every rate, and at least one burst: a switch port's buffer, not a fixed
/// megabyte, which at 100 Mbit/s held 84 ms and gave an 8-host all-to-all a tail of 0.3-0.5 s
/// per round (84-87% of the link model; 96% with 128 KiB, BENCHMARKS.md "hyper-crossbar").
pub fn tbf_params(rate_bits: u64, mtu: u32) -> (u64, u64) {
    let bytes_per_s = rate_bits / 8;
    let burst = (bytes_per_s / 1000)
        .max(128 * 1024)
        .max(2 * mtu as u64 + 64);
    // 1 MiB per 125 MB/s (1 Gbit/s): 8.4 ms.
    let limit = ((bytes_per_s as u128 * (1 << 20) / 125_000_000) as u64).max(burst);
    (burst, limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("2.5gbit").unwrap(), 2_500_000_000);
        assert_eq!(parse_rate("100mbps").unwrap(), 800_000_000);
        assert!(parse_rate("1gib").is_err());
        assert!(parse_rate("gbit").is_err());
        assert!(parse_rate("0gbit").is_err());
        assert_eq!(parse_rates("none", 3).unwrap(), vec![None, None, None]);
        assert_eq!(
            parse_rates("1gbit,1gbit,2gbit,4gbit", 4).unwrap(),
            vec![
                Some("1gbit".into()),
                Some("1gbit".into()),
                Some("2gbit".into()),
                Some("4gbit".into())
            ]
        );
        assert!(parse_rates("1gbit,2gbit", 4).is_err());
        assert_eq!(
            parse_rates("1GBit", 2).unwrap(),
            vec![Some("1gbit".into()); 2]
        );
    }

    #[test]
    fn delays() {
        assert_eq!(parse_delay("20us").unwrap(), 20.0);
        assert_eq!(parse_delay("1.5ms").unwrap(), 1500.0);
        assert!(parse_delay("20").is_err());
        assert!(parse_delay("x").is_err());
    }

    #[test]
    fn names() {
        assert!(validate_name("hx").is_ok());
        assert!(validate_name("t123").is_ok());
        assert!(validate_name("abcdefghij").is_ok());
        assert!(validate_name("abcdefghijk").is_err());
        assert!(validate_name("1x").is_err());
        assert!(validate_name("a-b").is_err());
        assert!(validate_name("").is_err());
    }

    #[test]
    fn spec_validation() {
        assert!(TestbedSpec::new("hx", 2, 4).validate().is_ok());
        assert!(TestbedSpec::new("hx", 1, 4).validate().is_err());
        assert!(TestbedSpec::new("hx", 2, 0).validate().is_err());
        let mut s = TestbedSpec::new("hx", 2, 2);
        s.rates.pop();
        assert!(s.validate().is_err());
        let mut s = TestbedSpec::new("hx", 2, 2);
        s.delay = Some("20us".into());
        s.mtu = 9000;
        assert!(s.validate().is_ok());
        // A hyper-crossbar: hosts and NICs must agree with the dimensions.
        let t = Topology::parse("hxb:3x3x2", 1).unwrap();
        let s = TestbedSpec::hxb("hx", &t);
        assert_eq!((s.hosts, s.rails, s.rates.len()), (18, 3, 3));
        assert_eq!(s.topology().unwrap(), t);
        let mut bad = s.clone();
        bad.hosts = 17;
        assert!(bad.validate().is_err());
        let mut bad = s.clone();
        bad.rails = 4;
        bad.rates.push(None);
        assert!(bad.validate().is_err());
        assert_eq!(
            TestbedSpec::hxb("hx", &Topology::parse("hxb:4", 2).unwrap()),
            TestbedSpec::new("hx", 4, 2)
        );
    }

    #[test]
    fn tbf_sizes() {
        assert_eq!(tbf_params(1_000_000_000, 1500), (131072, 1024 * 1024));
        let (b, l) = tbf_params(4_000_000_000, 9000);
        assert_eq!(b, 500_000);
        assert_eq!(l, 4 * 1024 * 1024);
        // Slow links keep the same 8.4 ms of queue (at least a burst), not a megabyte.
        assert_eq!(tbf_params(500_000_000, 1500), (131072, 512 * 1024));
        assert_eq!(tbf_params(100_000_000, 1500), (131072, 131072));
    }
}
