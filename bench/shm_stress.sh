#!/usr/bin/env bash
# Issue-4 test: 8 ranks on this host (2 cores), validated random all-to-all traffic for SECONDS
# (default 10), messages up to 64 KiB; reports per-rank CPU time (user+system, /usr/bin/time
# around each rank) and the machine's idle fraction (vmstat 1 during the run).
#   hxcomm:   hxcomm run -n 8 -- hxcomm bench stress --seconds S --max-size 64k --json
#   Open MPI: mpirun -np 8 --oversubscribe --mca btl vader,self bench/mpi_ring.c (same shape:
#             rounds in which every rank exchanges one validated message with every other rank)
#   MPICH:    mpiexec.mpich -n 8 bench/mpi_ring.c
# Run as: flock /tmp/hxcomm-bench.lock bash bench/shm_stress.sh [SECONDS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
runs=${2:-1}
B=$PWD/target/release/hxcomm
out=${OUT:-$(mktemp -d /tmp/shm_stress.XXXXXX)}
mkdir -p "$out"
mpicc.openmpi -O2 -o "$out/ring_ompi" bench/mpi_ring.c -lm
mpicc.mpich -O2 -o "$out/ring_mpich" bench/mpi_ring.c -lm 2>/dev/null
[ -e target/release/libhxcomm.so ] || cargo build --release -p hxcomm-capi
cc -O2 -I include bench/wait_idle.c -L target/release -lhxcomm -Wl,-rpath,$PWD/target/release -o "$out/wait_idle_hx"
mpicc.openmpi -O2 -DUSE_MPI -o "$out/wait_idle_ompi" bench/wait_idle.c
mpicc.mpich -O2 -DUSE_MPI -o "$out/wait_idle_mpich" bench/wait_idle.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "shm_stress: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), raw output in $out" >&2
measure() {  # name, command...
  local name=$1; shift
  vmstat 1 > "$out/$name.vmstat" & local vm=$!
  local t0=$(date +%s.%N)
  "$@" > "$out/$name.out" 2> "$out/$name.err" || echo "$name: exit $?" >> "$out/$name.err"
  local t1=$(date +%s.%N)
  kill $vm; wait $vm 2>/dev/null || true
  python3 - "$out" "$name" "$t0" "$t1" <<'PY' || true
import re, sys, statistics, json
d, name, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
err = open(f"{d}/{name}.err").read(); out = open(f"{d}/{name}.out").read()
import glob
times = [dict(kv.split("=") for kv in open(f).read().split()[1:]) for f in sorted(glob.glob(f"{d}/{name}.rank*.time"))]
cpu = [float(t["user"]) + float(t["sys"]) for t in times]
if not cpu:  # MPI: getrusage from the program itself
    cpu = [float(a) + float(b) for a, b in re.findall(r"user_s=([\d.]+) sys_s=([\d.]+)", out)]
if not cpu:  # wait_idle: CPU over the wait only
    cpu = [float(c) for c in re.findall(r"cpu_s=([\d.]+)", out)]
walls = [float(t["wall"]) for t in times] or [float(w) for w in re.findall(r"wall_s=([\d.]+)", out)]
waiting = "WAIT_IDLE" in out
# vmstat: skip the first line (averages since boot); columns us sy id wa st are 13..17
rows = [l.split() for l in open(f"{d}/{name}.vmstat").read().splitlines()[3:] if l.split() and l.split()[0].isdigit()]
idle = [int(r[14]) for r in rows]
us = [int(r[12]) for r in rows]; sy = [int(r[13]) for r in rows]
extra = ""
if '"bench": "stress"' in out or '"bench":"stress"' in out:
    js = [json.loads(l) for l in out.splitlines() if '"stress"' in l]
    extra = f" msgs_received={sum(j['received'] for j in js)} bytes={sum(j['bytes_received'] for j in js)} batches={js[0]['batches']} seconds={js[0]['seconds']:.2f}"
elif not waiting:
    m = re.findall(r"msgs=(\d+) bytes=(\d+)", out)
    e = re.findall(r"errors=(\d+)", out)
    extra = f" msgs_received={sum(int(a) for a, _ in m)} bytes={sum(int(b) for _, b in m)} errors={sum(int(x) for x in e)}"
fails = [l for l in err.splitlines() if "exit" in l or "rror" in l]
print(f"{name}: ranks={len(cpu)} wall_total={t1 - t0:.1f}s cpu_per_rank_s=[{', '.join(f'{c:.2f}' for c in cpu)}] "
      f"cpu_sum={sum(cpu):.2f}s cpu_per_rank_median={statistics.median(cpu) if cpu else 0:.2f}s "
      f"rank_wall_median={statistics.median(walls) if walls else 0:.2f}s "
      f"idle_pct_median={statistics.median(idle) if idle else -1} idle_pct_mean={statistics.mean(idle) if idle else -1:.1f} "
      f"us/sy_mean={statistics.mean(us) if us else -1:.0f}/{statistics.mean(sy) if sy else -1:.0f} samples={len(idle)}{extra}"
      + (f" FAIL: {fails[:3]}" if fails else ""))
PY
}
for i in $(seq 1 "$runs"); do
  measure "hxcomm_$i" $B run -n 8 --timeout $((secs * 6 + 60)) -- \
    sh -c "exec /usr/bin/time -o $out/hxcomm_$i.rank\$HX_RANK.time -f 'RANKTIME user=%U sys=%S wall=%e maxrss_kib=%M' $B bench stress --seconds $secs --max-size 64k --json"
  measure "ompi_$i" timeout $((secs * 6 + 60)) mpirun.openmpi --allow-run-as-root -np 8 --oversubscribe \
    --bind-to none --mca btl vader,self "$out/ring_ompi" "$secs" 65536
  measure "mpich_$i" timeout $((secs * 6 + 60)) mpiexec.mpich -n 8 "$out/ring_mpich" "$secs" 65536
  # Waiting only: rank 0 sleeps, 7 ranks block in a receive from it.
  measure "wait_hxcomm_$i" $B run -n 8 --timeout $((secs * 6 + 60)) -- "$out/wait_idle_hx" "$secs"
  measure "wait_ompi_$i" timeout $((secs * 6 + 60)) mpirun.openmpi --allow-run-as-root -np 8 --oversubscribe \
    --bind-to none --mca btl vader,self "$out/wait_idle_ompi" "$secs"
  measure "wait_mpich_$i" timeout $((secs * 6 + 60)) mpiexec.mpich -n 8 "$out/wait_idle_mpich" "$secs"
done
