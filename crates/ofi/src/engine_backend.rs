//! The provider's backend over the hxcomm engine: one `Engine` per domain (one process identity,
//! one set of listeners and rails), each fi endpoint a pair of engine endpoints (tagged and
//! untagged messages are separate matching spaces; the untagged one also carries the notices of
//! remote writes with CQ data, under a tag of their own), peers as the engine knows them (by
//! address, connected on first use).

use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use hx_engine::{
    apply_atomic, Access, AtomicOp, AtomicType, Engine, EngineBuf, Express, Filter, Rank, Regions,
    Request, RmaRefusal, Settings, TagMatch,
};
use std::sync::Arc;

use crate::mr::RegionTable;

use crate::backend::{
    Backend, BackendConfig, BackendError, Done, Found, OpId, PeerId, Polled, SendBuf, SendTo,
    Served, Ticket, NAME_LEN,
};
use crate::sys::{
    FI_EACCES, FI_EAGAIN, FI_EINVAL, FI_EIO, FI_ENODATA, FI_ENOENT, FI_ENOSPC, FI_ETRUNC,
};

/// Largest message the engine carries (the protocol counts length in 16-byte units of a u32).
pub const ENGINE_MAX_MSG: usize = u32::MAX as usize * 16;

// Cold and out of line: the formatting it carries kept the hot callers (a send's peer lookup)
// from being inlined.
#[cold]
#[inline(never)]
fn err(errno: i32, e: impl std::fmt::Display) -> BackendError {
    BackendError::new(errno, e.to_string())
}

struct Op {
    /// The id the domain knows it by: the engine request's, or a parked receive's.
    id: OpId,
    is_recv: bool,
    /// Capacity of a receive buffer.
    cap: usize,
    /// A discard: completes silently.
    discard: bool,
    /// The fi endpoint of a receive still to be matched (closing it cancels the receive) or
    /// of a send (closing it gives the send a copy of its buffer); `NO_EP` for claimed
    /// messages.
    ep: u16,
    /// What its completion means beyond a plain send or receive.
    then: Then,
}

/// The steps of fi_writedata: the write, then a notice carrying its CQ data to the target's
/// untagged engine endpoint (sent only once the data is placed, so the target's completion
/// never comes before the data), reported as the op once that has left; at the target, the
/// notice received, reported as the watch op of its fi endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    Nothing,
    /// A write of `len` bytes; when placed, send the notice (engine endpoints and peer).
    Notify {
        src_ep: u16,
        rank: Rank,
        dst_ep: u16,
        len: usize,
        data: u64,
    },
    /// The notice of a placed write of `len` bytes: when it has left, the write is done.
    Notified {
        len: usize,
    },
    /// A notice received: the write's length is in its tag.
    Notice,
}

/// A notice's tag: this bit, and the write's length (a message is at most 2^36 bytes). Untagged
/// messages carry tag 0 and untagged receives take only that, so the two never meet.
const NOTICE_TAG: u64 = 1 << 62;

/// What the notices on an untagged engine endpoint are received with.
const NOTICES: Filter = Filter {
    src: None,
    src_ep: None,
    tag: TagMatch {
        tag: NOTICE_TAG,
        ignore: !NOTICE_TAG,
    },
};

/// What untagged receives take: tag 0 (not the notices).
const UNTAGGED: TagMatch = TagMatch { tag: 0, ignore: 0 };

const NO_EP: u16 = u16::MAX;

/// A receive the backend holds instead of posting it to the engine, while nothing else is
/// posted or waiting on its endpoint (other held receives aside, which come first) and the
/// links an express look reads can answer it (shared memory, or the rails of the one peer it
/// names): each poll of the CQ
/// then looks at them for it ([`Engine::try_recv_express`]) and a small message lands in
/// its buffer without an engine request, a full engine round or the completion bookkeeping,
/// which were most of the instructions of a small receive through Open MPI. A poll makes an
/// engine round when the rings hold something else or (finding them empty) requests are in
/// flight, and one that polls the sockets too at least every [`PARKED_SOCKET_INTERVAL`].
/// Anything that could observe its order (another receive, a probe, a claim, sleeping, a
/// message queued on its endpoint by a round, a failed peer) posts it to the engine first
/// ([`EngineBackend::unpark`]).
struct Parked {
    /// Bit 63 set: engine request ids never have it (their generations stay below 2^31).
    op: OpId,
    ep: u16,
    filter: Filter,
    /// The receive buffer (an address: the backend must stay Send).
    ptr: usize,
    len: usize,
}

const PARKED_BIT: u64 = 1 << 63;
/// The ops of [`Backend::watch_remote_writes`]: these bits and the fi endpoint (parked
/// receives count below bit 62).
const WATCH_BITS: u64 = PARKED_BIT | 1 << 62;

fn watch_op(k: u16) -> OpId {
    WATCH_BITS | u64::from(k)
}

/// At most this many receives are parked at once; one more posts them all.
const PARKED_MAX: usize = 256;
/// The same for receives from a peer over sockets: one read brings a window's messages at
/// once, and only the first could go to a parked receive (the rest would be queued as
/// unexpected and copied again), so a second receive posts them.
const PARKED_MAX_SOCKETS: usize = 1;

/// What a CQ poll owes the engine after looking for the parked receive.
#[derive(Clone, Copy)]
enum Owed {
    /// Nothing: nothing arrived and nothing is in flight.
    Nothing,
    /// A round as any poll makes ([`Engine::progress_polled`]).
    Round,
    /// A round that polls the sockets too ([`Engine::progress_polled_everything`]).
    FullRound,
}

/// One look for the parked receives: some served, or what the poll owes.
enum Look {
    Served,
    Owes(Owed),
}

/// Every this many polls with a parked receive, the clock is read: at least every
/// [`PARKED_SOCKET_INTERVAL`], a full engine round that looks at the sockets too runs anyway
/// (connections, socket rails, housekeeping, a shared-memory peer's death). Every 64th poll,
/// as the engine's own express receive does, put an epoll_wait on the path of one message in
/// every few and cost 6% of the same-host latency through Open MPI.
const PARKED_FULL_ROUND: u32 = 64;
const PARKED_SOCKET_INTERVAL: Duration = Duration::from_micros(100);

/// Of the idle polls of a lonely engine, one in this many makes a round.
const LONELY_POLLS: u32 = 256;

