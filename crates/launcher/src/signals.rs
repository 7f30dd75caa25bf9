//! Ctrl-C and SIGTERM for the launcher.
//!
//! Why it is built this way: the signal-hook crate's handler stores the signal number in an atomic
//! (the one thing that is safe in a handler); the launcher's monitor loop, which already wakes every
//! few milliseconds to reap ranks, sees it and stops the job. `run()` may be called from several
//! threads of one process (tests), so the first active guard starts recording and the last one
//! stops: while no guard is alive, SIGINT and SIGTERM take their default action again (end the
//! process), as before the first guard.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

use signal_hook::consts::{SIGINT, SIGTERM};

/// The last signal recorded since the first active guard was installed (0: none).
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// True while no guard is alive: the signals then take their default action.
static IDLE: AtomicBool = AtomicBool::new(true);
/// How many guards are alive.
static USERS: Mutex<usize> = Mutex::new(0);
static REGISTER: Once = Once::new();

/// While alive, SIGINT and SIGTERM are recorded instead of killing the process.
pub struct SignalGuard(());

impl SignalGuard {
    pub fn install() -> Self {
        REGISTER.call_once(|| {
            for sig in [SIGINT, SIGTERM] {
                // Registration fails only for the signals signal-hook forbids (SIGKILL, SIGSEGV..).
                let _ = signal_hook::flag::register_usize(sig, &PENDING, sig as usize);
                let _ = signal_hook::flag::register_conditional_default(sig, &IDLE);
            }
        });
        let mut users = USERS.lock().unwrap_or_else(|e| e.into_inner());
        if *users == 0 {
            PENDING.store(0, Ordering::SeqCst);
            IDLE.store(false, Ordering::SeqCst);
        }
        *users += 1;
        SignalGuard(())
    }

    /// The signal received since the first active guard was installed, if any.
    pub fn pending(&self) -> Option<i32> {
        match PENDING.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s as i32),
        }
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        let mut users = USERS.lock().unwrap_or_else(|e| e.into_inner());
        *users -= 1;
        if *users == 0 {
            IDLE.store(true, Ordering::SeqCst);
        }
    }
}

/// "SIGKILL" for 9, "signal 64" for what has no name.
pub fn signal_name(sig: i32) -> String {
    match signal_hook::low_level::signal_name(sig) {
        Some(name) => name.to_owned(),
        None => format!("signal {sig}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_records_signals_and_names_them() {
        let g = SignalGuard::install();
        assert_eq!(g.pending(), None);
        signal_hook::low_level::raise(SIGTERM).unwrap();
        assert_eq!(g.pending(), Some(SIGTERM));
        assert_eq!(signal_name(SIGTERM), "SIGTERM");
        assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal_name(64), "signal 64");
    }
}
