//! Shared memory between two processes on one host: a [`Link`] over two single-producer /
//! single-consumer byte rings in one shared mapping, with no syscall on the fast path.
//!
//! # Layout
//! One memfd (sealed against shrinking, so the peer can never make our mapping fault) holds a
//! 4 KiB header and two rings of `capacity` bytes (a power of two). Side 0 (the acceptor, which
//! creates the segment) writes ring 0 and reads ring 1; side 1 (the connector) the reverse.
//!
//! A ring carries records: an 8-byte header word (`REC_VALID | payload length`) and the payload,
//! starting on a 64-byte line and padded to the next (a payload under 512 bytes follows its
//! header, a longer one starts on the next line); a record never crosses the ring's end. The
//! producer keeps the word after its last record zero: the next header slots are zeroed ahead
//! of time (a few lines past the head, within what the consumer has read), and a record is
//! published by storing its header (release). So the
//! consumer polls the header word at its own position, on the same cache line as the first
//! payload bytes: one cache-line transfer tells it that a small message came and carries the
//! message, where a separate head index would cost a second, dependent one. The consumer
//! publishes a `tail` (bytes ever consumed, on its own 128-byte line) for the producer's free
//! space. Each side keeps its own positions in private memory and only *reads* the peer's words
//! from the mapping, so a buggy or hostile peer can at worst make us see an impossible tail or
//! record header (reported as `InvalidData`) or garbage bytes; every offset is masked by
//! `capacity - 1` and copies never leave the mapping.
//!
//! # The lane
//! Beside each ring, a lane of [`LANE_SLOTS`] slots carries small whole messages as
//! fixed words (a sequence word, three words the caller gives meaning to, up to
//! [`LANE_PAYLOAD`] bytes), so a caller can skip the framing a ring record needs. Order across
//! the ring and the lane without sequence numbers: the writer uses the lane only while the
//! reader has consumed everything in the ring (its published tail equals our head), and the
//! reader takes every lane slot before the next ring record: once it sees a record's header
//! (acquire), it looks at the lane again, since a slot written before that record is visible
//! by then, and hides the record while a slot is pending. So a lane message sits exactly
//! between the records written before and after it. (The engine sends only answers this way:
//! see `Engine::send_lane`.)
//!
//! # Waking without burning a core
//! While both sides are awake the engine calls `read`/`write_vectored` every progress round
//! ([`Link::polled`]). Before it sleeps it calls [`Link::arm`]: the side drains its eventfd, sets
//! its `sleeping` flag, fences, and re-checks the rings (a Dekker handshake: the peer stores its
//! index, fences, then loads our flag, so either we see its bytes or it sees our flag). A peer that
//! finds the flag set after producing bytes *or* freeing space clears it and writes our eventfd —
//! one eventfd per side serves both "data for you" and "room for you". While nobody sleeps, nobody
//! makes a syscall.
//!
//! # Close and death
//! Dropping a link sets its `closed` flag and signals the peer: the peer reads what is left, then
//! `Ok(0)`; its writes fail with `BrokenPipe`. Links made by [`listen`]/[`connect`] also keep the
//! setup Unix socket open; `fd()` is then a small epoll set of the eventfd and that socket, so a
//! peer killed without an orderly close wakes us (socket hang-up), `arm` notices it, and `read`
//! reports `ConnectionReset` once the ring is drained.

mod setup;
#[cfg(test)]
mod tests;

pub use setup::{
    connect, connect_with_max, listen, PeerHello, ShmAccepting, ShmConnecting, ShmListener,
};

use std::sync::atomic::{AtomicU8, AtomicUsize};
use std::sync::Arc;

use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::socket::{getsockopt, recv, sockopt, MsgFlags};
use nix::sys::stat::fstat;
use nix::unistd::ftruncate;

use crate::trace::LinkTrace;
use crate::{Link, Peeked};

/// Default bytes per direction.
pub const DEFAULT_CAPACITY: usize = 1 << 20;
/// Smallest and largest ring accepted (per direction).
pub const MIN_CAPACITY: usize = 4096;
pub const MAX_CAPACITY: usize = 1 << 30;

/// Largest record payload: large copies publish their progress every this many bytes
/// (pipelining writer and reader).
const PUBLISH: usize = 64 << 10;

/// Record header: bit 63 set, payload length (at least 1) in the low 32 bits, nothing else.
const REC_HDR: usize = 8;
const REC_VALID: u64 = 1 << 63;
const REC_LEN: u64 = u32::MAX as u64;
/// Records start on cache lines. A payload shorter than `REC_ALIGNED` follows its header in
/// the same line (a small message is one line); a longer one starts on the next line, so large
/// copies run between aligned addresses.
const REC_LINE: usize = 64;
const REC_ALIGNED: usize = 512;

/// How far ahead of the head the writer keeps header slots zeroed ([`ShmLink::zero_ahead`]),
/// and how little of it left makes it zero more: a few small records' worth, in batches.
const ZERO_AHEAD: u64 = 16 * REC_LINE as u64;
const ZERO_AHEAD_LOW: u64 = 4 * REC_LINE as u64;

const fn align_up(n: usize) -> usize {
    (n + REC_LINE - 1) & !(REC_LINE - 1)
}
const fn align_down(n: usize) -> usize {
    n & !(REC_LINE - 1)
}
/// Where a record's payload starts, from the record's start.
const fn payload_at(len: usize) -> usize {
    if len < REC_ALIGNED {
        REC_HDR
    } else {
        REC_LINE
    }
}
/// Ring bytes a record of `len` payload bytes takes, header and padding included.
const fn footprint(len: usize) -> usize {
    align_up(payload_at(len) + len)
}

// v05: lane slots of 4 KiB + 64 bytes (v04: 2 KiB, c30f260). A peer of another layout is
// refused (its magic, and its size: segment_len), never misread.
const MAGIC: u64 = u64::from_le_bytes(*b"HXSHMv05");
const HDR: usize = 4096;
const LINE: usize = 128;
const OFF_MAGIC: usize = 0;
const OFF_CAP: usize = 8;
/// `sleeping[side]` at `OFF_SLEEP + 8 * side`: set by `side` in `arm`, cleared by whoever wakes it.
const OFF_SLEEP: usize = 5 * LINE;
/// `closed[side]` at `OFF_CLOSED + 8 * side`: set once by `side` when it drops its link.
const OFF_CLOSED: usize = 6 * LINE;
/// Slots of lane `ring` its reader has consumed, stored by the reader now and then.
const fn off_lane_tail(ring: usize) -> usize {
    LINE * (7 + ring)
}

