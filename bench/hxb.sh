#!/usr/bin/env bash
# "hyper-crossbar" (BENCHMARKS.md, issue 9): hxcomm on a hxb:2x2x2 testbed with 2 links per
# dimension against raw TCP over the same paths, Open MPI and the same hosts wired as 1D, in one
# run, RUNS times (default 3), medians printed as a markdown table, raw per-run values after it.
#
#   flock is taken by the script itself (/tmp/hxcomm-bench.lock, for the whole run); as root:
#   bash bench/hxb.sh                      # RATE=500mbit RATE8=100mbit RUNS=3
#
# 1. Opposite corners (hosts 0 and 7) of hxb:2x2x2 x 2 at RATE (testbed `hb`): hxcomm
#    `bench bw` / `bench bibw` (4 MiB, window 64, ~SECS s) against iperf3 over the same six
#    paths at once (a server per path in host 7, a client per path in host 0 bound with -B to the
#    path's source address and aimed at its destination address, from `hxcomm topo paths`; one
#    way: the six receiver rates summed; two ways: --bidir, both directions summed). Open MPI 4.1
#    btl/tcp and Open MPI over the hxcomm libfabric provider (mtl ofi, HX_TOPOLOGY passed with
#    -x) running bench/mpi_osu.c on the same two hosts.
# 2. Eight hosts, one rank each, at RATE8 (lower: 8 hosts' traffic must leave the 2 cores idle
#    time, see below), on hxb:2x2x2 x 2 (testbed `hk`) and on the 1D wiring with the same NICs
#    (`net up --hosts 8 --rails 6`, testbed `hd`): `bench alltoall --throughput` (A2A_SIZE per
#    peer, 5 rounds; a round's time is the slowest rank's, median of rounds 2..5) against the link
#    model (bytes x hops over capacity: 2x2x2 x 2: 96 S byte-hops over 48 NIC-directions = 2 S / C;
#    1D: 7 S / (6 C); C = iperf3 over one link of that testbed in the same run); `bench is --class
#    IS_CLASS` and `bench cg --nx CG_N --ny CG_N --iterations CG_ITERS` (seconds per iteration), 2x2x2 against 1D and
#    against 1D plus the model's extra time for IS's key exchange; the same two kernels as MPI
#    programs (bench/mpi_is.c, bench/mpi_cg.c) through Open MPI over the hxcomm provider.
# 3. Detours (`net up --detours`: line neighbours also over 3-hop paths through the other
#    dimensions): hosts 0 and 1 (line neighbours) one way and two ways at RATE without (hb) and
#    with detours (testbed hy); the 8-host all-to-all, IS and CG at RATE8 with detours (hz)
#    against hk.
# 4. CPU: for every measurement the machine's idle share and softirq time (/proc/stat: global, the
#    namespaces share one kernel) over the command, and for the corner transfers the bytes the six
#    relay hosts transmitted (their NICs' tx counters): softirq seconds per GB forwarded.
#    Before each measurement the script waits (up to 60 s) for a second with >= 90% idle (others
#    build outside the bench lock); the idle it found is in the raw output.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/testbed.sh
if [ "$(id -u)" != 0 ]; then
  echo "bench/hxb.sh: needs root (network namespaces)" >&2
  exit 1
fi
RATE=${RATE:-500mbit}
RATE8=${RATE8:-100mbit}
RUNS=${RUNS:-3}
SECS=${SECS:-5}
A2A_SIZE=${A2A_SIZE:-16M}
IS_CLASS=${IS_CLASS:-B}
CG_N=${CG_N:-4096}
# 400 iterations: CG's per-run times spread 0.92-1.11x between layouts at 100 (the 2 cores'
# computation, not the network), which a 5% verdict cannot ride on.
CG_ITERS=${CG_ITERS:-400}
exec 9>/tmp/hxcomm-bench.lock
echo "waiting for /tmp/hxcomm-bench.lock ..." >&2
flock 9
start_date=$(date -u '+%Y-%m-%d %H:%M UTC')
commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain --untracked-files=no | wc -l)
out=$(mktemp -d /tmp/hxb.XXXXXX)
if [ -z "${NO_BUILD:-}" ]; then
  flock /tmp/hxcomm-cargo.lock cargo build --release --workspace >"$out/build.log" 2>&1 \
    || { echo "build failed: $out/build.log" >&2; exit 1; }
