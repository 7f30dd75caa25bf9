//! Connection management, apart from the data path: the table of peers (known by address,
//! numbered in the order they became known), and the connections to them, made on first use.
//!
//! Either side of a pair may connect first, and both may at once. The acceptor decides which
//! connection a rail keeps: the one initiated by the process with the larger instance number
//! (an acceptor with the larger number refuses an incoming connection while it has its own
//! attempt or its own live link on that rail; otherwise it accepts, replacing a live link the
//! peer evidently considers broken). Refused connectors simply wait for the other connection.
//! Both TCP and shared-memory handshakes are nonblocking state machines driven by the event
//! loop, so two processes connecting to each other never wait for each other.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use hx_protocol::Rank;
use hx_transport::handshake::{self, Verdict};
use hx_transport::shm::{self, ShmAccepting, ShmConnecting};
use hx_transport::tcp::{self, TcpLink};
use hx_transport::Link;
use hx_wire::{Address, CHALLENGE_LEN, VERDICT_ACCEPT, VERDICT_LEN, VERDICT_REFUSE};
use tracing::{debug, error, info, warn};

use crate::engine::{Engine, T_CONNECT, T_PENDING, T_SHM_ACCEPT, T_SHM_CONNECT};
use crate::error::io_err;
use crate::poller;
use crate::setup::{self, Route};
use crate::Error;

/// Handshakes in progress at once. Connections beyond it wait in the listen backlog (they are
/// accepted as slots free up), so a burst of legitimate connections is slowed, never refused,
/// while strangers can hold at most this many slots for at most [`HANDSHAKE_TIMEOUT`].
pub(crate) const MAX_PENDING: usize = 256;
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a rail that is down is tried again while it is wanted.
pub(crate) const RECONNECT_EVERY: Duration = Duration::from_millis(500);
/// After the peer refused our connection in favour of its own, how long we leave that to it
/// before trying again ourselves (retrying sooner only crowds its listener).
pub(crate) const REFUSED_BACKOFF: Duration = Duration::from_secs(2);

/// Everything the engine knows about one peer process.
pub(crate) struct PeerSlot {
    /// Its address (endpoint field: the first one we learnt).
    pub addr: Option<Address>,
    /// Reached through one shared-memory link instead of rails.
    pub shm: bool,
    /// Process id for direct copies, as the kernel names the other end of the shared-memory
    /// link (SO_PEERCRED, in our pid namespace), never as the peer's address claims it (0: no
    /// link yet).
    pub pid: u32,
    pub rails: Vec<RailSlot>,
    /// Traffic has been queued for it at least once: connect whatever is down.
    pub wanted: bool,
}

/// One rail (or the shared-memory link) to a peer.
pub(crate) struct RailSlot {
    pub link: Option<Box<dyn Link>>,
    /// The socket refused more data; wait for EPOLLOUT.
    pub blocked: bool,
    pub label: String,
    pub route: Route,
    /// The live link is one we initiated.
    pub mine: bool,
    /// The peer closed this rail or refused to connect it (it exited), rather than the network
    /// failing.
    pub gone: bool,
    pub down_since: Option<Instant>,
    pub next_retry: Instant,
    /// An attempt of ours is under way.
    pub attempting: bool,
    /// A failed attempt was reported (once, until the rail connects).
    pub warned: bool,
    /// The rail has been connected before (a new connection brings it back).
    pub was_up: bool,
    /// Its socket's TCP_NOTSENT_LOWAT is raised for bulk data (Engine::tune_lowat).
    pub lowat_raised: bool,
    /// Its socket runs the bulk congestion control (HX_TCP_CONGESTION) since it last filled,
    /// not the latency one (Engine::tune_congestion; back after [`BULK_CC_IDLE_MS`] without a
    /// write: [`wake_latency_cc`](Self::wake_latency_cc)).
    pub bulk_cc: bool,
    /// While `bulk_cc`: when its socket was last written (coarse monotonic ms).
    pub bulk_written_ms: u64,
    /// Its socket's SO_RCVLOWAT (0: the default, 1 byte), raised while a large payload arrives
    /// (Engine::tune_rcvlowat).
    pub rcvlowat: u32,
    /// When that mark was set (to see how fast it fills).
    pub rcvlowat_since: Option<Instant>,
    /// The rail filled a mark faster than marks pay: none until then.
    pub rcvlowat_off_until: Option<Instant>,
}

/// With HX_RAIL_RATE, rail sockets are paced this much above the given link rate: the wire
/// stays the limit (headers count in the pacing, ~4% at MTU 1500), and what waits, waits in
/// the socket, where the engine still orders frames (control frames pass data), not behind
/// megabytes in a switch's queue. 4 x 1 Gbit/s testbed rails, 64 KiB two ways (bench/ab.sh,
/// 7 runs): unpaced 737 MB/s, paced at 1.04x 948, at 0.99x 913.
pub(crate) const RAIL_RATE_HEADROOM: f64 = 1.05;

