#!/usr/bin/env bash
# Instructions per round trip of Open MPI's 8-byte ping-pong over the hxcomm provider on one
# host (BENCHMARKS.md, "Where the instructions are now" and after): rank 0 under callgrind (no
# PMU needed), collecting only inside MPI_Send and MPI_Recv, rank 1 at full speed. Prints the
# total per round trip and the parts: MPI_Send, MPI_Recv, fi_trecv, fi_tinjectdata, fi_cq_read.
# The reads include idle polls while rank 1 answers, whose number varies from run to run; send,
# fi_trecv and fi_tinjectdata do not.
#
#   bash bench/callgrind_ompi.sh [PROVIDER_DIR] [TEST]
#
# PROVIDER_DIR holds libhxcomm_fi.so (default target/release); TEST a bench/mpi_osu.c test
# (default latency:8:20000:100). A bw test (e.g. bw:8:2000:100:64, Open MPI's message rate) puts
# the receiving rank under callgrind instead and counts per message received: MPI_Irecv,
# MPI_Waitall, fi_trecv, fi_cq_read. With PML=ob1 BTL=self,vader the same counts for vader (the
# provider parts then read 0). DELAY_US=D makes rank 1 wait D us before each answer
# (MPI_OSU_ANSWER_DELAY_US), so that rank 0, slowed down by callgrind, has posted its receive
# when the answer lands, as at full speed: the reads then take the lone receive's ticket, and
# fi_cq_read counts the idle reads of the wait too (about D us of them). Needs valgrind and root's OMPI_ALLOW_RUN_AS_ROOT when root.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(realpath "${1:-target/release}")
test=${2:-latency:8:20000:100}
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install -y valgrind)"; exit 1; }
out=$(mktemp -d /tmp/callgrind_ompi.XXXXXX)
mpicc.openmpi -O2 -g -o "$out/osu" bench/mpi_osu.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -n "${PML:-}" ]; then
  mca=(--mca pml "$PML" --mca btl "${BTL:-self,vader}")
else
  mca=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm)
fi
case $test in
  bw:*)
    # The receiving rank under callgrind, collecting in MPI_Irecv and MPI_Waitall, the sender
    # at full speed: every message is there when looked for. Per message received.
    (cd "$out" && mpirun.openmpi "${mca[@]}" -np 1 -x FI_PROVIDER_PATH="$dir" "$out/osu" "$test" \
      : -np 1 -x FI_PROVIDER_PATH="$dir" valgrind --tool=callgrind --collect-atstart=no \
      --toggle-collect=PMPI_Irecv --toggle-collect=PMPI_Waitall "$out/osu" "$test" \
      >/dev/null 2>&1)
    first=PMPI_Irecv ;;
  *)
    (cd "$out" && mpirun.openmpi "${mca[@]}" -np 1 -x FI_PROVIDER_PATH="$dir" valgrind \
      --tool=callgrind --collect-atstart=no --toggle-collect=PMPI_Send \
      --toggle-collect=PMPI_Recv "$out/osu" "$test" : -np 1 -x FI_PROVIDER_PATH="$dir" \
      -x MPI_OSU_ANSWER_DELAY_US="${DELAY_US:-0}" "$out/osu" "$test" >/dev/null 2>&1)
    first=PMPI_Send ;;
esac
f=$(ls "$out"/callgrind.out.*)
callgrind_annotate --auto=no --inclusive=yes --tree=calling "$f" > "$out/tree.txt"
calls=$(grep -E "> +\?\?\?:$first " "$out/tree.txt" | head -1 | grep -o '([0-9,]*x)' | tr -d '(),x')
total=$(callgrind_annotate --auto=no "$f" | grep 'PROGRAM TOTALS' | awk '{gsub(",","",$1); print $1}')
part() {
  local v
  v=$(grep -E "x\)( |$)" "$out/tree.txt" | grep -E "$1" | head -1 | awk '{gsub(",","",$1); print $1}')
  echo $(( ${v:-0} / calls ))
}
case $test in
  bw:*)
    echo "per message received ($calls messages, callgrind output in $out):"
    echo "  total $((total / calls)), MPI_Irecv $(part '> +\?\?\?:PMPI_Irecv '), MPI_Waitall $(part '> +\?\?\?:PMPI_Waitall '), fi_trecv $(part 'ep::t_recv '), fi_cq_read $(part 'cq::cq_read ')" ;;
  *)
    echo "per round trip ($calls round trips, callgrind output in $out):"
    echo "  total $((total / calls)), MPI_Send $(part '> +\?\?\?:PMPI_Send '), MPI_Recv $(part '> +\?\?\?:PMPI_Recv '), fi_trecv $(part 'ep::t_recv '), fi_tinjectdata $(part 'ep::t_injectdata '), fi_cq_read $(part 'cq::cq_read ')" ;;
esac
