//! A whole rail stream from a hostile peer, fed to the protocol core in arbitrary pieces with
//! receives posted: it must end in a clean error or nothing, never a panic or an out-of-bounds
//! access. The simulator's reads try the in-place path (Core::rx_express) half the time.
#![no_main]

use hx_protocol::sim::Cluster;
use hx_protocol::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cfg = Config { eager_limit: 256, max_chunk: 1024, min_chunk: 128, ..Config::default() };
    let mut sim = Cluster::new(2, 2, cfg, data.len() as u64);
    // Half the inputs as shared memory: lossless, and reads try the in-place path too.
    if data.len() % 2 == 1 {
        sim.enable_lossless();
    }
    for _ in 0..4 {
        let _ = sim.cores[0].recv(0, None, None, vec![0u8; 300]);
    }
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
