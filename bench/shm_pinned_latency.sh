#!/usr/bin/env bash
# Pinned 8-byte shared-memory latency (BENCHMARKS.md, "Same host (shared memory) against vader"):
# RUNS rounds (default 5), each Open MPI vader (--bind-to core, bench/mpi_osu.c) and then every
# given hxcomm binary (ranks pinned with taskset, one per core), interleaved; medians printed.
# Compare builds by copying binaries first, e.g.
#   cp target/release/hxcomm /tmp/hx-new
#   flock /tmp/hxcomm-bench.lock bash bench/shm_pinned_latency.sh 5 "old:/tmp/hx-old new:/tmp/hx-new"
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
CONFS=${2:-"hxcomm:$PWD/target/release/hxcomm"}
osu=$(mktemp /tmp/osu.XXXXXX)
mpicc -O2 -o "$osu" bench/mpi_osu.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for _ in $(seq "$RUNS"); do
  v=$(mpirun -np 2 --bind-to core --mca pml ob1 --mca btl vader,self "$osu" latency:8:50000:1000 2>/dev/null | grep -o "usec=[0-9.]*" | cut -d= -f2)
  echo "vader $v"
  for c in $CONFS; do
    IFS=: read -r l b <<<"$c"
    v=$($b run -n 2 -- sh -c 'exec taskset -c $HX_RANK "$@"' sh "$b" bench latency --sizes 8:8 --iterations 50000 --warmup 1000 --json | grep -o '"usec":[0-9.]*' | cut -d: -f2)
    echo "$l $v"
  done
done | python3 -c '
import sys, statistics
from collections import defaultdict
d = defaultdict(list)
for l in sys.stdin:
    a, b = l.split(); d[a].append(float(b))
for k, v in d.items(): print(k, "median %.3f" % statistics.median(v), v)'
rm -f "$osu"
