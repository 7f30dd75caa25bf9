//! Atomic operations on a peer's registered memory (libfabric's FI_ATOMIC): what they compute.
//! One element of an integer type per operation; the values travel as little-endian u64s
//! holding the type's width.

/// What an atomic does with the element at the target (`old`), the initiator's operand
/// (`buf`) and, for the compare forms, its `compare` value (a mask for `Mswap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    Min,
    Max,
    Sum,
    Prod,
    Lor,
    Land,
    Bor,
    Band,
    Lxor,
    Bxor,
    /// Fetches `old`, changes nothing.
    Read,
    Write,
    /// Writes `buf` if `compare == old`.
    Cswap,
    /// Writes `buf` if `compare != old`.
    CswapNe,
    /// Writes `buf` if `compare <= old`.
    CswapLe,
    /// Writes `buf` if `compare < old`.
    CswapLt,
    /// Writes `buf` if `compare >= old`.
    CswapGe,
    /// Writes `buf` if `compare > old`.
    CswapGt,
    /// `(buf & compare) | (old & !compare)`.
    Mswap,
}

/// The integer types atomics work on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicType {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
}

impl AtomicOp {
    pub const ALL: [AtomicOp; 19] = [
        AtomicOp::Min,
        AtomicOp::Max,
        AtomicOp::Sum,
        AtomicOp::Prod,
        AtomicOp::Lor,
        AtomicOp::Land,
        AtomicOp::Bor,
        AtomicOp::Band,
        AtomicOp::Lxor,
        AtomicOp::Bxor,
        AtomicOp::Read,
        AtomicOp::Write,
        AtomicOp::Cswap,
        AtomicOp::CswapNe,
        AtomicOp::CswapLe,
        AtomicOp::CswapLt,
        AtomicOp::CswapGe,
        AtomicOp::CswapGt,
        AtomicOp::Mswap,
    ];

    /// Its code on the wire.
    pub fn code(self) -> u16 {
        AtomicOp::ALL.iter().position(|&o| o == self).unwrap() as u16
    }

    pub fn from_code(c: u16) -> Option<AtomicOp> {
        AtomicOp::ALL.get(c as usize).copied()
    }

    /// Takes a compare value (the compare-and-swap family and the masked swap).
    pub fn compares(self) -> bool {
        matches!(
            self,
            AtomicOp::Cswap
                | AtomicOp::CswapNe
                | AtomicOp::CswapLe
                | AtomicOp::CswapLt
                | AtomicOp::CswapGe
                | AtomicOp::CswapGt
                | AtomicOp::Mswap
        )
    }

    /// Changes the target's memory (all but `Read`): needs write access to the region.
    pub fn writes(self) -> bool {
        self != AtomicOp::Read
    }
}

impl AtomicType {
    pub const ALL: [AtomicType; 8] = [
        AtomicType::I8,
        AtomicType::U8,
        AtomicType::I16,
        AtomicType::U16,
        AtomicType::I32,
        AtomicType::U32,
        AtomicType::I64,
        AtomicType::U64,
    ];

    /// Bytes of one element.
    pub fn width(self) -> usize {
        match self {
            AtomicType::I8 | AtomicType::U8 => 1,
            AtomicType::I16 | AtomicType::U16 => 2,
            AtomicType::I32 | AtomicType::U32 => 4,
            AtomicType::I64 | AtomicType::U64 => 8,
        }
    }

    fn signed(self) -> bool {
        matches!(
            self,
            AtomicType::I8 | AtomicType::I16 | AtomicType::I32 | AtomicType::I64
        )
    }

    pub fn code(self) -> u16 {
        AtomicType::ALL.iter().position(|&t| t == self).unwrap() as u16
    }

    pub fn from_code(c: u16) -> Option<AtomicType> {
        AtomicType::ALL.get(c as usize).copied()
    }

    /// The value of the low `width` bytes of `v`, sign-extended for the signed types.
    fn value(self, v: u64) -> i128 {
        let bits = 8 * self.width() as u32;
        let low = if bits == 64 {
            v
        } else {
            v & ((1u64 << bits) - 1)
        };
        if self.signed() && bits < 128 && low >> (bits - 1) & 1 == 1 {
            low as i128 - (1i128 << bits)
        } else {
            low as i128
        }
    }

    /// `v` cut to the type's width (two's complement).
    fn store(self, v: i128) -> u64 {
        let bits = 8 * self.width() as u32;
        let v = v as u64;
        if bits == 64 {
            v
        } else {
            v & ((1u64 << bits) - 1)
        }
    }
}

