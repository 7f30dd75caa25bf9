/*
 * hello.c — the program tests/install/check.sh builds against an installed hxcomm, with nothing
 * but `pkg-config --cflags --libs hxcomm`.
 *
 * Works alone (hx_init without a launcher gives a job of one rank, which then messages itself)
 * and under `hxcomm run -n N`: every rank sends a greeting and a 1 MiB block (large enough to go
 * by rendezvous) to the next rank and receives both from the previous one, checking every byte.
 * Prints "hello: rank R of N OK" and exits 0, or says what failed and exits 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hxcomm.h>

#define EP 0
#define TAG_HELLO 7
#define TAG_BLOCK 8
#define BLOCK (1u << 20)

#define CHECK(call)                                                                            \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != HX_OK) {                                                                    \
            fprintf(stderr, "hello: %s failed: %s (%s)\n", #call, hx_strerror(rc_),            \
                    hx_last_error());                                                          \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static unsigned char byte_at(uint32_t sender, size_t i) {
    return (unsigned char)(i * 31u + sender * 101u + 5u);
}

int main(void) {
    hx_context *ctx;
    hx_endpoint *ep;
    uint32_t rank, size;
    CHECK(hx_init(&ctx));
    CHECK(hx_rank(ctx, &rank));
    CHECK(hx_size(ctx, &size));
    CHECK(hx_open(ctx, EP, &ep));

    uint32_t next = (rank + 1) % size, prev = (rank + size - 1) % size;
    hx_target to;
    CHECK(hx_target_init(ep, next, EP, &to));

    char greeting[64], got[64] = {0};
    snprintf(greeting, sizeof greeting, "hello from rank %u", (unsigned)rank);
    unsigned char *block = malloc(BLOCK), *in = malloc(BLOCK);
    if (!block || !in) {
        fprintf(stderr, "hello: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < BLOCK; i++) block[i] = byte_at(rank, i);
    memset(in, 0, BLOCK);

    /* Receives first (a job of one sends to itself), then sends, then waits for all four. */
    hx_request reqs[4];
    hx_status st[4];
    CHECK(hx_iread(ep, prev, TAG_HELLO, got, sizeof got - 1, &reqs[0]));
    CHECK(hx_iread(ep, prev, TAG_BLOCK, in, BLOCK, &reqs[1]));
    CHECK(hx_iwrite(ep, to, TAG_HELLO, greeting, strlen(greeting) + 1, &reqs[2]));
    CHECK(hx_iwrite(ep, to, TAG_BLOCK, block, BLOCK, &reqs[3]));
    CHECK(hx_waitall(ctx, 4, reqs, st));

    char want[64];
    snprintf(want, sizeof want, "hello from rank %u", (unsigned)prev);
    if (strcmp(got, want) != 0 || st[0].source != prev || st[0].tag != TAG_HELLO) {
        fprintf(stderr, "hello: rank %u got \"%s\" from rank %u, wanted \"%s\"\n", (unsigned)rank,
                got, (unsigned)st[0].source, want);
        return 1;
    }
    if (st[1].length != BLOCK || st[1].truncated) {
        fprintf(stderr, "hello: rank %u got a block of %zu bytes, wanted %u\n", (unsigned)rank,
                st[1].length, BLOCK);
        return 1;
    }
    for (size_t i = 0; i < BLOCK; i++) {
        if (in[i] != byte_at(prev, i)) {
            fprintf(stderr, "hello: rank %u: byte %zu of the block is %u, wanted %u\n",
                    (unsigned)rank, i, in[i], byte_at(prev, i));
            return 1;
        }
    }

    CHECK(hx_barrier(ctx));
    CHECK(hx_close(ep));
    CHECK(hx_finalize(ctx));
    free(block);
    free(in);
    printf("hello: rank %u of %u OK (%s)\n", (unsigned)rank, (unsigned)size, got);
    return 0;
}
