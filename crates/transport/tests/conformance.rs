//! The conformance suite every transport must pass: bytes arrive in order and intact through
//! partial reads and writes, WouldBlock is reported rather than blocking, close is seen as EOF.

use std::io::{ErrorKind, IoSlice};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use hx_transport::faulty::{Faults, FaultyLink};
use hx_transport::{pipe, shm, tcp, Link};

/// Moves `data` from `a` to `b` and returns what arrived. Each round writes, from where the
/// last write ended (`sent`), the pieces between the cut points `cut(sent, round)` gives (the
/// first is `sent`), and reads once when `read(round)`.
fn transfer(
    a: &mut dyn Link,
    b: &mut dyn Link,
    data: &[u8],
    cut: impl Fn(usize, usize) -> Vec<usize>,
    read: impl Fn(usize) -> bool,
) -> Vec<u8> {
    let mut got = Vec::with_capacity(data.len());
    let mut sent = 0;
    let mut buf = vec![0u8; 7919];
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut round = 0;
    while got.len() < data.len() {
        assert!(Instant::now() < deadline, "transfer stalled");
        round += 1;
        if sent < data.len() {
            let cuts = cut(sent, round);
            let iov: Vec<IoSlice> = cuts
                .windows(2)
                .map(|w| IoSlice::new(&data[w[0]..w[1]]))
                .collect();
            match a.write_vectored(&iov) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("write: {e}"),
            }
        }
        if read(round) {
            match b.read(&mut buf) {
                Ok(0) => panic!("unexpected EOF"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }
    got
}

/// Everything left in two halves each round, a read each round.
fn pump(a: &mut dyn Link, b: &mut dyn Link, data: &[u8]) -> Vec<u8> {
    let len = data.len();
    transfer(
        a,
        b,
        data,
        |sent, _| vec![sent, sent + (len - sent) / 2, len],
        |_| true,
    )
}

/// In small writes (what small messages and acknowledgements make): one to three slices of 1 to
/// 600 bytes in all, some empty, several writes to a read, so that a link that gathers small
/// writes into one buffer (TCP) is taken through that path and the plain one, including
/// partial writes.
fn pump_small(a: &mut dyn Link, b: &mut dyn Link, data: &[u8]) -> Vec<u8> {
    let len = data.len();
    let cut = |sent: usize, k: usize| {
        let end = (sent + 1 + (k * 37) % 600).min(len);
        let n = 1 + k % 3;
        (0..=n).map(|j| sent + (end - sent) * j / n).collect()
    };
    transfer(a, b, data, cut, |k| k % 4 == 0)
}

fn conformance(mut a: Box<dyn Link>, mut b: Box<dyn Link>) {
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    assert_eq!(pump(&mut *a, &mut *b, &data), data);
    assert_eq!(pump(&mut *b, &mut *a, &data[..1000]), &data[..1000]);
    assert_eq!(
        pump_small(&mut *a, &mut *b, &data[..400_000]),
        &data[..400_000]
    );
    // Nothing to read: WouldBlock, not a hang.
    let mut buf = [0u8; 16];
    assert_eq!(b.read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert!(a.fd() >= 0 && !a.describe().is_empty());
    // Close: the other side sees EOF.
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match b.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => panic!("bytes after close"),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "no EOF");
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!("{e}"),
        }
    }
}

fn tcp_pair() -> (Box<dyn Link>, Box<dyn Link>) {
    let l = tcp::listen(Ipv4Addr::LOCALHOST, None, 0, None).unwrap();
    let addr = l.local_addr().unwrap();
    let c = tcp::connect(Ipv4Addr::LOCALHOST, None, addr, Duration::from_secs(5)).unwrap();
    l.set_nonblocking(false).unwrap();
    let (s, _) = l.accept().unwrap();
    let opts = tcp::RailOptions::default();
    tcp::tune(&c, &opts).unwrap();
    tcp::tune(&s, &opts).unwrap();
    (
        Box::new(tcp::TcpLink::new(c, "tcp/c".into())),
        Box::new(tcp::TcpLink::new(s, "tcp/s".into())),
    )
}

#[test]
fn tcp_conforms() {
    let (a, b) = tcp_pair();
    conformance(a, b);
}

#[test]
fn pipe_conforms() {
    let (a, b) = pipe::pair("p").unwrap();
    conformance(Box::new(a), Box::new(b));
}

#[test]
fn shm_conforms() {
    // A ring smaller than the transfer, so wraparound and full-ring WouldBlock are exercised.
    let (a, b) = shm::pair(1 << 16).unwrap();
    conformance(Box::new(a), Box::new(b));
}

#[test]
fn faulty_short_io_conforms() {
    let (a, b) = pipe::pair("p").unwrap();
    let f = Faults {
        short_io: true,
        would_block_one_in: 5,
        ..Faults::default()
    };
    conformance(
        Box::new(FaultyLink::new(a, f.clone(), 1)),
        Box::new(FaultyLink::new(b, f, 2)),
    );
}

#[test]
fn faulty_reset_is_reported() {
    let (a, _b) = pipe::pair("p").unwrap();
    let mut f = FaultyLink::new(
        a,
        Faults {
            reset_after: Some(10),
            ..Faults::default()
        },
        1,
    );
    assert_eq!(f.write_vectored(&[IoSlice::new(&[0; 64])]).unwrap(), 10);
    assert_eq!(
        f.write_vectored(&[IoSlice::new(&[0; 64])])
            .unwrap_err()
            .kind(),
        ErrorKind::ConnectionReset
    );
}
