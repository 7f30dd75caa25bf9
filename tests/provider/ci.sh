#!/usr/bin/env bash
# The libfabric provider as users meet it (issue 8), run by .ci/run after `cargo test`:
#  1. fabtests 1.17 (built from ../shared/fabtests-1.17.0 into target/fabtests unless
#     FABTESTS_BIN points at an installed copy) on this host, and between two testbed hosts;
#  2. Open MPI 4.1 (pml cm, mtl ofi, provider hxcomm): tests/mpi/correctness.c and
#     correctness.py on this host (4 ranks; and 2, whose directed receives and answers run on
#     holds of the lane) and on 2 and 4 testbed hosts; correctness.c
#     once more under pml ob1 with btl ofi in its two-sided mode (delivery-complete sends)
#     and in its RDMA mode (fi_read, atomics; with vader between ranks of a host), on this
#     host and between two testbed hosts;
#  3. third-party MPI programs, unmodified (tests/mpi/thirdparty.sh: HPC Challenge and
#     NetPIPE's integrity mode), on this host and on 4 and 2 testbed hosts;
#  4. 64 ranks on this host over 4 loopback TCP rails: an all-to-all right after MPI_Init.
# Needs root (network namespaces), libfabric-dev/-bin, openmpi-bin/libopenmpi-dev,
# python3-mpi4py, hpcc, netpipe-openmpi, autoconf/automake/libtool. Prints each stage's time.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
export FI_PROVIDER_PATH=$root/target/release
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
stage() { echo; echo "=== provider: $* ($(date +%T))"; }
t_all=$SECONDS

if [ "$(id -u)" != 0 ]; then
  # A failure under CI=true; else said, and listed in HX_SKIP_LOG (tests/skips.sh).
  exec bash tests/skips.sh --skip tests/provider/ci.sh "needs root (network namespaces for the testbed)"
fi
cargo build --release -p hx-ofi

fabtests=${FABTESTS_BIN:-}
if [ -z "$fabtests" ]; then
  fabtests=$root/target/fabtests/bin
  if [ ! -x "$fabtests/fi_rdm" ]; then
    stage "building fabtests 1.17.0"
    t=$SECONDS
    src=$root/target/fabtests-src
    rm -rf "$src"; cp -r "$root/../shared/fabtests-1.17.0" "$src"
    (cd "$src" && ./autogen.sh >/dev/null 2>&1 && ./configure -q --with-libfabric=/usr \
        --prefix="$root/target/fabtests" >/dev/null && make -s -j2 install >/dev/null 2>&1)
    echo "fabtests built in $((SECONDS - t)) s"
  fi
fi
export FABTESTS_BIN=$fabtests

stage "fabtests on one host"
t=$SECONDS
tests/fabtests/run.sh 127.0.0.1
echo "stage time $((SECONDS - t)) s"

tb=hxpv
cleanup() { "$root/target/release/hxcomm" net down --name $tb >/dev/null 2>&1 || true; }
trap cleanup EXIT
"$root/target/release/hxcomm" net up --hosts 4 --rails 2 --rate none --name $tb >/dev/null
mgmt=$("$root/target/release/hxcomm" net status --name $tb | awk '/management/ { for (i = 1; i <= NF; i++) if ($i == "management") { sub(",", "", $(i+1)); print $(i+1); exit } }')

stage "fabtests between testbed hosts ${tb}0 and ${tb}1"
t=$SECONDS
HX_RAILS=r0,r1 SERVER_CMD="ip netns exec ${tb}0" CLIENT_CMD="ip netns exec ${tb}1" \
  tests/fabtests/run.sh 10.10.0.1 10.10.0.2
echo "stage time $((SECONDS - t)) s"

stage "Open MPI + hxcomm on one host (4 ranks)"
t=$SECONDS
out=$root/target/mpi-tests
mkdir -p "$out"
OMPI_MCA_pml=cm OMPI_MCA_mtl=ofi OMPI_MCA_mtl_ofi_provider_include=hxcomm HXMPI_TRUNC_LARGE=1 \
  HX_LOG=hxcomm_fi=debug tests/mpi/run-local.sh "$out" 4