/// A rail socket on the bulk congestion control that has written nothing for this long goes
/// back to the latency one before its next write. After an idle longer than its RTO (at least
/// 200 ms) the kernel restarts cubic's window; on a socket BBR ran first, TCP keeps pacing it
/// (BBR asked for pacing, and nothing takes that back), at that small window over the round
/// trip time measured under load, e.g. 53 segments over 5.5 ms after a 64 MiB transfer: 8-32
/// KiB messages then took ~300 us each for 20-60 messages, where BBR (or cubic never paced)
/// takes 8-15 us.
pub(crate) const BULK_CC_IDLE_MS: u64 = 200;

/// Coarse monotonic milliseconds (the kernel's tick: a few ns to read, a few ms of error).
pub(crate) fn coarse_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; CLOCK_MONOTONIC_COARSE exists on every Linux we run on.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

impl RailSlot {
    /// Before a write to this rail's socket: on the bulk congestion control and idle for
    /// [`BULK_CC_IDLE_MS`], it goes back to `latency_cc` (see there). One flag to look at on
    /// every other socket.
    #[inline]
    pub fn wake_latency_cc(&mut self, latency_cc: Option<&str>) {
        if self.bulk_cc {
            self.bulk_written(latency_cc);
        }
    }

    #[cold]
    fn bulk_written(&mut self, latency_cc: Option<&str>) {
        let now = coarse_ms();
        if now.saturating_sub(self.bulk_written_ms) >= BULK_CC_IDLE_MS {
            if let (Some(cc), Some(link)) = (latency_cc, self.link.as_ref()) {
                // Refused now where it was taken at the start: the socket stays on bulk.
                if tcp::set_congestion_fd(link.fd(), cc).is_ok() {
                    self.bulk_cc = false;
                }
            }
        }
        self.bulk_written_ms = now;
    }

    fn new(route: Route) -> RailSlot {
        RailSlot {
            link: None,
            blocked: false,
            label: route.label.clone(),
            route,
            mine: false,
            gone: false,
            down_since: None,
            next_retry: Instant::now(),
            attempting: false,
            warned: false,
            was_up: false,
            lowat_raised: false,
            bulk_cc: false,
            bulk_written_ms: 0,
            rcvlowat: 0,
            rcvlowat_since: None,
            rcvlowat_off_until: None,
        }
    }
}

impl PeerSlot {
    pub(crate) fn unknown() -> PeerSlot {
        PeerSlot {
            addr: None,
            shm: false,
            pid: 0,
            rails: Vec::new(),
            wanted: false,
        }
    }
}

/// An incoming TCP connection in its handshake.
pub(crate) struct PendingConn {
    stream: TcpStream,
    hs: handshake::Pending,
    deadline: Instant,
    from: String,
}

enum ConnPhase {
    Challenge,
    Verdict,
}

/// An outgoing TCP connection in its handshake.
pub(crate) struct Connecting {
    stream: TcpStream,
    peer: Rank,
    rail: usize,
    phase: ConnPhase,
    buf: [u8; CHALLENGE_LEN],
    have: usize,
    deadline: Instant,
}

pub(crate) struct ShmOut {
    c: ShmConnecting,
    peer: Rank,
    deadline: Instant,
}

pub(crate) struct ShmIn {
    a: ShmAccepting,
    deadline: Instant,
}

/// The shared-memory handshake names processes by two u32s; we put the instance in them.
fn split(instance: u64) -> (u32, u32) {
    (instance as u32, (instance >> 32) as u32)
}

fn put<T>(v: &mut Vec<Option<T>>, x: T) -> usize {
    match v.iter().position(|c| c.is_none()) {
        Some(i) => {
            v[i] = Some(x);
            i
        }
        None => {
            v.push(Some(x));
            v.len() - 1
        }
    }
}

impl Engine {
    /// Whether large messages to same-host peers may be copied straight into their buffers:
    /// `HX_DIRECT` on and Yama permitting. Where Yama needs it, the first call lets same-user
    /// processes attach to this one (PR_SET_PTRACER_ANY), so that peers can copy into it too.
    fn direct_allowed(&mut self) -> bool {
        if !self.settings.direct {
            return false;
        }
        match crate::setup::DirectCopy::here() {
            crate::setup::DirectCopy::Allowed => true,
            crate::setup::DirectCopy::Refused => false,
            crate::setup::DirectCopy::NeedsPtracerAny => {
                if !self.ptracer_set {
                    // SAFETY: plain prctl.
                    unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
                    self.ptracer_set = true;
                }
                true
            }
        }
    }

    /// The peer with this address, made known if it is new (its rails are computed, nothing is
    /// connected). `None` for this process itself.
    pub(crate) fn peer_for(&mut self, addr: &Address) -> Result<Rank, Error> {
        if addr.instance == self.addr.instance {
            return Ok(self.core.rank());
        }
        if let Some(&p) = self.by_instance.get(&addr.instance) {
            let slot = &mut self.peers[p as usize];
            if slot.addr.as_ref().is_some_and(|a| a.port == 0) && addr.port != 0 {
                // Met over shared memory before its address was known: complete what we know.
                slot.addr = Some(addr.clone());
                if slot.shm && addr.pid != 0 && self.direct_allowed() {
                    self.core.set_direct(p, true);
                }
            }
            return Ok(p);
        }
        let p = self.core.add_peer();
        self.peers.push(PeerSlot::unknown());
        self.set_peer(p, addr)?;
        Ok(p)
    }

