//! Processes that know each other only by address (no launcher, no ranks): engines opened with
//! `Engine::open` as threads of one process, introduced by `insert`, connecting on first use in
//! either direction, over loopback TCP rails and over shared memory.

use std::sync::mpsc;
use std::time::Duration;

use hx_engine::{Engine, Settings, ANY_SOURCE, ANY_TAG};

mod common;
use common::{pair, settings, SECRET};

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) >> 3) as u8)
        .collect()
}

#[test]
fn both_sides_send_first_and_connect_at_once() {
    for (shm, rails) in [(false, 1), (false, 3), (true, 1)] {
        pair(settings(shm, rails), true, move |i, e, peer| {
            let peer = peer.unwrap();
            for (n, len) in [0usize, 1, 4000, 100_000, 3 << 20].into_iter().enumerate() {
                let data = pattern(i as u64 * 100 + n as u64, len);
                let s = e.isend(1, peer, 1, n as u64, data).unwrap();
                let r = e
                    .irecv(1, Some(peer), Some(n as u64), vec![0; len])
                    .unwrap();
                let (st, buf) = e.wait_owned(r).unwrap();
                assert_eq!((st.source, st.len, st.tag), (peer, len, n as u64));
                let want = pattern((1 - i) as u64 * 100 + n as u64, len);
                assert!(
                    buf.unwrap() == want,
                    "shm {shm} rails {rails} len {len}: bytes differ"
                );
                e.wait(s).unwrap();
            }
            assert_eq!(e.rails(peer), if shm { 1 } else { rails });
        });
    }
}

#[test]
fn an_unknown_sender_becomes_a_peer_by_its_connection() {
    for shm in [false, true] {
        pair(settings(shm, 2), false, move |i, e, peer| {
            if i == 0 {
                // Knows the other; sends first, then waits for the answer.
                let peer = peer.unwrap();
                e.send(1, peer, 1, 5, b"hello").unwrap();
                let mut b = [0u8; 8];
                let st = e.recv(1, Some(peer), Some(6), &mut b).unwrap();
                assert_eq!(&b[..st.len], b"olleh");
            } else {
                // Never told about the sender: it learns of it from the connection.
                assert!(peer.is_none());
                let mut b = [0u8; 8];
                let st = e.recv(1, ANY_SOURCE, ANY_TAG, &mut b).unwrap();
                assert_eq!((&b[..st.len], st.tag), (&b"hello"[..], 5));
                assert_ne!(st.source, e.rank(), "shm {shm}");
                e.send(1, st.source, 1, 6, b"olleh").unwrap();
            }
        });
    }
}

#[test]
fn malformed_addresses_are_refused() {
    let mut e = Engine::open(settings(false, 1), SECRET, None).unwrap();
    let good = e.address(0);
    let mut bad = good;
    bad[0] = b'Z';
    assert!(e
        .insert(&bad)
        .unwrap_err()
        .to_string()
        .contains("malformed"));
    assert!(e.insert(&good[..20]).is_err());
    assert_eq!(e.insert(&good).unwrap().0, e.rank(), "own address is self");
    assert!(Engine::describe_address(&good)
        .unwrap()
        .starts_with("hxcomm://"));
}

#[test]
fn a_receive_from_a_peer_that_dies_fails() {
    let (tx, rx) = mpsc::channel::<[u8; 64]>();
    let a = std::thread::spawn(move || {
        let mut e = Engine::open(settings(false, 1), SECRET, None).unwrap();
        e.open_endpoint(1).unwrap();
        tx.send(e.address(1)).unwrap();
        // Wait for the first message, answer, then vanish without an orderly close.
        let mut b = [0u8; 4];
        let st = e.recv(1, ANY_SOURCE, Some(1), &mut b).unwrap();
        e.send(1, st.source, 1, 2, b"pong").unwrap();
        drop(e);
    });
    let mut e = Engine::open(settings(false, 1), SECRET, None).unwrap();
    e.open_endpoint(1).unwrap();
    let (p, _) = e.insert(&rx.recv().unwrap()).unwrap();
    e.send(1, p, 1, 1, b"ping").unwrap();
    let mut b = [0u8; 4];
    e.recv(1, Some(p), Some(2), &mut b).unwrap();
    e.track_finished();
    let late = e.irecv(1, Some(p), Some(3), vec![0; 4]).unwrap();
    a.join().unwrap();
    // As the libfabric provider waits: progress, then look at what finished.
    let mut fin = Vec::new();
    let t = std::time::Instant::now();
    while !fin.contains(&late) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the receive never finished; peer failure: {:?}; finished {fin:?}",
            e.peer_failure(p)
        );
        e.progress().unwrap();
        e.take_finished(&mut fin);
    }
    let (res, _) = e.take_request(late).unwrap();
    let err = res.unwrap_err().to_string();
    assert!(err.contains("closed its connections"), "{err}");
}

