#!/usr/bin/env bash
# Instructions per message on the shared-memory small-message path (BENCHMARKS.md, "Again on
# 2026-11-23 (seventh session)"): `hxcomm bench latency` 8 B, 20,000 round trips over shared memory,
# rank 0 under callgrind (no PMU needed), rank 1 at full speed. Prints the inclusive instructions
# per round trip of the engine's send, receive and read paths (Core::rx_express is the in-place
# read; rx_done the staging one). Totals include idle polling rounds, whose number depends on how
# much faster rank 1 runs; compare the per-function lines between builds.
#   bash bench/callgrind_shm.sh [HXCOMM_BINARY] [OUT]     (needs valgrind)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-$PWD/target/release/hxcomm}
out=${2:-/tmp/hxcomm-callgrind-shm.out}
n=20100   # timed + warmup round trips
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install -y valgrind)"; exit 1; }
"$B" run -n 2 -- sh -c 'if [ "$HX_RANK" = 0 ]; then exec valgrind --tool=callgrind --callgrind-out-file='"$out"' "$@"; else exec "$@"; fi' \
  sh "$B" bench latency --sizes 8:8 --iterations 20000 --warmup 100 >/dev/null 2>&1
callgrind_annotate --inclusive=yes "$out" 2>/dev/null \
  | grep -E "Engine::(send|recv|start_recv|finish|read_polled|read_rail_until|progress_once) \[|::(rx_express|rx_done|ready) \[" \
  | awk -v n=$n '{gsub(",","",$1); printf "  %6d per round trip  %s\n", $1/n, $NF=="" ? $2 : $(NF-1)}'
