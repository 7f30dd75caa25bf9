//! Setting up a shared-memory link between two processes over an abstract Unix socket (Linux
//! abstract namespace: no file exists, so nothing is left behind when a process is killed; the
//! namespace is per network namespace, which is "one host" on the testbed).
//!
//! Handshake, mutual, and the secret never crosses the socket:
//! 1. acceptor -> connector: `"HXSc"`, version u32, nonce_a\[16\]                         (24 B)
//! 2. connector -> acceptor: `"HXSh"`, rank u32, index u32, nonce_c\[16\],
//!    HMAC(secret, "hxcomm shm hello v1" | nonce_a | rank | index | nonce_c)              (60 B)
//! 3. acceptor checks the HMAC (constant time); on failure it hangs up. Otherwise it creates the
//!    segment and both eventfds and sends `"HXSr"`, capacity u64,
//!    HMAC(secret, "hxcomm shm ready v1" | nonce_a | nonce_c | rank | index | capacity)   (44 B)
//!    with SCM_RIGHTS \[memfd, acceptor's eventfd, connector's eventfd\].
//! 4. the connector checks that HMAC (so a squatter on the name cannot feed it a segment), then
//!    the segment itself (sealed, magic, sizes) before mapping it.
//!
//! Integers are little-endian. The socket stays open for the life of the link: its hang-up is
//! how a killed peer is noticed.

use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::{Duration, Instant};

use hx_auth::{ct_eq, fill_random, hmac_sha256, Secret};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

use super::{
    check_capacity, create_segment, eventfd, open_segment, PrefaultBudget, ShmLink,
    DEFAULT_CAPACITY,
};
use std::sync::Arc;

const CH_MAGIC: [u8; 4] = *b"HXSc";
const HELLO_MAGIC: [u8; 4] = *b"HXSh";
const READY_MAGIC: [u8; 4] = *b"HXSr";
/// The frame protocol's: frames of one version travel over the rings too.
const VERSION: u32 = hx_wire::VERSION as u32;
const CH_LEN: usize = 24;
const HELLO_LEN: usize = 60;
const READY_LEN: usize = 44;
const NFDS: usize = 3;

/// Who connected: the connector's rank and its link index (as passed to [`connect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerHello {
    pub rank: u32,
    pub index: u32,
}

/// Accepts shared-memory links on an abstract Unix socket name.
pub struct ShmListener {
    l: UnixListener,
    name: String,
    capacity: usize,
    prefault: Option<Arc<PrefaultBudget>>,
}

/// Listens on the abstract name `name` (no leading NUL; at most 107 bytes). Fails with
/// `AddrInUse` if someone in this network namespace already listens there.
pub fn listen(name: &str) -> io::Result<ShmListener> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    let l = UnixListener::bind_addr(&addr)
        .map_err(|e| io::Error::new(e.kind(), format!("shm listen @{name}: {e}")))?;
    Ok(ShmListener {
        l,
        name: name.into(),
        capacity: DEFAULT_CAPACITY,
        prefault: None,
    })
}

fn hello_mac(secret: &Secret, na: &[u8], rank: u32, index: u32, nc: &[u8]) -> [u8; 32] {
    hmac_sha256(
        secret,
        &[
            b"hxcomm shm hello v1",
            na,
            &rank.to_le_bytes(),
            &index.to_le_bytes(),
            nc,
        ],
    )
}

fn ready_mac(secret: &Secret, na: &[u8], nc: &[u8], rank: u32, index: u32, cap: u64) -> [u8; 32] {
    hmac_sha256(
        secret,
        &[
            b"hxcomm shm ready v1",
            na,
            nc,
            &rank.to_le_bytes(),
            &index.to_le_bytes(),
            &cap.to_le_bytes(),
        ],
    )
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn ctx<'a>(what: &'static str, name: &'a str) -> impl Fn(io::Error) -> io::Error + 'a {
    move |e| io::Error::new(e.kind(), format!("shm @{name}: {what}: {e}"))
}

fn denied(name: &str, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("shm @{name}: {why}"),
    )
}