fi
# Copies: others may rebuild target/release while this runs.
cp target/release/hxcomm target/release/libhxcomm_fi.so "$out/" || exit 1
B=$out/hxcomm
mpicc -O2 -o "$out/osu" bench/mpi_osu.c || exit 1
mpicc -O2 -o "$out/mpi_is" bench/mpi_is.c || exit 1
mpicc -O2 -o "$out/mpi_cg" bench/mpi_cg.c -lm || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cleanup() {
  # Only this shell's own background jobs still running (iperf3 servers and clients).
  local j; j=$(jobs -p)
  [ -n "$j" ] && kill $j 2>/dev/null
  for n in hb hk hd hy hz; do $B net down --name $n >/dev/null 2>&1; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

topo=(--topology hxb:2x2x2 --links-per-dim 2)
$B net up --name hb "${topo[@]}" --rate "$RATE" >"$out/net.log" || exit 1
$B net up --name hk "${topo[@]}" --rate "$RATE8" >>"$out/net.log" || exit 1
$B net up --name hd --hosts 8 --rails 6 --rate "$RATE8" >>"$out/net.log" || exit 1
# The same two wirings with detours (line neighbours also through the other dimensions).
$B net up --name hy "${topo[@]}" --detours --rate "$RATE" >>"$out/net.log" || exit 1
$B net up --name hz "${topo[@]}" --detours --rate "$RATE8" >>"$out/net.log" || exit 1
sleep 2
mgmt() { testbed_mgmt "$1" "$B"; }
# MB/s of a tc rate (10^6 bytes/s).
mbps() { python3 -c 'import re,sys; m=re.fullmatch(r"([\d.]+)(k|m|g)bit",sys.argv[1]); print(float(m[1])*{"k":1e3,"m":1e6,"g":1e9}[m[2]]/8e6)' "$1"; }
rate_mb=$(mbps "$RATE")
# Iterations of 4 MiB x 64 for about SECS seconds at MB/s $1 (90% of it expected).
iters() { python3 -c 'import sys; print(max(2, round(float(sys.argv[1]) * 0.9 * float(sys.argv[2]) / (64 * 4194304 / 1e6))))' "$1" "$SECS"; }
bw_iters=$(iters "$(python3 -c "print(6 * $rate_mb)")")
bibw_iters=$(iters "$(python3 -c "print(12 * $rate_mb)")")
# Line neighbours without detours: their two direct links.
ln_bw_iters=$(iters "$(python3 -c "print(2 * $rate_mb)")")
ln_bibw_iters=$(iters "$(python3 -c "print(4 * $rate_mb)")")
$B topo paths "${topo[@]}" --from 0 --to 7 | grep -v '^#' >"$out/paths.txt"

# /proc/stat: total ticks, idle+iowait, softirq.
cpu() { awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $5+$6, $8}' /proc/stat; }
# Waits for a second with >= 90% idle (at most 60 s); prints the last second's idle %.
quiet() {
  local a b idle=0
  for _ in $(seq 60); do
    a=($(cpu)); sleep 1; b=($(cpu))
    idle=$(( 100 * (b[1] - a[1]) / (b[0] - a[0] + 1) ))
    [ "$idle" -ge 90 ] && break
  done
  echo "$idle"
}
# tx bytes of every rail NIC of testbed $1's hosts $2.. as "host:if=bytes ...".
txs() {
  local n=$1; shift
  for h in "$@"; do
    ip -n "$n$h" -s -j link | python3 -c '
import json, sys
for l in json.load(sys.stdin):
    if l["ifname"] not in ("lo", "mgmt"):
        print("%s:%s=%d" % (sys.argv[1], l["ifname"], l["stats64"]["tx"]["bytes"]))' "$h"
  done | tr '\n' ' '
}
# measure NAME RUN TESTBED COMMAND...: runs COMMAND (output in $out/NAME.RUN.log) and appends to
# $out/cpu.txt: name run idle_before idle% softirq_s wall_s tx_before tx_after (testbed's hosts).
measure() {
  local name=$1 run=$2 tb=$3; shift 3
  local q c0 c1 t0 t1 x0 x1
  q=$(quiet)
  x0=$(txs "$tb" 0 1 2 3 4 5 6 7)
  c0=($(cpu)); t0=$(date +%s.%N)
  "$@" >"$out/$name.$run.log" 2>&1 || echo "$name run $run failed: $(tail -3 "$out/$name.$run.log" | tr '\n' ' ')" >&2
  c1=($(cpu)); t1=$(date +%s.%N)
  x1=$(txs "$tb" 0 1 2 3 4 5 6 7)
  python3 - "$name" "$run" "$q" "${c0[*]}" "${c1[*]}" "$t0" "$t1" "$x0" "$x1" >>"$out/cpu.txt" <<'PY'
import json, os, sys
name, run, q, c0, c1, t0, t1, x0, x1 = sys.argv[1:]
a = list(map(int, c0.split())); b = list(map(int, c1.split()))
hz = float(os.sysconf("SC_CLK_TCK"))
tot = b[0] - a[0]
kv = lambda s: dict((k, int(v)) for k, v in (w.split("=") for w in s.split()))
x0, x1 = kv(x0), kv(x1)
print(json.dumps({"name": name, "run": int(run), "idle_before": int(q),
                  "idle": 100.0 * (b[1] - a[1]) / tot if tot else 0.0,
                  "softirq_s": (b[2] - a[2]) / hz, "wall_s": float(t1) - float(t0),
                  "tx": {k: x1[k] - x0.get(k, 0) for k in x1}}))
PY
}
# iperf3 over the six corner paths at once; $1 = extra client option (--bidir or nothing).
iperf_paths() {
  local i=0 sp=() cp=() src dst
  while read -r _ _ _ _ src dst; do
    ip netns exec hb7 iperf3 -s -1 -B "$dst" -p $((5301 + i)) >/dev/null 2>&1 &
    sp+=($!); i=$((i + 1))
  done <"$out/paths.txt"
  sleep 1
  i=0
  while read -r _ _ _ _ src dst; do
    ip netns exec hb0 iperf3 -c "$dst" -B "$src" -p $((5301 + i)) -t "$SECS" -J ${1:-} >"$out/iperf.$i.json" &
    cp+=($!); i=$((i + 1))
  done <"$out/paths.txt"
  wait "${cp[@]}"
  sleep 0.5
  kill "${sp[@]}" 2>/dev/null
  wait "${sp[@]}" 2>/dev/null
  cat "$out"/iperf.[0-5].json
}
# One iperf3 stream over one link of testbed $1 from $2 to $3.
iperf_one() {
  ip netns exec "${1}1" iperf3 -s -1 -B "$3" -p 5311 >/dev/null 2>&1 &
  local s=$!
  sleep 1
  ip netns exec "${1}0" iperf3 -c "$3" -B "$2" -p 5311 -t "$SECS" -J
  sleep 0.5; kill $s 2>/dev/null; wait $s 2>/dev/null
}
mpi() {
  local cfg=$1; shift
  local c=(-np 2 --host hb0,hb7 --map-by node --bind-to none --mca plm_rsh_agent "$PWD/bench/netns-rsh"
    --mca oob_tcp_if_include "$(mgmt hb)")
  if [ "$cfg" = tcp ]; then
    c+=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include x0l0,x0l1,x1l0,x1l1,x2l0,x2l1)
  else
    c+=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm -x "FI_PROVIDER_PATH=$out"
      -x HX_TOPOLOGY=hxb:2x2x2 -x HX_LINKS_PER_DIM=2)
  fi
  timeout 180 mpirun "${c[@]}" "$out/osu" "$@"
}
run8() { local tb=$1; shift; $B run --net --name "$tb" -n 8 --timeout 300 -- "$B" "$@"; }
# The MPI kernels (bench/mpi_is.c, mpi_cg.c) through Open MPI over the hxcomm provider, one rank
# per host of testbed $1; on the hyper-crossbar the ranks are told its topology, on 1D the
# provider finds the six rails by itself (the management network is left out).
mpi8() {
  local tb=$1; shift
  local c=(-np 8 --host "${tb}0,${tb}1,${tb}2,${tb}3,${tb}4,${tb}5,${tb}6,${tb}7" --map-by node --bind-to none
    --mca plm_rsh_agent "$PWD/bench/netns-rsh" --mca oob_tcp_if_include "$(mgmt "$tb")"
    --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include hxcomm -x "FI_PROVIDER_PATH=$out")
  [ "$tb" = hk ] && c+=(-x HX_TOPOLOGY=hxb:2x2x2 -x HX_LINKS_PER_DIM=2)
  timeout 300 mpirun "${c[@]}" "$@"
}
corner() { $B run --net --name hb --net-hosts 0,7 -n 2 --timeout 300 -- "$B" "$@"; }
# Line neighbours (hosts 0 and 1 differ in dimension 2) on testbed $1.
pair() { local tb=$1; shift; $B run --net --name "$tb" --net-hosts 0,1 -n 2 --timeout 300 -- "$B" "$@"; }

