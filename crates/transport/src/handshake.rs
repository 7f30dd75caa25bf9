//! The rail handshake. The accepting side sends a nonce; the connecting side answers with its
//! address, the rail index and an HMAC of all that and the nonce under the job secret. Strangers, garbage and wrong
//! secrets are told apart from peers within one fixed-size message, without the secret ever
//! crossing the wire.

use std::io;

use hx_auth::{ct_eq, fill_random, hmac_sha256, Secret};
use hx_wire::{Address, Challenge, Hello, CHALLENGE_LEN, HELLO_LEN};

/// Connector side: the hello that answers `challenge` (bytes read from the acceptor).
pub fn hello_for(
    challenge: &[u8],
    secret: &Secret,
    rail: u16,
    to_instance: u64,
    from: &Address,
) -> io::Result<[u8; HELLO_LEN]> {
    let ch = Challenge::parse(challenge).map_err(|e| match e {
        // Permanent, unlike garbage from a port now used by someone else: the caller gives up.
        hx_wire::WireError::UnsupportedVersion { .. } => io::Error::new(
            io::ErrorKind::Unsupported,
            format!("the peer runs another hxcomm release: {e}"),
        ),
        e => io::Error::new(io::ErrorKind::InvalidData, format!("challenge: {e}")),
    })?;
    let mut hello = Hello {
        rail,
        flags: 0,
        to_instance,
        from: from.clone(),
        mac: [0; 32],
    };
    hello.mac = hmac_sha256(secret, &[&hello.mac_input(&ch.nonce)]);
    Ok(hello.to_bytes())
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
    Peer(Box<Hello>),
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
            return Verdict::Rejected(match hx_wire::hello_version(&self.got) {
                Some(v) => format!(
                    "an hxcomm peer of another release (protocol version {v}; this build speaks {})",
                    hx_wire::VERSION
                ),
                None => "not an hxcomm rail handshake".into(),
            });
        }
        if self.have < HELLO_LEN {
            return Verdict::NeedMore;
        }
        match Hello::parse(&self.got) {
            Err(e) => Verdict::Rejected(format!("bad hello: {e}")),
            Ok(h) => {
                let want = hmac_sha256(secret, &[&h.mac_input(&self.nonce)]);
                if ct_eq(&want, &h.mac) {
                    Verdict::Peer(Box::new(h))
                } else {
                    Verdict::Rejected(format!(
                        "wrong job secret (claimed to be {} on rail {})",
                        h.from, h.rail
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr() -> Address {
        Address {
            flags: 0,
            ep: 0,
            instance: 77,
            host: 1,
            pid: 1,
            port: 1000,
            rails: vec![],
        }
    }

    #[test]
    fn good_and_bad_answers() {
        let secret = [1u8; 32];
        let mut p = Pending::new().unwrap();
        let hello = hello_for(&p.challenge(), &secret, 1, 5, &addr()).unwrap();
        p.space()[..10].copy_from_slice(&hello[..10]);
        assert_eq!(p.received(10, &secret), Verdict::NeedMore);
        let n = HELLO_LEN - 10;
        p.space()[..n].copy_from_slice(&hello[10..]);
        match p.received(n, &secret) {
            Verdict::Peer(h) => assert_eq!((h.rail, h.to_instance, h.from), (1, 5, addr())),
            v => panic!("{v:?}"),
        }

        let mut q = Pending::new().unwrap();
        let hello = hello_for(&q.challenge(), &[2u8; 32], 1, 5, &addr()).unwrap();
        q.space().copy_from_slice(&hello);
        assert!(matches!(
            q.received(HELLO_LEN, &secret),
            Verdict::Rejected(_)
        ));
        // A hello made for another challenge is refused (no replay).
        let mut r = Pending::new().unwrap();
        let old = hello_for(&p.challenge(), &secret, 1, 5, &addr()).unwrap();
        r.space().copy_from_slice(&old);
        assert!(matches!(
            r.received(HELLO_LEN, &secret),
            Verdict::Rejected(_)
        ));

        let mut g = Pending::new().unwrap();
        g.space()[..4].copy_from_slice(b"GET ");
        assert!(matches!(g.received(4, &secret), Verdict::Rejected(_)));
    }

    #[test]
    fn another_release_is_named_both_ways() {
        let secret = [1u8; 32];
        // Our hello, as a version-1 build would have started it.
        let mut p = Pending::new().unwrap();
        let mut old = hello_for(&p.challenge(), &secret, 1, 5, &addr()).unwrap();
        old[..4].copy_from_slice(b"HXH2");
        p.space()[..4].copy_from_slice(&old[..4]);
        match p.received(4, &secret) {
            Verdict::Rejected(why) => assert!(why.contains("protocol version 1"), "{why}"),
            v => panic!("{v:?}"),
        }
        // A version-1 acceptor's challenge: the connector gives up for good, saying why.
        let mut ch = Pending::new().unwrap().challenge();
        ch[..4].copy_from_slice(b"HXC1");
        let e = hello_for(&ch, &secret, 1, 5, &addr()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        assert!(e.to_string().contains("another hxcomm release"), "{e}");
        ch[..4].copy_from_slice(b"HTTP");
        let e = hello_for(&ch, &secret, 1, 5, &addr()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
