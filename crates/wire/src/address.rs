//! The address of an hxcomm endpoint: fixed 64 bytes (Open MPI 4.1 exchanges libfabric names in
//! 64-byte buffers and copies them with the local length), self-describing, enough to reach the
//! process over every rail and to tell whether it shares this host's memory.
//!
//! ```text
//!  0 magic "HA"   2 version   3 flags (bit 0: offers shared memory)
//!  4 rails u8     5 reserved  6 endpoint u16
//!  8 instance u64            random per process: tells a restarted process from its predecessor
//! 16 host u64                hash of boot id and network namespace: equal = same host
//! 24 pid u32                 for direct copies between processes of one host
//! 28 port u16                TCP port of the process's listeners, the same on loopback and every rail
//! 30 reserved u16
//! 32 rails: up to 6 x (IPv4 address [4], prefix length u8)
//! 62 reserved u16
//! ```
//!
//! Rails beyond six are not described (the process still uses them with peers that learn them
//! some other way); an address with more than six, a zero instance, a zero port or a prefix
//! beyond 32 is malformed.

use std::fmt;
use std::net::Ipv4Addr;

use crate::{u16_at, u32_at, u64_at, WireError};

pub const ADDRESS_LEN: usize = 64;
pub const ADDRESS_MAGIC: [u8; 2] = *b"HA";
pub const ADDRESS_VERSION: u8 = 1;
/// Rails an address can describe.
pub const ADDRESS_MAX_RAILS: usize = 6;
pub const ADDR_FLAG_SHM: u8 = 1;

/// One rail interface of an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RailIp {
    pub ip: Ipv4Addr,
    pub prefix: u8,
}

impl RailIp {
    /// The subnet number: rails of two hosts pair up when these are equal.
    pub fn network(&self) -> u32 {
        let mask = if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - self.prefix as u32)
        };
        u32::from(self.ip) & mask
    }
}

/// A parsed endpoint address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Address {
    pub flags: u8,
    pub ep: u16,
    pub instance: u64,
    pub host: u64,
    pub pid: u32,
    pub port: u16,
    pub rails: Vec<RailIp>,
}

impl Address {
    pub fn shm(&self) -> bool {
        self.flags & ADDR_FLAG_SHM != 0
    }

    /// The same process (whatever the endpoint).
    pub fn same_process(&self, other: &Address) -> bool {
        self.instance == other.instance
    }

    pub fn to_bytes(&self) -> [u8; ADDRESS_LEN] {
        let mut b = [0u8; ADDRESS_LEN];
        b[..2].copy_from_slice(&ADDRESS_MAGIC);
        b[2] = ADDRESS_VERSION;
        b[3] = self.flags;
        let n = self.rails.len().min(ADDRESS_MAX_RAILS);
        b[4] = n as u8;
        b[6..8].copy_from_slice(&self.ep.to_le_bytes());
        b[8..16].copy_from_slice(&self.instance.to_le_bytes());
        b[16..24].copy_from_slice(&self.host.to_le_bytes());
        b[24..28].copy_from_slice(&self.pid.to_le_bytes());
        b[28..30].copy_from_slice(&self.port.to_le_bytes());
        for (i, r) in self.rails.iter().take(n).enumerate() {
            let at = 32 + 5 * i;
            b[at..at + 4].copy_from_slice(&r.ip.octets());
            b[at + 4] = r.prefix;
        }
        b
    }

    /// Parses and validates an address; never reads past `b`.
    pub fn parse(b: &[u8]) -> Result<Address, WireError> {
        if b.len() < ADDRESS_LEN {
            return Err(WireError::Truncated {
                need: ADDRESS_LEN,
                have: b.len(),
            });
        }
        if b[..2] != ADDRESS_MAGIC {
            return Err(WireError::BadMagic {
                found: [b[0], b[1]],
            });
        }
        if b[2] != ADDRESS_VERSION {
            return Err(WireError::UnsupportedVersion { found: b[2] });
        }
        let bad = |what: &'static str, value: u64| WireError::BadAddress { what, value };
        let n = b[4] as usize;
        if n > ADDRESS_MAX_RAILS {
            return Err(bad("rail count", n as u64));
        }
        let instance = u64_at(b, 8);
        if instance == 0 {
            return Err(bad("instance", 0));
        }
        let port = u16_at(b, 28);
        if port == 0 {
            return Err(bad("port", 0));
        }
        let mut rails = Vec::with_capacity(n);
        for i in 0..n {
            let at = 32 + 5 * i;
            let ip = Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3]);
            let prefix = b[at + 4];
            if prefix > 32 {
                return Err(bad("prefix length", prefix as u64));
            }
            rails.push(RailIp { ip, prefix });
        }
        Ok(Address {
            flags: b[3],
            ep: u16_at(b, 6),
            instance,
            host: u64_at(b, 16),
            pid: u32_at(b, 24),
            port,
            rails,
        })
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "hxcomm://{:016x}.{}@{:x}:{}",
            self.instance, self.ep, self.host, self.port
        )?;
        for (i, r) in self.rails.iter().enumerate() {
            write!(f, "{}{}/{}", if i == 0 { "/" } else { "," }, r.ip, r.prefix)?;
        }
        if self.shm() {
            write!(f, ";shm;pid={}", self.pid)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Address {
        Address {
            flags: ADDR_FLAG_SHM,
            ep: 3,
            instance: 0x1122334455667788,
            host: 0xaabb,
            pid: 4242,
            port: 0x1234,
            rails: vec![
                RailIp {
                    ip: Ipv4Addr::new(10, 10, 0, 1),
                    prefix: 24,
                },
                RailIp {
                    ip: Ipv4Addr::new(10, 10, 1, 1),
                    prefix: 24,
                },
            ],
        }
    }

    #[test]
    fn fixed_bytes_and_round_trip() {
        let a = sample();
        let b = a.to_bytes();
        assert_eq!(&b[..8], &[b'H', b'A', 1, 1, 2, 0, 3, 0]);
        assert_eq!(&b[8..16], &0x1122334455667788u64.to_le_bytes());
        assert_eq!(&b[28..30], &[0x34, 0x12]);
        assert_eq!(&b[32..42], &[10, 10, 0, 1, 24, 10, 10, 1, 1, 24]);
        assert_eq!(Address::parse(&b), Ok(a.clone()));
        assert_eq!(
            a.to_string(),
            "hxcomm://1122334455667788.3@aabb:4660/10.10.0.1/24,10.10.1.1/24;shm;pid=4242"
        );
    }

    #[test]
    fn malformed() {
        let b = sample().to_bytes();
        assert!(Address::parse(&b[..63]).is_err());
        let mut x = b;
        x[0] = b'X';
        assert!(Address::parse(&x).is_err());
        let mut x = b;
        x[2] = 9;
        assert!(Address::parse(&x).is_err());
        let mut x = b;
        x[4] = 7;
        assert!(Address::parse(&x).is_err());
        let mut x = b;
        x[8..16].fill(0);
        assert!(Address::parse(&x).is_err());
        let mut x = b;
        x[28..30].fill(0);
        assert!(Address::parse(&x).is_err());
        let mut x = b;
        x[36] = 33;
        assert!(Address::parse(&x).is_err());
    }

    #[test]
    fn networks() {
        let r = RailIp {
            ip: Ipv4Addr::new(10, 10, 3, 7),
            prefix: 24,
        };
        assert_eq!(r.network(), u32::from(Ipv4Addr::new(10, 10, 3, 0)));
        let all = RailIp {
            ip: r.ip,
            prefix: 0,
        };
        assert_eq!(all.network(), 0);
    }
}
