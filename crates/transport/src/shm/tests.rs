use std::io::{ErrorKind, IoSlice};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::*;

fn poll_in(fd: RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    r == 1
}

/// Small xorshift so the test has no extra dependency.
fn rng(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[test]
fn wraparound_with_odd_sizes() {
    let (mut a, mut b) = pair(MIN_CAPACITY).unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i ^ (i >> 9)) as u8).collect();
    let mut got = Vec::new();
    let mut sent = 0;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut buf = vec![0u8; 5000];
    while got.len() < data.len() {
        if sent < data.len() {
            // Up to three slices of odd lengths, some longer than the ring.
            let mut bufs = Vec::new();
            let mut at = sent;
            for _ in 0..3 {
                let len = (rng(&mut seed) % 5003) as usize;
                let end = (at + len).min(data.len());
                bufs.push(IoSlice::new(&data[at..end]));
                at = end;
            }
            match a.write_vectored(&bufs) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        let want = 1 + (rng(&mut seed) % 4999) as usize;
        match b.read(&mut buf[..want]) {
            Ok(0) => panic!("EOF"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(got, data);
    assert!(a.tx_head > 40 * MIN_CAPACITY as u64, "wrapped many times");
}

/// Small records over many laps, the reader lagging by a random amount: every payload word
/// looks like a record header, so a header slot left holding a past lap's bytes (the writer
/// zeroes them ahead of its head, `zero_ahead`) would be read as a record and fail the check.
#[test]
fn small_records_over_stale_laps_with_slots_zeroed_ahead() {
    let (mut a, mut b) = pair(MIN_CAPACITY).unwrap();
    let words: Vec<u64> = (0..60_000u64).map(|i| REC_VALID | (1 + i % 300)).collect();
    let data: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let (mut sent, mut got) = (0, Vec::new());
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut buf = vec![0u8; 700];
    // A header slot left stale would stall the reader (it would wait for a record that never
    // comes): bounded, so that fails rather than hangs.
    let mut rounds = 0;
    while got.len() < data.len() {
        rounds += 1;
        assert!(
            rounds < 2_000_000,
            "stalled at {} of {} bytes",
            got.len(),
            data.len()
        );
        for _ in 0..rng(&mut seed) % 8 {
            let len = (1 + rng(&mut seed) % 600) as usize;
            let end = (sent + len).min(data.len());
            let (h, p) = data[sent..end].split_at((end - sent) / 3);
            match a.write_frame(h, p) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
            // Every line start from the head up to what is zeroed holds zero.
            let mut at = a.tx_head;
            while at < a.tx_zeroed {
                assert_eq!(
                    a.tx_word((at & (a.cap - 1)) as usize)
                        .load(Ordering::Relaxed),
                    0
                );
                at += REC_LINE as u64;
            }
        }
        for _ in 0..rng(&mut seed) % 8 {
            let want = 1 + (rng(&mut seed) % 700) as usize;
            match b.read(&mut buf[..want]) {
                Ok(0) => panic!("EOF"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
    }
    assert_eq!(got, data);
    assert!(a.tx_head > 50 * MIN_CAPACITY as u64, "wrapped many times");
}

#[test]
fn full_ring_would_block_then_room_after_reads() {
    let (mut a, mut b) = pair(MIN_CAPACITY).unwrap();
    let big: Vec<u8> = (0..MIN_CAPACITY as u32 + 100).map(|i| i as u8).collect();
    // One record as large as fits: the ring less its header line and the next header slot.
    let first = a.write_vectored(&[IoSlice::new(&big)]).unwrap();
    assert_eq!(first, MIN_CAPACITY - 2 * REC_LINE);
    let e = a.write_vectored(&[IoSlice::new(&big)]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
    // A few bytes read free a few bytes: at most a small record fits.
    let mut buf = vec![0u8; MIN_CAPACITY];
    assert_eq!(b.read(&mut buf[..3]).unwrap(), 3);
    let more = a.write_vectored(&[IoSlice::new(&big[first..])]).unwrap();
    assert!(more < REC_LINE, "{more}");
    // Draining gives room again; the bytes are those written, across the wrap.
    assert_eq!(b.read(&mut buf[3..]).unwrap(), first - 3 + more);
    assert_eq!(buf[..first + more], big[..first + more]);
    let second = a.write_vectored(&[IoSlice::new(&big[..1000])]).unwrap();
    assert_eq!(second, 1000);
    assert_eq!(b.read(&mut buf).unwrap(), 1000);
    assert_eq!(buf[..1000], big[..1000]);
    assert_eq!(a.write_vectored(&[]).unwrap(), 0);
    assert_eq!(b.read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
}

#[test]
fn records_gather_slices_and_peek_shows_one_record() {
    let (mut a, mut b) = pair(MIN_CAPACITY).unwrap();
    let n = a
        .write_vectored(&[
            IoSlice::new(b"head"),
            IoSlice::new(b""),
            IoSlice::new(b"er+body"),
        ])
        .unwrap();
    assert_eq!(n, 11);
    a.write_vectored(&[IoSlice::new(b"second")]).unwrap();
    assert!(b.ready());
    assert_eq!(b.peek().unwrap(), b"header+body");
    b.consume(6);
    assert_eq!(b.peek().unwrap(), b"+body");
    b.consume(5);
    assert_eq!(b.peek().unwrap(), b"second");
    b.consume(100); // more than the record: takes the record only
    assert!(b.peek().is_none());
    assert!(!b.ready());
    assert_eq!(a.tx_head, (footprint(11) + footprint(6)) as u64);
    assert_eq!(b.rx_tail, a.tx_head);
}

#[test]
fn arm_then_poll_is_woken_by_write() {
    let (mut a, mut b) = pair(DEFAULT_CAPACITY).unwrap();
    assert!(b.polled());
    // Nothing there: arm says "sleep", and the fd is not readable.
    assert!(b.arm());
    assert!(!poll_in(b.fd(), 0));
    let t = std::thread::spawn(move || {
        let t0 = Instant::now();
        assert!(poll_in(b.fd(), 10_000), "not woken");
        let waited = t0.elapsed();
        let mut buf = [0u8; 8];
        assert_eq!(b.read(&mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        // Re-arming drains the eventfd: no busy wakeups afterwards.
        assert!(b.arm());
        assert!(!poll_in(b.fd(), 20));
        (b, waited)
    });
    std::thread::sleep(Duration::from_millis(50));
    a.write_vectored(&[IoSlice::new(b"hello")]).unwrap();
    let (mut b, waited) = t.join().unwrap();
    assert!(waited >= Duration::from_millis(30), "woke too early");
    // While the reader is awake, writes do not signal (no syscall on the fast path).
    b.read(&mut [0u8; 1]).unwrap_err();
    a.write_vectored(&[IoSlice::new(b"x")]).unwrap();
    assert!(!poll_in(b.fd(), 0));
    // Data already there: arm refuses to sleep.
    assert!(!b.arm());
    assert_eq!(b.read(&mut [0u8; 4]).unwrap(), 1);
}

#[test]
fn writer_waiting_for_room_is_woken() {
    let (mut a, mut b) = pair(MIN_CAPACITY).unwrap();
    let big = vec![1u8; 2 * MIN_CAPACITY];
    assert_eq!(
        a.write_vectored(&[IoSlice::new(&big)]).unwrap(),
        MIN_CAPACITY - 2 * REC_LINE
    );
    assert!(a.arm(), "ring full, nothing to read: sleep");
    assert!(!poll_in(a.fd(), 0));
    let mut buf = vec![0u8; 200];
    assert_eq!(b.read(&mut buf).unwrap(), 200);
    assert!(poll_in(a.fd(), 1000), "writer not told about room");
    assert!(!a.arm(), "room now");
    assert!(a.arm(), "room is reported once, not forever");
    // Freed: the 200 bytes and their record's header line; records take headers and padding.
    let n = a.write_vectored(&[IoSlice::new(&big)]).unwrap();
    assert!(
        (200 - 2 * REC_LINE..=200 + 2 * REC_LINE).contains(&n),
        "{n}"
    );
}

#[test]
fn close_gives_eof_after_drain_and_broken_pipe() {
    let (mut a, mut b) = pair(MIN_CAPACITY).unwrap();
    assert!(b.arm());
    a.write_vectored(&[IoSlice::new(b"tail bytes")]).unwrap();
    assert!(poll_in(b.fd(), 1000), "write not signalled");
    assert!(!b.arm());
    b.read(&mut []).unwrap();
    assert!(!b.arm(), "still data");
    drop(a);
    assert!(poll_in(b.fd(), 1000), "close not signalled");
    assert!(!b.arm());
    let mut buf = [0u8; 4];
    assert_eq!(b.read(&mut buf).unwrap(), 4);
    assert_eq!(b.read(&mut buf).unwrap(), 4);
    assert_eq!(b.read(&mut buf).unwrap(), 2);
    assert_eq!(b.read(&mut buf).unwrap(), 0);
    assert_eq!(
        b.write_vectored(&[IoSlice::new(b"x")]).unwrap_err().kind(),
        ErrorKind::BrokenPipe
    );
}

#[test]
fn corrupt_headers_and_tails_are_errors() {
    let (a, mut b) = pair(MIN_CAPACITY).unwrap();
    let cap = MIN_CAPACITY as u64;
    for bad in [
        REC_VALID | cap,           // a record longer than the ring
        REC_VALID | (cap - 4),     // ends past the ring's end
        1,                         // no valid bit
        REC_VALID | (1 << 40) | 5, // unknown bits
        REC_VALID,                 // an empty record
    ] {
        a.tx_word(0).store(bad, Ordering::Release);
        assert!(b.ready(), "a nonzero header is worth a read");
        let e = b.read(&mut [0u8; 16]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData, "{bad:#x}: {e}");
        assert!(e.to_string().contains("record header"), "{e}");
        assert!(!b.arm(), "arm leaves the error to read");
        assert!(b.peek().is_none());
    }
    // The reader claims to have consumed bytes never written (past our zero header).
    b.map.word(off_tail(1)).store(5, Ordering::Release);
    let e = b
        .write_vectored(&[IoSlice::new(&[0u8; 10_000])])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
    // Any well-formed header over garbage is just bytes.
    a.tx_word(0).store(REC_VALID | 100, Ordering::Release);
    assert_eq!(b.read(&mut vec![0u8; 2 * MIN_CAPACITY]).unwrap(), 100);
}

#[test]
fn segment_checks() {
    assert!(pair(3000).is_err());
    assert!(pair(MAX_CAPACITY * 2).is_err());
    // Unsealed or wrong-sized files are refused.
    let fd = memfd_create(c"t", MFdFlags::MFD_CLOEXEC).unwrap();
    ftruncate(&fd, segment_len(MIN_CAPACITY) as i64).unwrap();
    let e = open_segment(&fd, MAX_CAPACITY).err().unwrap();
    assert!(e.to_string().contains("sealed"), "{e}");
    let (fd, map) = create_segment(MIN_CAPACITY).unwrap();
    map.word(OFF_CAP)
        .store(2 * MIN_CAPACITY as u64, Ordering::Relaxed);
    let e = open_segment(&fd, MAX_CAPACITY).err().unwrap();
    assert!(e.to_string().contains("does not match"), "{e}");
    map.word(OFF_MAGIC).store(1, Ordering::Relaxed);
    let e = open_segment(&fd, MAX_CAPACITY).err().unwrap();
    assert!(e.to_string().contains("magic"), "{e}");
    // A segment larger than this side accepts is refused before it is mapped.
    let (fd, _map) = create_segment(4 * MIN_CAPACITY).unwrap();
    let e = open_segment(&fd, 2 * MIN_CAPACITY).err().unwrap();
    assert!(e.to_string().contains("this side accepts"), "{e}");
    assert!(open_segment(&fd, 4 * MIN_CAPACITY).is_ok());
    let r = ftruncate(&fd, 100);
    assert!(r.is_err(), "shrinking a sealed segment must fail");
}

/// Pages of [ptr, ptr + len) present in this process's page table (/proc/self/pagemap, bit 63).
fn present_pages(ptr: *const u8, len: usize) -> usize {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open("/proc/self/pagemap").unwrap();
    let first = ptr as usize / 4096;
    let pages = len.div_ceil(4096);
    f.seek(SeekFrom::Start(first as u64 * 8)).unwrap();
    let mut v = vec![0u8; pages * 8];
    f.read_exact(&mut v).unwrap();
    v.chunks(8)
        .filter(|c| u64::from_le_bytes((*c).try_into().unwrap()) >> 63 == 1)
        .count()
}

#[test]
fn busy_rings_are_populated_while_the_budget_has_room() {
    let cap = 64 * MIN_CAPACITY;
    let pages = cap / 4096;
    let budget = PrefaultBudget::new(2 * cap);
    let (mut a, mut b) = pair_with(cap, Some(budget.clone())).unwrap();
    let (a_tx, b_rx) = (a.tx as *const u8, b.rx);
    let mut got = vec![0u8; 4096];
    let send = |a: &mut ShmLink, n: usize| {
        for _ in 0..n {
            assert_eq!(a.write_frame(&[7u8; 40], &[9u8; 8]).unwrap(), 48);
        }
        n as u64 * 48
    };
    // Below the threshold: only the pages touched so far exist.
    let mut sent = send(&mut a, 100);
    while b.read(&mut got).is_ok() {}
    assert_eq!(budget.used(), 0);
    assert!(
        present_pages(a_tx, cap) < pages / 2,
        "{}",
        present_pages(a_tx, cap)
    );
    assert!(present_pages(b_rx, cap) < pages / 2);
    // Past it: the writer populated the ring it writes, then the reader the ring it reads,
    // each in its own mapping; what was read is intact.
    sent += send(&mut a, (POPULATE_AFTER / 64) as usize);
    assert_eq!((budget.used(), present_pages(a_tx, cap)), (cap, pages));
    let mut total = 0;
    while let Ok(n) = b.read(&mut got) {
        for (i, &x) in got[..n].iter().enumerate() {
            let at = (total + i) % 48;
            assert_eq!(x, if at < 40 { 7 } else { 9 }, "byte {}", total + i);
        }
        total += n;
    }
    assert_eq!(total as u64 + 100 * 48, sent);
    assert_eq!((budget.used(), present_pages(b_rx, cap)), (2 * cap, pages));
    // No room left: another busy pair is not populated.
    let (mut c, _d) = pair_with(cap, Some(budget.clone())).unwrap();
    send(&mut c, (POPULATE_AFTER / 64) as usize + 1);
    assert_eq!(budget.used(), 2 * cap);
    assert!(present_pages(c.tx, cap) < pages / 2 + 2);
    // A link that goes gives its room back.
    drop(a);
    assert_eq!(budget.used(), cap);
    // Rings no larger than the threshold have lapped by then: never populated.
    let small = PrefaultBudget::new(usize::MAX);
    let (mut e, _f) = pair_with(MIN_CAPACITY, Some(small.clone())).unwrap();
    assert_eq!(e.tx_populate_at, u64::MAX);
    assert!(e.write_frame(&[1u8; 40], &[2u8; 8]).is_ok());
    assert_eq!(small.used(), 0);
}

#[test]
fn touching_pages_maps_them_as_populate_does() {
    // What a kernel without MADV_POPULATE_* gets instead.
    let (_fd, m) = create_segment(16 * MIN_CAPACITY).unwrap();
    let ring = HDR + 16 * MIN_CAPACITY;
    let pages = 16 * MIN_CAPACITY / 4096;
    let at = unsafe { m.ptr.as_ptr().add(ring) } as *const u8;
    assert!(present_pages(at, 16 * MIN_CAPACITY) < pages / 2);
    m.touch(ring, 16 * MIN_CAPACITY, 4096);
    assert_eq!(present_pages(at, 16 * MIN_CAPACITY), pages);
}

#[test]
fn threads_stream_both_ways() {
    let (mut a, mut b) = pair(1 << 16).unwrap();
    let n = 20_000_000usize;
    let t = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 15];
        let mut got = 0usize;
        let mut sum = 0u64;
        while got < n {
            match b.read(&mut buf) {
                Ok(0) => panic!("EOF"),
                Ok(k) => {
                    for (i, &x) in buf[..k].iter().enumerate() {
                        assert_eq!(x, ((got + i) % 251) as u8);
                    }
                    sum += k as u64;
                    got += k;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if b.arm() {
                        poll_in(b.fd(), 1000);
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
        b.write_vectored(&[IoSlice::new(&sum.to_le_bytes())])
            .unwrap();
        b
    });
    let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    let mut sent = 0;
    while sent < n {
        match a.write_vectored(&[IoSlice::new(&data[sent..(sent + 100_000).min(n)])]) {
            Ok(k) => sent += k,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if a.arm() {
                    poll_in(a.fd(), 1000);
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
    let mut ack = [0u8; 8];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match a.read(&mut ack) {
            Ok(8) => break,
            Ok(k) => panic!("short ack {k}"),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline);
                if a.arm() {
                    poll_in(a.fd(), 1000);
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(u64::from_le_bytes(ack), n as u64);
    t.join().unwrap();
}

#[test]
fn names_and_host_key() {
    let a = socket_name(&[1; 32], 3);
    assert!(
        a.starts_with("hxcomm-") && a.ends_with("-3") && a.len() == 7 + 16 + 2,
        "{a}"
    );
    assert_ne!(a, socket_name(&[2; 32], 3));
    let k = host_key().unwrap();
    assert!(k.contains("net:["), "{k}");
    assert_eq!(k, host_key().unwrap());
}

#[test]
fn a_listener_cannot_make_the_connector_map_more_than_it_accepts() {
    let secret = [7u8; 32];
    let name = format!("hxcomm-test-cap-{}", std::process::id());
    let mut listener = listen(&name).unwrap();
    listener.set_capacity(4 * DEFAULT_CAPACITY).unwrap();
    let t =
        std::thread::spawn(move || listener.accept(&secret, Duration::from_secs(5)).map(|_| ()));
    let e = connect(&name, &secret, 1, 0, Duration::from_secs(5))
        .err()
        .expect("a ring larger than the default was accepted");
    assert!(e.to_string().contains("this side accepts"), "{e}");
    let _ = t.join().unwrap();

    // Asking for the larger ring is fine.
    let mut listener = listen(&name).unwrap();
    listener.set_capacity(4 * DEFAULT_CAPACITY).unwrap();
    let t =
        std::thread::spawn(move || listener.accept(&secret, Duration::from_secs(5)).map(|_| ()));
    let link = connect_with_max(
        &name,
        &secret,
        1,
        0,
        4 * DEFAULT_CAPACITY,
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(link.capacity(), 4 * DEFAULT_CAPACITY);
    // The kernel names the other end (here this very process); a pair has no socket.
    assert_eq!(link.peer_pid(), Some(std::process::id()));
    assert_eq!(pair(MIN_CAPACITY).unwrap().0.peer_pid(), None);
    t.join().unwrap().unwrap();
}

fn bells(l: &ShmLink) -> Option<Vec<crate::Doorbell>> {
    let mut v = Vec::new();
    l.doorbells(&mut v).then_some(v)
}

fn any_rung(bells: &[crate::Doorbell]) -> bool {
    // SAFETY: (callers) the reader is untouched since the doorbells were taken.
    bells.iter().any(|d| unsafe { d.rung() })
}

#[test]
fn doorbell_rings_for_the_next_record_only() {
    let (mut a, mut b) = pair(MIN_CAPACITY).unwrap();
    let mut buf = vec![0u8; MIN_CAPACITY];
    // Odd sizes, many times round the ring and the lane: the doorbells taken when nothing is
    // readable are quiet until the next record or lane slot is published, then ring.
    for i in 0..4 * MIN_CAPACITY / 500 {
        assert!(matches!(b.poll_peek(), Peeked::Nothing));
        let d = bells(&b).expect("an idle ring gives doorbells");
        assert!(!any_rung(&d), "round {i}: rung before anything was written");
        let n = 1 + (i * 97) % 700;
        assert_eq!(a.write_vectored(&[IoSlice::new(&buf[..n])]).unwrap(), n);
        assert!(
            any_rung(&d),
            "round {i}: a record of {n} bytes did not ring"
        );
        assert_eq!(b.read(&mut buf).unwrap(), n);
        assert!(matches!(b.poll_peek(), Peeked::Nothing));
        let d = bells(&b).expect("an idle ring gives doorbells");
        assert!(!any_rung(&d), "round {i}: rung before the lane was written");
        assert!(a.lane_send([i as u64, 0, 0], &buf[..i % 9]), "round {i}");
        assert!(any_rung(&d), "round {i}: a lane message did not ring");
        assert!(
            bells(&b).is_none(),
            "a pending lane message gives no doorbell"
        );
        assert_eq!(b.lane_peek().unwrap().unwrap().meta[0], i as u64);
        b.lane_consume();
    }
    // Bytes left of a record: no doorbell, read them first.
    a.write_vectored(&[IoSlice::new(b"two parts")]).unwrap();
    assert_eq!(b.read(&mut buf[..3]).unwrap(), 3);
    assert!(bells(&b).is_none());
    assert_eq!(b.read(&mut buf).unwrap(), 6);
    // A closed peer: no doorbell (it would never ring).
    drop(a);
    assert!(bells(&b).is_none());
}

#[test]
fn answer_bells_ring_at_once_for_a_waiting_lane_message() {
    let (mut a, mut b) = pair(MIN_CAPACITY).unwrap();
    let mut v = Vec::new();
    // Nothing there: the same doorbells as `doorbells`, quiet until something comes.
    assert!(Link::answer_bells(&b, &mut v));
    assert_eq!(v.len(), 2);
    assert!(!any_rung(&v));
    assert!(a.lane_send([1, 0, 0], b"x"));
    assert!(any_rung(&v));
    // A lane message waiting: one doorbell, already rung.
    v.clear();
    assert!(Link::answer_bells(&b, &mut v));
    assert!(v.len() == 1 && any_rung(&v));
    b.lane_peek().unwrap().unwrap();
    b.lane_consume();
    // Part of a record to read first, or a closed peer: none.
    a.write_vectored(&[IoSlice::new(b"two parts")]).unwrap();
    let mut buf = [0u8; 3];
    assert_eq!(b.read(&mut buf).unwrap(), 3);
    v.clear();
    assert!(!Link::answer_bells(&b, &mut v) && v.is_empty());
    let mut rest = [0u8; 16];
    assert_eq!(b.read(&mut rest).unwrap(), 6);
    drop(a);
    assert!(!Link::answer_bells(&b, &mut v));
}

/// What a reader takes next from a link with a lane: a lane message, a ring record, or
/// nothing.
#[derive(Debug, PartialEq)]
enum Took {
    Lane(u64, Vec<u8>),
    Ring(Vec<u8>),
    Nothing,
}

fn take(b: &mut ShmLink) -> Took {
    if let Some(v) = b.lane_peek().unwrap() {
        let t = Took::Lane(v.meta[0], v.payload.to_vec());
        b.lane_consume();
        return t;
    }
    // One record at a time (a read takes as many as fit).
    let Some(r) = b.peek().map(<[u8]>::to_vec) else {
        return Took::Nothing;
    };
    b.consume(r.len());
    Took::Ring(r)
}

/// A message as the ordering tests write it to the ring: index, length, payload.
fn ring_message(i: u64, payload: &[u8]) -> Vec<u8> {
    let mut rec = i.to_le_bytes().to_vec();
    rec.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    rec.extend_from_slice(payload);
    rec
}

/// Takes the whole [`ring_message`]s off the front of `stream` (what the ring brought so far).
fn whole_ring_messages(stream: &mut Vec<u8>) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    while stream.len() >= 12 {
        let i = u64::from_le_bytes(stream[..8].try_into().unwrap());
        let len = u32::from_le_bytes(stream[8..12].try_into().unwrap()) as usize;
        if stream.len() < 12 + len {
            break;
        }
        out.push((i, stream[12..12 + len].to_vec()));
        stream.drain(..12 + len);
    }
    out
}

#[test]
fn lane_messages_keep_their_place_among_ring_records() {
    // Messages of random sizes: small ones try the lane first, the rest (and those the lane
    // refuses) go to the ring as [index, length, payload]; the reader takes lane first, then
    // the ring record by record, in random bursts. Every message arrives once, in the order
    // sent, each whole, and a lane message never comes while part of a ring message has.
    let (mut a, mut b) = pair(MIN_CAPACITY).unwrap();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut sent: Vec<Vec<u8>> = Vec::new();
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut stream: Vec<u8> = Vec::new();
    // The rest of a message the ring took in part: written before anything else, as the
    // engine writes what it queued before a new message.
    let mut rest: Vec<u8> = Vec::new();
    let (mut lane, mut ring) = (0, 0);
    let total = 20_000;
    while got.len() < total {
        for _ in 0..rng(&mut seed) % 8 {
            if !rest.is_empty() {
                match a.write_vectored(&[IoSlice::new(&rest)]) {
                    Ok(n) => drop(rest.drain(..n)),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
            }
            if sent.len() == total || !rest.is_empty() {
                break;
            }
            let i = sent.len();
            let len = match rng(&mut seed) % 4 {
                0 => 0,
                1 | 2 => (rng(&mut seed) % (LANE_PAYLOAD as u64 + 1)) as usize,
                _ => LANE_PAYLOAD + 1 + (rng(&mut seed) % 600) as usize,
            };
            let msg: Vec<u8> = (0..len).map(|k| (i * 31 + k) as u8).collect();
            if a.lane_send([i as u64, !(i as u64), 7], &msg) {
                lane += 1;
            } else {
                let mut rec = ring_message(i as u64, &msg);
                match a.write_vectored(&[IoSlice::new(&rec)]) {
                    Ok(n) => rest = rec.split_off(n),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => rest = rec,
                    Err(e) => panic!("{e}"),
                }
                ring += 1;
            }
            sent.push(msg);
        }
        for _ in 0..rng(&mut seed) % 8 {
            match take(&mut b) {
                Took::Lane(i, p) => {
                    assert!(stream.is_empty(), "a lane message inside a ring message");
                    assert_eq!(i as usize, got.len(), "lane message out of order");
                    got.push(p);
                }
                Took::Ring(r) => {
                    stream.extend_from_slice(&r);
                    for (i, m) in whole_ring_messages(&mut stream) {
                        assert_eq!(i as usize, got.len(), "ring message out of order");
                        got.push(m);
                    }
                }
                Took::Nothing => break,
            }
            // The reader publishes its tail when it finds the ring empty.
            let _ = b.poll_peek();
        }
    }
    assert_eq!(got, sent);
    // The lane only while the reader has all of the ring: a share of the small messages.
    assert!(
        lane > total / 20 && ring > total / 4,
        "lane {lane}, ring {ring}"
    );
}

#[test]
fn lane_waits_for_the_reader_and_refuses_what_it_cannot_carry() {
    let (mut a, mut b) = pair(MIN_CAPACITY).unwrap();
    let mut buf = vec![0u8; 64];
    assert!(!a.lane_send([0; 3], &[0; LANE_PAYLOAD + 1]), "too long");
    a.write_vectored(&[IoSlice::new(b"ring")]).unwrap();
    assert!(!a.lane_send([1; 3], b"x"), "the ring is not read yet");
    assert_eq!(b.read(&mut buf).unwrap(), 4);
    assert!(a.lane_send([2; 3], b"y"), "the reader has all of the ring");
    // What has come from the peer since we last sent: nothing, then something.
    assert!(!a.answering());
    b.write_vectored(&[IoSlice::new(b"?")]).unwrap();
    assert!(a.read(&mut buf).is_ok() && a.answering());
    assert!(a.lane_send([2; 3], b"y"));
    assert!(!a.answering());
    assert!(b.lane_send([0; 3], b""));
    assert!(a.lane_peek().unwrap().is_some());
    a.lane_consume();
    assert!(a.answering());
    // A full lane refuses; room comes back as the reader consumes.
    let mut n = 2;
    while a.lane_send([3; 3], b"") {
        n += 1;
    }
    assert_eq!(n, LANE_SLOTS);
    for _ in 0..LANE_SLOTS / 4 {
        assert!(b.lane_peek().unwrap().is_some());
        b.lane_consume();
    }
    assert!(a.lane_send([4; 3], b"z"), "room again");
    // A record written after lane messages stays hidden until they are taken.
    a.write_vectored(&[IoSlice::new(b"after")]).unwrap();
    assert!(b.ready());
    assert!(matches!(b.poll_peek(), Peeked::Attention));
    assert_eq!(b.read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert!(!b.arm(), "a pending lane message keeps the reader awake");
    while b.lane_peek().unwrap().is_some() {
        b.lane_consume();
    }
    assert_eq!(b.read(&mut buf).unwrap(), 5);
    // Traced, a lane message is stamped on both sides as its slot's words and its bytes.
    a.set_trace(true).unwrap();
    b.set_trace(true).unwrap();
    let _ = b.poll_peek();
    assert!(a.lane_send([6; 3], b"traced"));
    assert_eq!(b.lane_peek().unwrap().unwrap().payload, b"traced");
    b.lane_consume();
    let (mut wa, mut rb) = (
        crate::trace::LinkTrace::new(),
        crate::trace::LinkTrace::new(),
    );
    a.trace(false).unwrap().take(&mut wa);
    b.trace(false).unwrap().take(&mut rb);
    assert_eq!(wa.writes.len(), 1);
    assert_eq!(wa.writes[0].bytes, LANE_TRACED + 6);
    assert_eq!(rb.reads.len(), 1);
    assert_eq!(rb.reads[0].bytes, LANE_TRACED + 6);
    a.set_trace(false).unwrap();
    b.set_trace(false).unwrap();
    assert!(a.lane_send([5; 3], b""));
    // A peer that closes after a lane message: the message, then the end.
    drop(a);
    assert_eq!(b.read(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert_eq!(b.lane_peek().unwrap().unwrap().meta, [5; 3]);
    b.lane_consume();
    assert_eq!(b.read(&mut buf).unwrap(), 0);
}

#[test]
fn a_corrupt_lane_slot_is_an_error() {
    let (a, mut b) = pair(MIN_CAPACITY).unwrap();
    // SAFETY: the first slot's sequence word in a's lane, which b reads.
    unsafe { AtomicU64::from_ptr(a.lane_tx_word(0, 0)) }
        .store(1 | ((LANE_PAYLOAD as u64 + 1) << 32), Ordering::Release);
    let e = b.lane_peek().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
}

#[test]
fn lane_and_ring_keep_order_between_threads() {
    // The writer and the reader on two threads: the reader's second look at the lane after
    // it sees a record (acquire) is what keeps a lane message ahead of the record after it.
    let (mut a, mut b) = pair(MIN_CAPACITY).unwrap();
    let total = 100_000u64;
    let writer = std::thread::spawn(move || {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut lane = 0;
        for i in 0..total {
            let big = rng(&mut seed).is_multiple_of(3) && i % 1000 != 1;
            // Now and then wait for the lane (the reader catching up with the ring), so it
            // is used whatever the threads' speeds.
            while i % 1000 == 1 && !a.lane_send([i, 0, 0], &i.to_le_bytes()) {
                std::hint::spin_loop();
            }
            if i % 1000 == 1 || !big && a.lane_send([i, 0, 0], &i.to_le_bytes()) {
                lane += 1;
                continue;
            }
            let rec = ring_message(i, &vec![i as u8; if big { 200 } else { 0 }]);
            let mut at = 0;
            while at < rec.len() {
                match a.write_vectored(&[IoSlice::new(&rec[at..])]) {
                    Ok(n) => at += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
                    Err(e) => panic!("{e}"),
                }
            }
        }
        lane
    });
    let mut next = 0u64;
    let mut stream: Vec<u8> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while next < total {
        assert!(Instant::now() < deadline, "stuck at message {next}");
        match take(&mut b) {
            Took::Lane(i, _) => {
                assert!(stream.is_empty(), "a lane message inside a ring message");
                assert_eq!(i, next, "lane message out of order");
                next += 1;
            }
            Took::Ring(r) => {
                stream.extend_from_slice(&r);
                for (i, m) in whole_ring_messages(&mut stream) {
                    assert_eq!(i, next, "ring message out of order");
                    assert!(m.iter().all(|&x| x == i as u8));
                    next += 1;
                }
            }
            Took::Nothing => {
                let _ = b.poll_peek();
            }
        }
    }
    let lane = writer.join().unwrap();
    assert!(lane >= total / 1000, "the lane carried {lane}");
}
