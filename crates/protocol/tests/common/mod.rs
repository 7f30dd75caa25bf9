//! Shared scenario driver for the protocol tests: random messages between simulated ranks,
//! checked byte for byte.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hx_protocol::sim::{Cluster, Rng};
use hx_protocol::{
    Access, AtomicOp, AtomicType, Completion, Config, Policy, ProtoError, Regions, ReqId,
    RmaRefusal,
};

pub fn pattern(src: u32, idx: usize, len: usize) -> Vec<u8> {
    let mut x = (src as u64) << 32 | idx as u64 | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[derive(Debug, Clone)]
pub struct Msg {
    pub src: u32,
    pub dst: u32,
    pub len: usize,
}

/// One expected receive: which message it must get.
struct Expect {
    dst: u32,
    msg: usize,
    req: Option<ReqId>,
    src_filter: Option<u32>,
    tag_filter: Option<u64>,
}

fn tag_of(i: usize) -> u64 {
    0x1000 + i as u64 * 3
}

/// Runs `msgs` over a simulated cluster and checks that every receive got exactly its message.
/// Per (src, dst) pair, receives are either all "ordered" (source given, any tag: they must get
/// the pair's messages in send order) or all "tagged" (tag given, source given or any).
pub fn run_scenario(
    ranks: usize,
    rails: usize,
    cfg: Config,
    msgs: &[Msg],
    seed: u64,
) -> Result<(), String> {
    run_scenario_with_faults(ranks, rails, cfg, msgs, seed, 0).map(|_| ())
}

/// As [`run_scenario`], and about once in `1 / cut_rate` steps a random rail of a random pair is
/// cut (and later restored), at any point of any transfer. Even all rails of a pair may be down
/// for a while; every cut rail comes back before the end.
pub fn run_scenario_with_faults(
    ranks: usize,
    rails: usize,
    cfg: Config,
    msgs: &[Msg],
    seed: u64,
    cut_every: usize,
) -> Result<u64, String> {
    let how = How {
        cut_every,
        ..How::default()
    };
    run_inner(ranks, rails, cfg, msgs, seed, how).map(|r| r.resent)
}

/// As [`run_scenario`] over one lossless rail per pair (shared memory), small sends taking the
/// driver's fast path whenever the core allows it, and about half the reads trying the in-place
/// path (`Core::rx_express`). Returns how many frames that path took.
pub fn run_lossless_scenario(
    ranks: usize,
    cfg: Config,
    msgs: &[Msg],
    seed: u64,
) -> Result<u64, String> {
    let how = How {
        force_lossless: true,
        ..How::default()
    };
    run_inner(ranks, 1, cfg, msgs, seed, how).map(|r| r.express_reads)
}

/// As [`run_scenario`] over one rail per pair, and returns every byte each pipe carried
/// (`Cluster::transcripts`).
pub fn run_scenario_transcripts(
    ranks: usize,
    cfg: Config,
    msgs: &[Msg],
    seed: u64,
) -> Result<Vec<Vec<u8>>, String> {
    let how = How {
        record: true,
        ..How::default()
    };
    run_inner(ranks, 1, cfg, msgs, seed, how).map(|r| r.transcripts)
}

/// How [`run_inner`] runs: about once in `cut_every` steps a rail is cut (0: never); every
/// link lossless (else by the seed); every byte each pipe carries kept.
#[derive(Default)]
struct How {
    cut_every: usize,
    force_lossless: bool,
    record: bool,
}

/// What [`run_inner`] saw besides the checks it made.
struct Ran {
    resent: u64,
    express_reads: u64,
    transcripts: Vec<Vec<u8>>,
}

/// A rank's memory as peers read and write it: regions by key (bytes, readable, writable).
type RegionMap = Arc<Mutex<HashMap<u64, (Vec<u8>, bool, bool)>>>;

/// The simulator's [`Regions`]: addresses are offsets into the region (there is no shared
/// address space to name), a write lands in a copy that [`Regions::placed`] puts in place.
pub struct SimRegions(pub RegionMap);

impl Regions<Vec<u8>> for SimRegions {
    fn resolve(
        &mut self,
        key: u64,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<Vec<u8>, RmaRefusal> {
        let map = self.0.lock().unwrap();
        let (mem, readable, writable) = map.get(&key).ok_or(RmaRefusal::UnknownKey)?;
        let allowed = match access {
            Access::Read => *readable,
            Access::Write => *writable,
        };
        if !allowed {
            return Err(RmaRefusal::Denied);
        }
        let end = addr
            .checked_add(len as u64)
            .filter(|&e| e <= mem.len() as u64)
            .ok_or(RmaRefusal::OutOfRange)?;
        Ok(match access {
            Access::Read => mem[addr as usize..end as usize].to_vec(),
            Access::Write => vec![0; len],
        })
    }

    fn atomic(
        &mut self,
        key: u64,
        addr: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        compare: u64,
    ) -> Result<u64, RmaRefusal> {
        let mut map = self.0.lock().unwrap();
        let (mem, _, writable) = map.get_mut(&key).ok_or(RmaRefusal::UnknownKey)?;
        let (a, w) = (addr as usize, ty.width());
        if !*writable {
            return Err(RmaRefusal::Denied);
        }
        let cell = mem.get_mut(a..a + w).ok_or(RmaRefusal::OutOfRange)?;
        let mut b = [0u8; 8];
        b[..w].copy_from_slice(cell);
        let old = u64::from_le_bytes(b);
        let new = hx_protocol::apply_atomic(op, ty, old, operand, compare);
        cell.copy_from_slice(&new.to_le_bytes()[..w]);
        Ok(old)
    }

    fn placed(&mut self, key: u64, addr: u64, buf: Vec<u8>) {
        let mut map = self.0.lock().unwrap();
        let (mem, _, _) = map
            .get_mut(&key)
            .expect("placed into a region that was resolved");
        mem[addr as usize..addr as usize + buf.len()].copy_from_slice(&buf);
    }
}

const WRITE_KEY: u64 = 0x5000;
const READ_KEY: u64 = 0x6000;
const READ_REGION: usize = 256 * 1024;
/// A counter every rank adds to with atomics.
const COUNTER_KEY: u64 = 0x7000;

#[derive(Debug, Clone, Copy)]
enum RmaKind {
    /// Into the target's writable region at this offset (each write its own range).
    Write(usize),
    /// From the target's read-only region at this offset.
    Read(usize),
    /// Refused by the target for this reason: a write into its read-only region, an unknown
    /// key, a range past a region's end.
    Refused(Access, RmaRefusal),
    /// A fetching atomic add of this to the target's counter.
    Add(u64),
}

#[derive(Debug)]
struct RmaOp {
    src: u32,
    dst: u32,
    len: usize,
    kind: RmaKind,
    req: Option<ReqId>,
}

fn read_region(rank: usize) -> Vec<u8> {
    pattern(rank as u32, 999_999, READ_REGION)
}

/// Turns about a quarter of the messages into remote reads and writes (some of them refused);
/// returns the messages left and the accesses, with each target's writable region size.
fn split_rma(ranks: usize, msgs: &[Msg], rng: &mut Rng) -> (Vec<Msg>, Vec<RmaOp>, Vec<usize>) {
    let mut left = Vec::new();
    let mut ops = Vec::new();
    let mut written = vec![0usize; ranks];
    for m in msgs {
        if rng.range(0, 3) != 0 {
            left.push(m.clone());
            continue;
        }
        let len = m.len.min(READ_REGION);
        let kind = match rng.range(0, 9) {
            0 => RmaKind::Refused(Access::Write, RmaRefusal::Denied),
            1 if len > 0 => RmaKind::Refused(Access::Read, RmaRefusal::UnknownKey),
            2 if len > 0 => RmaKind::Refused(Access::Read, RmaRefusal::OutOfRange),
            3 | 4 => RmaKind::Read(rng.range(0, READ_REGION - len)),
            5 => RmaKind::Add(len as u64 + 1),
            _ => {
                let off = written[m.dst as usize];
                written[m.dst as usize] += len;
                RmaKind::Write(off)
            }
        };
        let kind = match kind {
            RmaKind::Refused(Access::Write, _) if len == 0 => RmaKind::Write(0),
            k => k,
        };
        ops.push(RmaOp {
            src: m.src,
            dst: m.dst,
            len,
            kind,
            req: None,
        });
    }
    (left, ops, written)
}

fn start_rma(sim: &mut Cluster, i: usize, op: &mut RmaOp) -> Result<(), String> {
    let c = &mut sim.cores[op.src as usize];
    let data = || pattern(op.src, 500_000 + i, op.len);
    let r = match op.kind {
        RmaKind::Write(off) => c.write(op.dst, WRITE_KEY, off as u64, data()),
        RmaKind::Read(off) => c.read(op.dst, READ_KEY, off as u64, vec![0; op.len]),
        RmaKind::Refused(Access::Write, _) => c.write(op.dst, READ_KEY, 0, data()),
        RmaKind::Refused(_, RmaRefusal::UnknownKey) => c.read(op.dst, 0x7777, 0, vec![0; op.len]),
        RmaKind::Refused(..) => c.read(op.dst, READ_KEY, u64::MAX - 2, vec![0; op.len]),
        RmaKind::Add(n) => c.atomic(
            op.dst,
            COUNTER_KEY,
            0,
            AtomicOp::Sum,
            AtomicType::U64,
            n,
            0,
            vec![0; 8],
        ),
    };
    op.req = Some(r.map_err(|e| e.to_string())?);
    Ok(())
}

/// Checks a finished access: what it read, or that it was refused for the right reason.
fn check_rma(sim: &mut Cluster, regions: &[RegionMap], i: usize, op: &RmaOp) -> Result<(), String> {
    let (c, buf) = sim.cores[op.src as usize].take(op.req.unwrap()).unwrap();
    match (op.kind, c) {
        (RmaKind::Write(off), Completion::Done(_)) => {
            let map = regions[op.dst as usize].lock().unwrap();
            if map[&WRITE_KEY].0[off..off + op.len] != pattern(op.src, 500_000 + i, op.len)[..] {
                return Err(format!("write {i} {op:?} not placed as written"));
            }
        }
        (RmaKind::Read(off), Completion::Done(st)) => {
            if st.len != op.len || buf[..] != read_region(op.dst as usize)[off..off + op.len] {
                return Err(format!("read {i} {op:?} got other bytes ({st:?})"));
            }
        }
        (
            RmaKind::Refused(_, why),
            Completion::Failed(ProtoError::Refused { why: got, peer, .. }),
        ) if got == why && peer == op.dst => {}
        (RmaKind::Add(n), Completion::Done(st)) => {
            // What it fetched plus what it added is at most the counter's final value (each
            // add applied once, whatever was resent).
            let total = u64::from_le_bytes(
                regions[op.dst as usize].lock().unwrap()[&COUNTER_KEY].0[..8]
                    .try_into()
                    .unwrap(),
            );
            let old = u64::from_le_bytes(buf[..8].try_into().unwrap());
            if st.data != Some(old) || old + n > total {
                return Err(format!(
                    "atomic {i} {op:?} fetched {old} ({st:?}), counter {total}"
                ));
            }
        }
        (_, c) => return Err(format!("remote access {i} {op:?} ended {c:?}")),
    }
    Ok(())
}

fn run_inner(
    ranks: usize,
    rails: usize,
    cfg: Config,
    msgs: &[Msg],
    seed: u64,
    how: How,
) -> Result<Ran, String> {
    let How {
        cut_every,
        force_lossless,
        record,
    } = how;
    let mut rng = Rng::new(seed ^ 0xabcdef);
    let mut rma_rng = Rng::new(seed ^ 0x5eed_4d4a);
    let (msgs, mut rmas, written) = split_rma(ranks, msgs, &mut rma_rng);
    let msgs = &msgs[..];
    let mut sim = Cluster::new(ranks, rails, cfg, seed);
    if record {
        sim.record();
    }
    let regions: Vec<RegionMap> = (0..ranks)
        .map(|r| {
            let mut map = HashMap::new();
            map.insert(WRITE_KEY, (vec![0u8; written[r]], false, true));
            map.insert(READ_KEY, (read_region(r), true, false));
            map.insert(COUNTER_KEY, (vec![0u8; 8], true, true));
            Arc::new(Mutex::new(map))
        })
        .collect();
    if !rmas.is_empty() {
        for (c, g) in sim.cores.iter_mut().zip(&regions) {
            c.set_regions(Box::new(SimRegions(g.clone())));
        }
    }
    let mut next_rma = 0;
    // Same-host peers (no faults there): rendezvous data copied directly, the receiver told by
    // a FIN; and links that lose nothing, so nothing is logged or acknowledged.
    let lossless = force_lossless || (cut_every == 0 && seed % 5 < 2);
    if cut_every == 0 && seed.is_multiple_of(3) {
        sim.enable_direct();
    }
    if lossless {
        sim.enable_lossless();
    }
    let ordered: Vec<bool> = (0..ranks * ranks).map(|_| rng.range(0, 1) == 0).collect();
    let mut expects: Vec<Expect> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let ord = ordered[m.src as usize * ranks + m.dst as usize];
            Expect {
                dst: m.dst,
                msg: i,
                req: None,
                src_filter: if ord || rng.range(0, 1) == 0 {
                    Some(m.src)
                } else {
                    None
                },
                tag_filter: if ord { None } else { Some(tag_of(i)) },
            }
        })
        .collect();
    // Tagged receives may be posted in any order; ordered ones keep send order per pair.
    let mut post_order: Vec<usize> = (0..expects.len()).collect();
    for i in (1..post_order.len()).rev() {
        let j = rng.range(0, i);
        post_order.swap(i, j);
    }
    let mut by_pair: std::collections::HashMap<(u32, u32), Vec<usize>> = Default::default();
    for (i, m) in msgs.iter().enumerate() {
        if ordered[m.src as usize * ranks + m.dst as usize] {
            by_pair.entry((m.src, m.dst)).or_default().push(i);
        }
    }
    // Re-assign ordered receives so that, within a pair, earlier posts expect earlier messages.
    let mut cursor: std::collections::HashMap<(u32, u32), usize> = Default::default();
    let mut posts: Vec<usize> = Vec::new();
    for &e in &post_order {
        let m = &msgs[expects[e].msg];
        if let Some(list) = by_pair.get(&(m.src, m.dst)) {
            let c = cursor.entry((m.src, m.dst)).or_default();
            let target = list[*c];
            *c += 1;
            posts.push(target);
        } else {
            posts.push(e);
        }
    }

    let mut down: Vec<(usize, usize, usize)> = Vec::new();
    let mut sends: Vec<Option<ReqId>> = vec![None; msgs.len()];
    let mut next_send = 0;
    let mut next_post = 0;
    let total = msgs.len();
    while next_send < total || next_post < total {
        // Interleave sends, posts and network progress at random.
        match rng.range(0, 3) {
            0 if next_send < total => {
                let m = &msgs[next_send];
                let data = pattern(m.src, next_send, m.len);
                // Half the sends take the driver's fast path when the core allows it (over
                // lossy rails too: cut rails must resend what went out that way).
                let inline = if rng.range(0, 1) == 0 {
                    sim.send_inline(
                        m.src as usize,
                        m.dst as usize,
                        tag_of(next_send),
                        data.clone(),
                    )
                } else {
                    None
                };
                // A quarter of the others are delivery-complete sends (Open MPI's btl/ofi):
                // done only once the receiver's word comes back.
                let r = match inline {
                    Some(r) => r,
                    None if rng.range(0, 3) == 0 => sim.cores[m.src as usize]
                        .send_delivered(m.dst, 0, 0, tag_of(next_send), None, data)
                        .map_err(|e| e.to_string())?,
                    None => sim.cores[m.src as usize]
                        .send(m.dst, 0, 0, tag_of(next_send), data)
                        .map_err(|e| e.to_string())?,
                };
                sends[next_send] = Some(r);
                next_send += 1;
            }
            1 if next_post < total => {
                let e = &mut expects[posts[next_post]];
                let cap = msgs[e.msg].len;
                let r = sim.cores[e.dst as usize]
                    .recv(0, e.src_filter, e.tag_filter, vec![0u8; cap])
                    .map_err(|e| e.to_string())?;
                e.req = Some(r);
                next_post += 1;
            }
            _ => {
                if next_rma < rmas.len() && rma_rng.range(0, 1) == 0 {
                    start_rma(&mut sim, next_rma, &mut rmas[next_rma])?;
                    next_rma += 1;
                }
                for _ in 0..rng.range(1, 50) {
                    sim.step().map_err(|e| e.to_string())?;
                    if cut_every > 0 {
                        faults(&mut sim, &mut rng, &mut down, cut_every);
                    }
                }
            }
        }
    }
    while next_rma < rmas.len() {
        start_rma(&mut sim, next_rma, &mut rmas[next_rma])?;
        next_rma += 1;
    }
    let rmas_done = |s: &Cluster| {
        rmas.iter()
            .all(|o| !s.cores[o.src as usize].is_pending(o.req.unwrap()))
    };
    // With faults: keep cutting for a while, restore whenever nothing can move (every rail of
    // some pair may be down), and restore everything after enough chaos.
    let mut steps = 0u64;
    while cut_every > 0 && steps < 5_000_000 {
        let finished = expects
            .iter()
            .all(|e| !sim.cores[e.dst as usize].is_pending(e.req.unwrap()))
            && sends
                .iter()
                .zip(msgs)
                .all(|(r, m)| !sim.cores[m.src as usize].is_pending(r.unwrap()))
            && rmas_done(&sim);
        if finished {
            break;
        }
        steps += 1;
        let moved = sim.step().map_err(|e| e.to_string())?;
        if !moved || steps > 200_000 {
            for (a, b, r) in down.drain(..) {
                sim.restore(a, b, r);
            }
        } else if steps.is_multiple_of(7) {
            faults(&mut sim, &mut rng, &mut down, cut_every);
        }
    }
    let done = sim
        .run_until(50_000_000, |s| {
            expects
                .iter()
                .all(|e| !s.cores[e.dst as usize].is_pending(e.req.unwrap()))
                && sends
                    .iter()
                    .zip(msgs)
                    .all(|(r, m)| !s.cores[m.src as usize].is_pending(r.unwrap()))
                && rmas_done(s)
        })
        .map_err(|e| e.to_string())?;
    if !done {
        let dump: Vec<String> = sim.cores.iter().map(|c| c.debug_dump()).collect();
        return Err(format!(
            "stalled after {} steps: {}",
            sim.steps,
            dump.join("\n")
        ));
    }
    for e in &expects {
        let m = &msgs[e.msg];
        let (c, buf) = sim.cores[e.dst as usize].take(e.req.unwrap()).unwrap();
        let Completion::Done(st) = c else {
            return Err(format!("receive for message {} failed: {c:?}", e.msg));
        };
        if st.source != m.src || st.tag != tag_of(e.msg) || st.len != m.len || st.truncated {
            return Err(format!(
                "message {} got status {st:?}, expected {m:?}",
                e.msg
            ));
        }
        if buf != pattern(m.src, e.msg, m.len) {
            return Err(format!("message {} ({} bytes) corrupted", e.msg, m.len));
        }
    }
    for (i, r) in sends.iter().enumerate() {
        let m = &msgs[i];
        match sim.cores[m.src as usize].take(r.unwrap()) {
            Some((Completion::Done(_), _)) => {}
            other => return Err(format!("send {i} ended {:?}", other.map(|o| o.0))),
        }
    }
    if lossless && sim.logged_frames() != 0 {
        return Err(format!(
            "lossless links hold {} frames for a resend",
            sim.logged_frames()
        ));
    }
    if !lossless && sim.express_reads != 0 {
        return Err(format!(
            "{} frames took the in-place path over lossy links",
            sim.express_reads
        ));
    }
    // The targets' sides of reads finish when the reader's acknowledgements come: let them.
    sim.run_until(5_000_000, |_| false)
        .map_err(|e| e.to_string())?;
    for c in &mut sim.cores {
        // Where the requests that served peers' accesses are freed (and, here, their copies
        // of written bytes put in place).
        c.take_finished(&mut Vec::new());
    }
    for (i, op) in rmas.iter().enumerate() {
        check_rma(&mut sim, &regions, i, op)?;
    }
    for (r, g) in regions.iter().enumerate() {
        let added: u64 = rmas
            .iter()
            .filter(|o| o.dst as usize == r)
            .filter_map(|o| match o.kind {
                RmaKind::Add(n) => Some(n),
                _ => None,
            })
            .sum();
        let counter =
            u64::from_le_bytes(g.lock().unwrap()[&COUNTER_KEY].0[..8].try_into().unwrap());
        if counter != added {
            return Err(format!(
                "rank {r}'s counter is {counter}, the adds sum to {added}"
            ));
        }
    }
    let resent: u64 = sim.cores.iter().map(|c| c.resent_frames()).sum();
    for c in &sim.cores {
        if c.live_requests() != 0 || c.held_messages() != 0 {
            return Err(format!(
                "rank {} leaks {} requests / {} held messages",
                c.rank(),
                c.live_requests(),
                c.held_messages()
            ));
        }
    }
    Ok(Ran {
        resent,
        express_reads: sim.express_reads,
        transcripts: sim.transcripts().map(<[_]>::to_vec).unwrap_or_default(),
    })
}

