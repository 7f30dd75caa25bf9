//! libhxcomm: the native C API of hxcomm (header `include/hxcomm.h`).
//!
//! A thin ABI in the style of rustls-ffi: every `extern "C"` function checks its pointers, converts
//! handles and errors, and makes one call into [`hx_engine::Engine`]. Panics are caught at the
//! boundary and become `HX_ERR_PANIC`. No messaging logic lives here.
//!
//! Handles: `hx_context *` and `hx_endpoint *` are checked handles into a process-wide registry
//! (module `registry`), never dereferenced, so a stale one is an error (`HX_ERR_HANDLE`) and not
//! a crash. A context owns its engine behind a mutex taken by every entry point; with
//! `HX_THREAD_MULTIPLE` blocking calls give the lock up between progress rounds. An `hx_target`
//! is a plain `(rank, endpoint)` pair naming a remote endpoint (DP-II's `dp_target`); an
//! `hx_request` is the engine's request handle as a `u64`, an `hx_message` a matched probe's
//! claim as a `u64`.

#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Arc;

use hx_engine::{Engine, EngineBuf, Error, Request, Status, BARRIER_EP};
use hx_protocol::{Filter, ProtoError};

mod registry;
use registry::{Ctx, Ep};

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
/// A context or endpoint handle that is not live: closed, finalized, of the other kind, or never
/// returned by hxcomm.
pub const HX_ERR_HANDLE: c_int = 10;

/// `hx_init_thread` levels: every call is safe from any thread; a blocking call keeps the
/// context's lock until it returns (other threads' calls on the context wait for it).
pub const HX_THREAD_SERIALIZED: c_int = 0;
/// Blocking calls give the context's lock up while they wait, so other threads can use the
/// context meanwhile (a blocking read in one thread while another sends).
pub const HX_THREAD_MULTIPLE: c_int = 1;

/// The largest message, in bytes (what the protocol core accepts: 16 x (2^32 - 1)); larger
/// sends and receive capacities are refused.
pub const HX_MAX_MESSAGE: u64 = 16 * u32::MAX as u64;
/// An `hx_message` that holds no claimed message.
pub const HX_MESSAGE_NULL: u64 = 0;

/// Receive from any source rank.
pub const HX_ANY_SOURCE: u32 = u32::MAX;
/// Receive with any tag; reserved, sending with it is an error.
pub const HX_ANY_TAG: u64 = u64::MAX;

/// The engine of this process, as C sees it: an opaque handle (see [`registry`]).
pub struct hx_context {
    _opaque: [u8; 0],
}

