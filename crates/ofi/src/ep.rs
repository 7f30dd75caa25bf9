//! RDM endpoints: message and tagged operations mapped onto backend sends and receives.

use crate::av::{AvObj, AvShared};
use crate::backend::{Found, OpId, PeerId, SendBuf, SendTo, NAME_LEN};
use crate::cq::{CqObj, CqShared, Entry};
use crate::domain::{
    self, AvCache, DomainObj, DomainShared, DomainState, HoldKey, Pending, Report,
};
use crate::fabric::{enosys_ops_open, ptr};
use crate::hints::{self, INJECT_SIZE};
use crate::sys::*;
use crate::util::*;
use hx_engine::{AtomicOp, AtomicType};
use libc::{c_int, c_void, iovec};
use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

/// Bindings, fixed by fi_enable.
struct Bound {
    tx_cq: Option<Arc<CqShared>>,
    tx_sel: bool,
    rx_cq: Option<Arc<CqShared>>,
    rx_sel: bool,
    av: Arc<AvShared>,
}

#[derive(Default)]
struct Setup {
    tx_cq: Option<(*mut CqObj, bool)>,
    rx_cq: Option<(*mut CqObj, bool)>,
    av: Option<*mut AvObj>,
}

#[repr(C)]
pub struct EpObj {
    pub fid: fid_ep,
    domain: *mut DomainObj,
    d: Arc<DomainShared>,
    id: u16,
    caps: u64,
    tx_op_flags: u64,
    rx_op_flags: u64,
    inject_size: usize,
    setup: Mutex<Setup>,
    bound: OnceLock<Bound>,
    /// FI_PEEK|FI_CLAIM: the claim belongs to the operation's context.
    claims: Mutex<HashMap<usize, u64>>,
}

// SAFETY: the raw pointers in Setup are only dereferenced under its mutex, to objects that stay
// alive while bound (their close returns -FI_EBUSY).
unsafe impl Send for Setup {}

static EP_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(ep_close),
    bind: Some(ep_bind),
    control: Some(ep_control),
    ops_open: Some(enosys_ops_open),
    tostr: None,
    ops_set: None,
};

static EP_OPS: fi_ops_ep = fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: Some(ep_cancel),
    getopt: Some(ep_getopt),
    setopt: Some(ep_setopt),
    tx_ctx: Some(enosys_ctx_tx),
    rx_ctx: Some(enosys_ctx_rx),
    rx_size_left: Some(enosys_size_left),
    tx_size_left: Some(enosys_size_left),
};

static CM_OPS: fi_ops_cm = fi_ops_cm {
    size: std::mem::size_of::<fi_ops_cm>(),
    setname: Some(cm_setname),
    getname: Some(cm_getname),
    getpeer: Some(cm_getpeer),
    connect: Some(cm_connect),
    listen: Some(cm_listen),
    accept: Some(cm_accept),
    reject: Some(cm_reject),
    shutdown: Some(cm_shutdown),
    join: Some(cm_join),
};

static MSG_OPS: fi_ops_msg = fi_ops_msg {
    size: std::mem::size_of::<fi_ops_msg>(),
    recv: Some(msg_recv),
    recvv: Some(msg_recvv),
    recvmsg: Some(msg_recvmsg),
    send: Some(msg_send),
    sendv: Some(msg_sendv),
    sendmsg: Some(msg_sendmsg),
    inject: Some(msg_inject),
    senddata: Some(msg_senddata),
    injectdata: Some(msg_injectdata),
};

static TAGGED_OPS: fi_ops_tagged = fi_ops_tagged {
    size: std::mem::size_of::<fi_ops_tagged>(),
    recv: Some(t_recv),
    recvv: Some(t_recvv),
    recvmsg: Some(t_recvmsg),
    send: Some(t_send),
    sendv: Some(t_sendv),
    sendmsg: Some(t_sendmsg),
    inject: Some(t_inject),
    senddata: Some(t_senddata),
    injectdata: Some(t_injectdata),
};

static ATOMIC_OPS: fi_ops_atomic = fi_ops_atomic {
    size: std::mem::size_of::<fi_ops_atomic>(),
    write: Some(atomic_write),
    writev: Some(atomic_writev),
    writemsg: Some(atomic_writemsg),
    inject: Some(atomic_inject),
    readwrite: Some(atomic_readwrite),
    readwritev: Some(atomic_readwritev),
    readwritemsg: Some(atomic_readwritemsg),
    compwrite: Some(atomic_compwrite),
    compwritev: Some(atomic_compwritev),
    compwritemsg: Some(atomic_compwritemsg),
    writevalid: Some(atomic_writevalid),
    readwritevalid: Some(atomic_readwritevalid),
    compwritevalid: Some(atomic_compwritevalid),
};

static RMA_OPS: fi_ops_rma = fi_ops_rma {
    size: std::mem::size_of::<fi_ops_rma>(),
    read: Some(rma_read),
    readv: Some(rma_readv),
    readmsg: Some(rma_readmsg),
    write: Some(rma_write),
    writev: Some(rma_writev),
    writemsg: Some(rma_writemsg),
    inject: Some(rma_inject),
    writedata: Some(rma_writedata),
    injectdata: Some(rma_injectdata),
};

pub unsafe extern "C" fn hx_endpoint(
    d: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    if d.is_null() || info.is_null() || ep.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let i = &*info;
        if let Some(e) = i.ep_attr.as_ref() {
            if e.type_ != FI_EP_RDM && e.type_ != FI_EP_UNSPEC {
                return Err(FI_EINVAL);
            }
        }
        let dom = domain::from_fid(d);
        let caps = if i.caps == 0 { hints::CAPS } else { i.caps };
        let tx = i.tx_attr.as_ref();
        let inject_size = tx.map_or(INJECT_SIZE, |t| {
            if t.inject_size == 0 {
                INJECT_SIZE
            } else {
                t.inject_size.min(INJECT_SIZE)
            }
        });
        let listen = (!i.src_addr.is_null() && i.src_addrlen == NAME_LEN)
            .then(|| {
                hints::decode_listen(std::slice::from_raw_parts(
                    i.src_addr as *const u8,
                    NAME_LEN,
                ))
            })
            .flatten();
        let id = {
            let mut st = dom.d.lock();
            let id = st.backend.open_ep().map_err(|e| {
                warn(FI_LOG_EP_CTRL, &format!("fi_endpoint: {}", e.msg));
                e.errno
            })?;
            if let Some((node, service)) = &listen {
                if let Err(e) = st.backend.listen(id, node.as_deref(), service.as_deref()) {
                    warn(FI_LOG_EP_CTRL, &format!("fi_endpoint: listen: {}", e.msg));
                    let _ = st.backend.close_ep(id);
                    return Err(e.errno);
                }
            }
            id
        };
        let obj = Box::new(EpObj {
            fid: fid_ep {
                fid: fid {
                    fclass: FI_CLASS_EP,
                    context,
                    ops: ptr(&EP_FI_OPS),
                },
                ops: ptr(&EP_OPS),
                cm: ptr(&CM_OPS),
                msg: ptr(&MSG_OPS),
                rma: ptr(&RMA_OPS),
                tagged: ptr(&TAGGED_OPS),
                atomic: ptr(&ATOMIC_OPS),
                collective: std::ptr::null_mut(),
            },
            domain: d as *mut DomainObj,
            d: dom.d.clone(),
            id,
            caps,
            tx_op_flags: tx.map_or(0, |t| t.op_flags),
            rx_op_flags: i.rx_attr.as_ref().map_or(0, |r| r.op_flags),
            inject_size,
            setup: Mutex::default(),
            bound: OnceLock::new(),
            claims: Mutex::default(),
        });
        dom.children.fetch_add(1, Ordering::AcqRel);
        *ep = &mut Box::leak(obj).fid;
        Ok(0)
    })
}

unsafe fn ep_of<'a>(f: *const fid_ep) -> &'a EpObj {
    &*(f as *const EpObj)
}

unsafe extern "C" fn ep_close(f: *mut fid) -> c_int {
    if f.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let o = Box::from_raw(f as *mut EpObj);
        {
            let mut st = o.d.lock();
            let _ = st.backend.close_ep(o.id);
            // Receives still posted on this endpoint can no longer complete.
            st.pending.retain(|_, p| p.ep != o.id);
        }
        let s = lock(&o.setup);
        for (cq, _) in [s.tx_cq, s.rx_cq].into_iter().flatten() {
            (&*cq).c.bound.fetch_sub(1, Ordering::AcqRel);
        }
        if let Some(av) = s.av {
            (&*av).a.bound.fetch_sub(1, Ordering::AcqRel);
        }
        drop(s);
        (&*o.domain).children.fetch_sub(1, Ordering::AcqRel);
        Ok(0)
    })
}

unsafe extern "C" fn ep_bind(f: *mut fid, b: *mut fid, flags: u64) -> c_int {
    if f.is_null() || b.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let ep = ep_of(f as *const fid_ep);
        if ep.bound.get().is_some() {
            return Err(FI_EOPBADSTATE);
        }
        let mut guard = lock(&ep.setup);
        let s = &mut *guard;
        match (*b).fclass {
            FI_CLASS_CQ => {
                let cq = b as *mut CqObj;
                if (*cq).domain != ep.domain {
                    return Err(FI_EINVAL);
                }
                if flags & !(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION) != 0 {
                    return Err(FI_EBADFLAGS);
                }
                let sel = flags & FI_SELECTIVE_COMPLETION != 0;
                for (want, slot) in [(FI_TRANSMIT, &mut s.tx_cq), (FI_RECV, &mut s.rx_cq)] {
                    if flags & want != 0 {
                        if let Some((old, _)) = slot.replace((cq, sel)) {
                            (&*old).c.bound.fetch_sub(1, Ordering::AcqRel);
                        }
                        (&*cq).c.bound.fetch_add(1, Ordering::AcqRel);
                    }
                }
                Ok(0)
            }
            FI_CLASS_AV => {
                let av = b as *mut AvObj;
                if (*av).domain != ep.domain {
                    return Err(FI_EINVAL);
                }
                if s.av.is_some() {
                    return Err(FI_EINVAL);
                }
                s.av = Some(av);
                (&*av).a.bound.fetch_add(1, Ordering::AcqRel);
                Ok(0)
            }
            // RDM endpoints report no connection events: an event queue is accepted and stays
            // quiet.
            FI_CLASS_EQ => Ok(0),
            _ => Err(FI_ENOSYS),
        }
    })
}

