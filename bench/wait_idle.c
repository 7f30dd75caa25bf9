/*
 * wait_idle: what ranks cost while they wait. Rank 0 sleeps SECONDS (default 10) while every other
 * rank blocks in a receive from it; then rank 0 sends each one byte. Every rank prints its CPU
 * time (getrusage user+system) over the wait. With N ranks on 2 cores, a transport that sleeps
 * leaves the machine idle; one that spins keeps it at 100%.
 *
 *   hxcomm:  cc -O2 -I include bench/wait_idle.c -L target/release -lhxcomm \
 *              -Wl,-rpath,$PWD/target/release -o wait_idle_hx
 *            hxcomm run -n 8 -- ./wait_idle_hx 10
 *   MPI:     mpicc.openmpi -O2 -DUSE_MPI bench/wait_idle.c -o wait_idle_ompi
 *            mpirun -np 8 --oversubscribe ./wait_idle_ompi 10
 * Output per rank: WAIT_IDLE rank=R wall_s=.. cpu_s=..
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#ifdef USE_MPI
#include <mpi.h>
#else
#include "hxcomm.h"
#define CHECK(c) do { int rc_ = (c); if (rc_ != HX_OK) { fprintf(stderr, "%s: %s\n", #c, hx_last_error()); exit(1); } } while (0)
#endif

static double cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 10;
    uint32_t rank, size;
    char b = 1;
#ifdef USE_MPI
    int r, s;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &s);
    rank = r, size = s;
    MPI_Barrier(MPI_COMM_WORLD);
#else
    hx_context *ctx;
    hx_endpoint *ep;
    CHECK(hx_init(&ctx));
    CHECK(hx_rank(ctx, &rank));
    CHECK(hx_size(ctx, &size));
    CHECK(hx_open(ctx, 0, &ep));
    CHECK(hx_barrier(ctx));
#endif
    double c0 = cpu(), t0 = now();
    if (rank == 0) {
        struct timespec ts = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)};
        nanosleep(&ts, NULL);
        for (uint32_t p = 1; p < size; p++) {
#ifdef USE_MPI
            MPI_Send(&b, 1, MPI_CHAR, (int)p, 9, MPI_COMM_WORLD);
#else
            hx_target t;
            CHECK(hx_target_init(ep, p, 0, &t));
            CHECK(hx_write(ep, t, 9, &b, 1));
#endif
        }
    } else {
#ifdef USE_MPI
        MPI_Recv(&b, 1, MPI_CHAR, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
#else
        hx_status st;
        CHECK(hx_read(ep, 0, 9, &b, 1, &st));
#endif
    }
    printf("WAIT_IDLE rank=%u wall_s=%.2f cpu_s=%.3f\n", rank, now() - t0, cpu() - c0);
    fflush(stdout);
#ifdef USE_MPI
    MPI_Finalize();
#else
    hx_close(ep);
    hx_finalize(ctx);
#endif
    return 0;
}
