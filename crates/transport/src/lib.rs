//! Transports: how bytes move between two processes on one rail. The engine sees only [`Link`]:
//! a nonblocking byte stream with a pollable file descriptor. Implementations: TCP
//! ([`tcp`]), shared memory between processes on one host ([`shm`]), an in-process socket pair
//! for tests ([`pipe`]), and a fault-injecting wrapper
//! ([`faulty`]). Setup helpers (device-bound listeners and connections, the authenticated rail
//! handshake, interface discovery) live here too, since they are about sockets, not protocol.
//! The handshakes authenticate with `hx-auth` (HMAC over a nonce under the job secret).

pub mod faulty;
pub mod handshake;
pub mod ifaces;
pub mod pipe;
pub mod shm;
pub mod tcp;
pub mod trace;

use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};

/// A word of memory that the peer changes when something arrives on a link
/// ([`Link::doorbells`]): a spinning reader that found nothing can look at it alone instead of
/// making its whole pass again.
#[derive(Clone, Copy, Debug)]
pub struct Doorbell {
    word: *const AtomicU64,
    /// The word's value while nothing has arrived.
    quiet: u64,
}

// SAFETY: a pointer to an atomic word in memory shared between processes; it is only read,
// and only while its link is alive (see `rung`).
unsafe impl Send for Doorbell {}

impl Doorbell {
    /// A doorbell that rings when `word` is no longer `quiet`.
    ///
    /// # Safety
    /// `word` stays valid as long as the caller of [`rung`](Self::rung) says it is.
    pub unsafe fn new(word: *const AtomicU64, quiet: u64) -> Self {
        Doorbell { word, quiet }
    }

    /// Something arrived (or may have) since the doorbell was taken.
    ///
    /// # Safety
    /// The link it came from has not been read, written, dropped or otherwise touched since
    /// [`Link::doorbells`] gave it.
    #[inline]
    pub unsafe fn rung(&self) -> bool {
        (*self.word).load(Ordering::Acquire) != self.quiet
    }
}

/// What [`Link::poll_peek`] found.
pub enum Peeked<'a> {
    /// Readable in place; hand back what was used with [`Link::consume`].
    Bytes(&'a [u8]),
    /// Nothing to read yet.
    Nothing,
    /// Something for [`Link::read`] to report: an error, the peer closed, or no bytes in place.
    Attention,
}

