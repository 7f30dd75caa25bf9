//! The domain: one backend behind the lock its threading model asks for ([`SerialLock`]), the
//! table of operations in flight, and the routing of finished operations to completion queues.

use crate::av::AvShared;
use crate::backend::*;
use crate::cq::{CqShared, Entry};
use crate::fabric::{enosys_control, enosys_ops_open, ptr, Fabric};
use crate::hints::DOMAIN_NAME;
use crate::sys::*;
use crate::util::*;
use libc::{c_int, c_void};
use rustc_hash::FxHashMap as HashMap;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

#[repr(C)]
pub struct DomainObj {
    pub fid: fid_domain,
    pub fabric: *mut Fabric,
    pub d: Arc<DomainShared>,
    /// Open endpoints, CQs, AVs and MRs: closing the domain before them is -FI_EBUSY.
    pub children: AtomicUsize,
    /// Opened with FI_RMA: the memory registered for peers' reads and writes.
    pub regions: Option<Arc<crate::mr::RegionTable>>,
}

pub struct DomainShared {
    /// Taken with [`lock`](Self::lock), which first settles a receive an idle read served by
    /// its ticket (see [`IdleWatch`]).
    pub state: StateLock,
    /// Under FI_THREAD_DOMAIN, what lets an idle CQ read answer without the domain's state
    /// (see [`IdleWatch`]).
    idle: IdleWatch,
    pub wait_fd: i32,
    pub max_msg: usize,
    /// The application's API version (err_data rules of fi_cq_readerr depend on it).
    pub api_version: u32,
}

/// An idle CQ read (Open MPI's receive loop polls ~340 instructions a turn while it waits,
/// 216 of them the provider's) answered from a few words: after a read found nothing to serve
/// and the backend named the doorbells that alone decide its next look
/// ([`Backend::idle_bells`]), the next reads of that CQ, as long as nobody has taken the
/// domain's state since ([`SerialLock::generation`]), its queue is empty and no doorbell
/// rang, return -FI_EAGAIN at once; after `IDLE_READS` of them a read looks as before, and
/// tells the backend how many it answered (its every-so-often rounds count them). When the
/// watch is for the one receive the backend holds, the read whose doorbell rang takes that
/// receive's message from its peer's lane itself (its ticket), and whoever takes the state
/// next tells the backend first. Only under FI_THREAD_DOMAIN, where the application
/// serializes its calls: the fields are then only touched by one thread at a time.
struct IdleWatch {
    /// The state's generation the watch was taken in; 0: no watch.
    generation: AtomicU64,
    cq: AtomicUsize,
    /// Reads answered by the watch, told to the backend ([`Backend::idle_reads`]) by the
    /// next read that looks.
    answered: AtomicU32,
    bells: UnsafeCell<Vec<hx_engine::Doorbell>>,
    /// With the watch, when it is for one receive the backend holds ([`Backend::ticket`]):
    /// the read whose doorbell rings takes that receive's message itself, from its peer's
    /// lane, and writes its entry, with no state taken (the shortest path from a message's
    /// arrival to its completion). Valid with the watch (same generation).
    ticket: UnsafeCell<Option<Armed>>,
    /// A receive a read served by the ticket, which the backend and the operations in flight
    /// have not heard of yet: told by whoever takes the state next ([`DomainShared::lock`]),
    /// before anything else (fi_tinject*: right after its send, which does not depend on it,
    /// so that the telling is off the next message's path).
    served: UnsafeCell<Option<(OpId, hx_engine::Status)>>,
    /// `served` holds one, or `hold` is set: whoever takes the state settles first.
    owed: AtomicBool,
    /// A run of receives and answers on one same-host peer's lane, with no state taken at all
    /// (see [`Hold`]); told, and dropped, by whoever takes the state next.
    hold: UnsafeCell<Option<Hold>>,
}

/// Receives that [`Hold`] serves before the state is taken again: the backend's full rounds
/// (sockets, connections, a peer's death) are owed after a few dozen polls.
const HOLD_RUN: u32 = 64;

/// A run of receives and answers between two ranks of a host through the lane, with no state
/// taken (FI_THREAD_DOMAIN): after a fi_trecv took the state and armed a ticket
/// ([`DomainShared::watch_idle`]), and the backend gave a hold on its peer's lane
/// ([`Backend::lane_hold`]), as long as nobody takes the state, the next fi_trecv like it (the
/// same endpoint, source address, tag, ignore mask and flags, the AV unchanged) arms its ticket
/// without the state ([`DomainShared::hold_recv`]), and fi_tinject* from that endpoint to that
/// address sends through the lane ([`DomainShared::hold_send`]). Whoever takes the state next
/// tells the backend what the run did and posts the receive the run armed last, if nothing
/// served it, as fi_trecv would have ([`DomainShared::settle`]). Open MPI's 8-byte
/// ping-pong between two ranks of a host (fi_trecv, fi_tinjectdata, CQ reads) then runs
/// with no engine, backend or lock on its path.
struct Hold {
    /// The state's generation it was made in: valid while nobody has taken the state since.
    generation: u64,
    /// What the receives of the run are: fi_trecv of `key` (endpoint, source address, the
    /// AV's generation), `tag` and `ignore`, with `rx_flags`, into the CQ `cq`; its answers
    /// go the other way between the same endpoint and address.
    key: HoldKey,
    tag: u64,
    ignore: u64,
    rx_flags: u64,
    cq: usize,
    lane: hx_engine::LaneHold,
    /// For a receive's ticket and entry: the source's peer and address, the entry's flags.
    src: PeerId,
    src_addr: fi_addr_t,
    flags: u64,
    /// For a receive posted after all: the backend's source filter and the pending operation.
    src_filter: Option<PeerId>,
    pending: Pending,
    /// Receives the run may still arm ([`HOLD_RUN`]).
    left: u32,
    /// What the run did: messages its receives took (count, bytes), answers sent (count,
    /// bytes), CQ reads its receives waited through.
    received: (u64, u64),
    sent: (u64, u64),
    reads: u32,
}

/// A receive or an answer of a [`Hold`]: what it is to match (nothing removed from the AV
/// since, so the address names the same peer).
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct HoldKey {
    pub ep: u16,
    pub addr: fi_addr_t,
    pub av_generation: u64,
}

/// A ticket with what its read needs to write the completion: the receive's context and
/// flags, and its source's address.
struct Armed {
    /// A receive of a [`Hold`]'s run (posted nowhere else).
    held: bool,
    t: Ticket,
    context: usize,
    flags: u64,
    src_addr: fi_addr_t,
}

/// The address FI_SOURCE reports for `peer` in `av`, through the domain's one-entry cache when
/// it holds `peer` for `av` (same generation: nothing was removed since).
fn source_addr(cache: &mut Option<AvCache>, av: &AvShared, peer: PeerId) -> fi_addr_t {
    match cache {
        Some(c) if c.peer == peer && c.gen == av.generation() => {
            *c.back.get_or_insert_with(|| av.fi_addr_of(peer))
        }
        _ => av.fi_addr_of(peer),
    }
}

/// What an idle CQ read found ([`DomainShared::idle_look`]).
pub enum Idle {
    /// Nothing came: -FI_EAGAIN.
    Quiet,
    /// The ticket's receive was served: its entry, and its source's address.
    Served(CqFields, fi_addr_t),
    /// Look as a read does.
    Look,
}

