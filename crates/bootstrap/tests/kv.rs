//! End-to-end tests of the key-value service over real loopback sockets: several clients on
//! threads, plus raw sockets that misbehave (wrong secret, garbage, silence, oversized frames) to
//! check that they lose only their own connection.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hx_bootstrap::wire;
use hx_bootstrap::{new_secret, Bootstrap, BootstrapError, KvClient, KvServer, Secret};

fn server(size: u32) -> (KvServer, SocketAddr, Secret) {
    let secret = new_secret();
    let s = KvServer::start("127.0.0.1:0".parse().unwrap(), size, secret).unwrap();
    let a = s.local_addr();
    (s, a, secret)
}

#[test]
fn put_get_across_clients() {
    let (_s, addr, secret) = server(2);
    let mut a = KvClient::connect(addr, 0, 2, &secret).unwrap();
    let mut b = KvClient::connect(addr, 1, 2, &secret).unwrap();
    assert_eq!((a.rank(), a.size(), b.rank()), (0, 2, 1));
    a.put("addr.0", "10.10.0.1:4000 with spaces\nand newline")
        .unwrap();
    assert_eq!(
        b.get("addr.0").unwrap(),
        "10.10.0.1:4000 with spaces\nand newline"
    );
    b.put("", "").unwrap();
    assert_eq!(a.get("").unwrap(), "");
    a.put("addr.0", "overwritten").unwrap();
    assert_eq!(b.get("addr.0").unwrap(), "overwritten");
    let big = "x".repeat(wire::MAX_VALUE);
    a.put(&"k".repeat(wire::MAX_KEY), &big).unwrap();
    assert_eq!(b.get(&"k".repeat(wire::MAX_KEY)).unwrap(), big);
}

