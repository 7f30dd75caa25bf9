#!/usr/bin/env bash
# Open MPI's two routes to hxcomm on a 2-host testbed with 4 rails at 1 Gbit/s (BENCHMARKS.md,
# "Open MPI's ob1 over hxcomm between hosts"): pml cm + mtl ofi (everything through hxcomm),
# pml ob1 + btl self,vader,ofi in two-sided mode (vader within a host, hxcomm between hosts),
# the same in btl/ofi's mode 2 (large messages as one fi_read of the sender's buffer, which
# hxcomm stripes over the rails: RGET), and Open MPI's default ob1 + btl self,vader,tcp; vader
# alone for reference. RATE (default 1gbit) sets the rails' rate (`none`: unlimited). Per run: 8-byte
# latency of 2 ranks on one host, and 8-byte latency, 4 MiB bw and bibw of one rank on each.
#
#   sudo RUNS=3 bash bench/ompi_routes.sh
#   sudo RUNS=3 RATE=none ROUTES="cm btlofi2 btltcp" bash bench/ompi_routes.sh
#   sudo RUNS=2 RATE=none ROUTES="cm btltcp" SAME_HOST=0 TESTS="latency:65536:1000:100" bash bench/ompi_routes.sh
#
# TESTS: the bench/mpi_osu.c tests between the hosts (default: 8-byte latency, 4 MiB bw and
# bibw); SAME_HOST=0 skips the same-host latency and the vader line.
#
# Needs a release build (the provider in target/release) and bench/mpi_osu.c; takes
# /tmp/hxcomm-bench.lock and brings its testbed (`obt`) down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/testbed.sh
root=$PWD
tb=obt
RUNS=${RUNS:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FI_PROVIDER_PATH=$root/target/release
out=$(mktemp -d /tmp/ompi_routes.XXXXXX)
mpicc.openmpi -O2 -o "$out/osu" bench/mpi_osu.c
exec 9>/tmp/hxcomm-bench.lock
flock 9
"$root/target/release/hxcomm" net down --name $tb >/dev/null 2>&1 || true
"$root/target/release/hxcomm" net up --hosts 2 --rails 4 --rate "${RATE:-1gbit}" --name $tb >/dev/null
trap '"$root/target/release/hxcomm" net down --name $tb >/dev/null 2>&1' EXIT
mgmt=$(testbed_mgmt $tb "$root/target/release/hxcomm")
base=(--bind-to none --mca plm_rsh_agent "$root/bench/netns-rsh" --mca oob_tcp_if_include "$mgmt" -x FI_PROVIDER_PATH)
cm=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm)
btlofi=(--mca pml ob1 --mca btl self,vader,ofi --mca btl_ofi_mode 1 --mca btl_ofi_provider_include hxcomm)
btlofi2=(--mca pml ob1 --mca btl self,vader,ofi --mca btl_ofi_mode 2 --mca btl_ofi_provider_include hxcomm)
btltcp=(--mca pml ob1 --mca btl self,vader,tcp --mca btl_tcp_if_include 10.10.0.0/16)
figures() { grep -o 'usec=[0-9.]*\|mb_per_s=[0-9.]*' | grep -v '=0.00*$' | cut -d= -f2 | tr '\n' ' '; }
TESTS=${TESTS:-latency:8:5000:500 bw:4194304:10:2:64 bibw:4194304:10:2:64}
echo "run route: same-host-us | two hosts, in the order of: $TESTS (us or MB/s; raw output in $out)"
for run in $(seq "$RUNS"); do
  if [ "${SAME_HOST:-1}" = 1 ]; then
    v=$(timeout 300 mpirun -np 2 --host ${tb}0:2 "${base[@]}" --mca pml ob1 --mca btl self,vader \
      "$out/osu" latency:8:20000:1000 2>&1 | tee -a "$out/raw.txt" | figures)
    echo "$run vader: $v"
  fi
  for route in ${ROUTES:-cm btlofi btlofi2 btltcp}; do
    declare -n args=$route
    same=-
    if [ "${SAME_HOST:-1}" = 1 ]; then
      same=$(timeout 300 mpirun -np 2 --host ${tb}0:2 "${base[@]}" "${args[@]}" "$out/osu" \
        latency:8:20000:1000 2>&1 | tee -a "$out/raw.txt" | figures)
    fi
    # shellcheck disable=SC2086 # TESTS is a list of arguments
    two=$(timeout 300 mpirun -np 2 --host ${tb}0,${tb}1 --map-by node "${base[@]}" "${args[@]}" \
      "$out/osu" $TESTS 2>&1 | tee -a "$out/raw.txt" | figures)
    echo "$run $route: $same | $two"
  done
done
