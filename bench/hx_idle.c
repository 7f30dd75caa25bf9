// A medium-message ping-pong after the rails carried bulk data and then sat idle, as an MPI
// code's exchange phases between compute phases meet them (BENCHMARKS.md, "After idle").
// Rank 0 first sends BULK_MB MiB to rank 1 (4 MiB messages); then, CYCLES times, both ranks
// sleep IDLE_MS, ping-pong MESSAGES messages of SIZE bytes (printing the median one-way time of
// each block of BLOCK messages), sleep IDLE_MS again and time another BULK_MB MiB one way.
//
//   hxcomm run -n 2 --net --name T -- ./hx_idle SIZE MESSAGES BLOCK IDLE_MS CYCLES BULK_MB
#include "hx_bench_util.h"
#include <string.h>

// Rank 0 sends `count` messages of `len` bytes to rank 1 (tag 2).
static void bulk_one_way(hx_endpoint *ep, hx_target peer, uint32_t me, char *buf, size_t len, int count) {
  hx_status st;
  for (int i = 0; i < count; i++) {
    if (me == 0)
      CHECK(hx_write(ep, peer, 2, buf, len));
    else
      CHECK(hx_read(ep, 0, 2, buf, len, &st));
  }
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: hx_idle SIZE MESSAGES BLOCK IDLE_MS CYCLES BULK_MB (under hxcomm run -n 2)\n");
    return 2;
  }
  size_t size = (size_t)atol(argv[1]);
  int messages = atoi(argv[2]), block = atoi(argv[3]), idle_ms = atoi(argv[4]);
  int cycles = atoi(argv[5]), bulk_mb = atoi(argv[6]);
  hx_context *ctx;
  hx_endpoint *ep;
  hx_target peer;
  hx_status st;
  uint32_t me;
  CHECK(hx_init(&ctx));
  CHECK(hx_rank(ctx, &me));
  CHECK(hx_open(ctx, 0, &ep));
  CHECK(hx_target_init(ep, 1 - me, 0, &peer));
  size_t bulk = 4u << 20;
  char *big = calloc(1, bulk);
  char *buf = calloc(1, size);
  double *t = malloc(sizeof(double) * (size_t)block);
  CHECK(hx_barrier(ctx));
  bulk_one_way(ep, peer, me, big, bulk, bulk_mb / 4);
  CHECK(hx_barrier(ctx));
  for (int c = 0; c < cycles; c++) {
    struct timespec idle = {idle_ms / 1000, (long)(idle_ms % 1000) * 1000000L};
    nanosleep(&idle, NULL);
    CHECK(hx_barrier(ctx));
    if (me == 0) printf("after %d ms idle:", idle_ms);
    for (int i = 0; i + block <= messages; i += block) {
      for (int j = 0; j < block; j++) {
        double s = now_us();
        if (me == 0) {
          CHECK(hx_write(ep, peer, 1, buf, size));
          CHECK(hx_read(ep, 1, 1, buf, size, &st));
        } else {
          CHECK(hx_read(ep, 0, 1, buf, size, &st));
          CHECK(hx_write(ep, peer, 1, buf, size));
        }
        t[j] = (now_us() - s) / 2;
      }
      qsort(t, (size_t)block, sizeof(double), by_value);
      if (me == 0) printf(" %.1f", t[block / 2]);
    }
    nanosleep(&idle, NULL);
    CHECK(hx_barrier(ctx));
    double s = now_us();
    bulk_one_way(ep, peer, me, big, bulk, bulk_mb / 4);
    CHECK(hx_barrier(ctx));
    if (me == 0) printf(" | then %d MiB: %.0f MB/s\n", bulk_mb, bulk_mb * 1048576.0 / (now_us() - s));
    fflush(stdout);
  }
  CHECK(hx_close(ep));
  CHECK(hx_finalize(ctx));
  return 0;
}
