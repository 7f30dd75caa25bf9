/* bench/mpi_cg.c: `hxcomm bench cg` (crates/bench/src/cg.rs) as a plain MPI program, for Open MPI
 * on its own transports or over the hxcomm libfabric provider. Same problem (5-point Laplacian
 * of an NX x NY grid plus a diagonal shift, rows by blocks of grid rows, b = A x_true), same CG
 * (halo rows by MPI_Isend/MPI_Irecv, dot products by MPI_Allreduce), same verification and the
 * same output, with "mpi" for "hxcomm".
 *
 *   mpicc -O2 -o mpi_cg bench/mpi_cg.c -lm
 *   mpirun -n 4 ./mpi_cg [--nx N] [--ny N | --rows-per-rank N] [--iterations N] [--tol T]
 *                        [--shift S] [--verify-tol T] [--json]
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;
static size_t nx, rows;
static double comm_time;

static void die(const char *msg) {
    if (rank == 0) fprintf(stderr, "mpi_cg: %s\n", msg);
    MPI_Finalize();
    exit(2);
}

static int parse_u64(const char *s, uint64_t *out) {
    char *end;
    if (!s || !*s || *s == '-') return 0;
    *out = strtoull(s, &end, 10);
    return *end == 0;
}

static int parse_f64(const char *s, double *out) {
    char *end;
    if (!s || !*s) return 0;
    *out = strtod(s, &end);
    return *end == 0;
}

static uint64_t mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double x_true(uint64_t g) {
    return (double)(mix(g) >> 11) * (1.0 / (double)(1ULL << 53)) * 2.0 - 1.0;
}

/* h has rows + 2 grid rows: halo, this rank's rows, halo. */
static void exchange_halo(double *h) {
    double t0 = MPI_Wtime();
    MPI_Request req[4];
    int n = 0;
    if (rank > 0) {
        MPI_Irecv(h, (int)nx, MPI_DOUBLE, rank - 1, 7, MPI_COMM_WORLD, &req[n++]);
        MPI_Isend(h + nx, (int)nx, MPI_DOUBLE, rank - 1, 7, MPI_COMM_WORLD, &req[n++]);
    }
    if (rank + 1 < size) {
        MPI_Irecv(h + (rows + 1) * nx, (int)nx, MPI_DOUBLE, rank + 1, 7, MPI_COMM_WORLD, &req[n++]);
        MPI_Isend(h + rows * nx, (int)nx, MPI_DOUBLE, rank + 1, 7, MPI_COMM_WORLD, &req[n++]);
    }
    MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    comm_time += MPI_Wtime() - t0;
}

static void matvec(const double *p, double shift, double *out) {
    double d = 4.0 + shift;
    for (size_t i = 0; i < rows; i++) {
        const double *up = p + i * nx, *c = p + (i + 1) * nx, *dn = p + (i + 2) * nx;
        double *o = out + i * nx;
        if (nx == 1) {
            o[0] = d * c[0] - up[0] - dn[0];
            continue;
        }
        o[0] = d * c[0] - up[0] - dn[0] - c[1];
        for (size_t j = 1; j < nx - 1; j++) o[j] = d * c[j] - up[j] - dn[j] - c[j - 1] - c[j + 1];
        o[nx - 1] = d * c[nx - 1] - up[nx - 1] - dn[nx - 1] - c[nx - 2];
    }
}

