#!/usr/bin/env bash
# Same-host messages per second by size, hxcomm's own API beside Open MPI's vader, interleaved
# round by round (BENCHMARKS.md, "The same-host message rate"): windows of 64 messages of 1 to
# 64 B, millions of messages a second per size and round, then per size the range over rounds.
#
#   sudo RUNS=5 bash bench/shm_rate_sizes.sh
#
# Takes /tmp/hxcomm-bench.lock. Needs Open MPI (mpicc.openmpi, mpirun.openmpi).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
B=$PWD/target/release/hxcomm
[ -x "$B" ] || cargo build --release
out=$(mktemp -d /tmp/shm_rate_sizes.XXXXXX)
mpicc.openmpi -O2 -o "$out/osu" bench/mpi_osu.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
SIZES="1 2 4 8 16 32 64"
exec 9>/tmp/hxcomm-bench.lock
flock 9
for i in $(seq "$RUNS"); do
  "$B" run -n 2 --timeout 120 -- "$B" bench bw --sizes 1:64 --window 64 --iterations 3000 \
    --warmup 300 2>/dev/null | awk -v i="$i" '/^[0-9]/{printf "%s hxcomm %s %.3f\n", i, $1, $2/$1}' \
    >> "$out/raw.txt"
  for s in $SIZES; do
    mpirun.openmpi --mca pml ob1 --mca btl self,vader -np 2 "$out/osu" "bw:$s:3000:300:64" \
      2>/dev/null | grep -o 'mb_per_s=[0-9.]*' | cut -d= -f2 |
      awk -v i="$i" -v s="$s" '{printf "%s vader %s %.3f\n", i, s, $1/s}' >> "$out/raw.txt"
  done
  echo "round $i: $(grep "^$i " "$out/raw.txt" | awk '{printf "%s %s B %s; ", $2, $3, $4}')"
done
python3 - "$out/raw.txt" "$SIZES" <<'PY'
import sys, collections
raw, sizes = sys.argv[1], sys.argv[2].split()
v = collections.defaultdict(list)
for l in open(raw):
    i, tool, size, mps = l.split()
    v[(tool, size)].append(float(mps))
print("| size, B | " + " | ".join(sizes) + " |")
print("|---|" + "---:|" * len(sizes))
for tool in ("hxcomm", "vader"):
    cells = [f"{min(v[(tool, s)]):.1f}-{max(v[(tool, s)]):.1f}" if v[(tool, s)] else "-" for s in sizes]
    print(f"| {tool} | " + " | ".join(cells) + " |")
print("(millions of messages a second: the range over rounds)")
PY
echo "raw: $out/raw.txt"