pub struct EngineBackend {
    /// Taken at drop, to close in order.
    engine: Option<Engine>,
    /// Idle polls left that skip their round ([`lonely_skip`](Self::lonely_skip)).
    lonely_polls: u32,
    /// fi endpoint k uses engine endpoints 2k (tagged) and 2k+1 (untagged, and notices).
    next_ep: u16,
    /// The open fi endpoints: notices of remote writes with CQ data are taken for each (and
    /// dropped where nobody watches: left queued, each would hold some of its writer's eager
    /// credit for good).
    open: Vec<u16>,
    peers: Vec<(Rank, u16)>,
    peer_ids: HashMap<(Rank, u16), PeerId>,
    /// The last answer of `peer_id`.
    last_peer: Option<((Rank, u16), PeerId)>,
    ops: HashMap<OpId, Op>,
    claims: HashMap<u64, Found>,
    finished: Vec<Request>,
    /// Receives held instead of posted, in the order they were posted (all on one engine
    /// endpoint): the first is the one looked for; the rest follow as it is served (a window
    /// of receives, as a message-rate test posts).
    parked: VecDeque<Parked>,
    next_parked: u64,
    parked_polls: u32,
    /// What a look for the parked receive by [`Backend::poll_express`] left owed to the next
    /// [`Backend::progress`] (which then does not look again).
    owed: Option<Owed>,
    /// When a poll with a parked receive last made a full round.
    sockets_polled: Instant,
    /// After a look for the parked receive `watch_op` found nothing: the doorbells of the
    /// rings it looked at (Engine::express_watch). While none rings, the next looks answer
    /// without the engine (an idle poll of Open MPI's receive loop: 484 -> 340 instructions).
    /// Any mutable use of the engine ([`eng_mut`](Self::eng_mut)) drops the watch, so its
    /// pointers are only read while their links are untouched; a lane send
    /// ([`Engine::send_now_lane`]) keeps it, as it opens, closes and flushes no link (and
    /// what it wrote is the peer's to read, not ours).
    watch_op: Option<OpId>,
    watch: Vec<hx_engine::Doorbell>,
    /// The (engine endpoint, named source) the last parked receive was found possible for
    /// ([`Engine::express_possible`]), until the next mutable use of the engine
    /// ([`eng_mut`](Self::eng_mut)): what it looked at cannot have changed, so the next
    /// receive of a window, posted behind it, skips the look. A lane send
    /// ([`Engine::send_now_lane`]) and a receive served from the lane
    /// ([`serve_from_lane`](Self::serve_from_lane)) keep it: they leave the endpoint as quiet
    /// as it was, and a peer that fails meanwhile is found as after any parking (the next
    /// round unparks).
    possible: Option<(u16, Option<Rank>)>,
    /// An idle poll has been answered by the watch (said once, at debug level).
    watch_logged: bool,
    /// A parked receive has been served (said once, at debug level).
    parked_logged: bool,
    /// The same, with more held behind it.
    parked_behind_logged: bool,
    /// Parked receives posted to the engine since: their id -> the engine request's.
    renamed: HashMap<OpId, u64>,
    /// Parked receives that could not be posted, reported by the next collect.
    failed: Vec<Done>,
    /// Receives `progress` served from the parked ones (kept for its capacity).
    served: Vec<Served>,
    /// Name servers of `listen` (fabtests' node/service): one thread each, answering with a name
    /// until the backend goes (then the port is free again for the next domain).
    name_servers: Vec<std::thread::JoinHandle<()>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for EngineBackend {
    fn drop(&mut self) {
        // Finish what is queued and say Bye on every rail, so peers see an orderly close, not
        // a crash.
        if let Some(e) = self.engine.take() {
            tracing::debug!("hxcomm: domain closes: finishing sends, Bye to every peer");
            if let Err(e) = e.finalize() {
                tracing::warn!("hxcomm: closing the domain: {e}");
            }
        }
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.name_servers.drain(..) {
            let _ = t.join();
        }
    }
}

fn engine_eps(k: u16, tagged: bool) -> u16 {
    2 * k + u16::from(!tagged)
}

/// The engine endpoint fi endpoint `k` receives notices of remote writes with CQ data on.
fn notice_ep(k: u16) -> u16 {
    engine_eps(k, false)
}

/// The fi endpoint an engine endpoint belongs to.
fn fi_ep(engine_ep: u16) -> u16 {
    engine_ep / 2
}

/// The job secret: `HX_JOB_SECRET` (64 hex digits), else the domain's auth_key, else Open MPI's
/// per-job key (`OMPI_MCA_orte_precondition_transports`, set by mpirun for every job); with
/// none, refused unless `HX_ALLOW_NO_SECRET=1`.
fn job_secret(
    get: &dyn Fn(&str) -> Option<String>,
    auth_key: Option<&[u8]>,
) -> Result<[u8; 32], BackendError> {
    let derive = |what: &[u8]| hx_bootstrap::hmac_sha256(b"hxcomm-job-secret", &[what]);
    if let Some(hex) = get("HX_JOB_SECRET").filter(|v| !v.is_empty()) {
        return hx_bootstrap::secret_from_hex(hex.trim())
            .map_err(|e| err(FI_EINVAL, format!("HX_JOB_SECRET: {e}")));
    }
    if let Some(k) = auth_key.filter(|k| !k.is_empty()) {
        return Ok(derive(k));
    }
    if let Some(k) = get("OMPI_MCA_orte_precondition_transports").filter(|v| !v.is_empty()) {
        return Ok(derive(k.as_bytes()));
    }
    if get("HX_ALLOW_NO_SECRET").as_deref() == Some("1") {
        return Ok([0; 32]);
    }
    Err(err(
        FI_EACCES,
        "hxcomm: no job secret: set HX_JOB_SECRET (64 hex digits, the same for every process of \
         the job), give the domain an auth_key, or run under Open MPI's mpirun (which sets \
         OMPI_MCA_orte_precondition_transports); HX_ALLOW_NO_SECRET=1 runs without one, and then \
         anyone who can reach the rails can join",
    ))
}

/// The management network under a launcher that is not hxcomm's: the IPv4 addresses the
/// launcher's own services are reached at (Open MPI's HNP/parent URIs, PMIx server URIs); the
/// interface holding the first non-loopback one is left out of the rails.
fn management_address(get: &dyn Fn(&str) -> Option<String>) -> Option<Ipv4Addr> {
    let mut vars: Vec<String> = [
        "OMPI_MCA_orte_parent_uri",
        "OMPI_MCA_orte_hnp_uri",
        "PMIX_SERVER_URI4",
        "PMIX_SERVER_URI3",
        "PMIX_SERVER_URI21",
        "PMIX_SERVER_URI2",
    ]
    .iter()
    .filter_map(|v| get(v))
    .collect();
    if let Some(b) = get("HX_BOOTSTRAP") {
        vars.insert(0, b);
    }
    for v in vars {
        for piece in v.split(|c: char| !(c.is_ascii_digit() || c == '.')) {
            if let Ok(ip) = piece.parse::<Ipv4Addr>() {
                if !ip.is_loopback() && !ip.is_unspecified() {
                    return Some(ip);
                }
            }
        }
    }
    None
}

/// A setting as given, else the provider's own default (crate::settings::PROVIDER_DEFAULTS)
/// where neither HX_<NAME> nor FI_HXCOMM_<NAME> is set (an empty value counts as unset).
fn with_provider_default(get: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    get(name).filter(|v| !v.is_empty()).or_else(|| {
        name.strip_prefix("HX_")
            .and_then(crate::settings::provider_default)
            .map(str::to_string)
    })
}

impl EngineBackend {
    fn eng(&self) -> &Engine {
        self.engine.as_ref().expect("engine present until drop")
    }

    fn eng_mut(&mut self) -> &mut Engine {
        self.watch_op = None;
        self.possible = None;
        self.lonely_polls = 0;
        self.engine.as_mut().expect("engine present until drop")
    }

    /// May this idle poll skip its round? While the engine is [`lonely`](Engine::lonely)
    /// (Open MPI's btl/ofi in its RDMA modes beside vader on one host: polled in every
    /// progress loop, nobody ever talks to it), only one poll in [`LONELY_POLLS`] makes a round
    /// (to accept a newcomer) and the others are a few instructions.
    fn lonely_skip(&mut self) -> bool {
        if self.lonely_polls > 0 {
            self.lonely_polls -= 1;
            return true;
        }
        if self.eng().lonely() {
            self.lonely_polls = LONELY_POLLS - 1;
            // This poll's round looks at epoll (a spinning round does only now and then),
            // where a newcomer waits: one is accepted within LONELY_POLLS polls.
            self.owed = Some(Owed::FullRound);
        }
        false
    }

