//! What the provider shell needs from a messaging engine: implemented over the hxcomm engine
//! in `engine_backend.rs`, and by the in-process mock of `mock.rs` for unit tests.

pub type PeerId = u32;
pub type OpId = u64;
pub const NAME_LEN: usize = 64;

/// Largest message the provider advertises in `ep_attr->max_msg_size` (fi_getinfo runs before
/// any backend exists). A backend's `max_msg_size()` must be at least this.
pub const MAX_MSG_SIZE: usize = u32::MAX as usize * 16;

/// Where a completed or failed operation ended.
#[derive(Debug, Clone)]
pub struct Done {
    pub op: OpId,
    pub is_recv: bool,
    /// Bytes placed in the receive buffer (recv) or sent (send).
    pub len: usize,
    /// Length of the message as sent (recv; > len means truncated).
    pub msg_len: usize,
    pub tag: u64,
    pub data: Option<u64>,
    /// Sender of a received message (None when unknown).
    pub src: Option<PeerId>,
    /// Set when the op failed: (positive FI_E* errno, e.g. FI_ETRUNC, FI_ECANCELED, FI_EIO; message naming the peer).
    pub error: Option<(i32, String)>,
}

/// A receive the backend held and served without an engine round ([`Backend::poll_express`]):
/// a success, the whole message in its buffer.
#[derive(Debug, Clone, Copy)]
pub struct Served {
    pub op: OpId,
    pub len: usize,
    pub tag: u64,
    pub data: Option<u64>,
    pub src: Option<PeerId>,
}

/// The one receive the backend holds, for a CQ read to serve from its peer's lane without
/// the backend ([`Backend::ticket`]).
pub struct Ticket {
    pub op: OpId,
    pub lane: hx_engine::LaneTicket,
    /// The receive's buffer (valid until it completes or is cancelled: fi_trecv's contract).
    pub buf: *mut u8,
    pub len: usize,
    /// Its message's source when the ticket takes it.
    pub src: PeerId,
}

// SAFETY: `buf` is the application's receive buffer, written only by the one read that takes
// the ticket (under the domain's serialization); the lane ticket is Send.
unsafe impl Send for Ticket {}

impl Served {
    pub fn done(&self) -> Done {
        Done {
            op: self.op,
            is_recv: true,
            len: self.len,
            msg_len: self.len,
            tag: self.tag,
            data: self.data,
            src: self.src,
            error: None,
        }
    }
}

/// What a CQ read's look at the backend found ([`Backend::poll_express`]).
#[derive(Debug)]
pub enum Polled {
    /// Receives the backend held were served, without an engine round (appended to the
    /// caller's list, in the order they were posted).
    Served,
    /// Nothing arrived and no round is owed.
    Nothing,
    /// Make a full round: [`Backend::collect`], then [`Backend::progress`].
    Progress,
}

/// A message found by peek.
#[derive(Debug, Clone)]
pub struct Found {
    pub src: PeerId,
    pub tag: u64,
    pub len: usize,
    pub data: Option<u64>,
}

pub struct BackendConfig {
    /// HX_* settings (name, value) after resolving FI_HXCOMM_* aliases.
    pub settings: Vec<(String, String)>,
    /// The domain's auth_key, if any.
    pub auth_key: Option<Vec<u8>>,
}

#[derive(Debug, Clone)]
pub struct BackendError {
    /// Positive FI_E* value.
    pub errno: i32,
    pub msg: String,
}

impl BackendError {
    pub fn new(errno: i32, msg: impl Into<String>) -> Self {
        BackendError {
            errno,
            msg: msg.into(),
        }
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (errno {})", self.msg, self.errno)
    }
}

/// Where a send goes: from endpoint `ep` to `peer`, in the tagged or the message matching
/// space, with remote CQ data.
#[derive(Debug, Clone, Copy)]
pub struct SendTo {
    pub ep: u16,
    pub tagged: bool,
    pub peer: PeerId,
    pub tag: u64,
    pub data: Option<u64>,
}

