//! The launcher side of the key-value service.
//!
//! Why it is built this way: a job has at most a few thousand ranks, each holding one connection
//! that is busy for milliseconds, so one thread per connection with blocking I/O is simple and
//! fast enough, and lets a blocked get or fence wait on a condition variable without stopping
//! anyone else. The store is one `Mutex<State>` plus one `Condvar`: every put and every fence
//! arrival wakes all waiters, who re-check their own condition.
//!
//! Hostile or broken peers: a connection is unauthenticated until it answers the nonce with the
//! right HMAC; until then it has 5 s and a fixed 40-byte message, and at most
//! [`MAX_PENDING`] such connections exist at once (more are closed on accept). Anything wrong is
//! logged with `tracing::warn!` naming the peer, and closes only that connection.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::wire::{self, Request, Response};
use crate::{auth_mac, ct_eq, fill_random, BootstrapError, Secret};

/// Most connections that may be in the handshake at once.
pub const MAX_PENDING: usize = 64;
/// How long an unauthenticated connection may take to answer the nonce.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(5);

/// The key-value service run by the launcher. Stops when [`KvServer::shutdown`] is called or it is
/// dropped.
#[derive(Debug)]
pub struct KvServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    size: u32,
    secret: Secret,
    state: Mutex<State>,
    cond: Condvar,
    stop: AtomicBool,
    pending: AtomicUsize,
    authed: AtomicUsize,
    next_id: AtomicU64,
    /// Clones of every live connection, so shutdown can unblock their threads.
    conns: Mutex<HashMap<u64, TcpStream>>,
}

#[derive(Debug)]
struct State {
    kv: HashMap<String, String>,
    /// How many times each rank has called fence.
    fences: Vec<u64>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn conns(&self) -> MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn max_authed(&self) -> usize {
        (self.size as usize).saturating_mul(4).saturating_add(64)
    }
}

