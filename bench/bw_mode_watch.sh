#!/usr/bin/env bash
# The machine's speed modes beside one-way bandwidth on unlimited rails (issue 10): rounds of
#   cache line | hxcomm bw | iperf3 free | iperf3 crossing | iperf3 paired | cache line
# on one 2-host testbed, where the cache line is a two-process ping-pong pinned to CPUs 0 and 1
# (bench/cacheline_pingpong.c). Prints one line per round, then each tool's rate grouped by the
# round's cache-line time: whether the slow one-way runs follow where the VM places its vCPUs.
#
#   sudo ROUNDS=20 bash bench/bw_mode_watch.sh    # NET="--rails 4 --rate none" SIZE=4M ITERS=20 SECS=2
#
# LEN=1M gives iperf3 `-l 1M` writes (default: iperf3's own, 128 KiB, as `hxcomm bench compare`).
#
# hxcomm's ranks are bound one per CPU by `hxcomm run`, so every byte crosses from CPU 0 to
# CPU 1 as it would cross a wire. iperf3 runs one client and one server per rail, three ways:
# free (left to the scheduler), crossing (clients on CPU 0, servers on CPU 1: hxcomm's
# placement) and paired (rail k's client and server both on CPU k mod 2: no byte crosses). Nothing is parsed while a job runs. Takes
# /tmp/hxcomm-bench.lock for the whole run and brings its testbed (`bm`) down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-20}
NET=${NET:-"--rails 4 --rate none"}
SIZE=${SIZE:-4M}
ITERS=${ITERS:-20}
SECS=${SECS:-2}
LEN=${LEN:-}
H=$(realpath "${HXCOMM:-target/release/hxcomm}")
NAME=bm
command -v iperf3 >/dev/null || { echo "needs iperf3" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bench/bw_mode_watch.sh: needs root (network namespaces)" >&2; exit 1; }
out=$(mktemp -d /tmp/bw_mode_watch.XXXXXX)
# shellcheck source=bench/iperf_rails.sh
. bench/iperf_rails.sh
cleanup() {
  for p in "${IPERF_SERVERS[@]}"; do kill "$p" 2>/dev/null || true; done
  "$H" net down --name $NAME >/dev/null 2>&1 || true
}
trap cleanup EXIT
. bench/cacheline.sh
cacheline_build "$out/clpp"
exec 9>/tmp/hxcomm-bench.lock
flock 9
"$H" net down --name $NAME >/dev/null 2>&1 || true
# shellcheck disable=SC2086
"$H" net up --name $NAME --hosts 2 $NET >/dev/null
rails=$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["hosts"][0]["rails"]))' \
  "$("$H" net status --name $NAME --json)")
cl() { cacheline_ns 200000; }
iperf() { iperf_rails $NAME "$rails" "$SECS" "$LEN" "$1" "$out" 5400; }
for r in $(seq 1 "$ROUNDS"); do
  a=$(cl)
  j=$("$H" run -n 2 --net --name $NAME -- "$H" bench bw --sizes "$SIZE:$SIZE" \
    --iterations "$ITERS" --json 2>&1 | grep '"bench"' || true)
  hx=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["mb_per_s"])' "$j" 2>/dev/null ||
    echo nan)
  free=$(iperf free)
  crossing=$(iperf crossing)
  paired=$(iperf paired)
  b=$(cl)
  echo "$r $a $b $hx $free $crossing $paired" | tee -a "$out/raw"
done
python3 - "$out/raw" <<'EOF'
import math, statistics as st, sys
BUCKETS = (("< 35 ns (one physical core, it seems)", 0, 35), ("35-80 ns", 35, 80),
           ("80-200 ns", 80, 200), (">= 200 ns (another socket, it seems)", 200, 1e9))
def bucket(ns):
    return next(name for name, lo, hi in BUCKETS if lo <= ns < hi)
groups = {}
for line in open(sys.argv[1]):
    r, a, b, hx, free, crossing, paired = line.split()
    ba, bb = bucket(float(a)), bucket(float(b))
    key = ba if ba == bb else "changed during the round"
    num = lambda x: float("nan") if x == "failed" else float(x)
    groups.setdefault(key, []).append(tuple(num(x) for x in (hx, free, crossing, paired)))
print("\n| cache line one way (before and after) | rounds | hxcomm MB/s, median [range] "
      "| iperf3 free | iperf3 crossing | iperf3 paired | hxcomm / free | hxcomm / crossing |")
print("|---|---:|---|---|---|---|---:|---:|")
def fmt(v):
    v = [x for x in v if not math.isnan(x)]
    return f"{st.median(v):,.0f} [{min(v):,.0f}-{max(v):,.0f}]" if v else "-"
for name in [b[0] for b in BUCKETS] + ["changed during the round"]:
    g = groups.get(name)
    if not g:
        continue
    def ratio(i):
        v = [x[0] / x[i] for x in g if x[i] > 0 and not math.isnan(x[0] / x[i])]
        return f"{st.median(v):.2f}" if v else "-"
    print(f"| {name} | {len(g)} | {fmt([x[0] for x in g])} | {fmt([x[1] for x in g])} "
          f"| {fmt([x[2] for x in g])} | {fmt([x[3] for x in g])} | {ratio(1)} | {ratio(2)} |")
EOF
