//! A deterministic simulator: several [`Core`]s joined by in-memory byte pipes, one per direction
//! per rail, advanced in a random but seeded order. Rails progress at different, changing rates,
//! so frames overtake each other across rails exactly as they may on a real network; the same
//! seed replays the same interleaving.

use std::collections::VecDeque;
use std::io::IoSlice;

use crate::{Config, Core, ProtoError};

/// A small seeded PRNG (xorshift64*), so that runs replay without a dependency.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }
}

struct Pipe {
    bytes: VecDeque<u8>,
    /// How many bytes the pipe holds before the sender sees it full (a socket buffer).
    cap: usize,
    /// Relative speed: the largest transfer one step makes.
    burst: usize,
}

/// `n` cores, each pair joined by `rails` pipes in each direction.
pub struct Cluster {
    pub cores: Vec<Core<Vec<u8>>>,
    pipes: Vec<Pipe>,
    rails: usize,
    pub rng: Rng,
    pub steps: u64,
    /// Frames taken by [`Core::rx_express`].
    pub express_reads: u64,
    /// Every byte the ranks wrote to each pipe, in order, once [`record`](Self::record) asked
    /// for it ([`inject`](Self::inject)ed bytes are not theirs).
    transcripts: Option<Vec<Vec<u8>>>,
}

impl Cluster {
    pub fn new(n: usize, rails: usize, cfg: Config, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut cores: Vec<Core<Vec<u8>>> = (0..n)
            .map(|i| Core::new(i as u32, n as u32, cfg.clone()))
            .collect();
        for (i, c) in cores.iter_mut().enumerate() {
            for j in 0..n {
                if i != j {
                    c.set_rails(j as u32, rails);
                }
            }
        }
        let pipes = (0..n * n * rails)
            .map(|_| Pipe {
                bytes: VecDeque::new(),
                cap: rng.range(64, 256 * 1024),
                burst: rng.range(1, 96 * 1024),
            })
            .collect();
        Cluster {
            cores,
            pipes,
            rails,
            rng,
            steps: 0,
            express_reads: 0,
            transcripts: None,
        }
    }

    /// Keeps every byte the ranks write to each pipe from now on
    /// ([`transcripts`](Self::transcripts)).
    pub fn record(&mut self) {
        self.transcripts = Some(vec![Vec::new(); self.pipes.len()]);
    }

    /// What the ranks wrote to each pipe since [`record`](Self::record), by source, destination
    /// and rail (`(src * ranks + dst) * rails + rail`).
    pub fn transcripts(&self) -> Option<&[Vec<u8>]> {
        self.transcripts.as_deref()
    }

    fn pipe_index(&self, src: usize, dst: usize, rail: usize) -> usize {
        (src * self.cores.len() + dst) * self.rails + rail
    }

    /// Makes one random move; returns false if nothing anywhere can move.
    pub fn step(&mut self) -> Result<bool, ProtoError> {
        let n = self.cores.len();
        // Words back to delivery-complete senders go out some rounds later, as a driver's
        // progress releases them, unless a reply took them first.
        for c in 0..n {
            if self.cores[c].words_waiting() && self.rng.range(0, 2) == 0 {
                self.cores[c].release_words();
            }
        }
        let moves = n * n * self.rails * 2;
        let start = self.rng.range(0, moves - 1);
        for k in 0..moves {
            let m = (start + k) % moves;
            let (pipe, side) = (m / 2, m % 2);
            let rail = pipe % self.rails;
            let src = pipe / self.rails / n;
            let dst = pipe / self.rails % n;
            if src == dst {
                continue;
            }
            let moved = if side == 0 {
                self.transmit(src, dst, rail)
            } else {
                self.deliver(src, dst, rail)?
            };
            if moved {
                self.steps += 1;
                self.direct_copies();
                // Rates drift, so which rail is fastest changes during a run.
                if self.rng.range(0, 63) == 0 {
                    let burst = self.rng.range(1, 96 * 1024);
                    self.pipes[pipe].burst = burst;
                }
                return Ok(true);
            }
        }
        // Nothing else can move: a driver's next round would release what is held.
        let mut released = false;
        for c in self.cores.iter_mut() {
            if c.words_waiting() {
                c.release_words();
                released = true;
            }
        }
        Ok(released)
    }

