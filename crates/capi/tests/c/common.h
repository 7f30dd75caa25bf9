/* Shared helpers for the C API tests (crates/capi/tests/c_api.rs compiles and runs these). */
#ifndef HX_TEST_COMMON_H
#define HX_TEST_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "hxcomm.h"

#define CHECK(call)                                                                            \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != HX_OK) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,                 \
                    hx_strerror(rc_), hx_last_error());                                        \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* The call must give exactly `want`. */
#define EXPECT(want, call)                                                                     \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        if (rc_ != (want)) {                                                                   \
            fprintf(stderr, "%s:%d: %s gave %d (%s: %s), want %d\n", __FILE__, __LINE__,       \
                    #call, rc_, hx_strerror(rc_), hx_last_error(), (want));                    \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#define FAIL_IF(cond, ...)                                                                     \
    do {                                                                                       \
        if (cond) {                                                                            \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                    \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#endif
