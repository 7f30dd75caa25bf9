//! Hand-written libfabric 1.17 ABI: exactly the structs, ops tables and constants this provider
//! touches. `tests/layout.rs` checks every size, offset and value against the installed headers.
#![allow(non_camel_case_types, non_upper_case_globals, dead_code)]

use libc::{c_char, c_int, c_void, iovec, size_t, ssize_t};

pub type fi_addr_t = u64;
pub type fid_t = *mut fid;

pub const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}
pub const FI_MAJOR_VERSION: u32 = 1;
pub const FI_MINOR_VERSION: u32 = 17;

// ---- errno values (positive; calls return the negation) ----
pub const FI_SUCCESS: i32 = 0;
pub const FI_EPERM: i32 = libc::EPERM;
pub const FI_ENOENT: i32 = libc::ENOENT;
pub const FI_EINTR: i32 = libc::EINTR;
pub const FI_EIO: i32 = libc::EIO;
pub const FI_EBADF: i32 = libc::EBADF;
pub const FI_EAGAIN: i32 = libc::EAGAIN;
pub const FI_ENOMEM: i32 = libc::ENOMEM;
pub const FI_EACCES: i32 = libc::EACCES;
pub const FI_EFAULT: i32 = libc::EFAULT;
pub const FI_EBUSY: i32 = libc::EBUSY;
pub const FI_ENODEV: i32 = libc::ENODEV;
pub const FI_EINVAL: i32 = libc::EINVAL;
pub const FI_ENOSPC: i32 = libc::ENOSPC;
pub const FI_ENOSYS: i32 = libc::ENOSYS;
pub const FI_ENOMSG: i32 = libc::ENOMSG;
pub const FI_ENODATA: i32 = libc::ENODATA;
pub const FI_EOVERFLOW: i32 = libc::EOVERFLOW;
pub const FI_EMSGSIZE: i32 = libc::EMSGSIZE;
pub const FI_ENOPROTOOPT: i32 = libc::ENOPROTOOPT;
pub const FI_EOPNOTSUPP: i32 = libc::EOPNOTSUPP;
pub const FI_EADDRNOTAVAIL: i32 = libc::EADDRNOTAVAIL;
pub const FI_ECONNRESET: i32 = libc::ECONNRESET;
pub const FI_ENOTCONN: i32 = libc::ENOTCONN;
pub const FI_ETIMEDOUT: i32 = libc::ETIMEDOUT;
pub const FI_EHOSTUNREACH: i32 = libc::EHOSTUNREACH;
pub const FI_ECANCELED: i32 = libc::ECANCELED;
pub const FI_EKEYREJECTED: i32 = libc::EKEYREJECTED;
pub const FI_EOTHER: i32 = 256;
pub const FI_ETOOSMALL: i32 = 257;
pub const FI_EOPBADSTATE: i32 = 258;
pub const FI_EAVAIL: i32 = 259;
pub const FI_EBADFLAGS: i32 = 260;
pub const FI_ENOEQ: i32 = 261;
pub const FI_EDOMAIN: i32 = 262;
pub const FI_ENOCQ: i32 = 263;
pub const FI_ECRC: i32 = 264;
pub const FI_ETRUNC: i32 = 265;
pub const FI_ENOKEY: i32 = 266;
pub const FI_ENOAV: i32 = 267;
pub const FI_EOVERRUN: i32 = 268;
pub const FI_ENORX: i32 = 269;

// ---- capabilities and operation flags ----
pub const FI_MSG: u64 = 1 << 1;
pub const FI_RMA: u64 = 1 << 2;
pub const FI_TAGGED: u64 = 1 << 3;
pub const FI_ATOMIC: u64 = 1 << 4;
pub const FI_MULTICAST: u64 = 1 << 5;
pub const FI_COLLECTIVE: u64 = 1 << 6;
pub const FI_READ: u64 = 1 << 8;
pub const FI_WRITE: u64 = 1 << 9;
pub const FI_RECV: u64 = 1 << 10;
pub const FI_SEND: u64 = 1 << 11;
pub const FI_TRANSMIT: u64 = FI_SEND;
pub const FI_REMOTE_READ: u64 = 1 << 12;
pub const FI_REMOTE_WRITE: u64 = 1 << 13;
pub const FI_MULTI_RECV: u64 = 1 << 16;
pub const FI_REMOTE_CQ_DATA: u64 = 1 << 17;
pub const FI_MORE: u64 = 1 << 18;
pub const FI_PEEK: u64 = 1 << 19;
pub const FI_TRIGGER: u64 = 1 << 20;
pub const FI_FENCE: u64 = 1 << 21;
pub const FI_PRIORITY: u64 = 1 << 22;
pub const FI_COMPLETION: u64 = 1 << 24;
pub const FI_INJECT: u64 = 1 << 25;
pub const FI_INJECT_COMPLETE: u64 = 1 << 26;
pub const FI_TRANSMIT_COMPLETE: u64 = 1 << 27;
pub const FI_DELIVERY_COMPLETE: u64 = 1 << 28;
pub const FI_AFFINITY: u64 = 1 << 29;
pub const FI_COMMIT_COMPLETE: u64 = 1 << 30;
pub const FI_MATCH_COMPLETE: u64 = 1 << 31;
pub const FI_AV_USER_ID: u64 = 1 << 41;
pub const FI_PEER: u64 = 1 << 43;
pub const FI_HMEM: u64 = 1 << 47;
pub const FI_VARIABLE_MSG: u64 = 1 << 48;
pub const FI_RMA_PMEM: u64 = 1 << 49;
pub const FI_SOURCE_ERR: u64 = 1 << 50;
pub const FI_LOCAL_COMM: u64 = 1 << 51;
pub const FI_REMOTE_COMM: u64 = 1 << 52;
pub const FI_SHARED_AV: u64 = 1 << 53;
pub const FI_PROV_ATTR_ONLY: u64 = 1 << 54;
pub const FI_NUMERICHOST: u64 = 1 << 55;
pub const FI_RMA_EVENT: u64 = 1 << 56;
pub const FI_SOURCE: u64 = 1 << 57;
pub const FI_NAMED_RX_CTX: u64 = 1 << 58;
pub const FI_DIRECTED_RECV: u64 = 1 << 59;
pub const FI_CLAIM: u64 = 1 << 59;
pub const FI_DISCARD: u64 = 1 << 58;
pub const FI_SELECTIVE_COMPLETION: u64 = 1 << 59;
pub const FI_SYNC_ERR: u64 = 1 << 58;