/// A local endpoint, as C sees it: an opaque handle (see [`registry`]).
pub struct hx_endpoint {
    _opaque: [u8; 0],
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

/// A failure on its way to C: a result code and its message.
pub(crate) struct Fail {
    code: c_int,
    msg: String,
}

impl Fail {
    fn invalid(msg: impl Into<String>) -> Fail {
        Fail {
            code: HX_ERR_INVALID,
            msg: msg.into(),
        }
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail {
            code: code(&e),
            msg: e.to_string(),
        }
    }
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

fn invalid(msg: impl Into<String>) -> Fail {
    Fail::invalid(msg)
}

/// Runs `f` behind the boundary: errors become codes (and the thread's last error message),
/// panics become `HX_ERR_PANIC`.
fn guard(func: &str, f: impl FnOnce() -> Result<(), Fail>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => HX_OK,
        Ok(Err(e)) => {
            set_last_error(format!("{func}: {}", e.msg));
            e.code
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

fn out<'a, T>(p: *mut T, func: &str, name: &str) -> Result<&'a mut T, Fail> {
    // SAFETY: the caller promises that a non-NULL pointer is valid for writes.
    unsafe { p.as_mut() }.ok_or_else(|| invalid(format!("{name} is NULL (in {func})")))
}

/// The context behind a handle (checked: never dereferenced).
fn ctx_of(ctx: *const hx_context, func: &str) -> Result<(usize, Arc<Ctx>), Fail> {
    if ctx.is_null() {
        return Err(invalid(format!("context is NULL (in {func})")));
    }
    let h = ctx as usize;
    Ok((h, registry::context(h)?))
}

/// The endpoint behind a handle: its handle value and context.
fn ep_of(ep: *const hx_endpoint, func: &str) -> Result<(usize, Ep), Fail> {
    if ep.is_null() {
        return Err(invalid(format!("endpoint is NULL (in {func})")));
    }
    let h = ep as usize;
    Ok((h, registry::endpoint(h)?))
}

/// Runs `f` on the endpoint's id and engine under its context's lock (the endpoint must still
/// be open).
fn with_ep<T>(
    ep: *const hx_endpoint,
    func: &str,
    f: impl FnOnce(u16, &mut Engine) -> Result<T, Fail>,
) -> Result<T, Fail> {
    let (h, e) = ep_of(ep, func)?;
    let mut st = e.ctx.lock();
    let id = st.endpoint(h)?;
    f(id, st.engine()?)
}

/// Runs `f` on the context's engine under its lock.
fn with_ctx<T>(
    ctx: *const hx_context,
    func: &str,
    f: impl FnOnce(&mut Engine) -> Result<T, Fail>,
) -> Result<T, Fail> {
    let (_, c) = ctx_of(ctx, func)?;
    let mut st = c.lock();
    f(st.engine()?)
}

/// Idle rounds of a blocking call that only yield before they sleep in poll().
const SPIN_ROUNDS: u32 = 64;

/// Waits for `fd` to become readable, at most `ms` milliseconds.
fn poll_fd(fd: c_int, ms: c_int) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) };
}

/// A blocking call's loop: `step` runs under the context's lock and says whether it is done.
/// `HX_THREAD_SERIALIZED` keeps the lock throughout; `HX_THREAD_MULTIPLE` drops it between
/// rounds (yielding first, then sleeping up to 1 ms in poll() on the engine's fd), so other
/// threads' calls get in.
fn block<T>(
    c: &Ctx,
    mut step: impl FnMut(&mut Engine) -> Result<Option<T>, Fail>,
) -> Result<T, Fail> {
    let mut idle = 0u32;
    if !c.multiple {
        let mut st = c.lock();
        let eng = st.engine()?;
        loop {
            if let Some(v) = step(eng)? {
                return Ok(v);
            }
            idle = idle.saturating_add(1);
            if idle > SPIN_ROUNDS {
                poll_fd(c.fd, 1);
            }
        }
    }
    loop {
        {
            let mut st = c.lock();
            if let Some(v) = step(st.engine()?)? {
                return Ok(v);
            }
        }
        idle = idle.saturating_add(1);
        if idle <= SPIN_ROUNDS {
            std::thread::yield_now();
        } else {
            poll_fd(c.fd, 1);
        }
    }
}

/// Waits for one request: the engine's own wait under the lock (serialized), or test rounds
/// that give the lock up between them (multiple).
fn wait_req(c: &Ctx, req: Request) -> Result<Status, Error> {
    if !c.multiple {
        let mut st = c.lock();
        return match st.engine() {
            Ok(e) => e.wait(req),
            Err(f) => Err(Error::Invalid(f.msg)),
        };
    }
    match block(c, |e| match e.test(req) {
        Ok(None) => Ok(None),
        Ok(Some(s)) => Ok(Some(Ok(s))),
        Err(err) => Ok(Some(Err(err))),
    }) {
        Ok(r) => r,
        Err(f) => Err(Error::Invalid(f.msg)),
    }
}

/// A buffer pointer the engine may hold: NULL is allowed only for zero bytes.
fn buf_ptr(p: *const c_void, len: usize, func: &str) -> Result<*mut u8, Fail> {
    if p.is_null() {
        if len == 0 {
            return Ok(NonNull::<u8>::dangling().as_ptr());
        }
        return Err(invalid(format!(
            "buffer is NULL with length {len} (in {func})"
        )));
    }
    if len as u64 > HX_MAX_MESSAGE {
        return Err(invalid(format!(
            "length {len} is above the largest message, HX_MAX_MESSAGE = {HX_MAX_MESSAGE} (in {func})"
        )));
    }
    Ok(p as *mut u8)
}

/// A receive's or probe's source: a rank of the job or `HX_ANY_SOURCE`.
fn src_opt(source: u32, size: u32) -> Result<Option<u32>, Fail> {
    if source == HX_ANY_SOURCE {
        Ok(None)
    } else if source >= size {
        Err(invalid(format!(
            "source rank {source} is not in this job of {size} ranks"
        )))
    } else {
        Ok(Some(source))
    }
}

fn tag_opt(tag: u64) -> Option<u64> {
    (tag != HX_ANY_TAG).then_some(tag)
}

fn send_tag(tag: u64) -> Result<u64, Fail> {
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
fn with_status(st: *mut hx_status, r: Result<Status, Error>) -> Result<(), Fail> {
    match r {
        Ok(s) => {
            put_status(st, s);
            Ok(())
        }
        Err(Error::Truncated(s)) => {
            put_status(st, s);
            Err(Error::Truncated(s).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// Joins the job (from the environment `hxcomm run` sets; without it, a job of one rank), with
/// `HX_THREAD_SERIALIZED`.
///
/// # Safety
/// `out` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_init(out_ctx: *mut *mut hx_context) -> c_int {
    init(out_ctx, HX_THREAD_SERIALIZED, "hx_init")
}

/// As `hx_init`, with a thread level (`HX_THREAD_SERIALIZED` or `HX_THREAD_MULTIPLE`).
///
/// # Safety
/// `out` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_init_thread(out_ctx: *mut *mut hx_context, level: c_int) -> c_int {
    init(out_ctx, level, "hx_init_thread")
}

fn init(out_ctx: *mut *mut hx_context, level: c_int, func: &str) -> c_int {
    guard(func, || {
        let o = out(out_ctx, func, "out")?;
        *o = std::ptr::null_mut();
        let multiple = match level {
            HX_THREAD_SERIALIZED => false,
            HX_THREAD_MULTIPLE => true,
            l => return Err(invalid(format!("unknown thread level {l}"))),
        };
        if registry::launched_contexts() > 0 {
            return Err(invalid(
                "this process already has a context in a job of several ranks (one per process)",
            ));
        }
        let engine = Engine::init()?;
        let h = registry::add_context(Arc::new(Ctx::new(engine, multiple)))?;
        *o = h as *mut hx_context;
        Ok(())
    })
}

/// Completes outstanding sends, waits for every rank, closes the rails and frees the context.
/// Refused (and nothing freed) while endpoints are open.
///
/// # Safety
/// `ctx` may be any value; only a live handle is used.
#[no_mangle]
pub unsafe extern "C" fn hx_finalize(ctx: *mut hx_context) -> c_int {
    guard("hx_finalize", || {
        let (h, c) = ctx_of(ctx, "hx_finalize")?;
        let engine = {
            let mut st = c.lock();
            st.engine()?;
            if !st.endpoints.is_empty() {
                return Err(invalid(format!(
                    "{} endpoint(s) still open; hx_close them first",
                    st.endpoints.len()
                )));
            }
            registry::remove_context(h);
            Ctx::take_engine(&mut st)
        };
        match engine {
            Some(e) => Ok(e.finalize()?),
            None => Err(registry::stale("context")),
        }
    })
}

/// This process's rank.
///
/// # Safety
/// `rank` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_rank(ctx: *const hx_context, rank: *mut u32) -> c_int {
    guard("hx_rank", || {
        let r = with_ctx(ctx, "hx_rank", |e| Ok(e.rank()))?;
        *out(rank, "hx_rank", "rank")? = r;
        Ok(())
    })
}

/// The number of ranks in the job.
///
/// # Safety
/// `size` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_size(ctx: *const hx_context, size: *mut u32) -> c_int {
    guard("hx_size", || {
        let s = with_ctx(ctx, "hx_size", |e| Ok(e.size()))?;
        *out(size, "hx_size", "size")? = s;
        Ok(())
    })
}

/// Opens local endpoint `id` (0..65534).
///
/// # Safety
/// `ep` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_open(
    ctx: *mut hx_context,
    id: u16,
    ep: *mut *mut hx_endpoint,
) -> c_int {
    guard("hx_open", || {
        let o = out(ep, "hx_open", "out")?;
        *o = std::ptr::null_mut();
        let (_, c) = ctx_of(ctx, "hx_open")?;
        let mut st = c.lock();
        st.engine()?.open_endpoint(id)?;
        let h = match registry::add_endpoint(Ep { ctx: c.clone() }) {
            Ok(h) => h,
            Err(e) => {
                let _ = st.engine()?.close_endpoint(id);
                return Err(e);
            }
        };
        st.endpoints.push((h, id));
        *o = h as *mut hx_endpoint;
        Ok(())
    })
}

/// Closes an endpoint and frees the handle.
///
/// # Safety
/// `ep` may be any value; only a live handle is used.
#[no_mangle]
pub unsafe extern "C" fn hx_close(ep: *mut hx_endpoint) -> c_int {
    guard("hx_close", || {
        let (h, e) = ep_of(ep, "hx_close")?;
        let mut st = e.ctx.lock();
        let id = st.endpoint(h)?;
        st.engine()?.close_endpoint(id)?;
        st.endpoints.retain(|&(x, _)| x != h);
        registry::remove_endpoint(h);
        Ok(())
    })
}

/// The id of a local endpoint.
///
/// # Safety
/// `id` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_endpoint_id(ep: *const hx_endpoint, id: *mut u16) -> c_int {
    guard("hx_endpoint_id", || {
        let e = with_ep(ep, "hx_endpoint_id", |id, _| Ok(id))?;
        *out(id, "hx_endpoint_id", "id")? = e;
        Ok(())
    })
}