    pub fn new(cfg: &BackendConfig) -> Result<EngineBackend, BackendError> {
        let from_cfg = |name: &str| {
            cfg.settings
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .or_else(|| std::env::var(name).ok())
        };
        let with_defaults = |name: &str| with_provider_default(&from_cfg, name);
        let settings = Settings::from_lookup(&with_defaults).map_err(|e| err(FI_EINVAL, e))?;
        let secret = job_secret(&from_cfg, cfg.auth_key.as_deref())?;
        hx_engine::init_logging();
        let mut engine = Engine::open(settings, secret, management_address(&from_cfg))
            .map_err(|e| err(FI_EIO, format!("hxcomm: {e}")))?;
        engine.track_finished();
        Ok(EngineBackend {
            engine: Some(engine),
            next_ep: 1,
            open: Vec::new(),
            peers: Vec::new(),
            peer_ids: HashMap::default(),
            last_peer: None,
            ops: HashMap::default(),
            claims: HashMap::default(),
            finished: Vec::new(),
            parked: VecDeque::new(),
            next_parked: 0,
            parked_polls: 0,
            owed: None,
            parked_logged: false,
            parked_behind_logged: false,
            sockets_polled: Instant::now(),
            watch_op: None,
            possible: None,
            lonely_polls: 0,
            watch: Vec::new(),
            watch_logged: false,
            renamed: HashMap::default(),
            failed: Vec::new(),
            served: Vec::new(),
            name_servers: Vec::new(),
            stop: Default::default(),
        })
    }

    fn peer(&self, p: PeerId) -> Result<(Rank, u16), BackendError> {
        self.peers
            .get(p as usize)
            .copied()
            .ok_or_else(|| err(FI_EINVAL, format!("unknown peer {p}")))
    }

    /// The peer id of (engine peer, fi endpoint), made if new (senders not in any AV get one
    /// too; the AV then has no fi_addr for it).
    fn peer_id(&mut self, rank: Rank, k: u16) -> PeerId {
        // Ids never change: the last one answers a ping-pong's every message.
        if let Some((key, id)) = self.last_peer {
            if key == (rank, k) {
                return id;
            }
        }
        let id = *self.peer_ids.entry((rank, k)).or_insert_with(|| {
            self.peers.push((rank, k));
            (self.peers.len() - 1) as PeerId
        });
        self.last_peer = Some(((rank, k), id));
        id
    }

    fn filter(
        &self,
        ep: u16,
        tagged: bool,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
    ) -> Result<Filter, BackendError> {
        let (src, src_ep) = match src {
            Some(p) => {
                let (rank, k) = self.peer(p)?;
                (Some(rank), Some(engine_eps(k, tagged)))
            }
            None => (None, None),
        };
        let _ = ep;
        Ok(Filter {
            src,
            src_ep,
            tag: if tagged {
                TagMatch { tag, ignore }
            } else {
                UNTAGGED
            },
        })
    }

    /// Remembers an operation until its completion is reported; returns its id.
    fn track(&mut self, req: Request, op: Op) -> OpId {
        let id = op.id;
        self.ops.insert(req.to_u64(), op);
        id
    }

    /// Posts the parked receives, if any, to the engine in the order they were posted, each
    /// keeping its id: from then on they are matched, completed and cancelled as any other.
    fn unpark(&mut self) {
        while let Some(p) = self.parked.pop_front() {
            self.unpark_one(p);
        }
    }

    fn unpark_one(&mut self, p: Parked) {
        let buf = EngineBuf::Raw {
            ptr: p.ptr as *mut u8,
            len: p.len,
        };
        // SAFETY: the buffer fi_trecv was given, valid until the receive completes or is
        // cancelled.
        match unsafe { self.eng_mut().irecv_filtered(p.ep, p.filter, buf) } {
            Ok(req) => {
                self.renamed.insert(p.op, req.to_u64());
                self.track(req, recv_op(p.op, p.len, fi_ep(p.ep)));
            }
            Err(e) => self.failed.push(failed_op(p.op, true, e)),
        }
    }

