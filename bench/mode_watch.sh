#!/usr/bin/env bash
# The machine's speed modes beside hxcomm's latency (issue 10): on a 2-host testbed, back-to-back
# jobs of `hxcomm bench latency --sizes 8:8 --floor` (the plain TCP ping-pong of the same two
# processes just before and after hxcomm's figure), each bracketed by a two-process cache-line
# ping-pong on this host (bench/cacheline_pingpong.c, pinned to CPUs 0 and 1). Prints one line
# per job, then hxcomm's latency grouped by the job's floor and by the cache line's one-way time.
#
#   sudo SECONDS_=150 bench/mode_watch.sh      # NET="--rails 2 --rate 1gbit" POLICY=stripe ITERS=2000
#
# Nothing is parsed while a job runs: a parser starting beside the two spinning ranks takes a
# core from them (a first version piped each job into python3 and read 9-40 us).
# Takes /tmp/hxcomm-bench.lock for the whole run and brings its testbed (`mw`) down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECONDS_:-150}
NET=${NET:-"--rails 2 --rate 1gbit"}
POLICY=${POLICY:-stripe}
ITERS=${ITERS:-2000}
H=$(realpath "${HXCOMM:-target/release/hxcomm}")
NAME=mw
out=$(mktemp -d)
trap '"$H" net down --name $NAME >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
. bench/cacheline.sh
cacheline_build "$out/clpp"
exec 9>/tmp/hxcomm-bench.lock
flock 9
"$H" net down --name $NAME >/dev/null 2>&1 || true
# shellcheck disable=SC2086
"$H" net up --name $NAME --hosts 2 $NET >/dev/null
n=$(sed -n 's/.*--rails \([0-9][0-9]*\).*/\1/p' <<< "$NET")
rails=$(seq 0 $((${n:-1} - 1)) | sed 's/^/r/' | paste -sd,)
cl() { cacheline_ns 200000; }
end=$((SECONDS + SECS))
while [ $SECONDS -lt $end ]; do
  a=$(cl)
  j=$("$H" run -n 2 --net --name $NAME --env HX_RAILS="$rails" --policy "$POLICY" -- \
    "$H" bench latency --sizes 8:8 --iterations "$ITERS" --warmup 100 --floor --json 2>&1 |
    grep '"bench"' || true)
  b=$(cl)
  echo "$a $b $j" >> "$out/raw"
done
python3 - "$out/raw" <<'EOF'
import json, statistics as st, sys
rows = []
for line in open(sys.argv[1]):
    a, b, j = line.split(" ", 2)
    try:
        d = json.loads(j)
    except ValueError:
        continue
    rows.append(((float(a) + float(b)) / 2, d["usec"], d["floor_before_usec"], d["floor_after_usec"]))
print(f"{len(rows)} jobs")
print("cache line (ns) | hxcomm (us) | floor before | floor after")
for r in rows:
    print(f"{r[0]:.1f} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.2f}")
def summary(name, groups):
    print(f"\n| {name} | jobs | hxcomm, median [range] | floor, median | hxcomm above its floor, p10 / p50 / p90 |")
    print("|---|---:|---|---|---|")
    for k, v in groups:
        if not v:
            continue
        d = sorted(x[1] - (x[2] + x[3]) / 2 for x in v)
        h = [x[1] for x in v]
        f = [(x[2] + x[3]) / 2 for x in v]
        print(f"| {k} | {len(v)} | {st.median(h):.2f} [{min(h):.2f}-{max(h):.2f}] | {st.median(f):.2f} "
              f"| {d[len(d) // 10]:.2f} / {st.median(d):.2f} / {d[len(d) * 9 // 10]:.2f} |")
steady = [r for r in rows if abs(r[2] - r[3]) <= 0.1 * min(r[2], r[3])]
fl = lambda r: (r[2] + r[3]) / 2
summary("plain TCP floor of the job (floors before and after within 10%)", [
    ("< 4.2 us", [r for r in steady if fl(r) < 4.2]),
    ("4.2-6.0 us", [r for r in steady if 4.2 <= fl(r) < 6.0]),
    (">= 6.0 us", [r for r in steady if fl(r) >= 6.0]),
])
summary("cache line one way", [
    ("< 50 ns", [r for r in rows if r[0] < 50]),
    ("50-200 ns", [r for r in rows if 50 <= r[0] < 200]),
    (">= 200 ns", [r for r in rows if r[0] >= 200]),
])
EOF
