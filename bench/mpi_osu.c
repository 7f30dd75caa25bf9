/*
 * mpi_osu: a small OSU-style point-to-point benchmark for MPI, used by `hxcomm bench compare --mpi`
 * to measure Open MPI and MPICH over the same rails as hxcomm, with the same methods as
 * `hxcomm bench` (crates/bench/src/p2p.rs):
 *
 *   latency  ping-pong between ranks 0 and 1, half the round trip (us)
 *   bw       rank 0 posts a window of nonblocking sends, rank 1 a window of receives, then an ack
 *   bibw     both ranks send and receive a window at once
 *
 * Usage: mpi_osu TEST:BYTES:ITERS[:WARMUP[:WINDOW]] ...   (e.g. bw:4194304:9:1:64 latency:8:10000)
 *
 * Rank 0 prints one line per test:
 *   MPI_OSU bench=bw bytes=4194304 iterations=9 window=64 mb_per_s=476.12 usec=0 cpu_s=1.23
 *     cpu_s_per_gb=0.51 host0=NAME host1=NAME
 * where MB = 10^6 bytes and cpu_s is the user+system time of both ranks over the timed loop
 * (warmup iterations excluded).
 *
 * With MPI_OSU_VALIDATE=1 in the environment, bw and bibw send a different pattern from each
 * window slot, stamped with the iteration, into a buffer per slot, and the receiver checks every
 * byte of every message (a mismatch aborts with exit status 4); the figure then includes the check.
 *
 * With MPI_OSU_ANSWER_DELAY_US=D, rank 1 of the latency test waits D microseconds (spinning on
 * MPI_Wtime) before each answer: under a profiler that slows rank 0 down, rank 0 then posts its
 * receive before the answer lands, as it does at full speed (bench/callgrind_ompi.sh).
 *
 * Build: mpicc.openmpi -O2 -o mpi_osu.openmpi mpi_osu.c (or mpicc.mpich).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define TAG_DATA 1
#define TAG_ACK 2

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

struct test {
    char name[16];
    long bytes;
    int iters, warmup, window;
};

static int parse_test(const char *s, struct test *t)
{
    char buf[128];
    char *fields[5] = {0};
    int n = 0;
    if (strlen(s) >= sizeof buf)
        return -1;
    strcpy(buf, s);
    for (char *p = strtok(buf, ":"); p && n < 5; p = strtok(NULL, ":"))
        fields[n++] = p;
    if (n < 3 || strlen(fields[0]) >= sizeof t->name)
        return -1;
    strcpy(t->name, fields[0]);
    if (strcmp(t->name, "bw") && strcmp(t->name, "bibw") && strcmp(t->name, "latency"))
        return -1;
    t->bytes = atol(fields[1]);
    t->iters = atoi(fields[2]);
    t->warmup = n > 3 ? atoi(fields[3]) : (t->iters / 10 > 2 ? t->iters / 10 : 2);
    t->window = n > 4 ? atoi(fields[4]) : 64;
    if (t->bytes < 0 || t->iters < 1 || t->warmup < 0 || t->window < 1)
        return -1;
    return 0;
}

/* CPU seconds at the start of the timed iterations: the warmup's CPU is not counted, as its
 * bytes are not. */
static double cpu_start;

