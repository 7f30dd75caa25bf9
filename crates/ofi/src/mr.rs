//! Memory registration: a domain's table of the regions peers may read and write (FI_RMA).
//!
//! A domain opened without FI_RMA keeps no table: registrations are accepted and do nothing
//! (consumers register even when their messages need none), all under key 0. With FI_RMA,
//! each registration gets a key: one the provider picks (FI_MR_PROV_KEY, or the 1.0
//! FI_MR_BASIC), or the one the application asked for, refused with -FI_ENOKEY while another
//! region holds it. Peers name memory by virtual address (FI_MR_VIRT_ADDR, FI_MR_BASIC) or else
//! by offset from the region's start.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use hx_engine::{Access, RmaRefusal};

use crate::sys::*;

#[derive(Debug, Clone)]
struct Region {
    /// (address, length) of each piece, in registration order.
    pieces: Vec<(u64, usize)>,
    access: u64,
}

#[derive(Debug)]
pub struct RegionTable {
    regions: RwLock<HashMap<u64, Region>>,
    next_key: AtomicU64,
    prov_key: bool,
    virt_addr: bool,
}

impl RegionTable {
    /// For a domain of `mr_mode` (its fi_info's domain_attr).
    pub fn new(mr_mode: i32) -> RegionTable {
        RegionTable {
            regions: RwLock::default(),
            next_key: AtomicU64::new(1),
            prov_key: mr_mode & (FI_MR_PROV_KEY | FI_MR_BASIC) != 0,
            virt_addr: mr_mode & (FI_MR_VIRT_ADDR | FI_MR_BASIC) != 0,
        }
    }

    /// Enters a region of `pieces` with `access` (FI_REMOTE_READ / FI_REMOTE_WRITE are what
    /// peers need); returns its key.
    pub fn register(
        &self,
        pieces: &[(u64, usize)],
        access: u64,
        requested_key: u64,
    ) -> Result<u64, i32> {
        let mut map = self.regions.write().unwrap_or_else(|e| e.into_inner());
        let key = if self.prov_key {
            // Skips keys still held (a counter that wrapped, in a process that lives long).
            loop {
                let k = self.next_key.fetch_add(1, Ordering::Relaxed);
                if !map.contains_key(&k) {
                    break k;
                }
            }
        } else if map.contains_key(&requested_key) {
            return Err(FI_ENOKEY);
        } else {
            requested_key
        };
        map.insert(
            key,
            Region {
                pieces: pieces.to_vec(),
                access,
            },
        );
        Ok(key)
    }

    pub fn deregister(&self, key: u64) {
        self.regions
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
    }

    /// Where in this process the `len` bytes a peer names at `addr` of region `key` are, if
    /// the region holds them all in one piece and allows the access.
    pub fn find(
        &self,
        key: u64,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<*mut u8, RmaRefusal> {
        let map = self.regions.read().unwrap_or_else(|e| e.into_inner());
        let r = map.get(&key).ok_or(RmaRefusal::UnknownKey)?;
        let need = match access {
            Access::Read => FI_REMOTE_READ,
            Access::Write => FI_REMOTE_WRITE,
        };
        if r.access & need == 0 {
            return Err(RmaRefusal::Denied);
        }
        let len = len as u64;
        let mut off = addr;
        for &(base, plen) in &r.pieces {
            let plen = plen as u64;
            if plen == 0 {
                continue;
            }
            if self.virt_addr {
                let end = base.saturating_add(plen);
                if addr >= base && addr.checked_add(len).is_some_and(|e| e <= end) {
                    return Ok(addr as *mut u8);
                }
            } else if off < plen {
                return if off.checked_add(len).is_some_and(|e| e <= plen) {
                    Ok((base + off) as *mut u8)
                } else {
                    Err(RmaRefusal::OutOfRange)
                };
            } else {
                off -= plen;
            }
        }
        Err(RmaRefusal::OutOfRange)
    }

    /// Regions registered (for tests and logs).
    pub fn len(&self) -> usize {
        self.regions.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RW: u64 = FI_REMOTE_READ | FI_REMOTE_WRITE;

    #[test]
    fn provider_keys_and_virtual_addresses() {
        let t = RegionTable::new(FI_MR_PROV_KEY | FI_MR_VIRT_ADDR);
        let a = t.register(&[(0x1000, 100)], RW, 0).unwrap();
        let b = t.register(&[(0x5000, 10)], FI_REMOTE_READ, 0).unwrap();
        assert_ne!(a, b, "two regions, two keys, whatever was asked");
        assert_eq!(t.find(a, 0x1010, 84, Access::Write), Ok(0x1010 as *mut u8));
        assert_eq!(
            t.find(a, 0x1010, 85, Access::Read),
            Err(RmaRefusal::OutOfRange)
        );
        assert_eq!(
            t.find(a, 0xfff, 1, Access::Read),
            Err(RmaRefusal::OutOfRange)
        );
        assert_eq!(
            t.find(b, 0x5000, 10, Access::Write),
            Err(RmaRefusal::Denied)
        );
        assert_eq!(
            t.find(b + 9, 0x5000, 1, Access::Read),
            Err(RmaRefusal::UnknownKey)
        );
        t.deregister(a);
        assert_eq!(
            t.find(a, 0x1010, 1, Access::Read),
            Err(RmaRefusal::UnknownKey)
        );
        assert_eq!(
            t.find(b, u64::MAX, 2, Access::Read),
            Err(RmaRefusal::OutOfRange),
            "no overflow"
        );
    }

    #[test]
    fn requested_keys_and_offsets() {
        let t = RegionTable::new(0);
        assert_eq!(t.register(&[(0x1000, 100), (0x9000, 50)], RW, 7), Ok(7));
        assert_eq!(t.register(&[(0x2000, 1)], RW, 7), Err(FI_ENOKEY));
        assert_eq!(t.find(7, 0, 100, Access::Read), Ok(0x1000 as *mut u8));
        assert_eq!(t.find(7, 110, 40, Access::Read), Ok(0x900a as *mut u8));
        // Across the two pieces: not one piece of memory.
        assert_eq!(t.find(7, 90, 20, Access::Read), Err(RmaRefusal::OutOfRange));
        assert_eq!(t.find(7, 150, 1, Access::Read), Err(RmaRefusal::OutOfRange));
        // An empty piece takes no offsets.
        assert_eq!(t.register(&[(0x3000, 0), (0x4000, 8)], RW, 8), Ok(8));
        assert_eq!(t.find(8, 0, 8, Access::Read), Ok(0x4000 as *mut u8));
        t.deregister(7);
        assert_eq!(t.register(&[(0x2000, 1)], RW, 7), Ok(7), "free again");
    }
}
