//! Per-message tracing of links, for `hxcomm bench breakdown` (off unless a link's
//! [`Link::set_trace`](crate::Link::set_trace) turned it on; the untraced paths only test one
//! field for `None`).
//!
//! A traced link records, in a [`LinkTrace`], for each write the clock just before and after the
//! send syscall (TCP) or the moment of the ring publish (shared memory), and for each read the
//! clock just before and after the receive syscall and, for TCP, the kernel's software receive
//! timestamp of the data (`SOF_TIMESTAMPING_RX_SOFTWARE`, from the `SCM_TIMESTAMPING` control
//! message of `recvmsg`). A traced TCP socket also has the kernel stamp each write's last byte
//! when it enters the queueing layer (`SOF_TIMESTAMPING_TX_SCHED`) and when it is handed to the
//! driver (`SOF_TIMESTAMPING_TX_SOFTWARE`); those come back on the socket's error queue
//! (`MSG_ERRQUEUE`, `OPT_TSONLY`: no copy of the data), keyed by the byte's offset since tracing
//! began (`OPT_ID`, `OPT_ID_TCP`), and [`drain_tx_stamps`] collects them.
//!
//! All times are `CLOCK_REALTIME` nanoseconds ([`now_ns`]), the clock of the kernel's software
//! timestamps, so the stamps of two processes on one machine compare directly.

use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use nix::errno::Errno;
use nix::sys::socket::{
    getpeername, getsockname, recvmsg, setsockopt, ControlMessageOwned, MsgFlags, SockaddrIn,
};
use nix::sys::time::TimeSpec;
use nix::{setsockopt_impl, sockopt_impl};

// The kernel's flags (linux/net_tstamp.h); libc has most of them, not OPT_ID_TCP (Linux 6.2).
const TX_SCHED: libc::c_int = 1 << 8;
const TX_SOFTWARE: libc::c_int = 1 << 1;
const RX_SOFTWARE: libc::c_int = 1 << 3;
const SOFTWARE: libc::c_int = 1 << 4;
const OPT_ID: libc::c_int = 1 << 7;
const OPT_TSONLY: libc::c_int = 1 << 11;
const OPT_ID_TCP: libc::c_int = 1 << 16;
/// `ee_info` of an error-queue timestamp (linux/errqueue.h).
const SCM_TSTAMP_SND: u32 = 0;
const SCM_TSTAMP_SCHED: u32 = 1;
/// `ee_origin` of an error-queue timestamp.
const SO_EE_ORIGIN_TIMESTAMPING: u8 = 4;

// SO_TIMESTAMPING as a plain c_int, so that every flag above can be set.
sockopt_impl!(
    /// SO_TIMESTAMPING with the kernel's raw flags.
    SoTimestamping,
    SetOnly,
    libc::SOL_SOCKET,
    libc::SO_TIMESTAMPING,
    libc::c_int
);

/// Links traced now, process-wide: the engine looks at this (one relaxed load) before it asks
/// a link to stamp the end of its parsing.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Whether any link of this process is traced.
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed) != 0
}

/// `CLOCK_REALTIME` in nanoseconds (the clock of the kernel's software timestamps).
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A kernel `timespec` in nanoseconds; `None` for the all-zero "no timestamp" value or a
/// negative one.
pub fn timespec_ns(ts: &TimeSpec) -> Option<u64> {
    let (s, ns) = (ts.tv_sec(), ts.tv_nsec());
    if (s == 0 && ns == 0) || s < 0 || !(0..1_000_000_000).contains(&ns) {
        return None;
    }
    Some(s as u64 * 1_000_000_000 + ns as u64)
}

/// One write of a traced link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteRecord {
    /// Just before the send syscall (TCP) or the ring publish (shared memory).
    pub t_before: u64,
    /// Just after the syscall returned (TCP) or the publish (shared memory).
    pub t_after: u64,
    pub bytes: usize,
    /// Offset of the last byte written, counted from when tracing began (the kernel's
    /// `OPT_ID` key for TCP, modulo 2^32).
    pub key: u64,
}

/// Where a TCP write's last byte was when the kernel stamped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxKind {
    /// Entering the queueing layer (`dev_queue_xmit`, `SCM_TSTAMP_SCHED`).
    Sched,
    /// Handed to the driver (`SCM_TSTAMP_SND`).
    Driver,
}

/// A kernel transmit timestamp from the error queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxStamp {
    pub kind: TxKind,
    /// The `OPT_ID` key: offset of the stamped byte since tracing began, modulo 2^32.
    pub key: u32,
    pub t: u64,
}

