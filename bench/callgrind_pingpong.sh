#!/usr/bin/env bash
# Instructions per call on the provider's small-message path (BENCHMARKS.md, "MPI over hxcomm",
# 2026-11-23): fi_rdm_tagged_pingpong, 8 B, 5000 iterations over loopback TCP, the client under
# callgrind (no PMU needed), the server at full speed. Prints inclusive instructions and calls
# of fi_tinject, fi_trecv, fi_cq_read and the engine's send/receive, and instructions per call.
#   bash bench/callgrind_pingpong.sh [OUT]      (needs valgrind; fabtests from tests/provider/ci.sh
#                                                in target/fabtests, or FABTESTS_BIN)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/hxcomm-callgrind.out}
ft=${FABTESTS_BIN:-$PWD/target/fabtests/bin}
[ -x "$ft/fi_rdm_tagged_pingpong" ] || { echo "no fabtests in $ft (run tests/provider/ci.sh once)"; exit 1; }
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install -y valgrind)"; exit 1; }
cargo build --release -p hx-ofi >/dev/null 2>&1 || { echo "build failed"; exit 1; }
export FI_PROVIDER_PATH=$PWD/target/release HX_TRANSPORTS=tcp
HX_JOB_SECRET=$(printf '%064d' 7)
export HX_JOB_SECRET
timeout 120 "$ft/fi_rdm_tagged_pingpong" -p hxcomm -S 8 -I 5000 -b -s 127.0.0.1 >/dev/null 2>&1 &
server=$!
sleep 0.3
timeout 120 valgrind --tool=callgrind --callgrind-out-file="$out" \
  "$ft/fi_rdm_tagged_pingpong" -p hxcomm -S 8 -I 5000 -b -s 127.0.0.1 127.0.0.1 >/dev/null 2>&1
wait "$server" || true
echo "inclusive instructions over the run:"
callgrind_annotate --inclusive=yes "$out" 2>/dev/null \
  | grep -E "Engine::isend_with \[|Engine::irecv_filtered \[|Backend>::collect \[" | cut -c1-140
echo "per call (inclusive instructions / calls):"
callgrind_annotate --inclusive=yes --tree=caller "$out" 2>/dev/null \
  | grep -E "^ *[0-9,]+ \([ 0-9.]+%\)  < .*hxcomm_fi::(cq::cq_read|ep::t_inject|ep::t_injectdata|ep::t_recv) \(" \
  | sed -E 's/^ *([0-9,]+) .*hxcomm_fi::([a-z_:]+) \(([0-9,]+)x\).*/\1 \2 \3/' | tr -d , \
  | awk '{ printf "  %-16s %10d calls %6.0f instructions each\n", $2, $3, $1 / $3 }'
