/* bench/mpi_is.c: `hxcomm bench is` (crates/bench/src/is.rs) as a plain MPI program, for Open MPI
 * on its own transports or over the hxcomm libfabric provider. Same keys (NAS IS's randlc
 * sequence, each rank jumping ahead to its share), same algorithm (bucket counts by
 * MPI_Allreduce, keys by MPI_Alltoall of counts then MPI_Alltoallv, counting sort), same
 * verification after every iteration and same output, with "mpi" for "hxcomm".
 *
 *   mpicc -O2 -o mpi_is bench/mpi_is.c
 *   mpirun -n 4 ./mpi_is [--class S|W|A|B|C] [--keys N] [--max-key N] [--iterations N] [--json]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEED 314159265ULL
#define MULT 1220703125ULL
#define MASK46 ((1ULL << 46) - 1)

static uint64_t pow46(uint64_t a, uint64_t k) {
    uint64_t r = 1;
    while (k) {
        if (k & 1) r = (r * a) & MASK46;
        a = (a * a) & MASK46;
        k >>= 1;
    }
    return r;
}

static uint64_t mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int rank, size;
static uint64_t nkeys, max_key;
static int buckets, shift;

static void die(const char *msg) {
    if (rank == 0) fprintf(stderr, "mpi_is: %s\n", msg);
    MPI_Finalize();
    exit(2);
}

static int parse_u64(const char *s, uint64_t *out) {
    char *end;
    if (!s || !*s || *s == '-') return 0;
    *out = strtoull(s, &end, 10);
    return *end == 0;
}

static double now(void) { return MPI_Wtime(); }

static void checksum(const uint32_t *k, uint64_t n, uint64_t s[3]) {
    s[0] = n;
    s[1] = s[2] = 0;
    for (uint64_t i = 0; i < n; i++) {
        s[1] += k[i];
        s[2] += mix(k[i]);
    }
}

/* One sort; returns the sorted keys (malloc'd) and their count; adds to the times. */
static uint32_t *sort_once(const uint32_t *keys, uint64_t n, uint64_t *out_n, double *t_total,
                           double *t_comm) {
    double t0 = now(), comm = 0, c0;
    uint64_t *counts = calloc(buckets, 8), *totals = malloc(buckets * 8);
    for (uint64_t i = 0; i < n; i++) counts[keys[i] >> shift]++;
    c0 = now();
    MPI_Allreduce(counts, totals, buckets, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    comm += now() - c0;
    int *first = malloc((size + 1) * sizeof(int));
    for (int r = 0; r <= size; r++) first[r] = buckets;
    first[0] = 0;
    int j = 0;
    uint64_t cum = 0;
    for (int b = 0; b < buckets; b++) {
        cum += totals[b];
        while (j + 1 < size && cum * (uint64_t)size >= (uint64_t)(j + 1) * nkeys) {
            first[j + 1] = b + 1;
            j++;
        }
    }
    int *owner = malloc(buckets * sizeof(int));
    for (int r = 0; r < size; r++)
        for (int b = first[r]; b < first[r + 1]; b++) owner[b] = r;
    int *scount = calloc(size, sizeof(int)), *sdispl = malloc(size * sizeof(int));
    int *rcount = malloc(size * sizeof(int)), *rdispl = malloc(size * sizeof(int));
    for (int b = 0; b < buckets; b++) scount[owner[b]] += (int)counts[b];
    sdispl[0] = 0;
    for (int r = 1; r < size; r++) sdispl[r] = sdispl[r - 1] + scount[r - 1];
    uint32_t *sbuf = malloc((n ? n : 1) * 4);
    int *fill = malloc(size * sizeof(int));
    memcpy(fill, sdispl, size * sizeof(int));
    for (uint64_t i = 0; i < n; i++) sbuf[fill[owner[keys[i] >> shift]]++] = keys[i];
    c0 = now();
    MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, MPI_COMM_WORLD);
    rdispl[0] = 0;
    for (int r = 1; r < size; r++) rdispl[r] = rdispl[r - 1] + rcount[r - 1];
    uint64_t total = (uint64_t)rdispl[size - 1] + rcount[size - 1];
    uint32_t *rbuf = malloc((total ? total : 1) * 4);
    MPI_Alltoallv(sbuf, scount, sdispl, MPI_UINT32_T, rbuf, rcount, rdispl, MPI_UINT32_T,
                  MPI_COMM_WORLD);
    comm += now() - c0;
    uint64_t lo = (uint64_t)first[rank] << shift, hi = (uint64_t)first[rank + 1] << shift;
    uint32_t *hist = calloc(hi - lo + 1, 4);
    for (uint64_t i = 0; i < total; i++) {
        if (rbuf[i] < lo || rbuf[i] >= hi) {
            fprintf(stderr, "mpi_is: rank %d received key %u outside its range [%llu, %llu)\n", rank,
                    rbuf[i], (unsigned long long)lo, (unsigned long long)hi);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        hist[rbuf[i] - lo]++;
    }
    uint32_t *sorted = malloc((total ? total : 1) * 4);
    uint64_t at = 0;
    for (uint64_t k = 0; k < hi - lo; k++)
        for (uint32_t h = 0; h < hist[k]; h++) sorted[at++] = (uint32_t)(lo + k);
    *out_n = total;
    *t_total = now() - t0;
    *t_comm = comm;
    free(counts); free(totals); free(first); free(owner); free(scount); free(sdispl);
    free(rcount); free(rdispl); free(sbuf); free(fill); free(rbuf); free(hist);
    return sorted;
}

/* Same checks as is.rs's verify; writes the first finding (or "") into why. */
static int verify(const uint32_t *s, uint64_t n, const uint64_t want[3], char *why, size_t len) {
    why[0] = 0;
    for (uint64_t i = 1; i < n; i++)
        if (s[i - 1] > s[i]) {
            snprintf(why, len, "rank %d: keys %llu and %llu out of order", rank,
                     (unsigned long long)i - 1, (unsigned long long)i);
            break;
        }
    uint64_t sum[3], tot[3];
    checksum(s, n, sum);
    MPI_Allreduce(sum, tot, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    uint64_t ends[3] = {n, n ? s[0] : 0, n ? s[n - 1] : 0};
    uint64_t *all = malloc(3 * size * 8);
    MPI_Allgather(ends, 3, MPI_UINT64_T, all, 3, MPI_UINT64_T, MPI_COMM_WORLD);
    int prev = -1;
    uint64_t pmax = 0;
    for (int r = 0; r < size; r++) {
        if (all[3 * r] == 0) continue;
        if (prev >= 0 && pmax > all[3 * r + 1] && !why[0])
            snprintf(why, len, "rank %d's largest key %llu is above rank %d's smallest %llu", prev,
                     (unsigned long long)pmax, r, (unsigned long long)all[3 * r + 1]);
        prev = r;
        pmax = all[3 * r + 2];
    }
    free(all);
    if (memcmp(tot, want, sizeof tot) && !why[0])
        snprintf(why, len, "keys not preserved: count/sum/hash sum [%llu, %llu, %llu] after, "
                 "[%llu, %llu, %llu] before", (unsigned long long)tot[0],
                 (unsigned long long)tot[1], (unsigned long long)tot[2],
                 (unsigned long long)want[0], (unsigned long long)want[1],
                 (unsigned long long)want[2]);
    int bad = why[0] != 0, any;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any && !bad) snprintf(why, len, "another rank found an error (see its stderr)");
    return !any;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *cls = "A";
    uint64_t keys_opt = 0, maxkey_opt = 0, iterations = 10;
    int have_keys = 0, have_max = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--class") && v) cls = argv[++i];
        else if (!strcmp(a, "--keys") && v) { if (!parse_u64(argv[++i], &keys_opt)) die("--keys: expected a number"); have_keys = 1; }
        else if (!strcmp(a, "--max-key") && v) { if (!parse_u64(argv[++i], &maxkey_opt)) die("--max-key: expected a number"); have_max = 1; }
        else if (!strcmp(a, "--iterations") && v) { if (!parse_u64(argv[++i], &iterations)) die("--iterations: expected a number"); }
        else die("usage: mpi_is [--class S|W|A|B|C] [--keys N] [--max-key N] [--iterations N] [--json]");
    }
    switch (strlen(cls) == 1 ? cls[0] | 0x20 : 0) {
    case 's': nkeys = 1ULL << 16; max_key = 1ULL << 11; break;
    case 'w': nkeys = 1ULL << 20; max_key = 1ULL << 16; break;
    case 'a': nkeys = 1ULL << 23; max_key = 1ULL << 19; break;
    case 'b': nkeys = 1ULL << 25; max_key = 1ULL << 21; break;
    case 'c': nkeys = 1ULL << 27; max_key = 1ULL << 23; break;
    default: die("--class: expected S, W, A, B or C");
    }
    if (have_keys) nkeys = keys_opt;
    if (have_max) max_key = maxkey_opt;
    if (nkeys == 0 || nkeys > UINT32_MAX) die("--keys: from 1 to 2^32-1");
    if (max_key < 4 || max_key > (1ULL << 31) || (max_key & (max_key - 1)))
        die("--max-key: expected a power of two from 4 to 2^31");
    if (iterations == 0 || iterations > 1000000) die("--iterations: from 1 to 1000000");
    /* MPI counts are ints: every rank's keys must fit. */
    if (nkeys / size + 1 > (uint64_t)INT32_MAX / 2) die("--keys: too many per rank for MPI int counts");
    buckets = max_key < 1024 ? (int)max_key : 1024;
    shift = __builtin_ctzll(max_key) - __builtin_ctz(buckets);

    uint64_t lo = nkeys * rank / size, hi = nkeys * (rank + 1) / size, n = hi - lo;
    uint32_t *keys = malloc((n ? n : 1) * 4);
    uint64_t x = (SEED * pow46(MULT, 4 * lo)) & MASK46;
    double scale = 1.0 / (double)(1ULL << 46), k = (double)(max_key / 4);
    for (uint64_t i = 0; i < n; i++) {
        double s;
        x = (x * MULT) & MASK46; s = x * scale;
        x = (x * MULT) & MASK46; s += x * scale;
        x = (x * MULT) & MASK46; s += x * scale;
        x = (x * MULT) & MASK46; s += x * scale;
        keys[i] = (uint32_t)(k * s);
    }
    uint64_t mine[3], want[3];
    checksum(keys, n, mine);
    MPI_Allreduce(mine, want, 3, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);

    double *times = calloc(iterations, sizeof(double)), *tmax = calloc(iterations, sizeof(double));
    double split[2] = {0, 0}, smax[2];
    char why[512] = "", first_why[600] = "";
    for (uint64_t it = 0; it <= iterations; it++) {
        MPI_Barrier(MPI_COMM_WORLD);
        uint64_t sn;
        double tt, tc;
        uint32_t *sorted = sort_once(keys, n, &sn, &tt, &tc);
        if (it > 0) {
            times[it - 1] = tt;
            split[0] += tt - tc;
            split[1] += tc;
        }
        if (!first_why[0] && !verify(sorted, sn, want, why, sizeof why))
            snprintf(first_why, sizeof first_why, "iteration %llu: %s", (unsigned long long)it, why);
        free(sorted);
    }
    MPI_Allreduce(times, tmax, (int)iterations, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(split, smax, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double per = 0;
    for (uint64_t i = 0; i < iterations; i++) per += tmax[i];
    per /= iterations;
    double mkeys = nkeys / per / 1e6;
    int ok = first_why[0] == 0;
    if (rank == 0) {
        if (json) {
            printf("{\"bench\":\"is\",\"impl\":\"mpi\",\"ranks\":%d,\"keys\":%llu,\"max_key\":%llu,"
                   "\"buckets\":%d,\"iterations\":%llu,\"seconds_per_iteration\":%.9g,"
                   "\"compute_s\":%.9g,\"comm_s\":%.9g,\"mkeys_per_s\":%.6g,\"key_sum\":%llu,"
                   "\"hash_sum\":%llu,\"verified\":%s,\"failure\":",
                   size, (unsigned long long)nkeys, (unsigned long long)max_key, buckets,
                   (unsigned long long)iterations, per, smax[0] / iterations,
                   smax[1] / iterations, mkeys, (unsigned long long)want[1],
                   (unsigned long long)want[2], ok ? "true" : "false");
            if (ok) printf("null}\n");
            else {
                putchar('"');
                for (const char *c = first_why; *c; c++) if (*c != '"' && *c != '\\') putchar(*c);
                printf("\"}\n");
            }
        } else {
            printf("IS (mpi): %d ranks, %llu keys, max key %llu, %d buckets, %llu iterations\n", size,
                   (unsigned long long)nkeys, (unsigned long long)max_key, buckets,
                   (unsigned long long)iterations);
            printf("IS (mpi): %.6f s per iteration (compute %.6f s, communication %.6f s), %.2f Mkeys/s\n",
                   per, smax[0] / iterations, smax[1] / iterations, mkeys);
            if (ok)
                printf("IS (mpi): verification SUCCESSFUL: keys sorted across ranks; count %llu, key sum "
                       "%llu, hash sum %#018llx preserved\n", (unsigned long long)want[0],
                       (unsigned long long)want[1], (unsigned long long)want[2]);
            else
                printf("IS (mpi): verification FAILED: %s\n", first_why);
        }
        fflush(stdout);
    } else if (!ok && !strstr(first_why, "another rank")) {
        fprintf(stderr, "mpi_is: rank %d: %s\n", rank, first_why);
    }
    free(keys); free(times); free(tmax);
    MPI_Finalize();
    return ok ? 0 : 1;
}