# Holds watch every same-host link: with three peers too (docs/design.md).
grep -q "receives and answers went through a peer's lane without the domain's state" \
  "$out/correctness.c.log" || { echo "no hold under Open MPI with 4 ranks" >&2; exit 1; }
mpicc -O2 -Wall -Wextra -Werror -o "$out/alltoall" tests/mpi/alltoall.c
echo "stage time $((SECONDS - t)) s"

stage "Open MPI + hxcomm on one host (2 ranks: directed receives and answers on a hold of the lane)"
t=$SECONDS
# Two ranks of a host: runs of receives and their answers take no domain state at all (a hold,
# docs/design.md); the programs' checks must hold through them, and they must have happened.
OMPI_MCA_pml=cm OMPI_MCA_mtl=ofi OMPI_MCA_mtl_ofi_provider_include=hxcomm HXMPI_TRUNC_LARGE=1 \
  HX_LOG=hxcomm_fi=debug tests/mpi/run-local.sh "$out/two" 2
grep -q "receives and answers went through a peer's lane without the domain's state" \
  "$out/two/correctness.c.log" || { echo "no hold under Open MPI with 2 ranks" >&2; exit 1; }
echo "stage time $((SECONDS - t)) s"

stage "HPC Challenge and NetPIPE (Debian's, unmodified) over Open MPI + hxcomm on one host"
t=$SECONDS
tests/mpi/thirdparty.sh "$out/thirdparty" --mca pml cm --mca mtl ofi \
  --mca mtl_ofi_provider_include hxcomm -x FI_PROVIDER_PATH
echo "stage time $((SECONDS - t)) s"

stage "Open MPI's ob1 over btl/ofi (two-sided: delivery-complete sends) + hxcomm on one host (4 ranks)"
t=$SECONDS
OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,ofi OMPI_MCA_btl_ofi_mode=1 OMPI_MCA_btl_ofi_provider_include=hxcomm \
  HXMPI_PROGRAMS=c tests/mpi/run-local.sh "$out/ob1" 4
echo "stage time $((SECONDS - t)) s"

stage "Open MPI's ob1 over btl/ofi with RDMA (mode 2: large messages by fi_read, atomics) + hxcomm on one host (4 ranks)"
t=$SECONDS
OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,ofi OMPI_MCA_btl_ofi_mode=2 OMPI_MCA_btl_ofi_provider_include=hxcomm \
  HXMPI_PROGRAMS=c tests/mpi/run-local.sh "$out/ob1rdma" 4
echo "stage time $((SECONDS - t)) s"

# Open MPI's launcher (orted started through the rsh agent) now and then fails to wire up its
# daemons on the testbed before any rank starts ("ORTE does not know how to route a message",
# also seen with Open MPI's own transports): that, and only that, is retried once, visibly.
mpirun_testbed() {
  local log=$1; shift
  for attempt in 1 2; do
    if timeout 300 mpirun "$@" >"$log" 2>&1; then
      grep '^OK\|^MPI_OSU' "$log"
      return 0
    fi
    if [ $attempt = 1 ] && grep -q "ORTE does not know how to route\|ORTE was unable to reliably start" "$log" \
        && ! grep -q '^OK\|FAIL\|hxcomm' "$log"; then
      echo "Open MPI's launcher failed before MPI_Init (orted wiring); retrying once"
      sleep 2
      continue
    fi
    tail -30 "$log"
    exit 1
  done
}

for hosts in 2 4; do
  stage "Open MPI + hxcomm on $hosts testbed hosts"
  t=$SECONDS
  list=$(seq -s, -f "${tb}%g" 0 $((hosts - 1)))
  common=(-np "$hosts" --host "$list" --map-by node --bind-to none
    --mca plm_rsh_agent "$root/bench/netns-rsh" --mca oob_tcp_if_include "$mgmt"
    --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm
    -x FI_PROVIDER_PATH -x HXMPI_TRUNC_LARGE=1)
  mpirun_testbed "$out/testbed-$hosts-c.log" "${common[@]}" "$out/correctness"
  mpirun_testbed "$out/testbed-$hosts-py.log" "${common[@]}" /usr/bin/python3 \
    "$root/tests/mpi/correctness.py"
  echo "stage time $((SECONDS - t)) s"
done

