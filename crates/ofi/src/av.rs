//! Address vectors. FI_AV_MAP: fi_addr = the backend's PeerId. FI_AV_TABLE: fi_addr = index in
//! insertion order. Inserts are synchronous. Peers are shared by all AVs of a domain (one
//! backend): the domain counts references and removes a peer from the backend with the last one.

use crate::backend::{PeerId, NAME_LEN};
use crate::domain::{self, DomainObj, DomainShared};
use crate::fabric::{enosys_control, enosys_ops_open, ptr};
use crate::sys::*;
use crate::util::*;
use libc::{c_char, c_int, c_void};
use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

#[derive(Default)]
struct Inner {
    /// TABLE: index -> peer (None once removed).
    table: Vec<Option<PeerId>>,
    /// Entries per peer in this AV (MAP: inserts minus removes; TABLE: live slots).
    refs: HashMap<PeerId, usize>,
    /// TABLE: first live index of a peer (FI_SOURCE translation).
    first: HashMap<PeerId, u64>,
    names: HashMap<PeerId, [u8; NAME_LEN]>,
}

pub struct AvShared {
    pub kind: c_int,
    pub domain: Arc<DomainShared>,
    inner: RwLock<Inner>,
    /// Endpoints bound to this AV.
    pub bound: AtomicUsize,
    /// Changes with every remove, to a value no AV ever had (`AV_GENERATIONS`): what a cached
    /// lookup of this AV is valid for.
    gen: AtomicU64,
}

/// Generations of all AVs: each value is given out once.
static AV_GENERATIONS: AtomicU64 = AtomicU64::new(1);