// ---- mode bits ----
pub const FI_CONTEXT: u64 = 1 << 59;
pub const FI_MSG_PREFIX: u64 = 1 << 58;
pub const FI_ASYNC_IOV: u64 = 1 << 57;
pub const FI_RX_CQ_DATA: u64 = 1 << 56;
pub const FI_LOCAL_MR: u64 = 1 << 55;
pub const FI_CONTEXT2: u64 = 1 << 52;
pub const FI_BUFFERED_RECV: u64 = 1 << 51;

// ---- address formats ----
pub const FI_FORMAT_UNSPEC: u32 = 0;
pub const FI_SOCKADDR: u32 = 1;
pub const FI_SOCKADDR_IN: u32 = 2;
pub const FI_ADDR_STR: u32 = 9;
pub const FI_ADDR_UNSPEC: u64 = u64::MAX;
pub const FI_ADDR_NOTAVAIL: u64 = u64::MAX;

// ---- enums (C enums are int-sized here) ----
pub const FI_AV_UNSPEC: c_int = 0;
pub const FI_AV_MAP: c_int = 1;
pub const FI_AV_TABLE: c_int = 2;

pub const FI_MR_UNSPEC: c_int = 0;
pub const FI_MR_BASIC: c_int = 1;
pub const FI_MR_SCALABLE: c_int = 2;
pub const FI_MR_LOCAL: c_int = 1 << 2;
pub const FI_MR_RAW: c_int = 1 << 3;
pub const FI_MR_VIRT_ADDR: c_int = 1 << 4;
pub const FI_MR_ALLOCATED: c_int = 1 << 5;
pub const FI_MR_PROV_KEY: c_int = 1 << 6;
pub const FI_MR_MMU_NOTIFY: c_int = 1 << 7;
pub const FI_MR_RMA_EVENT: c_int = 1 << 8;
pub const FI_MR_ENDPOINT: c_int = 1 << 9;
pub const FI_MR_HMEM: c_int = 1 << 10;
pub const FI_MR_COLLECTIVE: c_int = 1 << 11;

pub const FI_PROGRESS_UNSPEC: c_int = 0;
pub const FI_PROGRESS_AUTO: c_int = 1;
pub const FI_PROGRESS_MANUAL: c_int = 2;

pub const FI_THREAD_UNSPEC: c_int = 0;
pub const FI_THREAD_SAFE: c_int = 1;
pub const FI_THREAD_FID: c_int = 2;
pub const FI_THREAD_DOMAIN: c_int = 3;
pub const FI_THREAD_COMPLETION: c_int = 4;
pub const FI_THREAD_ENDPOINT: c_int = 5;

pub const FI_RM_UNSPEC: c_int = 0;
pub const FI_RM_DISABLED: c_int = 1;
pub const FI_RM_ENABLED: c_int = 2;

pub const FI_ORDER_NONE: u64 = 0;
pub const FI_ORDER_SAS: u64 = 1 << 8;
pub const FI_ORDER_STRICT: u64 = 0x1FF;

pub const FI_EP_UNSPEC: c_int = 0;
pub const FI_EP_MSG: c_int = 1;
pub const FI_EP_DGRAM: c_int = 2;
pub const FI_EP_RDM: c_int = 3;

pub const FI_PROTO_UNSPEC: u32 = 0;

pub const FI_CLASS_FABRIC: size_t = 1;
pub const FI_CLASS_DOMAIN: size_t = 2;
pub const FI_CLASS_EP: size_t = 3;
pub const FI_CLASS_AV: size_t = 11;
pub const FI_CLASS_MR: size_t = 12;
pub const FI_CLASS_CQ: size_t = 14;
pub const FI_CLASS_CNTR: size_t = 15;
pub const FI_CLASS_EQ: size_t = 13;