/// One read of a traced link that returned data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadRecord {
    /// Just before the receive syscall (sockets only; 0 for shared memory, which is looked at
    /// every round and stamped only when it has data).
    pub t_before: u64,
    /// The kernel's software receive timestamp of the data (TCP; 0 if none came).
    pub t_kernel: u64,
    /// Just after the read returned.
    pub t_after: u64,
    /// After the engine parsed, matched and completed what the read brought (0 until then).
    pub t_parsed: u64,
    pub bytes: usize,
}

/// What a traced link recorded since the last [`take`](Self::take).
#[derive(Debug)]
pub struct LinkTrace {
    pub writes: Vec<WriteRecord>,
    pub tx: Vec<TxStamp>,
    pub reads: Vec<ReadRecord>,
    /// Bytes written since tracing began.
    pub written: u64,
    /// Room for `recvmsg`'s control messages (reused).
    cmsg: Vec<u8>,
}

impl Default for LinkTrace {
    fn default() -> Self {
        Self::new()
    }
}

impl LinkTrace {
    /// Counts as an active trace (see [`active`]) until dropped.
    pub fn new() -> LinkTrace {
        ACTIVE.fetch_add(1, Ordering::Relaxed);
        LinkTrace {
            writes: Vec::with_capacity(64),
            tx: Vec::with_capacity(64),
            reads: Vec::with_capacity(64),
            written: 0,
            cmsg: nix::cmsg_space!(libc::sock_extended_err, libc::sockaddr_in, [TimeSpec; 3]),
        }
    }

    /// Records a write of `bytes` (> 0) between `t_before` and `t_after`.
    pub fn wrote(&mut self, t_before: u64, t_after: u64, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.written += bytes as u64;
        self.writes.push(WriteRecord {
            t_before,
            t_after,
            bytes,
            key: self.written - 1,
        });
    }

    /// Records a read of `bytes` (> 0).
    pub fn read(&mut self, t_before: u64, t_kernel: Option<u64>, t_after: u64, bytes: usize) {
        if bytes == 0 {
            return;
        }
        self.reads.push(ReadRecord {
            t_before,
            t_kernel: t_kernel.unwrap_or(0),
            t_after,
            t_parsed: 0,
            bytes,
        });
    }

    /// Stamps the end of the engine's work on the last read.
    pub fn parsed(&mut self, t: u64) {
        if let Some(r) = self.reads.last_mut() {
            if r.t_parsed == 0 {
                r.t_parsed = t;
            }
        }
    }

    /// Moves the records out into `out` (appending).
    pub fn take(&mut self, out: &mut LinkTrace) {
        out.writes.append(&mut self.writes);
        out.tx.append(&mut self.tx);
        out.reads.append(&mut self.reads);
    }
}