impl AvShared {
    pub fn new(domain: Arc<DomainShared>, kind: c_int) -> Arc<Self> {
        Arc::new(AvShared {
            kind,
            domain,
            inner: RwLock::default(),
            bound: AtomicUsize::new(0),
            gen: AtomicU64::new(AV_GENERATIONS.fetch_add(1, Ordering::Relaxed)),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The current generation (see `gen`).
    pub fn generation(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }

    /// The peer an fi_addr names, if it is live in this AV.
    pub fn peer(&self, a: fi_addr_t) -> Option<PeerId> {
        let i = self.read();
        if self.kind == FI_AV_TABLE {
            i.table.get(usize::try_from(a).ok()?).copied().flatten()
        } else {
            let p = PeerId::try_from(a).ok()?;
            i.refs.contains_key(&p).then_some(p)
        }
    }

    /// The fi_addr of a peer (FI_SOURCE), FI_ADDR_NOTAVAIL if it is not in this AV.
    pub fn fi_addr_of(&self, p: PeerId) -> fi_addr_t {
        let i = self.read();
        if self.kind == FI_AV_TABLE {
            i.first.get(&p).copied().unwrap_or(FI_ADDR_NOTAVAIL)
        } else if i.refs.contains_key(&p) {
            p as fi_addr_t
        } else {
            FI_ADDR_NOTAVAIL
        }
    }

    /// Inserts one name; its fi_addr or the errno.
    pub fn insert_one(&self, name: &[u8]) -> Result<fi_addr_t, i32> {
        let peer = {
            let mut st = self.domain.lock();
            let p = st.backend.insert(name).map_err(|e| {
                warn(FI_LOG_AV, &format!("fi_av_insert: {}", e.msg));
                e.errno
            })?;
            *st.peer_refs.entry(p).or_default() += 1;
            p
        };
        let mut i = self.write();
        *i.refs.entry(peer).or_default() += 1;
        i.names
            .insert(peer, name.try_into().expect("NAME_LEN bytes"));
        if self.kind == FI_AV_TABLE {
            let idx = i.table.len() as u64;
            i.table.push(Some(peer));
            i.first.entry(peer).or_insert(idx);
            Ok(idx)
        } else {
            Ok(peer as fi_addr_t)
        }
    }

    pub fn remove_one(&self, a: fi_addr_t) -> Result<(), i32> {
        let peer = {
            let mut i = self.write();
            let peer = if self.kind == FI_AV_TABLE {
                let slot = usize::try_from(a)
                    .ok()
                    .and_then(|x| i.table.get_mut(x))
                    .ok_or(FI_EINVAL)?;
                let p = slot.take().ok_or(FI_EINVAL)?;
                if i.first.get(&p) == Some(&a) {
                    let next = i.table.iter().position(|s| *s == Some(p));
                    match next {
                        Some(n) => i.first.insert(p, n as u64),
                        None => i.first.remove(&p),
                    };
                }
                p
            } else {
                PeerId::try_from(a).map_err(|_| FI_EINVAL)?
            };
            // Lookups cached before this remove are stale.
            self.gen.store(
                AV_GENERATIONS.fetch_add(1, Ordering::Relaxed),
                Ordering::Release,
            );
            let r = i.refs.get_mut(&peer).ok_or(FI_EINVAL)?;
            *r -= 1;
            if *r == 0 {
                i.refs.remove(&peer);
                i.names.remove(&peer);
            }
            peer
        };
        let mut st = self.domain.lock();
        let last = match st.peer_refs.get_mut(&peer) {
            Some(r) if *r > 1 => {
                *r -= 1;
                false
            }
            _ => {
                st.peer_refs.remove(&peer);
                true
            }
        };
        if last {
            st.backend.remove(peer).map_err(|e| e.errno)?;
        }
        Ok(())
    }

    pub fn name_of(&self, a: fi_addr_t) -> Option<[u8; NAME_LEN]> {
        let p = self.peer(a)?;
        self.read().names.get(&p).copied()
    }
}

#[repr(C)]
pub struct AvObj {
    pub fid: fid_av,
    pub domain: *mut DomainObj,
    pub a: Arc<AvShared>,
}

static AV_FI_OPS: fi_ops = fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(av_close),
    bind: Some(av_bind),
    control: Some(enosys_control),
    ops_open: Some(enosys_ops_open),
    tostr: None,
    ops_set: None,
};

static AV_OPS: fi_ops_av = fi_ops_av {
    size: std::mem::size_of::<fi_ops_av>(),
    insert: Some(av_insert),
    insertsvc: Some(av_insertsvc),
    insertsym: Some(av_insertsym),
    remove: Some(av_remove),
    lookup: Some(av_lookup),
    straddr: Some(av_straddr),
    av_set: Some(av_set),
};

pub unsafe extern "C" fn hx_av_open(
    d: *mut fid_domain,
    attr: *mut fi_av_attr,
    av: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    if d.is_null() || attr.is_null() || av.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let a = &*attr;
        let kind = match a.type_ {
            FI_AV_UNSPEC | FI_AV_MAP => FI_AV_MAP,
            FI_AV_TABLE => FI_AV_TABLE,
            _ => return Err(FI_EINVAL),
        };
        // Named (shared) AVs, rx context bits and read-only opens are not supported.
        if !a.name.is_null() || a.rx_ctx_bits != 0 || a.flags != 0 {
            return Err(FI_ENOSYS);
        }
        let dom = domain::from_fid(d);
        let obj = Box::new(AvObj {
            fid: fid_av {
                fid: fid {
                    fclass: FI_CLASS_AV,
                    context,
                    ops: ptr(&AV_FI_OPS),
                },
                ops: ptr(&AV_OPS),
            },
            domain: d as *mut DomainObj,
            a: AvShared::new(dom.d.clone(), kind),
        });
        dom.children.fetch_add(1, Ordering::AcqRel);
        *av = &mut Box::leak(obj).fid;
        Ok(0)
    })
}

unsafe fn obj<'a>(av: *mut fid_av) -> &'a AvShared {
    &(*(av as *const AvObj)).a
}