pub const FI_GETWAIT: c_int = 5;
pub const FI_ENABLE: c_int = 6;
pub const FI_GETWAITOBJ: c_int = 16;

pub const FI_WAIT_NONE: c_int = 0;
pub const FI_WAIT_UNSPEC: c_int = 1;
pub const FI_WAIT_SET: c_int = 2;
pub const FI_WAIT_FD: c_int = 3;
pub const FI_WAIT_MUTEX_COND: c_int = 4;
pub const FI_WAIT_YIELD: c_int = 5;
pub const FI_WAIT_POLLFD: c_int = 6;

pub const FI_CQ_FORMAT_UNSPEC: c_int = 0;
pub const FI_CQ_FORMAT_CONTEXT: c_int = 1;
pub const FI_CQ_FORMAT_MSG: c_int = 2;
pub const FI_CQ_FORMAT_DATA: c_int = 3;
pub const FI_CQ_FORMAT_TAGGED: c_int = 4;

pub const FI_CQ_COND_NONE: c_int = 0;

pub const FI_OPT_ENDPOINT: c_int = 0;
pub const FI_OPT_MIN_MULTI_RECV: c_int = 0;

pub const FI_PARAM_STRING: c_int = 0;

pub const FI_LOG_WARN: c_int = 0;
pub const FI_LOG_INFO: c_int = 2;
pub const FI_LOG_DEBUG: c_int = 3;
pub const FI_LOG_CORE: c_int = 0;
pub const FI_LOG_FABRIC: c_int = 1;
pub const FI_LOG_DOMAIN: c_int = 2;
pub const FI_LOG_EP_CTRL: c_int = 3;
pub const FI_LOG_EP_DATA: c_int = 4;
pub const FI_LOG_AV: c_int = 5;
pub const FI_LOG_CQ: c_int = 6;

// ---- info and attributes ----
#[repr(C)]
pub struct fi_tx_attr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: size_t,
    pub size: size_t,
    pub iov_limit: size_t,
    pub rma_iov_limit: size_t,
    pub tclass: u32,
}

#[repr(C)]
pub struct fi_rx_attr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: size_t,
    pub size: size_t,
    pub iov_limit: size_t,
}

#[repr(C)]
pub struct fi_ep_attr {
    pub type_: c_int,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: size_t,
    pub msg_prefix_size: size_t,
    pub max_order_raw_size: size_t,
    pub max_order_war_size: size_t,
    pub max_order_waw_size: size_t,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: size_t,
    pub rx_ctx_cnt: size_t,
    pub auth_key_size: size_t,
    pub auth_key: *mut u8,
}

#[repr(C)]
pub struct fi_domain_attr {
    pub domain: *mut fid_domain,
    pub name: *mut c_char,
    pub threading: c_int,
    pub control_progress: c_int,
    pub data_progress: c_int,
    pub resource_mgmt: c_int,
    pub av_type: c_int,
    pub mr_mode: c_int,
    pub mr_key_size: size_t,
    pub cq_data_size: size_t,
    pub cq_cnt: size_t,
    pub ep_cnt: size_t,
    pub tx_ctx_cnt: size_t,
    pub rx_ctx_cnt: size_t,
    pub max_ep_tx_ctx: size_t,
    pub max_ep_rx_ctx: size_t,
    pub max_ep_stx_ctx: size_t,
    pub max_ep_srx_ctx: size_t,
    pub cntr_cnt: size_t,
    pub mr_iov_limit: size_t,
    pub caps: u64,
    pub mode: u64,
    pub auth_key: *mut u8,
    pub auth_key_size: size_t,
    pub max_err_data: size_t,
    pub mr_cnt: size_t,
    pub tclass: u32,
}

