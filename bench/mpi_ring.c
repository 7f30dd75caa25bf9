/*
 * mpi_ring: the MPI counterpart of `hxcomm bench stress --seconds S --max-size M` for the issue-4
 * test "8 ranks on the 2-core machine, all-to-all exchange for 10 s": in rounds, every rank
 * posts a receive from and a send to every other rank (sizes log-uniform from 1 byte to MAX,
 * derived from round and pair so both ends agree), waits for all, and checks every received
 * byte. Rank 0 decides (broadcast) whether another round starts, so all ranks stop together.
 * Each rank prints its CPU time (getrusage user+system) and wall time.
 *
 * Usage: mpirun -np N mpi_ring [SECONDS [MAX_BYTES]]   (10, 65536)
 * Output per rank: MPI_RING rank=R rounds=.. msgs=.. bytes=.. wall_s=.. user_s=.. sys_s=.. errors=0
 * Build: mpicc.openmpi -O2 -o mpi_ring bench/mpi_ring.c (or mpicc.mpich)
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static long msg_len(long round, int src, int dst, long max)
{
    double u = (mix((uint64_t)round * 1000003u + (uint64_t)src * 1009u + (uint64_t)dst) >> 11) /
               (double)(1ULL << 53);
    long n = (long)exp(u * log((double)max));
    return n < 1 ? 1 : n > max ? max : n;
}

static unsigned char byte_at(long round, int src, int dst, long i)
{
    return (unsigned char)(mix((uint64_t)round * 7919u + (uint64_t)src * 131u + (uint64_t)dst) + i * 31u);
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double seconds = argc > 1 ? atof(argv[1]) : 10;
    long max = argc > 2 ? atol(argv[2]) : 65536;
    unsigned char **sbuf = malloc(sizeof(void *) * size), **rbuf = malloc(sizeof(void *) * size);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * size);
    for (int p = 0; p < size; p++) {
        sbuf[p] = malloc(max);
        rbuf[p] = malloc(max);
    }
    long rounds = 0, msgs = 0, bytes = 0, errors = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (;;) {
        int go = MPI_Wtime() - t0 < seconds;
        MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (!go)
            break;
        int n = 0;
        for (int p = 0; p < size; p++) {
            if (p == rank)
                continue;
            MPI_Irecv(rbuf[p], (int)msg_len(rounds, p, rank, max), MPI_BYTE, p, 7, MPI_COMM_WORLD,
                      &reqs[n++]);
        }
        for (int p = 0; p < size; p++) {
            if (p == rank)
                continue;
            long len = msg_len(rounds, rank, p, max);
            for (long i = 0; i < len; i++)
                sbuf[p][i] = byte_at(rounds, rank, p, i);
            MPI_Isend(sbuf[p], (int)len, MPI_BYTE, p, 7, MPI_COMM_WORLD, &reqs[n++]);
        }
        MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
        for (int p = 0; p < size; p++) {
            if (p == rank)
                continue;
            long len = msg_len(rounds, p, rank, max);
            for (long i = 0; i < len; i++)
                if (rbuf[p][i] != byte_at(rounds, p, rank, i)) {
                    errors++;
                    break;
                }
            msgs++;
            bytes += len;
        }
        rounds++;
    }
    double wall = MPI_Wtime() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("MPI_RING rank=%d rounds=%ld msgs=%ld bytes=%ld wall_s=%.2f user_s=%.2f sys_s=%.2f "
           "errors=%ld\n",
           rank, rounds, msgs, bytes, wall, ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6,
           ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6, errors);
    fflush(stdout);
    MPI_Finalize();
    return errors != 0;
}
