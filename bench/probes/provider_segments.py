#!/usr/bin/env python3
"""Throwaway probe patch for bench/probes/provider_segments.sh (BENCHMARKS.md, "Where a slow
round's time goes"): TSC stamps at fi_cq_read returning an entry, fi_tinjectdata in and out and
fi_trecv in and out; the time between consecutive stamps summed per segment (read -> inject,
inject, inject -> trecv, trecv, trecv -> read); counters of the paths a read took; every 64th
inject, a register-only loop timed (the CPU's own speed). Printed by each rank at fi_close of
its domain, when EXP_STATS is set.

    python3 bench/probes/provider_segments.py TREE
"""
import sys
from pathlib import Path

tree = Path(sys.argv[1])


def patch(rel, old, new):
    p = tree / rel
    s = p.read_text()
    if old not in s:
        sys.exit(f"provider_segments.py: {rel}: the text to patch is not there any more")
    p.write_text(s.replace(old, new, 1))


STATS = r'''
pub mod exp_stats {
    use std::sync::atomic::{AtomicU64, Ordering};
    pub static C: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];
    pub const NAMES: [&str; 6] =
        ["ticket_served", "serve_first", "poll_served", "idle_quiet", "trecv", "trecv_watched"];
    pub static T: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];
    pub static N: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];
    static LAST: AtomicU64 = AtomicU64::new(0);
    static LAST_KIND: AtomicU64 = AtomicU64::new(9);
    #[inline(always)]
    pub fn inc(i: usize) {
        C[i].fetch_add(1, Ordering::Relaxed);
    }
    fn tsc() -> u64 {
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    /// kind: 0 a read returned an entry, 1 inject in, 2 inject out, 3 trecv in, 4 trecv out.
    #[inline(always)]
    pub fn mark(kind: u64) {
        let now = tsc();
        let seg = match (LAST_KIND.load(Ordering::Relaxed), kind) {
            (0, 1) => 0,
            (1, 2) => 1,
            (2, 3) => 2,
            (3, 4) => 3,
            (4, 0) => 4,
            _ => 9,
        };
        if seg != 9 {
            let d = now.wrapping_sub(LAST.load(Ordering::Relaxed));
            if d < 1_000_000 {
                T[seg].fetch_add(d, Ordering::Relaxed);
                N[seg].fetch_add(1, Ordering::Relaxed);
            }
        }
        let mut last = now;
        if kind == 2 && N[1].load(Ordering::Relaxed) % 64 == 0 {
            let a = tsc();
            let mut x = std::hint::black_box(1u64);
            for i in 0..200u64 {
                x = x.wrapping_mul(3).wrapping_add(i);
            }
            std::hint::black_box(x);
            let b = tsc();
            T[5].fetch_add(b - a, Ordering::Relaxed);
            N[5].fetch_add(1, Ordering::Relaxed);
            last = tsc();
        }
        LAST.store(last, Ordering::Relaxed);
        LAST_KIND.store(kind, Ordering::Relaxed);
    }
    pub fn dump() {
        if std::env::var_os("EXP_STATS").is_none() {
            return;
        }
        // The TSC's rate, over 20 ms of this process's sleep.
        let t0 = tsc();
        let w0 = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let ghz = (tsc() - t0) as f64 / w0.elapsed().as_nanos() as f64;
        let mut s = format!(
            "EXPSTATS rank {}",
            std::env::var("OMPI_COMM_WORLD_RANK").unwrap_or_default()
        );
        for (i, n) in NAMES.iter().enumerate() {
            s += &format!(" {}={}", n, C[i].load(Ordering::Relaxed));
        }
        let names = ["read_to_send", "inject", "send_to_trecv", "trecv", "wait_serve", "cpu_loop"];
        for (i, n) in names.iter().enumerate() {
            let k = N[i].load(Ordering::Relaxed).max(1);
            s += &format!(" {}={:.1}ns", n, T[i].load(Ordering::Relaxed) as f64 / k as f64 / ghz);
        }
        eprintln!("{s}");
    }
}
'''

lib = tree / "crates/ofi/src/lib.rs"
lib.write_text(lib.read_text() + STATS)

patch("crates/ofi/src/domain.rs",
      "        let Some(st) = (unsafe { a.t.lane.take(buf) }) else {\n            return Idle::Look;\n        };",
      "        let Some(st) = (unsafe { a.t.lane.take(buf) }) else {\n            return Idle::Look;\n        };\n        crate::exp_stats::inc(0);")
patch("crates/ofi/src/domain.rs",
      "        if let Some((s, idle)) = st.backend.serve_first() {\n",
      "        if let Some((s, idle)) = st.backend.serve_first() {\n            crate::exp_stats::inc(1);\n")
patch("crates/ofi/src/domain.rs",
      "            Polled::Served => {}",
      "            Polled::Served => crate::exp_stats::inc(2),")
patch("crates/ofi/src/domain.rs",
      "        w.answered.store(answered + 1, Ordering::Relaxed);\n        Idle::Quiet",
      "        w.answered.store(answered + 1, Ordering::Relaxed);\n        crate::exp_stats::inc(3);\n        Idle::Quiet")
s = (tree / "crates/ofi/src/domain.rs").read_text()
i = s.index('unsafe extern "C" fn domain_close(f: *mut fid) -> c_int {')
j = s.index("{", i) + 1
(tree / "crates/ofi/src/domain.rs").write_text(s[:j] + "\n    crate::exp_stats::dump();" + s[j:])
patch("crates/ofi/src/ep.rs",
      "            if self.d.state.is_serial() && st.backend.watch_first() {\n",
      "            crate::exp_stats::inc(4);\n            if self.d.state.is_serial() && st.backend.watch_first() {\n                crate::exp_stats::inc(5);\n")
patch("crates/ofi/src/ep.rs",
      "    ctx: *mut c_void,\n) -> isize {\n    ep_call!(\n        ep,\n        ep_of(ep).recv(\n            true,\n            buf as *mut u8,\n            len,\n            src,\n            tag,\n            ignore,\n            ctx as usize,\n            None\n        )\n    )\n}",
      "    ctx: *mut c_void,\n) -> isize {\n    crate::exp_stats::mark(3);\n    let r = ep_call!(\n        ep,\n        ep_of(ep).recv(\n            true,\n            buf as *mut u8,\n            len,\n            src,\n            tag,\n            ignore,\n            ctx as usize,\n            None\n        )\n    );\n    crate::exp_stats::mark(4);\n    r\n}")
patch("crates/ofi/src/ep.rs",
      "    ep_call!(ep, ep_of(ep).inject(true, buf, len, dest, tag, Some(data)))\n}",
      "    crate::exp_stats::mark(1);\n    let r = ep_call!(ep, ep_of(ep).inject(true, buf, len, dest, tag, Some(data)));\n    crate::exp_stats::mark(2);\n    r\n}")
patch("crates/ofi/src/cq.rs",
      "    ret_size(|| obj(cq).read(buf, count, src).map(|n| n as isize))\n}\n\nunsafe extern \"C\" fn cq_readerr(",
      "    let r = ret_size(|| obj(cq).read(buf, count, src).map(|n| n as isize));\n    if r > 0 {\n        crate::exp_stats::mark(0);\n    }\n    r\n}\n\nunsafe extern \"C\" fn cq_readerr(")
