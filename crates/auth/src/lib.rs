//! hx-auth: how a peer proves it knows the job secret.
//!
//! Why it is its own crate: the bootstrap service ([`hx-bootstrap`]) and the rail handshakes
//! (TCP and shared memory, in `hx-transport`) authenticate the same way (an HMAC-SHA256 over a
//! fresh random nonce, compared in constant time), and the transport needs nothing else from the
//! bootstrap. Keeping the few primitives here lets both depend on them alone, with no unsafe code
//! (the random bytes come from the `getrandom` crate: the getrandom syscall, falling back to
//! /dev/urandom).
//!
//! [`hx-bootstrap`]: ../hx_bootstrap/index.html

#![forbid(unsafe_code)]

use std::io;

/// A per-job secret: 32 random bytes, shared by the launcher and its ranks.
pub type Secret = [u8; 32];

/// Fills `buf` from the kernel's random source (getrandom, falling back to /dev/urandom).
pub fn fill_random(buf: &mut [u8]) -> io::Result<()> {
    getrandom::fill(buf).map_err(io::Error::from)
}

/// A fresh random job secret.
///
/// # Panics
/// If the kernel has no random source at all (no getrandom and no /dev/urandom): running a job
/// with a predictable secret would be worse.
pub fn new_secret() -> Secret {
    let mut s = [0u8; 32];
    if let Err(e) = fill_random(&mut s) {
        panic!("hx-auth: cannot read random bytes for the job secret: {e}");
    }
    s
}

/// HMAC-SHA256 of the concatenation of `parts` under `key`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    // HMAC accepts keys of any length, so this never fails.
    let mut mac =
        <Hmac<sha2::Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts keys of any length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_known_answer() {
        // RFC 4231 test case 2.
        let mac = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn ct_eq_works() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
        assert!(ct_eq(b"", b""));
    }

    #[test]
    fn random_secrets_differ() {
        let s = new_secret();
        assert_ne!(s, [0u8; 32]);
        assert_ne!(s, new_secret());
        let mut nonce = [0u8; 16];
        fill_random(&mut nonce).unwrap();
        assert_ne!(nonce, [0u8; 16]);
    }
}