for r in $(seq 1 "$RUNS"); do
  echo "run $r of $RUNS: $(date -u +%H:%M:%S)" >&2
  measure hx_bw "$r" hb corner bench bw --sizes 4M:4M --iterations "$bw_iters" --warmup 1 --json
  measure hx_bibw "$r" hb corner bench bibw --sizes 4M:4M --iterations "$bibw_iters" --warmup 1 --json
  measure ip_bw "$r" hb iperf_paths
  measure ip_bibw "$r" hb iperf_paths --bidir
  measure mpi_tcp_bw "$r" hb mpi tcp "bw:4194304:$bw_iters:1:64"
  measure mpi_tcp_bibw "$r" hb mpi tcp "bibw:4194304:$bibw_iters:1:64"
  measure mpi_hx_bw "$r" hb mpi hx "bw:4194304:$bw_iters:1:64"
  measure mpi_hx_bibw "$r" hb mpi hx "bibw:4194304:$bibw_iters:1:64"
  measure ln_bw "$r" hb pair hb bench bw --sizes 4M:4M --iterations "$ln_bw_iters" --warmup 1 --json
  measure ln_bibw "$r" hb pair hb bench bibw --sizes 4M:4M --iterations "$ln_bibw_iters" --warmup 1 --json
  measure lnd_bw "$r" hy pair hy bench bw --sizes 4M:4M --iterations "$bw_iters" --warmup 1 --json
  measure lnd_bibw "$r" hy pair hy bench bibw --sizes 4M:4M --iterations "$bibw_iters" --warmup 1 --json
  measure cap_hk "$r" hk iperf_one hk 10.10.2.1 10.10.2.2
  measure cap_hd "$r" hd iperf_one hd 10.10.0.1 10.10.0.2
  for l in hk hd; do
    measure "a2a_$l" "$r" $l run8 $l bench alltoall --size "$A2A_SIZE" --rounds 5 --throughput
    measure "is_$l" "$r" $l run8 $l bench is --class "$IS_CLASS" --json
    measure "cg_$l" "$r" $l run8 $l bench cg --nx "$CG_N" --ny "$CG_N" --iterations "$CG_ITERS" --json
    measure "mpi_is_$l" "$r" $l mpi8 $l "$out/mpi_is" --class "$IS_CLASS" --json
    measure "mpi_cg_$l" "$r" $l mpi8 $l "$out/mpi_cg" --nx "$CG_N" --ny "$CG_N" --iterations "$CG_ITERS" --json
  done
  measure a2a_hz "$r" hz run8 hz bench alltoall --size "$A2A_SIZE" --rounds 5 --throughput
  measure is_hz "$r" hz run8 hz bench is --class "$IS_CLASS" --json
  measure cg_hz "$r" hz run8 hz bench cg --nx "$CG_N" --ny "$CG_N" --iterations "$CG_ITERS" --json
