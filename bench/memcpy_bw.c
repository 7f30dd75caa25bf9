/*
 * memcpy_bw: single-core memcpy bandwidth of BYTES-sized buffers (default 4 MiB), the yardstick
 * for shared-memory bandwidth on this host. Two modes, each run RUNS times, median reported:
 *   hot   the same source and destination buffer every time (cache-resident where the buffers fit,
 *         like OSU bw/`hxcomm bench bw` without --validate, which reuse one buffer per direction)
 *   cold  cycles through NBUF distinct source/destination pairs (default 32 x 4 MiB = 128 MiB each
 *         side, well beyond the 32 MiB L3 here), i.e. memory-resident, like `bw --validate`
 * Bandwidth = bytes copied / time (10^9 bytes/s = GB/s); each byte copied is read once and written
 * once. Usage: memcpy_bw [BYTES [SECONDS_PER_RUN [RUNS [NBUF]]]]   (4194304 0.5 5 32)
 * Output: MEMCPY mode=hot bytes=4194304 run=1 gb_per_s=..  /  MEMCPY mode=hot median_gb_per_s=..
 * Build: cc -O2 -o memcpy_bw bench/memcpy_bw.c
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    size_t bytes = argc > 1 ? strtoul(argv[1], NULL, 0) : 4u << 20;
    double secs = argc > 2 ? atof(argv[2]) : 0.5;
    int runs = argc > 3 ? atoi(argv[3]) : 5;
    int nbuf = argc > 4 ? atoi(argv[4]) : 32;
    if (runs < 1 || runs > 100 || nbuf < 1)
        return 2;
    char **src = malloc(sizeof(char *) * nbuf), **dst = malloc(sizeof(char *) * nbuf);
    for (int i = 0; i < nbuf; i++) {
        src[i] = aligned_alloc(4096, bytes);
        dst[i] = aligned_alloc(4096, bytes);
        if (!src[i] || !dst[i])
            return 1;
        memset(src[i], i + 1, bytes);
        memset(dst[i], 0, bytes);
    }
    const char *modes[2] = {"hot", "cold"};
    volatile char sink = 0;
    for (int m = 0; m < 2; m++) {
        int n = m == 0 ? 1 : nbuf;
        double res[100];
        for (int r = 0; r < runs; r++) {
            for (int i = 0; i < n; i++) /* warm up */
                memcpy(dst[i], src[i], bytes);
            long copies = 0;
            double t0 = now(), t;
            do {
                for (int i = 0; i < n; i++)
                    memcpy(dst[i], src[i], bytes);
                copies += n;
                sink ^= dst[copies % n][copies % bytes];
                t = now();
            } while (t - t0 < secs);
            res[r] = (double)bytes * copies / (t - t0) / 1e9;
            printf("MEMCPY mode=%s bytes=%zu run=%d gb_per_s=%.2f\n", modes[m], bytes, r + 1,
                   res[r]);
        }
        qsort(res, runs, sizeof res[0], cmp);
        printf("MEMCPY mode=%s bytes=%zu median_gb_per_s=%.2f runs=%d buffers=%d\n", modes[m],
               bytes, res[runs / 2], runs, n);
        fflush(stdout);
    }
    return 0;
}
