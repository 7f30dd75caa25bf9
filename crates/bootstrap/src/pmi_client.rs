//! The socket side of PMI-1: [`PmiClient`] implements [`Bootstrap`] over the PMI server's socket.
//!
//! Why it is built this way: one blocking request and one reply at a time, as MPICH's own client
//! does (Slurm's server even reads each request with a single read), each reply awaited with
//! `poll` until a deadline (`HX_BOOTSTRAP_TIMEOUT`), so a silent server ends the wait with an error
//! instead of a hang, and one that closes or sends garbage ends it at once. Lines are decoded by the
//! pure functions of [`crate::pmi`].
//!
//! Leaving: a process that closes its PMI socket without `cmd=finalize` tells Hydra it died, and
//! Hydra then kills the whole job (measured with Hydra 4.0.2: 0.8 s); one that finalizes and then
//! fails leaves the others waiting. So the client finalizes when it is dropped only after the job's
//! start-up succeeded (see [`crate::Startup`]); before that, or after a PMI error, it keeps the socket
//! open until the process exits (the kernel closes it then), so the error message is printed first
//! and the launcher still stops the job.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{send, MsgFlags};

use crate::pmi::{self, Reply, Request};
use crate::{Bootstrap, BootstrapError};

/// How long a connection to `PMI_PORT` may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long finalize may wait for its acknowledgement when the client is dropped.
const FINALIZE_TIMEOUT: Duration = Duration::from_secs(5);

/// Set once `PMI_FD` has been taken over: the descriptor belongs to one client per process.
static PMI_FD_TAKEN: AtomicBool = AtomicBool::new(false);

/// Where the PMI server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PmiEndpoint {
    /// An inherited, connected socket (`PMI_FD`).
    Fd(RawFd),
    /// A server to connect to (`PMI_PORT=host:port`), and this process's `PMI_ID` if given.
    Port {
        host: String,
        port: u16,
        id: Option<u32>,
    },
}

/// The PMI launcher's settings as read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmiConfig {
    pub endpoint: PmiEndpoint,
    /// `PMI_RANK` and `PMI_SIZE` (with `PMI_PORT` and `PMI_ID` the server says them instead).
    pub rank_size: Option<(u32, u32)>,
    /// How long any reply may take (`HX_BOOTSTRAP_TIMEOUT`, default 60 s).
    pub timeout: Duration,
}

impl PmiConfig {
    /// How error messages name the server: `PMI_FD=6`, `PMI_PORT=host:port`.
    pub fn server_name(&self) -> String {
        match &self.endpoint {
            PmiEndpoint::Fd(fd) => format!("PMI_FD={fd}"),
            PmiEndpoint::Port { host, port, .. } => format!("PMI_PORT={host}:{port}"),
        }
    }
}

fn env_err(var: &'static str, msg: impl Into<String>) -> BootstrapError {
    BootstrapError::Env {
        var,
        msg: msg.into(),
    }
}

fn parse_u32(
    get: &dyn Fn(&str) -> Option<String>,
    var: &'static str,
) -> Option<Result<u32, BootstrapError>> {
    get(var).map(|v| {
        v.trim()
            .parse::<u32>()
            .map_err(|_| env_err(var, format!("{v:?} is not a non-negative integer")))
    })
}

/// Reads a PMI launcher's variables through `get`: `PMI_FD` (with `PMI_RANK`, `PMI_SIZE`), or
/// `PMI_PORT` (with `PMI_ID`, or `PMI_RANK` and `PMI_SIZE`). `Ok(None)`: neither `PMI_FD` nor
/// `PMI_PORT` is set. A missing companion or a malformed value is an error naming the variable.
pub fn parse_pmi_env(
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<PmiConfig>, BootstrapError> {
    let fd = get("PMI_FD").filter(|v| !v.trim().is_empty());
    let port = get("PMI_PORT").filter(|v| !v.trim().is_empty());
    if fd.is_none() && port.is_none() {
        return Ok(None);
    }
    let rank = parse_u32(get, "PMI_RANK").transpose()?;
    let size = parse_u32(get, "PMI_SIZE").transpose()?;
    let rank_size = match (rank, size) {
        (Some(r), Some(s)) => {
            if s == 0 {
                return Err(env_err("PMI_SIZE", "must be at least 1"));
            }
            if r >= s {
                return Err(env_err(
                    "PMI_RANK",
                    format!("rank {r} is not below PMI_SIZE={s}"),
                ));
            }
            Some((r, s))
        }
        _ => None,
    };
    let endpoint = if let Some(v) = fd {
        let n: RawFd = v
            .trim()
            .parse()
            .ok()
            .filter(|&n: &RawFd| n >= 0)
            .ok_or_else(|| env_err("PMI_FD", format!("{v:?} is not a file descriptor number")))?;
        if rank_size.is_none() {
            let var = if rank.is_none() {
                "PMI_RANK"
            } else {
                "PMI_SIZE"
            };
            return Err(env_err(
                var,
                "not set, but PMI_FD is: a PMI launcher sets PMI_FD, PMI_RANK and PMI_SIZE together",
            ));
        }
        PmiEndpoint::Fd(n)
    } else {
        let v = port.unwrap_or_default();
        let (host, p) = v
            .trim()
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok().filter(|&p| p > 0)?)))
            .filter(|(h, _)| !h.is_empty())
            .ok_or_else(|| env_err("PMI_PORT", format!("{v:?} is not host:port")))?;
        let id = parse_u32(get, "PMI_ID").transpose()?;
        if id.is_none() && rank_size.is_none() {
            return Err(env_err(
                "PMI_ID",
                "not set, and neither are PMI_RANK and PMI_SIZE: with PMI_PORT the launcher sets PMI_ID (or PMI_RANK and PMI_SIZE)",
            ));
        }
        PmiEndpoint::Port {
            host: host.trim_matches(|c| c == '[' || c == ']').to_owned(),
            port: p,
            id,
        }
    };
    Ok(Some(PmiConfig {
        endpoint,
        rank_size,
        timeout: crate::timeout_from(get(crate::ENV_TIMEOUT))?,
    }))
}

