//! TCP rails. Each rail's sockets are bound to the rail's device (SO_BINDTODEVICE, set before
//! bind/connect) so its traffic leaves through the intended NIC even when routing would pick
//! another. TCP_NOTSENT_LOWAT keeps little unsent data in each socket: a socket then reports room
//! only when its rail is actually draining, which is what lets rails pull work at their own pace.

use std::io::{self, IoSlice, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use nix::sys::socket::{setsockopt, sockopt};
use nix::{setsockopt_impl, sockopt_impl};
use socket2::{Domain, Protocol, Socket, Type};

use crate::trace::{self, LinkTrace};
use crate::Link;

// nix has no TCP_NOTSENT_LOWAT; its macro declares the option (a c_int) for `setsockopt`.
sockopt_impl!(
    /// TCP_NOTSENT_LOWAT: unsent bytes a socket may hold before it stops reporting room.
    TcpNotSentLowat,
    SetOnly,
    libc::IPPROTO_TCP,
    libc::TCP_NOTSENT_LOWAT,
    libc::c_int
);

/// Socket settings of a rail.
#[derive(Debug, Clone)]
pub struct RailOptions {
    /// Unsent bytes a socket may hold before it reports "full" (0: kernel default).
    pub notsent_lowat: u32,
    pub nodelay: bool,
    /// A rail whose sent data stays unacknowledged this long is broken (TCP_USER_TIMEOUT), and an
    /// idle rail is probed by keepalives at about this interval, so that a cut cable, which sends
    /// no reset, is noticed whether or not the program calls into the library.
    pub liveness: Option<Duration>,
}

impl Default for RailOptions {
    fn default() -> Self {
        RailOptions {
            notsent_lowat: 128 * 1024,
            nodelay: true,
            liveness: Some(Duration::from_secs(1)),
        }
    }
}

fn ctx(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A listener on `ip`, `port` (0: chosen by the kernel), bound to `device` if given. Never binds
/// the wildcard address: callers pass a rail or loopback address. The backlog is the kernel's
/// maximum: a burst of peers connecting at once waits there rather than being refused.
///
/// `congestion`: the congestion control the connections it accepts start with (see
/// `first_congestion`).
pub fn listen(
    ip: Ipv4Addr,
    device: Option<&str>,
    port: u16,
    congestion: Option<&str>,
) -> io::Result<TcpListener> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    first_congestion(&s, congestion);
    if let Some(dev) = device {
        s.bind_device(Some(dev.as_bytes()))
            .map_err(|e| ctx(e, format!("SO_BINDTODEVICE {dev}")))?;
    }
    let addr = SocketAddr::V4(SocketAddrV4::new(ip, port));
    s.bind(&addr.into())
        .map_err(|e| ctx(e, format!("bind {addr}")))?;
    s.listen(4096)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// A TCP socket bound to `local` (port chosen by the kernel) and, if given, to `device` — the
/// device first, so that the bind already honours it.
fn bound_socket(
    local: Ipv4Addr,
    device: Option<&str>,
    congestion: Option<&str>,
) -> io::Result<Socket> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    first_congestion(&s, congestion);
    if let Some(dev) = device {
        s.bind_device(Some(dev.as_bytes()))
            .map_err(|e| ctx(e, format!("SO_BINDTODEVICE {dev}")))?;
    }
    // Choose the port at connect time, not at bind: bind(port 0) searches the whole port range
    // for a port no socket holds, which took 2.7 ms a call with 16,000 connections on one host
    // (64 ranks x 4 loopback rails); connect only needs a unique 4-tuple.
    setsockopt(&s, sockopt::IpBindAddressNoPort, &true)
        .map_err(|e| ctx(e.into(), "IP_BIND_ADDRESS_NO_PORT".into()))?;
    s.bind(&SocketAddr::V4(SocketAddrV4::new(local, 0)).into())
        .map_err(|e| ctx(e, format!("bind {local}")))?;
    Ok(s)
}

/// Gives a socket its congestion control before it connects (on a listener: before the
/// connections it accepts start, which inherit it), so that a connection never runs the
/// kernel's default first. That matters where the default is BBR: its start asks TCP to pace
/// the socket, and nothing takes that back when the socket then switches to cubic
/// (BENCHMARKS.md, "After idle"). Best effort: a refusal shows, and is reported, when the
/// engine sets the algorithm again on the connected socket.
fn first_congestion(s: &Socket, congestion: Option<&str>) {
    if let Some(cc) = congestion {
        let _ = set_congestion_fd(s.as_raw_fd(), cc);
    }
}

/// Connects from `local` (bound to `device` if given) to `remote`, within `timeout`.
pub fn connect(
    local: Ipv4Addr,
    device: Option<&str>,
    remote: SocketAddr,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let s = bound_socket(local, device, None)?;
    s.connect_timeout(&remote.into(), timeout)
        .map_err(|e| ctx(e, format!("connect {local} -> {remote}")))?;
    Ok(s.into())
}

/// Applies rail socket options and makes the stream nonblocking.
pub fn tune(stream: &TcpStream, opts: &RailOptions) -> io::Result<()> {
    stream.set_nodelay(opts.nodelay)?;
    if opts.notsent_lowat > 0 {
        let v = opts.notsent_lowat as libc::c_int;
        setsockopt(stream, TcpNotSentLowat, &v)
            .map_err(|e| ctx(e.into(), "TCP_NOTSENT_LOWAT".into()))?;
    }
    if let Some(t) = opts.liveness {
        let sock = socket2::SockRef::from(stream);
        sock.set_tcp_user_timeout(Some(t))
            .map_err(|e| ctx(e, "TCP_USER_TIMEOUT".into()))?;
        // Keepalive times have a granularity of one second.
        let secs = Duration::from_secs(t.as_secs().max(1));
        let ka = socket2::TcpKeepalive::new()
            .with_time(secs)
            .with_interval(secs)
            .with_retries(1);
        sock.set_tcp_keepalive(&ka)
            .map_err(|e| ctx(e, "TCP keepalive".into()))?;
    }
    stream.set_nonblocking(true)
}

/// Caps a socket's send rate at `bytes_per_s` (SO_MAX_PACING_RATE; `u64::MAX`: no cap). TCP
/// then paces the socket itself (no fq qdisc needed).
pub fn set_max_pacing_rate(fd: RawFd, bytes_per_s: u64) -> io::Result<()> {
    // The kernel takes 64 bits when given 8 bytes.
    set_opt(fd, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, &bytes_per_s)
}

/// A socket's SO_MAX_PACING_RATE (bytes per second; `u64::MAX`: no cap).
pub fn max_pacing_rate(fd: RawFd) -> io::Result<u64> {
    let (v, len) = get_opt::<u64>(fd, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE)?;
    // A 4-byte answer: ~0U means no cap.
    Ok(if len == 4 && v as u32 == u32::MAX {
        u64::MAX
    } else {
        v
    })
}

/// A socket buffer the kernel sizes by itself unless told (SO_SNDBUF, SO_RCVBUF).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffer {
    Send,
    Receive,
}