impl ShmListener {
    /// Ring capacity (bytes per direction, a power of two) of links accepted from now on.
    pub fn set_capacity(&mut self, capacity: usize) -> io::Result<()> {
        check_capacity(capacity)?;
        self.capacity = capacity;
        Ok(())
    }

    /// Rings of links accepted from now on are populated once busy while `budget` has room
    /// (see [`PrefaultBudget`]); `None` (the default): never.
    pub fn set_prefault(&mut self, budget: Option<Arc<PrefaultBudget>>) {
        self.prefault = budget;
    }

    /// With `true`, `accept` returns `WouldBlock` when nobody is waiting (poll `as_raw_fd()`
    /// for readability). The handshake itself is always blocking, bounded by its timeout.
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.l.set_nonblocking(nonblocking)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Accepts one connection and runs the handshake (bounded by `timeout`). A stranger or a
    /// wrong secret gives `PermissionDenied` (and nothing is created); keep accepting then.
    pub fn accept(&self, secret: &Secret, timeout: Duration) -> io::Result<(ShmLink, PeerHello)> {
        let (s, _) = self.l.accept()?;
        let deadline = Instant::now() + timeout.max(Duration::from_millis(1));
        let mut a = self.start_handshake(s)?;
        loop {
            if let Some(hello) = a.advance(secret)? {
                return Ok((a.complete(secret)?, hello));
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("shm @{}: no hello within {timeout:?}", self.name),
                ));
            }
            if let Some(s) = &a.s {
                wait_readable(s.as_fd(), deadline);
            }
        }
    }

    /// Accepts one waiting connection (`WouldBlock` if none) and starts its handshake without
    /// blocking: drive it with [`ShmAccepting::advance`] when its fd is readable.
    pub fn accept_nonblocking(&self) -> io::Result<ShmAccepting> {
        let (s, _) = self.l.accept()?;
        self.start_handshake(s)
    }

    fn start_handshake(&self, mut s: UnixStream) -> io::Result<ShmAccepting> {
        let name = self.name.as_str();
        let mut na = [0u8; 16];
        fill_random(&mut na)?;
        let mut ch = [0u8; CH_LEN];
        ch[..4].copy_from_slice(&CH_MAGIC);
        ch[4..8].copy_from_slice(&VERSION.to_le_bytes());
        ch[8..].copy_from_slice(&na);
        // A fresh socket's buffer takes the 24 bytes at once.
        s.set_nonblocking(false)?;
        s.set_write_timeout(Some(Duration::from_secs(1)))?;
        s.write_all(&ch).map_err(ctx("sending challenge", name))?;
        s.set_nonblocking(true)?;
        Ok(ShmAccepting {
            s: Some(s),
            na,
            hello: [0; HELLO_LEN],
            have: 0,
            name: self.name.clone(),
            capacity: self.capacity,
            prefault: self.prefault.clone(),
        })
    }
}

/// The acceptor's side of a handshake in progress.
pub struct ShmAccepting {
    s: Option<UnixStream>,
    na: [u8; 16],
    hello: [u8; HELLO_LEN],
    have: usize,
    name: String,
    capacity: usize,
    prefault: Option<Arc<PrefaultBudget>>,
}

impl ShmAccepting {
    pub fn fd(&self) -> RawFd {
        self.s.as_ref().map_or(-1, |s| s.as_raw_fd())
    }