/// What went wrong on the connection, before it is named with the rank and server.
enum Fault {
    Io(io::Error),
    Closed { partial: bool },
    Timeout,
    Decode(pmi::DecodeError),
}

/// The PMI socket with its read buffer.
struct Conn {
    fd: Option<OwnedFd>,
    buf: Vec<u8>,
}

fn wait_fd(fd: BorrowedFd<'_>, events: PollFlags, deadline: Instant) -> Result<(), Fault> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Fault::Timeout);
        }
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        let ms = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
        match poll(&mut [PollFd::new(fd, events)], ms) {
            Ok(n) if n > 0 => return Ok(()),
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(Fault::Io(e.into())),
        }
    }
}

impl Conn {
    fn new(fd: OwnedFd) -> io::Result<Conn> {
        // Flags are read before being changed.
        let fl = OFlag::from_bits_retain(fcntl(&fd, FcntlArg::F_GETFL)?);
        fcntl(&fd, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK))?;
        let fdfl = FdFlag::from_bits_retain(fcntl(&fd, FcntlArg::F_GETFD)?);
        fcntl(&fd, FcntlArg::F_SETFD(fdfl | FdFlag::FD_CLOEXEC))?;
        Ok(Conn {
            fd: Some(fd),
            buf: Vec::with_capacity(pmi::MAX_REPLY_LINE),
        })
    }

    fn sock(fd: &Option<OwnedFd>) -> Result<BorrowedFd<'_>, Fault> {
        fd.as_ref()
            .map(|f| f.as_fd())
            .ok_or(Fault::Closed { partial: false })
    }

    /// Writes the whole line (in one send when the socket has room, as Slurm's server needs).
    fn send(&mut self, line: &[u8], deadline: Instant) -> Result<(), Fault> {
        let fd = Self::sock(&self.fd)?;
        let mut done = 0;
        while done < line.len() {
            let rest = &line[done..];
            // MSG_NOSIGNAL: a closed peer gives EPIPE, not a SIGPIPE that would kill a C program
            // linked with us.
            let e = match send(fd.as_raw_fd(), rest, MsgFlags::MSG_NOSIGNAL) {
                Ok(n) => {
                    done += n;
                    continue;
                }
                Err(e) => io::Error::from(e),
            };
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock => wait_fd(fd, PollFlags::POLLOUT, deadline)?,
                io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted => return Err(Fault::Closed { partial: false }),
                _ => return Err(Fault::Io(e)),
            }
        }
        Ok(())
    }

    /// The next line (without its newline), waiting until `deadline`.
    fn recv_line(&mut self, deadline: Instant) -> Result<Vec<u8>, Fault> {
        loop {
            if let Some((line, used)) = pmi::split_line(&self.buf).map_err(Fault::Decode)? {
                let line = line.to_vec();
                self.buf.drain(..used);
                return Ok(line);
            }
            let fd = Self::sock(&self.fd)?;
            let room = pmi::MAX_REPLY_LINE - self.buf.len();
            let mut tmp = [0u8; pmi::MAX_REPLY_LINE];
            let e = match nix::unistd::read(fd, &mut tmp[..room]) {
                Ok(0) => {
                    return Err(Fault::Closed {
                        partial: !self.buf.is_empty(),
                    })
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&tmp[..n]);
                    continue;
                }
                Err(e) => io::Error::from(e),
            };
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock => wait_fd(fd, PollFlags::POLLIN, deadline)?,
                io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => {
                    return Err(Fault::Closed {
                        partial: !self.buf.is_empty(),
                    })
                }
                _ => return Err(Fault::Io(e)),
            }
        }
    }
}

/// A process's connection to its PMI-1 server (MPICH's Hydra, Slurm's PMI-2 plugin); implements
/// [`Bootstrap`].
///
/// PMI-1 `get` does not wait: a key is there if some process put it before the last barrier
/// (Hydra and Slurm even hold puts back until the barrier). So [`Bootstrap::get`] returns the
/// value or, at once, an error naming the key; the engine always fences between its puts and its
/// gets. Keys are up to `keylen_max - 1` bytes of PMI token characters (Hydra and Slurm: 63);
/// values any text, sent as [`pmi::encode_value`] makes them, which must fit in
/// [`PmiClient::value_max`] bytes (`vallen_max - 1`, and the put line within 1024 bytes: about
/// 960 under Hydra), else an error naming the limit; nothing is split. Every reply must come
/// within `HX_BOOTSTRAP_TIMEOUT` (default 60 s).
pub struct PmiClient {
    conn: Conn,
    server: String,
    rank: u32,
    size: u32,
    kvsname: String,
    kvsname_max: usize,
    keylen_max: usize,
    vallen_max: usize,
    timeout: Duration,
    /// A request failed half-way: the connection may be out of step.
    broken: bool,
    /// Send finalize when dropped (else leave the socket to be closed when the process exits).
    finalize_on_drop: Arc<AtomicBool>,
    /// The address of the TCP peer, with `PMI_PORT`.
    peer: Option<SocketAddr>,
    management: Option<Ipv4Addr>,
}

impl std::fmt::Debug for PmiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmiClient")
            .field("server", &self.server)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("kvsname", &self.kvsname)
            .field("keylen_max", &self.keylen_max)
            .field("vallen_max", &self.vallen_max)
            .field("broken", &self.broken)
            .finish()
    }
}