impl Buffer {
    /// The option, the one that passes net.core.{w,r}mem_max, and the sysctl that caps it.
    fn options(self) -> (libc::c_int, libc::c_int, &'static str) {
        match self {
            Buffer::Send => (libc::SO_SNDBUF, libc::SO_SNDBUFFORCE, "net.core.wmem_max"),
            Buffer::Receive => (libc::SO_RCVBUF, libc::SO_RCVBUFFORCE, "net.core.rmem_max"),
        }
    }

    /// The sysctl that caps what an unprivileged process may ask for.
    pub fn cap_sysctl(self) -> &'static str {
        self.options().2
    }
}

/// Fixes a socket's buffer at `bytes` (the kernel doubles it for its own bookkeeping and stops
/// sizing it by itself) and returns what the socket got, doubled as the kernel reports it. The
/// kernel caps the size at [`Buffer::cap_sysctl`]; a process allowed to (CAP_NET_ADMIN) passes
/// the cap with SO_SNDBUFFORCE / SO_RCVBUFFORCE, others get the cap.
pub fn set_buffer(fd: RawFd, which: Buffer, bytes: u32) -> io::Result<usize> {
    let (name, force, _) = which.options();
    set_int(fd, libc::SOL_SOCKET, name, bytes)?;
    let got = buffer(fd, which)?;
    if got >= 2 * bytes as usize {
        return Ok(got);
    }
    match set_int(fd, libc::SOL_SOCKET, force, bytes) {
        Ok(()) => buffer(fd, which),
        Err(_) => Ok(got),
    }
}

