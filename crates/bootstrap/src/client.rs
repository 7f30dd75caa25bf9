//! The rank side of the key-value service: one blocking TCP connection, one request at a time.
//!
//! Why it is built this way: bootstrap happens once, before the rails exist, and moves a few
//! kilobytes, so a plain blocking socket is the simplest correct thing. The get/fence timeout is
//! sent with the request, so the server answers "timed out" itself and the connection stays in
//! step; the socket's own read timeout is only a backstop (a little longer) for a dead server.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::wire::{self, Request, Response};
use crate::{auth_mac, check_key_value, timeout_from, Bootstrap, BootstrapError, Secret};

/// How long connecting and the handshake may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Extra time the socket waits beyond a request's own timeout before declaring the server dead.
const SLACK: Duration = Duration::from_secs(10);

/// A connection to a [`crate::KvServer`]; implements [`Bootstrap`].
#[derive(Debug)]
pub struct KvClient {
    stream: TcpStream,
    addr: SocketAddr,
    rank: u32,
    size: u32,
    timeout: Duration,
    /// Set when a request failed half-way: the stream may be out of step.
    broken: bool,
}

impl KvClient {
    /// Connects to the server at `addr` and authenticates as `rank` of `size` with `secret`.
    /// The get/fence timeout comes from `HX_BOOTSTRAP_TIMEOUT` (seconds, default 60).
    pub fn connect(
        addr: SocketAddr,
        rank: u32,
        size: u32,
        secret: &Secret,
    ) -> Result<Self, BootstrapError> {
        if rank >= size {
            return Err(BootstrapError::Invalid(format!(
                "bootstrap: rank {rank} is not below the job size {size}"
            )));
        }
        let timeout = timeout_from(
            std::env::var_os(crate::ENV_TIMEOUT).map(|v| v.to_string_lossy().into_owned()),
        )?;
        let io_err = |what: &'static str| {
            move |source: io::Error| BootstrapError::Io {
                addr,
                rank: Some(rank),
                what,
                source,
            }
        };
        let mut stream =
            TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(io_err("connect to"))?;
        stream.set_nodelay(true).map_err(io_err("configure"))?;
        stream
            .set_read_timeout(Some(CONNECT_TIMEOUT))
            .map_err(io_err("configure"))?;
        stream
            .set_write_timeout(Some(CONNECT_TIMEOUT))
            .map_err(io_err("configure"))?;

        let mut hello = [0u8; wire::HELLO_LEN];
        stream
            .read_exact(&mut hello)
            .map_err(io_err("read hello from"))?;
        if hello[..4] != wire::MAGIC {
            return Err(BootstrapError::Protocol {
                addr,
                rank,
                msg: format!(
                    "hello starts with {:02x?}, not {:?}: not an hxcomm bootstrap server",
                    &hello[..4],
                    std::str::from_utf8(&wire::MAGIC).unwrap_or("")
                ),
            });
        }
        let nonce = &hello[4..];
        let mut auth = Vec::with_capacity(wire::AUTH_LEN);
        auth.extend_from_slice(&wire::MAGIC);
        auth.extend_from_slice(&rank.to_le_bytes());
        auth.extend_from_slice(&auth_mac(secret, nonce, rank));
        stream
            .write_all(&auth)
            .map_err(io_err("send credentials to"))?;

