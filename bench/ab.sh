#!/usr/bin/env bash
# Interleaved A/B of builds or settings: the machine's speed drifts from minute to minute (BENCHMARKS.md:
# the same binary's medians spread up to 19%), so variants are compared run by run in turn, never
# one batch after the other. A variant is LABEL=BINARY[,VAR=VALUE...]: a (saved) hxcomm binary and
# settings for its ranks. Every run runs each variant once (each run starting one variant later
# than the one before) with the same `hxcomm bench` arguments, on one 2-host testbed; then, per
# variant and size, the median over RUNS (MB/s for bandwidth tests, usec for latency; CPU-s per
# GB beside it) and its ratio to the first variant, then the raw runs. Each job is bracketed by a
# cache-line ping-pong between CPUs 0 and 1 (bench/cacheline_pingpong.c, 100,000 round trips,
# 10-50 ms): this VM puts its two CPUs ~50 or, for minutes at a time, ~240 ns apart, and a
# stream whose bytes cross between them moves ~8 or ~2 GB/s with it (BENCHMARKS.md, thirty-fifth
# session). The ratios are also given over only the runs whose two jobs saw the same placement.
#
#   sudo RUNS=7 bench/ab.sh before=/tmp/hxcomm.old after=target/release/hxcomm -- bibw --sizes 256k:256k
#   sudo NET="--rails 1 --rate none" bench/ab.sh \
#       rr=target/release/hxcomm,HX_POLICY=rr adaptive=target/release/hxcomm -- latency --sizes 8:8
#
#   NET   options of `hxcomm net up` for the testbed (default "--rails 4 --rate none"; always 2 hosts)
#   RUNS  runs (default 5)
# Takes /tmp/hxcomm-bench.lock for the whole run (one measurement at a time on 2 cores) and
# brings its testbed (`ab`) down on exit. Copies each binary first: a rebuild during the run
# cannot change what is measured.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
NET=${NET:-"--rails 4 --rate none"}
NAME=ab
labels=() bins=() envs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  spec=$1; shift
  label=${spec%%=*}
  rest=${spec#*=}
  if [ "$label" = "$spec" ] || [ -z "$label" ] || [ -z "$rest" ]; then
    echo "bench/ab.sh: a variant is LABEL=BINARY[,VAR=VALUE...], got '$spec'" >&2
    exit 2
  fi
  IFS=, read -r -a parts <<<"$rest"
  labels+=("$label")
  bins+=("${parts[0]}")
  envs+=("${parts[*]:1}")
done
if [ $# -eq 0 ] || [ ${#labels[@]} -lt 1 ]; then
  echo "usage: bench/ab.sh LABEL=BINARY[,VAR=VALUE...] ... -- BENCH-ARGS (see the header)" >&2
  exit 2
fi
shift
if [ "$(id -u)" != 0 ]; then
  echo "bench/ab.sh: needs root (network namespaces)" >&2
  exit 1
fi
tmp=$(mktemp -d /tmp/hxcomm-ab.XXXXXX)
for i in "${!bins[@]}"; do
  [ -x "${bins[$i]}" ] || { echo "bench/ab.sh: ${bins[$i]} is not an executable" >&2; exit 2; }
  cp "${bins[$i]}" "$tmp/hxcomm.$i"
done
H=$tmp/hxcomm.0
. bench/cacheline.sh
cacheline_build "$tmp/clpp"
cl() { cacheline_ns; }
trap '"$H" net down --name $NAME >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
exec 9>/tmp/hxcomm-bench.lock
flock 9
# shellcheck disable=SC2086
"$H" net up --name $NAME --hosts 2 $NET >/dev/null
start=$(date -u '+%F %H:%M')
nv=${#labels[@]}
for r in $(seq "$RUNS"); do
  # Each run starts one variant later: a position in the order can be worth several percent
  # (an A/A run of one binary in two places differed by 4.7% at 64 KiB); rotating spreads it.
  for k in $(seq 0 $((nv - 1))); do
    i=$(( (k + r - 1) % nv ))
    b=$tmp/hxcomm.$i
    opts=()
    for e in ${envs[$i]}; do opts+=(--env "$e"); done
    # The output is parsed after the run: a parser started beside the ranks (python3's start
    # takes tens of ms of CPU) slowed the first size measured (8 B latency 45 us instead of 7).
    before=$(cl)
    "$b" run --net --name $NAME -n 2 "${opts[@]}" -- "$b" bench "$@" --json >"$tmp/out" 2>"$tmp/err" ||
      { echo "run $r ${labels[$i]} failed:" >&2; tail -3 "$tmp/err" >&2; continue; }
    after=$(cl)
    python3 -c '
import json, sys
ns = max(float(x) for x in sys.argv[3:5])
for line in sys.stdin:
    if line.startswith("{"):
        d = json.loads(line)
        v = d["usec"] if d["bench"] == "latency" else d["mb_per_s"]
        print(sys.argv[1], sys.argv[2], d["bytes"], v, d["cpu_s_per_gb"], ns)
' "$r" "${labels[$i]}" "$before" "$after" <"$tmp/out" >>"$tmp/raw"
  done
done
echo "# hxcomm bench $*, testbed $NET, medians of $RUNS interleaved runs ($start to $(date -u +%H:%M) UTC)"
for i in "${!labels[@]}"; do
  echo "#   ${labels[$i]} = ${bins[$i]}${envs[$i]:+ with ${envs[$i]}}"
done
python3 - "$tmp/raw" "${labels[@]}" <<'EOF'
import statistics, sys
from collections import defaultdict
raw, labels = sys.argv[1], sys.argv[2:]
FAR_NS = 150.0
val, cpu, per_run, place = defaultdict(list), defaultdict(list), defaultdict(dict), defaultdict(dict)
lines = open(raw).read().splitlines() if __import__("os").path.exists(raw) else []
for line in lines:
    run, label, size, v, c, ns = line.split()
    val[(label, int(size))].append(float(v))
    cpu[(label, int(size))].append(float(c))
    per_run[(int(size), run)][label] = float(v)
    place[(int(size), run)][label] = float(ns) >= FAR_NS
def paired(s, a, b, same_placement=False):
    # Within each run, then the median: the machine changes speed between runs.
    v = [d[a] / d[b] for (ss, run), d in per_run.items() if ss == s and a in d and b in d
         and (not same_placement or place[(ss, run)][a] == place[(ss, run)][b])]
    return (statistics.median(v) if v else None), len(v)
sizes = sorted({k[1] for k in val})
far = sum(1 for d in place.values() for f in d.values() if f)
print(f"\njobs in the far placement (a cache line >= {FAR_NS:.0f} ns one way around them): {far} of {sum(len(d) for d in place.values())}")
print("\n| size | " + " | ".join(labels) + " | " + " | ".join(f"{l} / {labels[0]}" for l in labels[1:])
      + " | " + " | ".join(f"{l} / {labels[0]}, same placement (runs)" for l in labels[1:]) + " |")
print("|---:|" + "---:|" * (3 * len(labels) - 2))
for s in sizes:
    med = {l: statistics.median(val[(l, s)]) if val[(l, s)] else None for l in labels}
    cells = [f"{med[l]:.2f} ({statistics.median(cpu[(l, s)]):.2f}, n={len(val[(l, s)])})" if med[l] else "-" for l in labels]
    ratios = [f"{x:.3f}" if (x := paired(s, l, labels[0])[0]) else "-" for l in labels[1:]]
    same = [f"{x:.3f} ({p[1]})" if (x := (p := paired(s, l, labels[0], True))[0]) else f"- ({p[1]})"
            for l in labels[1:]]
    name = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB" if s >= 1024 else f"{s} B"
    print(f"| {name} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " | " + " | ".join(same) + " |")
print("\nvalue: median (MB/s, or usec for latency) with CPU-s per GB and the number of runs; X / first: the median of the ratios within each run (same placement: over the runs whose two jobs saw the CPUs alike); raw runs (run variant bytes value CPU-s/GB cache-line-ns):")
print("\n".join(lines))
EOF