/// One direction-agnostic byte stream of a rail. All calls are nonblocking: when nothing can be
/// done they return `ErrorKind::WouldBlock`. `Ok(0)` from `read` means the peer closed.
pub trait Link: Send {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
    /// File descriptor that becomes readable/writable with the link (for epoll).
    fn fd(&self) -> RawFd;
    /// For logs: what this link connects.
    fn describe(&self) -> String;
    /// True if the engine must call read/write on this link each progress round instead of
    /// relying on epoll alone (shared memory: no syscall on the fast path, so nothing makes
    /// `fd()` ready while both sides are awake).
    fn polled(&self) -> bool {
        false
    }
    /// Called before the engine sleeps in epoll. The link arranges for `fd()` to become
    /// readable when data arrives (or when space frees after a short write). Returns false if
    /// there is already something to do (data, EOF, room after a short write): the engine must
    /// not sleep then.
    fn arm(&mut self) -> bool {
        true
    }
    /// For polled links, spinning: false if a read now would surely find nothing (no data,
    /// no close, no error), so the engine may skip it. Must be cheap (a memory load or two).
    fn ready(&mut self) -> bool {
        true
    }
    /// Links whose bytes sit in memory (shared memory): the bytes readable now, in place (up
    /// to the ring's wrap). Nothing is consumed until [`consume`](Self::consume). `None`: use
    /// `read` (no data in place, an error, or a link that cannot do this).
    fn peek(&mut self) -> Option<&[u8]> {
        None
    }
    /// Hands back the first `n` bytes of what [`peek`](Self::peek) showed.
    fn consume(&mut self, _n: usize) {}
    /// [`ready`](Self::ready) and [`peek`](Self::peek) in one call, for a reader spinning on
    /// polled links: the bytes readable in place, nothing yet, or something only `read` can
    /// handle (an error, the peer closed, a link that cannot peek).
    fn poll_peek(&mut self) -> Peeked<'_> {
        if !self.ready() {
            return Peeked::Nothing;
        }
        match self.peek() {
            Some(b) => Peeked::Bytes(b),
            None => Peeked::Attention,
        }
    }
    /// Links whose bytes sit in memory, after a [`poll_peek`](Self::poll_peek) that found
    /// `Nothing`: the words whose change is the next thing to arrive, appended to `out`. False
    /// (nothing appended) when the link cannot give them or its state needs a full look
    /// (bytes pending, the peer closed or gone). A peer that closes later rings no doorbell:
    /// whoever waits on one must still look at the whole link now and then.
    fn doorbells(&self, _out: &mut Vec<Doorbell>) -> bool {
        false
    }
    /// [`doorbells`](Self::doorbells) for a reader whose next look takes a lane message
    /// itself (an express receive): a lane message already waiting, where `doorbells` gives
    /// none, gives one that has rung.
    fn answer_bells(&self, out: &mut Vec<Doorbell>) -> bool {
        self.doorbells(out)
    }
    /// The shared-memory link behind this one, for its lane ([`shm::ShmLink::lane_send`]).
    fn shm(&mut self) -> Option<&mut shm::ShmLink> {
        None
    }
    /// `write_vectored` of a header and a payload (a frame): what the engine's small sends do.
    fn write_frame(&mut self, header: &[u8], payload: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(header), IoSlice::new(payload)])
    }
    /// Called when epoll reports `fd()` ready, before the engine reads: a polled link clears
    /// what made it ready (a level-triggered signal, a hung-up peer) so the engine neither
    /// spins on a stale readiness nor misses a peer that died.
    fn event(&mut self) {}
    /// Turns per-message tracing on or off ([`trace`]); false if this link cannot be traced.
    fn set_trace(&mut self, _on: bool) -> io::Result<bool> {
        Ok(false)
    }
    /// The link's trace while tracing is on; with `collect`, first gathers what the kernel
    /// has stamped since (a syscall for TCP).
    fn trace(&mut self, _collect: bool) -> Option<&mut trace::LinkTrace> {
        None
    }
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (**self).read(buf)
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (**self).write_vectored(bufs)
    }
    fn fd(&self) -> RawFd {
        (**self).fd()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn polled(&self) -> bool {
        (**self).polled()
    }
    fn arm(&mut self) -> bool {
        (**self).arm()
    }
    fn ready(&mut self) -> bool {
        (**self).ready()
    }
    fn peek(&mut self) -> Option<&[u8]> {
        (**self).peek()
    }
    fn consume(&mut self, n: usize) {
        (**self).consume(n)
    }
    fn poll_peek(&mut self) -> Peeked<'_> {
        (**self).poll_peek()
    }
    fn write_frame(&mut self, header: &[u8], payload: &[u8]) -> io::Result<usize> {
        (**self).write_frame(header, payload)
    }
    fn doorbells(&self, out: &mut Vec<Doorbell>) -> bool {
        (**self).doorbells(out)
    }
    fn answer_bells(&self, out: &mut Vec<Doorbell>) -> bool {
        (**self).answer_bells(out)
    }
    fn shm(&mut self) -> Option<&mut shm::ShmLink> {
        (**self).shm()
    }
    fn event(&mut self) {
        (**self).event()
    }
    fn set_trace(&mut self, on: bool) -> io::Result<bool> {
        (**self).set_trace(on)
    }
    fn trace(&mut self, collect: bool) -> Option<&mut trace::LinkTrace> {
        (**self).trace(collect)
    }
}