    /// Reads what the connector sent: `Ok(Some(who))` once its hello is complete and authentic
    /// (then [`complete`](Self::complete) makes the link, or dropping this refuses it),
    /// `Ok(None)` while waiting. An error ends the attempt.
    pub fn advance(&mut self, secret: &Secret) -> io::Result<Option<PeerHello>> {
        let name = self.name.clone();
        let Some(s) = self.s.as_mut() else {
            return Err(io::Error::other("handshake already finished"));
        };
        while self.have < HELLO_LEN {
            match s.read(&mut self.hello[self.have..]) {
                Ok(0) => return Err(denied(&name, "connector hung up during the handshake")),
                Ok(n) => {
                    self.have += n;
                    if self.have >= 4 && self.hello[..4] != HELLO_MAGIC {
                        return Err(denied(&name, "not an hxcomm shm hello"));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ctx("reading hello", &name)(e)),
            }
        }
        let h = self.hello;
        let (rank, index) = (u32_at(&h, 4), u32_at(&h, 8));
        let nc = &h[12..28];
        if !ct_eq(&h[28..60], &hello_mac(secret, &self.na, rank, index, nc)) {
            return Err(denied(
                &name,
                &format!("hello from 'rank {rank}' fails authentication (wrong job secret?)"),
            ));
        }
        Ok(Some(PeerHello { rank, index }))
    }

    /// Creates the segment and hands it to the connector whose hello [`advance`](Self::advance)
    /// accepted.
    pub fn complete(mut self, secret: &Secret) -> io::Result<ShmLink> {
        let name = self.name.clone();
        if self.have < HELLO_LEN {
            return Err(io::Error::other("handshake not finished"));
        }
        let h = self.hello;
        let (rank, index) = (u32_at(&h, 4), u32_at(&h, 8));
        let nc = &h[12..28];
        let s = self
            .s
            .take()
            .ok_or_else(|| io::Error::other("handshake already completed"))?;
        s.set_nonblocking(false)?;
        s.set_write_timeout(Some(Duration::from_secs(1)))?;
        let (memfd, map) = create_segment(self.capacity)?;
        let (mine, theirs) = (eventfd()?, eventfd()?);
        let cap = self.capacity as u64;
        let mut r = [0u8; READY_LEN];
        r[..4].copy_from_slice(&READY_MAGIC);
        r[4..12].copy_from_slice(&cap.to_le_bytes());
        r[12..].copy_from_slice(&ready_mac(secret, &self.na, nc, rank, index, cap));
        send_fds(
            &s,
            &r,
            &[memfd.as_raw_fd(), mine.as_raw_fd(), theirs.as_raw_fd()],
        )
        .map_err(ctx("sending segment", &name))?;
        // The engine names the peer in its own messages; the numbers here are handshake ids.
        let label = format!("shm @{name}");
        ShmLink::new(
            map,
            self.capacity,
            0,
            mine,
            theirs,
            Some(s),
            label,
            self.prefault.clone(),
        )
    }
}

/// Sleeps until `fd` is readable or `deadline` passes.
fn wait_readable(fd: BorrowedFd<'_>, deadline: Instant) {
    let left = deadline.saturating_duration_since(Instant::now());
    let ms = left.as_millis().min(1000) as u16 + 1;
    let _ = poll(&mut [PollFd::new(fd, PollFlags::POLLIN)], ms);
}

impl AsRawFd for ShmListener {
    fn as_raw_fd(&self) -> RawFd {
        self.l.as_raw_fd()
    }
}

/// Connects to the listener on abstract name `name` as `rank` (link `index`), retrying while
/// nobody listens yet, all within `timeout`. Accepts rings of up to [`DEFAULT_CAPACITY`].
pub fn connect(
    name: &str,
    secret: &Secret,
    rank: u32,
    index: u32,
    timeout: Duration,
) -> io::Result<ShmLink> {
    connect_with_max(name, secret, rank, index, DEFAULT_CAPACITY, timeout)
}

/// [`connect`], accepting rings of up to `max_capacity` bytes from the listener.
pub fn connect_with_max(
    name: &str,
    secret: &Secret,
    rank: u32,
    index: u32,
    max_capacity: usize,
    timeout: Duration,
) -> io::Result<ShmLink> {
    check_capacity(max_capacity)?;
    let deadline = Instant::now() + timeout;
    let mut c = loop {
        match ShmConnecting::start(name) {
            Ok(mut c) => {
                c.max_capacity = max_capacity;
                break c;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionRefused
                        | io::ErrorKind::NotFound
                        | io::ErrorKind::WouldBlock
                ) && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e),
        }
    };
    loop {
        if let Some(link) = c.advance(secret, rank, index)? {
            return Ok(link);
        }
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("shm @{name}: handshake not done within {timeout:?}"),
            ));
        }
        wait_readable(c.s.as_fd(), deadline);
    }
}

