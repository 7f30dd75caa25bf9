//! What the engine's integration tests share: settings for engines of one process, and a pair of
//! engines that know each other only by address.

use std::sync::mpsc;
use std::time::Duration;

use hx_engine::{Engine, Settings};

pub const SECRET: [u8; 32] = [3; 32];

pub fn settings(shm: bool, rails: usize) -> Settings {
    let mut s = Settings::from_env().unwrap();
    s.loopback_rails = rails;
    s.shm = shm;
    s.connect_timeout = Duration::from_secs(10);
    s
}

/// Two engines; each gets the other's address through a channel and runs `f(engine, peer)`.
pub fn pair<F>(s: Settings, introduce_both: bool, f: F)
where
    F: Fn(usize, &mut Engine, Option<u32>) + Send + Sync + Clone + 'static,
{
    let (tx0, rx0) = mpsc::channel::<[u8; 64]>();
    let (tx1, rx1) = mpsc::channel::<[u8; 64]>();
    let chans = [(tx1, rx0), (tx0, rx1)];
    let handles: Vec<_> = chans
        .into_iter()
        .enumerate()
        .map(|(i, (tx, rx))| {
            let (f, s) = (f.clone(), s.clone());
            std::thread::spawn(move || {
                let mut e = Engine::open(s, SECRET, None).unwrap();
                e.open_endpoint(1).unwrap();
                tx.send(e.address(1)).unwrap();
                let theirs = rx.recv().unwrap();
                let peer = if introduce_both || i == 0 {
                    let (p, ep) = e.insert(&theirs).unwrap();
                    assert_eq!(ep, 1);
                    assert_eq!(e.insert(&theirs).unwrap().0, p, "same address, same peer");
                    Some(p)
                } else {
                    None
                };
                f(i, &mut e, peer);
                e.finalize().unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().expect("engine thread panicked");
    }
}