unsafe extern "C" fn ep_control(f: *mut fid, cmd: c_int, _arg: *mut c_void) -> c_int {
    if f.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let ep = ep_of(f as *const fid_ep);
        if cmd != FI_ENABLE {
            return Err(FI_ENOSYS);
        }
        if ep.bound.get().is_some() {
            return Ok(0);
        }
        let s = lock(&ep.setup);
        let av = s.av.ok_or(FI_ENOAV)?;
        if ep.caps & FI_SEND != 0 && s.tx_cq.is_none()
            || ep.caps & FI_RECV != 0 && s.rx_cq.is_none()
        {
            return Err(FI_ENOCQ);
        }
        let b = Bound {
            tx_cq: s.tx_cq.map(|(c, _)| (*c).c.clone()),
            tx_sel: s.tx_cq.is_some_and(|(_, sel)| sel),
            rx_cq: s.rx_cq.map(|(c, _)| (*c).c.clone()),
            rx_sel: s.rx_cq.is_some_and(|(_, sel)| sel),
            av: (*av).a.clone(),
        };
        let _ = ep.bound.set(b);
        if ep.caps & (FI_RMA | FI_REMOTE_WRITE) != 0 {
            ep.watch_remote_writes();
        }
        Ok(0)
    })
}

// ---- operations ----

/// One contiguous buffer of an operation (zero or one iov).
unsafe fn one_iov(iov: *const iovec, count: usize) -> Result<(*mut u8, usize), i32> {
    match count {
        0 => Ok((std::ptr::null_mut(), 0)),
        1 if !iov.is_null() => Ok(((*iov).iov_base as *mut u8, (*iov).iov_len)),
        1 => Err(FI_EINVAL),
        _ => Err(FI_EINVAL),
    }
}

struct SendArgs {
    tagged: bool,
    buf: *const u8,
    len: usize,
    dest: fi_addr_t,
    tag: u64,
    data: Option<u64>,
    context: usize,
    /// Explicit operation flags (None: the endpoint's tx op_flags).
    flags: Option<u64>,
}

struct RmaArgs {
    write: bool,
    /// The local buffer: read into, or written from.
    buf: *mut u8,
    len: usize,
    peer: fi_addr_t,
    addr: u64,
    key: u64,
    context: usize,
    /// Explicit operation flags (None: the endpoint's tx op_flags).
    flags: Option<u64>,
    /// fi_inject_write: a copy, never reported.
    inject: bool,
    /// Remote CQ data (fi_writedata, fi_inject_writedata, fi_writemsg with
    /// FI_REMOTE_CQ_DATA): an entry on the target's receive CQ once the data is placed.
    data: Option<u64>,
}

/// The three families of fi_atomic(3), each with its own calls, ops and completion flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicFamily {
    /// fi_atomic: the arithmetic, logical and bitwise ops and FI_ATOMIC_WRITE.
    Write,
    /// fi_fetch_atomic: as fi_atomic plus FI_ATOMIC_READ, returning the old value.
    Fetch,
    /// fi_compare_atomic: the compare-and-swap ops and FI_MSWAP, returning the old value.
    Compare,
}

impl AtomicFamily {
    fn what(self) -> &'static str {
        match self {
            AtomicFamily::Write => "fi_atomic",
            AtomicFamily::Fetch => "fi_fetch_atomic",
            AtomicFamily::Compare => "fi_compare_atomic",
        }
    }
}

/// The engine's view of an fi_datatype / fi_op pair a family takes; -FI_EOPNOTSUPP for the
/// rest (floating-point, complex and 128-bit types, ops of another family, unknown values).
/// One element per operation ([`ATOMIC_COUNT`]).
pub fn atomic_kind(
    family: AtomicFamily,
    datatype: c_int,
    op: c_int,
) -> Result<(AtomicOp, AtomicType), i32> {
    let ty = match datatype {
        FI_INT8 => AtomicType::I8,
        FI_UINT8 => AtomicType::U8,
        FI_INT16 => AtomicType::I16,
        FI_UINT16 => AtomicType::U16,
        FI_INT32 => AtomicType::I32,
        FI_UINT32 => AtomicType::U32,
        FI_INT64 => AtomicType::I64,
        FI_UINT64 => AtomicType::U64,
        _ => return Err(FI_EOPNOTSUPP),
    };
    let op = match op {
        FI_MIN => AtomicOp::Min,
        FI_MAX => AtomicOp::Max,
        FI_SUM => AtomicOp::Sum,
        FI_PROD => AtomicOp::Prod,
        FI_LOR => AtomicOp::Lor,
        FI_LAND => AtomicOp::Land,
        FI_BOR => AtomicOp::Bor,
        FI_BAND => AtomicOp::Band,
        FI_LXOR => AtomicOp::Lxor,
        FI_BXOR => AtomicOp::Bxor,
        FI_ATOMIC_READ => AtomicOp::Read,
        FI_ATOMIC_WRITE => AtomicOp::Write,
        FI_CSWAP => AtomicOp::Cswap,
        FI_CSWAP_NE => AtomicOp::CswapNe,
        FI_CSWAP_LE => AtomicOp::CswapLe,
        FI_CSWAP_LT => AtomicOp::CswapLt,
        FI_CSWAP_GE => AtomicOp::CswapGe,
        FI_CSWAP_GT => AtomicOp::CswapGt,
        FI_MSWAP => AtomicOp::Mswap,
        _ => return Err(FI_EOPNOTSUPP),
    };
    let takes = match family {
        // A read without a result to return it to is no operation.
        AtomicFamily::Write => !op.compares() && op != AtomicOp::Read,
        AtomicFamily::Fetch => !op.compares(),
        AtomicFamily::Compare => op.compares(),
    };
    if takes {
        Ok((op, ty))
    } else {
        Err(FI_EOPNOTSUPP)
    }
}

/// Elements per atomic operation: one (what fi_atomicvalid and fi_query_atomic report).
pub const ATOMIC_COUNT: usize = 1;

/// One buffer of an atomic: its address and element count.
type Ioc = (*mut u8, usize);

struct AtomicArgs {
    family: AtomicFamily,
    /// The operand (None: no fi_ioc given, which only FI_ATOMIC_READ may do).
    buf: Option<Ioc>,
    /// The compare family's compare value (or mask, FI_MSWAP).
    compare: Option<Ioc>,
    /// Where the fetch and compare families return the old value.
    result: Option<Ioc>,
    peer: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: c_int,
    op: c_int,
    context: usize,
    /// Explicit operation flags (None: the endpoint's tx op_flags).
    flags: Option<u64>,
    /// fi_inject_atomic: never reported.
    inject: bool,
}

/// The one element at `e` of `width` bytes, as the low bytes of a little-endian u64.
///
/// # Safety
/// `e`, if given with a non-NULL address, is readable for `width` bytes.
unsafe fn element(e: Option<Ioc>, width: usize) -> Result<u64, i32> {
    match e {
        Some((p, ATOMIC_COUNT)) if !p.is_null() => {
            let mut v = [0u8; 8];
            std::ptr::copy_nonoverlapping(p, v.as_mut_ptr(), width.min(8));
            Ok(u64::from_le_bytes(v))
        }
        _ => Err(FI_EINVAL),
    }
}

impl EpObj {
    fn bound(&self) -> Result<&Bound, i32> {
        self.bound.get().ok_or(FI_EOPBADSTATE)
    }

    fn peer(&self, b: &Bound, a: fi_addr_t, what: &str) -> Result<PeerId, i32> {
        b.av.peer(a).ok_or_else(|| {
            warn(
                FI_LOG_EP_DATA,
                &format!("{what}: fi_addr {a:#x} is not in the endpoint's address vector"),
            );
            FI_EINVAL
        })
    }

    /// [`peer`](Self::peer) under the domain lock, through the domain's one-entry cache (a
    /// ping-pong's every send and receive name the same address): no AV lock on a hit. An entry
    /// holds while its AV's generation is unchanged (every remove changes it, and no two AVs
    /// ever share one).
    fn peer_locked(
        &self,
        st: &mut DomainState,
        b: &Bound,
        a: fi_addr_t,
        what: &str,
    ) -> Result<PeerId, i32> {
        let gen = b.av.generation();
        if let Some(c) = st.av_cache {
            if c.addr == a && c.gen == gen {
                return Ok(c.peer);
            }
        }
        let peer = self.peer(b, a, what)?;
        st.av_cache = Some(AvCache {
            gen,
            addr: a,
            peer,
            back: None,
        });
        Ok(peer)
    }