/// Large messages between same-host engines are copied straight into the receiver's buffer
/// (process_vm_writev to the pid the kernel names for the shared-memory link) when HX_DIRECT
/// is on and Yama allows it, and go through the ring otherwise; every byte arrives either way.
#[test]
fn large_same_host_messages_are_copied_directly() {
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok();
    let yama_allows = matches!(yama.as_deref().map(str::trim), None | Some("0" | "1"));
    for direct in [true, false] {
        let mut s = settings(true, 1);
        s.direct = direct;
        let len = 3 << 20;
        pair(s, true, move |i, e, peer| {
            let peer = peer.unwrap();
            let sent = e.isend(1, peer, 1, 9, pattern(i as u64, len)).unwrap();
            let r = e.irecv(1, Some(peer), Some(9), vec![0; len]).unwrap();
            let (st, buf) = e.wait_owned(r).unwrap();
            assert_eq!(st.len, len);
            assert!(buf.unwrap() == pattern(1 - i as u64, len), "bytes differ");
            e.wait(sent).unwrap();
            let through_ring = e.rail_tx_bytes(peer)[0];
            if direct && yama_allows {
                assert!(
                    through_ring < 64 << 10,
                    "{through_ring} bytes went through the ring, expected a direct copy"
                );
            } else {
                assert!(
                    through_ring >= len as u64,
                    "direct {direct}: {through_ring}"
                );
            }
        });
    }
}

/// Local processes that connect to the shared-memory listener and stay silent hold at most
/// 256 handshake slots, each for at most 5 s; the rest wait in the backlog, and a legitimate
/// same-host peer still gets its link once slots free up.
#[test]
fn silent_local_connections_are_bounded_and_do_not_keep_peers_out() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixStream};

    let mut a = Engine::open(settings(true, 1), SECRET, None).unwrap();
    a.open_endpoint(1).unwrap();
    let a_addr = a.address(1);
    let instance = hx_wire::Address::parse(&a_addr).unwrap().instance;
    let name = hx_transport::shm::socket_name(&SECRET, instance);
    let strangers: Vec<UnixStream> = (0..300)
        .map(|_| {
            let s =
                UnixStream::connect_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                    .unwrap();
            a.progress().unwrap();
            s
        })
        .collect();
    a.progress().unwrap();
    // An accepted connection gets the challenge at once; the others wait in the backlog.
    let accepted = strangers
        .iter()
        .filter(|s| {
            s.set_nonblocking(true).unwrap();
            std::io::Read::read(&mut &**s, &mut [0u8; 4]).is_ok_and(|n| n > 0)
        })
        .count();
    assert_eq!(
        accepted, 256,
        "the engine took {accepted} of 300 silent connections at once"
    );

    let b = std::thread::spawn(move || {
        let mut b = Engine::open(settings(true, 1), SECRET, None).unwrap();
        b.open_endpoint(1).unwrap();
        let (p, _) = b.insert(&a_addr).unwrap();
        b.send(1, p, 1, 3, b"through").unwrap();
        b.finalize().unwrap();
    });
    let mut buf = [0u8; 16];
    let st = a.recv(1, ANY_SOURCE, Some(3), &mut buf).unwrap();
    assert_eq!(&buf[..st.len], b"through");
    b.join().unwrap();
    drop(strangers);
    a.finalize().unwrap();
}

/// A peer whose kernel accepts the connection but whose process never answers (it does not
/// progress: stopped, hung, busy): a send to it fails after HX_RANK_TIMEOUT counted from the
/// first attempt, not after the connection attempt's own timeout (HX_CONNECT_TIMEOUT) first.
#[test]
fn a_peer_that_never_answers_fails_after_the_rank_timeout() {
    let (tx, rx) = mpsc::channel::<[u8; 64]>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let silent = std::thread::spawn(move || {
        let mut e = Engine::open(settings(false, 1), SECRET, None).unwrap();
        e.open_endpoint(1).unwrap();
        tx.send(e.address(1)).unwrap();
        // Listening, never progressing, until the test is over.
        let _ = done_rx.recv_timeout(Duration::from_secs(60));
        drop(e);
    });
    let mut s = settings(false, 1);
    s.connect_timeout = Duration::from_secs(30);
    s.rank_timeout = Duration::from_secs(2);
    let mut e = Engine::open(s, SECRET, None).unwrap();
    e.open_endpoint(1).unwrap();
    let (p, _) = e.insert(&rx.recv().unwrap()).unwrap();
    let t = std::time::Instant::now();
    let err = e.send(1, p, 1, 1, b"hello?").unwrap_err().to_string();
    let took = t.elapsed();
    done_tx.send(()).unwrap();
    silent.join().unwrap();
    assert!(err.contains("HX_RANK_TIMEOUT"), "{err}");
    assert!(
        took < Duration::from_secs(10),
        "failed after {took:?}: the rank timeout did not count from the first attempt"
    );
}

