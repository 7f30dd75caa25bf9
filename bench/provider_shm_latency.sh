#!/usr/bin/env bash
# Same-host 8-byte latency through Open MPI: vader (pml ob1, btl vader) against Open MPI over
# the hxcomm provider (pml cm, mtl ofi), one or more provider builds, RUNS interleaved rounds,
# both ranks pinned (--bind-to core); medians and per-round figures (BENCHMARKS.md, "Through
# Open MPI and the provider again").
#
#   sudo RUNS=5 bash bench/provider_shm_latency.sh [label:dir[,VAR=VALUE...] ...]
#   e.g. lane:target/release ring:target/release,HX_SHM_LANE=0
#
# Each dir holds a libhxcomm_fi.so (default: now:target/release); settings after it go to both
# ranks. Each round starts with a
# cache-line ping-pong between CPUs 0 and 1 (bench/cacheline_pingpong.c): the ratios are given
# again per CPU placement. SIZE (default 8) and ITERS
# (default 50000) set the message; TEST replaces the whole bench/mpi_osu.c test (e.g.
# TEST=bibw:4194304:20:2:64 BIND=none: two ways, MB/s, as BENCHMARKS.md's "Two ways through
# the provider" measured it), BIND the ranks' binding (default core). Takes /tmp/hxcomm-bench.lock and /tmp/hxcomm-cargo.lock
# (no build may run beside it on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
SIZE=${SIZE:-8}
ITERS=${ITERS:-50000}
[ $# -gt 0 ] || set -- "now:$PWD/target/release"
out=$(mktemp -d /tmp/provider_shm_latency.XXXXXX)
mpicc.openmpi -O2 -o "$out/osu" bench/mpi_osu.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec 9>/tmp/hxcomm-bench.lock
flock 9
exec 8>/tmp/hxcomm-cargo.lock
flock 8
test=${TEST:-latency:$SIZE:$ITERS:1000}
BIND=${BIND:-core}
field=usec unit=us
case $test in latency:*) ;; *) field=mb_per_s unit=MB/s ;; esac
usec() { grep -o "$field=[0-9.]*" | cut -d= -f2; }
. bench/cacheline.sh
cacheline_build "$out/clpp"
cl() { cacheline_ns; }
for i in $(seq "$RUNS"); do
  echo "placement $(cl)"
  v=$(mpirun.openmpi -np 2 --bind-to "$BIND" --mca pml ob1 --mca btl vader,self "$out/osu" "$test" 2>/dev/null | usec)
  echo "vader ${v:-nan}"
  for c in "$@"; do
    label=${c%%:*}
    rest=${c#*:}
    dir=$(realpath "${rest%%,*}")
    # Settings after the dir, comma-separated: passed to both ranks.
    xs=()
    if [ "$rest" != "${rest%%,*}" ]; then
      IFS=, read -ra kv <<< "${rest#*,}"
      for x in "${kv[@]}"; do xs+=(-x "$x"); done
    fi
    v=$(timeout 120 mpirun.openmpi -np 2 --bind-to "$BIND" --mca pml cm --mca mtl ofi \
      --mca mtl_ofi_provider_include hxcomm -x FI_PROVIDER_PATH="$dir" ${xs[@]+"${xs[@]}"} \
      "$out/osu" "$test" 2>/dev/null | usec)
    echo "$label ${v:-nan}"
  done
done | tee "$out/raw.txt" | UNIT=$unit python3 -c '
import os, statistics, sys
unit = os.environ["UNIT"]
runs, probes = {}, []
for line in sys.stdin:
    k, v = line.split()
    if k == "placement":
        probes.append(float(v) if v else float("nan"))
        continue
    runs.setdefault(k, []).append(float(v))
base = statistics.median(runs["vader"])
for k, v in runs.items():
    m = statistics.median(v)
    per_round = statistics.median(x / y for x, y in zip(v, runs["vader"]))
    print(f"{k:12} median {m:.3f} {unit}  {m / base:.2f}x vader (per round {per_round:.2f}x)  per round: {v}")
# Where the VM put its two CPUs when each round started (a cache line one way between CPUs 0
# and 1: ~50 or ~250 ns): vader moves more lines per message than the ring, so the ratio
# depends on it (BENCHMARKS.md, "Where the bars stand").
print(f"cache line one way at each round start, ns: {probes}")
for name, near in (("near (< 150 ns)", True), ("far (>= 150 ns)", False)):
    idx = [i for i, p in enumerate(probes) if (p < 150) == near]
    if not idx:
        continue
    for k, v in runs.items():
        if k == "vader":
            continue
        r = statistics.median(v[i] / runs["vader"][i] for i in idx)
        print(f"{k:12} {name}, {len(idx)} rounds: per round {r:.2f}x vader")
'
echo "raw output in $out"
