//! A slab with generation-checked handles: request and unexpected-message tables reuse their slots,
//! so the steady state allocates nothing, and a stale handle is refused instead of aliasing.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle {
    pub(crate) idx: u32,
    pub(crate) gen: u32,
}

/// Largest generation a slot reaches before it starts again at 1.
const MAX_GEN: u32 = 0x7fff_ffff;

impl Handle {
    /// Packs the handle into one integer (for the C ABI).
    pub fn to_u64(self) -> u64 {
        ((self.gen as u64) << 32) | self.idx as u64
    }

    pub fn from_u64(v: u64) -> Self {
        Handle {
            idx: v as u32,
            gen: (v >> 32) as u32,
        }
    }
}

struct Slot<T> {
    gen: u32,
    val: Option<T>,
}

pub(crate) struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Slab<T> {
    pub fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    // Always: a request built in the caller then moved through a call was a memcpy call
    // of its ~190 bytes on every message's path.
    #[inline(always)]
    pub fn insert(&mut self, val: T) -> Handle {
        self.len += 1;
        if let Some(idx) = self.free.pop() {
            let s = &mut self.slots[idx as usize];
            // Generations stay below 2^31, so a packed handle never has bit 63 set: the
            // libfabric provider numbers its own operations there.
            s.gen = if s.gen >= MAX_GEN { 1 } else { s.gen + 1 };
            s.val = Some(val);
            Handle { idx, gen: s.gen }
        } else {
            let idx = self.slots.len() as u32;
            // Bit 31 of an index marks another table's handles (core::INLINE_BIT).
            debug_assert!(idx < 1 << 31, "slab full");
            self.slots.push(Slot {
                gen: 1,
                val: Some(val),
            });
            Handle { idx, gen: 1 }
        }
    }

    #[inline]
    pub fn get(&self, h: Handle) -> Option<&T> {
        match self.slots.get(h.idx as usize) {
            Some(s) if s.gen == h.gen => s.val.as_ref(),
            _ => None,
        }
    }

    #[inline]
    pub fn get_mut(&mut self, h: Handle) -> Option<&mut T> {
        match self.slots.get_mut(h.idx as usize) {
            Some(s) if s.gen == h.gen => s.val.as_mut(),
            _ => None,
        }
    }

    #[inline]
    pub fn remove(&mut self, h: Handle) -> Option<T> {
        match self.slots.get_mut(h.idx as usize) {
            Some(s) if s.gen == h.gen && s.val.is_some() => {
                self.free.push(h.idx);
                self.len -= 1;
                s.val.take()
            }
            _ => None,
        }
    }

    /// Removes the value if `keep` says not to keep it: one lookup where `get` then `remove`
    /// made two.
    #[inline]
    pub fn remove_unless(&mut self, h: Handle, keep: impl FnOnce(&T) -> bool) -> Option<T> {
        match self.slots.get_mut(h.idx as usize) {
            Some(s) if s.gen == h.gen => {
                if keep(s.val.as_ref()?) {
                    return None;
                }
                self.free.push(h.idx);
                self.len -= 1;
                s.val.take()
            }
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn iter(&self) -> impl Iterator<Item = (Handle, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            s.val.as_ref().map(|v| {
                (
                    Handle {
                        idx: i as u32,
                        gen: s.gen,
                    },
                    v,
                )
            })
        })
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (Handle, &mut T)> {
        self.slots.iter_mut().enumerate().filter_map(|(i, s)| {
            let gen = s.gen;
            s.val.as_mut().map(|v| (Handle { idx: i as u32, gen }, v))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_handles_are_refused() {
        let mut s = Slab::new();
        let a = s.insert(1);
        assert_eq!(s.remove(a), Some(1));
        let b = s.insert(2);
        assert_eq!(a.idx, b.idx);
        assert_eq!(s.get(a), None);
        assert_eq!(s.get(b), Some(&2));
        assert_eq!(s.remove(a), None);
        assert_eq!(s.len(), 1);
        assert_eq!(Handle::from_u64(b.to_u64()), b);
    }

    #[test]
    fn generations_wrap_below_bit_31() {
        let mut s = Slab::new();
        let a = s.insert(1);
        s.remove(a);
        s.slots[a.idx as usize].gen = MAX_GEN - 1;
        let b = s.insert(2);
        assert_eq!(b.gen, MAX_GEN);
        s.remove(b);
        let c = s.insert(3);
        assert_eq!(c.gen, 1);
        assert_eq!(c.to_u64() >> 63, 0);
        assert_eq!(s.get(b), None);
    }
}