    /// Looks for the parked receives (see [`Parked`]) in order, serving up to `room` of them
    /// into `out`: what the poll owes when it served none.
    fn poll_parked(&mut self, room: usize, out: &mut Vec<Served>) -> Look {
        let Some(front) = self.parked.front().map(|p| p.op) else {
            return Look::Owes(Owed::Round);
        };
        if self.count_parked_poll() {
            return Look::Owes(Owed::FullRound);
        }
        if self.watch_op == Some(front)
            // SAFETY: the watch is dropped by every mutable use of the engine (eng_mut), so
            // its links are as they were when it was taken.
            && !self.watch.iter().any(|d| unsafe { d.rung() })
        {
            if !self.watch_logged {
                self.watch_logged = true;
                tracing::debug!("hxcomm: an idle poll was answered by the rings' doorbells");
            }
            return Look::Owes(Owed::Nothing);
        }
        let first = out.len();
        while out.len() - first < room {
            let Some(p) = self.parked.front() else {
                break;
            };
            let (op, ep, filter, ptr, len) = (p.op, p.ep, p.filter, p.ptr, p.len);
            let buf: &mut [u8] = if len == 0 {
                &mut []
            } else {
                // SAFETY: the receive's buffer, valid until it completes or is cancelled
                // (fi_trecv's contract).
                unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) }
            };
            match self.eng_mut().try_recv_express(ep, filter, buf) {
                Express::Taken(st) => {
                    self.parked.pop_front();
                    if !self.parked_behind_logged && !self.parked.is_empty() {
                        self.log_served();
                    }
                    let src = Some(self.peer_id(st.source, fi_ep(st.src_ep)));
                    out.push(Served {
                        op,
                        len: st.len,
                        tag: st.tag,
                        data: st.data,
                        src,
                    });
                }
                // What stops a batch after the first is looked at again by the next poll.
                Express::Empty if out.len() > first => break,
                Express::Empty => {
                    let mut watch = std::mem::take(&mut self.watch);
                    if self.eng().express_watch(ep, &filter, &mut watch) {
                        self.watch_op = Some(op);
                    }
                    self.watch = watch;
                    return Look::Owes(Owed::Nothing);
                }
                Express::Other if out.len() > first => {
                    self.owed = Some(Owed::Round);
                    break;
                }
                Express::Other => return Look::Owes(Owed::Round),
            }
        }
        if !self.parked_logged {
            self.log_served();
        }
        Look::Served
    }

    /// Counts a poll with a parked receive: true when a full round is due (every
    /// [`PARKED_FULL_ROUND`] polls the clock is read). A poll served from the lane counts too,
    /// and owes the round to the next one instead of declining (each message it declined took
    /// the longer path, and the more idle polls a message waited through, the more often: a
    /// tenth of a ping-pong's messages in its slow runs).
    #[inline]
    fn count_parked_poll(&mut self) -> bool {
        self.parked_polls += 1;
        if self.parked_polls < PARKED_FULL_ROUND {
            return false;
        }
        self.parked_polls = 0;
        if self.sockets_polled.elapsed() < PARKED_SOCKET_INTERVAL {
            return false;
        }
        self.sockets_polled = Instant::now();
        true
    }

    /// Says once (debug level) that a parked receive was served, and once that one was with
    /// more held behind it (just served: the rest are still parked).
    #[cold]
    fn log_served(&mut self) {
        if !self.parked_logged {
            self.parked_logged = true;
            tracing::debug!("hxcomm: a receive was served straight from shared memory");
        }
        if !self.parked_behind_logged && !self.parked.is_empty() {
            self.parked_behind_logged = true;
            tracing::debug!(
                "hxcomm: receives were held at once, the first served from shared memory"
            );
        }
    }

    /// The shortest poll ([`Engine::try_lane_express`]): the first parked receive names a
    /// same-host peer whose lane holds its message. Not while a receive has failed or
    /// something has finished (those are reported first); `None` then and when the lane is
    /// empty (the poll looks as before). A round owed or due (see
    /// [`count_parked_poll`](Self::count_parked_poll)) is made by the next poll. It skips
    /// [`poll_parked`](Self::poll_parked)'s look at every ring, its watch and its batch: a
    /// quarter of the provider's instructions on Open MPI's receive of a same-host answer.
    /// Also says whether the backend is [`idle`](Backend::idle) after it (nothing failed
    /// meanwhile: only unparking fails receives).
    #[inline]
    fn serve_from_lane(&mut self) -> Option<(Served, bool)> {
        // A round owed does not wait for this: the lane's message comes before anything its
        // peer's ring holds, and the round follows on the next poll (serving first keeps it
        // from draining the message into the unexpected queue and unparking the receive).
        if !self.failed.is_empty() || self.lonely_polls > 0 {
            return None;
        }
        let p = self.parked.front()?;
        let (op, ep, filter, ptr, len) = (p.op, p.ep, p.filter, p.ptr, p.len);
        let src = filter.src?;
        let engine = self.engine.as_mut()?;
        if engine.has_finished() {
            return None;
        }
        let buf: &mut [u8] = if len == 0 {
            &mut []
        } else {
            // SAFETY: the receive's buffer, valid until it completes or is cancelled
            // (fi_trecv's contract).
            unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) }
        };
        let Some(Express::Taken(st)) = engine.try_lane_express(src, ep, filter, buf) else {
            return None;
        };
        let idle = !engine.has_finished();
        // The watch was for this receive. `possible` still holds: the endpoint is as quiet as
        // before, the peer as alive.
        self.watch_op = None;
        if self.count_parked_poll() {
            self.owed = Some(Owed::FullRound);
        }
        self.parked.pop_front();
        if !self.parked_logged || (!self.parked_behind_logged && !self.parked.is_empty()) {
            self.log_served();
        }
        let served = Served {
            op,
            len: st.len,
            tag: st.tag,
            data: st.data,
            src: Some(self.peer_id(st.source, fi_ep(st.src_ep))),
        };
        Some((served, idle))
    }

    /// May the parked receives stay parked after a round? Not once a message is queued on
    /// their endpoint or a peer they name failed. (They share the endpoint: one look per
    /// source named.)
    fn parked_still_possible(&self) -> bool {
        let mut last: Option<Option<Rank>> = None;
        for p in &self.parked {
            if last == Some(p.filter.src) {
                continue;
            }
            if !self.eng().express_possible(p.ep, &p.filter) {
                return false;
            }
            last = Some(p.filter.src);
        }
        true
    }

    /// Receives the notices of remote writes with CQ data that a round brought: each completes
    /// (at once, from the unexpected queue) as its endpoint's watch op. Called after each
    /// round: a look at one queue per open endpoint.
    fn take_notices(&mut self) {
        for i in 0..self.open.len() {
            let k = self.open[i];
            // (Bounded: each receive takes one notice out of the queue.)
            for _ in 0..PARKED_MAX {
                if !self.eng().message_waiting(notice_ep(k), NOTICES) {
                    break;
                }
                let buf = EngineBuf::Owned(Vec::new());
                // SAFETY: an owned buffer has no lifetime to keep.
                match unsafe { self.eng_mut().irecv_filtered(notice_ep(k), NOTICES, buf) } {
                    Ok(req) => {
                        let o = Op {
                            then: Then::Notice,
                            ..recv_op(watch_op(k), 0, k)
                        };
                        self.track(req, o);
                    }
                    Err(e) => {
                        tracing::warn!("hxcomm: taking a remote write's CQ data: {e}");
                        break;
                    }
                }
            }
        }
    }

    /// fi_write, and with `data` fi_writedata: the notice follows once the write is placed.
    ///
    /// # Safety
    /// As [`Backend::write`].
    unsafe fn start_write(
        &mut self,
        ep: u16,
        peer: PeerId,
        buf: SendBuf,
        addr: u64,
        key: u64,
        data: Option<u64>,
    ) -> Result<OpId, BackendError> {
        let (rank, k) = self.peer(peer)?;
        let len = buf.len();
        let req = self
            .eng_mut()
            .iwrite(rank, key, addr, engine_buf(buf))
            .map_err(|e| err(FI_EINVAL, e))?;
        let then = match data {
            None => Then::Nothing,
            Some(data) => Then::Notify {
                src_ep: notice_ep(ep),
                rank,
                dst_ep: notice_ep(k),
                len,
                data,
            },
        };
        Ok(self.track(
            req,
            Op {
                then,
                ..send_op(req, ep)
            },
        ))
    }

    /// A finished step of fi_writedata ([`Then`]): the Done to report, if any.
    fn writedata_step(
        &mut self,
        op: OpId,
        o: &Op,
        res: Result<hx_engine::Status, hx_engine::Error>,
    ) -> Option<Done> {
        let done = |len: usize, error: Option<(i32, String)>| Done {
            op,
            is_recv: false,
            len,
            msg_len: len,
            tag: 0,
            data: None,
            src: None,
            error,
        };
        match (o.then, res) {
            (
                Then::Notify {
                    src_ep,
                    rank,
                    dst_ep,
                    len,
                    data,
                },
                Ok(_),
            ) => {
                // Placed: now the notice. (A length fits in the tag: at most 2^36 bytes.)
                let tag = NOTICE_TAG | len as u64;
                let buf = EngineBuf::Owned(Vec::new());
                // SAFETY: an owned buffer has no lifetime to keep.
                match unsafe {
                    self.eng_mut()
                        .isend_with(src_ep, rank, dst_ep, tag, Some(data), buf)
                } {
                    Ok(req) => {
                        let n = Op {
                            id: op,
                            then: Then::Notified { len },
                            ..send_op(req, o.ep)
                        };
                        self.track(req, n);
                        None
                    }
                    Err(e) => Some(done(
                        0,
                        Some((
                            FI_EIO,
                            format!(
                        "hxcomm: the write was placed, but its CQ data could not be sent: {e}"
                    ),
                        )),
                    )),
                }
            }
            (Then::Notified { len }, Ok(_)) => Some(done(len, None)),
            (Then::Notified { .. }, Err(e)) => Some(done(
                0,
                Some((
                    FI_EIO,
                    format!(
                        "hxcomm: the write was placed, but its CQ data did not reach the peer: {e}"
                    ),
                )),
            )),
            (Then::Notice, Ok(st)) => {
                let len = (st.tag & !NOTICE_TAG) as usize;
                let src = Some(self.peer_id(st.source, fi_ep(st.src_ep)));
                Some(Done {
                    op,
                    is_recv: true,
                    len,
                    msg_len: len,
                    tag: 0,
                    data: st.data,
                    src,
                    error: None,
                })
            }
            // Only cancelled, by its endpoint's close: nobody to tell.
            (Then::Notice, Err(_)) => None,
            (_, Err(e)) => Some(failed_op(op, false, e)),
            // (Plain ops are reported by collect, never passed here.)
            (Then::Nothing, Ok(_)) => None,
        }
    }

    /// The part of fi_send and fi_inject that starts the engine's send.
    ///
    /// # Safety
    /// A `Raw` buffer stays valid until the send completes.
    unsafe fn start_send(&mut self, to: SendTo, buf: EngineBuf) -> Result<Request, BackendError> {
        let r = self.route(&to)?;
        self.eng_mut()
            .isend_with(r.ep, r.rank, r.dst_ep, r.tag, to.data, buf)
            .map_err(|e| err(FI_EINVAL, e))
    }

    /// Where a send goes in the engine's terms: endpoints, rank and tag.
    fn route(&self, to: &SendTo) -> Result<Route, BackendError> {
        let (rank, k) = self.peer(to.peer)?;
        Ok(Route {
            ep: engine_eps(to.ep, to.tagged),
            rank,
            dst_ep: engine_eps(k, to.tagged),
            tag: if to.tagged { to.tag } else { 0 },
        })
    }

    fn found(&mut self, st: &hx_engine::Status) -> Found {
        Found {
            src: self.peer_id(st.source, fi_ep(st.src_ep)),
            tag: st.tag,
            len: st.len,
            data: st.data,
        }
    }
}