impl PmiClient {
    /// Connects as `cfg` says (taking over `PMI_FD`, or connecting to `PMI_PORT`) and does the
    /// PMI-1 handshake: initack (with `PMI_ID`), init, get_maxes, get_my_kvsname.
    pub fn connect(cfg: &PmiConfig) -> Result<PmiClient, BootstrapError> {
        let server = cfg.server_name();
        let rank_hint = cfg.rank_size.map(|(r, _)| r);
        let fail = |msg: String| BootstrapError::Pmi {
            rank: rank_hint,
            server: server.clone(),
            msg,
        };
        match &cfg.endpoint {
            PmiEndpoint::Fd(fd) => {
                let fd = take_inherited_fd(*fd).map_err(fail)?;
                let (rank, size) = cfg
                    .rank_size
                    .ok_or_else(|| fail("PMI_FD without PMI_RANK and PMI_SIZE".to_string()))?;
                let mut c = PmiClient::start(fd, server.clone(), rank, size, cfg.timeout)?;
                c.handshake()?;
                Ok(c)
            }
            PmiEndpoint::Port { host, port, id } => {
                let addrs: Vec<SocketAddr> = (host.as_str(), *port)
                    .to_socket_addrs()
                    .map_err(|e| fail(format!("cannot resolve {host}: {e}")))?
                    .collect();
                let mut last = None;
                let mut stream = None;
                for a in &addrs {
                    match TcpStream::connect_timeout(a, CONNECT_TIMEOUT.min(cfg.timeout)) {
                        Ok(s) => {
                            stream = Some(s);
                            break;
                        }
                        Err(e) => last = Some(format!("{a}: {e}")),
                    }
                }
                let stream = stream.ok_or_else(|| {
                    fail(format!(
                        "cannot connect: {}",
                        last.unwrap_or_else(|| format!("{host} has no address"))
                    ))
                })?;
                stream.set_nodelay(true).ok();
                let peer = stream.peer_addr().ok();
                // With PMI_ID the server tells rank and size; until then the id names us (Hydra
                // uses the rank as the id).
                let (rank, size) = cfg.rank_size.unwrap_or((id.unwrap_or(0), 1));
                let mut c =
                    PmiClient::start(stream.into(), server.clone(), rank, size, cfg.timeout)?;
                c.peer = peer;
                if let Some(id) = id {
                    c.initack(*id)?;
                } else if cfg.rank_size.is_none() {
                    return Err(fail("PMI_PORT without PMI_ID or PMI_RANK/PMI_SIZE".into()));
                }
                c.handshake()?;
                Ok(c)
            }
        }
    }

    /// A client over an already connected socket `fd` (tests, or a caller that got the socket
    /// some other way); does the handshake (init, get_maxes, get_my_kvsname).
    pub fn over_socket(
        fd: OwnedFd,
        rank: u32,
        size: u32,
        timeout: Duration,
    ) -> Result<PmiClient, BootstrapError> {
        if size == 0 || rank >= size {
            return Err(BootstrapError::Invalid(format!(
                "PMI: rank {rank} is not below the job size {size}"
            )));
        }
        let mut c = PmiClient::start(fd, "socket".into(), rank, size, timeout)?;
        c.handshake()?;
        Ok(c)
    }

    fn start(
        fd: OwnedFd,
        server: String,
        rank: u32,
        size: u32,
        timeout: Duration,
    ) -> Result<PmiClient, BootstrapError> {
        let conn = Conn::new(fd).map_err(|e| BootstrapError::Pmi {
            rank: Some(rank),
            server: server.clone(),
            msg: format!("cannot configure the socket: {e}"),
        })?;
        Ok(PmiClient {
            conn,
            server,
            rank,
            size,
            kvsname: String::new(),
            kvsname_max: 0,
            keylen_max: 0,
            vallen_max: 0,
            timeout,
            broken: false,
            finalize_on_drop: Arc::new(AtomicBool::new(true)),
            peer: None,
            management: None,
        })
    }

    fn err(&self, msg: impl Into<String>) -> BootstrapError {
        BootstrapError::Pmi {
            rank: Some(self.rank),
            server: self.server.clone(),
            msg: msg.into(),
        }
    }

    fn fault(&mut self, f: Fault, during: &str) -> BootstrapError {
        self.broken = true;
        let t = self.timeout.as_secs_f64();
        match f {
            Fault::Io(e) => self.err(format!("{during}: {e}")),
            Fault::Closed { partial: false } => {
                self.err(format!("{during}: the server closed the connection"))
            }
            Fault::Closed { partial: true } => self.err(format!(
                "{during}: the server closed the connection in the middle of a line"
            )),
            Fault::Timeout if during.contains("barrier") => self.err(format!(
                "{during}: not all ranks reached the barrier within {t:.1} s (raise {} if ranks start slowly)",
                crate::ENV_TIMEOUT
            )),
            Fault::Timeout => self.err(format!(
                "{during}: no reply within {t:.1} s ({})",
                crate::ENV_TIMEOUT
            )),
            Fault::Decode(e) => self.err(format!("{during}: malformed reply: {e}")),
        }
    }

    /// Sends `req` and reads the reply it expects (one line), or fails naming what happened.
    fn call(&mut self, req: &Request<'_>, deadline: Instant) -> Result<Reply, BootstrapError> {
        let expect = req.reply_cmd().unwrap_or("");
        let during = format!("cmd={}", cmd_name(req));
        if self.broken {
            return Err(self.err(format!(
                "{during}: the connection is unusable after an earlier failure"
            )));
        }
        let line = pmi::encode_request(req).map_err(|e| self.err(format!("{during}: {e}")))?;
        if let Err(f) = self.conn.send(line.as_bytes(), deadline) {
            return Err(self.fault(f, &during));
        }
        self.read_reply(expect, &during, deadline)
    }

    fn read_reply(
        &mut self,
        expect: &str,
        during: &str,
        deadline: Instant,
    ) -> Result<Reply, BootstrapError> {
        let line = match self.conn.recv_line(deadline) {
            Ok(l) => l,
            Err(f) => return Err(self.fault(f, during)),
        };
        let shown = String::from_utf8_lossy(&line);
        let reply = match pmi::decode_reply(&line) {
            Ok(r) => r,
            Err(e) => {
                self.broken = true;
                return Err(self.err(format!(
                    "{during}: malformed reply {:?}: {e}",
                    pmi::shorten(&shown)
                )));
            }
        };
        if reply.cmd() != expect {
            self.broken = true;
            return Err(self.err(format!(
                "{during}: expected cmd={expect}, got {:?}",
                pmi::shorten(&shown)
            )));
        }
        Ok(reply)
    }

    /// A reply of the expected command but not of its kind (cannot happen: the decoder maps
    /// each command to one kind); an error rather than a panic all the same.
    fn odd(&mut self, during: &str, r: &Reply) -> BootstrapError {
        self.broken = true;
        self.err(format!("{during}: unexpected reply {r:?}"))
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.timeout
    }

