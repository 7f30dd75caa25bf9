//! The engine proper: connections, the progress loop, and the messaging API.

use std::io::{ErrorKind, IoSlice, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use hx_bootstrap::{Bootstrap, Secret};
use hx_protocol::{Completion, Core, EpId, Rank, ReqId, Status};
use hx_transport::handshake::{self, Verdict};
use hx_transport::shm::{self, ShmListener};
use hx_transport::tcp::{self, RailOptions, TcpLink};
use hx_transport::Link;
use tracing::{debug, error, info, warn};

use crate::buf::EngineBuf;
use crate::error::io_err;
use crate::poller::{self, Poller};
use crate::setup::{self, PeerInfo, RailAddr};
use crate::{Error, Settings};

/// Endpoint id reserved for the engine's own barrier.
pub const BARRIER_EP: EpId = u16::MAX;
/// Handshakes in progress at once; more connections are refused until some finish.
const MAX_PENDING: usize = 64;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

const T_LINK: u64 = 1 << 62;
const T_LISTEN: u64 = 2 << 62;
const T_PENDING: u64 = 3 << 62;
const T_MASK: u64 = 3 << 62;
/// Sub-kinds under T_LISTEN (bit 61): outgoing reconnections and the shared-memory listener.
const T_CONNECT: u64 = T_LISTEN | 1 << 61;
const T_SHM_LISTEN: u64 = T_LISTEN | 1 << 60;
/// How often the engine looks after rails (reconnects, timeouts) while it is being called.
const HOUSEKEEPING: Duration = Duration::from_millis(50);
const RECONNECT_EVERY: Duration = Duration::from_millis(500);
/// Above this many bytes in flight, waiting calls sleep in epoll rather than spin.
const BULK_SLEEP: usize = 256 * 1024;

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

struct PendingConn {
    stream: TcpStream,
    hs: handshake::Pending,
    deadline: Instant,
    from: String,
}

/// An outgoing reconnection of a broken rail, driven by the event loop so that it never stalls
/// traffic on the other rails.
struct Connecting {
    stream: TcpStream,
    peer: Rank,
    rail: usize,
    challenge: [u8; hx_wire::CHALLENGE_LEN],
    have: usize,
    deadline: Instant,
}

/// What the engine knows about one rail besides its link.
#[derive(Clone)]
struct RailMeta {
    /// The peer closed the connection (EOF or reset) rather than the network failing.
    closed_by_peer: bool,
    down_since: Option<Instant>,
    next_retry: Instant,
    /// Shared memory: cannot be reconnected, one per peer.
    shm: bool,
}

/// One process's communication engine.
pub struct Engine {
    core: Core<EngineBuf>,
    links: Vec<Vec<Option<Box<dyn Link>>>>,
    blocked: Vec<Vec<bool>>,
    labels: Vec<Vec<String>>,
    poller: Poller,
    listeners: Vec<(TcpListener, String)>,
    pending: Vec<Option<PendingConn>>,
    secret: Secret,
    bootstrap: Box<dyn Bootstrap>,
    settings: Settings,
    rail_opts: RailOptions,
    dirty: Vec<Rank>,
    events: Vec<libc::epoll_event>,
    endpoints: Vec<EpId>,
    barrier_round: u64,
    finalizing: bool,
    routes: Vec<Vec<setup::Route>>,
    meta: Vec<Vec<RailMeta>>,
    connecting: Vec<Option<Connecting>>,
    shm_listener: Option<ShmListener>,
    /// Links read and written every round (shared memory), as (peer, rail).
    polled: Vec<(Rank, usize)>,
    spins: u32,
    next_housekeeping: Instant,
    rail_failures: u64,
    /// Process ids of peers on this host that direct copies go to.
    peer_pids: Vec<u32>,
}

fn link_token(peer: Rank, rail: usize) -> u64 {
    T_LINK | ((peer as u64) << 16) | rail as u64
}

impl Engine {
    /// Joins the job described by the environment (`hxcomm run` sets it; without it, a job of one).
    pub fn init() -> Result<Engine, Error> {
        crate::init_logging();
        let settings = Settings::from_env()?;
        let bootstrap = hx_bootstrap::from_env()?;
        let secret = if bootstrap.size() > 1 {
            hx_bootstrap::secret_from_env()?
        } else {
            [0; 32]
        };
        Self::with(settings, bootstrap, secret)
    }

    /// Joins a job through the given bootstrap with explicit settings and job secret.
    pub fn with(
        settings: Settings,
        bootstrap: Box<dyn Bootstrap>,
        secret: Secret,
    ) -> Result<Engine, Error> {
        let me = bootstrap.rank();
        let size = bootstrap.size();
        let bootstrap_ip = std::env::var("HX_BOOTSTRAP")
            .ok()
            .and_then(|a| a.parse::<SocketAddr>().ok())
            .and_then(|a| match a {
                SocketAddr::V4(v4) if !v4.ip().is_loopback() => Some(*v4.ip()),
                _ => None,
            });
        let poller = Poller::new().map_err(io_err("epoll_create"))?;
        let mut listeners = Vec::new();
        let mut my_info = PeerInfo {
            host: setup::host_id(),
            shm: String::new(),
            pid: std::process::id(),
            lo_port: 0,
            rails: Vec::new(),
        };
        if settings.shm && size > 1 {
            my_info.shm = shm::host_key().unwrap_or_default();
        }
        if size > 1 {
            let lo = tcp::listen(Ipv4Addr::LOCALHOST, None).map_err(io_err("loopback listener"))?;
            my_info.lo_port = lo.local_addr().map_err(io_err("local_addr"))?.port();
            listeners.push((lo, "lo".to_string()));
            for iface in setup::rail_interfaces(&settings, bootstrap_ip)? {
                let l = tcp::listen(iface.addr, Some(&iface.name))
                    .map_err(io_err(format!("listener on rail {}", iface.name)))?;
                my_info.rails.push(RailAddr {
                    name: iface.name.clone(),
                    addr: iface.addr,
                    prefix: iface.prefix,
                    port: l.local_addr().map_err(io_err("local_addr"))?.port(),
                });
                listeners.push((l, iface.name));
            }
        }
        let mut eng = Engine {
            core: Core::new(me, size, settings.protocol.clone()),
            links: (0..size).map(|_| Vec::new()).collect(),
            blocked: (0..size).map(|_| Vec::new()).collect(),
            labels: (0..size).map(|_| Vec::new()).collect(),
            poller,
            listeners,
            pending: Vec::new(),
            secret,
            bootstrap,
            rail_opts: RailOptions {
                notsent_lowat: settings.notsent_lowat,
                nodelay: true,
                liveness: Some(settings.rail_timeout),
            },
            settings,
            dirty: Vec::new(),
            events: Vec::with_capacity(64),
            endpoints: Vec::new(),
            barrier_round: 0,
            finalizing: false,
            routes: (0..size).map(|_| Vec::new()).collect(),
            meta: (0..size).map(|_| Vec::new()).collect(),
            connecting: Vec::new(),
            shm_listener: None,
            polled: Vec::new(),
            spins: 0,
            next_housekeeping: Instant::now(),
            rail_failures: 0,
            peer_pids: vec![0; size as usize],
        };
        if size > 1 {
            eng.connect_all(me, size, &my_info)?;
        }
        Ok(eng)
    }

    fn connect_all(&mut self, me: Rank, size: u32, my_info: &PeerInfo) -> Result<(), Error> {
        for (i, (l, _)) in self.listeners.iter().enumerate() {
            self.poller
                .add(l.as_raw_fd(), poller::IN, T_LISTEN | i as u64)
                .map_err(io_err("epoll add"))?;
        }
        self.bootstrap
            .put(&format!("hx.rails.{me}"), &setup::encode(my_info))?;
        self.bootstrap.fence()?;
        let mut shm_peers = Vec::new();
        for p in 0..size {
            if p == me {
                continue;
            }
            let info = setup::decode(p, &self.bootstrap.get(&format!("hx.rails.{p}"))?)?;
            let use_shm = !my_info.shm.is_empty() && info.shm == my_info.shm;
            let r = if use_shm {
                shm_peers.push(p);
                if self.settings.direct && info.pid != 0 {
                    self.peer_pids[p as usize] = info.pid;
                    self.core.set_direct(p, true);
                }
                vec![setup::Route::shm()]
            } else {
                setup::routes(my_info, p, &info, self.settings.loopback_rails)?
            };
            let n = r.len();
            self.core.set_rails(p, n);
            self.links[p as usize] = (0..n).map(|_| None).collect();
            self.blocked[p as usize] = vec![false; n];
            self.labels[p as usize] = r.iter().map(|r| r.label.clone()).collect();
            self.meta[p as usize] = vec![
                RailMeta {
                    closed_by_peer: false,
                    down_since: None,
                    next_retry: Instant::now(),
                    shm: use_shm,
                };
                n
            ];
            self.routes[p as usize] = r;
        }
        if !shm_peers.is_empty() && self.settings.direct {
            // Let peers of this job write into our buffers even where Yama restricts ptrace
            // to descendants (the ranks are siblings).
            // SAFETY: plain prctl.
            unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
        }
        // Shared memory: lower ranks listen (an abstract socket, nothing on disk), higher connect.
        if shm_peers.iter().any(|&p| p > me) {
            let l = shm::listen(&shm::socket_name(&self.secret, me))
                .map_err(io_err("shared-memory listener"))?;
            l.set_nonblocking(true)
                .map_err(io_err("shared-memory listener"))?;
            self.poller
                .add(l.as_raw_fd(), poller::IN, T_SHM_LISTEN)
                .map_err(io_err("epoll add"))?;
            self.shm_listener = Some(l);
        }
        // Lower ranks accept, higher ranks connect: every pair has exactly one initiator.
        for p in 0..me {
            if shm_peers.contains(&p) {
                let name = shm::socket_name(&self.secret, p);
                let link = shm::connect(&name, &self.secret, me, 0, self.settings.connect_timeout)
                    .map_err(io_err(format!("shared memory to rank {p}")))?;
                self.install_link(p, 0, Box::new(link))?;
                continue;
            }
            for rail in 0..self.routes[p as usize].len() {
                let route = self.routes[p as usize][rail].clone();
                let what = format!("rail {} to rank {p} ({})", route.label, route.remote);
                let mut s = tcp::connect(
                    route.local,
                    route.device.as_deref(),
                    route.remote,
                    self.settings.connect_timeout,
                )
                .map_err(io_err(format!("connecting {what}")))?;
                handshake::answer(&mut s, &self.secret, me, rail as u16, HANDSHAKE_TIMEOUT)
                    .map_err(io_err(format!("handshake on {what}")))?;
                self.install(p, rail, s)?;
            }
        }
        let deadline = Instant::now() + self.settings.connect_timeout;
        while let Some((p, rail)) = self.missing_link(me) {
            if Instant::now() > deadline {
                return Err(Error::Setup(format!(
                    "rank {p} did not connect rail {} within {:?}",
                    self.labels[p as usize][rail], self.settings.connect_timeout
                )));
            }
            self.progress_once(50)?;
        }
        // Every shared-memory peer is connected: the name can go.
        if let Some(l) = self.shm_listener.take() {
            self.poller.remove(l.as_raw_fd());
        }
        debug!(rank = me, "all rails connected");
        self.bootstrap.fence()?;
        Ok(())
    }

    fn missing_link(&self, me: Rank) -> Option<(Rank, usize)> {
        for p in me + 1..self.core.size() {
            if let Some(r) = self.links[p as usize].iter().position(|l| l.is_none()) {
                return Some((p, r));
            }
        }
        None
    }

    fn install(&mut self, peer: Rank, rail: usize, s: TcpStream) -> Result<(), Error> {
        tcp::tune(&s, &self.rail_opts).map_err(io_err("rail socket options"))?;
        let label = format!(
            "rail {} <-> rank {peer} ({} -> {})",
            self.labels[peer as usize][rail],
            s.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            s.peer_addr().map(|a| a.to_string()).unwrap_or_default()
        );
        self.install_link(peer, rail, Box::new(TcpLink::new(s, label)))
    }

    /// Puts a connected link in service (again) as `rail` to `peer`.
    fn install_link(&mut self, peer: Rank, rail: usize, link: Box<dyn Link>) -> Result<(), Error> {
        let token = link_token(peer, rail);
        if link.polled() {
            // Looked at every round anyway; epoll only has to wake a sleeper.
            self.poller.add_level(link.fd(), poller::IN, token)
        } else {
            self.poller
                .add(link.fd(), poller::IN | poller::OUT | poller::HUP, token)
        }
        .map_err(io_err("epoll add"))?;
        if link.polled() {
            self.polled.push((peer, rail));
        }
        self.links[peer as usize][rail] = Some(link);
        self.blocked[peer as usize][rail] = false;
        let m = &mut self.meta[peer as usize][rail];
        if let Some(since) = m.down_since.take() {
            info!(
                "hxcomm rank {}: rail {} to rank {peer} is back after {:.1} s",
                self.core.rank(),
                self.labels[peer as usize][rail],
                since.elapsed().as_secs_f64()
            );
        }
        m.closed_by_peer = false;
        self.core.rail_up(peer, rail);
        Ok(())
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

    /// Bytes written so far on each rail to `peer`.
    pub fn rail_tx_bytes(&self, peer: Rank) -> Vec<u64> {
        self.core.stats(peer).tx_bytes_per_rail
    }

    /// The names of the rails to `peer` (interface names, or `lo#i`).
    pub fn rail_names(&self, peer: Rank) -> &[String] {
        &self.labels[peer as usize]
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

    fn check_ep(&self, ep: EpId) -> Result<(), Error> {
        if ep == BARRIER_EP || self.endpoints.contains(&ep) {
            Ok(())
        } else {
            Err(Error::Invalid(format!("endpoint {ep} is not open")))
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
        self.check_ep(ep)?;
        let req = self.core.send(dst, ep, dst_ep, tag, buf)?;
        self.flush_dirty();
        Ok(Request(req))
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

    /// Sends `data` and returns when the buffer may be reused.
    pub fn send(
        &mut self,
        ep: EpId,
        dst: Rank,
        dst_ep: EpId,
        tag: u64,
        data: &[u8],
    ) -> Result<(), Error> {
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
        // SAFETY: as in `send`.
        let req = unsafe { self.irecv_raw(ep, src, tag, buf.as_mut_ptr(), buf.len())? };
        self.wait(req)
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
        match self.core.poll(req.0) {
            None => Err(Error::Invalid(format!(
                "unknown request {:#x}",
                req.to_u64()
            ))),
            Some(c) => Ok(*c != Completion::Pending),
        }
    }

    /// Makes progress once; returns the status if `req` is done (and releases it).
    pub fn test(&mut self, req: Request) -> Result<Option<Status>, Error> {
        if !self.known(req)? {
            self.progress()?;
        }
        if self.known(req)? {
            self.finish(req).map(|(st, _)| Some(st))
        } else {
            Ok(None)
        }
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
        loop {
            if done(self) {
                return Ok(());
            }
            if self.progress_once(0)? > 0 {
                idle_since = None;
                idle_rounds = 0;
                continue;
            }
            // Spin while a reply may come any moment; while bulk data is in flight, wake up for
            // it in epoll instead (the socket buffers absorb the wakeup delay).
            // (Shared memory has no socket buffer to absorb a wakeup: keep spinning there.)
            let bulk = self.polled.is_empty() && self.core.bulk_bytes() >= BULK_SLEEP;
            idle_rounds = idle_rounds.wrapping_add(1);
            let spin_over = !idle_rounds.is_multiple_of(32)
                || idle_since.get_or_insert_with(Instant::now).elapsed() < self.settings.spin;
            if spin_over && !bulk {
                if self.settings.yield_while_spinning {
                    // SAFETY: plain syscall.
                    unsafe { libc::sched_yield() };
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            self.progress_once(100)?;
            idle_since = None;
            idle_rounds = 0;
        }
    }

    /// Handles whatever is ready without blocking.
    ///
    /// Afterwards [`fd`](Self::fd) becomes readable when anything arrives, shared memory
    /// included: a caller that found nothing to do may sleep in poll() on it.
    pub fn progress(&mut self) -> Result<(), Error> {
        let work = self.progress_once(0)?;
        if work == 0 && !self.arm_polled() {
            // Data raced in while arming: handle it now rather than after a poll.
            self.progress_once(0)?;
        }
        Ok(())
    }

    /// Asks every polled (shared-memory) link to signal its fd when data arrives; false if some
    /// link already has data.
    fn arm_polled(&mut self) -> bool {
        let mut quiet = true;
        for i in 0..self.polled.len() {
            let (p, r) = self.polled[i];
            if let Some(l) = self.links[p as usize][r].as_mut() {
                quiet &= l.arm();
            }
        }
        quiet
    }

    /// Waits up to `timeout_ms` for events, handles them, and writes what can be written.
    /// Returns how many things happened (events, and reads on polled links).
    fn progress_once(&mut self, mut timeout_ms: i32) -> Result<usize, Error> {
        let mut work = 0;
        if !self.polled.is_empty() {
            // Shared memory moves without syscalls: look at it every round, and before
            // sleeping ask it to signal its fd.
            for i in 0..self.polled.len() {
                let (p, r) = self.polled[i];
                work += self.read_rail(p, r);
                self.flush_rail(p, r);
            }
            if timeout_ms != 0 && work == 0 && !self.arm_polled() {
                timeout_ms = 0;
            }
            self.spins = self.spins.wrapping_add(1);
            // While spinning on shared memory, look at the sockets only every few rounds.
            if timeout_ms == 0 && !self.spins.is_multiple_of(64) {
                self.polled
                    .retain(|&(p, r)| self.links[p as usize][r].is_some());
                self.flush_dirty();
                return Ok(work);
            }
        }
        let n = self
            .poller
            .wait(&mut self.events, timeout_ms)
            .map_err(io_err("epoll_wait"))?;
        for i in 0..n {
            let ev = self.events[i];
            let (flags, token) = (ev.events, ev.u64);
            match token & T_MASK {
                T_LINK => {
                    let peer = ((token >> 16) & 0xffff_ffff) as Rank;
                    let rail = (token & 0xffff) as usize;
                    if flags & (poller::IN | poller::HUP) != 0 {
                        self.read_rail(peer, rail);
                    }
                    // Every edge reports the whole mask, so OUT also comes with plain input:
                    // only a rail that was full has news here. Its turn comes in flush_dirty,
                    // shared fairly with the other rails.
                    if flags & poller::OUT != 0 {
                        if let Some(b) = self.blocked[peer as usize].get_mut(rail) {
                            if *b {
                                *b = false;
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
                T_LISTEN => self.accept((token & !T_MASK) as usize),
                T_PENDING => self.advance_handshake((token & !T_MASK) as usize),
                _ => {}
            }
        }
        let now = Instant::now();
        if now >= self.next_housekeeping {
            self.next_housekeeping = now + HOUSEKEEPING;
            self.housekeeping(now);
        }
        self.polled
            .retain(|&(p, r)| self.links[p as usize][r].is_some());
        self.flush_dirty();
        Ok(n + work)
    }

    /// Copies rendezvous messages straight into the memory of receivers on this host.
    fn direct_copies(&mut self) {
        while let Some(w) = self.core.take_direct() {
            let pid = self.peer_pids[w.peer as usize] as libc::pid_t;
            let src = self.core.direct_source(&w);
            let mut done = 0;
            let mut err = None;
            while done < w.len {
                let local = libc::iovec {
                    iov_base: src[done..].as_ptr() as *mut libc::c_void,
                    iov_len: w.len - done,
                };
                let remote = libc::iovec {
                    iov_base: (w.remote_addr as usize + done) as *mut libc::c_void,
                    iov_len: w.len - done,
                };
                // SAFETY: the local iovec covers our live send buffer; the remote one is the
                // receive buffer the peer offered (the kernel checks it against its mappings).
                let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
                if n <= 0 {
                    err = Some(std::io::Error::last_os_error());
                    break;
                }
                done += n as usize;
            }
            if let Some(e) = err {
                warn!(
                    "hxcomm rank {}: direct copy to rank {} not possible ({e}); large messages to it go through the shared-memory ring",
                    self.core.rank(),
                    w.peer
                );
            }
            self.core.direct_done(w, done == w.len);
        }
    }

    fn flush_dirty(&mut self) {
        self.direct_copies();
        let mut dirty = std::mem::take(&mut self.dirty);
        self.core.take_dirty(&mut dirty);
        dirty.sort_unstable();
        dirty.dedup();
        for &p in &dirty {
            // Rails take turns, one write each, until none can take more: otherwise the first
            // rail would pull every chunk of a message its socket buffer can hold, and a
            // medium-size message would leave on one rail only.
            loop {
                let mut wrote = false;
                for rail in 0..self.links[p as usize].len() {
                    wrote |= self.flush_rail_turns(p, rail, 1) > 0;
                }
                if !wrote {
                    break;
                }
            }
        }
        dirty.clear();
        self.dirty = dirty;
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
            let Some(link) = self.links[p].get_mut(rail).and_then(|l| l.as_mut()) else {
                return made;
            };
            // Sockets wait for EPOLLOUT once full; shared memory is simply tried again.
            if self.blocked[p][rail] && !link.polled() {
                return made;
            }
            let mut iov = [IoSlice::new(&[]); 64];
            let cnt = self.core.tx_iovecs(peer, rail, &mut iov);
            if cnt == 0 {
                return made;
            }
            let want: usize = iov[..cnt].iter().map(|s| s.len()).sum();
            match link.write_vectored(&iov[..cnt]) {
                Ok(n) => {
                    self.core.tx_done(peer, rail, n);
                    made += 1;
                    if n < want {
                        self.blocked[p][rail] = true;
                        return made;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.blocked[p][rail] = true;
                    return made;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    let by_peer =
                        matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset);
                    self.rail_down(peer, rail, &format!("write failed: {e}"), by_peer);
                    return made;
                }
            }
        }
    }

    /// Reads what `rail` of `peer` has; returns the number of bytes read.
    fn read_rail(&mut self, peer: Rank, rail: usize) -> usize {
        let p = peer as usize;
        let mut total = 0;
        loop {
            let Some(link) = self.links[p].get_mut(rail).and_then(|l| l.as_mut()) else {
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
                    if let Err(e) = self.core.rx_done(peer, rail, n) {
                        self.rail_down(peer, rail, &e.to_string(), false);
                        return total;
                    }
                    if n < want {
                        return total;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return total,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    let by_peer = e.kind() == ErrorKind::ConnectionReset;
                    self.rail_down(peer, rail, &format!("read failed: {e}"), by_peer);
                    return total;
                }
            }
        }
    }

    /// A rail ended. After the peer's Bye (or while we finalize) that is orderly. Otherwise its
    /// traffic moves to the other rails and the connecting side will try to bring it back. When
    /// the peer itself closed every rail (it exited or crashed), or no rail comes back within
    /// HX_RANK_TIMEOUT, operations involving the peer fail.
    fn rail_down(&mut self, peer: Rank, rail: usize, why: &str, closed_by_peer: bool) {
        let p = peer as usize;
        let Some(link) = self.links[p].get_mut(rail).and_then(|l| l.take()) else {
            return;
        };
        self.poller.remove(link.fd());
        drop(link);
        let label = self.labels[p].get(rail).cloned().unwrap_or_default();
        let me = self.core.rank();
        if self.core.bye_received(peer, rail) || self.finalizing {
            debug!(peer, rail = %label, why, "rail closed in order");
            return;
        }
        if self.core.peer_failed(peer).is_some() {
            return;
        }
        self.core.rail_down(peer, rail);
        self.rail_failures += 1;
        let m = &mut self.meta[p][rail];
        m.closed_by_peer = closed_by_peer;
        m.down_since = Some(Instant::now());
        m.next_retry = Instant::now() + Duration::from_millis(100);
        let all_down = self.links[p].iter().all(|l| l.is_none());
        let all_closed = self.meta[p].iter().all(|m| m.closed_by_peer || m.shm);
        if all_down && (all_closed || self.meta[p][rail].shm) {
            error!("hxcomm rank {me}: rank {peer} closed its connections ({why} on rail {label}); it has exited or crashed");
            self.core.fail_peer(
                peer,
                &format!(
                    "rank {peer} closed its connections without finishing ({why} on rail {label})"
                ),
            );
        } else {
            warn!(
                "hxcomm rank {me}: rail {label} to rank {peer} failed ({why}); its traffic moves to the other rails"
            );
        }
    }

    /// Reconnects broken rails (the higher rank of a pair connects) and gives up on peers that
    /// stayed unreachable for too long.
    fn housekeeping(&mut self, now: Instant) {
        if !self.pending.is_empty() {
            self.expire_handshakes();
        }
        for slot in 0..self.connecting.len() {
            if self.connecting[slot]
                .as_ref()
                .is_some_and(|c| c.deadline < now)
            {
                let c = self.connecting[slot].take().unwrap();
                self.poller.remove(c.stream.as_raw_fd());
            }
        }
        if self.finalizing {
            return;
        }
        let me = self.core.rank();
        for peer in 0..self.core.size() {
            let p = peer as usize;
            if peer == me || self.core.peer_failed(peer).is_some() {
                continue;
            }
            let all_down = !self.links[p].is_empty() && self.links[p].iter().all(|l| l.is_none());
            if all_down {
                let since = self.meta[p].iter().filter_map(|m| m.down_since).max();
                if since.is_some_and(|t| now.duration_since(t) > self.settings.rank_timeout) {
                    error!(
                        "hxcomm rank {me}: no rail to rank {peer} for {:?}; giving up on it",
                        self.settings.rank_timeout
                    );
                    self.core.fail_peer(
                        peer,
                        &format!(
                            "unreachable for {:?} (HX_RANK_TIMEOUT)",
                            self.settings.rank_timeout
                        ),
                    );
                    continue;
                }
            }
            if peer > me {
                continue;
            }
            for rail in 0..self.links[p].len() {
                let m = &self.meta[p][rail];
                if self.links[p][rail].is_some() || m.shm || now < m.next_retry {
                    continue;
                }
                let busy = self
                    .connecting
                    .iter()
                    .flatten()
                    .any(|c| c.peer == peer && c.rail == rail);
                if !busy {
                    self.meta[p][rail].next_retry = now + RECONNECT_EVERY;
                    self.start_reconnect(peer, rail, now);
                }
            }
        }
    }

    fn start_reconnect(&mut self, peer: Rank, rail: usize, now: Instant) {
        let route = self.routes[peer as usize][rail].clone();
        let stream =
            match tcp::connect_nonblocking(route.local, route.device.as_deref(), route.remote) {
                Ok(s) => s,
                Err(e) => {
                    debug!(peer, rail, "reconnect: {e}");
                    return;
                }
            };
        let slot = match self.connecting.iter().position(|c| c.is_none()) {
            Some(i) => i,
            None => {
                self.connecting.push(None);
                self.connecting.len() - 1
            }
        };
        if self
            .poller
            .add(
                stream.as_raw_fd(),
                poller::IN | poller::OUT | poller::HUP,
                T_CONNECT | slot as u64,
            )
            .is_err()
        {
            return;
        }
        self.connecting[slot] = Some(Connecting {
            stream,
            peer,
            rail,
            challenge: [0; hx_wire::CHALLENGE_LEN],
            have: 0,
            deadline: now + Duration::from_secs(2),
        });
    }

    fn advance_connect(&mut self, slot: usize) {
        use std::io::Read;
        let Some(c) = self.connecting.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        if let Ok(Some(_)) | Err(_) = c.stream.take_error() {
            let c = self.connecting[slot].take().unwrap();
            self.poller.remove(c.stream.as_raw_fd());
            return;
        }
        loop {
            match c.stream.read(&mut c.challenge[c.have..]) {
                Ok(0) => break,
                Ok(n) => {
                    c.have += n;
                    if c.have < hx_wire::CHALLENGE_LEN {
                        continue;
                    }
                    let c = self.connecting[slot].take().unwrap();
                    self.poller.remove(c.stream.as_raw_fd());
                    self.finish_reconnect(c);
                    return;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let c = self.connecting[slot].take().unwrap();
        self.poller.remove(c.stream.as_raw_fd());
    }

    fn finish_reconnect(&mut self, mut c: Connecting) {
        let me = self.core.rank();
        let Ok(ch) = hx_wire::Challenge::parse(&c.challenge) else {
            return;
        };
        let hello = hx_wire::Hello {
            rank: me,
            rail: c.rail as u16,
            flags: 0,
            mac: hx_bootstrap::hmac_sha256(
                &self.secret,
                &[&hx_wire::Hello::mac_input(&ch.nonce, me, c.rail as u16)],
            ),
        };
        if c.stream.write_all(&hello.to_bytes()).is_err()
            || self.links[c.peer as usize][c.rail].is_some()
        {
            return;
        }
        if let Err(e) = self.install(c.peer, c.rail, c.stream) {
            warn!("reinstalling rail {} to rank {}: {e}", c.rail, c.peer);
        }
    }

    fn shm_accept(&mut self) {
        loop {
            let Some(l) = self.shm_listener.as_ref() else {
                return;
            };
            match l.accept(&self.secret, HANDSHAKE_TIMEOUT) {
                Ok((link, hello)) => {
                    let (peer, me) = (hello.rank, self.core.rank());
                    let ok = peer > me
                        && peer < self.core.size()
                        && self.meta[peer as usize].first().is_some_and(|m| m.shm)
                        && self.links[peer as usize][0].is_none();
                    if !ok {
                        warn!("hxcomm rank {me}: refusing unexpected shared-memory link from rank {peer}");
                        continue;
                    }
                    if let Err(e) = self.install_link(peer, 0, Box::new(link)) {
                        warn!("shared memory from rank {peer}: {e}");
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => warn!(
                    "hxcomm rank {}: refused a shared-memory connection: {e}",
                    self.core.rank()
                ),
            }
        }
    }

    fn accept(&mut self, idx: usize) {
        loop {
            let Some((l, name)) = self.listeners.get(idx) else {
                return;
            };
            let (mut s, from) = match l.accept() {
                Ok(v) => v,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    warn!("accept on {name} listener: {e}");
                    return;
                }
            };
            let live = self.pending.iter().filter(|p| p.is_some()).count();
            if live >= MAX_PENDING {
                warn!("refusing connection from {from} on {name}: {MAX_PENDING} handshakes already pending");
                continue;
            }
            let hs = match handshake::Pending::new() {
                Ok(h) => h,
                Err(e) => {
                    warn!("handshake nonce: {e}");
                    continue;
                }
            };
            if s.set_nonblocking(true).is_err() || s.write_all(&hs.challenge()).is_err() {
                continue;
            }
            let slot = match self.pending.iter().position(|p| p.is_none()) {
                Some(i) => i,
                None => {
                    self.pending.push(None);
                    self.pending.len() - 1
                }
            };
            if self
                .poller
                .add(
                    s.as_raw_fd(),
                    poller::IN | poller::HUP,
                    T_PENDING | slot as u64,
                )
                .is_err()
            {
                continue;
            }
            self.pending[slot] = Some(PendingConn {
                stream: s,
                hs,
                deadline: Instant::now() + HANDSHAKE_TIMEOUT,
                from: format!("{from} on {name}"),
            });
            self.advance_handshake(slot);
        }
    }

    fn advance_handshake(&mut self, slot: usize) {
        use std::io::Read;
        loop {
            let Some(pc) = self.pending.get_mut(slot).and_then(|p| p.as_mut()) else {
                return;
            };
            let n = match pc.stream.read(pc.hs.space()) {
                Ok(0) => {
                    self.reject(slot, "closed before completing the handshake");
                    return;
                }
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.reject(slot, &format!("read failed: {e}"));
                    return;
                }
            };
            match pc.hs.received(n, &self.secret) {
                Verdict::NeedMore => {}
                Verdict::Rejected(why) => {
                    self.reject(slot, &why);
                    return;
                }
                Verdict::Peer { rank, rail } => {
                    let pc = self.pending[slot].take().unwrap();
                    self.poller.remove(pc.stream.as_raw_fd());
                    let me = self.core.rank();
                    let ok = rank > me
                        && rank < self.core.size()
                        && (rail as usize) < self.links[rank as usize].len()
                        && !self.meta[rank as usize][rail as usize].shm
                        && self.core.peer_failed(rank).is_none();
                    if !ok {
                        warn!(
                            "hxcomm rank {me}: closing connection from {}: unexpected rail {rail} from rank {rank}",
                            pc.from
                        );
                        return;
                    }
                    if self.links[rank as usize][rail as usize].is_some() {
                        // The peer reconnects a rail we have not yet seen fail: it has.
                        self.rail_down(rank, rail as usize, "peer reconnected it", false);
                    }
                    if let Err(e) = self.install(rank, rail as usize, pc.stream) {
                        warn!("installing rail {rail} from rank {rank}: {e}");
                        return;
                    }
                    // Bytes may already be waiting behind the handshake.
                    self.read_rail(rank, rail as usize);
                    return;
                }
            }
        }
    }

    fn reject(&mut self, slot: usize, why: &str) {
        if let Some(pc) = self.pending[slot].take() {
            self.poller.remove(pc.stream.as_raw_fd());
            warn!(
                "hxcomm rank {}: closed connection from {}: {why}",
                self.core.rank(),
                pc.from
            );
        }
    }

    fn expire_handshakes(&mut self) {
        let now = Instant::now();
        for slot in 0..self.pending.len() {
            if self.pending[slot]
                .as_ref()
                .is_some_and(|p| p.deadline < now)
            {
                self.reject(slot, "no handshake within 5 s");
            }
        }
        while matches!(self.pending.last(), Some(None)) {
            self.pending.pop();
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
        self.wait_until(|e| (0..e.size()).all(|p| !e.core.peer_tx_pending(p)))?;
        let r = self.barrier();
        for p in 0..self.size() {
            if p != self.rank() && self.core.peer_failed(p).is_none() {
                self.core.send_bye(p);
            }
        }
        self.flush_dirty();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && self.links.iter().flatten().any(|l| l.is_some()) {
            // Rails leave `links` when the peer's Bye and EOF have been read.
            let all_bye = (0..self.size()).all(|p| {
                (0..self.links[p as usize].len()).all(|rail| {
                    self.links[p as usize][rail].is_none() || self.core.bye_received(p, rail)
                })
            });
            let all_sent = (0..self.size()).all(|p| !self.core.peer_tx_pending(p));
            if all_bye && all_sent {
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
