//! Validated random traffic between all ranks. Every rank derives the same plan from the seed:
//! messages with log-uniform sizes and unique tags, in batches. Per batch and per (sender,
//! receiver) pair, receives are either "ordered" (source given, any tag: they must get the pair's
//! messages in send order) or "tagged" (exact tag, with source given or any-source). Every byte
//! of every message is checked.

use std::time::Instant;

use clap::Args;
use hx_engine::{Engine, Request, ANY_SOURCE, ANY_TAG};

use crate::pattern;

const EP: u16 = 2;

#[derive(Args, Debug, Clone)]
pub struct StressOpts {
    /// Messages in the whole job.
    #[arg(long, default_value_t = 1000)]
    pub messages: usize,
    /// Largest message (sizes are log-uniform from 1 byte).
    #[arg(long, default_value = "8M")]
    pub max_size: String,
    /// Messages per batch (in flight at once across the job).
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON summary line.
    #[arg(long)]
    pub json: bool,
    /// After the traffic, keep serving connections (and progressing) this long before finishing.
    #[arg(long, default_value_t = 0)]
    pub linger_ms: u64,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

struct Planned {
    src: u32,
    dst: u32,
    len: usize,
    tag: u64,
}

fn plan(o: &StressOpts, size: u32, max: usize) -> Vec<Planned> {
    let mut rng = Rng(o.seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
    let ln_max = (max.max(1) as f64).ln();
    (0..o.messages)
        .map(|i| {
            let src = rng.below(size as u64) as u32;
            let dst = (src + 1 + rng.below(size as u64 - 1) as u32) % size;
            let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
            let len = ((u * ln_max).exp() as usize).clamp(1, max.max(1));
            // Unique per message, random-looking high bits.
            let tag = (rng.next() & 0xffff_ffff_0000_0000) | i as u64;
            Planned { src, dst, len, tag }
        })
        .collect()
}

pub fn run(o: &StressOpts) -> Result<(), String> {
    let max = crate::parse_sizes(&o.max_size)?
        .last()
        .copied()
        .ok_or("bad --max-size")?;
    let mut e = Engine::init().map_err(|e| e.to_string())?;
    if e.size() < 2 {
        return Err("stress needs at least 2 ranks: hxcomm run -n 4 -- hxcomm bench stress".into());
    }
    e.open_endpoint(EP).map_err(|e| e.to_string())?;
    let me = e.rank();
    let size = e.size();
    let msgs = plan(o, size, max);
    let t0 = Instant::now();
    let (mut sent, mut received, mut bytes) = (0usize, 0usize, 0usize);
    for (b, batch) in msgs.chunks(o.batch.max(1)).enumerate() {
        let base = b * o.batch.max(1);
        let mut rng = Rng(o.seed ^ (b as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let ordered: Vec<bool> = (0..size * size).map(|_| rng.below(2) == 0).collect();
        // Receives first (some messages will still arrive before their receive: unexpected path).
        let mut recvs: Vec<(Request, usize)> = Vec::new();
        for (k, m) in batch.iter().enumerate() {
            if m.dst != me {
                continue;
            }
            let ord = ordered[(m.src * size + m.dst) as usize];
            let (src, tag) = if ord {
                (Some(m.src), ANY_TAG)
            } else if rng.below(2) == 0 {
                (ANY_SOURCE, Some(m.tag))
            } else {
                (Some(m.src), Some(m.tag))
            };
            let r = e
                .irecv(EP, src, tag, vec![0u8; m.len])
                .map_err(|e| e.to_string())?;
            recvs.push((r, base + k));
        }
        let mut sends = Vec::new();
        for (k, m) in batch.iter().enumerate() {
            if m.src != me {
                continue;
            }
            let mut data = vec![0u8; m.len];
            pattern::fill(&mut data, (base + k) as u64);
            sends.push(
                e.isend(EP, m.dst, EP, m.tag, data)
                    .map_err(|e| e.to_string())?,
            );
        }
        for (r, idx) in recvs {
            let (st, buf) = e
                .wait_owned(r)
                .map_err(|e| format!("receive of message {idx}: {e}"))?;
            let buf = buf.unwrap_or_default();
            let m = &msgs[idx];
            // Ordered receives match in send order per pair; plan order is send order.
            let got = msgs
                .iter()
                .enumerate()
                .skip(base)
                .take(batch.len())
                .find(|(_, x)| x.tag == st.tag)
                .map(|(i, _)| i)
                .ok_or_else(|| format!("message with unknown tag {:#x}", st.tag))?;
            if got != idx || st.source != m.src || st.len != m.len {
                return Err(format!(
                    "receive for message {idx} (from {} tag {:#x}, {} B) got message {got} from rank {} ({} B): out of order or mismatched",
                    m.src, m.tag, m.len, st.source, st.len
                ));
            }
            if let Some(i) = pattern::check(&buf, idx as u64) {
                return Err(format!(
                    "message {idx} from rank {} ({} B): byte {i} corrupted",
                    m.src, m.len
                ));
            }
            received += 1;
            bytes += m.len;
        }
        sent += sends.len();
        e.wait_all(&sends).map_err(|e| e.to_string())?;
    }
    let secs = t0.elapsed().as_secs_f64();
    let rail_bytes: Vec<Vec<u64>> = (0..size)
        .map(|p| if p == me { vec![] } else { e.rail_tx_bytes(p) })
        .collect();
    let linger = Instant::now();
    while linger.elapsed().as_millis() < o.linger_ms as u128 {
        e.progress().map_err(|e| e.to_string())?;
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    e.barrier().map_err(|e| e.to_string())?;
    if o.json {
        println!(
            "{}",
            serde_json::json!({"bench": "stress", "rank": me, "sent": sent, "received": received,
                "bytes_received": bytes, "seconds": secs, "rail_tx_bytes": rail_bytes,
                "policy": e.settings().protocol.policy.name()})
        );
    } else {
        println!(
            "rank {me}: sent {sent}, received and verified {received} messages ({bytes} bytes) in {secs:.2} s; rail tx bytes per peer {rail_bytes:?}"
        );
    }
    e.finalize().map_err(|e| e.to_string())
}
