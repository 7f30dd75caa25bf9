#!/usr/bin/env bash
# tests/mpi/run-local.sh [OUTDIR] [NRANKS]
#
# Builds correctness.c into OUTDIR (default: a new temporary directory) and runs it and
# correctness.py with mpirun on this host with NRANKS ranks (default 4).  Exits non-zero if
# either fails; prints how long each run took.
#
# Transport selection comes from the environment, which mpirun and the ranks inherit, e.g.
#   OMPI_MCA_pml=cm OMPI_MCA_mtl=ofi OMPI_MCA_mtl_ofi_provider_include=hxcomm \
#   FI_PROVIDER_PATH=/path/to/providers tests/mpi/run-local.sh /tmp/out 4
# FI_*, HX_* and HXMPI_* variables are also passed explicitly with -x.
# (Open MPI 4.1's mtl ofi refuses libfabric's stock shm, sockets, tcp and udp providers unless
# OMPI_MCA_mtl_ofi_provider_exclude is overridden, e.g. with "none".)
#
# Other environment:
#   HXMPI_SEED, HXMPI_ROUNDS, HXMPI_TIMEOUT, ... see correctness.c / correctness.py
#   HXMPI_PROGRAMS   which programs to run: "c py" (default), "c" or "py"
#   HXMPI_RUN_TIMEOUT seconds before a whole mpirun is killed (default 600)
#   MPICC, MPIRUN    compiler wrapper and launcher (default mpicc, mpirun)
#   PYTHON           interpreter with mpi4py (default /usr/bin/python3: Debian's, which has
#                    python3-mpi4py; a pyenv `python3` on PATH may not)
#   MPIRUN_ARGS      extra mpirun arguments, word-split (e.g. "--tag-output --mca btl tcp,self")
set -u

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-}
n=${2:-4}
if [ -z "$out" ]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/hxcomm-mpi.XXXXXX") || exit 1
fi
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)

MPICC=${MPICC:-mpicc}
MPIRUN=${MPIRUN:-mpirun}
PYTHON=${PYTHON:-/usr/bin/python3}
programs=${HXMPI_PROGRAMS:-c py}
run_timeout=${HXMPI_RUN_TIMEOUT:-600}

echo "run-local: output in $out, $n ranks"
if ! "$MPICC" -std=c99 -O2 -Wall -Wextra -Werror -o "$out/correctness" "$here/correctness.c"; then
    echo "run-local: FAIL: building correctness.c"
    exit 1
fi

if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

args=(-np "$n" --oversubscribe)
# everything runs on this host: no remote launcher needed (and no ssh may be installed)
if [ -z "${OMPI_MCA_plm:-}" ] && ! command -v ssh >/dev/null && ! command -v rsh >/dev/null; then
    args+=(--mca plm isolated)
fi
while IFS='=' read -r name _; do
    case $name in FI_* | HX_* | HXMPI_*) args+=(-x "$name") ;; esac
done < <(env)
# shellcheck disable=SC2206
[ -n "${MPIRUN_ARGS:-}" ] && args+=($MPIRUN_ARGS)

mca=$(env | grep -E '^(OMPI_MCA_|FI_PROVIDER)' | grep -v -E '^OMPI_MCA_(plm|rmaps)' | sort | tr '\n' ' ')
echo "run-local: transport settings: ${mca:-(Open MPI defaults)}"

status=0
run() { # name log cmd...
    local name=$1 log=$2
    shift 2
    local t0 t1 rc
    t0=$(date +%s.%N)
    timeout -k 10 "$run_timeout" "$MPIRUN" "${args[@]}" "$@" >"$log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    local secs
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    if [ $rc -eq 0 ] && grep -q "^OK $name" "$log"; then
        echo "run-local: PASS $name np=$n in ${secs}s: $(grep "^OK $name" "$log")"
    else
        [ $rc -eq 124 ] && echo "run-local: $name: mpirun killed after ${run_timeout}s"
        echo "run-local: FAIL $name np=$n (exit $rc) after ${secs}s; log $log:"
        if grep -q '^FAIL' "$log"; then grep '^FAIL' "$log" | head -20; else tail -40 "$log"; fi
        status=1
    fi
}

for p in $programs; do
    case $p in
    c) run correctness.c "$out/correctness.c.log" "$out/correctness" ;;
    py)
        if ! "$PYTHON" -c 'import mpi4py' 2>/dev/null; then  # (importing mpi4py.MPI would MPI_Init)
            echo "run-local: FAIL correctness.py: $PYTHON cannot import mpi4py"
            status=1
            continue
        fi
        run correctness.py "$out/correctness.py.log" "$PYTHON" "$here/correctness.py"
        ;;
    *)
        echo "run-local: unknown program '$p' in HXMPI_PROGRAMS"
        status=1
        ;;
    esac
done
exit $status
