//! This host's IPv4 interfaces (getifaddrs), from which the engine picks its rails.

use std::ffi::CStr;
use std::io;
use std::net::Ipv4Addr;

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
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list that we walk read-only and free once.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut p = head;
        while !p.is_null() {
            let ifa = &*p;
            p = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || (*ifa.ifa_addr).sa_family as i32 != libc::AF_INET {
                continue;
            }
            let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
            let addr = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            let prefix = if ifa.ifa_netmask.is_null() {
                32
            } else {
                let m = &*(ifa.ifa_netmask as *const libc::sockaddr_in);
                u32::from_be(m.sin_addr.s_addr).count_ones() as u8
            };
            let flags = ifa.ifa_flags;
            out.push(Iface {
                name: CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned(),
                addr,
                prefix,
                up: flags & libc::IFF_UP as u32 != 0,
                loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
            });
        }
        libc::freeifaddrs(head);
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
