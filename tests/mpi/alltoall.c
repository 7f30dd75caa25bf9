/* An all-to-all right after MPI_Init, checked: what a job pays for first contact with every
 * peer (hxcomm connects on first use). Prints the time from before MPI_Init to the end of the
 * first all-to-all, and of a second one. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    double t0 = now();
    MPI_Init(&argc, &argv);
    double t_init = now();
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    const int len = argc > 1 ? atoi(argv[1]) : 4096;
    unsigned char *out = malloc((size_t)len * n), *in = malloc((size_t)len * n);
    double t_round[2];
    for (int round = 0; round < 2; round++) {
        for (int p = 0; p < n; p++)
            for (int i = 0; i < len; i++)
                out[(size_t)p * len + i] = (unsigned char)(me * 31 + p * 7 + i + round);
        memset(in, 0, (size_t)len * n);
        MPI_Alltoall(out, len, MPI_BYTE, in, len, MPI_BYTE, MPI_COMM_WORLD);
        t_round[round] = now();
        for (int p = 0; p < n; p++)
            for (int i = 0; i < len; i++)
                if (in[(size_t)p * len + i] != (unsigned char)(p * 31 + me * 7 + i + round)) {
                    fprintf(stderr, "FAIL rank %d: byte %d from rank %d round %d\n", me, i, p, round);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
    }
    double mine[3] = {t_init - t0, t_round[0] - t_init, t_round[1] - t_round[0]}, worst[3];
    MPI_Reduce(mine, worst, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (me == 0)
        printf("OK alltoall ranks=%d bytes=%d init=%.3fs first=%.3fs second=%.3fs (slowest rank)\n",
               n, len, worst[0], worst[1], worst[2]);
    free(out);
    free(in);
    MPI_Finalize();
    return 0;
}
