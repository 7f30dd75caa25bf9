//! Completion queues: an unbounded queue of entries (successes and errors in completion order),
//! written by the domain's progress and read in any of the standard formats.

use crate::av::AvShared;
use crate::backend::PeerId;
use crate::domain::{self, CqFields, DomainObj, DomainShared, Drive, Idle, SerialLock};
use crate::fabric::{enosys_bind, enosys_ops_open, ptr};
use crate::hints::MAX_ERR_DATA;
use crate::sys::*;
use crate::util::*;
use libc::{c_char, c_int, c_void};
use std::collections::VecDeque;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Entry {
    pub context: usize,
    pub flags: u64,
    pub len: usize,
    pub data: u64,
    pub tag: u64,
    /// Sender, translated to an fi_addr through this AV when read.
    pub src: Option<(Arc<AvShared>, PeerId)>,
    /// (positive errno, olen, message) for an error entry.
    pub err: Option<(i32, usize, String)>,
}

#[derive(Default)]
struct Queue {
    entries: VecDeque<Entry>,
    /// err_data of the last fi_cq_readerr, valid until the next read.
    err_data: Option<CString>,
}

pub struct CqShared {
    pub format: c_int,
    pub wait_obj: c_int,
    pub domain: Arc<DomainShared>,
    q: SerialLock<Queue>,
    /// fi_cq_signal wakes sread through this eventfd.
    signal_fd: i32,
    /// Endpoints bound to this CQ: closing it before them is -FI_EBUSY.
    pub bound: AtomicUsize,
    /// Entries queued, as of the last change of the queue (made under its lock): a read's poll
    /// checks it under the domain lock alone (every push under that lock is then seen; one
    /// without it, by another thread, is concurrent with the read anyway).
    queued: AtomicUsize,
    /// The last read returned entries: consumers read again until -FI_EAGAIN (Open MPI's
    /// progress loop does), and that read need not poll the sockets it just polled.
    just_delivered: AtomicBool,
    /// Under FI_THREAD_DOMAIN: the domain state's generation when a read served a receive and
    /// left the backend idle and this queue empty. Until anyone takes the state again, the
    /// read that follows has nothing to find: it answers -FI_EAGAIN from here (in Open MPI's
    /// progress loop, between the completion and MPI_Recv's return).
    served_idle: AtomicU64,
}

impl Drop for CqShared {
    fn drop(&mut self) {
        // SAFETY: our eventfd.
        unsafe { libc::close(self.signal_fd) };
    }
}

#[cfg(test)]
fn entry_size(format: c_int) -> usize {
    match format {
        FI_CQ_FORMAT_CONTEXT => std::mem::size_of::<fi_cq_entry>(),
        FI_CQ_FORMAT_MSG => std::mem::size_of::<fi_cq_msg_entry>(),
        FI_CQ_FORMAT_DATA => std::mem::size_of::<fi_cq_data_entry>(),
        _ => std::mem::size_of::<fi_cq_tagged_entry>(),
    }
}

/// Writes `e` as entry `i` of a `format` array at `buf`.
unsafe fn write_entry(format: c_int, buf: *mut c_void, i: usize, e: &Entry) {
    let f = CqFields {
        context: e.context,
        flags: e.flags,
        len: e.len,
        data: e.data,
        tag: e.tag,
    };
    write_fields(format, buf, i, &f)
}

/// Writes `e` as entry `i` of a `format` array at `buf`.
unsafe fn write_fields(format: c_int, buf: *mut c_void, i: usize, e: &CqFields) {
    let ctx = e.context as *mut c_void;
    let null = std::ptr::null_mut();
    match format {
        FI_CQ_FORMAT_CONTEXT => (buf as *mut fi_cq_entry)
            .add(i)
            .write(fi_cq_entry { op_context: ctx }),
        FI_CQ_FORMAT_MSG => (buf as *mut fi_cq_msg_entry).add(i).write(fi_cq_msg_entry {
            op_context: ctx,
            flags: e.flags,
            len: e.len,
        }),
        FI_CQ_FORMAT_DATA => (buf as *mut fi_cq_data_entry)
            .add(i)
            .write(fi_cq_data_entry {
                op_context: ctx,
                flags: e.flags,
                len: e.len,
                buf: null,
                data: e.data,
            }),
        _ => (buf as *mut fi_cq_tagged_entry)
            .add(i)
            .write(fi_cq_tagged_entry {
                op_context: ctx,
                flags: e.flags,
                len: e.len,
                buf: null,
                data: e.data,
                tag: e.tag,
            }),
    }
}

