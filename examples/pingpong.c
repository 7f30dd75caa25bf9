/*
 * pingpong.c — two ranks exchange messages of several sizes over hxcomm, check every byte and
 * print the round-trip time.
 *
 *   cc -O2 -I include examples/pingpong.c -L target/release -lhxcomm \
 *      -Wl,-rpath,$PWD/target/release -o pingpong
 *   hxcomm run -n 2 -- ./pingpong [iterations]
 *
 * The first message is awaited with poll() on hxcomm's file descriptor next to another fd (a
 * pipe standing in for stdin or a socket of the application), to show the pollable fd.
 * Exits non-zero on any error or mismatch.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hxcomm.h"

#define EP 3 /* endpoint id used on both ranks */
#define TAG_HELLO 1
#define TAG_DATA 100

static uint32_t rank = 0;
static char who[16] = "?"; /* this rank, for messages (unknown before hx_rank) */

#define CHECK(call)                                                                            \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != HX_OK) {                                                                    \
            fprintf(stderr, "pingpong rank %s: %s failed: %s (%s)\n", who, #call,             \
                    hx_strerror(rc_), hx_last_error());                                        \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static unsigned char pattern(size_t i, size_t size, int iter) {
    return (unsigned char)(i * 131u + size * 7u + (size_t)iter * 13u + 1u);
}

static void fill(unsigned char *buf, size_t size, int iter) {
    for (size_t i = 0; i < size; i++)
        buf[i] = pattern(i, size, iter);
}

/* Returns the number of wrong bytes (and reports the first). */
static size_t verify(const unsigned char *buf, size_t size, int iter) {
    size_t bad = 0;
    for (size_t i = 0; i < size; i++) {
        if (buf[i] != pattern(i, size, iter)) {
            if (bad == 0)
                fprintf(stderr, "pingpong rank %u: size %zu iter %d: byte %zu is %u, expected %u\n",
                        (unsigned)rank, size, iter, i, buf[i], pattern(i, size, iter));
            bad++;
        }
    }
    return bad;
}

