/* A peer that exits without hx_finalize (returns from main, or _exit) is noticed by a rank
 * blocked in hx_read on it: the read fails, naming the peer, instead of waiting for ever.
 * Over shared memory this was not so (issue 11); over TCP it was. Two ranks. */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

int main(void) {
    hx_context *ctx;
    hx_endpoint *ep;
    hx_target peer;
    uint32_t me, size;
    char buf[16];

    CHECK(hx_init(&ctx));
    CHECK(hx_rank(ctx, &me));
    CHECK(hx_size(ctx, &size));
    FAIL_IF(size != 2, "needs 2 ranks");
    CHECK(hx_open(ctx, 4, &ep));
    CHECK(hx_target_init(ep, 1 - me, 4, &peer));
    /* Make sure the connection exists before one side goes away. */
    if (me == 1)
        CHECK(hx_write(ep, peer, 1, "hi", 3));
    else
        CHECK(hx_read(ep, 1, 1, buf, sizeof buf, NULL));
    if (me == 1) {
        usleep(300 * 1000);
        printf("rank 1: leaving without hx_finalize\n");
        fflush(stdout);
        _exit(0);
    }
    alarm(20); /* a rank that never notices fails the test instead of hanging it */
    int rc = hx_read(ep, 1, 2, buf, sizeof buf, NULL);
    FAIL_IF(rc == HX_OK, "read from a peer that exited succeeded");
    printf("rank 0: read failed as it should: %s (%s)\n", hx_strerror(rc), hx_last_error());
    printf("rank 0: peer_exit OK\n");
    return 0;
}
