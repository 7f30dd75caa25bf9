//! A whole rail stream from a hostile peer, fed to the protocol core in arbitrary pieces with
//! receives posted: it must end in a clean error or nothing, never a panic or an out-of-bounds
//! access. The simulator's reads try the in-place path (Core::rx_express) half the time. Core
//! 0 has a region and two reads out, so forged accesses and read answers reach those paths.
#![no_main]

use hx_protocol::sim::Cluster;
use hx_protocol::{Access, Config, Regions, RmaRefusal};
use libfuzzer_sys::fuzz_target;

/// 4 KiB of memory under key 1, so that a hostile peer's reads, writes and atomics reach real
/// regions (and refusals for anything else).
struct Memory(Vec<u8>);

impl Regions<Vec<u8>> for Memory {
    fn resolve(
        &mut self,
        key: u64,
        addr: u64,
        len: usize,
        _: Access,
    ) -> Result<Vec<u8>, RmaRefusal> {
        if key != 1 {
            return Err(RmaRefusal::UnknownKey);
        }
        let a = usize::try_from(addr).map_err(|_| RmaRefusal::OutOfRange)?;
        let end = a.checked_add(len).ok_or(RmaRefusal::OutOfRange)?;
        self.0
            .get(a..end)
            .map(<[u8]>::to_vec)
            .ok_or(RmaRefusal::OutOfRange)
    }

    fn placed(&mut self, _: u64, addr: u64, buf: Vec<u8>) {
        let a = addr as usize;
        self.0[a..a + buf.len()].copy_from_slice(&buf);
    }
}

fuzz_target!(|data: &[u8]| {
    let cfg = Config {
        eager_limit: 256,
        max_chunk: 1024,
        min_chunk: 128,
        ..Config::default()
    };
    let mut sim = Cluster::new(2, 2, cfg, data.len() as u64);
    // Half the inputs as shared memory: lossless, and reads try the in-place path too.
    if data.len() % 2 == 1 {
        sim.enable_lossless();
    }
    for _ in 0..4 {
        let _ = sim.cores[0].recv(0, None, None, vec![0u8; 300]);
    }
    sim.cores[0].set_regions(Box::new(Memory(vec![0; 4096])));
    // Reads of ours (sequence numbers 0 and 1 to rank 1) that forged answers may claim.
    let _ = sim.cores[0].read(1, 1, 0, vec![0u8; 16]);
    let _ = sim.cores[0].read(1, 1, 0, vec![0u8; 200]);
    let (a, b) = data.split_at(data.len() / 2);
    sim.inject(1, 0, 0, a);
    sim.inject(1, 0, 1, b);
    for _ in 0..10_000 {
        match sim.step() {
            Ok(true) => {}
            _ => break,
        }
    }
});