pub fn small_config(policy: Policy, rng: &mut Rng) -> Config {
    let eager_limit = rng.range(16, 2048);
    let min_chunk = rng.range(64, 4096);
    Config {
        policy,
        eager_limit,
        max_chunk: min_chunk + rng.range(0, 32 * 1024),
        min_chunk,
        stage_size: rng.range(80, 8192),
        eager_credits: if rng.range(0, 1) == 0 {
            rng.range(0, 16 * 1024)
        } else {
            4 << 20
        },
    }
}

/// Maybe cuts a random rail, maybe restores a cut one.
fn faults(sim: &mut Cluster, rng: &mut Rng, down: &mut Vec<(usize, usize, usize)>, every: usize) {
    if rng.range(0, every) != 0 {
        return;
    }
    if !down.is_empty() && rng.range(0, 1) == 0 {
        let i = rng.range(0, down.len() - 1);
        let (a, b, r) = down.swap_remove(i);
        sim.restore(a, b, r);
        return;
    }
    let a = rng.range(0, sim.ranks() - 1);
    let b = (a + rng.range(1, sim.ranks() - 1)) % sim.ranks();
    let r = rng.range(0, sim.rails() - 1);
    let (a, b) = (a.min(b), a.max(b));
    if !down.contains(&(a, b, r)) {
        sim.cut(a, b, r);
        down.push((a, b, r));
    }
}
