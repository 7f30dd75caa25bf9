//! libhxcomm: the native C API of hxcomm (header `include/hxcomm.h`).
//!
//! A thin ABI in the style of rustls-ffi: every `extern "C"` function checks its pointers, converts
//! handles and errors, and makes one call into [`hx_engine::Engine`]. Panics are caught at the
//! boundary and become `HX_ERR_PANIC`. No messaging logic lives here.
//!
//! Handles: an `hx_context` owns the engine (one per process, not thread-safe); an `hx_endpoint`
//! is a local endpoint id plus a pointer to its context; an `hx_target` is a plain
//! `(rank, endpoint)` pair naming a remote endpoint (DP-II's `dp_target`); an `hx_request` is the
//! engine's request handle as a `u64`.

#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use hx_engine::{Engine, Error, Request, Status, BARRIER_EP};
use hx_protocol::ProtoError;

/// Success.
pub const HX_OK: c_int = 0;
/// A caller error: NULL pointer, bad rank or endpoint, unknown request, reserved tag.
pub const HX_ERR_INVALID: c_int = 1;
/// The message was longer than the receive buffer; the buffer holds its first bytes.
pub const HX_ERR_TRUNCATED: c_int = 2;
/// The peer rank failed (its connection broke); operations involving it fail.
pub const HX_ERR_PEER: c_int = 3;
/// A system call failed.
pub const HX_ERR_IO: c_int = 4;
/// A setting (environment variable) is malformed.
pub const HX_ERR_CONFIG: c_int = 5;
/// Rails could not be set up.
pub const HX_ERR_SETUP: c_int = 6;
/// The launcher's bootstrap service failed.
pub const HX_ERR_BOOTSTRAP: c_int = 7;
/// A peer sent something that breaks the protocol.
pub const HX_ERR_PROTOCOL: c_int = 8;
/// hxcomm panicked (a bug); the context should only be finalized.
pub const HX_ERR_PANIC: c_int = 9;

/// Receive from any source rank.
pub const HX_ANY_SOURCE: u32 = u32::MAX;
/// Receive with any tag; reserved, sending with it is an error.
pub const HX_ANY_TAG: u64 = u64::MAX;

/// The engine of this process.
pub struct hx_context {
    engine: Engine,
    /// Endpoint handles not yet closed: finalize refuses while some are open.
    open_endpoints: usize,
}

/// A local endpoint.
pub struct hx_endpoint {
    ctx: NonNull<hx_context>,
    id: u16,
}

/// A remote endpoint: a rank and an endpoint id of that rank.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct hx_target {
    pub rank: u32,
    pub endpoint: u16,
}

/// A nonblocking operation in flight.
pub type hx_request = u64;

/// What a completed receive got (for sends: destination and length).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct hx_status {
    pub source: u32,
    pub src_endpoint: u16,
    pub tag: u64,
    /// Length of the message as sent.
    pub length: usize,
    /// Nonzero if the message was longer than the buffer (only the buffer's length was stored).
    pub truncated: c_int,
}

