# Sourced (from the repository root) by the bench scripts that probe where the VM put its two
# CPUs: a cache line's one-way time between CPUs 0 and 1, ~50 or, for minutes at a time,
# ~250 ns here (BENCHMARKS.md, thirty-fifth session).
#   cacheline_build PATH   compiles bench/cacheline_pingpong.c to PATH
#   cacheline_ns [N]       one probe of N round trips (default 100000): the median one-way ns
cacheline_build() {
  cc -O2 -o "$1" bench/cacheline_pingpong.c
  CACHELINE_PROBE=$1
}
cacheline_ns() {
  "$CACHELINE_PROBE" "${1:-100000}" 1 1 | sed -n 's/.*median_oneway_ns=\([0-9.]*\).*/\1/p'
}
