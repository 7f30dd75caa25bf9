#!/usr/bin/env python3
"""Throwaway probes for the provider's same-host lane path (BENCHMARKS.md, "The provider's
shortest paths for the lane"). Applied to a copy of the tree by bench/probes/provider_lane.sh,
never to the tree itself: edits matched by exact text, so they fit the commit they were written
for (6fd4a80 and its neighbours) and fail loudly elsewhere.

Adds, in the provider library only:
- TSC stamps (hx_transport::tsc): P0 a lane slot's store, P1 a receive served by serve_first,
  P2 fi_tinjectdata's entry; each process writes them to /tmp/tsc/<pid> when its domain closes.
- Counters printed to stderr when a domain closes: serve_first's refusals by reason, receives
  served by poll_parked, unparked, parked, full rounds owed by the clock, idle reads, and the
  lane messages sent to each peer.
- Busy loops for calibration, by environment: EXP_SERVE=N iterations after each receive served
  by serve_first, EXP_TRECV=N at fi_trecv's entry; EXP_NOFENCE=1 drops the store-load fence
  before the send's wakeup check (unsafe for sleeping receivers: spinning benchmarks only).
"""
import sys

root = sys.argv[1].rstrip('/') + '/'


def edit(p, old, new):
    s = open(root + p).read()
    if s.count(old) != 1:
        sys.exit(f"provider_lane.py: {p}: the text to patch is not there once: {old[:70]!r}")
    open(root + p, 'w').write(s.replace(old, new))


SPIN = '''
        {
            static N: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
            let n = *N.get_or_init(|| std::env::var("%s").ok().and_then(|v| v.parse().ok()).unwrap_or(0));
            let mut x = 0u64;
            for i in 0..n { x = std::hint::black_box(x.wrapping_add(i)); }
            std::hint::black_box(x);
        }'''
R = 'std::sync::atomic::Ordering::Relaxed'

s = open(root + 'crates/transport/src/lib.rs').read()
open(root + 'crates/transport/src/lib.rs', 'w').write(s.replace('pub mod trace;', 'pub mod trace;\npub mod tsc;', 1))
open(root + 'crates/transport/src/tsc.rs', 'w').write('''//! PROBE: TSC stamps at points of the small-message path.
use std::sync::atomic::{AtomicUsize, Ordering};
pub const N: usize = 1 << 17;
pub static mut T: [[u64; N]; 3] = [[0; N]; 3];
pub static I: [AtomicUsize; 3] = [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)];
#[inline(always)]
pub fn stamp(k: usize) {
    let i = I[k].load(Ordering::Relaxed);
    if i < N {
        unsafe { T[k][i] = core::arch::x86_64::_rdtsc(); }
        I[k].store(i + 1, Ordering::Relaxed);
    }
}
pub fn dump() {
    let mut out = String::new();
    for k in 0..3 {
        out.push_str(&format!("P{k}"));
        for i in 0..I[k].load(Ordering::Relaxed) { unsafe { out.push_str(&format!(" {}", T[k][i])); } }
        out.push('\\n');
    }
    let _ = std::fs::create_dir_all("/tmp/tsc");
    let _ = std::fs::write(format!("/tmp/tsc/{}", std::process::id()), out);
}
''')
s = open(root + 'crates/engine/src/lib.rs').read()
open(root + 'crates/engine/src/lib.rs', 'w').write(s + '\npub use hx_transport::tsc;\n')

edit('crates/transport/src/shm.rs', '''            let seq = AtomicU64::from_ptr(self.lane_tx_word(slot, 0));''',
     '''            crate::tsc::stamp(0);
            let seq = AtomicU64::from_ptr(self.lane_tx_word(slot, 0));''')
edit('crates/transport/src/shm.rs', '''    fn wake_peer(&self) {
        store_load_fence();''', '''    fn wake_peer(&self) {
        static NOFENCE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if !*NOFENCE.get_or_init(|| std::env::var_os("EXP_NOFENCE").is_some()) { store_load_fence(); }''')
edit('crates/ofi/src/ep.rs', '''    ep_call!(ep, ep_of(ep).inject(true, buf, len, dest, tag, Some(data)))''',
     '''    hx_engine::tsc::stamp(2);
    ep_call!(ep, ep_of(ep).inject(true, buf, len, dest, tag, Some(data)))''')