    /// fi_inject*: no completion, ever; the backend forgets it once it is written.
    unsafe fn inject(
        &self,
        tagged: bool,
        buf: *const c_void,
        len: usize,
        dest: fi_addr_t,
        tag: u64,
        data: Option<u64>,
    ) -> Result<isize, i32> {
        let b = self.bound()?;
        // (inject_size is at most INJECT_SIZE, far below max_msg.)
        if len > self.inject_size {
            return Err(FI_EMSGSIZE);
        }
        if len > 0 && buf.is_null() {
            return Err(FI_EINVAL);
        }
        let bytes = if len == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(buf as *const u8, len)
        };
        // An answer of a run that holds the peer's lane (see domain.rs, `Hold`): no state.
        if tagged && self.d.state.is_serial() {
            let k = HoldKey {
                ep: self.id,
                addr: dest,
                av_generation: b.av.generation(),
            };
            if self.d.hold_send(&k, tag, data, bytes) {
                return Ok(0);
            }
        }
        // The state as it is: a receive an idle read served (`DomainShared::settle`) is told
        // right after this send, which does not depend on it.
        let mut st = self.d.lock_unsettled();
        let to = SendTo {
            ep: self.id,
            tagged,
            peer: self.peer_locked(&mut st, b, dest, "send")?,
            tag,
            data,
        };
        // Most small injects leave at once: no copy, nothing to track.
        let now = st.backend.inject_now(&to, bytes);
        self.d.settle(&mut st);
        if now.map_err(|e| {
            warn(FI_LOG_EP_DATA, &format!("inject: {}", e.msg));
            e.errno
        })? {
            return Ok(0);
        }
        let op = st.backend.inject(to, bytes.to_vec()).map_err(|e| {
            warn(FI_LOG_EP_DATA, &format!("inject: {}", e.msg));
            e.errno
        })?;
        if let Some(op) = op {
            st.pending.insert(
                op,
                Pending {
                    cq: std::ptr::null(),
                    av: std::ptr::null(),
                    context: 0,
                    flags: FI_SEND | if tagged { FI_TAGGED } else { FI_MSG },
                    report: Report::Never,
                    ep: self.id,
                },
            );
        }
        Ok(0)
    }

    unsafe fn send(&self, a: SendArgs) -> Result<isize, i32> {
        let b = self.bound()?;
        if a.len > self.d.max_msg {
            return Err(FI_EMSGSIZE);
        }
        let flags = a.flags.unwrap_or(self.tx_op_flags);
        let owned = flags & FI_INJECT != 0;
        if owned && a.len > self.inject_size {
            return Err(FI_EMSGSIZE);
        }
        if a.len > 0 && a.buf.is_null() {
            return Err(FI_EINVAL);
        }
        // The state as it is: a receive an idle read served (`DomainShared::settle`) is told
        // right after this send, which does not depend on it.
        let mut st = self.d.lock_unsettled();
        let to = SendTo {
            ep: self.id,
            tagged: a.tagged,
            peer: self.peer_locked(&mut st, b, a.dest, "send")?,
            tag: a.tag,
            data: a.data,
        };
        let copy = || {
            if a.len == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(a.buf, a.len).to_vec()
            }
        };
        let report = if !b.tx_sel || flags & FI_COMPLETION != 0 {
            Report::Always
        } else {
            Report::ErrorsOnly
        };
        let send_flags = FI_SEND | if a.tagged { FI_TAGGED } else { FI_MSG };
        // A small send that leaves at once (or is queued as a copy) is complete as it returns,
        // as the engine's request for it would be: its completion goes straight to the CQ,
        // with no request, copy or tracking (a message rate's every send).
        let data = if a.len == 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(a.buf, a.len)
        };
        let delivered = flags & FI_DELIVERY_COMPLETE != 0;
        let now = match delivered {
            true => Ok(false),
            false => st.backend.inject_now(&to, data),
        };
        self.d.settle(&mut st);
        if now.map_err(|e| {
            warn(FI_LOG_EP_DATA, &format!("send: {}", e.msg));
            e.errno
        })? {
            if report == Report::Always {
                if let Some(cq) = &b.tx_cq {
                    cq.push(Entry {
                        context: a.context,
                        flags: send_flags,
                        len: a.len,
                        data: 0,
                        tag: 0,
                        src: None,
                        err: None,
                    });
                }
            }
            return Ok(0);
        }
        let buf = if owned {
            SendBuf::Owned(copy())
        } else {
            SendBuf::Borrowed {
                ptr: a.buf,
                len: a.len,
            }
        };
        let sent = if delivered {
            st.backend.send_delivered(to, buf)
        } else {
            st.backend.send(to, buf)
        };
        let op = sent.map_err(|e| {
            warn(FI_LOG_EP_DATA, &format!("send: {}", e.msg));
            e.errno
        })?;
        st.pending.insert(
            op,
            Pending {
                cq: b.tx_cq.as_ref().map_or(std::ptr::null(), Arc::as_ptr),
                av: std::ptr::null(),
                context: a.context,
                flags: send_flags,
                report,
                ep: self.id,
            },
        );
        Ok(0)
    }

    /// fi_read / fi_write and their v/msg/inject forms: one local buffer, one remote range.
    unsafe fn rma(&self, a: RmaArgs) -> Result<isize, i32> {
        let what = if a.write { "fi_write" } else { "fi_read" };
        if self.caps & FI_RMA == 0 {
            warn(
                FI_LOG_EP_DATA,
                &format!("{what}: the endpoint was opened without FI_RMA"),
            );
            return Err(FI_EOPNOTSUPP);
        }
        let b = self.bound()?;
        if a.len > self.d.max_msg {
            return Err(FI_EMSGSIZE);
        }
        if a.len > 0 && a.buf.is_null() {
            return Err(FI_EINVAL);
        }
        let flags = a.flags.unwrap_or(self.tx_op_flags);
        // A fence would hold this access until earlier ones complete: not offered.
        if flags & FI_FENCE != 0 {
            warn(
                FI_LOG_EP_DATA,
                &format!("{what}: FI_FENCE is not supported"),
            );
            return Err(FI_EBADFLAGS);
        }
        // Remote CQ data goes with writes only (as with messages, whatever the caps say:
        // fabtests ask for none and then call fi_writedata).
        let data = a.data.filter(|_| a.write);
        if !a.write && (a.data.is_some() || a.flags.is_some_and(|f| f & FI_REMOTE_CQ_DATA != 0)) {
            warn(
                FI_LOG_EP_DATA,
                &format!("{what}: remote CQ data goes with writes, not reads"),
            );
            return Err(FI_EBADFLAGS);
        }
        let inject = a.inject || flags & FI_INJECT != 0;
        if inject && (!a.write || a.len > self.inject_size) {
            return Err(if a.write { FI_EMSGSIZE } else { FI_EBADFLAGS });
        }
        let report = if a.inject {
            Report::Never
        } else if !b.tx_sel || flags & FI_COMPLETION != 0 {
            Report::Always
        } else {
            Report::ErrorsOnly
        };
        let mut st = self.d.lock();
        let peer = self.peer_locked(&mut st, b, a.peer, what)?;
        let started = if a.write {
            let buf = if inject {
                SendBuf::Owned(if a.len == 0 {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(a.buf, a.len).to_vec()
                })
            } else {
                SendBuf::Borrowed {
                    ptr: a.buf,
                    len: a.len,
                }
            };
            match data {
                Some(data) => st
                    .backend
                    .write_data(self.id, peer, buf, a.addr, a.key, data),
                None => st.backend.write(self.id, peer, buf, a.addr, a.key),
            }
        } else {
            st.backend.read(self.id, peer, a.buf, a.len, a.addr, a.key)
        };
        let op = started.map_err(|e| {
            warn(FI_LOG_EP_DATA, &format!("{what}: {}", e.msg));
            e.errno
        })?;
        st.pending.insert(
            op,
            Pending {
                cq: b.tx_cq.as_ref().map_or(std::ptr::null(), Arc::as_ptr),
                av: std::ptr::null(),
                context: a.context,
                flags: FI_RMA | if a.write { FI_WRITE } else { FI_READ },
                report,
                ep: self.id,
            },
        );
        Ok(0)
    }

    /// The fi_atomic, fi_fetch_atomic and fi_compare_atomic families: one element, one
    /// remote element; the operand and compare value are copied at the call, the old value
    /// lands in the result buffer before the completion.
    unsafe fn atomic(&self, a: AtomicArgs) -> Result<isize, i32> {
        let what = a.family.what();
        if self.caps & FI_ATOMIC == 0 {
            warn(
                FI_LOG_EP_DATA,
                &format!("{what}: the endpoint was opened without FI_ATOMIC"),
            );
            return Err(FI_EOPNOTSUPP);
        }
        let (op, ty) = atomic_kind(a.family, a.datatype, a.op).inspect_err(|_| {
            warn(
                FI_LOG_EP_DATA,
                &format!(
                    "{what}: datatype {} with op {} is not supported",
                    a.datatype, a.op
                ),
            );
        })?;
        let b = self.bound()?;
        let width = ty.width();
        // A read's operand is never looked at (fi_fetch_atomic may pass NULL), but a count
        // it names must still be one element.
        let operand = match a.buf {
            _ if op != AtomicOp::Read => element(a.buf, width)?,
            Some((_, n)) if n != ATOMIC_COUNT => return Err(FI_EINVAL),
            _ => 0,
        };
        let compare = if a.family == AtomicFamily::Compare {
            element(a.compare, width)?
        } else {
            0
        };
        let result = match (a.family, a.result) {
            (AtomicFamily::Write, _) => None,
            (_, Some((p, ATOMIC_COUNT))) if !p.is_null() => Some(p),
            _ => return Err(FI_EINVAL),
        };
        let flags = a.flags.unwrap_or(self.tx_op_flags);
        // As with fi_write: no completion at the target, no fence. (FI_INJECT needs nothing:
        // the operand and compare value are copied before the call returns.)
        if flags & (FI_REMOTE_CQ_DATA | FI_FENCE) != 0 {
            warn(
                FI_LOG_EP_DATA,
                &format!("{what}: FI_REMOTE_CQ_DATA and FI_FENCE are not supported"),
            );
            return Err(FI_EBADFLAGS);
        }
        let report = if a.inject {
            Report::Never
        } else if !b.tx_sel || flags & FI_COMPLETION != 0 {
            Report::Always
        } else {
            Report::ErrorsOnly
        };
        let mut st = self.d.lock();
        let peer = self.peer_locked(&mut st, b, a.peer, what)?;
        let op_id = st
            .backend
            .atomic(
                self.id, peer, op, ty, operand, compare, result, a.addr, a.key,
            )
            .map_err(|e| {
                warn(FI_LOG_EP_DATA, &format!("{what}: {}", e.msg));
                e.errno
            })?;
        // As libfabric's providers report them: a plain atomic writes, the two that return
        // the old value read.
        let side = if a.family == AtomicFamily::Write {
            FI_WRITE
        } else {
            FI_READ
        };
        st.pending.insert(
            op_id,
            Pending {
                cq: b.tx_cq.as_ref().map_or(std::ptr::null(), Arc::as_ptr),
                av: std::ptr::null(),
                context: a.context,
                flags: FI_ATOMIC | side,
                report,
                ep: self.id,
            },
        );
        Ok(0)
    }

    /// fi_atomicvalid and its fetch and compare forms: one element for what the family
    /// takes on an endpoint opened with FI_ATOMIC.
    fn atomic_valid(&self, family: AtomicFamily, datatype: c_int, op: c_int) -> Result<usize, i32> {
        if self.caps & FI_ATOMIC == 0 {
            return Err(FI_EOPNOTSUPP);
        }
        atomic_kind(family, datatype, op).map(|_| ATOMIC_COUNT)
    }

    fn rx_report(&self, b: &Bound, flags: u64) -> Report {
        if !b.rx_sel || flags & FI_COMPLETION != 0 {
            Report::Always
        } else {
            Report::ErrorsOnly
        }
    }

    /// A target of writes: peers' remote CQ data (fi_writedata) becomes entries on the receive
    /// CQ (context NULL, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, the write's length),
    /// without consuming a posted receive (no FI_RX_CQ_DATA mode). Without a receive CQ the
    /// notices are still taken, and dropped.
    fn watch_remote_writes(&self) {
        let Ok(b) = self.bound() else {
            return;
        };
        let mut st = self.d.lock();
        match st.backend.watch_remote_writes(self.id) {
            Ok(op) => st.pending.insert_kept(
                op,
                Pending {
                    cq: b.rx_cq.as_ref().map_or(std::ptr::null(), Arc::as_ptr),
                    av: Arc::as_ptr(&b.av),
                    context: 0,
                    flags: FI_RMA | FI_REMOTE_WRITE,
                    report: Report::Always,
                    ep: self.id,
                },
            ),
            Err(e) => tracing::debug!("hxcomm: no remote CQ data with writes: {}", e.msg),
        }
    }

    fn rx_pending(&self, b: &Bound, context: usize, tagged: bool, report: Report) -> Pending {
        Pending {
            cq: b.rx_cq.as_ref().map_or(std::ptr::null(), Arc::as_ptr),
            av: Arc::as_ptr(&b.av),
            context,
            flags: FI_RECV | if tagged { FI_TAGGED } else { FI_MSG },
            report,
            ep: self.id,
        }
    }

    /// Source filter of a receive: only with FI_DIRECTED_RECV (without it src_addr is ignored).
    fn src_filter(&self, b: &Bound, src: fi_addr_t) -> Result<Option<PeerId>, i32> {
        if self.caps & FI_DIRECTED_RECV == 0 || src == FI_ADDR_UNSPEC {
            return Ok(None);
        }
        self.peer(b, src, "recv").map(Some)
    }

    /// [`src_filter`](Self::src_filter) under the domain lock ([`peer_locked`](Self::peer_locked)).
    fn src_filter_locked(
        &self,
        st: &mut DomainState,
        b: &Bound,
        src: fi_addr_t,
    ) -> Result<Option<PeerId>, i32> {
        if self.caps & FI_DIRECTED_RECV == 0 || src == FI_ADDR_UNSPEC {
            return Ok(None);
        }
        self.peer_locked(st, b, src, "recv").map(Some)
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn recv(
        &self,
        tagged: bool,
        ptr: *mut u8,
        len: usize,
        src: fi_addr_t,
        tag: u64,
        ignore: u64,
        context: usize,
        flags: Option<u64>,
    ) -> Result<isize, i32> {
        let b = self.bound()?;
        if len > 0 && ptr.is_null() {
            return Err(FI_EINVAL);
        }
        let flags = flags.unwrap_or(self.rx_op_flags);
        // Multi-receive buffers are not offered (never in rx caps).
        if flags & FI_MULTI_RECV != 0 {
            return Err(FI_EBADFLAGS);
        }
        let (tag, ignore) = if tagged { (tag, ignore) } else { (0, 0) };
        // A receive of a run that holds its peer's lane (see domain.rs, `Hold`): no state.
        let hold = (tagged && self.d.state.is_serial()).then(|| HoldKey {
            ep: self.id,
            addr: src,
            av_generation: b.av.generation(),
        });
        if let Some(k) = &hold {
            if self.d.hold_recv(k, tag, ignore, flags, ptr, len, context) {
                return Ok(0);
            }
        }
        let report = self.rx_report(b, flags);
        let mut st = self.d.lock();
        let src_filter = self.src_filter_locked(&mut st, b, src)?;
        let op = st
            .backend
            .recv(self.id, tagged, src_filter, tag, ignore, ptr, len)
            .map_err(|e| e.errno)?;
        st.pending
            .insert(op, self.rx_pending(b, context, tagged, report));
        // The first read after this one takes no state, if the doorbells can answer it: in a
        // ping-pong the answer may be landing right then (work here is off that path).
        if let Some(cq) = b.rx_cq.as_deref() {
            if self.d.state.is_serial() && st.backend.watch_first() {
                self.d.watch_idle(&mut st, cq);
                if let Some(k) = hold {
                    self.d
                        .hold_start(&mut st, op, k, (tag, ignore, flags), src_filter);
                }
            }
        }
        Ok(0)
    }

    fn push_rx(&self, b: &Bound, e: Entry) {
        if let Some(cq) = &b.rx_cq {
            cq.push(e);
        }
    }

    fn found_entry(&self, b: &Bound, context: usize, f: &Found, len: usize) -> Entry {
        Entry {
            context,
            flags: FI_RECV
                | FI_TAGGED
                | if f.data.is_some() {
                    FI_REMOTE_CQ_DATA
                } else {
                    0
                },
            len,
            data: f.data.unwrap_or(0),
            tag: f.tag,
            src: Some((b.av.clone(), f.src)),
            err: None,
        }
    }

    /// fi_trecvmsg with FI_PEEK / FI_CLAIM / FI_DISCARD (fi_tagged(3)):
    /// - PEEK: completes at once, found (len, tag, data of the message; the buffer is untouched)
    ///   or an FI_ENOMSG error entry. Always completes, whatever FI_COMPLETION says.
    /// - PEEK|CLAIM: as PEEK, and a found message is reserved for the context.
    /// - PEEK|DISCARD: a found message is dropped (completion with len 0).
    /// - CLAIM: receives the message claimed by this context; CLAIM|DISCARD drops it.
    unsafe fn trecv_special(&self, m: &fi_msg_tagged, flags: u64) -> Result<isize, i32> {
        let b = self.bound()?;
        let context = m.context as usize;
        if flags & FI_PEEK != 0 {
            let src = self.src_filter(b, m.addr)?;
            let claim = flags & FI_CLAIM != 0;
            let discard = flags & FI_DISCARD != 0;
            if claim && context == 0 {
                return Err(FI_EINVAL);
            }
            let mut st = self.d.lock();
            let found = if discard && !claim {
                st.backend
                    .discard(self.id, src, m.tag, m.ignore)
                    .map_err(|e| e.errno)?
                    .map(|f| (f, None))
            } else {
                st.backend
                    .peek(self.id, src, m.tag, m.ignore, claim)
                    .map_err(|e| e.errno)?
            };
            drop(st);
            let e = match found {
                Some((f, id)) => {
                    if let Some(id) = id {
                        lock(&self.claims).insert(context, id);
                    }
                    let len = if discard && !claim { 0 } else { f.len };
                    self.found_entry(b, context, &f, len)
                }
                None => Entry {
                    context,
                    flags: FI_RECV | FI_TAGGED,
                    len: 0,
                    data: 0,
                    tag: m.tag,
                    src: None,
                    err: Some((FI_ENOMSG, 0, "no matching message".into())),
                },
            };
            self.push_rx(b, e);
            return Ok(0);
        }
        // FI_CLAIM without FI_PEEK: the paired receive of an earlier PEEK|CLAIM.
        let id = lock(&self.claims).remove(&context).ok_or_else(|| {
            warn(
                FI_LOG_EP_DATA,
                "FI_CLAIM receive without a claimed message for this context",
            );
            FI_EINVAL
        })?;
        let report = self.rx_report(b, flags);
        let mut st = self.d.lock();
        if flags & FI_DISCARD != 0 {
            let f = st.backend.discard_claimed(id).map_err(|e| e.errno)?;
            drop(st);
            if report == Report::Always {
                let e = self.found_entry(b, context, &f, 0);
                self.push_rx(b, e);
            }
            return Ok(0);
        }
        let (ptr, len) = one_iov(m.msg_iov, m.iov_count)?;
        let op: OpId = st.backend.recv_claimed(id, ptr, len).map_err(|e| e.errno)?;
        st.pending
            .insert(op, self.rx_pending(b, context, true, report));
        Ok(0)
    }

    fn cancel(&self, context: usize) -> Result<isize, i32> {
        let b = self.bound()?;
        let mut st = self.d.lock();
        let op = st
            .pending
            .find(|p| p.ep == self.id && p.context == context && p.flags & FI_RECV != 0)
            .ok_or(FI_ENOENT)?;
        if !st.backend.cancel(op) {
            return Err(FI_ENOENT);
        }
        let p = st.pending.remove(&op).unwrap();
        drop(st);
        let e = Entry {
            context,
            flags: p.flags,
            len: 0,
            data: 0,
            tag: 0,
            src: None,
            err: Some((FI_ECANCELED, 0, "receive cancelled".into())),
        };
        self.push_rx(b, e);
        Ok(0)
    }
}

