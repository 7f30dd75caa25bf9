#!/usr/bin/env bash
# Open MPI (and MPICH) under the rail cut of bench/failover.sh, as root: testbed hxo (2 hosts x
# 4 rails, 1gbit), bench/mpi_osu.c bw at 4 MiB (window 64, ~15 s) over all 4 rails, launched the
# way `hxcomm bench compare --mpi` does it (crates/bench/src/compare.rs); r$CUT_RAIL (default r3)
# of host 0 goes down CUT_AT (default 3) s in and comes back CUT_FOR (default 4) s later. Host 0's per-rail tx byte counters are sampled every 0.2 s to
# show which rails carry traffic; prints exit status, wall time, MPI's output and errors.
# "hxcomm" runs Open MPI over the hxcomm libfabric provider (pml cm, mtl ofi) instead, with every
# byte of every message checked (MPI_OSU_VALIDATE=1); "all" runs the three.
#   flock /tmp/hxcomm-bench.lock bash bench/mpi_failover.sh [openmpi|mpich|hxcomm|both|all] [LIMIT_S]
set -uo pipefail
cd "$(dirname "$0")/.."
which=${1:-both}
limit=${2:-90}
B=$PWD/target/release/hxcomm
name=hxo
cut=${CUT_RAIL:-3}
cut_at=${CUT_AT:-3}     # seconds after the start of mpirun
cut_for=${CUT_FOR:-4}
validate=${VALIDATE:-1} # hxcomm run: check every byte (MPI_OSU_VALIDATE)
out=${OUT:-$(mktemp -d /tmp/mpi_failover.XXXXXX)}
$B net up --name $name --hosts 2 --rails 4 --rate 1gbit >/dev/null || exit 1
trap '$B net down --name $name >/dev/null' EXIT
# UCX skips interfaces whose carrier is not up yet (MPICH then fails in MPI_Init with "No such device"
# right after `net up`): wait for every rail of both hosts to report operstate up.
for i in $(seq 1 50); do
  ok=1
  for h in 0 1; do for r in 0 1 2 3; do
    [ "$(ip netns exec $name$h cat /sys/class/net/r$r/operstate)" = up ] || ok=0
  done; done
  [ $ok = 1 ] && break; sleep 0.1
done
sleep 1
st=$($B net status --name $name --json)
mgmt_net=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["mgmt_net"])' "$st")
mgmt_addr=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["mgmt_addr"])' "$st")
mpicc.openmpi -O2 -o "$out/osu_ompi" bench/mpi_osu.c
mpicc.mpich -O2 -o "$out/osu_mpich" bench/mpi_osu.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TEST=bw:4194304:27:1:64   # 27 x 256 MiB at ~478 MB/s: ~15 s
run_one() {  # label, command...
  local label=$1; shift
  echo "== $label: $*" | tee "$out/$label.log"
  ( while :; do
      printf '%s' "$(date +%s.%N)"
      for r in 0 1 2 3; do printf ' %s' "$(ip netns exec ${name}0 cat /sys/class/net/r$r/statistics/tx_bytes)"; done
      echo; sleep 0.2
    done ) > "$out/$label.counters" & local sampler=$!
  local t0=$(date +%s.%N)
  ( sleep "$cut_at"; date +%s.%N > "$out/$label.cut"; $B net link --name $name 0 $cut down >/dev/null
    sleep "$cut_for"; date +%s.%N > "$out/$label.restore"; $B net link --name $name 0 $cut up >/dev/null ) & local cutter=$!
  timeout -k 5 "$limit" "$@" > "$out/$label.out" 2> "$out/$label.err"
  local rc=$?
  local t1=$(date +%s.%N)
  wait $cutter; kill $sampler; wait $sampler 2>/dev/null
  $B net link --name $name 0 $cut up >/dev/null 2>&1
  python3 - "$out" "$label" "$t0" "$t1" "$rc" <<'PY'
import sys
d, label, t0, t1, rc = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
cut = float(open(f"{d}/{label}.cut").read()); restore = float(open(f"{d}/{label}.restore").read())
rows = [list(map(float, l.split())) for l in open(f"{d}/{label}.counters") if len(l.split()) == 5]
print(f"{label}: exit {rc}{' (killed by timeout)' if rc == 124 else ''}, wall {t1 - t0:.1f} s; cut at +{cut - t0:.1f} s, restore at +{restore - t0:.1f} s")
print("  host 0 tx MB/s per rail r0 r1 r2 r3 (1 s bins, t from start):")
last = rows[0]
bins = []
for r in rows[1:]:
    if r[0] - last[0] >= 0.999:
        rates = [(r[i] - last[i]) / (r[0] - last[0]) / 1e6 for i in range(1, 5)]
        mark = " <- cut" if last[0] <= cut < r[0] else " <- restore" if last[0] <= restore < r[0] else ""
        print(f"   +{last[0] - t0:5.1f}..{r[0] - t0:5.1f}  " + " ".join(f"{x:6.1f}" for x in rates) + f"  sum {sum(rates):6.1f}{mark}")
        bins.append((last[0], r[0], sum(rates)))
        last = r
before = [s for a, b, s in bins if a >= t0 + 1 and b <= cut]
during = [s for a, b, s in bins if a >= cut + 1 and b <= restore]
if before and during:
    full = sum(before) / len(before)
    after = sum(during) / len(during)
    print(f"  before the cut {full:.1f} MB/s; from 1 s after the cut to the restore {after:.1f} MB/s"
          f" = {100 * after / (0.75 * full):.1f}% of three rails (3/4 of the figure before the cut)")
PY
  echo "  stdout:"; sed 's/^/    /' "$out/$label.out" | head -5
  echo "  stderr (first 25 lines):"; grep -v '^$' "$out/$label.err" | head -25 | sed 's/^/    /'
}
if [ "$which" = hxcomm ] || [ "$which" = all ]; then
  cargo build --release --workspace >/dev/null 2>&1 || { echo "build failed"; exit 1; }
  run_one hxcomm mpirun.openmpi --allow-run-as-root -np 2 --host ${name}0,${name}1 --map-by node --bind-to none \
    --mca plm_rsh_agent "$PWD/bench/netns-rsh" --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm \
    -x FI_PROVIDER_PATH="$PWD/target/release" -x MPI_OSU_VALIDATE=$validate --mca oob_tcp_if_include "$mgmt_net" "$out/osu_ompi" $TEST
fi
if [ "$which" = openmpi ] || [ "$which" = both ] || [ "$which" = all ]; then
  run_one openmpi mpirun.openmpi --allow-run-as-root -np 2 --host ${name}0,${name}1 --map-by node --bind-to none \
    --mca plm_rsh_agent "$PWD/bench/netns-rsh" --mca pml ob1 --mca btl tcp,self \
    --mca btl_tcp_if_include r0,r1,r2,r3 --mca oob_tcp_if_include "$mgmt_net" "$out/osu_ompi" $TEST
fi
if [ "$which" = mpich ] || [ "$which" = both ] || [ "$which" = all ]; then
  run_one mpich mpiexec.mpich -launcher ssh -launcher-exec "$PWD/bench/netns-rsh" -localhost "$mgmt_addr" \
    -hosts ${name}0,${name}1 -n 2 -genv UCX_TLS tcp -genv UCX_NET_DEVICES r0,r1,r2,r3 "$out/osu_mpich" $TEST
fi
echo "raw output in $out"
