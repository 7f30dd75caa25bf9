//! Wire formats of hxcomm: the frame header that precedes every message piece on a rail, and the
//! rail handshake. Views are parsed from and emitted into plain byte slices; nothing here does I/O.
//!
//! Every multi-byte field is little-endian. Parsing never panics and never reads past the slice:
//! anything that comes from the network goes through these functions first.

#![forbid(unsafe_code)]

mod address;
mod frame;
mod hello;

pub use address::{
    Address, RailIp, ADDRESS_LEN, ADDRESS_MAGIC, ADDRESS_MAX_RAILS, ADDRESS_VERSION, ADDR_FLAG_SHM,
};
pub use frame::{
    eager_header_short, eager_view, EagerHeader, EagerView, FrameHeader, FrameKind, ATOMIC_PAYLOAD,
    FLAG_ACK_REQ, FLAG_DATA, FLAG_DATA_IN_VALUE, FLAG_DELIVERY, FLAG_DIRECT, FLAG_READ,
    FLAG_REFUSED, FLAG_RMA, HEADER_LEN, MAGIC, MIN_HEADER_LEN, VERSION,
};
pub use hello::{
    hello_version, Challenge, Hello, CHALLENGE_LEN, CHALLENGE_MAGIC, HELLO_LEN, HELLO_MAGIC,
    VERDICT_ACCEPT, VERDICT_LEN, VERDICT_REFUSE,
};

use std::fmt;

/// Why bytes could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the structure needs; not an error on a stream, just wait for more.
    Truncated {
        need: usize,
        have: usize,
    },
    BadMagic {
        found: [u8; 2],
    },
    UnsupportedVersion {
        found: u8,
    },
    BadHeaderLen {
        found: u8,
    },
    UnknownKind {
        found: u8,
    },
    /// An address field out of range.
    BadAddress {
        what: &'static str,
        value: u64,
    },
    /// A field value that contradicts the frame kind (e.g. a CTS that carries payload).
    Inconsistent {
        kind: FrameKind,
        what: &'static str,
        value: u64,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated { need, have } => {
                write!(f, "truncated: need {need} bytes, have {have}")
            }
            WireError::BadMagic { found } => {
                write!(
                    f,
                    "bad magic {:02x}{:02x} (not an hxcomm peer?)",
                    found[0], found[1]
                )
            }
            WireError::UnsupportedVersion { found } => {
                write!(
                    f,
                    "unsupported protocol version {found} (this build speaks {VERSION})"
                )
            }
            WireError::BadHeaderLen { found } => write!(f, "bad header length {found}"),
            WireError::UnknownKind { found } => write!(f, "unknown frame kind {found}"),
            WireError::BadAddress { what, value } => write!(f, "bad address: {what} = {value}"),
            WireError::Inconsistent { kind, what, value } => {
                write!(f, "inconsistent {kind:?} frame: {what} = {value}")
            }
        }
    }
}

impl std::error::Error for WireError {}

pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}