impl CqShared {
    pub fn new(
        domain: Arc<DomainShared>,
        format: c_int,
        wait_obj: c_int,
    ) -> Result<Arc<Self>, i32> {
        // SAFETY: plain syscall.
        let signal_fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if signal_fd < 0 {
            return Err(FI_EOTHER);
        }
        let serial = domain.state.is_serial();
        Ok(Arc::new(CqShared {
            format,
            wait_obj,
            domain,
            q: SerialLock::new(Queue::default(), serial),
            signal_fd,
            bound: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            just_delivered: AtomicBool::new(false),
            served_idle: AtomicU64::new(0),
        }))
    }

    /// See `served_idle` (called under the state, FI_THREAD_DOMAIN).
    pub(crate) fn served_idle_at(&self, generation: u64) {
        self.served_idle.store(generation, Ordering::Relaxed);
    }

    /// No entry is queued (see `queued`).
    pub(crate) fn queue_empty(&self) -> bool {
        self.queued.load(Ordering::Acquire) == 0
    }

    pub fn push(&self, e: Entry) {
        let mut q = self.q.lock();
        q.entries.push_back(e);
        self.queued.store(q.entries.len(), Ordering::Release);
    }

    /// After progress: true when nothing is queued (fi_trywait may then sleep on the fd).
    pub fn is_idle(&self) -> Result<bool, i32> {
        self.domain.progress_to_wait()?;
        Ok(self.q.lock().entries.is_empty())
    }

    /// fi_cq_read/readfrom: successes up to the first error entry; -FI_EAVAIL if one heads the
    /// queue, -FI_EAGAIN if it is empty.
    ///
    /// # Safety
    /// `buf` has room for `count` entries of our format; `src` is NULL or has room for `count`.
    #[inline]
    pub unsafe fn read(
        &self,
        buf: *mut c_void,
        count: usize,
        src: *mut fi_addr_t,
    ) -> Result<usize, i32> {
        // Completions already there (a send finishes as it is written) go out without a poll
        // of the sockets; and the read right after one that delivered only collects: in an
        // MPI ping-pong that poll came between a receive's completion and the next send, one
        // epoll_wait per round trip on the critical path. Every other read polls.
        let delivered_last = self.just_delivered.load(Ordering::Relaxed);
        if delivered_last {
            self.just_delivered.store(false, Ordering::Relaxed);
            // (Generations start at 1: 0 is never current.)
            if self.served_idle.load(Ordering::Relaxed) == self.domain.state.generation()
                && self.domain.state.is_serial()
                && self.queue_empty()
            {
                return Err(FI_EAGAIN);
            }
        }
        // Also right after a delivery, where the shortcut above does not answer: a receive
        // posted since under the state may have taken a watch (a program that posts its next
        // receive before it reads again, where Open MPI reads first), and a look would take
        // the state, which ends a hold (domain.rs). (A receive a hold armed since keeps the
        // generation: the shortcut answers that read, and the next one looks here.)
        match self.domain.idle_look(self, count > 0) {
            Idle::Quiet => return Err(FI_EAGAIN),
            Idle::Served(f, from) => {
                // The ticket's receive (see `IdleWatch`): as if served by the drive.
                write_fields(self.format, buf, 0, &f);
                if !src.is_null() {
                    *src = from;
                }
                self.served_idle_at(self.domain.state.generation());
                self.just_delivered.store(true, Ordering::Relaxed);
                return Ok(1);
            }
            Idle::Look => {}
        }
        self.read_drive(buf, count, src, delivered_last)
    }

