//! Converting between libfabric's `fi_info` and the owned mirror in `hints.rs`. Everything
//! handed to libfabric is allocated with malloc/calloc/strdup so its fi_freeinfo can free it.

use crate::hints::*;
use crate::sys::*;
use libc::{c_char, c_void};
use std::ffi::{CStr, CString};

unsafe fn opt_str(p: *const c_char) -> Option<String> {
    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
}

unsafe fn opt_bytes(p: *const c_void, len: usize) -> Option<Vec<u8>> {
    (!p.is_null()).then(|| {
        if len == 0 {
            Vec::new()
        } else {
            std::slice::from_raw_parts(p as *const u8, len).to_vec()
        }
    })
}

/// # Safety
/// `p` is NULL or a valid fi_info whose non-NULL pointers are valid.
pub unsafe fn from_c(p: *const fi_info) -> Option<Info> {
    let i = p.as_ref()?;
    Some(Info {
        caps: i.caps,
        mode: i.mode,
        addr_format: i.addr_format,
        src_addr: opt_bytes(i.src_addr, i.src_addrlen),
        dest_addr: opt_bytes(i.dest_addr, i.dest_addrlen),
        tx: i.tx_attr.as_ref().map(|t| Tx {
            caps: t.caps,
            mode: t.mode,
            op_flags: t.op_flags,
            msg_order: t.msg_order,
            comp_order: t.comp_order,
            inject_size: t.inject_size,
            size: t.size,
            iov_limit: t.iov_limit,
            rma_iov_limit: t.rma_iov_limit,
            tclass: t.tclass,
        }),
        rx: i.rx_attr.as_ref().map(|r| Rx {
            caps: r.caps,
            mode: r.mode,
            op_flags: r.op_flags,
            msg_order: r.msg_order,
            comp_order: r.comp_order,
            total_buffered_recv: r.total_buffered_recv,
            size: r.size,
            iov_limit: r.iov_limit,
        }),
        ep: i.ep_attr.as_ref().map(|e| Ep {
            ep_type: e.type_,
            protocol: e.protocol,
            protocol_version: e.protocol_version,
            max_msg_size: e.max_msg_size,
            msg_prefix_size: e.msg_prefix_size,
            max_order_raw_size: e.max_order_raw_size,
            max_order_war_size: e.max_order_war_size,
            max_order_waw_size: e.max_order_waw_size,
            mem_tag_format: e.mem_tag_format,
            tx_ctx_cnt: e.tx_ctx_cnt,
            rx_ctx_cnt: e.rx_ctx_cnt,
            auth_key: opt_bytes(e.auth_key as *const c_void, e.auth_key_size),
        }),
        domain: i.domain_attr.as_ref().map(|d| Domain {
            name: opt_str(d.name),
            threading: d.threading,
            control_progress: d.control_progress,
            data_progress: d.data_progress,
            resource_mgmt: d.resource_mgmt,
            av_type: d.av_type,
            mr_mode: d.mr_mode,
            mr_key_size: d.mr_key_size,
            cq_data_size: d.cq_data_size,
            cq_cnt: d.cq_cnt,
            ep_cnt: d.ep_cnt,
            tx_ctx_cnt: d.tx_ctx_cnt,
            rx_ctx_cnt: d.rx_ctx_cnt,
            max_ep_tx_ctx: d.max_ep_tx_ctx,
            max_ep_rx_ctx: d.max_ep_rx_ctx,
            max_ep_stx_ctx: d.max_ep_stx_ctx,
            max_ep_srx_ctx: d.max_ep_srx_ctx,
            cntr_cnt: d.cntr_cnt,
            mr_iov_limit: d.mr_iov_limit,
            caps: d.caps,
            mode: d.mode,
            auth_key: opt_bytes(d.auth_key as *const c_void, d.auth_key_size),
            max_err_data: d.max_err_data,
            mr_cnt: d.mr_cnt,
            tclass: d.tclass,
        }),
        fabric: i.fabric_attr.as_ref().map(|f| Fabric {
            name: opt_str(f.name),
            prov_name: opt_str(f.prov_name),
            prov_version: f.prov_version,
            api_version: f.api_version,
        }),
    })
}

unsafe fn calloc<T>() -> Result<*mut T, i32> {
    let p = libc::calloc(1, std::mem::size_of::<T>()) as *mut T;
    if p.is_null() {
        Err(FI_ENOMEM)
    } else {
        Ok(p)
    }
}

unsafe fn dup_bytes(b: &Option<Vec<u8>>) -> Result<(*mut u8, usize), i32> {
    let Some(b) = b else {
        return Ok((std::ptr::null_mut(), 0));
    };
    let p = libc::malloc(b.len().max(1)) as *mut u8;
    if p.is_null() {
        return Err(FI_ENOMEM);
    }
    std::ptr::copy_nonoverlapping(b.as_ptr(), p, b.len());
    Ok((p, b.len()))
}

unsafe fn dup_str(s: &Option<String>) -> Result<*mut c_char, i32> {
    let Some(s) = s else {
        return Ok(std::ptr::null_mut());
    };
    let c = CString::new(s.as_str()).map_err(|_| FI_EINVAL)?;
    let p = libc::strdup(c.as_ptr());
    if p.is_null() {
        Err(FI_ENOMEM)
    } else {
        Ok(p)
    }
}

/// A malloc'ed fi_info for `i`, freeable by fi_freeinfo (or [`free_c`]).
pub fn to_c(i: &Info) -> Result<*mut fi_info, i32> {
    // SAFETY: only fresh allocations are written; on error everything made so far is freed.
    unsafe {
        let p = calloc::<fi_info>()?;
        let r = fill(p, i);
        if let Err(e) = r {
            free_c(p);
            return Err(e);
        }
        Ok(p)
    }
}