/* Receives the hello message by polling hxcomm's fd together with another fd. */
static int hello_with_poll(hx_context *ctx, hx_endpoint *ep, uint32_t peer) {
    int other[2];
    if (pipe(other) != 0) {
        perror("pipe");
        return 1;
    }
    int hxfd;
    CHECK(hx_endpoint_fd(ep, &hxfd));
    uint32_t hello = 0;
    hx_request req;
    CHECK(hx_iread(ep, HX_ANY_SOURCE, TAG_HELLO, &hello, sizeof hello, &req));
    hx_status st;
    int done = 0, wakeups = 0;
    double deadline = now_us() + 30e6;
    for (;;) {
        CHECK(hx_test(ctx, req, &done, &st));
        if (done)
            break;
        struct pollfd fds[2] = {{.fd = hxfd, .events = POLLIN}, {.fd = other[0], .events = POLLIN}};
        int n = poll(fds, 2, 1000);
        if (n < 0 && errno != EINTR) {
            perror("poll");
            return 1;
        }
        if (fds[1].revents & POLLIN)
            fprintf(stderr, "pingpong rank %u: unexpected input on the other fd\n", (unsigned)rank);
        if (fds[0].revents & POLLIN)
            wakeups++;
        if (now_us() > deadline) {
            fprintf(stderr, "pingpong rank %u: no hello within 30 s\n", (unsigned)rank);
            return 1;
        }
    }
    close(other[0]);
    close(other[1]);
    if (st.source != peer || st.tag != TAG_HELLO || st.length != sizeof hello || st.truncated ||
        hello != 0xC0FFEE00u + peer) {
        fprintf(stderr, "pingpong rank %u: bad hello (source %u tag %llu length %zu value %#x)\n",
                (unsigned)rank, (unsigned)st.source, (unsigned long long)st.tag, st.length, hello);
        return 1;
    }
    printf("rank %u: hello from rank %u after %d poll wakeup(s)\n", (unsigned)rank,
           (unsigned)st.source, wakeups);
    return 0;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 10;
    if (iters < 1)
        iters = 1;
    hx_context *ctx;
    CHECK(hx_init(&ctx));
    uint32_t size;
    CHECK(hx_rank(ctx, &rank));
    snprintf(who, sizeof who, "%u", (unsigned)rank);
    CHECK(hx_size(ctx, &size));
    if (size != 2) {
        fprintf(stderr, "pingpong: needs exactly 2 ranks, got %u (hxcomm run -n 2 -- ...)\n",
                (unsigned)size);
        hx_finalize(ctx);
        return 2;
    }
    uint32_t peer = 1 - rank;
    hx_endpoint *ep;
    CHECK(hx_open(ctx, EP, &ep));
    hx_target to;
    CHECK(hx_target_init(ep, peer, EP, &to));

    /* Hello both ways: a nonblocking write, the read through poll(). */
    /* Rank 1 says hello 100 ms late, so that rank 0 really sleeps in poll() until it comes. */
    uint32_t hello = 0xC0FFEE00u + rank;
    if (rank == 1) {
        struct timespec pause = {0, 100 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    hx_request hreq;
    CHECK(hx_iwrite(ep, to, TAG_HELLO, &hello, sizeof hello, &hreq));
    if (hello_with_poll(ctx, ep, peer) != 0)
        return 1;
    CHECK(hx_wait(ctx, hreq, NULL));

    static const size_t sizes[] = {0, 1, 7, 64, 1000, 4096, 65536, 1 << 20, 4 << 20};
    size_t nsizes = sizeof sizes / sizeof sizes[0];
    size_t max = sizes[nsizes - 1];
    unsigned char *out = malloc(max), *in = malloc(max);
    if (!out || !in) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    size_t errors = 0;
    for (size_t s = 0; s < nsizes; s++) {
        size_t len = sizes[s];
        int n = len >= (1 << 20) ? (iters + 3) / 4 : iters;
        double total = 0;
        CHECK(hx_barrier(ctx));
        for (int it = 0; it < n; it++) {
            uint64_t tag = TAG_DATA + s;
            hx_status st;
            if (rank == 0) {
                fill(out, len, it);
                memset(in, 0xEE, len);
                double t0 = now_us();
                CHECK(hx_write(ep, to, tag, out, len));
                CHECK(hx_read(ep, peer, tag, in, max, &st));
                total += now_us() - t0;
            } else {
                /* Post the receive, then wait for it; the echo goes back nonblocking. */
                hx_request r;
                memset(in, 0xEE, len);
                CHECK(hx_iread(ep, HX_ANY_SOURCE, HX_ANY_TAG, in, max, &r));
                CHECK(hx_wait(ctx, r, &st));
                hx_request w;
                CHECK(hx_iwrite(ep, to, tag, in, len, &w));
                hx_status ws;
                CHECK(hx_waitall(ctx, 1, &w, &ws));
            }
            if (st.source != peer || st.src_endpoint != EP || st.tag != tag || st.length != len ||
                st.truncated) {
                fprintf(stderr,
                        "pingpong rank %u: size %zu iter %d: bad status (source %u endpoint %u "
                        "tag %llu length %zu truncated %d)\n",
                        (unsigned)rank, len, it, (unsigned)st.source, (unsigned)st.src_endpoint,
                        (unsigned long long)st.tag, st.length, st.truncated);
                errors++;
            }
            errors += verify(in, len, it);
        }
        if (rank == 0)
            printf("size %8zu: %3d round trips, rtt %10.1f us, %8.1f MB/s\n", len, n, total / n,
                   total > 0 ? 2.0 * len * n / total : 0.0);
    }

    /* A truncated read reports the full length and keeps the first bytes. */
    if (rank == 0) {
        fill(out, 100, 0);
        CHECK(hx_write(ep, to, 7, out, 100));
    } else {
        int found = 0;
        hx_status st;
        while (!found)
            CHECK(hx_probe(ep, peer, 7, &found, &st));
        if (st.length != 100)
            errors++;
        int rc = hx_read(ep, peer, 7, in, 10, &st);
        if (rc != HX_ERR_TRUNCATED || st.length != 100 || !st.truncated) {
            fprintf(stderr, "pingpong rank 1: expected truncation, got %s\n", hx_strerror(rc));
            errors++;
        }
        fill(out, 100, 0);
        if (memcmp(in, out, 10) != 0) {
            fprintf(stderr, "pingpong rank 1: truncated read holds the wrong bytes\n");
            errors++;
        }
    }

    CHECK(hx_close(ep));
    CHECK(hx_finalize(ctx));
    free(out);
    free(in);
    if (errors) {
        fprintf(stderr, "pingpong rank %u: %zu errors\n", (unsigned)rank, errors);
        return 1;
    }
    printf("rank %u: pingpong OK\n", (unsigned)rank);
    return 0;
}
