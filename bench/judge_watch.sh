#!/usr/bin/env bash
# The bulk-sleep judge's trials, run by run (issue 10; engine.rs, BulkSleepJudge): RUNS runs of
# `hxcomm bench bw --sizes 4M:4M` on a 2-host testbed (NET, default 4 unlimited rails) with
# HX_LOG=hx_engine=debug, each beside the cache line's one-way time between CPUs 0 and 1 before
# it (the VM's placement). Prints per run: MB/s, trials started, verdicts for spinning and for
# sleeping, and each verdict's spinning / sleeping GB/s.
#
#   sudo RUNS=8 bash bench/judge_watch.sh     # NET="--rails 4 --rate none" ITERATIONS=60
#
# Takes /tmp/hxcomm-bench.lock and brings its testbed (`jw`) down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench/judge_watch.sh: needs root (testbed)" >&2; exit 1; }
RUNS=${RUNS:-8}
NET=${NET:-"--rails 4 --rate none"}
ITERATIONS=${ITERATIONS:-60}
H=$(realpath "${HXCOMM:-target/release/hxcomm}")
out=$(mktemp -d /tmp/judge_watch.XXXXXX)
exec 9>/tmp/hxcomm-bench.lock
flock 9
. bench/cacheline.sh
cacheline_build "$out/clpp"
# shellcheck disable=SC2086
"$H" net up --name jw --hosts 2 $NET >/dev/null
trap '"$H" net down --name jw >/dev/null 2>&1 || true' EXIT
for i in $(seq "$RUNS"); do
  cl=$(cacheline_ns)
  HX_LOG=hx_engine=debug "$H" run --net --name jw -n 2 --tag-output -- "$H" bench bw \
    --sizes 4M:4M --iterations "$ITERATIONS" --json >"$out/run.$i" 2>&1 || true
  mb=$(grep -o '"mb_per_s":[0-9.]*' "$out/run.$i" | cut -d: -f2 || true)
  trials=$(grep -c "trying spinning" "$out/run.$i" || true)
  spin=$(grep -c "bulk waits: spinning received.*: spinning for" "$out/run.$i" || true)
  sleep=$(grep -c "bulk waits: spinning received.*: sleeping for" "$out/run.$i" || true)
  rates=$(grep -o "spinning received [0-9.]* GB/s, sleeping [0-9.]*: [a-z]*" "$out/run.$i" |
    awk '{sub(/:$/, "", $6); print $3 "/" $6 ($7 == "spinning" ? " S" : "")}' |
    paste -sd';' - || true)
  echo "run $i: cache line ${cl:-nan} ns, ${mb:-nan} MB/s, trials $trials, kept spinning $spin, sleeping $sleep: $rates"
done
echo "raw output in $out"