/* Returns the elapsed seconds of the timed iterations (rank 0's view). */
static double run_latency(const struct test *t, int rank, char *sbuf, char *rbuf)
{
    int peer = 1 - rank;
    const char *d = getenv("MPI_OSU_ANSWER_DELAY_US");
    double delay = d ? atof(d) * 1e-6 : 0;
    double start = MPI_Wtime();
    cpu_start = cpu_seconds();
    for (int i = 0; i < t->iters + t->warmup; i++) {
        if (i == t->warmup) {
            start = MPI_Wtime();
            cpu_start = cpu_seconds();
        }
        if (rank == 0) {
            MPI_Send(sbuf, (int)t->bytes, MPI_CHAR, peer, TAG_DATA, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)t->bytes, MPI_CHAR, peer, TAG_DATA, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(rbuf, (int)t->bytes, MPI_CHAR, peer, TAG_DATA, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            if (delay > 0)
                for (double until = MPI_Wtime() + delay; MPI_Wtime() < until;)
                    ;
            MPI_Send(sbuf, (int)t->bytes, MPI_CHAR, peer, TAG_DATA, MPI_COMM_WORLD);
        }
    }
    return MPI_Wtime() - start;
}

/* Validation: slot w's message carries pattern byte k = (k * 131 + w * 29 + (k >> 12)) & 0xff,
 * except its first 8 bytes, which carry the iteration. */
static void fill_slot(unsigned char *b, long bytes, int w)
{
    for (long k = 0; k < bytes; k++)
        b[k] = (unsigned char)((k * 131 + w * 29 + (k >> 12)) & 0xff);
}

static void stamp(unsigned char *b, long bytes, long i)
{
    if (bytes >= 8)
        memcpy(b, &i, 8);
}

static void check_slot(const unsigned char *got, const unsigned char *want, long bytes, int w,
                       long i)
{
    long bad = -1;
    if (bytes >= 8 && memcmp(got, &i, 8))
        bad = 0;
    else if (bytes > 8 && memcmp(got + 8, want + 8, (size_t)bytes - 8))
        for (long k = 8; k < bytes && bad < 0; k++)
            if (got[k] != want[k])
                bad = k;
    if (bad >= 0) {
        fprintf(stderr, "mpi_osu: VALIDATION FAILED: iteration %ld slot %d byte %ld\n", i, w, bad);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
}

static double run_bw(const struct test *t, int rank, int bidir, char *sbuf, char *rbuf,
                     MPI_Request *reqs, MPI_Status *stats)
{
    int peer = 1 - rank;
    int sends = bidir || rank == 0, recvs = bidir || rank == 1;
    char ack[4] = {0};
    const char *v = getenv("MPI_OSU_VALIDATE");
    int validate = v && *v && strcmp(v, "0");
    unsigned char **sb = NULL, **rb = NULL;
    if (validate) {
        sb = calloc((size_t)t->window, sizeof *sb);
        rb = calloc((size_t)t->window, sizeof *rb);
        for (int w = 0; sb && rb && w < t->window; w++) {
            sb[w] = malloc((size_t)t->bytes + 1);
            rb[w] = malloc((size_t)t->bytes + 1);
            if (!sb[w] || !rb[w])
                MPI_Abort(MPI_COMM_WORLD, 3);
            fill_slot(sb[w], t->bytes, w);
        }
        if (!sb || !rb)
            MPI_Abort(MPI_COMM_WORLD, 3);
    }
    double start = MPI_Wtime();
    cpu_start = cpu_seconds();
    for (int i = 0; i < t->iters + t->warmup; i++) {
        int n = 0;
        if (i == t->warmup) {
            start = MPI_Wtime();
            cpu_start = cpu_seconds();
        }
        if (recvs)
            for (int w = 0; w < t->window; w++)
                MPI_Irecv(validate ? (char *)rb[w] : rbuf, (int)t->bytes, MPI_CHAR, peer,
                          TAG_DATA, MPI_COMM_WORLD, &reqs[n++]);
        if (sends)
            for (int w = 0; w < t->window; w++) {
                if (validate)
                    stamp(sb[w], t->bytes, i);
                MPI_Isend(validate ? (char *)sb[w] : sbuf, (int)t->bytes, MPI_CHAR, peer,
                          TAG_DATA, MPI_COMM_WORLD, &reqs[n++]);
            }
        MPI_Waitall(n, reqs, stats);
        if (validate && recvs)
            /* sb[w] holds slot w's pattern on both sides (stamped only where it is sent). */
            for (int w = 0; w < t->window; w++)
                check_slot(rb[w], sb[w], t->bytes, w, i);
        if (!bidir) {
            if (rank == 1)
                MPI_Send(ack, 4, MPI_CHAR, peer, TAG_ACK, MPI_COMM_WORLD);
            else
                MPI_Recv(ack, 4, MPI_CHAR, peer, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
    }
    double secs = MPI_Wtime() - start;
    if (validate) {
        for (int w = 0; w < t->window; w++) {
            free(sb[w]);
            free(rb[w]);
        }
        free(sb);
        free(rb);
    }
    return secs;
}

int main(int argc, char **argv)
{
    int rank, size, len;
    char host[MPI_MAX_PROCESSOR_NAME], hosts[2][MPI_MAX_PROCESSOR_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2 || argc < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -n 2 mpi_osu TEST:BYTES:ITERS[:WARMUP[:WINDOW]] ...\n");
        MPI_Finalize();
        return 2;
    }
    memset(host, 0, sizeof host);
    MPI_Get_processor_name(host, &len);
    MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
               MPI_COMM_WORLD);
    for (int a = 1; a < argc; a++) {
        struct test t;
        if (parse_test(argv[a], &t) != 0) {
            if (rank == 0)
                fprintf(stderr, "mpi_osu: bad test %s (want bw|bibw|latency:BYTES:ITERS)\n",
                        argv[a]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        size_t n = t.bytes ? (size_t)t.bytes : 1;
        char *sbuf = malloc(n), *rbuf = malloc(n);
        MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * (size_t)t.window);
        MPI_Status *stats = malloc(sizeof(MPI_Status) * 2 * (size_t)t.window);
        if (!sbuf || !rbuf || !reqs || !stats)
            MPI_Abort(MPI_COMM_WORLD, 3);
        memset(sbuf, 'a' + rank, n);
        memset(rbuf, 0, n);
        MPI_Barrier(MPI_COMM_WORLD);
        double secs;
        if (!strcmp(t.name, "latency"))
            secs = run_latency(&t, rank, sbuf, rbuf);
        else
            secs = run_bw(&t, rank, !strcmp(t.name, "bibw"), sbuf, rbuf, reqs, stats);
        double cpu = cpu_seconds() - cpu_start, cpu_total = 0;
        MPI_Reduce(&cpu, &cpu_total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double moved, mbps = 0, usec = 0;
            if (!strcmp(t.name, "latency")) {
                usec = secs * 1e6 / (2.0 * t.iters);
                moved = 2.0 * t.bytes * t.iters;
            } else {
                moved = (double)t.bytes * t.window * t.iters * (strcmp(t.name, "bibw") ? 1 : 2);
                mbps = moved / secs / 1e6;
            }
            printf("MPI_OSU bench=%s bytes=%ld iterations=%d window=%d mb_per_s=%.2f usec=%.3f "
                   "cpu_s=%.4f cpu_s_per_gb=%.3f host0=%s host1=%s\n",
                   t.name, t.bytes, t.iters, strcmp(t.name, "latency") ? t.window : 1, mbps, usec,
                   cpu_total, moved > 0 ? cpu_total / (moved / 1e9) : 0.0, hosts[0], hosts[1]);
            fflush(stdout);
        }
        free(sbuf);
        free(rbuf);
        free(reqs);
        free(stats);
    }
    MPI_Finalize();
    return 0;
}