impl Drop for LinkTrace {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Turns the kernel's software timestamps on or off for a connected TCP socket: transmit
/// stamps at the queueing layer and the driver (keyed by byte offset from now on, TSONLY) and
/// receive stamps. Falls back to keys counted from the oldest unacknowledged byte on kernels
/// before 6.2 (no `OPT_ID_TCP`): the same when nothing is in flight.
pub fn set_tcp_timestamping(s: &TcpStream, on: bool) -> io::Result<()> {
    if !on {
        return setsockopt(s, SoTimestamping, &0).map_err(io::Error::from);
    }
    let base = TX_SCHED | TX_SOFTWARE | RX_SOFTWARE | SOFTWARE | OPT_ID | OPT_TSONLY;
    match setsockopt(s, SoTimestamping, &(base | OPT_ID_TCP)) {
        Ok(()) => Ok(()),
        Err(Errno::EINVAL) => setsockopt(s, SoTimestamping, &base).map_err(io::Error::from),
        Err(e) => Err(e.into()),
    }
}

/// What one error-queue message says, if it is a transmit timestamp: the sock_extended_err
/// and the SCM_TIMESTAMPING control messages together.
pub fn tx_stamp_from(cmsgs: impl IntoIterator<Item = ControlMessageOwned>) -> Option<TxStamp> {
    let mut t = None;
    let mut ee = None;
    for c in cmsgs {
        match c {
            ControlMessageOwned::ScmTimestampsns(ts) => t = timespec_ns(&ts.system),
            ControlMessageOwned::Ipv4RecvErr(e, _) | ControlMessageOwned::Ipv6RecvErr(e, _) => {
                ee = Some(e)
            }
            _ => {}
        }
    }
    let ee = ee?;
    if ee.ee_errno != libc::ENOMSG as u32 || ee.ee_origin != SO_EE_ORIGIN_TIMESTAMPING {
        return None;
    }
    let kind = match ee.ee_info {
        SCM_TSTAMP_SND => TxKind::Driver,
        SCM_TSTAMP_SCHED => TxKind::Sched,
        _ => return None,
    };
    Some(TxStamp {
        kind,
        key: ee.ee_data,
        t: t?,
    })
}

/// The software receive timestamp among a read's control messages.
pub fn rx_stamp_from(cmsgs: impl IntoIterator<Item = ControlMessageOwned>) -> Option<u64> {
    cmsgs.into_iter().find_map(|c| match c {
        ControlMessageOwned::ScmTimestampsns(ts) => timespec_ns(&ts.system),
        _ => None,
    })
}

/// Collects the transmit timestamps waiting on `fd`'s error queue (never blocks).
pub fn drain_tx_stamps(fd: RawFd, trace: &mut LinkTrace) {
    // Bounded: the queue holds what the socket's receive buffer allows.
    for _ in 0..4096 {
        let mut byte = [0u8; 1];
        let mut iov = [IoSliceMut::new(&mut byte)];
        let r = recvmsg::<()>(
            fd,
            &mut iov,
            Some(&mut trace.cmsg),
            MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
        );
        let stamp = match r {
            Ok(m) => match m.cmsgs() {
                Ok(c) => tx_stamp_from(c),
                Err(_) => None,
            },
            Err(Errno::EINTR) => continue,
            Err(_) => return, // EAGAIN: drained
        };
        if let Some(s) = stamp {
            trace.tx.push(s);
        }
    }
}

/// A traced read: `recvmsg` with the receive timestamp, stamped before and after.
pub fn tcp_read(s: &mut TcpStream, trace: &mut LinkTrace, buf: &mut [u8]) -> io::Result<usize> {
    let t0 = now_ns();
    let fd = s.as_raw_fd();
    let mut iov = [IoSliceMut::new(buf)];
    let (n, t_kernel) = loop {
        match recvmsg::<()>(fd, &mut iov, Some(&mut trace.cmsg), MsgFlags::empty()) {
            Ok(m) => {
                let t = m.cmsgs().ok().and_then(rx_stamp_from);
                break (m.bytes, t);
            }
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    trace.read(t0, t_kernel, now_ns(), n);
    Ok(n)
}

/// A traced write: `write` (the link's own write, so that what is timed is what runs
/// untraced), stamped before and after.
pub fn tcp_write(
    trace: &mut LinkTrace,
    write: impl FnOnce() -> io::Result<usize>,
) -> io::Result<usize> {
    let t0 = now_ns();
    let n = write()?;
    trace.wrote(t0, now_ns(), n);
    Ok(n)
}

/// The local and peer IPv4 addresses of a connected socket.
pub fn socket_addrs(fd: RawFd) -> Option<(SocketAddr, SocketAddr)> {
    let v4 = |a: SockaddrIn| SocketAddr::V4(SocketAddrV4::new(a.ip(), a.port()));
    let local = getsockname::<SockaddrIn>(fd).ok()?;
    let peer = getpeername::<SockaddrIn>(fd).ok()?;
    Some((v4(local), v4(peer)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{IoSlice, Write};
    use std::net::{Ipv4Addr, TcpListener};
    use std::time::{Duration, Instant};

    fn ee(errno: i32, origin: u8, info: u32, data: u32) -> libc::sock_extended_err {
        libc::sock_extended_err {
            ee_errno: errno as u32,
            ee_origin: origin,
            ee_type: 0,
            ee_code: 0,
            ee_pad: 0,
            ee_info: info,
            ee_data: data,
        }
    }

    fn stamps(s: i64, ns: i64) -> ControlMessageOwned {
        ControlMessageOwned::ScmTimestampsns(nix::sys::socket::Timestamps {
            system: TimeSpec::new(s, ns),
            hw_trans: TimeSpec::new(0, 0),
            hw_raw: TimeSpec::new(0, 0),
        })
    }

    #[test]
    fn timespecs() {
        assert_eq!(timespec_ns(&TimeSpec::new(0, 0)), None);
        assert_eq!(timespec_ns(&TimeSpec::new(2, 5)), Some(2_000_000_005));
        assert_eq!(timespec_ns(&TimeSpec::new(-1, 5)), None);
    }

    #[test]
    fn tx_stamps_parsed() {
        let s = tx_stamp_from([
            stamps(10, 20),
            ControlMessageOwned::Ipv4RecvErr(ee(libc::ENOMSG, 4, SCM_TSTAMP_SND, 7), None),
        ]);
        assert_eq!(
            s,
            Some(TxStamp {
                kind: TxKind::Driver,
                key: 7,
                t: 10_000_000_020
            })
        );
        // Either order; SCHED too.
        let s = tx_stamp_from([
            ControlMessageOwned::Ipv4RecvErr(ee(libc::ENOMSG, 4, SCM_TSTAMP_SCHED, 9), None),
            stamps(1, 2),
        ]);
        assert_eq!(s.map(|s| (s.kind, s.key)), Some((TxKind::Sched, 9)));
        // A real error, another origin, an unknown kind, a missing or zero stamp: nothing.
        let bad = [
            ee(libc::ECONNRESET, 4, 0, 0),
            ee(libc::ENOMSG, 2, 0, 0),
            ee(libc::ENOMSG, 4, 2, 0),
        ];
        for e in bad {
            assert_eq!(
                tx_stamp_from([stamps(1, 2), ControlMessageOwned::Ipv4RecvErr(e, None)]),
                None
            );
        }
        assert_eq!(tx_stamp_from([stamps(1, 2)]), None);
        let e = ControlMessageOwned::Ipv4RecvErr(ee(libc::ENOMSG, 4, 0, 0), None);
        assert_eq!(tx_stamp_from([e.clone()]), None);
        assert_eq!(tx_stamp_from([stamps(0, 0), e]), None);
    }

    #[test]
    fn rx_stamps_parsed() {
        assert_eq!(rx_stamp_from([stamps(3, 4)]), Some(3_000_000_004));
        assert_eq!(rx_stamp_from([stamps(0, 0)]), None);
        assert_eq!(rx_stamp_from([]), None);
    }

    #[test]
    fn records() {
        let before = ACTIVE.load(Ordering::Relaxed);
        let mut t = LinkTrace::new();
        assert!(active());
        t.wrote(1, 2, 8);
        t.wrote(3, 4, 0);
        t.wrote(5, 6, 4);
        assert_eq!(t.writes.iter().map(|w| w.key).collect::<Vec<_>>(), [7, 11]);
        t.read(1, None, 2, 8);
        t.parsed(3);
        t.parsed(4);
        assert_eq!(t.reads[0].t_parsed, 3);
        let mut out = LinkTrace::new();
        t.take(&mut out);
        assert!(t.writes.is_empty() && out.writes.len() == 2 && out.reads.len() == 1);
        drop((t, out));
        // Other tests may run at the same time: at least ours are gone.
        assert!(ACTIVE.load(Ordering::Relaxed) <= before + 2);
    }

    /// A loopback connection with timestamping: each write's last byte is stamped at the
    /// queueing layer and the driver, the reader gets a receive stamp, all in order.
    #[test]
    fn loopback_stamps() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut b, _) = l.accept().unwrap();
        a.set_nodelay(true).unwrap();
        set_tcp_timestamping(&b, true).unwrap();
        // Give the kernel's deferred switch-on of receive stamping (see below) a moment, before
        // the sender's stamps start counting bytes.
        for _ in 0..3 {
            std::io::Write::write_all(&mut a, &[1u8; 8]).unwrap();
            std::io::Read::read_exact(&mut b, &mut [0u8; 8]).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        set_tcp_timestamping(&a, true).unwrap();
        let (mut ta, mut tb) = (LinkTrace::new(), LinkTrace::new());
        for _ in 0..3 {
            assert_eq!(
                tcp_write(&mut ta, || a.write_vectored(&[IoSlice::new(&[7u8; 8])])).unwrap(),
                8
            );
            let mut buf = [0u8; 8];
            let mut got = 0;
            while got < 8 {
                got += tcp_read(&mut b, &mut tb, &mut buf[got..]).unwrap();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while ta.tx.len() < 6 && Instant::now() < deadline {
            drain_tx_stamps(a.as_raw_fd(), &mut ta);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(ta.writes.len(), 3);
        for w in &ta.writes {
            let at = |k| {
                ta.tx
                    .iter()
                    .find(|s| s.kind == k && s.key == w.key as u32)
                    .map(|s| s.t)
                    .unwrap_or_else(|| panic!("no {k:?} stamp for key {}: {:?}", w.key, ta.tx))
            };
            let (sched, drv) = (at(TxKind::Sched), at(TxKind::Driver));
            assert!(w.t_before <= sched && sched <= drv, "{w:?} {sched} {drv}");
        }
        assert!(!tb.reads.is_empty());
        // The kernel turns receive stamping on for the whole machine when the first socket
        // asks (a static key, switched from a work queue): the first segments may come unstamped.
        let stamped: Vec<_> = tb.reads.iter().filter(|r| r.t_kernel != 0).collect();
        assert!(!stamped.is_empty(), "no receive timestamp: {:?}", tb.reads);
        for r in stamped {
            assert!(
                ta.writes[0].t_before <= r.t_kernel && r.t_kernel <= r.t_after,
                "{r:?}"
            );
        }
        assert_eq!(
            socket_addrs(a.as_raw_fd()).map(|(_, p)| p),
            Some(l.local_addr().unwrap())
        );
        set_tcp_timestamping(&a, false).unwrap();
    }
}