/// Slots per lane, bytes per slot, payload bytes a slot carries.
pub const LANE_SLOTS: u64 = 64;
/// A slot's bytes: its words and a payload of up to 4128 bytes, so that every message Open MPI
/// injects (fi_tinject*, up to the provider's 4 KiB inject size) fits. A message uses only the
/// lines its payload needs (an 8-byte one its slot's first line). Open MPI over the provider,
/// one host, against vader's latency: 64-byte slots took messages of up to 32 bytes, and 64
/// bytes read 2.2x, 1 KiB 1.5x; 2 KiB slots (up to 2016 bytes) 1.1x and 1.0x, with 2 KiB and
/// 3000 bytes still in the ring at 1.30x and 1.24x; these slots 1.05x and 1.14x. The 64 bytes
/// past 4 KiB also keep consecutive slots' lines in different cache sets. 520 KiB per peer
/// pair beside 2 MiB of rings; pages are touched as slots are used.
const SLOT: usize = 4096 + 64;
const LANE_BYTES: usize = LANE_SLOTS as usize * SLOT;
pub const LANE_PAYLOAD: usize = SLOT - 32;
/// Bytes a lane message counts for in a link's trace besides its payload (its slot's words).
pub const LANE_TRACED: usize = 32;
/// A slot's first word: the slot's sequence number (low 32 bits, so a slot's next value
/// always differs from its last lap's) and the payload length (the high 32 bits).
const SLOT_SEQ: u64 = u32::MAX as u64;

/// Segment bytes for rings of `cap` bytes: header, two rings, two lanes.
const fn segment_len(cap: usize) -> usize {
    HDR + 2 * cap + 2 * LANE_BYTES
}

const fn off_tail(ring: usize) -> usize {
    LINE * (2 + 2 * ring)
}

fn check_capacity(cap: usize) -> io::Result<()> {
    if cap.is_power_of_two() && (MIN_CAPACITY..=MAX_CAPACITY).contains(&cap) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "shm ring capacity {cap}: need a power of two in {MIN_CAPACITY}..={MAX_CAPACITY}"
            ),
        ))
    }
}

/// How many bytes of rings an engine (a process identity: one per rank, one per libfabric
/// domain) populates ahead of use, shared by its listener and connectors; both sides charge the
/// pages of a ring they map. Without it, each page of a ring faults the first time each side touches it:
/// two faults per 64 small messages through the whole first lap of a 1 MiB ring (16,384
/// messages of 8 bytes), 0.27 against 0.19 us of one-way latency through Open MPI, which a
/// benchmark's usual warmup of 1,000 messages does not cover. A ring is populated (each side
/// the ring it writes or reads, in its own mapping: one madvise) once
/// [`POPULATE_AFTER`] bytes have gone through it, so pairs that exchange little (an all-to-all
/// of 64 ranks right after start) pay nothing: populating every segment at setup made that
/// all-to-all take 2.5-4.6 s instead of 0.7 s on 2 cores. Bounded because a populated ring's
/// pages stay allocated while the link lives.
pub struct PrefaultBudget {
    limit: usize,
    used: AtomicUsize,
}

impl PrefaultBudget {
    /// At most `limit` bytes prefaulted at once (0: never).
    pub fn new(limit: usize) -> Arc<PrefaultBudget> {
        Arc::new(PrefaultBudget {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// Bytes of live mappings that were prefaulted.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn reserve(self: &Arc<Self>, len: usize) -> Option<Prefaulted> {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                (u + len <= self.limit).then_some(u + len)
            })
            .ok()?;
        Some(Prefaulted {
            budget: self.clone(),
            len,
        })
    }
}

/// Bytes through a ring before it is populated (see [`PrefaultBudget`]).
pub const POPULATE_AFTER: u64 = 32 * 1024;

fn page_size() -> usize {
    // SAFETY: a plain query.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    }
}

/// A ring's share of its [`PrefaultBudget`], given back when its link goes.
struct Prefaulted {
    budget: Arc<PrefaultBudget>,
    len: usize,
}

impl Drop for Prefaulted {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.len, Ordering::Relaxed);
    }
}