edit('crates/ofi/src/ep.rs', '''    ) -> Result<isize, i32> {
        let b = self.bound()?;
        if len > 0 && ptr.is_null() {''', '''    ) -> Result<isize, i32> {''' + SPIN % 'EXP_TRECV' + '''
        let b = self.bound()?;
        if len > 0 && ptr.is_null() {''')

eb = 'crates/ofi/src/engine_backend.rs'
edit(eb, '''pub struct EngineBackend {''', '''pub static EXPC: [std::sync::atomic::AtomicU64; 12] = [const { std::sync::atomic::AtomicU64::new(0) }; 12];
pub struct EngineBackend {''')
edit(eb, '''    fn serve_first(&mut self) -> Option<(Served, bool)> {
        self.serve_from_lane()
    }''', '''    fn serve_first(&mut self) -> Option<(Served, bool)> {
        let r = self.serve_from_lane();
        if r.is_some() {
            hx_engine::tsc::stamp(1);''' + SPIN % 'EXP_SERVE' + '''
        }
        r
    }''')
edit(eb, '''        if !self.failed.is_empty() || self.lonely_polls > 0 {
            return None;
        }
        let p = self.parked.front()?;
        let (op, ep, filter, ptr, len) = (p.op, p.ep, p.filter, p.ptr, p.len);
        let src = filter.src?;
        let engine = self.engine.as_mut()?;
        if engine.has_finished() {
            return None;
        }''', f'''        if !self.failed.is_empty() || self.lonely_polls > 0 {{ EXPC[1].fetch_add(1, {R}); return None; }}
        let Some(p) = self.parked.front() else {{ EXPC[3].fetch_add(1, {R}); return None; }};
        let (op, ep, filter, ptr, len) = (p.op, p.ep, p.filter, p.ptr, p.len);
        let Some(src) = filter.src else {{ EXPC[4].fetch_add(1, {R}); return None; }};
        let engine = self.engine.as_mut()?;
        if engine.has_finished() {{ EXPC[5].fetch_add(1, {R}); return None; }}''')
edit(eb, '''        let Some(Express::Taken(st)) = engine.try_lane_express(src, ep, filter, buf) else {
            return None;
        };''', f'''        let st = match engine.try_lane_express(src, ep, filter, buf) {{
            Some(Express::Taken(st)) => st,
            None => {{ EXPC[2].fetch_add(1, {R}); return None; }}
            _ => {{ EXPC[0].fetch_add(1, {R}); return None; }}
        }};''')
edit(eb, '''                Express::Taken(st) => {
                    self.parked.pop_front();''', f'''                Express::Taken(st) => {{
                    EXPC[6].fetch_add(1, {R});
                    self.parked.pop_front();''')
edit(eb, '''    fn unpark_one(&mut self, p: Parked) {''', f'''    fn unpark_one(&mut self, p: Parked) {{
        EXPC[7].fetch_add(1, {R});''')
edit(eb, '''        if park {
            self.possible = Some((e, filter.src));''', f'''        if park {{
            EXPC[8].fetch_add(1, {R});
            self.possible = Some((e, filter.src));''')
edit(eb, '''        self.sockets_polled = Instant::now();
        true
    }''', f'''        self.sockets_polled = Instant::now();
        EXPC[9].fetch_add(1, {R});
        true
    }}''')
edit(eb, '''    fn idle_reads(&mut self, n: u32) {''', f'''    fn idle_reads(&mut self, n: u32) {{
        EXPC[10].fetch_add(n as u64, {R});''')
edit(eb, '''        if let Some(e) = self.engine.take() {
            tracing::debug!("hxcomm: domain closes: finishing sends, Bye to every peer");''', f'''        if let Some(mut e) = self.engine.take() {{
            hx_engine::tsc::dump();
            let c = |i: usize| EXPC[i].load({R});
            eprintln!("PROBE pid {{}} serve_first refused: other {{}} failed/lonely {{}} lane-empty {{}} none-held {{}} any-source {{}} finished {{}} | served by poll_parked {{}} unparked {{}} parked {{}} full rounds by the clock {{}} idle reads {{}}", std::process::id(), c(0), c(1), c(2), c(3), c(4), c(5), c(6), c(7), c(8), c(9), c(10));
            let peers: Vec<_> = self.peers.iter().map(|p| p.0).collect();
            for r in peers {{ eprintln!("PROBE pid {{}} lane messages sent to rank {{r}}: {{}}", std::process::id(), e.lane_sent(r)); }}
            tracing::debug!("hxcomm: domain closes: finishing sends, Bye to every peer");''')