/// Names endpoint `endpoint` of `rank` as a destination (checks that both exist in this job).
///
/// # Safety
/// `target` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_target_init(
    ep: *const hx_endpoint,
    rank: u32,
    endpoint: u16,
    target: *mut hx_target,
) -> c_int {
    guard("hx_target_init", || {
        let size = with_ep(ep, "hx_target_init", |_, e| Ok(e.size()))?;
        let t = out(target, "hx_target_init", "target")?;
        if rank >= size {
            return Err(invalid(format!(
                "rank {rank} is not in this job of {size} ranks"
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
/// `buf` valid for `len` bytes and unmodified until the request completes; `req` NULL or valid
/// for writes.
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
        let r = out(req, "hx_iwrite", "req")?;
        let p = buf_ptr(buf, len, "hx_iwrite")?;
        let tag = send_tag(tag)?;
        let rq = with_ep(ep, "hx_iwrite", |id, e| {
            // SAFETY: the caller keeps the buffer valid until completion.
            let rq = unsafe { e.isend_raw(id, target.rank, target.endpoint, tag, p, len)? };
            // The caller may go straight to poll() on hx_fd: make it wake for this request.
            e.arm_for_wait()?;
            Ok(rq)
        })?;
        *r = rq.to_u64();
        Ok(())
    })
}

/// Starts receiving into `cap` bytes at `buf` a message for this endpoint from `source`
/// (or `HX_ANY_SOURCE`) with `tag` (or `HX_ANY_TAG`).
///
/// # Safety
/// `buf` valid for `cap` bytes and untouched until the request completes; `req` NULL or valid
/// for writes.
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
        let r = out(req, "hx_iread", "req")?;
        let p = buf_ptr(buf, cap, "hx_iread")?;
        let rq = with_ep(ep, "hx_iread", |id, e| {
            let src = src_opt(source, e.size())?;
            // SAFETY: the caller keeps the buffer valid until completion.
            let rq = unsafe { e.irecv_raw(id, src, tag_opt(tag), p, cap)? };
            // The caller may go straight to poll() on hx_fd (shared memory signals only when
            // asked to): make it wake for this request.
            e.arm_for_wait()?;
            Ok(rq)
        })?;
        *r = rq.to_u64();
        Ok(())
    })
}

/// Sends and returns when `buf` may be reused.
///
/// # Safety
/// `buf` valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hx_write(
    ep: *mut hx_endpoint,
    target: hx_target,
    tag: u64,
    buf: *const c_void,
    len: usize,
) -> c_int {
    guard("hx_write", || {
        let p = buf_ptr(buf, len, "hx_write")?;
        let tag = send_tag(tag)?;
        let (_, e) = ep_of(ep, "hx_write")?;
        if !e.ctx.multiple {
            // Under the lock throughout: the engine's blocking send (a small message to a
            // shared-memory peer leaves without a request).
            // SAFETY: the buffer is valid for the call, which returns when it may be reused.
            let data = unsafe { std::slice::from_raw_parts(p, len) };
            return with_ep(ep, "hx_write", |id, e| {
                Ok(e.send(id, target.rank, target.endpoint, tag, data)?)
            });
        }
        let rq = with_ep(ep, "hx_write", |id, e| {
            // SAFETY: the buffer is valid for the call, and the call waits for completion.
            Ok(unsafe { e.isend_raw(id, target.rank, target.endpoint, tag, p, len)? })
        })?;
        wait_req(&e.ctx, rq)?;
        Ok(())
    })
}