#[repr(C)]
pub struct fi_fabric_attr {
    pub fabric: *mut fid_fabric,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

#[repr(C)]
pub struct fi_info {
    pub next: *mut fi_info,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: size_t,
    pub dest_addrlen: size_t,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: fid_t,
    pub tx_attr: *mut fi_tx_attr,
    pub rx_attr: *mut fi_rx_attr,
    pub ep_attr: *mut fi_ep_attr,
    pub domain_attr: *mut fi_domain_attr,
    pub fabric_attr: *mut fi_fabric_attr,
    pub nic: *mut c_void,
}

// ---- fid and ops tables ----
pub type CloseFn = unsafe extern "C" fn(*mut fid) -> c_int;
pub type BindFn = unsafe extern "C" fn(*mut fid, *mut fid, u64) -> c_int;
pub type ControlFn = unsafe extern "C" fn(*mut fid, c_int, *mut c_void) -> c_int;
pub type OpsOpenFn =
    unsafe extern "C" fn(*mut fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int;
pub type TostrFn = unsafe extern "C" fn(*const fid, *mut c_char, size_t) -> c_int;
pub type OpsSetFn =
    unsafe extern "C" fn(*mut fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int;

#[repr(C)]
pub struct fi_ops {
    pub size: size_t,
    pub close: Option<CloseFn>,
    pub bind: Option<BindFn>,
    pub control: Option<ControlFn>,
    pub ops_open: Option<OpsOpenFn>,
    pub tostr: Option<TostrFn>,
    pub ops_set: Option<OpsSetFn>,
}

#[repr(C)]
pub struct fid {
    pub fclass: size_t,
    pub context: *mut c_void,
    pub ops: *mut fi_ops,
}

#[repr(C)]
pub struct fi_ops_fabric {
    pub size: size_t,
    pub domain: Option<
        unsafe extern "C" fn(
            *mut fid_fabric,
            *mut fi_info,
            *mut *mut fid_domain,
            *mut c_void,
        ) -> c_int,
    >,
    pub passive_ep: Option<
        unsafe extern "C" fn(*mut fid_fabric, *mut fi_info, *mut *mut c_void, *mut c_void) -> c_int,
    >,
    pub eq_open: Option<
        unsafe extern "C" fn(*mut fid_fabric, *mut c_void, *mut *mut c_void, *mut c_void) -> c_int,
    >,
    pub wait_open:
        Option<unsafe extern "C" fn(*mut fid_fabric, *mut c_void, *mut *mut c_void) -> c_int>,
    pub trywait: Option<unsafe extern "C" fn(*mut fid_fabric, *mut *mut fid, c_int) -> c_int>,
    pub domain2: Option<
        unsafe extern "C" fn(
            *mut fid_fabric,
            *mut fi_info,
            *mut *mut fid_domain,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
}

#[repr(C)]
pub struct fid_fabric {
    pub fid: fid,
    pub ops: *mut fi_ops_fabric,
    pub api_version: u32,
}

#[repr(C)]
pub struct fi_ops_domain {
    pub size: size_t,
    pub av_open: Option<
        unsafe extern "C" fn(
            *mut fid_domain,
            *mut fi_av_attr,
            *mut *mut fid_av,
            *mut c_void,
        ) -> c_int,
    >,
    pub cq_open: Option<
        unsafe extern "C" fn(
            *mut fid_domain,
            *mut fi_cq_attr,
            *mut *mut fid_cq,
            *mut c_void,
        ) -> c_int,
    >,
    pub endpoint: Option<
        unsafe extern "C" fn(*mut fid_domain, *mut fi_info, *mut *mut fid_ep, *mut c_void) -> c_int,
    >,
    pub scalable_ep: Option<
        unsafe extern "C" fn(*mut fid_domain, *mut fi_info, *mut *mut fid_ep, *mut c_void) -> c_int,
    >,
    pub cntr_open: Option<
        unsafe extern "C" fn(*mut fid_domain, *mut c_void, *mut *mut c_void, *mut c_void) -> c_int,
    >,
    pub poll_open:
        Option<unsafe extern "C" fn(*mut fid_domain, *mut c_void, *mut *mut c_void) -> c_int>,
    pub stx_ctx: Option<
        unsafe extern "C" fn(
            *mut fid_domain,
            *mut fi_tx_attr,
            *mut *mut c_void,
            *mut c_void,
        ) -> c_int,
    >,
    pub srx_ctx: Option<
        unsafe extern "C" fn(
            *mut fid_domain,
            *mut fi_rx_attr,
            *mut *mut fid_ep,
            *mut c_void,
        ) -> c_int,
    >,
    pub query_atomic: Option<
        unsafe extern "C" fn(*mut fid_domain, c_int, c_int, *mut fi_atomic_attr, u64) -> c_int,
    >,
    pub query_collective:
        Option<unsafe extern "C" fn(*mut fid_domain, c_int, *mut c_void, u64) -> c_int>,
    pub endpoint2: Option<
        unsafe extern "C" fn(
            *mut fid_domain,
            *mut fi_info,
            *mut *mut fid_ep,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
}

#[repr(C)]
pub struct fi_ops_mr {
    pub size: size_t,
    pub reg: Option<
        unsafe extern "C" fn(
            *mut fid,
            *const c_void,
            size_t,
            u64,
            u64,
            u64,
            u64,
            *mut *mut fid_mr,
            *mut c_void,
        ) -> c_int,
    >,
    pub regv: Option<
        unsafe extern "C" fn(
            *mut fid,
            *const iovec,
            size_t,
            u64,
            u64,
            u64,
            u64,
            *mut *mut fid_mr,
            *mut c_void,
        ) -> c_int,
    >,
    pub regattr:
        Option<unsafe extern "C" fn(*mut fid, *const fi_mr_attr, u64, *mut *mut fid_mr) -> c_int>,
}

#[repr(C)]
pub struct fid_domain {
    pub fid: fid,
    pub ops: *mut fi_ops_domain,
    pub mr: *mut fi_ops_mr,
}

#[repr(C)]
pub struct fid_mr {
    pub fid: fid,
    pub mem_desc: *mut c_void,
    pub key: u64,
}

#[repr(C)]
pub struct fi_av_attr {
    pub type_: c_int,
    pub rx_ctx_bits: c_int,
    pub count: size_t,
    pub ep_per_node: size_t,
    pub name: *const c_char,
    pub map_addr: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
pub struct fi_ops_av {
    pub size: size_t,
    pub insert: Option<
        unsafe extern "C" fn(
            *mut fid_av,
            *const c_void,
            size_t,
            *mut fi_addr_t,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
    pub insertsvc: Option<
        unsafe extern "C" fn(
            *mut fid_av,
            *const c_char,
            *const c_char,
            *mut fi_addr_t,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
    pub insertsym: Option<
        unsafe extern "C" fn(
            *mut fid_av,
            *const c_char,
            size_t,
            *const c_char,
            size_t,
            *mut fi_addr_t,
            u64,
            *mut c_void,
        ) -> c_int,
    >,
    pub remove: Option<unsafe extern "C" fn(*mut fid_av, *mut fi_addr_t, size_t, u64) -> c_int>,
    pub lookup:
        Option<unsafe extern "C" fn(*mut fid_av, fi_addr_t, *mut c_void, *mut size_t) -> c_int>,
    pub straddr: Option<
        unsafe extern "C" fn(*mut fid_av, *const c_void, *mut c_char, *mut size_t) -> *const c_char,
    >,
    pub av_set: Option<
        unsafe extern "C" fn(*mut fid_av, *mut c_void, *mut *mut c_void, *mut c_void) -> c_int,
    >,
}

#[repr(C)]
pub struct fid_av {
    pub fid: fid,
    pub ops: *mut fi_ops_av,
}

// ---- completion queues ----
#[repr(C)]
pub struct fi_cq_attr {
    pub size: size_t,
    pub flags: u64,
    pub format: c_int,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_cond: c_int,
    pub wait_set: *mut c_void,
}

#[repr(C)]
pub struct fi_cq_entry {
    pub op_context: *mut c_void,
}

#[repr(C)]
pub struct fi_cq_msg_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: size_t,
}

#[repr(C)]
pub struct fi_cq_data_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: size_t,
    pub buf: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_cq_tagged_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: size_t,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
}

#[repr(C)]
pub struct fi_cq_err_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: size_t,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: size_t,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: size_t,
}

/// Bytes of `fi_cq_err_entry` as defined by API 1.0 (everything before `err_data_size`):
/// what fi_cq_readerr may write for callers that pass `err_data_size == 0` or an API < 1.5.
pub const FI_CQ_ERR_ENTRY_1_0_SIZE: usize = std::mem::offset_of!(fi_cq_err_entry, err_data_size);

#[repr(C)]
pub struct fi_ops_cq {
    pub size: size_t,
    pub read: Option<unsafe extern "C" fn(*mut fid_cq, *mut c_void, size_t) -> ssize_t>,
    pub readfrom:
        Option<unsafe extern "C" fn(*mut fid_cq, *mut c_void, size_t, *mut fi_addr_t) -> ssize_t>,
    pub readerr: Option<unsafe extern "C" fn(*mut fid_cq, *mut fi_cq_err_entry, u64) -> ssize_t>,
    pub sread: Option<
        unsafe extern "C" fn(*mut fid_cq, *mut c_void, size_t, *const c_void, c_int) -> ssize_t,
    >,
    pub sreadfrom: Option<
        unsafe extern "C" fn(
            *mut fid_cq,
            *mut c_void,
            size_t,
            *mut fi_addr_t,
            *const c_void,
            c_int,
        ) -> ssize_t,
    >,
    pub signal: Option<unsafe extern "C" fn(*mut fid_cq) -> c_int>,
    pub strerror: Option<
        unsafe extern "C" fn(
            *mut fid_cq,
            c_int,
            *const c_void,
            *mut c_char,
            size_t,
        ) -> *const c_char,
    >,
}

#[repr(C)]
pub struct fid_cq {
    pub fid: fid,
    pub ops: *mut fi_ops_cq,
}

// ---- endpoints ----
#[repr(C)]
pub struct fi_msg {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: size_t,
    pub addr: fi_addr_t,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_msg_tagged {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: size_t,
    pub addr: fi_addr_t,
    pub tag: u64,
    pub ignore: u64,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_ops_ep {
    pub size: size_t,
    pub cancel: Option<unsafe extern "C" fn(fid_t, *mut c_void) -> ssize_t>,
    pub getopt:
        Option<unsafe extern "C" fn(fid_t, c_int, c_int, *mut c_void, *mut size_t) -> c_int>,
    pub setopt: Option<unsafe extern "C" fn(fid_t, c_int, c_int, *const c_void, size_t) -> c_int>,
    pub tx_ctx: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            c_int,
            *mut fi_tx_attr,
            *mut *mut fid_ep,
            *mut c_void,
        ) -> c_int,
    >,
    pub rx_ctx: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            c_int,
            *mut fi_rx_attr,
            *mut *mut fid_ep,
            *mut c_void,
        ) -> c_int,
    >,
    pub rx_size_left: Option<unsafe extern "C" fn(*mut fid_ep) -> ssize_t>,
    pub tx_size_left: Option<unsafe extern "C" fn(*mut fid_ep) -> ssize_t>,
}

#[repr(C)]
pub struct fi_ops_cm {
    pub size: size_t,
    pub setname: Option<unsafe extern "C" fn(fid_t, *mut c_void, size_t) -> c_int>,
    pub getname: Option<unsafe extern "C" fn(fid_t, *mut c_void, *mut size_t) -> c_int>,
    pub getpeer: Option<unsafe extern "C" fn(*mut fid_ep, *mut c_void, *mut size_t) -> c_int>,
    pub connect:
        Option<unsafe extern "C" fn(*mut fid_ep, *const c_void, *const c_void, size_t) -> c_int>,
    pub listen: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    pub accept: Option<unsafe extern "C" fn(*mut fid_ep, *const c_void, size_t) -> c_int>,
    pub reject: Option<unsafe extern "C" fn(*mut c_void, fid_t, *const c_void, size_t) -> c_int>,
    pub shutdown: Option<unsafe extern "C" fn(*mut fid_ep, u64) -> c_int>,
    pub join: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const c_void,
            u64,
            *mut *mut c_void,
            *mut c_void,
        ) -> c_int,
    >,
}

/// `struct fi_mr_attr` (fi_mr_regattr).
#[repr(C)]
pub struct fi_mr_attr {
    pub mr_iov: *const iovec,
    pub iov_count: size_t,
    pub access: u64,
    pub offset: u64,
    pub requested_key: u64,
    pub context: *mut c_void,
    pub auth_key_size: size_t,
    pub auth_key: *mut u8,
    pub iface: c_int,
    pub device: u64,
}

#[repr(C)]
pub struct fi_rma_iov {
    pub addr: u64,
    pub len: size_t,
    pub key: u64,
}

#[repr(C)]
pub struct fi_msg_rma {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: size_t,
    pub addr: fi_addr_t,
    pub rma_iov: *const fi_rma_iov,
    pub rma_iov_count: size_t,
    pub context: *mut c_void,
    pub data: u64,
}

pub type RmaFn = unsafe extern "C" fn(
    *mut fid_ep,
    *mut c_void,
    size_t,
    *mut c_void,
    fi_addr_t,
    u64,
    u64,
    *mut c_void,
) -> ssize_t;
pub type RmaVFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const iovec,
    *mut *mut c_void,
    size_t,
    fi_addr_t,
    u64,
    u64,
    *mut c_void,
) -> ssize_t;
pub type RmaMsgFn = unsafe extern "C" fn(*mut fid_ep, *const fi_msg_rma, u64) -> ssize_t;

#[repr(C)]
pub struct fi_ops_rma {
    pub size: size_t,
    pub read: Option<RmaFn>,
    pub readv: Option<RmaVFn>,
    pub readmsg: Option<RmaMsgFn>,
    pub write: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const c_void,
            size_t,
            *mut c_void,
            fi_addr_t,
            u64,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub writev: Option<RmaVFn>,
    pub writemsg: Option<RmaMsgFn>,
    pub inject: Option<
        unsafe extern "C" fn(*mut fid_ep, *const c_void, size_t, fi_addr_t, u64, u64) -> ssize_t,
    >,
    pub writedata: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const c_void,
            size_t,
            *mut c_void,
            u64,
            fi_addr_t,
            u64,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub injectdata: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const c_void,
            size_t,
            u64,
            fi_addr_t,
            u64,
            u64,
        ) -> ssize_t,
    >,
}

// ---- atomics (fi_atomic.h; enum fi_datatype and enum fi_op are int-sized) ----
pub const FI_INT8: c_int = 0;
pub const FI_UINT8: c_int = 1;
pub const FI_INT16: c_int = 2;
pub const FI_UINT16: c_int = 3;
pub const FI_INT32: c_int = 4;
pub const FI_UINT32: c_int = 5;
pub const FI_INT64: c_int = 6;
pub const FI_UINT64: c_int = 7;
pub const FI_FLOAT: c_int = 8;
pub const FI_DOUBLE: c_int = 9;
pub const FI_FLOAT_COMPLEX: c_int = 10;
pub const FI_DOUBLE_COMPLEX: c_int = 11;
pub const FI_LONG_DOUBLE: c_int = 12;
pub const FI_LONG_DOUBLE_COMPLEX: c_int = 13;
pub const FI_DATATYPE_LAST: c_int = 14;
pub const FI_INT128: c_int = 14;
pub const FI_UINT128: c_int = 15;

pub const FI_MIN: c_int = 0;
pub const FI_MAX: c_int = 1;
pub const FI_SUM: c_int = 2;
pub const FI_PROD: c_int = 3;
pub const FI_LOR: c_int = 4;
pub const FI_LAND: c_int = 5;
pub const FI_BOR: c_int = 6;
pub const FI_BAND: c_int = 7;
pub const FI_LXOR: c_int = 8;
pub const FI_BXOR: c_int = 9;
pub const FI_ATOMIC_READ: c_int = 10;
pub const FI_ATOMIC_WRITE: c_int = 11;
pub const FI_CSWAP: c_int = 12;
pub const FI_CSWAP_NE: c_int = 13;
pub const FI_CSWAP_LE: c_int = 14;
pub const FI_CSWAP_LT: c_int = 15;
pub const FI_CSWAP_GE: c_int = 16;
pub const FI_CSWAP_GT: c_int = 17;
pub const FI_MSWAP: c_int = 18;
pub const FI_ATOMIC_OP_LAST: c_int = 19;

/// fi_query_atomic flags: the fetching and the compare family (neither: fi_atomic).
pub const FI_FETCH_ATOMIC: u64 = 1 << 58;
pub const FI_COMPARE_ATOMIC: u64 = 1 << 59;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_ioc {
    pub addr: *mut c_void,
    pub count: size_t,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_rma_ioc {
    pub addr: u64,
    pub count: size_t,
    pub key: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_msg_atomic {
    pub msg_iov: *const fi_ioc,
    pub desc: *mut *mut c_void,
    pub iov_count: size_t,
    pub addr: fi_addr_t,
    pub rma_iov: *const fi_rma_ioc,
    pub rma_iov_count: size_t,
    pub datatype: c_int,
    pub op: c_int,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fi_atomic_attr {
    pub count: size_t,
    pub size: size_t,
}

pub type AtomicValidFn = unsafe extern "C" fn(*mut fid_ep, c_int, c_int, *mut size_t) -> c_int;
pub type AtomicWriteFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const c_void,
    size_t,
    *mut c_void,
    fi_addr_t,
    u64,
    u64,
    c_int,
    c_int,
    *mut c_void,
) -> ssize_t;
pub type AtomicWriteVFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const fi_ioc,
    *mut *mut c_void,
    size_t,
    fi_addr_t,
    u64,
    u64,
    c_int,
    c_int,
    *mut c_void,
) -> ssize_t;
pub type AtomicWriteMsgFn = unsafe extern "C" fn(*mut fid_ep, *const fi_msg_atomic, u64) -> ssize_t;
pub type AtomicInjectFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const c_void,
    size_t,
    fi_addr_t,
    u64,
    u64,
    c_int,
    c_int,
) -> ssize_t;
pub type AtomicReadWriteFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const c_void,
    size_t,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    fi_addr_t,
    u64,
    u64,
    c_int,
    c_int,
    *mut c_void,
) -> ssize_t;
pub type AtomicReadWriteVFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const fi_ioc,
    *mut *mut c_void,
    size_t,
    *mut fi_ioc,
    *mut *mut c_void,
    size_t,
    fi_addr_t,
    u64,
    u64,
    c_int,
    c_int,
    *mut c_void,
) -> ssize_t;
pub type AtomicReadWriteMsgFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const fi_msg_atomic,
    *mut fi_ioc,
    *mut *mut c_void,
    size_t,
    u64,
) -> ssize_t;
pub type AtomicCompWriteFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const c_void,
    size_t,
    *mut c_void,
    *const c_void,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    fi_addr_t,
    u64,
    u64,
    c_int,
    c_int,
    *mut c_void,
) -> ssize_t;
pub type AtomicCompWriteVFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const fi_ioc,
    *mut *mut c_void,
    size_t,
    *const fi_ioc,
    *mut *mut c_void,
    size_t,
    *mut fi_ioc,
    *mut *mut c_void,
    size_t,
    fi_addr_t,
    u64,
    u64,
    c_int,
    c_int,
    *mut c_void,
) -> ssize_t;
pub type AtomicCompWriteMsgFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const fi_msg_atomic,
    *const fi_ioc,
    *mut *mut c_void,
    size_t,
    *mut fi_ioc,
    *mut *mut c_void,
    size_t,
    u64,
) -> ssize_t;