/// A socket's buffer (doubled, as the kernel reports it).
pub fn buffer(fd: RawFd, which: Buffer) -> io::Result<usize> {
    let (v, _) = get_opt::<libc::c_int>(fd, libc::SOL_SOCKET, which.options().0)?;
    Ok(v.max(0) as usize)
}

/// A socket's send buffer (SO_SNDBUF, doubled as the kernel reports it).
pub fn send_buffer(fd: RawFd) -> io::Result<usize> {
    buffer(fd, Buffer::Send)
}

/// A socket's receive buffer (SO_RCVBUF, doubled as the kernel reports it).
pub fn receive_buffer(fd: RawFd) -> io::Result<usize> {
    buffer(fd, Buffer::Receive)
}

/// Changes a connected rail socket's TCP_NOTSENT_LOWAT (see [`RailOptions::notsent_lowat`]).
/// The engine raises it while much bulk data is queued, so that a sender wakes once per
/// `bytes / 2` drained rather than once per default low-water mark, and lowers it again for
/// the tail of a transfer. Fails (EOPNOTSUPP) on anything but a TCP socket.
pub fn set_notsent_lowat(fd: RawFd, bytes: u32) -> io::Result<()> {
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, bytes)
}

/// Sets a rail socket's SO_RCVLOWAT: epoll reports it readable only once `bytes` are there (or
/// the peer closed, or the receive buffer is under pressure). The engine raises it while the
/// rest of a large payload is on its way, so that a sleeping receiver wakes once for it rather
/// than once per burst of segments; a nonblocking read still returns whatever is there.
/// Linux caps it at half the largest receive buffer.
pub fn set_rcvlowat(fd: RawFd, bytes: u32) -> io::Result<()> {
    set_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, bytes.max(1))
}

/// Bytes a socket has accepted and the peer has not acknowledged yet (`SIOCOUTQ`): what the
/// link still has to carry of what was written to it.
pub fn send_backlog(fd: RawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one c_int through the pointer, which outlives the call.
    if unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n.max(0) as usize)
}

fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: u32) -> io::Result<()> {
    let v = value.min(i32::MAX as u32) as libc::c_int;
    set_opt(fd, level, name, &v)
}

/// A getsockopt of one plain value (an integer, or a byte array for a name): the value (zero
/// beyond what the kernel wrote) and how many bytes the kernel wrote.
fn get_opt<T: Copy + Default>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<(T, libc::socklen_t)> {
    let mut v = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: getsockopt into a T the kernel fills up to `len` (its size) bytes of.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut T).cast(), &mut len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((v, len))
}

/// A setsockopt of one plain value (an integer of the size the option takes).
fn set_opt<T: Copy>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: a plain setsockopt on a descriptor the caller holds open; the kernel reads at
    // most size_of::<T>() bytes from `v`, which outlives the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the rail's TCP congestion control (TCP_CONGESTION) to `name`, e.g. `cubic`. Fails with
/// ENOENT when the kernel has no such algorithm and EPERM when an unprivileged process asks for one
/// outside net.ipv4.tcp_allowed_congestion_control; the socket keeps its algorithm then.
pub fn set_congestion(stream: &TcpStream, name: &str) -> io::Result<()> {
    set_congestion_fd(stream.as_raw_fd(), name)
}

/// [`set_congestion`] on a connected rail socket's descriptor: the engine switches a rail
/// between its latency and its bulk algorithm while the connection lives.
pub fn set_congestion_fd(fd: RawFd, name: &str) -> io::Result<()> {
    // SAFETY: setsockopt reads name.len() bytes from a live slice.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(ctx(e, format!("TCP_CONGESTION {name}")));
    }
    Ok(())
}

