#!/usr/bin/env bash
# The hxcomm provider beside libfabric's own `shm` provider on one host, below any MPI (issue 8's
# same-host bar): fabtests 1.17 between two processes pinned to cores 0 and 1, RUNS interleaved
# rounds, medians and the per-round ratio hxcomm / shm:
#   fi_rdm_tagged_pingpong 8 B    one-way latency (usec/xfer)
#   fi_rdm_tagged_bw 8 B, window 64  the message rate (MB/s)
#   fi_rdm_tagged_bw 4 MiB, window 64  bandwidth (MB/s)
# Open MPI 4.1's mtl ofi cannot run over `shm` (it asks for FI_REMOTE_COMM, which shm refuses:
# "PML cm cannot be selected"), so this is the one place the two providers meet on equal terms.
#
#   sudo RUNS=5 bash bench/provider_vs_shm.sh
#
# FABTESTS_BIN (default target/fabtests/bin, built by tests/provider/ci.sh) and FI_PROVIDER_PATH
# (default target/release) say where the tests and the provider are. Takes
# /tmp/hxcomm-bench.lock (one measurement at a time on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
bin=${FABTESTS_BIN:-$PWD/target/fabtests/bin}
export FI_PROVIDER_PATH=${FI_PROVIDER_PATH:-$PWD/target/release}
export HX_JOB_SECRET=${HX_JOB_SECRET:-$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')}
[ -x "$bin/fi_rdm_tagged_bw" ] || { echo "no fabtests in $bin (bash tests/provider/ci.sh builds them)" >&2; exit 2; }
exec 9>/tmp/hxcomm-bench.lock
flock 9

# One fabtests pair; prints the last line's MB/sec and usec/xfer.
pair() {
  local prov=$1 test=$2; shift 2
  local srv=() cli=()
  case $prov in
    # hxcomm's name needs an address to listen on; shm names its endpoint after the source
    # address, so the client takes another one than the server's default.
    hxcomm) srv=(-s 127.0.0.1) cli=(-s 127.0.0.1) ;;
    shm) cli=(-s client) ;;
  esac
  local log
  log=$(mktemp)
  taskset -c 0 timeout 120 "$bin/$test" -p "$prov" -b "${srv[@]}" "$@" >"$log" 2>&1 &
  local spid=$!
  sleep 0.3
  local line
  line=$(taskset -c 1 timeout 120 "$bin/$test" -p "$prov" -b "${cli[@]}" "$@" 127.0.0.1 2>&1 | tail -1)
  wait $spid || { echo "$prov $test: server failed: $(tail -3 "$log")" >&2; line=""; }
  rm -f "$log"
  echo "$line" | awk 'NF >= 7 { print $5, $6; exit } END { if (NR == 0 || NF < 7) print "nan nan" }'
}

raw=$(mktemp)
for i in $(seq "$RUNS"); do
  for prov in hxcomm shm; do
    read -r _ lat < <(pair "$prov" fi_rdm_tagged_pingpong -S 8 -I 100000)
    read -r rate _ < <(pair "$prov" fi_rdm_tagged_bw -S 8 -W 64 -I 500000)
    read -r bw _ < <(pair "$prov" fi_rdm_tagged_bw -S 4194304 -W 64 -I 400)
    echo "$i $prov $lat $rate $bw" | tee -a "$raw" >&2
  done
done
echo "# provider_vs_shm: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), $RUNS rounds, cores 0 and 1"
python3 - "$raw" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
cols = [("8 B latency, us", 2), ("8 B rate, MB/s", 3), ("4 MiB bw, MB/s", 4)]
by = {}
for r in rows:
    by.setdefault(r[1], {}).setdefault(r[0], r)
def med(v):
    v = [x for x in v if x == x]
    return statistics.median(v) if v else float("nan")
print("| provider | " + " | ".join(c for c, _ in cols) + " |")
print("|---|" + "---:|" * len(cols))
for p in ("hxcomm", "shm"):
    vals = [med([float(r[k]) for r in by.get(p, {}).values()]) for _, k in cols]
    print(f"| {p} | " + " | ".join(f"{v:.3f}" if k == 2 else f"{v:.1f}" for v, (_, k) in zip(vals, cols)) + " |")
print()
for c, k in cols:
    rs = [float(by["hxcomm"][i][k]) / float(by["shm"][i][k])
          for i in by.get("hxcomm", {}) if i in by.get("shm", {})]
    rs = [x for x in rs if x == x]
    print(f"hxcomm / shm, {c}: per round {[round(x, 2) for x in rs]}, median {med(rs):.2f}x")
PY
rm -f "$raw"
