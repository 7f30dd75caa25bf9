#!/usr/bin/env bash
# Measures a 4 MiB `bw --validate` run through a rail failure (issue 5 targets), as root:
#   bench/failover.sh [RAILS_TO_CUT] [POLICY]
# brings up testbed hxfo (2 hosts x 4 rails, 1gbit), runs hxcomm bw with a per-iteration
# timeline, cuts RAILS_TO_CUT rails (default 1) of host 0 three seconds in, restores them four
# seconds later, and reports: the 3-rail (or remaining) bandwidth after the cut against the same
# number of rails measured alone, the time from the cut until the remaining rails are fully used,
# and the time from the restore until the restored rail carries traffic (byte counters), with the
# iterations around the cut (seconds after it: MB/s). HXCOMM=/path/to/hxcomm measures another
# build (default target/release/hxcomm, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
cut_n=${1:-1}
policy=${2:-adaptive}
validate=${VALIDATE---validate}   # VALIDATE= (empty) measures without checking bytes
B=${HXCOMM:-target/release/hxcomm}
[ -x $B ] || cargo build --release
name=hxfo
$B net up --name $name --hosts 2 --rails 4 --rate 1gbit >/dev/null
trap '$B net down --name $name >/dev/null' EXIT
tmp=$(mktemp -d)
left=$((4 - cut_n))
rails_left=$(seq -s, 0 $((left - 1)) | sed 's/[0-9]\+/r&/g')
# Reference: the remaining rails alone.
$B run -n 2 --net --name $name --policy "$policy" --env HX_RAILS="$rails_left" -- \
  $B bench bw --sizes 4M:4M --window 16 --iterations 40 $validate --json > "$tmp/ref.json"
# The run with the cut: rails r(4-cut_n)..r3 of host 0 go down at +3 s, come back at +7 s.
( sleep 3; date +%s.%N > "$tmp/cut"; for r in $(seq $left 3); do $B net link --name $name 0 $r down >/dev/null; done
  sleep 4; date +%s.%N > "$tmp/restore"; for r in $(seq $left 3); do $B net link --name $name 0 $r up >/dev/null; done
  # Poll the restored rail's counter to see when it carries traffic again.
  last=$(ip netns exec ${name}0 cat /sys/class/net/r3/statistics/tx_bytes)
  for i in $(seq 1 400); do
    sleep 0.01
    now=$(ip netns exec ${name}0 cat /sys/class/net/r3/statistics/tx_bytes)
    if [ $((now - last)) -gt 1000000 ]; then date +%s.%N > "$tmp/carries"; break; fi
  done ) &
$B run -n 2 --net --name $name --policy "$policy" --env HX_LOG=warn -- \
  $B bench bw --sizes 4M:4M --window 16 --iterations 120 $validate --timeline --json \
  > "$tmp/run.json" 2> "$tmp/run.err" || { cat "$tmp/run.err"; exit 1; }
wait
python3 - "$tmp" "$cut_n" "$policy" "$validate" <<'PY'
import json, sys, statistics
d, cut_n, policy = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ref = [json.loads(l) for l in open(d + "/ref.json") if '"bench"' in l][-1]["mb_per_s"]
tl = [json.loads(l) for l in open(d + "/run.json") if '"timeline"' in l]
total = [json.loads(l) for l in open(d + "/run.json") if '"bench"' in l][-1]["mb_per_s"]
cut = float(open(d + "/cut").read()); restore = float(open(d + "/restore").read())
try: carries = float(open(d + "/carries").read())
except Exception: carries = None
after = [p for p in tl if cut + 1.5 <= p["t"] <= restore]
steady = statistics.median(p["mb_per_s"] for p in after) if after else 0.0
full = next((p["t"] - cut for p in tl if p["t"] > cut and p["mb_per_s"] >= 0.95 * ref), None)
print(f"policy {policy}: {4 - cut_n} of 4 rails left after the cut")
print(f"  {4 - cut_n}-rail reference (alone):        {ref:8.1f} MB/s")
print(f"  after the cut (median, +1.5 s..restore): {steady:8.1f} MB/s = {100 * steady / ref:5.1f}% of the reference")
print(f"  cut -> remaining rails at >=95%:      {full if full is None else round(full, 2)} s")
print(f"  restore -> rail carries traffic:      {None if carries is None else round(carries - restore, 2)} s")
print(f"  whole run ({len(tl)} iterations{', validated' if sys.argv[4] else ''}): {total:.1f} MB/s, completed")
print("  around the cut (s after it: MB/s):", " ".join(f"{p['t'] - cut:.2f}: {p['mb_per_s']:.0f}" for p in tl if -0.3 < p["t"] - cut < 2.5))
PY
