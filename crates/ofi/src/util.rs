//! Small helpers for the C boundary.

use crate::sys::*;
use std::ffi::{CStr, CString};
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard};

/// Set once libfabric has loaded us (logging through fi_log is only valid then).
pub static LOADED: AtomicBool = AtomicBool::new(false);

/// Runs `f`, turning a panic into `err` so it never unwinds into C.
pub fn guard<R>(err: R, f: impl FnOnce() -> R) -> R {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(err)
}

/// Runs a fallible body: Ok(v) -> v, Err(errno) -> -errno, panic -> -FI_EOTHER.
pub fn ret_int(f: impl FnOnce() -> Result<i32, i32>) -> libc::c_int {
    guard(-FI_EOTHER, || f().unwrap_or_else(|e| -e))
}

pub fn ret_size(f: impl FnOnce() -> Result<isize, i32>) -> libc::ssize_t {
    guard(-(FI_EOTHER as isize), || {
        f().unwrap_or_else(|e| -(e as isize))
    })
}

/// A poisoned lock only means a panic was caught at the boundary; the state is still usable.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// # Safety
/// `p` is NULL or NUL-terminated.
pub unsafe fn opt_cstr(p: *const libc::c_char) -> Option<String> {
    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
}

/// Logs through libfabric (FI_LOG_LEVEL) once loaded; before that (unit tests) only with
/// HX_OFI_DEBUG set.
pub fn log(level: i32, subsys: i32, msg: &str) {
    if !LOADED.load(std::sync::atomic::Ordering::Relaxed) {
        if std::env::var_os("HX_OFI_DEBUG").is_some() {
            eprintln!("hxcomm: {msg}");
        }
        return;
    }
    let prov = crate::provider();
    // SAFETY: the provider struct is registered; fmt "%s" with one string argument.
    unsafe {
        if fi_log_enabled(prov, level, subsys) != 0 {
            let m = CString::new(msg.replace('\0', " ")).unwrap_or_default();
            fi_log(
                prov,
                level,
                subsys,
                c"hxcomm".as_ptr(),
                0,
                c"%s\n".as_ptr(),
                m.as_ptr(),
            );
        }
    }
}

pub fn warn(subsys: i32, msg: &str) {
    log(FI_LOG_WARN, subsys, msg)
}

/// A failure that stops the application (a domain that cannot open): through libfabric's log
/// when it shows warnings, else on stderr, since by default libfabric shows nothing and the
/// caller would see only an errno.
pub fn fatal(subsys: i32, msg: &str) {
    let shown = LOADED.load(std::sync::atomic::Ordering::Relaxed) && {
        // SAFETY: the provider struct is registered once loaded.
        unsafe { fi_log_enabled(crate::provider(), FI_LOG_WARN, subsys) != 0 }
    };
    if shown {
        warn(subsys, msg);
    } else {
        eprintln!("hxcomm: {msg}");
    }
}
