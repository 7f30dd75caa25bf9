// Helpers shared by the small C benchmarks over the installed header (bench/hx_*.c).
#ifndef HX_BENCH_UTIL_H
#define HX_BENCH_UTIL_H
#include <hxcomm.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

// qsort comparator for doubles (medians of blocks).
static inline int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define CHECK(call)                                                                   \
  do {                                                                                \
    int rc_ = (call);                                                                 \
    if (rc_) {                                                                        \
      fprintf(stderr, "%s: %s (%s)\n", #call, hx_strerror(rc_), hx_last_error());    \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

#endif
