#!/usr/bin/env bash
# Throwaway probes of the provider's same-host lane path (BENCHMARKS.md, "The provider's
# shortest paths for the lane"): copies the tree at HEAD, applies bench/probes/provider_lane.py
# (TSC stamps, counters, busy loops by environment), builds the provider into a temporary
# directory, and runs Open MPI's 8-byte ping-pong (bench/mpi_osu.c, pinned) RUNS times. For each
# run: the latency, each rank's counters, and the one-way's segments from the stamps (medians,
# in TSC ticks and in ns at the TSC rate the run itself gives).
#
#   sudo RUNS=10 bash bench/probes/provider_lane.sh [VAR=VALUE ...]
#
# Since the lone receive's ticket (fortieth session) most messages are served by the idle CQ
# read itself, past `serve_first`, where the serving stamp sits: the segments then read nan or
# miss those messages; the counters still hold.
#
# VAR=VALUE pairs go to both ranks, e.g. EXP_SERVE=50, EXP_TRECV=200, EXP_NOFENCE=1; the
# provider directory is printed, for bench/provider_shm_latency.sh label:DIR,VAR=VALUE A/B runs.
# Needs valgrind-free tools only: cargo, mpicc.openmpi, mpirun.openmpi, python3. Takes
# /tmp/hxcomm-bench.lock and /tmp/hxcomm-cargo.lock (nothing may build or run beside it).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-10}
. bench/probes/build.sh
probe_build bench/probes/provider_lane.py
xs=()
for kv in "$@"; do xs+=(-x "$kv"); done
for i in $(seq "$RUNS"); do
  rm -rf /tmp/tsc && mkdir -p /tmp/tsc
  mpirun.openmpi --bind-to core --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm \
    -np 2 -x FI_PROVIDER_PATH="$out/provider" "${xs[@]}" "$out/osu" latency:8:50000:1000 \
    > "$out/run$i.out" 2> "$out/run$i.err" || true
  mkdir -p "$out/run$i.tsc" && mv /tmp/tsc/* "$out/run$i.tsc/" 2>/dev/null || true
  usec=$(grep -o 'usec=[0-9.]*' "$out/run$i.out" | cut -d= -f2)
  echo "run $i: one-way ${usec:-?} us"
  grep '^PROBE' "$out/run$i.err" | sed 's/^/  /' || true
  python3 - "$out/run$i.tsc" "${usec:-0}" <<'PY'
import bisect, os, statistics as st, sys
d, usec = sys.argv[1], float(sys.argv[2])
fs = sorted(os.listdir(d))
if len(fs) != 2:
    print("  (no stamps)"); sys.exit()
def load(f):
    return {l.split()[0]: [int(x) for x in l.split()[1:]] for l in open(os.path.join(d, f))}
a, b = load(fs[0]), load(fs[1])
def seg(src, dst):
    out = []
    for t in src[2000:42000]:
        i = bisect.bisect_right(dst, t)
        if i < len(dst):
            out.append(dst[i] - t)
    return st.median(out) if out else float('nan')
rows = []
for x, y in ((a, b), (b, a)):
    # Open MPI: a receive served -> fi_tinjectdata's entry; inject: -> the slot's store;
    # transfer and serve: the store -> the end of the peer's serve_first.
    rows.append((seg(x['P1'], x['P2']), seg(x['P2'], x['P0']), seg(x['P0'], y['P1'])))
rt = sum(sum(r) for r in rows)
ghz = rt / (2 * usec * 1000) if usec else float('nan')
for k, r in enumerate(rows):
    print(f"  rank {k}: Open MPI {r[0]:.0f} ticks ({r[0]/ghz:.0f} ns), inject {r[1]:.0f} ({r[1]/ghz:.0f} ns), "
          f"transfer and serve {r[2]:.0f} ({r[2]/ghz:.0f} ns)  [TSC {ghz:.2f} GHz from the run]")
PY
done
echo "raw outputs in $out"
