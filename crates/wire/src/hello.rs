//! Rail handshake. The accepting side sends a [`Challenge`] (a random nonce); the connecting side
//! answers with a [`Hello`] that names itself and proves it knows the job secret with a MAC over
//! the nonce, so the secret never crosses the wire. Both are fixed-size so a stranger's bytes are
//! rejected after at most `HELLO_LEN` bytes.
//!
//! ```text
//! Challenge: magic "HXC2" | nonce [16]                                        (20 bytes)
//! Hello:     magic "HXH3" | rail u16 | flags u16 | to_instance u64 | address [64] | mac [32]
//!                                                                             (112 bytes)
//! Verdict:   "HXOK" (the connection is a rail from now on) or "HXNO" (the acceptor keeps the
//!            connection it initiated itself to the same peer and rail; both ends then use that one)
//! ```
//!
//! The last byte of both magics names the frame protocol ([`crate::VERSION`]) the sender speaks
//! (the challenge's is the version, the hello's one more: "HXH2" was already taken by version 1),
//! so a peer built from another release is told apart at the handshake, by name, before any
//! frame could be misread.

use crate::{u16_at, u64_at, Address, WireError, VERSION};

pub const CHALLENGE_MAGIC: [u8; 4] = [b'H', b'X', b'C', b'0' + VERSION];
pub const HELLO_MAGIC: [u8; 4] = [b'H', b'X', b'H', b'1' + VERSION];

/// The frame protocol version a handshake magic names, if it is one of ours at all (`first` is
/// `b'0'` for a challenge, `b'1'` for a hello). Another version parses as
/// [`WireError::UnsupportedVersion`], anything else as [`WireError::BadMagic`].
fn check_magic(b: &[u8], ours: &[u8; 4], first: u8) -> Result<(), WireError> {
    if b.len() < 4 {
        return Err(WireError::Truncated {
            need: 4,
            have: b.len(),
        });
    }
    if b[..4] == ours[..] {
        return Ok(());
    }
    if b[..3] == ours[..3] && b[3] > first && b[3] <= b'9' {
        return Err(WireError::UnsupportedVersion {
            found: b[3] - first,
        });
    }
    Err(WireError::BadMagic {
        found: [b[0], b[1]],
    })
}

/// Whether the first bytes of an answer (at least 4) are a hello of another protocol version:
/// that version, so the acceptor can say so instead of calling the peer a stranger.
pub fn hello_version(b: &[u8]) -> Option<u8> {
    match check_magic(b, &HELLO_MAGIC, b'1') {
        Err(WireError::UnsupportedVersion { found }) => Some(found),
        _ => None,
    }
}
pub const CHALLENGE_LEN: usize = 20;
pub const HELLO_LEN: usize = 112;
pub const VERDICT_LEN: usize = 4;
pub const VERDICT_ACCEPT: [u8; 4] = *b"HXOK";
pub const VERDICT_REFUSE: [u8; 4] = *b"HXNO";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Challenge {
    pub nonce: [u8; 16],
}

impl Challenge {
    pub fn to_bytes(&self) -> [u8; CHALLENGE_LEN] {
        let mut b = [0u8; CHALLENGE_LEN];
        b[..4].copy_from_slice(&CHALLENGE_MAGIC);
        b[4..].copy_from_slice(&self.nonce);
        b
    }

    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        if b.len() < CHALLENGE_LEN {
            return Err(WireError::Truncated {
                need: CHALLENGE_LEN,
                have: b.len(),
            });
        }
        check_magic(b, &CHALLENGE_MAGIC, b'0')?;
        let mut nonce = [0u8; 16];
        nonce.copy_from_slice(&b[4..CHALLENGE_LEN]);
        Ok(Challenge { nonce })
    }
}

/// The connector's answer: who it is (its address), which rail this connection is (in the order
/// both ends derive from their addresses), which process it wants (the acceptor's instance, so a
/// connection meant for a predecessor at the same port is refused), and a MAC that proves it
/// knows the job secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub rail: u16,
    pub flags: u16,
    pub to_instance: u64,
    pub from: Address,
    pub mac: [u8; 32],
}

