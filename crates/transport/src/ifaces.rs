//! This host's IPv4 interfaces (getifaddrs), from which the engine picks its rails.

use std::io;
use std::net::Ipv4Addr;

use nix::net::if_::InterfaceFlags;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub addr: Ipv4Addr,
    pub prefix: u8,
    pub up: bool,
    pub loopback: bool,
}

impl Iface {
    pub fn network(&self) -> u32 {
        network_of(self.addr, self.prefix)
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        network_of(ip, self.prefix) == self.network()
    }
}

pub fn network_of(ip: Ipv4Addr, prefix: u8) -> u32 {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix.min(32))
    };
    u32::from(ip) & mask
}

pub fn list() -> io::Result<Vec<Iface>> {
    let mut out = Vec::new();
    for ifa in nix::ifaddrs::getifaddrs()? {
        let Some(sin) = ifa.address.as_ref().and_then(|a| a.as_sockaddr_in()) else {
            continue;
        };
        let prefix = match ifa.netmask.as_ref().and_then(|m| m.as_sockaddr_in()) {
            Some(m) => u32::from(m.ip()).count_ones() as u8,
            None => 32,
        };
        out.push(Iface {
            name: ifa.interface_name,
            addr: sin.ip(),
            prefix,
            up: ifa.flags.contains(InterfaceFlags::IFF_UP),
            loopback: ifa.flags.contains(InterfaceFlags::IFF_LOOPBACK),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_listed() {
        let l = list().unwrap();
        assert!(l
            .iter()
            .any(|i| i.loopback && i.addr == Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn networks() {
        let i = Iface {
            name: "r1".into(),
            addr: Ipv4Addr::new(10, 10, 1, 2),
            prefix: 24,
            up: true,
            loopback: false,
        };
        assert!(i.contains(Ipv4Addr::new(10, 10, 1, 200)));
        assert!(!i.contains(Ipv4Addr::new(10, 10, 2, 2)));
    }
}
