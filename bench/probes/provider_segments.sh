#!/usr/bin/env bash
# Where a round trip's time goes in Open MPI's 8-byte ping-pong over the provider, run by run
# (BENCHMARKS.md, "Where a slow round's time goes"): copies the tree at HEAD, applies
# bench/probes/provider_segments.py (TSC stamps, path counters, a timed register-only loop),
# builds the provider into a temporary directory and runs bench/mpi_osu.c's latency test
# (pinned) RUNS times. Per run: the latency, then per rank the mean of each segment between
# stamps (read -> send, fi_tinjectdata, send -> fi_trecv, fi_trecv, wait and serve, the loop)
# in ns, and how its reads were served (ticket, serve_first, poll) and how many idle.
#
#   sudo RUNS=24 [SIZE=8] bash bench/probes/provider_segments.sh
#
# The stamps cost ~10 ns a round trip. Takes /tmp/hxcomm-bench.lock and /tmp/hxcomm-cargo.lock.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-24}
SIZE=${SIZE:-8}
. bench/probes/build.sh
probe_build bench/probes/provider_segments.py
for i in $(seq "$RUNS"); do
  mpirun.openmpi --bind-to core --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm \
    -np 2 -x FI_PROVIDER_PATH="$out/provider" -x EXP_STATS=1 \
    "$out/osu" latency:$SIZE:50000:1000 >"$out/run.$i.txt" 2>&1
  echo "run $i: $(grep -o 'usec=[0-9.]*' "$out/run.$i.txt")"
  grep -o 'EXPSTATS rank [01][^E]*' "$out/run.$i.txt" | sort | sed 's/^EXPSTATS /  /'
done
echo "raw output in $out"
