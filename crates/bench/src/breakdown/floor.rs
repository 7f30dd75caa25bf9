//! The raw floors beside hxcomm's figures: a plain TCP ping-pong between the rail's own
//! addresses (busy-polling and blocking), and for shared memory a cache-line ping-pong between
//! the two processes (one 8-byte counter per direction, each on its own cache line).

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::num::NonZeroUsize;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};

use hx_engine::trace::now_ns;

/// How long one side waits for the other before giving up (a peer that died).
const PATIENCE: Duration = Duration::from_secs(20);

fn stalled() -> String {
    format!("the peer did not answer for {PATIENCE:?}")
}

/// A listener on `ip` (port chosen by the kernel), nonblocking.
pub fn listen(ip: IpAddr) -> Result<TcpListener, String> {
    let l = TcpListener::bind((ip, 0)).map_err(|e| format!("raw ping-pong: bind {ip}: {e}"))?;
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    Ok(l)
}

/// Accepts one connection within [`PATIENCE`].
pub fn accept(l: &TcpListener) -> Result<TcpStream, String> {
    let t0 = Instant::now();
    loop {
        match l.accept() {
            Ok((s, _)) => return Ok(s),
            Err(e) if e.kind() == ErrorKind::WouldBlock && t0.elapsed() < PATIENCE => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Err(stalled()),
            Err(e) => return Err(format!("raw ping-pong: accept: {e}")),
        }
    }
}

/// Connects from `local`'s address (port chosen by the kernel) to `remote` (IPv4).
pub fn connect(local: IpAddr, remote: SocketAddr) -> Result<TcpStream, String> {
    use nix::sys::socket::{self as so, AddressFamily, SockFlag, SockType, SockaddrIn};
    let (IpAddr::V4(l), SocketAddr::V4(r)) = (local, remote) else {
        return Err(format!("raw ping-pong: IPv4 only ({local} -> {remote})"));
    };
    let fd = so::socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| format!("raw ping-pong: socket: {e}"))?;
    so::bind(fd.as_raw_fd(), &SockaddrIn::from(SocketAddrV4::new(l, 0)))
        .map_err(|e| format!("raw ping-pong: bind {local}: {e}"))?;
    so::connect(fd.as_raw_fd(), &SockaddrIn::from(r))
        .map_err(|e| format!("raw ping-pong: connect {remote}: {e}"))?;
    Ok(TcpStream::from(fd))
}

/// Ping-pong of `size`-byte messages over `s`: `iters` timed round trips after `warmup`;
/// the initiator's round-trip times in nanoseconds (the responder returns an empty list).
/// `busy`: nonblocking reads in a loop; otherwise blocking reads.
pub fn tcp_pingpong(
    s: &mut TcpStream,
    initiator: bool,
    size: usize,
    iters: u32,
    warmup: u32,
    busy: bool,
) -> Result<Vec<u64>, String> {
    let e = |e: std::io::Error| format!("raw ping-pong: {e}");
    s.set_nodelay(true).map_err(e)?;
    s.set_nonblocking(busy).map_err(e)?;
    s.set_read_timeout((!busy).then_some(PATIENCE)).map_err(e)?;
    let msg = vec![0x5au8; size.max(1)];
    let mut buf = vec![0u8; size.max(1)];
    let mut rtts = Vec::with_capacity(iters as usize);
    for i in 0..warmup + iters {
        let t0 = now_ns();
        if initiator {
            send_all(s, &msg).map_err(e)?;
            recv_all(s, &mut buf, busy)?;
        } else {
            recv_all(s, &mut buf, busy)?;
            send_all(s, &msg).map_err(e)?;
        }
        if initiator && i >= warmup {
            rtts.push(now_ns().saturating_sub(t0));
        }
    }
    Ok(rtts)
}

