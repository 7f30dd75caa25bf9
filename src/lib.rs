//! hxcomm: a multi-rail communication layer for clusters of commodity machines.
//!
//! The Rust API is the engine's: [`Engine::init`] joins the job that `hxcomm run` started, then
//! endpoints exchange tagged messages over all rails at once.
//!
//! ```no_run
//! let mut e = hxcomm::Engine::init()?;
//! let ep = e.open_endpoint(0)?;
//! if e.rank() == 0 {
//!     e.send(ep, 1, 0, 42, b"hello")?;
//! } else if e.rank() == 1 {
//!     let mut buf = [0u8; 5];
//!     let st = e.recv(ep, hxcomm::ANY_SOURCE, Some(42), &mut buf)?;
//!     assert_eq!((st.source, st.len), (0, 5));
//! }
//! e.finalize()?;
//! # Ok::<(), hxcomm::Error>(())
//! ```

pub use hx_engine::*;