done
end_date=$(date -u '+%H:%M UTC')

python3 - "$out" "$RUNS" "$RATE" "$RATE8" "$rate_mb" "$(mbps "$RATE8")" "$A2A_SIZE" "$IS_CLASS" "$CG_N" \
  "$start_date" "$end_date" "$commit" "$dirty" "$CG_ITERS" <<'PY'
import glob, json, re, statistics, sys
(out, runs, rate, rate8, rate_mb, rate8_mb, a2a_size, is_class, cg_n,
 start, end, commit, dirty, cg_iters) = sys.argv[1:]
runs, rate_mb, rate8_mb = int(runs), float(rate_mb), float(rate8_mb)
cpu = {}
for line in open(f"{out}/cpu.txt"):
    d = json.loads(line)
    cpu[(d["name"], d["run"])] = d
def log(name, r):
    try:
        return open(f"{out}/{name}.{r}.log").read()
    except OSError:
        return ""
def size(s):
    m = re.fullmatch(r"(\d+)([kM]?)", s)
    return int(m[1]) * {"": 1, "k": 1024, "M": 1 << 20}[m[2]]
def hx(name, r):
    for l in log(name, r).splitlines():
        if l.startswith("{"):
            return json.loads(l)["mb_per_s"]
def iperf(name, r):
    t = log(name, r)
    dec, tot, n, pos = json.JSONDecoder(), 0.0, 0, 0
    while True:
        i = t.find("{", pos)
        if i < 0:
            break
        v, pos = dec.raw_decode(t, i)
        e = v.get("end", {})
        if "sum_received" not in e:
            return None
        tot += e["sum_received"]["bits_per_second"] / 8e6
        tot += e.get("sum_received_bidir_reverse", {}).get("bits_per_second", 0) / 8e6
        n += 1
    return tot if n else None