impl KvServer {
    /// Binds `bind` (loopback or the management address; a wildcard address is refused so the
    /// service is never exposed on every interface) and serves on a background thread.
    pub fn start(bind: SocketAddr, size: u32, secret: Secret) -> Result<Self, BootstrapError> {
        if bind.ip().is_unspecified() {
            return Err(BootstrapError::Invalid(format!(
                "bootstrap server: refusing to listen on the wildcard address {bind}; pass 127.0.0.1:0 or the management address"
            )));
        }
        if size == 0 {
            return Err(BootstrapError::Invalid(
                "bootstrap server: job size must be at least 1".into(),
            ));
        }
        let io_err = |what| {
            move |source| BootstrapError::Io {
                addr: bind,
                rank: None,
                what,
                source,
            }
        };
        let listener = TcpListener::bind(bind).map_err(io_err("listen on"))?;
        let addr = listener.local_addr().map_err(io_err("listen on"))?;
        let shared = Arc::new(Shared {
            size,
            secret,
            state: Mutex::new(State {
                kv: HashMap::new(),
                fences: vec![0; size as usize],
            }),
            cond: Condvar::new(),
            stop: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            authed: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
        });
        let sh = shared.clone();
        let accept = std::thread::Builder::new()
            .name("hx-kv-accept".into())
            .spawn(move || accept_loop(listener, sh))
            .map_err(io_err("start thread for"))?;
        tracing::debug!(%addr, size, "bootstrap server listening");
        Ok(KvServer {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving: closes the listener and every connection, wakes blocked gets and fences.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if self.shared.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        {
            let _g = self.shared.lock();
            self.shared.cond.notify_all();
        }
        // Wake the blocking accept with a connection of our own.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        for (_, s) in self.shared.conns().drain() {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

impl Drop for KvServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn accept_loop(listener: TcpListener, sh: Arc<Shared>) {
    for conn in listener.incoming() {
        if sh.stop.load(Ordering::SeqCst) {
            break;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "bootstrap server: accept failed");
                // Out of descriptors and the like: do not spin.
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let peer = stream
            .peer_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        if sh.pending.fetch_add(1, Ordering::SeqCst) >= MAX_PENDING {
            sh.pending.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(%peer, "bootstrap server: too many unauthenticated connections, closing this one");
            continue;
        }
        let sh2 = sh.clone();
        let spawned = std::thread::Builder::new()
            .name("hx-kv-conn".into())
            .spawn(move || serve_conn(stream, peer, sh2));
        if let Err(e) = spawned {
            sh.pending.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(%peer, error = %e, "bootstrap server: cannot start a thread for the connection");
        }
    }
}

/// Decrements a counter when dropped (unless disarmed).
struct CountGuard<'a>(Option<&'a AtomicUsize>);
impl CountGuard<'_> {
    fn release(&mut self) {
        if let Some(c) = self.0.take() {
            c.fetch_sub(1, Ordering::SeqCst);
        }
    }
}
impl Drop for CountGuard<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

fn serve_conn(mut stream: TcpStream, peer: SocketAddr, sh: Arc<Shared>) {
    let mut pending = CountGuard(Some(&sh.pending));
    let id = sh.next_id.fetch_add(1, Ordering::SeqCst);
    match stream.try_clone() {
        Ok(c) => {
            sh.conns().insert(id, c);
        }
        Err(e) => {
            tracing::warn!(%peer, error = %e, "bootstrap server: cannot register connection");
            return;
        }
    }
    // The shutdown may have drained the registry just before we registered.
    if sh.stop.load(Ordering::SeqCst) {
        sh.conns().remove(&id);
        return;
    }
    let rank = match authenticate(&mut stream, peer, &sh) {
        Ok(r) => r,
        Err(why) => {
            if !sh.stop.load(Ordering::SeqCst) {
                tracing::warn!(%peer, "bootstrap server: rejected connection: {why}");
            }
            sh.conns().remove(&id);
            return;
        }
    };
    pending.release();
    if sh.authed.fetch_add(1, Ordering::SeqCst) >= sh.max_authed() {
        sh.authed.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!(%peer, rank, "bootstrap server: too many connections, closing this one");
        sh.conns().remove(&id);
        return;
    }
    let _authed = CountGuard(Some(&sh.authed));
    tracing::debug!(%peer, rank, "bootstrap server: rank connected");
    if let Err(why) = serve_requests(&mut stream, rank, &sh) {
        if !sh.stop.load(Ordering::SeqCst) {
            tracing::warn!(%peer, rank, "bootstrap server: closing connection: {why}");
        }
    }
    sh.conns().remove(&id);
}

fn authenticate(stream: &mut TcpStream, _peer: SocketAddr, sh: &Shared) -> Result<u32, String> {
    stream
        .set_read_timeout(Some(AUTH_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(AUTH_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let mut nonce = [0u8; wire::NONCE_LEN];
    fill_random(&mut nonce).map_err(|e| format!("no random nonce: {e}"))?;
    let mut hello = [0u8; wire::HELLO_LEN];
    hello[..4].copy_from_slice(&wire::MAGIC);
    hello[4..].copy_from_slice(&nonce);
    stream
        .write_all(&hello)
        .map_err(|e| format!("sending hello: {e}"))?;
    let mut auth = [0u8; wire::AUTH_LEN];
    read_exact_deadline(stream, &mut auth, Instant::now() + AUTH_TIMEOUT).map_err(|e| {
        if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            format!("no credentials within {} s", AUTH_TIMEOUT.as_secs_f64())
        } else {
            format!("reading credentials: {e}")
        }
    })?;
    if auth[..4] != wire::MAGIC {
        return Err(format!(
            "bad magic {:02x?} (not an hxcomm bootstrap client)",
            &auth[..4]
        ));
    }
    let rank = u32::from_le_bytes([auth[4], auth[5], auth[6], auth[7]]);
    let expect = auth_mac(&sh.secret, &nonce, rank);
    // Check the MAC before looking at the rank, so a stranger learns nothing about the job size.
    if !ct_eq(&expect, &auth[8..]) {
        return Err(format!("wrong job secret (claimed rank {rank})"));
    }
    if rank >= sh.size {
        return Err(format!("rank {rank} is not below the job size {}", sh.size));
    }
    stream
        .write_all(&wire::encode_response(&Response::Welcome { size: sh.size }))
        .map_err(|e| format!("sending welcome: {e}"))?;
    stream.set_read_timeout(None).map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    Ok(rank)
}

/// `read_exact` with one deadline for the whole buffer, so a peer dribbling one byte at a time
/// cannot stretch the handshake.
fn read_exact_deadline(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn serve_requests(stream: &mut TcpStream, rank: u32, sh: &Shared) -> Result<(), String> {
    let mut buf = Vec::new();
    loop {
        let mut len = [0u8; 4];
        match stream.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("reading request: {e}")),
        }
        let n = u32::from_le_bytes(len) as usize;
        if n > wire::MAX_FRAME {
            return Err(format!(
                "request frame of {n} bytes exceeds the maximum {}",
                wire::MAX_FRAME
            ));
        }
        buf.clear();
        buf.extend_from_slice(&len);
        buf.resize(4 + n, 0);
        stream
            .read_exact(&mut buf[4..])
            .map_err(|e| format!("reading request body: {e}"))?;
        let req = match wire::decode_request(&buf) {
            Ok((req, _)) => req,
            Err(e) => {
                let _ = stream.write_all(&wire::encode_response(&Response::Error(format!(
                    "malformed request: {e}"
                ))));
                return Err(format!("malformed request: {e}"));
            }
        };
        let resp = handle(req, rank, sh);
        stream
            .write_all(&wire::encode_response(&resp))
            .map_err(|e| format!("sending response: {e}"))?;
    }
}

fn handle(req: Request, rank: u32, sh: &Shared) -> Response {
    match req {
        Request::Put { key, value } => {
            let mut st = sh.lock();
            st.kv.insert(key, value);
            sh.cond.notify_all();
            Response::Ok
        }
        Request::Get { key, timeout_ms } => {
            let deadline = Instant::now() + Duration::from_millis(timeout_ms.into());
            let mut st = sh.lock();
            loop {
                if let Some(v) = st.kv.get(&key) {
                    return Response::Value(v.clone());
                }
                match wait(sh, st, deadline) {
                    Some(g) => st = g,
                    None => return Response::Timeout,
                }
            }
        }
        Request::Fence { timeout_ms } => {
            let deadline = Instant::now() + Duration::from_millis(timeout_ms.into());
            let mut st = sh.lock();
            let r = rank as usize;
            st.fences[r] += 1;
            let mine = st.fences[r];
            sh.cond.notify_all();
            loop {
                if st.fences.iter().all(|&c| c >= mine) {
                    return Response::Ok;
                }
                match wait(sh, st, deadline) {
                    Some(g) => st = g,
                    None => return Response::Timeout,
                }
            }
        }
    }
}

/// Waits for a change; `None` when the deadline passed or the server is stopping.
fn wait<'a>(
    sh: &'a Shared,
    st: MutexGuard<'a, State>,
    deadline: Instant,
) -> Option<MutexGuard<'a, State>> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() || sh.stop.load(Ordering::SeqCst) {
        return None;
    }
    let (g, _) = sh
        .cond
        .wait_timeout(st, left)
        .unwrap_or_else(|e| e.into_inner());
    if sh.stop.load(Ordering::SeqCst) {
        return None;
    }
    Some(g)
}
