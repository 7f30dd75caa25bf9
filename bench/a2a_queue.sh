#!/usr/bin/env bash
# The 8-host all-to-all against the depth of the testbed's queues (BENCHMARKS.md, "hyper-crossbar,
# again"): testbed `hk` (hxb:2x2x2, 2 links per dimension, RATE, default 100mbit), then for each
# queue limit in LIMITS (bytes; default "1048576 262144 131072": the old 1 MiB floor, 21 ms,
# 10.5 ms at 100 Mbit/s) every tbf of the testbed is changed in place (`tc qdisc change ... limit
# L`) and `hxcomm bench alltoall --size 16M --rounds 5 --throughput` runs; prints the slowest
# rank's round times, their median over rounds 2-5 and its share of the link model 2 S / C with
# C = CAP MB/s (default 12.0: iperf3 over one link of this testbed at 100 Mbit/s). RUNS rounds of
# all limits, interleaved (default 2). As root; takes the bench lock; brings `hk` down at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
B=$PWD/target/release/hxcomm
RATE=${RATE:-100mbit}
LIMITS=${LIMITS:-"1048576 262144 131072"}
RUNS=${RUNS:-2}
CAP=${CAP:-12.0}
exec 9>/tmp/hxcomm-bench.lock
flock 9
trap '"$B" net down --name hk >/dev/null 2>&1 || true' EXIT
"$B" net up --name hk --topology hxb:2x2x2 --links-per-dim 2 --rate "$RATE" >/dev/null
setlimit() {
  for ns in $(ip netns list | awk '{print $1}' | grep '^hk'); do
    for dev in $(ip netns exec "$ns" tc qdisc show | awk '/qdisc tbf/ {print $5}' | sort -u); do
      ip netns exec "$ns" tc qdisc change dev "$dev" root tbf rate "$RATE" burst 131072 limit "$1"
    done
  done
}
for run in $(seq "$RUNS"); do
  for lim in $LIMITS; do
    setlimit "$lim"
    echo -n "run $run, queue limit $lim: "
    "$B" run --net --name hk -n 8 --timeout 300 -- "$B" bench alltoall --size 16M --rounds 5 --throughput 2>&1 |
      python3 -c '
import re, statistics, sys
cap = float(sys.argv[1]) * 1e6
rounds = [[float(x) for x in m[1].split(",")] for m in (re.search(r"rounds_s ([\d.,]+);", l) for l in sys.stdin) if m]
if len(rounds) != 8:
    sys.exit(f"{len(rounds)} of 8 ranks reported")
per = [max(r[i] for r in rounds) for i in range(len(rounds[0]))]
med = statistics.median(per[1:])
model = 2 * 16 * 2**20 / cap
print(f"rounds {per} s, median of 2.. {med:.3f} s, {100 * model / med:.1f}% of 2 S / C ({model:.3f} s)")' "$CAP"
  done
done