unsafe extern "C" fn ep_cancel(f: fid_t, context: *mut c_void) -> isize {
    if f.is_null() {
        return -(FI_EINVAL as isize);
    }
    ret_size(|| ep_of(f as *const fid_ep).cancel(context as usize))
}

unsafe extern "C" fn ep_getopt(
    f: fid_t,
    _level: c_int,
    _name: c_int,
    _val: *mut c_void,
    _len: *mut usize,
) -> c_int {
    if f.is_null() {
        return -FI_EINVAL;
    }
    -FI_ENOPROTOOPT
}

unsafe extern "C" fn ep_setopt(
    f: fid_t,
    _level: c_int,
    _name: c_int,
    _val: *const c_void,
    _len: usize,
) -> c_int {
    if f.is_null() {
        return -FI_EINVAL;
    }
    -FI_ENOPROTOOPT
}

unsafe extern "C" fn enosys_ctx_tx(
    _: *mut fid_ep,
    _: c_int,
    _: *mut fi_tx_attr,
    _: *mut *mut fid_ep,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn enosys_ctx_rx(
    _: *mut fid_ep,
    _: c_int,
    _: *mut fi_rx_attr,
    _: *mut *mut fid_ep,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn enosys_size_left(_: *mut fid_ep) -> isize {
    -(FI_ENOSYS as isize)
}

// ---- connection management: names only ----

unsafe extern "C" fn cm_getname(f: fid_t, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    if f.is_null() || addrlen.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let ep = ep_of(f as *const fid_ep);
        if *addrlen < NAME_LEN || addr.is_null() {
            *addrlen = NAME_LEN;
            return Err(FI_ETOOSMALL);
        }
        let name = ep.d.lock().backend.name(ep.id);
        std::ptr::copy_nonoverlapping(name.as_ptr(), addr as *mut u8, NAME_LEN);
        *addrlen = NAME_LEN;
        Ok(0)
    })
}