    /// Fills slot `p` from the peer's address: shared memory or which rails.
    pub(crate) fn set_peer(&mut self, p: Rank, addr: &Address) -> Result<(), Error> {
        let use_shm =
            self.settings.shm && self.addr.shm() && addr.shm() && addr.host == self.addr.host;
        let routes = if use_shm {
            vec![Route::shm()]
        } else {
            setup::routes(
                &self.addr,
                &self.devices,
                self.place.as_ref(),
                addr,
                self.settings.loopback_rails,
            )?
        };
        let slot = &mut self.peers[p as usize];
        slot.addr = Some(addr.clone());
        slot.shm = use_shm;
        slot.rails = routes.into_iter().map(RailSlot::new).collect();
        self.core.set_rails_down(p, slot.rails.len());
        // Both sides choose shared memory by the same rule (both offer it, same host).
        self.core.set_lossless(p, use_shm);
        if use_shm && self.direct_allowed() && addr.pid != 0 {
            self.core.set_direct(p, true);
        }
        self.by_instance.insert(addr.instance, p);
        Ok(())
    }

    /// Starts connecting whatever is down to `peer`, unless an attempt is under way or it was
    /// tried too recently.
    pub(crate) fn connect_wanted(&mut self, peer: Rank, now: Instant) {
        let p = peer as usize;
        if peer == self.core.rank() || self.finalizing || self.core.peer_failed(peer).is_some() {
            return;
        }
        self.peers[p].wanted = true;
        // A rail counts as down from the first attempt on, so that HX_RANK_TIMEOUT runs from
        // there: a peer whose kernel accepts but whose process never answers (stopped, hung)
        // fails after HX_RANK_TIMEOUT, not after HX_CONNECT_TIMEOUT plus HX_RANK_TIMEOUT.
        for r in &mut self.peers[p].rails {
            if r.link.is_none() {
                r.down_since.get_or_insert(now);
            }
        }
        for rail in 0..self.peers[p].rails.len() {
            let r = &self.peers[p].rails[rail];
            if r.link.is_some()
                || r.attempting
                || now < r.next_retry
                || self.core.bye_received(peer, rail)
            {
                continue;
            }
            self.peers[p].rails[rail].next_retry = now + RECONNECT_EVERY;
            if self.peers[p].shm {
                self.start_shm(peer, now);
            } else {
                self.start_tcp(peer, rail, now);
            }
        }
    }

    fn start_tcp(&mut self, peer: Rank, rail: usize, now: Instant) {
        let route = self.peers[peer as usize].rails[rail].route.clone();
        // The algorithm it starts with, before the connection exists (tcp::first_congestion).
        let first_cc = self
            .latency_cc
            .as_deref()
            .or(self.settings.tcp_congestion.as_deref());
        let stream = match tcp::connect_nonblocking(
            route.local,
            route.device.as_deref(),
            route.remote,
            first_cc,
        ) {
            Ok(s) => s,
            Err(e) => {
                // Unreachable at once (no route: a relay's link is down, say).
                self.core.rail_unreachable(peer, rail);
                self.warn_unconnected(peer, rail, &e.to_string());
                return;
            }
        };
        let slot = put(
            &mut self.connecting,
            Connecting {
                stream,
                peer,
                rail,
                phase: ConnPhase::Challenge,
                buf: [0; CHALLENGE_LEN],
                have: 0,
                deadline: now + self.settings.connect_timeout,
            },
        );
        let fd = self.connecting[slot].as_ref().unwrap().stream.as_raw_fd();
        if self
            .poller
            .add(
                fd,
                poller::IN | poller::OUT | poller::HUP,
                T_CONNECT | slot as u64,
            )
            .is_err()
        {
            self.connecting[slot] = None;
            return;
        }
        self.peers[peer as usize].rails[rail].attempting = true;
    }

    fn end_connect(&mut self, slot: usize) -> Option<Connecting> {
        let c = self.connecting.get_mut(slot)?.take()?;
        self.poller.remove(c.stream.as_raw_fd());
        if let Some(r) = self.peers[c.peer as usize].rails.get_mut(c.rail) {
            r.attempting = false;
        }
        Some(c)
    }

    /// An attempt failed: a refused connection means nobody listens there any more.
    fn connect_failed(&mut self, slot: usize, why: &str, refused: bool) {
        if let Some(c) = self.end_connect(slot) {
            debug!(
                peer = c.peer,
                rail = c.rail,
                why,
                "connection attempt failed"
            );
            // Policies waiting for this rail's first connection (bind) stop waiting.
            self.core.rail_unreachable(c.peer, c.rail);
            let r = &mut self.peers[c.peer as usize].rails[c.rail];
            if refused && r.link.is_none() {
                r.gone = true;
                r.down_since.get_or_insert_with(Instant::now);
                let label = r.label.clone();
                self.check_peer_gone(c.peer, why, &label);
            } else if !refused {
                self.warn_unconnected(c.peer, c.rail, why);
            }
        }
    }