/// Reads an [`IdleWatch`] answers before one looks as before.
const IDLE_READS: u32 = 15;

// SAFETY: the cells (`bells`, `ticket`, `served`, `hold`) are only touched under
// FI_THREAD_DOMAIN (by the application's one thread at a time) or under the domain's state
// lock; the doorbells, tickets and holds point into shared memory and the engine's links, which
// nothing else touches until the state is taken (see `Hold`).
unsafe impl Sync for IdleWatch {}

impl IdleWatch {
    fn new() -> Self {
        IdleWatch {
            generation: AtomicU64::new(0),
            cq: AtomicUsize::new(0),
            answered: AtomicU32::new(0),
            bells: UnsafeCell::new(Vec::new()),
            ticket: UnsafeCell::new(None),
            served: UnsafeCell::new(None),
            owed: AtomicBool::new(false),
            hold: UnsafeCell::new(None),
        }
    }
}

/// What a CQ read's drive ([`DomainShared::read_drive`]) leaves the read to do.
pub enum Drive {
    /// This many entries of served receives went to the read's `emit` (the CQ's queue was
    /// empty): return them.
    Served(usize),
    /// The queue is empty: -FI_EAGAIN.
    Empty,
    /// Read the queue.
    Queue,
}

/// Whether a finished operation produces a CQ entry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Report {
    /// Success and failure.
    Always,
    /// Selective completion without FI_COMPLETION: failures only.
    ErrorsOnly,
    /// fi_inject: nothing (failures are logged).
    Never,
}

/// An operation in flight. `cq` (where its entry goes) and `av` (how its source is named) are
/// NULL or point into the `Arc`s of its endpoint's bindings, which outlive it: an endpoint's
/// pending operations are removed, under the domain lock, before the endpoint (and with it
/// the bindings) goes (`ep_close`), and a domain closes only without endpoints. So they are
/// only followed under the domain lock. (Counted references cost four atomic operations per
/// receive.)
#[derive(Clone, Copy)]
pub struct Pending {
    pub cq: *const CqShared,
    pub av: *const AvShared,
    pub context: usize,
    /// Completion flags (FI_SEND/FI_RECV | FI_MSG/FI_TAGGED).
    pub flags: u64,
    pub report: Report,
    pub ep: u16,
}

// SAFETY: the pointers are only followed under the domain lock (see `Pending`), and
// `CqShared`/`AvShared` are Sync.
unsafe impl Send for Pending {}

/// The operations in flight by id. The first `RECENT` of them in posting order sit in a queue
/// of their own, looked up without hashing at either end: a ping-pong's one receive, a
/// window of receives completing in order. The rest are hashed.
#[derive(Default)]
pub struct PendingMap {
    recent: VecDeque<(OpId, Pending)>,
    rest: HashMap<OpId, Pending>,
    /// Operations that complete again and again (an endpoint's watch for remote writes with
    /// CQ data): looked up last, and never removed by a completion.
    kept: Vec<(OpId, Pending)>,
}

const RECENT: usize = 64;

impl PendingMap {
    // Inlined: a receive's insert and its completion's remove are on every small message's
    // path (95 instructions per round trip out of line); the rest stays out of line.
    #[inline]
    pub fn insert(&mut self, op: OpId, p: Pending) {
        if self.recent.len() < RECENT {
            self.recent.push_back((op, p));
        } else {
            self.rest.insert(op, p);
        }
    }

    /// An operation that completes again and again: [`remove`](Self::remove) gives a copy
    /// each time; it goes with [`retain`](Self::retain) or [`clear`](Self::clear).
    pub fn insert_kept(&mut self, op: OpId, p: Pending) {
        self.kept.retain(|(o, _)| *o != op);
        self.kept.push((op, p));
    }

    #[inline]
    pub fn remove(&mut self, op: &OpId) -> Option<Pending> {
        if self.recent.front().is_some_and(|(o, _)| o == op) {
            return self.recent.pop_front().map(|(_, p)| p);
        }
        self.remove_behind(op)
    }

    #[inline(never)]
    fn remove_behind(&mut self, op: &OpId) -> Option<Pending> {
        let at = |i: Option<&(OpId, Pending)>| i.is_some_and(|(o, _)| o == op);
        if at(self.recent.back()) {
            return self.recent.pop_back().map(|(_, p)| p);
        }
        if let Some(p) = self.rest.remove(op) {
            return Some(p);
        }
        if let Some(i) = self.recent.iter().position(|(o, _)| o == op) {
            return self.recent.remove(i).map(|(_, p)| p);
        }
        self.kept.iter().find(|(o, _)| o == op).map(|&(_, p)| p)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&OpId, &Pending) -> bool) {
        self.recent.retain(|(op, p)| keep(op, p));
        self.rest.retain(|op, p| keep(op, p));
        self.kept.retain(|(op, p)| keep(op, p));
    }

    /// The operation `op` (not a kept one).
    pub fn get(&self, op: &OpId) -> Option<&Pending> {
        self.recent
            .iter()
            .find(|(o, _)| o == op)
            .map(|(_, p)| p)
            .or_else(|| self.rest.get(op))
    }

    /// The id of an operation that `pred` takes.
    pub fn find(&self, mut pred: impl FnMut(&Pending) -> bool) -> Option<OpId> {
        self.recent
            .iter()
            .map(|(op, p)| (op, p))
            .chain(self.rest.iter())
            .find(|(_, p)| pred(p))
            .map(|(op, _)| *op)
    }

    pub fn clear(&mut self) {
        self.recent.clear();
        self.rest.clear();
        self.kept.clear();
    }
}

/// What a domain's objects keep behind the lock its threading model asks for (the domain's
/// state, a CQ's queue). Under FI_THREAD_SAFE, a mutex. Under FI_THREAD_DOMAIN (what Open MPI
/// asks for unless MPI_THREAD_MULTIPLE) the application serializes every call on the domain's
/// objects, so no lock is needed: the mutexes' two atomic read-modify-writes per call were six
/// on each message's one-way path through Open MPI (send, the read that serves the receive,
/// the read that finds nothing) and two more per send completion queued. What remains is a
/// check with plain loads and stores: a call that finds the value in use (an application
/// breaking its promise) says so once and waits for it. Best effort only: two threads that
/// really race can both pass the check (a load and a store, not an atomic swap), and then the
/// application gets what breaking FI_THREAD_DOMAIN gets with any provider.
pub struct SerialLock<T> {
    mutex: Mutex<()>,
    serial: bool,
    busy: AtomicBool,
    /// Under FI_THREAD_DOMAIN, counts the times the value was taken.
    generation: AtomicU64,
    /// Reads that may answer nothing without taking the value (see
    /// [`Backend::take_lonely_polls`]): zeroed whenever anyone takes it.
    pub lonely: AtomicU32,
    value: UnsafeCell<T>,
}

pub type StateLock = SerialLock<DomainState>;

// SAFETY: access to `value` goes through `lock`, exclusive under the mutex, or (FI_THREAD_DOMAIN)
// by the application's serialization; T is Send.
unsafe impl<T: Send> Sync for SerialLock<T> {}