unsafe fn fill(p: *mut fi_info, i: &Info) -> Result<(), i32> {
    let o = &mut *p;
    o.caps = i.caps;
    o.mode = i.mode;
    o.addr_format = i.addr_format;
    (o.src_addr, o.src_addrlen) = {
        let (a, l) = dup_bytes(&i.src_addr)?;
        (a as *mut c_void, l)
    };
    (o.dest_addr, o.dest_addrlen) = {
        let (a, l) = dup_bytes(&i.dest_addr)?;
        (a as *mut c_void, l)
    };
    if let Some(t) = &i.tx {
        o.tx_attr = calloc()?;
        *o.tx_attr = fi_tx_attr {
            caps: t.caps,
            mode: t.mode,
            op_flags: t.op_flags,
            msg_order: t.msg_order,
            comp_order: t.comp_order,
            inject_size: t.inject_size,
            size: t.size,
            iov_limit: t.iov_limit,
            rma_iov_limit: t.rma_iov_limit,
            tclass: t.tclass,
        };
    }
    if let Some(r) = &i.rx {
        o.rx_attr = calloc()?;
        *o.rx_attr = fi_rx_attr {
            caps: r.caps,
            mode: r.mode,
            op_flags: r.op_flags,
            msg_order: r.msg_order,
            comp_order: r.comp_order,
            total_buffered_recv: r.total_buffered_recv,
            size: r.size,
            iov_limit: r.iov_limit,
        };
    }
    if let Some(e) = &i.ep {
        o.ep_attr = calloc()?;
        let a = &mut *o.ep_attr;
        a.type_ = e.ep_type;
        a.protocol = e.protocol;
        a.protocol_version = e.protocol_version;
        a.max_msg_size = e.max_msg_size;
        a.msg_prefix_size = e.msg_prefix_size;
        a.max_order_raw_size = e.max_order_raw_size;
        a.max_order_war_size = e.max_order_war_size;
        a.max_order_waw_size = e.max_order_waw_size;
        a.mem_tag_format = e.mem_tag_format;
        a.tx_ctx_cnt = e.tx_ctx_cnt;
        a.rx_ctx_cnt = e.rx_ctx_cnt;
        (a.auth_key, a.auth_key_size) = dup_bytes(&e.auth_key)?;
    }
    if let Some(d) = &i.domain {
        o.domain_attr = calloc()?;
        let a = &mut *o.domain_attr;
        a.name = dup_str(&d.name)?;
        a.threading = d.threading;
        a.control_progress = d.control_progress;
        a.data_progress = d.data_progress;
        a.resource_mgmt = d.resource_mgmt;
        a.av_type = d.av_type;
        a.mr_mode = d.mr_mode;
        a.mr_key_size = d.mr_key_size;
        a.cq_data_size = d.cq_data_size;
        a.cq_cnt = d.cq_cnt;
        a.ep_cnt = d.ep_cnt;
        a.tx_ctx_cnt = d.tx_ctx_cnt;
        a.rx_ctx_cnt = d.rx_ctx_cnt;
        a.max_ep_tx_ctx = d.max_ep_tx_ctx;
        a.max_ep_rx_ctx = d.max_ep_rx_ctx;
        a.max_ep_stx_ctx = d.max_ep_stx_ctx;
        a.max_ep_srx_ctx = d.max_ep_srx_ctx;
        a.cntr_cnt = d.cntr_cnt;
        a.mr_iov_limit = d.mr_iov_limit;
        a.caps = d.caps;
        a.mode = d.mode;
        (a.auth_key, a.auth_key_size) = dup_bytes(&d.auth_key)?;
        a.max_err_data = d.max_err_data;
        a.mr_cnt = d.mr_cnt;
        a.tclass = d.tclass;
    }
    if let Some(f) = &i.fabric {
        o.fabric_attr = calloc()?;
        let a = &mut *o.fabric_attr;
        a.name = dup_str(&f.name)?;
        a.prov_name = dup_str(&f.prov_name)?;
        a.prov_version = f.prov_version;
        a.api_version = f.api_version;
    }
    Ok(())
}

/// What fi_freeinfo does, for infos that never reached libfabric (errors, unit tests).
///
/// # Safety
/// `p` is NULL or a list made by [`to_c`].
pub unsafe fn free_c(mut p: *mut fi_info) {
    use libc::free;
    while !p.is_null() {
        let i = &mut *p;
        let next = i.next;
        free(i.src_addr);
        free(i.dest_addr);
        free(i.tx_attr as *mut c_void);
        free(i.rx_attr as *mut c_void);
        if !i.ep_attr.is_null() {
            free((*i.ep_attr).auth_key as *mut c_void);
            free(i.ep_attr as *mut c_void);
        }
        if !i.domain_attr.is_null() {
            free((*i.domain_attr).auth_key as *mut c_void);
            free((*i.domain_attr).name as *mut c_void);
            free(i.domain_attr as *mut c_void);
        }
        if !i.fabric_attr.is_null() {
            free((*i.fabric_attr).name as *mut c_void);
            free((*i.fabric_attr).prov_name as *mut c_void);
            free(i.fabric_attr as *mut c_void);
        }
        free(p as *mut c_void);
        p = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_through_c() {
        let mut i = offer();
        i.src_addr = Some(vec![3; 64]);
        i.domain.as_mut().unwrap().auth_key = Some(b"k".to_vec());
        i.ep.as_mut().unwrap().auth_key = Some(b"ep".to_vec());
        let p = to_c(&i).unwrap();
        let back = unsafe { from_c(p) }.unwrap();
        unsafe { free_c(p) };
        assert_eq!(back, i);
        assert!(unsafe { from_c(std::ptr::null()) }.is_none());
    }
}