/// The congestion control a TCP socket runs (TCP_CONGESTION).
pub fn congestion_fd(fd: RawFd) -> io::Result<String> {
    let (buf, len) = get_opt::<[u8; 16]>(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION)?;
    let name = &buf[..(len as usize).min(buf.len())];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// Starts a nonblocking connection (for reconnecting a rail without stalling the progress loop);
/// completion shows as writability. `congestion`: the algorithm it starts with
/// (`first_congestion`).
pub fn connect_nonblocking(
    local: Ipv4Addr,
    device: Option<&str>,
    remote: SocketAddr,
    congestion: Option<&str>,
) -> io::Result<TcpStream> {
    let s = bound_socket(local, device, congestion)?;
    s.set_nonblocking(true)?;
    match s.connect(&remote.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(ctx(e, format!("connect {local} -> {remote}"))),
    }
    Ok(s.into())
}

/// Writes of several pieces up to this long in all are gathered into one buffer for send(2)
/// (a single piece goes out with send(2) whatever its length) instead of writev(2): the kernel
/// copies a single user buffer by a shorter path than an iovec array (8-byte messages with their
/// 48-byte header over loopback: 2.7 us a send against 3.0 for writev of the same bytes, in one
/// or two pieces; bench/send_vs_writev.c), and gathering a few hundred bytes costs far less.
const SEND_GATHER_MAX: usize = 512;

/// The write of a TCP link, traced or not.
fn write_gathered(
    stream: &mut TcpStream,
    gather: &mut Vec<u8>,
    bufs: &[IoSlice<'_>],
) -> io::Result<usize> {
    let fd = stream.as_raw_fd();
    if let [one] = bufs {
        return send_one(fd, one);
    }
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    if total > SEND_GATHER_MAX {
        return stream.write_vectored(bufs);
    }
    // A buffer kept with the link: a fresh zeroed array cost a 512-byte memset per send.
    gather.clear();
    for b in bufs {
        gather.extend_from_slice(b);
    }
    send_one(fd, gather)
}

/// send(2) of `buf`; MSG_NOSIGNAL: a peer gone is an EPIPE error, never a signal (the provider
/// runs inside programs that keep SIGPIPE's default).
fn send_one(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: sendto reads at most buf.len() bytes from a live slice; no address is passed.
    let n = unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd,
            buf.as_ptr(),
            buf.len(),
            libc::MSG_NOSIGNAL,
            std::ptr::null::<libc::sockaddr>(),
            0 as libc::socklen_t,
        )
    };
    syscall_len(n)
}

/// recv(2) into `buf`, as [`send_one`] a plain syscall. libc's `recv` and `send` are
/// cancellation points: in a process with more than one thread (every Open MPI rank) each call
/// also switches the thread's cancel state on and off with two atomic updates, ~60 instructions
/// per syscall on the polling path (callgrind: a socket read 92 instructions under Open MPI, 44
/// in hxcomm's own single-threaded ranks). hxcomm never cancels a thread.
fn recv_one(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: recvfrom writes at most buf.len() bytes into a live slice; no address is asked.
    let n = unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            fd,
            buf.as_mut_ptr(),
            buf.len(),
            0,
            std::ptr::null_mut::<libc::sockaddr>(),
            std::ptr::null_mut::<libc::socklen_t>(),
        )
    };
    syscall_len(n)
}

