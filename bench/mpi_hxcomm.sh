#!/usr/bin/env bash
# "MPI over hxcomm" (BENCHMARKS.md): Open MPI 4.1 over the hxcomm libfabric provider beside Open
# MPI's own btl/tcp and Open MPI over libfabric's tcp provider (ofi_rxm;tcp), same testbed (2
# hosts x 4 rails at 1 Gbit/s), same run; bench/mpi_osu.c bw and bibw at 4 MiB (window 64) and
# 8-byte latency; RUNS runs each (default 3), medians printed. As root, one benchmark at a time:
#   flock /tmp/hxcomm-bench.lock bash bench/mpi_hxcomm.sh
# RAILS (default 4), RATE (default 1gbit; e.g. 1gbit,1gbit,2gbit,4gbit or none), TESTS (mpi_osu arguments) and
# CONFIGS (default "hxcomm btl_tcp ofi_tcp") narrow it down.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/testbed.sh
runs=${RUNS:-3}
B=$PWD/target/release/hxcomm
name=hxm
cargo build --release --workspace >/dev/null 2>&1 || { echo "build failed"; exit 1; }
$B net up --name $name --hosts 2 --rails "${RAILS:-4}" --rate "${RATE:-1gbit}" >/dev/null || exit 1
trap '$B net down --name $name >/dev/null' EXIT
sleep 1
mgmt_net=$(testbed_mgmt $name "$B")
out=$(mktemp -d /tmp/mpi_hxcomm.XXXXXX)
mpicc -O2 -o "$out/osu" bench/mpi_osu.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tests=${TESTS:-"bw:4194304:9:1:64 bibw:4194304:5:1:64 latency:8:20000:1000"}
common=(-np 2 --host ${name}0,${name}1 --map-by node --bind-to none
  --mca plm_rsh_agent "$PWD/bench/netns-rsh" --mca oob_tcp_if_include "$mgmt_net")
declare -A cfg
cfg[hxcomm]="--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm -x FI_PROVIDER_PATH=$PWD/target/release"
cfg[btl_tcp]="--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include $(seq -s, -f "r%g" 0 $((${RAILS:-4} - 1)))"
cfg[ofi_tcp]="--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_exclude none -x FI_PROVIDER=tcp -x FI_TCP_IFACE=r0"
for label in ${CONFIGS:-hxcomm btl_tcp ofi_tcp}; do
  for r in $(seq 1 "$runs"); do
    # shellcheck disable=SC2086
    timeout 120 mpirun "${common[@]}" ${cfg[$label]} "$out/osu" $tests >"$out/$label.$r.log" 2>&1 \
      || echo "$label run $r failed: $(tail -3 "$out/$label.$r.log" | tr '\n' ' ')"
  done
done
python3 - "$out" "$runs" <<'PY'
import re, statistics, sys, glob
out, runs = sys.argv[1], int(sys.argv[2])
rows = {}
for label in ["hxcomm", "btl_tcp", "ofi_tcp"]:
    for f in glob.glob(f"{out}/{label}.*.log"):
        for line in open(f):
            m = re.match(r"MPI_OSU bench=(\w+) bytes=(\d+) .* mb_per_s=([\d.]+) usec=([\d.]+) cpu_s=[\d.]+ cpu_s_per_gb=([\d.]+)", line)
            if m:
                b, n, mbs, us, cpu = m.groups()
                rows.setdefault((label, b), []).append((float(mbs), float(us), float(cpu)))
print(f"{'config':10} {'test':8} {'runs':>4} {'MB/s':>8} {'usec':>8} {'CPU-s/GB':>9}")
for (label, b), v in sorted(rows.items()):
    med = lambda i: statistics.median(x[i] for x in v)
    print(f"{label:10} {b:8} {len(v):>4} {med(0):>8.1f} {med(1):>8.2f} {med(2):>9.2f}")
PY
echo "raw output in $out"