    /// [`read`](Self::read) past its answers without the domain: out of line, so that those
    /// (an idle poll, the read after a delivery) need no stack frame of this size.
    #[inline(never)]
    unsafe fn read_drive(
        &self,
        buf: *mut c_void,
        count: usize,
        src: *mut fi_addr_t,
        delivered_last: bool,
    ) -> Result<usize, i32> {
        let format = self.format;
        let drive = self
            .domain
            .read_drive(self, delivered_last, count, |i, e, from| {
                // Receives served straight from the backend, for this CQ, whose queue is empty:
                // as if pushed and popped.
                write_fields(format, buf, i, e);
                if !src.is_null() {
                    *src.add(i) = from.map_or(FI_ADDR_NOTAVAIL, |(av, p)| av.fi_addr_of(p));
                }
            })?;
        match drive {
            Drive::Served(n) => {
                self.just_delivered.store(true, Ordering::Relaxed);
                return Ok(n);
            }
            Drive::Empty => return Err(FI_EAGAIN),
            Drive::Queue => {}
        }
        let mut q = self.q.lock();
        q.err_data = None;
        match q.entries.front() {
            None => return Err(FI_EAGAIN),
            Some(e) if e.err.is_some() => return Err(FI_EAVAIL),
            _ => {}
        }
        let mut n = 0;
        while n < count && q.entries.front().is_some_and(|e| e.err.is_none()) {
            let e = q.entries.pop_front().unwrap();
            write_entry(self.format, buf, n, &e);
            if !src.is_null() {
                *src.add(n) = e
                    .src
                    .as_ref()
                    .map_or(FI_ADDR_NOTAVAIL, |(av, p)| av.fi_addr_of(*p));
            }
            n += 1;
        }
        self.queued.store(q.entries.len(), Ordering::Release);
        self.just_delivered.store(n > 0, Ordering::Relaxed);
        Ok(n)
    }