pub struct SerialGuard<'a, T> {
    lock: &'a SerialLock<T>,
    _held: Option<MutexGuard<'a, ()>>,
}

static THREAD_DOMAIN_BROKEN: AtomicBool = AtomicBool::new(false);

impl<T> SerialLock<T> {
    pub fn new(value: T, serial: bool) -> Self {
        SerialLock {
            mutex: Mutex::new(()),
            serial,
            busy: AtomicBool::new(false),
            generation: AtomicU64::new(1),
            lonely: AtomicU32::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// Opened with FI_THREAD_DOMAIN: no mutex.
    pub fn is_serial(&self) -> bool {
        self.serial
    }

    /// Under FI_THREAD_DOMAIN: changes each time the value is taken (from 1 up).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    // Inlined into every call's path (the serial case is a load and two stores); the mutex
    // and the broken-serialization wait are out of line.
    #[inline]
    pub fn lock(&self) -> SerialGuard<'_, T> {
        self.lonely.store(0, Ordering::Relaxed);
        if !self.serial {
            return self.lock_mutex();
        }
        if self.busy.load(Ordering::Acquire) {
            self.wait_not_busy();
        }
        self.busy.store(true, Ordering::Relaxed);
        // Serialized callers: a load and a store, no read-modify-write.
        let g = self.generation.load(Ordering::Relaxed);
        self.generation.store(g + 1, Ordering::Relaxed);
        SerialGuard {
            lock: self,
            _held: None,
        }
    }

    #[inline(never)]
    fn lock_mutex(&self) -> SerialGuard<'_, T> {
        let held = lock(&self.mutex);
        // Again once held: a holder we waited for may have set it meanwhile.
        self.lonely.store(0, Ordering::Relaxed);
        SerialGuard {
            lock: self,
            _held: Some(held),
        }
    }

    #[cold]
    #[inline(never)]
    fn wait_not_busy(&self) {
        if !THREAD_DOMAIN_BROKEN.swap(true, Ordering::Relaxed) {
            warn(
                FI_LOG_DOMAIN,
                "two threads called into one FI_THREAD_DOMAIN domain at once: the application \
                 must serialize its calls, or open the domain with FI_THREAD_SAFE",
            );
        }
        while self.busy.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
    }
}

impl<T> std::ops::Deref for SerialGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: see `SerialLock`.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> std::ops::DerefMut for SerialGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: see `SerialLock`.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SerialGuard<'_, T> {
    fn drop(&mut self) {
        if self.lock.serial {
            self.lock.busy.store(false, Ordering::Release);
        }
    }
}

/// The last address an endpoint's operation looked up, under the domain lock
/// ([`crate::ep`]'s `peer_locked`): valid while its AV's generation is `gen`.
#[derive(Clone, Copy)]
pub struct AvCache {
    pub gen: u64,
    pub addr: fi_addr_t,
    pub peer: PeerId,
    /// The address FI_SOURCE reports for `peer` ([`AvShared::fi_addr_of`]), once a ticket
    /// asked for it: a ping-pong's every receive arms one, and the AV's lookup takes its lock.
    pub back: Option<fi_addr_t>,
}

pub struct DomainState {
    pub backend: Box<dyn Backend>,
    pub av_cache: Option<AvCache>,
    pub pending: PendingMap,
    /// How many AV entries (over all AVs of the domain) name each peer.
    pub peer_refs: HashMap<PeerId, usize>,
    scratch: Vec<Done>,
    /// Receives a CQ read's poll served ([`Backend::poll_express`]).
    served: Vec<Served>,
    /// CQ reads have been answered by an [`IdleWatch`] (said once, at debug level).
    idle_logged: bool,
    /// Said once that a CQ read served a receive by its ticket.
    ticket_logged: bool,
    /// Said once that a run of receives and answers held the lane, and once that a receive
    /// it armed was posted after all.
    hold_logged: bool,
    hold_posted_logged: bool,
}

impl DomainShared {
    /// `serial`: the domain was opened with FI_THREAD_DOMAIN (see [`StateLock`]).
    pub fn new(backend: Box<dyn Backend>, api_version: u32, serial: bool) -> Arc<Self> {
        Arc::new(DomainShared {
            idle: IdleWatch::new(),
            wait_fd: backend.wait_fd(),
            max_msg: backend.max_msg_size(),
            api_version,
            state: StateLock::new(
                DomainState {
                    backend,
                    av_cache: None,
                    pending: PendingMap::default(),
                    peer_refs: HashMap::default(),
                    scratch: Vec::new(),
                    served: Vec::new(),
                    idle_logged: false,
                    ticket_logged: false,
                    hold_logged: false,
                    hold_posted_logged: false,
                },
                serial,
            ),
        })
    }

    /// Drives the backend and delivers what finished to the CQs. CQ entries are pushed while
    /// the domain lock is held so completions keep the backend's order across threads.
    pub fn progress(&self) -> Result<(), i32> {
        self.drive(|b, done| b.progress(done))
    }

    /// Progress before sleeping on wait_fd (fi_trywait, fi_cq_sread).
    pub fn progress_to_wait(&self) -> Result<(), i32> {
        self.drive(|b, done| b.progress_to_wait(done))
    }

    /// A CQ read's drive of `cq`, under one lock: delivers what finished without I/O (no
    /// syscall: a CQ that then has entries need not poll the sockets before returning them)
    /// and then, unless the last read of `cq` delivered (`delivered_last`) or it has entries,
    /// polls. When nothing finished, `cq` is empty and the backend holds receives
    /// ([`Backend::poll_express`]), the poll looks for them, and up to `room` that it serves
    /// for `cq` go to `emit` as the entries to return instead of through the queue: no
    /// progress round, pending lookup by the finished list, or queue push and pop.
    pub fn read_drive(
        &self,
        cq: &CqShared,
        delivered_last: bool,
        room: usize,
        mut emit: impl FnMut(usize, &CqFields, Option<(&AvShared, PeerId)>),
    ) -> Result<Drive, i32> {
        if !delivered_last && room > 0 && cq.queue_empty() {
            // A backend with nobody to hear from: most reads need not even take the state.
            // (A load and a store: two threads racing here at worst skip one read too many
            // or too few.)
            let lonely = self.state.lonely.load(Ordering::Relaxed);
            if lonely > 0 {
                self.state.lonely.store(lonely - 1, Ordering::Relaxed);
                return Ok(Drive::Empty);
            }
        }
        let mut st = self.lock();
        let st = &mut *st;
        if delivered_last {
            // No poll right after a delivery; nothing to collect is the common case (Open MPI
            // reads again after every completion until it gets -FI_EAGAIN: this read is on
            // every message's path, so an empty queue answers without its lock).
            if st.backend.idle() {
                return Ok(match cq.queue_empty() {
                    true => Drive::Empty,
                    false => Drive::Queue,
                });
            }
            return drive_read_round(st, cq, false);
        }
        if room == 0 || !cq.queue_empty() {
            return drive_read_round(st, cq, true);
        }
        if self.state.is_serial() && self.idle.answered.load(Ordering::Relaxed) > 0 {
            self.count_idle_reads(st);
        }
        // The shortest path first: one receive, by value, no batch.
        if let Some((s, idle)) = st.backend.serve_first() {
            if !emit_served(st, cq, s, 0, &mut emit) {
                return Ok(Drive::Queue);
            }
            if idle && self.state.is_serial() && cq.queue_empty() {
                cq.served_idle_at(self.state.generation());
            }
            return Ok(Drive::Served(1));
        }
        self.poll_read(st, cq, room, emit)
    }