#[repr(C)]
pub struct fi_ops_atomic {
    pub size: size_t,
    pub write: Option<AtomicWriteFn>,
    pub writev: Option<AtomicWriteVFn>,
    pub writemsg: Option<AtomicWriteMsgFn>,
    pub inject: Option<AtomicInjectFn>,
    pub readwrite: Option<AtomicReadWriteFn>,
    pub readwritev: Option<AtomicReadWriteVFn>,
    pub readwritemsg: Option<AtomicReadWriteMsgFn>,
    pub compwrite: Option<AtomicCompWriteFn>,
    pub compwritev: Option<AtomicCompWriteVFn>,
    pub compwritemsg: Option<AtomicCompWriteMsgFn>,
    pub writevalid: Option<AtomicValidFn>,
    pub readwritevalid: Option<AtomicValidFn>,
    pub compwritevalid: Option<AtomicValidFn>,
}

#[repr(C)]
pub struct fi_ops_msg {
    pub size: size_t,
    pub recv: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *mut c_void,
            size_t,
            *mut c_void,
            fi_addr_t,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub recvv: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const iovec,
            *mut *mut c_void,
            size_t,
            fi_addr_t,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub recvmsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg, u64) -> ssize_t>,
    pub send: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const c_void,
            size_t,
            *mut c_void,
            fi_addr_t,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub sendv: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const iovec,
            *mut *mut c_void,
            size_t,
            fi_addr_t,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub sendmsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg, u64) -> ssize_t>,
    pub inject:
        Option<unsafe extern "C" fn(*mut fid_ep, *const c_void, size_t, fi_addr_t) -> ssize_t>,
    pub senddata: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const c_void,
            size_t,
            *mut c_void,
            u64,
            fi_addr_t,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub injectdata:
        Option<unsafe extern "C" fn(*mut fid_ep, *const c_void, size_t, u64, fi_addr_t) -> ssize_t>,
}