unsafe extern "C" fn cm_setname(_: fid_t, _: *mut c_void, _: usize) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn cm_getpeer(_: *mut fid_ep, _: *mut c_void, _: *mut usize) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn cm_connect(
    _: *mut fid_ep,
    _: *const c_void,
    _: *const c_void,
    _: usize,
) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn cm_listen(_: *mut c_void) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn cm_accept(_: *mut fid_ep, _: *const c_void, _: usize) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn cm_reject(_: *mut c_void, _: fid_t, _: *const c_void, _: usize) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn cm_shutdown(_: *mut fid_ep, _: u64) -> c_int {
    -FI_ENOSYS
}
unsafe extern "C" fn cm_join(
    _: *mut fid_ep,
    _: *const c_void,
    _: u64,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}

// ---- fi_ops_msg / fi_ops_tagged: pointer checks, then one call ----

macro_rules! ep_call {
    ($ep:expr, $body:expr) => {{
        if $ep.is_null() {
            return -(FI_EINVAL as isize);
        }
        ret_size(|| $body)
    }};
}

#[allow(clippy::too_many_arguments)]
fn send_args(
    tagged: bool,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    tag: u64,
    data: Option<u64>,
    context: *mut c_void,
    flags: Option<u64>,
) -> SendArgs {
    SendArgs {
        tagged,
        buf: buf as *const u8,
        len,
        dest,
        tag,
        data,
        context: context as usize,
        flags,
    }
}

unsafe extern "C" fn msg_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    ep_call!(
        ep,
        ep_of(ep).recv(false, buf as *mut u8, len, src, 0, 0, ctx as usize, None)
    )
}

unsafe extern "C" fn msg_recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    ep_call!(ep, {
        let (p, l) = one_iov(iov, count)?;
        ep_of(ep).recv(false, p, l, src, 0, 0, ctx as usize, None)
    })
}

unsafe extern "C" fn msg_recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    if msg.is_null() {
        return -(FI_EINVAL as isize);
    }
    ep_call!(ep, {
        let m = &*msg;
        let (p, l) = one_iov(m.msg_iov, m.iov_count)?;
        ep_of(ep).recv(false, p, l, m.addr, 0, 0, m.context as usize, Some(flags))
    })
}

unsafe extern "C" fn msg_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    ep_call!(
        ep,
        ep_of(ep).send(send_args(false, buf, len, dest, 0, None, ctx, None))
    )
}

unsafe extern "C" fn msg_sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    ep_call!(ep, {
        let (p, l) = one_iov(iov, count)?;
        ep_of(ep).send(send_args(
            false,
            p as *const c_void,
            l,
            dest,
            0,
            None,
            ctx,
            None,
        ))
    })
}

unsafe extern "C" fn msg_sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    if msg.is_null() {
        return -(FI_EINVAL as isize);
    }
    ep_call!(ep, {
        let m = &*msg;
        let (p, l) = one_iov(m.msg_iov, m.iov_count)?;
        let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
        ep_of(ep).send(send_args(
            false,
            p as *const c_void,
            l,
            m.addr,
            0,
            data,
            m.context,
            Some(flags),
        ))
    })
}

unsafe extern "C" fn msg_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
) -> isize {
    ep_call!(ep, ep_of(ep).inject(false, buf, len, dest, 0, None))
}

unsafe extern "C" fn msg_senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    ep_call!(
        ep,
        ep_of(ep).send(send_args(false, buf, len, dest, 0, Some(data), ctx, None))
    )
}

unsafe extern "C" fn msg_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
) -> isize {
    ep_call!(ep, ep_of(ep).inject(false, buf, len, dest, 0, Some(data)))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    ep_call!(
        ep,
        ep_of(ep).recv(
            true,
            buf as *mut u8,
            len,
            src,
            tag,
            ignore,
            ctx as usize,
            None
        )
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    ep_call!(ep, {
        let (p, l) = one_iov(iov, count)?;
        ep_of(ep).recv(true, p, l, src, tag, ignore, ctx as usize, None)
    })
}

unsafe extern "C" fn t_recvmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    if msg.is_null() {
        return -(FI_EINVAL as isize);
    }
    ep_call!(ep, {
        let m = &*msg;
        let e = ep_of(ep);
        if flags & (FI_PEEK | FI_CLAIM) != 0 {
            e.trecv_special(m, flags)
        } else {
            let (p, l) = one_iov(m.msg_iov, m.iov_count)?;
            e.recv(
                true,
                p,
                l,
                m.addr,
                m.tag,
                m.ignore,
                m.context as usize,
                Some(flags),
            )
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    ep_call!(
        ep,
        ep_of(ep).send(send_args(true, buf, len, dest, tag, None, ctx, None))
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    ep_call!(ep, {
        let (p, l) = one_iov(iov, count)?;
        ep_of(ep).send(send_args(
            true,
            p as *const c_void,
            l,
            dest,
            tag,
            None,
            ctx,
            None,
        ))
    })
}

unsafe extern "C" fn t_sendmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    if msg.is_null() {
        return -(FI_EINVAL as isize);
    }
    ep_call!(ep, {
        let m = &*msg;
        let (p, l) = one_iov(m.msg_iov, m.iov_count)?;
        let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
        ep_of(ep).send(send_args(
            true,
            p as *const c_void,
            l,
            m.addr,
            m.tag,
            data,
            m.context,
            Some(flags),
        ))
    })
}

unsafe extern "C" fn t_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    ep_call!(ep, ep_of(ep).inject(true, buf, len, dest, tag, None))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    ep_call!(
        ep,
        ep_of(ep).send(send_args(true, buf, len, dest, tag, Some(data), ctx, None))
    )
}

unsafe extern "C" fn t_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    ep_call!(ep, ep_of(ep).inject(true, buf, len, dest, tag, Some(data)))
}

// ---- remote memory access ----

#[allow(clippy::too_many_arguments)]
fn rma_args(
    write: bool,
    buf: *const c_void,
    len: usize,
    peer: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
    flags: Option<u64>,
) -> RmaArgs {
    RmaArgs {
        write,
        buf: buf as *mut u8,
        len,
        peer,
        addr,
        key,
        context: context as usize,
        flags,
        inject: false,
        data: None,
    }
}

/// The one local buffer and one remote range of an fi_msg_rma, which must be as long.
unsafe fn rma_msg(write: bool, msg: *const fi_msg_rma, flags: u64) -> Result<RmaArgs, i32> {
    if msg.is_null() {
        return Err(FI_EINVAL);
    }
    let m = &*msg;
    let (p, l) = one_iov(m.msg_iov, m.iov_count)?;
    if m.rma_iov_count != 1 || m.rma_iov.is_null() || (*m.rma_iov).len != l {
        return Err(FI_EINVAL);
    }
    let r = &*m.rma_iov;
    let mut a = rma_args(
        write,
        p as *const c_void,
        l,
        m.addr,
        r.addr,
        r.key,
        m.context,
        Some(flags),
    );
    if flags & FI_REMOTE_CQ_DATA != 0 {
        a.data = Some(m.data);
    }
    Ok(a)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_read(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    ep_call!(
        ep,
        ep_of(ep).rma(rma_args(false, buf, len, src, addr, key, ctx, None))
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_readv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    ep_call!(ep, {
        let (p, l) = one_iov(iov, count)?;
        ep_of(ep).rma(rma_args(
            false,
            p as *const c_void,
            l,
            src,
            addr,
            key,
            ctx,
            None,
        ))
    })
}

unsafe extern "C" fn rma_readmsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    ep_call!(ep, ep_of(ep).rma(rma_msg(false, msg, flags)?))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    ep_call!(
        ep,
        ep_of(ep).rma(rma_args(true, buf, len, dest, addr, key, ctx, None))
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_writev(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    ep_call!(ep, {
        let (p, l) = one_iov(iov, count)?;
        ep_of(ep).rma(rma_args(
            true,
            p as *const c_void,
            l,
            dest,
            addr,
            key,
            ctx,
            None,
        ))
    })
}

unsafe extern "C" fn rma_writemsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    ep_call!(ep, ep_of(ep).rma(rma_msg(true, msg, flags)?))
}

unsafe extern "C" fn rma_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    ep_call!(ep, {
        let mut a = rma_args(true, buf, len, dest, addr, key, std::ptr::null_mut(), None);
        a.inject = true;
        ep_of(ep).rma(a)
    })
}

/// A write whose `data` reaches the target's receive CQ once the write is placed there.
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_writedata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    ep_call!(ep, {
        let mut a = rma_args(true, buf, len, dest, addr, key, ctx, None);
        a.data = Some(data);
        ep_of(ep).rma(a)
    })
}

unsafe extern "C" fn rma_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    ep_call!(ep, {
        let mut a = rma_args(true, buf, len, dest, addr, key, std::ptr::null_mut(), None);
        a.inject = true;
        a.data = Some(data);
        ep_of(ep).rma(a)
    })
}

