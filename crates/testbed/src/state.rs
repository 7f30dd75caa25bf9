//! The record of what `up` made (/run/hxcomm/net-PREFIX.json), read by `down`, `status`, `link`.

use crate::spec::TestbedSpec;
use crate::sys::STATE_DIR;
use crate::TestbedError;
use hx_topology::Topology;
use serde_json::{json, Value};
use std::net::Ipv4Addr;

/// A testbed as recorded: its spec, its management subnet and every object made for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestbedInfo {
    pub spec: TestbedSpec,
    /// N of the management subnet 10.200.N.0/24.
    pub mgmt_net: u8,
    /// true: a bridge per rail in namespace `PREFIXsw`; false: a veth pair per rail (2 hosts).
    pub bridged: bool,
    /// Namespaces made (hosts, then the switch if any).
    pub namespaces: Vec<String>,
    /// Links made in the root namespace (management bridge, then host veth ends).
    pub root_links: Vec<String>,
    /// The topology wired (`hxb:HOSTS` with `rails` links for the flat layout): coordinates,
    /// addresses, interface names, routes.
    pub topology: Topology,
}

impl TestbedInfo {
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Namespace names of the hosts, `PREFIX0..`.
    pub fn host_names(&self) -> Vec<String> {
        (0..self.spec.hosts)
            .map(|k| self.spec.host_name(k))
            .collect()
    }

    /// Root side of the management network, 10.200.N.254.
    pub fn mgmt_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 200, self.mgmt_net, 254)
    }

    /// Management address of host `k`, 10.200.N.(k+1).
    pub fn host_mgmt_addr(&self, k: u32) -> Ipv4Addr {
        Ipv4Addr::new(10, 200, self.mgmt_net, (k + 1) as u8)
    }

    /// Address of host `k` on NIC (rail) `i`: 10.10.i.(k+1) in the flat layout, the plan's
    /// address of dimension `i / links`, link `i % links` otherwise.
    pub fn rail_addr(&self, k: u32, i: u32) -> Ipv4Addr {
        let (dim, link) = self.nic(i);
        self.topology
            .address(k, dim, link)
            .unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    /// Dimension and link of NIC (rail) `i` (NICs in the order of `Topology::addresses`).
    pub fn nic(&self, i: u32) -> (usize, u32) {
        let l = self.topology.links_per_dim();
        ((i / l) as usize, i % l)
    }

    /// Interface name of NIC (rail) `i` in every host: `r<i>` in the flat layout, `x<d>l<l>`
    /// otherwise.
    pub fn iface(&self, i: u32) -> String {
        let (dim, link) = self.nic(i);
        self.topology.iface_name(dim, link)
    }

    /// NIC index of an interface name (`r2`, `x1l0`) or of a plain index (`2`).
    pub fn parse_nic(&self, s: &str) -> Option<u32> {
        if let Some((dim, link)) = self.topology.parse_iface(s) {
            return Some(dim as u32 * self.topology.links_per_dim() + link);
        }
        s.parse().ok().filter(|&i| i < self.spec.rails)
    }

    /// Name of the management bridge in the root namespace.
    pub fn mgmt_bridge(&self) -> String {
        mgmt_bridge(&self.spec.name)
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "name": self.spec.name,
            "hosts": self.spec.hosts,
            "rails": self.spec.rails,
            "rates": self.spec.rates,
            "mtu": self.spec.mtu,
            "delay": self.spec.delay,
            "mgmt_net": self.mgmt_net,
            "layout": if self.bridged { "bridge" } else { "veth" },
            "namespaces": self.namespaces,
            "root_links": self.root_links,
        });
        if let Some(dims) = &self.spec.dims {
            v["dims"] = json!(dims);
        }
        if self.spec.detours {
            v["detours"] = json!(true);
        }
        v
    }

    pub fn from_json(v: &Value) -> Option<TestbedInfo> {
        let strings = |key: &str| -> Option<Vec<String>> {
            v.get(key)?
                .as_array()?
                .iter()
                .map(|s| s.as_str().map(str::to_string))
                .collect()
        };
        let rates = v
            .get("rates")?
            .as_array()?
            .iter()
            .map(|r| match r {
                Value::Null => Some(None),
                Value::String(s) => Some(Some(s.clone())),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?;
        let dims = match v.get("dims") {
            None => None,
            Some(d) => Some(
                d.as_array()?
                    .iter()
                    .map(|n| n.as_u64().and_then(|n| u32::try_from(n).ok()))
                    .collect::<Option<Vec<u32>>>()?,
            ),
        };
        let spec = TestbedSpec {
            name: v.get("name")?.as_str()?.to_string(),
            hosts: v.get("hosts")?.as_u64()? as u32,
            rails: v.get("rails")?.as_u64()? as u32,
            rates,
            mtu: v.get("mtu")?.as_u64()? as u32,
            delay: v.get("delay")?.as_str().map(str::to_string),
            dims,
            detours: match v.get("detours") {
                None => false,
                Some(d) => d.as_bool()?,
            },
        };
        Some(TestbedInfo {
            topology: spec.topology().ok()?,
            spec,
            mgmt_net: u8::try_from(v.get("mgmt_net")?.as_u64()?).ok()?,
            bridged: v.get("layout")?.as_str()? == "bridge",
            namespaces: strings("namespaces")?,
            root_links: strings("root_links")?,
        })
    }
}

pub fn mgmt_bridge(name: &str) -> String {
    format!("{name}-mgmt")
}

pub fn path(name: &str) -> String {
    format!("{STATE_DIR}/net-{name}.json")
}

/// The recorded testbed `name`, if any. A file that cannot be parsed is an error (never guess).
pub fn load(name: &str) -> Result<Option<TestbedInfo>, TestbedError> {
    let p = path(name);
    let text = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TestbedError::Io(format!("{p}: {e}"))),
    };
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| TestbedError::Io(format!("{p}: not valid JSON: {e}")))?;
    TestbedInfo::from_json(&v)
        .map(Some)
        .ok_or_else(|| TestbedError::Io(format!("{p}: not a testbed record")))
}