impl From<Status> for hx_status {
    fn from(s: Status) -> Self {
        hx_status {
            source: s.source,
            src_endpoint: s.src_ep,
            tag: s.tag,
            length: s.len,
            truncated: s.truncated as c_int,
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(msg: String) {
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

fn code(e: &Error) -> c_int {
    match e {
        Error::Config(_) => HX_ERR_CONFIG,
        Error::Setup(_) => HX_ERR_SETUP,
        Error::Bootstrap(_) => HX_ERR_BOOTSTRAP,
        Error::Io { .. } => HX_ERR_IO,
        Error::Protocol(ProtoError::PeerFailed { .. }) => HX_ERR_PEER,
        Error::Protocol(ProtoError::Invalid(_)) => HX_ERR_INVALID,
        Error::Protocol(_) => HX_ERR_PROTOCOL,
        Error::Truncated(_) => HX_ERR_TRUNCATED,
        Error::Invalid(_) => HX_ERR_INVALID,
    }
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}

/// Runs `f` behind the boundary: errors become codes (and the thread's last error message),
/// panics become `HX_ERR_PANIC`.
fn guard(func: &str, f: impl FnOnce() -> Result<(), Error>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => HX_OK,
        Ok(Err(e)) => {
            set_last_error(format!("{func}: {e}"));
            code(&e)
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(format!("{func}: internal error (panic): {what}"));
            HX_ERR_PANIC
        }
    }
}

fn out<'a, T>(p: *mut T, func: &str, name: &str) -> Result<&'a mut T, Error> {
    // SAFETY: the caller promises that a non-NULL pointer is valid for writes.
    unsafe { p.as_mut() }.ok_or_else(|| invalid(format!("{name} is NULL (in {func})")))
}

fn ctx_mut<'a>(ctx: *mut hx_context, func: &str) -> Result<&'a mut hx_context, Error> {
    out(ctx, func, "context")
}

fn ctx_ref<'a>(ctx: *const hx_context, func: &str) -> Result<&'a hx_context, Error> {
    // SAFETY: the caller promises that a non-NULL context is live.
    unsafe { ctx.as_ref() }.ok_or_else(|| invalid(format!("context is NULL (in {func})")))
}

/// The endpoint's id and its context's engine.
fn ep_engine<'a>(ep: *const hx_endpoint, func: &str) -> Result<(u16, &'a mut Engine), Error> {
    // SAFETY: the caller promises that a non-NULL endpoint is live, hence so is its context.
    let ep =
        unsafe { ep.as_ref() }.ok_or_else(|| invalid(format!("endpoint is NULL (in {func})")))?;
    let ctx = unsafe { &mut *ep.ctx.as_ptr() };
    Ok((ep.id, &mut ctx.engine))
}

/// A buffer pointer the engine may hold: NULL is allowed only for zero bytes.
fn buf_ptr(p: *const c_void, len: usize, func: &str) -> Result<*mut u8, Error> {
    if p.is_null() {
        if len == 0 {
            return Ok(NonNull::<u8>::dangling().as_ptr());
        }
        return Err(invalid(format!(
            "buffer is NULL with length {len} (in {func})"
        )));
    }
    Ok(p as *mut u8)
}

fn src_opt(source: u32) -> Option<u32> {
    (source != HX_ANY_SOURCE).then_some(source)
}

fn tag_opt(tag: u64) -> Option<u64> {
    (tag != HX_ANY_TAG).then_some(tag)
}

fn send_tag(tag: u64) -> Result<u64, Error> {
    if tag == HX_ANY_TAG {
        Err(invalid("tag HX_ANY_TAG is reserved for receives"))
    } else {
        Ok(tag)
    }
}

fn put_status(st: *mut hx_status, s: Status) {
    // SAFETY: the caller promises that a non-NULL status pointer is valid for writes.
    if let Some(o) = unsafe { st.as_mut() } {
        *o = s.into();
    }
}

/// Fills the status of a truncated receive too, then passes the error on.
fn with_status(st: *mut hx_status, r: Result<Status, Error>) -> Result<(), Error> {
    match r {
        Ok(s) => {
            put_status(st, s);
            Ok(())
        }
        Err(Error::Truncated(s)) => {
            put_status(st, s);
            Err(Error::Truncated(s))
        }
        Err(e) => Err(e),
    }
}

/// Joins the job (from the environment `hxcomm run` sets; without it, a job of one rank).
///
/// # Safety
/// `out` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_init(out_ctx: *mut *mut hx_context) -> c_int {
    guard("hx_init", || {
        let o = out(out_ctx, "hx_init", "out")?;
        *o = std::ptr::null_mut();
        let engine = Engine::init()?;
        *o = Box::into_raw(Box::new(hx_context {
            engine,
            open_endpoints: 0,
        }));
        Ok(())
    })
}

/// Completes outstanding sends, waits for every rank, closes the rails and frees the context.
/// Refused (and nothing freed) while endpoints are open.
///
/// # Safety
/// `ctx` must be NULL or a live context; after `HX_OK` it is freed.
#[no_mangle]
pub unsafe extern "C" fn hx_finalize(ctx: *mut hx_context) -> c_int {
    guard("hx_finalize", || {
        let c = ctx_mut(ctx, "hx_finalize")?;
        if c.open_endpoints > 0 {
            return Err(invalid(format!(
                "{} endpoint(s) still open; hx_close them first",
                c.open_endpoints
            )));
        }
        // SAFETY: checked non-NULL; the caller gives up the context.
        let b = unsafe { Box::from_raw(ctx) };
        b.engine.finalize()
    })
}

/// This process's rank.
///
/// # Safety
/// `ctx` must be NULL or live; `rank` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_rank(ctx: *const hx_context, rank: *mut u32) -> c_int {
    guard("hx_rank", || {
        let c = ctx_ref(ctx, "hx_rank")?;
        *out(rank, "hx_rank", "rank")? = c.engine.rank();
        Ok(())
    })
}