/// A peer built from another release (here: what version 1 says when it accepts a rail) is given
/// up at once, by name, not retried until a timeout and never sent a frame it would misread.
#[test]
fn a_peer_of_another_release_is_refused_by_name() {
    use std::io::{Read, Write};
    let old = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = old.local_addr().unwrap().port();
    let acceptor = std::thread::spawn(move || {
        let (mut s, _) = old.accept().unwrap();
        let mut challenge = *b"HXC1................";
        challenge[4..].fill(7);
        s.write_all(&challenge).unwrap();
        // Whatever comes back, until the connector hangs up: nothing but a hello may.
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        got
    });
    let mut s = settings(false, 1);
    s.rank_timeout = Duration::from_secs(30);
    let mut e = Engine::open(s, SECRET, None).unwrap();
    e.open_endpoint(1).unwrap();
    let mut theirs = hx_wire::Address::parse(&e.address(1)).unwrap();
    theirs.port = port;
    theirs.instance ^= 0x5555;
    theirs.flags = 0;
    let (p, _) = e.insert(&theirs.to_bytes()).unwrap();
    let t = std::time::Instant::now();
    let err = e.send(1, p, 1, 1, b"hello?").unwrap_err().to_string();
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(err.contains("another hxcomm release"), "{err}");
    assert!(err.contains("protocol version 1"), "{err}");
    drop(e);
    assert!(acceptor.join().unwrap().is_empty(), "sent bytes to it");
}

/// May this process give a socket `name` (a kernel without the module, or an unprivileged user
/// outside net.ipv4.tcp_allowed_congestion_control, may not)?
fn congestion_allowed(name: &str) -> bool {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    hx_transport::tcp::set_congestion(&c, name).is_ok()
}

/// The congestion control of each connected TCP rail to `peer`. Rails connect on first use
/// (a quiet pair keeps to one), and when both sides connect at once one connection replaces
/// the other: progress until one is there.
fn connected_cc(e: &mut Engine, peer: u32) -> Vec<String> {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let cc: Vec<String> = e.rail_congestion(peer).into_iter().flatten().collect();
        if !cc.is_empty() || std::time::Instant::now() > until {
            return cc;
        }
        e.progress().unwrap();
    }
}

#[test]
fn rails_run_bbr_until_they_carry_bulk_data_then_cubic_until_idle() {
    // Where BBR may not be had, every rail stays with HX_TCP_CONGESTION (cubic).
    let latency = if congestion_allowed("bbr") {
        "bbr"
    } else {
        eprintln!("rails_run_bbr_until_...: BBR not allowed here, checking the fallback");
        "cubic"
    };
    let mut s = settings(false, 2);
    s.tcp_congestion = Some("cubic".into());
    s.tcp_congestion_latency = Some("bbr".into());
    let len = 64 << 20;
    pair(s, true, move |i, e, peer| {
        let peer = peer.unwrap();
        // Small messages both ways connect every rail and fill none.
        for n in 0..8u64 {
            let s = e.isend(1, peer, 1, n, vec![n as u8; 1000]).unwrap();
            let mut b = [0u8; 1000];
            e.recv(1, Some(peer), Some(n), &mut b).unwrap();
            e.wait(s).unwrap();
        }
        let cc = connected_cc(e, peer);
        assert!(!cc.is_empty() && cc.iter().all(|c| c == latency), "{cc:?}");
        // Engine 0 sends 64 MiB: the sockets it fills switch for good; engine 1 sent only
        // small frames.
        if i == 0 {
            e.send(1, peer, 1, 100, &pattern(9, len)).unwrap();
        } else {
            let r = e.irecv(1, Some(peer), Some(100), vec![0; len]).unwrap();
            let (_, buf) = e.wait_owned(r).unwrap();
            assert!(buf.unwrap() == pattern(9, len));
        }
        let mut b = [0u8; 1];
        let s = e.isend(1, peer, 1, 101, vec![1]).unwrap();
        e.recv(1, Some(peer), Some(101), &mut b).unwrap();
        e.wait(s).unwrap();
        let cc = connected_cc(e, peer);
        let cubic = cc.iter().filter(|c| *c == "cubic").count();
        match (i, latency) {
            (0, "bbr") => assert!(cubic >= 1, "the sender filled no rail: {cc:?}"),
            (1, "bbr") => assert_eq!(cubic, 0, "the receiver sent no bulk data: {cc:?}"),
            _ => assert_eq!(cubic, cc.len(), "{cc:?}"),
        }
        done(e, peer);
    });
    // One rail: after 64 MiB it runs cubic; idle for longer than BULK_CC_IDLE_MS, its next
    // write takes it back to BBR (cubic restarts a paced window after idle).
    let mut s = settings(false, 1);
    s.tcp_congestion = Some("cubic".into());
    s.tcp_congestion_latency = Some("bbr".into());
    pair(s, true, move |i, e, peer| {
        let peer = peer.unwrap();
        let len = 64 << 20;
        if i == 0 {
            e.send(1, peer, 1, 100, &pattern(3, len)).unwrap();
        } else {
            let r = e.irecv(1, Some(peer), Some(100), vec![0; len]).unwrap();
            let (_, buf) = e.wait_owned(r).unwrap();
            assert!(buf.unwrap() == pattern(3, len));
        }
        let mut b = [0u8; 1];
        let s = e.isend(1, peer, 1, 101, vec![1]).unwrap();
        e.recv(1, Some(peer), Some(101), &mut b).unwrap();
        e.wait(s).unwrap();
        let filled = connected_cc(e, peer);
        if i == 0 && latency == "bbr" {
            assert_eq!(filled, ["cubic"], "the sender's one rail did not switch");
        }
        std::thread::sleep(Duration::from_millis(300));
        let s = e.isend(1, peer, 1, 102, vec![2]).unwrap();
        e.recv(1, Some(peer), Some(102), &mut b).unwrap();
        e.wait(s).unwrap();
        let cc = connected_cc(e, peer);
        assert_eq!(cc, [latency], "after idle (before: {filled:?})");
        done(e, peer);
    });
    // `same`: one algorithm throughout.
    let mut s = settings(false, 2);
    s.tcp_congestion = Some("cubic".into());
    s.tcp_congestion_latency = None;
    pair(s, true, |_, e, peer| {
        let peer = peer.unwrap();
        let s = e.isend(1, peer, 1, 1, vec![0; 10]).unwrap();
        let mut b = [0u8; 10];
        e.recv(1, Some(peer), Some(1), &mut b).unwrap();
        e.wait(s).unwrap();
        let cc = connected_cc(e, peer);
        assert!(!cc.is_empty() && cc.iter().all(|c| c == "cubic"), "{cc:?}");
        done(e, peer);
    });
}

