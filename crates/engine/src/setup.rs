//! Rail discovery and routes. A process listens on loopback and on every rail interface (one
//! port for all) and describes itself in an [`Address`]; a pair of processes on different hosts
//! uses the rails whose subnets they share, numbered in subnet order so that both sides agree on
//! the numbering without talking. Processes on the same host use `HX_LOOPBACK_RAILS` loopback
//! connections (or shared memory).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

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
    Ok(rails)
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
        let r = routes(&a, &devs, &b, 1).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].remote, "10.10.0.2:2000".parse().unwrap());
        assert_eq!(r[1].device.as_deref(), Some("r1"));
        assert_eq!(r[1].label, "r1");
        let lo = routes(&a, &devs, &addr(1, &[]), 3).unwrap();
        assert_eq!(lo.len(), 3);
        assert_eq!(lo[2].remote, "127.0.0.1:2000".parse().unwrap());
        assert!(routes(&a, &devs, &addr(3, &[[192, 0, 2, 1]]), 1).is_err());
    }
}