stage "HPC Challenge on 4 and NetPIPE on 2 testbed hosts over Open MPI + hxcomm"
t=$SECONDS
# (The orted wiring failure that mpirun_testbed retries has not been seen here; a failure is
# shown with its log.)
HXMPI_HOSTS4=$(seq -s, -f "${tb}%g" 0 3) HXMPI_HOSTS2="${tb}0,${tb}1" \
  tests/mpi/thirdparty.sh "$out/thirdparty-testbed" --map-by node --bind-to none \
  --mca plm_rsh_agent "$root/bench/netns-rsh" --mca oob_tcp_if_include "$mgmt" \
  --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm -x FI_PROVIDER_PATH
echo "stage time $((SECONDS - t)) s"

stage "Open MPI's ob1 over btl/ofi (two-sided: delivery-complete sends) + hxcomm on 2 testbed hosts"
t=$SECONDS
# Between hosts the rails are written as lossy (kept for a resend until acknowledged): every
# small send's word back from the receiver is one more frame to count and acknowledge. The
# two-way 4 MiB run (btl/ofi's 4 KiB fragments both ways, every byte checked) stopped for good
# when those words went uncounted.
mpicc -O2 -o "$out/mpi_osu" bench/mpi_osu.c
ob1=(-np 2 --host "${tb}0,${tb}1" --map-by node --bind-to none
  --mca plm_rsh_agent "$root/bench/netns-rsh" --mca oob_tcp_if_include "$mgmt"
  --mca pml ob1 --mca btl self,ofi --mca btl_ofi_mode 1 --mca btl_ofi_provider_include hxcomm
  -x FI_PROVIDER_PATH)
mpirun_testbed "$out/testbed-ob1-c.log" "${ob1[@]}" "$out/correctness"
mpirun_testbed "$out/testbed-ob1-bibw.log" "${ob1[@]}" -x MPI_OSU_VALIDATE=1 "$out/mpi_osu" \
  bibw:4194304:4:1:64 bw:4194304:4:1:64
echo "stage time $((SECONDS - t)) s"

stage "Open MPI's ob1 with vader and btl/ofi mode 2 (RDMA) + hxcomm, 2 ranks on each of 2 testbed hosts"
t=$SECONDS
# A host's pairs through vader, the others through hxcomm: large messages as one fi_read of
# the sender's buffer (RGET), striped over the rails, every byte checked.
ob1rdma=(-np 4 --host "${tb}0:2,${tb}1:2" --map-by node --bind-to none
  --mca plm_rsh_agent "$root/bench/netns-rsh" --mca oob_tcp_if_include "$mgmt"
  --mca pml ob1 --mca btl self,vader,ofi --mca btl_ofi_mode 2 --mca btl_ofi_provider_include hxcomm
  -x FI_PROVIDER_PATH)
mpirun_testbed "$out/testbed-ob1rdma-c.log" "${ob1rdma[@]}" "$out/correctness"
# MPI one-sided through osc/rdma: puts, gets (large, and small ones that hxcomm carries in one
# frame each way) and atomics over hxcomm.
mpicc -O2 -Wall -Werror -o "$out/osc" tests/mpi/osc.c
mpirun_testbed "$out/testbed-ob1rdma-osc.log" "${ob1rdma[@]}" --mca osc rdma "$out/osc"
ob1rdma[1]=2
ob1rdma[3]="${tb}0,${tb}1"
mpirun_testbed "$out/testbed-ob1rdma-bibw.log" "${ob1rdma[@]}" -x MPI_OSU_VALIDATE=1 "$out/mpi_osu" \
  bibw:4194304:4:1:64 bw:4194304:4:1:64
echo "stage time $((SECONDS - t)) s"

stage "64 ranks, one host, 4 loopback TCP rails: all-to-all right after MPI_Init"
t=$SECONDS
HX_TRANSPORTS=tcp HX_LOOPBACK_RAILS=4 timeout 300 mpirun -np 64 --oversubscribe --bind-to none \
  --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm \
  -x FI_PROVIDER_PATH -x HX_TRANSPORTS -x HX_LOOPBACK_RAILS "$out/alltoall" 2>&1 | grep '^OK\|FAIL'
echo "stage time $((SECONDS - t)) s"

echo
echo "provider tests passed in $((SECONDS - t_all)) s"
