#!/usr/bin/env bash
# MPI one-sided latency between two testbed hosts (4 rails at RATE, default 1gbit): rank 0
# times MPI_Get, MPI_Put and MPI_Fetch_and_op, each with MPI_Win_flush, on rank 1's window
# (bench/mpi_rma.c, data checked). Routes: Open MPI's osc/rdma over ob1 + btl/ofi mode 2 and
# hxcomm (`btlofi2`, one column per provider build in PROVIDERS), and Open MPI's default
# ob1 + btl/tcp, whose osc is pt2pt (`btltcp`). Builds and routes are interleaved per run.
#
#   sudo RUNS=5 bash bench/ompi_rma.sh
#   sudo RUNS=5 PROVIDERS="base=/tmp/old/target/release new=target/release" bash bench/ompi_rma.sh
#
# PROVIDERS: label=directory holding libhxcomm_fi.so[,VAR=VALUE...] (settings for that column's
# ranks; default: new=target/release). TESTS: the
# mpi_rma arguments. Takes /tmp/hxcomm-bench.lock; brings its testbed (`rmat`) down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/testbed.sh
root=$PWD
tb=rmat
RUNS=${RUNS:-3}
PROVIDERS=${PROVIDERS:-new=target/release}
TESTS=${TESTS:-get:8:3000:300 get:1024:3000:300 get:32768:1000:100 put:8:3000:300 put:1024:3000:300 put:32768:1000:100 fop:8:3000:300}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export HX_JOB_SECRET=${HX_JOB_SECRET:-$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')}
out=$(mktemp -d /tmp/ompi_rma.XXXXXX)
mpicc.openmpi -O2 -o "$out/rma" bench/mpi_rma.c
exec 9>/tmp/hxcomm-bench.lock
flock 9
"$root/target/release/hxcomm" net down --name $tb >/dev/null 2>&1 || true
"$root/target/release/hxcomm" net up --hosts 2 --rails 4 --rate "${RATE:-1gbit}" --name $tb >/dev/null
trap '"$root/target/release/hxcomm" net down --name $tb >/dev/null 2>&1' EXIT
mgmt=$(testbed_mgmt $tb "$root/target/release/hxcomm")
base=(--bind-to none --mca plm_rsh_agent "$root/bench/netns-rsh" --mca oob_tcp_if_include "$mgmt"
  -np 2 --host ${tb}0,${tb}1 --map-by node -x FI_PROVIDER_PATH -x HX_JOB_SECRET)
btlofi2=(--mca pml ob1 --mca btl self,vader,ofi --mca btl_ofi_mode 2 --mca btl_ofi_provider_include hxcomm --mca osc rdma ${OSC_ARGS:-})
btltcp=(--mca pml ob1 --mca btl self,vader,tcp --mca btl_tcp_if_include 10.10.0.0/16 --mca osc pt2pt)
figures() { grep -o 'usec=[0-9.]*\|mb_per_s=[0-9.]*' | cut -d= -f2 | tr '\n' ' '; }
echo "median us per op + flush (MB/s for getbw/putbw), in the order of TESTS: $TESTS (raw output in $out)"
for run in $(seq "$RUNS"); do
  for p in $PROVIDERS; do
    label=${p%%=*}
    dir=${p#*=}
    IFS=, read -r -a parts <<<"$dir"
    dir=${parts[0]}
    envs=()
    for kv in "${parts[@]:1}"; do envs+=(-x "$kv"); done
    [[ $dir = /* ]] || dir=$root/$dir
    v=$(FI_PROVIDER_PATH=$dir timeout 300 mpirun "${base[@]}" "${envs[@]}" "${btlofi2[@]}" "$out/rma" $TESTS 2>&1 \
      | tee -a "$out/raw.txt" | figures)
    echo "$run btlofi2 $label: $v"
  done
  if [ "${TCP:-1}" = 1 ]; then
    v=$(FI_PROVIDER_PATH=$root/target/release timeout 300 mpirun "${base[@]}" "${btltcp[@]}" "$out/rma" $TESTS \
      2>&1 | tee -a "$out/raw.txt" | figures)
    echo "$run btltcp: $v"
  fi
done
if grep -q 'WRONG DATA\|mpi_rma:' "$out/raw.txt"; then
  echo "WRONG DATA or errors: see $out/raw.txt"
  exit 1
fi
