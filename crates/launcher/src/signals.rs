//! Ctrl-C and SIGTERM for the launcher.
//!
//! Why it is built this way: the handler only stores the signal number in an atomic (the one thing
//! that is safe in a handler); the launcher's monitor loop, which already wakes every few
//! milliseconds to reap ranks, sees it and stops the job. No extra dependency is needed for that.
//! `run()` may be called from several threads of one process (tests), so the handlers are installed
//! by the first active job and the previous ones restored by the last.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

static PENDING: AtomicI32 = AtomicI32::new(0);

struct Installed {
    users: usize,
    old: Vec<(libc::c_int, libc::sigaction)>,
}

static STATE: Mutex<Installed> = Mutex::new(Installed {
    users: 0,
    old: Vec::new(),
});

const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

extern "C" fn on_signal(sig: libc::c_int) {
    PENDING.store(sig, Ordering::SeqCst);
}

/// While alive, SIGINT and SIGTERM are recorded instead of killing the process.
pub struct SignalGuard(());

impl SignalGuard {
    pub fn install() -> Self {
        let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
        if st.users == 0 {
            PENDING.store(0, Ordering::SeqCst);
            for sig in SIGNALS {
                // SAFETY: plain sigaction calls with zero-initialised, fully set structs; the
                // handler only touches an atomic.
                unsafe {
                    let mut sa: libc::sigaction = std::mem::zeroed();
                    sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
                    sa.sa_flags = libc::SA_RESTART;
                    libc::sigemptyset(&mut sa.sa_mask);
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(sig, &sa, &mut old) == 0 {
                        st.old.push((sig, old));
                    }
                }
            }
        }
        st.users += 1;
        SignalGuard(())
    }

    /// The signal received since the first active guard was installed, if any.
    pub fn pending(&self) -> Option<i32> {
        match PENDING.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        let mut st = STATE.lock().unwrap_or_else(|e| e.into_inner());
        st.users -= 1;
        if st.users == 0 {
            for (sig, old) in st.old.drain(..) {
                // SAFETY: restores the disposition saved by `install`.
                unsafe {
                    libc::sigaction(sig, &old, std::ptr::null_mut());
                }
            }
        }
    }
}

/// "SIGKILL" for 9, "signal 64" for what has no name here.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}
