//! An in-process backend for tests of the shell: endpoints of all mock backends in one process
//! reach each other through a process-global registry keyed by name, so two domains of one test
//! can talk. Messages are copied at send time (sends complete at once); receives match in arrival
//! order with tag/ignore masks and an optional source.

use crate::backend::*;
use crate::sys::*;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

const MAGIC: &[u8; 8] = b"HXMOCK01";
type Name = [u8; NAME_LEN];

struct Msg {
    src: Name,
    tag: u64,
    data: Option<u64>,
    bytes: Vec<u8>,
}

struct Posted {
    op: OpId,
    src: Option<Name>,
    tag: u64,
    ignore: u64,
    ptr: usize,
    len: usize,
}

#[derive(Default)]
struct Space {
    posted: VecDeque<Posted>,
    unexpected: VecDeque<Msg>,
}

#[derive(Default)]
struct EpState {
    /// [untagged, tagged]: separate matching spaces.
    spaces: [Space; 2],
}

/// Per-backend completion inbox, written by whichever thread delivered the message.
struct Sink {
    done: Mutex<Vec<(Done, Option<Name>)>>,
    efd: i32,
}

impl Sink {
    fn push(&self, d: Done, src: Option<Name>) {
        lock(&self.done).push((d, src));
        let one: u64 = 1;
        // SAFETY: efd is an eventfd owned by this Sink; an 8-byte write is its protocol.
        unsafe { libc::write(self.efd, &one as *const u64 as *const libc::c_void, 8) };
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        // SAFETY: we own the fd.
        unsafe { libc::close(self.efd) };
    }
}

struct MockEp {
    state: Mutex<EpState>,
    sink: Arc<Sink>,
}

#[derive(Default)]
struct Registry {
    eps: HashMap<Name, Arc<MockEp>>,
    listeners: HashMap<String, Name>,
    next_uid: u64,
}

fn registry() -> MutexGuard<'static, Registry> {
    static REG: OnceLock<Mutex<Registry>> = OnceLock::new();
    lock(REG.get_or_init(Default::default))
}

/// A poisoned lock only means another test thread panicked; the data is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn matches(p_src: &Option<Name>, p_tag: u64, p_ignore: u64, m: &Msg) -> bool {
    (p_tag & !p_ignore) == (m.tag & !p_ignore) && p_src.is_none_or(|s| s == m.src)
}

/// Copies `m` into a posted buffer and describes the completion.
unsafe fn fill(op: OpId, ptr: usize, len: usize, m: &Msg) -> Done {
    let n = len.min(m.bytes.len());
    if n > 0 {
        std::ptr::copy_nonoverlapping(m.bytes.as_ptr(), ptr as *mut u8, n);
    }
    let error = (m.bytes.len() > len).then(|| {
        (
            FI_ETRUNC,
            format!("message of {} bytes truncated to {}", m.bytes.len(), len),
        )
    });
    Done {
        op,
        is_recv: true,
        len: n,
        msg_len: m.bytes.len(),
        tag: m.tag,
        data: m.data,
        src: None,
        error,
    }
}

pub struct MockBackend {
    uid: u64,
    sink: Arc<Sink>,
    eps: HashMap<u16, Arc<MockEp>>,
    next_ep: u16,
    peers: Vec<Name>,
    peer_ids: HashMap<Name, PeerId>,
    next_op: OpId,
    next_claim: u64,
    claimed: HashMap<u64, Msg>,
}

