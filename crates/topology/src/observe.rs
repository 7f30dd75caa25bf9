//! What `hxcomm topo check` looks at on this host (or in the network namespace it runs in):
//! the interfaces and their IPv4 addresses (getifaddrs), the main route table
//! (/proc/net/route), the IPv4 sysctls the plan sets (/proc/sys/net/ipv4), and the detour rule
//! and table through `ip rule` / `ip route show table` (nothing in /proc shows those);
//! [`crate::check::check`] does the comparing.

use std::collections::BTreeMap;
use std::path::Path;

use nix::net::if_::InterfaceFlags;

use crate::check::{parse_ip_route_show, parse_proc_net_route, Interface, KernelRoute, Observed};

/// The per-interface settings read from /proc/sys/net/ipv4/conf/<name>/ (for `all`, `default`
/// and every interface): those [`crate::Topology::sysctls`] sets.
const CONF_KEYS: [&str; 3] = ["rp_filter", "arp_ignore", "arp_announce"];

/// This host's interfaces, routes and sysctls, and warnings about what could only partly be
/// read (lines of /proc/net/route skipped). An error when the interfaces or the route table
/// cannot be read at all.
pub fn observe() -> Result<(Observed, Vec<String>), String> {
    let mut warnings = Vec::new();
    let interfaces = interfaces().map_err(|e| format!("cannot list interfaces: {e}"))?;
    let text = std::fs::read_to_string("/proc/net/route")
        .map_err(|e| format!("cannot read /proc/net/route: {e}"))?;
    let (routes, skipped) = parse_proc_net_route(&text);
    if skipped > 0 {
        warnings.push(format!(
            "{skipped} line(s) of /proc/net/route could not be parsed and were skipped"
        ));
    }
    let sysctls = sysctls(Path::new("/proc/sys/net/ipv4"));
    let (detour_rule, detour_routes) = detours(&mut warnings);
    Ok((
        Observed {
            interfaces,
            routes,
            sysctls,
            detour_rule,
            detour_routes,
        },
        warnings,
    ))
}

/// The detour rule and table, read with `ip` (/proc shows neither rules nor tables other than
/// the main one); what cannot be read is a warning and `None` / empty.
fn detours(warnings: &mut Vec<String>) -> (Option<bool>, Vec<KernelRoute>) {
    let mut ip = |args: &[&str]| -> Option<String> {
        match std::process::Command::new("ip").args(args).output() {
            Ok(o) if o.status.success() => Some(String::from_utf8_lossy(&o.stdout).into_owned()),
            // A table that was never filled does not exist: nothing in it.
            Ok(o) if String::from_utf8_lossy(&o.stderr).contains("table does not exist") => {
                Some(String::new())
            }
            Ok(o) => {
                warnings.push(format!(
                    "`ip {}` failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
                None
            }
            Err(e) => {
                warnings.push(format!("cannot run `ip {}`: {e}", args.join(" ")));
                None
            }
        }
    };
    let table = crate::DETOUR_TABLE.to_string();
    let rule = ip(&["-4", "rule", "show", "pref", &table]).map(|t| {
        t.lines()
            .any(|l| l.contains("from all iif lo lookup") && l.contains(&table))
    });
    let routes = match ip(&["-4", "route", "show", "table", &table]) {
        Some(t) => {
            let (r, skipped) = parse_ip_route_show(&t);
            if skipped > 0 {
                warnings.push(format!(
                    "{skipped} line(s) of table {table} could not be parsed and were skipped"
                ));
            }
            r
        }
        None => Vec::new(),
    };
    (rule, routes)
}

/// Every interface (getifaddrs lists each once without an address, AF_PACKET, and once per
/// IPv4 address), in the order first seen, with its IPv4 addresses.
fn interfaces() -> nix::Result<Vec<Interface>> {
    let mut out: Vec<Interface> = Vec::new();
    for ifa in nix::ifaddrs::getifaddrs()? {
        let i = match out.iter().position(|f| f.name == ifa.interface_name) {
            Some(i) => i,
            None => {
                out.push(Interface {
                    name: ifa.interface_name.clone(),
                    up: ifa.flags.contains(InterfaceFlags::IFF_UP),
                    carrier: ifa.flags.contains(InterfaceFlags::IFF_LOWER_UP),
                    addrs: Vec::new(),
                });
                out.len() - 1
            }
        };
        let Some(sin) = ifa.address.as_ref().and_then(|a| a.as_sockaddr_in()) else {
            continue;
        };
        let prefix = match ifa.netmask.as_ref().and_then(|m| m.as_sockaddr_in()) {
            Some(m) => u32::from(m.ip()).leading_ones() as u8,
            None => 32,
        };
        out[i].addrs.push((sin.ip(), prefix));
    }
    Ok(out)
}

/// `net.ipv4.ip_forward` and `net.ipv4.conf.<name>.<key>` for every directory under
/// `root`/conf and every key of [`CONF_KEYS`], as far as they can be read.
fn sysctls(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut read = |key: String, path: &Path| {
        if let Ok(v) = std::fs::read_to_string(path) {
            out.insert(key, v.trim().to_string());
        }
    };
    read("net.ipv4.ip_forward".into(), &root.join("ip_forward"));
    let Ok(dir) = std::fs::read_dir(root.join("conf")) else {
        return out;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        for k in CONF_KEYS {
            read(format!("net.ipv4.conf.{name}.{k}"), &e.path().join(k));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_host_can_be_observed() {
        let (o, _) = observe().unwrap();
        let lo = o.interfaces.iter().find(|f| f.name == "lo").unwrap();
        assert!(lo.addrs.contains(&(std::net::Ipv4Addr::LOCALHOST, 8)));
        assert!(o.sysctls.contains_key("net.ipv4.ip_forward"));
        assert!(o.sysctls.contains_key("net.ipv4.conf.all.rp_filter"));
        assert!(o.sysctls.contains_key("net.ipv4.conf.lo.rp_filter"));
    }

    #[test]
    fn sysctls_from_a_tree() {
        let dir = std::env::temp_dir().join(format!("hx-topo-sysctl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("conf/eth0")).unwrap();
        std::fs::create_dir_all(dir.join("conf/all")).unwrap();
        std::fs::write(dir.join("ip_forward"), "1\n").unwrap();
        std::fs::write(dir.join("conf/eth0/rp_filter"), "2\n").unwrap();
        std::fs::write(dir.join("conf/all/arp_ignore"), "1\n").unwrap();
        let s = sysctls(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        let want: BTreeMap<String, String> = [
            ("net.ipv4.ip_forward", "1"),
            ("net.ipv4.conf.eth0.rp_filter", "2"),
            ("net.ipv4.conf.all.arp_ignore", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(s, want);
        assert!(sysctls(Path::new("/nonexistent/hx")).is_empty());
    }
}