    /// fi_cq_readerr: one error entry per call. err_data (the backend's message) follows
    /// libfabric 1.17's rules: API >= 1.5 with a caller buffer (err_data_size > 0) gets a copy
    /// and the copied size; otherwise only the 1.0 part of the struct is written and err_data
    /// points at our copy, valid until the next read of this CQ.
    ///
    /// # Safety
    /// `out` is a valid fi_cq_err_entry (of the 1.0 size when the API is below 1.5).
    pub unsafe fn readerr(&self, out: *mut fi_cq_err_entry) -> Result<usize, i32> {
        self.domain.progress()?;
        let mut q = self.q.lock();
        if q.entries.front().is_none_or(|e| e.err.is_none()) {
            return Err(FI_EAGAIN);
        }
        let e = q.entries.pop_front().unwrap();
        self.queued.store(q.entries.len(), Ordering::Release);
        let (err, olen, msg) = e.err.unwrap();
        let mut msg = msg.replace('\0', " ");
        if msg.len() >= MAX_ERR_DATA {
            let mut cut = MAX_ERR_DATA - 1;
            while !msg.is_char_boundary(cut) {
                cut -= 1;
            }
            msg.truncate(cut);
        }
        let text = CString::new(msg).unwrap_or_default();
        let mut entry = fi_cq_err_entry {
            op_context: e.context as *mut c_void,
            flags: e.flags,
            len: e.len,
            buf: std::ptr::null_mut(),
            data: e.data,
            tag: e.tag,
            olen,
            err,
            prov_errno: err,
            err_data: std::ptr::null_mut(),
            err_data_size: 0,
        };
        let bytes = text.as_bytes_with_nul();
        if err != FI_EIO && err != FI_EACCES {
            // Only a failed peer and a refused remote access have more to say than the error
            // code (which peer, why): other
            // errors carry no err_data and, as libfabric's own
            // providers, never touch the caller's err_data then (fabtests pass uninitialised
            // entries here).
            if self.domain.api_version >= fi_version(1, 5) {
                out.write(entry);
            } else {
                std::ptr::copy_nonoverlapping(
                    &entry as *const fi_cq_err_entry as *const u8,
                    out as *mut u8,
                    FI_CQ_ERR_ENTRY_1_0_SIZE,
                );
            }
            return Ok(1);
        }
        if self.domain.api_version >= fi_version(1, 5) && (*out).err_data_size > 0 {
            let n = (*out).err_data_size.min(bytes.len());
            if !(*out).err_data.is_null() {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), (*out).err_data as *mut u8, n);
            }
            entry.err_data = (*out).err_data;
            entry.err_data_size = n;
            out.write(entry);
        } else {
            entry.err_data = text.as_ptr() as *mut c_void;
            std::ptr::copy_nonoverlapping(
                &entry as *const fi_cq_err_entry as *const u8,
                out as *mut u8,
                FI_CQ_ERR_ENTRY_1_0_SIZE,
            );
            q.err_data = Some(text);
        }
        Ok(1)
    }

    /// fi_cq_sread: read, else sleep in poll() on the backend's fd (no lock held) until
    /// something may have happened, the timeout (ms, -1 forever) passes, or fi_cq_signal.
    ///
    /// # Safety
    /// As [`CqShared::read`].
    pub unsafe fn sread(
        &self,
        buf: *mut c_void,
        count: usize,
        src: *mut fi_addr_t,
        timeout: c_int,
    ) -> Result<usize, i32> {
        if self.wait_obj == FI_WAIT_NONE {
            return Err(FI_ENOSYS);
        }
        let deadline =
            (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
        loop {
            match self.read(buf, count, src) {
                Err(FI_EAGAIN) => {}
                r => return r,
            }
            // Make the wait fd safe to sleep on (reads do not: they are for pollers).
            if !self.is_idle()? {
                continue;
            }
            let wait = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(FI_EAGAIN);
                    }
                    left.as_millis().clamp(1, i32::MAX as u128) as c_int
                }
            };
            let mut fds = [
                libc::pollfd {
                    fd: self.domain.wait_fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.signal_fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let r = libc::poll(fds.as_mut_ptr(), 2, wait);
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                return Err(FI_EOTHER);
            }
            if fds[1].revents & libc::POLLIN != 0 {
                let mut v = 0u64;
                libc::read(self.signal_fd, &mut v as *mut u64 as *mut c_void, 8);
                return Err(FI_EAGAIN);
            }
        }
    }

    fn signal(&self) {
        let one = 1u64;
        // SAFETY: our eventfd.
        unsafe { libc::write(self.signal_fd, &one as *const u64 as *const c_void, 8) };
    }
}

#[repr(C)]
pub struct CqObj {
    pub fid: fid_cq,
    pub domain: *mut DomainObj,
    pub c: Arc<CqShared>,
}

static CQ_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(cq_close),
    bind: Some(enosys_bind),
    control: Some(cq_control),
    ops_open: Some(enosys_ops_open),
    tostr: None,
    ops_set: None,
};

static CQ_OPS: fi_ops_cq = fi_ops_cq {
    size: std::mem::size_of::<fi_ops_cq>(),
    read: Some(cq_read),
    readfrom: Some(cq_readfrom),
    readerr: Some(cq_readerr),
    sread: Some(cq_sread),
    sreadfrom: Some(cq_sreadfrom),
    signal: Some(cq_signal),
    strerror: Some(cq_strerror),
};