#[test]
fn rails_run_reno_throughout_by_default() {
    // The defaults, not the environment's: reno from the first packet, through 64 MiB of bulk
    // data each way (no switch: a socket BBR started would stay paced).
    let mut s = Settings::from_lookup(&|_: &str| None).unwrap();
    s.loopback_rails = 2;
    s.shm = false;
    s.connect_timeout = Duration::from_secs(10);
    assert_eq!(s.tcp_congestion.as_deref(), Some("reno"));
    assert_eq!(s.tcp_congestion_latency, None);
    pair(s, true, |i, e, peer| {
        let peer = peer.unwrap();
        let len = 64 << 20;
        for dir in 0..2 {
            if i == dir {
                e.send(1, peer, 1, dir as u64, &pattern(5, len)).unwrap();
            } else {
                let r = e
                    .irecv(1, Some(peer), Some(dir as u64), vec![0; len])
                    .unwrap();
                let (_, buf) = e.wait_owned(r).unwrap();
                assert!(buf.unwrap() == pattern(5, len));
            }
        }
        let cc = connected_cc(e, peer);
        assert!(!cc.is_empty() && cc.iter().all(|c| c == "reno"), "{cc:?}");
        done(e, peer);
    });
}

/// Two engines with settings `s` move 4 MiB each way (checked), then `look` sees each engine
/// and its peer, before either finalizes.
fn after_4_mib(s: Settings, look: impl Fn(&Engine, u32) + Send + Sync + Copy + 'static) {
    pair(s, true, move |_, e, peer| {
        let peer = peer.unwrap();
        let len = 4 << 20;
        let s = e.isend(1, peer, 1, 7, pattern(7, len)).unwrap();
        let r = e.irecv(1, Some(peer), Some(7), vec![0; len]).unwrap();
        let (_, buf) = e.wait_owned(r).unwrap();
        e.wait(s).unwrap();
        assert!(buf.unwrap() == pattern(7, len));
        look(e, peer);
        done(e, peer);
    });
}

#[test]
fn rail_rate_paces_every_rail_socket_just_above_it() {
    for (rate, want) in [(None, u64::MAX), (Some(1_000_000_000u64), 131_250_000u64)] {
        let mut s = settings(false, 2);
        s.rail_rate = rate;
        after_4_mib(s, move |e, peer| {
            let paced: Vec<u64> = e.rail_pacing(peer).into_iter().flatten().collect();
            assert!(!paced.is_empty(), "no rail connected");
            assert!(paced.iter().all(|&p| p == want), "{rate:?}: {paced:?}");
        });
    }
}

#[test]
fn buffer_settings_fix_every_rail_sockets_buffers() {
    // 96 and 80 KiB: below the default net.core.{w,r}mem_max, so no privilege needed; 0: the
    // kernel's.
    for (sndbuf, rcvbuf, want) in [
        (
            96 * 1024u32,
            80 * 1024u32,
            Some((192 * 1024usize, 160 * 1024usize)),
        ),
        (0, 0, None),
    ] {
        let mut s = settings(false, 2);
        s.send_buffer = sndbuf;
        s.receive_buffer = rcvbuf;
        after_4_mib(s, move |e, peer| {
            let snd: Vec<usize> = e.rail_send_buffers(peer).into_iter().flatten().collect();
            let rcv: Vec<usize> = e.rail_receive_buffers(peer).into_iter().flatten().collect();
            assert!(!snd.is_empty() && !rcv.is_empty(), "no rail connected");
            match want {
                Some((ws, wr)) => {
                    assert!(snd.iter().all(|&g| g == ws), "{sndbuf}: {snd:?}");
                    assert!(rcv.iter().all(|&g| g == wr), "{rcvbuf}: {rcv:?}");
                }
                // Left to the kernel: the send buffers grow with the 4 MiB just sent, the
                // receive buffers start at tcp_rmem's default and only grow from there.
                None => {
                    let rmem = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem").unwrap();
                    let start: usize = rmem.split_whitespace().nth(1).unwrap().parse().unwrap();
                    assert!(snd.iter().any(|&g| g > 192 * 1024), "{snd:?}");
                    assert!(
                        rcv.iter().all(|&g| g >= start && g != 160 * 1024),
                        "{rcv:?} (tcp_rmem {rmem})"
                    );
                }
            }
        });
    }
}

