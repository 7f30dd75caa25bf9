/* hx_probe and hx_read agree on sources; capacities above HX_MAX_MESSAGE are refused; matched
 * probe, hx_cancel, hx_version. Job of one (messages to itself). */
#include <stdint.h>
#include <string.h>

#include "common.h"

int main(void) {
    hx_context *ctx;
    hx_endpoint *ep;
    hx_target self;
    hx_request r;
    hx_status st;
    hx_message m;
    int found, cancelled, done;
    char buf[64], got[64];

    FAIL_IF(hx_version() != HX_VERSION_NUMBER, "library version %#x, header %#x", hx_version(),
            (unsigned)HX_VERSION_NUMBER);
    CHECK(hx_init(&ctx));
    CHECK(hx_open(ctx, 0, &ep));
    CHECK(hx_target_init(ep, 0, 0, &self));

    /* A source outside the job (of one): refused by hx_read, hx_iread and hx_probe alike. */
    EXPECT(HX_ERR_INVALID, hx_probe(ep, 5, HX_ANY_TAG, &found, &st));
    EXPECT(HX_ERR_INVALID, hx_iread(ep, 5, HX_ANY_TAG, got, sizeof got, &r));
    EXPECT(HX_ERR_INVALID, hx_improbe(ep, 5, HX_ANY_TAG, &found, &m, &st));
    CHECK(hx_probe(ep, HX_ANY_SOURCE, HX_ANY_TAG, &found, &st));
    FAIL_IF(found, "found a message in an empty queue");

    /* Capacities and lengths above the largest message. */
    EXPECT(HX_ERR_INVALID, hx_iread(ep, 0, 1, got, SIZE_MAX, &r));
    EXPECT(HX_ERR_INVALID, hx_read(ep, 0, 1, got, SIZE_MAX, &st));
    EXPECT(HX_ERR_INVALID, hx_iwrite(ep, self, 1, buf, SIZE_MAX, &r));
    FAIL_IF(strstr(hx_last_error(), "HX_MAX_MESSAGE") == NULL, "%s", hx_last_error());

    /* Cancel: a posted receive that matched nothing is cancelled; it receives nothing after. */
    CHECK(hx_iread(ep, 0, 7, got, sizeof got, &r));
    CHECK(hx_cancel(ctx, r, &cancelled));
    FAIL_IF(cancelled != 1, "posted receive not cancelled");
    EXPECT(HX_ERR_INVALID, hx_test(ctx, r, &done, NULL));
    memset(buf, 'x', sizeof buf);
    memset(got, 0, sizeof got);
    CHECK(hx_write(ep, self, 7, buf, 10));
    FAIL_IF(got[0] != 0, "cancelled receive got data");
    CHECK(hx_read(ep, 0, 7, got, sizeof got, &st));
    FAIL_IF(st.length != 10 || got[9] != 'x', "length %zu", st.length);
    /* A receive that has matched cannot be cancelled; it completes. */
    CHECK(hx_iwrite(ep, self, 8, buf, 4, &r));
    hx_request rr;
    CHECK(hx_iread(ep, 0, 8, got, sizeof got, &rr));
    CHECK(hx_cancel(ctx, rr, &cancelled));
    FAIL_IF(cancelled != 0, "matched receive cancelled");
    CHECK(hx_wait(ctx, rr, &st));
    CHECK(hx_wait(ctx, r, NULL));

    /* Matched probe: the claimed message is seen by no other probe or receive. */
    CHECK(hx_improbe(ep, HX_ANY_SOURCE, HX_ANY_TAG, &found, &m, &st));
    FAIL_IF(found || m != HX_MESSAGE_NULL, "claimed from an empty queue");
    memcpy(buf, "first", 6);
    CHECK(hx_write(ep, self, 11, buf, 6));
    memcpy(buf, "second", 7);
    CHECK(hx_write(ep, self, 12, buf, 7));
    CHECK(hx_mprobe(ep, HX_ANY_SOURCE, HX_ANY_TAG, &m, &st));
    FAIL_IF(m == HX_MESSAGE_NULL || st.tag != 11 || st.length != 6, "tag %lu",
            (unsigned long)st.tag);
    CHECK(hx_probe(ep, HX_ANY_SOURCE, HX_ANY_TAG, &found, &st));
    FAIL_IF(!found || st.tag != 12, "probe saw the claimed message (tag %lu)",
            (unsigned long)st.tag);
    CHECK(hx_mread(ep, &m, got, sizeof got, &st));
    FAIL_IF(m != HX_MESSAGE_NULL || strcmp(got, "first") != 0 || st.tag != 11, "got %s", got);
    EXPECT(HX_ERR_INVALID, hx_mread(ep, &m, got, sizeof got, &st));
    /* Nonblocking matched probe, truncating read, discard. */
    CHECK(hx_improbe(ep, 0, 12, &found, &m, &st));
    FAIL_IF(!found, "second message not found");
    CHECK(hx_imread(ep, &m, got, 3, &r));
    EXPECT(HX_ERR_TRUNCATED, hx_wait(ctx, r, &st));
    FAIL_IF(st.length != 7 || !st.truncated || memcmp(got, "sec", 3) != 0, "truncation");
    CHECK(hx_write(ep, self, 13, buf, 7));
    CHECK(hx_mprobe(ep, 0, 13, &m, NULL));
    CHECK(hx_mdiscard(ep, &m));
    CHECK(hx_probe(ep, HX_ANY_SOURCE, HX_ANY_TAG, &found, NULL));
    FAIL_IF(found, "discarded message still there");

    CHECK(hx_close(ep));
    CHECK(hx_finalize(ctx));
    printf("probe_limits OK\n");
    return 0;
}
