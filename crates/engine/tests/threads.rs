//! Engine tests with ranks as threads of one process, joined through an in-process bootstrap
//! server over loopback rails: real sockets, real epoll, no launcher.

use std::net::SocketAddr;
use std::time::Duration;

use hx_bootstrap::{KvClient, KvServer};
use hx_engine::{Engine, Error, Policy, Settings, ANY_SOURCE, ANY_TAG};

const SECRET: [u8; 32] = [7; 32];

fn settings(policy: Policy, rails: usize) -> Settings {
    let mut s = Settings::from_env().unwrap();
    s.protocol.policy = policy;
    s.loopback_rails = rails;
    s.shm = false;
    s.connect_timeout = Duration::from_secs(10);
    s
}

/// Runs `f(engine)` on `n` ranks at once.
fn job<F>(n: u32, s: Settings, f: F)
where
    F: Fn(&mut Engine) + Send + Sync + Clone + 'static,
{
    let server = KvServer::start("127.0.0.1:0".parse().unwrap(), n, SECRET).unwrap();
    let addr: SocketAddr = server.local_addr();
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let f = f.clone();
            let s = s.clone();
            std::thread::spawn(move || {
                let boot = KvClient::connect(addr, r, n, &SECRET).unwrap();
                let mut e = Engine::with(s, Box::new(boot), SECRET).unwrap();
                f(&mut e);
                e.finalize().unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().expect("rank panicked");
    }
    server.shutdown();
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn ping_pong_all_policies() {
    for pol in Policy::ALL {
        job(2, settings(pol, 3), |e| {
            e.open_endpoint(0).unwrap();
            let peer = 1 - e.rank();
            for (i, len) in [0usize, 1, 100, 40_000, 1 << 20, 5_000_000]
                .into_iter()
                .enumerate()
            {
                let data = pattern(i as u64 + 1, len);
                if e.rank() == 0 {
                    e.send(0, peer, 0, i as u64, &data).unwrap();
                    let mut back = vec![0; len];
                    let st = e.recv(0, Some(peer), Some(i as u64), &mut back).unwrap();
                    assert_eq!(st.len, len);
                    assert_eq!(back, data);
                } else {
                    let mut buf = vec![0; len];
                    let st = e.recv(0, ANY_SOURCE, ANY_TAG, &mut buf).unwrap();
                    assert_eq!((st.source, st.tag, st.len), (0, i as u64, len));
                    assert_eq!(buf, data);
                    e.send(0, peer, 0, i as u64, &buf).unwrap();
                }
            }
            let stats = e.rail_tx_bytes(peer);
            assert_eq!(stats.len(), 3);
        });
    }
}

/// Windows of large nonblocking sends arrive whole and in order, and every rail carries part
/// of them. Rails connect on first use: on a loaded machine the first window can leave on
/// the first rail alone before the others are up, so three windows are sent.
#[test]
fn nonblocking_window_and_rails_all_carry() {
    job(2, settings(Policy::Adaptive, 4), |e| {
        e.open_endpoint(5).unwrap();
        let peer = 1 - e.rank();
        let len = 2 << 20;
        for window in 0..3u64 {
            let tags = window * 8..window * 8 + 8;
            if e.rank() == 0 {
                let reqs: Vec<_> = tags
                    .map(|t| e.isend(5, peer, 5, t, pattern(t, len)).unwrap())
                    .collect();
                e.wait_all(&reqs).unwrap();
            } else {
                let reqs: Vec<_> = tags
                    .clone()
                    .map(|_| e.irecv(5, Some(peer), ANY_TAG, vec![0; len]).unwrap())
                    .collect();
                for (t, r) in tags.zip(reqs) {
                    let (st, buf) = e.wait_owned(r).unwrap();
                    assert_eq!(st.tag, t);
                    assert!(buf.unwrap() == pattern(t, len), "message {t} corrupted");
                }
            }
        }
        if e.rank() == 0 {
            let stats = e.rail_tx_bytes(peer);
            assert!(
                stats.iter().all(|&b| b > 0),
                "every rail carries: {stats:?}"
            );
        }
    });
}

#[test]
fn errors_are_clear() {
    job(2, settings(Policy::Adaptive, 1), |e| {
        assert!(matches!(e.send(3, 1, 0, 0, b"x"), Err(Error::Invalid(_))));
        e.open_endpoint(0).unwrap();
        assert!(matches!(e.open_endpoint(0), Err(Error::Invalid(_))));
        assert!(matches!(e.send(0, 9, 0, 0, b"x"), Err(Error::Invalid(_))));
        e.barrier().unwrap();
        if e.rank() == 0 {
            e.send(0, 1, 0, 1, &[1; 100]).unwrap();
        } else {
            let mut small = [0u8; 10];
            match e.recv(0, Some(0), Some(1), &mut small) {
                Err(Error::Truncated(st)) => assert_eq!(st.len, 100),
                other => panic!("{other:?}"),
            }
        }
        e.barrier().unwrap();
    });
}

#[test]
fn shared_memory_between_threads_of_one_host() {
    let mut s = settings(Policy::Adaptive, 1);
    s.shm = true;
    job(3, s, |e| {
        e.open_endpoint(0).unwrap();
        let me = e.rank();
        for peer in 0..3 {
            if peer != me {
                assert_eq!(e.rail_names(peer), &["shm".to_string()]);
            }
        }
        let next = (me + 1) % 3;
        let prev = (me + 2) % 3;
        for (i, len) in [0usize, 8, 5000, 100_000, 3_000_000]
            .into_iter()
            .enumerate()
        {
            let r = e
                .irecv(0, Some(prev), Some(i as u64), vec![0; len])
                .unwrap();
            e.send(
                0,
                next,
                0,
                i as u64,
                &pattern(me as u64 * 100 + i as u64, len),
            )
            .unwrap();
            let (st, buf) = e.wait_owned(r).unwrap();
            assert_eq!(st.len, len);
            assert_eq!(buf.unwrap(), pattern(prev as u64 * 100 + i as u64, len));
        }
    });
}

/// Both ranks send each other a window of large messages at once over shared memory: each
/// side copies straight into the other's buffers a bounded amount per round and answers the
/// other's requests in between (flush_dirty_peers); every byte arrives, in order per tag.
#[test]
fn two_ways_windows_of_large_messages_over_shared_memory() {
    let mut s = settings(Policy::Adaptive, 1);
    s.shm = true;
    job(2, s, |e| {
        e.open_endpoint(0).unwrap();
        let me = e.rank();
        let peer = 1 - me;
        let (n, len) = (12u64, 3 << 20);
        for round in 0..2u64 {
            let recvs: Vec<_> = (0..n)
                .map(|t| e.irecv(0, Some(peer), Some(t), vec![0; len]).unwrap())
                .collect();
            let sends: Vec<_> = (0..n)
                .map(|t| {
                    let data = pattern(1 + me as u64 * 1000 + round * 100 + t, len);
                    e.isend(0, peer, 0, t, data).unwrap()
                })
                .collect();
            for (t, r) in recvs.into_iter().enumerate() {
                let (st, buf) = e.wait_owned(r).unwrap();
                assert_eq!((st.source, st.tag, st.len), (peer, t as u64, len));
                let want = pattern(1 + peer as u64 * 1000 + round * 100 + t as u64, len);
                assert!(
                    buf.unwrap() == want,
                    "message {t} of round {round} corrupted"
                );
            }
            e.wait_all(&sends).unwrap();
        }
    });
}

/// A rank that only receives over shared memory in a tight loop (each receive taken by the
/// engine's express path, which spins on the rings and makes no other round) still accepts a
/// third rank's connection, so that rank's blocking send completes and the loop can end.
#[test]
fn shared_memory_receive_loop_still_accepts_connections() {
    let mut s = settings(Policy::Adaptive, 1);
    s.shm = true;
    job(3, s, |e| {
        e.open_endpoint(0).unwrap();
        let mut b = [0u8; 8];
        match e.rank() {
            0 => {
                let mut rounds = 0u64;
                loop {
                    let st = e.recv(0, Some(1), None, &mut b).unwrap();
                    if st.tag == 1 {
                        break;
                    }
                    rounds += 1;
                    e.send(0, 1, 0, 0, &rounds.to_le_bytes()).unwrap();
                }
                let st = e.recv(0, Some(2), None, &mut b).unwrap();
                assert_eq!((st.tag, b), (5, *b"from two"));
            }
            1 => {
                // Ping-pong with rank 0 until rank 2, which must first get through to rank 0,
                // says go.
                let mut last = 0u64;
                while e.probe(0, Some(2), None).unwrap().is_none() {
                    e.send(0, 0, 0, 0, b"ping----").unwrap();
                    e.recv(0, Some(0), Some(0), &mut b).unwrap();
                    let n = u64::from_le_bytes(b);
                    assert_eq!(n, last + 1, "replies in order");
                    last = n;
                }
                e.recv(0, Some(2), None, &mut b).unwrap();
                e.send(0, 0, 0, 1, b"stop----").unwrap();
            }
            _ => {
                // The first message to rank 0 connects to it.
                e.send(0, 0, 0, 5, b"from two").unwrap();
                e.send(0, 1, 0, 5, b"go------").unwrap();
            }
        }
    });
}

/// A blocking send to a shared-memory peer that has just gone (its engine dropped without
/// finalize) is an error naming it, not a success: the inline path's write fails, and the
/// copy it queued dies with the peer.
#[test]
fn a_blocking_send_to_a_peer_that_just_died_is_an_error() {
    let mut s = settings(Policy::Adaptive, 1);
    s.shm = true;
    let server = KvServer::start("127.0.0.1:0".parse().unwrap(), 2, SECRET).unwrap();
    let addr: SocketAddr = server.local_addr();
    let (gone_tx, gone_rx) = std::sync::mpsc::channel::<()>();
    let s1 = s.clone();
    let dying = std::thread::spawn(move || {
        let boot = KvClient::connect(addr, 1, 2, &SECRET).unwrap();
        let mut e = Engine::with(s1, Box::new(boot), SECRET).unwrap();
        e.open_endpoint(0).unwrap();
        let mut b = [0u8; 5];
        e.recv(0, Some(0), None, &mut b).unwrap();
        drop(e);
        gone_tx.send(()).unwrap();
    });
    let boot = KvClient::connect(addr, 0, 2, &SECRET).unwrap();
    let mut e = Engine::with(s, Box::new(boot), SECRET).unwrap();
    e.open_endpoint(0).unwrap();
    e.send(0, 1, 0, 1, b"hello").unwrap();
    gone_rx.recv().unwrap();
    dying.join().unwrap();
    let err = e
        .send(0, 1, 0, 2, b"again")
        .expect_err("a send to a peer that is gone");
    assert!(err.to_string().contains("rank 1"), "names the peer: {err}");
    drop(e);
    server.shutdown();
}
