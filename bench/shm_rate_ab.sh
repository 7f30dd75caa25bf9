#!/usr/bin/env bash
# hxcomm's own same-host 8-byte latency and message rate (bw, window 64) for two or more
# builds, interleaved job by job (the VM's speed changes from minute to minute: compare within
# rounds, BENCHMARKS.md): per round, each build's latency (us) and rate (MB/s), then the
# per-round median ratio of each build to the first.
#
#   sudo RUNS=9 bash bench/shm_rate_ab.sh before:/tmp/old after:target/release
#
# Each dir holds an `hxcomm` binary (copied first, so a rebuild cannot change what runs).
# Takes /tmp/hxcomm-bench.lock.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-9}
[ $# -ge 2 ] || { echo "usage: bench/shm_rate_ab.sh label:dir label:dir ..."; exit 1; }
out=$(mktemp -d /tmp/shm_rate_ab.XXXXXX)
labels=()
for c in "$@"; do
  l=${c%%:*}
  labels+=("$l")
  cp "$(realpath "${c#*:}")/hxcomm" "$out/$l"
done
exec 9>/tmp/hxcomm-bench.lock
flock 9
field() { grep -o "\"$1\":[0-9.]*" | head -1 | cut -d: -f2; }
for i in $(seq "$RUNS"); do
  line="round $i:"
  for l in "${labels[@]}"; do
    b=$out/$l
    lat=$("$b" run -n 2 --timeout 120 -- "$b" bench latency --sizes 8:8 --iterations 50000 \
      --warmup 2000 --json 2>/dev/null | field usec)
    rate=$("$b" run -n 2 --timeout 120 -- "$b" bench bw --sizes 8:8 --iterations 2000 \
      --warmup 200 --window 64 --json 2>/dev/null | field mb_per_s)
    line="$line $l ${lat:-nan} us ${rate:-nan} MB/s;"
    echo "$i $l ${lat:-nan} ${rate:-nan}" >> "$out/raw.txt"
  done
  echo "$line"
done
python3 - "$out/raw.txt" "${labels[@]}" <<'PY'
import sys, statistics, collections
raw, labels = sys.argv[1], sys.argv[2:]
v = collections.defaultdict(dict)
for l in open(raw):
    i, lab, lat, rate = l.split()
    v[int(i)][lab] = (float(lat), float(rate))
for lab in labels[1:]:
    lr = [v[i][lab][0] / v[i][labels[0]][0] for i in v if v[i][labels[0]][0] > 0]
    rr = [v[i][lab][1] / v[i][labels[0]][1] for i in v if v[i][labels[0]][1] > 0]
    print(f"{lab} / {labels[0]}: latency {statistics.median(lr):.3f}, rate {statistics.median(rr):.3f} (per-round medians)")
PY
