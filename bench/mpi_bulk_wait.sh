#!/usr/bin/env bash
# Open MPI + hxcomm one way between two testbed hosts on 4 x 1 Gbit/s rails, with the
# provider's bulk wait (HX_BULK_WAIT_US: a CQ read with nothing to do while bulk data is in
# flight sleeps in epoll) on both ranks, on neither, or on one (BENCHMARKS.md, "Open MPI one
# way on 4 x 1 Gbit/s: the missing 1% is the bulk wait on both sides", and its correction, "The
# bulk-wait loss was two ranks on one CPU"; bench/probes/window_turns.sh shows a turn). Per
# window of bench/mpi_osu.c's bandwidth test (4 MiB messages in flight, then an
# acknowledgement) and setting: MB/s and CPU-s per GB of each run, interleaved.
#
#   sudo RUNS=3 WINDOWS="4 64" bash bench/mpi_bulk_wait.sh
#
# Takes /tmp/hxcomm-bench.lock; brings its testbed (`bwt`) down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/testbed.sh
root=$PWD
RUNS=${RUNS:-3}
WINDOWS=${WINDOWS:-"4 64"}
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)"; exit 1; }
[ -f target/release/libhxcomm_fi.so ] || { echo "build first: cargo build --release --workspace"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec 9>/tmp/hxcomm-bench.lock
flock 9
out=$(mktemp -d /tmp/mpi_bulk_wait.XXXXXX)
mpicc.openmpi -O2 -o "$out/osu" bench/mpi_osu.c
tb=bwt
cleanup() { target/release/hxcomm net down --name $tb >/dev/null 2>&1 || true; }
trap cleanup EXIT
target/release/hxcomm net up --name $tb --hosts 2 --rails 4 --rate 1gbit >/dev/null
mgmt=$(testbed_mgmt $tb)
P=$root/target/release

# one SENDER_WAIT RECEIVER_WAIT WINDOW: rank 0 sends; each rank gets its own HX_BULK_WAIT_US
# (MPMD: -x applies per application context).
one() {
  local w=$3 iters
  iters=$(( 512 / w ))
  mpirun.openmpi --host "${tb}0,${tb}1" --map-by node --bind-to none \
    --mca plm_rsh_agent "$root/bench/netns-rsh" --mca oob_tcp_if_include "$mgmt" \
    --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm \
    -np 1 -x FI_PROVIDER_PATH="$P" -x HX_BULK_WAIT_US="$1" "$out/osu" "bw:4194304:$iters:1:$w" : \
    -np 1 -x FI_PROVIDER_PATH="$P" -x HX_BULK_WAIT_US="$2" "$out/osu" "bw:4194304:$iters:1:$w" \
    2>&1 | grep -o 'mb_per_s=[0-9.]*\|cpu_s_per_gb=[0-9.]*' | cut -d= -f2 | paste -sd/
}

settings=("5000 5000 both wait (default)" "0 0 both spin" "0 5000 sender spins, receiver waits" "5000 0 sender waits, receiver spins")
echo "Open MPI + hxcomm, 4 x 1 Gbit/s, one way, 4 MiB messages: MB/s / CPU-s per GB per run"
declare -A got
for w in $WINDOWS; do
  # Run by run, every setting in turn: the machine drifts from minute to minute.
  for _ in $(seq "$RUNS"); do
    for i in "${!settings[@]}"; do
      read -r a b _ <<<"${settings[$i]}"
      got[$w.$i]="${got[$w.$i]:-} $(one "$a" "$b" "$w")"
    done
  done
  for i in "${!settings[@]}"; do
    read -r _ _ label <<<"${settings[$i]}"
    printf 'window %-3s %-36s%s\n' "$w" "$label" "${got[$w.$i]}"
  done
done