/// The number of ranks in the job.
///
/// # Safety
/// `ctx` must be NULL or live; `size` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_size(ctx: *const hx_context, size: *mut u32) -> c_int {
    guard("hx_size", || {
        let c = ctx_ref(ctx, "hx_size")?;
        *out(size, "hx_size", "size")? = c.engine.size();
        Ok(())
    })
}

/// Opens local endpoint `id` (0..65534).
///
/// # Safety
/// `ctx` must be NULL or live; `ep` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_open(
    ctx: *mut hx_context,
    id: u16,
    ep: *mut *mut hx_endpoint,
) -> c_int {
    guard("hx_open", || {
        let o = out(ep, "hx_open", "out")?;
        *o = std::ptr::null_mut();
        let c = ctx_mut(ctx, "hx_open")?;
        c.engine.open_endpoint(id)?;
        c.open_endpoints += 1;
        *o = Box::into_raw(Box::new(hx_endpoint {
            ctx: NonNull::from(c),
            id,
        }));
        Ok(())
    })
}

/// Closes an endpoint and frees the handle.
///
/// # Safety
/// `ep` must be NULL or a live endpoint; after `HX_OK` it is freed.
#[no_mangle]
pub unsafe extern "C" fn hx_close(ep: *mut hx_endpoint) -> c_int {
    guard("hx_close", || {
        let (id, engine) = ep_engine(ep, "hx_close")?;
        engine.close_endpoint(id)?;
        // SAFETY: checked non-NULL; the caller gives up the handle.
        let b = unsafe { Box::from_raw(ep) };
        // SAFETY: the context outlives its endpoints (finalize refuses while any is open).
        unsafe { (*b.ctx.as_ptr()).open_endpoints -= 1 };
        Ok(())
    })
}

/// The id of a local endpoint.
///
/// # Safety
/// `ep` must be NULL or live; `id` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_endpoint_id(ep: *const hx_endpoint, id: *mut u16) -> c_int {
    guard("hx_endpoint_id", || {
        let (e, _) = ep_engine(ep, "hx_endpoint_id")?;
        *out(id, "hx_endpoint_id", "id")? = e;
        Ok(())
    })
}

/// Names endpoint `endpoint` of `rank` as a destination (checks that both exist in this job).
///
/// # Safety
/// `ep` must be NULL or live; `target` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_target_init(
    ep: *const hx_endpoint,
    rank: u32,
    endpoint: u16,
    target: *mut hx_target,
) -> c_int {
    guard("hx_target_init", || {
        let (_, engine) = ep_engine(ep, "hx_target_init")?;
        let t = out(target, "hx_target_init", "target")?;
        if rank >= engine.size() {
            return Err(invalid(format!(
                "rank {rank} is not in this job of {} ranks",
                engine.size()
            )));
        }
        if endpoint == BARRIER_EP {
            return Err(invalid(format!("endpoint id {endpoint} is reserved")));
        }
        *t = hx_target { rank, endpoint };
        Ok(())
    })
}

/// Starts sending `len` bytes at `buf` to `target` with `tag`.
///
/// # Safety
/// `ep` NULL or live; `buf` valid for `len` bytes and unmodified until the request completes;
/// `req` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_iwrite(
    ep: *mut hx_endpoint,
    target: hx_target,
    tag: u64,
    buf: *const c_void,
    len: usize,
    req: *mut hx_request,
) -> c_int {
    guard("hx_iwrite", || {
        let (id, engine) = ep_engine(ep, "hx_iwrite")?;
        let r = out(req, "hx_iwrite", "req")?;
        let p = buf_ptr(buf, len, "hx_iwrite")?;
        let tag = send_tag(tag)?;
        // SAFETY: the caller keeps the buffer valid until completion.
        let rq = unsafe { engine.isend_raw(id, target.rank, target.endpoint, tag, p, len)? };
        *r = rq.to_u64();
        Ok(())
    })
}

