#!/usr/bin/env bash
# Where one-way bandwidth over unlimited rails goes, run by run (issue 10): RUNS runs of
# `hxcomm bench bw` (4 MiB, window 64) on a 2-host testbed with unlimited rails, each beside
# the time each CPU spent in user space, in the kernel (system + softirq) and idle during it
# (/proc/stat, per CPU, in ms per GB moved; the job's start and end are included, ~0.3 s of
# ~2-5), and the cache line's one-way time between CPUs 0 and 1 before it (the VM's placement).
# Over veth the sender's CPU carries the copy into the socket and the whole TCP path of both
# ends; the receiver's CPU only copies out. Runs sorted by MB/s.
#
#   sudo RUNS=12 bash bench/oneway_cpu.sh     # RAILS=4 ITERATIONS=60 HXCOMM=target/release/hxcomm
#
# Takes /tmp/hxcomm-bench.lock and brings its testbed (`oc`) down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench/oneway_cpu.sh: needs root (testbed)" >&2; exit 1; }
RUNS=${RUNS:-12}
RAILS=${RAILS:-4}
ITERATIONS=${ITERATIONS:-60}
H=$(realpath "${HXCOMM:-target/release/hxcomm}")
[ "$(nproc)" -ge 2 ] || { echo "bench/oneway_cpu.sh: needs 2 CPUs" >&2; exit 1; }
out=$(mktemp -d /tmp/oneway_cpu.XXXXXX)
exec 9>/tmp/hxcomm-bench.lock
flock 9
. bench/cacheline.sh
cacheline_build "$out/clpp"
"$H" net up --name oc --hosts 2 --rails "$RAILS" --rate none >/dev/null
trap '"$H" net down --name oc >/dev/null 2>&1 || true' EXIT
# user, kernel (system + irq + softirq), idle ticks of CPUs 0 and 1
ticks() { awk '$1 == "cpu0" || $1 == "cpu1" { print $2 + $3, $4 + $7 + $8, $5 + $6 }' /proc/stat | paste -sd' '; }
for i in $(seq "$RUNS"); do
  cl=$(cacheline_ns)
  a=$(ticks)
  v=$("$H" run --net --name oc -n 2 -- "$H" bench bw --sizes 4M:4M --iterations "$ITERATIONS" \
    --json 2>"$out/err.$i" | grep -o '"mb_per_s":[0-9.]*' | cut -d: -f2 || true)
  b=$(ticks)
  echo "$i ${cl:-nan} ${v:-nan} $a $b"
done >"$out/raw.txt"
HZ=$(getconf CLK_TCK) GB=$(( ITERATIONS * 64 * 4194304 )) python3 - "$out/raw.txt" <<'PY'
import os, sys
hz, gb = int(os.environ["HZ"]), int(os.environ["GB"]) / 1e9
rows = []
for line in open(sys.argv[1]):
    f = line.split()
    run, cl, mb = int(f[0]), float(f[1]), float(f[2])
    a, b = list(map(int, f[3:9])), list(map(int, f[9:15]))
    d = [(y - x) * 1000 / hz / gb for x, y in zip(a, b)]  # ms per GB
    rows.append((mb, run, cl, d))
print(f"one way, 4 MiB, {gb:.1f} GB per run; per CPU: user / kernel / idle in ms per GB moved")
print("| MB/s | run | cache line ns | CPU 0 user | CPU 0 kernel | CPU 0 idle | CPU 1 user | CPU 1 kernel | CPU 1 idle |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for mb, run, cl, d in sorted(rows):
    print(f"| {mb:.0f} | {run} | {cl:.0f} | " + " | ".join(f"{x:.1f}" for x in d) + " |")
PY
echo "raw output in $out"