    /// Says once per outage that a rail to a live peer cannot be connected: its share goes to
    /// the other rails meanwhile, which would otherwise pass unnoticed.
    fn warn_unconnected(&mut self, peer: Rank, rail: usize, why: &str) {
        if self.finalizing || self.core.peer_failed(peer).is_some() {
            return;
        }
        let r = &mut self.peers[peer as usize].rails[rail];
        if r.warned || r.link.is_some() {
            return;
        }
        r.warned = true;
        let label = r.label.clone();
        warn!(
            "hxcomm {}: rail {label} to {} cannot be connected ({why}); the other rails carry its \
             traffic, retrying every {} ms",
            self.whoami(),
            self.who(peer),
            RECONNECT_EVERY.as_millis()
        );
    }

    pub(crate) fn advance_connect(&mut self, slot: usize) {
        let Some(c) = self.connecting.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        match c.stream.take_error() {
            Ok(Some(e)) | Err(e) => {
                let refused = e.kind() == ErrorKind::ConnectionRefused;
                self.connect_failed(slot, &e.to_string(), refused);
                return;
            }
            Ok(None) => {}
        }
        loop {
            let want = match c.phase {
                ConnPhase::Challenge => CHALLENGE_LEN,
                ConnPhase::Verdict => VERDICT_LEN,
            };
            match c.stream.read(&mut c.buf[c.have..want]) {
                Ok(0) => {
                    self.connect_failed(slot, "closed during the handshake", false);
                    return;
                }
                Ok(n) => c.have += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    let refused = e.kind() == ErrorKind::ConnectionRefused;
                    self.connect_failed(slot, &e.to_string(), refused);
                    return;
                }
            }
            if c.have < want {
                continue;
            }
            c.have = 0;
            match c.phase {
                ConnPhase::Challenge => {
                    let to = self.peers[c.peer as usize]
                        .addr
                        .as_ref()
                        .map_or(0, |a| a.instance);
                    let hello = match handshake::hello_for(
                        &c.buf,
                        &self.secret,
                        c.rail as u16,
                        to,
                        &self.addr,
                    ) {
                        Ok(h) => h,
                        Err(e) => {
                            // Another release will not change its mind, on this rail or any
                            // other: the peer is given up, saying why (not as a crash).
                            let permanent = e.kind() == ErrorKind::Unsupported;
                            if permanent && self.core.peer_failed(c.peer).is_none() {
                                let peer = c.peer;
                                let who = self.who(peer);
                                error!("hxcomm {}: cannot talk to {who}: {e}", self.whoami());
                                self.core.fail_peer(peer, &format!("{who}: {e}"));
                            }
                            self.connect_failed(slot, &e.to_string(), permanent);
                            return;
                        }
                    };
                    // 112 bytes into a fresh socket's empty buffer: never short.
                    if let Err(e) = c.stream.write_all(&hello) {
                        self.connect_failed(slot, &e.to_string(), false);
                        return;
                    }
                    c.phase = ConnPhase::Verdict;
                }
                ConnPhase::Verdict => {
                    let accepted = c.buf[..VERDICT_LEN] == VERDICT_ACCEPT;
                    let c = self.end_connect(slot).expect("present");
                    if !accepted {
                        debug!(
                            peer = c.peer,
                            rail = c.rail,
                            "the peer keeps its own connection"
                        );
                        let r = &mut self.peers[c.peer as usize].rails[c.rail];
                        r.next_retry = Instant::now() + REFUSED_BACKOFF;
                        return;
                    }
                    let (peer, rail) = (c.peer, c.rail);
                    if self.peers[peer as usize].rails[rail].link.is_some() {
                        // The acceptor decided for this one (our other link must have failed on
                        // its side): replace ours.
                        self.rail_down(peer, rail, "the peer chose another connection", false);
                    }
                    if let Err(e) = self.install_tcp(peer, rail, c.stream, true) {
                        warn!("installing rail {rail} to peer {peer}: {e}");
                    }
                    // Bytes may already be waiting behind the verdict.
                    self.read_rail(peer, rail);
                    return;
                }
            }
        }
    }

    pub(crate) fn install_tcp(
        &mut self,
        peer: Rank,
        rail: usize,
        s: TcpStream,
        mine: bool,
    ) -> Result<(), Error> {
        tcp::tune(&s, &self.rail_opts).map_err(io_err("rail socket options"))?;
        self.fix_buffers(&s);
        // A new socket starts with the latency algorithm (it switches to the bulk one when it
        // fills: Engine::tune_congestion).
        if let Some(cc) = self.latency_cc.clone() {
            if let Err(e) = tcp::set_congestion(&s, &cc) {
                // Not allowed to this user or not in this kernel: one algorithm throughout.
                debug!(
                    "hxcomm {}: rail sockets stay with HX_TCP_CONGESTION: {e}",
                    self.whoami()
                );
                self.latency_cc = None;
            }
        }
        if let (None, Some(cc)) = (&self.latency_cc, &self.settings.tcp_congestion) {
            // Not allowed to this user or not in this kernel: the rail keeps the default.
            if let Err(e) = tcp::set_congestion(&s, cc) {
                debug!(
                    "hxcomm {}: rail socket keeps its congestion control: {e}",
                    self.whoami()
                );
            }
        }
        if let Some(bits) = self.settings.rail_rate {
            let cap = (bits as f64 / 8.0 * RAIL_RATE_HEADROOM) as u64;
            if let Err(e) = tcp::set_max_pacing_rate(s.as_raw_fd(), cap) {
                warn!(
                    "hxcomm {}: HX_RAIL_RATE: a rail socket stays unpaced \
                     (SO_MAX_PACING_RATE: {e})",
                    self.whoami()
                );
            }
        }
        let who = self.who(peer);
        let label = format!(
            "rail {} <-> {who} ({} -> {})",
            self.peers[peer as usize].rails[rail].label,
            s.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            s.peer_addr().map(|a| a.to_string()).unwrap_or_default()
        );
        self.install_link(peer, rail, Box::new(TcpLink::new(s, label)), mine)
    }

    /// Gives a rail socket the send and receive buffers HX_SNDBUF and HX_RCVBUF ask for; says
    /// once per buffer when the kernel gave less (net.core.{w,r}mem_max), since that costs
    /// bandwidth where the CPU is the limit.
    fn fix_buffers(&mut self, s: &TcpStream) {
        for (which, var, want) in [
            (tcp::Buffer::Send, "HX_SNDBUF", self.settings.send_buffer),
            (
                tcp::Buffer::Receive,
                "HX_RCVBUF",
                self.settings.receive_buffer,
            ),
        ] {
            if want == 0 {
                continue;
            }
            let warned = match which {
                tcp::Buffer::Send => &mut self.send_buffer_warned,
                tcp::Buffer::Receive => &mut self.receive_buffer_warned,
            };
            let said = match tcp::set_buffer(s.as_raw_fd(), which, want) {
                Ok(got) if got >= 2 * want as usize => continue,
                Ok(got) => format!(
                    "{var}={want}: rail sockets got a {got}-byte buffer ({} caps it; raise \
                     that, or set {var}=0 to leave the sizing to the kernel)",
                    which.cap_sysctl()
                ),
                Err(e) => format!("{var}: rail sockets keep the kernel's sizing ({e})"),
            };
            if !std::mem::replace(warned, true) {
                warn!("hxcomm {}: {said}", self.whoami());
            }
        }
    }

    /// Puts a connected link in service (again) as `rail` to `peer`.
    pub(crate) fn install_link(
        &mut self,
        peer: Rank,
        rail: usize,
        link: Box<dyn Link>,
        mine: bool,
    ) -> Result<(), Error> {
        let token = crate::engine::link_token(peer, rail);
        if link.polled() {
            // Looked at every round anyway; epoll only has to wake a sleeper.
            self.poller.add_level(link.fd(), poller::IN, token)
        } else {
            self.poller
                .add(link.fd(), poller::IN | poller::OUT | poller::HUP, token)
        }
        .map_err(io_err("epoll add"))?;
        if link.polled() {
            if !self.polled.contains(&(peer, rail)) {
                self.polled.push((peer, rail));
            }
        } else if !self.sockets.contains(&(peer, rail)) {
            self.sockets.push((peer, rail));
        }
        let whoami = self.whoami();
        let who = self.who(peer);
        let r = &mut self.peers[peer as usize].rails[rail];
        r.link = Some(link);
        r.blocked = false;
        // A new socket starts at the configured mark, with the algorithm install_tcp gave it.
        if std::mem::take(&mut r.lowat_raised) {
            self.raised_lowat -= 1;
        }
        r.bulk_cc = false;
        r.rcvlowat = 0;
        r.rcvlowat_since = None;
        r.mine = mine;
        r.gone = false;
        let warned = std::mem::take(&mut r.warned);
        let down_for = r.down_since.take().map(|t| t.elapsed().as_secs_f64());
        if std::mem::replace(&mut r.was_up, true) {
            if let Some(secs) = down_for {
                info!(
                    "hxcomm {whoami}: rail {} to {who} is back after {secs:.1} s",
                    r.label
                );
            }
        } else if warned {
            info!(
                "hxcomm {whoami}: rail {} to {who} is connected now",
                r.label
            );
        }
        self.core.rail_up(peer, rail);
        Ok(())
    }

    /// Accepts what waits on listener `idx`, as long as handshake slots are free.
    pub(crate) fn accept(&mut self, idx: usize) {
        loop {
            let live = self.pending.iter().filter(|p| p.is_some()).count();
            if live >= MAX_PENDING {
                // The rest waits in the backlog; `handshake_slot_freed` comes back for it.
                self.backlog_waiting = true;
                return;
            }
            let Some((l, name)) = self.listeners.get(idx) else {
                return;
            };
            let (s, from) = match l.accept() {
                Ok(v) => v,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    warn!("accept on {name} listener: {e}");
                    return;
                }
            };
            let from = format!("{from} on {name}");
            self.start_handshake(s, from);
        }
    }

    fn start_handshake(&mut self, mut s: TcpStream, from: String) {
        let hs = match handshake::Pending::new() {
            Ok(h) => h,
            Err(e) => {
                warn!("handshake nonce: {e}");
                return;
            }
        };
        if s.set_nonblocking(true).is_err() || s.write_all(&hs.challenge()).is_err() {
            return;
        }
        let fd = s.as_raw_fd();
        let slot = put(
            &mut self.pending,
            PendingConn {
                stream: s,
                hs,
                deadline: Instant::now() + HANDSHAKE_TIMEOUT,
                from,
            },
        );
        if self
            .poller
            .add(fd, poller::IN | poller::HUP, T_PENDING | slot as u64)
            .is_err()
        {
            self.pending[slot] = None;
            return;
        }
        self.advance_handshake(slot);
    }

    /// A handshake slot is free again: take connections that waited in the backlog.
    fn handshake_slot_freed(&mut self) {
        if self.backlog_waiting {
            self.backlog_waiting = false;
            for idx in 0..self.listeners.len() {
                self.accept(idx);
            }
        }
    }

    pub(crate) fn advance_handshake(&mut self, slot: usize) {
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
                Verdict::Peer(hello) => {
                    let mut pc = self.pending[slot].take().unwrap();
                    self.poller.remove(pc.stream.as_raw_fd());
                    self.incoming_rail(&mut pc, &hello);
                    self.handshake_slot_freed();
                    return;
                }
            }
        }
    }

    /// An authenticated connection: which peer and rail, and does it become the rail?
    fn incoming_rail(&mut self, pc: &mut PendingConn, hello: &hx_wire::Hello) {
        let me = self.core.rank();
        let whoami = self.whoami();
        let refuse = |why: &str, pc: &mut PendingConn| {
            warn!(
                "hxcomm {whoami}: closing connection from {} ({}): {why}",
                pc.from, hello.from
            );
        };
        if hello.to_instance != self.addr.instance {
            return refuse(
                "meant for another process (a predecessor at this port?)",
                pc,
            );
        }
        let peer = match self.by_instance.get(&hello.from.instance) {
            Some(&p) => p,
            None if self.open_to_unknown => match self.peer_for(&hello.from) {
                Ok(p) => p,
                Err(e) => return refuse(&e.to_string(), pc),
            },
            None => return refuse("not a process of this job", pc),
        };
        let rail = hello.rail as usize;
        let p = &self.peers[peer as usize];
        if peer == me || p.shm || rail >= p.rails.len() || self.core.peer_failed(peer).is_some() {
            return refuse(&format!("unexpected rail {rail} from peer {peer}"), pc);
        }
        let r = &p.rails[rail];
        let i_win = self.addr.instance > hello.from.instance;
        let keep_mine = i_win && (r.attempting || (r.link.is_some() && r.mine));
        if keep_mine {
            let _ = pc.stream.write_all(&VERDICT_REFUSE);
            return;
        }
        if pc.stream.write_all(&VERDICT_ACCEPT).is_err() {
            return;
        }
        if self.peers[peer as usize].rails[rail].link.is_some() {
            // The peer reconnects a rail we have not yet seen fail: it has.
            self.rail_down(peer, rail, "peer reconnected it", false);
        }
        let stream = match pc.stream.try_clone() {
            Ok(s) => s,
            Err(e) => return refuse(&e.to_string(), pc),
        };
        if let Err(e) = self.install_tcp(peer, rail, stream, false) {
            warn!("installing rail {rail} from peer {peer}: {e}");
            return;
        }
        // Bytes may already be waiting behind the handshake.
        self.read_rail(peer, rail);
    }

    fn reject(&mut self, slot: usize, why: &str) {
        if let Some(pc) = self.pending[slot].take() {
            self.poller.remove(pc.stream.as_raw_fd());
            warn!(
                "hxcomm {}: closed connection from {}: {why}",
                self.whoami(),
                pc.from
            );
        }
        self.handshake_slot_freed();
    }

    // ---- shared memory ----

    fn start_shm(&mut self, peer: Rank, now: Instant) {
        let Some(addr) = self.peers[peer as usize].addr.clone() else {
            return;
        };
        let name = shm::socket_name(&self.secret, addr.instance);
        let c = match ShmConnecting::start(&name) {
            Ok(mut c) => {
                c.set_prefault(Some(self.shm_prefault.clone()));
                c
            }
            Err(e) => {
                let refused =
                    matches!(e.kind(), ErrorKind::ConnectionRefused | ErrorKind::NotFound);
                debug!(peer, "shared-memory connect: {e}");
                self.core.rail_unreachable(peer, 0);
                if refused {
                    let r = &mut self.peers[peer as usize].rails[0];
                    r.gone = true;
                    r.down_since.get_or_insert(now);
                    self.check_peer_gone(peer, &e.to_string(), "shm");
                }
                return;
            }
        };
        let fd = c.fd();
        let slot = put(
            &mut self.shm_out,
            ShmOut {
                c,
                peer,
                deadline: now + self.settings.connect_timeout,
            },
        );
        if self
            .poller
            .add(fd, poller::IN | poller::HUP, T_SHM_CONNECT | slot as u64)
            .is_err()
        {
            self.shm_out[slot] = None;
            return;
        }
        self.peers[peer as usize].rails[0].attempting = true;
        self.advance_shm_connect(slot);
    }

    fn end_shm_connect(&mut self, slot: usize) -> Option<ShmOut> {
        let c = self.shm_out.get_mut(slot)?.take()?;
        self.poller.remove(c.c.fd());
        if let Some(r) = self.peers[c.peer as usize].rails.get_mut(0) {
            r.attempting = false;
        }
        Some(c)
    }

    pub(crate) fn advance_shm_connect(&mut self, slot: usize) {
        let (rank, index) = split(self.addr.instance);
        let Some(o) = self.shm_out.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        match o.c.advance(&self.secret, rank, index) {
            Ok(None) => {}
            Ok(Some(link)) => {
                let o = self.end_shm_connect(slot).expect("present");
                if self.peers[o.peer as usize].rails[0].link.is_some() {
                    warn!(
                        "shared memory to peer {}: a second link was accepted; closing it",
                        o.peer
                    );
                    return;
                }
                self.peers[o.peer as usize].pid = link.peer_pid().unwrap_or(0);
                if let Err(e) = self.install_link(o.peer, 0, Box::new(link), true) {
                    warn!("shared memory to peer {}: {e}", o.peer);
                }
            }
            Err(e) => {
                // Refused (the peer keeps the link it initiated) or failed: retried while wanted.
                if let Some(o) = self.end_shm_connect(slot) {
                    self.core.rail_unreachable(o.peer, 0);
                    debug!(peer = o.peer, "shared-memory handshake: {e}");
                }
            }
        }
    }

    /// Accepts local connections to the shared-memory listener, as long as handshake slots
    /// are free (the same bound as TCP's: local strangers hold at most [`MAX_PENDING`] slots,
    /// each for at most [`HANDSHAKE_TIMEOUT`]).
    pub(crate) fn shm_accept(&mut self) {
        loop {
            if self.shm_in.iter().filter(|c| c.is_some()).count() >= MAX_PENDING {
                // Edge-triggered: `shm_slot_freed` comes back for what waits in the backlog.
                self.shm_backlog_waiting = true;
                return;
            }
            let Some(l) = self.shm_listener.as_ref() else {
                return;
            };
            match l.accept_nonblocking() {
                Ok(a) => {
                    let fd = a.fd();
                    let slot = put(
                        &mut self.shm_in,
                        ShmIn {
                            a,
                            deadline: Instant::now() + HANDSHAKE_TIMEOUT,
                        },
                    );
                    if self
                        .poller
                        .add(fd, poller::IN | poller::HUP, T_SHM_ACCEPT | slot as u64)
                        .is_err()
                    {
                        self.shm_in[slot] = None;
                        continue;
                    }
                    self.advance_shm_accept(slot);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    warn!("hxcomm {}: shared-memory accept: {e}", self.whoami());
                    return;
                }
            }
        }
    }

    /// Resumes accepting shared-memory connections if they waited for a free slot.
    pub(crate) fn shm_slot_freed(&mut self) {
        if self.shm_backlog_waiting
            && self.shm_in.iter().filter(|c| c.is_some()).count() < MAX_PENDING
        {
            self.shm_backlog_waiting = false;
            self.shm_accept();
        }
    }

    pub(crate) fn advance_shm_accept(&mut self, slot: usize) {
        let whoami = self.whoami();
        let Some(i) = self.shm_in.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        let hello = match i.a.advance(&self.secret) {
            Ok(None) => return,
            Ok(Some(h)) => h,
            Err(e) => {
                let i = self.shm_in[slot].take().unwrap();
                self.poller.remove(i.a.fd());
                warn!("hxcomm {whoami}: refused a shared-memory connection: {e}");
                return;
            }
        };
        let i = self.shm_in[slot].take().unwrap();
        self.poller.remove(i.a.fd());
        let instance = hello.rank as u64 | (hello.index as u64) << 32;
        let peer = match self.by_instance.get(&instance) {
            Some(&p) => p,
            None if self.open_to_unknown && instance != 0 => {
                // Only its instance is known: a same-host peer without direct copies until its
                // address is inserted.
                let partial = Address {
                    flags: hx_wire::ADDR_FLAG_SHM,
                    ep: 0,
                    instance,
                    host: self.addr.host,
                    pid: 0,
                    port: 0,
                    rails: Vec::new(),
                };
                match self.peer_for(&partial) {
                    Ok(p) => p,
                    Err(e) => {
                        warn!("hxcomm: shared memory from unknown process {instance:x}: {e}");
                        return;
                    }
                }
            }
            None => {
                warn!("hxcomm {whoami}: refusing shared memory from process {instance:x}: not of this job");
                return;
            }
        };
        let r = match self.peers[peer as usize].rails.first() {
            Some(r) if self.peers[peer as usize].shm => r,
            _ => {
                warn!("hxcomm {whoami}: refusing unexpected shared-memory link from peer {peer}");
                return;
            }
        };
        let i_win = self.addr.instance > instance;
        if r.link.is_some() || (i_win && r.attempting) {
            return; // dropping it hangs up: the connector uses the link we make or have
        }
        match i.a.complete(&self.secret) {
            Ok(link) => {
                self.peers[peer as usize].pid = link.peer_pid().unwrap_or(0);
                if let Err(e) = self.install_link(peer, 0, Box::new(link), false) {
                    warn!("shared memory from peer {peer}: {e}");
                }
            }
            Err(e) => warn!("hxcomm {whoami}: shared memory from peer {peer}: {e}"),
        }
    }

    // ---- failures and housekeeping ----

    /// How messages name this process: its rank in a launched job, else its pid (every process
    /// is peer 0 to itself outside a launched job).
    pub(crate) fn whoami(&self) -> String {
        if self.open_to_unknown {
            format!("pid {}", std::process::id())
        } else {
            format!("rank {}", self.core.rank())
        }
    }

    /// How messages name a peer: its rank in a launched job, else its number and address.
    pub(crate) fn who(&self, peer: Rank) -> String {
        if !self.open_to_unknown {
            return format!("rank {peer}");
        }
        match self.peers.get(peer as usize).and_then(|p| p.addr.as_ref()) {
            Some(a) => format!("peer {peer} ({a})"),
            None => format!("peer {peer}"),
        }
    }

    /// Every rail to `peer` is down and the peer itself closed or refused them: it has exited.
    pub(crate) fn check_peer_gone(&mut self, peer: Rank, why: &str, label: &str) {
        let whoami = self.whoami();
        let who = self.who(peer);
        let s = &self.peers[peer as usize];
        let all_down = s.rails.iter().all(|r| r.link.is_none());
        let all_gone = s.rails.iter().all(|r| r.gone);
        if all_down && all_gone && self.core.peer_failed(peer).is_none() {
            error!("hxcomm {whoami}: {who} closed its connections ({why} on rail {label}); it has exited or crashed");
            self.core.fail_peer(
                peer,
                &format!("{who} closed its connections without finishing ({why} on rail {label})"),
            );
        }
    }

    /// Times out handshakes and attempts, reconnects rails that are down while their peer is
    /// wanted, and gives up on peers that stayed unreachable for too long.
    pub(crate) fn housekeeping(&mut self, now: Instant) {
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
        for slot in 0..self.connecting.len() {
            if self.connecting[slot]
                .as_ref()
                .is_some_and(|c| c.deadline < now)
            {
                self.connect_failed(slot, "handshake timed out", false);
            }
        }
        // An attempt over the network unanswered for three rail timeouts (a path whose packets
        // vanish: no refusal, no ICMP) is said and stops holding back the policies, but goes
        // on until its deadline. (Loopback never drops; a burst of connections may be slow.)
        let patience = self.settings.rail_timeout * 3;
        let slow = self.settings.connect_timeout.saturating_sub(patience);
        for slot in 0..self.connecting.len() {
            let Some(c) = self.connecting[slot].as_ref() else {
                continue;
            };
            let (peer, rail) = (c.peer, c.rail);
            let r = &self.peers[peer as usize].rails[rail];
            if c.deadline.saturating_duration_since(now) < slow
                && !r.warned
                && !r.route.local.is_loopback()
            {
                self.core.rail_unreachable(peer, rail);
                let why = format!("no answer within {} ms", patience.as_millis());
                self.warn_unconnected(peer, rail, &why);
            }
        }
        for slot in 0..self.shm_out.len() {
            if self.shm_out[slot]
                .as_ref()
                .is_some_and(|c| c.deadline < now)
            {
                self.end_shm_connect(slot);
            }
        }
        for slot in 0..self.shm_in.len() {
            if self.shm_in[slot].as_ref().is_some_and(|c| c.deadline < now) {
                let i = self.shm_in[slot].take().unwrap();
                self.poller.remove(i.a.fd());
            }
        }
        if self.finalizing {
            return;
        }
        let me = self.core.rank();
        for peer in 0..self.peers.len() as Rank {
            let p = peer as usize;
            if peer == me || !self.peers[p].wanted || self.core.peer_failed(peer).is_some() {
                continue;
            }
            let s = &self.peers[p];
            let all_down = !s.rails.is_empty() && s.rails.iter().all(|r| r.link.is_none());
            if all_down {
                let since = s.rails.iter().filter_map(|r| r.down_since).max();
                if since.is_some_and(|t| now.duration_since(t) > self.settings.rank_timeout) {
                    error!(
                        "hxcomm {whoami}: no rail to {} for {:?}; giving up on it",
                        self.who(peer),
                        self.settings.rank_timeout,
                        whoami = self.whoami(),
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
            let missing = s
                .rails
                .iter()
                .any(|r| r.link.is_none() && !r.attempting && now >= r.next_retry);
            if missing {
                // Rails not up yet count as down from the first try on.
                for r in &mut self.peers[p].rails {
                    if r.link.is_none() {
                        r.down_since.get_or_insert(now);
                    }
                }
                self.connect_wanted(peer, now);
            }
        }
    }
}