// ---- atomics ----

/// The one fi_ioc of an iov form (None: an empty list).
unsafe fn one_ioc(iov: *const fi_ioc, count: usize) -> Result<Option<Ioc>, i32> {
    match count {
        0 => Ok(None),
        1 if !iov.is_null() => Ok(Some(((*iov).addr as *mut u8, (*iov).count))),
        _ => Err(FI_EINVAL),
    }
}

#[allow(clippy::too_many_arguments)]
fn atomic_args(
    family: AtomicFamily,
    buf: Option<Ioc>,
    peer: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: c_int,
    op: c_int,
    context: *mut c_void,
) -> AtomicArgs {
    AtomicArgs {
        family,
        buf,
        compare: None,
        result: None,
        peer,
        addr,
        key,
        datatype,
        op,
        context: context as usize,
        flags: None,
        inject: false,
    }
}

/// The operand, the one remote element (its count one) and the rest of an fi_msg_atomic.
unsafe fn atomic_msg(
    family: AtomicFamily,
    msg: *const fi_msg_atomic,
    flags: u64,
) -> Result<AtomicArgs, i32> {
    if msg.is_null() {
        return Err(FI_EINVAL);
    }
    let m = &*msg;
    let buf = one_ioc(m.msg_iov, m.iov_count)?;
    if m.rma_iov_count != 1 || m.rma_iov.is_null() || (*m.rma_iov).count != ATOMIC_COUNT {
        return Err(FI_EINVAL);
    }
    let r = &*m.rma_iov;
    let mut a = atomic_args(
        family, buf, m.addr, r.addr, r.key, m.datatype, m.op, m.context,
    );
    a.flags = Some(flags);
    Ok(a)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: c_int,
    op: c_int,
    ctx: *mut c_void,
) -> isize {
    ep_call!(ep, {
        let b = Some((buf as *mut u8, count));
        ep_of(ep).atomic(atomic_args(
            AtomicFamily::Write,
            b,
            dest,
            addr,
            key,
            datatype,
            op,
            ctx,
        ))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_writev(
    ep: *mut fid_ep,
    iov: *const fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: c_int,
    op: c_int,
    ctx: *mut c_void,
) -> isize {
    ep_call!(ep, {
        let b = one_ioc(iov, count)?;
        ep_of(ep).atomic(atomic_args(
            AtomicFamily::Write,
            b,
            dest,
            addr,
            key,
            datatype,
            op,
            ctx,
        ))
    })
}

unsafe extern "C" fn atomic_writemsg(
    ep: *mut fid_ep,
    msg: *const fi_msg_atomic,
    flags: u64,
) -> isize {
    ep_call!(
        ep,
        ep_of(ep).atomic(atomic_msg(AtomicFamily::Write, msg, flags)?)
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: c_int,
    op: c_int,
) -> isize {
    ep_call!(ep, {
        let b = Some((buf as *mut u8, count));
        let mut a = atomic_args(
            AtomicFamily::Write,
            b,
            dest,
            addr,
            key,
            datatype,
            op,
            std::ptr::null_mut(),
        );
        a.inject = true;
        ep_of(ep).atomic(a)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_readwrite(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: c_int,
    op: c_int,
    ctx: *mut c_void,
) -> isize {
    ep_call!(ep, {
        let b = Some((buf as *mut u8, count));
        let mut a = atomic_args(AtomicFamily::Fetch, b, dest, addr, key, datatype, op, ctx);
        a.result = Some((result as *mut u8, count));
        ep_of(ep).atomic(a)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_readwritev(
    ep: *mut fid_ep,
    iov: *const fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: c_int,
    op: c_int,
    ctx: *mut c_void,
) -> isize {
    ep_call!(ep, {
        let b = one_ioc(iov, count)?;
        let mut a = atomic_args(AtomicFamily::Fetch, b, dest, addr, key, datatype, op, ctx);
        a.result = one_ioc(resultv, result_count)?;
        ep_of(ep).atomic(a)
    })
}

unsafe extern "C" fn atomic_readwritemsg(
    ep: *mut fid_ep,
    msg: *const fi_msg_atomic,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    ep_call!(ep, {
        let mut a = atomic_msg(AtomicFamily::Fetch, msg, flags)?;
        a.result = one_ioc(resultv, result_count)?;
        ep_of(ep).atomic(a)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_compwrite(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    compare: *const c_void,
    _compare_desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: c_int,
    op: c_int,
    ctx: *mut c_void,
) -> isize {
    ep_call!(ep, {
        let b = Some((buf as *mut u8, count));
        let mut a = atomic_args(AtomicFamily::Compare, b, dest, addr, key, datatype, op, ctx);
        a.compare = Some((compare as *mut u8, count));
        a.result = Some((result as *mut u8, count));
        ep_of(ep).atomic(a)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_compwritev(
    ep: *mut fid_ep,
    iov: *const fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    comparev: *const fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    datatype: c_int,
    op: c_int,
    ctx: *mut c_void,
) -> isize {
    ep_call!(ep, {
        let b = one_ioc(iov, count)?;
        let mut a = atomic_args(AtomicFamily::Compare, b, dest, addr, key, datatype, op, ctx);
        a.compare = one_ioc(comparev, compare_count)?;
        a.result = one_ioc(resultv, result_count)?;
        ep_of(ep).atomic(a)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_compwritemsg(
    ep: *mut fid_ep,
    msg: *const fi_msg_atomic,
    comparev: *const fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    ep_call!(ep, {
        let mut a = atomic_msg(AtomicFamily::Compare, msg, flags)?;
        a.compare = one_ioc(comparev, compare_count)?;
        a.result = one_ioc(resultv, result_count)?;
        ep_of(ep).atomic(a)
    })
}

unsafe fn valid(
    ep: *mut fid_ep,
    family: AtomicFamily,
    datatype: c_int,
    op: c_int,
    count: *mut usize,
) -> c_int {
    if ep.is_null() || count.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        *count = ep_of(ep).atomic_valid(family, datatype, op)?;
        Ok(0)
    })
}

unsafe extern "C" fn atomic_writevalid(
    ep: *mut fid_ep,
    datatype: c_int,
    op: c_int,
    count: *mut usize,
) -> c_int {
    valid(ep, AtomicFamily::Write, datatype, op, count)
}

unsafe extern "C" fn atomic_readwritevalid(
    ep: *mut fid_ep,
    datatype: c_int,
    op: c_int,
    count: *mut usize,
) -> c_int {
    valid(ep, AtomicFamily::Fetch, datatype, op, count)
}

unsafe extern "C" fn atomic_compwritevalid(
    ep: *mut fid_ep,
    datatype: c_int,
    op: c_int,
    count: *mut usize,
) -> c_int {
    valid(ep, AtomicFamily::Compare, datatype, op, count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, BackendConfig, BackendError, Done};
    use crate::hints::Info;
    use crate::mock::MockBackend;
    use std::ptr::{null, null_mut};
    use std::sync::atomic::AtomicUsize;

    /// What the shell asked of the backend's `atomic`.
    #[derive(Debug, Clone, PartialEq)]
    struct Call {
        op: AtomicOp,
        ty: AtomicType,
        operand: u64,
        compare: u64,
        result: bool,
        addr: u64,
        key: u64,
    }

    /// The mock backend, plus atomics that complete at the next collect or progress, writing
    /// `OLD` to the result; key `BAD_KEY` is refused.
    struct Recorder {
        inner: MockBackend,
        calls: Arc<Mutex<Vec<Call>>>,
        done: Vec<Done>,
        next: u64,
    }

    const OLD: u64 = 0x0807_0605_0403_0201;
    const BAD_KEY: u64 = 0xdead;

    impl Backend for Recorder {
        fn open_ep(&mut self) -> Result<u16, BackendError> {
            self.inner.open_ep()
        }
        fn close_ep(&mut self, ep: u16) -> Result<(), BackendError> {
            self.inner.close_ep(ep)
        }
        fn name(&self, ep: u16) -> [u8; NAME_LEN] {
            self.inner.name(ep)
        }
        fn describe(&self, name: &[u8]) -> Result<String, BackendError> {
            self.inner.describe(name)
        }
        fn insert(&mut self, name: &[u8]) -> Result<PeerId, BackendError> {
            self.inner.insert(name)
        }
        fn remove(&mut self, peer: PeerId) -> Result<(), BackendError> {
            self.inner.remove(peer)
        }
        unsafe fn send(&mut self, to: SendTo, buf: SendBuf) -> Result<OpId, BackendError> {
            self.inner.send(to, buf)
        }
        unsafe fn atomic(
            &mut self,
            _ep: u16,
            _peer: PeerId,
            op: AtomicOp,
            ty: AtomicType,
            operand: u64,
            compare: u64,
            result: Option<*mut u8>,
            addr: u64,
            key: u64,
        ) -> Result<OpId, BackendError> {
            if key == BAD_KEY {
                return Err(BackendError::new(FI_EACCES, "no such region"));
            }
            lock(&self.calls).push(Call {
                op,
                ty,
                operand,
                compare,
                result: result.is_some(),
                addr,
                key,
            });
            if let Some(p) = result {
                std::ptr::copy_nonoverlapping(OLD.to_le_bytes().as_ptr(), p, ty.width());
            }
            self.next += 1;
            let id = (1 << 60) | self.next;
            self.done.push(Done {
                op: id,
                is_recv: false,
                len: 0,
                msg_len: 0,
                tag: 0,
                data: None,
                src: None,
                error: None,
            });
            Ok(id)
        }
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
        ) -> Result<OpId, BackendError> {
            self.inner.recv(ep, tagged, src, tag, ignore, ptr, len)
        }
        fn peek(
            &mut self,
            ep: u16,
            src: Option<PeerId>,
            tag: u64,
            ignore: u64,
            claim: bool,
        ) -> Result<Option<(Found, Option<u64>)>, BackendError> {
            self.inner.peek(ep, src, tag, ignore, claim)
        }
        fn discard(
            &mut self,
            ep: u16,
            src: Option<PeerId>,
            tag: u64,
            ignore: u64,
        ) -> Result<Option<Found>, BackendError> {
            self.inner.discard(ep, src, tag, ignore)
        }
        unsafe fn recv_claimed(
            &mut self,
            claim: u64,
            ptr: *mut u8,
            len: usize,
        ) -> Result<OpId, BackendError> {
            self.inner.recv_claimed(claim, ptr, len)
        }
        fn discard_claimed(&mut self, claim: u64) -> Result<Found, BackendError> {
            self.inner.discard_claimed(claim)
        }
        fn cancel(&mut self, op: OpId) -> bool {
            self.inner.cancel(op)
        }
        fn progress(&mut self, out: &mut Vec<Done>) -> Result<(), BackendError> {
            self.inner.progress(out)?;
            self.collect(out)
        }
        // Finished without I/O: even the read right after a delivery, which only collects,
        // sees them.
        fn collect(&mut self, out: &mut Vec<Done>) -> Result<(), BackendError> {
            out.append(&mut self.done);
            Ok(())
        }
        fn wait_fd(&self) -> i32 {
            self.inner.wait_fd()
        }
        fn max_msg_size(&self) -> usize {
            self.inner.max_msg_size()
        }
        fn resolve(&mut self, node: &str, service: &str) -> Result<[u8; NAME_LEN], BackendError> {
            self.inner.resolve(node, service)
        }
    }

    /// A domain over a [`Recorder`], and an endpoint of it bound to one CQ (FI_CQ_FORMAT_MSG)
    /// and an AV holding the endpoint itself (`me`).
    struct Setup {
        dom: *mut DomainObj,
        ep: *mut fid_ep,
        cq: *mut fid_cq,
        av: *mut fid_av,
        me: fi_addr_t,
        calls: Arc<Mutex<Vec<Call>>>,
    }

    unsafe fn setup(caps: u64, bind_flags: u64) -> Setup {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let b = Recorder {
            inner: MockBackend::new(&BackendConfig {
                settings: vec![],
                auth_key: None,
            })
            .unwrap(),
            calls: calls.clone(),
            done: Vec::new(),
            next: 0,
        };
        let dom = Box::into_raw(Box::new(DomainObj {
            fid: fid_domain {
                fid: fid {
                    fclass: FI_CLASS_DOMAIN,
                    context: null_mut(),
                    ops: null_mut(),
                },
                ops: null_mut(),
                mr: null_mut(),
            },
            fabric: null_mut(),
            d: DomainShared::new(Box::new(b), fi_version(1, 17), false),
            children: AtomicUsize::new(0),
            regions: None,
        }));
        let d = dom as *mut fid_domain;
        let h = Info {
            caps,
            ..Default::default()
        };
        let info = crate::info::to_c(&hints::select(fi_version(1, 17), Some(&h)).unwrap()).unwrap();
        let mut ep = null_mut();
        assert_eq!(hx_endpoint(d, info, &mut ep, null_mut()), 0);
        crate::info::free_c(info);
        let mut cq_attr: fi_cq_attr = std::mem::zeroed();
        cq_attr.format = FI_CQ_FORMAT_MSG;
        let mut cq = null_mut();
        assert_eq!(
            crate::cq::hx_cq_open(d, &mut cq_attr, &mut cq, null_mut()),
            0
        );
        let mut av_attr: fi_av_attr = std::mem::zeroed();
        av_attr.type_ = FI_AV_TABLE;
        let mut av = null_mut();
        assert_eq!(
            crate::av::hx_av_open(d, &mut av_attr, &mut av, null_mut()),
            0
        );
        let bind = (*(*ep).fid.ops).bind.unwrap();
        assert_eq!(bind(&mut (*ep).fid, &mut (*cq).fid, bind_flags), 0);
        assert_eq!(bind(&mut (*ep).fid, &mut (*av).fid, 0), 0);
        let control = (*(*ep).fid.ops).control.unwrap();
        assert_eq!(control(&mut (*ep).fid, FI_ENABLE, null_mut()), 0);
        let mut name = [0u8; NAME_LEN];
        let mut len = NAME_LEN;
        let getname = (*(*ep).cm).getname.unwrap();
        assert_eq!(getname(&mut (*ep).fid, name.as_mut_ptr() as _, &mut len), 0);
        let mut me = 0;
        let insert = (*(*av).ops).insert.unwrap();
        assert_eq!(insert(av, name.as_ptr() as _, 1, &mut me, 0, null_mut()), 1);
        Setup {
            dom,
            ep,
            cq,
            av,
            me,
            calls,
        }
    }

    impl Setup {
        fn ops(&self) -> &fi_ops_atomic {
            unsafe { &*(*self.ep).atomic }
        }

        /// The tx CQ's next entry: (context, flags), or the read's error.
        fn read(&self) -> Result<(usize, u64), isize> {
            unsafe {
                let mut e: fi_cq_msg_entry = std::mem::zeroed();
                let read = (*(*self.cq).ops).read.unwrap();
                match read(self.cq, &mut e as *mut _ as *mut c_void, 1) {
                    1 => Ok((e.op_context as usize, e.flags)),
                    n => Err(n),
                }
            }
        }

        fn calls(&self) -> Vec<Call> {
            std::mem::take(&mut *lock(&self.calls))
        }
    }

    impl Drop for Setup {
        fn drop(&mut self) {
            unsafe {
                for f in [
                    &mut (*self.ep).fid as *mut fid,
                    &mut (*self.cq).fid,
                    &mut (*self.av).fid,
                ] {
                    assert_eq!(((*(*f).ops).close.unwrap())(f), 0);
                }
                drop(Box::from_raw(self.dom));
            }
        }
    }

    const ATOMIC_CAPS: u64 = FI_MSG | FI_ATOMIC;
    const EOPNOTSUPP: isize = -(FI_EOPNOTSUPP as isize);
    const EINVAL: isize = -(FI_EINVAL as isize);

    #[test]
    fn each_family_takes_its_ops_on_integers() {
        let s = unsafe { setup(ATOMIC_CAPS, FI_TRANSMIT | FI_RECV) };
        let o = s.ops();
        let families = [
            (o.writevalid.unwrap(), 11, 0),
            (o.readwritevalid.unwrap(), 12, FI_FETCH_ATOMIC),
            (o.compwritevalid.unwrap(), 7, FI_COMPARE_ATOMIC),
        ];
        for (valid, ops, qflags) in families {
            let mut n = 0;
            for dt in 0..=FI_UINT128 + 1 {
                for op in 0..=FI_ATOMIC_OP_LAST {
                    let mut count = 0usize;
                    let r = unsafe { valid(s.ep, dt, op, &mut count) };
                    let mut attr = fi_atomic_attr { count: 0, size: 0 };
                    let q = unsafe {
                        crate::domain::query_atomic(s.dom as _, dt, op, &mut attr, qflags)
                    };
                    assert_eq!(r, q, "datatype {dt} op {op}: valid and query differ");
                    if r == 0 {
                        n += 1;
                        assert!(dt <= FI_UINT64, "datatype {dt}");
                        assert_eq!((count, attr.count), (1, 1));
                        assert_eq!(attr.size, 1 << (dt / 2));
                    } else {
                        assert_eq!(r, -FI_EOPNOTSUPP);
                    }
                }
            }
            // Eight integer types, each with every op of the family.
            assert_eq!(n, 8 * ops, "{qflags:#x}");
        }
        let mut count = 0usize;
        let valid = o.readwritevalid.unwrap();
        assert_eq!(
            unsafe { valid(s.ep, FI_INT64, FI_ATOMIC_READ, &mut count) },
            0
        );
        assert_eq!(
            unsafe { valid(s.ep, FI_INT64, FI_CSWAP, &mut count) },
            -FI_EOPNOTSUPP
        );
        assert_eq!(
            unsafe { valid(s.ep, FI_INT64, FI_SUM, null_mut()) },
            -FI_EINVAL
        );
        let mut attr = fi_atomic_attr { count: 0, size: 0 };
        let mut q = |flags| unsafe {
            crate::domain::query_atomic(s.dom as _, FI_UINT32, FI_CSWAP, &mut attr, flags)
        };
        assert_eq!(q(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC), -FI_EINVAL);
        assert_eq!(q(FI_COMPARE_ATOMIC | FI_TAGGED), -FI_EBADFLAGS);
        assert_eq!(q(FI_COMPARE_ATOMIC), 0);
    }

    #[test]
    fn atomics_reach_the_backend_and_complete() {
        let s = unsafe { setup(ATOMIC_CAPS, FI_TRANSMIT | FI_RECV) };
        let o = s.ops();
        let ctx = 0x1234 as *mut c_void;
        // fi_atomic: the operand as its type's width, little-endian.
        let v = 0x1122_3344u32.to_ne_bytes();
        let r = unsafe {
            (o.write.unwrap())(
                s.ep,
                v.as_ptr() as _,
                1,
                null_mut(),
                s.me,
                0x1000,
                7,
                FI_UINT32,
                FI_SUM,
                ctx,
            )
        };
        assert_eq!(r, 0);
        let call = Call {
            op: AtomicOp::Sum,
            ty: AtomicType::U32,
            operand: 0x1122_3344,
            compare: 0,
            result: false,
            addr: 0x1000,
            key: 7,
        };
        assert_eq!(s.calls(), vec![call.clone()]);
        assert_eq!(s.read(), Ok((0x1234, FI_ATOMIC | FI_WRITE)));
        // fi_fetch_atomic(FI_ATOMIC_READ) with no operand; the old value in the result.
        let mut res = [0u8; 8];
        let r = unsafe {
            (o.readwrite.unwrap())(
                s.ep,
                null(),
                1,
                null_mut(),
                res.as_mut_ptr() as _,
                null_mut(),
                s.me,
                8,
                9,
                FI_INT16,
                FI_ATOMIC_READ,
                ctx,
            )
        };
        assert_eq!(r, 0);
        assert_eq!(s.read(), Ok((0x1234, FI_ATOMIC | FI_READ)));
        assert_eq!(res, [1, 2, 0, 0, 0, 0, 0, 0], "two bytes of the old value");
        assert_eq!(s.calls()[0].op, AtomicOp::Read);
        // fi_compare_atomic: operand and compare value.
        let (b, c) = (5u64.to_ne_bytes(), 6u64.to_ne_bytes());
        let r = unsafe {
            (o.compwrite.unwrap())(
                s.ep,
                b.as_ptr() as _,
                1,
                null_mut(),
                c.as_ptr() as _,
                null_mut(),
                res.as_mut_ptr() as _,
                null_mut(),
                s.me,
                16,
                9,
                FI_INT64,
                FI_CSWAP_GE,
                ctx,
            )
        };
        assert_eq!(r, 0);
        assert_eq!(s.read(), Ok((0x1234, FI_ATOMIC | FI_READ)));
        assert_eq!(u64::from_le_bytes(res), OLD);
        let got = s.calls();
        assert_eq!(
            (got[0].op, got[0].operand, got[0].compare, got[0].result),
            (AtomicOp::CswapGe, 5, 6, true)
        );
        // The msg and v forms.
        let mut ioc = fi_ioc {
            addr: v.as_ptr() as _,
            count: 1,
        };
        let rma = fi_rma_ioc {
            addr: 0x1000,
            count: 1,
            key: 7,
        };
        let msg = fi_msg_atomic {
            msg_iov: &ioc,
            desc: null_mut(),
            iov_count: 1,
            addr: s.me,
            rma_iov: &rma,
            rma_iov_count: 1,
            datatype: FI_UINT32,
            op: FI_SUM,
            context: ctx,
            data: 0,
        };
        assert_eq!(unsafe { (o.writemsg.unwrap())(s.ep, &msg, 0) }, 0);
        assert_eq!(s.calls(), vec![call.clone()]);
        assert_eq!(s.read(), Ok((0x1234, FI_ATOMIC | FI_WRITE)));
        let r = unsafe {
            (o.writev.unwrap())(
                s.ep,
                &ioc,
                null_mut(),
                1,
                s.me,
                0x1000,
                7,
                FI_UINT32,
                FI_SUM,
                ctx,
            )
        };
        assert_eq!(r, 0);
        assert_eq!(s.calls(), vec![call]);
        assert_eq!(s.read(), Ok((0x1234, FI_ATOMIC | FI_WRITE)));
        let mut resv = fi_ioc {
            addr: res.as_mut_ptr() as _,
            count: 1,
        };
        // A read's operand list may be empty.
        let r = unsafe {
            (o.readwritev.unwrap())(
                s.ep,
                null(),
                null_mut(),
                0,
                &mut resv,
                null_mut(),
                1,
                s.me,
                8,
                9,
                FI_UINT8,
                FI_ATOMIC_READ,
                ctx,
            )
        };
        assert_eq!(r, 0);
        assert_eq!(s.read(), Ok((0x1234, FI_ATOMIC | FI_READ)));
        let cmp = fi_ioc {
            addr: c.as_ptr() as _,
            count: 1,
        };
        let mut m = msg;
        m.op = FI_MSWAP;
        assert_eq!(
            unsafe {
                (o.compwritemsg.unwrap())(
                    s.ep,
                    &m,
                    &cmp,
                    null_mut(),
                    1,
                    &mut resv,
                    null_mut(),
                    1,
                    0,
                )
            },
            0
        );
        let r = unsafe {
            (o.readwritemsg.unwrap())(s.ep, &msg, &mut resv, null_mut(), 1, FI_COMPLETION)
        };
        assert_eq!(r, 0);
        assert_eq!(s.read(), Ok((0x1234, FI_ATOMIC | FI_READ)));
        assert_eq!(s.read(), Ok((0x1234, FI_ATOMIC | FI_READ)));
        s.calls();
        // fi_inject_atomic: never reported.
        let r = unsafe {
            (o.inject.unwrap())(s.ep, v.as_ptr() as _, 1, s.me, 0x1000, 7, FI_UINT32, FI_BOR)
        };
        assert_eq!(r, 0);
        assert_eq!(s.calls().len(), 1);
        assert_eq!(s.read(), Err(-(FI_EAGAIN as isize)));
        // What is refused: more or fewer than one element, another family's op, floats,
        // missing buffers, flags as fi_write refuses them, the backend's own refusal.
        let w = |buf: *const u8, count, dt, op, key| unsafe {
            (o.write.unwrap())(s.ep, buf as _, count, null_mut(), s.me, 0, key, dt, op, ctx)
        };
        assert_eq!(w(v.as_ptr(), 2, FI_UINT32, FI_SUM, 7), EINVAL);
        assert_eq!(w(v.as_ptr(), 0, FI_UINT32, FI_SUM, 7), EINVAL);
        assert_eq!(w(null(), 1, FI_UINT32, FI_SUM, 7), EINVAL);
        assert_eq!(w(v.as_ptr(), 1, FI_FLOAT, FI_SUM, 7), EOPNOTSUPP);
        assert_eq!(w(v.as_ptr(), 1, FI_UINT32, FI_ATOMIC_READ, 7), EOPNOTSUPP);
        assert_eq!(w(v.as_ptr(), 1, FI_UINT32, FI_CSWAP, 7), EOPNOTSUPP);
        assert_eq!(
            w(v.as_ptr(), 1, FI_UINT32, FI_SUM, BAD_KEY),
            -(FI_EACCES as isize)
        );
        let f = |op, result: *mut u8| unsafe {
            (o.readwrite.unwrap())(
                s.ep,
                v.as_ptr() as _,
                1,
                null_mut(),
                result as _,
                null_mut(),
                s.me,
                0,
                7,
                FI_UINT32,
                op,
                ctx,
            )
        };
        assert_eq!(f(FI_CSWAP, res.as_mut_ptr()), EOPNOTSUPP);
        assert_eq!(f(FI_SUM, null_mut()), EINVAL);
        let mut cw = |op, compare: *const u8| unsafe {
            (o.compwrite.unwrap())(
                s.ep,
                v.as_ptr() as _,
                1,
                null_mut(),
                compare as _,
                null_mut(),
                res.as_mut_ptr() as _,
                null_mut(),
                s.me,
                0,
                7,
                FI_UINT32,
                op,
                ctx,
            )
        };
        assert_eq!(cw(FI_SUM, c.as_ptr()), EOPNOTSUPP);
        assert_eq!(cw(FI_CSWAP, null()), EINVAL);
        for flags in [FI_REMOTE_CQ_DATA, FI_FENCE] {
            let r = unsafe { (o.writemsg.unwrap())(s.ep, &msg, flags) };
            assert_eq!(r, -(FI_EBADFLAGS as isize));
        }
        let mut bad = msg;
        bad.rma_iov_count = 2;
        assert_eq!(unsafe { (o.writemsg.unwrap())(s.ep, &bad, 0) }, EINVAL);
        let rma2 = fi_rma_ioc { count: 2, ..rma };
        bad.rma_iov_count = 1;
        bad.rma_iov = &rma2;
        assert_eq!(unsafe { (o.writemsg.unwrap())(s.ep, &bad, 0) }, EINVAL);
        ioc.count = 2;
        assert_eq!(
            unsafe {
                (o.writev.unwrap())(
                    s.ep,
                    &ioc,
                    null_mut(),
                    1,
                    s.me,
                    0,
                    7,
                    FI_UINT32,
                    FI_SUM,
                    ctx,
                )
            },
            EINVAL
        );
        ioc.count = 1;
        assert_eq!(
            unsafe {
                (o.writev.unwrap())(
                    s.ep,
                    &ioc,
                    null_mut(),
                    2,
                    s.me,
                    0,
                    7,
                    FI_UINT32,
                    FI_SUM,
                    ctx,
                )
            },
            EINVAL
        );
        assert_eq!(
            unsafe { (o.writemsg.unwrap())(null_mut(), &msg, 0) },
            EINVAL
        );
        assert!(s.calls().is_empty(), "refused calls reached the backend");
        assert_eq!(s.read(), Err(-(FI_EAGAIN as isize)));
    }

    #[test]
    fn selective_completion_and_caps() {
        let s = unsafe { setup(ATOMIC_CAPS, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION) };
        let o = s.ops();
        let v = 1u64.to_ne_bytes();
        let ioc = fi_ioc {
            addr: v.as_ptr() as _,
            count: 1,
        };
        let rma = fi_rma_ioc {
            addr: 0,
            count: 1,
            key: 7,
        };
        let msg = fi_msg_atomic {
            msg_iov: &ioc,
            desc: null_mut(),
            iov_count: 1,
            addr: s.me,
            rma_iov: &rma,
            rma_iov_count: 1,
            datatype: FI_UINT64,
            op: FI_ATOMIC_WRITE,
            context: 0x77 as *mut c_void,
            data: 0,
        };
        assert_eq!(unsafe { (o.writemsg.unwrap())(s.ep, &msg, 0) }, 0);
        assert_eq!(s.read(), Err(-(FI_EAGAIN as isize)));
        assert_eq!(
            unsafe { (o.writemsg.unwrap())(s.ep, &msg, FI_COMPLETION) },
            0
        );
        assert_eq!(s.read(), Ok((0x77, FI_ATOMIC | FI_WRITE)));
        assert_eq!(s.calls().len(), 2);
        drop(s);
        // An endpoint opened without FI_ATOMIC offers none.
        let s = unsafe { setup(FI_MSG | FI_RMA, FI_TRANSMIT | FI_RECV) };
        let o = s.ops();
        let mut count = 0usize;
        let valid = o.writevalid.unwrap();
        assert_eq!(
            unsafe { valid(s.ep, FI_UINT64, FI_SUM, &mut count) },
            -FI_EOPNOTSUPP
        );
        assert_eq!(unsafe { (o.writemsg.unwrap())(s.ep, &msg, 0) }, EOPNOTSUPP);
        assert!(s.calls().is_empty());
    }
}
