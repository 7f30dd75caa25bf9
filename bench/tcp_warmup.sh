#!/usr/bin/env bash
# How a fresh connection warms up, with and without hxcomm (BENCHMARKS.md, "Rail sockets on BBR
# until they carry bulk data"): on a 2-host testbed with 4 unlimited rails, plain TCP over one
# rail under each congestion control (bench/tcp_warmup.c: median per block, congestion window,
# receive space), then hxcomm's rr and bind with the rails' default switching and with one
# algorithm throughout (HX_TCP_CONGESTION_LATENCY=same; bench/hx_warmup.c).
#
#   sudo bash bench/tcp_warmup.sh [SIZE] [MESSAGES]      (default 16384 3000)
#
# Takes /tmp/hxcomm-bench.lock; brings its testbed (`tw`) down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-16384}
n=${2:-3000}
hx=$PWD/target/release/hxcomm
out=$(mktemp -d /tmp/tcp_warmup.XXXXXX)
gcc -O2 -o "$out/tcp_warmup" bench/tcp_warmup.c
gcc -O2 -Iinclude -o "$out/hx_warmup" bench/hx_warmup.c -Ltarget/release -lhxcomm \
  -Wl,-rpath,"$PWD/target/release"
exec 9>/tmp/hxcomm-bench.lock
flock 9
"$hx" net down --name tw >/dev/null 2>&1 || true
"$hx" net up --name tw --hosts 2 --rails 4 --rate none >/dev/null
trap '"$hx" net down --name tw >/dev/null 2>&1; rm -rf "$out"' EXIT
for cc in cubic bbr; do
  echo "== plain TCP, $cc, $size B, medians per 100 messages"
  CC=$cc ip netns exec tw1 "$out/tcp_warmup" server 5601 "$size" "$n" &
  sleep 0.3
  CC=$cc ip netns exec tw0 "$out/tcp_warmup" client 10.10.0.2 5601 "$size" "$n" 100
  wait
done
for policy in rr bind; do
  for latency in bbr same; do
    echo "== hxcomm $policy, HX_TCP_CONGESTION_LATENCY=$latency, $size B, medians per 100 messages"
    HX_TCP_CONGESTION_LATENCY=$latency "$hx" run -n 2 --net --name tw --policy $policy -- \
      "$out/hx_warmup" "$size" "$n" 100
  done
done