def osu(name, r):
    m = re.search(r"MPI_OSU bench=\w+ .* mb_per_s=([\d.]+)", log(name, r))
    return float(m[1]) if m else None
def a2a(name, r):
    """(slowest rank's round time, median of rounds 2.., idle % median over ranks)."""
    rounds, idles = [], []
    for l in log(name, r).splitlines():
        m = re.search(r"rounds_s ([\d.,]+);.* machine idle ([\d.]+)%", l)
        if m:
            rounds.append([float(x) for x in m[1].split(",")])
            idles.append(float(m[2]))
    if len(rounds) != 8:
        return None
    per = [max(rk[i] for rk in rounds) for i in range(len(rounds[0]))]
    return statistics.median(per[1:]), statistics.median(idles)
def kernel(name, r, key="seconds_per_iteration"):
    for l in log(name, r).splitlines():
        if l.startswith("{"):
            v = json.loads(l)
            return v[key] if v.get("verified") else None
def med(f, name, *a):
    v = [x for x in (f(name, r, *a) for r in range(1, runs + 1)) if x is not None]
    return (statistics.median(v) if v else None), v
def c(name, key):
    v = [cpu[(name, r)][key] for r in range(1, runs + 1) if (name, r) in cpu]
    return statistics.median(v) if v else None
RELAYS = tuple(str(h) + ":" for h in range(1, 7))
def fwd(name, r):
    d = cpu.get((name, r))
    return sum(b for k, b in d["tx"].items() if k.startswith(RELAYS)) if d else None
def sirq_per_gb(name, r):
    d, f = cpu.get((name, r)), fwd(name, r)
    return d["softirq_s"] / (f / 1e9) if d and f else None
def nics0(name, r):
    d = cpu.get((name, r))
    return sum(1 for k, b in d["tx"].items() if k.startswith("0:") and b > 1e6) if d else None
f1 = lambda x, p=1: "-" if x is None else f"{x:.{p}f}"
pct = lambda a, b: None if a is None or not b else 100.0 * a / b
def bar(x, lim, ge=True):
    if x is None:
        return "no data"
    ok = x >= lim if ge else x <= lim
    return "ok" if ok else f"MISS by {abs(lim - x):.1f} pts"

raw = {}
theo = 6 * rate_mb
print(f"### Opposite corners (hosts 0 and 7) of hxb:2x2x2 x 2 at {rate} (medians of {runs} runs)\n")
print(f"Theoretical: 6 x {rate_mb:.1f} = {theo:.1f} MB/s one way, {2 * theo:.1f} both ways "
      f"(nominal link rate; seed 000's figures are against the same kind of number).\n")
print("| measurement | MB/s | iperf3, same 6 paths | / iperf3 | bar | % of theoretical | "
      "host 0 NICs used | idle % | softirq s per GB forwarded |")
print("|---|---:|---:|---:|---|---:|---:|---:|---:|")
ipb, _ = med(iperf, "ip_bw")
ipbi, _ = med(iperf, "ip_bibw")
rows = [("hxcomm one way (bench bw 4 MiB)", hx, "hx_bw", ipb, 99.0, 1),
        ("hxcomm both ways (bench bibw 4 MiB)", hx, "hx_bibw", ipbi, 97.0, 2),
        ("Open MPI btl/tcp one way (mpi_osu bw)", osu, "mpi_tcp_bw", ipb, None, 1),
        ("Open MPI btl/tcp both ways (mpi_osu bibw)", osu, "mpi_tcp_bibw", ipbi, None, 2),
        ("Open MPI + hxcomm provider one way", osu, "mpi_hx_bw", ipb, None, 1),
        ("Open MPI + hxcomm provider both ways", osu, "mpi_hx_bibw", ipbi, None, 2),
        ("iperf3, 6 streams one way", iperf, "ip_bw", ipb, None, 1),
        ("iperf3, 6 streams --bidir", iperf, "ip_bibw", ipbi, None, 2)]