/// Neither side finalizes (closing its rails) before the other has looked at them.
fn done(e: &mut Engine, peer: u32) {
    let s = e.isend(1, peer, 1, 999, vec![0]).unwrap();
    let mut b = [0u8; 1];
    e.recv(1, Some(peer), Some(999), &mut b).unwrap();
    e.wait(s).unwrap();
}

/// Small same-host messages that answer the peer go through the lane beside the ring when they
/// can, the rest through the ring: a stream of both with one tag (which MPI must not let overtake), received
/// by receives posted ahead, by blocking receives (the express path) and after arriving
/// unexpected, in any mix, arrives in the order sent with every byte. With HX_SHM_LANE off, the
/// same stream never uses the lane.
#[test]
fn lane_and_ring_messages_keep_their_order() {
    for lane in [true, false] {
        let mut s = settings(true, 1);
        s.shm_lane = lane;
        pair(s, true, move |i, e, peer| {
            let peer = peer.unwrap();
            let n = 4000u64;
            let len_of = |k: u64| match k.wrapping_mul(0x9e37_79b9) % 11 {
                0 => 0,
                1..=5 => (k % 33) as usize,
                6 | 7 => 33 + (k % 200) as usize,
                8 | 9 => 1000 + (k % 9000) as usize,
                _ => 100_000,
            };
            if i == 0 {
                let mut sends = Vec::new();
                for k in 0..n {
                    // Every data word carries the message's index: the receiver checks order.
                    sends.push(e.isend(1, peer, 1, k, pattern(k, len_of(k))).unwrap());
                    if k % 64 == 63 {
                        for r in sends.drain(..) {
                            e.wait(r).unwrap();
                        }
                        // Let the receiver fall behind, or catch up.
                        let mut go = [0u8; 1];
                        e.recv(1, Some(peer), Some(u64::MAX), &mut go).unwrap();
                    }
                }
                for r in sends.drain(..) {
                    e.wait(r).unwrap();
                }
                // The lane carries answers once the reader has all of the ring: a stream's
                // messages mostly go through the ring, a ping-pong's through the lane.
                let before = e.lane_sent(peer);
                let mut b = [0u8; 32];
                for k in 0..200u64 {
                    e.send(1, peer, 1, k, &pattern(k, 32)).unwrap();
                    let st = e.recv(1, Some(peer), Some(k), &mut b).unwrap();
                    assert!(b[..st.len] == pattern(k + 1, 32));
                }
                let used = e.lane_sent(peer);
                if lane {
                    assert!(used - before >= 190, "{} of 200 pings", used - before);
                } else {
                    assert_eq!(used, 0, "the lane was used while off");
                }
                return;
            }
            let mut k = 0u64;
            let mut round = 0u64;
            while k < n {
                round += 1;
                let batch = (64 - k % 64).min(n - k);
                match round % 3 {
                    // Posted ahead, any tag.
                    0 => {
                        let rs: Vec<_> = (0..batch)
                            .map(|_| e.irecv(1, Some(peer), ANY_TAG, vec![0; 100_000]).unwrap())
                            .collect();
                        for r in rs {
                            let (st, buf) = e.wait_owned(r).unwrap();
                            assert_eq!(st.tag, k, "lane {lane}: out of order");
                            assert!(buf.unwrap()[..st.len] == pattern(k, len_of(k)));
                            k += 1;
                        }
                    }
                    // Blocking, any source and tag: small ones come the express way.
                    1 => {
                        let mut buf = vec![0u8; 100_000];
                        for _ in 0..batch {
                            let st = e.recv(1, ANY_SOURCE, ANY_TAG, &mut buf).unwrap();
                            assert_eq!(st.tag, k, "lane {lane}: out of order");
                            assert!(buf[..st.len] == pattern(k, len_of(k)));
                            k += 1;
                        }
                    }
                    // Let them arrive unexpected first, then receive them by tag.
                    _ => {
                        std::thread::sleep(Duration::from_millis(2));
                        while e
                            .probe(1, Some(peer), Some(k + batch - 1))
                            .unwrap()
                            .is_none()
                        {
                            std::thread::yield_now();
                        }
                        let mut buf = vec![0u8; 100_000];
                        for _ in 0..batch {
                            let st = e.recv(1, Some(peer), Some(k), &mut buf).unwrap();
                            assert_eq!(st.len, len_of(k));
                            assert!(buf[..st.len] == pattern(k, len_of(k)));
                            k += 1;
                        }
                    }
                }
                if k.is_multiple_of(64) && k < n {
                    e.send(1, peer, 1, u64::MAX, b"g").unwrap();
                }
            }
            let mut b = [0u8; 32];
            for k in 0..200u64 {
                let st = e.recv(1, Some(peer), Some(k), &mut b).unwrap();
                assert!(b[..st.len] == pattern(k, 32));
                e.send(1, peer, 1, k, &pattern(k + 1, 32)).unwrap();
            }
            let used = e.lane_sent(peer);
            assert_eq!(
                used > 190,
                lane,
                "lane {lane}: {used} answers through the lane"
            );
        });
    }
}

