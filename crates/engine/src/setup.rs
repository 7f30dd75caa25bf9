//! Rail discovery and the address exchange. Each rank publishes through the bootstrap its host
//! identity, a loopback listener and one listener per rail interface; a pair of ranks on different
//! hosts uses the rails whose subnets they share, numbered in subnet order so that both sides agree
//! on the numbering without talking. Ranks on the same host use `HX_LOOPBACK_RAILS` loopback
//! connections.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use hx_transport::ifaces::{self, Iface};

use crate::{Error, Settings};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RailAddr {
    pub name: String,
    pub addr: Ipv4Addr,
    pub prefix: u8,
    pub port: u16,
}

impl RailAddr {
    fn network(&self) -> u32 {
        ifaces::network_of(self.addr, self.prefix)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerInfo {
    pub host: String,
    /// Shared-memory host key (empty: this rank does not offer shared memory).
    pub shm: String,
    /// Process id (for direct copies between processes of one host).
    pub pid: u32,
    pub lo_port: u16,
    pub rails: Vec<RailAddr>,
}

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

pub(crate) fn encode(info: &PeerInfo) -> String {
    let mut s = format!(
        "v1 host={} lo={}",
        info.host.replace(' ', "_"),
        info.lo_port
    );
    if !info.shm.is_empty() {
        s.push_str(&format!(
            " shm={} pid={}",
            info.shm.replace(' ', "_"),
            info.pid
        ));
    }
    for r in &info.rails {
        s.push_str(&format!(
            " rail={},{},{},{}",
            r.name, r.addr, r.prefix, r.port
        ));
    }
    s
}

pub(crate) fn decode(rank: u32, s: &str) -> Result<PeerInfo, Error> {
    let bad = |what: &str| {
        Error::Setup(format!(
            "rank {rank} published bad rail info ({what}): {s:?}"
        ))
    };
    let mut parts = s.split(' ');
    if parts.next() != Some("v1") {
        return Err(bad("version"));
    }
    let mut info = PeerInfo {
        host: String::new(),
        shm: String::new(),
        pid: 0,
        lo_port: 0,
        rails: Vec::new(),
    };
    for p in parts {
        let (k, v) = p.split_once('=').ok_or_else(|| bad("field"))?;
        match k {
            "host" => info.host = v.to_string(),
            "shm" => info.shm = v.to_string(),
            "pid" => info.pid = v.parse().map_err(|_| bad("pid"))?,
            "lo" => info.lo_port = v.parse().map_err(|_| bad("lo port"))?,
            "rail" => {
                let f: Vec<&str> = v.split(',').collect();
                if f.len() != 4 {
                    return Err(bad("rail"));
                }
                info.rails.push(RailAddr {
                    name: f[0].to_string(),
                    addr: f[1].parse().map_err(|_| bad("rail address"))?,
                    prefix: f[2]
                        .parse()
                        .ok()
                        .filter(|p| *p <= 32)
                        .ok_or_else(|| bad("prefix"))?,
                    port: f[3].parse().map_err(|_| bad("rail port"))?,
                });
            }
            _ => {} // fields from newer versions
        }
    }
    Ok(info)
}

/// The rails between this rank and `peer`, in the order both sides agree on.
pub(crate) fn routes(
    me: &PeerInfo,
    peer_rank: u32,
    peer: &PeerInfo,
    loopback_rails: usize,
) -> Result<Vec<Route>, Error> {
    if me.host == peer.host {
        return Ok((0..loopback_rails)
            .map(|i| Route {
                local: Ipv4Addr::LOCALHOST,
                device: None,
                remote: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, peer.lo_port)),
                label: format!("lo#{i}"),
            })
            .collect());
    }
    let mut out = Vec::new();
    for mine in &me.rails {
        if let Some(theirs) = peer
            .rails
            .iter()
            .find(|t| t.network() == mine.network() && t.prefix == mine.prefix)
        {
            out.push(Route {
                local: mine.addr,
                device: Some(mine.name.clone()),
                remote: SocketAddr::V4(SocketAddrV4::new(theirs.addr, theirs.port)),
                label: mine.name.clone(),
            });
        }
    }
    if out.is_empty() {
        let mine: Vec<String> = me
            .rails
            .iter()
            .map(|r| format!("{}={}/{}", r.name, r.addr, r.prefix))
            .collect();
        let theirs: Vec<String> = peer
            .rails
            .iter()
            .map(|r| format!("{}={}/{}", r.name, r.addr, r.prefix))
            .collect();
        return Err(Error::Setup(format!(
            "no rail in common with rank {peer_rank} on host {}: mine [{}], theirs [{}]",
            peer.host,
            mine.join(", "),
            theirs.join(", ")
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(host: &str, rails: &[(&str, [u8; 4])]) -> PeerInfo {
        PeerInfo {
            host: host.into(),
            shm: String::new(),
            pid: 0,
            lo_port: 1000,
            rails: rails
                .iter()
                .enumerate()
                .map(|(i, (n, a))| RailAddr {
                    name: n.to_string(),
                    addr: Ipv4Addr::from(*a),
                    prefix: 24,
                    port: 2000 + i as u16,
                })
                .collect(),
        }
    }

    #[test]
    fn round_trip() {
        let i = info(
            "h/net:[1]",
            &[("r0", [10, 10, 0, 1]), ("r1", [10, 10, 1, 1])],
        );
        assert_eq!(decode(0, &encode(&i)).unwrap(), i);
        assert!(decode(0, "v2 x").is_err());
        assert!(decode(0, "v1 rail=a,b").is_err());
        assert!(decode(0, "v1 rail=r0,10.0.0.1,99,1").is_err());
    }

    #[test]
    fn rails_pair_by_subnet() {
        let a = info(
            "a",
            &[
                ("r0", [10, 10, 0, 1]),
                ("r1", [10, 10, 1, 1]),
                ("x", [10, 9, 9, 1]),
            ],
        );
        let b = info("b", &[("eth5", [10, 10, 1, 2]), ("eth2", [10, 10, 0, 2])]);
        let r = routes(&a, 1, &b, 1).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].remote, "10.10.0.2:2001".parse().unwrap());
        assert_eq!(r[1].device.as_deref(), Some("r1"));
        let lo = routes(&a, 1, &info("a", &[]), 3).unwrap();
        assert_eq!(lo.len(), 3);
        assert!(routes(&a, 1, &info("c", &[("z", [192, 0, 2, 1])]), 1).is_err());
    }
}
