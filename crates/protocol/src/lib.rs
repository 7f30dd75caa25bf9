//! The sans-I/O protocol core of hxcomm.
//!
//! [`Core`] holds everything one process knows about its conversations with its peers: sequence
//! numbers, posted and unexpected receives, rendezvous state, per-rail transmit queues and receive
//! parsers. It never touches a socket or a clock. The engine (or a test) drives it:
//!
//! * sending: [`Core::send`] queues frames; [`Core::tx_iovecs`] shows the bytes a rail should write
//!   next (headers and slices of the caller's buffers, no copy); [`Core::tx_done`] reports how many
//!   were written;
//! * receiving: [`Core::rx_space`] says where the next bytes read from a rail go (a staging area, or
//!   straight into the destination buffer of a matched receive); [`Core::rx_done`] reports how many
//!   arrived and parses them;
//! * completion: [`Core::poll`] tells whether a request is done.
//!
//! Messages between two ranks are matched in the order they were sent, whatever rails their bytes
//! took: every eager message and rendezvous request carries a per-pair sequence number and the
//! receiver matches strictly in sequence order, holding early arrivals aside.

#![forbid(unsafe_code)]

mod atomic;
mod buffer;
mod core;
mod keep_up;
mod lane;
mod rma;
mod rx;
pub mod sim;
mod slab;
mod tx;

pub use crate::atomic::{apply as apply_atomic, AtomicOp, AtomicType};
pub use crate::buffer::Buffer;
pub use crate::core::{Core, DirectWrite, Filter, Stats, TagMatch};
pub use crate::rma::{Access, Regions, RmaRefusal};
pub use crate::slab::Handle;
pub use crate::tx::InlineHeader;
pub use hx_wire as wire;

use std::fmt;

pub type Rank = u32;
pub type EpId = u16;
pub type ReqId = Handle;

/// Which rails carry which bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Each peer uses one rail, chosen to spread peers over rails.
    Bind,
    /// Whole messages go round robin over the rails.
    RoundRobin,
    /// Every large message is split in equal parts over all rails.
    Stripe,
    /// Small messages on the least loaded rail; large ones in chunks that each rail pulls when it
    /// has room, so faster rails carry more and a stalled rail carries nothing.
    Adaptive,
}

impl Policy {
    pub fn parse(s: &str) -> Option<Policy> {
        Some(match s {
            "bind" => Policy::Bind,
            "rr" | "roundrobin" | "round-robin" => Policy::RoundRobin,
            "stripe" => Policy::Stripe,
            "adaptive" => Policy::Adaptive,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Policy::Bind => "bind",
            Policy::RoundRobin => "rr",
            Policy::Stripe => "stripe",
            Policy::Adaptive => "adaptive",
        }
    }

    pub const ALL: [Policy; 4] = [
        Policy::Bind,
        Policy::RoundRobin,
        Policy::Stripe,
        Policy::Adaptive,
    ];
}

/// Tunables of the protocol. Both ends of a job must use the same `eager_limit`.
#[derive(Debug, Clone)]
pub struct Config {
    pub policy: Policy,
    /// Messages up to this size go eagerly; larger ones by rendezvous.
    pub eager_limit: usize,
    /// Largest data frame of a rendezvous message.
    pub max_chunk: usize,
    /// Smallest data frame the adaptive policy cuts (except for the message's tail).
    pub min_chunk: usize,
    /// Size of each rail's receive staging area.
    pub stage_size: usize,
    /// Bytes of eager data a sender may have outstanding at one receiver before the receiver
    /// says it has consumed them; beyond it messages go by rendezvous. This bounds what a
    /// receiver that posts no receives can be made to hold: about this much per peer (each
    /// message counts its length plus [`EAGER_OVERHEAD`]), plus one small entry per rendezvous
    /// request the sender has pending.
    pub eager_credits: usize,
}

/// What each eager message costs in credit besides its payload (its bookkeeping at the receiver).
pub const EAGER_OVERHEAD: u64 = 64;

impl Default for Config {
    fn default() -> Self {
        Config {
            policy: Policy::Adaptive,
            eager_limit: 32 * 1024,
            max_chunk: 256 * 1024,
            min_chunk: 16 * 1024,
            stage_size: 64 * 1024,
            eager_credits: 4 << 20,
        }
    }
}

/// What a completed receive got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub source: Rank,
    pub src_ep: EpId,
    pub tag: u64,
    /// Length of the message as sent.
    pub len: usize,
    /// The message was longer than the receive buffer; only the buffer's length was stored.
    pub truncated: bool,
    /// Immediate data the sender attached (libfabric's remote CQ data).
    pub data: Option<u64>,
}

/// Errors of the protocol, with enough context to say which peer and rail misbehaved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtoError {
    /// Bytes on a rail did not parse as a frame.
    Wire {
        peer: Rank,
        rail: usize,
        err: hx_wire::WireError,
    },
    /// A well-formed frame that makes no sense in the current state.
    Unexpected {
        peer: Rank,
        rail: usize,
        seq: u64,
        what: &'static str,
    },
    /// The peer is gone; operations involving it fail.
    PeerFailed { peer: Rank, reason: String },
    /// A caller error (bad rank, reserved tag, unknown request).
    Invalid(String),
    /// Too much is outstanding: try again once some of it completed.
    Busy(String),
    /// The peer refused a remote memory access (a read or write of one of its regions).
    Refused {
        peer: Rank,
        key: u64,
        len: usize,
        why: RmaRefusal,
    },
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::Wire { peer, rail, err } => {
                write!(f, "malformed frame from rank {peer} on rail {rail}: {err}")
            }
            ProtoError::Unexpected {
                peer,
                rail,
                seq,
                what,
            } => write!(
                f,
                "protocol violation by rank {peer} on rail {rail} (seq {seq}): {what}"
            ),
            ProtoError::PeerFailed { peer, reason } => write!(f, "rank {peer} failed: {reason}"),
            ProtoError::Invalid(s) | ProtoError::Busy(s) => f.write_str(s),
            ProtoError::Refused {
                peer,
                key,
                len,
                why,
            } => write!(
                f,
                "rank {peer} refused access to {len} bytes of its region {key:#x}: {why}"
            ),
        }
    }
}

impl std::error::Error for ProtoError {}

/// Where a request stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    Pending,
    Done(Status),
    Failed(ProtoError),
}