/// The provider's shortest paths: `send_now_lane` (answers only, nothing but the lane) and
/// `try_lane_express` (the named peer's lane alone). A lane message the filter does not take
/// is left for the full path, an empty lane never hides a ring message behind it, and order
/// holds across both.
#[test]
fn the_lane_alone_sends_answers_and_serves_them_in_order() {
    use hx_engine::{Express, Filter};
    let s = settings(true, 1);
    pair(s, true, |i, e, peer| {
        let peer = peer.unwrap();
        let rounds = 300u64;
        if i == 0 {
            // Not connected yet, and nothing has come from the peer: no lane.
            assert!(!e.send_now_lane(1, peer, 1, 0, None, b"first"));
            e.send(1, peer, 1, 0, b"first").unwrap();
            // Connected now, but still nothing to answer: a stream's message is framed.
            assert!(!e.send_now_lane(1, peer, 1, 0, None, b"second"));
            assert!(e.send_now_framed(1, peer, 1, 0, None, b"second").unwrap());
            let mut lane = 0;
            let mut b = [0u8; 64];
            for k in 1..=rounds {
                let st = e.recv(1, Some(peer), Some(k), &mut b).unwrap();
                assert!(b[..st.len] == pattern(k, st.len));
                let answer = pattern(k + 1, (k % 33) as usize);
                if e.send_now_lane(1, peer, 1, k, Some(k), &answer) {
                    lane += 1;
                } else {
                    e.send(1, peer, 1, k, &answer).unwrap();
                }
            }
            // (An answer that went framed stays in the ring until the receiver's next full
            // look publishes its tail, and the lane waits for that: the receiver here looks at
            // the lane alone for a while first.)
            assert!(
                lane > rounds / 2,
                "{lane} of {rounds} answers through the lane"
            );
            // A message the receiver's filter does not take, then one it does.
            let mut go = [0u8; 1];
            e.recv(1, Some(peer), Some(u64::MAX), &mut go).unwrap();
            assert!(e.send_now_lane(1, peer, 1, 7_000, None, b"not yours yet"));
            e.send(1, peer, 1, 7_001, &pattern(7_001, 20_000)).unwrap();
            return;
        }
        let mut b = [0u8; 64];
        // Looks at the lane alone for a while (a round would drain it into the core).
        let express = |e: &mut Engine, tag: u64, b: &mut [u8]| {
            let filter = Filter::new(Some(peer), Some(tag));
            let until = std::time::Instant::now() + Duration::from_millis(50);
            while std::time::Instant::now() < until {
                match e.try_lane_express(peer, 1, filter, b) {
                    Some(Express::Taken(st)) => return Some(st),
                    Some(_) => return None,
                    None => std::hint::spin_loop(),
                }
            }
            None
        };
        // The first two came framed: the lane never shows them.
        assert!(express(e, 0, &mut b).is_none());
        for first in [&b"first"[..], b"second"] {
            let st = e.recv(1, Some(peer), Some(0), &mut b).unwrap();
            assert_eq!(&b[..st.len], first);
        }
        let mut served = 0;
        for k in 1..=rounds {
            e.send(1, peer, 1, k, &pattern(k, 8)).unwrap();
            let st = match express(e, k, &mut b) {
                Some(st) => {
                    served += 1;
                    st
                }
                None => e.recv(1, Some(peer), Some(k), &mut b).unwrap(),
            };
            assert_eq!((st.source, st.tag), (peer, k));
            // Through the lane with the index as immediate data; framed by `send` without.
            assert!(
                st.data.is_none_or(|d| d == k),
                "round {k}: data {:?}",
                st.data
            );
            assert!(
                b[..st.len] == pattern(k + 1, (k % 33) as usize),
                "round {k}"
            );
        }
        assert!(
            served > rounds / 2,
            "{served} of {rounds} served from the lane"
        );
        e.send(1, peer, 1, u64::MAX, b"g").unwrap();
        // Tag 7000 waits in the lane; a receive for 7001 must not take it, nor pass it.
        let mut big = vec![0u8; 20_000];
        loop {
            match e.try_lane_express(peer, 1, Filter::new(Some(peer), Some(7_001)), &mut big) {
                Some(Express::Other) => break,
                Some(Express::Taken(st)) => panic!("took {st:?} past the lane's message"),
                _ => e.progress().unwrap(),
            }
        }
        let st = e.recv(1, Some(peer), Some(7_001), &mut big).unwrap();
        assert!(big[..st.len] == pattern(7_001, 20_000));
        let st = e.recv(1, Some(peer), Some(7_000), &mut b).unwrap();
        assert_eq!(&b[..st.len], b"not yours yet");
    });
}

