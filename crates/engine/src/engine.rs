//! The engine proper: the progress loop and the messaging API. Connections are in `conn`.

use std::collections::HashMap;
use std::io::{ErrorKind, IoSlice};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::{Duration, Instant};

use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::uio::{process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;

use hx_bootstrap::{Bootstrap, Secret};
use hx_protocol::{Buffer, Completion, Core, DirectWrite, EpId, Filter, Rank, ReqId, Status};
use hx_transport::shm::{self, ShmListener};
use hx_transport::tcp::{self, RailOptions};
use hx_transport::Peeked;
use hx_wire::{Address, RailIp, ADDRESS_LEN, ADDRESS_MAX_RAILS, ADDR_FLAG_SHM};
use tracing::{debug, info, warn};

use crate::buf::EngineBuf;
use crate::conn::{Connecting, PeerSlot, PendingConn, ShmIn, ShmOut};
use crate::error::io_err;
use crate::poller::{self, Poller};
use crate::setup;
use crate::{Error, Settings};

/// Endpoint id reserved for the engine's own barrier.
pub const BARRIER_EP: EpId = u16::MAX;

pub(crate) const T_LINK: u64 = 1 << 62;
pub(crate) const T_LISTEN: u64 = 2 << 62;
pub(crate) const T_PENDING: u64 = 3 << 62;
pub(crate) const T_MASK: u64 = 3 << 62;
/// Sub-kinds under T_LISTEN: outgoing TCP handshakes, the shared-memory listener, and
/// shared-memory handshakes in both directions.
pub(crate) const T_CONNECT: u64 = T_LISTEN | 1 << 61;
pub(crate) const T_SHM_LISTEN: u64 = T_LISTEN | 1 << 60;
pub(crate) const T_SHM_CONNECT: u64 = T_LISTEN | 1 << 59;
pub(crate) const T_SHM_ACCEPT: u64 = T_LISTEN | 1 << 58;
/// The engine's own eventfd: written to make the fd readable for a caller about to sleep.
pub(crate) const T_KICK: u64 = T_LISTEN | 1 << 57;
/// How often the engine looks after rails (reconnects, timeouts) while it is being called.
const HOUSEKEEPING: Duration = Duration::from_millis(50);
/// At most this many socket links are read directly while spinning (each read is a syscall).
const SPIN_READ_LINKS: usize = 2;
/// Above this many bytes in flight, waiting calls sleep in epoll rather than spin.
const BULK_SLEEP: usize = 256 * 1024;
/// A sleep for bulk data that ends sooner than this (the wakeup included) saved nothing: the
/// data was there again at once, as where the CPU and not the wire is the limit. On a
/// 1 Gbit/s rail a sleep lasts until a mark's worth has come (64 KiB: ~0.5 ms per rail).
const BULK_SLEEP_SHORT: Duration = Duration::from_micros(50);
/// A run of short sleeps this long, receiving at least [`BULK_FAST_BYTES_PER_S`], has the
/// waiting call try spinning. Four 1 Gbit/s rails bring 0.5 GB/s at most: they never do.
const BULK_SHORT_RUN: Duration = Duration::from_millis(2);
const BULK_FAST_BYTES_PER_S: f64 = 1e9;
/// Each way of waiting is tried this long, and the bytes received in it compared.
const BULK_TRIAL: Duration = Duration::from_millis(20);
/// The way that received more (spinning must win by [`BULK_SPIN_GAIN`]) is kept this long,
/// then tried again: the machine's state changes on the scale of seconds. Each time sleeping
/// wins again, it is kept twice as long, up to [`BULK_KEEP_MAX`].
const BULK_KEEP: Duration = Duration::from_millis(200);
const BULK_KEEP_MAX: Duration = Duration::from_secs(5);
/// Spinning, when it wins, is kept longer: a sleeping trial lets the sockets fill again.
const BULK_KEEP_SPIN: Duration = Duration::from_secs(1);
const BULK_SPIN_GAIN: f64 = 1.05;

/// How a waiting call waits while bulk data is in flight ([`Engine::wait_until`],
/// [`Engine::progress_polled`]): it sleeps in epoll, unless sleeping does not pay. Over fast
/// links sleeps end within microseconds, and a receiver that sleeps lets unread data pile up
/// in its sockets (1-1.8 MB per rail): 4 MiB one way over 4 unlimited testbed rails ran at
/// ~6.3 GB/s, against ~8.5 with the receiver spinning. With the two vCPUs far apart, though,
/// a spinning receiver was the slower (BENCHMARKS.md, "Forty-fifth session"). So after 2 ms of
/// short sleeps that received at least 1 GB/s, the judge tries both ways, 20 ms each, keeps the
/// one that received more (spinning for 1 s; sleeping for 200 ms, twice as long each time it
/// wins again, up to 5 s), and tries again. A rank that only sends receives little, and sleeps.
#[derive(Debug, Default)]
struct BulkSleepJudge {
    /// Start of the current run of short sleeps, and the bytes received by then.
    run: Option<(Instant, u64)>,
    /// How long sleeping is kept when it wins (0: [`BULK_KEEP`]).
    keep: Duration,
    phase: BulkPhase,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum BulkPhase {
    /// Sleeping, counting short sleeps.
    #[default]
    Sleep,
    /// Trying to spin since `since`, with `bytes` received then.
    TrySpin { since: Instant, bytes: u64 },
    /// Trying to sleep again, after spinning received at `spin_rate` bytes a second.
    TrySleep {
        since: Instant,
        bytes: u64,
        spin_rate: f64,
    },
    /// Spinning won: spin until then.
    Spin { until: Instant },
    /// Sleeping won: sleep until then without counting short sleeps.
    Hold { until: Instant },
}

fn rate(bytes: u64, since_bytes: u64, took: Duration) -> f64 {
    bytes.saturating_sub(since_bytes) as f64 / took.as_secs_f64().max(1e-9)
}

impl BulkSleepJudge {
    /// May a waiting call sleep for bulk data now, `bytes` having been received in all?
    fn sleep_pays(&mut self, now: Instant, bytes: u64) -> bool {
        match self.phase {
            BulkPhase::Sleep => true,
            BulkPhase::TrySpin { since, bytes: b0 } => {
                if now.duration_since(since) < BULK_TRIAL {
                    return false;
                }
                let spin_rate = rate(bytes, b0, now.duration_since(since));
                self.phase = BulkPhase::TrySleep {
                    since: now,
                    bytes,
                    spin_rate,
                };
                true
            }
            BulkPhase::TrySleep {
                since,
                bytes: b0,
                spin_rate,
            } => {
                if now.duration_since(since) < BULK_TRIAL {
                    return true;
                }
                let sleep_rate = rate(bytes, b0, now.duration_since(since));
                let spin = spin_rate > sleep_rate * BULK_SPIN_GAIN;
                let keep = if spin {
                    self.keep = BULK_KEEP;
                    self.phase = BulkPhase::Spin {
                        until: now + BULK_KEEP_SPIN,
                    };
                    BULK_KEEP_SPIN
                } else {
                    self.keep = (self.keep * 2).clamp(BULK_KEEP, BULK_KEEP_MAX);
                    self.phase = BulkPhase::Hold {
                        until: now + self.keep,
                    };
                    self.keep
                };
                tracing::debug!(
                    "bulk waits: spinning received {:.2} GB/s, sleeping {:.2}: {} for {} ms",
                    spin_rate / 1e9,
                    sleep_rate / 1e9,
                    if spin { "spinning" } else { "sleeping" },
                    keep.as_millis()
                );
                !spin
            }
            BulkPhase::Spin { until } => {
                if now >= until {
                    self.phase = BulkPhase::TrySpin { since: now, bytes };
                }
                false
            }
            BulkPhase::Hold { until } => {
                if now >= until {
                    self.run = None;
                    self.phase = BulkPhase::Sleep;
                }
                true
            }
        }
    }

    /// Spinning for now (unless the clock says otherwise: [`sleep_pays`](Self::sleep_pays)).
    fn spinning(&self) -> bool {
        matches!(
            self.phase,
            BulkPhase::TrySpin { .. } | BulkPhase::Spin { .. }
        )
    }

    /// A sleep for bulk data took `took` and ended `now`, `bytes` having been received in all.
    fn slept(&mut self, took: Duration, now: Instant, bytes: u64) {
        if self.phase != BulkPhase::Sleep {
            return;
        }
        if took >= BULK_SLEEP_SHORT {
            self.run = None;
            return;
        }
        let (since, b0) = *self.run.get_or_insert((now, bytes));
        let span = now.duration_since(since);
        if span < BULK_SHORT_RUN {
            return;
        }
        self.run = None;
        let r = rate(bytes, b0, span);
        if r >= BULK_FAST_BYTES_PER_S {
            tracing::debug!(
                "bulk waits: {} ms of short sleeps received {:.2} GB/s: trying spinning, then sleeping",
                span.as_millis(),
                r / 1e9
            );
            self.phase = BulkPhase::TrySpin { since: now, bytes };
        }
    }
}

/// A caller that polls in a loop ([`Engine::progress_polled`]) or spins in a waiting call and
/// finds nothing to do gives the CPU away (sched_yield) every this many idle rounds when a
/// round is a syscall on sockets (~0.5-1 us: a yield every ~50 us), and every
/// [`COURTESY_YIELD_POLLS`] when it looks at shared memory (~20-50 ns a round). A rank woken
/// onto the CPU of a spinning one (the scheduler places a wakee beside its waker) otherwise
/// waits for the spinner's time slice: a tick, 4 ms at HZ=250, twice per turn of a bandwidth
/// test's window on the testbed. A yield with nobody waiting returns at once.
const COURTESY_YIELD_SOCKET_POLLS: u32 = 64;
const COURTESY_YIELD_POLLS: u32 = 1024;
// Powers of two: the idle path tests a mask, not a division.
const _: () = assert!(
    COURTESY_YIELD_SOCKET_POLLS.is_power_of_two() && COURTESY_YIELD_POLLS.is_power_of_two()
);
/// Bytes of direct copies (rendezvous messages written straight into a receiver's memory on
/// this host) after which a round makes no more: whole messages, at least one.
const DIRECT_COPY_BUDGET: usize = 1 << 20;
/// Bytes of finished direct copies whose FINs may wait for the copies still queued to the same
/// receivers.
const FIN_HOLD: usize = 16 << 20;
/// While much bulk data is queued, rail sockets hold up to this many times HX_NOTSENT_LOWAT
/// unsent (1 MiB by default): a sender sleeping on a wire-limited rail then wakes once per
/// ~0.5-1 MiB drained, as a blocking writer (iperf3) does, instead of once per ~128 KiB.
const BULK_LOWAT_FACTOR: u32 = 8;
/// ... but only while at least this many raised marks' worth of data is queued per socket rail,
/// so that a rail never commits more than a small part of what is left to it (the tail of a
/// transfer is shared out at the configured mark, by the rails' actual pace).
const BULK_LOWAT_QUEUE: usize = 4;
/// Rounds a blocking receive spins on shared memory by itself ([`Engine::recv_express`]) before
/// it posts a receive and waits as usual: ~10 us, far less than the default spin time.
const EXPRESS_ROUNDS: u32 = 1024;
/// The same for a receive whose express look reads sockets (a recv syscall each, ~0.2-0.5 us):
/// a round trip of a small message over a fast rail, well within the spin time.
const EXPRESS_SOCKET_ROUNDS: u32 = 128;
/// With a spin time shorter than this (HX_SPIN_US), receives do not spin by themselves.
const EXPRESS_MIN_SPIN: Duration = Duration::from_micros(20);
/// A socket rail whose current payload has at least this much still to come is readable only
/// once all of it (up to [`RCVLOWAT_MAX`]) is there: a receiver asleep on a wire-limited rail
/// wakes once per chunk instead of once per burst of segments (every ~64 KiB at 1 Gbit/s).
const RCVLOWAT_MIN: usize = 64 * 1024;
const RCVLOWAT_MAX: usize = 1024 * 1024;
/// A rail that fills a mark faster than this (bytes a second, with the wakeup) outruns what a
/// mark saves: the reader would have woken a few times per payload at most, and waiting for all
/// of it kept it from copying while the rest arrived (4 unlimited rails, 128-512 KiB one way:
/// 3-10% slower with marks). 1 GB/s: a 1 Gbit/s rail fills 64 KiB in ~550 us, veth here
/// in ~10-20.
const RCVLOWAT_FAST_BYTES_PER_S: f64 = 1e9;
/// Did a mark of `bytes` fill (and wake us) faster than marks pay ([`RCVLOWAT_FAST_BYTES_PER_S`])?
fn filled_too_fast(bytes: u32, took: Duration) -> bool {
    bytes as f64 > RCVLOWAT_FAST_BYTES_PER_S * took.as_secs_f64()
}

/// How long a fast rail goes without marks before it is measured again.
const RCVLOWAT_OFF_FOR: Duration = Duration::from_millis(100);

/// A nonblocking operation in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request(pub(crate) ReqId);

impl Request {
    pub fn to_u64(self) -> u64 {
        self.0.to_u64()
    }
    pub fn from_u64(v: u64) -> Self {
        Request(ReqId::from_u64(v))
    }
}

/// What one look for an express receive found ([`Engine::try_recv_express`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Express {
    /// The message, copied into the caller's buffer.
    Taken(Status),
    /// Nothing arrived and nothing else is in flight.
    Empty,
    /// Something else needs a full engine round.
    Other,
}

/// One process's communication engine.
pub struct Engine {
    pub(crate) core: Core<EngineBuf>,
    /// Per peer (by core peer number), per rail: everything about connections.
    pub(crate) peers: Vec<PeerSlot>,
    pub(crate) by_instance: HashMap<u64, Rank>,
    /// This process's address (endpoint 0).
    pub(crate) addr: Address,
    /// Device names of `addr.rails`, in the same order.
    pub(crate) devices: Vec<String>,
    /// This host's place in the hyper-crossbar, with HX_TOPOLOGY.
    pub(crate) place: Option<setup::Place>,
    /// Accept connections from processes not introduced by `insert` or the bootstrap.
    pub(crate) open_to_unknown: bool,
    pub(crate) poller: Poller,
    /// Makes `poller` readable on demand (see [`arm_for_wait`](Self::arm_for_wait)).
    kick: EventFd,
    /// Direct copies made whose FINs wait for the copies still queued to their receivers
    /// (flush_dirty_peers).
    fins_held: Vec<DirectWrite>,
    pub(crate) listeners: Vec<(TcpListener, String)>,
    pub(crate) pending: Vec<Option<PendingConn>>,
    pub(crate) backlog_waiting: bool,
    /// Shared-memory connections wait in the listener's backlog: every handshake slot is taken.
    pub(crate) shm_backlog_waiting: bool,
    pub(crate) connecting: Vec<Option<Connecting>>,
    pub(crate) shm_listener: Option<ShmListener>,
    /// HX_SHM_PREFAULT, shared by the listener and every connector.
    pub(crate) shm_prefault: std::sync::Arc<shm::PrefaultBudget>,
    pub(crate) shm_out: Vec<Option<ShmOut>>,
    pub(crate) shm_in: Vec<Option<ShmIn>>,
    pub(crate) ptracer_set: bool,
    pub(crate) secret: Secret,
    bootstrap: Option<Box<dyn Bootstrap>>,
    pub(crate) settings: Settings,
    pub(crate) rail_opts: RailOptions,
    dirty: Vec<Rank>,
    events: Vec<poller::Event>,
    endpoints: Vec<EpId>,
    barrier_round: u64,
    pub(crate) finalizing: bool,
    /// Links read and written every round (shared memory), as (peer, rail).
    pub(crate) polled: Vec<(Rank, usize)>,
    /// Connected socket links (peer, rail): while spinning on only a few, they are read
    /// directly instead of asking epoll first.
    pub(crate) sockets: Vec<(Rank, usize)>,
    spins: u32,
    /// Poll rounds, to look at the clock only now and then while idle.
    rounds: u32,
    /// Consecutive idle rounds of [`progress_polled`](Self::progress_polled).
    idle_polls: u32,
    /// Blocking receives that tried the express path ([`recv_express`](Self::recv_express)).
    express_calls: u32,
    /// HX_TCP_CONGESTION_LATENCY while rail sockets may switch algorithms (None once the kernel
    /// refused it).
    pub(crate) latency_cc: Option<String>,
    /// A rail socket got a smaller send buffer than HX_SNDBUF (said once).
    pub(crate) send_buffer_warned: bool,
    /// A rail socket got a smaller receive buffer than HX_RCVBUF (said once).
    pub(crate) receive_buffer_warned: bool,
    /// Socket rails whose TCP_NOTSENT_LOWAT is raised for bulk data ([`tune_lowat`](Self::tune_lowat)).
    pub(crate) raised_lowat: usize,
    /// The engine sleeps in epoll while bulk data comes and goes (rather than spinning): socket
    /// rails' SO_RCVLOWAT follows large payloads then ([`tune_rcvlowat`](Self::tune_rcvlowat)).
    bulk_asleep: bool,
    /// Whether sleeping for bulk data pays now (over fast links it may not).
    bulk_sleep: BulkSleepJudge,
    /// Bytes read from socket rails, for the judge's trials.
    rx_bytes: u64,
    next_housekeeping: Instant,
    /// The clock the protocol core is given (microseconds since this instant).
    created: Instant,
    rail_failures: u64,
}

/// The error of a call on an endpoint that is not open (cold: kept out of every send's path).
#[cold]
#[inline(never)]
fn ep_not_open(ep: EpId) -> Error {
    Error::Invalid(format!("endpoint {ep} is not open"))
}

/// The shared-memory link of `rail` to `peer`, for its lane (None for other links).
#[inline]
fn shm_link(
    peers: &mut [crate::conn::PeerSlot],
    peer: Rank,
    rail: usize,
) -> Option<&mut shm::ShmLink> {
    peers
        .get_mut(peer as usize)
        .filter(|p| p.shm)
        .and_then(|p| p.rails.get_mut(rail))
        .and_then(|r| r.link.as_mut())
        .and_then(|l| l.shm())
}

/// An express receive's claim on the next message of a same-host peer's lane
/// ([`Engine::lane_ticket`]): taken without the engine, which hears of it afterwards. It points
/// into the peer's link, which only the engine's own calls change or drop.
#[derive(Clone)]
pub struct LaneTicket {
    link: std::ptr::NonNull<shm::ShmLink>,
    peer: Rank,
    ep: EpId,
    filter: Filter,
}

// SAFETY: a pointer into the engine's link, followed only by `take`, whose contract keeps the
// engine (which is Send) from using the link meanwhile.
unsafe impl Send for LaneTicket {}

impl LaneTicket {
    /// Takes the lane's next message into `buf` if the ticket's receive takes it whole, as
    /// [`Engine::try_lane_express`] would have: its status, which the engine must hear
    /// ([`Engine::lane_ticket_taken`]) before it is called for anything else. None, having
    /// changed nothing: the lane is empty, or its message is not for this receive (or does
    /// not fit, or the slot is broken): the engine's own look decides then.
    ///
    /// # Safety
    /// The engine that gave the ticket has not been called since (nor dropped), no other
    /// ticket of it is in use, and the engine hears of every message a take took
    /// ([`Engine::lane_ticket_taken`], or in counts [`Engine::lane_hold_settled`] for a
    /// [`LaneHold`]'s) before it is called next.
    #[inline]
    pub unsafe fn take(&self, buf: &mut [u8]) -> Option<Status> {
        // SAFETY: the link lives and nothing else uses it (the contract above).
        let link = unsafe { &mut *self.link.as_ptr() };
        match take_from_lane(link, self.peer, self.ep, &self.filter, buf) {
            LaneLook::Taken(st) => Some(st),
            LaneLook::Empty | LaneLook::Refused => None,
        }
    }
}

/// A same-host peer's lane held for a run of receives from the peer and answers to it, none
/// of which calls the engine ([`Engine::lane_hold`]): each receive takes its message with the
/// hold's [`ticket`](Self::ticket) (its doorbells from [`bells`](Self::bells)), each answer
/// goes through [`send`](Self::send), within the eager credit the core gave. The engine hears
/// of all of it, counted, before it is called for anything else
/// ([`Engine::lane_hold_settled`]). In a ping-pong between two ranks of a host (through the
/// libfabric provider: the receive and the answer that Open MPI's 8-byte latency test makes
/// each turn) that is every message, with no engine, backend or lock on the way.
pub struct LaneHold {
    ticket: LaneTicket,
    /// The engine's other same-host links: their doorbells are watched too (a message from
    /// another peer ends the wait, for the engine to take).
    others: Vec<std::ptr::NonNull<dyn hx_transport::Link>>,
    /// The peer's endpoint the receives take from: the one answers go to.
    dst_ep: EpId,
    /// Eager credit (bytes, overheads included) the answers may still spend.
    credit: u64,
    /// The longest answer it sends: the eager limit, at most a lane slot's payload.
    max_len: usize,
}

// SAFETY: as LaneTicket.
unsafe impl Send for LaneHold {}

impl LaneHold {
    /// The ticket with which each receive of the run takes its message.
    pub fn ticket(&self) -> &LaneTicket {
        &self.ticket
    }

    /// The peer.
    pub fn peer(&self) -> Rank {
        self.ticket.peer
    }

    /// The doorbells a receive of the run waits on: its peer's (see
    /// [`hx_transport::Link::answer_bells`]: one already rung when its lane message is there)
    /// and those of the engine's other same-host links. False (`out` empty) when it cannot
    /// wait on them: a peer closed or gone, part of a record to read, a lane message of
    /// another peer waiting. (A ring record already there gives a rung doorbell: the first
    /// read looks.)
    ///
    /// # Safety
    /// As for [`LaneTicket::take`]: the engine has not been called since the hold was made.
    pub unsafe fn bells(&self, out: &mut Vec<hx_transport::Doorbell>) -> bool {
        out.clear();
        // SAFETY: the links live and nothing else uses them (the contract above).
        let mine = hx_transport::Link::answer_bells(unsafe { &*self.ticket.link.as_ptr() }, out);
        let all = mine
            && self
                .others
                .iter()
                .all(|l| unsafe { l.as_ref() }.doorbells(out));
        if !all {
            out.clear();
        }
        all
    }

    /// Sends a small message to the peer's endpoint through the lane, as
    /// [`Engine::send_now_lane`] would: only as an answer (something came from the peer since
    /// the last message to it), within the hold's credit, when the lane takes it now. False:
    /// nothing was sent; send it the usual way (after telling the engine of the run).
    ///
    /// # Safety
    /// As for [`bells`](Self::bells).
    #[inline]
    pub unsafe fn send(&mut self, tag: u64, data: Option<u64>, payload: &[u8]) -> bool {
        let cost = payload.len() as u64 + hx_protocol::EAGER_OVERHEAD;
        if cost > self.credit || payload.len() > self.max_len {
            return false;
        }
        // SAFETY: the link lives and nothing else uses it (the contract above).
        let link = unsafe { &mut *self.ticket.link.as_ptr() };
        let meta = lane_meta(self.ticket.ep, self.dst_ep, tag, data);
        if !link.answering() || !link.lane_send(meta, payload) {
            return false;
        }
        self.credit -= cost;
        true
    }
}

/// What an express receive found in a lane ([`take_from_lane`]).
enum LaneLook {
    Empty,
    /// A message the receive does not take whole, or a broken slot: the engine's full round
    /// decides.
    Refused,
    /// Copied and consumed; the core has not been told yet.
    Taken(Status),
}

/// The next message of `link`'s lane into `buf`, if an express receive on `ep` taking `filter`
/// from `peer` takes it whole ([`Filter::takes_lane_message`]): the one step of
/// [`Engine::lane_take`] and [`LaneTicket::take`].
#[inline(always)]
fn take_from_lane(
    link: &mut shm::ShmLink,
    peer: Rank,
    ep: EpId,
    filter: &Filter,
    buf: &mut [u8],
) -> LaneLook {
    let v = match link.lane_peek() {
        Ok(Some(v)) => v,
        Ok(None) => return LaneLook::Empty,
        Err(_) => return LaneLook::Refused,
    };
    let (src_ep, dst_ep, tag, data) = lane_envelope(&v.meta);
    let len = v.payload.len();
    if !filter.takes_lane_message(ep, buf.len(), peer, src_ep, dst_ep, tag, len) {
        return LaneLook::Refused;
    }
    buf[..len].copy_from_slice(v.payload);
    link.lane_consume();
    LaneLook::Taken(Status {
        source: peer,
        src_ep,
        tag,
        len,
        truncated: false,
        data,
    })
}

/// A lane message's words (hx_transport::shm, "The lane"): the endpoints and whether
/// immediate data comes, the tag, the data.
#[inline]
fn lane_meta(src_ep: EpId, dst_ep: EpId, tag: u64, data: Option<u64>) -> [u64; 3] {
    [
        src_ep as u64 | (dst_ep as u64) << 16 | (data.is_some() as u64) << 32,
        tag,
        data.unwrap_or(0),
    ]
}

/// What [`lane_meta`] packed: source and destination endpoints, tag, immediate data.
#[inline]
fn lane_envelope(meta: &[u64; 3]) -> (EpId, EpId, u64, Option<u64>) {
    let m = meta[0];
    (
        m as EpId,
        (m >> 16) as EpId,
        meta[1],
        (m >> 32 & 1 != 0).then_some(meta[2]),
    )
}

pub(crate) fn link_token(peer: Rank, rail: usize) -> u64 {
    T_LINK | ((peer as u64) << 16) | rail as u64
}

fn random_instance() -> Result<u64, Error> {
    loop {
        let mut b = [0u8; 8];
        hx_bootstrap::fill_random(&mut b).map_err(io_err("random instance number"))?;
        let v = u64::from_le_bytes(b);
        if v != 0 {
            return Ok(v);
        }
    }
}

/// Listeners on loopback and every rail, all on one port (so one port in the address serves all
/// of them); a few tries with fresh ports if one is taken on some interface.
fn listen_everywhere(
    rails: &[hx_transport::ifaces::Iface],
    bind_devices: bool,
    congestion: Option<&str>,
) -> Result<(u16, Vec<(TcpListener, String)>), Error> {
    let mut last = None;
    for _ in 0..16 {
        let lo = tcp::listen(Ipv4Addr::LOCALHOST, None, 0, congestion)
            .map_err(io_err("loopback listener"))?;
        let port = lo.local_addr().map_err(io_err("local_addr"))?.port();
        let mut all = vec![(lo, "lo".to_string())];
        let mut ok = true;
        for iface in rails {
            let device = bind_devices.then_some(iface.name.as_str());
            match tcp::listen(iface.addr, device, port, congestion) {
                Ok(l) => all.push((l, iface.name.clone())),
                Err(e) if e.kind() == ErrorKind::AddrInUse => {
                    last = Some(e);
                    ok = false;
                    break;
                }
                Err(e) => return Err(io_err(format!("listener on rail {}", iface.name))(e)),
            }
        }
        if ok {
            return Ok((port, all));
        }
    }
    Err(io_err("listeners on one port for every rail")(
        last.unwrap_or_else(|| std::io::Error::other("no free port")),
    ))
}

impl Engine {
    /// Joins the job described by the environment: `hxcomm run`'s, a PMI-1 launcher's (MPICH's
    /// Hydra `mpiexec`, Slurm's `srun --mpi=pmi2`), or without either a job of one (see
    /// [`hx_bootstrap::join_from_env`], which also finds the job secret).
    pub fn init() -> Result<Engine, Error> {
        crate::init_logging();
        let settings = Settings::from_lookup(&hx_bootstrap::launcher_var)?;
        let join = hx_bootstrap::join_from_env()?;
        let engine = Self::with(settings, join.bootstrap, join.secret)?;
        join.startup.done();
        Ok(engine)
    }

    /// A process of its own, not part of a launched job: peers are introduced by their
    /// addresses ([`insert`](Self::insert)) or connect to it (any process that proves knowledge
    /// of `secret`). This process is peer 0. `mgmt` is an address whose interface is left out
    /// of the rails (the management network), if known.
    pub fn open(
        settings: Settings,
        secret: Secret,
        mgmt: Option<Ipv4Addr>,
    ) -> Result<Engine, Error> {
        let mut eng = Self::new(settings, secret, 0, 1, mgmt, true)?;
        eng.open_to_unknown = true;
        Ok(eng)
    }

    fn new(
        settings: Settings,
        secret: Secret,
        me: Rank,
        size: u32,
        mgmt: Option<Ipv4Addr>,
        networked: bool,
    ) -> Result<Engine, Error> {
        let poller = Poller::new().map_err(io_err("epoll_create"))?;
        let kick = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| io_err("eventfd")(e.into()))?;
        poller
            .add(kick.as_fd().as_raw_fd(), poller::IN, T_KICK)
            .map_err(io_err("epoll_ctl"))?;
        let instance = random_instance()?;
        let mut listeners = Vec::new();
        let mut addr = Address {
            flags: 0,
            ep: 0,
            instance,
            host: setup::host_hash(),
            pid: std::process::id(),
            port: 0,
            rails: Vec::new(),
        };
        let mut devices = Vec::new();
        let mut place = None;
        let mut shm_listener = None;
        let shm_prefault = shm::PrefaultBudget::new(settings.shm_prefault);
        if networked {
            let rails = match &settings.topology {
                Some(t) => {
                    let (p, rails) = setup::topology_interfaces(t, mgmt)?;
                    place = Some(p);
                    rails
                }
                None => setup::rail_interfaces(&settings, mgmt)?,
            };
            // On a topology the peers know every NIC from the plan (the address names the
            // first ones, enough to place the host); otherwise unnamed rails go unused.
            let listen_on = if place.is_some() {
                &rails[..]
            } else {
                if rails.len() > ADDRESS_MAX_RAILS {
                    warn!(
                        "{} rail interfaces; an address describes {ADDRESS_MAX_RAILS}, the others are not used",
                        rails.len()
                    );
                }
                &rails[..rails.len().min(ADDRESS_MAX_RAILS)]
            };
            // Relayed paths bring a connection in on one NIC and take its replies out by
            // another: listeners on a topology are not bound to devices.
            // Accepted rails start with the algorithm the connecting side gives its own.
            let first_cc = settings
                .tcp_congestion_latency
                .as_deref()
                .or(settings.tcp_congestion.as_deref());
            let (port, ls) = listen_everywhere(listen_on, place.is_none(), first_cc)?;
            addr.port = port;
            listeners = ls;
            for iface in rails.iter().take(ADDRESS_MAX_RAILS) {
                addr.rails.push(RailIp {
                    ip: iface.addr,
                    prefix: iface.prefix,
                });
                devices.push(iface.name.clone());
            }
            if settings.shm {
                // An abstract socket name: nothing on disk, gone with the process.
                let mut l = shm::listen(&shm::socket_name(&secret, instance))
                    .map_err(io_err("shared-memory listener"))?;
                l.set_prefault(Some(shm_prefault.clone()));
                l.set_nonblocking(true)
                    .map_err(io_err("shared-memory listener"))?;
                poller
                    .add(l.as_raw_fd(), poller::IN, T_SHM_LISTEN)
                    .map_err(io_err("epoll add"))?;
                shm_listener = Some(l);
                addr.flags |= ADDR_FLAG_SHM;
            }
            for (i, (l, _)) in listeners.iter().enumerate() {
                poller
                    .add(l.as_raw_fd(), poller::IN, T_LISTEN | i as u64)
                    .map_err(io_err("epoll add"))?;
            }
        }
        let latency_cc = settings.tcp_congestion_latency.clone();
        Ok(Engine {
            core: Core::new(me, size, settings.protocol.clone()),
            peers: (0..size).map(|_| PeerSlot::unknown()).collect(),
            by_instance: HashMap::new(),
            addr,
            devices,
            place,
            open_to_unknown: false,
            poller,
            kick,
            fins_held: Vec::new(),
            listeners,
            pending: Vec::new(),
            backlog_waiting: false,
            shm_backlog_waiting: false,
            connecting: Vec::new(),
            shm_listener,
            shm_prefault,
            shm_out: Vec::new(),
            shm_in: Vec::new(),
            ptracer_set: false,
            send_buffer_warned: false,
            receive_buffer_warned: false,
            secret,
            bootstrap: None,
            rail_opts: RailOptions {
                notsent_lowat: settings.notsent_lowat,
                nodelay: true,
                liveness: Some(settings.rail_timeout),
            },
            settings,
            dirty: Vec::new(),
            events: Vec::new(),
            endpoints: Vec::new(),
            barrier_round: 0,
            finalizing: false,
            polled: Vec::new(),
            sockets: Vec::new(),
            spins: 0,
            rounds: 0,
            idle_polls: 0,
            express_calls: 0,
            latency_cc,
            raised_lowat: 0,
            bulk_asleep: false,
            bulk_sleep: BulkSleepJudge::default(),
            rx_bytes: 0,
            next_housekeeping: Instant::now(),
            created: Instant::now(),
            rail_failures: 0,
        })
    }

    /// Joins a job through the given bootstrap with explicit settings and job secret: each rank
    /// publishes its address, learns everybody else's, and connects on first use.
    pub fn with(
        settings: Settings,
        mut bootstrap: Box<dyn Bootstrap>,
        secret: Secret,
    ) -> Result<Engine, Error> {
        let me = bootstrap.rank();
        let size = bootstrap.size();
        let mgmt = bootstrap.management_ip().or_else(|| {
            std::env::var("HX_BOOTSTRAP")
                .ok()
                .and_then(|a| a.parse::<SocketAddr>().ok())
                .and_then(|a| match a {
                    SocketAddr::V4(v4) if !v4.ip().is_loopback() => Some(*v4.ip()),
                    _ => None,
                })
        });
        let mut eng = Self::new(settings, secret, me, size, mgmt, size > 1)?;
        if size > 1 {
            let hex: String = eng
                .addr
                .to_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            bootstrap.put(&format!("hx.addr.{me}"), &hex)?;
            bootstrap.fence()?;
            for p in 0..size {
                if p == me {
                    continue;
                }
                let v = bootstrap.get(&format!("hx.addr.{p}"))?;
                let bytes = decode_hex(&v).ok_or_else(|| {
                    Error::Setup(format!("rank {p} published a malformed address: {v:?}"))
                })?;
                let a = Address::parse(&bytes).map_err(|e| {
                    Error::Setup(format!("rank {p} published a malformed address: {e}"))
                })?;
                if eng.by_instance.contains_key(&a.instance) || a.instance == eng.addr.instance {
                    return Err(Error::Setup(format!(
                        "rank {p} published an address another rank uses too: {a}"
                    )));
                }
                eng.set_peer(p, &a)?;
            }
            debug!(rank = me, "addresses known; connecting on first use");
        }
        eng.bootstrap = Some(bootstrap);
        Ok(eng)
    }

    /// This process's address for endpoint `ep` (64 bytes; give it to peers, who
    /// [`insert`](Self::insert) it).
    pub fn address(&self, ep: EpId) -> [u8; ADDRESS_LEN] {
        let mut a = self.addr.clone();
        a.ep = ep;
        a.to_bytes()
    }

    /// Makes the process at `addr` a peer (nothing is connected until there is traffic) and
    /// returns its peer number and the endpoint the address names. The same process always gets
    /// the same number; this process gets its own.
    pub fn insert(&mut self, addr: &[u8]) -> Result<(Rank, EpId), Error> {
        let a = Address::parse(addr)
            .map_err(|e| Error::Invalid(format!("malformed hxcomm address: {e}")))?;
        let p = self.peer_for(&a)?;
        Ok((p, a.ep))
    }

    /// A printable form of an address (or why it is malformed).
    pub fn describe_address(addr: &[u8]) -> Result<String, Error> {
        Address::parse(addr)
            .map(|a| a.to_string())
            .map_err(|e| Error::Invalid(format!("malformed hxcomm address: {e}")))
    }

    pub fn rank(&self) -> Rank {
        self.core.rank()
    }

    pub fn size(&self) -> u32 {
        self.core.size()
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Number of rails to `peer`.
    pub fn rails(&self, peer: Rank) -> usize {
        self.core.rails(peer)
    }

    /// Messages sent to `peer` through its shared-memory lane so far (0 for other peers).
    pub fn lane_sent(&mut self, peer: Rank) -> u64 {
        shm_link(&mut self.peers, peer, 0).map_or(0, |l| l.lane_sent())
    }

    /// Bytes written so far on each rail to `peer`.
    pub fn rail_tx_bytes(&self, peer: Rank) -> Vec<u64> {
        self.core.stats(peer).tx_bytes_per_rail
    }

    /// The TCP congestion control each rail to `peer` runs now (None: not connected, or not
    /// a TCP socket): see HX_TCP_CONGESTION_LATENCY.
    pub fn rail_congestion(&self, peer: Rank) -> Vec<Option<String>> {
        self.rail_sockets(peer, tcp::congestion_fd)
    }

    /// Each TCP rail socket's SO_MAX_PACING_RATE to `peer` (bytes per second; `u64::MAX`:
    /// unpaced): see HX_RAIL_RATE.
    pub fn rail_pacing(&self, peer: Rank) -> Vec<Option<u64>> {
        self.rail_sockets(peer, tcp::max_pacing_rate)
    }

    /// Each TCP rail socket's send buffer to `peer` (SO_SNDBUF as the kernel reports it, twice
    /// what was asked): see HX_SNDBUF.
    pub fn rail_send_buffers(&self, peer: Rank) -> Vec<Option<usize>> {
        self.rail_sockets(peer, tcp::send_buffer)
    }

    /// Each TCP rail socket's receive buffer from `peer` (SO_RCVBUF as the kernel reports it):
    /// see HX_RCVBUF.
    pub fn rail_receive_buffers(&self, peer: Rank) -> Vec<Option<usize>> {
        self.rail_sockets(peer, tcp::receive_buffer)
    }

    /// `ask` of each rail socket to `peer` (None: not connected, not a TCP socket, or `ask`
    /// failed).
    fn rail_sockets<T>(
        &self,
        peer: Rank,
        ask: impl Fn(std::os::fd::RawFd) -> std::io::Result<T>,
    ) -> Vec<Option<T>> {
        self.peers.get(peer as usize).map_or_else(Vec::new, |p| {
            p.rails
                .iter()
                .map(|r| {
                    let link = r.link.as_ref().filter(|l| !l.polled())?;
                    ask(link.fd()).ok()
                })
                .collect()
        })
    }

    /// The names of the rails to `peer` (interface names, or `lo#i`).
    pub fn rail_names(&self, peer: Rank) -> Vec<String> {
        self.peers
            .get(peer as usize)
            .map(|p| p.rails.iter().map(|r| r.label.clone()).collect())
            .unwrap_or_default()
    }

    /// A file descriptor that becomes readable when the engine has something to do: poll it with
    /// your other fds, then call [`progress`](Self::progress) or `test`.
    pub fn fd(&self) -> RawFd {
        self.poller.fd()
    }

    /// Opens endpoint `id` of this process (ids are chosen by the program, like ports).
    pub fn open_endpoint(&mut self, id: EpId) -> Result<EpId, Error> {
        if id == BARRIER_EP {
            return Err(Error::Invalid(format!("endpoint id {id} is reserved")));
        }
        if self.endpoints.contains(&id) {
            return Err(Error::Invalid(format!("endpoint {id} is already open")));
        }
        self.endpoints.push(id);
        Ok(id)
    }

    pub fn close_endpoint(&mut self, id: EpId) -> Result<(), Error> {
        let i = self
            .endpoints
            .iter()
            .position(|&e| e == id)
            .ok_or_else(|| Error::Invalid(format!("endpoint {id} is not open")))?;
        self.endpoints.remove(i);
        Ok(())
    }

    /// A plain loop: a program has an endpoint or two, and slice `contains` on `u16` takes
    /// the vectorised path's setup on every small message.
    #[inline]
    #[allow(clippy::manual_contains)]
    fn ep_open(&self, ep: EpId) -> bool {
        self.endpoints.iter().any(|&e| e == ep)
    }

    #[inline]
    fn check_ep(&self, ep: EpId) -> Result<(), Error> {
        if ep == BARRIER_EP || self.ep_open(ep) {
            Ok(())
        } else {
            Err(ep_not_open(ep))
        }
    }

    /// Starts sending `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid and unmodified until the request completes.
    pub unsafe fn isend_raw(
        &mut self,
        ep: EpId,
        dst: Rank,
        dst_ep: EpId,
        tag: u64,
        ptr: *const u8,
        len: usize,
    ) -> Result<Request, Error> {
        self.start_send(
            ep,
            dst,
            dst_ep,
            tag,
            EngineBuf::Raw {
                ptr: ptr as *mut u8,
                len,
            },
        )
    }

    /// Starts receiving into `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid and untouched by anyone else until the request completes.
    pub unsafe fn irecv_raw(
        &mut self,
        ep: EpId,
        src: Option<Rank>,
        tag: Option<u64>,
        ptr: *mut u8,
        len: usize,
    ) -> Result<Request, Error> {
        self.start_recv(ep, src, tag, EngineBuf::Raw { ptr, len })
    }

    /// Starts sending an owned buffer; [`wait_owned`](Self::wait_owned) gives it back.
    pub fn isend(
        &mut self,
        ep: EpId,
        dst: Rank,
        dst_ep: EpId,
        tag: u64,
        data: Vec<u8>,
    ) -> Result<Request, Error> {
        self.start_send(ep, dst, dst_ep, tag, EngineBuf::Owned(data))
    }

    /// Starts receiving into an owned buffer (its length is the capacity of the receive).
    pub fn irecv(
        &mut self,
        ep: EpId,
        src: Option<Rank>,
        tag: Option<u64>,
        buf: Vec<u8>,
    ) -> Result<Request, Error> {
        self.start_recv(ep, src, tag, EngineBuf::Owned(buf))
    }

    fn start_send(
        &mut self,
        ep: EpId,
        dst: Rank,
        dst_ep: EpId,
        tag: u64,
        buf: EngineBuf,
    ) -> Result<Request, Error> {
        self.start_send_with(ep, dst, dst_ep, tag, None, buf)
    }

    /// Every send's way in: straight to the link when it can, else queued as a request.
    fn start_send_with(
        &mut self,
        ep: EpId,
        dst: Rank,
        dst_ep: EpId,
        tag: u64,
        data: Option<u64>,
        buf: EngineBuf,
    ) -> Result<Request, Error> {
        self.check_ep(ep)?;
        if self.send_inline(ep, dst, dst_ep, tag, data, buf.as_slice()) {
            return Ok(Request(self.core.inline_request(dst, ep, tag, buf)));
        }
        let req = self.core.send_with_data(dst, ep, dst_ep, tag, data, buf)?;
        self.flush_dirty();
        Ok(Request(req))
    }

    /// Sends a small message at once if it can leave without a request, the first of two
    /// tries: through the lane (a small answer to a same-host peer). It touches nothing but the
    /// lane and the core's eager credit (no link is opened, closed or flushed, nothing is
    /// queued), so what a caller learnt of the engine's links and queues (their doorbells,
    /// [`express_possible`](Self::express_possible)) still holds. False: nothing happened;
    /// [`send_now_framed`](Self::send_now_framed) is the second try.
    #[inline]
    pub fn send_now_lane(
        &mut self,
        ep: EpId,
        dst: Rank,
        dst_ep: EpId,
        tag: u64,
        data: Option<u64>,
        payload: &[u8],
    ) -> bool {
        self.lane_allowed(payload.len())
            && self.ep_open(ep)
            && self.send_lane(ep, dst, dst_ep, tag, data, payload)
    }

    /// The second try of [`send_now_lane`](Self::send_now_lane): framed, straight into the
    /// rail (see `send_framed_inline`: a peer with nothing queued). True if it left (it is on
    /// its way, or queued as a copy; nothing is ever reported about it). False: nothing
    /// happened, use [`isend_with`](Self::isend_with).
    pub fn send_now_framed(
        &mut self,
        ep: EpId,
        dst: Rank,
        dst_ep: EpId,
        tag: u64,
        data: Option<u64>,
        payload: &[u8],
    ) -> Result<bool, Error> {
        self.check_ep(ep)?;
        Ok(self.send_framed_inline(ep, dst, dst_ep, tag, data, payload))
    }

    #[inline]
    fn lane_allowed(&self, len: usize) -> bool {
        len <= shm::LANE_PAYLOAD && self.settings.shm_lane
    }

    /// A small message to a shared-memory peer with nothing queued goes through the lane or
    /// straight into the ring (no request, queue or flush: most of a small send's
    /// instructions). False if it must take the queued path; true if it left (or, the ring
    /// being full, was queued as a copy).
    fn send_inline(
        &mut self,
        ep: EpId,
        dst: Rank,
        dst_ep: EpId,
        tag: u64,
        data: Option<u64>,
        payload: &[u8],
    ) -> bool {
        (self.lane_allowed(payload.len()) && self.send_lane(ep, dst, dst_ep, tag, data, payload))
            || self.send_framed_inline(ep, dst, dst_ep, tag, data, payload)
    }

    /// [`send_inline`](Self::send_inline) past the lane: the message framed, straight into
    /// the rail.
    fn send_framed_inline(
        &mut self,
        ep: EpId,
        dst: Rank,
        dst_ep: EpId,
        tag: u64,
        data: Option<u64>,
        payload: &[u8],
    ) -> bool {
        let Some((rail, hdr)) = self
            .core
            .inline_start(dst, ep, dst_ep, tag, data, payload.len())
        else {
            return false;
        };
        let r = &mut self.peers[dst as usize].rails[rail];
        r.wake_latency_cc(self.latency_cc.as_deref());
        let written = match r.link.as_mut() {
            Some(link) => link.write_frame(&hdr, payload).unwrap_or(0),
            None => 0,
        };
        self.core.inline_written(dst, rail, &hdr, payload, written);
        if written < hdr.len() + payload.len() {
            // Full, or broken: the queued rest meets whatever it is in flush_dirty.
            self.peers[dst as usize].rails[rail].blocked = true;
            self.flush_dirty();
        }
        true
    }

    /// A small message to a shared-memory peer through its lane, unframed, when the core
    /// would let a framed one leave at once and the lane can take it now.
    #[inline]
    fn send_lane(
        &mut self,
        ep: EpId,
        dst: Rank,
        dst_ep: EpId,
        tag: u64,
        data: Option<u64>,
        payload: &[u8],
    ) -> bool {
        if !self.core.lane_ok(dst, payload.len()) {
            return false;
        }
        let Some(link) = shm_link(&mut self.peers, dst, 0) else {
            return false;
        };
        // The lane is for answers (a ping-pong, the steps of a collective): its shorter path
        // is their latency. A stream of small messages fills it and then interleaves it with
        // the ring (each message reading the reader's tail, the reader taking full rounds):
        // Open MPI's 8-byte message rate over the provider, window 64, 57.9 MB/s with every
        // message in the lane against 63.9 through the ring and 64.3 with answers only.
        if !link.answering() || !link.lane_send(lane_meta(ep, dst_ep, tag, data), payload) {
            return false;
        }
        self.core.lane_sent(dst, payload.len());
        true
    }

    /// Hands every message waiting in the lane beside `rail` of `peer` to the core, which
    /// matches or holds each in its place; returns a count of the work done.
    fn drain_lane(&mut self, peer: Rank, rail: usize) -> usize {
        let mut work = 0;
        loop {
            let Some(link) = shm_link(&mut self.peers, peer, rail) else {
                return work;
            };
            match link.lane_peek() {
                Ok(Some(v)) => {
                    let (src_ep, dst_ep, tag, data) = lane_envelope(&v.meta);
                    work += 1 + v.payload.len();
                    self.core
                        .lane_arrived(peer, src_ep, dst_ep, tag, data, v.payload);
                    link.lane_consume();
                    if hx_transport::trace::active() {
                        self.trace_parsed(peer, rail);
                    }
                }
                Ok(None) => return work,
                Err(e) => {
                    self.rail_down(peer, rail, &e.to_string(), false);
                    return work;
                }
            }
        }
    }

    fn start_recv(
        &mut self,
        ep: EpId,
        src: Option<Rank>,
        tag: Option<u64>,
        buf: EngineBuf,
    ) -> Result<Request, Error> {
        self.check_ep(ep)?;
        let req = self.core.recv(ep, src, tag, buf)?;
        self.flush_dirty();
        Ok(Request(req))
    }

    /// Starts sending with immediate data (`data`, delivered in the receiver's status).
    ///
    /// # Safety
    /// A `Raw` buffer must stay valid and unmodified until the request completes.
    pub unsafe fn isend_with(
        &mut self,
        ep: EpId,
        dst: Rank,
        dst_ep: EpId,
        tag: u64,
        data: Option<u64>,
        buf: EngineBuf,
    ) -> Result<Request, Error> {
        self.start_send_with(ep, dst, dst_ep, tag, data, buf)
    }

    /// As [`isend_with`](Self::isend_with), completing only once the receiver has the message
    /// (Core::send_delivered): libfabric's FI_DELIVERY_COMPLETE.
    ///
    /// # Safety
    /// As [`isend_with`](Self::isend_with).
    pub unsafe fn isend_delivered(
        &mut self,
        ep: EpId,
        dst: Rank,
        dst_ep: EpId,
        tag: u64,
        data: Option<u64>,
        buf: EngineBuf,
    ) -> Result<Request, Error> {
        self.check_ep(ep)?;
        let req = self.core.send_delivered(dst, ep, dst_ep, tag, data, buf)?;
        self.flush_dirty();
        Ok(Request(req))
    }

    /// Lends memory to peers' reads and writes ([`hx_protocol::Regions`]): their accesses are
    /// served from and into what `regions` resolves, during this engine's progress.
    pub fn set_regions(&mut self, regions: Box<dyn hx_protocol::Regions<EngineBuf>>) {
        self.core.set_regions(regions);
    }

    /// Stops lending region `key` ([`hx_protocol::Core::release_region`]): peers' accesses
    /// to it under way no longer touch its memory. Returns how many there were.
    pub fn release_region(&mut self, key: u64) -> usize {
        self.core.release_region(key)
    }

    /// Starts reading `buf.len()` bytes at `addr` of `peer`'s region `key` into `buf` (remote
    /// memory access; the peer must lend memory, see [`set_regions`](Self::set_regions)).
    ///
    /// # Safety
    /// A `Raw` buffer must stay valid and untouched by anyone else until the request completes.
    pub unsafe fn iread(
        &mut self,
        peer: Rank,
        key: u64,
        addr: u64,
        buf: EngineBuf,
    ) -> Result<Request, Error> {
        let req = self.core.read(peer, key, addr, buf)?;
        self.flush_dirty();
        Ok(Request(req))
    }

    /// Starts writing `buf` to `addr` of `peer`'s region `key`; completes once the peer has
    /// placed all of it.
    ///
    /// # Safety
    /// A `Raw` buffer must stay valid and unmodified until the request completes.
    pub unsafe fn iwrite(
        &mut self,
        peer: Rank,
        key: u64,
        addr: u64,
        buf: EngineBuf,
    ) -> Result<Request, Error> {
        let req = self.core.write(peer, key, addr, buf)?;
        self.flush_dirty();
        Ok(Request(req))
    }

    /// Starts an atomic on the element of type `ty` at `addr` of `peer`'s region `key`
    /// ([`hx_protocol::Core::atomic`]): its old value goes into `result` (as much as it holds).
    ///
    /// # Safety
    /// A `Raw` result buffer must stay valid and untouched until the request completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn iatomic(
        &mut self,
        peer: Rank,
        key: u64,
        addr: u64,
        op: hx_protocol::AtomicOp,
        ty: hx_protocol::AtomicType,
        operand: u64,
        compare: u64,
        result: EngineBuf,
    ) -> Result<Request, Error> {
        let req = self
            .core
            .atomic(peer, key, addr, op, ty, operand, compare, result)?;
        self.flush_dirty();
        Ok(Request(req))
    }

    /// Starts a receive of what `filter` takes (source, source endpoint, tag with ignore mask).
    ///
    /// # Safety
    /// A `Raw` buffer must stay valid and untouched by anyone else until the request completes.
    pub unsafe fn irecv_filtered(
        &mut self,
        ep: EpId,
        filter: Filter,
        buf: EngineBuf,
    ) -> Result<Request, Error> {
        self.check_ep(ep)?;
        let req = self.core.recv_matching(ep, filter, buf)?;
        self.flush_dirty();
        Ok(Request(req))
    }

    /// Makes progress, then tells whether a message that `filter` takes is waiting.
    pub fn probe_filtered(&mut self, ep: EpId, filter: Filter) -> Result<Option<Status>, Error> {
        self.check_ep(ep)?;
        self.progress()?;
        Ok(self.core.probe_matching(ep, filter))
    }

    /// Whether a message `filter` takes already waits on `ep`, without a round of progress
    /// (what earlier rounds brought): a look of a few instructions for a caller that makes
    /// its rounds itself.
    pub fn message_waiting(&self, ep: EpId, filter: Filter) -> bool {
        self.core.probe_matching(ep, filter).is_some()
    }

    /// Makes progress, then takes the first message `filter` takes out of matching (a matched
    /// probe); returns a claim to receive it with ([`irecv_claimed`](Self::irecv_claimed)) or
    /// drop ([`discard_claimed`](Self::discard_claimed)).
    pub fn claim(&mut self, ep: EpId, filter: Filter) -> Result<Option<(u64, Status)>, Error> {
        self.check_ep(ep)?;
        self.progress()?;
        Ok(self.core.claim(ep, filter).map(|(h, st)| (h.to_u64(), st)))
    }

    /// Receives a claimed message.
    ///
    /// # Safety
    /// As for [`irecv_filtered`](Self::irecv_filtered).
    pub unsafe fn irecv_claimed(&mut self, claim: u64, buf: EngineBuf) -> Result<Request, Error> {
        let req = self
            .core
            .recv_claimed(hx_protocol::Handle::from_u64(claim), buf)?;
        self.flush_dirty();
        Ok(Request(req))
    }

    /// Drops a claimed message (its bytes are received into nothing); release the returned
    /// request once it is done.
    pub fn discard_claimed(&mut self, claim: u64) -> Result<Request, Error> {
        let req = self
            .core
            .discard_claimed(hx_protocol::Handle::from_u64(claim))?;
        self.flush_dirty();
        Ok(Request(req))
    }

    /// Cancels a posted receive that has not matched; true if it was (it is gone then).
    pub fn cancel_recv(&mut self, req: Request) -> bool {
        self.core.cancel_recv(req.0).is_some()
    }

    /// From now on, [`take_finished`](Self::take_finished) reports requests as they finish.
    pub fn track_finished(&mut self) {
        self.core.track_finished();
    }

    /// Has a request finished since the last [`take_finished`](Self::take_finished)?
    pub fn has_finished(&self) -> bool {
        self.core.has_finished()
    }

    /// Requests that finished since the last call (possibly repeated; check with
    /// [`take_request`](Self::take_request)).
    pub fn take_finished(&mut self, out: &mut Vec<Request>) {
        // Called on every CQ read of the provider: nothing to do is the common case.
        if self.core.has_finished() {
            out.extend(self.core.drain_finished().map(Request));
        }
    }

    /// Gives up interest in a send whose buffer the engine owns (fi_inject's copy): it is freed
    /// when it finishes and never reported, not even a failure. Only with finished-request
    /// tracking on ([`track_finished`](Self::track_finished)); returns false otherwise, and the
    /// request stays as it was.
    pub fn detach(&mut self, req: Request) -> bool {
        self.core.detach(req.0)
    }

    /// A send still in flight whose caller is going away (its libfabric endpoint closes): a
    /// borrowed buffer becomes the request's own copy, and the request is detached, so the
    /// message still leaves whole (a receiver may match it later) and nothing reads the
    /// caller's memory after this returns. False for a finished or unknown request, or without
    /// finished-request tracking.
    ///
    /// # Safety
    /// A `Raw` buffer of `req` is still valid now (the caller's promise until it returns).
    pub unsafe fn orphan_send(&mut self, req: Request) -> bool {
        let Some(buf) = self.core.pending_send_buf_mut(req.0) else {
            return false;
        };
        if let EngineBuf::Raw { .. } = buf {
            *buf = EngineBuf::Owned(buf.as_slice().to_vec());
        }
        self.core.detach(req.0)
    }

    /// A finished request's outcome and buffer, releasing it; `None` while it is pending (or
    /// unknown). Unlike `wait`, a truncated receive is `Ok` with `truncated` set.
    pub fn take_request(&mut self, req: Request) -> Option<(Result<Status, Error>, EngineBuf)> {
        match self.core.take(req.0)? {
            (Completion::Done(st), buf) => Some((Ok(st), buf)),
            (Completion::Failed(e), buf) => Some((Err(e.into()), buf)),
            (Completion::Pending, _) => None,
        }
    }

    /// Sends `data` and returns when the buffer may be reused.
    pub fn send(
        &mut self,
        ep: EpId,
        dst: Rank,
        dst_ep: EpId,
        tag: u64,
        data: &[u8],
    ) -> Result<(), Error> {
        self.check_ep(ep)?;
        if self.send_inline(ep, dst, dst_ep, tag, None, data) {
            // A write that failed at once (the peer just died) left a copy queued that dies
            // with the peer: say so, as the request of the queued path would have.
            if let Some(reason) = self.core.peer_failed(dst) {
                return Err(hx_protocol::ProtoError::PeerFailed {
                    peer: dst,
                    reason: reason.to_string(),
                }
                .into());
            }
            return Ok(());
        }
        // SAFETY: we wait for completion before `data`'s borrow ends; `wait` returns only once
        // the core no longer refers to the buffer.
        let req = unsafe { self.isend_raw(ep, dst, dst_ep, tag, data.as_ptr(), data.len())? };
        self.wait(req).map(|_| ())
    }

    /// Receives into `buf`; returns who sent what.
    pub fn recv(
        &mut self,
        ep: EpId,
        src: Option<Rank>,
        tag: Option<u64>,
        buf: &mut [u8],
    ) -> Result<Status, Error> {
        if let Some(st) = self.recv_express(ep, src, tag, buf)? {
            return Ok(st);
        }
        // SAFETY: as in `send`.
        let req = unsafe { self.irecv_raw(ep, src, tag, buf.as_mut_ptr(), buf.len())? };
        self.wait(req)
    }

    /// A blocking receive over shared memory spins on the rings itself for a while (or, from a
    /// peer over rails, on its sockets) and takes a small message that arrives for it straight
    /// into `buf` (Core::rx_express_into, Core::rx_done_express): no request is posted,
    /// matched, completed and released, which was most of a small receive's instructions.
    /// Anything else that arrives, or nothing within [`EXPRESS_ROUNDS`]
    /// ([`EXPRESS_SOCKET_ROUNDS`]), leaves it to the posted receive (`None`); everything seen
    /// meanwhile is handled as in [`wait`](Self::wait)'s spinning.
    fn recv_express(
        &mut self,
        ep: EpId,
        src: Option<Rank>,
        tag: Option<u64>,
        buf: &mut [u8],
    ) -> Result<Option<Status>, Error> {
        let filter = Filter::new(src, tag);
        if self.settings.spin < EXPRESS_MIN_SPIN
            || self.settings.yield_while_spinning
            || !self.express_possible(ep, &filter)
        {
            // (A closed endpoint is refused by the posted receive.)
            return Ok(None);
        }
        // A program that only receives this way (a ping-pong over shared memory) makes no
        // other engine round: every 64th call polls everything else (sockets, connections,
        // housekeeping) first, so that a rendezvous over a rail or a peer connecting still
        // progresses.
        self.express_calls = self.express_calls.wrapping_add(1);
        if self.express_calls.is_multiple_of(64) {
            self.progress_everything()?;
            if !self.core.ep_quiet(ep) {
                return Ok(None);
            }
        }
        let rounds = match self.express_reads_sockets(&filter) {
            true => EXPRESS_SOCKET_ROUNDS,
            false => EXPRESS_ROUNDS,
        };
        for round in 1..=rounds {
            match self.express_pass(ep, filter, buf) {
                Express::Taken(st) => return Ok(Some(st)),
                Express::Other => return Ok(None),
                Express::Empty => {}
            }
            if round % 64 == 0 {
                // Sockets, connections, housekeeping: what a spinning wait would look at.
                self.progress_everything()?;
                if !self.core.ep_quiet(ep) {
                    return Ok(None);
                }
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(None)
    }

    /// May a receive on `ep` taking `filter` be served by [`try_recv_express`](Self::try_recv_express)
    /// (Self::try_recv_express) instead of being posted? Only one that the links an express
    /// look reads can answer (other sockets are looked at only now and then while it spins): a
    /// named source, over shared memory or over its connected rails, or any source with no
    /// socket rail at all; on an endpoint with nothing posted or waiting (which would come
    /// first).
    pub fn express_possible(&self, ep: EpId, filter: &Filter) -> bool {
        let answerable = match filter.src {
            Some(s) => {
                // A peer over sockets: its rails are read in each look (express_sockets).
                self.peers.get(s as usize).is_some_and(|p| match p.shm {
                    true => !self.polled.is_empty(),
                    false => p.rails.iter().any(|r| r.link.is_some()),
                }) && self.core.peer_failed(s).is_none()
            }
            None => self.sockets.is_empty() && !self.polled.is_empty(),
        };
        answerable && self.core.ep_quiet(ep) && self.ep_open(ep)
    }

    /// Does an express look for a receive taking `filter` read sockets (its named source is
    /// reached over rails), rather than look at shared memory?
    pub fn express_reads_sockets(&self, filter: &Filter) -> bool {
        filter
            .src
            .is_some_and(|s| self.peers.get(s as usize).is_some_and(|p| !p.shm))
    }

    /// One look at the shared-memory rings (and, for a receive naming a peer over rails, one
    /// read of each of its sockets) for a receive that has posted nothing: takes a small
    /// message for `ep` that `filter` takes straight into `buf`, as a blocking receive's
    /// express path does, even while other requests are in flight. For a caller that polls
    /// (the libfabric provider's parked receive): `Empty` when no ring has anything and the
    /// engine has no request in flight, so no engine round is owed; `Other` when something
    /// else needs a full round ([`progress`](Self::progress) or
    /// [`progress_polled`](Self::progress_polled)), after which the receive is posted if its
    /// endpoint is no longer quiet. The caller still makes a full round now and then (sockets,
    /// connections, housekeeping).
    pub fn try_recv_express(&mut self, ep: EpId, filter: Filter, buf: &mut [u8]) -> Express {
        if !self.core.ep_quiet(ep) {
            return Express::Other;
        }
        match self.express_pass(ep, filter, buf) {
            // Requests in flight (sends, other receives) progress in full rounds.
            Express::Empty if self.core.live_requests() > 0 => Express::Other,
            found => found,
        }
    }

    /// After [`try_recv_express`](Self::try_recv_express) returned `Empty` for `ep` and
    /// `filter`: the doorbells ([`hx_transport::Doorbell`]) of the rings that pass looked at,
    /// into `out`, when they alone decide the next such pass: until one rings, and as long as
    /// nothing else touches the engine, that pass would return `Empty` again. False (and `out`
    /// empty) when sockets are read too, something is queued to send, a request is in flight,
    /// or a ring cannot give one. Peers that close or die ring no doorbell: the caller's full
    /// rounds now and then find them.
    pub fn express_watch(
        &self,
        ep: EpId,
        filter: &Filter,
        out: &mut Vec<hx_transport::Doorbell>,
    ) -> bool {
        out.clear();
        if !self.core.ep_quiet(ep)
            || self.core.live_requests() > 0
            || self.express_reads_sockets(filter)
        {
            return false;
        }
        for &(p, r) in &self.polled {
            if self.core.tx_pending(p, r) {
                out.clear();
                return false;
            }
            let Some(link) = self.peers[p as usize].rails[r].link.as_ref() else {
                continue;
            };
            // A lane message already there rings at once: the receive's next look (or its
            // ticket) takes it, and a hold can start (see LaneHold) when answers come quickly.
            if !link.answer_bells(out) {
                out.clear();
                return false;
            }
        }
        true
    }

    /// One pass over the shared-memory rings, then the named peer's sockets, for an express
    /// receive (see [`try_recv_express`](Self::try_recv_express)).
    fn express_pass(&mut self, ep: EpId, filter: Filter, buf: &mut [u8]) -> Express {
        let mut i = 0;
        while let Some(&(p, r)) = self.polled.get(i) {
            i += 1;
            if self.core.tx_pending(p, r) {
                self.flush_rail(p, r);
            }
            // The lane first: its message comes before the ring's next record.
            if let Some(x) = self.lane_take(p, r, ep, filter, buf) {
                return x;
            }
            let Some(link) = self.peers[p as usize].rails[r].link.as_mut() else {
                continue;
            };
            let bytes = match link.poll_peek() {
                Peeked::Bytes(b) => Some(b),
                Peeked::Nothing => continue,
                Peeked::Attention => None,
            };
            let Some(bytes) = bytes else {
                // Most often a lane message that came after the lane's look above (the ring's
                // next record then waits behind it): taken now, not left to a full round, which
                // would hold it as unexpected and unpark the provider's receive. In a ping-pong
                // whose answer tends to land right then, that was a tenth of the messages of
                // the slow runs. Anything else needs the round.
                return self
                    .lane_take(p, r, ep, filter, buf)
                    .unwrap_or(Express::Other);
            };
            let Some((n, st)) = self.core.rx_express_into(p, r, bytes, ep, filter, buf) else {
                return Express::Other;
            };
            link.consume(n);
            if hx_transport::trace::active() {
                self.trace_parsed(p, r);
            }
            // An eager credit may be due.
            self.flush_dirty();
            return Express::Taken(st);
        }
        match filter.src {
            Some(s) if self.express_reads_sockets(&filter) => {
                self.express_sockets(s, ep, filter, buf)
            }
            _ => Express::Empty,
        }
    }

    /// An express receive's shortest path ([`try_recv_express`](Self::try_recv_express)
    /// with nothing else to look at): a receive on `ep` that names `peer`, a same-host peer,
    /// takes the message waiting in its lane. `None` when the lane is empty or something
    /// else could come first (then make the full look): no pass over every ring, no look at
    /// the ring itself (the lane's message comes before its next record).
    #[inline]
    pub fn try_lane_express(
        &mut self,
        peer: Rank,
        ep: EpId,
        filter: Filter,
        buf: &mut [u8],
    ) -> Option<Express> {
        if !self.core.ep_quiet(ep) || self.core.tx_pending(peer, 0) {
            return None;
        }
        self.lane_take(peer, 0, ep, filter, buf)
    }

    /// A ticket for the express receive on `ep` taking `filter` from `peer`, a same-host peer,
    /// when the lane's next message would be its whole answer (the conditions of
    /// [`try_lane_express`](Self::try_lane_express): the endpoint quiet, nothing queued for the
    /// peer) for as long as the engine is not called: its holder may then take that message
    /// without the engine ([`LaneTicket::take`]) and tell it afterwards
    /// ([`lane_ticket_taken`](Self::lane_ticket_taken)). None otherwise, and while tracing
    /// (a ticket's read is not stamped).
    pub fn lane_ticket(&mut self, peer: Rank, ep: EpId, filter: Filter) -> Option<LaneTicket> {
        if !self.settings.shm_lane
            || filter.src != Some(peer)
            || !self.core.ep_quiet(ep)
            || self.core.tx_pending(peer, 0)
            || hx_transport::trace::active()
        {
            return None;
        }
        let link = shm_link(&mut self.peers, peer, 0)?;
        Some(LaneTicket {
            link: std::ptr::NonNull::from(link),
            peer,
            ep,
            filter,
        })
    }

    /// A hold on the lane of `ticket`'s peer for a run of receives like `ticket`'s and answers
    /// to that peer ([`LaneHold`]), while the engine is not called: where the core gives eager
    /// credit for answers; None otherwise. Its receives watch every same-host link.
    pub fn lane_hold(&self, ticket: &LaneTicket) -> Option<LaneHold> {
        let peer = ticket.peer;
        let dst_ep = ticket.filter.src_ep?;
        let credit = self.core.lane_credit(peer);
        if credit == 0 || !self.polled.contains(&(peer, 0)) {
            return None;
        }
        // (As express_watch: a rail without a link has nothing to watch.)
        let others = self
            .polled
            .iter()
            .filter(|&&pr| pr != (peer, 0))
            .filter_map(|&(p, r)| self.peers[p as usize].rails[r].link.as_deref())
            .map(std::ptr::NonNull::from)
            .collect();
        Some(LaneHold {
            ticket: ticket.clone(),
            others,
            dst_ep,
            credit,
            max_len: self.core.eager_limit().min(shm::LANE_PAYLOAD),
        })
    }

    /// What a [`LaneHold`]'s run did, told before anything else touches the engine: `received`
    /// messages (count, bytes) taken by its receives, `sent` answers (count, bytes). The core
    /// counts them and their eager credit; a credit grant may be due.
    pub fn lane_hold_settled(&mut self, peer: Rank, received: (u64, u64), sent: (u64, u64)) {
        if received.0 > 0 {
            self.core.lane_received_many(peer, received.0, received.1);
        }
        if sent.0 > 0 {
            self.core.lane_sent_many(peer, sent.0, sent.1);
        }
        self.flush_dirty();
    }

    /// What a [`LaneTicket`] took, told before anything else touches the engine: the core
    /// counts it; an eager credit may be due.
    pub fn lane_ticket_taken(&mut self, st: &Status) {
        self.core.lane_received(st.source, st.len);
        self.flush_dirty();
    }

    /// The lane beside `rail` of `peer` for an express receive: its message into `buf` if the
    /// receive takes it (`Taken`), `Other` if not (a full round hands it to the core) or the
    /// lane is broken (a full round reports it); `None` when it is empty or not there.
    #[inline(always)]
    fn lane_take(
        &mut self,
        peer: Rank,
        rail: usize,
        ep: EpId,
        filter: Filter,
        buf: &mut [u8],
    ) -> Option<Express> {
        let l = shm_link(&mut self.peers, peer, rail)?;
        let st = match take_from_lane(l, peer, ep, &filter, buf) {
            LaneLook::Empty => return None,
            LaneLook::Refused => return Some(Express::Other),
            LaneLook::Taken(st) => st,
        };
        debug_assert!(self.core.ep_quiet(ep), "express receive on a busy endpoint");
        self.core.lane_received(peer, st.len);
        // (A lane message is matched before its read is stamped: the slot is the peer's again
        // once consumed.)
        if hx_transport::trace::active() {
            self.trace_parsed(peer, rail);
        }
        // An eager credit may be due.
        self.flush_dirty();
        Some(Express::Taken(st))
    }

    /// One read of each connected socket rail of `peer` for an express receive: a small message
    /// at the start of what came is copied into `buf` (Core::rx_done_express), everything else
    /// is parsed as a full round would.
    fn express_sockets(&mut self, peer: Rank, ep: EpId, filter: Filter, buf: &mut [u8]) -> Express {
        for rail in 0..self.peers[peer as usize].rails.len() {
            if self.core.tx_pending(peer, rail) {
                self.flush_rail(peer, rail);
            }
            let Some(link) = self.peers[peer as usize].rails[rail].link.as_mut() else {
                continue;
            };
            if link.polled() {
                continue;
            }
            if !self.core.rx_idle(peer, rail) {
                // Part of a frame is staged, or a payload is arriving: the full path reads it.
                return Express::Other;
            }
            let space = self.core.rx_space(peer, rail);
            match link.read(space) {
                Ok(0) => {
                    self.rail_down(peer, rail, "connection closed by peer", true);
                    return Express::Other;
                }
                Ok(n) => {
                    let (taken, parsed) = self.core.rx_done_express(peer, rail, n, ep, filter, buf);
                    if let Err(e) = parsed {
                        self.rail_down(peer, rail, &e.to_string(), false);
                    }
                    if hx_transport::trace::active() {
                        self.trace_parsed(peer, rail);
                    }
                    let Some(st) = taken else {
                        return Express::Other;
                    };
                    // An acknowledgement or an eager credit may be due.
                    self.flush_dirty();
                    return Express::Taken(st);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => return Express::Other,
                Err(e) => {
                    let by_peer = e.kind() == ErrorKind::ConnectionReset;
                    self.rail_down(peer, rail, &format!("read failed: {e}"), by_peer);
                    return Express::Other;
                }
            }
        }
        Express::Empty
    }

    /// Is a message waiting that such a receive would match? Makes progress first.
    pub fn probe(
        &mut self,
        ep: EpId,
        src: Option<Rank>,
        tag: Option<u64>,
    ) -> Result<Option<Status>, Error> {
        self.check_ep(ep)?;
        self.progress()?;
        Ok(self.core.probe(ep, src, tag))
    }

    #[inline]
    fn finish(&mut self, req: Request) -> Result<(Status, EngineBuf), Error> {
        match self.core.take(req.0) {
            Some((Completion::Done(st), buf)) if st.truncated => {
                drop(buf);
                Err(Error::Truncated(st))
            }
            Some((Completion::Done(st), buf)) => Ok((st, buf)),
            Some((Completion::Failed(e), _)) => Err(e.into()),
            Some((Completion::Pending, _)) => unreachable!("take returned a pending request"),
            None => Err(Error::Invalid(format!(
                "unknown request {:#x}",
                req.to_u64()
            ))),
        }
    }

    fn known(&self, req: Request) -> Result<bool, Error> {
        self.core
            .done(req.0)
            .ok_or_else(|| Error::Invalid(format!("unknown request {:#x}", req.to_u64())))
    }

    /// Makes progress once; returns the status if `req` is done (and releases it). When it is
    /// not, [`fd`](Self::fd) is ready to sleep on afterwards (as after [`progress`](Self::progress));
    /// when it is, nothing is armed (that would cost syscalls for a wakeup nobody waits for).
    pub fn test(&mut self, req: Request) -> Result<Option<Status>, Error> {
        if !self.known(req)? {
            let work = self.progress_once(0)?;
            if !self.known(req)? {
                // Arming looks at the rings once more and may complete it after all.
                self.arm_for_wait()?;
                if !self.known(req)? {
                    // A caller that tests in a loop polls: it too gives the CPU away now and
                    // then while nothing happens. Arming made syscalls even over shared
                    // memory, so its rounds count as socket rounds.
                    if work > 0 {
                        self.idle_polls = 0;
                    } else {
                        self.idle_polls = self.idle_polls.wrapping_add(1);
                        Self::yield_every(self.idle_polls, COURTESY_YIELD_SOCKET_POLLS);
                    }
                    return Ok(None);
                }
            }
        }
        self.finish(req).map(|(st, _)| Some(st))
    }

    /// Waits until `req` completes and releases it.
    pub fn wait(&mut self, req: Request) -> Result<Status, Error> {
        self.wait_owned(req).map(|(st, _)| st)
    }

    /// Waits until `req` completes; gives back an owned buffer (`None` for raw ones).
    pub fn wait_owned(&mut self, req: Request) -> Result<(Status, Option<Vec<u8>>), Error> {
        self.wait_until(|e| e.known(req).unwrap_or(true))?;
        let (st, buf) = self.finish(req)?;
        Ok((
            st,
            match buf {
                EngineBuf::Owned(v) => Some(v),
                EngineBuf::Raw { .. } => None,
            },
        ))
    }

    /// Waits for all requests; returns their statuses, or the first error once all are done.
    pub fn wait_all(&mut self, reqs: &[Request]) -> Result<Vec<Status>, Error> {
        self.wait_until(|e| reqs.iter().all(|&r| e.known(r).unwrap_or(true)))?;
        let mut out = Vec::with_capacity(reqs.len());
        let mut first_err = None;
        for &r in reqs {
            match self.finish(r) {
                Ok((st, _)) => out.push(st),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Spins for up to the spin time, then sleeps in epoll, until `done` holds.
    fn wait_until(&mut self, mut done: impl FnMut(&Engine) -> bool) -> Result<(), Error> {
        // Reading the clock costs as much as a round of shared-memory polling on some VMs
        // (a third of the time in a profile of the 8-byte ping-pong), so spinning counts
        // rounds and looks at the clock only every 32 idle ones.
        let mut idle_since = None::<Instant>;
        let mut idle_rounds = 0u32;
        // Asleep for bulk data: the next round sleeps in epoll again at once. Every event is
        // handled in full there (edge-triggered; reads go on until a short read, writes until
        // the socket is full), so a nonblocking round in between would find nothing and cost a
        // recv and an epoll_wait per wakeup, which on a wire-limited rail comes every 64-128 KiB.
        let mut asleep = false;
        loop {
            if done(self) {
                self.bulk_asleep = false;
                return Ok(());
            }
            if asleep {
                let (_, now) = self.sleep_for_bulk(100)?;
                let queued = self.queued_bulk();
                self.lower_lowats_below(queued);
                asleep = queued >= BULK_SLEEP && self.bulk_sleep.sleep_pays(now, self.rx_bytes);
                self.bulk_asleep = asleep;
                continue;
            }
            if self.progress_once(0)? > 0 {
                idle_since = None;
                idle_rounds = 0;
                continue;
            }
            // Spin while a reply may come any moment; while bulk data is in flight, wake up for
            // it in epoll instead (the socket buffers absorb the wakeup delay).
            // (Shared memory has no socket buffer to absorb a wakeup: keep spinning there.)
            let queued = self.queued_bulk();
            self.lower_lowats_below(queued);
            idle_rounds = idle_rounds.wrapping_add(1);
            // The clock only every 32 idle rounds (as for the spin time): in between, bulk
            // data that keeps the judge spinning counts as none.
            let look = idle_rounds.is_multiple_of(32);
            let bulk = queued >= BULK_SLEEP
                && (!self.bulk_sleep.spinning()
                    || look && self.bulk_sleep.sleep_pays(Instant::now(), self.rx_bytes));
            let spin_over =
                !look || idle_since.get_or_insert_with(Instant::now).elapsed() < self.settings.spin;
            if spin_over && !bulk {
                if self.settings.yield_while_spinning {
                    let _ = nix::sched::sched_yield();
                } else {
                    self.courtesy_yield(idle_rounds);
                    std::hint::spin_loop();
                }
                continue;
            }
            self.bulk_asleep = bulk;
            if bulk {
                self.sleep_for_bulk(100)?;
            } else {
                self.progress_once(100)?;
            }
            idle_since = None;
            idle_rounds = 0;
            asleep = bulk;
            self.bulk_asleep = asleep;
        }
    }

    /// One round that may sleep up to `timeout_ms` for bulk data, told to the judge
    /// ([`BulkSleepJudge`]): the round's work and when it ended.
    fn sleep_for_bulk(&mut self, timeout_ms: i32) -> Result<(usize, Instant), Error> {
        let t0 = Instant::now();
        let work = self.progress_once(timeout_ms)?;
        let now = Instant::now();
        self.bulk_sleep.slept(now - t0, now, self.rx_bytes);
        Ok((work, now))
    }

    /// After `idle_rounds` rounds that found nothing, now and then lets another task on this CPU
    /// run ([`COURTESY_YIELD_SOCKET_POLLS`]).
    fn courtesy_yield(&self, idle_rounds: u32) {
        let every = match self.polled.is_empty() {
            true => COURTESY_YIELD_SOCKET_POLLS,
            false => COURTESY_YIELD_POLLS,
        };
        Self::yield_every(idle_rounds, every);
    }

    /// Yields on every `every`th idle round (a power of two).
    fn yield_every(idle_rounds: u32, every: u32) {
        if idle_rounds & (every - 1) == 0 {
            let _ = nix::sched::sched_yield();
        }
    }

    /// Bulk bytes in flight when only sockets carry them (shared memory has no socket buffer
    /// to absorb a wakeup); 0 otherwise.
    fn queued_bulk(&self) -> usize {
        if self.polled.is_empty() {
            self.core.bulk_bytes()
        } else {
            0
        }
    }

    /// Bulk bytes that justify raised TCP_NOTSENT_LOWAT marks (see [`BULK_LOWAT_QUEUE`]).
    fn lowat_threshold(&self) -> usize {
        let raised = self.settings.notsent_lowat as usize * BULK_LOWAT_FACTOR as usize;
        self.sockets.len().max(1) * BULK_LOWAT_QUEUE * raised
    }

    /// A rail's socket is full: raise its TCP_NOTSENT_LOWAT while much bulk data is queued, set
    /// it back once little is. Called only then (once per socket-full, not per write), so the
    /// bulk sum it takes costs little.
    fn tune_lowat(&mut self, peer: Rank, rail: usize) {
        let base = self.settings.notsent_lowat;
        if base == 0 {
            return;
        }
        let raise = self.core.bulk_bytes() >= self.lowat_threshold();
        let Some(r) = self.peers[peer as usize].rails.get_mut(rail) else {
            return;
        };
        if r.lowat_raised == raise {
            return;
        }
        let Some(link) = r.link.as_ref() else {
            return;
        };
        let mark = if raise {
            base.saturating_mul(BULK_LOWAT_FACTOR)
        } else {
            base
        };
        // Not a TCP socket (a test's socket pair): it keeps what it has.
        if tcp::set_notsent_lowat(link.fd(), mark).is_ok() {
            r.lowat_raised = raise;
            if raise {
                self.raised_lowat += 1;
            } else {
                self.raised_lowat -= 1;
            }
        }
    }

    /// Sets raised TCP_NOTSENT_LOWAT marks back once less than their threshold is queued.
    fn lower_lowats_below(&mut self, queued: usize) {
        if self.raised_lowat == 0 || queued >= self.lowat_threshold() {
            return;
        }
        let base = self.settings.notsent_lowat;
        for i in 0..self.sockets.len() {
            let (p, rail) = self.sockets[i];
            let r = &mut self.peers[p as usize].rails[rail];
            if !r.lowat_raised {
                continue;
            }
            if let Some(link) = r.link.as_ref() {
                let _ = tcp::set_notsent_lowat(link.fd(), base);
            }
            r.lowat_raised = false;
            self.raised_lowat -= 1;
        }
    }

    /// Words back to senders of delivery-complete messages wait for the end of the round that
    /// took their messages: true while some do. A caller that skips rounds while it looks idle
    /// must not skip them now.
    pub fn words_waiting(&self) -> bool {
        self.core.words_waiting()
    }

    /// Handles whatever is ready without blocking.
    ///
    /// Afterwards [`fd`](Self::fd) becomes readable when anything arrives, shared memory
    /// included: a caller that found nothing to do may sleep in poll() on it.
    pub fn progress(&mut self) -> Result<(), Error> {
        self.progress_once(0)?;
        self.arm_for_wait()
    }

    /// Makes [`fd`](Self::fd) safe to sleep on: afterwards it becomes readable when anything
    /// arrives, shared memory included (whose links signal only when asked to). If data was
    /// already there it is handled, and the fd is made readable at once, since that may have
    /// finished a request the caller is about to wait for.
    pub fn arm_for_wait(&mut self) -> Result<(), Error> {
        if self.copies_waiting() {
            // Copies still wait for their turn: the caller must come back at once.
            let _ = self.kick.write(1);
            return Ok(());
        }
        if self.polled.is_empty() || self.arm_polled() {
            return Ok(());
        }
        self.progress_once(0)?;
        // Cannot fail short of a counter at u64::MAX - 1, which one write per arming never
        // reaches (each wakeup drains it).
        let _ = self.kick.write(1);
        Ok(())
    }

    /// For callers that poll in a loop (the libfabric provider's fi_cq_read, which Open MPI calls
    /// without pause while it waits): like [`progress`](Self::progress), but the fd is not made
    /// ready to sleep on (call `progress` before sleeping), and a round that finds
    /// nothing to do while bulk data is in flight over sockets waits up to `HX_BULK_WAIT_US`
    /// (default 1 ms, rounded up to whole ms) in epoll for it. The socket buffers absorb the
    /// wakeup, so bandwidth stays and the CPU that spinning burns between segments is saved;
    /// a reply or any other socket event ends the wait at once. Over fast links, where such
    /// waits keep ending within microseconds, the rounds return at once for a while instead
    /// (as a waiting call spins then: `BulkSleepJudge`). A long idle stretch yields the
    /// CPU now and then: every 64 idle rounds over sockets, every 1024 over shared memory.
    pub fn progress_polled(&mut self) -> Result<(), Error> {
        let work = self.progress_once(0)?;
        if work > 0 {
            self.idle_polls = 0;
            return Ok(());
        }
        // Summing the bulk bytes walks every peer (7% of an idle round when done each time):
        // look after a few idle rounds, which also lets a reply that is on its way come in.
        self.idle_polls = self.idle_polls.wrapping_add(1);
        self.courtesy_yield(self.idle_polls);
        let wait = self.settings.bulk_wait;
        if !wait.is_zero() && self.idle_polls.is_multiple_of(8) {
            let queued = self.queued_bulk();
            self.lower_lowats_below(queued);
            // Over fast links the judge has the caller poll instead, as a waiting call spins.
            let bulk =
                queued >= BULK_SLEEP && self.bulk_sleep.sleep_pays(Instant::now(), self.rx_bytes);
            self.bulk_asleep = bulk;
            if bulk {
                let ms = wait.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
                let (work, _) = self.sleep_for_bulk(ms)?;
                // Woken by data (not the timeout): more is on its way, so the next idle call
                // waits again at once rather than after another 7 polls (each a recv or an
                // epoll_wait that finds nothing on a wire-limited rail).
                if work > 0 {
                    self.idle_polls = 7;
                }
            }
        }
        // No arming of shared-memory links here: that costs two syscalls per link (and the
        // peer one per message), and a caller that polls in a loop does not sleep on the fd.
        // One that is about to sleep calls progress().
        Ok(())
    }

    /// [`progress_polled`](Self::progress_polled) with the sockets, connections and
    /// housekeeping looked at this time (a polled round over shared memory does that only
    /// every 64th time): for a caller that polls the rings by other means in between.
    pub fn progress_polled_everything(&mut self) -> Result<(), Error> {
        // progress_once counts this round and polls epoll when the count is a multiple of 64.
        self.spins |= 63;
        self.progress_polled()
    }

    /// One nonblocking round that polls epoll too (sockets, connections, housekeeping), which
    /// a spinning round over shared memory does only every 64th time.
    fn progress_everything(&mut self) -> Result<usize, Error> {
        // progress_once counts this round and polls epoll when the count is a multiple of 64.
        self.spins |= 63;
        self.progress_once(0)
    }

    /// Asks every polled (shared-memory) link to signal its fd when data arrives; false if some
    /// link already has data.
    fn arm_polled(&mut self) -> bool {
        let mut quiet = true;
        for i in 0..self.polled.len() {
            let (p, r) = self.polled[i];
            if let Some(l) = self.peers[p as usize].rails[r].link.as_mut() {
                quiet &= l.arm();
            }
        }
        quiet
    }

    /// Nothing can happen here without a newcomer: no link at all, no connection being made
    /// or accepted, nothing to write. Only a listener's backlog could change that (a driver
    /// polling in a tight loop may look for it rarely).
    pub fn lonely(&self) -> bool {
        self.sockets.is_empty()
            && self.polled.is_empty()
            && !self.core.has_tx_work()
            && !self.core.words_waiting()
            && self.nothing_connecting()
            // A peer we have something for: its rails are retried and it is given up on in
            // rounds, on time.
            && self.peers.iter().enumerate().all(|(i, p)| {
                !p.wanted || self.core.peer_failed(i as Rank).is_some()
            })
    }

    /// No connection is being made or accepted (no handshake under way, none waiting in a
    /// listener's backlog for a slot).
    fn nothing_connecting(&self) -> bool {
        !self.backlog_waiting
            && !self.shm_backlog_waiting
            && self.pending.iter().all(Option::is_none)
            && self.connecting.iter().all(Option::is_none)
            && self.shm_out.iter().all(Option::is_none)
            && self.shm_in.iter().all(Option::is_none)
    }

    /// Waits up to `timeout_ms` for events, handles them, and writes what can be written.
    /// Returns how many things happened (events, and reads on polled links).
    fn progress_once(&mut self, mut timeout_ms: i32) -> Result<usize, Error> {
        let mut work = 0;
        if self.copies_waiting() {
            // Copies wait for their turn (flush_dirty_peers): no sleeping before they are made.
            timeout_ms = 0;
        }
        if timeout_ms == 0 && self.polled.is_empty() && self.sockets.len() <= SPIN_READ_LINKS {
            // Spinning on a socket or two: read them directly. The data comes with the syscall
            // that notices it, where epoll_wait and then recv took two (~0.5 us a message);
            // epoll still runs every few rounds for everything else, and every round while a
            // socket waits for room. With no link at all (nobody has talked to us yet: Open
            // MPI's btl/ofi beside vader on one host polls the provider every 8th progress
            // loop), only listeners and connections being made wait in epoll: every 16th
            // round looks, where each round's epoll_wait put a syscall into vader's loop.
            let mut i = 0;
            while let Some(&(p, r)) = self.sockets.get(i) {
                work += self.read_rail(p, r);
                i += 1;
            }
            self.spins = self.spins.wrapping_add(1);
            let blocked = self
                .sockets
                .iter()
                .any(|&(p, r)| self.peers[p as usize].rails[r].blocked);
            if !blocked && !self.spins.is_multiple_of(16) {
                work += self.flush_dirty();
                return Ok(work);
            }
        }
        if !self.polled.is_empty() {
            // Shared memory moves without syscalls: look at it every round, and before
            // sleeping ask it to signal its fd.
            // A link that breaks here leaves `polled` (rail_down): index, not iterate.
            let mut i = 0;
            while let Some(&(p, r)) = self.polled.get(i) {
                // Most spinning rounds find nothing: a look at the ring's head is enough then.
                let ready = self.peers[p as usize].rails[r]
                    .link
                    .as_mut()
                    .is_some_and(|l| l.ready());
                if ready {
                    work += self.read_polled(p, r);
                }
                if self.core.tx_pending(p, r) {
                    self.flush_rail(p, r);
                }
                i += 1;
            }
            if timeout_ms != 0 && work == 0 && !self.arm_polled() {
                timeout_ms = 0;
            }
            self.spins = self.spins.wrapping_add(1);
            // While spinning on shared memory, look at the sockets only every few rounds.
            if timeout_ms == 0 && !self.spins.is_multiple_of(64) {
                work += self.flush_dirty();
                return Ok(work);
            }
        }
        let n = self
            .poller
            .wait(&mut self.events, timeout_ms)
            .map_err(io_err("epoll_wait"))?;
        for i in 0..n {
            let ev = self.events[i];
            let (flags, token) = poller::split(&ev);
            match token & T_MASK {
                T_LINK => {
                    let peer = ((token >> 16) & 0xffff_ffff) as Rank;
                    let rail = (token & 0xffff) as usize;
                    if let Some(l) = self.peers[peer as usize]
                        .rails
                        .get_mut(rail)
                        .and_then(|r| r.link.as_mut())
                    {
                        l.event();
                    }
                    if flags & poller::HUP != 0 {
                        // The peer's FIN may have come with the last data in this one edge:
                        // read to the end, or the close is never seen again.
                        self.read_rail_to_end(peer, rail);
                    } else if flags & poller::IN != 0 {
                        self.read_rail(peer, rail);
                    }
                    // Every edge reports the whole mask, so OUT also comes with plain input:
                    // only a rail that was full has news here. Its turn comes in flush_dirty,
                    // shared fairly with the other rails.
                    if flags & poller::OUT != 0 {
                        if let Some(r) = self.peers[peer as usize].rails.get_mut(rail) {
                            if r.blocked {
                                r.blocked = false;
                                if !self.dirty.contains(&peer) {
                                    self.dirty.push(peer);
                                }
                            }
                        }
                    }
                }
                T_LISTEN if token & T_CONNECT == T_CONNECT => {
                    self.advance_connect((token & 0xffff_ffff) as usize)
                }
                T_LISTEN if token & T_SHM_LISTEN == T_SHM_LISTEN => self.shm_accept(),
                T_LISTEN if token & T_SHM_CONNECT == T_SHM_CONNECT => {
                    self.advance_shm_connect((token & 0xffff_ffff) as usize)
                }
                T_LISTEN if token & T_KICK == T_KICK => {
                    // EAGAIN when already drained.
                    let _ = self.kick.read();
                }
                T_LISTEN if token & T_SHM_ACCEPT == T_SHM_ACCEPT => {
                    self.advance_shm_accept((token & 0xffff_ffff) as usize);
                    self.shm_slot_freed();
                }
                T_LISTEN => self.accept((token & 0xffff_ffff) as usize),
                T_PENDING => self.advance_handshake((token & !T_MASK) as usize),
                _ => {}
            }
        }
        // Reading the clock was 4% of an idle poll round (the provider's fi_cq_read loop):
        // an idle non-blocking round looks at it only every 16th time.
        self.rounds = self.rounds.wrapping_add(1);
        if n > 0 || timeout_ms != 0 || self.rounds.is_multiple_of(16) {
            let now = Instant::now();
            if now >= self.next_housekeeping {
                self.next_housekeeping = now + HOUSEKEEPING;
                self.housekeeping(now);
                self.shm_slot_freed();
            }
        }
        work += self.flush_dirty();
        Ok(n + work)
    }

    /// Copies a rendezvous message straight into the memory of its receiver on this host:
    /// true if all of it was written.
    fn direct_copy(&self, w: &DirectWrite) -> bool {
        let pid = self.peers[w.peer as usize].pid as libc::pid_t;
        let src = self.core.direct_source(w);
        if pid == 0 || src.len() != w.len {
            // No link's peer to copy into, or a stale request (its source is gone): the data
            // frames path sorts it out.
            return false;
        }
        let mut done = 0;
        while done < w.len {
            let remote = RemoteIoVec {
                base: w.remote_addr as usize + done,
                len: w.len - done,
            };
            // The kernel checks the remote range against the peer's mappings; the local slice
            // is our live send buffer (src.len() == w.len).
            let e = match process_vm_writev(
                Pid::from_raw(pid),
                &[IoSlice::new(&src[done..])],
                &[remote],
            ) {
                Ok(0) => std::io::Error::from(std::io::ErrorKind::WriteZero),
                Ok(n) => {
                    done += n;
                    continue;
                }
                Err(e) => e.into(),
            };
            warn!(
                "hxcomm {}: direct copy to {} not possible ({e}); large messages to it go through the shared-memory ring",
                self.whoami(),
                self.who(w.peer)
            );
            return false;
        }
        true
    }

    /// Writes what is queued and makes the direct copies that wait, whole messages until
    /// [`DIRECT_COPY_BUDGET`] bytes; returns how many it made.
    // Always: it runs after every posted receive and most rounds, and nearly always finds
    // nothing to do; as a call its prologue cost more than its checks.
    #[inline(always)]
    fn flush_dirty(&mut self) -> usize {
        if self.core.words_waiting() {
            // Words back to delivery-complete senders leave with this flush (together, one
            // frame per run), never held past it: an application that has its message may
            // stop calling us, and its sender would wait for ever. (Held for a reply, they
            // saved Open MPI's btl/ofi a write and a read per message, 9 us against 12.)
            self.core.release_words();
        }
        // The common case of a spinning round and of a small message's path: nothing to write
        // (checked before the call, whose prologue alone costs more than the check).
        if !self.dirty.is_empty() || self.core.has_tx_work() || !self.fins_held.is_empty() {
            return self.flush_dirty_peers();
        }
        0
    }

    /// Direct copies wait to be made, or their FINs to be sent (see flush_dirty_peers).
    fn copies_waiting(&self) -> bool {
        self.core.direct_pending() || !self.fins_held.is_empty()
    }

    #[inline(never)]
    fn flush_dirty_peers(&mut self) -> usize {
        // Frames before copies, and a bounded amount of copying per round: a clear-to-send for
        // the peer's messages then leaves while we copy ours (two ways at once, each side
        // copies into the other; copying a whole window first held them back for all of it),
        // and the next round reads what came meanwhile before copying on.
        self.flush_frames();
        let (mut copies, mut copied) = (0, 0);
        while copied < DIRECT_COPY_BUDGET {
            let Some(w) = self.core.take_direct() else {
                break;
            };
            copies += 1;
            copied += w.len;
            if self.direct_copy(&w) {
                self.fins_held.push(w);
            } else {
                self.core.direct_done(w, false);
            }
        }
        // A receiver's FINs wait until no more copies to it are queued (or FIN_HOLD bytes are
        // held): one per copy woke a receiver that sleeps between them once per message
        // (hxcomm bench bw, 2 MiB one way: 0.41-0.98x).
        let mut released = false;
        if !self.fins_held.is_empty() {
            let all = self.fins_held.iter().map(|w| w.len).sum::<usize>() >= FIN_HOLD;
            let mut kept = Vec::new();
            for w in std::mem::take(&mut self.fins_held) {
                if all || !self.core.direct_pending_to(w.peer) {
                    self.core.direct_done(w, true);
                    released = true;
                } else {
                    kept.push(w);
                }
            }
            self.fins_held = kept;
        }
        if copies > 0 || released {
            self.flush_frames();
        }
        copies
    }

    fn flush_frames(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty);
        self.core.take_dirty(&mut dirty);
        dirty.sort_unstable();
        dirty.dedup();
        for &p in &dirty {
            // Connect on first use; housekeeping brings back what breaks later.
            if !self.peers[p as usize].wanted {
                self.connect_wanted(p, Instant::now());
            }
            // Rails take turns, one write each, until none can take more: otherwise the first
            // rail would pull every chunk of a message its socket buffer can hold, and a
            // medium-size message would leave on one rail only.
            self.start_rounds(p);
            loop {
                let mut wrote = false;
                for rail in 0..self.peers[p as usize].rails.len() {
                    wrote |= self.flush_rail_turns(p, rail, 1) > 0;
                }
                if !wrote {
                    break;
                }
            }
            self.judge_links(p);
            self.core.tx_round(p, false);
        }
        dirty.clear();
        self.dirty = dirty;
    }

    /// Rounds of turns on `peer`'s rails begin: adaptive striping with work to pull first
    /// learns how much each socket still has to carry (one ioctl per rail; none when every link
    /// keeps up with writes), and how fast a link drained what the last judged flush left in it.
    fn start_rounds(&mut self, peer: Rank) {
        if !self.core.judges_links(peer) {
            self.core.tx_round(peer, true);
            return;
        }
        let pull = self.core.wants_link_backlogs(peer);
        let mut now = None;
        for rail in 0..self.peers[peer as usize].rails.len() {
            let timing = self.core.wants_backlog_before_write(peer, rail);
            if !pull && !timing {
                continue;
            }
            let now = *now.get_or_insert_with(|| self.created.elapsed().as_micros() as u64);
            let backlog = match self.peers[peer as usize].rails[rail].link.as_ref() {
                Some(l) if !l.polled() => tcp::send_backlog(l.fd()).unwrap_or(0),
                _ => 0,
            };
            if pull {
                self.core.set_link_backlog(peer, rail, backlog, now);
            }
            if timing {
                self.core.backlog_before_write(peer, rail, backlog, now);
            }
        }
        self.core.tx_round(peer, true);
    }

    /// Adaptive: after a flush, how much of what it wrote each socket still holds (one ioctl
    /// per rail the core asks about): whether the links keep up with writes.
    fn judge_links(&mut self, peer: Rank) {
        if !self.core.judges_links(peer) {
            return;
        }
        let mut now = None;
        for rail in 0..self.peers[peer as usize].rails.len() {
            let fd = match self.peers[peer as usize].rails[rail].link.as_ref() {
                Some(l) if !l.polled() => l.fd(),
                _ => continue,
            };
            if self.core.wants_backlog_after_write(peer, rail) {
                if let Ok(backlog) = tcp::send_backlog(fd) {
                    let now = *now.get_or_insert_with(|| self.created.elapsed().as_micros() as u64);
                    self.core.backlog_after_write(peer, rail, backlog, now);
                }
            }
        }
    }

    fn flush_rail(&mut self, peer: Rank, rail: usize) {
        self.flush_rail_turns(peer, rail, usize::MAX);
    }

    /// Writes what `rail` to `peer` has, at most `turns` writes; returns how many it made.
    fn flush_rail_turns(&mut self, peer: Rank, rail: usize, turns: usize) -> usize {
        let p = peer as usize;
        let mut made = 0;
        loop {
            if made == turns || !self.core.tx_pending(peer, rail) {
                return made;
            }
            let Some(r) = self.peers[p].rails.get_mut(rail) else {
                return made;
            };
            r.wake_latency_cc(self.latency_cc.as_deref());
            let blocked = r.blocked;
            let Some(link) = r.link.as_mut() else {
                return made;
            };
            // Sockets wait for EPOLLOUT once full; shared memory is simply tried again.
            if blocked && !link.polled() {
                return made;
            }
            // A few frames (a small message) need few slots: filling 64 empty ones was a fifth
            // of a small send's instructions.
            let written = if self.core.tx_few(peer, rail) {
                Self::write_turn::<8>(&mut self.core, link, peer, rail)
            } else {
                Self::write_turn::<64>(&mut self.core, link, peer, rail)
            };
            match written {
                Ok(None) => return made,
                Ok(Some(full)) => {
                    made += 1;
                    if full {
                        self.peers[p].rails[rail].blocked = true;
                        if !blocked {
                            self.rail_full(peer, rail);
                        }
                        return made;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.peers[p].rails[rail].blocked = true;
                    if !blocked {
                        self.rail_full(peer, rail);
                    }
                    return made;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    let by_peer =
                        matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset);
                    // A peer that finished in order left its Bye behind before closing: read
                    // it first, or its orderly exit looks like a crash.
                    self.read_rail_to_end(peer, rail);
                    self.rail_down(peer, rail, &format!("write failed: {e}"), by_peer);
                    return made;
                }
            }
        }
    }

    /// A socket rail stopped taking data (it waits for EPOLLOUT now).
    fn rail_full(&mut self, peer: Rank, rail: usize) {
        let polled = self.peers[peer as usize].rails[rail]
            .link
            .as_ref()
            .is_none_or(|l| l.polled());
        if !polled {
            self.tune_lowat(peer, rail);
            self.tune_congestion(peer, rail);
        }
    }

    /// A rail socket filled: it carries bulk data, which HX_TCP_CONGESTION is for (when a
    /// latency algorithm is set; by default there is one throughout), until it has
    /// written nothing for [`BULK_CC_IDLE_MS`](crate::conn::BULK_CC_IDLE_MS) (then
    /// RailSlot::wake_latency_cc takes it back to the latency algorithm before its next write).
    fn tune_congestion(&mut self, peer: Rank, rail: usize) {
        let Some(bulk) = self.settings.tcp_congestion.as_deref() else {
            return;
        };
        if self.latency_cc.is_none() {
            return;
        }
        let Some(r) = self.peers[peer as usize].rails.get_mut(rail) else {
            return;
        };
        if std::mem::replace(&mut r.bulk_cc, true) {
            return;
        }
        r.bulk_written_ms = crate::conn::coarse_ms();
        if let Some(link) = r.link.as_ref() {
            if let Err(e) = tcp::set_congestion_fd(link.fd(), bulk) {
                // The socket keeps the latency algorithm; the others will not switch either.
                debug!("hxcomm: rail sockets stop switching algorithms: {e}");
                self.latency_cc = None;
            }
        }
    }

    /// One write of what `rail` to `peer` has queued, at most `N` slices: `None` if there was
    /// nothing, else whether the link took less than offered (it is full).
    fn write_turn<const N: usize>(
        core: &mut Core<EngineBuf>,
        link: &mut Box<dyn hx_transport::Link>,
        peer: Rank,
        rail: usize,
    ) -> std::io::Result<Option<bool>> {
        let mut iov = [IoSlice::new(&[]); N];
        let cnt = core.tx_iovecs(peer, rail, &mut iov);
        if cnt == 0 {
            return Ok(None);
        }
        let want: usize = iov[..cnt].iter().map(|s| s.len()).sum();
        let n = link.write_vectored(&iov[..cnt])?;
        core.tx_done(peer, rail, n);
        Ok(Some(n < want))
    }

    /// Reads what `rail` of `peer` has; returns the number of bytes read.
    pub(crate) fn read_rail(&mut self, peer: Rank, rail: usize) -> usize {
        self.read_rail_until(peer, rail, false)
    }

    /// A polled link with data: small eager frames for posted receives are taken in place
    /// (Core::rx_express), the rest through the staging path.
    fn read_polled(&mut self, peer: Rank, rail: usize) -> usize {
        let mut total = self.drain_lane(peer, rail);
        while let Some(link) = self.peers[peer as usize]
            .rails
            .get_mut(rail)
            .and_then(|r| r.link.as_mut())
        {
            let Some(n) = link
                .peek()
                .and_then(|bytes| self.core.rx_express(peer, rail, bytes))
            else {
                break;
            };
            link.consume(n);
            total += n;
            if hx_transport::trace::active() {
                self.trace_parsed(peer, rail);
            }
        }
        let more = self.peers[peer as usize]
            .rails
            .get_mut(rail)
            .and_then(|r| r.link.as_mut())
            .is_some_and(|l| total == 0 || l.ready());
        if more {
            total += self.read_rail(peer, rail);
        }
        total
    }

    fn read_rail_to_end(&mut self, peer: Rank, rail: usize) -> usize {
        self.read_rail_until(peer, rail, true)
    }

    /// A short read ends the loop (the socket is drained: saves a syscall per message) unless
    /// `to_end`, when only WouldBlock or EOF does.
    fn read_rail_until(&mut self, peer: Rank, rail: usize, to_end: bool) -> usize {
        let p = peer as usize;
        // A lane message comes before the ring's next bytes (and its end).
        let mut total = match self.peers[p].shm {
            true => self.drain_lane(peer, rail),
            false => 0,
        };
        loop {
            let Some(link) = self.peers[p]
                .rails
                .get_mut(rail)
                .and_then(|r| r.link.as_mut())
            else {
                return total;
            };
            let space = self.core.rx_space(peer, rail);
            let want = space.len();
            match link.read(space) {
                Ok(0) => {
                    self.rail_down(peer, rail, "connection closed by peer", true);
                    return total;
                }
                Ok(n) => {
                    total += n;
                    self.rx_bytes += n as u64;
                    self.rcvlowat_filled(peer, rail, n);
                    if let Err(e) = self.core.rx_done(peer, rail, n) {
                        self.rail_down(peer, rail, &e.to_string(), false);
                        return total;
                    }
                    if hx_transport::trace::active() {
                        self.trace_parsed(peer, rail);
                    }
                    if n < want && !to_end {
                        self.tune_rcvlowat(peer, rail);
                        return total;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.tune_rcvlowat(peer, rail);
                    return total;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    let by_peer = e.kind() == ErrorKind::ConnectionReset;
                    self.rail_down(peer, rail, &format!("read failed: {e}"), by_peer);
                    return total;
                }
            }
        }
    }

    /// The socket of `rail` to `peer` is drained: let epoll report it readable once the rest of a
    /// large payload is there (all of it is on its way: the sender wrote its header), or at the
    /// first byte otherwise. A nonblocking read (spinning) still takes whatever has come.
    ///
    /// Only while the engine sleeps for bulk data: a spinning engine reads without epoll and
    /// would pay a setsockopt per read for nothing; it only lowers a mark that has become larger
    /// than what is left (which would never be reached).
    fn tune_rcvlowat(&mut self, peer: Rank, rail: usize) {
        let Some(r) = self.peers[peer as usize].rails.get(rail) else {
            return;
        };
        if r.rcvlowat == 0 && !self.bulk_asleep {
            return;
        }
        let left = self.core.rx_payload_left(peer, rail);
        let mut mark = if self.bulk_asleep && left >= RCVLOWAT_MIN {
            left.min(RCVLOWAT_MAX) as u32
        } else {
            0
        };
        let r = &mut self.peers[peer as usize].rails[rail];
        if mark != 0 {
            if let Some(until) = r.rcvlowat_off_until {
                if Instant::now() < until {
                    mark = 0;
                } else {
                    r.rcvlowat_off_until = None;
                }
            }
        }
        if r.rcvlowat == mark || (!self.bulk_asleep && r.rcvlowat as usize <= left) {
            return;
        }
        let Some(link) = r.link.as_ref().filter(|l| !l.polled()) else {
            return;
        };
        // Set to exactly the rest of the payload: the wakeup comes with its last byte.
        if tcp::set_rcvlowat(link.fd(), mark.max(1)).is_ok() {
            r.rcvlowat = mark;
            r.rcvlowat_since = (mark != 0).then(Instant::now);
        }
    }

    /// A read of `n` bytes on `rail`: if it took the whole of a raised SO_RCVLOWAT mark, how
    /// fast the mark filled says whether marks pay on this rail ([`RCVLOWAT_FAST_BYTES_PER_S`]).
    fn rcvlowat_filled(&mut self, peer: Rank, rail: usize, n: usize) {
        let Some(r) = self.peers[peer as usize].rails.get_mut(rail) else {
            return;
        };
        let Some(t0) = r.rcvlowat_since else {
            return;
        };
        if n < r.rcvlowat as usize {
            return;
        }
        r.rcvlowat_since = None;
        let now = Instant::now();
        if filled_too_fast(r.rcvlowat, now.duration_since(t0)) {
            r.rcvlowat_off_until = Some(now + RCVLOWAT_OFF_FOR);
        }
    }

    /// A rail ended. After the peer's Bye (or while we finalize) that is orderly. Otherwise its
    /// traffic moves to the other rails and both sides try to bring it back while it is wanted.
    /// When the peer itself closed every rail (it exited or crashed), or no rail comes back within
    /// HX_RANK_TIMEOUT, operations involving the peer fail.
    pub(crate) fn rail_down(&mut self, peer: Rank, rail: usize, why: &str, closed_by_peer: bool) {
        let p = peer as usize;
        let Some(link) = self.peers[p]
            .rails
            .get_mut(rail)
            .and_then(|r| r.link.take())
        else {
            return;
        };
        self.poller.remove(link.fd());
        if link.polled() {
            self.polled.retain(|&pr| pr != (peer, rail));
        } else {
            self.sockets.retain(|&pr| pr != (peer, rail));
        }
        drop(link);
        if std::mem::take(&mut self.peers[p].rails[rail].lowat_raised) {
            self.raised_lowat -= 1;
        }
        let label = self.peers[p].rails[rail].label.clone();
        let whoami = self.whoami();
        if self.core.bye_received(peer, rail) || self.finalizing {
            debug!(peer, rail = %label, why, "rail closed in order");
            return;
        }
        if self.core.peer_failed(peer).is_some() {
            return;
        }
        self.core.rail_down(peer, rail);
        self.rail_failures += 1;
        let shm = self.peers[p].shm;
        let r = &mut self.peers[p].rails[rail];
        // Shared memory cannot break but by the peer's end.
        r.gone = closed_by_peer || shm;
        r.down_since = Some(Instant::now());
        r.next_retry = Instant::now() + Duration::from_millis(100);
        self.peers[p].wanted = true;
        self.check_peer_gone(peer, why, &label);
        if self.core.peer_failed(peer).is_none() {
            warn!(
                "hxcomm {whoami}: rail {label} to {} failed ({why}); its traffic moves to the other rails",
                self.who(peer)
            );
        }
    }

    /// Returns when every rank of the job has entered the barrier.
    pub fn barrier(&mut self) -> Result<(), Error> {
        let size = self.size();
        let me = self.rank();
        let round = self.barrier_round;
        self.barrier_round += 1;
        let mut dist = 1;
        while dist < size {
            let to = (me + dist) % size;
            let from = (me + size - dist) % size;
            let tag = round << 8 | dist.trailing_zeros() as u64;
            let s = self.start_send(
                BARRIER_EP,
                to,
                BARRIER_EP,
                tag,
                EngineBuf::Owned(Vec::new()),
            )?;
            let r = self.start_recv(
                BARRIER_EP,
                Some(from),
                Some(tag),
                EngineBuf::Owned(Vec::new()),
            )?;
            self.wait_all(&[s, r])?;
            dist *= 2;
        }
        Ok(())
    }

    /// Completes outstanding sends, waits for every rank, then closes all rails in order: each
    /// side sends Bye and waits (up to 5 s) for the peer's Bye before closing, so that no rank
    /// mistakes another's exit for a failure and no unread data turns a close into a reset.
    pub fn finalize(mut self) -> Result<(), Error> {
        self.wait_until(|e| {
            !e.copies_waiting() && (0..e.size()).all(|p| !e.core.peer_tx_pending(p))
        })?;
        let r = if self.bootstrap.is_some() {
            self.barrier()
        } else {
            Ok(())
        };
        for p in 0..self.size() {
            if p != self.rank() && self.core.peer_failed(p).is_none() {
                self.core.send_bye(p);
            }
        }
        self.flush_dirty();
        let deadline = Instant::now() + Duration::from_secs(5);
        let any_link = |e: &Engine| {
            e.peers
                .iter()
                .any(|p| p.rails.iter().any(|r| r.link.is_some()))
        };
        while Instant::now() < deadline && any_link(&self) {
            // Rails leave `links` when the peer's Bye and EOF have been read.
            let all_bye = (0..self.size()).all(|p| {
                (0..self.peers[p as usize].rails.len()).all(|rail| {
                    self.peers[p as usize].rails[rail].link.is_none()
                        || self.core.bye_received(p, rail)
                })
            });
            let all_sent =
                !self.copies_waiting() && (0..self.size()).all(|p| !self.core.peer_tx_pending(p));
            // Outside a launched job peers close on their own schedule: our Bye is enough.
            if all_sent && (all_bye || self.open_to_unknown) {
                break;
            }
            self.progress_once(10)?;
        }
        self.finalizing = true;
        let live = self.core.live_requests();
        if live > 0 {
            info!("finalize with {live} requests not completed or not released");
        }
        r
    }

    /// Rails that broke (not closed in order) since start.
    pub fn rail_failures(&self) -> u64 {
        self.rail_failures
    }

    /// Frames resent on other rails because their rail broke.
    pub fn resent_frames(&self) -> u64 {
        self.core.resent_frames()
    }

    /// Why `peer` is considered failed, if it is.
    pub fn peer_failure(&self, peer: Rank) -> Option<&str> {
        self.core.peer_failed(peer)
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives a judge through a run of short sleeps and both trials; `spin_bytes` and
    /// `sleep_bytes` are received during the spinning and the sleeping trial.
    fn judge_trials(spin_bytes: u64, sleep_bytes: u64) -> (BulkSleepJudge, Instant) {
        let short = BULK_SLEEP_SHORT / 2;
        let mut j = BulkSleepJudge::default();
        let (t, b) = fast_run(&mut j, Instant::now());
        assert!(j.spinning());
        assert!(!j.sleep_pays(t + BULK_TRIAL / 2, b + spin_bytes / 2));
        let t1 = t + BULK_TRIAL;
        // The spinning trial ends: now sleep, and measure that.
        assert!(j.sleep_pays(t1, b + spin_bytes));
        assert!(!j.spinning());
        j.slept(short, t1, b + spin_bytes); // short sleeps do not count during a trial
        assert!(j.sleep_pays(t1 + BULK_TRIAL / 2, b + spin_bytes + sleep_bytes / 2));
        let t2 = t1 + BULK_TRIAL;
        j.sleep_pays(t2, b + spin_bytes + sleep_bytes);
        (j, t2)
    }

    /// Short sleeps every 100 us, 1 MB received in each (10 GB/s), for 2 ms from `t`.
    fn fast_run(j: &mut BulkSleepJudge, t: Instant) -> (Instant, u64) {
        let step = Duration::from_micros(100);
        let mut now = t;
        let mut bytes = 0;
        while now.duration_since(t) < BULK_SHORT_RUN {
            assert!(j.sleep_pays(now, bytes));
            j.slept(BULK_SLEEP_SHORT / 2, now, bytes);
            now += step;
            bytes += 1 << 20;
        }
        j.slept(BULK_SLEEP_SHORT / 2, now, bytes);
        (now, bytes)
    }

    #[test]
    fn fast_short_bulk_sleeps_start_trials_and_slow_or_long_ones_do_not() {
        let t = Instant::now();
        let short = BULK_SLEEP_SHORT / 2;
        // A long sleep (a wire-limited rail: until a mark's worth has come) breaks the run.
        let mut j = BulkSleepJudge::default();
        j.slept(short, t, 0);
        j.slept(BULK_SLEEP_SHORT, t + BULK_SHORT_RUN / 2, 1 << 30);
        j.slept(short, t + BULK_SHORT_RUN, 1 << 30);
        assert!(!j.spinning());
        // Short sleeps receiving 0.5 GB/s (four 1 Gbit/s rails): no trial.
        let mut j = BulkSleepJudge::default();
        let step = Duration::from_micros(100);
        for k in 0..=2 * (BULK_SHORT_RUN.as_micros() / 100) as u32 {
            j.slept(short, t + step * k, k as u64 * 50_000);
        }
        assert!(!j.spinning());
        assert!(j.sleep_pays(t, 0));
        // Fast ones: a trial of spinning.
        let mut j = BulkSleepJudge::default();
        fast_run(&mut j, t);
        assert!(j.spinning());
        assert!(!j.sleep_pays(t, 0));
    }

    #[test]
    fn spinning_is_kept_only_when_it_received_more_and_is_tried_again_later() {
        // Spinning received 20% more: keep spinning, then try again.
        let (mut j, t) = judge_trials(120 << 20, 100 << 20);
        assert!(j.spinning());
        assert!(!j.sleep_pays(t + BULK_KEEP_SPIN - Duration::from_millis(1), 0));
        assert!(!j.sleep_pays(t + BULK_KEEP_SPIN, 0));
        assert!(matches!(j.phase, BulkPhase::TrySpin { .. }));
        // Within the margin, or a rank that only sends (nothing received either way): sleep,
        // without counting short sleeps for a while, then judge afresh.
        for (spin, sleep) in [(104 << 20, 100 << 20), (0, 0), (90 << 20, 100 << 20)] {
            let (mut j, t) = judge_trials(spin, sleep);
            assert!(!j.spinning(), "{spin} against {sleep}");
            fast_run(&mut j, t);
            assert!(!j.spinning());
            assert!(j.sleep_pays(t + BULK_KEEP, 0));
            assert_eq!(j.phase, BulkPhase::Sleep);
        }
        // Sleeping winning again is kept longer each time, up to BULK_KEEP_MAX.
        let (mut j, mut t) = judge_trials(100, 100);
        let mut keeps = vec![];
        for _ in 0..8 {
            let BulkPhase::Hold { until } = j.phase else {
                panic!("{:?}", j.phase)
            };
            keeps.push(until - t);
            assert!(j.sleep_pays(until, 0));
            t = fast_run(&mut j, until).0;
            assert!(j.spinning());
            assert!(j.sleep_pays(t + BULK_TRIAL, 0));
            t += BULK_TRIAL * 2;
            assert!(j.sleep_pays(t, 0));
        }
        assert_eq!(keeps[0], BULK_KEEP);
        assert_eq!(keeps[1], BULK_KEEP * 2);
        assert_eq!(*keeps.last().unwrap(), BULK_KEEP_MAX);
    }

    #[test]
    fn marks_stay_on_wire_limited_rails_and_go_on_fast_ones() {
        // 64 KiB over 1 Gbit/s takes ~550 us: marks pay (one wakeup instead of dozens).
        assert!(!filled_too_fast(64 << 10, Duration::from_micros(550)));
        // 1 MiB over 1 Gbit/s, ~8.8 ms.
        assert!(!filled_too_fast(1 << 20, Duration::from_micros(8800)));
        // veth without a limit: 64 KiB in ~15 us, 1 MiB in ~200 us.
        assert!(filled_too_fast(64 << 10, Duration::from_micros(15)));
        assert!(filled_too_fast(1 << 20, Duration::from_micros(200)));
        // The line: 1 GB/s.
        assert!(!filled_too_fast(1_000_000, Duration::from_millis(1)));
        assert!(filled_too_fast(1_000_001, Duration::from_millis(1)));
    }
}