    /// Tells the backend of the reads the [`IdleWatch`] answered since the last that looked.
    #[inline(never)]
    fn count_idle_reads(&self, st: &mut DomainState) {
        let answered = self.idle.answered.swap(0, Ordering::Relaxed);
        st.backend.idle_reads(answered);
        if !st.idle_logged {
            st.idle_logged = true;
            tracing::debug!("hxcomm: idle CQ reads were answered without the domain");
        }
    }

    /// [`read_drive`](Self::read_drive) past the shortest path: the backend's poll for the
    /// receives it holds, a batch of them served, or nothing, or a round. Out of line, so the
    /// shortest path stays short.
    #[inline(never)]
    fn poll_read(
        &self,
        st: &mut DomainState,
        cq: &CqShared,
        room: usize,
        mut emit: impl FnMut(usize, &CqFields, Option<(&AvShared, PeerId)>),
    ) -> Result<Drive, i32> {
        let mut served = std::mem::take(&mut st.served);
        served.clear();
        match st.backend.poll_express(room, &mut served) {
            Polled::Nothing => {
                st.served = served;
                if self.state.is_serial() {
                    self.watch_idle(st, cq);
                }
                let lonely = st.backend.take_lonely_polls();
                if lonely > 0 {
                    self.state.lonely.store(lonely, Ordering::Relaxed);
                }
                return Ok(Drive::Empty);
            }
            // Something finished or a round is owed: the general path.
            Polled::Progress => {
                st.served = served;
                return drive_read_round(st, cq, true);
            }
            Polled::Served => {}
        }
        let mut n = 0;
        for s in served.drain(..) {
            n += emit_served(st, cq, s, n, &mut emit) as usize;
        }
        st.served = served;
        Ok(if n > 0 {
            Drive::Served(n)
        } else {
            Drive::Queue
        })
    }

    /// After a read of `cq` found nothing, or a receive whose completion goes to `cq` was held
    /// ([`Backend::watch_first`]) (FI_THREAD_DOMAIN, under the state): takes the backend's
    /// doorbells as the [`IdleWatch`] for the next reads, if it has them.
    pub(crate) fn watch_idle(&self, st: &mut DomainState, cq: &CqShared) {
        // SAFETY (both): FI_THREAD_DOMAIN; the caller holds the state, and `idle_look` (the
        // other user) runs in the application's calls, which it serializes with this one.
        let bells = unsafe { &mut *self.idle.bells.get() };
        let ticket = unsafe { &mut *self.idle.ticket.get() };
        *ticket = None;
        if st.backend.idle_bells(bells) {
            self.idle
                .generation
                .store(self.state.generation(), Ordering::Relaxed);
            self.idle
                .cq
                .store(cq as *const CqShared as usize, Ordering::Relaxed);
            *ticket = self.arm(st, cq);
        } else {
            self.idle.generation.store(0, Ordering::Relaxed);
        }
    }

    /// The backend's ticket for the watch's receive, if its completion is an entry of `cq`.
    fn arm(&self, st: &mut DomainState, cq: &CqShared) -> Option<Armed> {
        let t = st.backend.ticket()?;
        let p = st.pending.get(&t.op)?;
        if p.report != Report::Always || !std::ptr::eq(p.cq, cq) {
            return None;
        }
        let src_addr = match p.av.is_null() {
            true => FI_ADDR_NOTAVAIL,
            // SAFETY: under the domain lock (see `Pending`).
            false => source_addr(&mut st.av_cache, unsafe { &*p.av }, t.src),
        };
        Some(Armed {
            held: false,
            context: p.context,
            flags: p.flags,
            src_addr,
            t,
        })
    }

