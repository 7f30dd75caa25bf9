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
const CONTROL_TAG: u64 = u64::MAX - 1;

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
    /// Run batches for this long instead of a fixed number of messages (rank 0 decides when to
    /// stop, so every rank runs the same batches).
    #[arg(long)]
    pub seconds: Option<f64>,
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

/// The messages of batch `b` (global indices from `b * batch`), the same on every rank.
fn plan_batch(
    seed: u64,
    b: usize,
    count: usize,
    batch: usize,
    size: u32,
    max: usize,
) -> Vec<Planned> {
    let mut rng = Rng((seed ^ (b as u64).wrapping_mul(0xD1B5_4A32_D192_ED03))
        .wrapping_mul(0x2545_F491_4F6C_DD1D)
        | 1);
    let ln_max = (max.max(1) as f64).ln();
    (0..count)
        .map(|k| {
            let i = b * batch + k;
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

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
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
    let batch = o.batch.max(1);
    let rss_start = rss_kib();
    let t0 = Instant::now();
    let (mut sent, mut received, mut bytes) = (0usize, 0usize, 0usize);
    let mut b = 0;
    loop {
        let count = match o.seconds {
            Some(_) => batch,
            None if b * batch >= o.messages => break,
            None => batch.min(o.messages - b * batch),
        };
        if let Some(limit) = o.seconds {
            // Rank 0 decides, everyone follows: all ranks run the same batches.
            let mut go = [u8::from(t0.elapsed().as_secs_f64() < limit)];
            if me == 0 {
                for p in 1..size {
                    e.send(EP, p, EP, CONTROL_TAG, &go)
                        .map_err(|e| e.to_string())?;
                }
            } else {
                e.recv(EP, Some(0), Some(CONTROL_TAG), &mut go)
                    .map_err(|e| e.to_string())?;
            }
            if go[0] == 0 {
                break;
            }
        }
        let base = b * batch;
        let msgs = plan_batch(o.seed, b, count, batch, size, max);
        let mut rng = Rng(o.seed ^ (b as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let ordered: Vec<bool> = (0..size * size).map(|_| rng.below(2) == 0).collect();
        // Receives first (some messages will still arrive before their receive: unexpected path).
        let mut recvs: Vec<(Request, usize)> = Vec::new();
        for (k, m) in msgs.iter().enumerate() {
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
            recvs.push((r, k));
        }
        let mut sends = Vec::new();
        for (k, m) in msgs.iter().enumerate() {
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
        for (r, k) in recvs {
            let idx = base + k;
            let (st, buf) = e
                .wait_owned(r)
                .map_err(|e| format!("receive of message {idx}: {e}"))?;
            let buf = buf.unwrap_or_default();
            let m = &msgs[k];
            // Ordered receives match in send order per pair; plan order is send order.
            let got = msgs
                .iter()
                .position(|x| x.tag == st.tag)
                .ok_or_else(|| format!("message with unknown tag {:#x}", st.tag))?;
            if got != k || st.source != m.src || st.len != m.len {
                return Err(format!(
                    "receive for message {idx} (from {} tag {:#x}, {} B) got message {} from rank {} ({} B): out of order or mismatched",
                    m.src, m.tag, m.len, base + got, st.source, st.len
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
        b += 1;
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
                "policy": e.settings().protocol.policy.name(), "batches": b,
                "rail_failures": e.rail_failures(), "resent_frames": e.resent_frames(),
                "rss_kib_start": rss_start, "rss_kib_end": rss_kib()})
        );
    } else {
        println!(
            "rank {me}: sent {sent}, received and verified {received} messages ({bytes} bytes) in {secs:.2} s; rail tx bytes per peer {rail_bytes:?}; rail failures {}, frames resent {}, RSS {rss_start} -> {} KiB",
            e.rail_failures(),
            e.resent_frames(),
            rss_kib()
        );
    }
    e.finalize().map_err(|e| e.to_string())
}
