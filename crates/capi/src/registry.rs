//! Checked handles: what C holds as `hx_context *` and `hx_endpoint *` are not pointers to Rust
//! objects but an index and a generation into a process-wide registry, so a handle that was
//! closed, finalized, never given out, or of the other kind is recognised and refused
//! (`HX_ERR_HANDLE`) instead of being dereferenced.
//!
//! Handle bits (never dereferenced, never 0): `kind` in bits 0..2 (1 context, 2 endpoint), the
//! slot index in bits 2..24, the slot's generation in the bits above (40 bits on 64-bit
//! targets). Freeing a slot bumps its generation, so a stale handle no longer matches even when
//! the slot is reused.
//!
//! Lock order: a context's lock, then the registry's; never the other way round (handles are
//! resolved with the registry lock alone, which is dropped before a context is locked).

use std::sync::{Arc, Mutex, MutexGuard};

use hx_engine::Engine;

use crate::{Fail, HX_ERR_HANDLE};

pub(crate) const KIND_CONTEXT: usize = 1;
pub(crate) const KIND_ENDPOINT: usize = 2;
const KIND_BITS: u32 = 2;
const INDEX_BITS: u32 = 22;
const GEN_SHIFT: u32 = KIND_BITS + INDEX_BITS;
const GEN_MASK: u64 = (1u64 << (usize::BITS - GEN_SHIFT)) - 1;

/// The engine behind a context handle, with its lock.
pub(crate) struct Ctx {
    state: Mutex<CtxState>,
    /// `HX_THREAD_MULTIPLE`: blocking calls give the lock up between progress rounds.
    pub(crate) multiple: bool,
    /// The job's size, for checks that need no lock.
    pub(crate) size: u32,
    pub(crate) fd: i32,
}

pub(crate) struct CtxState {
    /// `None` once finalize has taken it.
    engine: Option<SendEngine>,
    /// Endpoint handles open on this context, with their ids.
    pub(crate) endpoints: Vec<(usize, u16)>,
}

/// The engine holds raw pointers to the caller's buffers (which is why it is not `Send`); the
/// caller promised they stay valid until the requests complete, whichever thread completes them,
/// and every access to the engine goes through the context's mutex.
struct SendEngine(Engine);
// SAFETY: see above; the engine has no thread-affine state (no thread-locals, no Rc).
unsafe impl Send for SendEngine {}

impl CtxState {
    pub(crate) fn engine(&mut self) -> Result<&mut Engine, Fail> {
        self.engine
            .as_mut()
            .map(|e| &mut e.0)
            .ok_or_else(|| stale("context (being finalized)"))
    }

    /// Whether endpoint handle `h` is still open here; its id if so.
    pub(crate) fn endpoint(&self, h: usize) -> Result<u16, Fail> {
        self.endpoints
            .iter()
            .find(|&&(e, _)| e == h)
            .map(|&(_, id)| id)
            .ok_or_else(|| stale("endpoint"))
    }
}

impl Ctx {
    pub(crate) fn new(engine: Engine, multiple: bool) -> Ctx {
        Ctx {
            size: engine.size(),
            fd: engine.fd(),
            state: Mutex::new(CtxState {
                engine: Some(SendEngine(engine)),
                endpoints: Vec::new(),
            }),
            multiple,
        }
    }

    /// The context's lock. A panic that poisoned it was reported as `HX_ERR_PANIC` already; the
    /// state is used as it is (the header says: only finalize then).
    pub(crate) fn lock(&self) -> MutexGuard<'_, CtxState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the engine out (finalize); later calls see the context as dead.
    pub(crate) fn take_engine(state: &mut CtxState) -> Option<Engine> {
        state.engine.take().map(|e| e.0)
    }
}

/// An endpoint handle's target: its context and id.
#[derive(Clone)]
pub(crate) struct Ep {
    pub(crate) ctx: Arc<Ctx>,
}

struct Slot<T> {
    gen: u64,
    val: Option<T>,
}

struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<usize>,
}

impl<T: Clone> Slab<T> {
    const fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    fn insert(&mut self, kind: usize, v: T) -> Result<usize, Fail> {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                if self.slots.len() >= 1 << INDEX_BITS {
                    return Err(Fail::invalid(format!(
                        "too many live handles ({})",
                        self.slots.len()
                    )));
                }
                self.slots.push(Slot { gen: 1, val: None });
                self.slots.len() - 1
            }
        };
        let s = &mut self.slots[i];
        s.val = Some(v);
        Ok(encode(kind, i, s.gen))
    }

    fn slot(&mut self, kind: usize, h: usize) -> Option<&mut Slot<T>> {
        if h & ((1 << KIND_BITS) - 1) != kind {
            return None;
        }
        let i = (h >> KIND_BITS) & ((1 << INDEX_BITS) - 1);
        let gen = (h as u64 >> GEN_SHIFT) & GEN_MASK;
        self.slots
            .get_mut(i)
            .filter(|s| s.gen & GEN_MASK == gen && s.val.is_some())
    }

    fn get(&mut self, kind: usize, h: usize) -> Option<T> {
        self.slot(kind, h).and_then(|s| s.val.clone())
    }

    fn remove(&mut self, kind: usize, h: usize) -> Option<T> {
        let s = self.slot(kind, h)?;
        let v = s.val.take();
        s.gen = s.gen.wrapping_add(1).max(1);
        let i = (h >> KIND_BITS) & ((1 << INDEX_BITS) - 1);
        self.free.push(i);
        v
    }
}

fn encode(kind: usize, index: usize, gen: u64) -> usize {
    kind | index << KIND_BITS | (((gen & GEN_MASK) as usize) << GEN_SHIFT)
}

struct Registry {
    contexts: Slab<Arc<Ctx>>,
    endpoints: Slab<Ep>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    contexts: Slab::new(),
    endpoints: Slab::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn stale(what: &str) -> Fail {
    Fail {
        code: HX_ERR_HANDLE,
        msg: format!("{what} handle is not live (closed, finalized, or never returned by hxcomm)"),
    }
}

pub(crate) fn add_context(c: Arc<Ctx>) -> Result<usize, Fail> {
    registry().contexts.insert(KIND_CONTEXT, c)
}

pub(crate) fn context(h: usize) -> Result<Arc<Ctx>, Fail> {
    registry()
        .contexts
        .get(KIND_CONTEXT, h)
        .ok_or_else(|| stale("context"))
}

pub(crate) fn remove_context(h: usize) {
    registry().contexts.remove(KIND_CONTEXT, h);
}

/// Live contexts whose job has more than one rank (a launched job can be joined once).
pub(crate) fn launched_contexts() -> usize {
    registry()
        .contexts
        .slots
        .iter()
        .filter(|s| s.val.as_ref().is_some_and(|c| c.size > 1))
        .count()
}

pub(crate) fn add_endpoint(e: Ep) -> Result<usize, Fail> {
    registry().endpoints.insert(KIND_ENDPOINT, e)
}

pub(crate) fn endpoint(h: usize) -> Result<Ep, Fail> {
    registry()
        .endpoints
        .get(KIND_ENDPOINT, h)
        .ok_or_else(|| stale("endpoint"))
}

pub(crate) fn remove_endpoint(h: usize) {
    registry().endpoints.remove(KIND_ENDPOINT, h);
}
