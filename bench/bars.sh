#!/usr/bin/env bash
# Every benchmark bar of issues 8 (MPI over hxcomm) and 10 (small messages, fast links) measured
# again in one sitting, by the commands BENCHMARKS.md names for each, one after the other (never
# two at once on 2 cores). Prints, per step, the exact command, its wall time and the lines of
# its output that carry the verdicts; keeps every raw output in $OUT. BENCHMARKS.md's "Where the
# bars stand" is transcribed from one such run.
#
#   sudo bash bench/bars.sh                  # every step, ~30 minutes
#   sudo bash bench/bars.sh latency shm      # only those steps
#
# Steps (in this order):
#   wire        4 x 1 Gbit/s: bw and bibw of every policy, iperf3, Open MPI (btl/tcp and over
#               hxcomm), MPICH; CPU-s per GB                       (issue 8 and issue 10 bars)
#   unequal     1+1+2+4 Gbit/s one way, hxcomm and Open MPI over hxcomm against the iperf3 sum
#   latency     8 B over one unlimited rail: hxcomm, sockperf, Open MPI (both ways), MPICH
#   unlimited   1 and 4 unlimited rails, bw and bibw: hxcomm against iperf3's aggregate; then
#               one way run by run beside each CPU's user, kernel and idle time (oneway_cpu.sh)
#   fast-links  1 and 4 unlimited rails, 64 KiB-4 MiB, every policy, one way then both ways
#   shm         same host: hxcomm and Open MPI over hxcomm against vader, latency/bw/bibw/rate
#               (shm, mtl-shm and failover's Open MPI half use target/release whatever HXCOMM is)
#   mtl-shm     same host through Open MPI, over hxcomm against vader: 8 B latency with both
#               ranks pinned (4 x RUNS rounds, also split by CPU placement), then 4 MiB bandwidth
#   demo        the demo's verdicts (adaptive within 5% of the best fixed policy)
#   failover    one of 4 rails cut: hxcomm bw --validate, then Open MPI over hxcomm
# RUNS (default 5) sets the runs of latency, unlimited, fast-links, shm and mtl-shm; wire and
# unequal take 3 (iperf3 and five tools at 5 s each). HXCOMM: the binary (default
# target/release/hxcomm; the provider is taken from its directory). OUT: where raw outputs go
# (default a fresh /tmp/bars.XXXXXX).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench/bars.sh: needs root (testbeds)" >&2; exit 1; }
RUNS=${RUNS:-5}
HXCOMM=$(realpath "${HXCOMM:-target/release/hxcomm}")
[ -x "$HXCOMM" ] || { echo "bench/bars.sh: no $HXCOMM (cargo build --release)" >&2; exit 1; }
OUT=${OUT:-$(mktemp -d /tmp/bars.XXXXXX)}
mkdir -p "$OUT"
all=(wire unequal latency unlimited fast-links shm mtl-shm demo failover)
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=("${all[@]}")
for s in "${steps[@]}"; do
  [[ " ${all[*]} " == *" $s "* ]] || { echo "bench/bars.sh: unknown step '$s' (${all[*]})" >&2; exit 2; }
done
LOCK=/tmp/hxcomm-bench.lock

# run STEP PATTERN COMMAND...: runs the command (output to $OUT/STEP.log), then prints the lines
# matching PATTERN (extended grep).
run() {
  local step=$1 pattern=$2
  shift 2
  echo "=== $step: $*"
  local t0=$SECONDS rc=0
  "$@" >"$OUT/$step.log" 2>&1 || rc=$?
  echo "    (${step}: $((SECONDS - t0)) s, exit $rc, raw output $OUT/$step.log)"
  grep -E "$pattern" "$OUT/$step.log" || true
  echo
}

compare_rows='^(### |\| [a-zA-Z ]|- (bw|bibw)[^:]*: iperf3)'
echo "bench/bars.sh at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo '+changes'), $(date -u '+%Y-%m-%d %H:%M UTC'), raw outputs in $OUT"
echo
for s in "${steps[@]}"; do
  case $s in
    wire)
      run wire "$compare_rows" flock $LOCK "$HXCOMM" bench compare --rails 4 --tests bw,bibw \
        --runs 3 --mpi --all-policies ;;
    unequal)
      run unequal "$compare_rows" flock $LOCK "$HXCOMM" bench compare --rails 4 \
        --rate 1gbit,1gbit,2gbit,4gbit --tests bw --runs 3 --mpi ;;
    latency)
      run latency "$compare_rows" flock $LOCK "$HXCOMM" bench compare --rails 1 --rate none \
        --tests latency --runs "$RUNS" --mpi ;;
    unlimited)
      run unlimited "$compare_rows" flock $LOCK "$HXCOMM" bench compare --rails 1,4 --rate none \
        --tests bw,bibw --runs "$RUNS" ;
      run oneway-cpu '^\|' env RUNS=$((RUNS * 2)) HXCOMM="$HXCOMM" bash bench/oneway_cpu.sh ;;
    fast-links)
      run fast-links-bw '^(\||#)' env RUNS="$RUNS" HXCOMM="$HXCOMM" bash bench/fast_links.sh
      run fast-links-bibw '^(\||#)' env RUNS="$RUNS" BENCH=bibw HXCOMM="$HXCOMM" \
        bash bench/fast_links.sh ;;
    shm)
      run shm '^(\| |  [a-zA-Z+ ]+ / [a-zA-Z ]+:)' flock $LOCK bash bench/shm_compare.sh "$RUNS" ;;
    mtl-shm)
      # Four times the rounds: this VM's rounds fall into a fast and a slow mode, and five of
      # them are a lottery between the two (BENCHMARKS.md, fortieth session).
      run mtl-shm-latency 'median|rounds:' env RUNS=$((RUNS * 4)) bash \
        bench/provider_shm_latency.sh "now:$(dirname "$HXCOMM")"
      run mtl-shm-bw 'median' env RUNS="$RUNS" TEST=bw:4194304:40:4:64 BIND=none bash \
        bench/provider_shm_latency.sh "now:$(dirname "$HXCOMM")" ;;
    demo)
      run demo '^(part|1gbit|unlimited)( |,)' flock $LOCK "$HXCOMM" demo \
        --out "$OUT/demo" ;;
    failover)
      run failover '^(policy|  )' env HXCOMM="$HXCOMM" flock $LOCK bash bench/failover.sh 1
      run mpi-failover '^(hxcomm:|  before the cut|    MPI_OSU)' flock $LOCK \
        bash bench/mpi_failover.sh hxcomm ;;
  esac
done
