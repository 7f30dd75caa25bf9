//! The connecting process of tests/shm.rs, as a binary of its own
//! (`hx-transport-test-shm-child`, declared in Cargo.toml; the tests find it through
//! `CARGO_BIN_EXE_hx-transport-test-shm-child`). It was a `#[test]` function, a no-op unless the
//! test executable re-ran itself with HX_SHM_CHILD set, and so counted as a passed test
//! (issue 11). It connects to the abstract socket HX_SHM_CHILD (as rank 3, link 1) and, by
//! HX_SHM_MODE: `echo` echoes until EOF; `hang` sleeps a minute; `bench` serves
//! `bench_two_processes`.

use std::io::ErrorKind;
use std::time::Duration;

use hx_transport::shm;
use hx_transport::Link;

#[path = "../shm_io/mod.rs"]
mod shm_io;
use shm_io::{read_exact, wait, write_all, SECRET, SLEEPY, T};

fn main() {
    let name = std::env::var("HX_SHM_CHILD").expect("HX_SHM_CHILD: the socket to connect to");
    let mode = std::env::var("HX_SHM_MODE").unwrap();
    // The bench may give the listener larger rings (HX_SHM_CAP); accept what it was told.
    let max = std::env::var("HX_SHM_CAP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(shm::DEFAULT_CAPACITY);
    let mut l = shm::connect_with_max(&name, &SECRET, 3, 1, max, T).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    match mode.as_str() {
        // Echo everything until EOF, sleeping when idle.
        "echo" => loop {
            match l.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => write_all(&mut l, &buf[..n], false).unwrap(),
                Err(e) if e.kind() == ErrorKind::WouldBlock => wait(&mut l, false),
                Err(e) => panic!("{e}"),
            }
        },
        "hang" => std::thread::sleep(Duration::from_secs(60)),
        // Spinning ping-pong of 8-byte messages, then a byte sink with a final ack.
        "bench" => {
            let mut head = [0u8; 16];
            read_exact(&mut l, &mut head, true).unwrap();
            let iters = u64::from_le_bytes(head[..8].try_into().unwrap());
            let bytes = u64::from_le_bytes(head[8..].try_into().unwrap());
            let mut m = [0u8; 8];
            for _ in 0..iters {
                read_exact(&mut l, &mut m, true).unwrap();
                write_all(&mut l, &m, true).unwrap();
            }
            let mut big = vec![0u8; 4 << 20];
            let mut got = 0u64;
            while got < bytes {
                let want = ((bytes - got) as usize).min(big.len());
                read_exact(&mut l, &mut big[..want], true).unwrap();
                got += want as u64;
            }
            write_all(&mut l, b"k", true).unwrap();
            // Ping-pong again, both sides sleeping in poll() between messages.
            for _ in 0..SLEEPY {
                read_exact(&mut l, &mut m, false).unwrap();
                write_all(&mut l, &m, false).unwrap();
            }
            read_exact(&mut l, &mut m[..1], false).unwrap_err(); // EOF when the parent drops
        }
        m => panic!("mode {m}"),
    }
}
