#!/usr/bin/env bash
# Latency breakdown (issue 10): RUNS runs (default 5) of
#   hxcomm run -n 2 [RUN-ARGS...] -- hxcomm bench breakdown --json
# and one markdown table per mode with the median over the runs of each part's p50/p90/p99, the
# sums, the measured one way, the untraced one way and the floors, beside seed 003's DP-II
# breakdown (0.44 + 0.7 + 16.82 + 0.36 us, 1 byte over Gigabit Ethernet).
# Run as: flock /tmp/hxcomm-bench.lock bash bench/breakdown.sh 5 [RUN-ARGS...]
#   shared memory:   bash bench/breakdown.sh 5
#   loopback TCP:    bash bench/breakdown.sh 5 --env HX_TRANSPORTS=tcp
#   a testbed rail:  hxcomm net up --hosts 2 --rails 1 --name bk; bash bench/breakdown.sh 5 --net --name bk
# Raw JSON lines are kept in $OUT (default a fresh temp dir); SUMMARY_ONLY=1 OUT=DIR re-prints them.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
shift || true
B=$PWD/target/release/hxcomm
[ -x "$B" ] || cargo build --release
out=${OUT:-$(mktemp -d /tmp/breakdown.XXXXXX)}
mkdir -p "$out"
echo "breakdown: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD), $runs runs of: hxcomm run -n 2 $* -- hxcomm bench breakdown --json; raw output in $out" >&2
todo=$runs
[ -n "${SUMMARY_ONLY:-}" ] && todo=0   # SUMMARY_ONLY=1 OUT=dir: only summarize an earlier run
for i in $(seq 1 "$todo"); do
  "$B" run -n 2 "$@" -- "$B" bench breakdown --json > "$out/run$i.json"
done
python3 - "$out" "$runs" <<'EOF'
import glob, json, statistics, sys
d, runs = sys.argv[1], int(sys.argv[2])
rows = [json.loads(l) for f in sorted(glob.glob(f"{d}/run*.json")) for l in open(f) if l.startswith("{")]
med = lambda xs: statistics.median(xs) if xs else float("nan")
seed = {"T_startup": 0.44, "T_send": 0.7, "T_net": 16.82, "T_delivery": 0.36}
for mode in ["spin", "block"]:
    rs = [r for r in rows if r["mode"] == mode]
    if not rs:
        continue
    r0 = rs[0]
    print(f"\n#### {r0['bytes']} B over {r0['transport']} ({r0['rails']}), receiver "
          f"{'spinning' if mode == 'spin' else 'sleeping on the fd'}: medians of {len(rs)} runs\n")
    print("| part | what | seed term | p50 us | p90 us | p99 us |")
    print("|---|---|---|---:|---:|---:|")
    total = 0.0
    for i, p in enumerate(r0["parts"]):
        col = lambda k: med([r["parts"][i][k] for r in rs if len(r["parts"]) > i])
        total += col('p50_us')
        print(f"| {p['part']} | {p['what']} | {p['seed']} | {col('p50_us'):.3f} | {col('p90_us'):.3f} | {col('p99_us'):.3f} |")
    m = lambda k: med([r[k] for r in rs])
    print(f"| **sum** | of the p50 column | | **{total:.3f}** | | |")
    print(f"| **measured** | one way, half the median round trip of the traced runs; sum / measured = **{total / m('measured_oneway_us'):.3f}** (per run, sum of p50s / measured: {[r['ratio'] for r in rs]}; sum of means / mean: {[r['ratio_mean'] for r in rs]}) | | **{m('measured_oneway_us'):.3f}** | | |")
    print(f"| untraced | one way, tracing off | | {m('untraced_oneway_us'):.3f} | | |")
    if mode == "block":
        print(f"| wakeup | untraced one way blocking minus spinning | | {med([r['wakeup_us']['untraced'] for r in rs if r.get('wakeup_us')]):.3f} | | |")
    for j, f in enumerate(r0["floors"]):
        v = med([r["floors"][j]["p50_us"] for r in rs if len(r["floors"]) > j])
        print(f"| floor | {f['name']} (hxcomm untraced / floor = {m('untraced_oneway_us') / v:.2f}x) | | {v:.3f} | | |")
    terms = {t: med([r["seed_terms_p50_us"][t] for r in rs]) for t in seed}
    print()
    print("| | T_startup | T_send | T_net | T_delivery | sum |")
    print("|---|---:|---:|---:|---:|---:|")
    print("| seed 003, DP-II, 1 B, Gigabit Ethernet | 0.44 | 0.70 | 16.82 | 0.36 | 18.32 |")
    print(f"| hxcomm, this table (p50 sums) | " + " | ".join(f"{terms[t]:.2f}" for t in seed) + f" | {sum(terms.values()):.2f} |")
    print(f"\nPer run: measured one way {[r['measured_oneway_us'] for r in rs]}, sum of p50s {[r['sum_p50_us'] for r in rs]}, untraced {[r['untraced_oneway_us'] for r in rs]}")
EOF