enum ConnPhase {
    Challenge {
        buf: [u8; CH_LEN],
        have: usize,
    },
    Ready {
        na: [u8; 16],
        nc: [u8; 16],
        buf: [u8; READY_LEN],
        have: usize,
        fds: Vec<OwnedFd>,
    },
}

/// The connector's side of a handshake in progress, driven by an event loop.
pub struct ShmConnecting {
    s: UnixStream,
    name: String,
    phase: ConnPhase,
    /// The largest ring the listener may hand us: it decides the size of a segment we map.
    max_capacity: usize,
    prefault: Option<Arc<PrefaultBudget>>,
}

impl ShmConnecting {
    /// Connects without blocking: `ConnectionRefused`/`NotFound` mean nobody listens on `name`,
    /// `WouldBlock` that its backlog is full (try again).
    pub fn start(name: &str) -> io::Result<ShmConnecting> {
        let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
        let s = UnixStream::connect_addr(&addr).map_err(ctx("connecting", name))?;
        s.set_nonblocking(true)?;
        Ok(ShmConnecting {
            s,
            name: name.to_string(),
            phase: ConnPhase::Challenge {
                buf: [0; CH_LEN],
                have: 0,
            },
            max_capacity: DEFAULT_CAPACITY,
            prefault: None,
        })
    }

    /// Accept rings of up to `capacity` bytes (default [`DEFAULT_CAPACITY`], what a listener
    /// offers unless told otherwise).
    pub fn set_max_capacity(&mut self, capacity: usize) -> io::Result<()> {
        check_capacity(capacity)?;
        self.max_capacity = capacity;
        Ok(())
    }

    /// The link's rings are populated once busy if `budget` has room (see [`PrefaultBudget`]).
    pub fn set_prefault(&mut self, budget: Option<Arc<PrefaultBudget>>) {
        self.prefault = budget;
    }

    pub fn fd(&self) -> RawFd {
        self.s.as_raw_fd()
    }