impl MockBackend {
    pub fn new(_cfg: &BackendConfig) -> Result<Self, BackendError> {
        // SAFETY: plain syscall.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(BackendError::new(FI_EMFILE_OR_OTHER, "eventfd failed"));
        }
        let uid = {
            let mut r = registry();
            r.next_uid += 1;
            r.next_uid
        };
        Ok(MockBackend {
            uid,
            sink: Arc::new(Sink {
                done: Mutex::new(Vec::new()),
                efd,
            }),
            eps: HashMap::new(),
            next_ep: 0,
            peers: Vec::new(),
            peer_ids: HashMap::new(),
            next_op: 1,
            next_claim: 1,
            claimed: HashMap::new(),
        })
    }

    fn ep(&self, ep: u16) -> Result<&Arc<MockEp>, BackendError> {
        self.eps
            .get(&ep)
            .ok_or_else(|| BackendError::new(FI_EINVAL, format!("no endpoint {ep}")))
    }

    fn peer_name(&self, peer: PeerId) -> Result<Name, BackendError> {
        self.peers
            .get(peer as usize)
            .copied()
            .ok_or_else(|| BackendError::new(FI_EINVAL, format!("unknown peer {peer}")))
    }

    fn peer_of(&mut self, name: Name) -> PeerId {
        if let Some(&id) = self.peer_ids.get(&name) {
            return id;
        }
        let id = self.peers.len() as PeerId;
        self.peers.push(name);
        self.peer_ids.insert(name, id);
        id
    }

    fn op(&mut self) -> OpId {
        self.next_op += 1;
        self.next_op
    }

    fn found(&mut self, m: &Msg) -> Found {
        Found {
            src: self.peer_of(m.src),
            tag: m.tag,
            len: m.bytes.len(),
            data: m.data,
        }
    }

    fn src_name(&self, src: Option<PeerId>) -> Result<Option<Name>, BackendError> {
        src.map(|p| self.peer_name(p)).transpose()
    }

    fn take_unexpected(
        &self,
        ep: u16,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
    ) -> Result<Option<Msg>, BackendError> {
        let src = self.src_name(src)?;
        let mut st = lock(&self.ep(ep)?.state);
        let q = &mut st.spaces[1].unexpected;
        Ok(q.iter()
            .position(|m| matches(&src, tag, ignore, m))
            .and_then(|i| q.remove(i)))
    }
}

/// Mock errors that have no better errno.
const FI_EMFILE_OR_OTHER: i32 = FI_EOTHER;

fn encode(uid: u64, ep: u16) -> Name {
    let mut n = [0u8; NAME_LEN];
    n[..8].copy_from_slice(MAGIC);
    n[8..16].copy_from_slice(&uid.to_le_bytes());
    n[16..18].copy_from_slice(&ep.to_le_bytes());
    n
}

fn decode(name: &[u8]) -> Result<(u64, u16), BackendError> {
    if name.len() != NAME_LEN || &name[..8] != MAGIC || name[18..].iter().any(|&b| b != 0) {
        return Err(BackendError::new(FI_EINVAL, "not a mock endpoint name"));
    }
    let uid = u64::from_le_bytes(name[8..16].try_into().unwrap());
    let ep = u16::from_le_bytes(name[16..18].try_into().unwrap());
    Ok((uid, ep))
}

impl Backend for MockBackend {
    fn open_ep(&mut self) -> Result<u16, BackendError> {
        let id = self.next_ep;
        self.next_ep = self
            .next_ep
            .checked_add(1)
            .ok_or_else(|| BackendError::new(FI_ENOSPC, "too many endpoints"))?;
        let ep = Arc::new(MockEp {
            state: Mutex::default(),
            sink: self.sink.clone(),
        });
        registry().eps.insert(encode(self.uid, id), ep.clone());
        self.eps.insert(id, ep);
        Ok(id)
    }

    fn close_ep(&mut self, ep: u16) -> Result<(), BackendError> {
        self.ep(ep)?;
        let name = encode(self.uid, ep);
        let mut r = registry();
        r.eps.remove(&name);
        r.listeners.retain(|_, n| *n != name);
        drop(r);
        self.eps.remove(&ep);
        Ok(())
    }

    fn name(&self, ep: u16) -> [u8; NAME_LEN] {
        encode(self.uid, ep)
    }

    fn describe(&self, name: &[u8]) -> Result<String, BackendError> {
        let (uid, ep) = decode(name)?;
        Ok(format!("mock:{uid}:{ep}"))
    }

    fn insert(&mut self, name: &[u8]) -> Result<PeerId, BackendError> {
        decode(name)?;
        Ok(self.peer_of(name.try_into().unwrap()))
    }

    fn remove(&mut self, peer: PeerId) -> Result<(), BackendError> {
        // Ids stay stable (a later insert of the same name gives the same id again).
        self.peer_name(peer).map(|_| ())
    }