#[test]
fn get_blocks_until_later_put() {
    let (_s, addr, secret) = server(2);
    let t0 = Instant::now();
    let waiter = std::thread::spawn(move || {
        let mut b = KvClient::connect(addr, 1, 2, &secret).unwrap();
        b.get("late").unwrap()
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut a = KvClient::connect(addr, 0, 2, &secret).unwrap();
    a.put("late", "here").unwrap();
    assert_eq!(waiter.join().unwrap(), "here");
    assert!(t0.elapsed() >= Duration::from_millis(300));
}

#[test]
fn get_times_out_naming_the_key() {
    let (_s, addr, secret) = server(1);
    let mut a = KvClient::connect(addr, 0, 1, &secret).unwrap();
    a.set_timeout(Duration::from_millis(200));
    let t0 = Instant::now();
    let e = a.get("never.put").unwrap_err();
    assert!(matches!(e, BootstrapError::GetTimeout { .. }), "{e:?}");
    assert!(e.to_string().contains("\"never.put\""), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    // The connection is still in step after a timeout.
    a.put("k", "v").unwrap();
    assert_eq!(a.get("k").unwrap(), "v");
}

#[test]
fn fence_with_four_clients() {
    let (_s, addr, secret) = server(4);
    let arrived = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..4u32)
        .map(|r| {
            let arrived = arrived.clone();
            std::thread::spawn(move || {
                let mut c = KvClient::connect(addr, r, 4, &secret).unwrap();
                for round in 0..5u32 {
                    // Stagger arrivals so that a fence that returned early would be seen.
                    std::thread::sleep(Duration::from_millis(10 * ((r + round) % 4) as u64));
                    c.put(&format!("r{round}.{r}"), &format!("{}", r * 100 + round))
                        .unwrap();
                    arrived.fetch_add(1, Ordering::SeqCst);
                    c.fence().unwrap();
                    assert!(arrived.load(Ordering::SeqCst) >= 4 * (round + 1));
                    for p in 0..4u32 {
                        assert_eq!(
                            c.get(&format!("r{round}.{p}")).unwrap(),
                            format!("{}", p * 100 + round)
                        );
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn wrong_secret_rejected_good_clients_work() {
    let (_s, addr, secret) = server(2);
    let mut good = KvClient::connect(addr, 0, 2, &secret).unwrap();
    let mut wrong = secret;
    wrong[0] ^= 1;
    let e = KvClient::connect(addr, 1, 2, &wrong).unwrap_err();
    assert!(matches!(e, BootstrapError::Auth { .. }), "{e:?}");
    assert!(e.to_string().contains(&addr.to_string()), "{e}");
    // A rank out of range with the right secret is refused too.
    assert!(KvClient::connect(addr, 1, 5, &secret).is_err());
    good.put("still", "fine").unwrap();
    let mut other = KvClient::connect(addr, 1, 2, &secret).unwrap();
    assert_eq!(other.get("still").unwrap(), "fine");
}

fn read_hello(s: &mut TcpStream) -> [u8; wire::HELLO_LEN] {
    let mut h = [0u8; wire::HELLO_LEN];
    s.read_exact(&mut h).unwrap();
    assert_eq!(h[..4], wire::MAGIC);
    h
}

fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue, // e.g. an error response before the close
            Err(e) => {
                return matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                )
            }
        }
    }
}

#[test]
fn garbage_and_silence_rejected() {
    let (_s, addr, secret) = server(1);
    // Garbage instead of credentials.
    let mut g = TcpStream::connect(addr).unwrap();
    read_hello(&mut g);
    g.write_all(&[0xde; wire::AUTH_LEN]).unwrap();
    assert!(closed_by_server(&mut g));
    // A silent connection does not block a good client meanwhile...
    let mut silent = TcpStream::connect(addr).unwrap();
    read_hello(&mut silent);
    let mut c = KvClient::connect(addr, 0, 1, &secret).unwrap();
    c.put("a", "b").unwrap();
    // ...and is closed after about 5 s.
    let t0 = Instant::now();
    assert!(closed_by_server(&mut silent));
    assert!(t0.elapsed() < Duration::from_secs(8));
    assert_eq!(c.get("a").unwrap(), "b");
}

/// Authenticates a raw socket as `rank`, returning it after the welcome frame.
fn raw_authed(addr: SocketAddr, secret: &Secret, rank: u32) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    let h = read_hello(&mut s);
    let mac =
        hx_bootstrap::hmac_sha256(secret, &[b"hxcomm-bootstrap", &h[4..], &rank.to_le_bytes()]);
    let mut auth = wire::MAGIC.to_vec();
    auth.extend_from_slice(&rank.to_le_bytes());
    auth.extend_from_slice(&mac);
    s.write_all(&auth).unwrap();
    let mut w = [0u8; 9];
    s.read_exact(&mut w).unwrap();
    assert_eq!(
        wire::decode_response(&w).unwrap().0,
        wire::Response::Welcome { size: 1 }
    );
    s
}

#[test]
fn garbage_after_auth_closes_only_that_connection() {
    let (_s, addr, secret) = server(1);
    let mut c = KvClient::connect(addr, 0, 1, &secret).unwrap();
    // A frame with an unknown operation.
    let mut bad = raw_authed(addr, &secret, 0);
    bad.write_all(&[3, 0, 0, 0, 0x77, 1, 2]).unwrap();
    assert!(closed_by_server(&mut bad));
    // A frame length far beyond the limit.
    let mut huge = raw_authed(addr, &secret, 0);
    huge.write_all(&u32::MAX.to_le_bytes()).unwrap();
    assert!(closed_by_server(&mut huge));
    // A put whose value length exceeds the limit.
    let mut over = raw_authed(addr, &secret, 0);
    let mut f = vec![0, 0, 0, 0, 1, 1, 0, b'k'];
    f.extend_from_slice(&((wire::MAX_VALUE + 1) as u32).to_le_bytes());
    let l = (f.len() - 4) as u32;
    f[..4].copy_from_slice(&l.to_le_bytes());
    over.write_all(&f).unwrap();
    assert!(closed_by_server(&mut over));
    c.put("ok", "yes").unwrap();
    assert_eq!(c.get("ok").unwrap(), "yes");
}

#[test]
fn oversize_rejected_with_error() {
    let (_s, addr, secret) = server(1);
    let mut c = KvClient::connect(addr, 0, 1, &secret).unwrap();
    let e = c.put("big", &"v".repeat(wire::MAX_VALUE + 1)).unwrap_err();
    assert!(
        matches!(e, BootstrapError::TooLarge { what: "value", .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("\"big\""), "{e}");
    let e = c.put(&"k".repeat(wire::MAX_KEY + 1), "v").unwrap_err();
    assert!(
        matches!(e, BootstrapError::TooLarge { what: "key", .. }),
        "{e:?}"
    );
    let e = c.get(&"k".repeat(wire::MAX_KEY + 1)).unwrap_err();
    assert!(matches!(e, BootstrapError::TooLarge { .. }), "{e:?}");
    // Nothing was sent; the connection still works.
    c.put("small", "v").unwrap();
    assert_eq!(c.get("small").unwrap(), "v");
}

#[test]
fn wildcard_bind_refused() {
    let e = KvServer::start("0.0.0.0:0".parse().unwrap(), 1, new_secret()).unwrap_err();
    assert!(e.to_string().contains("wildcard"), "{e}");
}

#[test]
fn shutdown_wakes_waiters_and_refuses_new_clients() {
    let (s, addr, secret) = server(2);
    let waiter = std::thread::spawn(move || {
        let mut c = KvClient::connect(addr, 1, 2, &secret).unwrap();
        c.get("never")
    });
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    s.shutdown();
    assert!(waiter.join().unwrap().is_err());
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(KvClient::connect(addr, 0, 2, &secret).is_err());
}

#[test]
fn many_concurrent_clients() {
    let (_s, addr, secret) = server(32);
    let threads: Vec<_> = (0..32u32)
        .map(|r| {
            std::thread::spawn(move || {
                let mut c = KvClient::connect(addr, r, 32, &secret).unwrap();
                c.put(&format!("k{r}"), &r.to_string()).unwrap();
                c.fence().unwrap();
                let next = (r + 1) % 32;
                assert_eq!(c.get(&format!("k{next}")).unwrap(), next.to_string());
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