for label, fn, name, ref, lim, k in rows:
    v, raw[label] = med(fn, name)
    p = pct(v, ref)
    b = "-" if lim is None else f">= {lim:.0f}%: {bar(p, lim)}"
    n, _ = med(nics0, name)
    s, raw[f"{label}: softirq s/GB forwarded"] = med(sirq_per_gb, name)
    fw, _ = med(fwd, name)
    print(f"| {label} | {f1(v)} | {f1(ref)} | {f1(p)}% | {b} | {f1(pct(v, k * theo))}% | "
          f"{f1(n, 0)} of 6 | {f1(c(name, 'idle'))} | {f1(s, 3)} |")
print("\nsoftirq: the whole machine's softirq time over the command (start-up included) divided by "
      "the bytes the six relay hosts transmitted on their NICs (the forwarded data and ACKs); "
      "it includes the two end hosts' own TCP receive work, so iperf3's row is the baseline.\n")

cap_k, raw["iperf3 one link, 2x2x2"] = med(iperf, "cap_hk")
cap_d, raw["iperf3 one link, 1D"] = med(iperf, "cap_hd")
S = size(a2a_size)
print(f"### 8 hosts, one rank each, at {rate8}: 2x2x2 x 2 against 1D (6 NICs per host on 6 shared switches) (medians of {runs} runs)\n")
print(f"Capacity C per link and direction: iperf3, one stream over one link of the same testbed: "
      f"{f1(cap_k)} MB/s (2x2x2), {f1(cap_d)} MB/s (1D); nominal {rate8_mb:.2f}.\n")