/// A shared mapping of a whole segment; unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn map(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh mapping chosen by the kernel (addr null), of a file we checked is at
        // least `len` bytes and sealed against shrinking; nothing else is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
        })
    }

    /// Reads a byte of each `page` of [start, start + len), which maps those pages (what
    /// MADV_POPULATE_READ does on kernels that have it).
    fn touch(&self, start: usize, len: usize, page: usize) {
        assert!(start + len <= self.len, "touch outside the mapping");
        for off in (start..start + len).step_by(page) {
            // SAFETY: inside the live mapping (checked above); an atomic read, since the peer
            // may be writing the byte.
            let b = unsafe { AtomicU8::from_ptr(self.ptr.as_ptr().add(off)) };
            b.load(Ordering::Relaxed);
        }
    }

    /// A header word. Only called with the constant offsets above (all < HDR, 8-aligned).
    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= HDR && HDR <= self.len);
        // SAFETY: in bounds of the live mapping (page aligned, so 8-aligned plus an 8-aligned
        // offset is aligned); AtomicU64 has the layout of u64 and every bit pattern is valid.
        // The peer process accesses these words only atomically too.
        unsafe { &*(self.ptr.as_ptr().add(off) as *const AtomicU64) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the region returned by mmap; no references into it outlive `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Creates a sealed, zeroed segment for two rings of `cap` bytes and writes its header.
fn create_segment(cap: usize) -> io::Result<(OwnedFd, Mapping)> {
    check_capacity(cap)?;
    let len = segment_len(cap);
    let fd = memfd_create(
        c"hxcomm-shm",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )?;
    ftruncate(&fd, len as libc::off_t)?;
    fcntl(
        &fd,
        FcntlArg::F_ADD_SEALS(
            SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL,
        ),
    )?;
    let map = Mapping::map(&fd, len)?;
    map.word(OFF_CAP).store(cap as u64, Ordering::Relaxed);
    map.word(OFF_MAGIC).store(MAGIC, Ordering::Release);
    Ok((fd, map))
}

/// Maps a segment received from a peer, checking everything before trusting it: sealed against
/// shrinking (so accesses can never fault), no larger than rings of `max_cap` bytes (the peer
/// does not choose how much of our memory it maps), magic, a sane capacity matching the size.
fn open_segment(fd: &OwnedFd, max_cap: usize) -> io::Result<(Mapping, usize)> {
    let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, format!("shm segment: {m}"));
    let seals = fcntl(fd, FcntlArg::F_GET_SEALS)?;
    let size = fstat(fd)?.st_size;
    if seals & libc::F_SEAL_SHRINK == 0 {
        return Err(bad("not sealed against shrinking".into()));
    }
    let size = usize::try_from(size).map_err(|_| bad("negative size".into()))?;
    if !(segment_len(MIN_CAPACITY)..=segment_len(MAX_CAPACITY)).contains(&size) {
        return Err(bad(format!("size {size}")));
    }
    if size > segment_len(max_cap) {
        return Err(bad(format!(
            "{size} bytes, more than rings of {max_cap} bytes this side accepts"
        )));
    }
    let map = Mapping::map(fd, size)?;
    if map.word(OFF_MAGIC).load(Ordering::Acquire) != MAGIC {
        return Err(bad("bad magic".into()));
    }
    let cap = map.word(OFF_CAP).load(Ordering::Relaxed);
    let cap = usize::try_from(cap).map_err(|_| bad(format!("capacity {cap}")))?;
    check_capacity(cap).map_err(|e| bad(e.to_string()))?;
    if segment_len(cap) != size {
        return Err(bad(format!("capacity {cap} does not match size {size}")));
    }
    Ok((map, cap))
}

fn eventfd() -> io::Result<OwnedFd> {
    let efd = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?;
    Ok(efd.into())
}

fn signal(fd: &OwnedFd) {
    // EAGAIN (counter saturated) is fine: the fd is readable then anyway.
    let _ = nix::unistd::write(fd, &1u64.to_ne_bytes());
}

fn drain(fd: &OwnedFd) {
    // The eventfd is nonblocking: EAGAIN when there is nothing to drain.
    let _ = nix::unistd::read(fd, &mut [0u8; 8]);
}

/// One end of a shared-memory link.
pub struct ShmLink {
    map: Mapping,
    /// 0 = creator (acceptor), 1 = connector. Writes ring `side`, reads ring `1 - side`.
    side: usize,
    cap: u64,
    /// Start of the ring we write and the ring we read (inside `map`).
    tx: *mut u8,
    rx: *const u8,
    /// Our own positions (authoritative, never read back from shared memory) and our last view
    /// of the peer's tail (re-read only when the cached one is not enough). `tx_head`: where
    /// our next record header goes (the zero word). `rx_tail`: how far we have read; inside a
    /// record, `rx_left` payload bytes and then `rx_pad` padding bytes remain.
    tx_head: u64,
    tx_tail_seen: u64,
    /// Every line start from `tx_head` up to here holds a zero word (the ring starts all zero):
    /// a record's next header slot is zeroed ahead of time, not on its publish's path.
    tx_zeroed: u64,
    rx_tail: u64,
    rx_left: usize,
    rx_pad: usize,
    /// The tail we last stored for the peer.
    rx_tail_published: u64,
    /// Lane slots ours to write and the peer's to read (inside `map`; see "The lane").
    lane_tx: *mut u8,
    lane_rx: *const u8,
    /// Slots we have written, and our last view of how many the reader has consumed.
    lane_tx_head: u64,
    lane_tx_tail_seen: u64,
    /// Slots we have consumed, and the count we last stored for the peer.
    lane_rx_tail: u64,
    lane_rx_published: u64,
    /// Our ring head when we last saw the reader's tail at it: while it still is our head,
    /// the reader has everything we wrote to the ring, and the lane may be used.
    tx_quiet_at: u64,
    /// What we had read (ring bytes plus lane slots) when we last sent anything
    /// ([`answering`](ShmLink::answering)).
    read_at_last_send: u64,
    /// The last write could not take everything: `arm` must also wake us for room.
    write_blocked: bool,
    /// The setup socket hung up without the peer setting `closed` (process killed).
    peer_dead: bool,
    my_efd: OwnedFd,
    peer_efd: OwnedFd,
    sock: Option<UnixStream>,
    /// epoll set {my_efd, sock} when there is a socket; `fd()` returns it.
    poll_set: Option<OwnedFd>,
    label: String,
    /// Per-message tracing (`hxcomm bench breakdown`), off unless asked for.
    trace: Option<Box<LinkTrace>>,
    /// Where our head or tail must reach before the ring we write or read is populated
    /// (u64::MAX: done, or no budget).
    tx_populate_at: u64,
    rx_populate_at: u64,
    prefault: Option<Arc<PrefaultBudget>>,
    populated: Vec<Prefaulted>,
}

// SAFETY: the raw pointers point into `map`, which this struct owns; all access goes through
// `&mut self` (or `&self` for atomics only), so moving the link to another thread is sound.
unsafe impl Send for ShmLink {}

impl ShmLink {
    #[allow(clippy::too_many_arguments)]
    fn new(
        map: Mapping,
        cap: usize,
        side: usize,
        my_efd: OwnedFd,
        peer_efd: OwnedFd,
        sock: Option<UnixStream>,
        label: String,
        prefault: Option<Arc<PrefaultBudget>>,
    ) -> io::Result<ShmLink> {
        debug_assert!(side < 2 && segment_len(cap) <= map.len);
        // A ring no larger than the threshold has lapped by then: every page is there already.
        let populate_at = match prefault {
            Some(_) if cap as u64 > POPULATE_AFTER => POPULATE_AFTER,
            _ => u64::MAX,
        };
        let base = map.ptr.as_ptr();
        // SAFETY: both ring starts and both lanes are inside the mapping
        // (segment_len(cap) <= len).
        let (tx, rx) = unsafe { (base.add(HDR + side * cap), base.add(HDR + (1 - side) * cap)) };
        let lanes = HDR + 2 * cap;
        // SAFETY: as above.
        let (lane_tx, lane_rx) = unsafe {
            (
                base.add(lanes + side * LANE_BYTES),
                base.add(lanes + (1 - side) * LANE_BYTES),
            )
        };
        let poll_set = match &sock {
            None => None,
            Some(s) => {
                s.set_nonblocking(true)?;
                let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
                for (fd, ev) in [
                    (my_efd.as_fd(), EpollFlags::EPOLLIN),
                    (s.as_fd(), EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP),
                ] {
                    ep.add(fd, EpollEvent::new(ev, fd.as_raw_fd() as u64))?;
                }
                Some(ep.0)
            }
        };
        let link = ShmLink {
            map,
            side,
            cap: cap as u64,
            tx,
            rx,
            tx_head: 0,
            tx_tail_seen: 0,
            tx_zeroed: cap as u64,
            rx_tail: 0,
            rx_left: 0,
            rx_pad: 0,
            rx_tail_published: 0,
            lane_tx,
            lane_rx,
            lane_tx_head: 0,
            lane_tx_tail_seen: 0,
            lane_rx_tail: 0,
            lane_rx_published: 0,
            tx_quiet_at: 0,
            read_at_last_send: 0,
            write_blocked: false,
            peer_dead: false,
            my_efd,
            peer_efd,
            sock,
            poll_set,
            label,
            trace: None,
            tx_populate_at: populate_at,
            rx_populate_at: populate_at,
            prefault,
            populated: Vec::new(),
        };
        // Our own words start at zero (the tail we publish, the first header slot of the ring
        // we write); the peer must not have touched them. The first lap relies on the whole
        // ring we write being zero (tx_zeroed = cap): a fresh memfd is; a peer that dirtied it
        // first only garbles what it reads itself.
        if link.map.word(off_tail(1 - side)).load(Ordering::Relaxed) != 0
            || link
                .map
                .word(off_lane_tail(1 - side))
                .load(Ordering::Relaxed)
                != 0
            || link.tx_word(0).load(Ordering::Relaxed) != 0
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "shm segment: our ring words are not zero at setup",
            ));
        }
        Ok(link)
    }

    /// Bytes per direction.
    /// The process at the other end of the setup socket, as the kernel knows it
    /// (SO_PEERCRED, in this process's pid namespace); `None` for a [`pair`].
    pub fn peer_pid(&self) -> Option<u32> {
        let s = self.sock.as_ref()?;
        let pid = getsockopt(s, sockopt::PeerCredentials).ok()?.pid();
        (pid > 0).then_some(pid as u32)
    }

    pub fn capacity(&self) -> usize {
        self.cap as usize
    }

    fn peer(&self) -> usize {
        1 - self.side
    }

    fn corrupt(&self, what: &str, seen: u64, mine: u64) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: corrupt shared ring: peer's {what} {seen} vs our {mine} (capacity {})",
                self.label, self.cap
            ),
        )
    }

    /// The header word at `off` of the ring we write / read. `off` is a multiple of 8 below
    /// the capacity (record boundaries always are).
    fn tx_word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.cap as usize);
        // SAFETY: inside the tx ring of the live mapping; the ring starts page aligned + a
        // multiple of its power-of-two capacity, so an 8-aligned offset is 8-aligned. The peer
        // accesses header words only atomically too.
        unsafe { &*(self.tx.add(off) as *const AtomicU64) }
    }

    fn rx_word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.cap as usize);
        // SAFETY: as for tx_word, in the rx ring.
        unsafe { &*(self.rx.add(off) as *const AtomicU64) }
    }

    /// True if payload is readable now: the current record has bytes left, or the next
    /// record's header is published.
    #[inline]
    fn next_record(&mut self) -> io::Result<bool> {
        if self.rx_left != 0 {
            return Ok(true);
        }
        let off = (self.rx_tail & (self.cap - 1)) as usize;
        let h = self.rx_word(off).load(Ordering::Acquire);
        // A lane slot written before this record is visible now (acquire): it comes first.
        if h == 0 || self.lane_pending() {
            return Ok(false);
        }
        let len = (h & REC_LEN) as usize;
        let fp = footprint(len);
        // The high half is exactly REC_VALID's; a record has a payload and ends in the ring.
        if h >> 32 != REC_VALID >> 32 || len == 0 || fp > self.cap as usize - off {
            return Err(self.bad_record(h, off));
        }
        let at = payload_at(len);
        self.rx_tail = self.rx_tail.wrapping_add(at as u64);
        self.rx_left = len;
        self.rx_pad = fp - at - len;
        Ok(true)
    }

    #[cold]
    fn bad_record(&self, h: u64, off: usize) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: corrupt shared ring: record header {h:#x} at offset {off} (capacity {})",
                self.label, self.cap
            ),
        )
    }

    /// Takes `n` bytes (at most what the current record has left) off the current record.
    #[inline]
    fn advance(&mut self, n: usize) {
        self.rx_left -= n;
        self.rx_tail = self.rx_tail.wrapping_add(n as u64);
        if self.rx_tail >= self.rx_populate_at {
            self.rx_populate_at = u64::MAX;
            self.populate(self.rx as *mut u8, false);
        }
        if self.rx_left == 0 {
            self.rx_tail = self.rx_tail.wrapping_add(self.rx_pad as u64);
            self.rx_pad = 0;
        }
    }

    /// Hands what we have read back to the writer, waking it if it sleeps waiting for room.
    /// After an in-place read: publishes the tail only once a quarter of the ring has been read
    /// since it last did. The rest waits for a poll that finds the ring empty (ready, peek), a
    /// staging read, or arm before sleeping, so the reader of a small message pays no fence
    /// (the wakeup check) between reading it and answering it; a writer short of room meanwhile
    /// retries, and the reader publishes at the latest when it runs dry.
    fn publish_tail_lazily(&mut self) {
        if self.rx_tail.wrapping_sub(self.rx_tail_published) >= self.cap / 4 {
            self.publish_tail();
        }
    }

    fn publish_tail(&mut self) {
        if self.rx_tail != self.rx_tail_published {
            self.rx_tail_published = self.rx_tail;
            self.map
                .word(off_tail(self.peer()))
                .store(self.rx_tail, Ordering::Release);
            self.wake_peer();
        }
    }

    /// Free bytes in our ring (the zero word at our head counts as used), re-reading the
    /// peer's tail only if the cached view shows fewer than `want`.
    fn writable(&mut self, want: u64) -> io::Result<u64> {
        let used = self
            .tx_head
            .wrapping_add(REC_HDR as u64)
            .wrapping_sub(self.tx_tail_seen);
        let free = self.cap - used;
        if free >= want {
            return Ok(free);
        }
        let tail = self.map.word(off_tail(self.side)).load(Ordering::Acquire);
        // The reader never passes our zero word: a tail there or beyond is impossible.
        let used = self.tx_head.wrapping_add(REC_HDR as u64).wrapping_sub(tail);
        if !(REC_HDR as u64..=self.cap).contains(&used) {
            return Err(self.corrupt("tail", tail, self.tx_head));
        }
        self.tx_tail_seen = tail;
        Ok(self.cap - used)
    }

    /// A small message as one compact record when the cached view of the tail shows room
    /// before the ring's end (the common case; false: nothing written, take the general path).
    #[inline]
    fn write_small<B: std::ops::Deref<Target = [u8]>>(&mut self, bufs: &[B], total: usize) -> bool {
        let need = footprint(total);
        let off = (self.tx_head & (self.cap - 1)) as usize;
        let used = self
            .tx_head
            .wrapping_add(REC_HDR as u64)
            .wrapping_sub(self.tx_tail_seen);
        if need > self.cap as usize - off || need as u64 > self.cap - used {
            return false;
        }
        let mut at = off + REC_HDR;
        for b in bufs {
            // SAFETY: the record [off, off + need) ends inside the tx ring and within the free
            // bytes the reader has consumed; the payloads add up to `total`, and
            // REC_HDR + total <= need. The source is the caller's slice, disjoint from the
            // mapping.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.tx.add(at), b.len()) };
            at += b.len();
        }
        // The publish stamp is taken before the publish: after it (and the wakeup it may
        // make), a preempted writer could stamp later than the reader read the record.
        if let Some(t) = self.trace.as_deref_mut() {
            let now = crate::trace::now_ns();
            t.wrote(now, now, total);
        }
        self.emit(total);
        self.write_blocked = false;
        true
    }

    /// Publishes a record of `len` payload bytes already copied behind our head: the next
    /// header slot is zero (zeroed ahead, or here if the zeroed run is used up), then this
    /// header is stored (release), more slots are zeroed ahead, and a sleeping reader woken.
    fn emit(&mut self, len: usize) {
        let off = (self.tx_head & (self.cap - 1)) as usize;
        let next = self.tx_head.wrapping_add(footprint(len) as u64);
        if next >= self.tx_zeroed {
            self.tx_word((next & (self.cap - 1)) as usize)
                .store(0, Ordering::Relaxed);
            self.tx_zeroed = next + REC_LINE as u64;
        }
        self.tx_word(off)
            .store(REC_VALID | len as u64, Ordering::Release);
        self.tx_head = next;
        self.read_at_last_send = self.read_count();
        self.zero_ahead();
        self.wake_peer();
        if next >= self.tx_populate_at {
            self.tx_populate_at = u64::MAX;
            self.populate(self.tx, true);
        }
    }

    /// Zeroes the header slots of the next lines, after a publish: a store waits for its
    /// line, and stores become visible in order (x86), so a slot zeroed just before a header
    /// holds that header back until the slot's line has come over from the reader's cache;
    /// zeroed here, it has long arrived by the time a record ends there. Only lines the
    /// reader is known to have read (our cached view of its tail) are touched.
    #[inline]
    fn zero_ahead(&mut self) {
        if self.tx_zeroed - self.tx_head >= ZERO_AHEAD_LOW {
            return;
        }
        let to = (self.tx_head + ZERO_AHEAD).min(self.tx_tail_seen + self.cap - REC_HDR as u64);
        while self.tx_zeroed < to {
            self.tx_word((self.tx_zeroed & (self.cap - 1)) as usize)
                .store(0, Ordering::Relaxed);
            self.tx_zeroed += REC_LINE as u64;
        }
    }

    /// Populates our mapping of the ring at `ring` (see [`PrefaultBudget`]), if the budget
    /// has room: allocated and mapped for writing (the ring we write) or mapped (the ring we
    /// read). Best effort: a kernel without MADV_POPULATE_* (before 5.14) reads a byte of each
    /// page instead, which maps it.
    #[cold]
    fn populate(&mut self, ring: *mut u8, write: bool) {
        let Some(share) = self
            .prefault
            .as_ref()
            .and_then(|b| b.reserve(self.cap as usize))
        else {
            return;
        };
        let advice = if write {
            libc::MADV_POPULATE_WRITE
        } else {
            libc::MADV_POPULATE_READ
        };
        // The ring starts HDR (4 KiB) + side * cap into the mapping: page aligned with 4 KiB
        // pages; with larger ones, from the page holding its start (still our mapping).
        let page = page_size();
        let base = self.map.ptr.as_ptr() as usize;
        let start = (ring as usize - base) / page * page;
        let len = ring as usize - base - start + self.cap as usize;
        // SAFETY: [start, start + len) lies inside our live mapping (the ring ends at or before
        // its end) and starts page aligned; populating changes no byte.
        let r = unsafe { libc::madvise((base + start) as *mut libc::c_void, len, advice) };
        if r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            // A kernel before 5.14: a read of a byte of each page maps it.
            self.map.touch(start, len, page);
        }
        self.populated.push(share);
    }

    /// After publishing an index: wake the peer if it is asleep (Dekker with its `arm`).
    #[inline]
    fn wake_peer(&self) {
        store_load_fence();
        let flag = self.map.word(OFF_SLEEP + 8 * self.peer());
        if flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::AcqRel) != 0 {
            signal(&self.peer_efd);
        }
    }

    #[inline]
    fn peer_closed(&self) -> bool {
        self.map
            .word(OFF_CLOSED + 8 * self.peer())
            .load(Ordering::Acquire)
            != 0
    }

    /// Checks the setup socket (sleep path only): EOF or stray bytes mean the peer is gone.
    fn check_socket(&mut self) {
        let Some(s) = &self.sock else { return };
        let r = recv(
            s.as_raw_fd(),
            &mut [0u8; 1],
            MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
        );
        // Anything but "nothing to read yet" (EAGAIN, which is EWOULDBLOCK here).
        if !matches!(r, Err(Errno::EAGAIN)) {
            self.peer_dead = true;
        }
    }
}

/// A lane slot the reader has not consumed yet ([`ShmLink::lane_peek`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneView<'a> {
    /// The three words the writer gave [`ShmLink::lane_send`].
    pub meta: [u64; 3],
    pub payload: &'a [u8],
}

impl ShmLink {
    #[inline]
    fn lane_tx_word(&self, slot: u64, word: usize) -> *mut u64 {
        let off = (slot % LANE_SLOTS) as usize * SLOT + 8 * word;
        // SAFETY: slot offsets are below LANE_BYTES and word < 4: inside our lane, 8-aligned
        // (the lanes start page aligned plus a multiple of a power-of-two capacity).
        unsafe { self.lane_tx.add(off) as *mut u64 }
    }

    #[inline]
    fn lane_rx_slot(&self, slot: u64) -> *const u8 {
        // SAFETY: inside the peer's lane, 64-aligned.
        unsafe { self.lane_rx.add((slot % LANE_SLOTS) as usize * SLOT) }
    }

    /// Has anything come from the peer since we last sent to it (through the ring or the
    /// lane)? A message sent now answers it, where one sent otherwise continues a stream.
    #[inline]
    pub fn answering(&self) -> bool {
        self.read_count() != self.read_at_last_send
    }

    /// Ring bytes and lane slots read so far.
    #[inline]
    fn read_count(&self) -> u64 {
        self.rx_tail.wrapping_add(self.lane_rx_tail)
    }

    /// Has the reader consumed everything we wrote to the ring? Re-reads its tail only when
    /// our head moved since we last saw it there.
    #[inline]
    fn ring_quiet(&mut self) -> bool {
        if self.tx_quiet_at == self.tx_head {
            return true;
        }
        let tail = self.map.word(off_tail(self.side)).load(Ordering::Acquire);
        if tail != self.tx_head {
            return false;
        }
        self.tx_tail_seen = tail;
        self.tx_quiet_at = tail;
        true
    }

    /// Sends a small whole message through the lane: the three `meta` words and `payload` (at
    /// most [`LANE_PAYLOAD`] bytes) arrive as one [`LaneView`], in order with everything
    /// written to this link before and after. False (nothing sent) when the lane cannot take
    /// it now: too long, the reader has not consumed all of the ring yet, the lane is full,
    /// or the peer is gone. Write it to the ring then. A traced link stamps it as
    /// [`LANE_TRACED`] + its length bytes of the stream, between the ring's records.
    #[inline]
    pub fn lane_send(&mut self, meta: [u64; 3], payload: &[u8]) -> bool {
        if payload.len() > LANE_PAYLOAD
            || !self.ring_quiet()
            || self.peer_closed()
            || self.peer_dead
        {
            return false;
        }
        if self.lane_tx_head - self.lane_tx_tail_seen >= LANE_SLOTS {
            let tail = self
                .map
                .word(off_lane_tail(self.side))
                .load(Ordering::Acquire);
            // A reader's count beyond what we wrote, or a whole lane behind, is not a reader's.
            if tail > self.lane_tx_head || self.lane_tx_head - tail > LANE_SLOTS {
                return false;
            }
            self.lane_tx_tail_seen = tail;
            if self.lane_tx_head - tail >= LANE_SLOTS {
                return false;
            }
        }
        let slot = self.lane_tx_head;
        // SAFETY: the slot's words and payload bytes lie inside our lane (lane_tx_word);
        // the reader does not read them before the sequence word below says they are
        // there, nor after it has consumed the slot (the free-slot check above). The
        // payload's source is the caller's slice, disjoint from the mapping.
        unsafe {
            for (i, m) in meta.iter().enumerate() {
                self.lane_tx_word(slot, 1 + i).write_volatile(*m);
            }
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                self.lane_tx_word(slot, 4) as *mut u8,
                payload.len(),
            );
            // Stamped before the publish, as in write_small.
            if let Some(t) = self.trace.as_deref_mut() {
                let now = crate::trace::now_ns();
                t.wrote(now, now, LANE_TRACED + payload.len());
            }
            let seq = AtomicU64::from_ptr(self.lane_tx_word(slot, 0));
            seq.store(
                (slot.wrapping_add(1) & SLOT_SEQ) | (payload.len() as u64) << 32,
                Ordering::Release,
            );
        }
        self.lane_tx_head = slot + 1;
        self.read_at_last_send = self.read_count();
        self.wake_peer();
        true
    }

    /// The sequence word of the next lane slot to read, if the writer has filled it.
    #[inline]
    fn lane_next(&self) -> Option<u64> {
        // SAFETY: the slot's first word, inside the peer's lane and 8-aligned; the writer
        // accesses it only atomically too.
        let w = unsafe { AtomicU64::from_ptr(self.lane_rx_slot(self.lane_rx_tail) as *mut u64) }
            .load(Ordering::Acquire);
        (w & SLOT_SEQ == self.lane_rx_tail.wrapping_add(1) & SLOT_SEQ).then_some(w)
    }

    /// Can a reader wait on doorbells at all: no part of a record left to read, the peer
    /// neither gone nor closed?
    fn watchable(&self) -> bool {
        self.rx_left == 0 && !self.peer_dead && !self.peer_closed()
    }

    /// Messages sent through the lane so far.
    pub fn lane_sent(&self) -> u64 {
        self.lane_tx_head
    }

    /// Is a lane message waiting? (A cheap look: one word.)
    #[inline]
    pub fn lane_pending(&self) -> bool {
        self.lane_next().is_some()
    }

    /// The next lane message, in place, until [`lane_consume`](Self::lane_consume). It comes
    /// before every ring record not read yet: read it first. An error is a slot no writer of
    /// ours makes (a payload longer than a slot's).
    #[inline]
    pub fn lane_peek(&mut self) -> io::Result<Option<LaneView<'_>>> {
        self.awake();
        let Some(w) = self.lane_next() else {
            return Ok(None);
        };
        let len = (w >> 32) as usize;
        if len > LANE_PAYLOAD {
            return Err(self.corrupt("lane slot length", len as u64, LANE_PAYLOAD as u64));
        }
        let at = self.lane_rx_slot(self.lane_rx_tail);
        // SAFETY: the slot's words and its first `len` <= LANE_PAYLOAD payload bytes lie
        // inside the peer's lane; the writer does not touch the slot again until we have
        // consumed it (lane_consume needs &mut self, so the view is gone by then). If it
        // does anyway we see garbage, never out of bounds.
        unsafe {
            let word = |i: usize| (at.add(8 * i) as *const u64).read_volatile();
            Ok(Some(LaneView {
                meta: [word(1), word(2), word(3)],
                payload: std::slice::from_raw_parts(at.add(32), len),
            }))
        }
    }

    /// Hands back the lane slot [`lane_peek`](Self::lane_peek) showed (only after it showed
    /// one: the slot is not looked at again, on the small message's path).
    #[inline]
    pub fn lane_consume(&mut self) {
        debug_assert!(self.lane_next().is_some(), "lane_consume without a message");
        if self.trace.is_some() {
            self.trace_lane_read();
        }
        self.lane_rx_tail += 1;
        // The writer looks only when its own count says the lane is full: a store every
        // quarter lane keeps it from seeing it full for long.
        if self.lane_rx_tail - self.lane_rx_published >= LANE_SLOTS / 4 {
            self.publish_lane_tail();
        }
    }

    #[cold]
    fn trace_lane_read(&mut self) {
        let len = self
            .lane_next()
            .map_or(0, |w| ((w >> 32) as usize).min(LANE_PAYLOAD));
        if let Some(t) = self.trace.as_deref_mut() {
            t.read(0, None, crate::trace::now_ns(), LANE_TRACED + len);
        }
    }

    fn publish_lane_tail(&mut self) {
        if self.lane_rx_tail != self.lane_rx_published {
            self.lane_rx_published = self.lane_rx_tail;
            self.map
                .word(off_lane_tail(self.peer()))
                .store(self.lane_rx_tail, Ordering::Release);
        }
    }
}

/// Orders our earlier stores before our later loads (what `fence(SeqCst)` gives), for the
/// Dekker handshake between a writer's publish and a reader's `arm`. On x86-64 a locked
/// read-modify-write of a private word does this, as Linux's `smp_mb` does, where `mfence` also
/// holds back every later instruction until the store buffer has drained: on the small-message
/// path that stall cost 20-40 ns of one-way latency (measured on AMD EPYC under KVM).
#[inline(always)]
fn store_load_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: ORs zero into the word at the stack pointer, which is ours and keeps its value;
    // the LOCK prefix makes it a full barrier for the stores and loads around it. Flags are
    // clobbered (no `preserves_flags`); no memory option, so it is a compiler barrier too.
    unsafe {
        std::arch::asm!("lock or dword ptr [rsp], 0", options(nostack));
    }
    #[cfg(not(target_arch = "x86_64"))]
    fence(Ordering::SeqCst);
}

impl ShmLink {
    /// We are awake: nobody needs to signal us (saves the peer a syscall).
    #[inline]
    fn awake(&self) {
        let me = self.map.word(OFF_SLEEP + 8 * self.side);
        if me.load(Ordering::Relaxed) != 0 {
            me.store(0, Ordering::Relaxed);
        }
    }
}

impl Link for ShmLink {
    fn ready(&mut self) -> bool {
        self.awake();
        if self.rx_left != 0 {
            return true;
        }
        // A nonzero header is checked for sanity by read().
        let off = (self.rx_tail & (self.cap - 1)) as usize;
        let ready = self.rx_word(off).load(Ordering::Relaxed) != 0
            || self.lane_pending()
            || self.peer_closed()
            || self.peer_dead;
        if !ready {
            self.publish_tail();
        }
        ready
    }

    fn peek(&mut self) -> Option<&[u8]> {
        if !self.next_record().ok()? {
            self.publish_tail();
            return None;
        }
        let off = (self.rx_tail & (self.cap - 1)) as usize;
        // SAFETY: the record was checked to end inside the ring (off + rx_left <= cap). The
        // peer does not write these bytes until we advance the tail (in consume, which needs
        // &mut self, so the slice is gone by then); if it does anyway we see garbage, never
        // out of bounds.
        Some(unsafe { std::slice::from_raw_parts(self.rx.add(off), self.rx_left) })
    }

    fn poll_peek(&mut self) -> Peeked<'_> {
        self.awake();
        match self.next_record() {
            Ok(true) => {
                let off = (self.rx_tail & (self.cap - 1)) as usize;
                // SAFETY: as in peek.
                Peeked::Bytes(unsafe { std::slice::from_raw_parts(self.rx.add(off), self.rx_left) })
            }
            Ok(false) if !self.peer_closed() && !self.peer_dead && !self.lane_pending() => {
                self.publish_tail();
                Peeked::Nothing
            }
            // An error, the peer gone, or a lane message to take before the ring's next.
            _ => Peeked::Attention,
        }
    }

    fn doorbells(&self, out: &mut Vec<crate::Doorbell>) -> bool {
        if !self.watchable() {
            return false;
        }
        let lane = self.lane_rx_slot(self.lane_rx_tail) as *const AtomicU64;
        // SAFETY: the next lane slot's sequence word, inside the peer's lane.
        let lane_now = unsafe { (*lane).load(Ordering::Acquire) };
        if lane_now & SLOT_SEQ == self.lane_rx_tail.wrapping_add(1) & SLOT_SEQ {
            return false;
        }
        // The next record's header word (the writer publishes a record by making it nonzero)
        // and the next lane slot's sequence word (by changing it).
        let off = (self.rx_tail & (self.cap - 1)) as usize;
        // SAFETY: words of our mapping, valid while this link lives (Doorbell::rung's
        // contract keeps the reader within that).
        unsafe {
            out.push(crate::Doorbell::new(self.rx_word(off), 0));
            out.push(crate::Doorbell::new(lane, lane_now));
        }
        true
    }

    fn answer_bells(&self, out: &mut Vec<crate::Doorbell>) -> bool {
        if self.doorbells(out) {
            return true;
        }
        if !self.watchable() || !self.lane_pending() {
            return false;
        }
        let lane = self.lane_rx_slot(self.lane_rx_tail) as *const AtomicU64;
        // SAFETY: the next lane slot's sequence word, as in `doorbells`. No slot's word is
        // u64::MAX (its length would exceed a slot's), so the doorbell has rung.
        unsafe { out.push(crate::Doorbell::new(lane, u64::MAX)) };
        true
    }

    fn shm(&mut self) -> Option<&mut ShmLink> {
        Some(self)
    }

    fn write_frame(&mut self, header: &[u8], payload: &[u8]) -> io::Result<usize> {
        let total = header.len() + payload.len();
        if total != 0
            && total < REC_ALIGNED
            && !self.peer_closed()
            && !self.peer_dead
            && self.write_small(&[header, payload], total)
        {
            return Ok(total);
        }
        self.write_vectored(&[IoSlice::new(header), IoSlice::new(payload)])
    }

    fn consume(&mut self, n: usize) {
        let n = n.min(self.rx_left);
        self.advance(n);
        self.publish_tail_lazily();
        if let Some(t) = self.trace.as_deref_mut() {
            t.read(0, None, crate::trace::now_ns(), n);
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.awake();
        if buf.is_empty() {
            return Ok(0);
        }
        let mut done = 0;
        while done < buf.len() {
            match self.next_record() {
                Ok(true) => {}
                Ok(false) => break,
                // Deliver what came before the bad record; the next call reports it.
                Err(_) if done > 0 => break,
                Err(e) => {
                    self.publish_tail();
                    return Err(e);
                }
            }
            let off = (self.rx_tail & (self.cap - 1)) as usize;
            let k = self.rx_left.min(buf.len() - done);
            // SAFETY: the record was checked to end inside the ring, and k <= rx_left, so
            // [off, off + k) is inside the rx ring; done + k <= buf.len(). `buf` is ours and
            // does not overlap the mapping. The peer does not write these bytes until we
            // advance the tail (if it does anyway, we read garbage bytes, never out of bounds).
            unsafe {
                std::ptr::copy_nonoverlapping(self.rx.add(off), buf.as_mut_ptr().add(done), k);
            }
            done += k;
            self.advance(k);
            // Hand back room record by record so a streaming writer refills while we copy.
            self.publish_tail();
        }
        if done == 0 {
            if self.lane_pending() {
                // The lane's message comes before anything more of the ring (or its end).
                return Err(io::ErrorKind::WouldBlock.into());
            }
            if self.peer_closed() {
                // The peer published everything before setting `closed`: look once more.
                if !self.next_record()? {
                    self.publish_tail();
                    if self.lane_pending() {
                        return Err(io::ErrorKind::WouldBlock.into());
                    }
                    return Ok(0);
                }
                return self.read(buf);
            } else if self.peer_dead {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    format!("{}: peer process gone without closing", self.label),
                ));
            }
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if let Some(t) = self.trace.as_deref_mut() {
            t.read(0, None, crate::trace::now_ns(), done);
        }
        Ok(done)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.peer_closed() || self.peer_dead {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                format!("{}: peer closed", self.label),
            ));
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(0);
        }
        if total < REC_ALIGNED && self.write_small(bufs, total) {
            return Ok(total);
        }
        let cap = self.cap as usize;
        // Where the next byte to copy is: bufs[bi][bo..].
        let (mut bi, mut bo) = (0, 0);
        let mut written = 0;
        let mut published_at = 0;
        while written < total {
            let want = footprint((total - written).min(PUBLISH));
            let free = self.writable(want as u64)? as usize;
            let off = (self.tx_head & (self.cap - 1)) as usize;
            // Room for this record: before the ring's end (records start on lines, so at
            // least one line is left), and leaving the next header slot free. A record too
            // small for the aligned layout takes the compact one.
            let room = align_down(free.min(cap - off));
            let mut n = room
                .saturating_sub(REC_LINE)
                .min(PUBLISH)
                .min(total - written);
            if n < REC_ALIGNED {
                n = room
                    .saturating_sub(REC_HDR)
                    .min(REC_ALIGNED - 1)
                    .min(total - written);
            }
            if n == 0 {
                break;
            }
            let mut at = off + payload_at(n);
            let mut left = n;
            while left > 0 && bi < bufs.len() {
                let src = &bufs[bi][bo..];
                let k = src.len().min(left);
                // SAFETY: [at, at + k) lies in the record, [off, off + footprint(n)), which
                // ends inside the tx ring and within the `free` bytes the reader has consumed
                // (footprint(n) <= room). The
                // source is the caller's slice, disjoint from the mapping.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.tx.add(at), k) };
                at += k;
                left -= k;
                bo += k;
                if bo == bufs[bi].len() {
                    (bi, bo) = (bi + 1, 0);
                }
            }
            // Stamped before the publish, as in write_small.
            if self.trace.is_some() {
                published_at = crate::trace::now_ns();
            }
            self.emit(n);
            written += n;
        }
        self.write_blocked = written < total;
        if written == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if let Some(t) = self.trace.as_deref_mut() {
            t.wrote(published_at, published_at, written);
        }
        Ok(written)
    }

    fn fd(&self) -> RawFd {
        match &self.poll_set {
            Some(ep) => ep.as_raw_fd(),
            None => self.my_efd.as_raw_fd(),
        }
    }

    fn describe(&self) -> String {
        self.label.clone()
    }

    fn polled(&self) -> bool {
        true
    }

    /// The nested epoll is level-triggered: a signal left in the eventfd, or the setup
    /// socket's hang-up when the peer process died, would report it ready for ever.
    fn event(&mut self) {
        drain(&self.my_efd);
        self.check_socket();
    }

    fn set_trace(&mut self, on: bool) -> io::Result<bool> {
        self.trace = on.then(|| Box::new(LinkTrace::new()));
        Ok(true)
    }

    fn trace(&mut self, _collect: bool) -> Option<&mut LinkTrace> {
        self.trace.as_deref_mut()
    }

    fn arm(&mut self) -> bool {
        // A sleeping reader must have handed back everything it read (the writer may wait,
        // or keep off the lane).
        self.publish_tail();
        self.publish_lane_tail();
        drain(&self.my_efd);
        self.check_socket();
        if self.peer_dead {
            return false;
        }
        let me = self.map.word(OFF_SLEEP + 8 * self.side);
        me.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        // Room means room for a record: a line (an error is left to write to report).
        let line = REC_LINE as u64;
        let room = self.write_blocked && !matches!(self.writable(line), Ok(f) if f < line);
        // Report room once: if the engine has nothing left to write, we must not keep it awake.
        self.write_blocked &= !room;
        let busy = room
            || self.lane_pending()
            || match self.next_record() {
                Ok(data) => data || self.peer_closed(),
                Err(_) => true, // let read report it
            };
        if busy {
            self.map
                .word(OFF_SLEEP + 8 * self.side)
                .store(0, Ordering::Relaxed);
        }
        !busy
    }
}

impl Drop for ShmLink {
    fn drop(&mut self) {
        self.map
            .word(OFF_CLOSED + 8 * self.side)
            .store(1, Ordering::SeqCst);
        signal(&self.peer_efd);
    }
}

/// The abstract socket name on which `rank` of the job with `secret` listens for shared-memory
/// links: `hxcomm-<16 hex of HMAC(secret, "shm")>-<rank>`. Unique per job and rank, and it
/// reveals nothing about the secret.
pub fn socket_name(secret: &hx_auth::Secret, id: u64) -> String {
    let tag = hx_auth::hmac_sha256(secret, &[b"shm"]);
    let hex: String = tag[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("hxcomm-{hex}-{id:x}")
}

/// Identifies "the same host" for shared memory: the kernel's boot id and this process's
/// network namespace (abstract socket names are per network namespace, so two ranks can set up
/// a link iff their keys are equal). Publish it through the bootstrap and compare.
pub fn host_key() -> io::Result<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?;
    let ns = std::fs::read_link("/proc/self/ns/net")?;
    Ok(format!("{}/{}", boot.trim(), ns.display()))
}

/// Two connected links in one process (tests, and threads of one rank if ever needed). Each end
/// has its own mapping of one segment, as two processes would.
pub fn pair(capacity: usize) -> io::Result<(ShmLink, ShmLink)> {
    pair_with(capacity, None)
}

fn pair_with(
    capacity: usize,
    prefault: Option<Arc<PrefaultBudget>>,
) -> io::Result<(ShmLink, ShmLink)> {
    let (fd, map0) = create_segment(capacity)?;
    let (map1, cap) = open_segment(&fd, capacity)?;
    let (e0, e1) = (eventfd()?, eventfd()?);
    let (e0b, e1b) = (e0.try_clone()?, e1.try_clone()?);
    Ok((
        ShmLink::new(
            map0,
            cap,
            0,
            e0,
            e1b,
            None,
            "shm/a".into(),
            prefault.clone(),
        )?,
        ShmLink::new(map1, cap, 1, e1, e0b, None, "shm/b".into(), prefault)?,
    ))
}