    /// `PMI_PORT` with `PMI_ID`: the server tells size and rank.
    fn initack(&mut self, id: u32) -> Result<(), BootstrapError> {
        let d = self.deadline();
        self.call(&Request::InitAck { pmiid: id }, d)?;
        let (mut size, mut rank) = (None, None);
        for _ in 0..3 {
            let (key, value) = match self.read_reply("set", "cmd=initack", d)? {
                Reply::Set { key, value } => (key, value),
                other => return Err(self.odd("cmd=initack", &other)),
            };
            let num = value.parse::<u32>().ok();
            match key.as_str() {
                "size" => size = num,
                "rank" => rank = num,
                _ => {}
            }
        }
        match (rank, size) {
            (Some(r), Some(s)) if s > 0 && r < s => {
                self.rank = r;
                self.size = s;
                Ok(())
            }
            _ => {
                self.broken = true;
                Err(self.err(format!(
                    "cmd=initack (PMI_ID={id}): the server gave no usable rank and size (rank {rank:?}, size {size:?})"
                )))
            }
        }
    }

    fn handshake(&mut self) -> Result<(), BootstrapError> {
        let d = self.deadline();
        match self.call(&Request::Init, d)? {
            Reply::ResponseToInit { rc: 0 } => {}
            Reply::ResponseToInit { rc } => {
                self.broken = true;
                return Err(self.err(format!(
                    "cmd=init: the server refused PMI version 1.1 (rc={rc})"
                )));
            }
            other => return Err(self.odd("cmd=init", &other)),
        }
        let (kvsname_max, keylen_max, vallen_max) = match self.call(&Request::GetMaxes, d)? {
            Reply::Maxes {
                kvsname_max,
                keylen_max,
                vallen_max,
            } => (kvsname_max, keylen_max, vallen_max),
            other => return Err(self.odd("cmd=get_maxes", &other)),
        };
        self.kvsname_max = kvsname_max;
        self.keylen_max = keylen_max;
        self.vallen_max = vallen_max;
        let kvsname = match self.call(&Request::GetMyKvsname, d)? {
            Reply::MyKvsname { kvsname } => kvsname,
            other => return Err(self.odd("cmd=get_my_kvsname", &other)),
        };
        if kvsname.len() >= kvsname_max {
            self.broken = true;
            return Err(self.err(format!(
                "cmd=get_my_kvsname: kvs name of {} bytes, but the server's kvsname_max is {kvsname_max}",
                kvsname.len()
            )));
        }
        self.kvsname = kvsname;
        self.management = management_ip(self.peer, &|k| std::env::var(k).ok());
        tracing::debug!(
            rank = self.rank,
            size = self.size,
            server = %self.server,
            kvs = %self.kvsname,
            keylen_max,
            vallen_max,
            management = ?self.management,
            "PMI-1 client ready"
        );
        Ok(())
    }

    /// The job's key-value space.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// The server's (kvsname_max, keylen_max, vallen_max).
    pub fn maxes(&self) -> (usize, usize, usize) {
        (self.kvsname_max, self.keylen_max, self.vallen_max)
    }

    /// Changes how long a reply may take.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// A switch for finalize-on-drop: `true` (the default), dropping the client sends
    /// `cmd=finalize`; `false`, dropping it leaves the socket open until the process exits, so
    /// that the launcher sees this process end without finalize and stops the job.
    pub fn finalize_switch(&self) -> Arc<AtomicBool> {
        self.finalize_on_drop.clone()
    }

    fn check_key(&self, key: &str) -> Result<(), BootstrapError> {
        if !pmi::is_token(key) {
            return Err(self.err(format!(
                "key {:?} cannot be carried by PMI-1 (empty, or holds a space, '=', ';' or a non-printable character)",
                pmi::shorten(key)
            )));
        }
        if key.len() >= self.keylen_max {
            return Err(BootstrapError::TooLarge {
                what: "PMI key (limit: the server's keylen_max less its NUL)",
                key: pmi::shorten(key),
                len: key.len(),
                max: self.keylen_max - 1,
            });
        }
        Ok(())
    }

    /// The longest (encoded) value a put of `key` can carry: below the server's `vallen_max`
    /// (a C string size), and the whole line within [`pmi::MAX_REQUEST_LINE`] (with Hydra's
    /// limits and kvs name and a short key, about 960 bytes).
    pub fn value_max(&self, key: &str) -> usize {
        let overhead = "cmd=put kvsname= key= value=\n".len() + self.kvsname.len() + key.len();
        (self.vallen_max - 1).min(pmi::MAX_REQUEST_LINE.saturating_sub(overhead))
    }

    /// Asks the launcher to end the whole job with `exitcode` (Hydra: mpiexec exits with it).
    pub fn abort(&mut self, exitcode: i32) -> Result<(), BootstrapError> {
        let line = pmi::encode_request(&Request::Abort { exitcode })
            .map_err(|e| self.err(format!("cmd=abort: {e}")))?;
        let d = Instant::now() + FINALIZE_TIMEOUT;
        self.finalize_on_drop.store(false, Ordering::SeqCst);
        drain_output_at_exit();
        self.conn
            .send(line.as_bytes(), d)
            .map_err(|f| self.fault(f, "cmd=abort"))
    }

    /// Whether the PMI server is reached over TCP (`PMI_PORT`): then anyone who can connect to
    /// that port while the job starts can read what the job puts.
    pub fn over_tcp(&self) -> bool {
        self.peer.is_some()
    }

    /// The management network's address as this client found it (see [`management_ip`]).
    pub fn management(&self) -> Option<Ipv4Addr> {
        self.management
    }
}