/// Starts receiving into `cap` bytes at `buf` a message for this endpoint from `source`
/// (or `HX_ANY_SOURCE`) with `tag` (or `HX_ANY_TAG`).
///
/// # Safety
/// `ep` NULL or live; `buf` valid for `cap` bytes and untouched until the request completes;
/// `req` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_iread(
    ep: *mut hx_endpoint,
    source: u32,
    tag: u64,
    buf: *mut c_void,
    cap: usize,
    req: *mut hx_request,
) -> c_int {
    guard("hx_iread", || {
        let (id, engine) = ep_engine(ep, "hx_iread")?;
        let r = out(req, "hx_iread", "req")?;
        let p = buf_ptr(buf, cap, "hx_iread")?;
        // SAFETY: the caller keeps the buffer valid until completion.
        let rq = unsafe { engine.irecv_raw(id, src_opt(source), tag_opt(tag), p, cap)? };
        *r = rq.to_u64();
        Ok(())
    })
}

/// Sends and returns when `buf` may be reused.
///
/// # Safety
/// `ep` NULL or live; `buf` valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hx_write(
    ep: *mut hx_endpoint,
    target: hx_target,
    tag: u64,
    buf: *const c_void,
    len: usize,
) -> c_int {
    guard("hx_write", || {
        let (id, engine) = ep_engine(ep, "hx_write")?;
        let p = buf_ptr(buf, len, "hx_write")?;
        let tag = send_tag(tag)?;
        // SAFETY: the caller's buffer is valid for `len` bytes for the duration of the call.
        let data = unsafe { std::slice::from_raw_parts(p, len) };
        engine.send(id, target.rank, target.endpoint, tag, data)
    })
}

/// Receives a message; `status` (may be NULL) says who sent what, also on `HX_ERR_TRUNCATED`.
///
/// # Safety
/// `ep` NULL or live; `buf` valid for `cap` bytes; `status` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_read(
    ep: *mut hx_endpoint,
    source: u32,
    tag: u64,
    buf: *mut c_void,
    cap: usize,
    status: *mut hx_status,
) -> c_int {
    guard("hx_read", || {
        let (id, engine) = ep_engine(ep, "hx_read")?;
        let p = buf_ptr(buf, cap, "hx_read")?;
        // SAFETY: the caller's buffer is valid for `cap` bytes for the duration of the call.
        let data = unsafe { std::slice::from_raw_parts_mut(p, cap) };
        with_status(status, engine.recv(id, src_opt(source), tag_opt(tag), data))
    })
}

/// Makes progress; sets `*done` and, when done, fills `status` (may be NULL) and releases `req`.
///
/// # Safety
/// `ctx` NULL or live; `done` NULL or valid for writes; `status` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_test(
    ctx: *mut hx_context,
    req: hx_request,
    done: *mut c_int,
    status: *mut hx_status,
) -> c_int {
    guard("hx_test", || {
        let c = ctx_mut(ctx, "hx_test")?;
        let d = out(done, "hx_test", "done")?;
        *d = 0;
        match c.engine.test(Request::from_u64(req)) {
            Ok(None) => Ok(()),
            Ok(Some(s)) => {
                *d = 1;
                put_status(status, s);
                Ok(())
            }
            Err(e) => {
                // Finished with an error (or never existed): either way the handle is spent.
                *d = 1;
                with_status(status, Err(e))
            }
        }
    })
}

/// Waits until `req` completes, fills `status` (may be NULL) and releases `req`.
///
/// # Safety
/// `ctx` NULL or live; `status` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_wait(
    ctx: *mut hx_context,
    req: hx_request,
    status: *mut hx_status,
) -> c_int {
    guard("hx_wait", || {
        let c = ctx_mut(ctx, "hx_wait")?;
        with_status(status, c.engine.wait(Request::from_u64(req)))
    })
}

