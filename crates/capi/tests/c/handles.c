/* Stale, double-freed and foreign handles are errors (HX_ERR_HANDLE), never crashes. Job of one. */
#include <stdint.h>
#include <string.h>

#include "common.h"

int main(void) {
    hx_context *ctx, *ctx2;
    hx_endpoint *ep, *ep2;
    hx_target t;
    uint16_t id;
    uint32_t v;
    int fd;
    char buf[8] = "abcdefg";

    CHECK(hx_init(&ctx));
    CHECK(hx_open(ctx, 3, &ep));
    CHECK(hx_target_init(ep, 0, 3, &t));
    CHECK(hx_close(ep));

    /* The endpoint is gone: every use of it is refused, a second close too. */
    EXPECT(HX_ERR_HANDLE, hx_close(ep));
    EXPECT(HX_ERR_HANDLE, hx_endpoint_id(ep, &id));
    EXPECT(HX_ERR_HANDLE, hx_write(ep, t, 1, buf, sizeof buf));
    EXPECT(HX_ERR_HANDLE, hx_endpoint_fd(ep, &fd));
    FAIL_IF(strstr(hx_last_error(), "endpoint") == NULL, "message: %s", hx_last_error());

    /* Reopening the same id gives a new handle; the old one stays dead. */
    CHECK(hx_open(ctx, 3, &ep2));
    EXPECT(HX_ERR_HANDLE, hx_close(ep));
    CHECK(hx_endpoint_id(ep2, &id));
    FAIL_IF(id != 3, "id %u", id);

    /* One kind of handle is not taken for the other, nor is a pointer that hxcomm never gave. */
    EXPECT(HX_ERR_HANDLE, hx_rank((const hx_context *)(const void *)ep2, &v));
    EXPECT(HX_ERR_HANDLE, hx_close((hx_endpoint *)(void *)ctx));
    EXPECT(HX_ERR_HANDLE, hx_progress((hx_context *)(void *)buf));
    EXPECT(HX_ERR_HANDLE, hx_close((hx_endpoint *)(void *)(buf + 1)));
    CHECK(hx_close(ep2));

    CHECK(hx_finalize(ctx));
    /* The context is gone: a second finalize and every later use are refused. */
    EXPECT(HX_ERR_HANDLE, hx_finalize(ctx));
    EXPECT(HX_ERR_HANDLE, hx_rank(ctx, &v));
    EXPECT(HX_ERR_HANDLE, hx_fd(ctx, &fd));
    EXPECT(HX_ERR_HANDLE, hx_open(ctx, 1, &ep));
    FAIL_IF(ep != NULL, "hx_open on a dead context left a handle");
    EXPECT(HX_ERR_HANDLE, hx_barrier(ctx));
    FAIL_IF(strstr(hx_last_error(), "context") == NULL, "message: %s", hx_last_error());

    /* A new context is not reached through the old handle. */
    CHECK(hx_init(&ctx2));
    EXPECT(HX_ERR_HANDLE, hx_size(ctx, &v));
    CHECK(hx_size(ctx2, &v));
    CHECK(hx_finalize(ctx2));
    printf("handles OK\n");
    return 0;
}