/// The element's new value when `op` meets `old` with `buf` and `compare` (all of type `ty`;
/// only their low `ty.width()` bytes count). Arithmetic wraps, as C's unsigned arithmetic
/// and libfabric's providers do.
pub fn apply(op: AtomicOp, ty: AtomicType, old: u64, buf: u64, compare: u64) -> u64 {
    let (o, b, c) = (ty.value(old), ty.value(buf), ty.value(compare));
    let t = |x: bool| x as i128;
    let new = match op {
        AtomicOp::Min => o.min(b),
        AtomicOp::Max => o.max(b),
        AtomicOp::Sum => o.wrapping_add(b),
        AtomicOp::Prod => return ty.store(o.wrapping_mul(b)),
        AtomicOp::Lor => t(o != 0 || b != 0),
        AtomicOp::Land => t(o != 0 && b != 0),
        AtomicOp::Bor => o | b,
        AtomicOp::Band => o & b,
        AtomicOp::Lxor => t((o != 0) != (b != 0)),
        AtomicOp::Bxor => o ^ b,
        AtomicOp::Read => o,
        AtomicOp::Write => b,
        AtomicOp::Cswap if c == o => b,
        AtomicOp::CswapNe if c != o => b,
        AtomicOp::CswapLe if c <= o => b,
        AtomicOp::CswapLt if c < o => b,
        AtomicOp::CswapGe if c >= o => b,
        AtomicOp::CswapGt if c > o => b,
        AtomicOp::Cswap
        | AtomicOp::CswapNe
        | AtomicOp::CswapLe
        | AtomicOp::CswapLt
        | AtomicOp::CswapGe
        | AtomicOp::CswapGt => o,
        AtomicOp::Mswap => return ty.store((b & c) | (o & !c)),
    };
    ty.store(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use AtomicOp::*;
    use AtomicType::*;

    #[test]
    fn codes_round_trip() {
        for op in AtomicOp::ALL {
            assert_eq!(AtomicOp::from_code(op.code()), Some(op));
        }
        for ty in AtomicType::ALL {
            assert_eq!(AtomicType::from_code(ty.code()), Some(ty));
        }
        assert_eq!(AtomicOp::from_code(99), None);
        assert_eq!(AtomicType::from_code(8), None);
    }

    #[test]
    fn what_each_op_computes() {
        assert_eq!(apply(Sum, U64, u64::MAX, 2, 0), 1, "wraps");
        assert_eq!(apply(Sum, U32, 0xffff_ffff, 1, 0), 0, "at the type's width");
        assert_eq!(
            apply(Min, I32, (-5i32) as u32 as u64, 3, 0),
            (-5i32) as u32 as u64
        );
        assert_eq!(apply(Min, U32, (-5i32) as u32 as u64, 3, 0), 3);
        assert_eq!(apply(Max, I8, 0x80, 0x7f, 0), 0x7f);
        assert_eq!(apply(Prod, U16, 300, 300, 0), (90_000u32 & 0xffff) as u64);
        assert_eq!(apply(Lor, U8, 0, 0, 0), 0);
        assert_eq!(apply(Land, U8, 3, 4, 0), 1);
        assert_eq!(apply(Lxor, U8, 3, 4, 0), 0);
        assert_eq!(apply(Bor, U8, 3, 4, 0), 7);
        assert_eq!(apply(Band, U8, 3, 6, 0), 2);
        assert_eq!(apply(Bxor, U8, 3, 6, 0), 5);
        assert_eq!(apply(Read, U64, 42, 7, 0), 42);
        assert_eq!(apply(Write, U64, 42, 7, 0), 7);
        assert_eq!(apply(Cswap, U64, 42, 7, 42), 7);
        assert_eq!(apply(Cswap, U64, 42, 7, 41), 42);
        assert_eq!(apply(CswapNe, U64, 42, 7, 41), 7);
        assert_eq!(apply(CswapLe, U64, 42, 7, 42), 7);
        assert_eq!(apply(CswapLt, U64, 42, 7, 42), 42);
        assert_eq!(
            apply(CswapGe, I64, (-1i64) as u64, 7, 0),
            7,
            "signed: 0 >= -1"
        );
        assert_eq!(apply(CswapGe, U64, u64::MAX, 7, 0), u64::MAX);
        assert_eq!(apply(CswapGt, U64, 5, 7, 6), 7);
        assert_eq!(apply(Mswap, U8, 0b1010, 0b0101, 0b0011), 0b1001);
        // Bytes above the width are ignored in and never written out.
        assert_eq!(apply(Write, U8, 0, 0x1ff, 0), 0xff);
    }
}