/// A lane ticket (what the provider's CQ read serves a lone receive with, without the engine)
/// takes exactly what `try_lane_express` would: the lane's next message when the receive's
/// filter takes it and it fits, in order, nothing else; the engine, told afterwards, goes on
/// as if it had taken it itself.
#[test]
fn a_lane_ticket_takes_what_the_lane_would_and_nothing_else() {
    use hx_engine::Filter;
    let s = settings(true, 1);
    pair(s, true, |i, e, peer| {
        let peer = peer.unwrap();
        let rounds = 300u64;
        if i == 0 {
            e.send(1, peer, 1, 0, b"first").unwrap();
            let mut b = [0u8; 64];
            for k in 1..=rounds {
                let st = e.recv(1, Some(peer), Some(k), &mut b).unwrap();
                assert!(b[..st.len] == pattern(k, st.len));
                let answer = pattern(k + 1, (k % 33) as usize);
                if !e.send_now_lane(1, peer, 1, k, Some(k), &answer) {
                    e.send(1, peer, 1, k, &answer).unwrap();
                }
            }
            // One the ticket's filter does not take, then one too long for its buffer, then
            // one it takes.
            let mut go = [0u8; 1];
            e.recv(1, Some(peer), Some(u64::MAX), &mut go).unwrap();
            assert!(e.send_now_lane(1, peer, 1, 7_000, None, b"not yours"));
            e.recv(1, Some(peer), Some(u64::MAX), &mut go).unwrap();
            assert!(e.send_now_lane(1, peer, 1, 7_001, None, b"too long for four"));
            e.recv(1, Some(peer), Some(u64::MAX), &mut go).unwrap();
            assert!(e.send_now_lane(1, peer, 1, 7_002, Some(9), b"yours"));
            e.recv(1, Some(peer), Some(u64::MAX), &mut go).unwrap();
            return;
        }
        let mut b = [0u8; 64];
        let st = e.recv(1, Some(peer), Some(0), &mut b).unwrap();
        assert_eq!(&b[..st.len], b"first");
        // Spins on a ticket for a while (as the provider's idle reads do), telling the engine
        // of what it took; None if nothing came that it takes.
        let ticketed = |e: &mut Engine, tag: u64, b: &mut [u8]| {
            let t = e.lane_ticket(peer, 1, Filter::new(Some(peer), Some(tag)))?;
            let until = std::time::Instant::now() + Duration::from_millis(50);
            while std::time::Instant::now() < until {
                // SAFETY: the engine is not called while the ticket is in use.
                if let Some(st) = unsafe { t.take(b) } {
                    e.lane_ticket_taken(&st);
                    return Some(st);
                }
                std::hint::spin_loop();
            }
            None
        };
        let mut served = 0;
        for k in 1..=rounds {
            e.send(1, peer, 1, k, &pattern(k, 8)).unwrap();
            let st = match ticketed(e, k, &mut b) {
                Some(st) => {
                    served += 1;
                    // Only the lane's messages carry the index as immediate data here.
                    assert_eq!(st.data, Some(k), "round {k}");
                    st
                }
                None => e.recv(1, Some(peer), Some(k), &mut b).unwrap(),
            };
            assert_eq!((st.source, st.tag), (peer, k));
            assert!(
                b[..st.len] == pattern(k + 1, (k % 33) as usize),
                "round {k}"
            );
        }
        assert!(served > rounds / 2, "{served} of {rounds} taken by tickets");
        // Another tag waits in the lane: the ticket takes nothing, and it stays first.
        e.send(1, peer, 1, u64::MAX, b"g").unwrap();
        assert!(ticketed(e, 7_001, &mut b).is_none());
        let st = e.recv(1, Some(peer), Some(7_000), &mut b).unwrap();
        assert_eq!(&b[..st.len], b"not yours");
        // Too long for the buffer: left for the engine, which reports the truncation.
        e.send(1, peer, 1, u64::MAX, b"g").unwrap();
        let mut four = [0u8; 4];
        assert!(ticketed(e, 7_001, &mut four).is_none());
        match e.recv(1, Some(peer), Some(7_001), &mut four) {
            Err(hx_engine::Error::Truncated(st)) => assert_eq!((st.len, &four), (17, b"too ")),
            r => panic!("not truncated: {r:?}"),
        }
        // Taken, with its data, and the engine goes on.
        e.send(1, peer, 1, u64::MAX, b"g").unwrap();
        let st = ticketed(e, 7_002, &mut b).expect("the ticket's message");
        assert_eq!(
            (&b[..st.len], st.data, st.tag),
            (&b"yours"[..], Some(9), 7_002)
        );
        e.send(1, peer, 1, u64::MAX, b"g").unwrap();
    });
}

/// One side of a ping-pong on lane holds (as the provider runs it): each receive taken by the
/// hold's ticket, each send through the hold, else the engine's own way after telling it of
/// the run (which ends it).
struct HeldSide {
    peer: u32,
    tag_in: u64,
    hold: Option<hx_engine::LaneHold>,
    rx: (u64, u64),
    tx: (u64, u64),
    held_rx: u64,
    held_tx: u64,
    longest_run: u64,
}

