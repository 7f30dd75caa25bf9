//! Deterministic message contents, so a receiver can check every byte without being told them.

pub fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    x ^= x << 13;
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b = (x >> (8 * i)) as u8;
    }
}

/// Index of the first byte that differs from `fill(.., seed)`, if any. Generates the expected
/// bytes on the fly (no allocation), 8 at a time, so validation costs about one pass of memory.
pub fn check(buf: &[u8], seed: u64) -> Option<usize> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut chunks = buf.chunks_exact(8);
    for (i, c) in (&mut chunks).enumerate() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if c != x.to_le_bytes() {
            let j = c
                .iter()
                .zip(x.to_le_bytes())
                .position(|(a, b)| *a != b)
                .unwrap();
            return Some(i * 8 + j);
        }
    }
    x ^= x << 13;
    let base = buf.len() - chunks.remainder().len();
    chunks
        .remainder()
        .iter()
        .enumerate()
        .find(|(i, b)| **b != (x >> (8 * i)) as u8)
        .map(|(i, _)| base + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_any_flip() {
        let mut b = vec![0u8; 1001];
        fill(&mut b, 5);
        assert_eq!(check(&b, 5), None);
        assert_eq!(check(&b, 6), Some(0));
        b[1000] ^= 1;
        assert_eq!(check(&b, 5), Some(1000));
        b[1000] ^= 1;
        b[13] ^= 4;
        assert_eq!(check(&b, 5), Some(13));
    }
}
