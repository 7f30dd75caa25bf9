//! The rail handshake. The accepting side sends a nonce; the connecting side answers with its rank,
//! the rail index and an HMAC of the nonce under the job secret. Strangers, garbage and wrong
//! secrets are told apart from peers within one fixed-size message, without the secret ever
//! crossing the wire.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use hx_bootstrap::{ct_eq, fill_random, hmac_sha256, Secret};
use hx_wire::{Challenge, Hello, CHALLENGE_LEN, HELLO_LEN};

/// Connector side, on a blocking stream: read the challenge, answer it.
pub fn answer(
    stream: &mut TcpStream,
    secret: &Secret,
    rank: u32,
    rail: u16,
    timeout: Duration,
) -> io::Result<()> {
    stream.set_read_timeout(Some(timeout))?;
    let mut c = [0u8; CHALLENGE_LEN];
    stream.read_exact(&mut c)?;
    let ch = Challenge::parse(&c)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("challenge: {e}")))?;
    let hello = Hello {
        rank,
        rail,
        flags: 0,
        mac: hmac_sha256(secret, &[&Hello::mac_input(&ch.nonce, rank, rail)]),
    };
    stream.write_all(&hello.to_bytes())?;
    stream.set_read_timeout(None)
}

/// Acceptor side: the challenge to send and the state that checks the answer, fed
/// incrementally by a nonblocking event loop.
pub struct Pending {
    pub nonce: [u8; 16],
    got: [u8; HELLO_LEN],
    have: usize,
}

/// What the acceptor learned.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    NeedMore,
    Peer { rank: u32, rail: u16 },
    Rejected(String),
}

impl Pending {
    pub fn new() -> io::Result<Self> {
        let mut nonce = [0u8; 16];
        fill_random(&mut nonce)?;
        Ok(Pending {
            nonce,
            got: [0; HELLO_LEN],
            have: 0,
        })
    }

    pub fn challenge(&self) -> [u8; CHALLENGE_LEN] {
        Challenge { nonce: self.nonce }.to_bytes()
    }

    /// Space for the next bytes of the answer.
    pub fn space(&mut self) -> &mut [u8] {
        &mut self.got[self.have..]
    }

    pub fn received(&mut self, n: usize, secret: &Secret) -> Verdict {
        self.have += n;
        if self.have >= 4 && self.got[..4] != hx_wire::HELLO_MAGIC {
            return Verdict::Rejected("not an hxcomm rail handshake".into());
        }
        if self.have < HELLO_LEN {
            return Verdict::NeedMore;
        }
        match Hello::parse(&self.got) {
            Err(e) => Verdict::Rejected(format!("bad hello: {e}")),
            Ok(h) => {
                let want = hmac_sha256(secret, &[&Hello::mac_input(&self.nonce, h.rank, h.rail)]);
                if ct_eq(&want, &h.mac) {
                    Verdict::Peer {
                        rank: h.rank,
                        rail: h.rail,
                    }
                } else {
                    Verdict::Rejected(format!(
                        "wrong job secret (claimed rank {} rail {})",
                        h.rank, h.rail
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_and_bad_answers() {
        let secret = [1u8; 32];
        let mut p = Pending::new().unwrap();
        let mac = hmac_sha256(&secret, &[&Hello::mac_input(&p.nonce, 3, 1)]);
        let hello = Hello {
            rank: 3,
            rail: 1,
            flags: 0,
            mac,
        }
        .to_bytes();
        p.space()[..10].copy_from_slice(&hello[..10]);
        assert_eq!(p.received(10, &secret), Verdict::NeedMore);
        let n = HELLO_LEN - 10;
        p.space()[..n].copy_from_slice(&hello[10..]);
        assert_eq!(p.received(n, &secret), Verdict::Peer { rank: 3, rail: 1 });

        let mut q = Pending::new().unwrap();
        let mac = hmac_sha256(&[2u8; 32], &[&Hello::mac_input(&q.nonce, 3, 1)]);
        let hello = Hello {
            rank: 3,
            rail: 1,
            flags: 0,
            mac,
        }
        .to_bytes();
        q.space().copy_from_slice(&hello);
        assert!(matches!(
            q.received(HELLO_LEN, &secret),
            Verdict::Rejected(_)
        ));

        let mut g = Pending::new().unwrap();
        g.space()[..4].copy_from_slice(b"GET ");
        assert!(matches!(g.received(4, &secret), Verdict::Rejected(_)));
    }
}