impl HeldSide {
    fn new(peer: u32, tag_in: u64) -> Self {
        HeldSide {
            peer,
            tag_in,
            hold: None,
            rx: (0, 0),
            tx: (0, 0),
            held_rx: 0,
            held_tx: 0,
            longest_run: 0,
        }
    }

    fn settle(&mut self, e: &mut Engine) {
        if self.hold.take().is_some() {
            e.lane_hold_settled(self.peer, self.rx, self.tx);
            self.longest_run = self.longest_run.max(self.tx.0);
        }
        self.rx = (0, 0);
        self.tx = (0, 0);
    }

    fn recv(&mut self, e: &mut Engine, b: &mut [u8]) -> hx_engine::Status {
        if self.hold.is_none() {
            // From the peer's endpoint 1, as the provider's directed receives name it.
            let mut f = hx_engine::Filter::new(Some(self.peer), Some(self.tag_in));
            f.src_ep = Some(1);
            self.hold = e.lane_ticket(self.peer, 1, f).and_then(|t| e.lane_hold(&t));
        }
        let mut taken = None;
        if let Some(h) = &self.hold {
            // Waits as the provider does: on the doorbells, until the lane's message is taken
            // or something else rang (a message the engine's way: a credit grant, an answer
            // through the ring), which ends the wait.
            let mut bells = Vec::new();
            // SAFETY: the engine is not called while the hold lasts.
            let watched = unsafe { h.bells(&mut bells) };
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while watched && taken.is_none() && std::time::Instant::now() < until {
                // SAFETY: as above; the doorbells' links are untouched.
                let rung = bells.iter().any(|d| unsafe { d.rung() });
                // SAFETY: as above.
                taken = unsafe { h.ticket().take(b) };
                // Rung, and the lane had nothing this receive takes: the engine's way.
                if rung {
                    break;
                }
            }
        }
        if let Some(st) = taken {
            self.rx.0 += 1;
            self.rx.1 += st.len as u64;
            self.held_rx += 1;
            return st;
        }
        self.settle(e);
        e.recv(1, Some(self.peer), Some(self.tag_in), b).unwrap()
    }

    fn send(&mut self, e: &mut Engine, tag: u64, data: u64, m: &[u8]) {
        // SAFETY: as in recv.
        if let Some(h) = self.hold.as_mut() {
            if unsafe { h.send(tag, Some(data), m) } {
                self.tx.0 += 1;
                self.tx.1 += m.len() as u64;
                self.held_tx += 1;
                return;
            }
        }
        self.settle(e);
        if !e.send_now_lane(1, self.peer, 1, tag, Some(data), m) {
            e.send(1, self.peer, 1, tag, m).unwrap();
        }
    }
}

/// Lane holds (what the provider runs a ping-pong's receives and answers on, without the
/// engine) carry runs of receives and answers on both sides, the answers within the eager
/// credit the core gave (neither side's core hears of what it consumed, so grants none,
/// until its run ends); the engines, told afterwards, go on as if they had moved it all.
#[test]
fn lane_holds_carry_receives_and_answers_within_their_credit() {
    let mut s = settings(true, 1);
    // Room for ~900 answers of 8 bytes (each counts 64 bytes more) between grants.
    s.protocol.eager_credits = 64 * 1024;
    let credit_answers = 64 * 1024 / (8 + 64);
    pair(s, true, move |i, e, peer| {
        let peer = peer.unwrap();
        let rounds = 4000u64;
        let mut b = [0u8; 64];
        let mut side = HeldSide::new(peer, if i == 0 { 6 } else { 5 });
        for k in 0..rounds {
            if i == 0 {
                side.send(e, 5, k, &pattern(k, 8));
            }
            let st = side.recv(e, &mut b);
            assert_eq!((st.source, st.tag), (peer, side.tag_in), "round {k}");
            assert_eq!(st.data.unwrap_or(k), k, "round {k}");
            assert!(b[..st.len] == pattern(k + 1 - i as u64, 8), "round {k}");
            if i == 1 {
                side.send(e, 6, k, &pattern(k + 1, 8));
            }
        }
        side.settle(e);
        assert!(side.held_rx > rounds / 2, "{} taken by holds", side.held_rx);
        assert!(side.held_tx > rounds / 2, "{} sent by holds", side.held_tx);
        // No run spent more credit than there was, and some run spent nearly all of it: the
        // credit, not something else, ended it.
        assert!(side.longest_run <= credit_answers, "{}", side.longest_run);
        assert!(
            side.longest_run >= credit_answers * 9 / 10,
            "the longest run sent {} of {credit_answers}",
            side.longest_run
        );
        // The engines go on: their counts and credit are where they would be.
        if i == 0 {
            e.send(1, peer, 1, 7, b"after").unwrap();
        } else {
            let st = e.recv(1, Some(peer), Some(7), &mut b).unwrap();
            assert_eq!(&b[..st.len], b"after");
        }
    });
}
