//! Argument checks and self-messaging on a job of one (no launcher environment).

use super::*;
use std::ptr::{null, null_mut};

fn last_error() -> String {
    // SAFETY: hx_last_error returns a valid C string.
    unsafe { CStr::from_ptr(hx_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A context and endpoint 0 of a job of one.
fn setup() -> (*mut hx_context, *mut hx_endpoint) {
    let mut ctx = null_mut();
    let mut ep = null_mut();
    unsafe {
        assert_eq!(hx_init(&mut ctx), HX_OK, "{}", last_error());
        assert_eq!(hx_open(ctx, 0, &mut ep), HX_OK, "{}", last_error());
    }
    (ctx, ep)
}

fn teardown(ctx: *mut hx_context, ep: *mut hx_endpoint) {
    unsafe {
        assert_eq!(hx_close(ep), HX_OK, "{}", last_error());
        assert_eq!(hx_finalize(ctx), HX_OK, "{}", last_error());
    }
}

#[test]
fn null_pointers_are_invalid_not_crashes() {
    unsafe {
        assert_eq!(hx_init(null_mut()), HX_ERR_INVALID);
        assert!(last_error().contains("NULL"), "{}", last_error());
        assert_eq!(hx_finalize(null_mut()), HX_ERR_INVALID);
        let mut v = 0u32;
        assert_eq!(hx_rank(null(), &mut v), HX_ERR_INVALID);
        assert_eq!(hx_size(null(), &mut v), HX_ERR_INVALID);
        assert_eq!(hx_progress(null_mut()), HX_ERR_INVALID);
        assert_eq!(hx_barrier(null_mut()), HX_ERR_INVALID);
        let mut fd = 0;
        assert_eq!(hx_fd(null(), &mut fd), HX_ERR_INVALID);
        let mut ep = null_mut();
        assert_eq!(hx_open(null_mut(), 0, &mut ep), HX_ERR_INVALID);
        assert!(ep.is_null());
        assert_eq!(hx_close(null_mut()), HX_ERR_INVALID);
        let t = hx_target {
            rank: 0,
            endpoint: 0,
        };
        let b = [0u8; 4];
        assert_eq!(
            hx_write(null_mut(), t, 1, b.as_ptr().cast(), 4),
            HX_ERR_INVALID
        );
        let mut r = 0;
        assert_eq!(hx_wait(null_mut(), r, null_mut()), HX_ERR_INVALID);
        assert_eq!(
            hx_iread(null_mut(), 0, 0, null_mut(), 0, &mut r),
            HX_ERR_INVALID
        );

        let (ctx, ep) = setup();
        assert_eq!(hx_rank(ctx, null_mut()), HX_ERR_INVALID);
        assert_eq!(hx_fd(ctx, null_mut()), HX_ERR_INVALID);
        assert_eq!(hx_open(ctx, 1, null_mut()), HX_ERR_INVALID);
        assert_eq!(hx_target_init(ep, 0, 0, null_mut()), HX_ERR_INVALID);
        assert_eq!(hx_write(ep, t, 1, null(), 4), HX_ERR_INVALID);
        assert!(last_error().contains("buffer is NULL"), "{}", last_error());
        assert_eq!(
            hx_iwrite(ep, t, 1, b.as_ptr().cast(), 4, null_mut()),
            HX_ERR_INVALID
        );
        assert_eq!(hx_test(ctx, 1, null_mut(), null_mut()), HX_ERR_INVALID);
        assert_eq!(hx_waitall(ctx, 2, null(), null_mut()), HX_ERR_INVALID);
        assert_eq!(hx_probe(ep, 0, 0, null_mut(), null_mut()), HX_ERR_INVALID);
        teardown(ctx, ep);
    }
}

#[test]
fn job_of_one_self_messages() {
    let (ctx, ep) = setup();
    unsafe {
        let (mut rank, mut size) = (9, 9);
        assert_eq!(hx_rank(ctx, &mut rank), HX_OK);
        assert_eq!(hx_size(ctx, &mut size), HX_OK);
        assert_eq!((rank, size), (0, 1));
        let mut fd = -1;
        assert_eq!(hx_fd(ctx, &mut fd), HX_OK);
        assert!(fd >= 0);
        let mut id = 9;
        assert_eq!(hx_endpoint_id(ep, &mut id), HX_OK);
        assert_eq!(id, 0);

        let mut t = hx_target {
            rank: 7,
            endpoint: 7,
        };
        assert_eq!(hx_target_init(ep, 0, 0, &mut t), HX_OK);
        assert_eq!(
            t,
            hx_target {
                rank: 0,
                endpoint: 0
            }
        );

        // Blocking: post the receive first, then write, then wait.
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let mut got = vec![0u8; data.len()];
        let mut r = 0;
        assert_eq!(
            hx_iread(
                ep,
                HX_ANY_SOURCE,
                HX_ANY_TAG,
                got.as_mut_ptr().cast(),
                got.len(),
                &mut r
            ),
            HX_OK
        );
        assert_eq!(
            hx_write(ep, t, 42, data.as_ptr().cast(), data.len()),
            HX_OK,
            "{}",
            last_error()
        );
        let mut st = hx_status::default();
        let mut done = 0;
        while done == 0 {
            assert_eq!(
                hx_test(ctx, r, &mut done, &mut st),
                HX_OK,
                "{}",
                last_error()
            );
        }
        assert_eq!(
            (st.source, st.src_endpoint, st.tag, st.length, st.truncated),
            (0, 0, 42, data.len(), 0)
        );
        assert_eq!(got, data);

        // Nonblocking both ways, waitall; zero-length with NULL buffers.
        let mut reqs = [0; 2];
        assert_eq!(hx_iwrite(ep, t, 5, null(), 0, &mut reqs[0]), HX_OK);
        let mut found = 0;
        assert_eq!(hx_probe(ep, 0, 5, &mut found, &mut st), HX_OK);
        assert_eq!((found, st.tag, st.length), (1, 5, 0));
        assert_eq!(hx_iread(ep, 0, 5, null_mut(), 0, &mut reqs[1]), HX_OK);
        let mut sts = [hx_status::default(); 2];
        assert_eq!(
            hx_waitall(ctx, 2, reqs.as_ptr(), sts.as_mut_ptr()),
            HX_OK,
            "{}",
            last_error()
        );
        assert_eq!((sts[1].tag, sts[1].length), (5, 0));

        // Truncation: the status is filled and the buffer holds the first bytes.
        assert_eq!(hx_iwrite(ep, t, 6, data.as_ptr().cast(), 10, &mut r), HX_OK);
        let mut small = [0u8; 4];
        let rc = hx_read(ep, 0, 6, small.as_mut_ptr().cast(), 4, &mut st);
        assert_eq!(rc, HX_ERR_TRUNCATED, "{}", last_error());
        assert_eq!((st.length, st.truncated), (10, 1));
        assert_eq!(small, data[..4]);
        assert_eq!(hx_wait(ctx, r, null_mut()), HX_OK);

        assert_eq!(hx_progress(ctx), HX_OK);
        assert_eq!(hx_barrier(ctx), HX_OK);
    }
    teardown(ctx, ep);
}

#[test]
fn caller_errors_are_refused() {
    let (ctx, ep) = setup();
    unsafe {
        let t = hx_target {
            rank: 0,
            endpoint: 0,
        };
        let b = [1u8; 8];
        // The any-tag wildcard is for receives only.
        assert_eq!(
            hx_write(ep, t, HX_ANY_TAG, b.as_ptr().cast(), 8),
            HX_ERR_INVALID
        );
        assert!(last_error().contains("HX_ANY_TAG"), "{}", last_error());
        let mut r = 0;
        assert_eq!(
            hx_iwrite(ep, t, HX_ANY_TAG, b.as_ptr().cast(), 8, &mut r),
            HX_ERR_INVALID
        );
        // Unknown request handles.
        let mut done = 0;
        assert_eq!(
            hx_test(ctx, 0xdead_beef, &mut done, null_mut()),
            HX_ERR_INVALID
        );
        assert!(last_error().contains("unknown request"), "{}", last_error());
        assert_eq!(hx_wait(ctx, 12345, null_mut()), HX_ERR_INVALID);
        // A request is released once completed: a second wait is refused.
        assert_eq!(hx_iwrite(ep, t, 1, b.as_ptr().cast(), 8, &mut r), HX_OK);
        let mut got = [0u8; 8];
        assert_eq!(
            hx_read(ep, 0, 1, got.as_mut_ptr().cast(), 8, null_mut()),
            HX_OK
        );
        assert_eq!(hx_wait(ctx, r, null_mut()), HX_OK);
        assert_eq!(hx_wait(ctx, r, null_mut()), HX_ERR_INVALID);
        // Ranks outside the job, reserved endpoint ids, endpoints opened twice.
        let mut t2 = t;
        assert_eq!(hx_target_init(ep, 1, 0, &mut t2), HX_ERR_INVALID);
        assert!(last_error().contains("rank 1"), "{}", last_error());
        assert_eq!(hx_target_init(ep, 0, u16::MAX, &mut t2), HX_ERR_INVALID);
        let bad = hx_target {
            rank: 3,
            endpoint: 0,
        };
        assert_eq!(hx_write(ep, bad, 1, b.as_ptr().cast(), 8), HX_ERR_INVALID);
        let mut ep2 = null_mut();
        assert_eq!(hx_open(ctx, 0, &mut ep2), HX_ERR_INVALID);
        assert_eq!(hx_open(ctx, u16::MAX, &mut ep2), HX_ERR_INVALID);
        // Finalize refuses while an endpoint is open.
        assert_eq!(hx_finalize(ctx), HX_ERR_INVALID);
        assert!(last_error().contains("still open"), "{}", last_error());
    }
    teardown(ctx, ep);
}

#[test]
fn strerror_covers_every_code() {
    for c in 0..=HX_ERR_HANDLE {
        let s = unsafe { CStr::from_ptr(hx_strerror(c)) }.to_str().unwrap();
        assert!(!s.is_empty() && s != "unknown result code", "{c}");
    }
    let s = unsafe { CStr::from_ptr(hx_strerror(-1)) }.to_str().unwrap();
    assert_eq!(s, "unknown result code");
}

#[test]
fn panics_become_error_codes() {
    let rc = guard("hx_test_panic", || panic!("boom {}", 42));
    assert_eq!(rc, HX_ERR_PANIC);
    let e = last_error();
    assert!(e.contains("hx_test_panic") && e.contains("boom 42"), "{e}");
    let rc = guard("hx_test_ok", || Ok(()));
    assert_eq!(rc, HX_OK);
}

#[test]
fn layouts_match_the_header() {
    // include/hxcomm.h declares these structs; the C test checks the same numbers from C.
    assert_eq!(std::mem::size_of::<hx_target>(), 8);
    assert_eq!(std::mem::size_of::<hx_status>(), 32);
    assert_eq!(std::mem::offset_of!(hx_status, tag), 8);
    assert_eq!(std::mem::offset_of!(hx_status, length), 16);
    assert_eq!(std::mem::offset_of!(hx_status, truncated), 24);
}
