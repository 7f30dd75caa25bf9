//! Collectives for the application-like kernels (`bench is`, `bench cg`), written once over one
//! point-to-point primitive ([`Transport::exchange`]: post receives, post sends, wait for all),
//! which the engine provides over `irecv`/`isend` and the unit tests over threads and channels.
//!
//! Allreduce is recursive doubling for any rank count: ranks from the largest power of two up
//! first fold their vector into a partner below it, the power of two exchange and combine
//! (always lower rank's vector first), and the folded ranks get the result back. Every rank
//! combines the same operands in the same tree, so f64 sums are bit-identical on every rank
//! (they may differ between rank counts, as any reordering of a floating-point sum does).
//! All-to-all with varying sizes exchanges the byte counts first, then the data.

use std::time::{Duration, Instant};

use hx_engine::{Engine, Request};

/// The one point-to-point primitive the collectives need.
pub trait Transport {
    fn rank(&self) -> u32;
    fn size(&self) -> u32;
    /// Posts a receive for each of `recvs` (source, most bytes expected) and sends each of
    /// `sends` (destination, bytes), all under `tag`; returns when all are done, with the bytes
    /// received in the order of `recvs`. At most one message per (source, tag) per call.
    fn exchange(
        &mut self,
        tag: u64,
        sends: Vec<(u32, Vec<u8>)>,
        recvs: &[(u32, usize)],
    ) -> Result<Vec<Vec<u8>>, String>;
}

/// The engine as a [`Transport`], on one endpoint of its own.
pub struct EngineTransport {
    pub engine: Engine,
    ep: u16,
}

impl EngineTransport {
    pub fn new(mut engine: Engine, ep: u16) -> Result<Self, String> {
        engine.open_endpoint(ep).map_err(|e| e.to_string())?;
        Ok(EngineTransport { engine, ep })
    }
}

impl Transport for EngineTransport {
    fn rank(&self) -> u32 {
        self.engine.rank()
    }
    fn size(&self) -> u32 {
        self.engine.size()
    }
    fn exchange(
        &mut self,
        tag: u64,
        sends: Vec<(u32, Vec<u8>)>,
        recvs: &[(u32, usize)],
    ) -> Result<Vec<Vec<u8>>, String> {
        let ep = self.ep;
        let e = &mut self.engine;
        let rr: Vec<Request> = recvs
            .iter()
            .map(|&(src, cap)| e.irecv(ep, Some(src), Some(tag), vec![0; cap]))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let ss: Vec<Request> = sends
            .into_iter()
            .map(|(dst, data)| e.isend(ep, dst, ep, tag, data))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(rr.len());
        for (r, &(src, _)) in rr.into_iter().zip(recvs) {
            let (st, buf) = e
                .wait_owned(r)
                .map_err(|e| format!("receive from rank {src}: {e}"))?;
            let mut buf = buf.unwrap_or_default();
            buf.truncate(st.len);
            out.push(buf);
        }
        e.wait_all(&ss).map_err(|e| e.to_string())?;
        Ok(out)
    }
}

/// Vector elements the collectives reduce and move.
pub trait Elem: Copy + Default {
    const SIZE: usize;
    fn put(self, out: &mut Vec<u8>);
    fn get(b: &[u8]) -> Self;
    fn combine(op: Op, lo: Self, hi: Self) -> Self;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Sum,
    Max,
}

impl Elem for u64 {
    const SIZE: usize = 8;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
    }
    fn combine(op: Op, lo: Self, hi: Self) -> Self {
        match op {
            Op::Sum => lo.wrapping_add(hi),
            Op::Max => lo.max(hi),
        }
    }
}

impl Elem for f64 {
    const SIZE: usize = 8;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        f64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
    }
    fn combine(op: Op, lo: Self, hi: Self) -> Self {
        match op {
            Op::Sum => lo + hi,
            Op::Max => lo.max(hi),
        }
    }
}

fn encode<T: Elem>(v: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * T::SIZE);
    for &x in v {
        x.put(&mut out);
    }
    out
}