print("| measurement | 2x2x2 | 1D | 2x2x2 / 1D | model 2x2x2 | model 1D | 2x2x2 % of model | 1D % of model | bar | idle % 2x2x2 / 1D |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
ak, raw["all-to-all round s, 2x2x2"] = med(lambda n, r: (a2a(n, r) or (None,))[0], "a2a_hk")
ad, raw["all-to-all round s, 1D"] = med(lambda n, r: (a2a(n, r) or (None,))[0], "a2a_hd")
ik, _ = med(lambda n, r: (a2a(n, r) or (None, None))[1], "a2a_hk")
idd, _ = med(lambda n, r: (a2a(n, r) or (None, None))[1], "a2a_hd")
mk = 2 * S / (cap_k * 1e6) if cap_k else None
md = 7 * S / (6 * cap_d * 1e6) if cap_d else None
pk, pd = pct(mk, ak), pct(md, ad)
print(f"| all-to-all, {a2a_size} per peer, s per round | {f1(ak, 3)} | {f1(ad, 3)} | "
      f"{f1(ak / ad if ak and ad else None, 2)}x | {f1(mk, 3)} (2S/C) | {f1(md, 3)} (7S/6C) | "
      f"{f1(pk)}% | {f1(pd)}% | within 5% of model: 2x2x2 {bar(pk, 95.0)}, 1D {bar(pd, 95.0)} | "
      f"{f1(ik)} / {f1(idd)} (timed rounds) |")
rk = 7 * S / ak / 1e6 if ak else None
rd = 7 * S / ad / 1e6 if ad else None
print(f"| all-to-all, MB/s sent per host | {f1(rk)} | {f1(rd)} | {f1(rk / rd if rk and rd else None, 2)}x | "
      f"{f1(7 * S / mk / 1e6 if mk else None)} | {f1(7 * S / md / 1e6 if md else None)} | | | | |")
keys = {"S": 1 << 16, "W": 1 << 20, "A": 1 << 23, "B": 1 << 25, "C": 1 << 27}[is_class]
for label, name, extra in [(f"IS class {is_class}, s per iteration", "is", True),
                           (f"CG {cg_n}x{cg_n}, {cg_iters} iterations, s per iteration", "cg", False),
                           (f"MPI IS class {is_class} (Open MPI + hxcomm provider), s per iteration", "mpi_is", True),
                           (f"MPI CG {cg_n}x{cg_n}, {cg_iters} iterations (Open MPI + hxcomm provider), s per iteration", "mpi_cg", False)]:
    k, raw[f"{label}, 2x2x2"] = med(kernel, f"{name}_hk")
    d, raw[f"{label}, 1D"] = med(kernel, f"{name}_hd")
    ck, _ = med(kernel, f"{name}_hk", "comm_s")
    cd, _ = med(kernel, f"{name}_hd", "comm_s")
    ratio = k / d if k and d else None
    if extra and cap_k and cap_d and d:
        # Keys (4 bytes) to the 7 other ranks: S = keys/64 x 4 bytes per peer, once per iteration.
        sp = keys / 64 * 4
        pred = d + 2 * sp / (cap_k * 1e6) - 7 * sp / (6 * cap_d * 1e6)
        model = f"1D + key exchange model: {pred:.3f} s ({100 * k / pred:.1f}% of it)" if k else "-"
    else:
        model = "-"
    b = f"within 5% of 1D: {bar(100 * (ratio - 1), 5.0, ge=False) if ratio else 'no data'}"
    print(f"| {label} (comm s: {f1(ck, 3)} / {f1(cd, 3)}) | {f1(k, 3)} | {f1(d, 3)} | {f1(ratio, 3)}x | "
          f"{model} | | | | {b} | {f1(c(name + '_hk', 'idle'))} / {f1(c(name + '_hd', 'idle'))} (whole job) |")
print(f"\n### Detours: line neighbours also through the other dimensions (medians of {runs} runs)\n")
print(f"Hosts 0 and 1 differ in dimension 2: without detours their 2 direct links "
      f"({2 * rate_mb:.1f} MB/s nominal one way at {rate}), with detours also 4 paths of 3 hops "
      f"through dimensions 0 and 1 ({6 * rate_mb:.1f}). Eight hosts at {rate8}: hxb:2x2x2 x 2 "
      f"without detours (testbed hk) and with (testbed hz).\n")
print("| measurement | without detours | with detours | with / without | idle % without / with |")
print("|---|---:|---:|---:|---|")
for label, fn, a, b, p in [
        (f"line neighbours one way, MB/s (bench bw 4 MiB, {rate})", hx, "ln_bw", "lnd_bw", 1),
        (f"line neighbours both ways, MB/s (bench bibw 4 MiB, {rate})", hx, "ln_bibw", "lnd_bibw", 1),
        (f"8-host all-to-all, {a2a_size} per peer, s per round ({rate8})",
         lambda n, r: (a2a(n, r) or (None,))[0], "a2a_hk", "a2a_hz", 3),
        (f"IS class {is_class}, s per iteration ({rate8})", kernel, "is_hk", "is_hz", 3),
        (f"CG {cg_n}x{cg_n}, {cg_iters} iterations, s per iteration ({rate8})", kernel, "cg_hk", "cg_hz", 3)]:
    x, raw[f"detours: {label}, without"] = med(fn, a)
    y, raw[f"detours: {label}, with"] = med(fn, b)
    print(f"| {label} | {f1(x, p)} | {f1(y, p)} | {f1(y / x if x and y else None, 3)}x | "
          f"{f1(c(a, 'idle'))} / {f1(c(b, 'idle'))} |")
print(f"\nDate {start} to {end}; commit {commit}" + (f" ({dirty} files of others modified in the working tree, not part of this run's code: the binaries are copies of target/release built at the start)" if int(dirty) else "") + ".")
print(f"\nRaw per-run values (run order):\n")
for k, v in raw.items():
    print(f"- {k}: " + ", ".join(f"{x:.3f}" if x < 10 else f"{x:.1f}" for x in v))
print("- idle % found before each measurement (below 90 only): " + (", ".join(
    f"{d['name']}.{d['run']}={d['idle_before']}" for d in cpu.values() if d["idle_before"] < 90) or "none"))
print("- idle % over each measurement: " + ", ".join(f"{d['name']}.{d['run']}={d['idle']:.0f}" for d in cpu.values()))
for name in ("mpi_tcp_bw", "mpi_hx_bw", "hx_bw", "ip_bw"):
    d = cpu.get((name, 1))
    if d:
        print(f"- {name} run 1, host 0 NIC tx MB: " + ", ".join(
            f"{k[2:]} {b / 1e6:.0f}" for k, b in sorted(d["tx"].items()) if k.startswith("0:")))
print(f"\nraw output in {out}")
PY