pub unsafe extern "C" fn hx_cq_open(
    d: *mut fid_domain,
    attr: *mut fi_cq_attr,
    cq: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    if d.is_null() || attr.is_null() || cq.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let a = &*attr;
        let format = match a.format {
            FI_CQ_FORMAT_UNSPEC => FI_CQ_FORMAT_CONTEXT,
            f @ FI_CQ_FORMAT_CONTEXT..=FI_CQ_FORMAT_TAGGED => f,
            _ => return Err(FI_ENOSYS),
        };
        let wait_obj = match a.wait_obj {
            FI_WAIT_NONE => FI_WAIT_NONE,
            FI_WAIT_UNSPEC | FI_WAIT_FD => FI_WAIT_FD,
            _ => return Err(FI_ENOSYS),
        };
        if a.wait_cond != FI_CQ_COND_NONE {
            return Err(FI_ENOSYS);
        }
        let dom = domain::from_fid(d);
        let c = CqShared::new(dom.d.clone(), format, wait_obj)?;
        let obj = Box::new(CqObj {
            fid: fid_cq {
                fid: fid {
                    fclass: FI_CLASS_CQ,
                    context,
                    ops: ptr(&CQ_FI_OPS),
                },
                ops: ptr(&CQ_OPS),
            },
            domain: d as *mut DomainObj,
            c,
        });
        dom.children.fetch_add(1, Ordering::AcqRel);
        *cq = &mut Box::leak(obj).fid;
        Ok(0)
    })
}

unsafe fn obj<'a>(cq: *mut fid_cq) -> &'a CqShared {
    &(*(cq as *const CqObj)).c
}

unsafe extern "C" fn cq_close(f: *mut fid) -> c_int {
    if f.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let o = f as *mut CqObj;
        if (&*o).c.bound.load(Ordering::Acquire) != 0 {
            return Err(FI_EBUSY);
        }
        let o = Box::from_raw(o);
        (&*o.domain).children.fetch_sub(1, Ordering::AcqRel);
        Ok(0)
    })
}

unsafe extern "C" fn cq_control(f: *mut fid, cmd: c_int, arg: *mut c_void) -> c_int {
    if f.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let c = obj(f as *mut fid_cq);
        match cmd {
            FI_GETWAIT if c.wait_obj == FI_WAIT_FD => {
                if arg.is_null() {
                    return Err(FI_EINVAL);
                }
                *(arg as *mut c_int) = c.domain.wait_fd;
                Ok(0)
            }
            FI_GETWAIT => Err(FI_ENODATA),
            FI_GETWAITOBJ => {
                if arg.is_null() {
                    return Err(FI_EINVAL);
                }
                *(arg as *mut c_int) = c.wait_obj;
                Ok(0)
            }
            _ => Err(FI_ENOSYS),
        }
    })
}

unsafe extern "C" fn cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    cq_readfrom(cq, buf, count, std::ptr::null_mut())
}

unsafe extern "C" fn cq_readfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
) -> isize {
    if cq.is_null() || (buf.is_null() && count > 0) {
        return -(FI_EINVAL as isize);
    }
    ret_size(|| obj(cq).read(buf, count, src).map(|n| n as isize))
}

unsafe extern "C" fn cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, _flags: u64) -> isize {
    if cq.is_null() || buf.is_null() {
        return -(FI_EINVAL as isize);
    }
    ret_size(|| obj(cq).readerr(buf).map(|n| n as isize))
}

unsafe extern "C" fn cq_sread(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    cond: *const c_void,
    timeout: c_int,
) -> isize {
    cq_sreadfrom(cq, buf, count, std::ptr::null_mut(), cond, timeout)
}

unsafe extern "C" fn cq_sreadfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    if cq.is_null() || (buf.is_null() && count > 0) {
        return -(FI_EINVAL as isize);
    }
    ret_size(|| obj(cq).sread(buf, count, src, timeout).map(|n| n as isize))
}

unsafe extern "C" fn cq_signal(cq: *mut fid_cq) -> c_int {
    if cq.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        obj(cq).signal();
        Ok(0)
    })
}

