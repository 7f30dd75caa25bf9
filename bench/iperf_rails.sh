# Sourced by bench scripts (bench/iperf_writes.sh, bench/bw_mode_watch.sh): iperf3 one way over
# the first RAILS rails of a 2-host testbed at once, one server in host 1 and one client in host
# 0 per rail, bound to rail k's addresses, `-C reno` as the rails run.
#
#   iperf_rails NAME RAILS SECS LEN PLACEMENT DIR PORT0
#
# LEN: iperf3's -l ("" for its default, 128 KiB; it refuses more than 1 MiB). PLACEMENT: free
# (the scheduler's), crossing (every client on CPU 0, every server on CPU 1: each byte goes from
# one CPU to the other) or paired (rail k's client and server both on CPU k mod 2: none does).
# DIR: a scratch directory; PORT0: rail k's server listens on PORT0 + k. Prints the sum of the
# received rates (MB/s), or "failed". The servers' pids are in IPERF_SERVERS while it runs, for
# the caller's exit trap.
IPERF_SERVERS=()
iperf_rails() {
  local name=$1 rails=$2 secs=$3 len=$4 placement=$5 dir=$6 port0=$7
  local clients=() lenarg=() cpu_c=() cpu_s=() k
  [ -n "$len" ] && lenarg=(-l "$len")
  IPERF_SERVERS=()
  for k in $(seq 0 $((rails - 1))); do
    case $placement in
      free) cpu_c=() cpu_s=() ;;
      crossing) cpu_c=(taskset -c 0) cpu_s=(taskset -c 1) ;;
      paired) cpu_c=(taskset -c $((k % 2))) cpu_s=(taskset -c $((k % 2))) ;;
      *) echo "iperf_rails: placement $placement: free, crossing or paired" >&2; return 2 ;;
    esac
    ip netns exec "${name}1" "${cpu_s[@]}" iperf3 -s -1 -p $((port0 + k)) -B 10.10.$k.2 \
      >/dev/null 2>&1 &
    IPERF_SERVERS+=($!)
  done
  sleep 0.3
  for k in $(seq 0 $((rails - 1))); do
    case $placement in
      crossing) cpu_c=(taskset -c 0) ;;
      paired) cpu_c=(taskset -c $((k % 2))) ;;
      *) cpu_c=() ;;
    esac
    rm -f "$dir/iperf.$k.json"
    ip netns exec "${name}0" "${cpu_c[@]}" iperf3 -c 10.10.$k.2 -p $((port0 + k)) -B 10.10.$k.1 \
      -t "$secs" "${lenarg[@]}" -C reno -J >"$dir/iperf.$k.json" 2>/dev/null &
    clients+=($!)
  done
  wait "${clients[@]}" || true
  # A client that failed (a write size iperf3 refuses) leaves its one-shot server waiting.
  sleep 0.2
  for k in "${IPERF_SERVERS[@]}"; do kill "$k" 2>/dev/null || true; done
  wait "${IPERF_SERVERS[@]}" 2>/dev/null || true
  IPERF_SERVERS=()
  python3 - "$dir" "$rails" <<'PY'
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
try:
    print(round(sum(json.load(open(f"{d}/iperf.{k}.json"))["end"]["sum_received"]["bits_per_second"]
                    for k in range(n)) / 8e6))
except (ValueError, KeyError, OSError):
    print("failed")
PY
}