#[repr(C)]
pub struct fi_ops_tagged {
    pub size: size_t,
    pub recv: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *mut c_void,
            size_t,
            *mut c_void,
            fi_addr_t,
            u64,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub recvv: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const iovec,
            *mut *mut c_void,
            size_t,
            fi_addr_t,
            u64,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub recvmsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg_tagged, u64) -> ssize_t>,
    pub send: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const c_void,
            size_t,
            *mut c_void,
            fi_addr_t,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub sendv: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const iovec,
            *mut *mut c_void,
            size_t,
            fi_addr_t,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub sendmsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg_tagged, u64) -> ssize_t>,
    pub inject:
        Option<unsafe extern "C" fn(*mut fid_ep, *const c_void, size_t, fi_addr_t, u64) -> ssize_t>,
    pub senddata: Option<
        unsafe extern "C" fn(
            *mut fid_ep,
            *const c_void,
            size_t,
            *mut c_void,
            u64,
            fi_addr_t,
            u64,
            *mut c_void,
        ) -> ssize_t,
    >,
    pub injectdata: Option<
        unsafe extern "C" fn(*mut fid_ep, *const c_void, size_t, u64, fi_addr_t, u64) -> ssize_t,
    >,
}

#[repr(C)]
pub struct fid_ep {
    pub fid: fid,
    pub ops: *mut fi_ops_ep,
    pub cm: *mut fi_ops_cm,
    pub msg: *mut fi_ops_msg,
    pub rma: *mut fi_ops_rma,
    pub tagged: *mut fi_ops_tagged,
    pub atomic: *mut fi_ops_atomic,
    pub collective: *mut c_void,
}