/// Waits for `n` requests and releases them; on success fills `statuses` (may be NULL, else `n`
/// entries). On failure returns the first error once all are done.
///
/// # Safety
/// `ctx` NULL or live; `reqs` valid for `n` reads; `statuses` NULL or valid for `n` writes.
#[no_mangle]
pub unsafe extern "C" fn hx_waitall(
    ctx: *mut hx_context,
    n: usize,
    reqs: *const hx_request,
    statuses: *mut hx_status,
) -> c_int {
    guard("hx_waitall", || {
        let c = ctx_mut(ctx, "hx_waitall")?;
        if n == 0 {
            return Ok(());
        }
        if reqs.is_null() {
            return Err(invalid("reqs is NULL"));
        }
        // SAFETY: the caller gives `n` readable handles.
        let handles: Vec<Request> = unsafe { std::slice::from_raw_parts(reqs, n) }
            .iter()
            .map(|&r| Request::from_u64(r))
            .collect();
        let sts = c.engine.wait_all(&handles)?;
        if !statuses.is_null() {
            for (i, s) in sts.into_iter().enumerate() {
                // SAFETY: the caller gives room for `n` statuses.
                unsafe { *statuses.add(i) = s.into() };
            }
        }
        Ok(())
    })
}

/// Makes progress, then says whether a message matching (`source`, `tag`) waits for this
/// endpoint; if so fills `status` (may be NULL) without receiving it.
///
/// # Safety
/// `ep` NULL or live; `found` NULL or valid for writes; `status` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_probe(
    ep: *mut hx_endpoint,
    source: u32,
    tag: u64,
    found: *mut c_int,
    status: *mut hx_status,
) -> c_int {
    guard("hx_probe", || {
        let (id, engine) = ep_engine(ep, "hx_probe")?;
        let f = out(found, "hx_probe", "found")?;
        *f = 0;
        if let Some(s) = engine.probe(id, src_opt(source), tag_opt(tag))? {
            *f = 1;
            put_status(status, s);
        }
        Ok(())
    })
}

/// Handles whatever is ready, without blocking.
///
/// # Safety
/// `ctx` NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hx_progress(ctx: *mut hx_context) -> c_int {
    guard("hx_progress", || {
        ctx_mut(ctx, "hx_progress")?.engine.progress()
    })
}

/// A file descriptor that becomes readable when the engine has work: poll it with your other
/// fds, then call `hx_test` / `hx_progress`. Do not read from or close it.
///
/// # Safety
/// `ctx` NULL or live; `fd` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_fd(ctx: *const hx_context, fd: *mut c_int) -> c_int {
    guard("hx_fd", || {
        let c = ctx_ref(ctx, "hx_fd")?;
        *out(fd, "hx_fd", "fd")? = c.engine.fd();
        Ok(())
    })
}

/// The pollable fd for an endpoint (the engine's fd, shared by all endpoints of the context).
///
/// # Safety
/// `ep` NULL or live; `fd` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_endpoint_fd(ep: *const hx_endpoint, fd: *mut c_int) -> c_int {
    guard("hx_endpoint_fd", || {
        let (_, engine) = ep_engine(ep, "hx_endpoint_fd")?;
        *out(fd, "hx_endpoint_fd", "fd")? = engine.fd();
        Ok(())
    })
}

/// Returns when every rank has entered the barrier.
///
/// # Safety
/// `ctx` NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hx_barrier(ctx: *mut hx_context) -> c_int {
    guard("hx_barrier", || {
        ctx_mut(ctx, "hx_barrier")?.engine.barrier()
    })
}

/// A static description of an `HX_*` result code.
#[no_mangle]
pub extern "C" fn hx_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        HX_OK => c"success",
        HX_ERR_INVALID => c"invalid argument",
        HX_ERR_TRUNCATED => c"message truncated",
        HX_ERR_PEER => c"peer rank failed",
        HX_ERR_IO => c"I/O error",
        HX_ERR_CONFIG => c"configuration error",
        HX_ERR_SETUP => c"rail setup failed",
        HX_ERR_BOOTSTRAP => c"bootstrap failed",
        HX_ERR_PROTOCOL => c"protocol error",
        HX_ERR_PANIC => c"internal error (panic)",
        _ => c"unknown result code",
    };
    s.as_ptr()
}

/// The message of the last failure on this thread (with context), or "" if none. Valid until
/// the next failing hxcomm call on this thread.
#[no_mangle]
pub extern "C" fn hx_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

#[cfg(test)]
mod tests;