fn decode<T: Elem>(b: &[u8], want: usize, from: u32) -> Result<Vec<T>, String> {
    if b.len() != want * T::SIZE {
        return Err(format!(
            "collective: {} bytes from rank {from}, expected {}",
            b.len(),
            want * T::SIZE
        ));
    }
    Ok(b.chunks_exact(T::SIZE).map(T::get).collect())
}

/// Collectives over a [`Transport`]; counts the time spent in them (communication).
pub struct Coll<T: Transport> {
    pub t: T,
    seq: u64,
    comm: Duration,
}

impl<T: Transport> Coll<T> {
    pub fn new(t: T) -> Self {
        Coll {
            t,
            seq: 0,
            comm: Duration::ZERO,
        }
    }

    pub fn rank(&self) -> u32 {
        self.t.rank()
    }

    pub fn size(&self) -> u32 {
        self.t.size()
    }

    /// Time spent in collectives and exchanges so far.
    pub fn comm_time(&self) -> Duration {
        self.comm
    }

    /// A fresh tag base for one collective (its steps are the low 16 bits).
    fn next_tag(&mut self) -> u64 {
        self.seq += 1;
        self.seq << 16
    }

    fn timed<R>(
        &mut self,
        f: impl FnOnce(&mut Self, u64) -> Result<R, String>,
    ) -> Result<R, String> {
        let t0 = Instant::now();
        let tag = self.next_tag();
        let r = f(self, tag);
        self.comm += t0.elapsed();
        r
    }

    /// Point-to-point exchange with neighbours (halos), timed as communication.
    pub fn exchange(
        &mut self,
        sends: Vec<(u32, Vec<u8>)>,
        recvs: &[(u32, usize)],
    ) -> Result<Vec<Vec<u8>>, String> {
        self.timed(|c, tag| c.t.exchange(tag, sends, recvs))
    }

    /// Element-wise reduction of `v` over all ranks; every rank gets the same bits.
    pub fn allreduce<E: Elem>(&mut self, v: &mut [E], op: Op) -> Result<(), String> {
        self.timed(|c, tag| c.allreduce_tagged(tag, v, op))
    }

    fn allreduce_tagged<E: Elem>(&mut self, tag: u64, v: &mut [E], op: Op) -> Result<(), String> {
        let (me, n) = (self.rank(), self.size());
        if n == 1 {
            return Ok(());
        }
        let p2 = 1u32 << (31 - n.leading_zeros());
        let rem = n - p2;
        let len = v.len() * E::SIZE;
        let combine = |v: &mut [E], other: &[u8], from: u32, mine_first: bool| {
            let o: Vec<E> = decode(other, v.len(), from)?;
            for (a, b) in v.iter_mut().zip(o) {
                *a = if mine_first {
                    E::combine(op, *a, b)
                } else {
                    E::combine(op, b, *a)
                };
            }
            Ok::<(), String>(())
        };
        if me >= p2 {
            let low = me - p2;
            self.t.exchange(tag, vec![(low, encode(v))], &[])?;
            let got = self.t.exchange(tag | 0xffff, vec![], &[(low, len)])?;
            let r: Vec<E> = decode(&got[0], v.len(), low)?;
            v.copy_from_slice(&r);
            return Ok(());
        }
        if me < rem {
            let got = self.t.exchange(tag, vec![], &[(me + p2, len)])?;
            combine(v, &got[0], me + p2, true)?;
        }
        let mut mask = 1u32;
        let mut step = 1u64;
        while mask < p2 {
            let partner = me ^ mask;
            let got = self
                .t
                .exchange(tag | step, vec![(partner, encode(v))], &[(partner, len)])?;
            combine(v, &got[0], partner, me < partner)?;
            mask <<= 1;
            step += 1;
        }
        if me < rem {
            self.t
                .exchange(tag | 0xffff, vec![(me + p2, encode(v))], &[])?;
        }
        Ok(())
    }

