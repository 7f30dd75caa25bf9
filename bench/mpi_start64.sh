#!/usr/bin/env bash
# How long 64 ranks on this host take to start under Open MPI + the hxcomm provider over 4
# loopback TCP rails (issue 8: under 5 s), as tests/provider/ci.sh runs them: tests/mpi/alltoall.c
# (an all-to-all right after MPI_Init). Configurations interleaved, RUNS rounds (default 3); each
# prints mpirun's wall time and the slowest rank's MPI_Init, first and second all-to-all; then
# medians. As root or not; holding the locks:
#   flock /tmp/hxcomm-cargo.lock flock /tmp/hxcomm-bench.lock bash bench/mpi_start64.sh [CONFIG...]
# A CONFIG is LABEL or LABEL=MPIRUN-ARGS (word-split; HX_TRANSPORTS=tcp and HX_LOOPBACK_RAILS=4
# are passed to the ranks in every configuration), e.g.
#   plain="" vader="--mca pml ob1 --mca btl self,vader"
#   before="--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm -x FI_PROVIDER_PATH=/tmp/old"
# LABEL "hxcomm" alone (the default) is tests/provider/ci.sh's command: the provider in
# HXCOMM's directory. Environment: RUNS, NP (64), HXCOMM (default target/release/hxcomm).
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
np=${NP:-64}
hx=${HXCOMM:-$PWD/target/release/hxcomm}
dir=$(cd "$(dirname "$hx")" && pwd)
out=$(mktemp -d /tmp/mpi_start64.XXXXXX)
mpicc -O2 -o "$out/alltoall" tests/mpi/alltoall.c || exit 1
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export HX_TRANSPORTS=tcp HX_LOOPBACK_RAILS=4 FI_PROVIDER_PATH=$dir
provider=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm
  -x FI_PROVIDER_PATH -x HX_TRANSPORTS -x HX_LOOPBACK_RAILS)
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(hxcomm)
for r in $(seq 1 "$runs"); do
  for c in "${configs[@]}"; do
    label=${c%%=*}
    case $c in
      hxcomm) cmd=(mpirun -np "$np" --oversubscribe --bind-to none "${provider[@]}") ;;
      *=*)
        # shellcheck disable=SC2206
        extra=(${c#*=})
        cmd=(mpirun -np "$np" --oversubscribe --bind-to none -x HX_TRANSPORTS -x HX_LOOPBACK_RAILS
          "${extra[@]}") ;;
      *) echo "unknown config $c"; exit 2 ;;
    esac
    t0=$(date +%s.%N)
    timeout 300 "${cmd[@]}" "$out/alltoall" >"$out/$label.$r.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    line=$(grep '^OK' "$out/$label.$r.log")
    echo "RESULT config=$label run=$r rc=$rc wall=$(python3 -c "print(f'{$t1 - $t0:.2f}')") $line"
  done
done | tee "$out/results"
python3 - "$out/results" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"RESULT config=(\S+) run=\d+ rc=(\d+) wall=([\d.]+)(?: .*init=([\d.]+)s first=([\d.]+)s second=([\d.]+)s)?", line)
    if m:
        label, rc, wall, init, first, second = m.groups()
        rows.setdefault(label, []).append((float(wall), *(float(x) if x else float("nan") for x in (init, first, second)), int(rc)))
print()
print(f"{'config':12} {'runs':>4} {'failed':>6} {'wall s':>7} {'init s':>7} {'first s':>8} {'second s':>8}   per run wall")
for label, v in rows.items():
    ok = [x for x in v if x[4] == 0]
    med = lambda i: statistics.median(x[i] for x in ok) if ok else float("nan")
    print(f"{label:12} {len(v):>4} {len(v) - len(ok):>6} {med(0):>7.2f} {med(1):>7.2f} {med(2):>8.2f} {med(3):>8.2f}   "
          + " ".join(f"{x[0]:.2f}" for x in v))
PY
echo "raw output in $out"