fn cmd_name(r: &Request<'_>) -> &'static str {
    match r {
        Request::Init => "init",
        Request::InitAck { .. } => "initack",
        Request::GetMaxes => "get_maxes",
        Request::GetMyKvsname => "get_my_kvsname",
        Request::Put { .. } => "put",
        Request::Get { .. } => "get",
        Request::BarrierIn => "barrier_in",
        Request::Finalize => "finalize",
        Request::Abort { .. } => "abort",
    }
}

impl Bootstrap for PmiClient {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn put(&mut self, key: &str, value: &str) -> Result<(), BootstrapError> {
        self.check_key(key)?;
        let v = pmi::encode_value(value);
        let max = self.value_max(key);
        if v.len() > max {
            return Err(BootstrapError::TooLarge {
                what: "PMI value (limit: the server's vallen_max less its NUL, and the whole put line within 1024 bytes; text outside [A-Za-z0-9._:,/+-@] is sent as hex, twice as long)",
                key: key.to_owned(),
                len: v.len(),
                max,
            });
        }
        let kvsname = self.kvsname.clone();
        let d = self.deadline();
        match self.call(
            &Request::Put {
                kvsname: &kvsname,
                key,
                value: &v,
            },
            d,
        )? {
            Reply::PutResult { rc: 0, .. } => Ok(()),
            Reply::PutResult { rc, msg } => Err(self.err(format!(
                "cmd=put of key {key:?}: the server refused it (rc={rc}{})",
                msg.map(|m| format!(", {m}")).unwrap_or_default()
            ))),
            other => Err(self.odd("cmd=put", &other)),
        }
    }

    /// Does not wait (PMI-1 cannot): a key nobody put before the last fence is an error at once.
    fn get(&mut self, key: &str) -> Result<String, BootstrapError> {
        self.check_key(key)?;
        let kvsname = self.kvsname.clone();
        let d = self.deadline();
        match self.call(
            &Request::Get {
                kvsname: &kvsname,
                key,
            },
            d,
        )? {
            Reply::GetResult {
                rc: 0,
                value: Some(v),
                ..
            } => pmi::decode_value(&v).map_err(|e| {
                self.err(format!("cmd=get of key {key:?}: {e}"))
            }),
            Reply::GetResult { rc, msg, .. } => Err(self.err(format!(
                "no rank put key {key:?} before the last fence (PMI-1 get does not wait for a put; rc={rc}{})",
                msg.map(|m| format!(", {}", pmi::shorten(&m))).unwrap_or_default()
            ))),
            other => Err(self.odd("cmd=get", &other)),
        }
    }

    fn fence(&mut self) -> Result<(), BootstrapError> {
        let d = self.deadline();
        match self.call(&Request::BarrierIn, d)? {
            Reply::BarrierOut { rc: 0 } => Ok(()),
            Reply::BarrierOut { rc } => {
                self.broken = true;
                Err(self.err(format!("cmd=barrier_in: the barrier failed (rc={rc})")))
            }
            other => Err(self.odd("cmd=barrier_in", &other)),
        }
    }

    fn management_ip(&self) -> Option<Ipv4Addr> {
        self.management
    }
}

impl Drop for PmiClient {
    fn drop(&mut self) {
        let finalize = self.finalize_on_drop.load(Ordering::SeqCst);
        if self.broken || !finalize || std::thread::panicking() {
            // Closed by the kernel when the process exits: the launcher then sees this process
            // end without finalize and stops the job, after our error message is out.
            if let Some(fd) = self.conn.fd.take() {
                let _ = fd.into_raw_fd();
            }
            drain_output_at_exit();
            return;
        }
        let d = Instant::now() + FINALIZE_TIMEOUT.min(self.timeout);
        if let Err(e) = self.call(&Request::Finalize, d) {
            tracing::warn!("leaving the job: {e}");
        }
    }
}

/// How long a failing rank waits at exit for the launcher to read its output.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Arranges that, when this process exits, it first waits (up to [`DRAIN_TIMEOUT`]) until the
/// launcher has read what it wrote to stdout and stderr. A rank that leaves the job without
/// finalize makes Hydra's proxy kill the other ranks, and the proxy may die on that (a write to
/// a killed rank's PMI socket) before it forwarded this rank's last words: the error message
/// that says why the job stopped. Only the failure path pays this wait.
fn drain_output_at_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn drain() {
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        for fd in [1, 2] {
            while unread_bytes(fd).is_some_and(|n| n > 0) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    ONCE.call_once(|| {
        // SAFETY: registers a plain function; it only reads fd state and sleeps.
        unsafe { libc::atexit(drain) };
    });
}

/// Bytes written to `fd` that its reader has not taken yet: for a pipe, what the pipe holds;
/// for a socket, what is still queued on this side. `None` for anything else (a file, a
/// terminal) or on error: nothing to wait for.
fn unread_bytes(fd: RawFd) -> Option<usize> {
    // SAFETY: fstat and ioctl write only into the locals given; a closed fd is an error.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return None;
        }
        let request = match st.st_mode & libc::S_IFMT {
            libc::S_IFIFO => libc::FIONREAD,
            libc::S_IFSOCK => libc::TIOCOUTQ,
            _ => return None,
        };
        let mut n: libc::c_int = 0;
        if libc::ioctl(fd, request, &mut n) != 0 {
            return None;
        }
        usize::try_from(n).ok()
    }
}