fn syscall_len(n: libc::c_long) -> io::Result<usize> {
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// A TCP rail link.
pub struct TcpLink {
    stream: TcpStream,
    label: String,
    /// Per-message tracing (`hxcomm bench breakdown`), off unless asked for.
    trace: Option<Box<LinkTrace>>,
    /// Where small writes are gathered for one send(2) ([`SEND_GATHER_MAX`] bytes).
    gather: Vec<u8>,
}

impl TcpLink {
    pub fn new(stream: TcpStream, label: String) -> Self {
        TcpLink {
            stream,
            label,
            trace: None,
            gather: Vec::with_capacity(SEND_GATHER_MAX),
        }
    }
}

impl Link for TcpLink {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(t) = self.trace.as_deref_mut() {
            return trace::tcp_read(&mut self.stream, t, buf);
        }
        recv_one(self.stream.as_raw_fd(), buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let (stream, gather) = (&mut self.stream, &mut self.gather);
        match self.trace.as_deref_mut() {
            // The breakdown times the same syscall the untraced path makes.
            Some(t) => trace::tcp_write(t, || write_gathered(stream, gather, bufs)),
            None => write_gathered(stream, gather, bufs),
        }
    }
    fn set_trace(&mut self, on: bool) -> io::Result<bool> {
        trace::set_tcp_timestamping(&self.stream, on)?;
        if let Some(t) = self.trace.as_deref_mut() {
            trace::drain_tx_stamps(self.stream.as_raw_fd(), t);
        }
        self.trace = on.then(|| Box::new(LinkTrace::new()));
        Ok(true)
    }
    fn trace(&mut self, collect: bool) -> Option<&mut LinkTrace> {
        let t = self.trace.as_deref_mut()?;
        if collect {
            trace::drain_tx_stamps(self.stream.as_raw_fd(), t);
        }
        Some(t)
    }
    fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }
    fn describe(&self) -> String {
        self.label.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::getsockopt;

    #[test]
    fn set_buffer_fixes_either_buffer_at_twice_the_bytes() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let fd = c.as_raw_fd();
        // Below the default net.core.{w,r}mem_max (212992): no privilege needed.
        assert_eq!(set_buffer(fd, Buffer::Send, 96 * 1024).unwrap(), 192 * 1024);
        assert_eq!(send_buffer(fd).unwrap(), 192 * 1024);
        assert_eq!(
            set_buffer(fd, Buffer::Receive, 80 * 1024).unwrap(),
            160 * 1024
        );
        assert_eq!(receive_buffer(fd).unwrap(), 160 * 1024);
        // Each call changes its own buffer only.
        assert_eq!(send_buffer(fd).unwrap(), 192 * 1024);
        assert!(set_buffer(-1, Buffer::Send, 96 * 1024).is_err());
        assert!(set_buffer(-1, Buffer::Receive, 96 * 1024).is_err());
        assert_eq!(Buffer::Receive.cap_sysctl(), "net.core.rmem_max");
    }

    #[test]
    fn set_notsent_lowat_changes_the_mark_and_fails_on_other_sockets() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        set_notsent_lowat(c.as_raw_fd(), 1 << 20).unwrap();
        let (v, _) =
            get_opt::<libc::c_int>(c.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT)
                .unwrap();
        assert_eq!(v, 1 << 20);
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(set_notsent_lowat(a.as_raw_fd(), 1 << 20).is_err());
    }

    #[test]
    fn set_congestion_switches_the_algorithm_or_says_why_not() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        // Always present and allowed to everyone.
        set_congestion(&c, "reno").unwrap();
        let got = getsockopt(&c, sockopt::TcpCongestion).unwrap();
        assert_eq!(got.to_str().unwrap().trim_end_matches('\0'), "reno");
        let e = set_congestion(&c, "no_such_cc").unwrap_err();
        assert!(e.to_string().contains("TCP_CONGESTION no_such_cc"), "{e}");
    }

    #[test]
    fn a_connected_socket_switches_algorithms_by_descriptor() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let fd = c.as_raw_fd();
        for name in ["reno", "cubic", "reno"] {
            set_congestion_fd(fd, name).unwrap();
            assert_eq!(congestion_fd(fd).unwrap(), name);
        }
        let e = set_congestion_fd(fd, "no_such_cc").unwrap_err();
        assert!(e.to_string().contains("TCP_CONGESTION no_such_cc"), "{e}");
        assert_eq!(
            congestion_fd(fd).unwrap(),
            "reno",
            "a refusal keeps the algorithm"
        );
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(congestion_fd(a.as_raw_fd()).is_err());
    }

    #[test]
    fn connections_start_with_the_algorithm_given_before_they_exist() {
        // Not the kernel's default (cubic or bbr): reno, present and allowed everywhere.
        let l = listen(Ipv4Addr::LOCALHOST, None, 0, Some("reno")).unwrap();
        let at = l.local_addr().unwrap();
        let c = connect_nonblocking(Ipv4Addr::LOCALHOST, None, at, Some("reno")).unwrap();
        let accepted = loop {
            match l.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("accept: {e}"),
            }
        };
        assert_eq!(congestion_fd(c.as_raw_fd()).unwrap(), "reno");
        assert_eq!(
            congestion_fd(accepted.as_raw_fd()).unwrap(),
            "reno",
            "inherited"
        );
        // A name the kernel refuses leaves the default; the engine reports it later.
        let l = listen(Ipv4Addr::LOCALHOST, None, 0, Some("no_such_cc")).unwrap();
        assert!(l.local_addr().is_ok());
    }
}