    /// The state, once told of a receive an idle read served by its ticket (see
    /// [`IdleWatch`]'s `served`).
    #[inline]
    pub fn lock(&self) -> SerialGuard<'_, DomainState> {
        let mut st = self.state.lock();
        self.settle(&mut st);
        st
    }

    /// The state as it is: for fi_tinject*, which [`settle`](Self::settle)s right after its
    /// send.
    #[inline]
    pub fn lock_unsettled(&self) -> SerialGuard<'_, DomainState> {
        let mut st = self.state.lock();
        // A hold's answers spent eager credit the send checks: told first (the send tells a
        // served receive only after it).
        // SAFETY: `hold` is only touched under the state or FI_THREAD_DOMAIN's serialization.
        if unsafe { (*self.idle.hold.get()).is_some() } {
            self.settle_owed(&mut st);
        }
        st
    }

    /// Tells the backend and the operations in flight of a receive an idle read served by its
    /// ticket, and the backend of the idle reads answered since it last heard.
    #[inline]
    pub fn settle(&self, st: &mut DomainState) {
        // A load, not a swap: a locked instruction after every send costs a small message's
        // rate 10% (and `owed` changes only under FI_THREAD_DOMAIN's serialization).
        if self.idle.owed.load(Ordering::Relaxed) {
            self.settle_owed(st);
        }
    }

    #[cold]
    #[inline(never)]
    fn settle_owed(&self, st: &mut DomainState) {
        self.idle.owed.store(false, Ordering::Relaxed);
        // SAFETY: `owed` was set under FI_THREAD_DOMAIN (the application's one thread at a
        // time), and the caller holds the state.
        let served = unsafe { (*self.idle.served.get()).take() };
        // The receive served before a hold's run came first.
        if let Some((op, status)) = served {
            self.settle_served(st, op, status);
        }
        // SAFETY: as above.
        if let Some(h) = unsafe { (*self.idle.hold.get()).take() } {
            self.settle_hold(st, h);
        }
    }

    fn settle_served(&self, st: &mut DomainState, op: OpId, status: hx_engine::Status) {
        st.pending.remove(&op);
        st.backend.ticket_served(op, &status);
        if !st.ticket_logged {
            st.ticket_logged = true;
            tracing::debug!("hxcomm: a CQ read served a receive from its peer's lane by itself");
        }
        let answered = self.idle.answered.swap(0, Ordering::Relaxed);
        if answered > 0 {
            st.backend.idle_reads(answered);
        }
    }

    /// Tells the backend what a [`Hold`]'s run did, and posts the receive it armed last if
    /// nothing served it, where fi_trecv would have posted it.
    fn settle_hold(&self, st: &mut DomainState, h: Hold) {
        let reads = h
            .reads
            .saturating_add(self.idle.answered.swap(0, Ordering::Relaxed));
        st.backend
            .lane_hold_settled(h.lane.peer(), h.received, h.sent, reads);
        if !st.hold_logged && h.received.0 > 0 && h.sent.0 > 0 {
            st.hold_logged = true;
            tracing::debug!(
                "hxcomm: receives and answers went through a peer's lane without the domain's state"
            );
        }
        // SAFETY: FI_THREAD_DOMAIN, under the state.
        let slot = unsafe { &mut *self.idle.ticket.get() };
        let a = match slot.take() {
            Some(a) if a.held => a,
            // A receive posted the usual way (its ticket's), or none: as it is.
            other => {
                *slot = other;
                return;
            }
        };
        self.idle.generation.store(0, Ordering::Relaxed);
        if !st.hold_posted_logged {
            st.hold_posted_logged = true;
            tracing::debug!("hxcomm: a receive a hold had armed was posted after all");
        }
        tracing::trace!(
            tag = h.tag,
            len = a.t.len,
            "hxcomm: a receive a hold had armed was posted the usual way"
        );
        let p = Pending {
            context: a.context,
            ..h.pending
        };
        // SAFETY: the receive's buffer, as fi_trecv gave it (valid until it completes).
        let posted = unsafe {
            st.backend.recv(
                h.key.ep,
                true,
                h.src_filter,
                h.tag,
                h.ignore,
                a.t.buf,
                a.t.len,
            )
        };
        match posted {
            Ok(op) => st.pending.insert(op, p),
            // fi_trecv returned 0 for it: it completes, in error.
            Err(e) => deliver(
                p,
                Done {
                    op: 0,
                    is_recv: true,
                    len: 0,
                    msg_len: 0,
                    tag: h.tag,
                    data: None,
                    src: None,
                    error: Some((e.errno, e.msg)),
                },
            ),
        }
    }

    /// After fi_trecv (under the state, FI_THREAD_DOMAIN) armed the ticket of its receive
    /// `op` ([`watch_idle`](Self::watch_idle)): starts a [`Hold`] for receives like it, if
    /// the backend gives one.
    pub(crate) fn hold_start(
        &self,
        st: &mut DomainState,
        op: OpId,
        key: HoldKey,
        recv: (u64, u64, u64),
        src_filter: Option<PeerId>,
    ) {
        // SAFETY: FI_THREAD_DOMAIN, under the state.
        let Some(a) = (unsafe { &*self.idle.ticket.get() }).as_ref() else {
            return;
        };
        if a.t.op != op {
            return;
        }
        let Some(lane) = st.backend.lane_hold(&a.t) else {
            return;
        };
        let Some(pending) = st.pending.get(&op).copied() else {
            return;
        };
        let (tag, ignore, rx_flags) = recv;
        let h = Hold {
            generation: self.state.generation(),
            key,
            tag,
            ignore,
            rx_flags,
            cq: self.idle.cq.load(Ordering::Relaxed),
            lane,
            src: a.t.src,
            src_addr: a.src_addr,
            flags: a.flags,
            src_filter,
            pending,
            left: HOLD_RUN,
            received: (0, 0),
            sent: (0, 0),
            reads: 0,
        };
        // SAFETY: as above; an earlier hold was settled when the state was taken.
        unsafe { *self.idle.hold.get() = Some(h) };
        self.idle.owed.store(true, Ordering::Relaxed);
    }

    /// fi_trecv of a receive of the [`Hold`]'s run (`key`, `tag`, `ignore`, `rx_flags`), with
    /// no state taken: arms its ticket and doorbells for the next CQ reads. False: post it the
    /// usual way.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn hold_recv(
        &self,
        key: &HoldKey,
        tag: u64,
        ignore: u64,
        rx_flags: u64,
        buf: *mut u8,
        len: usize,
        context: usize,
    ) -> bool {
        // SAFETY: FI_THREAD_DOMAIN (the caller checked): the application's one thread at a
        // time touches the watch; nobody has taken the state since the hold was made (same
        // generation), so its lane and link are as they were.
        let Some(h) = (unsafe { &mut *self.idle.hold.get() }).as_mut() else {
            return false;
        };
        if h.generation != self.state.generation()
            || h.left == 0
            || h.key != *key
            || (h.tag, h.ignore, h.rx_flags) != (tag, ignore, rx_flags)
        {
            return false;
        }
        // SAFETY: as above.
        let slot = unsafe { &mut *self.idle.ticket.get() };
        // The run's last receive is still armed: this one is posted behind it, by the state.
        if slot.is_some() {
            return false;
        }
        let bells = unsafe { &mut *self.idle.bells.get() };
        // SAFETY: the engine has not been called since the hold was made (above).
        if !unsafe { h.lane.bells(bells) } {
            return false;
        }
        h.left -= 1;
        h.reads = h
            .reads
            .saturating_add(self.idle.answered.swap(0, Ordering::Relaxed));
        *slot = Some(Armed {
            held: true,
            t: Ticket {
                op: 0,
                lane: h.lane.ticket().clone(),
                buf,
                len,
                src: h.src,
            },
            context,
            flags: h.flags,
            src_addr: h.src_addr,
        });
        self.idle.cq.store(h.cq, Ordering::Relaxed);
        self.idle.generation.store(h.generation, Ordering::Relaxed);
        true
    }

    /// fi_tinject* (tagged) of the [`Hold`]'s endpoint to its address, with no state taken:
    /// through the lane, as an answer within the hold's credit. False: send it the usual way.
    #[inline]
    pub(crate) fn hold_send(
        &self,
        key: &HoldKey,
        tag: u64,
        data: Option<u64>,
        payload: &[u8],
    ) -> bool {
        // SAFETY: as in hold_recv.
        let Some(h) = (unsafe { &mut *self.idle.hold.get() }).as_mut() else {
            return false;
        };
        if h.generation != self.state.generation() || h.key != *key {
            return false;
        }
        // SAFETY: as in hold_recv.
        if !unsafe { h.lane.send(tag, data, payload) } {
            return false;
        }
        h.sent.0 += 1;
        h.sent.1 += payload.len() as u64;
        true
    }

    /// A read of `cq` that does not follow a delivery, answered without the domain's state
    /// when it can be (see [`IdleWatch`]): nothing came, or the ticket's receive was served
    /// (only with `room` for its entry).
    #[inline]
    pub fn idle_look(&self, cq: &CqShared, room: bool) -> Idle {
        let w = &self.idle;
        if !self.state.is_serial()
            || w.generation.load(Ordering::Relaxed) != self.state.generation()
            || w.cq.load(Ordering::Relaxed) != cq as *const CqShared as usize
            || !cq.queue_empty()
        {
            return Idle::Look;
        }
        let answered = w.answered.load(Ordering::Relaxed);
        if answered >= IDLE_READS {
            return Idle::Look;
        }
        // SAFETY: FI_THREAD_DOMAIN (see `watch_idle`). Nobody has taken the state since the
        // watch was made (same generation), so the backend has not touched the links the
        // doorbells belong to, nor closed them (closing takes the state).
        let bells = unsafe { &*w.bells.get() };
        if bells.iter().any(|d| unsafe { d.rung() }) {
            return match room {
                true => self.serve_ticket(),
                false => Idle::Look,
            };
        }
        w.answered.store(answered + 1, Ordering::Relaxed);
        Idle::Quiet
    }

    /// A doorbell of the watch rang: the ticket's receive takes its message, if it is the
    /// lane's and for it.
    #[inline]
    fn serve_ticket(&self) -> Idle {
        // SAFETY: FI_THREAD_DOMAIN, and the watch (with its ticket) is of the current
        // generation: see `idle_look`.
        let slot = unsafe { &mut *self.idle.ticket.get() };
        let Some(a) = slot.as_ref() else {
            return Idle::Look;
        };
        let buf: &mut [u8] = match a.t.len {
            0 => &mut [],
            // SAFETY: the receive's buffer, valid until it completes or is cancelled (which
            // takes the state).
            n => unsafe { std::slice::from_raw_parts_mut(a.t.buf, n) },
        };
        // SAFETY: the engine has not been called since the ticket was made (same generation)
        // and is told of what it took before it is (`settle` in `lock`).
        let Some(st) = (unsafe { a.t.lane.take(buf) }) else {
            return Idle::Look;
        };
        let mut flags = a.flags;
        if st.data.is_some() {
            flags |= FI_REMOTE_CQ_DATA;
        }
        let f = CqFields {
            context: a.context,
            flags,
            len: st.len,
            data: st.data.unwrap_or(0),
            tag: if a.flags & FI_TAGGED != 0 { st.tag } else { 0 },
        };
        let from = a.src_addr;
        let op = a.t.op;
        if a.held {
            // SAFETY: as above; the hold is there (its receive was armed in this generation).
            if let Some(h) = unsafe { (*self.idle.hold.get()).as_mut() } {
                h.received.0 += 1;
                h.received.1 += st.len as u64;
            }
        } else {
            // SAFETY: as above; `settle` is its only other user, under the state.
            unsafe { *self.idle.served.get() = Some((op, st)) };
        }
        *slot = None;
        self.idle.owed.store(true, Ordering::Relaxed);
        // The watch is spent: the next read looks (taking the state, which settles first).
        self.idle.generation.store(0, Ordering::Relaxed);
        Idle::Served(f, from)
    }

    fn drive(
        &self,
        how: impl FnOnce(&mut dyn Backend, &mut Vec<Done>) -> Result<(), BackendError>,
    ) -> Result<(), i32> {
        let mut st = self.lock();
        let st = &mut *st;
        let r = how(st.backend.as_mut(), &mut st.scratch);
        deliver_all(&mut st.pending, &mut st.scratch);
        r.map_err(progress_error)
    }
}

