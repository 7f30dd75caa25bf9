//! Deterministic scenarios and property tests of the protocol core over the simulator.

mod common;

use common::{
    pattern, run_lossless_scenario, run_scenario, run_scenario_transcripts,
    run_scenario_with_faults, small_config, Msg,
};
use hx_protocol::sim::{Cluster, Rng};
use hx_protocol::wire::{FrameHeader, FrameKind};
use hx_protocol::{Completion, Config, Policy, ProtoError};
use proptest::prelude::*;

fn msg_strategy(ranks: u32, max_len: usize) -> impl Strategy<Value = Msg> {
    (
        0..ranks,
        1..ranks,
        prop_oneof![0..64usize, 0..4096usize, 0..max_len],
    )
        .prop_map(move |(src, off, len)| Msg {
            src,
            dst: (src + off) % ranks,
            len,
        })
}

fn scenario_strategy() -> impl Strategy<Value = (usize, usize, Vec<Msg>, u64, usize)> {
    (2usize..=4, 1usize..=4, any::<u64>(), 0usize..4).prop_flat_map(|(ranks, rails, seed, pol)| {
        (
            Just(ranks),
            Just(rails),
            proptest::collection::vec(msg_strategy(ranks as u32, 200_000), 1..40),
            Just(seed),
            Just(pol),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    /// Random sizes, rails, policies and interleavings: every message arrives byte-exact, once,
    /// and in send order per pair.
    #[test]
    fn random_traffic_arrives_exactly((ranks, rails, msgs, seed, pol) in scenario_strategy()) {
        let mut rng = Rng::new(seed);
        let cfg = small_config(Policy::ALL[pol], &mut rng);
        if let Err(e) = run_scenario(ranks, rails, cfg.clone(), &msgs, seed) {
            panic!("{e}\nconfig {cfg:?}");
        }
    }

    /// Shared memory: small sends written straight into the ring when nothing is queued (cut
    /// off where the ring is full), mixed with queued ones: every message arrives byte-exact,
    /// once, and in send order per pair.
    #[test]
    fn shared_memory_fast_path_arrives_exactly(
        (ranks, _, msgs, seed, pol) in scenario_strategy(),
    ) {
        let mut rng = Rng::new(seed);
        let cfg = small_config(Policy::ALL[pol], &mut rng);
        if let Err(e) = run_lossless_scenario(ranks, cfg.clone(), &msgs, seed) {
            panic!("{e}\nconfig {cfg:?}");
        }
    }

    /// Rails cut and restored at random points of random transfers: still every message arrives
    /// byte-exact, once, and in send order per pair.
    #[test]
    fn rail_failures_lose_nothing((ranks, rails, msgs, seed, pol) in scenario_strategy(), every in 20usize..400) {
        let mut rng = Rng::new(seed);
        let cfg = small_config(Policy::ALL[pol], &mut rng);
        if let Err(e) = run_scenario_with_faults(ranks, rails, cfg.clone(), &msgs, seed, every) {
            panic!("{e}\nconfig {cfg:?}");
        }
    }

    /// Over one rail per pair every policy makes the same choices (there is nothing to share
    /// out), so a lone rail's figures differ by policy only by the machine's noise: the same
    /// random traffic and interleaving under each policy puts the same frames, in the same
    /// order, on every pipe (a Cts's buffer address aside: the receive's heap address).
    #[test]
    fn a_lone_rail_carries_the_same_frames_under_every_policy(
        (ranks, _, msgs, seed, _) in scenario_strategy(),
    ) {
        let mut rng = Rng::new(seed);
        let cfg = small_config(Policy::Adaptive, &mut rng);
        let mut first: Option<(Policy, Vec<Vec<Frame>>)> = None;
        for policy in Policy::ALL {
            let cfg = Config { policy, ..cfg.clone() };
            let t = run_scenario_transcripts(ranks, cfg.clone(), &msgs, seed)
                .unwrap_or_else(|e| panic!("{e}\nconfig {cfg:?}"));
            let t: Vec<Vec<Frame>> = t.iter().map(|p| frames(p)).collect();
            prop_assert!(t.iter().any(|p| !p.is_empty()), "nothing was carried");
            match &first {
                None => first = Some((policy, t)),
                Some((p0, t0)) => {
                    for (pipe, (a, b)) in t.iter().zip(t0).enumerate() {
                        let at = a.iter().zip(b).position(|(x, y)| x != y);
                        prop_assert!(
                            at.is_none() && a.len() == b.len(),
                            "pipe {}: {:?} and {:?} differ at frame {:?} of {} / {}: {:?} / {:?}",
                            pipe, policy, p0, at, a.len(), b.len(),
                            at.map(|i| &a[i].0), at.map(|i| &b[i].0)
                        );
                    }
                }
            }
        }
    }

    /// Garbage on a rail is an error naming the peer and rail, never a panic.
    #[test]
    fn garbage_is_an_error(bytes in proptest::collection::vec(any::<u8>(), 1..200), seed in any::<u64>()) {
        let mut sim = Cluster::new(2, 1, Config::default(), seed);
        sim.inject(1, 0, 0, &bytes);
        let mut err = None;
        for _ in 0..1000 {
            match sim.step() {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => { err = Some(e); break; }
            }
        }
        if let Some(e) = err {
            let peer = match e {
                ProtoError::Wire { peer, .. } | ProtoError::Unexpected { peer, .. } => peer,
                other => panic!("unexpected error {other}"),
            };
            prop_assert_eq!(peer, 1);
        }
    }
}

/// Shared memory's in-place reads (Core::rx_express) take the small eager frames that meet a
/// posted receive; the rest (large, behind a partly read frame) goes the staging way. Receives
/// posted first (some any-source, any-tag), then each message sent when the one before has
/// arrived, as in a ping-pong: every byte and status checked, and the in-place path taken.
#[test]
fn in_place_reads_deliver_small_messages() {
    for (k, pol) in Policy::ALL.into_iter().enumerate() {
        let cfg = Config {
            policy: pol,
            ..Config::default()
        };
        let mut sim = Cluster::new(2, 1, cfg, 5 + k as u64);
        sim.enable_lossless();
        let sizes = [0usize, 1, 8, 100, 1000, 3000, 0, 8, 40_000];
        let n = 200;
        let recvs: Vec<_> = (0..n)
            .map(|i| {
                let (src, tag) = if i % 5 == 0 {
                    (None, None)
                } else {
                    (Some(0), Some(i as u64))
                };
                sim.cores[1]
                    .recv(0, src, tag, vec![0u8; sizes[i % sizes.len()]])
                    .unwrap()
            })
            .collect();
        for (i, &r) in recvs.iter().enumerate() {
            let data = pattern(0, i, sizes[i % sizes.len()]);
            let send = sim
                .send_inline(0, 1, i as u64, data.clone())
                .unwrap_or_else(|| sim.cores[0].send(1, 0, 0, i as u64, data).unwrap());
            let ok = sim
                .run_until(1_000_000, |s| {
                    !s.cores[1].is_pending(r) && !s.cores[0].is_pending(send)
                })
                .unwrap();
            assert!(ok, "{pol:?}: message {i} stalled");
            let (c, buf) = sim.cores[1].take(r).unwrap();
            let Completion::Done(st) = c else {
                panic!("{pol:?}: receive {i} ended {c:?}")
            };
            assert_eq!(
                (st.source, st.tag, st.len, st.truncated),
                (0, i as u64, buf.len(), false)
            );
            let want = pattern(0, i, sizes[i % sizes.len()]);
            assert_eq!(buf, want, "{pol:?}: message {i}");
            // A send that left inline lives in a table of its own: known, done, its status
            // and buffer given back once, then unknown.
            assert_eq!(sim.cores[0].done(send), Some(true));
            let (c, sbuf) = sim.cores[0].take(send).unwrap();
            let Completion::Done(st) = c else {
                panic!("{pol:?}: send {i} ended {c:?}")
            };
            assert_eq!(
                (st.source, st.tag, st.len, st.truncated, st.data),
                (0, i as u64, want.len(), false, None)
            );
            assert_eq!(sbuf, want);
            assert_eq!(sim.cores[0].done(send), None);
            assert!(sim.cores[0].take(send).is_none());
        }
        assert_eq!(sim.cores[0].live_requests(), 0);
        assert_eq!(sim.cores[1].live_requests(), 0);
        assert_eq!(sim.logged_frames(), 0);
        // About half the reads try the in-place path; a frame cut by a partial read cannot.
        assert!(
            sim.express_reads > n as u64 / 5,
            "{pol:?}: only {} of {n} frames read in place",
            sim.express_reads
        );
    }
}

#[test]
fn every_policy_with_large_messages() {
    let msgs: Vec<Msg> = (0..24)
        .map(|i| Msg {
            src: i % 3,
            dst: (i + 1) % 3,
            len: [0, 1, 100, 40_000, 1 << 20, 3_000_001][i as usize % 6],
        })
        .collect();
    for (k, pol) in Policy::ALL.into_iter().enumerate() {
        let cfg = Config {
            policy: pol,
            ..Config::default()
        };
        run_scenario(3, 4, cfg, &msgs, 7 + k as u64).unwrap();
    }
}

#[test]
fn truncation_is_reported_and_rest_discarded() {
    for len in [100usize, 100_000] {
        let mut sim = Cluster::new(2, 2, Config::default(), 3);
        let s = sim.cores[0].send(1, 0, 0, 5, pattern(0, 0, len)).unwrap();
        let r = sim.cores[1].recv(0, None, None, vec![0; 10]).unwrap();
        assert!(sim
            .run_until(1_000_000, |c| !c.cores[1].is_pending(r)
                && !c.cores[0].is_pending(s))
            .unwrap());
        let (c, buf) = sim.cores[1].take(r).unwrap();
        match c {
            Completion::Done(st) => {
                assert!(st.truncated);
                assert_eq!(st.len, len);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(buf, pattern(0, 0, len)[..10]);
    }
}

#[test]
fn self_send_and_probe() {
    let mut sim = Cluster::new(2, 1, Config::default(), 1);
    let core = &mut sim.cores[0];
    let s = core.send(0, 3, 4, 9, vec![1, 2, 3]).unwrap();
    assert!(matches!(core.poll(s), Some(Completion::Done(_))));
    let st = core.probe(4, Some(0), Some(9)).unwrap();
    assert_eq!((st.len, st.src_ep), (3, 3));
    let r = core.recv(4, Some(0), None, vec![0; 3]).unwrap();
    assert_eq!(core.take(r).unwrap().1, vec![1, 2, 3]);
}

#[test]
fn failed_peer_fails_its_operations() {
    let mut sim = Cluster::new(3, 2, Config::default(), 1);
    let r = sim.cores[0].recv(0, Some(1), None, vec![0; 8]).unwrap();
    let any = sim.cores[0].recv(0, None, None, vec![0; 8]).unwrap();
    let s = sim.cores[0].send(1, 0, 0, 1, vec![0; 100_000]).unwrap();
    sim.cores[0].fail_peer(1, "connection reset");
    assert!(matches!(sim.cores[0].poll(r), Some(Completion::Failed(_))));
    assert!(matches!(sim.cores[0].poll(s), Some(Completion::Failed(_))));
    assert!(sim.cores[0].is_pending(any));
    let later = sim.cores[0].send(1, 0, 0, 1, vec![1]).unwrap();
    assert!(matches!(
        sim.cores[0].poll(later),
        Some(Completion::Failed(_))
    ));
    // Traffic with the other peer still flows.
    let s2 = sim.cores[2].send(0, 0, 0, 1, vec![7; 5]).unwrap();
    assert!(sim
        .run_until(100_000, |c| !c.cores[0].is_pending(any)
            && !c.cores[2].is_pending(s2))
        .unwrap());
}

#[test]
fn any_source_receive_fails_once_every_other_peer_has() {
    let mut sim = Cluster::new(3, 1, Config::default(), 1);
    let any = sim.cores[0].recv(0, None, None, vec![0; 8]).unwrap();
    sim.cores[0].fail_peer(1, "connection reset");
    // Rank 2 could still send.
    assert!(sim.cores[0].is_pending(any));
    sim.cores[0].fail_peer(2, "closed");
    match sim.cores[0].poll(any) {
        Some(Completion::Failed(e)) => assert!(e.to_string().contains("closed"), "{e}"),
        other => panic!("any-source receive not failed: {other:?}"),
    }
    // Posted later, it waits (in an open process a new peer may come); a send to itself
    // matches it.
    let later = sim.cores[0].recv(0, None, None, vec![0; 1]).unwrap();
    assert!(sim.cores[0].is_pending(later));
    let s = sim.cores[0].send(0, 0, 0, 1, vec![5]).unwrap();
    assert!(matches!(sim.cores[0].poll(s), Some(Completion::Done(_))));
    assert_eq!(sim.cores[0].take(later).unwrap().1, vec![5]);
}

#[test]
fn adaptive_uses_every_rail_for_large_messages() {
    let cfg = Config::default();
    let msgs: Vec<Msg> = (0..4)
        .map(|_| Msg {
            src: 0,
            dst: 1,
            len: 4 << 20,
        })
        .collect();
    let mut sim = Cluster::new(2, 4, cfg, 11);
    let sends: Vec<_> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| sim.cores[0].send(1, 0, 0, 1, pattern(0, i, m.len)).unwrap())
        .collect();
    let recvs: Vec<_> = msgs
        .iter()
        .map(|m| sim.cores[1].recv(0, Some(0), None, vec![0; m.len]).unwrap())
        .collect();
    assert!(sim
        .run_until(10_000_000, |c| recvs
            .iter()
            .all(|&r| !c.cores[1].is_pending(r)))
        .unwrap());
    let stats = sim.cores[0].stats(1);
    assert!(
        stats.tx_bytes_per_rail.iter().all(|&b| b > 1 << 20),
        "{stats:?}"
    );
    for (i, r) in recvs.into_iter().enumerate() {
        assert_eq!(sim.cores[1].take(r).unwrap().1, pattern(0, i, 4 << 20));
    }
    drop(sends);
}

#[test]
fn failover_resends_under_every_policy() {
    let msgs: Vec<Msg> = (0..120)
        .map(|i| Msg {
            src: i % 3,
            dst: (i * 7 + 1) % 3,
            len: [3, 700, 5_000, 70_000, 300_000][i as usize % 5],
        })
        .filter(|m| m.src != m.dst)
        .collect();
    for (k, pol) in Policy::ALL.into_iter().enumerate() {
        let mut rng = Rng::new(k as u64);
        let cfg = small_config(pol, &mut rng);
        let resent = run_scenario_with_faults(3, 3, cfg, &msgs, 40 + k as u64, 30).unwrap();
        assert!(
            resent > 0,
            "{pol:?}: no frame was resent, the test cut nothing useful"
        );
    }
}

/// One message, one of two rails cut after every possible number of steps.
#[test]
fn rail_loss_at_every_point_of_a_transfer() {
    for pol in Policy::ALL {
        let cfg = Config {
            policy: pol,
            eager_limit: 1024,
            max_chunk: 4096,
            min_chunk: 1024,
            stage_size: 512,
            eager_credits: 1 << 20,
        };
        for len in [500usize, 40_000] {
            let mut k = 0;
            loop {
                let mut sim = Cluster::new(2, 2, cfg.clone(), 9);
                let s = sim.cores[0].send(1, 0, 0, 1, pattern(0, 1, len)).unwrap();
                let r = sim.cores[1].recv(0, Some(0), None, vec![0; len]).unwrap();
                let mut cut = false;
                for _ in 0..k {
                    if !sim.step().unwrap() {
                        break;
                    }
                }
                if sim.cores[1].is_pending(r) || sim.cores[0].is_pending(s) {
                    sim.cut(0, 1, k % 2);
                    cut = true;
                }
                assert!(
                    sim.run_until(1_000_000, |c| !c.cores[1].is_pending(r)
                        && !c.cores[0].is_pending(s))
                        .unwrap(),
                    "{pol:?} len {len} cut after {k} steps: stalled"
                );
                assert_eq!(sim.cores[1].take(r).unwrap().1, pattern(0, 1, len));
                if !cut {
                    break;
                }
                k += 1;
            }
        }
    }
}

/// A sender that floods a receiver posting no receives cannot grow the receiver's memory beyond
/// its eager credits: the rest waits as rendezvous requests; once receives are posted, all of it
/// arrives intact.
#[test]
fn eager_credits_bound_a_flooded_receiver() {
    let cfg = Config {
        eager_credits: 64 * 1024,
        ..Config::default()
    };
    let mut sim = Cluster::new(2, 2, cfg, 3);
    let n = 2000;
    let sends: Vec<_> = (0..n)
        .map(|i| {
            sim.cores[0]
                .send(1, 0, 0, i, pattern(0, i as usize, 1000))
                .unwrap()
        })
        .collect();
    sim.run_until(10_000_000, |_| false).unwrap();
    let held = sim.cores[1].held_bytes();
    assert!(
        held <= 64 * 1024,
        "receiver holds {held} bytes of eager data"
    );
    assert!(
        sim.cores[1].held_messages() == n as usize,
        "every message is announced"
    );
    let recvs: Vec<_> = (0..n)
        .map(|_| sim.cores[1].recv(0, Some(0), None, vec![0; 1000]).unwrap())
        .collect();
    assert!(sim
        .run_until(10_000_000, |c| recvs
            .iter()
            .all(|&r| !c.cores[1].is_pending(r))
            && sends.iter().all(|&s| !c.cores[0].is_pending(s)))
        .unwrap());
    for (i, r) in recvs.into_iter().enumerate() {
        let (st, buf) = sim.cores[1].take(r).unwrap();
        assert!(matches!(st, Completion::Done(s) if s.tag == i as u64));
        assert_eq!(buf, pattern(0, i, 1000));
    }
}

#[test]
fn direct_copies_complete_rendezvous() {
    let mut sim = Cluster::new(2, 1, Config::default(), 4);
    sim.enable_direct();
    let len = 3 << 20;
    let s = sim.cores[0].send(1, 0, 0, 1, pattern(0, 1, len)).unwrap();
    let r = sim.cores[1].recv(0, Some(0), None, vec![0; len]).unwrap();
    let small = sim.cores[1].recv(0, Some(0), None, vec![0; 1000]).unwrap();
    let s2 = sim.cores[0]
        .send(1, 0, 0, 2, pattern(0, 2, 100_000))
        .unwrap();
    assert!(sim
        .run_until(1_000_000, |c| !c.cores[1].is_pending(r)
            && !c.cores[1].is_pending(small))
        .unwrap());
    assert_eq!(sim.cores[1].take(r).unwrap().1, pattern(0, 1, len));
    // Truncated direct copy: only the receiver's capacity is written, and it says so.
    let (c, buf) = sim.cores[1].take(small).unwrap();
    assert!(matches!(c, Completion::Done(st) if st.truncated && st.len == 100_000));
    assert_eq!(buf, pattern(0, 2, 100_000)[..1000]);
    // No data frames crossed the link: only control frames.
    assert!(sim.cores[0].stats(1).tx_bytes_per_rail[0] < 1000);
    assert!(sim
        .run_until(1000, |c| !c.cores[0].is_pending(s)
            && !c.cores[0].is_pending(s2))
        .unwrap());
}

mod provider_matching {
    //! What the libfabric provider needs of matching: tag ignore masks, immediate data, a
    //! source-endpoint filter, matched probes (claim) and discards, and finished-request tracking.
    use hx_protocol::sim::Cluster;
    use hx_protocol::{Completion, Config, Filter, TagMatch};

    fn run(c: &mut Cluster, done: impl FnMut(&mut Cluster) -> bool) {
        assert!(c.run_until(200_000, done).unwrap(), "did not finish");
    }

    fn done(c: &Cluster, r: usize, req: hx_protocol::ReqId) -> bool {
        !c.cores[r].is_pending(req)
    }

    #[test]
    fn masks_data_source_endpoints_claims() {
        let cfg = Config {
            eager_limit: 1024,
            ..Config::default()
        };
        let mut c = Cluster::new(2, 2, cfg, 7);
        c.cores[1].track_finished();
        // Sender endpoint 4 and 6 to receiver endpoint 2; tags carry a "communicator" in the
        // high bits.
        let big = vec![9u8; 5000]; // rendezvous
        let s1 = c.cores[0]
            .send_with_data(1, 4, 2, 0x7_0000_0001, Some(11), vec![1, 2, 3])
            .unwrap();
        let s2 = c.cores[0]
            .send_with_data(1, 6, 2, 0x7_0000_0002, Some(22), big.clone())
            .unwrap();
        let s3 = c.cores[0]
            .send_with_data(1, 4, 2, 0x8_0000_0003, None, vec![5])
            .unwrap();
        run(&mut c, |c| {
            c.cores[1].probe(2, None, Some(0x8_0000_0003)).is_some()
                && c.cores[1].probe(2, None, Some(0x7_0000_0002)).is_some()
        });
        // Any tag of communicator 7, only from endpoint 6: the rendezvous message.
        let f6 = Filter {
            src: Some(0),
            src_ep: Some(6),
            tag: TagMatch {
                tag: 0x7_0000_0000,
                ignore: 0xffff_ffff,
            },
        };
        let st = c.cores[1].probe_matching(2, f6).unwrap();
        assert_eq!((st.tag, st.len, st.data), (0x7_0000_0002, 5000, Some(22)));
        // Claim it, then receive it: the claim takes it out of matching.
        let (claim, st) = c.cores[1].claim(2, f6).unwrap();
        assert_eq!(st.data, Some(22));
        assert!(c.cores[1].probe_matching(2, f6).is_none());
        let r2 = c.cores[1].recv_claimed(claim, vec![0; 5000]).unwrap();
        assert!(
            c.cores[1].recv_claimed(claim, vec![0; 1]).is_err(),
            "claim used twice"
        );
        // Communicator 7 from any endpoint: the first eager message, with its data.
        let any7 = Filter {
            src: None,
            src_ep: None,
            tag: TagMatch {
                tag: 0x7_0000_0000,
                ignore: 0xffff_ffff,
            },
        };
        let r1 = c.cores[1].recv_matching(2, any7, vec![0; 8]).unwrap();
        // Communicator 8: claimed and discarded.
        let f8 = Filter::new(None, Some(0x8_0000_0003));
        let (claim8, _) = c.cores[1].claim(2, f8).unwrap();
        let r3 = c.cores[1].discard_claimed(claim8).unwrap();
        run(&mut c, |c| {
            done(c, 1, r1) && done(c, 1, r2) && done(c, 1, r3) && done(c, 0, s2)
        });
        match c.cores[1].take(r1) {
            Some((Completion::Done(st), buf)) => {
                assert_eq!(
                    (st.tag, st.len, st.data, st.src_ep),
                    (0x7_0000_0001, 3, Some(11), 4)
                );
                assert_eq!(&buf[..3], &[1, 2, 3]);
            }
            other => panic!("{:?}", other.map(|o| o.0)),
        }
        match c.cores[1].take(r2) {
            Some((Completion::Done(st), buf)) => {
                assert_eq!(st.data, Some(22));
                assert!(buf == big);
            }
            other => panic!("{:?}", other.map(|o| o.0)),
        }
        match c.cores[1].take(r3) {
            Some((Completion::Done(st), buf)) => {
                assert!(st.truncated && buf.is_empty() && st.data.is_none());
            }
            other => panic!("{:?}", other.map(|o| o.0)),
        }
        let mut fin = Vec::new();
        c.cores[1].take_finished(&mut fin);
        for r in [r1, r2, r3] {
            assert!(fin.contains(&r), "finished list lacks {r:?}");
        }
        for s in [s1, s3] {
            assert!(!c.cores[0].is_pending(s));
        }
    }

    #[test]
    fn a_source_endpoint_filter_leaves_other_endpoints_alone() {
        let mut c = Cluster::new(2, 1, Config::default(), 3);
        let filter = Filter {
            src: Some(0),
            src_ep: Some(5),
            tag: TagMatch::ANY,
        };
        let r = c.cores[1].recv_matching(1, filter, vec![0; 4]).unwrap();
        let _ = c.cores[0].send(1, 9, 1, 1, vec![9]).unwrap();
        let _ = c.cores[0].send(1, 5, 1, 2, vec![5]).unwrap();
        run(&mut c, |c| done(c, 1, r));
        match c.cores[1].take(r) {
            Some((Completion::Done(st), buf)) => assert_eq!((st.tag, buf[0]), (2, 5)),
            other => panic!("{:?}", other.map(|o| o.0)),
        }
        assert!(c.cores[1].probe(1, Some(0), Some(1)).is_some());
    }
}

mod claims_and_failures {
    use hx_protocol::sim::Cluster;
    use hx_protocol::{Config, Filter};

    /// A claimed message whose sender fails before all of it arrived: receiving it is an
    /// error, never a panic.
    #[test]
    fn a_claim_outlived_by_its_partial_message() {
        let mut c = Cluster::new(2, 1, Config::default(), 11);
        let _ = c.cores[0].send(1, 0, 0, 9, vec![7u8; 20_000]).unwrap();
        // Step until the receiver holds the message, but not necessarily all of it.
        let mut claim = None;
        for _ in 0..100_000 {
            if let Some(cl) = c.cores[1].claim(0, Filter::new(None, Some(9))) {
                claim = Some(cl.0);
                break;
            }
            if !c.step().unwrap() {
                break;
            }
        }
        let claim = claim.expect("the message never showed up");
        c.cores[1].fail_peer(0, "test");
        // Whole or partial when the peer failed: either an error or a request, no panic.
        match c.cores[1].recv_claimed(claim, vec![0; 20_000]) {
            Err(e) => assert!(e.to_string().contains("gone"), "{e}"),
            Ok(req) => assert!(!c.cores[1].is_pending(req)),
        }
        assert!(
            c.cores[1].recv_claimed(claim, vec![0; 1]).is_err(),
            "claim used twice"
        );
    }
}

/// A FIN (end of a direct copy) completes a rendezvous receive only where this side offered
/// its buffer for that copy: a peer that was never offered one (TCP, or direct copies off)
/// cannot complete a receive without sending its data.
#[test]
fn a_fin_without_a_granted_direct_copy_is_refused() {
    use hx_protocol::Core;
    use hx_wire::{FrameHeader, FrameKind};

    for direct in [false, true] {
        let mut core: Core<Vec<u8>> = Core::new(1, 2, Config::default());
        core.set_rails(0, 1);
        // With direct copies on, a FIN for a receive whose data already came as frames (the
        // sender fell back) is refused too.
        core.set_direct(0, direct);
        let len = 1 << 20;
        let r = core.recv(0, Some(0), None, vec![0xAA; len]).unwrap();
        let mut rts = FrameHeader::new(FrameKind::Rts);
        rts.value = len as u64;
        rts.tag = 7;
        let mut bytes = rts.to_bytes().to_vec();
        if direct {
            let chunk = vec![1u8; 1000];
            let mut data = FrameHeader::new(FrameKind::Data);
            data.payload_len = chunk.len() as u32;
            bytes.extend(data.to_bytes());
            bytes.extend(&chunk);
        }
        let mut fin = FrameHeader::new(FrameKind::Fin);
        fin.value = len as u64;
        bytes.extend(fin.to_bytes());

        let mut result = Ok(());
        let mut fed = 0;
        while fed < bytes.len() && result.is_ok() {
            let space = core.rx_space(0, 0);
            let n = space.len().min(bytes.len() - fed);
            space[..n].copy_from_slice(&bytes[fed..fed + n]);
            fed += n;
            result = core.rx_done(0, 0, n);
        }
        match result {
            Err(ProtoError::Unexpected { peer: 0, what, .. }) => {
                assert!(what.contains("FIN for no direct copy"), "{what}")
            }
            other => panic!("direct {direct}: expected a violation, got {other:?}"),
        }
        assert!(
            !matches!(core.take(r), Some((Completion::Done(_), _))),
            "direct {direct}: the receive completed without its data"
        );
    }
}

/// A peer that fails while a direct copy to it waits for the driver (the engine makes a
/// bounded amount of copies per round, so one can wait across rounds): the copy is dropped and
/// its send fails; a copy already handed out and reported afterwards leaves the failure as it
/// is and is not reported finished twice.
#[test]
fn a_direct_copy_to_a_peer_that_failed_meanwhile_is_not_reported_done() {
    use hx_protocol::Core;
    use hx_wire::{FrameHeader, FrameKind};

    for handed_out in [false, true] {
        let mut core: Core<Vec<u8>> = Core::new(1, 2, Config::default());
        core.set_rails(0, 1);
        core.set_direct(0, true);
        core.track_finished();
        let len = 1 << 20;
        let send = core.send(0, 0, 0, 9, vec![3u8; len]).unwrap();
        // The receiver's clear-to-send, offering its buffer for a direct copy.
        let mut cts = FrameHeader::new(FrameKind::Cts);
        cts.seq = 0;
        cts.flags = hx_wire::FLAG_DIRECT;
        cts.value = 0x7000_0000;
        cts.tag = len as u64;
        let bytes = cts.to_bytes();
        let space = core.rx_space(0, 0);
        space[..bytes.len()].copy_from_slice(&bytes);
        core.rx_done(0, 0, bytes.len()).unwrap();
        assert!(core.direct_pending(), "the CTS queued a direct copy");
        let w = if handed_out { core.take_direct() } else { None };
        core.fail_peer(0, "gone");
        assert!(!core.direct_pending() && core.take_direct().is_none());
        if let Some(w) = w {
            core.direct_done(w, true);
        }
        assert!(
            matches!(core.poll(send), Some(Completion::Failed(_))),
            "handed out {handed_out}: {:?}",
            core.poll(send)
        );
        let mut finished = Vec::new();
        core.take_finished(&mut finished);
        assert_eq!(finished, vec![send], "handed out {handed_out}");
    }
}

/// A detached send (fi_inject's copy) is delivered like any other but never reported: the
/// finished list does not name it and its request is freed, whether it finished before or
/// after it was detached; without tracking, detach refuses and changes nothing.
#[test]
fn detached_sends_are_delivered_and_forgotten() {
    let mut sim = Cluster::new(2, 2, Config::default(), 11);
    let untracked = sim.cores[0].send(1, 0, 0, 1, pattern(0, 1, 10)).unwrap();
    assert!(!sim.cores[0].detach(untracked), "detach needs tracking");
    for c in sim.cores.iter_mut() {
        c.track_finished();
    }
    let mut sends = Vec::new();
    for (i, len) in [10usize, 5000, 200_000].into_iter().enumerate() {
        let s = sim.cores[0]
            .send(1, 0, 0, 2 + i as u64, pattern(0, 2 + i, len))
            .unwrap();
        assert!(sim.cores[0].detach(s));
        sends.push(s);
    }
    let recvs: Vec<_> = [10usize, 10, 5000, 200_000]
        .into_iter()
        .enumerate()
        .map(|(i, len)| {
            sim.cores[1]
                .recv(0, Some(0), Some(1 + i as u64), vec![0; len])
                .unwrap()
        })
        .collect();
    assert!(sim
        .run_until(1_000_000, |c| recvs
            .iter()
            .all(|&r| !c.cores[1].is_pending(r)))
        .unwrap());
    for (i, r) in recvs.into_iter().enumerate() {
        let (_, buf) = sim.cores[1].take(r).unwrap();
        assert_eq!(buf, pattern(0, 1 + i, buf.len()));
    }
    // Let the acknowledgements come back, then look at what the sender reports.
    sim.run_until(100_000, |_| false).unwrap();
    let mut finished = Vec::new();
    sim.cores[0].take_finished(&mut finished);
    for s in sends {
        assert!(!finished.contains(&s), "a detached send was reported");
        assert!(
            sim.cores[0].take(s).is_none(),
            "a detached send was not freed"
        );
    }
    assert!(!sim.cores[0].is_pending(untracked));
}

/// A frame as a pipe carried it: its header and payload.
type Frame = (FrameHeader, Vec<u8>);

/// The frames of a pipe's transcript, a Cts's buffer address (its `value`) zeroed.
fn frames(mut bytes: &[u8]) -> Vec<Frame> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let (mut h, hlen) = FrameHeader::parse(bytes).expect("a simulated pipe carries frames");
        let end = hlen + h.payload_len as usize;
        if h.kind == FrameKind::Cts {
            h.value = 0;
        }
        out.push((h, bytes[hlen..end].to_vec()));
        bytes = &bytes[end..];
    }
    out
}
