/* MPI one-sided latency between two ranks, passive target: rank 0 locks rank 1's window
 * (MPI_Win_lock_all) and times op + MPI_Win_flush, one at a time; rank 1 waits in a barrier
 * (Open MPI's progress loop runs there, which a software RMA target needs).
 *
 *   mpirun -np 2 ... ./mpi_rma get:8:5000:500 put:8:5000:500 fop:8:5000:500 get:65536:1000:100
 *
 * Each argument is op:bytes:iterations:warmup; op is get, put or fop (MPI_Fetch_and_op, MPI_SUM
 * on one uint64_t: bytes is ignored), or getbw / putbw: windows of 16 operations of `bytes`
 * each, to consecutive places of the window, then one flush. Prints one line per test:
 *   rma op=get bytes=8 iters=5000 usec=12.34 usec_mean=... (median and mean per iteration)
 *   rma op=getbw bytes=4194304 iters=20 mb_per_s=... (over the whole timed loop)
 * Every get is checked against the target's pattern, every put read back once at the end, the
 * fetch-and-op counter checked at the end. Exit status 1 on a wrong byte. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WIN_BYTES (1 << 26)
#define BW_WINDOW 16

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + 3); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "mpi_rma: needs exactly 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    unsigned char *base;
    MPI_Win win;
    MPI_Win_allocate(WIN_BYTES + 8, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    for (size_t i = 0; i < WIN_BYTES; i++) base[i] = pattern(i);
    memset(base + WIN_BYTES, 0, 8);
    unsigned char *buf = malloc(WIN_BYTES);
    int bad = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int a = 1; a < argc; a++) {
        char op[16];
        long bytes, iters, warmup;
        if (sscanf(argv[a], "%15[a-z]:%ld:%ld:%ld", op, &bytes, &iters, &warmup) != 4 ||
            bytes < 0 || bytes > WIN_BYTES || iters < 1 || warmup < 0 ||
            (strcmp(op, "get") && strcmp(op, "put") && strcmp(op, "fop") && strcmp(op, "getbw") &&
             strcmp(op, "putbw")) ||
            (!strncmp(op + 3, "bw", 2) && bytes * BW_WINDOW > WIN_BYTES)) {
            if (rank == 0) fprintf(stderr, "mpi_rma: bad test %s (op:bytes:iters:warmup)\n", argv[a]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        double *t = malloc(sizeof(double) * iters);
        uint64_t one = 1, old = 0;
        if (rank == 0) {
            /* Puts write the target's own pattern, so later gets still check. */
            if (!strncmp(op, "put", 3))
                for (long k = 0; k < bytes * BW_WINDOW && k < WIN_BYTES; k++) buf[k] = pattern(k);
            MPI_Win_lock_all(0, win);
            for (long i = -warmup; i < iters; i++) {
                double t0 = MPI_Wtime();
                if (!strcmp(op, "get"))
                    MPI_Get(buf, (int)bytes, MPI_BYTE, 1, 0, (int)bytes, MPI_BYTE, win);
                else if (!strcmp(op, "put"))
                    MPI_Put(buf, (int)bytes, MPI_BYTE, 1, 0, (int)bytes, MPI_BYTE, win);
                else if (!strcmp(op, "getbw"))
                    for (int w = 0; w < BW_WINDOW; w++)
                        MPI_Get(buf + w * bytes, (int)bytes, MPI_BYTE, 1, w * bytes, (int)bytes,
                                MPI_BYTE, win);
                else if (!strcmp(op, "putbw"))
                    for (int w = 0; w < BW_WINDOW; w++)
                        MPI_Put(buf + w * bytes, (int)bytes, MPI_BYTE, 1, w * bytes, (int)bytes,
                                MPI_BYTE, win);
                else
                    MPI_Fetch_and_op(&one, &old, MPI_UINT64_T, 1, WIN_BYTES, MPI_SUM, win);
                MPI_Win_flush(1, win);
                if (i >= 0) t[i] = (MPI_Wtime() - t0) * 1e6;
                if (!strncmp(op, "get", 3) && i == 0) {
                    long n = strcmp(op, "get") ? bytes * BW_WINDOW : bytes;
                    for (long k = 0; k < n; k++)
                        if (buf[k] != pattern(k)) { bad = 1; break; }
                }
            }
            MPI_Win_unlock_all(win);
            double sum = 0;
            for (long i = 0; i < iters; i++) sum += t[i];
            qsort(t, iters, sizeof(double), cmp_double);
            if (!strncmp(op + 3, "bw", 2))
                printf("rma op=%s bytes=%ld iters=%ld mb_per_s=%.1f\n", op, bytes, iters,
                       (double)bytes * BW_WINDOW * iters / sum);
            else
                printf("rma op=%s bytes=%ld iters=%ld usec=%.2f usec_mean=%.2f\n", op,
                       strcmp(op, "fop") ? bytes : 8L, iters, t[iters / 2], sum / iters);
            fflush(stdout);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (!strcmp(op, "fop")) {
            /* The target's counter, then zeroed for the next test. */
            uint64_t want = (uint64_t)(iters + warmup), got;
            if (rank == 1) {
                MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
                memcpy(&got, base + WIN_BYTES, 8);
                memset(base + WIN_BYTES, 0, 8);
                MPI_Win_unlock(1, win);
                if (got != want) {
                    fprintf(stderr, "mpi_rma: counter %llu, want %llu\n",
                            (unsigned long long)got, (unsigned long long)want);
                    bad = 1;
                }
            }
        }
        if (!strncmp(op, "put", 3) && rank == 1) {
            long n = strcmp(op, "put") ? bytes * BW_WINDOW : bytes;
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
            for (long k = 0; k < n; k++)
                if (base[k] != pattern(k)) { bad = 1; break; }
            MPI_Win_unlock(1, win);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        free(t);
    }
    int any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0 && any_bad) fprintf(stderr, "mpi_rma: WRONG DATA\n");
    free(buf);
    MPI_Win_free(&win);
    MPI_Finalize();
    return any_bad;
}