    fn transmit(&mut self, src: usize, dst: usize, rail: usize) -> bool {
        let pi = self.pipe_index(src, dst, rail);
        let core = &mut self.cores[src];
        if !core.tx_pending(dst as u32, rail) {
            return false;
        }
        let pipe = &mut self.pipes[pi];
        let room = pipe.cap.saturating_sub(pipe.bytes.len());
        if room == 0 {
            return false;
        }
        let limit = self.rng.range(1, room.min(pipe.burst).max(1));
        let mut iov = [IoSlice::new(&[]); 8];
        let cnt = core.tx_iovecs(dst as u32, rail, &mut iov);
        let mut n = 0;
        for s in &iov[..cnt] {
            let take = s.len().min(limit - n);
            pipe.bytes.extend(&s[..take]);
            if let Some(t) = self.transcripts.as_mut() {
                t[pi].extend_from_slice(&s[..take]);
            }
            n += take;
            if n == limit {
                break;
            }
        }
        core.tx_done(dst as u32, rail, n);
        n > 0
    }

    fn deliver(&mut self, src: usize, dst: usize, rail: usize) -> Result<bool, ProtoError> {
        let pi = self.pipe_index(src, dst, rail);
        let pipe = &mut self.pipes[pi];
        if pipe.bytes.is_empty() {
            return Ok(false);
        }
        // Half the time the receiver first tries the in-place path of shared memory on what
        // lies contiguous in the pipe (as a ring shows it up to its wrap).
        if self.rng.range(0, 1) == 0 {
            let (front, _) = pipe.bytes.as_slices();
            let seen = if self.rng.range(0, 3) == 0 {
                self.rng.range(1, front.len())
            } else {
                front.len()
            };
            if let Some(n) = self.cores[dst].rx_express(src as u32, rail, &front[..seen]) {
                pipe.bytes.drain(..n);
                self.express_reads += 1;
                return Ok(true);
            }
        }
        // Often all there is (as a ring's read takes it), else any part of it.
        let limit = if self.rng.range(0, 1) == 0 {
            pipe.bytes.len().min(pipe.burst)
        } else {
            self.rng.range(1, pipe.bytes.len().min(pipe.burst))
        };
        let space = self.cores[dst].rx_space(src as u32, rail);
        let n = limit.min(space.len());
        for (d, b) in space[..n].iter_mut().zip(pipe.bytes.drain(..n)) {
            *d = b;
        }
        self.cores[dst].rx_done(src as u32, rail, n)?;
        Ok(n > 0)
    }

    /// Steps until `done` holds or nothing can move; returns whether `done` held.
    pub fn run_until(
        &mut self,
        max_steps: u64,
        mut done: impl FnMut(&mut Self) -> bool,
    ) -> Result<bool, ProtoError> {
        for _ in 0..max_steps {
            if done(self) {
                return Ok(true);
            }
            if !self.step()? {
                return Ok(done(self));
            }
        }
        Ok(done(self))
    }

    /// Performs the direct copies the cores asked for, as a driver's process_vm_writev would:
    /// into the buffer the receiving core offered, which must be the one at the address the
    /// CTS carried, and no further than its length.
    fn direct_copies(&mut self) {
        for c in 0..self.cores.len() {
            while let Some(w) = self.cores[c].take_direct() {
                let src = self.cores[c].direct_source(&w).to_vec();
                let dst = self.cores[w.peer as usize]
                    .granted_buffer(c as u32, w.seq)
                    .expect("a direct copy into a buffer the receiver did not offer");
                assert_eq!(
                    dst.as_ptr() as u64,
                    w.remote_addr,
                    "CTS address is not the offered buffer's"
                );
                assert!(w.len <= dst.len(), "direct copy beyond the offered buffer");
                dst[..w.len].copy_from_slice(&src[..w.len]);
                self.cores[c].direct_done(w, true);
            }
        }
    }