// ---- the provider ----
#[repr(C)]
pub struct fi_context {
    pub internal: [*mut c_void; 4],
}

#[repr(C)]
pub struct fi_provider {
    pub version: u32,
    pub fi_version: u32,
    pub context: fi_context,
    pub name: *const c_char,
    pub getinfo: Option<
        unsafe extern "C" fn(
            u32,
            *const c_char,
            *const c_char,
            u64,
            *const fi_info,
            *mut *mut fi_info,
        ) -> c_int,
    >,
    pub fabric: Option<
        unsafe extern "C" fn(*mut fi_fabric_attr, *mut *mut fid_fabric, *mut c_void) -> c_int,
    >,
    pub cleanup: Option<unsafe extern "C" fn()>,
}

// libfabric's exported public API (libfabric.so.1). Only used from the plugin once loaded, and by
// the tests that link it.
#[link(name = "fabric")]
extern "C" {
    pub fn fi_param_define(
        provider: *const fi_provider,
        param_name: *const c_char,
        type_: c_int,
        help_string_fmt: *const c_char,
        ...
    ) -> c_int;
    pub fn fi_param_get(
        provider: *mut fi_provider,
        param_name: *const c_char,
        value: *mut c_void,
    ) -> c_int;
    pub fn fi_log_enabled(prov: *const fi_provider, level: c_int, subsys: c_int) -> c_int;
    pub fn fi_log(
        prov: *const fi_provider,
        level: c_int,
        subsys: c_int,
        func: *const c_char,
        line: c_int,
        fmt: *const c_char,
        ...
    );
    pub fn fi_strerror(errnum: c_int) -> *const c_char;
}

