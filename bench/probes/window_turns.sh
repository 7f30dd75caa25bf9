#!/usr/bin/env bash
# Where a window turn of Open MPI + hxcomm's bandwidth test goes (BENCHMARKS.md, "The bulk-wait
# loss was two ranks on one CPU"): bench/mpi_osu.c one way between two testbed hosts on 4 x 1
# Gbit/s rails, windows of four 4 MiB messages, tcpdump (headers only) on the receiving host's
# rails; then per turn the delay from Open MPI's acknowledgement to the sender's RTS and from
# the RTS to the receiver's CTS. Slow turns of ~4 ms (a scheduler tick at HZ=250) are two ranks
# on one CPU waiting out each other's time slice.
#
#   sudo bash bench/probes/window_turns.sh [ITERATIONS]        # default 32; BULK_WAIT_US=5000
#
# Takes /tmp/hxcomm-bench.lock; brings its testbed (`wtt`) down on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/testbed.sh
root=$PWD
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)"; exit 1; }
command -v tcpdump >/dev/null || { echo "needs tcpdump (apt-get install tcpdump)"; exit 1; }
[ -f target/release/libhxcomm_fi.so ] || { echo "build first: cargo build --release --workspace"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec 9>/tmp/hxcomm-bench.lock
flock 9
out=$(mktemp -d /tmp/window_turns.XXXXXX)
tb=wtt
cleanup() {
  pkill -f "tcpdump -i r[0-3] -s 80 -w $out" 2>/dev/null || true
  target/release/hxcomm net down --name $tb >/dev/null 2>&1 || true
}
trap cleanup EXIT
mpicc.openmpi -O2 -o "$out/osu" bench/mpi_osu.c
target/release/hxcomm net up --name $tb --hosts 2 --rails 4 --rate 1gbit >/dev/null
mgmt=$(testbed_mgmt $tb)
for i in 0 1 2 3; do
  ip netns exec ${tb}1 tcpdump -i r$i -s 80 -w "$out/r$i.pcap" -n tcp 2>/dev/null &
done
sleep 1
mpirun.openmpi -np 2 --host "${tb}0,${tb}1" --map-by node --bind-to none \
  --mca plm_rsh_agent "$root/bench/netns-rsh" --mca oob_tcp_if_include "$mgmt" \
  --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm \
  -x FI_PROVIDER_PATH="$root/target/release" -x HX_BULK_WAIT_US="${BULK_WAIT_US:-5000}" \
  "$out/osu" "bw:4194304:${1:-32}:1:4" 2>&1 | grep -o 'mb_per_s=[0-9.]*'
sleep 0.5
pkill -f "tcpdump -i r[0-3] -s 80 -w $out" || true
sleep 0.5
python3 bench/probes/window_turns.py "$out"/r*.pcap
echo "pcaps in $out"