/// A send's endpoints, rank and tag in the engine ([`EngineBackend::route`]).
struct Route {
    ep: u16,
    rank: Rank,
    dst_ep: u16,
    tag: u64,
}

/// The completion of an operation the engine failed: a remote memory access the peer
/// refused is -FI_EACCES, anything else (a peer that failed) -FI_EIO.
fn failed_op(op: OpId, is_recv: bool, e: hx_engine::Error) -> Done {
    let errno = match e {
        hx_engine::Error::Protocol(hx_engine::ProtoError::Refused { .. }) => FI_EACCES,
        _ => FI_EIO,
    };
    Done {
        op,
        is_recv,
        len: 0,
        msg_len: 0,
        tag: 0,
        data: None,
        src: None,
        error: Some((errno, format!("hxcomm: {e}"))),
    }
}

/// The engine's view of the domain's registered memory: what a peer's read or write names,
/// lent in place.
struct EngineRegions(Arc<RegionTable>);

impl Regions<EngineBuf> for EngineRegions {
    fn resolve(
        &mut self,
        key: u64,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<EngineBuf, RmaRefusal> {
        let ptr = self.0.find(key, addr, len, access)?;
        Ok(EngineBuf::Raw { ptr, len })
    }

    /// With the CPU's atomics, so that they are atomic against the process's own too.
    fn atomic(
        &mut self,
        key: u64,
        addr: u64,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        compare: u64,
    ) -> Result<u64, RmaRefusal> {
        let width = ty.width();
        // The old value goes back to the peer: read access always, write access to change it.
        let ptr = self.0.find(key, addr, width, Access::Read)?;
        if op.writes() {
            self.0.find(key, addr, width, Access::Write)?;
        }
        if !(ptr as usize).is_multiple_of(width) {
            return Err(RmaRefusal::Unsupported);
        }
        let f = |old: u64| apply_atomic(op, ty, old, operand, compare);
        use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering::SeqCst};
        // SAFETY: a registered region's memory, valid while registered (the application must
        // not free memory it registered), and aligned to the element's width.
        // (fetch_update fails only when the closure says None; it never does.)
        let old = unsafe {
            match width {
                1 => AtomicU8::from_ptr(ptr)
                    .fetch_update(SeqCst, SeqCst, |o| Some(f(o as u64) as u8))
                    .map_or_else(u64::from, u64::from),
                2 => AtomicU16::from_ptr(ptr as *mut u16)
                    .fetch_update(SeqCst, SeqCst, |o| Some(f(o as u64) as u16))
                    .map_or_else(u64::from, u64::from),
                4 => AtomicU32::from_ptr(ptr as *mut u32)
                    .fetch_update(SeqCst, SeqCst, |o| Some(f(o as u64) as u32))
                    .map_or_else(u64::from, u64::from),
                _ => AtomicU64::from_ptr(ptr as *mut u64)
                    .fetch_update(SeqCst, SeqCst, |o| Some(f(o)))
                    .unwrap_or_else(|o| o),
            }
        };
        Ok(old)
    }
}

/// What a send is tracked as.
/// The engine's view of a send's buffer: a borrowed one stays the application's.
fn engine_buf(buf: SendBuf) -> EngineBuf {
    match buf {
        SendBuf::Borrowed { ptr, len } => EngineBuf::Raw {
            ptr: ptr as *mut u8,
            len,
        },
        SendBuf::Owned(v) => EngineBuf::Owned(v),
    }
}

fn send_op(req: Request, ep: u16) -> Op {
    Op {
        id: req.to_u64(),
        is_recv: false,
        cap: 0,
        discard: false,
        ep,
        then: Then::Nothing,
    }
}

/// What a receive of fi endpoint `ep` (or `NO_EP`) into `cap` bytes is tracked as.
fn recv_op(id: OpId, cap: usize, ep: u16) -> Op {
    Op {
        id,
        is_recv: true,
        cap,
        discard: false,
        ep,
        then: Then::Nothing,
    }
}

impl EngineBackend {
    /// One pass of [`collect`](Backend::collect) over what the engine finished: true if a
    /// writedata step started a send meanwhile.
    fn collect_finished(&mut self, out: &mut Vec<Done>) -> bool {
        let mut stepped = false;
        let mut finished = std::mem::take(&mut self.finished);
        self.eng_mut().take_finished(&mut finished);
        for req in finished.drain(..) {
            let op = req.to_u64();
            if !self.ops.contains_key(&op) {
                continue;
            }
            let Some((res, _buf)) = self.eng_mut().take_request(req) else {
                continue;
            };
            let o = self.ops.remove(&op).expect("checked");
            if o.id != op {
                self.renamed.remove(&o.id);
            }
            let op = o.id;
            if o.discard {
                continue;
            }
            if o.then != Then::Nothing {
                stepped |= matches!(o.then, Then::Notify { .. });
                out.extend(self.writedata_step(op, &o, res));
                continue;
            }
            let d = match res {
                Ok(st) if o.is_recv => {
                    let src = Some(self.peer_id(st.source, fi_ep(st.src_ep)));
                    Done {
                        op,
                        is_recv: true,
                        len: st.len.min(o.cap),
                        msg_len: st.len,
                        tag: st.tag,
                        data: st.data,
                        src,
                        error: st.truncated.then(|| {
                            (
                                FI_ETRUNC,
                                format!(
                                    "message of {} bytes truncated to the {}-byte buffer",
                                    st.len, o.cap
                                ),
                            )
                        }),
                    }
                }
                Ok(st) => Done {
                    op,
                    is_recv: false,
                    len: st.len,
                    msg_len: st.len,
                    tag: 0,
                    data: None,
                    src: None,
                    error: None,
                },
                Err(e) => failed_op(op, o.is_recv, e),
            };
            out.push(d);
        }
        self.finished = finished;
        stepped
    }
}

impl Backend for EngineBackend {
    fn open_ep(&mut self) -> Result<u16, BackendError> {
        let k = self.next_ep;
        if k >= 0x7ffe {
            return Err(err(FI_ENOSPC, "too many endpoints"));
        }
        self.eng_mut()
            .open_endpoint(engine_eps(k, true))
            .and_then(|_| self.eng_mut().open_endpoint(engine_eps(k, false)))
            .map_err(|e| err(FI_EINVAL, e))?;
        self.open.push(k);
        self.next_ep += 1;
        Ok(k)
    }

