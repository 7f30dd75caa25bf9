//! The fabric object: a handle that opens domains.

use crate::cq::CqObj;
use crate::domain;
use crate::hints::FABRIC_NAME;
use crate::sys::*;
use crate::util::*;
use libc::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

#[repr(C)]
pub struct Fabric {
    pub fid: fid_fabric,
    pub domains: AtomicUsize,
}

static FABRIC_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(fabric_close),
    bind: Some(enosys_bind),
    control: Some(enosys_control),
    ops_open: Some(enosys_ops_open),
    tostr: None,
    ops_set: None,
};

static FABRIC_OPS: fi_ops_fabric = fi_ops_fabric {
    size: std::mem::size_of::<fi_ops_fabric>(),
    domain: Some(domain::hx_domain),
    passive_ep: Some(enosys_passive_ep),
    eq_open: Some(crate::eq::hx_eq_open),
    wait_open: Some(enosys_wait_open),
    trywait: Some(fabric_trywait),
    domain2: Some(domain2),
};

pub(crate) fn ptr<T>(t: &'static T) -> *mut T {
    t as *const T as *mut T
}

pub unsafe extern "C" fn hx_fabric(
    attr: *mut fi_fabric_attr,
    fabric: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int {
    if attr.is_null() || fabric.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        match opt_cstr((*attr).name) {
            Some(n) if n == FABRIC_NAME => {}
            n => {
                warn(
                    FI_LOG_FABRIC,
                    &format!("fi_fabric: fabric name {n:?} is not {FABRIC_NAME:?}"),
                );
                return Err(FI_ENODATA);
            }
        }
        let f = Box::new(Fabric {
            fid: fid_fabric {
                fid: fid {
                    fclass: FI_CLASS_FABRIC,
                    context,
                    ops: ptr(&FABRIC_FI_OPS),
                },
                ops: ptr(&FABRIC_OPS),
                // libfabric's fi_fabric overwrites it with the caller's API version afterwards.
                api_version: (*attr).api_version,
            },
            domains: AtomicUsize::new(0),
        });
        *fabric = &mut Box::leak(f).fid;
        Ok(0)
    })
}

unsafe extern "C" fn fabric_close(f: *mut fid) -> c_int {
    if f.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let fab = f as *mut Fabric;
        if (&*fab).domains.load(Ordering::Acquire) != 0 {
            return Err(FI_EBUSY);
        }
        drop(Box::from_raw(fab));
        Ok(0)
    })
}

unsafe extern "C" fn domain2(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return -FI_EBADFLAGS;
    }
    domain::hx_domain(fabric, info, dom, context)
}

/// fi_trywait: -FI_EAGAIN if any of the CQs already holds completions (then the caller must
/// not block on the wait fd), 0 when it is safe to poll() the fds.
unsafe extern "C" fn fabric_trywait(
    _f: *mut fid_fabric,
    fids: *mut *mut fid,
    count: c_int,
) -> c_int {
    if fids.is_null() && count > 0 {
        return -FI_EINVAL;
    }
    ret_int(|| {
        for i in 0..count.max(0) as usize {
            let f = *fids.add(i);
            if f.is_null() || (*f).fclass != FI_CLASS_CQ {
                return Err(FI_EINVAL);
            }
            let cq = &*(f as *const CqObj);
            if !cq.c.is_idle()? {
                return Err(FI_EAGAIN);
            }
        }
        Ok(0)
    })
}

pub(crate) unsafe extern "C" fn enosys_bind(_: *mut fid, _: *mut fid, _: u64) -> c_int {
    -FI_ENOSYS
}
pub(crate) unsafe extern "C" fn enosys_control(_: *mut fid, _: c_int, _: *mut c_void) -> c_int {
    -FI_ENOSYS
}
pub(crate) unsafe extern "C" fn enosys_ops_open(
    _: *mut fid,
    _: *const libc::c_char,
    _: u64,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn enosys_passive_ep(
    _: *mut fid_fabric,
    _: *mut fi_info,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn enosys_wait_open(
    _: *mut fid_fabric,
    _: *mut c_void,
    _: *mut *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