/// fi_cq_strerror: libfabric's text for the errno (the detailed message is in err_data).
unsafe extern "C" fn cq_strerror(
    _cq: *mut fid_cq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    guard(std::ptr::null(), || {
        let s = fi_strerror(prov_errno.abs());
        if !buf.is_null() && len > 0 && !s.is_null() {
            let n = libc::strlen(s).min(len - 1);
            std::ptr::copy_nonoverlapping(s, buf, n);
            *buf.add(n) = 0;
            return buf as *const c_char;
        }
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendConfig;
    use crate::mock::MockBackend;

    fn cq(format: c_int) -> Arc<CqShared> {
        cq_in(format, false)
    }

    /// A CQ of a domain opened FI_THREAD_DOMAIN (`serial`) or FI_THREAD_SAFE.
    fn cq_in(format: c_int, serial: bool) -> Arc<CqShared> {
        let b = MockBackend::new(&BackendConfig {
            settings: vec![],
            auth_key: None,
        })
        .unwrap();
        CqShared::new(
            DomainShared::new(Box::new(b), fi_version(1, 17), serial),
            format,
            FI_WAIT_FD,
        )
        .unwrap()
    }

    fn ok(ctx: usize, tag: u64) -> Entry {
        Entry {
            context: ctx,
            flags: FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA,
            len: 5,
            data: 9,
            tag,
            src: None,
            err: None,
        }
    }

    /// A failed peer: the one error that carries err_data.
    fn err(ctx: usize) -> Entry {
        Entry {
            err: Some((FI_EIO, 3, "peer mock:1:0 sent too much".into())),
            ..ok(ctx, 4)
        }
    }

    #[test]
    fn errors_without_a_message_leave_err_data_alone() {
        let c = cq(FI_CQ_FORMAT_TAGGED);
        c.push(Entry {
            err: Some((FI_ETRUNC, 3, "truncated".into())),
            ..ok(7, 4)
        });
        // As fabtests pass it: uninitialised (here: garbage) err_data and size.
        let mut e: fi_cq_err_entry = unsafe { std::mem::zeroed() };
        e.err_data = 0x10 as *mut c_void;
        e.err_data_size = 0x1234;
        assert_eq!(unsafe { c.readerr(&mut e) }, Ok(1));
        assert_eq!((e.err, e.olen, e.err_data_size), (FI_ETRUNC, 3, 0));
        assert!(e.err_data.is_null());
    }

    #[test]
    fn formats() {
        for (f, serial) in [
            (FI_CQ_FORMAT_CONTEXT, false),
            (FI_CQ_FORMAT_MSG, true),
            (FI_CQ_FORMAT_DATA, false),
            (FI_CQ_FORMAT_TAGGED, true),
        ] {
            let c = cq_in(f, serial);
            assert_eq!(c.q.is_serial(), serial);
            c.push(ok(0x10, 7));
            c.push(ok(0x20, 8));
            let mut buf = [0u8; 2 * 48];
            let mut src = [0u64; 2];
            let n =
                unsafe { c.read(buf.as_mut_ptr() as *mut c_void, 2, src.as_mut_ptr()) }.unwrap();
            assert_eq!(n, 2);
            assert_eq!(src, [FI_ADDR_NOTAVAIL; 2]);
            let sz = entry_size(f);
            let second = unsafe { buf.as_ptr().add(sz) };
            let ctx = unsafe { *(second as *const usize) };
            assert_eq!(ctx, 0x20, "format {f}");
            if f >= FI_CQ_FORMAT_MSG {
                let m = unsafe { &*(second as *const fi_cq_msg_entry) };
                assert_eq!(
                    (m.flags, m.len),
                    (FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA, 5)
                );
            }
            if f >= FI_CQ_FORMAT_DATA {
                assert_eq!(unsafe { &*(second as *const fi_cq_data_entry) }.data, 9);
            }
            if f == FI_CQ_FORMAT_TAGGED {
                assert_eq!(unsafe { &*(second as *const fi_cq_tagged_entry) }.tag, 8);
            }
            assert_eq!(
                unsafe { c.read(buf.as_mut_ptr() as *mut c_void, 2, std::ptr::null_mut()) },
                Err(FI_EAGAIN)
            );
        }
    }

    #[test]
    fn errors_in_order_and_err_data() {
        let c = cq(FI_CQ_FORMAT_TAGGED);
        c.push(ok(1, 1));
        c.push(err(2));
        c.push(ok(3, 3));
        let mut buf = [0u8; 4 * 48];
        let p = buf.as_mut_ptr() as *mut c_void;
        let mut e: fi_cq_err_entry = unsafe { std::mem::zeroed() };
        assert_eq!(
            unsafe { c.readerr(&mut e) },
            Err(FI_EAGAIN),
            "an ok entry heads the queue"
        );
        assert_eq!(unsafe { c.read(p, 4, std::ptr::null_mut()) }, Ok(1));
        assert_eq!(
            unsafe { c.read(p, 4, std::ptr::null_mut()) },
            Err(FI_EAVAIL)
        );
        // Caller buffer of 8 bytes (API 1.17): copied and truncated.
        let mut data = [0u8; 8];
        e.err_data = data.as_mut_ptr() as *mut c_void;
        e.err_data_size = data.len();
        assert_eq!(unsafe { c.readerr(&mut e) }, Ok(1));
        assert_eq!(
            (e.op_context as usize, e.err, e.olen, e.len, e.tag),
            (2, FI_EIO, 3, 5, 4)
        );
        assert_eq!(e.err_data_size, 8);
        assert_eq!(&data, b"peer moc");
        assert_eq!(unsafe { c.readerr(&mut e) }, Err(FI_EAGAIN));
        assert_eq!(unsafe { c.read(p, 4, std::ptr::null_mut()) }, Ok(1));
        // No caller buffer: err_data points at our NUL-terminated copy, err_data_size untouched.
        c.push(err(5));
        let mut e: fi_cq_err_entry = unsafe { std::mem::zeroed() };
        e.err_data_size = 0;
        assert_eq!(unsafe { c.readerr(&mut e) }, Ok(1));
        assert_eq!(e.err_data_size, 0);
        let s = unsafe { std::ffi::CStr::from_ptr(e.err_data as *const c_char) };
        assert_eq!(s.to_str().unwrap(), "peer mock:1:0 sent too much");
    }

    #[test]
    fn old_api_writes_only_the_1_0_struct() {
        let b = MockBackend::new(&BackendConfig {
            settings: vec![],
            auth_key: None,
        })
        .unwrap();
        let c = CqShared::new(
            DomainShared::new(Box::new(b), fi_version(1, 4), false),
            FI_CQ_FORMAT_TAGGED,
            FI_WAIT_FD,
        )
        .unwrap();
        c.push(err(1));
        let mut e: fi_cq_err_entry = unsafe { std::mem::zeroed() };
        e.err_data_size = 0x5555;
        assert_eq!(unsafe { c.readerr(&mut e) }, Ok(1));
        assert_eq!(
            e.err_data_size, 0x5555,
            "beyond the 1.0 struct nothing is written"
        );
        assert!(!e.err_data.is_null());
    }

    #[test]
    fn sread_times_out_and_signal_wakes() {
        let c = cq(FI_CQ_FORMAT_CONTEXT);
        let mut buf = [0u8; 8];
        let t = Instant::now();
        let r = unsafe { c.sread(buf.as_mut_ptr() as *mut c_void, 1, std::ptr::null_mut(), 50) };
        assert_eq!(r, Err(FI_EAGAIN));
        assert!(t.elapsed() >= Duration::from_millis(45));
        c.signal();
        let r = unsafe { c.sread(buf.as_mut_ptr() as *mut c_void, 1, std::ptr::null_mut(), -1) };
        assert_eq!(r, Err(FI_EAGAIN));
        let none = CqShared::new(c.domain.clone(), FI_CQ_FORMAT_CONTEXT, FI_WAIT_NONE).unwrap();
        assert_eq!(
            unsafe { none.sread(buf.as_mut_ptr() as *mut c_void, 1, std::ptr::null_mut(), 0) },
            Err(FI_ENOSYS)
        );
    }
}