    fn close_ep(&mut self, ep: u16) -> Result<(), BackendError> {
        // Receives parked on this endpoint go with it, as their pending entries do.
        self.parked.retain(|p| fi_ep(p.ep) != ep);
        // Receives still posted there can no longer complete (their pending entries go with
        // the endpoint): take them out of matching, so that a message arriving later is not
        // written into a buffer the application may already have freed.
        let posted: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, o)| o.is_recv && o.ep == ep)
            .map(|(&req, _)| req)
            .collect();
        for req in posted {
            if self.eng_mut().cancel_recv(Request::from_u64(req)) {
                if let Some(o) = self.ops.remove(&req) {
                    self.renamed.remove(&o.id);
                }
            }
        }
        // Sends still in flight (a rendezvous waiting for its receiver, a delivery-complete
        // send) keep going on a copy of their buffer, reported to nobody: the application may
        // free it once the endpoint is closed.
        let sending: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, o)| !o.is_recv && o.ep == ep)
            .map(|(&req, _)| req)
            .collect();
        for req in sending {
            // SAFETY: fi_send's buffer is valid until the send completes or its endpoint is
            // closed, which is now.
            if unsafe { self.eng_mut().orphan_send(Request::from_u64(req)) } {
                self.ops.remove(&req);
            }
        }
        self.open.retain(|&k| k != ep);
        self.eng_mut()
            .close_endpoint(engine_eps(ep, true))
            .and_then(|_| self.eng_mut().close_endpoint(engine_eps(ep, false)))
            .map_err(|e| err(FI_EINVAL, e))
    }

    fn name(&self, ep: u16) -> [u8; NAME_LEN] {
        self.eng().address(ep)
    }

    fn describe(&self, name: &[u8]) -> Result<String, BackendError> {
        Engine::describe_address(name).map_err(|e| err(FI_EINVAL, e))
    }

    fn insert(&mut self, name: &[u8]) -> Result<PeerId, BackendError> {
        let (rank, k) = self.eng_mut().insert(name).map_err(|e| err(FI_EINVAL, e))?;
        Ok(self.peer_id(rank, k))
    }

    fn remove(&mut self, peer: PeerId) -> Result<(), BackendError> {
        // The engine keeps what it knows of the process (ids stay stable for a re-insert).
        self.peer(peer).map(|_| ())
    }

    unsafe fn send(&mut self, to: SendTo, buf: SendBuf) -> Result<OpId, BackendError> {
        let req = self.start_send(to, engine_buf(buf))?;
        Ok(self.track(req, send_op(req, to.ep)))
    }

    unsafe fn send_delivered(&mut self, to: SendTo, buf: SendBuf) -> Result<OpId, BackendError> {
        let r = self.route(&to)?;
        let req = self
            .eng_mut()
            .isend_delivered(r.ep, r.rank, r.dst_ep, r.tag, to.data, engine_buf(buf))
            .map_err(|e| err(FI_EINVAL, e))?;
        Ok(self.track(req, send_op(req, to.ep)))
    }

    fn set_regions(&mut self, regions: Arc<RegionTable>) -> Result<(), BackendError> {
        self.eng_mut().set_regions(Box::new(EngineRegions(regions)));
        Ok(())
    }

    fn release_region(&mut self, key: u64) {
        let n = self.eng_mut().release_region(key);
        if n > 0 {
            tracing::debug!("hxcomm: region {key:#x} closed with {n} peer accesses under way");
        }
    }

    unsafe fn read(
        &mut self,
        ep: u16,
        peer: PeerId,
        ptr: *mut u8,
        len: usize,
        addr: u64,
        key: u64,
    ) -> Result<OpId, BackendError> {
        let (rank, _) = self.peer(peer)?;
        let req = self
            .eng_mut()
            .iread(rank, key, addr, EngineBuf::Raw { ptr, len })
            .map_err(|e| err(FI_EINVAL, e))?;
        Ok(self.track(req, send_op(req, ep)))
    }

    unsafe fn write(
        &mut self,
        ep: u16,
        peer: PeerId,
        buf: SendBuf,
        addr: u64,
        key: u64,
    ) -> Result<OpId, BackendError> {
        self.start_write(ep, peer, buf, addr, key, None)
    }

    unsafe fn write_data(
        &mut self,
        ep: u16,
        peer: PeerId,
        buf: SendBuf,
        addr: u64,
        key: u64,
        data: u64,
    ) -> Result<OpId, BackendError> {
        self.start_write(ep, peer, buf, addr, key, Some(data))
    }

    fn watch_remote_writes(&mut self, ep: u16) -> Result<OpId, BackendError> {
        if !self.open.contains(&ep) {
            return Err(err(FI_EINVAL, format!("no endpoint {ep}")));
        }
        // Every open endpoint's notices are taken after each round; this names the op they
        // complete (never an engine request's id, bit 63 clear, nor a parked receive's).
        Ok(watch_op(ep))
    }

    unsafe fn atomic(
        &mut self,
        ep: u16,
        peer: PeerId,
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        compare: u64,
        result: Option<*mut u8>,
        addr: u64,
        key: u64,
    ) -> Result<OpId, BackendError> {
        let (rank, _) = self.peer(peer)?;
        let result = match result {
            Some(ptr) => EngineBuf::Raw {
                ptr,
                len: ty.width(),
            },
            None => EngineBuf::Owned(Vec::new()),
        };
        let req = self
            .eng_mut()
            .iatomic(rank, key, addr, op, ty, operand, compare, result)
            .map_err(|e| match e {
                hx_engine::Error::Protocol(hx_engine::ProtoError::Busy(_)) => err(FI_EAGAIN, e),
                e => err(FI_EINVAL, e),
            })?;
        Ok(self.track(req, send_op(req, ep)))
    }

    fn inject(&mut self, to: SendTo, copy: Vec<u8>) -> Result<Option<OpId>, BackendError> {
        // SAFETY: an owned buffer has no lifetime to keep.
        let req = unsafe { self.start_send(to, EngineBuf::Owned(copy)) }?;
        // Nothing to report, ever: the engine frees it when it is written (or fails). Without
        // finished-request tracking it is tracked like any send.
        if self.eng_mut().detach(req) {
            return Ok(None);
        }
        Ok(Some(self.track(req, send_op(req, to.ep))))
    }

    fn inject_now(&mut self, to: &SendTo, data: &[u8]) -> Result<bool, BackendError> {
        let r = self.route(to)?;
        // Through the lane, the engine keeps what the watch and `possible` rely on (see
        // Engine::send_now_lane): the next receive need not look at the engine again, nor
        // the next idle poll.
        if self
            .engine
            .as_mut()
            .is_some_and(|e| e.send_now_lane(r.ep, r.rank, r.dst_ep, r.tag, to.data, data))
        {
            return Ok(true);
        }
        self.eng_mut()
            .send_now_framed(r.ep, r.rank, r.dst_ep, r.tag, to.data, data)
            .map_err(|e| err(FI_EINVAL, e))
    }

    unsafe fn recv(
        &mut self,
        ep: u16,
        tagged: bool,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
        ptr: *mut u8,
        len: usize,
    ) -> Result<OpId, BackendError> {
        let filter = self.filter(ep, tagged, src, tag, ignore)?;
        let e = engine_eps(ep, tagged);
        // Held behind those already held (on the same endpoint, up to PARKED_MAX), or posted
        // after them: receives match in the order they were posted.
        let max = match self.eng().express_reads_sockets(&filter) {
            true => PARKED_MAX_SOCKETS,
            false => PARKED_MAX,
        };
        let park = self.parked.len() < max
            && self.parked.front().is_none_or(|p| p.ep == e)
            && (self.possible == Some((e, filter.src)) || self.eng().express_possible(e, &filter));
        if park {
            self.possible = Some((e, filter.src));
            let op = PARKED_BIT | self.next_parked;
            self.next_parked = (self.next_parked + 1) & ((1 << 62) - 1);
            self.parked.push_back(Parked {
                op,
                ep: e,
                filter,
                ptr: ptr as usize,
                len,
            });
            return Ok(op);
        }
        self.unpark();
        let req = self
            .eng_mut()
            .irecv_filtered(e, filter, EngineBuf::Raw { ptr, len })
            .map_err(|e| err(FI_EINVAL, e))?;
        Ok(self.track(req, recv_op(req.to_u64(), len, ep)))
    }

    fn peek(
        &mut self,
        ep: u16,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
        claim: bool,
    ) -> Result<Option<(Found, Option<u64>)>, BackendError> {
        let filter = self.filter(ep, true, src, tag, ignore)?;
        let e = engine_eps(ep, true);
        // A parked receive is matched before a probe looks.
        self.unpark();
        if claim {
            let Some((c, st)) = self
                .eng_mut()
                .claim(e, filter)
                .map_err(|e| err(FI_EIO, e))?
            else {
                return Ok(None);
            };
            let f = self.found(&st);
            self.claims.insert(c, f.clone());
            Ok(Some((f, Some(c))))
        } else {
            let st = self
                .eng_mut()
                .probe_filtered(e, filter)
                .map_err(|e| err(FI_EIO, e))?;
            Ok(st.map(|st| (self.found(&st), None)))
        }
    }

    fn discard(
        &mut self,
        ep: u16,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
    ) -> Result<Option<Found>, BackendError> {
        match self.peek(ep, src, tag, ignore, true)? {
            Some((_, Some(c))) => self.discard_claimed(c).map(Some),
            _ => Ok(None),
        }
    }

    unsafe fn recv_claimed(
        &mut self,
        claim: u64,
        ptr: *mut u8,
        len: usize,
    ) -> Result<OpId, BackendError> {
        if self.claims.remove(&claim).is_none() {
            return Err(err(FI_ENOENT, format!("no claimed message {claim:#x}")));
        }
        let req = self
            .eng_mut()
            .irecv_claimed(claim, EngineBuf::Raw { ptr, len })
            .map_err(|e| err(FI_EINVAL, e))?;
        Ok(self.track(req, recv_op(req.to_u64(), len, NO_EP)))
    }

    fn discard_claimed(&mut self, claim: u64) -> Result<Found, BackendError> {
        let f = self
            .claims
            .remove(&claim)
            .ok_or_else(|| err(FI_ENOENT, format!("no claimed message {claim:#x}")))?;
        let req = self
            .eng_mut()
            .discard_claimed(claim)
            .map_err(|e| err(FI_EINVAL, e))?;
        self.track(
            req,
            Op {
                discard: true,
                ..recv_op(req.to_u64(), 0, NO_EP)
            },
        );
        Ok(f)
    }

    fn cancel(&mut self, op: OpId) -> bool {
        if let Some(i) = self.parked.iter().position(|p| p.op == op) {
            self.parked.remove(i);
            return true;
        }
        let req = self.renamed.get(&op).copied().unwrap_or(op);
        if !self.ops.get(&req).is_some_and(|o| o.is_recv) {
            return false;
        }
        let done = self.eng_mut().cancel_recv(Request::from_u64(req));
        if done {
            self.ops.remove(&req);
            self.renamed.remove(&op);
        }
        done
    }

    fn progress(&mut self, out: &mut Vec<Done>) -> Result<(), BackendError> {
        // Consumers poll the CQ in a loop: while bulk data is in flight, wait for it briefly
        // in epoll rather than spin (HX_BULK_WAIT_US).
        let owed = match self.owed.take() {
            Some(o) => o,
            None => {
                let mut served = std::mem::take(&mut self.served);
                let look = self.poll_parked(PARKED_MAX, &mut served);
                out.extend(served.drain(..).map(|s| s.done()));
                self.served = served;
                match look {
                    // A batch that stopped on something else owes its round now.
                    Look::Served => self.owed.take().unwrap_or(Owed::Nothing),
                    Look::Owes(o) => o,
                }
            }
        };
        // A round keeps the lonely count (rounds are what it spares), unless it found company.
        let lonely = self.lonely_polls;
        let r = match owed {
            Owed::Nothing => return self.collect(out),
            Owed::Round => self.eng_mut().progress_polled(),
            Owed::FullRound => self.eng_mut().progress_polled_everything(),
        };
        if lonely > 0 && self.eng().lonely() {
            self.lonely_polls = lonely;
        }
        r.map_err(|e| err(FI_EIO, e))?;
        self.take_notices();
        if !self.parked_still_possible() {
            // A message queued on its endpoint, or its peer failed: the engine decides.
            self.unpark();
        }
        self.collect(out)
    }

    fn progress_to_wait(&mut self, out: &mut Vec<Done>) -> Result<(), BackendError> {
        // Only the engine's requests wake the wait fd.
        self.owed = None;
        self.unpark();
        self.eng_mut().progress().map_err(|e| err(FI_EIO, e))?;
        self.take_notices();
        self.collect(out)
    }

    fn idle(&self) -> bool {
        self.failed.is_empty() && !self.eng().has_finished()
    }

    fn poll_express(&mut self, room: usize, out: &mut Vec<Served>) -> Polled {
        if self.owed.is_none() && self.idle() && self.lonely_skip() {
            return Polled::Nothing;
        }
        if self.parked.is_empty() || self.owed.is_some() || !self.idle() || room == 0 {
            return Polled::Progress;
        }
        match self.poll_parked(room, out) {
            Look::Served => Polled::Served,
            Look::Owes(Owed::Nothing) => Polled::Nothing,
            Look::Owes(o) => {
                self.owed = Some(o);
                Polled::Progress
            }
        }
    }

    fn serve_first(&mut self) -> Option<(Served, bool)> {
        self.serve_from_lane()
    }

    fn watch_first(&mut self) -> bool {
        if self.parked.len() != 1 || self.owed.is_some() || !self.idle() {
            return false;
        }
        let p = &self.parked[0];
        let (op, ep, filter) = (p.op, p.ep, p.filter);
        let mut watch = std::mem::take(&mut self.watch);
        let watched = self.eng().express_watch(ep, &filter, &mut watch);
        self.watch = watch;
        self.watch_op = watched.then_some(op);
        watched
    }

    fn ticket(&mut self) -> Option<Ticket> {
        // What serve_from_lane would check at the read, checked now: none of it changes
        // before then without a call here.
        if !self.failed.is_empty()
            || self.lonely_polls > 0
            || self.owed.is_some()
            || self.parked.len() != 1
        {
            return None;
        }
        let p = &self.parked[0];
        let (op, ep, filter, ptr, len) = (p.op, p.ep, p.filter, p.ptr, p.len);
        if self.watch_op != Some(op) {
            return None;
        }
        let (src, src_ep) = (filter.src?, filter.src_ep?);
        let engine = self.engine.as_mut()?;
        if engine.has_finished() {
            return None;
        }
        let lane = engine.lane_ticket(src, ep, filter)?;
        Some(Ticket {
            op,
            lane,
            buf: ptr as *mut u8,
            len,
            src: self.peer_id(src, fi_ep(src_ep)),
        })
    }

    fn ticket_served(&mut self, op: OpId, st: &hx_engine::Status) {
        debug_assert_eq!(self.parked.front().map(|p| p.op), Some(op));
        if let Some(e) = self.engine.as_mut() {
            e.lane_ticket_taken(st);
        }
        self.watch_op = None;
        if self.count_parked_poll() {
            self.owed = Some(Owed::FullRound);
        }
        self.parked.pop_front();
        if !self.parked_logged {
            self.log_served();
        }
    }

    fn lane_hold(&mut self, t: &Ticket) -> Option<hx_engine::LaneHold> {
        if self.watch_op != Some(t.op) {
            return None;
        }
        self.engine.as_ref()?.lane_hold(&t.lane)
    }

    fn lane_hold_settled(
        &mut self,
        peer: hx_engine::Rank,
        received: (u64, u64),
        sent: (u64, u64),
        reads: u32,
    ) {
        if let Some(e) = self.engine.as_mut() {
            e.lane_hold_settled(peer, received, sent);
        }
        // Each receive of the run served counts as the poll that served it would have (the
        // backend's full rounds keep their pace), then the idle reads it waited through.
        for _ in 0..received.0 {
            if self.count_parked_poll() {
                self.owed = Some(Owed::FullRound);
            }
        }
        self.parked_polls = self.parked_polls.saturating_add(reads);
    }

    fn take_lonely_polls(&mut self) -> u32 {
        std::mem::take(&mut self.lonely_polls)
    }

    fn idle_reads(&mut self, n: u32) {
        self.parked_polls = self.parked_polls.saturating_add(n);
    }

    fn idle_bells(&self, out: &mut Vec<hx_engine::Doorbell>) -> bool {
        out.clear();
        let watched = self.owed.is_none()
            && !self.eng().words_waiting()
            && self.watch_op.is_some()
            && self.parked.front().map(|p| p.op) == self.watch_op;
        if watched {
            out.extend_from_slice(&self.watch);
        }
        watched
    }

    fn collect(&mut self, out: &mut Vec<Done>) -> Result<(), BackendError> {
        if !self.failed.is_empty() {
            out.append(&mut self.failed);
        }
        // Called on every CQ read: nothing finished is the common case.
        while self.eng().has_finished() {
            // A writedata step may start a send that finishes at once (an inline notice):
            // taken by the next pass, not left for a reader that may go to sleep.
            if !self.collect_finished(out) {
                break;
            }
        }
        Ok(())
    }

    fn wait_fd(&self) -> i32 {
        self.eng().fd()
    }

    fn max_msg_size(&self) -> usize {
        ENGINE_MAX_MSG
    }

    fn resolve(&mut self, node: &str, service: &str) -> Result<[u8; NAME_LEN], BackendError> {
        resolve(node, service)
    }

    fn listen(
        &mut self,
        ep: u16,
        node: Option<&str>,
        service: Option<&str>,
    ) -> Result<(), BackendError> {
        // No service: nothing to be found at (fi_getinfo without node and service).
        let Some(service) = service.filter(|s| !s.is_empty()) else {
            return Ok(());
        };
        let host = node.filter(|n| !n.is_empty()).unwrap_or("0.0.0.0");
        let port = service.parse::<u16>().map_err(|_| {
            err(
                FI_EINVAL,
                format!("service {service:?} is not a port number"),
            )
        })?;
        let l = TcpListener::bind((host, port))
            .map_err(|e| err(FI_EINVAL, format!("name service at {host}:{service}: {e}")))?;
        l.set_nonblocking(true).map_err(|e| err(FI_EIO, e))?;
        let name = self.name(ep);
        let stop = self.stop.clone();
        let t = std::thread::Builder::new()
            .name("hxcomm-names".into())
            .spawn(move || {
                // Tells whoever asks (fi_getinfo of a client with our node and service) the
                // name of this endpoint; an address is not a secret, joining needs the job's.
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match l.accept() {
                        Ok((mut s, _)) => {
                            let _ = s.set_nonblocking(false);
                            let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                            let _ = s.write_all(&name);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
            .map_err(|e| err(FI_EIO, e))?;
        self.name_servers.push(t);
        Ok(())
    }
}

/// Client side of node/service: asks the name service a listening endpoint runs there.
pub fn resolve(node: &str, service: &str) -> Result<[u8; NAME_LEN], BackendError> {
    let port: u16 = service.parse().map_err(|_| {
        err(
            FI_ENODATA,
            format!("service {service:?} is not a port number"),
        )
    })?;
    let addrs: Vec<SocketAddr> = (node, port)
        .to_socket_addrs()
        .map_err(|e| err(FI_ENODATA, format!("{node}: {e}")))?
        .collect();
    let mut last = None;
    // The server may still be starting: a few tries over 5 s.
    for _ in 0..50 {
        for a in &addrs {
            match TcpStream::connect_timeout(a, Duration::from_secs(1)) {
                Ok(mut s) => {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut name = [0u8; NAME_LEN];
                    s.read_exact(&mut name)
                        .map_err(|e| err(FI_ENODATA, format!("name from {a}: {e}")))?;
                    Engine::describe_address(&name)
                        .map_err(|e| err(FI_ENODATA, format!("name from {a}: {e}")))?;
                    return Ok(name);
                }
                Err(e) => last = Some(e),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(err(
        FI_ENODATA,
        format!(
            "no hxcomm endpoint answers at {node}:{service}: {}",
            last.map(|e| e.to_string()).unwrap_or_default()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_defaults_under_the_settings_given() {
        let none = |_: &str| None::<String>;
        let s = Settings::from_lookup(&|n: &str| with_provider_default(&none, n)).unwrap();
        assert_eq!(s.bulk_wait, Duration::from_millis(5));
        let given = |n: &str| (n == "HX_BULK_WAIT_US").then(|| "2000".to_string());
        let s = Settings::from_lookup(&|n: &str| with_provider_default(&given, n)).unwrap();
        assert_eq!(s.bulk_wait, Duration::from_millis(2));
        let empty = |n: &str| (n == "HX_BULK_WAIT_US").then(String::new);
        assert_eq!(
            with_provider_default(&empty, "HX_BULK_WAIT_US").as_deref(),
            Some("5000")
        );
        assert_eq!(with_provider_default(&none, "HX_POLICY"), None);
    }

    #[test]
    fn closing_an_endpoint_takes_its_receives_out_of_matching() {
        let cfg = BackendConfig {
            settings: vec![("HX_ALLOW_NO_SECRET".into(), "1".into())],
            auth_key: None,
        };
        let mut b = EngineBackend::new(&cfg).unwrap();
        let (a, c) = (b.open_ep().unwrap(), b.open_ep().unwrap());
        let to_c = b.insert(&b.name(c)).unwrap();
        let mut buf = vec![0u8; 16];
        // SAFETY: `buf` outlives the backend's use of it (cancelled at close, checked below).
        let op = unsafe { b.recv(c, true, None, 7, 0, buf.as_mut_ptr(), buf.len()) }.unwrap();
        b.close_ep(c).unwrap();
        let to = SendTo {
            ep: a,
            tagged: true,
            peer: to_c,
            tag: 7,
            data: None,
        };
        b.inject(to, b"written after close".to_vec()).unwrap();
        let mut done = Vec::new();
        for _ in 0..200 {
            b.progress(&mut done).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(done.iter().all(|d| d.op != op), "{:?}", done.len());
        assert_eq!(
            buf,
            vec![0u8; 16],
            "a closed endpoint's receive was written"
        );
        assert!(b.ops.is_empty());
    }

    #[test]
    fn secret_sources_in_order() {
        let none = |_: &str| None;
        assert!(job_secret(&none, None)
            .unwrap_err()
            .msg
            .contains("HX_JOB_SECRET"));
        let allow = |k: &str| (k == "HX_ALLOW_NO_SECRET").then(|| "1".to_string());
        assert_eq!(job_secret(&allow, None).unwrap(), [0; 32]);
        let ompi =
            |k: &str| (k == "OMPI_MCA_orte_precondition_transports").then(|| "abc-def".to_string());
        let a = job_secret(&ompi, None).unwrap();
        let b = job_secret(&ompi, Some(b"key")).unwrap();
        assert_ne!(a, b, "auth_key comes before Open MPI's key");
        let hex = |k: &str| (k == "HX_JOB_SECRET").then(|| "11".repeat(32));
        assert_eq!(job_secret(&hex, Some(b"key")).unwrap(), [0x11; 32]);
        let bad = |k: &str| (k == "HX_JOB_SECRET").then(|| "xyz".to_string());
        assert!(job_secret(&bad, None)
            .unwrap_err()
            .msg
            .contains("HX_JOB_SECRET"));
    }

    #[test]
    fn management_address_from_launcher_uris() {
        let get = |k: &str| {
            (k == "OMPI_MCA_orte_parent_uri")
                .then(|| "1234.0;tcp://127.0.0.1,10.200.0.254:4567".to_string())
        };
        assert_eq!(
            management_address(&get),
            Some(Ipv4Addr::new(10, 200, 0, 254))
        );
        assert_eq!(management_address(&|_: &str| None), None);
    }
}
