#!/usr/bin/env bash
# HX_SHM_PREFAULT=0 against the default, interleaved rounds (BENCHMARKS.md, "The first lap
# through a ring"): per round, for each setting, Open MPI + the provider's 8-byte latency over
# the first 15,000 messages of a job (warmup 1,000: a ring is populated once 32 KiB have gone
# through it), hxcomm's native message rate (bw 8 B, window 64) and native latency, as
# bench/shm_compare.sh runs them. Per-round ratios default/0 at the end.
#
#   sudo RUNS=7 bash bench/shm_prefault_ab.sh
#
# Uses target/release (hxcomm and libhxcomm_fi.so). Takes /tmp/hxcomm-bench.lock.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-7}
B=$PWD/target/release/hxcomm
out=$(mktemp -d /tmp/shm_prefault_ab.XXXXXX)
mpicc.openmpi -O2 -o "$out/osu" bench/mpi_osu.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec 9>/tmp/hxcomm-bench.lock
flock 9
for r in $(seq "$RUNS"); do
  for pf in 0 64m; do
    l=$(mpirun.openmpi -np 2 --bind-to core --mca pml cm --mca mtl ofi \
      --mca mtl_ofi_provider_include hxcomm -x FI_PROVIDER_PATH="$PWD/target/release" \
      -x HX_SHM_PREFAULT=$pf "$out/osu" latency:8:15000:1000 2>/dev/null |
      grep -o "usec=[0-9.]*" | cut -d= -f2)
    rate=$($B run -n 2 --timeout 60 --env HX_SHM_PREFAULT=$pf -- $B bench bw --sizes 8:8 \
      --iterations 4000 --warmup 400 --window 64 --json 2>/dev/null |
      grep -o '"mb_per_s":[0-9.]*' | head -1 | cut -d: -f2)
    nl=$($B run -n 2 --timeout 60 --env HX_SHM_PREFAULT=$pf -- $B bench latency --sizes 8:8 \
      --iterations 100000 --warmup 10000 --json 2>/dev/null |
      grep -o '"usec":[0-9.]*' | head -1 | cut -d: -f2)
    echo "$r $pf ${l:-nan} ${rate:-nan} ${nl:-nan}"
  done
done | tee "$out/raw.txt" | python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin]
for r in rows:
    print(f"round {r[0]} HX_SHM_PREFAULT={r[1]}: Open MPI + hxcomm first 15,000 messages {r[2]} us, native rate {r[3]} MB/s, native latency {r[4]} us")
by = {}
for r in rows:
    by.setdefault(r[0], {})[r[1]] = [float(x) for x in r[2:]]
for i, name in enumerate(["Open MPI + hxcomm latency", "native rate", "native latency"]):
    ratios = [v["64m"][i] / v["0"][i] for v in by.values() if "0" in v and "64m" in v]
    print(f"{name}: default / 0 per round {[round(x, 2) for x in ratios]} -> median {statistics.median(ratios):.2f}x")
'
echo "raw output in $out"