/// A receive the backend served for a read of `cq` ([`Backend::serve_first`],
/// [`Backend::poll_express`]): its entry goes to `emit` as entry `n` of the read (true), or to
/// its own CQ's queue (another CQ's: ours stays empty, so what is emitted here keeps its
/// order), or nowhere (selective completion).
#[inline(always)]
fn emit_served(
    st: &mut DomainState,
    cq: &CqShared,
    s: Served,
    n: usize,
    emit: &mut impl FnMut(usize, &CqFields, Option<(&AvShared, PeerId)>),
) -> bool {
    let Some(p) = st.pending.remove(&s.op) else {
        return false;
    };
    if !std::ptr::eq(p.cq, cq) {
        deliver(p, s.done());
        return false;
    }
    if p.report != Report::Always {
        return false;
    }
    let f = fields(&p, true, s.len, s.data, s.tag);
    // SAFETY: under the domain lock (see `Pending`).
    let src = source(&p, s.src).map(|(av, peer)| (unsafe { &*av }, peer));
    emit(n, &f, src);
    true
}

/// A CQ read's drive without the shortcut: collects, then (`poll`) makes a round if `cq` is
/// still empty.
fn drive_read_round(st: &mut DomainState, cq: &CqShared, poll: bool) -> Result<Drive, i32> {
    let mut r = st.backend.collect(&mut st.scratch);
    deliver_all(&mut st.pending, &mut st.scratch);
    if r.is_ok() && poll && cq.queue_empty() {
        r = st.backend.progress(&mut st.scratch);
        deliver_all(&mut st.pending, &mut st.scratch);
    }
    r.map_err(progress_error).map(|()| Drive::Queue)
}

fn deliver_all(pending: &mut PendingMap, done: &mut Vec<Done>) {
    for d in done.drain(..) {
        if let Some(p) = pending.remove(&d.op) {
            deliver(p, d);
        }
    }
}

fn progress_error(e: BackendError) -> i32 {
    warn(FI_LOG_DOMAIN, &format!("progress: {}", e.msg));
    e.errno
}

/// Queues the entry of a finished operation on its CQ. Under the domain lock (see `Pending`).
fn deliver(p: Pending, d: Done) {
    let Some((cq, mut e, src)) = entry_of(p, d) else {
        return;
    };
    if cq.is_null() {
        return;
    }
    // SAFETY: under the domain lock, the pointers of a pending operation are valid (see
    // `Pending`); `av` came from `Arc::as_ptr`.
    unsafe {
        e.src = src.map(|(av, peer)| {
            Arc::increment_strong_count(av);
            (Arc::from_raw(av), peer)
        });
        (*cq).push(e);
    }
}

/// The fields of a finished operation's CQ entry, as every format writes them.
pub struct CqFields {
    pub context: usize,
    pub flags: u64,
    pub len: usize,
    pub data: u64,
    pub tag: u64,
}

fn fields_of(p: &Pending, d: &Done) -> CqFields {
    fields(p, d.is_recv, d.len, d.data, d.tag)
}

/// The CQ fields of an operation of `p` that finished with `len` bytes (a receive: with its
/// message's data and tag).
fn fields(p: &Pending, is_recv: bool, len: usize, data: Option<u64>, tag: u64) -> CqFields {
    let mut flags = p.flags;
    if is_recv && data.is_some() {
        flags |= FI_REMOTE_CQ_DATA;
    }
    CqFields {
        context: p.context,
        flags,
        len,
        data: if is_recv { data.unwrap_or(0) } else { 0 },
        tag: if is_recv && p.flags & FI_TAGGED != 0 {
            tag
        } else {
            0
        },
    }
}

/// Where a finished operation's source is named: its AV and peer.
type Src = Option<(*const AvShared, PeerId)>;

fn src_of(p: &Pending, d: &Done) -> Src {
    source(p, d.src)
}

/// The source `src` of an operation of `p`, named through its AV if it has one.
fn source(p: &Pending, src: Option<PeerId>) -> Src {
    match src {
        Some(peer) if !p.av.is_null() => Some((p.av, peer)),
        _ => None,
    }
}

/// The CQ entry of a finished operation (without its source), the CQ it goes to and its
/// source; None when it reports nothing.
fn entry_of(p: Pending, d: Done) -> Option<(*const CqShared, Entry, Src)> {
    let f = fields_of(&p, &d);
    let src = src_of(&p, &d);
    let mut e = Entry {
        context: f.context,
        flags: f.flags,
        len: f.len,
        data: f.data,
        tag: f.tag,
        src: None,
        err: None,
    };
    match d.error {
        None if p.report != Report::Always => return None,
        None => {}
        Some((errno, msg)) => {
            // A failure without a context (fi_inject, Open MPI's Ssend ACK) cannot be matched
            // to anything by the application (Open MPI crashes on it): log it instead.
            if p.report == Report::Never || p.context == 0 {
                warn(
                    FI_LOG_EP_DATA,
                    &format!("operation without completion failed: {msg}"),
                );
                return None;
            }
            e.err = Some((errno, d.msg_len.saturating_sub(d.len), msg));
        }
    }
    Some((p.cq, e, src))
}

/// HX_* settings and the auth key for a backend.
pub fn backend_config(auth_key: Option<Vec<u8>>) -> Result<BackendConfig, String> {
    Ok(BackendConfig {
        settings: crate::settings::settings_env()?,
        auth_key,
    })
}