unsafe extern "C" fn av_close(f: *mut fid) -> c_int {
    if f.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let o = f as *mut AvObj;
        if (&*o).a.bound.load(Ordering::Acquire) != 0 {
            return Err(FI_EBUSY);
        }
        let o = Box::from_raw(o);
        // Drop this AV's references to peers.
        let live: Vec<(PeerId, usize)> = o.a.read().refs.iter().map(|(p, n)| (*p, *n)).collect();
        {
            let mut st = o.a.domain.lock();
            for (p, n) in live {
                let r = st.peer_refs.entry(p).or_default();
                *r = r.saturating_sub(n);
                if *r == 0 {
                    st.peer_refs.remove(&p);
                    let _ = st.backend.remove(p);
                }
            }
        }
        (&*o.domain).children.fetch_sub(1, Ordering::AcqRel);
        Ok(0)
    })
}

/// Inserts `count` names of NAME_LEN bytes. Returns how many succeeded; a failed entry gets
/// FI_ADDR_NOTAVAIL, and with FI_SYNC_ERR its errno in the caller's int array (`context`).
unsafe extern "C" fn av_insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if av.is_null() || (addr.is_null() && count > 0) {
        return -FI_EINVAL;
    }
    ret_int(|| {
        if flags & !(FI_SYNC_ERR | FI_MORE) != 0 {
            return Err(FI_EBADFLAGS);
        }
        if flags & FI_SYNC_ERR != 0 && context.is_null() {
            return Err(FI_EINVAL);
        }
        let a = obj(av);
        let names = std::slice::from_raw_parts(addr as *const u8, count * NAME_LEN);
        let mut ok = 0;
        for (k, name) in names.chunks_exact(NAME_LEN).enumerate() {
            let r = a.insert_one(name);
            if !fi_addr.is_null() {
                *fi_addr.add(k) = *r.as_ref().unwrap_or(&FI_ADDR_NOTAVAIL);
            }
            if flags & FI_SYNC_ERR != 0 {
                *(context as *mut c_int).add(k) = r.as_ref().map_or_else(|e| -e, |_| 0);
            }
            ok += r.is_ok() as i32;
        }
        Ok(ok)
    })
}

unsafe extern "C" fn av_insertsvc(
    _: *mut fid_av,
    _: *const c_char,
    _: *const c_char,
    _: *mut fi_addr_t,
    _: u64,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn av_insertsym(
    _: *mut fid_av,
    _: *const c_char,
    _: usize,
    _: *const c_char,
    _: usize,
    _: *mut fi_addr_t,
    _: u64,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}

unsafe extern "C" fn av_remove(
    av: *mut fid_av,
    fi_addr: *mut fi_addr_t,
    count: usize,
    flags: u64,
) -> c_int {
    if av.is_null() || (fi_addr.is_null() && count > 0) {
        return -FI_EINVAL;
    }
    ret_int(|| {
        if flags != 0 {
            return Err(FI_EBADFLAGS);
        }
        let a = obj(av);
        let mut first_err = Ok(0);
        for k in 0..count {
            if let Err(e) = a.remove_one(*fi_addr.add(k)) {
                if first_err.is_ok() {
                    first_err = Err(e);
                }
            }
        }
        first_err
    })
}

unsafe extern "C" fn av_lookup(
    av: *mut fid_av,
    fi_addr: fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    if av.is_null() || addrlen.is_null() {
        return -FI_EINVAL;
    }
    ret_int(|| {
        let name = obj(av).name_of(fi_addr).ok_or(FI_EINVAL)?;
        let n = (*addrlen).min(NAME_LEN);
        if n > 0 && !addr.is_null() {
            std::ptr::copy_nonoverlapping(name.as_ptr(), addr as *mut u8, n);
        }
        // The full length even when the buffer was too small (the caller sees it was cut).
        *addrlen = NAME_LEN;
        Ok(0)
    })
}

/// Printable form from the backend; NULL if `addr` is not a valid name.
unsafe extern "C" fn av_straddr(
    av: *mut fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    if av.is_null() || addr.is_null() || len.is_null() {
        return std::ptr::null();
    }
    guard(std::ptr::null(), || {
        let name = std::slice::from_raw_parts(addr as *const u8, NAME_LEN);
        let s = match obj(av).domain.lock().backend.describe(name) {
            Ok(s) => s.replace('\0', " "),
            Err(_) => return std::ptr::null(),
        };
        let n = (*len).min(s.len() + 1);
        if n > 0 && !buf.is_null() {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n - 1);
            *buf.add(n - 1) = 0;
        }
        *len = s.len() + 1;
        buf as *const c_char
    })
}

