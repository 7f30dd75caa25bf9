//! An all-to-all right after start: every rank sends one message to every other rank and checks
//! what it receives. It measures what a job pays for its first contact with every peer, which
//! is when connections are made (on first use), and the socket count that leaves per rank.

use std::time::Instant;

use clap::Args;
use hx_engine::Engine;

use crate::pattern;

const EP: u16 = 3;

#[derive(Args, Debug, Clone)]
pub struct AlltoallOpts {
    /// Bytes per message.
    #[arg(long, default_value = "4k")]
    pub size: String,
    /// Rounds (the first one makes the connections).
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
}

/// Open file descriptors of this process that are sockets.
fn sockets() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
                })
                .count()
        })
        .unwrap_or(0)
}

pub fn run(o: &AlltoallOpts) -> Result<(), String> {
    let len = crate::parse_sizes(&o.size)?
        .last()
        .copied()
        .ok_or("bad --size")?;
    let t_init = Instant::now();
    let mut e = Engine::init().map_err(|e| e.to_string())?;
    let init_s = t_init.elapsed().as_secs_f64();
    e.open_endpoint(EP).map_err(|e| e.to_string())?;
    let (me, size) = (e.rank(), e.size());
    let sockets_before = sockets();
    let mut round_s = Vec::new();
    for round in 0..o.rounds.max(1) {
        let t = Instant::now();
        let mut reqs = Vec::new();
        let mut recvs = Vec::new();
        for p in (0..size).filter(|&p| p != me) {
            let r = e
                .irecv(EP, Some(p), Some(round as u64), vec![0; len])
                .map_err(|e| e.to_string())?;
            recvs.push((p, r));
        }
        for k in 1..size {
            let p = (me + k) % size;
            let mut data = vec![0u8; len];
            pattern::fill(
                &mut data,
                (me as u64) << 32 | (p as u64) << 8 | round as u64,
            );
            reqs.push(
                e.isend(EP, p, EP, round as u64, data)
                    .map_err(|e| e.to_string())?,
            );
        }
        for (p, r) in recvs {
            let (st, buf) = e.wait_owned(r).map_err(|e| e.to_string())?;
            let buf = buf.unwrap_or_default();
            if st.len != len {
                return Err(format!("from rank {p}: {} bytes, expected {len}", st.len));
            }
            if let Some(at) =
                pattern::check(&buf, (p as u64) << 32 | (me as u64) << 8 | round as u64)
            {
                return Err(format!("from rank {p}: byte {at} differs"));
            }
        }
        e.wait_all(&reqs).map_err(|e| e.to_string())?;
        round_s.push(t.elapsed().as_secs_f64());
    }
    let sockets_after = sockets();
    let t_fin = Instant::now();
    e.finalize().map_err(|e| e.to_string())?;
    println!(
        "rank {me}: all-to-all of {len} bytes with {} ranks verified; init {init_s:.3} s, rounds {}, finalize {:.3} s; sockets {sockets_before} before, {sockets_after} after",
        size,
        round_s
            .iter()
            .map(|s| format!("{s:.3} s"))
            .collect::<Vec<_>>()
            .join(", "),
        t_fin.elapsed().as_secs_f64()
    );
    Ok(())
}
