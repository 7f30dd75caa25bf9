#!/usr/bin/env bash
# NetPIPE (Debian's netpipe-openmpi, the package's binary, unmodified) over Open MPI: hxcomm
# (pml cm, mtl ofi, provider hxcomm) against what a user would otherwise run, in RUNS
# interleaved runs; medians per size and their ratio (BENCHMARKS.md, "NetPIPE").
#
#   bash bench/netpipe.sh                 one host: vader (pml ob1) against hxcomm, pinned
#   sudo PLACE=testbed bash bench/netpipe.sh
#                                         two testbed hosts on RAILS x RATE rails (default
#                                         4 x 1gbit): Open MPI's btl/tcp (over every rail)
#                                         against hxcomm
#
# RUNS (default 5) runs of each; UPPER (default 4194304) the largest size. Prints NetPIPE's
# one-way time at 8 bytes and its bandwidth at 1 KiB, 64 KiB, 1 MiB and UPPER; keeps the raw
# outputs. NetPIPE prints times in steps of 10 ns, so same-host latencies are coarse. On one
# host each run's CPU placement is probed first and printed with its 8-byte time.
# Takes /tmp/hxcomm-bench.lock (no other benchmark beside it).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/testbed.sh
root=$PWD
RUNS=${RUNS:-5}
UPPER=${UPPER:-4194304}
PLACE=${PLACE:-host}
command -v NPopenmpi >/dev/null || { echo "needs NetPIPE: apt-get install netpipe-openmpi"; exit 1; }
[ -f target/release/libhxcomm_fi.so ] || { echo "build first: cargo build --release --workspace"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export FI_PROVIDER_PATH=$root/target/release
exec 9>/tmp/hxcomm-bench.lock
flock 9
out=$(mktemp -d /tmp/netpipe.XXXXXX)
hx=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm -x FI_PROVIDER_PATH)
case $PLACE in
  host)
    where=(-np 2 --bind-to core)
    other_name=vader
    other=(--mca pml ob1 --mca btl self,vader)
    echo "NetPIPE on one host: vader against hxcomm, $RUNS runs each"
    ;;
  testbed)
    [ "$(id -u)" = 0 ] || { echo "PLACE=testbed needs root (network namespaces)"; exit 1; }
    RAILS=${RAILS:-4} RATE=${RATE:-1gbit}
    tb=hxnp
    cleanup() { target/release/hxcomm net down --name $tb >/dev/null 2>&1 || true; }
    trap cleanup EXIT
    target/release/hxcomm net up --name $tb --hosts 2 --rails "$RAILS" --rate "$RATE" >/dev/null
    mgmt=$(testbed_mgmt $tb)
    where=(-np 2 --host "${tb}0,${tb}1" --map-by node --bind-to none
      --mca plm_rsh_agent "$root/bench/netns-rsh" --mca oob_tcp_if_include "$mgmt")
    other_name=btl/tcp
    other=(--mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include 10.10.0.0/16)
    echo "NetPIPE between two testbed hosts, $RAILS x $RATE rails: btl/tcp against hxcomm, $RUNS runs each"
    ;;
  *) echo "PLACE is host or testbed"; exit 1 ;;
esac

# One host: where the VM put CPUs 0 and 1 before each run (a cache line's one-way time
# between them, bench/cacheline_pingpong.c). A run in the far placement (~250 ns) reads
# 0.33-0.44 us at 8 bytes for either MPI, one in the near placement (~50 ns) 0.13-0.14, and
# NetPIPE's long runs may change placement part way (BENCHMARKS.md, forty-third session).
if [ "$PLACE" = host ]; then
  . bench/cacheline.sh
  cacheline_build "$out/clpp"
fi
for i in $(seq "$RUNS"); do
  for v in other hxcomm; do
    if [ $v = other ]; then args=("${other[@]}"); else args=("${hx[@]}"); fi
    if [ "$PLACE" = host ]; then echo "$v $i $(cacheline_ns)" >> "$out/placement.txt"; fi
    timeout 600 mpirun "${where[@]}" "${args[@]}" NPopenmpi -u "$UPPER" -o "$out/$v.$i.out" \
      >"$out/$v.$i.log" 2>&1 || { echo "run $i of $v failed:"; tail -20 "$out/$v.$i.log"; exit 1; }
  done
done

# column 2 (Mbps) or 3 (seconds) at `size` bytes, median over the runs of variant $1
median() {
  local v=$1 size=$2 col=$3
  for f in "$out/$v".*.out; do awk -v s="$size" -v c="$col" '$1 == s { print $c; exit }' "$f"; done |
    sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
printf '%-10s %14s %14s %10s\n' size "$other_name" hxcomm ratio
t_o=$(median other 8 3) t_h=$(median hxcomm 8 3)
awk -v o="$t_o" -v h="$t_h" 'BEGIN { printf "%-10s %11.2f us %11.2f us %9.2fx\n", "8 B", o * 1e6, h * 1e6, h / o }'
sizes=(1024 65536 1048576)
[ "$UPPER" -gt 1048576 ] && sizes+=("$UPPER")
for s in "${sizes[@]}"; do
  [ "$s" -le "$UPPER" ] || continue
  b_o=$(median other "$s" 2) b_h=$(median hxcomm "$s" 2)
  awk -v s="$s" -v o="$b_o" -v h="$b_h" 'BEGIN {
    n = s >= 1048576 ? (s / 1048576) " MiB" : (s / 1024) " KiB"
    printf "%-10s %9.1f MB/s %9.1f MB/s %9.2fx\n", n, o / 8, h / 8, h / o }'
done
echo "(latency: NetPIPE's one-way time, lower is better, ratio hxcomm / $other_name; bandwidth:"
echo " MB/s = NetPIPE's Mbps / 8, higher is better, ratio hxcomm / $other_name; medians of $RUNS)"
if [ -f "$out/placement.txt" ]; then
  echo "per run: a cache line's one-way time between CPUs 0 and 1 just before it, and its 8-byte time"
  while read -r v i ns; do
    t=$(awk '$1 == 8 { printf "%.2f", $3 * 1e6; exit }' "$out/$v.$i.out")
    echo "  $v run $i: ${ns:-?} ns, ${t:-?} us"
  done < "$out/placement.txt"
fi
echo "raw output in $out"