/// Receives a message; `status` (may be NULL) says who sent what, also on `HX_ERR_TRUNCATED`.
///
/// # Safety
/// `buf` valid for `cap` bytes; `status` NULL or valid for writes.
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
        let p = buf_ptr(buf, cap, "hx_read")?;
        let (_, e) = ep_of(ep, "hx_read")?;
        if !e.ctx.multiple {
            // Under the lock throughout: the engine's blocking receive (over shared memory it
            // takes a small message straight into `buf`, without a request).
            // SAFETY: the buffer is valid for the call and nobody else's meanwhile.
            let dst = unsafe { std::slice::from_raw_parts_mut(p, cap) };
            let r = with_ep(ep, "hx_read", |id, e| {
                let src = src_opt(source, e.size())?;
                Ok(e.recv(id, src, tag_opt(tag), dst))
            })?;
            return with_status(status, r);
        }
        let rq = with_ep(ep, "hx_read", |id, e| {
            let src = src_opt(source, e.size())?;
            // SAFETY: the buffer is valid for the call, and the call waits for completion.
            Ok(unsafe { e.irecv_raw(id, src, tag_opt(tag), p, cap)? })
        })?;
        with_status(status, wait_req(&e.ctx, rq))
    })
}

/// Makes progress; sets `*done` and, when done, fills `status` (may be NULL) and releases `req`.
///
/// # Safety
/// `done` NULL or valid for writes; `status` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_test(
    ctx: *mut hx_context,
    req: hx_request,
    done: *mut c_int,
    status: *mut hx_status,
) -> c_int {
    guard("hx_test", || {
        let d = out(done, "hx_test", "done")?;
        *d = 0;
        let r = with_ctx(ctx, "hx_test", |e| Ok(e.test(Request::from_u64(req))))?;
        match r {
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
/// `status` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_wait(
    ctx: *mut hx_context,
    req: hx_request,
    status: *mut hx_status,
) -> c_int {
    guard("hx_wait", || {
        let (_, c) = ctx_of(ctx, "hx_wait")?;
        with_status(status, wait_req(&c, Request::from_u64(req)))
    })
}

/// Waits for `n` requests and releases them; on success fills `statuses` (may be NULL, else `n`
/// entries). On failure returns the first error once all are done.
///
/// # Safety
/// `reqs` valid for `n` reads; `statuses` NULL or valid for `n` writes.
#[no_mangle]
pub unsafe extern "C" fn hx_waitall(
    ctx: *mut hx_context,
    n: usize,
    reqs: *const hx_request,
    statuses: *mut hx_status,
) -> c_int {
    guard("hx_waitall", || {
        let (_, c) = ctx_of(ctx, "hx_waitall")?;
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
        let sts = if c.multiple {
            let mut res: Vec<Option<Result<Status, Error>>> = (0..n).map(|_| None).collect();
            block(&c, |e| {
                for (h, r) in handles.iter().zip(res.iter_mut()) {
                    if r.is_none() {
                        match e.test(*h) {
                            Ok(None) => {}
                            Ok(Some(s)) => *r = Some(Ok(s)),
                            Err(err) => *r = Some(Err(err)),
                        }
                    }
                }
                Ok(res.iter().all(Option::is_some).then_some(()))
            })?;
            let mut sts = Vec::with_capacity(n);
            for r in res.into_iter().flatten() {
                sts.push(r?);
            }
            sts
        } else {
            with_ctx(ctx, "hx_waitall", |e| Ok(e.wait_all(&handles)?))?
        };
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
/// `found` NULL or valid for writes; `status` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_probe(
    ep: *mut hx_endpoint,
    source: u32,
    tag: u64,
    found: *mut c_int,
    status: *mut hx_status,
) -> c_int {
    guard("hx_probe", || {
        let f = out(found, "hx_probe", "found")?;
        *f = 0;
        let r = with_ep(ep, "hx_probe", |id, e| {
            let src = src_opt(source, e.size())?;
            Ok(e.probe(id, src, tag_opt(tag))?)
        })?;
        if let Some(s) = r {
            *f = 1;
            put_status(status, s);
        }
        Ok(())
    })
}

/// A matched probe's message handle.
pub type hx_message = u64;

fn claim_once(
    id: u16,
    e: &mut Engine,
    source: u32,
    tag: u64,
) -> Result<Option<(hx_message, Status)>, Fail> {
    let src = src_opt(source, e.size())?;
    Ok(e.claim(id, Filter::new(src, tag_opt(tag)))?
        .map(|(c, s)| (c.wrapping_add(1), s)))
}

/// Matched probe without blocking: if a message matching (`source`, `tag`) waits for this
/// endpoint, takes it out of matching (no other receive or probe sees it), sets `*found = 1`,
/// `*msg` to its handle and fills `status` (may be NULL).
///
/// # Safety
/// `found` and `msg` NULL or valid for writes; `status` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_improbe(
    ep: *mut hx_endpoint,
    source: u32,
    tag: u64,
    found: *mut c_int,
    msg: *mut hx_message,
    status: *mut hx_status,
) -> c_int {
    guard("hx_improbe", || {
        let f = out(found, "hx_improbe", "found")?;
        *f = 0;
        let m = out(msg, "hx_improbe", "msg")?;
        *m = HX_MESSAGE_NULL;
        if let Some((c, s)) = with_ep(ep, "hx_improbe", |id, e| claim_once(id, e, source, tag))? {
            *f = 1;
            *m = c;
            put_status(status, s);
        }
        Ok(())
    })
}

/// Matched probe: waits until a message matching (`source`, `tag`) arrives for this endpoint and
/// takes it out of matching; `*msg` is its handle, `status` (may be NULL) describes it.
///
/// # Safety
/// `msg` NULL or valid for writes; `status` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_mprobe(
    ep: *mut hx_endpoint,
    source: u32,
    tag: u64,
    msg: *mut hx_message,
    status: *mut hx_status,
) -> c_int {
    guard("hx_mprobe", || {
        let m = out(msg, "hx_mprobe", "msg")?;
        *m = HX_MESSAGE_NULL;
        let (_, e) = ep_of(ep, "hx_mprobe")?;
        let id = with_ep(ep, "hx_mprobe", |id, _| Ok(id))?;
        let (c, s) = block(&e.ctx, |eng| claim_once(id, eng, source, tag))?;
        *m = c;
        put_status(status, s);
        Ok(())
    })
}

/// Receives a claimed message (from `hx_mprobe` / `hx_improbe`) into `buf`; `*msg` becomes
/// `HX_MESSAGE_NULL`.
///
/// # Safety
/// `msg` valid for reads and writes; `buf` valid for `cap` bytes and untouched until the request
/// completes; `req` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_imread(
    ep: *mut hx_endpoint,
    msg: *mut hx_message,
    buf: *mut c_void,
    cap: usize,
    req: *mut hx_request,
) -> c_int {
    guard("hx_imread", || {
        let r = out(req, "hx_imread", "req")?;
        *r = imread(ep, msg, buf, cap, "hx_imread")?.to_u64();
        Ok(())
    })
}

fn imread(
    ep: *mut hx_endpoint,
    msg: *mut hx_message,
    buf: *mut c_void,
    cap: usize,
    func: &str,
) -> Result<Request, Fail> {
    let m = out(msg, func, "msg")?;
    if *m == HX_MESSAGE_NULL {
        return Err(invalid(format!("message is HX_MESSAGE_NULL (in {func})")));
    }
    let p = buf_ptr(buf, cap, func)?;
    let claim = m.wrapping_sub(1);
    let rq = with_ep(ep, func, |_, e| {
        // SAFETY: the caller keeps the buffer valid until completion.
        Ok(unsafe { e.irecv_claimed(claim, EngineBuf::Raw { ptr: p, len: cap })? })
    })?;
    *m = HX_MESSAGE_NULL;
    Ok(rq)
}

/// Receives a claimed message into `buf` and waits for it; `status` as for `hx_read`.
///
/// # Safety
/// `msg` valid for reads and writes; `buf` valid for `cap` bytes; `status` NULL or valid for
/// writes.
#[no_mangle]
pub unsafe extern "C" fn hx_mread(
    ep: *mut hx_endpoint,
    msg: *mut hx_message,
    buf: *mut c_void,
    cap: usize,
    status: *mut hx_status,
) -> c_int {
    guard("hx_mread", || {
        let (_, e) = ep_of(ep, "hx_mread")?;
        let rq = imread(ep, msg, buf, cap, "hx_mread")?;
        with_status(status, wait_req(&e.ctx, rq))
    })
}

/// Drops a claimed message (its bytes are received into nothing) and waits for that;
/// `*msg` becomes `HX_MESSAGE_NULL`.
///
/// # Safety
/// `msg` valid for reads and writes.
#[no_mangle]
pub unsafe extern "C" fn hx_mdiscard(ep: *mut hx_endpoint, msg: *mut hx_message) -> c_int {
    guard("hx_mdiscard", || {
        let m = out(msg, "hx_mdiscard", "msg")?;
        if *m == HX_MESSAGE_NULL {
            return Err(invalid("message is HX_MESSAGE_NULL"));
        }
        let (_, e) = ep_of(ep, "hx_mdiscard")?;
        let claim = m.wrapping_sub(1);
        let rq = with_ep(ep, "hx_mdiscard", |_, e| Ok(e.discard_claimed(claim)?))?;
        *m = HX_MESSAGE_NULL;
        match wait_req(&e.ctx, rq) {
            Ok(_) | Err(Error::Truncated(_)) => Ok(()),
            Err(err) => Err(err.into()),
        }
    })
}

/// Cancels a posted receive that has not matched a message yet: `*cancelled = 1` and the
/// request is released (its buffer is no longer used). Otherwise (`*cancelled = 0`: it matched,
/// or it is a send) the request goes on and completes as usual.
///
/// # Safety
/// `cancelled` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_cancel(
    ctx: *mut hx_context,
    req: hx_request,
    cancelled: *mut c_int,
) -> c_int {
    guard("hx_cancel", || {
        let c = out(cancelled, "hx_cancel", "cancelled")?;
        *c = 0;
        let done = with_ctx(ctx, "hx_cancel", |e| {
            Ok(e.cancel_recv(Request::from_u64(req)))
        })?;
        *c = done as c_int;
        Ok(())
    })
}

/// Handles whatever is ready, without blocking.
#[no_mangle]
pub extern "C" fn hx_progress(ctx: *mut hx_context) -> c_int {
    guard("hx_progress", || {
        with_ctx(ctx, "hx_progress", |e| Ok(e.progress()?))
    })
}

/// A file descriptor that becomes readable when the engine has work: poll it with your other
/// fds, then call `hx_test` / `hx_progress`. Do not read from or close it.
///
/// # Safety
/// `fd` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_fd(ctx: *const hx_context, fd: *mut c_int) -> c_int {
    guard("hx_fd", || {
        let f = with_ctx(ctx, "hx_fd", |e| Ok(e.fd()))?;
        *out(fd, "hx_fd", "fd")? = f;
        Ok(())
    })
}

