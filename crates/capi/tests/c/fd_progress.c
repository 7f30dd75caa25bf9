/* hx_endpoint_id, hx_fd and hx_progress from C: rank 0 posts a receive and goes straight to
 * sleep in poll() on hx_fd until rank 1's late message wakes it. Two ranks. */
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

int main(void) {
    hx_context *ctx;
    hx_endpoint *ep;
    hx_target peer;
    uint32_t me, size;
    uint16_t id;
    int fd, efd, done = 0;
    char buf[32] = {0};

    CHECK(hx_init(&ctx));
    CHECK(hx_rank(ctx, &me));
    CHECK(hx_size(ctx, &size));
    FAIL_IF(size != 2, "needs 2 ranks");
    CHECK(hx_open(ctx, 9, &ep));
    CHECK(hx_endpoint_id(ep, &id));
    FAIL_IF(id != 9, "endpoint id %u", id);
    CHECK(hx_fd(ctx, &fd));
    CHECK(hx_endpoint_fd(ep, &efd));
    FAIL_IF(fd < 0 || fd != efd, "fd %d, endpoint fd %d", fd, efd);
    CHECK(hx_target_init(ep, 1 - me, 9, &peer));
    CHECK(hx_barrier(ctx));
    if (me == 1) {
        usleep(200 * 1000);
        CHECK(hx_write(ep, peer, 3, "late hello", 11));
    } else {
        hx_request r;
        hx_status st;
        int wakeups = 0;
        /* Straight from posting to poll(), with no hx_test or hx_progress in between: the fd
         * must already wake for this receive (over shared memory it did not, issue 11). */
        CHECK(hx_iread(ep, 1, 3, buf, sizeof buf, &r));
        for (;;) {
            struct pollfd p = {.fd = fd, .events = POLLIN, .revents = 0};
            int n = poll(&p, 1, 5000);
            FAIL_IF(n <= 0, "not woken by hx_fd within 5 s");
            wakeups++;
            CHECK(hx_test(ctx, r, &done, &st));
            if (done)
                break;
            CHECK(hx_progress(ctx));
        }
        FAIL_IF(strcmp(buf, "late hello") != 0 || st.source != 1 || st.tag != 3, "got %s", buf);
        FAIL_IF(wakeups < 1, "the message came without a wakeup");
        printf("rank 0: woken %d time(s) by hx_fd\n", wakeups);
    }
    CHECK(hx_barrier(ctx));
    CHECK(hx_close(ep));
    CHECK(hx_finalize(ctx));
    printf("rank %u: fd_progress OK\n", me);
    return 0;
}