static double global_dot(const double *a, const double *b, size_t m) {
    double s = 0, g;
    for (size_t i = 0; i < m; i++) s += a[i] * b[i];
    double t0 = MPI_Wtime();
    MPI_Allreduce(&s, &g, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    comm_time += MPI_Wtime() - t0;
    return g;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    uint64_t onx = 1024, ony = 1024, rpr = 0, iterations = 100;
    double tol = 0, shift = 0.1, verify_tol = 1e-6;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--nx") && v) ok = parse_u64(argv[++i], &onx);
        else if (!strcmp(a, "--ny") && v) ok = parse_u64(argv[++i], &ony);
        else if (!strcmp(a, "--rows-per-rank") && v) ok = parse_u64(argv[++i], &rpr) && rpr > 0;
        else if (!strcmp(a, "--iterations") && v) ok = parse_u64(argv[++i], &iterations);
        else if (!strcmp(a, "--tol") && v) ok = parse_f64(argv[++i], &tol);
        else if (!strcmp(a, "--shift") && v) ok = parse_f64(argv[++i], &shift);
        else if (!strcmp(a, "--verify-tol") && v) ok = parse_f64(argv[++i], &verify_tol);
        else die("usage: mpi_cg [--nx N] [--ny N | --rows-per-rank N] [--iterations N] [--tol T] "
                 "[--shift S] [--verify-tol T] [--json]");
        if (!ok) {
            char msg[200];
            snprintf(msg, sizeof msg, "%s %s: not a valid value", a, argv[i]);
            die(msg);
        }
    }
    if (rpr) ony = rpr * (uint64_t)size;
    if (onx == 0) die("--nx must be at least 1");
    if (ony < (uint64_t)size) die("--ny: at least one grid row per rank");
    if (onx > (1ULL << 30) || ony > (1ULL << 36) || onx * ony > (1ULL << 36)) die("--nx x --ny: too large");
    if (!(isfinite(shift) && shift > 0)) die("--shift: must be above 0");
    if (iterations == 0 || iterations > 100000000) die("--iterations: from 1 to 10^8");
    if (!(isfinite(tol) && tol >= 0)) die("--tol: must be 0 or above");
    if (!(isfinite(verify_tol) && verify_tol > 0)) die("--verify-tol: must be above 0");

    nx = onx;
    uint64_t r0 = ony * rank / size, r1 = ony * (rank + 1) / size;
    rows = r1 - r0;
    size_t m = nx * rows, first = r0 * nx;
    double *xt = malloc(m * 8), *b = malloc(m * 8), *x = calloc(m, 8), *r = malloc(m * 8);
    double *q = malloc(m * 8), *ph = calloc((rows + 2) * nx, 8), *p = ph + nx;
    for (size_t i = 0; i < m; i++) xt[i] = x_true(first + i);
    memcpy(p, xt, m * 8);
    exchange_halo(ph);
    matvec(ph, shift, b);

    memcpy(r, b, m * 8);
    memset(ph, 0, (rows + 2) * nx * 8);
    memcpy(p, r, m * 8);
    double rr = global_dot(r, r, m), bnorm = sqrt(rr);
    MPI_Barrier(MPI_COMM_WORLD);
    comm_time = 0;
    double t0 = MPI_Wtime();
    uint64_t done = 0;
    while (done < iterations) {
        exchange_halo(ph);
        matvec(ph, shift, q);
        double pq = global_dot(p, q, m);
        /* Converged to the last bit (the same on every rank): another step would divide by 0. */
        if (!(pq > 0 && rr > 0)) break;
        double alpha = rr / pq;
        for (size_t i = 0; i < m; i++) {
            x[i] += alpha * p[i];
            r[i] -= alpha * q[i];
        }
        double rr_new = global_dot(r, r, m), beta = rr_new / rr;
        rr = rr_new;
        for (size_t i = 0; i < m; i++) p[i] = r[i] + beta * p[i];
        done++;
        if (sqrt(rr) <= tol * bnorm) break;
    }
    double total = MPI_Wtime() - t0;
    double times[3] = {total, total - comm_time, comm_time}, tmax[3];
    MPI_Allreduce(times, tmax, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    memset(ph, 0, (rows + 2) * nx * 8);
    memcpy(p, x, m * 8);
    exchange_halo(ph);
    matvec(ph, shift, q);
    double sums[3] = {0, 0, 0}, tot[3];
    for (size_t i = 0; i < m; i++) {
        double res = b[i] - q[i], err = x[i] - xt[i];
        sums[0] += res * res;
        sums[1] += err * err;
        sums[2] += xt[i] * xt[i];
    }
    MPI_Allreduce(sums, tot, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double res = sqrt(tot[0]), err = sqrt(tot[1]), xnorm = sqrt(tot[2]);
    double residual = res / bnorm, recurrence = sqrt(rr) / bnorm, error = err / xnorm;
    double bound = res / shift / xnorm;
    double mine[3] = {residual, error, recurrence}, *all = malloc(3 * size * 8);
    MPI_Allgather(mine, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, MPI_COMM_WORLD);
    char why[400] = "";
    for (int k = 0; k < size && !why[0]; k++)
        if (memcmp(all + 3 * k, mine, sizeof mine))
            snprintf(why, sizeof why, "rank %d has other norms than rank %d: [%.17g, %.17g, %.17g] vs "
                     "[%.17g, %.17g, %.17g]", k, rank, all[3 * k], all[3 * k + 1], all[3 * k + 2],
                     residual, error, recurrence);
    if (!why[0] && (isnan(residual) || residual > verify_tol))
        snprintf(why, sizeof why, "||b - Ax|| / ||b|| = %e after %llu iterations, above --verify-tol %e "
                 "(more --iterations?)", residual, (unsigned long long)done, verify_tol);
    if (!why[0] && (isnan(error) || error > bound * (1.0 + 1e-6) + 1e-12))
        snprintf(why, sizeof why, "||x - x_true|| / ||x_true|| = %e, above the %e the residual allows",
                 error, bound);
    int ok = !why[0];
    double dn = done ? (double)done : 1.0;
    double per = tmax[0] / dn, cs = tmax[1] / dn, cm = tmax[2] / dn;
    double nrows = (double)nx * (double)ony;
    double nnz = nrows + 2.0 * ony * (nx - 1) + 2.0 * nx * (ony - 1);
    double mflops = (nnz + 10.0 * nrows) / per / 1e6;
    if (rank == 0) {
        if (json) {
            printf("{\"bench\":\"cg\",\"impl\":\"mpi\",\"ranks\":%d,\"nx\":%zu,\"ny\":%llu,\"rows\":%.0f,"
                   "\"nonzeros\":%.0f,\"shift\":%.17g,\"iterations\":%llu,\"seconds_per_iteration\":%.9g,"
                   "\"compute_s\":%.9g,\"comm_s\":%.9g,\"mflops\":%.6g,\"residual\":%.17g,"
                   "\"recurrence_residual\":%.17g,\"error\":%.17g,\"error_bound\":%.17g,"
                   "\"verified\":%s,\"failure\":",
                   size, nx, (unsigned long long)ony, nrows, nnz, shift, (unsigned long long)done, per,
                   cs, cm, mflops, residual, recurrence, error, bound, ok ? "true" : "false");
            if (ok) printf("null}\n");
            else {
                putchar('"');
                for (const char *c = why; *c; c++) if (*c != '"' && *c != '\\') putchar(*c);
                printf("\"}\n");
            }
        } else {
            printf("CG (mpi): %d ranks, %zu x %llu grid, %.0f rows, %.0f nonzeros, shift %g, %llu iterations\n",
                   size, nx, (unsigned long long)ony, nrows, nnz, shift, (unsigned long long)done);
            printf("CG (mpi): %.6f s per iteration (compute %.6f s, communication %.6f s), %.1f Mflop/s\n",
                   per, cs, cm, mflops);
            if (ok)
                printf("CG (mpi): verification SUCCESSFUL: ||b-Ax||/||b|| = %.3e (recurrence %.3e), "
                       "||x-x_true||/||x_true|| = %.3e (bound %.3e), equal on every rank\n",
                       residual, recurrence, error, bound);
            else
                printf("CG (mpi): verification FAILED: %s\n", why);
        }
        fflush(stdout);
    }
    free(xt); free(b); free(x); free(r); free(q); free(ph); free(all);
    MPI_Finalize();
    return ok ? 0 : 1;
}