    unsafe fn send(&mut self, to: SendTo, buf: SendBuf) -> Result<OpId, BackendError> {
        let SendTo {
            ep,
            tagged,
            peer,
            tag,
            data,
        } = to;
        self.ep(ep)?;
        let dest = self.peer_name(peer)?;
        let op = self.op();
        let bytes = buf.as_slice().to_vec();
        let len = bytes.len();
        let msg = Msg {
            src: encode(self.uid, ep),
            tag,
            data,
            bytes,
        };
        let target = registry().eps.get(&dest).cloned();
        let error = match target {
            None => Some((
                FI_EHOSTUNREACH,
                format!("no endpoint {} in this process", self.describe(&dest)?),
            )),
            Some(t) => {
                let mut st = lock(&t.state);
                let space = &mut st.spaces[tagged as usize];
                let pos = space
                    .posted
                    .iter()
                    .position(|p| matches(&p.src, p.tag, p.ignore, &msg));
                match pos.and_then(|i| space.posted.remove(i)) {
                    Some(p) => {
                        drop(st);
                        t.sink.push(fill(p.op, p.ptr, p.len, &msg), Some(msg.src));
                    }
                    None => space.unexpected.push_back(msg),
                }
                None
            }
        };
        let done = Done {
            op,
            is_recv: false,
            len,
            msg_len: len,
            tag,
            data,
            src: None,
            error,
        };
        self.sink.push(done, None);
        Ok(op)
    }

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
        let src = self.src_name(src)?;
        let op = self.op();
        let e = self.ep(ep)?.clone();
        let mut st = lock(&e.state);
        let space = &mut st.spaces[tagged as usize];
        let pos = space
            .unexpected
            .iter()
            .position(|m| matches(&src, tag, ignore, m));
        match pos.and_then(|i| space.unexpected.remove(i)) {
            Some(m) => {
                drop(st);
                self.sink.push(fill(op, ptr as usize, len, &m), Some(m.src));
            }
            None => space.posted.push_back(Posted {
                op,
                src,
                tag,
                ignore,
                ptr: ptr as usize,
                len,
            }),
        }
        Ok(op)
    }

    fn peek(
        &mut self,
        ep: u16,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
        claim: bool,
    ) -> Result<Option<(Found, Option<u64>)>, BackendError> {
        if claim {
            let Some(m) = self.take_unexpected(ep, src, tag, ignore)? else {
                return Ok(None);
            };
            let f = self.found(&m);
            let id = self.next_claim;
            self.next_claim += 1;
            self.claimed.insert(id, m);
            return Ok(Some((f, Some(id))));
        }
        let srcn = self.src_name(src)?;
        let e = self.ep(ep)?.clone();
        let st = lock(&e.state);
        let hit = st.spaces[1]
            .unexpected
            .iter()
            .find(|m| matches(&srcn, tag, ignore, m));
        let hit = hit.map(|m| (m.src, m.tag, m.bytes.len(), m.data));
        drop(st);
        Ok(hit.map(|(s, tag, len, data)| {
            (
                Found {
                    src: self.peer_of(s),
                    tag,
                    len,
                    data,
                },
                None,
            )
        }))
    }

    fn discard(
        &mut self,
        ep: u16,
        src: Option<PeerId>,
        tag: u64,
        ignore: u64,
    ) -> Result<Option<Found>, BackendError> {
        let m = self.take_unexpected(ep, src, tag, ignore)?;
        Ok(m.map(|m| self.found(&m)))
    }

    unsafe fn recv_claimed(
        &mut self,
        claim: u64,
        ptr: *mut u8,
        len: usize,
    ) -> Result<OpId, BackendError> {
        let m = self
            .claimed
            .remove(&claim)
            .ok_or_else(|| BackendError::new(FI_EINVAL, format!("no claimed message {claim}")))?;
        let op = self.op();
        self.sink.push(fill(op, ptr as usize, len, &m), Some(m.src));
        Ok(op)
    }

    fn discard_claimed(&mut self, claim: u64) -> Result<Found, BackendError> {
        let m = self
            .claimed
            .remove(&claim)
            .ok_or_else(|| BackendError::new(FI_EINVAL, format!("no claimed message {claim}")))?;
        Ok(self.found(&m))
    }

    fn cancel(&mut self, op: OpId) -> bool {
        for e in self.eps.values() {
            let mut st = lock(&e.state);
            for space in st.spaces.iter_mut() {
                if let Some(i) = space.posted.iter().position(|p| p.op == op) {
                    space.posted.remove(i);
                    return true;
                }
            }
        }
        false
    }

    fn progress(&mut self, out: &mut Vec<Done>) -> Result<(), BackendError> {
        // Drain the eventfd before taking the inbox: a push after the take writes it again.
        let mut v: u64 = 0;
        // SAFETY: 8-byte read from our eventfd; EAGAIN when empty is fine.
        unsafe { libc::read(self.sink.efd, &mut v as *mut u64 as *mut libc::c_void, 8) };
        let done = std::mem::take(&mut *lock(&self.sink.done));
        for (mut d, src) in done {
            d.src = src.map(|n| self.peer_of(n));
            out.push(d);
        }
        Ok(())
    }

    fn wait_fd(&self) -> i32 {
        self.sink.efd
    }

    fn max_msg_size(&self) -> usize {
        MAX_MSG_SIZE
    }

    fn resolve(&mut self, node: &str, service: &str) -> Result<[u8; NAME_LEN], BackendError> {
        let r = registry();
        r.listeners
            .get(&format!("{node}:{service}"))
            .or_else(|| r.listeners.get(&format!("*:{service}")))
            .copied()
            .ok_or_else(|| {
                BackendError::new(FI_ENODATA, format!("nothing listens at {node}:{service}"))
            })
    }

    fn listen(
        &mut self,
        ep: u16,
        node: Option<&str>,
        service: Option<&str>,
    ) -> Result<(), BackendError> {
        self.ep(ep)?;
        let key = format!("{}:{}", node.unwrap_or("*"), service.unwrap_or(""));
        let mut r = registry();
        if r.listeners.contains_key(&key) {
            return Err(BackendError::new(
                FI_EADDRNOTAVAIL,
                format!("{key} is already in use"),
            ));
        }
        r.listeners.insert(key, encode(self.uid, ep));
        Ok(())
    }
}

