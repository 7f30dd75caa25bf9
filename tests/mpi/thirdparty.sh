#!/usr/bin/env bash
# tests/mpi/thirdparty.sh OUTDIR [MPIRUN_ARG...]
#
# MPI programs hxcomm did not write, unmodified, as Debian ships them, checked by their own
# verification:
#  - HPC Challenge (`hpcc`, Debian's package, linked with Open MPI): HPL, PTRANS, MPI
#    RandomAccess, MPI FFT, b_eff's ping-pongs and rings. It must print Success=1, and every
#    check it makes must pass: HPL's and PTRANS's residual checks, zero RandomAccess errors,
#    an MPI FFT error below 1e-12.
#  - NetPIPE's integrity mode (`NPopenmpi -i`, Debian's netpipe-openmpi): 1 byte to 8 MiB
#    (sizes on both sides of each power of two), every byte of every message checked, under
#    the modes that change how receives meet sends: blocking, preposted (-a), unaligned
#    buffers (-O 1,3), streaming one way (-s), synchronous sends (-S), any-source (-z), and
#    both directions at once with preposted receives (-a -2).
#
# The MPIRUN_ARGs choose the transport and placement; they are given to every mpirun, with
# "-np N" added (4 for hpcc, 2 for NetPIPE) unless HXMPI_HOSTS4/HXMPI_HOSTS2 give the
# --host lists instead. E.g., on this host:
#   tests/mpi/thirdparty.sh /tmp/tp --mca pml cm --mca mtl ofi \
#       --mca mtl_ofi_provider_include hxcomm -x FI_PROVIDER_PATH
# Exits non-zero, with the failing program's output, at the first failure. Prints each
# program's time. (NetPIPE's `-2` without `-a` sends before it receives on both sides, which
# is unsafe MPI: it deadlocks past the eager size under vader too, so it is not run.)
set -euo pipefail
out=${1:?usage: tests/mpi/thirdparty.sh OUTDIR [MPIRUN_ARG...]}
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
for tool in hpcc NPopenmpi; do
  if ! command -v "$tool" >/dev/null; then
    exec bash "$(dirname "$0")/../skips.sh" --skip tests/mpi/thirdparty.sh \
      "needs $tool (apt-get install hpcc netpipe-openmpi)"
  fi
done
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
timeout=${HXMPI_RUN_TIMEOUT:-300}

placement() {
  local n=$1 hosts=$2
  if [ -n "$hosts" ]; then
    echo "-np $n --host $hosts"
  else
    echo "-np $n --oversubscribe"
  fi
}

fail() {
  echo "thirdparty: FAIL: $1"
  [ -f "${2:-}" ] && tail -40 "$2"
  exit 1
}

# HPC Challenge on a 2 x 2 process grid: small problems (HPL N=1000, PTRANS N=500), so that
# four ranks on two cores finish in seconds.
hpcc_dir=$out/hpcc
rm -rf "$hpcc_dir"
mkdir -p "$hpcc_dir"
cp /usr/share/doc/hpcc/examples/_hpccinf.txt "$hpcc_dir/hpccinf.txt"
t=$SECONDS
# shellcheck disable=SC2046
if ! (cd "$hpcc_dir" && timeout "$timeout" mpirun $(placement 4 "${HXMPI_HOSTS4:-}") "$@" hpcc \
    >run.log 2>&1); then
  fail "hpcc exited with an error" "$hpcc_dir/run.log"
fi
res=$hpcc_dir/hpccoutf.txt
[ -f "$res" ] || fail "hpcc wrote no hpccoutf.txt" "$hpcc_dir/run.log"
value() { sed -n "s/^$1=//p" "$res" | head -1; }
grep -q '^Success=1$' "$res" || fail "hpcc: Success=$(value Success)" "$res"
grep -q 'tests completed and passed residual checks' "$res" \
  || fail "hpcc: HPL did not report its residual checks" "$res"
if grep -E '^ +[1-9][0-9]* tests completed and failed residual checks' "$res"; then
  fail "hpcc: an HPL or PTRANS residual check failed" "$res"
fi
for k in PTRANS_residual MPIRandomAccess_Errors MPIRandomAccess_LCG_Errors; do
  [ "$(value $k)" = 0 ] || fail "hpcc: $k=$(value $k), expected 0" "$res"
done
err=$(value MPIFFT_maxErr)
awk -v e="$err" 'BEGIN { exit !(e != "" && e + 0 < 1e-12) }' \
  || fail "hpcc: MPIFFT_maxErr=$err, expected below 1e-12" "$res"
echo "OK hpcc (4 ranks): Success=1, HPL and PTRANS residuals pass, RandomAccess 0 errors," \
  "MPI FFT max error $err; ping-pong bandwidth $(value MaxPingPongBandwidth_GBytes) GB/s" \
  "at best; $((SECONDS - t)) s"

# NetPIPE's integrity check in each mode.
np_modes=("" "-a" "-O 1,3" "-s" "-S" "-z" "-a -2")
for mode in "${np_modes[@]}"; do
  log=$out/netpipe${mode// /}.log
  t=$SECONDS
  # shellcheck disable=SC2046,SC2086
  if ! timeout "$timeout" mpirun $(placement 2 "${HXMPI_HOSTS2:-}") "$@" NPopenmpi -i \
      -u 8388608 $mode -o "$out/netpipe.out" >"$log" 2>&1; then
    fail "NPopenmpi -i $mode exited with an error (or timed out)" "$log"
  fi
  passed=$(grep -c 'Integrity check passed' "$log" || true)
  # (Only NetPIPE's own verdict: launcher warnings may say "failed" about other things.)
  if grep -i 'integrity check failed' "$log" || [ "$passed" -lt 40 ]; then
    fail "NPopenmpi -i $mode: $passed sizes passed, expected 40 or more and no failure" "$log"
  fi
  echo "OK NetPIPE -i ${mode:-(blocking)}: $passed sizes, 1 B-8 MiB, every byte checked;" \
    "$((SECONDS - t)) s"
done