// ---- event queues ----
#[repr(C)]
pub struct fi_eq_attr {
    pub size: size_t,
    pub flags: u64,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_set: *mut c_void,
}

#[repr(C)]
pub struct fi_eq_err_entry {
    pub fid: *mut fid,
    pub context: *mut c_void,
    pub data: u64,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: size_t,
}

#[repr(C)]
pub struct fi_ops_eq {
    pub size: size_t,
    pub read:
        Option<unsafe extern "C" fn(*mut fid_eq, *mut u32, *mut c_void, size_t, u64) -> ssize_t>,
    pub readerr: Option<unsafe extern "C" fn(*mut fid_eq, *mut fi_eq_err_entry, u64) -> ssize_t>,
    pub write:
        Option<unsafe extern "C" fn(*mut fid_eq, u32, *const c_void, size_t, u64) -> ssize_t>,
    pub sread: Option<
        unsafe extern "C" fn(*mut fid_eq, *mut u32, *mut c_void, size_t, c_int, u64) -> ssize_t,
    >,
    pub strerror: Option<
        unsafe extern "C" fn(
            *mut fid_eq,
            c_int,
            *const c_void,
            *mut libc::c_char,
            size_t,
        ) -> *const libc::c_char,
    >,
}

#[repr(C)]
pub struct fid_eq {
    pub fid: fid,
    pub ops: *mut fi_ops_eq,
}