    /// One value from every rank to every rank (the counts of [`alltoallv`](Self::alltoallv)):
    /// `out[p]` is what rank `p` sent (`v[me]` stays).
    fn alltoall_u64(&mut self, tag: u64, v: &[u64]) -> Result<Vec<u64>, String> {
        let (me, n) = (self.rank(), self.size());
        if v.len() != n as usize {
            return Err(format!("alltoall: {} values for {n} ranks", v.len()));
        }
        let peers: Vec<u32> = (1..n).map(|k| (me + k) % n).collect();
        let sends = peers
            .iter()
            .map(|&p| (p, v[p as usize].to_le_bytes().to_vec()))
            .collect();
        let recvs: Vec<(u32, usize)> = peers.iter().map(|&p| (p, 8)).collect();
        let got = self.t.exchange(tag, sends, &recvs)?;
        let mut out = vec![0u64; n as usize];
        out[me as usize] = v[me as usize];
        for (&p, b) in peers.iter().zip(got) {
            out[p as usize] = decode::<u64>(&b, 1, p)?[0];
        }
        Ok(out)
    }

    /// All-to-all with varying sizes: `sends[p]` goes to rank `p`; returns what each rank sent
    /// here (`out[me]` is `sends[me]`, not copied through the transport). Counts go first.
    pub fn alltoallv(&mut self, mut sends: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, String> {
        self.timed(|c, tag| {
            let (me, n) = (c.rank(), c.size());
            if sends.len() != n as usize {
                return Err(format!("alltoallv: {} buffers for {n} ranks", sends.len()));
            }
            let counts: Vec<u64> = sends.iter().map(|s| s.len() as u64).collect();
            let incoming = c.alltoall_u64(tag, &counts)?;
            let mine = std::mem::take(&mut sends[me as usize]);
            let peers: Vec<u32> = (1..n).map(|k| (me + k) % n).collect();
            let out_msgs = peers
                .iter()
                .map(|&p| (p, std::mem::take(&mut sends[p as usize])))
                .collect();
            let recvs: Vec<(u32, usize)> = peers
                .iter()
                .map(|&p| (p, incoming[p as usize] as usize))
                .collect();
            let got = c.t.exchange(tag | 1, out_msgs, &recvs)?;
            let mut out = vec![Vec::new(); n as usize];
            out[me as usize] = mine;
            for (&p, b) in peers.iter().zip(got) {
                if b.len() as u64 != incoming[p as usize] {
                    return Err(format!(
                        "alltoallv: {} bytes from rank {p}, announced {}",
                        b.len(),
                        incoming[p as usize]
                    ));
                }
                out[p as usize] = b;
            }
            Ok(out)
        })
    }

    /// Every rank's `v` (all of the same length), in rank order.
    pub fn allgather_u64(&mut self, v: &[u64]) -> Result<Vec<Vec<u64>>, String> {
        self.timed(|c, tag| {
            let (me, n) = (c.rank(), c.size());
            let peers: Vec<u32> = (1..n).map(|k| (me + k) % n).collect();
            let bytes = encode(v);
            let sends = peers.iter().map(|&p| (p, bytes.clone())).collect();
            let recvs: Vec<(u32, usize)> = peers.iter().map(|&p| (p, bytes.len())).collect();
            let got = c.t.exchange(tag, sends, &recvs)?;
            let mut out = vec![Vec::new(); n as usize];
            out[me as usize] = v.to_vec();
            for (&p, b) in peers.iter().zip(got) {
                out[p as usize] = decode(&b, v.len(), p)?;
            }
            Ok(out)
        })
    }

    /// Returns when every rank has called it.
    pub fn barrier(&mut self) -> Result<(), String> {
        self.allreduce(&mut [0u64], Op::Sum)
    }
}

/// An in-process world of ranks on threads, for tests without the launcher.
#[cfg(test)]
pub(crate) mod mem {
    use super::*;
    use std::collections::{HashMap, VecDeque};
    use std::sync::mpsc::{channel, Receiver, Sender};

    type Msg = (u32, u64, Vec<u8>);

    pub struct Mem {
        rank: u32,
        txs: Vec<Sender<Msg>>,
        rx: Receiver<Msg>,
        stash: HashMap<(u32, u64), VecDeque<Vec<u8>>>,
    }

