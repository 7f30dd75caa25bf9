//! Buffers as the engine hands them to the protocol core: either memory the caller lent (raw
//! pointer, kept alive by the caller until the request completes, as in MPI) or a `Vec` the
//! request owns and gives back on completion.

use hx_protocol::Buffer;

pub enum EngineBuf {
    Raw { ptr: *mut u8, len: usize },
    Owned(Vec<u8>),
}

// SAFETY: a raw buffer is only touched by the engine's thread; the caller promised exclusivity.
unsafe impl Send for EngineBuf {}

impl Buffer for EngineBuf {
    fn as_slice(&self) -> &[u8] {
        match self {
            EngineBuf::Raw { len: 0, .. } => &[],
            // SAFETY: the caller of the raw API guarantees ptr..ptr+len stays valid.
            EngineBuf::Raw { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
            EngineBuf::Owned(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            EngineBuf::Raw { len: 0, .. } => &mut [],
            // SAFETY: as above; receive buffers are lent mutably and exclusively.
            EngineBuf::Raw { ptr, len } => unsafe { std::slice::from_raw_parts_mut(*ptr, *len) },
            EngineBuf::Owned(v) => v,
        }
    }

    fn empty() -> Self {
        EngineBuf::Owned(Vec::new())
    }

    fn owned(bytes: Vec<u8>) -> Self {
        EngineBuf::Owned(bytes)
    }
}