impl Drop for MockBackend {
    fn drop(&mut self) {
        let ids: Vec<u16> = self.eps.keys().copied().collect();
        for ep in ids {
            let _ = self.close_ep(ep);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend() -> MockBackend {
        MockBackend::new(&BackendConfig {
            settings: vec![],
            auth_key: None,
        })
        .unwrap()
    }

    fn drain(b: &mut MockBackend) -> Vec<Done> {
        let mut v = Vec::new();
        b.progress(&mut v).unwrap();
        v
    }

    #[test]
    fn two_backends_talk_with_tags_truncation_and_claims() {
        let (mut a, mut b) = (backend(), backend());
        let (ea, eb) = (a.open_ep().unwrap(), b.open_ep().unwrap());
        let pb = a.insert(&b.name(eb)).unwrap();
        let mut buf = [0u8; 4];
        let r = unsafe { b.recv(eb, true, None, 0x10, 0x0f, buf.as_mut_ptr(), 4) }.unwrap();
        let to = |tagged, tag, data| SendTo {
            ep: ea,
            tagged,
            peer: pb,
            tag,
            data,
        };
        unsafe { a.send(to(true, 0x13, Some(7)), SendBuf::Owned(b"hello".to_vec())) }.unwrap();
        let d = drain(&mut b);
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].op, d[0].len, d[0].msg_len, d[0].tag), (r, 4, 5, 0x13));
        assert_eq!(d[0].error.as_ref().unwrap().0, FI_ETRUNC);
        assert_eq!(&buf, b"hell");
        assert_eq!(d[0].src, Some(b.insert(&a.name(ea)).unwrap()));
        // Untagged and tagged spaces are separate; claim then receive.
        unsafe { a.send(to(false, 0, None), SendBuf::Owned(b"u".to_vec())) }.unwrap();
        unsafe { a.send(to(true, 5, None), SendBuf::Owned(b"t".to_vec())) }.unwrap();
        let (f, c) = b.peek(eb, None, 5, 0, true).unwrap().unwrap();
        assert_eq!(f.len, 1);
        assert!(b.peek(eb, None, 5, 0, false).unwrap().is_none());
        let op = unsafe { b.recv_claimed(c.unwrap(), buf.as_mut_ptr(), 4) }.unwrap();
        assert!(drain(&mut b).iter().any(|d| d.op == op && d.len == 1));
        let posted = unsafe { b.recv(eb, true, None, 99, 0, buf.as_mut_ptr(), 4) }.unwrap();
        assert!(b.cancel(posted));
        assert!(!b.cancel(posted));
        let u = unsafe { b.recv(eb, false, None, 0, 0, buf.as_mut_ptr(), 4) }.unwrap();
        assert!(drain(&mut b).iter().any(|d| d.op == u && buf[0] == b'u'));
        assert!(b.insert(&[0u8; 64]).is_err());
    }
}