pub fn save(info: &TestbedInfo) -> Result<(), TestbedError> {
    std::fs::create_dir_all(STATE_DIR)
        .map_err(|e| TestbedError::Io(format!("create {STATE_DIR}: {e}")))?;
    let p = path(info.name());
    let tmp = format!("{p}.tmp");
    let text = serde_json::to_string_pretty(&info.to_json()).expect("json");
    std::fs::write(&tmp, text + "\n")
        .and_then(|_| std::fs::rename(&tmp, &p))
        .map_err(|e| TestbedError::Io(format!("{p}: {e}")))
}

pub fn remove(name: &str) -> Result<(), TestbedError> {
    let p = path(name);
    match std::fs::remove_file(&p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(TestbedError::Io(format!("{p}: {e}")))
        }
        _ => Ok(()),
    }
}

/// Every recorded testbed (unreadable records are skipped).
pub fn all() -> Vec<TestbedInfo> {
    let mut out = Vec::new();
    if let Ok(dir) = std::fs::read_dir(STATE_DIR) {
        for e in dir.flatten() {
            let f = e.file_name().to_string_lossy().into_owned();
            if let Some(name) = f.strip_prefix("net-").and_then(|s| s.strip_suffix(".json")) {
                if let Ok(Some(info)) = load(name) {
                    out.push(info);
                }
            }
        }
    }
    out.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip() {
        let mut spec = TestbedSpec::new("tb", 3, 2);
        spec.rates[1] = None;
        spec.delay = Some("20us".into());
        let info = TestbedInfo {
            spec,
            mgmt_net: 17,
            bridged: true,
            namespaces: vec!["tb0".into(), "tb1".into(), "tb2".into(), "tbsw".into()],
            root_links: vec!["tb-mgmt".into(), "tb-m0".into()],
            topology: Topology::new(&[3], 2).unwrap(),
        };
        let back = TestbedInfo::from_json(&info.to_json()).unwrap();
        assert_eq!(back, info);
        assert_eq!(back.mgmt_addr(), Ipv4Addr::new(10, 200, 17, 254));
        assert_eq!(back.host_mgmt_addr(2), Ipv4Addr::new(10, 200, 17, 3));
        assert_eq!(back.rail_addr(1, 1), Ipv4Addr::new(10, 10, 1, 2));
        assert_eq!(back.iface(1), "r1");
    }

    #[test]
    fn hyper_crossbar_round_trip() {
        let t = Topology::parse("hxb:2x2x2", 2).unwrap();
        let spec = TestbedSpec::hxb("p", &t).with_rate(None);
        assert!(spec.validate().is_ok());
        let info = TestbedInfo {
            spec,
            mgmt_net: 3,
            bridged: true,
            namespaces: vec!["p0".into(), "psw".into()],
            root_links: vec!["p-mgmt".into()],
            topology: t.clone(),
        };
        let back = TestbedInfo::from_json(&info.to_json()).unwrap();
        assert_eq!(back, info);
        assert_eq!(back.iface(3), "x1l1");
        assert_eq!(back.parse_nic("x1l1"), Some(3));
        assert_eq!(back.parse_nic("5"), Some(5));
        assert_eq!(back.parse_nic("6"), None);
        assert_eq!(back.rail_addr(7, 0), t.address(7, 0, 0).unwrap());
        // A record without "dims" (written before hyper-crossbars) is the flat layout.
        let mut old = TestbedInfo::from_json(&info.to_json()).unwrap().to_json();
        old.as_object_mut().unwrap().remove("dims");
        let flat = TestbedInfo::from_json(&old).unwrap();
        assert_eq!(flat.topology, Topology::new(&[8], 6).unwrap());
        assert_eq!(flat.iface(5), "r5");
    }
}
