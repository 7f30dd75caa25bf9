#!/usr/bin/env bash
# iperf3's aggregate over every rail of a 2-host testbed, one write size against another
# (BENCHMARKS.md, "Bars at f521022 and fe9391c, the rest": 4 unlimited rails, 128 KiB writes,
# iperf3's default and what `hxcomm bench compare` runs, against 1 MiB). Per rail k one server in
# host 1 and one client in host 0 (`-B` on rail k's addresses, `-C reno` as the rails run), all
# clients at once; prints per round the sum of their received rates (MB/s) for each size.
#
#   sudo ROUNDS=6 bash bench/iperf_writes.sh            # NET="--rails 4 --rate none" LENS="128K 1M"
#
# iperf3 refuses writes above 1 MiB. Takes /tmp/hxcomm-bench.lock and brings its testbed (`iw`)
# down on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-6}
NET=${NET:-"--rails 4 --rate none"}
LENS=${LENS:-"128K 1M"}
SECS=${SECS:-3}
B=$PWD/target/release/hxcomm
NAME=iw
command -v iperf3 >/dev/null || { echo "needs iperf3" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bench/iperf_writes.sh: needs root (network namespaces)" >&2; exit 1; }
exec 9>/tmp/hxcomm-bench.lock
flock 9
tmp=$(mktemp -d /tmp/iperf_writes.XXXXXX)
# shellcheck source=bench/iperf_rails.sh
. bench/iperf_rails.sh
cleanup() {
  for p in "${IPERF_SERVERS[@]}"; do kill "$p" 2>/dev/null || true; done
  "$B" net down --name $NAME >/dev/null 2>&1 || true
}
trap cleanup EXIT
# shellcheck disable=SC2086
"$B" net up --name $NAME --hosts 2 $NET >/dev/null
rails=$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["hosts"][0]["rails"]))' \
  "$("$B" net status --name $NAME --json)")
echo "# iperf3 over $rails rails ($NET), ${SECS} s, MB/s per round"
for r in $(seq 1 "$ROUNDS"); do
  line="$r"
  for len in $LENS; do line="$line -l $len: $(iperf_rails $NAME "$rails" "$SECS" "$len" free "$tmp" 5300)"; done
  echo "$line"
done
