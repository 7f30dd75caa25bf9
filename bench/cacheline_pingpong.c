/*
 * cacheline_pingpong: the raw floor of shared-memory latency between two processes on one host.
 * fork(); parent and child share an anonymous mmap with two 64-byte-aligned counters (one per
 * direction, each on its own cache line). The parent writes ping = i and spins until pong == i;
 * the child spins until ping == i and writes pong = i. One-way latency = half the round trip.
 * No system call, no copy, no queue: what any shared-memory transport pays at least.
 *
 * Usage: cacheline_pingpong [ITERS [RUNS [PIN]]]   (defaults 1000000, 5, 1)
 *   PIN=1 pins parent to CPU 0 and child to CPU 1; PIN=0 leaves placement to the scheduler.
 * Prints one line per run and the median:
 *   CACHELINE run=1 iters=1000000 oneway_ns=123.4
 *   CACHELINE median_oneway_ns=123.4 runs=5 pinned=1
 * Build: cc -O2 -o cacheline_pingpong bench/cacheline_pingpong.c
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct shared {
    _Alignas(64) _Atomic long ping;
    _Alignas(64) _Atomic long pong;
    _Alignas(64) _Atomic long go;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 1000000;
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    int pinned = argc > 3 ? atoi(argv[3]) : 1;
    if (iters < 1 || runs < 1 || runs > 100)
        return 2;
    double res[100];
    for (int r = 0; r < runs; r++) {
        struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (sh == MAP_FAILED)
            return 1;
        atomic_store(&sh->ping, 0);
        atomic_store(&sh->pong, 0);
        atomic_store(&sh->go, 0);
        long warm = iters / 10;
        pid_t pid = fork();
        if (pid == 0) {
            if (pinned)
                pin(1);
            atomic_store(&sh->go, 1);
            for (long i = 1; i <= iters + warm; i++) {
                while (atomic_load_explicit(&sh->ping, memory_order_acquire) != i)
                    ;
                atomic_store_explicit(&sh->pong, i, memory_order_release);
            }
            _exit(0);
        }
        if (pinned)
            pin(0);
        while (!atomic_load(&sh->go))
            ;
        double t0 = 0;
        for (long i = 1; i <= iters + warm; i++) {
            if (i == warm + 1)
                t0 = now();
            atomic_store_explicit(&sh->ping, i, memory_order_release);
            while (atomic_load_explicit(&sh->pong, memory_order_acquire) != i)
                ;
        }
        double dt = now() - t0;
        waitpid(pid, NULL, 0);
        munmap(sh, sizeof *sh);
        res[r] = dt / iters / 2 * 1e9;
        printf("CACHELINE run=%d iters=%ld oneway_ns=%.1f\n", r + 1, iters, res[r]);
        fflush(stdout);
    }
    qsort(res, runs, sizeof res[0], cmp);
    printf("CACHELINE median_oneway_ns=%.1f runs=%d pinned=%d\n", res[runs / 2], runs, pinned);
    return 0;
}
