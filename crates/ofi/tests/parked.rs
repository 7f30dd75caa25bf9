//! tests/c/parked.c: two processes of one host through the provider over shared memory, where
//! a CQ poll serves a lone small receive straight from the ring; checks that such a receive
//! keeps every matching rule of a posted one (order, probe, cancel, truncation, rendezvous,
//! messages that came first, another tag ahead in the ring, a send in flight, zero-length, CQ
//! data and source, a window of receives held at once, a peer that dies), and that the path was
//! taken at all, as was the doorbell that answers an idle poll without the engine (and, with
//! FI_THREAD_DOMAIN, without the domain's state), the ticket with which such a poll takes
//! the receive's message from its peer's lane itself, and the hold with which a run of such
//! receives and their answers take no state at all, keeping the same rules.

mod common;

#[test]
fn parked_receives_keep_the_matching_rules() {
    let dir = common::provider_dir();
    let exe = common::compile_c(&dir, "parked");
    let secret = "5a".repeat(32);
    let (ok, text) = common::run_c_env(
        &exe,
        &dir,
        &[],
        &secret,
        &[("HX_LOG", "debug,hxcomm_fi::domain=trace")],
    );
    assert!(ok, "parked failed:\n{text}");
    assert!(text.contains("parked ok"), "{text}");
    // Both processes served receives from the ring (each says so once).
    assert_eq!(
        text.matches("a receive was served straight from shared memory")
            .count(),
        2,
        "{text}"
    );
    // Only the receiver holds several at once (cases 2, 13, 14), and takes the first from
    // the ring with others held behind it.
    assert_eq!(
        text.matches("receives were held at once, the first served from shared memory")
            .count(),
        1,
        "{text}"
    );
    // Waiting for a message, polls looked at the rings' doorbells alone (at least one process).
    assert!(
        text.contains("an idle poll was answered by the rings' doorbells"),
        "{text}"
    );
    // ... and most such reads did not even take the domain's state (FI_THREAD_DOMAIN).
    assert!(
        text.contains("idle CQ reads were answered without the domain"),
        "{text}"
    );
    // The ping-pong's answers landing while the receiver polled: that read took the message
    // from the lane itself (the receive's ticket), every value, source and flag checked.
    assert!(
        text.contains("a CQ read served a receive from its peer's lane by itself"),
        "{text}"
    );
    // The ping-pongs then ran on a hold of the peer's lane, both ways (each process says so
    // once): receives armed and answers sent without the domain's state.
    assert_eq!(
        text.matches("receives and answers went through a peer's lane without the domain's state")
            .count(),
        2,
        "{text}"
    );
    // In each of cases 16-19 (their receives' lengths: 16, 1 MiB, 24, 40), a receive a hold
    // had armed was posted the usual way: the message too long, through the ring, the cancel,
    // the second receive behind it.
    let posted: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("a receive a hold had armed was posted the usual way"))
        .collect();
    for len in [16, 1 << 20, 24, 40] {
        assert!(
            posted.iter().any(|l| l.ends_with(&format!(" len={len}"))),
            "no held receive of {len} bytes posted the usual way:\n{}",
            posted.join("\n")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
