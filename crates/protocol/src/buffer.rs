//! The caller's buffers. The core keeps them inside its requests so it can hand out slices for
//! zero-copy writes and reads; what a buffer is (an owned `Vec`, or a raw pointer a C caller
//! promised to keep alive) is the driver's business.

pub trait Buffer {
    fn as_slice(&self) -> &[u8];
    fn as_mut_slice(&mut self) -> &mut [u8];
    /// A buffer of no bytes (receives that drop what they match).
    fn empty() -> Self;
    /// A buffer that owns these bytes (a copy to finish on when the caller's memory goes).
    fn owned(bytes: Vec<u8>) -> Self;
}

impl Buffer for Vec<u8> {
    fn as_slice(&self) -> &[u8] {
        self
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        self
    }
    fn empty() -> Self {
        Vec::new()
    }
    fn owned(bytes: Vec<u8>) -> Self {
        bytes
    }
}