/// The pollable fd for an endpoint (the engine's fd, shared by all endpoints of the context).
///
/// # Safety
/// `fd` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn hx_endpoint_fd(ep: *const hx_endpoint, fd: *mut c_int) -> c_int {
    guard("hx_endpoint_fd", || {
        let f = with_ep(ep, "hx_endpoint_fd", |_, e| Ok(e.fd()))?;
        *out(fd, "hx_endpoint_fd", "fd")? = f;
        Ok(())
    })
}

/// Returns when every rank has entered the barrier (the context's lock is held meanwhile).
#[no_mangle]
pub extern "C" fn hx_barrier(ctx: *mut hx_context) -> c_int {
    guard("hx_barrier", || {
        with_ctx(ctx, "hx_barrier", |e| Ok(e.barrier()?))
    })
}

/// The library's version, `major << 16 | minor << 8 | patch` (compare with the header's
/// `HX_VERSION_NUMBER`).
#[no_mangle]
pub extern "C" fn hx_version() -> u32 {
    let n = |s: &str| s.parse::<u32>().unwrap_or(0);
    n(env!("CARGO_PKG_VERSION_MAJOR")) << 16
        | n(env!("CARGO_PKG_VERSION_MINOR")) << 8
        | n(env!("CARGO_PKG_VERSION_PATCH"))
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
        HX_ERR_HANDLE => c"stale or invalid handle",
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