    /// Reads the acceptor's messages as they come: `Ok(Some(link))` once the segment arrived and
    /// checked out, `Ok(None)` while waiting. An error ends the attempt; a hang-up after our
    /// hello is `PermissionDenied`.
    pub fn advance(
        &mut self,
        secret: &Secret,
        rank: u32,
        index: u32,
    ) -> io::Result<Option<ShmLink>> {
        let name = self.name.clone();
        loop {
            match &mut self.phase {
                ConnPhase::Challenge { buf, have } => {
                    match (&self.s).read(&mut buf[*have..]) {
                        Ok(0) => {
                            return Err(denied(&name, "listener hung up before its challenge"))
                        }
                        Ok(n) => *have += n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(ctx("reading challenge", &name)(e)),
                    }
                    if *have < CH_LEN {
                        continue;
                    }
                    if buf[..4] != CH_MAGIC {
                        return Err(denied(&name, "not an hxcomm shm listener"));
                    }
                    let theirs = u32_at(&buf[..], 4);
                    if theirs != VERSION {
                        return Err(denied(
                            &name,
                            &format!(
                                "the peer runs another hxcomm release (protocol version \
                                 {theirs}; this build speaks {VERSION})"
                            ),
                        ));
                    }
                    let mut na = [0u8; 16];
                    na.copy_from_slice(&buf[8..24]);
                    let mut nc = [0u8; 16];
                    fill_random(&mut nc)?;
                    let mut h = [0u8; HELLO_LEN];
                    h[..4].copy_from_slice(&HELLO_MAGIC);
                    h[4..8].copy_from_slice(&rank.to_le_bytes());
                    h[8..12].copy_from_slice(&index.to_le_bytes());
                    h[12..28].copy_from_slice(&nc);
                    h[28..].copy_from_slice(&hello_mac(secret, &na, rank, index, &nc));
                    // 60 bytes into an empty socket buffer: never short.
                    (&self.s)
                        .write_all(&h)
                        .map_err(ctx("sending hello", &name))?;
                    self.phase = ConnPhase::Ready {
                        na,
                        nc,
                        buf: [0; READY_LEN],
                        have: 0,
                        fds: Vec::new(),
                    };
                }
                ConnPhase::Ready {
                    na,
                    nc,
                    buf,
                    have,
                    fds,
                } => {
                    match recv_fds(&self.s, &mut buf[*have..]) {
                        Ok((0, _)) => {
                            return Err(denied(
                                &name,
                                "listener hung up on our hello (wrong job secret, or it keeps its own link to us)",
                            ))
                        }
                        Ok((n, got)) => {
                            *have += n;
                            fds.extend(got);
                        }
                        Err(e) if e.kind() == io::ErrorKind::TimedOut => return Ok(None),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(ctx("reading segment", &name)(e)),
                    }
                    if *have < READY_LEN {
                        continue;
                    }
                    let r = *buf;
                    let cap = u64::from_le_bytes(r[4..12].try_into().expect("8 bytes"));
                    if r[..4] != READY_MAGIC
                        || !ct_eq(
                            &r[12..],
                            &ready_mac(secret, &na[..], &nc[..], rank, index, cap),
                        )
                    {
                        return Err(denied(
                            &name,
                            "listener fails authentication (wrong job secret?)",
                        ));
                    }
                    let fds = std::mem::take(fds);
                    let [memfd, theirs, mine]: [OwnedFd; NFDS] =
                        fds.try_into().map_err(|v: Vec<OwnedFd>| {
                            io::Error::new(
                                io::ErrorKind::InvalidData,
                                format!("shm @{name}: got {} descriptors, want {NFDS}", v.len()),
                            )
                        })?;
                    if cap > self.max_capacity as u64 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "shm @{name}: listener offers rings of {cap} bytes, more than the {} this side accepts",
                                self.max_capacity
                            ),
                        ));
                    }
                    let (map, cap2) = open_segment(&memfd, self.max_capacity)?;
                    if cap2 as u64 != cap {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("shm @{name}: segment capacity {cap2}, announced {cap}"),
                        ));
                    }
                    let label = format!("shm @{name}");
                    let s = self.s.try_clone()?;
                    s.set_nonblocking(false)?;
                    return ShmLink::new(
                        map,
                        cap2,
                        1,
                        mine,
                        theirs,
                        Some(s),
                        label,
                        self.prefault.clone(),
                    )
                    .map(Some);
                }
            }
        }
    }
}

/// Control buffer for up to 4 descriptors, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Cmsg([u8; 64]);

/// Sends `data` with `fds` attached (SCM_RIGHTS) on a blocking socket.
fn send_fds(s: &UnixStream, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    assert!(!data.is_empty());
    let iov = [IoSlice::new(data)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let sent = loop {
        match sendmsg::<()>(s.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(n) => break n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    };
    // The descriptors travelled with the first byte; the rest is plain data.
    let mut s = s;
    s.write_all(&data[sent..])
}

/// Receives into `buf` and takes ownership of any descriptors that came along. Returns the
/// bytes read (0 = peer hung up) and the descriptors.
fn recv_fds(s: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut cbuf = Cmsg([0; 64]);
    let mut fds = Vec::new();
    // SAFETY: the msghdr points at live locals for the call. The kernel writes at most
    // `msg_controllen` bytes of control data; CMSG_FIRSTHDR/NXTHDR walk only inside it, and
    // each SCM_RIGHTS payload is read unaligned within its cmsg_len. Each received descriptor
    // is new and ours, so wrapping it in OwnedFd (closing it if we bail out) is correct.
    unsafe {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut mh: libc::msghdr = std::mem::zeroed();
        mh.msg_iov = &mut iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cbuf.0.as_mut_ptr().cast();
        mh.msg_controllen = cbuf.0.len() as _;
        let n = loop {
            let r = libc::recvmsg(s.as_raw_fd(), &mut mh, libc::MSG_CMSG_CLOEXEC);
            if r >= 0 {
                break r as usize;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => return Err(io::ErrorKind::TimedOut.into()),
                _ => return Err(e),
            }
        };
        let mut c = libc::CMSG_FIRSTHDR(&mh);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let payload = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..payload / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(&mh, c);
        }
        if mh.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "too many descriptors attached",
            ));
        }
        Ok((n, fds))
    }
}
