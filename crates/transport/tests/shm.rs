//! Shared-memory links between real processes: the connecting process is the helper binary
//! `hx-transport-test-shm-child` (tests/bin/shm_child.rs), not this test executable run again
//! (issue 11).

use std::io::{ErrorKind, IoSlice};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use hx_transport::shm;
use hx_transport::Link;

mod shm_io;
use shm_io::{read_exact, wait, write_all, SECRET, SLEEPY, T};

fn sock_name(tag: &str) -> String {
    format!("hxcomm-test-{}-{tag}", std::process::id())
}

/// Starts the connecting process for socket `name` in `mode` (see tests/bin/shm_child.rs).
fn spawn_child(name: &str, mode: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_hx-transport-test-shm-child"))
        .env("HX_SHM_CHILD", name)
        .env("HX_SHM_MODE", mode)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn two_processes_echo_and_eof() {
    let name = sock_name("echo");
    let mut listener = shm::listen(&name).unwrap();
    listener.set_capacity(1 << 16).unwrap();
    let mut child = spawn_child(&name, "echo");
    let (mut l, hello) = listener.accept(&SECRET, T).unwrap();
    assert_eq!(hello, shm::PeerHello { rank: 3, index: 1 });
    assert_eq!(l.capacity(), 1 << 16);
    let data: Vec<u8> = (0..5_000_000u32).map(|i| (i * 31 + i / 7) as u8).collect();
    let mut got = Vec::with_capacity(data.len());
    let mut sent = 0;
    let mut buf = vec![0u8; 10_007];
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < data.len() {
        assert!(Instant::now() < deadline, "stalled");
        let mut idle = true;
        if sent < data.len() {
            let end = (sent + 77_777).min(data.len());
            match l.write_vectored(&[IoSlice::new(&data[sent..end])]) {
                Ok(n) => (sent, idle) = (sent + n, false),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        match l.read(&mut buf) {
            Ok(0) => panic!("EOF"),
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                idle = false;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
        if idle {
            wait(&mut l, false);
        }
    }
    assert!(got == data, "echo differs");
    drop(l);
    assert!(child.wait().unwrap().success(), "child did not see EOF");
}

#[test]
fn wrong_secret_and_strangers_are_refused() {
    let name = sock_name("secret");
    let listener = shm::listen(&name).unwrap();
    assert_eq!(
        shm::listen(&name).err().unwrap().kind(),
        ErrorKind::AddrInUse
    );
    let n2 = name.clone();
    let t = std::thread::spawn(move || shm::connect(&n2, &[8; 32], 1, 0, T));
    let e = listener.accept(&SECRET, T).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    let e = t.join().unwrap().err().unwrap();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    // A stranger speaking something else.
    let n2 = name.clone();
    let t = std::thread::spawn(move || {
        use std::io::Write;
        use std::os::linux::net::SocketAddrExt;
        let a = std::os::unix::net::SocketAddr::from_abstract_name(n2.as_bytes()).unwrap();
        let mut s = std::os::unix::net::UnixStream::connect_addr(&a).unwrap();
        s.write_all(&[0x47; 60]).unwrap();
        s
    });
    let e = listener.accept(&SECRET, T).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    drop(t.join().unwrap());
    // A silent stranger costs the timeout, nothing more.
    let n2 = name.clone();
    let t = std::thread::spawn(move || {
        use std::os::linux::net::SocketAddrExt;
        let a = std::os::unix::net::SocketAddr::from_abstract_name(n2.as_bytes()).unwrap();
        let s = std::os::unix::net::UnixStream::connect_addr(&a).unwrap();
        std::thread::sleep(Duration::from_millis(500));
        s
    });
    let e = listener
        .accept(&SECRET, Duration::from_millis(100))
        .err()
        .unwrap();
    assert!(
        matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{e}"
    );
    drop(t.join().unwrap());
    // And the right secret still works afterwards.
    let n2 = name.clone();
    let t = std::thread::spawn(move || shm::connect(&n2, &SECRET, 9, 2, T).unwrap());
    let (_l, hello) = listener.accept(&SECRET, T).unwrap();
    assert_eq!(hello, shm::PeerHello { rank: 9, index: 2 });
    t.join().unwrap();
}

#[test]
fn connect_waits_for_listener() {
    let name = sock_name("late");
    let n2 = name.clone();
    let t = std::thread::spawn(move || shm::connect(&n2, &SECRET, 1, 0, T));
    std::thread::sleep(Duration::from_millis(100));
    let listener = shm::listen(&name).unwrap();
    let (mut a, _) = listener.accept(&SECRET, T).unwrap();
    let mut b = t.join().unwrap().unwrap();
    write_all(&mut b, b"late but here", false).unwrap();
    let mut m = [0u8; 13];
    read_exact(&mut a, &mut m, false).unwrap();
    assert_eq!(&m, b"late but here");
    let e = shm::connect(
        &sock_name("nobody"),
        &SECRET,
        1,
        0,
        Duration::from_millis(50),
    )
    .err()
    .unwrap();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
}

#[test]
fn killed_peer_is_noticed() {
    let name = sock_name("kill");
    let listener = shm::listen(&name).unwrap();
    let mut child = spawn_child(&name, "hang");
    let (mut l, _) = listener.accept(&SECRET, T).unwrap();
    write_all(&mut l, b"into the void", false).unwrap();
    assert!(l.arm(), "nothing to do yet");
    child.kill().unwrap();
    child.wait().unwrap();
    let t0 = Instant::now();
    let mut buf = [0u8; 8];
    let e = read_exact(&mut l, &mut buf, false).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "slow: {:?}",
        t0.elapsed()
    );
    let e = l.write_vectored(&[IoSlice::new(b"x")]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BrokenPipe);
}

/// `cargo test --release -p hx-transport --test shm -- --ignored --nocapture bench`
#[test]
#[ignore]
fn bench_two_processes() {
    let name = sock_name("bench");
    let mut listener = shm::listen(&name).unwrap();
    let cap: usize = std::env::var("HX_SHM_CAP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(shm::DEFAULT_CAPACITY);
    listener.set_capacity(cap).unwrap();
    let mut child = spawn_child(&name, "bench");
    let (mut l, _) = listener.accept(&SECRET, T).unwrap();
    let iters = 200_000u64;
    let msg = 4usize << 20;
    let count = 500u64;
    let mut head = [0u8; 16];
    head[..8].copy_from_slice(&iters.to_le_bytes());
    head[8..].copy_from_slice(&(msg as u64 * count).to_le_bytes());
    write_all(&mut l, &head, true).unwrap();
    let mut m = [0u8; 8];
    let mut samples = Vec::new();
    let mut t0 = Instant::now();
    for i in 0..iters {
        write_all(&mut l, &i.to_le_bytes(), true).unwrap();
        read_exact(&mut l, &mut m, true).unwrap();
        assert_eq!(u64::from_le_bytes(m), i);
        if i % 10_000 == 9_999 {
            samples.push(t0.elapsed().as_secs_f64() * 1e6 / 10_000.0);
            t0 = Instant::now();
        }
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "shm ping-pong 8 B round trip: min {:.3} us, median {:.3} us (batches of 10k, capacity {cap})",
        samples[0],
        samples[samples.len() / 2]
    );
    let data = vec![0x5au8; msg];
    let t0 = Instant::now();
    for _ in 0..count {
        write_all(&mut l, &data, true).unwrap();
    }
    read_exact(&mut l, &mut m[..1], true).unwrap();
    let s = t0.elapsed().as_secs_f64();
    println!(
        "shm stream {} x {} MiB: {:.2} GB/s",
        count,
        msg >> 20,
        (msg as f64 * count as f64) / s / 1e9
    );
    let t0 = Instant::now();
    for i in 0..SLEEPY {
        write_all(&mut l, &i.to_le_bytes(), false).unwrap();
        read_exact(&mut l, &mut m, false).unwrap();
        assert_eq!(u64::from_le_bytes(m), i);
    }
    println!(
        "shm ping-pong 8 B, both sides sleeping (arm + poll on fd): {:.2} us round trip",
        t0.elapsed().as_secs_f64() * 1e6 / SLEEPY as f64
    );
    // Single-core memcpy of the same size, for scale.
    let mut dst = vec![0u8; msg];
    let t0 = Instant::now();
    for i in 0..count {
        dst.copy_from_slice(&data);
        std::hint::black_box(&mut dst[i as usize % msg]);
    }
    let s = t0.elapsed().as_secs_f64();
    println!(
        "memcpy {} MiB: {:.2} GB/s",
        msg >> 20,
        (msg as f64 * count as f64) / s / 1e9
    );
    // The raw floor in the same conditions: two threads bouncing one cache line.
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let line = Arc::new(AtomicU64::new(0));
    let l2 = line.clone();
    let t = std::thread::spawn(move || {
        for i in 0..iters {
            while l2.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            l2.store(2 * i + 2, Ordering::Release);
        }
    });
    let t0 = Instant::now();
    for i in 0..iters {
        line.store(2 * i + 1, Ordering::Release);
        while line.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    println!(
        "raw cache-line ping-pong (threads): {:.3} us round trip",
        t0.elapsed().as_secs_f64() * 1e6 / iters as f64
    );
    t.join().unwrap();
    drop(l);
    assert!(child.wait().unwrap().success());
}

/// In-place reads (peek/consume) see exactly the bytes written, up to the ring's wrap, consume
/// only what they are told, mix with plain reads, and `ready` says when there is anything.
#[test]
fn peek_and_consume_read_in_place() {
    let (mut a, mut b) = shm::pair(4096).unwrap();
    let cap = b.capacity();
    assert!(!b.ready());
    assert!(b.peek().is_none());
    let mut sent = Vec::new();
    let mut got = Vec::new();
    let mut x = 0u8;
    // Odd-sized writes walk the ring across its wrap many times.
    for round in 0..200 {
        let len = 1 + (round * 37) % 1500;
        let chunk: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_add(1);
                x
            })
            .collect();
        assert_eq!(a.write_vectored(&[IoSlice::new(&chunk)]).unwrap(), len);
        sent.extend_from_slice(&chunk);
        assert!(b.ready());
        // Take it in pieces: half in place, the rest by read.
        let shown = b.peek().unwrap().len();
        assert!(shown <= len && shown <= cap);
        let take = shown.div_ceil(2);
        got.extend_from_slice(&b.peek().unwrap()[..take]);
        b.consume(take);
        let mut rest = vec![0u8; len - take];
        read_exact(&mut b, &mut rest, true).unwrap();
        got.extend_from_slice(&rest);
        assert!(!b.ready());
    }
    assert_eq!(got, sent);
    // Consuming more than was shown hands back only what was there.
    a.write_vectored(&[IoSlice::new(b"xyz")]).unwrap();
    assert_eq!(b.peek().unwrap(), b"xyz");
    b.consume(100);
    assert!(!b.ready());
    assert!(b.peek().is_none());
    // A closed peer makes the link ready (the read then sees the end).
    drop(a);
    assert!(b.ready());
    assert_eq!(b.read(&mut [0u8; 8]).unwrap(), 0);
}