static DOMAIN_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(domain_close),
    bind: Some(crate::fabric::enosys_bind),
    control: Some(enosys_control),
    ops_open: Some(enosys_ops_open),
    tostr: None,
    ops_set: None,
};

static DOMAIN_OPS: fi_ops_domain = fi_ops_domain {
    size: std::mem::size_of::<fi_ops_domain>(),
    av_open: Some(crate::av::hx_av_open),
    cq_open: Some(crate::cq::hx_cq_open),
    endpoint: Some(crate::ep::hx_endpoint),
    scalable_ep: Some(enosys_scalable_ep),
    cntr_open: Some(enosys_cntr_open),
    poll_open: Some(enosys_poll_open),
    stx_ctx: Some(enosys_stx),
    srx_ctx: Some(enosys_srx),
    query_atomic: Some(query_atomic),
    query_collective: Some(enosys_query_collective),
    endpoint2: Some(endpoint2),
};

static MR_OPS: fi_ops_mr = fi_ops_mr {
    size: std::mem::size_of::<fi_ops_mr>(),
    reg: Some(mr_reg),
    regv: Some(mr_regv),
    regattr: Some(mr_regattr),
};

pub unsafe extern "C" fn hx_domain(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    if fabric.is_null() || info.is_null() || dom.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let da = (*info).domain_attr.as_ref();
        if let Some(n) = da.and_then(|d| opt_cstr(d.name)) {
            if n != DOMAIN_NAME {
                warn(
                    FI_LOG_DOMAIN,
                    &format!("fi_domain: domain {n:?} is not {DOMAIN_NAME:?}"),
                );
                return Err(FI_EINVAL);
            }
        }
        let auth_key = da.and_then(|d| {
            (!d.auth_key.is_null() && d.auth_key_size > 0)
                .then(|| std::slice::from_raw_parts(d.auth_key, d.auth_key_size).to_vec())
        });
        let cfg = backend_config(auth_key).map_err(|e| {
            warn(FI_LOG_DOMAIN, &format!("fi_domain: {e}"));
            FI_EINVAL
        })?;
        let backend = new_backend(&cfg).map_err(|e| {
            let why = e.msg.trim_start_matches("hxcomm: ");
            crate::util::fatal(FI_LOG_DOMAIN, &format!("fi_domain: {why}"));
            e.errno
        })?;
        // Asked for FI_RMA or FI_ATOMIC: registrations become regions peers may read and write.
        let regions = ((*info).caps & (FI_RMA | FI_ATOMIC) != 0)
            .then(|| Arc::new(crate::mr::RegionTable::new(da.map_or(0, |d| d.mr_mode))));
        let mut backend = backend;
        if let Some(t) = &regions {
            backend.set_regions(t.clone()).map_err(|e| {
                warn(FI_LOG_DOMAIN, &format!("fi_domain: {}", e.msg));
                e.errno
            })?;
        }
        let f = fabric as *mut Fabric;
        let d = Box::new(DomainObj {
            fid: fid_domain {
                fid: fid {
                    fclass: FI_CLASS_DOMAIN,
                    context,
                    ops: ptr(&DOMAIN_FI_OPS),
                },
                ops: ptr(&DOMAIN_OPS),
                mr: ptr(&MR_OPS),
            },
            fabric: f,
            d: DomainShared::new(
                backend,
                (*fabric).api_version,
                da.is_some_and(|d| d.threading == FI_THREAD_DOMAIN),
            ),
            children: AtomicUsize::new(0),
            regions,
        });
        (&*f).domains.fetch_add(1, Ordering::AcqRel);
        *dom = &mut Box::leak(d).fid;
        Ok(0)
    })
}

unsafe extern "C" fn domain_close(f: *mut fid) -> c_int {
    if f.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let d = f as *mut DomainObj;
        if (&*d).children.load(Ordering::Acquire) != 0 {
            return Err(FI_EBUSY);
        }
        (&*(*d).fabric).domains.fetch_sub(1, Ordering::AcqRel);
        // Operations still posted (a receive nobody will match) hold their AV, which holds the
        // domain: forget them, so that the domain, and with it the engine, really goes (and
        // says Bye to its peers) when this last handle does.
        let dom = Box::from_raw(d);
        dom.d.lock().pending.clear();
        drop(dom);
        Ok(0)
    })
}

/// The domain object behind a `struct fid_domain *` we created.
pub unsafe fn from_fid<'a>(d: *mut fid_domain) -> &'a DomainObj {
    &*(d as *const DomainObj)
}

unsafe extern "C" fn endpoint2(
    d: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return -FI_EBADFLAGS;
    }
    crate::ep::hx_endpoint(d, info, ep, context)
}

// ---- memory registration: see mr.rs. Without FI_RMA a no-op (key 0, desc NULL), accepted
// so applications that register anyway work; with it, regions peers may read and write.

#[repr(C)]
struct MrObj {
    fid: fid_mr,
    domain: *mut DomainObj,
    /// Its entry in the domain's table, removed when it closes.
    key: Option<u64>,
}

static MR_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(mr_close),
    bind: Some(mr_bind),
    control: Some(mr_control),
    ops_open: Some(enosys_ops_open),
    tostr: None,
    ops_set: None,
};

unsafe fn new_mr(
    f: *mut fid,
    pieces: &[(u64, usize)],
    access: u64,
    requested_key: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> Result<i32, i32> {
    if f.is_null() || mr.is_null() || (*f).fclass != FI_CLASS_DOMAIN {
        return Err(FI_EINVAL);
    }
    let d = f as *mut DomainObj;
    let key = match &(*d).regions {
        Some(t) => Some(t.register(pieces, access, requested_key).inspect_err(|_| {
            warn(
                FI_LOG_DOMAIN,
                &format!("fi_mr_reg: key {requested_key:#x} is already registered"),
            )
        })?),
        None => None,
    };
    let m = Box::new(MrObj {
        fid: fid_mr {
            fid: fid {
                fclass: FI_CLASS_MR,
                context,
                ops: ptr(&MR_FI_OPS),
            },
            mem_desc: std::ptr::null_mut(),
            key: key.unwrap_or(0),
        },
        domain: d,
        key,
    });
    (&*d).children.fetch_add(1, Ordering::AcqRel);
    *mr = &mut Box::leak(m).fid;
    Ok(0)
}

/// The (address, length) pieces of `count` iovecs.
unsafe fn pieces(iov: *const libc::iovec, count: usize) -> Result<Vec<(u64, usize)>, i32> {
    if count > crate::hints::MR_IOV_LIMIT || (count > 0 && iov.is_null()) {
        return Err(FI_EINVAL);
    }
    Ok((0..count)
        .map(|i| {
            let v = &*iov.add(i);
            (v.iov_base as u64, v.iov_len)
        })
        .collect())
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn mr_reg(
    f: *mut fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    _offset: u64,
    key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    ret_int(|| new_mr(f, &[(buf as u64, len)], access, key, mr, context))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn mr_regv(
    f: *mut fid,
    iov: *const libc::iovec,
    count: usize,
    access: u64,
    _offset: u64,
    key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    ret_int(|| new_mr(f, &pieces(iov, count)?, access, key, mr, context))
}

unsafe extern "C" fn mr_regattr(
    f: *mut fid,
    attr: *const fi_mr_attr,
    _flags: u64,
    mr: *mut *mut fid_mr,
) -> c_int {
    if attr.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let a = &*attr;
        let p = pieces(a.mr_iov, a.iov_count)?;
        new_mr(f, &p, a.access, a.requested_key, mr, a.context)
    })
}

unsafe extern "C" fn mr_close(f: *mut fid) -> c_int {
    if f.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let m = Box::from_raw(f as *mut MrObj);
        let dom = &*m.domain;
        if let (Some(key), Some(t)) = (m.key, &dom.regions) {
            // Under the domain's state, where peers' accesses are resolved and served: none
            // finds the region after this, and those under way let go of its memory.
            let mut st = dom.d.lock();
            t.deregister(key);
            st.backend.release_region(key);
        }
        (&*m.domain).children.fetch_sub(1, Ordering::AcqRel);
        Ok(0)
    })
}

