//! The hxcomm engine: the protocol core driven over real transports by one progress loop.
//!
//! This is the only layer with syscalls and clocks. It sets up rails (bootstrap exchange of
//! addresses, device-bound TCP connections with an authenticated handshake), owns the epoll set,
//! and turns the core's "write these slices" / "read into this slice" into socket calls. Progress
//! happens inside API calls (and in [`Engine::progress`]): it spins briefly, then sleeps in epoll.

mod buf;
mod conn;
mod engine;
mod error;
mod poller;
mod settings;
mod setup;
pub mod trace;

pub mod info;
pub use buf::EngineBuf;
pub use engine::{Engine, Express, LaneHold, LaneTicket, Request, BARRIER_EP};
pub use error::Error;
pub use hx_protocol::{
    apply_atomic, Access, AtomicOp, AtomicType, EpId, Filter, Policy, ProtoError, Rank, Regions,
    RmaRefusal, Status, TagMatch,
};
pub use hx_transport::shm::POPULATE_AFTER as SHM_POPULATE_AFTER;
pub use hx_transport::Doorbell;
pub use settings::Settings;

/// Sends log messages to stderr, filtered by `HX_LOG` (default `warn`), unless the program has
/// set up its own subscriber. [`Engine::init`] calls it, so C programs get the messages too.
pub fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("HX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Matches any source rank in a receive.
pub const ANY_SOURCE: Option<Rank> = None;
/// Matches any tag in a receive.
pub const ANY_TAG: Option<u64> = None;
