#!/usr/bin/env bash
# CPU per GB one way through the hxcomm libfabric provider (issue 8's "CPU-s per GB <= 1.5x
# iperf3"), builds side by side, interleaved: each round runs iperf3, then for every build its
# native `hxcomm bench bw` and Open MPI + that build's provider (bench/mpi_osu.c), on one testbed
# (2 hosts, RAILS rails at RATE). Prints each run's MB/s and CPU-s/GB and the medians, with every
# figure's ratio to the round's iperf3. As root, holding the locks:
#   flock /tmp/hxcomm-cargo.lock flock /tmp/hxcomm-bench.lock bash bench/mpi_cpu.sh 5 before:/tmp/hx8-before after:/tmp/hx8-after
# A build is LABEL:DIR or LABEL:DIR:VAR=VALUE,VAR=VALUE (set for its ranks, native and MPI).
# A build directory holds `hxcomm` and `libhxcomm_fi.so` (copies of target/release's).
# Environment: RAILS (default 1), RATE (1gbit), SECONDS_PER_RUN (5), NATIVE (1: also hxcomm's own
# bench bw; 0: not), WRAP (a command put before each MPI rank, with %r replaced by the rank and
# %o by the output directory, %l by the build's label, %n by the run, e.g.
# WRAP="strace -c -f -o %o/strace.%l.%n.%r"; the figures of a wrapped
# run are not comparable), KEEP (1: keep the testbed up at the end).
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/testbed.sh
runs=${1:-5}
shift
builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=("current:$PWD/target/release")
rails=${RAILS:-1}
rate=${RATE:-1gbit}
secs=${SECONDS_PER_RUN:-5}
name=hxcpu
first=${builds[0]#*:}
B=${first%%:*}/hxcomm
out=$(mktemp -d /tmp/mpi_cpu.XXXXXX)
$B net up --name $name --hosts 2 --rails "$rails" --rate "$rate" >/dev/null || exit 1
[ "${KEEP:-0}" = 1 ] || trap '$B net down --name $name >/dev/null' EXIT
sleep 1
mgmt_net=$(testbed_mgmt $name "$B")
mpicc -O2 -o "$out/osu" bench/mpi_osu.c || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Iterations of 64 x 4 MiB to last about `secs` at the wire rate (as compare sizes them).
iters=$(python3 -c "print(max(2, round($secs * $rails * 119.5 / (4194304 * 64 / 1e6))))")
common=(-np 2 --host ${name}0,${name}1 --map-by node --bind-to none
  --mca plm_rsh_agent "$PWD/bench/netns-rsh" --mca oob_tcp_if_include "$mgmt_net"
  --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm)
# The WRAP prefix for build $1's ranks.
wrap_for() {
  wrap=()
  if [ -n "${WRAP:-}" ]; then
    local w=${WRAP//%o/$out}
    w=${w//%l/$1}
    w=${w//%n/$r}
    w=${w//%r/'$OMPI_COMM_WORLD_RANK'}
    wrap=(sh -c "exec $w \"\$0\" \"\$@\"")
  fi
}
# iperf3, one stream per rail, as compare runs it: CPU of client and server (iperf3's figures).
iperf() {
  local pids=() i
  for i in $(seq 0 $((rails - 1))); do
    ip netns exec ${name}1 iperf3 -s -1 -B 10.10.$i.2 -p $((5301 + i)) >/dev/null 2>&1 &
    pids+=($!)
  done
  sleep 0.5
  for i in $(seq 0 $((rails - 1))); do
    ip netns exec ${name}0 iperf3 -c 10.10.$i.2 -B 10.10.$i.1 -p $((5301 + i)) -t "$secs" -J \
      >"$out/iperf.$1.$i.json" &
  done
  wait
  python3 - "$out" "$1" "$rails" <<'PY'
import json, sys
out, run, rails = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = cpu = 0.0
mbs = 0.0
for i in range(rails):
    e = json.load(open(f"{out}/iperf.{run}.{i}.json"))["end"]
    s = e["sum_received"]
    c = e["cpu_utilization_percent"]
    b += s["bytes"]
    mbs += s["bits_per_second"] / 8e6
    cpu += (c["host_total"] + c["remote_total"]) / 100.0 * s["seconds"]
print(f"RESULT tool=iperf3 run={run} mb_per_s={mbs:.1f} cpu_s_per_gb={cpu / (b / 1e9):.3f}")
PY
}
for r in $(seq 1 "$runs"); do
  iperf "$r" | tee -a "$out/results"
  for b in "${builds[@]}"; do
    label=${b%%:*}
    rest=${b#*:}
    dir=${rest%%:*}
    # label:DIR:VAR=VALUE,VAR=VALUE sets those variables for that build's ranks.
    envs=() plain=()
    if [ "$rest" != "$dir" ]; then
      IFS=, read -ra kv <<<"${rest#*:}"
      for e in "${kv[@]}"; do envs+=(-x "$e"); plain+=("$e"); done
    fi
    if [ "${NATIVE:-1}" = 1 ]; then
      env "${plain[@]}" "$dir/hxcomm" run -n 2 --net --name $name --timeout 120 -- "$dir/hxcomm" bench bw \
        --sizes 4M:4M --json --iterations "$iters" --warmup 1 --window 64 >"$out/native.$label.$r.log" 2>&1
      python3 - "$out/native.$label.$r.log" "$label" "$r" <<'PY' | tee -a "$out/results"
import json, sys
for line in open(sys.argv[1]):
    if line.lstrip().startswith("{"):
        v = json.loads(line)
        if v.get("bench") == "bw":
            print(f"RESULT tool=native-{sys.argv[2]} run={sys.argv[3]} mb_per_s={v['mb_per_s']:.1f} cpu_s_per_gb={v['cpu_s_per_gb']:.3f}")
            break
PY
    fi
    wrap_for "$label"
    timeout 180 mpirun "${common[@]}" -x FI_PROVIDER_PATH="$dir" "${envs[@]}" "${wrap[@]}" "$out/osu" \
      "bw:4194304:$iters:1:64" >"$out/mpi.$label.$r.log" 2>&1 \
      || echo "mpi $label run $r failed: $(tail -3 "$out/mpi.$label.$r.log" | tr '\n' ' ')"
    sed -n "s/^MPI_OSU bench=bw .*mb_per_s=\([0-9.]*\) .*cpu_s_per_gb=\([0-9.]*\).*/RESULT tool=ompi-$label run=$r mb_per_s=\1 cpu_s_per_gb=\2/p" \
      "$out/mpi.$label.$r.log" | tee -a "$out/results"
  done
done
python3 - "$out/results" <<'PY'
import re, statistics, sys
rows, iperf = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"RESULT tool=(\S+) run=(\d+) mb_per_s=([\d.]+) cpu_s_per_gb=([\d.]+)", line)
    if m:
        tool, run, mbs, cpu = m.group(1), int(m.group(2)), float(m.group(3)), float(m.group(4))
        rows.setdefault(tool, []).append((run, mbs, cpu))
        if tool == "iperf3":
            iperf[run] = cpu
print()
print(f"{'tool':18} {'runs':>4} {'MB/s':>7} {'CPU-s/GB':>9} {'x iperf3 (median of per-run ratios)':>36}  per run CPU-s/GB")
for tool, v in rows.items():
    ratios = [c / iperf[r] for r, _, c in v if r in iperf and iperf[r] > 0]
    print(f"{tool:18} {len(v):>4} {statistics.median(x[1] for x in v):>7.1f} "
          f"{statistics.median(x[2] for x in v):>9.3f} {statistics.median(ratios):>36.2f}x  "
          + " ".join(f"{x[2]:.3f}" for x in v))
PY
echo "raw output in $out"