unsafe extern "C" fn mr_bind(_: *mut fid, _: *mut fid, _: u64) -> c_int {
    0
}

unsafe extern "C" fn mr_control(_: *mut fid, cmd: c_int, _: *mut c_void) -> c_int {
    if cmd == FI_ENABLE {
        0
    } else {
        -FI_ENOSYS
    }
}

unsafe extern "C" fn enosys_scalable_ep(
    _: *mut fid_domain,
    _: *mut fi_info,
    _: *mut *mut fid_ep,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn enosys_cntr_open(
    _: *mut fid_domain,
    _: *mut c_void,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn enosys_poll_open(
    _: *mut fid_domain,
    _: *mut c_void,
    _: *mut *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn enosys_stx(
    _: *mut fid_domain,
    _: *mut fi_tx_attr,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn enosys_srx(
    _: *mut fid_domain,
    _: *mut fi_rx_attr,
    _: *mut *mut fid_ep,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
/// fi_query_atomic: what fi_atomicvalid and its fetch (FI_FETCH_ATOMIC) and compare
/// (FI_COMPARE_ATOMIC) forms would say, with the element's size.
pub(crate) unsafe extern "C" fn query_atomic(
    d: *mut fid_domain,
    datatype: c_int,
    op: c_int,
    attr: *mut fi_atomic_attr,
    flags: u64,
) -> c_int {
    if d.is_null() || attr.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        use crate::ep::AtomicFamily;
        if flags & !(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC) != 0 {
            return Err(FI_EBADFLAGS);
        }
        let family = match flags {
            0 => AtomicFamily::Write,
            FI_FETCH_ATOMIC => AtomicFamily::Fetch,
            FI_COMPARE_ATOMIC => AtomicFamily::Compare,
            _ => return Err(FI_EINVAL),
        };
        let (_, ty) = crate::ep::atomic_kind(family, datatype, op)?;
        *attr = fi_atomic_attr {
            count: crate::ep::ATOMIC_COUNT,
            size: ty.width(),
        };
        Ok(0)
    })
}
unsafe extern "C" fn enosys_query_collective(
    _: *mut fid_domain,
    _: c_int,
    _: *mut c_void,
    _: u64,
) -> c_int {
    -FI_ENOSYS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(context: usize) -> Pending {
        Pending {
            cq: std::ptr::null(),
            av: std::ptr::null(),
            context,
            flags: FI_RECV,
            report: Report::Always,
            ep: (context % 3) as u16,
        }
    }

    fn domain(serial: bool) -> Arc<DomainShared> {
        let b = crate::mock::MockBackend::new(&BackendConfig {
            settings: vec![],
            auth_key: None,
        })
        .unwrap();
        DomainShared::new(Box::new(b), fi_version(1, 17), serial)
    }

    #[test]
    fn both_locks_give_the_state_to_one_caller_at_a_time() {
        for serial in [false, true] {
            let d = domain(serial);
            d.state.lock().pending.insert(1, pending(1));
            // Released at the end of each statement: the next lock gets it.
            assert_eq!(
                d.state.lock().pending.remove(&1).map(|p| p.context),
                Some(1)
            );
            // A second thread that calls while the state is held waits for it (under
            // FI_THREAD_DOMAIN that breaks the application's promise: best effort, said once).
            let held = d.state.lock();
            let d2 = d.clone();
            let t = std::thread::spawn(move || {
                d2.state.lock().pending.insert(2, pending(2));
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(
                !t.is_finished(),
                "serial={serial}: the second caller did not wait"
            );
            drop(held);
            t.join().unwrap();
            assert_eq!(
                d.state.lock().pending.remove(&2).map(|p| p.context),
                Some(2)
            );
        }
    }

    #[test]
    fn a_kept_operation_completes_again_and_goes_with_its_endpoint() {
        let mut m = PendingMap::default();
        m.insert(1, pending(10));
        m.insert_kept(99, pending(4)); // endpoint 1
        m.insert(2, pending(11));
        for _ in 0..3 {
            assert_eq!(m.remove(&99).map(|p| p.context), Some(4));
        }
        // The queue's own order is untouched: its front is still found first.
        assert_eq!(m.remove(&1).map(|p| p.context), Some(10));
        assert!(
            m.find(|p| p.context == 4).is_none(),
            "not a receive to cancel"
        );
        m.retain(|_, p| p.ep != 1);
        assert!(m.remove(&99).is_none());
        m.insert_kept(98, pending(5));
        m.clear();
        assert!(m.remove(&98).is_none() && m.remove(&2).is_none());
    }

    #[test]
    fn pending_map_finds_every_operation_once() {
        let mut m = PendingMap::default();
        // More than the queue holds, so some are hashed.
        for op in 0..(RECENT as u64 + 40) {
            m.insert(op * 7, pending(op as usize));
        }
        let take = |m: &mut PendingMap, op: u64| m.remove(&(op * 7)).map(|p| p.context);
        // Front, back, middle of the queue, then hashed ones; each once.
        assert_eq!(take(&mut m, 0), Some(0));
        assert_eq!(take(&mut m, RECENT as u64 - 1), Some(RECENT - 1));
        assert_eq!(take(&mut m, 10), Some(10));
        assert_eq!(take(&mut m, 10), None);
        assert_eq!(take(&mut m, RECENT as u64 + 5), Some(RECENT + 5));
        assert_eq!(take(&mut m, RECENT as u64 + 5), None);
        assert!(m.remove(&3).is_none());
        assert_eq!(
            m.find(|p| p.context == RECENT + 6),
            Some((RECENT as u64 + 6) * 7)
        );
        m.retain(|_, p| p.ep != 1);
        let mut left = 0;
        for op in 0..(RECENT as u64 + 40) {
            if let Some(c) = take(&mut m, op) {
                assert_eq!(c, op as usize);
                assert_ne!(c % 3, 1, "retain kept {c}");
                left += 1;
            }
        }
        // 104 inserted, 3 + 1 taken, the ep-1 ones (every third) dropped by retain.
        let expected = (0..(RECENT + 40))
            .filter(|c| ![0, RECENT - 1, 10, RECENT + 5].contains(c) && c % 3 != 1)
            .count();
        assert_eq!(left, expected);
        m.insert(1, pending(1));
        m.clear();
        assert_eq!(m.remove(&1).map(|p| p.context), None);
    }
}