pub enum SendBuf {
    Borrowed { ptr: *const u8, len: usize },
    Owned(Vec<u8>),
}

impl SendBuf {
    pub fn len(&self) -> usize {
        match self {
            SendBuf::Borrowed { len, .. } => *len,
            SendBuf::Owned(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// # Safety
    /// A Borrowed buffer must be valid for its length.
    pub unsafe fn as_slice(&self) -> &[u8] {
        match self {
            SendBuf::Borrowed { len: 0, .. } => &[],
            SendBuf::Borrowed { ptr, len } => std::slice::from_raw_parts(*ptr, *len),
            SendBuf::Owned(v) => v,
        }
    }
}

pub trait Backend: Send {
    /// Opens a new endpoint (tagged and untagged messages are separate matching spaces inside it). Returns its id.
    fn open_ep(&mut self) -> Result<u16, BackendError>;
    fn close_ep(&mut self, ep: u16) -> Result<(), BackendError>;
    /// The 64-byte address of an endpoint.
    fn name(&self, ep: u16) -> [u8; NAME_LEN];
    /// Printable form of a name (for fi_av_straddr); error if malformed.
    fn describe(&self, name: &[u8]) -> Result<String, BackendError>;
    /// Makes a peer of a name (validated); the same name twice gives the same id.
    fn insert(&mut self, name: &[u8]) -> Result<PeerId, BackendError>;
    fn remove(&mut self, peer: PeerId) -> Result<(), BackendError>;
    /// fi_inject*: sends a copy the backend owns and never reports on it (no completion, not
    /// even an error). Returns the op id only for backends that cannot forget it (it then
    /// completes like any send and the domain ignores it).
    fn inject(&mut self, to: SendTo, copy: Vec<u8>) -> Result<Option<OpId>, BackendError> {
        // SAFETY: an owned buffer has no lifetime to keep.
        unsafe { self.send(to, SendBuf::Owned(copy)) }.map(Some)
    }
    /// fi_inject* without the copy, or a send that is complete at once: sends `data` now if
    /// it can leave without being tracked (a small message to a peer with nothing queued; what
    /// the link does not take is queued as a copy); true if it did, as if
    /// [`inject`](Self::inject)ed (a send's buffer is free again and it has succeeded as its
    /// request would have). False: nothing happened, inject a copy or send as usual.
    fn inject_now(&mut self, _to: &SendTo, _data: &[u8]) -> Result<bool, BackendError> {
        Ok(false)
    }
    /// # Safety
    /// A Borrowed buffer stays valid until the op completes.
    unsafe fn send(&mut self, to: SendTo, buf: SendBuf) -> Result<OpId, BackendError>;
    /// As [`send`](Self::send), completing only once the receiver holds the message
    /// (FI_DELIVERY_COMPLETE). A backend that cannot says so (-FI_ENOSYS).
    ///
    /// # Safety
    /// As [`send`](Self::send).
    unsafe fn send_delivered(&mut self, to: SendTo, buf: SendBuf) -> Result<OpId, BackendError> {
        let _ = (to, buf);
        Err(BackendError::new(
            crate::sys::FI_ENOSYS,
            "delivery-complete sends are not supported by this backend",
        ))
    }
    /// Lends the memory registered in `regions` to peers' reads and writes (a domain opened
    /// with FI_RMA). A backend that cannot says so (-FI_ENOSYS).
    fn set_regions(
        &mut self,
        regions: std::sync::Arc<crate::mr::RegionTable>,
    ) -> Result<(), BackendError> {
        let _ = regions;
        Err(BackendError::new(
            crate::sys::FI_ENOSYS,
            "remote memory access is not supported by this backend",
        ))
    }
    /// Region `key` is being closed (its memory may be freed next): peers' accesses to it
    /// still under way must stop touching it.
    fn release_region(&mut self, key: u64) {
        let _ = key;
    }
    /// fi_read: `len` bytes at `addr` of `peer`'s region `key` into `ptr`; completes once all
    /// of them are there.
    ///
    /// # Safety
    /// `ptr..ptr+len` stays valid until the op completes.
    unsafe fn read(
        &mut self,
        ep: u16,
        peer: PeerId,
        ptr: *mut u8,
        len: usize,
        addr: u64,
        key: u64,
    ) -> Result<OpId, BackendError> {
        let _ = (ep, peer, ptr, len, addr, key);
        Err(BackendError::new(
            crate::sys::FI_ENOSYS,
            "remote memory access is not supported by this backend",
        ))
    }
    /// fi_write: `buf` to `addr` of `peer`'s region `key`; completes once the peer has
    /// placed all of it (delivery-complete).
    ///
    /// # Safety
    /// A Borrowed buffer stays valid until the op completes.
    unsafe fn write(
        &mut self,
        ep: u16,
        peer: PeerId,
        buf: SendBuf,
        addr: u64,
        key: u64,
    ) -> Result<OpId, BackendError> {
        let _ = (ep, peer, buf, addr, key);
        Err(BackendError::new(
            crate::sys::FI_ENOSYS,
            "remote memory access is not supported by this backend",
        ))
    }
    /// fi_writedata: as [`write`](Self::write), and once the peer has placed all of it, `data`
    /// goes to it as remote CQ data: its [`watch_remote_writes`](Self::watch_remote_writes) op
    /// completes with it (a receive of the write's length, from this endpoint). The op
    /// completes once that notice has left.
    ///
    /// # Safety
    /// As [`write`](Self::write).
    unsafe fn write_data(
        &mut self,
        ep: u16,
        peer: PeerId,
        buf: SendBuf,
        addr: u64,
        key: u64,
        data: u64,
    ) -> Result<OpId, BackendError> {
        let _ = (ep, peer, buf, addr, key, data);
        Err(BackendError::new(
            crate::sys::FI_ENOSYS,
            "remote CQ data with writes is not supported by this backend",
        ))
    }
    /// From now until the endpoint closes, every remote write with CQ data that peers make to
    /// endpoint `ep` ([`write_data`](Self::write_data)) completes the returned op again, as a
    /// receive: `len` the write's length, `data` its CQ data, `src` the writer. The op never
    /// completes otherwise (nor in error); closing the endpoint ends it.
    fn watch_remote_writes(&mut self, ep: u16) -> Result<OpId, BackendError> {
        let _ = ep;
        Err(BackendError::new(
            crate::sys::FI_ENOSYS,
            "remote CQ data with writes is not supported by this backend",
        ))
    }
    /// fi_atomic / fi_fetch_atomic / fi_compare_atomic on one element at `addr` of `peer`'s
    /// region `key`: `operand` (and `compare`, for ops that take one) hold the element's value
    /// in their low `ty.width()` bytes. Once the peer has applied it, the element's old value
    /// is written to `result` (`ty.width()` bytes), if given, and the op completes.
    ///
    /// # Safety
    /// `result`, if given, stays valid for `ty.width()` bytes until the op completes.
    #[allow(clippy::too_many_arguments)]
    unsafe fn atomic(
        &mut self,
        ep: u16,
        peer: PeerId,
        op: hx_engine::AtomicOp,
        ty: hx_engine::AtomicType,
        operand: u64,
        compare: u64,
        result: Option<*mut u8>,
        addr: u64,
        key: u64,
    ) -> Result<OpId, BackendError> {
        let _ = (ep, peer, op, ty, operand, compare, result, addr, key);
        Err(BackendError::new(
            crate::sys::FI_ENOSYS,
            "atomics are not supported by this backend",
        ))
    }
    /// # Safety
    /// The buffer stays valid until the op completes or is cancelled.
    #[allow(clippy::too_many_arguments)]
    unsafe fn recv(
        &mut self,
        ep: u16,
        tagged: bool,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
        ptr: *mut u8,
        len: usize,
    ) -> Result<OpId, BackendError>;
    /// Makes progress, then looks for a message a recv with these filters would match. With `claim`, the message is reserved and can only be received with `recv_claimed(claim_id...)` or dropped with `discard_claimed`; returns (what was found, claim id).
    #[allow(clippy::type_complexity)]
    fn peek(
        &mut self,
        ep: u16,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
        claim: bool,
    ) -> Result<Option<(Found, Option<u64>)>, BackendError>;
    /// Drops the first matching unexpected message (FI_PEEK|FI_DISCARD). Returns what it dropped.
    fn discard(
        &mut self,
        ep: u16,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
    ) -> Result<Option<Found>, BackendError>;
    /// # Safety
    /// The buffer stays valid until the op completes.
    unsafe fn recv_claimed(
        &mut self,
        claim: u64,
        ptr: *mut u8,
        len: usize,
    ) -> Result<OpId, BackendError>;
    fn discard_claimed(&mut self, claim: u64) -> Result<Found, BackendError>;
    /// Cancels a posted, unmatched receive: true if it was cancelled (then no other completion comes for it).
    fn cancel(&mut self, op: OpId) -> bool;
    /// Nonblocking progress; appends finished operations (sends and receives) to `out`.
    fn progress(&mut self, out: &mut Vec<Done>) -> Result<(), BackendError>;
    /// Progress before the caller sleeps on wait_fd() (fi_trywait, fi_cq_sread): afterwards the
    /// fd becomes readable when anything arrives. progress() need not ensure that.
    fn progress_to_wait(&mut self, out: &mut Vec<Done>) -> Result<(), BackendError> {
        self.progress(out)
    }
    /// Appends operations that finished without I/O since the last call (a small send completes
    /// as it is written), with no syscall; progress() also does this.
    fn collect(&mut self, _out: &mut Vec<Done>) -> Result<(), BackendError> {
        Ok(())
    }
    /// Nothing finished without I/O: [`collect`](Self::collect) would append nothing.
    fn idle(&self) -> bool {
        false
    }
    /// A CQ read's first look, before [`poll_express`](Self::poll_express): the first of the
    /// receives the backend holds, served at once when its message is there by the shortest
    /// path the backend has (the engine's: a same-host peer's lane), and whether the backend
    /// is then [`idle`](Self::idle). `None`: look with `poll_express`.
    fn serve_first(&mut self) -> Option<(Served, bool)> {
        None
    }
    /// A CQ read's poll: looks for the receives the backend holds rather than posts, if any,
    /// and serves up to `room` of them in order into `out`. `Progress` when it is not
    /// [`idle`](Self::idle), holds none, or something else needs a round (which the next
    /// [`progress`](Self::progress) then makes).
    fn poll_express(&mut self, room: usize, out: &mut Vec<Served>) -> Polled {
        let _ = (room, out);
        Polled::Progress
    }
    /// Right after a [`poll_express`](Self::poll_express) that answered `Nothing`: the
    /// doorbells ([`hx_engine::Doorbell`]) that alone decide its next answer, into `out`
    /// (true), while nothing else touches the backend and no more than a few polls go by
    /// (false: none that can be trusted so).
    fn idle_bells(&self, out: &mut Vec<hx_engine::Doorbell>) -> bool {
        out.clear();
        false
    }
    /// Right after a receive that the backend holds as its first (nothing else held): takes
    /// the doorbells that alone decide the next look for it, as a look that found nothing
    /// would (true: [`idle_bells`](Self::idle_bells) gives them). The read that follows the
    /// receive can then be answered by them, instead of making the whole look while the
    /// answer may be landing.
    fn watch_first(&mut self) -> bool {
        false
    }
    /// Right after [`watch_first`](Self::watch_first) or a poll that found nothing, with one
    /// receive held: a ticket for a CQ read to take its message from its peer's lane itself,
    /// valid while nothing calls the backend. Whoever takes it tells the backend
    /// ([`ticket_served`](Self::ticket_served)) before anything else.
    fn ticket(&mut self) -> Option<Ticket> {
        None
    }
    /// The receive `op` of a [`ticket`](Self::ticket) was served with `st`: the backend no
    /// longer holds it, as if [`serve_first`](Self::serve_first) had served it.
    fn ticket_served(&mut self, op: OpId, st: &hx_engine::Status) {
        let _ = (op, st);
    }
    /// `n` CQ reads were answered by [`idle_bells`](Self::idle_bells)' doorbells since the
    /// last [`poll_express`](Self::poll_express): count them as polls.
    fn idle_reads(&mut self, n: u32) {
        let _ = n;
    }
    /// Right after [`ticket`](Self::ticket) gave `t`: a hold on its peer's lane for a run of
    /// receives like its own and answers to that peer, none of which calls the backend
    /// ([`hx_engine::LaneHold`]); the run is told with
    /// [`lane_hold_settled`](Self::lane_hold_settled) before anything else.
    fn lane_hold(&mut self, t: &Ticket) -> Option<hx_engine::LaneHold> {
        let _ = t;
        None
    }
    /// A [`lane_hold`](Self::lane_hold)'s run: `received` messages (count, bytes) its
    /// receives took, `sent` answers (count, bytes), `reads` CQ reads its receives waited
    /// through (counted as [`idle_reads`](Self::idle_reads)).
    fn lane_hold_settled(
        &mut self,
        peer: hx_engine::Rank,
        received: (u64, u64),
        sent: (u64, u64),
        reads: u32,
    ) {
        let _ = (peer, received, sent, reads);
    }
    /// After a [`poll_express`](Self::poll_express) that found nothing: how many of the next
    /// idle polls may answer nothing without asking (the backend has nobody to hear from and
    /// nothing to do but look for a newcomer now and then), taken: the domain counts them down
    /// itself, and anything else it is asked to do ends them.
    fn take_lonely_polls(&mut self) -> u32 {
        0
    }
    /// Readable when progress() may have something to do; after progress() found nothing, it is safe to sleep in poll() on it.
    fn wait_fd(&self) -> i32;
    /// Largest message.
    fn max_msg_size(&self) -> usize;
    /// Client side of fi_getinfo(node, service): the name of the endpoint listening there, if the backend can find it.
    fn resolve(&mut self, node: &str, service: &str) -> Result<[u8; NAME_LEN], BackendError>;
    /// Server side of fi_getinfo(node, service, FI_SOURCE) (added to the brief's trait): make
    /// endpoint `ep` the one `resolve(node, service)` finds. `node` None means any local address.
    /// Backends that cannot do it keep this default; fi_endpoint then fails with its errno.
    fn listen(
        &mut self,
        ep: u16,
        node: Option<&str>,
        service: Option<&str>,
    ) -> Result<(), BackendError> {
        let _ = (ep, node, service);
        Err(BackendError::new(
            crate::sys::FI_ENOSYS,
            "this backend cannot listen at a node/service",
        ))
    }
}

/// The backend every domain uses: the hxcomm engine (unit tests of this crate use the
/// in-process mock, so that they need no sockets).
pub fn new_backend(cfg: &BackendConfig) -> Result<Box<dyn Backend>, BackendError> {
    #[cfg(test)]
    {
        Ok(Box::new(crate::mock::MockBackend::new(cfg)?))
    }
    #[cfg(not(test))]
    {
        Ok(Box::new(crate::engine_backend::EngineBackend::new(cfg)?))
    }
}

/// Client side of fi_getinfo(node, service): the name of the endpoint listening there.
pub fn resolve(
    node: &str,
    service: &str,
    auth_key: Option<Vec<u8>>,
) -> Result<[u8; NAME_LEN], String> {
    #[cfg(test)]
    {
        let cfg = crate::domain::backend_config(auth_key)?;
        let mut b = crate::mock::MockBackend::new(&cfg).map_err(|e| e.msg)?;
        b.resolve(node, service).map_err(|e| e.msg)
    }
    #[cfg(not(test))]
    {
        let _ = auth_key;
        crate::engine_backend::resolve(node, service).map_err(|e| e.msg)
    }
}