/// Takes over the inherited PMI socket `fd`: it must be open and a socket, and not taken before
/// by this process.
fn take_inherited_fd(fd: RawFd) -> Result<OwnedFd, String> {
    // SAFETY: fcntl and fstat only inspect the descriptor number.
    let open = unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
    if !open {
        return Err(format!(
            "PMI_FD={fd} is not an open file descriptor ({})",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: a zeroed stat is a valid out-parameter for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st`, which lives for the call.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(format!("PMI_FD={fd} is not a socket"));
    }
    if PMI_FD_TAKEN.swap(true, Ordering::SeqCst) {
        return Err(format!(
            "PMI_FD={fd} was already taken over by this process (a PMI-1 job is joined once per process)"
        ));
    }
    // SAFETY: the descriptor is open, a socket, and from now on owned by this client only (the
    // flag above keeps a second client of this process from wrapping it too).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The value of `--control-port host:port` in a Hydra proxy's arguments.
pub fn hydra_control_port(args: &[String]) -> Option<(String, u16)> {
    let i = args.iter().position(|a| a == "--control-port")?;
    let (h, p) = args.get(i + 1)?.rsplit_once(':')?;
    Some((h.to_owned(), p.parse().ok()?))
}

/// The arguments of the nearest ancestor process that is Hydra's `hydra_pmi_proxy`.
fn hydra_proxy_args() -> Option<Vec<String>> {
    let mut pid = std::process::id();
    for _ in 0..16 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let after = &stat[stat.rfind(')')? + 1..];
        pid = after.split_whitespace().nth(1)?.parse().ok()?;
        if pid <= 1 {
            return None;
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<String> = cmd
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args
            .first()
            .is_some_and(|a| a.rsplit('/').next() == Some("hydra_pmi_proxy"))
        {
            return Some(args);
        }
    }
    None
}

fn usable(ip: Ipv4Addr) -> bool {
    !ip.is_loopback() && !ip.is_unspecified()
}

fn resolve_v4(host: &str, port: u16) -> Option<Ipv4Addr> {
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Some(ip);
    }
    (host, port).to_socket_addrs().ok()?.find_map(|a| match a {
        SocketAddr::V4(v4) => Some(*v4.ip()),
        SocketAddr::V6(_) => None,
    })
}

/// The management network under a PMI launcher: the address the launcher's own processes talk
/// over, whose interface the engine leaves out of the rails. In order: the host of Hydra's
/// `--control-port` (where `mpiexec` listens for its proxies; `-localhost` sets it), read from the
/// `hydra_pmi_proxy` process this one descends from; the PMI server's address with `PMI_PORT`;
/// Slurm's `SLURM_LAUNCH_NODE_IPADDR` (the `srun` host). Loopback addresses do not count (one
/// host: no rails to tell apart). `None`: unknown, every interface is a rail unless `HX_RAILS`
/// says otherwise.
pub fn management_ip(
    pmi_peer: Option<SocketAddr>,
    get: &dyn Fn(&str) -> Option<String>,
) -> Option<Ipv4Addr> {
    let from_hydra = hydra_proxy_args()
        .and_then(|a| hydra_control_port(&a))
        .and_then(|(h, p)| resolve_v4(&h, p));
    let from_peer = match pmi_peer {
        Some(SocketAddr::V4(a)) => Some(*a.ip()),
        _ => None,
    };
    let from_slurm = get("SLURM_LAUNCH_NODE_IPADDR").and_then(|v| v.trim().parse().ok());
    [from_hydra, from_peer, from_slurm]
        .into_iter()
        .flatten()
        .find(|&ip| usable(ip))
}

/// A fake PMI server for tests (here and in the crate's other modules).
#[cfg(test)]
pub(crate) mod fake {
    use std::collections::HashMap;
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::sync::{Arc, Barrier, Mutex};

    /// A scripted PMI server on the other end of a socket pair: for each line it reads, `reply`
    /// says what to write back (`None`: close the connection; a reply ending in `\u{4}`: write
    /// the rest, then close).
    pub(crate) fn fake_server(
        reply: impl Fn(&str) -> Option<String> + Send + 'static,
    ) -> (OwnedFd, std::thread::JoinHandle<Vec<String>>) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let h = std::thread::spawn(move || {
            let w = theirs.try_clone().unwrap();
            serve(BufReader::new(theirs), w, reply)
        });
        (ours.into(), h)
    }

    /// Reads PMI lines from `r` until EOF and answers each with `reply` on `w` (`None`: stop;
    /// a reply ending in `\u{4}`: write the rest, then stop). Returns the lines seen.
    pub(crate) fn serve(
        mut r: impl BufRead,
        mut w: impl Write,
        reply: impl Fn(&str) -> Option<String>,
    ) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            let line = line.trim_end().to_string();
            seen.push(line.clone());
            match reply(&line) {
                Some(out) => {
                    let (out, close) = match out.strip_suffix('\u{4}') {
                        Some(o) => (o.to_string(), true),
                        None => (out, false),
                    };
                    if w.write_all(out.as_bytes()).is_err() || close {
                        break;
                    }
                }
                None => break,
            }
        }
        seen
    }

    /// Hydra's answers, with a key-value store of its own.
    pub(crate) fn hydra_like() -> impl Fn(&str) -> Option<String> + Send + 'static {
        hydra_like_on(Arc::default(), None)
    }

    /// Hydra's answers over a store shared with other fake servers (ranks of one job); with
    /// `barrier`, barrier_in waits for the other ranks.
    pub(crate) fn hydra_like_on(
        kvs: Arc<Mutex<HashMap<String, String>>>,
        barrier: Option<Arc<Barrier>>,
    ) -> impl Fn(&str) -> Option<String> + Send + 'static {
        move |line: &str| {
            let f: HashMap<&str, &str> =
                line.split(' ').filter_map(|t| t.split_once('=')).collect();
            Some(match f.get("cmd").copied().unwrap_or("") {
                "init" => "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n".into(),
                "get_maxes" => "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n".into(),
                "get_my_kvsname" => "cmd=my_kvsname kvsname=kvs_1_0\n".into(),
                "put" => {
                    kvs.lock()
                        .unwrap()
                        .insert(f["key"].to_string(), f["value"].to_string());
                    "cmd=put_result rc=0 msg=success\n".into()
                }
                "get" => match kvs.lock().unwrap().get(f["key"]) {
                    Some(v) => format!("cmd=get_result rc=0 msg=success value={v}\n"),
                    None => format!(
                        "cmd=get_result rc=-1 msg=key_{}_not_found value=unknown\n",
                        f["key"]
                    ),
                },
                "barrier_in" => {
                    if let Some(b) = &barrier {
                        b.wait();
                    }
                    "cmd=barrier_out\n".into()
                }
                "finalize" => "cmd=finalize_ack\n".into(),
                _ => return None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{fake_server, hydra_like, serve};
    use super::*;
    use crate::tests::env_of;
    use std::io::BufReader;

    #[test]
    fn pmi_env() {
        assert_eq!(parse_pmi_env(&env_of(&[])).unwrap(), None);
        // PMI_RANK alone (no socket) is not a PMI launch.
        assert_eq!(
            parse_pmi_env(&env_of(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")])).unwrap(),
            None
        );
        let c = parse_pmi_env(&env_of(&[
            ("PMI_FD", "6"),
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(c.endpoint, PmiEndpoint::Fd(6));
        assert_eq!(c.rank_size, Some((1, 2)));
        assert_eq!(c.server_name(), "PMI_FD=6");
        let c = parse_pmi_env(&env_of(&[("PMI_PORT", "vm:38935"), ("PMI_ID", "3")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            c.endpoint,
            PmiEndpoint::Port {
                host: "vm".into(),
                port: 38935,
                id: Some(3)
            }
        );
        assert_eq!(c.rank_size, None);
        for (env, var) in [
            (&[("PMI_FD", "6"), ("PMI_SIZE", "2")][..], "PMI_RANK"),
            (&[("PMI_FD", "6"), ("PMI_RANK", "0")][..], "PMI_SIZE"),
            (
                &[("PMI_FD", "x"), ("PMI_RANK", "0"), ("PMI_SIZE", "1")][..],
                "PMI_FD",
            ),
            (
                &[("PMI_FD", "6"), ("PMI_RANK", "2"), ("PMI_SIZE", "2")][..],
                "PMI_RANK",
            ),
            (
                &[("PMI_FD", "6"), ("PMI_RANK", "0"), ("PMI_SIZE", "0")][..],
                "PMI_SIZE",
            ),
            (&[("PMI_PORT", "nohost"), ("PMI_ID", "0")][..], "PMI_PORT"),
            (&[("PMI_PORT", "h:0"), ("PMI_ID", "0")][..], "PMI_PORT"),
            (&[("PMI_PORT", "h:1")][..], "PMI_ID"),
            (&[("PMI_PORT", "h:1"), ("PMI_ID", "-1")][..], "PMI_ID"),
        ] {
            let e = parse_pmi_env(&env_of(env)).unwrap_err().to_string();
            assert!(e.contains(var), "{env:?}: {e}");
        }
    }

    #[test]
    fn control_port_and_management() {
        let args: Vec<String> =
            "/usr/bin/hydra_pmi_proxy --control-port 10.200.0.254:45445 --rmk user"
                .split(' ')
                .map(String::from)
                .collect();
        assert_eq!(
            hydra_control_port(&args),
            Some(("10.200.0.254".into(), 45445))
        );
        assert_eq!(hydra_control_port(&args[..2]), None);
        // Tests do not run under Hydra: the peer, then Slurm's variable.
        let peer: SocketAddr = "10.1.2.3:5000".parse().unwrap();
        assert_eq!(
            management_ip(Some(peer), &env_of(&[])),
            Some(Ipv4Addr::new(10, 1, 2, 3))
        );
        let lo: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        assert_eq!(
            management_ip(
                Some(lo),
                &env_of(&[("SLURM_LAUNCH_NODE_IPADDR", "10.9.9.9")])
            ),
            Some(Ipv4Addr::new(10, 9, 9, 9))
        );
        assert_eq!(management_ip(Some(lo), &env_of(&[])), None);
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn happy_path_and_finalize() {
        let (fd, server) = fake_server(hydra_like());
        let mut c = PmiClient::over_socket(fd, 1, 4, T).unwrap();
        assert_eq!((c.rank(), c.size()), (1, 4));
        assert_eq!(c.kvsname(), "kvs_1_0");
        assert_eq!(c.maxes(), (256, 64, 1024));
        c.put("hx.addr.1", "00ff").unwrap();
        c.put("text", "with space=and;more\n").unwrap();
        c.fence().unwrap();
        assert_eq!(c.get("hx.addr.1").unwrap(), "00ff");
        assert_eq!(c.get("text").unwrap(), "with space=and;more\n");
        let e = c.get("hx.addr.3").unwrap_err().to_string();
        assert!(
            e.contains("PMI") && e.contains("rank 1") && e.contains("\"hx.addr.3\""),
            "{e}"
        );
        // A miss does not break the connection.
        c.fence().unwrap();
        drop(c);
        let seen = server.join().unwrap();
        assert_eq!(seen[0], "cmd=init pmi_version=1 pmi_subversion=1");
        assert_eq!(seen.last().unwrap(), "cmd=finalize");
        assert!(seen.contains(&"cmd=put kvsname=kvs_1_0 key=hx.addr.1 value=00ff".to_string()));
    }

    #[test]
    fn no_finalize_when_switched_off() {
        let (fd, server) = fake_server(hydra_like());
        let c = PmiClient::over_socket(fd, 0, 2, T).unwrap();
        let raw = c.conn.fd.as_ref().unwrap().as_raw_fd();
        c.finalize_switch().store(false, Ordering::SeqCst);
        drop(c);
        // The socket stays open (closed at exit): close it here so the server thread ends.
        // SAFETY: the client gave up this descriptor without closing it.
        drop(unsafe { OwnedFd::from_raw_fd(raw) });
        let seen = server.join().unwrap();
        assert!(!seen.iter().any(|l| l.contains("finalize")), "{seen:?}");
    }

    fn fails_fast(reply: impl Fn(&str) -> Option<String> + Send + 'static) -> String {
        let (fd, _server) = fake_server(reply);
        let t0 = Instant::now();
        let e = PmiClient::over_socket(fd, 2, 4, Duration::from_secs(30))
            .unwrap_err()
            .to_string();
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "took {:?}",
            t0.elapsed()
        );
        assert!(e.contains("PMI") && e.contains("rank 2"), "{e}");
        e
    }

    #[test]
    fn server_closes_early() {
        let e = fails_fast(|_| None);
        assert!(e.contains("closed the connection"), "{e}");
        let e = fails_fast(|_| Some("cmd=response_to\u{4}".into()));
        assert!(e.contains("in the middle of a line"), "{e}");
        // After the handshake: a put whose reply never comes because the server is gone.
        let base = hydra_like();
        let (fd, _s) = fake_server(move |l| if l.contains("put") { None } else { base(l) });
        let mut c = PmiClient::over_socket(fd, 1, 2, T).unwrap();
        let e = c.put("k", "v").unwrap_err().to_string();
        assert!(
            e.contains("rank 1") && e.contains("cmd=put") && e.contains("closed"),
            "{e}"
        );
    }

    #[test]
    fn malformed_replies() {
        let e = fails_fast(|_| Some("garbage\n".into()));
        assert!(
            e.contains("malformed reply") && e.contains("garbage"),
            "{e}"
        );
        let e = fails_fast(|_| Some("cmd=barrier_out\n".into()));
        assert!(e.contains("expected cmd=response_to_init"), "{e}");
        let e = fails_fast(|_| Some("cmd=response_to_init \u{1}\n".into()));
        assert!(e.contains("not printable"), "{e}");
        let e = fails_fast(|_| Some("x".repeat(10_000)));
        assert!(e.contains("no end of line within 4096"), "{e}");
        let e = fails_fast(|l| {
            Some(if l.contains("get_maxes") {
                "cmd=maxes kvsname_max=256 keylen_max=64\n".into()
            } else {
                "cmd=response_to_init rc=0\n".into()
            })
        });
        assert!(e.contains("vallen_max"), "{e}");
    }

    #[test]
    fn rc_not_zero() {
        let e = fails_fast(|_| Some("cmd=response_to_init pmi_version=2 rc=-1\n".into()));
        assert!(e.contains("refused PMI version 1.1 (rc=-1)"), "{e}");
        let base = hydra_like();
        let (fd, _s) = fake_server(move |l| {
            if l.starts_with("cmd=put") {
                Some("cmd=put_result rc=3 msg=full\n".into())
            } else {
                base(l)
            }
        });
        let mut c = PmiClient::over_socket(fd, 0, 2, T).unwrap();
        let e = c.put("k", "v").unwrap_err().to_string();
        assert!(
            e.contains("refused") && e.contains("rc=3, full") && e.contains("rank 0"),
            "{e}"
        );
        c.finalize_switch().store(false, Ordering::SeqCst);
    }

    #[test]
    fn oversized_keys_and_values() {
        let (fd, server) = fake_server(hydra_like());
        let mut c = PmiClient::over_socket(fd, 0, 1, T).unwrap();
        // The line limit (1024) is the tighter one here: 1024 - 29 - 7 (kvs name) - 1 (key).
        assert_eq!(c.value_max("k"), 987);
        let e = c.put("k", &"v".repeat(988)).unwrap_err().to_string();
        assert!(
            e.contains("988 bytes") && e.contains("987") && e.contains("vallen_max"),
            "{e}"
        );
        c.put("k", &"v".repeat(987)).unwrap();
        // Hex doubles text outside the plain set.
        let e = c.put("k", &" ".repeat(600)).unwrap_err().to_string();
        assert!(e.contains("1201 bytes"), "{e}");
        let e = c.put(&"k".repeat(64), "v").unwrap_err().to_string();
        assert!(e.contains("keylen_max") && e.contains("63"), "{e}");
        let e = c.get("a b").unwrap_err().to_string();
        assert!(e.contains("cannot be carried"), "{e}");
        // None of these broke the connection.
        c.fence().unwrap();
        assert_eq!(c.get("k").unwrap(), "v".repeat(987));
        drop(c);
        assert_eq!(server.join().unwrap().last().unwrap(), "cmd=finalize");
    }

    #[test]
    fn silent_server_times_out() {
        let (fd, _server) = fake_server(|l| {
            if l.contains("barrier") {
                std::thread::sleep(Duration::from_secs(3));
                None
            } else {
                hydra_like()(l)
            }
        });
        let mut c = PmiClient::over_socket(fd, 3, 4, Duration::from_millis(300)).unwrap();
        let t0 = Instant::now();
        let e = c.fence().unwrap_err().to_string();
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert!(
            e.contains("rank 3") && e.contains("barrier") && e.contains("HX_BOOTSTRAP_TIMEOUT"),
            "{e}"
        );
        // Broken now: later calls fail at once, and drop does not finalize.
        let e = c.put("k", "v").unwrap_err().to_string();
        assert!(e.contains("unusable"), "{e}");
    }

    #[test]
    fn port_with_pmi_id() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let w = s.try_clone().unwrap();
            let reply = hydra_like();
            serve(BufReader::new(s), w, |line: &str| {
                if line.starts_with("cmd=initack") {
                    Some("cmd=initack\ncmd=set size=3\ncmd=set rank=2\ncmd=set debug=0\n".into())
                } else {
                    reply(line)
                }
            })
        });
        let cfg = parse_pmi_env(&env_of(&[
            ("PMI_PORT", &format!("localhost:{port}")),
            ("PMI_ID", "2"),
        ]))
        .unwrap()
        .unwrap();
        let c = PmiClient::connect(&cfg).unwrap();
        assert_eq!((c.rank(), c.size()), (2, 3));
        // Loopback peer: no management address from it.
        assert_eq!(c.management_ip(), None);
        drop(c);
        let seen = server.join().unwrap();
        assert_eq!(seen[0], "cmd=initack pmiid=2");
        assert_eq!(seen.last().unwrap(), "cmd=finalize");
    }

    #[test]
    fn inherited_fd_checks() {
        let e = take_inherited_fd(987_654).unwrap_err();
        assert!(
            e.contains("PMI_FD=987654 is not an open file descriptor"),
            "{e}"
        );
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        let e = take_inherited_fd(f.as_raw_fd()).unwrap_err();
        assert!(e.contains("is not a socket"), "{e}");
    }

    #[test]
    fn unread_output_is_counted_on_pipes_and_sockets() {
        use std::io::{Read, Write};
        let (mut r, mut w) = std::io::pipe().unwrap();
        assert_eq!(unread_bytes(w.as_raw_fd()), Some(0));
        w.write_all(b"last words\n").unwrap();
        assert_eq!(unread_bytes(w.as_raw_fd()), Some(11));
        let mut buf = [0u8; 11];
        r.read_exact(&mut buf).unwrap();
        assert_eq!(unread_bytes(w.as_raw_fd()), Some(0));

        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.write_all(b"12345").unwrap();
        // Unix sockets count the buffer's overhead too.
        assert!(unread_bytes(a.as_raw_fd()).is_some_and(|n| n >= 5));
        b.read_exact(&mut buf[..5]).unwrap();
        assert_eq!(unread_bytes(a.as_raw_fd()), Some(0));

        let f = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(unread_bytes(f.as_raw_fd()), None);
        assert_eq!(unread_bytes(987_654), None);
    }
}