unsafe extern "C" fn av_set(
    _: *mut fid_av,
    _: *mut c_void,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    -FI_ENOSYS
}

/// Inserts are synchronous, so an event queue bound for asynchronous ones gets nothing.
unsafe extern "C" fn av_bind(_f: *mut fid, b: *mut fid, _flags: u64) -> libc::c_int {
    if !b.is_null() && (*b).fclass == FI_CLASS_EQ {
        0
    } else {
        -FI_ENOSYS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, BackendConfig};
    use crate::mock::MockBackend;

    fn domain_with_names(n: usize) -> (Arc<DomainShared>, Vec<[u8; NAME_LEN]>) {
        let mut b = MockBackend::new(&BackendConfig {
            settings: vec![],
            auth_key: None,
        })
        .unwrap();
        let names = (0..n)
            .map(|_| {
                let e = b.open_ep().unwrap();
                b.name(e)
            })
            .collect();
        (
            DomainShared::new(Box::new(b), fi_version(1, 17), false),
            names,
        )
    }

    #[test]
    fn map_semantics() {
        let (d, names) = domain_with_names(2);
        let av = AvShared::new(d.clone(), FI_AV_MAP);
        let a0 = av.insert_one(&names[0]).unwrap();
        let a1 = av.insert_one(&names[1]).unwrap();
        assert_ne!(a0, a1);
        assert_eq!(
            av.insert_one(&names[0]).unwrap(),
            a0,
            "same name, same fi_addr"
        );
        assert_eq!(av.fi_addr_of(av.peer(a1).unwrap()), a1);
        assert_eq!(av.name_of(a1), Some(names[1]));
        av.remove_one(a0).unwrap();
        assert!(av.peer(a0).is_some(), "inserted twice, removed once");
        av.remove_one(a0).unwrap();
        assert!(av.peer(a0).is_none());
        assert_eq!(av.remove_one(a0), Err(FI_EINVAL));
        assert_eq!(av.peer(12345), None);
        assert!(av.insert_one(&[9u8; NAME_LEN]).is_err());
        assert!(d.state.lock().peer_refs.contains_key(&(a1 as PeerId)));
    }

    #[test]
    fn table_semantics() {
        let (d, names) = domain_with_names(2);
        let av = AvShared::new(d, FI_AV_TABLE);
        assert_eq!(av.insert_one(&names[0]), Ok(0));
        assert_eq!(av.insert_one(&names[1]), Ok(1));
        assert_eq!(av.insert_one(&names[0]), Ok(2), "a new index per insert");
        let p0 = av.peer(0).unwrap();
        assert_eq!(av.peer(2), Some(p0));
        assert_eq!(av.fi_addr_of(p0), 0);
        av.remove_one(0).unwrap();
        assert_eq!(av.peer(0), None);
        assert_eq!(
            av.fi_addr_of(p0),
            2,
            "source translation moves to the live index"
        );
        assert_eq!(av.remove_one(0), Err(FI_EINVAL));
        assert_eq!(av.insert_one(&names[1]), Ok(3), "indices are never reused");
        assert_eq!(av.peer(99), None);
    }
}
