//! TCP rails. Each rail's sockets are bound to the rail's device (SO_BINDTODEVICE, set before
//! bind/connect) so its traffic leaves through the intended NIC even when routing would pick
//! another. TCP_NOTSENT_LOWAT keeps little unsent data in each socket: a socket then reports room
//! only when its rail is actually draining, which is what lets rails pull work at their own pace.

use std::io::{self, IoSlice, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::Link;

/// Socket settings of a rail.
#[derive(Debug, Clone)]
pub struct RailOptions {
    /// Unsent bytes a socket may hold before it reports "full" (0: kernel default).
    pub notsent_lowat: u32,
    pub nodelay: bool,
}

impl Default for RailOptions {
    fn default() -> Self {
        RailOptions {
            notsent_lowat: 128 * 1024,
            nodelay: true,
        }
    }
}

fn ctx(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A listener on `ip` (port chosen by the kernel), bound to `device` if given. Never binds the
/// wildcard address: callers pass a rail or loopback address.
pub fn listen(ip: Ipv4Addr, device: Option<&str>) -> io::Result<TcpListener> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if let Some(dev) = device {
        s.bind_device(Some(dev.as_bytes()))
            .map_err(|e| ctx(e, format!("SO_BINDTODEVICE {dev}")))?;
    }
    let addr = SocketAddr::V4(SocketAddrV4::new(ip, 0));
    s.bind(&addr.into())
        .map_err(|e| ctx(e, format!("bind {addr}")))?;
    s.listen(128)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Connects from `local` (bound to `device` if given) to `remote`, within `timeout`.
pub fn connect(
    local: Ipv4Addr,
    device: Option<&str>,
    remote: SocketAddr,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    if let Some(dev) = device {
        s.bind_device(Some(dev.as_bytes()))
            .map_err(|e| ctx(e, format!("SO_BINDTODEVICE {dev}")))?;
    }
    s.bind(&SocketAddr::V4(SocketAddrV4::new(local, 0)).into())
        .map_err(|e| ctx(e, format!("bind {local}")))?;
    s.connect_timeout(&remote.into(), timeout)
        .map_err(|e| ctx(e, format!("connect {local} -> {remote}")))?;
    Ok(s.into())
}

/// Applies rail socket options and makes the stream nonblocking.
pub fn tune(stream: &TcpStream, opts: &RailOptions) -> io::Result<()> {
    stream.set_nodelay(opts.nodelay)?;
    if opts.notsent_lowat > 0 {
        let v: libc::c_int = opts.notsent_lowat as libc::c_int;
        // SAFETY: valid fd and a c_int option value of the right size.
        let rc = unsafe {
            libc::setsockopt(
                stream.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_NOTSENT_LOWAT,
                &v as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(ctx(io::Error::last_os_error(), "TCP_NOTSENT_LOWAT".into()));
        }
    }
    stream.set_nonblocking(true)
}

/// A TCP rail link.
pub struct TcpLink {
    stream: TcpStream,
    label: String,
}

impl TcpLink {
    pub fn new(stream: TcpStream, label: String) -> Self {
        TcpLink { stream, label }
    }
}

impl Link for TcpLink {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.stream.write_vectored(bufs)
    }
    fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }
    fn describe(&self) -> String {
        self.label.clone()
    }
}