/// OSU's bandwidth method over plain TCP: `iters` times, a window of `window` writes of `size`
/// bytes each, one way (the initiator writes, the other side reads the window and answers one
/// byte) or both ways at once (`both`: each side writes its window and reads the other's).
/// Busy-polling nonblocking sockets. The initiator's figure in MB/s (both directions' bytes
/// for `both`); the other side gets 0.
pub fn tcp_window(
    s: &mut TcpStream,
    initiator: bool,
    size: usize,
    window: usize,
    iters: u32,
    both: bool,
) -> Result<f64, String> {
    let e = |e: std::io::Error| format!("raw window: {e}");
    s.set_nodelay(true).map_err(e)?;
    s.set_nonblocking(true).map_err(e)?;
    let size = size.max(1);
    let msg = vec![0x5au8; size];
    let per_window = size * window;
    let mut rbuf = vec![0u8; per_window.min(1 << 20)];
    let sends = both || initiator;
    let recvs = both || !initiator;
    let t0 = Instant::now();
    for _ in 0..iters {
        let (mut sent, mut got, mut off) = (0usize, 0usize, 0usize);
        let mut last = Instant::now();
        while (sends && sent < per_window) || (recvs && got < per_window) {
            let mut moved = false;
            if sends && sent < per_window {
                match s.write(&msg[off..]) {
                    Ok(k) => {
                        sent += k;
                        off = (off + k) % size;
                        moved = k > 0;
                    }
                    Err(x)
                        if matches!(x.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                    Err(x) => return Err(e(x)),
                }
            }
            if recvs && got < per_window {
                let n = rbuf.len().min(per_window - got);
                match s.read(&mut rbuf[..n]) {
                    Ok(0) => return Err("raw window: the peer closed".into()),
                    Ok(k) => {
                        got += k;
                        moved = true;
                    }
                    Err(x)
                        if matches!(x.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                    Err(x) => return Err(e(x)),
                }
            }
            if moved {
                last = Instant::now();
            } else if last.elapsed() > PATIENCE {
                return Err(stalled());
            }
        }
        if !both {
            let mut ack = [0u8; 1];
            if initiator {
                recv_all(s, &mut ack, true)?;
            } else {
                send_all(s, &ack).map_err(e)?;
            }
        }
    }
    if !initiator {
        return Ok(0.0);
    }
    let bytes = (per_window * iters as usize) as f64 * if both { 2.0 } else { 1.0 };
    Ok(bytes / t0.elapsed().as_secs_f64().max(1e-9) / 1e6)
}

fn send_all(s: &mut TcpStream, mut b: &[u8]) -> std::io::Result<()> {
    while !b.is_empty() {
        match s.write(b) {
            Ok(n) => b = &b[n..],
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn recv_all(s: &mut TcpStream, b: &mut [u8], busy: bool) -> Result<(), String> {
    let mut got = 0;
    let t0 = Instant::now();
    let mut spins = 0u32;
    while got < b.len() {
        match s.read(&mut b[got..]) {
            Ok(0) => return Err("raw ping-pong: the peer closed".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock && busy => {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(1 << 16) && t0.elapsed() > PATIENCE {
                    return Err(stalled());
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Err(stalled()),
            Err(e) => return Err(format!("raw ping-pong: {e}")),
        }
    }
    Ok(())
}

/// A page shared by the two ranks: two counters, each on its own 128-byte line.
pub struct SharedPage {
    ptr: NonNull<std::ffi::c_void>,
    len: NonZeroUsize,
}

const PAGE: usize = 4096;

impl SharedPage {
    /// Maps `file` (at least a page long) shared.
    pub fn map(file: &File) -> Result<SharedPage, String> {
        let len = NonZeroUsize::new(PAGE).ok_or("zero page")?;
        let have = file.metadata().map_err(|e| e.to_string())?.len();
        if have < PAGE as u64 {
            return Err(format!("shared page: file has {have} bytes, need {PAGE}"));
        }
        // SAFETY: a fresh mapping chosen by the kernel (no address given) of a file we checked
        // is at least `len` long; nothing else in this process is affected.
        let ptr = unsafe {
            mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                file,
                0,
            )
        }
        .map_err(|e| format!("shared page: mmap: {e}"))?;
        Ok(SharedPage { ptr, len })
    }

    fn counter(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < 2);
        // SAFETY: offsets 0 and 128 are inside the live page-aligned mapping and 8-aligned;
        // AtomicU64 has u64's layout, every bit pattern is valid, and the other process only
        // accesses these words atomically.
        unsafe { &*(self.ptr.as_ptr().cast::<u8>().add(128 * i) as *const AtomicU64) }
    }

    /// `iters` timed round trips after `warmup`, in batches of `batch`: the initiator's
    /// one-way time per batch (half the batch's time per round trip, ns); no clock in the loop.
    pub fn pingpong(
        &self,
        initiator: bool,
        iters: u64,
        warmup: u64,
        batch: u64,
    ) -> Result<Vec<f64>, String> {
        let (ping, pong) = (self.counter(0), self.counter(1));
        let batch = batch.max(1);
        let mut out = Vec::new();
        let mut i = 0u64;
        let total = warmup + iters.div_ceil(batch) * batch;
        let mut t0 = now_ns();
        while i < total {
            i += 1;
            if initiator {
                ping.store(i, Ordering::Release);
                wait_for(pong, i)?;
            } else {
                wait_for(ping, i)?;
                pong.store(i, Ordering::Release);
            }
            if i > warmup && (i - warmup).is_multiple_of(batch) {
                let t = now_ns();
                out.push(t.saturating_sub(t0) as f64 / batch as f64 / 2.0);
                t0 = t;
            } else if i == warmup {
                t0 = now_ns();
            }
        }
        Ok(if initiator { out } else { Vec::new() })
    }
}

impl SharedPage {
    fn word(&self, i: usize) -> &AtomicU32 {
        debug_assert!(i < 2);
        // SAFETY: offsets 256 and 384 are inside the live page-aligned mapping and 4-aligned;
        // AtomicU32 has u32's layout, and the other process only uses these words atomically
        // (and in futex calls, which the kernel performs atomically).
        unsafe { &*(self.ptr.as_ptr().cast::<u8>().add(256 + 128 * i) as *const AtomicU32) }
    }

    /// The blocking counterpart: each side sleeps in FUTEX_WAIT on its counter until the other
    /// stores and FUTEX_WAKEs it (what any sleeping receiver pays at least). The initiator's
    /// round-trip times (ns).
    pub fn futex_pingpong(
        &self,
        initiator: bool,
        iters: u32,
        warmup: u32,
    ) -> Result<Vec<u64>, String> {
        let (ping, pong) = (self.word(0), self.word(1));
        let mut rtts = Vec::with_capacity(iters as usize);
        for i in 1..=warmup + iters {
            let t0 = now_ns();
            if initiator {
                ping.store(i, Ordering::Release);
                futex_wake(ping);
                futex_wait_for(pong, i)?;
            } else {
                futex_wait_for(ping, i)?;
                pong.store(i, Ordering::Release);
                futex_wake(pong);
            }
            if initiator && i > warmup {
                rtts.push(now_ns().saturating_sub(t0));
            }
        }
        Ok(rtts)
    }
}

fn futex_wake(w: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a live, aligned word of a shared mapping (not a private futex: the
    // other process waits on the same physical word); no memory is written by the kernel.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            w.as_ptr(),
            libc::FUTEX_WAKE,
            1,
            0usize,
            0usize,
            0,
        );
    }
}

fn futex_wait_for(w: &AtomicU32, v: u32) -> Result<(), String> {
    let t0 = Instant::now();
    let ts = libc::timespec {
        tv_sec: 1,
        tv_nsec: 0,
    };
    loop {
        let seen = w.load(Ordering::Acquire);
        if seen == v {
            return Ok(());
        }
        if t0.elapsed() > PATIENCE {
            return Err(stalled());
        }
        // SAFETY: FUTEX_WAIT on a live, aligned word of a shared mapping with a valid timeout;
        // the kernel only reads the word. Returns at once if the word is no longer `seen`.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                w.as_ptr(),
                libc::FUTEX_WAIT,
                seen,
                &ts as *const libc::timespec,
                0usize,
                0,
            );
        }
    }
}

fn wait_for(c: &AtomicU64, v: u64) -> Result<(), String> {
    let mut spins = 0u32;
    let mut since = None::<Instant>;
    while c.load(Ordering::Acquire) != v {
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1 << 20)
            && since.get_or_insert_with(Instant::now).elapsed() > PATIENCE
        {
            return Err(stalled());
        }
    }
    Ok(())
}

impl Drop for SharedPage {
    fn drop(&mut self) {
        // SAFETY: exactly the region mmap returned; the counters' borrows end with `self`.
        let _ = unsafe { munmap(self.ptr, self.len.get()) };
    }
}

/// A new page-sized file under /dev/shm for the cache-line ping-pong (the caller unlinks it
/// once both ranks mapped it).
pub fn create_page_file() -> Result<(File, String), String> {
    let path = format!(
        "/dev/shm/hxcomm-breakdown-{}-{}",
        std::process::id(),
        now_ns()
    );
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("{path}: {e}"))?;
    f.set_len(PAGE as u64).map_err(|e| format!("{path}: {e}"))?;
    Ok((f, path))
}

/// Opens the page file another rank created.
pub fn open_page_file(path: &str) -> Result<File, String> {
    if !path.starts_with("/dev/shm/hxcomm-breakdown-") || path.contains("..") {
        return Err(format!("unexpected shared page path {path:?}"));
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| format!("{path}: {e}"))
}

/// Whether `prog` is on PATH.
pub fn have(prog: &str) -> bool {
    hx_testbed::proc::have(prog)
}

/// Whether something listens on TCP `port` in this network namespace (/proc/net/tcp).
pub fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/tcp").is_ok_and(|t| {
        t.lines().skip(1).any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
        })
    })
}

