//! Rail handshake. The accepting side sends a [`Challenge`] (a random nonce); the connecting side
//! answers with a [`Hello`] that names itself and proves it knows the job secret with a MAC over
//! the nonce, so the secret never crosses the wire. Both are fixed-size so a stranger's bytes are
//! rejected after at most `HELLO_LEN` bytes.
//!
//! ```text
//! Challenge: magic "HXC1" | nonce [16]                                        (20 bytes)
//! Hello:     magic "HXH1" | rank u32 | rail u16 | flags u16 | mac [32]        (44 bytes)
//! ```

use crate::{u16_at, u32_at, WireError};

pub const CHALLENGE_MAGIC: [u8; 4] = *b"HXC1";
pub const HELLO_MAGIC: [u8; 4] = *b"HXH1";
pub const CHALLENGE_LEN: usize = 20;
pub const HELLO_LEN: usize = 44;

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
        if b[..4] != CHALLENGE_MAGIC {
            return Err(WireError::BadMagic {
                found: [b[0], b[1]],
            });
        }
        let mut nonce = [0u8; 16];
        nonce.copy_from_slice(&b[4..CHALLENGE_LEN]);
        Ok(Challenge { nonce })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub rank: u32,
    pub rail: u16,
    pub flags: u16,
    pub mac: [u8; 32],
}

impl Hello {
    pub fn to_bytes(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..4].copy_from_slice(&HELLO_MAGIC);
        b[4..8].copy_from_slice(&self.rank.to_le_bytes());
        b[8..10].copy_from_slice(&self.rail.to_le_bytes());
        b[10..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..].copy_from_slice(&self.mac);
        b
    }

    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        if b.len() < HELLO_LEN {
            return Err(WireError::Truncated {
                need: HELLO_LEN,
                have: b.len(),
            });
        }
        if b[..4] != HELLO_MAGIC {
            return Err(WireError::BadMagic {
                found: [b[0], b[1]],
            });
        }
        let mut mac = [0u8; 32];
        mac.copy_from_slice(&b[12..HELLO_LEN]);
        Ok(Hello {
            rank: u32_at(b, 4),
            rail: u16_at(b, 8),
            flags: u16_at(b, 10),
            mac,
        })
    }

    /// The bytes the MAC covers besides the secret: domain, nonce, rank, rail.
    pub fn mac_input(nonce: &[u8; 16], rank: u32, rail: u16) -> [u8; 38] {
        let mut m = [0u8; 38];
        m[..16].copy_from_slice(b"hxcomm-rail-v1\0\0");
        m[16..32].copy_from_slice(nonce);
        m[32..36].copy_from_slice(&rank.to_le_bytes());
        m[36..38].copy_from_slice(&rail.to_le_bytes());
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_fixed_bytes() {
        let h = Hello {
            rank: 2,
            rail: 1,
            flags: 0,
            mac: [0xab; 32],
        };
        let b = h.to_bytes();
        assert_eq!(&b[..12], &[b'H', b'X', b'H', b'1', 2, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(Hello::parse(&b), Ok(h));
        assert!(Hello::parse(&b[..43]).is_err());
        assert!(Hello::parse(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n.................").is_err());
    }

    #[test]
    fn challenge_round_trip() {
        let c = Challenge { nonce: [7; 16] };
        let b = c.to_bytes();
        assert_eq!(&b[..4], b"HXC1");
        assert_eq!(Challenge::parse(&b), Ok(c));
    }
}
