//! Callers that poll the engine in a loop ([`Engine::progress_polled`], as the libfabric
//! provider's CQ reads do for Open MPI, or [`Engine::test`], as a C program's hx_test loop
//! does) and find themselves on one CPU: each hands the CPU to the other within a few dozen
//! idle rounds. Without that, a rank woken onto the CPU of a spinning one waited for the
//! spinner's time slice (a scheduler tick, 4 ms at HZ=250) twice per round trip: 3.5-5 ms lost
//! at every turn of a bandwidth test's window (BENCHMARKS.md, "The bulk-wait loss was two
//! ranks on one CPU").
//!
//! Its own test binary: other tests running beside it would spin on the CPU it pins to.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use hx_engine::{Engine, Request, Status};
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

mod common;
use common::{pair, settings};

/// How a rank waits for a request without blocking.
#[derive(Clone, Copy, Debug)]
enum Poll {
    /// As the provider does: progress_polled, then the finished list.
    Polled,
    /// As a C program calling hx_test in a loop does.
    Test,
}

fn poll_until(e: &mut Engine, how: Poll, req: Request, finished: &mut HashSet<Request>) -> Status {
    match how {
        Poll::Polled => {
            let mut batch = Vec::new();
            while !finished.remove(&req) {
                e.progress_polled().unwrap();
                e.take_finished(&mut batch);
                finished.extend(batch.drain(..));
            }
            e.test(req).unwrap().expect("reported finished")
        }
        Poll::Test => loop {
            if let Some(st) = e.test(req).unwrap() {
                return st;
            }
        },
    }
}

#[test]
fn polling_engines_on_one_cpu_hand_it_to_each_other() {
    let allowed = sched_getaffinity(Pid::from_raw(0)).unwrap();
    let cpu = (0..CpuSet::count())
        .find(|&c| allowed.is_set(c).unwrap_or(false))
        .unwrap();
    const ROUNDS: usize = 40;
    const BATCHES: usize = 3;
    // 4 socket rails (more than the engine reads directly while spinning): each idle round is
    // an epoll_wait, as between two testbed hosts. Shared memory: rounds without syscalls.
    for (shm, rails, how) in [
        (false, 4, Poll::Polled),
        (true, 1, Poll::Polled),
        (false, 4, Poll::Test),
        (true, 1, Poll::Test),
    ] {
        pair(settings(shm, rails), true, move |i, e, peer| {
            let mut only = CpuSet::new();
            only.set(cpu).unwrap();
            sched_setaffinity(Pid::from_raw(0), &only).unwrap();
            let peer = peer.unwrap();
            if matches!(how, Poll::Polled) {
                e.track_finished();
            }
            let mut finished = HashSet::new();
            let mut best = Duration::MAX;
            // A warmup batch connects the rails, then timed batches.
            for batch in 0..=BATCHES {
                let t = Instant::now();
                for n in 0..ROUNDS {
                    let tag = (batch * ROUNDS + n) as u64;
                    let payload = vec![i as u8; 8];
                    if i == 0 {
                        let s = e.isend(1, peer, 1, tag, payload).unwrap();
                        poll_until(e, how, s, &mut finished);
                        let r = e.irecv(1, Some(peer), Some(tag), vec![0; 8]).unwrap();
                        assert_eq!(poll_until(e, how, r, &mut finished).len, 8);
                    } else {
                        let r = e.irecv(1, Some(peer), Some(tag), vec![0; 8]).unwrap();
                        assert_eq!(poll_until(e, how, r, &mut finished).len, 8);
                        let s = e.isend(1, peer, 1, tag, payload).unwrap();
                        poll_until(e, how, s, &mut finished);
                    }
                }
                if batch > 0 {
                    best = best.min(t.elapsed());
                }
            }
            let per_round_trip = best / ROUNDS as u32;
            // Handing over within 64 idle rounds takes tens of us; waiting for time slices took
            // milliseconds per round trip.
            assert!(
                per_round_trip < Duration::from_millis(1),
                "shm {shm}, {how:?}, engine {i}: {per_round_trip:?} per round trip on one \
                 CPU (fastest of {BATCHES} batches of {ROUNDS}): the engines waited for each \
                 other's time slice instead of yielding"
            );
        });
    }
}
