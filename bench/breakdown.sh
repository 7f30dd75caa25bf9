#!/usr/bin/env bash
# Latency breakdown (issue 10): RUNS runs (default 5) of
#   hxcomm run -n 2 [RUN-ARGS...] -- hxcomm bench breakdown --json
# and one markdown table per mode with the median over the runs of each part's p50/p90/p99, the
# sums, the measured one way, the untraced one way and the floors, beside seed 003's DP-II
# breakdown (0.44 + 0.7 + 16.82 + 0.36 us, 1 byte over Gigabit Ethernet). With the receiver
# sleeping, one table for the messages it slept for and one for those that found it awake (each
# against its own messages' one way), then how they make up the measured one way.
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

def parts_table(bs):
    """The parts of breakdowns bs (one per run, same chain): medians over the runs; the sum."""
    print("| part | what | seed term | p50 us | p90 us | p99 us |")
    print("|---|---|---|---:|---:|---:|")
    total = 0.0
    for i, p in enumerate(bs[0]["parts"]):
        col = lambda k: med([b["parts"][i][k] for b in bs if len(b["parts"]) > i])
        total += col('p50_us')
        print(f"| {p['part']} | {p['what']} | {p['seed']} | {col('p50_us'):.3f} | {col('p90_us'):.3f} | {col('p99_us'):.3f} |")
    print(f"| **sum** | of the p50 column | | **{total:.3f}** | | |")
    return total

def seed_table(named):
    print()
    print("| | T_startup | T_send | T_net | T_delivery | sum |")
    print("|---|---:|---:|---:|---:|---:|")
    print("| seed 003, DP-II, 1 B, Gigabit Ethernet | 0.44 | 0.70 | 16.82 | 0.36 | 18.32 |")
    for name, bs in named:
        terms = {t: med([b["seed_terms_p50_us"][t] for b in bs]) for t in seed}
        print(f"| hxcomm, {name} (p50 sums) | " + " | ".join(f"{terms[t]:.2f}" for t in seed) + f" | {sum(terms.values()):.2f} |")

def tail_rows(rs, mode):
    m = lambda k: med([r[k] for r in rs])
    print(f"| untraced | one way, tracing off | | {m('untraced_oneway_us'):.3f} | | |")
    if mode == "block":
        print(f"| wakeup | untraced one way blocking minus spinning | | {med([r['wakeup_us']['untraced'] for r in rs if r.get('wakeup_us')]):.3f} | | |")
    for j, f in enumerate(rs[0]["floors"]):
        v = med([r["floors"][j]["p50_us"] for r in rs if len(r["floors"]) > j])
        print(f"| floor | {f['name']} (hxcomm untraced / floor = {m('untraced_oneway_us') / v:.2f}x) | | {v:.3f} | | |")

for mode in ["spin", "block"]:
    rs = [r for r in rows if r["mode"] == mode]
    if not rs:
        continue
    r0 = rs[0]
    m = lambda k: med([r[k] for r in rs])
    where = f"{r0['bytes']} B over {r0['transport']} ({r0['rails']})"
    if "receivers" not in r0:
        # Spinning (and blocking runs of a tool from before the split): one table.
        print(f"\n#### {where}, receiver "
              f"{'spinning' if mode == 'spin' else 'sleeping on the fd'}: medians of {len(rs)} runs\n")
        total = parts_table(rs)
        print(f"| **measured** | one way, half the median round trip of the traced runs; sum / measured = **{total / m('measured_oneway_us'):.3f}** (per run, sum of p50s / measured: {[r['ratio'] for r in rs]}; sum of means / mean: {[r['ratio_mean'] for r in rs]}) | | **{m('measured_oneway_us'):.3f}** | | |")
        tail_rows(rs, mode)
        seed_table([("this table", rs)])
        print(f"\nPer run: measured one way {[r['measured_oneway_us'] for r in rs]}, sum of p50s {[r['sum_p50_us'] for r in rs]}, untraced {[r['untraced_oneway_us'] for r in rs]}")
        continue
    # Blocking: the messages the receiver slept for and those that found it awake, apart.
    named = []
    for i, name in enumerate(["slept", "awake"]):
        pops = [r["receivers"][i] for r in rs]
        ok = [p for p in pops if p["summarised"]]
        what = "the messages it slept for" if name == "slept" else "the messages that found it awake (wakeup 0)"
        print(f"\n#### {where}, receiver sleeping on the fd, {what}: medians of {len(ok)} runs\n")
        print(f"Messages per run: {[p['messages'] for p in pops]} of {[r['messages'] for r in rs]}"
              + (f"; {len(pops) - len(ok)} runs with fewer than 20: not summarised" if len(ok) < len(pops) else "")
              + "\n")
        if not ok:
            continue
        total = parts_table(ok)
        tm = med([p["total_p50_us"] for p in ok])
        print(f"| **total** | one way of these messages (isend to done, per message); sum / total = **{total / tm:.3f}** (per run, sum of p50s / total: {[p['ratio'] for p in ok]}; sum of means / mean: {[p['ratio_mean'] for p in ok]}) | | **{tm:.3f}** | | |")
        named.append((f"{name} messages", ok))
    print(f"\n#### {where}, receiver sleeping on the fd, all messages: medians of {len(rs)} runs\n")
    print("| | what | | us | | |")
    print("|---|---|---|---:|---:|---:|")
    mix = lambda k: med([r["mix"][k] for r in rs])
    print(f"| **measured** | one way, half the median round trip of the traced runs (mean: {m('measured_mean_us'):.3f}) | | **{m('measured_oneway_us'):.3f}** | | |")
    print(f"| mix | slept fraction x slept total + awake fraction x awake total (medians); slept fractions {[r['mix']['slept_fraction'] for r in rs]}; mix / measured per run {[r['mix']['ratio'] for r in rs]} | | {mix('p50_us'):.3f} | | |")
    print(f"| mix of means | the same with the totals' means; / measured mean per run {[r['mix']['ratio_mean'] for r in rs]} | | {mix('mean_us'):.3f} | | |")
    tail_rows(rs, mode)
    seed_table(named)
    tot = lambda i: [r["receivers"][i].get("total_p50_us") for r in rs]
    print(f"\nPer run: measured one way {[r['measured_oneway_us'] for r in rs]}, slept total {tot(0)}, awake total {tot(1)}, mix {[r['mix']['p50_us'] for r in rs]}, untraced {[r['untraced_oneway_us'] for r in rs]}")
EOF