    impl Transport for Mem {
        fn rank(&self) -> u32 {
            self.rank
        }
        fn size(&self) -> u32 {
            self.txs.len() as u32
        }
        fn exchange(
            &mut self,
            tag: u64,
            sends: Vec<(u32, Vec<u8>)>,
            recvs: &[(u32, usize)],
        ) -> Result<Vec<Vec<u8>>, String> {
            for (dst, data) in sends {
                self.txs[dst as usize]
                    .send((self.rank, tag, data))
                    .map_err(|e| e.to_string())?;
            }
            let mut out = Vec::new();
            for &(src, cap) in recvs {
                let msg = loop {
                    if let Some(m) = self.stash.get_mut(&(src, tag)).and_then(|q| q.pop_front()) {
                        break m;
                    }
                    let (s, t, d) = self.rx.recv().map_err(|e| e.to_string())?;
                    self.stash.entry((s, t)).or_default().push_back(d);
                };
                if msg.len() > cap {
                    return Err(format!("truncated: {} bytes into {cap}", msg.len()));
                }
                out.push(msg);
            }
            Ok(out)
        }
    }

    /// Runs `f` on `n` ranks (threads) and returns their results in rank order.
    pub fn run<R: Send>(n: u32, f: impl Fn(Coll<Mem>) -> R + Sync) -> Vec<R> {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| channel()).unzip();
        let f = &f;
        std::thread::scope(|s| {
            let handles: Vec<_> = rxs
                .into_iter()
                .enumerate()
                .map(|(rank, rx)| {
                    let m = Mem {
                        rank: rank as u32,
                        txs: txs.clone(),
                        rx,
                        stash: HashMap::new(),
                    };
                    s.spawn(move || f(Coll::new(m)))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::mem::run;
    use super::*;

    #[test]
    fn allreduce_any_rank_count() {
        for n in 1..=9u32 {
            let out = run(n, |mut c| {
                let me = c.rank() as u64;
                let mut v = vec![me, 1, me * me];
                c.allreduce(&mut v, Op::Sum).unwrap();
                let mut mx = vec![me, 100 - me];
                c.allreduce(&mut mx, Op::Max).unwrap();
                (v, mx)
            });
            let n64 = n as u64;
            for (v, mx) in out {
                assert_eq!(
                    v,
                    vec![
                        n64 * (n64 - 1) / 2,
                        n64,
                        (0..n64).map(|r| r * r).sum::<u64>()
                    ],
                    "n={n}"
                );
                assert_eq!(mx, vec![n64 - 1, 100], "n={n}");
            }
        }
    }

    #[test]
    fn f64_sums_are_bit_identical_on_every_rank() {
        for n in [2u32, 3, 5, 6, 7, 8] {
            let out = run(n, |mut c| {
                let me = c.rank() as f64;
                // Values whose sum depends on the order of addition.
                let mut v: Vec<f64> = (0..16)
                    .map(|i| (me + 1.0) * 0.1f64.powi(i) + 1e16 * ((i % 3) as f64 - 1.0))
                    .collect();
                c.allreduce(&mut v, Op::Sum).unwrap();
                v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            });
            assert!(out.iter().all(|v| *v == out[0]), "n={n}: {out:?}");
        }
    }

    #[test]
    fn alltoallv_with_empty_and_uneven_parts() {
        for n in 1..=6u32 {
            let out = run(n, |mut c| {
                let me = c.rank();
                let sends: Vec<Vec<u8>> = (0..n)
                    .map(|p| vec![(me * 16 + p) as u8; ((me + 2 * p) % 4 * 1000) as usize])
                    .collect();
                let got = c.alltoallv(sends).unwrap();
                let gathered = c.allgather_u64(&[me as u64, 7]).unwrap();
                c.barrier().unwrap();
                (got, gathered)
            });
            for (me, (got, gathered)) in out.into_iter().enumerate() {
                let me = me as u32;
                for (p, b) in got.iter().enumerate() {
                    let p = p as u32;
                    assert_eq!(
                        b,
                        &vec![(p * 16 + me) as u8; ((p + 2 * me) % 4 * 1000) as usize]
                    );
                }
                let want: Vec<Vec<u64>> = (0..n as u64).map(|r| vec![r, 7]).collect();
                assert_eq!(gathered, want);
            }
        }
    }
}
