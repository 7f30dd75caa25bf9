use std::fmt;
use std::io;

use hx_protocol::{ProtoError, Status};

/// Errors of the engine, each with the context needed to act on it.
#[derive(Debug)]
pub enum Error {
    /// A setting (environment variable or option) is wrong.
    Config(String),
    /// Rails could not be set up.
    Setup(String),
    Bootstrap(hx_bootstrap::BootstrapError),
    Io {
        what: String,
        err: io::Error,
    },
    Protocol(ProtoError),
    /// A receive's buffer was smaller than the message; the buffer holds its first bytes.
    Truncated(Status),
    /// A caller error: bad rank, endpoint, request handle, reserved tag.
    Invalid(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(s) => write!(f, "configuration: {s}"),
            Error::Setup(s) => write!(f, "setup: {s}"),
            Error::Bootstrap(e) => write!(f, "bootstrap: {e}"),
            Error::Io { what, err } => write!(f, "{what}: {err}"),
            Error::Protocol(e) => write!(f, "{e}"),
            Error::Truncated(st) => write!(
                f,
                "message truncated: {} bytes from rank {} (tag {}) did not fit the receive buffer",
                st.len, st.source, st.tag
            ),
            Error::Invalid(s) => write!(f, "invalid argument: {s}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<ProtoError> for Error {
    fn from(e: ProtoError) -> Self {
        match e {
            ProtoError::Invalid(s) => Error::Invalid(s),
            e => Error::Protocol(e),
        }
    }
}

impl From<hx_bootstrap::BootstrapError> for Error {
    fn from(e: hx_bootstrap::BootstrapError) -> Self {
        Error::Bootstrap(e)
    }
}

/// The conversion to String happens only on error: this sits on the hot path
/// (`.map_err(io_err("epoll_wait"))` every poll round), where an allocation per call was 13% of an
/// idle round's instructions.
pub(crate) fn io_err<S: Into<String>>(what: S) -> impl FnOnce(io::Error) -> Error {
    move |err| Error::Io {
        what: what.into(),
        err,
    }
}