impl Hello {
    pub fn to_bytes(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..4].copy_from_slice(&HELLO_MAGIC);
        b[4..6].copy_from_slice(&self.rail.to_le_bytes());
        b[6..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..16].copy_from_slice(&self.to_instance.to_le_bytes());
        b[16..80].copy_from_slice(&self.from.to_bytes());
        b[80..].copy_from_slice(&self.mac);
        b
    }

    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        if b.len() < HELLO_LEN {
            return Err(WireError::Truncated {
                need: HELLO_LEN,
                have: b.len(),
            });
        }
        check_magic(b, &HELLO_MAGIC, b'1')?;
        let mut mac = [0u8; 32];
        mac.copy_from_slice(&b[80..HELLO_LEN]);
        Ok(Hello {
            rail: u16_at(b, 4),
            flags: u16_at(b, 6),
            to_instance: u64_at(b, 8),
            from: Address::parse(&b[16..80])?,
            mac,
        })
    }

    /// The bytes the MAC covers besides the secret: domain, nonce, everything else in the hello.
    pub fn mac_input(&self, nonce: &[u8; 16]) -> [u8; 106] {
        let mut m = [0u8; 106];
        m[..16].copy_from_slice(b"hxcomm-rail-v2\0\0");
        m[16..32].copy_from_slice(nonce);
        m[32..34].copy_from_slice(&self.rail.to_le_bytes());
        m[34..42].copy_from_slice(&self.to_instance.to_le_bytes());
        m[42..].copy_from_slice(&self.from.to_bytes());
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address() -> Address {
        Address {
            flags: 0,
            ep: 0,
            instance: 9,
            host: 1,
            pid: 2,
            port: 3,
            rails: vec![],
        }
    }

    #[test]
    fn hello_fixed_bytes() {
        let from = address();
        let h = Hello {
            rail: 1,
            flags: 0,
            to_instance: 0x0102,
            from: from.clone(),
            mac: [0xab; 32],
        };
        let b = h.to_bytes();
        assert_eq!(
            &b[..16],
            &[b'H', b'X', b'H', b'3', 1, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(&b[16..80], &from.to_bytes());
        assert_eq!(Hello::parse(&b), Ok(h.clone()));
        assert!(Hello::parse(&b[..111]).is_err());
        let mut bad = b;
        bad[16] = b'Z';
        assert!(Hello::parse(&bad).is_err());
        assert!(Hello::parse(&[b'.'; 200]).is_err());
        let m1 = h.mac_input(&[1; 16]);
        let mut h2 = h;
        h2.rail = 2;
        assert_ne!(m1, h2.mac_input(&[1; 16]));
    }

    #[test]
    fn challenge_round_trip() {
        let c = Challenge { nonce: [7; 16] };
        let b = c.to_bytes();
        assert_eq!(&b[..4], b"HXC2");
        assert_eq!(Challenge::parse(&b), Ok(c));
    }

    #[test]
    fn another_version_is_named() {
        // What version 1 sent: its challenge and hello magics.
        let mut c = Challenge { nonce: [7; 16] }.to_bytes();
        c[..4].copy_from_slice(b"HXC1");
        assert_eq!(
            Challenge::parse(&c),
            Err(WireError::UnsupportedVersion { found: 1 })
        );
        let from = address();
        let mut h = Hello {
            rail: 0,
            flags: 0,
            to_instance: 1,
            from,
            mac: [0; 32],
        }
        .to_bytes();
        h[..4].copy_from_slice(b"HXH2");
        assert_eq!(
            Hello::parse(&h),
            Err(WireError::UnsupportedVersion { found: 1 })
        );
        assert_eq!(hello_version(&h), Some(1));
        h[..4].copy_from_slice(&HELLO_MAGIC);
        assert_eq!(hello_version(&h), None);
        assert_eq!(hello_version(b"HX"), None);
        h[..4].copy_from_slice(b"HXHz");
        assert!(matches!(Hello::parse(&h), Err(WireError::BadMagic { .. })));
        c[..4].copy_from_slice(b"HXC0");
        assert!(matches!(
            Challenge::parse(&c),
            Err(WireError::BadMagic { .. })
        ));
    }
}