        let mut client = KvClient {
            stream,
            addr,
            rank,
            size,
            timeout,
            broken: false,
        };
        match client.read_response() {
            Ok(Response::Welcome { size: s }) if s == size => {}
            Ok(Response::Welcome { size: s }) => {
                return Err(BootstrapError::Auth {
                    addr,
                    rank,
                    msg: format!("the server runs a job of size {s}, this rank expects {size}"),
                })
            }
            Ok(other) => {
                return Err(BootstrapError::Protocol {
                    addr,
                    rank,
                    msg: format!("expected a welcome, got {other:?}"),
                })
            }
            Err(BootstrapError::Io { source, .. })
                if matches!(
                    source.kind(),
                    io::ErrorKind::UnexpectedEof
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::BrokenPipe
                ) =>
            {
                return Err(BootstrapError::Auth {
                    addr,
                    rank,
                    msg: "connection closed during authentication (wrong job secret, rank out of range, or server overloaded)".into(),
                })
            }
            Err(e) => return Err(e),
        }
        client.stream.set_read_timeout(None).ok();
        client
            .stream
            .set_write_timeout(Some(Duration::from_secs(30)))
            .ok();
        Ok(client)
    }

    /// Changes the get/fence timeout.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The get/fence timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The server's address.
    pub fn server_addr(&self) -> SocketAddr {
        self.addr
    }

    fn io_err(&self, what: &'static str) -> impl Fn(io::Error) -> BootstrapError {
        let (addr, rank) = (self.addr, self.rank);
        move |source| BootstrapError::Io {
            addr,
            rank: Some(rank),
            what,
            source,
        }
    }

    fn read_response(&mut self) -> Result<Response, BootstrapError> {
        let mut len = [0u8; 4];
        self.stream
            .read_exact(&mut len)
            .map_err(self.io_err("read from"))?;
        let n = u32::from_le_bytes(len) as usize;
        if n > wire::MAX_FRAME + 16 {
            return Err(BootstrapError::Protocol {
                addr: self.addr,
                rank: self.rank,
                msg: format!("response frame of {n} bytes is too large"),
            });
        }
        let mut buf = vec![0u8; 4 + n];
        buf[..4].copy_from_slice(&len);
        self.stream
            .read_exact(&mut buf[4..])
            .map_err(self.io_err("read from"))?;
        wire::decode_response(&buf)
            .map(|(r, _)| r)
            .map_err(|e| BootstrapError::Protocol {
                addr: self.addr,
                rank: self.rank,
                msg: e.to_string(),
            })
    }

    /// Sends one request and reads its response; `wait` is how long the server may take.
    fn call(&mut self, req: &Request, wait: Duration) -> Result<Response, BootstrapError> {
        if self.broken {
            return Err(BootstrapError::Protocol {
                addr: self.addr,
                rank: self.rank,
                msg: "connection is unusable after an earlier failure".into(),
            });
        }
        self.broken = true;
        self.stream
            .set_read_timeout(Some(wait + SLACK))
            .map_err(self.io_err("configure"))?;
        self.stream
            .write_all(&wire::encode_request(req))
            .map_err(self.io_err("send to"))?;
        let resp = self.read_response()?;
        self.broken = false;
        if let Response::Error(msg) = resp {
            return Err(BootstrapError::Server {
                addr: self.addr,
                rank: self.rank,
                msg,
            });
        }
        Ok(resp)
    }

    fn timeout_ms(&self) -> u32 {
        self.timeout.as_millis().min(u32::MAX as u128) as u32
    }

    fn unexpected(&self, r: Response) -> BootstrapError {
        BootstrapError::Protocol {
            addr: self.addr,
            rank: self.rank,
            msg: format!("unexpected response {r:?}"),
        }
    }
}

impl Bootstrap for KvClient {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn put(&mut self, key: &str, value: &str) -> Result<(), BootstrapError> {
        check_key_value(key, Some(value))?;
        let req = Request::Put {
            key: key.to_owned(),
            value: value.to_owned(),
        };
        match self.call(&req, Duration::from_secs(20))? {
            Response::Ok => Ok(()),
            r => Err(self.unexpected(r)),
        }
    }

    fn get(&mut self, key: &str) -> Result<String, BootstrapError> {
        check_key_value(key, None)?;
        let req = Request::Get {
            key: key.to_owned(),
            timeout_ms: self.timeout_ms(),
        };
        match self.call(&req, self.timeout)? {
            Response::Value(v) => Ok(v),
            Response::Timeout => Err(BootstrapError::GetTimeout {
                addr: Some(self.addr),
                rank: self.rank,
                key: key.to_owned(),
                timeout: self.timeout,
            }),
            r => Err(self.unexpected(r)),
        }
    }

    fn fence(&mut self) -> Result<(), BootstrapError> {
        let req = Request::Fence {
            timeout_ms: self.timeout_ms(),
        };
        match self.call(&req, self.timeout)? {
            Response::Ok => Ok(()),
            Response::Timeout => Err(BootstrapError::FenceTimeout {
                addr: self.addr,
                rank: self.rank,
                timeout: self.timeout,
            }),
            r => Err(self.unexpected(r)),
        }
    }

    /// The server's address, unless it is on loopback (one host: no management network).
    fn management_ip(&self) -> Option<std::net::Ipv4Addr> {
        match self.addr {
            SocketAddr::V4(a) if !a.ip().is_loopback() => Some(*a.ip()),
            _ => None,
        }
    }
}