    /// Allows direct copies between every pair of simulated ranks.
    pub fn enable_direct(&mut self) {
        let n = self.cores.len();
        for (i, c) in self.cores.iter_mut().enumerate() {
            for j in 0..n {
                if i != j {
                    c.set_direct(j as u32, true);
                }
            }
        }
    }

    /// Every pair's links are lossless (shared memory): no log, no acknowledgements. Not to be
    /// combined with [`cut`](Self::cut).
    pub fn enable_lossless(&mut self) {
        let n = self.cores.len();
        for (i, c) in self.cores.iter_mut().enumerate() {
            for j in 0..n {
                if i != j {
                    c.set_lossless(j as u32, true);
                }
            }
        }
    }

    /// Sends as a driver's fast path would: straight into the pipe if the core allows
    /// ([`Core::inline_start`]), as much as the pipe takes at random; `None` if the core said no.
    pub fn send_inline(
        &mut self,
        src: usize,
        dst: usize,
        tag: u64,
        data: Vec<u8>,
    ) -> Option<crate::ReqId> {
        let (rail, hdr) = self.cores[src].inline_start(dst as u32, 0, 0, tag, None, data.len())?;
        let pi = self.pipe_index(src, dst, rail);
        let pipe = &mut self.pipes[pi];
        let room = pipe.cap.saturating_sub(pipe.bytes.len());
        let total = hdr.len() + data.len();
        // Mostly what fits (a ring with room takes it all), sometimes cut anywhere.
        let n = if self.rng.range(0, 3) == 0 {
            self.rng.range(0, room.min(total))
        } else {
            room.min(total)
        };
        let frame = hdr.iter().chain(data.iter()).take(n);
        pipe.bytes.extend(frame.clone());
        if let Some(t) = self.transcripts.as_mut() {
            t[pi].extend(frame);
        }
        self.cores[src].inline_written(dst as u32, rail, &hdr, &data, n);
        Some(self.cores[src].inline_request(dst as u32, 0, tag, data))
    }

    /// Frames written and still held for a resend, over every core and rail.
    pub fn logged_frames(&self) -> usize {
        let n = self.cores.len();
        (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| self.cores[i].unacked_frames(j as u32))
            .sum()
    }

    /// Cuts `rail` between `a` and `b`: bytes in flight either way are lost and both ends notice
    /// (as a reset or a timeout would tell them).
    pub fn cut(&mut self, a: usize, b: usize, rail: usize) {
        for (x, y) in [(a, b), (b, a)] {
            let pi = self.pipe_index(x, y, rail);
            self.pipes[pi].bytes.clear();
            self.cores[x].rail_down(y as u32, rail);
        }
    }

    /// Reconnects `rail` between `a` and `b` (a fresh, empty stream).
    pub fn restore(&mut self, a: usize, b: usize, rail: usize) {
        for (x, y) in [(a, b), (b, a)] {
            let pi = self.pipe_index(x, y, rail);
            self.pipes[pi].bytes.clear();
            self.cores[x].rail_up(y as u32, rail);
        }
    }

    pub fn ranks(&self) -> usize {
        self.cores.len()
    }

    pub fn rails(&self) -> usize {
        self.rails
    }

    /// Injects raw bytes into the pipe `src -> dst` on `rail` (for malformed-input tests).
    pub fn inject(&mut self, src: usize, dst: usize, rail: usize, bytes: &[u8]) {
        let pi = self.pipe_index(src, dst, rail);
        self.pipes[pi].bytes.extend(bytes);
    }
}
