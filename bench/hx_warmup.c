// hxcomm ping-pong through the installed header, with the median one-way time of each block of
// messages: how a job's first messages of a size compare with its later ones (BENCHMARKS.md,
// "Rail sockets on BBR until they carry bulk data").
//
//   hxcomm run -n 2 --net --name T --policy rr -- ./hx_warmup SIZE MESSAGES BLOCK
#include "hx_bench_util.h"
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: hx_warmup SIZE MESSAGES BLOCK (under hxcomm run -n 2)\n");
    return 2;
  }
  size_t size = (size_t)atol(argv[1]);
  int messages = atoi(argv[2]), block = atoi(argv[3]);
  hx_context *ctx;
  hx_endpoint *ep;
  hx_target peer;
  hx_status st;
  uint32_t me;
  CHECK(hx_init(&ctx));
  CHECK(hx_rank(ctx, &me));
  CHECK(hx_open(ctx, 0, &ep));
  CHECK(hx_target_init(ep, 1 - me, 0, &peer));
  char *buf = calloc(1, size);
  double *t = malloc(sizeof(double) * (size_t)block);
  CHECK(hx_barrier(ctx));
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
    if (me == 0) printf("%d:%.1f ", i + block, t[block / 2]);
  }
  if (me == 0) printf("\n");
  CHECK(hx_close(ep));
  CHECK(hx_finalize(ctx));
  return 0;
}