/// A sockperf server on `ip`: a free port, the server started on it, and nothing returned
/// until it listens. The caller kills it (by its handle) when done.
pub fn sockperf_server(ip: IpAddr) -> Result<(std::process::Child, u16), String> {
    let port = listen(ip)?.local_addr().map_err(|e| e.to_string())?.port();
    let mut child = std::process::Command::new("sockperf")
        .args([
            "sr",
            "--tcp",
            "-i",
            &ip.to_string(),
            "-p",
            &port.to_string(),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("sockperf server: {e}"))?;
    let t0 = Instant::now();
    while !listening(port) {
        if t0.elapsed() > Duration::from_secs(10) || matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("sockperf server on {ip}:{port} did not start"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok((child, port))
}

/// sockperf's ping-pong (`--tcp`, 14 B, its minimum; `busy`: `--nonblocked`) for `secs`
/// seconds: its median one-way latency (us; its average if it prints no percentiles).
pub fn sockperf_client(remote: SocketAddr, busy: bool, secs: u32) -> Result<f64, String> {
    let mut cmd = std::process::Command::new("sockperf");
    cmd.args(["ping-pong", "--tcp"]);
    if busy {
        cmd.arg("--nonblocked");
    }
    let out = cmd
        .args([
            "-i",
            &remote.ip().to_string(),
            "-p",
            &remote.port().to_string(),
        ])
        .args(["-t", &secs.to_string(), "-m", "14"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("sockperf: {e}"))?;
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let s = crate::compare::parse::sockperf(&text)?;
    Ok(s.p50_us.unwrap_or(s.avg_us))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn listening_ports() {
        let l = listen(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listening(port));
        drop(l);
        assert!(!listening(port));
    }

    #[test]
    fn tcp_floor_on_loopback() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let l = listen(lo).unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let mut s = accept(&l).unwrap();
            tcp_pingpong(&mut s, false, 8, 50, 5, true).unwrap();
            tcp_pingpong(&mut s, false, 8, 50, 5, false).unwrap()
        });
        let mut c = connect(lo, addr).unwrap();
        let busy = tcp_pingpong(&mut c, true, 8, 50, 5, true).unwrap();
        let block = tcp_pingpong(&mut c, true, 8, 50, 5, false).unwrap();
        assert!(t.join().unwrap().is_empty());
        assert_eq!((busy.len(), block.len()), (50, 50));
        assert!(busy.iter().chain(&block).all(|&r| r > 0));
    }

    #[test]
    fn cacheline_floor_between_threads() {
        let (f, path) = create_page_file().unwrap();
        let g = open_page_file(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(open_page_file("/etc/passwd").is_err());
        let t = std::thread::spawn(move || {
            let p = SharedPage::map(&g).unwrap();
            p.pingpong(false, 1000, 100, 100).unwrap()
        });
        let p = SharedPage::map(&f).unwrap();
        let v = p.pingpong(true, 1000, 100, 100).unwrap();
        let q = t.join().unwrap();
        assert!(q.is_empty());
        assert_eq!(v.len(), 10);
        assert!(v.iter().all(|&x| x > 0.0));
        let g = open_page_file(&path);
        assert!(g.is_err(), "unlinked");
        let f2 = f.try_clone().unwrap();
        let t = std::thread::spawn(move || {
            let p = SharedPage::map(&f2).unwrap();
            p.futex_pingpong(false, 200, 20).unwrap()
        });
        let w = p.futex_pingpong(true, 200, 20).unwrap();
        assert!(t.join().unwrap().is_empty());
        assert_eq!(w.len(), 200);
    }
}
