//! Event queues. An RDM endpoint reports no connection events and AV inserts are synchronous, so
//! the queue only ever holds what the application writes into it itself (fi_eq_write); it exists
//! because consumers (fabtests, some MPIs) open one and bind it as a matter of course.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use libc::{c_char, c_int, c_void, size_t, ssize_t};

use crate::fabric::{enosys_bind, enosys_control, enosys_ops_open, ptr};
use crate::sys::*;
use crate::util::*;

#[repr(C)]
pub struct EqObj {
    pub fid: fid_eq,
    events: Mutex<VecDeque<(u32, Vec<u8>)>>,
    ready: Condvar,
}

static EQ_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(eq_close),
    bind: Some(enosys_bind),
    control: Some(enosys_control),
    ops_open: Some(enosys_ops_open),
    tostr: None,
    ops_set: None,
};

static EQ_OPS: fi_ops_eq = fi_ops_eq {
    size: std::mem::size_of::<fi_ops_eq>(),
    read: Some(eq_read),
    readerr: Some(eq_readerr),
    write: Some(eq_write),
    sread: Some(eq_sread),
    strerror: Some(eq_strerror),
};

pub unsafe extern "C" fn hx_eq_open(
    _fabric: *mut fid_fabric,
    attr: *mut c_void,
    eq: *mut *mut c_void,
    context: *mut c_void,
) -> c_int {
    if eq.is_null() {
        return -FI_EINVAL;
    }
    let attr = attr as *const fi_eq_attr;
    if !attr.is_null()
        && (*attr).wait_obj != FI_WAIT_NONE
        && (*attr).wait_obj != FI_WAIT_UNSPEC
        && (*attr).wait_obj != FI_WAIT_FD
    {
        return -FI_ENOSYS;
    }
    ret_int(|| {
        let e = Box::new(EqObj {
            fid: fid_eq {
                fid: fid {
                    fclass: FI_CLASS_EQ,
                    context,
                    ops: ptr(&EQ_FI_OPS),
                },
                ops: ptr(&EQ_OPS),
            },
            events: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
        });
        *eq = Box::leak(e) as *mut EqObj as *mut c_void;
        Ok(0)
    })
}

unsafe extern "C" fn eq_close(f: *mut fid) -> c_int {
    if f.is_null() {
        return -FI_EINVAL;
    }
    drop(Box::from_raw(f as *mut EqObj));
    0
}

unsafe fn take(e: &EqObj, event: *mut u32, buf: *mut c_void, len: size_t, peek: bool) -> ssize_t {
    let mut q = lock(&e.events);
    let Some((ev, data)) = q.front() else {
        return -(FI_EAGAIN as ssize_t);
    };
    if data.len() > len {
        return -(FI_ETOOSMALL as ssize_t);
    }
    if !event.is_null() {
        *event = *ev;
    }
    if !buf.is_null() {
        std::ptr::copy_nonoverlapping(data.as_ptr(), buf as *mut u8, data.len());
    }
    let n = data.len() as ssize_t;
    if !peek {
        q.pop_front();
    }
    n
}

unsafe extern "C" fn eq_read(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: size_t,
    flags: u64,
) -> ssize_t {
    if eq.is_null() {
        return -(FI_EINVAL as ssize_t);
    }
    take(
        &*(eq as *const EqObj),
        event,
        buf,
        len,
        flags & FI_PEEK != 0,
    )
}

unsafe extern "C" fn eq_readerr(eq: *mut fid_eq, _buf: *mut fi_eq_err_entry, _f: u64) -> ssize_t {
    if eq.is_null() {
        return -(FI_EINVAL as ssize_t);
    }
    -(FI_EAGAIN as ssize_t)
}

unsafe extern "C" fn eq_write(
    eq: *mut fid_eq,
    event: u32,
    buf: *const c_void,
    len: size_t,
    _flags: u64,
) -> ssize_t {
    if eq.is_null() || (buf.is_null() && len > 0) {
        return -(FI_EINVAL as ssize_t);
    }
    let e = &*(eq as *const EqObj);
    let data = if len == 0 {
        Vec::new()
    } else {
        std::slice::from_raw_parts(buf as *const u8, len).to_vec()
    };
    lock(&e.events).push_back((event, data));
    e.ready.notify_all();
    len as ssize_t
}

unsafe extern "C" fn eq_sread(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: size_t,
    timeout: c_int,
    flags: u64,
) -> ssize_t {
    if eq.is_null() {
        return -(FI_EINVAL as ssize_t);
    }
    let e = &*(eq as *const EqObj);
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    loop {
        let r = take(e, event, buf, len, flags & FI_PEEK != 0);
        if r != -(FI_EAGAIN as ssize_t) {
            return r;
        }
        let q = lock(&e.events);
        if !q.is_empty() {
            continue;
        }
        let wait = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(w) if !w.is_zero() => w,
                _ => return -(FI_EAGAIN as ssize_t),
            },
            None => Duration::from_secs(3600),
        };
        drop(e.ready.wait_timeout(q, wait));
    }
}

unsafe extern "C" fn eq_strerror(
    _eq: *mut fid_eq,
    prov_errno: c_int,
    _err_data: *const c_void,
    _buf: *mut c_char,
    _len: size_t,
) -> *const c_char {
    fi_strerror(prov_errno)
}
