/* Four threads use one context at once: two send, two receive (tags 1 and 2), every byte of every
 * message checked, sizes from 1 byte to beyond the eager limit. Two ranks.
 *   threads multiple    hx_init_thread(HX_THREAD_MULTIPLE), blocking hx_write / hx_read
 *   threads serialized  hx_init, nonblocking calls and hx_test loops only
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "common.h"

#define MESSAGES 300
#define THREADS 2

static hx_context *ctx;
static hx_endpoint *ep;
static hx_target peer;
static uint32_t me, other;
static int multiple;

static size_t size_of(int i) { return (size_t)((i * 7919) % 100000) + 1; }

static unsigned char byte_of(uint32_t from, int tag, int i, size_t j) {
    return (unsigned char)(from * 31 + (unsigned)tag * 101 + (unsigned)i * 13 + j);
}

static void finish(hx_request r, hx_status *st) {
    int done = 0;
    while (!done)
        CHECK(hx_test(ctx, r, &done, st));
}

static void *sender(void *arg) {
    int tag = (int)(intptr_t)arg;
    unsigned char *buf = malloc(100001);
    for (int i = 0; i < MESSAGES; i++) {
        size_t n = size_of(i);
        for (size_t j = 0; j < n; j++)
            buf[j] = byte_of(me, tag, i, j);
        if (multiple) {
            CHECK(hx_write(ep, peer, (uint64_t)tag, buf, n));
        } else {
            hx_request r;
            CHECK(hx_iwrite(ep, peer, (uint64_t)tag, buf, n, &r));
            finish(r, NULL);
        }
    }
    free(buf);
    return NULL;
}

static void *receiver(void *arg) {
    int tag = (int)(intptr_t)arg;
    unsigned char *buf = malloc(100001);
    for (int i = 0; i < MESSAGES; i++) {
        hx_status st;
        memset(buf, 0, 100001);
        if (multiple) {
            CHECK(hx_read(ep, other, (uint64_t)tag, buf, 100001, &st));
        } else {
            hx_request r;
            CHECK(hx_iread(ep, other, (uint64_t)tag, buf, 100001, &r));
            finish(r, &st);
        }
        FAIL_IF(st.source != other || st.tag != (uint64_t)tag || st.length != size_of(i),
                "message %d tag %d: source %u tag %lu length %zu", i, tag, st.source,
                (unsigned long)st.tag, st.length);
        for (size_t j = 0; j < st.length; j++)
            FAIL_IF(buf[j] != byte_of(other, tag, i, j), "message %d tag %d: byte %zu wrong", i,
                    tag, j);
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    multiple = argc > 1 && strcmp(argv[1], "multiple") == 0;
    if (multiple)
        CHECK(hx_init_thread(&ctx, HX_THREAD_MULTIPLE));
    else
        CHECK(hx_init(&ctx));
    uint32_t size;
    CHECK(hx_rank(ctx, &me));
    CHECK(hx_size(ctx, &size));
    FAIL_IF(size != 2, "needs 2 ranks");
    other = 1 - me;
    CHECK(hx_open(ctx, 0, &ep));
    CHECK(hx_target_init(ep, other, 0, &peer));

    pthread_t th[2 * THREADS];
    for (int t = 0; t < THREADS; t++) {
        FAIL_IF(pthread_create(&th[2 * t], NULL, sender, (void *)(intptr_t)(t + 1)), "create");
        FAIL_IF(pthread_create(&th[2 * t + 1], NULL, receiver, (void *)(intptr_t)(t + 1)),
                "create");
    }
    for (int t = 0; t < 2 * THREADS; t++)
        pthread_join(th[t], NULL);
    CHECK(hx_close(ep));
    CHECK(hx_finalize(ctx));
    printf("rank %u: threads %s OK\n", me, multiple ? "multiple" : "serialized");
    return 0;
}
