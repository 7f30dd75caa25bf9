/*
 * tests/mpi/correctness.c -- MPI correctness program for any number of ranks >= 2.
 *
 * Written to be run over hxcomm's libfabric provider (Open MPI pml cm + mtl ofi) and validated
 * against Open MPI's default transports (ob1 with vader/tcp/self): if it fails under the provider,
 * suspect the provider, not this program.  It uses only standard MPI-3 calls, contiguous MPI_BYTE
 * / MPI_INT / MPI_DOUBLE buffers, and never Mprobe/Mrecv of a synchronous send (Open MPI 4.1 bug).
 *
 * Build:  mpicc -std=c99 -O2 -Wall -Wextra -Werror -o correctness correctness.c
 * Run:    mpirun -np 4 ./correctness [SEED]
 *
 * Deterministic from a seed: argv[1], else $HXMPI_SEED, else 20240601.  The traffic plan, sizes,
 * tags, payloads and every receive-side choice derive from it (only the timing of arrivals,
 * hence which message a wildcard receive gets, varies; the checks allow for that).
 * Other environment knobs:
 *   HXMPI_ROUNDS=N     random point-to-point rounds (default 6)
 *   HXMPI_BIG_MB=N     size of the big message between rank 0 and the last rank (default 64)
 *   HXMPI_NO_SELF=1    no messages to self in the random traffic (default: ~4% go to self)
 *   HXMPI_TRUNC_LARGE=1 also truncate messages past the eager limit (crashes Open MPI 4.1 ob1)
 *   HXMPI_TIMEOUT=S    watchdog: a rank stuck longer than S seconds prints FAIL and exits (180)
 *   HXMPI_INJECT=corrupt|swaptag|reorder|drop|coll  break the program on purpose (negative
 *                      control: the run must FAIL; drop must hit the watchdog)
 *   HXMPI_SKIP=a,b     leave out groups of checks: zero random sync probe cancel big isolation
 *                      barrier coll trunc (the OK line then lists what was skipped)
 *   HXMPI_VERBOSE=1    rank 0 prints each phase with a timestamp
 *
 * Every failed check prints one line to stdout
 *   FAIL rank R/N phase P seed S: <what> (peer, tag, size, offset, expected and got)
 * and ends the job with MPI_Abort (exit code non-zero).  On success rank 0 prints one line
 *   OK correctness.c ranks=N seed=S ...
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GUARD 64
#define GUARD_BYTE 0xA5
#define NTAGS 7
#define MAX_RANDOM_SIZE (384u * 1024u)
#define BATCH_MAX 8
#define PREPOST_MAX 8
#define NSLOTS (1 + BATCH_MAX + PREPOST_MAX)

static const int TAGS[NTAGS] = {0, 1, 2, 3, 7, 1000, 32767};
static const size_t BOUNDARY[] = {4095,  4096,  4097,  8191,  8192,  8193,   12287,
                                  12288, 12289, 16383, 16384, 16385, 32767,  32768,
                                  32769, 65535, 65536, 65537, 131073, 262145};
#define NBOUNDARY (sizeof BOUNDARY / sizeof BOUNDARY[0])

enum {
    TAG_ZERO = 30000,
    TAG_NEVER = 30001,
    TAG_CANCEL = 30002,
    TAG_SYNC = 30003,
    TAG_GO = 30004,
    TAG_MP = 30005,
    TAG_MP2 = 30006,
    TAG_SS = 30007,
    TAG_SR = 30008,
    TAG_BIG = 30009,
    TAG_ISO = 5, /* deliberately a tag the random traffic also uses, on other communicators */
    TAG_TRUNC = 30010,
    TAG_AFTER = 30011,
    TAG_PROBE = 30012,
    TAG_ZERO_RING = 30013,
};

/* communicator ids, mixed into payload keys */
enum { CID_WORLD = 1, CID_DUP = 2, CID_SPLIT = 3, CID_SPLITDUP = 4, CID_TRUNC = 5 };

static int g_rank, g_size;
static uint64_t g_seed = 20240601;
static const char *g_phase = "init";
static int g_verbose;
static double g_t0;
static char g_alarm_msg[256];
static size_t g_alarm_len;
static uint64_t g_msgs, g_bytes;
/* receive paths taken by the random traffic: Recv, Probe, Iprobe, Mprobe, Improbe, batches,
 * Irecv+Test, pre-posted Irecvs, wildcard receives, synchronous sends */
#define NOPS 10
static uint64_t g_ops[NOPS];
static const char *const OP_NAMES[NOPS] = {"recv", "probe", "iprobe", "mprobe", "improbe",
                                           "irecv-batch", "irecv-test", "pre-posted",
                                           "wildcard", "issend"};

/* ------------------------------------------------------------------ failure reporting */

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("FAIL rank %d/%d phase %s seed %" PRIu64 ": %s\n", g_rank, g_size, g_phase, g_seed,
           msg);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

#define MPI_CHECK(call)                                                                      \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != MPI_SUCCESS) {                                                            \
            char es_[MPI_MAX_ERROR_STRING];                                                  \
            int l_ = 0, cls_ = -1;                                                           \
            MPI_Error_string(rc_, es_, &l_);                                                 \
            MPI_Error_class(rc_, &cls_);                                                     \
            fail("%s returned %d (class %d: %s) at %s:%d", #call, rc_, cls_, es_, __FILE__, \
                 __LINE__);                                                                  \
        }                                                                                    \
    } while (0)

static void on_alarm(int sig)
{
    (void)sig;
    ssize_t w = write(1, g_alarm_msg, g_alarm_len);
    (void)w;
    _exit(3);
}

static int g_timeout = 180;

static void set_phase(const char *p)
{
    g_phase = p;
    int n = snprintf(g_alarm_msg, sizeof g_alarm_msg,
                     "FAIL rank %d/%d phase %s seed %" PRIu64
                     ": watchdog timeout after %d s (hang?)\n",
                     g_rank, g_size, p, g_seed, g_timeout);
    g_alarm_len = n < 0 ? 0 : ((size_t)n < sizeof g_alarm_msg ? (size_t)n : sizeof g_alarm_msg - 1);
    if (g_verbose && g_rank == 0) {
        printf("[%8.3f] phase %s\n", MPI_Wtime() - g_t0, p);
        fflush(stdout);
    }
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) fail("out of memory allocating %zu bytes", n);
    return p;
}

/* ------------------------------------------------------------------ deterministic randomness */

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r) { return mix64(r->s += 0x9E3779B97F4A7C15ull); }
static uint64_t rng_below(rng_t *r, uint64_t n) { return n ? rng_next(r) % n : 0; }

static uint64_t key5(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e)
{
    uint64_t k = mix64(g_seed ^ 0x6A09E667F3BCC909ull);
    k = mix64(k ^ (a + 0x1000));
    k = mix64(k ^ (b + 0x2000000));
    k = mix64(k ^ (c + 0x30000000000ull));
    k = mix64(k ^ (d + 0x4000000000000ull));
    k = mix64(k ^ (e + 0x5000000000000000ull));
    return k;
}

static rng_t rng_for(uint64_t a, uint64_t b, uint64_t c)
{
    rng_t r = {key5(0xABCDEF, a, b, c, 0)};
    return r;
}

/* payload pattern: byte at offset o of the buffer with key k */
static inline unsigned char pat_byte(uint64_t key, size_t off)
{
    return (unsigned char)(mix64(key + (off >> 3)) >> (8 * (off & 7)));
}

static void fill_pattern(unsigned char *b, size_t len, uint64_t key)
{
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = mix64(key + (i >> 3));
        for (int k = 0; k < 8; k++) b[i + k] = (unsigned char)(w >> (8 * k));
    }
    if (i < len) {
        uint64_t w = mix64(key + (i >> 3));
        for (size_t k = 0; i + k < len; k++) b[i + k] = (unsigned char)(w >> (8 * k));
    }
}

/* first offset in [from, len) that does not match, or SIZE_MAX */
static size_t check_pattern(const unsigned char *b, size_t len, uint64_t key, size_t from)
{
    size_t i = from;
    while (i < len) {
        size_t wi = i >> 3;
        uint64_t w = mix64(key + wi);
        size_t end = (wi + 1) * 8;
        if (end > len) end = len;
        for (; i < end; i++)
            if (b[i] != (unsigned char)(w >> (8 * (i & 7)))) return i;
    }
    return SIZE_MAX;
}

static size_t check_guard(const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != GUARD_BYTE) return i;
    return SIZE_MAX;
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* check a plain patterned buffer (no header), plus GUARD bytes after it if guard != 0 */
static void expect_pattern(const char *what, const unsigned char *b, size_t len, uint64_t key,
                           int peer, int tag, int guard)
{
    size_t off = check_pattern(b, len, key, 0);
    if (off != SIZE_MAX)
        fail("%s: data mismatch peer=%d tag=%d size=%zu offset=%zu got=0x%02x expected=0x%02x",
             what, peer, tag, len, off, b[off], pat_byte(key, off));
    if (guard) {
        size_t g = check_guard(b + len, GUARD);
        if (g != SIZE_MAX)
            fail("%s: receive wrote past the end of the message: peer=%d tag=%d size=%zu "
                 "offset=%zu got=0x%02x",
                 what, peer, tag, len, len + g, b[len + g]);
    }
}

static void expect_status(const char *what, const MPI_Status *st, int src, int tag, size_t size)
{
    int count = -1;
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &count));
    if ((src != MPI_ANY_SOURCE && st->MPI_SOURCE != src) ||
        (tag != MPI_ANY_TAG && st->MPI_TAG != tag) || count < 0 || (size_t)count != size)
        fail("%s: status mismatch: expected source=%d tag=%d count=%zu, got source=%d tag=%d "
             "count=%d",
             what, src, tag, size, st->MPI_SOURCE, st->MPI_TAG, count);
}

/* ------------------------------------------------------------------ random tagged traffic */

typedef struct {
    int src, dst, tag, tagi, sync, persistent;
    uint32_t idx, seq;
    size_t size;
} msg_t;

typedef struct {
    msg_t **m;
    int n, claim; /* messages in non-overtaking order; claim = next one a new receive gets */
} stream_t;

typedef struct {
    MPI_Comm comm;
    int cid, round;
    int me, n; /* rank and size in comm */
    const char *cname;
    stream_t *streams; /* [src * NTAGS + tagi] */
    long unclaimed;
    size_t cap;
    unsigned char *slots[NSLOTS];
    rng_t rr;
} rx_t;

static int no_self, trunc_large;

static size_t rand_size(rng_t *r)
{
    uint64_t c = rng_below(r, 100);
    if (c < 8) return 0;
    if (c < 40) return (size_t)rng_below(r, 65);
    if (c < 70) return 65 + (size_t)rng_below(r, 4096 - 65 + 1);
    if (c < 90) return 4097 + (size_t)rng_below(r, 65536 - 4097 + 1);
    return 65537 + (size_t)rng_below(r, MAX_RANDOM_SIZE - 65537 + 1);
}

static int rand_tagi(rng_t *r)
{
    static const int w[16] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 5, 6, 6};
    return w[rng_below(r, 16)];
}

static uint64_t msg_key(const rx_t *x, const msg_t *m)
{
    return key5((uint64_t)x->round, (uint64_t)x->cid, (uint64_t)m->src, (uint64_t)m->dst, m->idx);
}

static void describe_header(const unsigned char *b, size_t count, char *out, size_t outsz)
{
    if (count >= 16)
        snprintf(out, outsz,
                 "; its payload header says src=%u dst=%u tag=%u round=%u msgidx=%u seq=%u",
                 get32(b) & 0xFFFF, get32(b) >> 16, get32(b + 4) & 0xFFFF, get32(b + 4) >> 16,
                 get32(b + 8), get32(b + 12));
    else
        snprintf(out, outsz, "; too short for a payload header");
}

static void verify_msg(rx_t *x, const msg_t *m, const unsigned char *buf, const MPI_Status *st,
                       const char *how)
{
    int count = -1;
    char hdr[256];
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &count));
    if (st->MPI_SOURCE != m->src || st->MPI_TAG != m->tag || count < 0 ||
        (size_t)count != m->size) {
        describe_header(buf, count < 0 ? 0 : (size_t)count, hdr, sizeof hdr);
        fail("p2p %s comm=%s round=%d: expected msg src=%d dst=%d tag=%d size=%zu msgidx=%u "
             "seq=%u, got status source=%d tag=%d count=%d%s",
             how, x->cname, x->round, m->src, m->dst, m->tag, m->size, m->idx, m->seq,
             st->MPI_SOURCE, st->MPI_TAG, count, hdr);
    }
    size_t from = 0;
    if (m->size >= 16) {
        uint32_t a = get32(buf), b = get32(buf + 4), idx = get32(buf + 8), seq = get32(buf + 12);
        if (a != ((uint32_t)m->src | (uint32_t)m->dst << 16) ||
            b != ((uint32_t)m->tag | (uint32_t)x->round << 16) || idx != m->idx || seq != m->seq) {
            describe_header(buf, m->size, hdr, sizeof hdr);
            fail("p2p %s comm=%s round=%d: wrong message (misplaced or overtaken): expected "
                 "src=%d dst=%d tag=%d size=%zu msgidx=%u seq=%u%s",
                 how, x->cname, x->round, m->src, m->dst, m->tag, m->size, m->idx, m->seq, hdr);
        }
        from = 16;
    }
    uint64_t key = msg_key(x, m);
    size_t off = check_pattern(buf, m->size, key, from);
    if (off != SIZE_MAX)
        fail("p2p %s comm=%s round=%d: data mismatch src=%d dst=%d tag=%d size=%zu msgidx=%u "
             "seq=%u offset=%zu got=0x%02x expected=0x%02x",
             how, x->cname, x->round, m->src, m->dst, m->tag, m->size, m->idx, m->seq, off,
             buf[off], pat_byte(key, off));
    size_t g = check_guard(buf + m->size, GUARD);
    if (g != SIZE_MAX)
        fail("p2p %s comm=%s round=%d: receive wrote past the end of the message src=%d tag=%d "
             "size=%zu offset=%zu got=0x%02x",
             how, x->cname, x->round, m->src, m->tag, m->size, m->size + g, buf[m->size + g]);
    g_msgs++;
    g_bytes += m->size;
}

static int tag_index(int tag)
{
    for (int i = 0; i < NTAGS; i++)
        if (TAGS[i] == tag) return i;
    return -1;
}

/* the message a receive that matched (src, tag) must have got: next unclaimed in that stream */
static msg_t *claim(rx_t *x, int src, int tag, const char *how)
{
    int ti = tag_index(tag);
    if (src < 0 || src >= x->n || ti < 0)
        fail("p2p %s comm=%s round=%d: message with impossible source=%d tag=%d", how, x->cname,
             x->round, src, tag);
    stream_t *s = &x->streams[src * NTAGS + ti];
    if (s->claim >= s->n)
        fail("p2p %s comm=%s round=%d: extra message from src=%d tag=%d: all %d expected "
             "already received (duplicate?)",
             how, x->cname, x->round, src, tag, s->n);
    x->unclaimed--;
    return s->m[s->claim++];
}

/* pick (src, tag) of a random unclaimed message, weighted by message */
static void pick(rx_t *x, int *src, int *tag)
{
    long k = (long)rng_below(&x->rr, (uint64_t)x->unclaimed);
    for (int i = 0; i < x->n * NTAGS; i++) {
        stream_t *s = &x->streams[i];
        long left = s->n - s->claim;
        if (k < left) {
            *src = i / NTAGS;
            *tag = TAGS[i % NTAGS];
            return;
        }
        k -= left;
    }
    fail("internal: pick() found nothing (unclaimed=%ld)", x->unclaimed);
}

/* receive spec for mode: 0 exact, 1 ANY_SOURCE, 2 ANY_TAG, 3 both wildcards */
static void pick_spec(rx_t *x, int mode, int *src, int *tag)
{
    pick(x, src, tag);
    if (mode == 1 || mode == 3) *src = MPI_ANY_SOURCE;
    if (mode == 2 || mode == 3) *tag = MPI_ANY_TAG;
}

static const char *mode_name(int src, int tag)
{
    if (src == MPI_ANY_SOURCE && tag == MPI_ANY_TAG) return "any-source/any-tag";
    if (src == MPI_ANY_SOURCE) return "any-source";
    if (tag == MPI_ANY_TAG) return "any-tag";
    return "exact";
}

/* can a matched probe for (src, tag) hit a synchronous send?  (Open MPI 4.1 bug: avoid) */
static int mprobe_ok(rx_t *x, int src, int tag)
{
    for (int i = 0; i < x->n * NTAGS; i++) {
        stream_t *s = &x->streams[i];
        if (s->claim >= s->n) continue;
        if (src != MPI_ANY_SOURCE && i / NTAGS != src) continue;
        if (tag != MPI_ANY_TAG && TAGS[i % NTAGS] != tag) continue;
        if (s->m[s->claim]->sync) return 0;
    }
    return 1;
}

static void check_spec(rx_t *x, const MPI_Status *st, int src, int tag, const char *how)
{
    if ((src != MPI_ANY_SOURCE && st->MPI_SOURCE != src) ||
        (tag != MPI_ANY_TAG && st->MPI_TAG != tag))
        fail("p2p %s comm=%s round=%d: receive for source=%d tag=%d matched source=%d tag=%d",
             how, x->cname, x->round, src, tag, st->MPI_SOURCE, st->MPI_TAG);
}

static unsigned char *fresh(rx_t *x, int slot)
{
    memset(x->slots[slot], GUARD_BYTE, x->cap + GUARD);
    return x->slots[slot];
}

static void get_count(const MPI_Status *st, size_t *out)
{
    int c = -1;
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &c));
    if (c < 0) fail("MPI_Get_count gave %d", c);
    *out = (size_t)c;
}

/* a probe reported the wrong size: receive the probed message anyway, to say which it was */
static void probe_mismatch(rx_t *x, const char *how, size_t n, const MPI_Status *ps,
                           const msg_t *m, MPI_Message *mh)
{
    char hdr[256];
    MPI_Status st;
    unsigned char *b = fresh(x, 0);
    if (mh)
        MPI_Mrecv(b, (int)x->cap, MPI_BYTE, mh, &st);
    else
        MPI_Recv(b, (int)x->cap, MPI_BYTE, ps->MPI_SOURCE, ps->MPI_TAG, x->comm, &st);
    describe_header(b, n, hdr, sizeof hdr);
    fail("p2p %s comm=%s round=%d: probe reports size %zu from src=%d tag=%d, but the next "
         "message of that (source, tag) is msgidx=%u seq=%u size=%zu (overtaking or "
         "misplacement?)%s",
         how, x->cname, x->round, n, ps->MPI_SOURCE, ps->MPI_TAG, m->idx, m->seq, m->size, hdr);
}

static void rx_step(rx_t *x)
{
    MPI_Comm c = x->comm;
    MPI_Status st;
    int src, tag, flag = 0;
    unsigned op = (unsigned)rng_below(&x->rr, 10);
    int mode = (int)rng_below(&x->rr, 4);
    char how[96];

    if ((op == 4 || op == 5)) {
        pick_spec(x, mode, &src, &tag);
        if (!mprobe_ok(x, src, tag)) op = 2; /* fall back to a plain probe */
    } else if (op != 6 && op != 7) {
        pick_spec(x, mode, &src, &tag);
    }

    static const int opk[10] = {0, 0, 1, 2, 3, 4, 5, 5, 6, 6};
    g_ops[opk[op]]++;
    if (op != 6 && op != 7 && (src == MPI_ANY_SOURCE || tag == MPI_ANY_TAG)) g_ops[8]++;
    switch (op) {
    case 0:
    case 1: { /* blocking receive into a buffer larger than any message */
        unsigned char *b = fresh(x, 0);
        snprintf(how, sizeof how, "MPI_Recv(%s)", mode_name(src, tag));
        MPI_CHECK(MPI_Recv(b, (int)x->cap, MPI_BYTE, src, tag, c, &st));
        check_spec(x, &st, src, tag, how);
        verify_msg(x, claim(x, st.MPI_SOURCE, st.MPI_TAG, how), b, &st, how);
        break;
    }
    case 2:
    case 3: { /* probe / iprobe, then receive exactly the probed size from (source, tag) */
        MPI_Status ps;
        size_t n;
        if (op == 2) {
            snprintf(how, sizeof how, "MPI_Probe(%s)+MPI_Recv", mode_name(src, tag));
            MPI_CHECK(MPI_Probe(src, tag, c, &ps));
        } else {
            snprintf(how, sizeof how, "MPI_Iprobe(%s)+MPI_Recv", mode_name(src, tag));
            while (!flag) MPI_CHECK(MPI_Iprobe(src, tag, c, &flag, &ps));
        }
        check_spec(x, &ps, src, tag, how);
        get_count(&ps, &n);
        msg_t *m = claim(x, ps.MPI_SOURCE, ps.MPI_TAG, how);
        if (n != m->size) probe_mismatch(x, how, n, &ps, m, NULL);
        unsigned char *b = fresh(x, 0);
        MPI_CHECK(MPI_Recv(b, (int)n, MPI_BYTE, ps.MPI_SOURCE, ps.MPI_TAG, c, &st));
        verify_msg(x, m, b, &st, how);
        break;
    }
    case 4:
    case 5: { /* matched probe + Mrecv / Imrecv */
        MPI_Message mh = MPI_MESSAGE_NULL;
        MPI_Status ps;
        size_t n;
        if (op == 4) {
            snprintf(how, sizeof how, "MPI_Mprobe(%s)+MPI_Mrecv", mode_name(src, tag));
            MPI_CHECK(MPI_Mprobe(src, tag, c, &mh, &ps));
        } else {
            snprintf(how, sizeof how, "MPI_Improbe(%s)+MPI_Imrecv", mode_name(src, tag));
            while (!flag) MPI_CHECK(MPI_Improbe(src, tag, c, &flag, &mh, &ps));
        }
        check_spec(x, &ps, src, tag, how);
        get_count(&ps, &n);
        msg_t *m = claim(x, ps.MPI_SOURCE, ps.MPI_TAG, how);
        if (n != m->size) probe_mismatch(x, how, n, &ps, m, &mh);
        unsigned char *b = fresh(x, 0);
        if (op == 4) {
            MPI_CHECK(MPI_Mrecv(b, (int)x->cap, MPI_BYTE, &mh, &st));
        } else {
            MPI_Request rq;
            MPI_CHECK(MPI_Imrecv(b, (int)x->cap, MPI_BYTE, &mh, &rq));
            MPI_CHECK(MPI_Wait(&rq, &st));
        }
        if (mh != MPI_MESSAGE_NULL) fail("%s: message handle not reset to MPI_MESSAGE_NULL", how);
        verify_msg(x, m, b, &st, how);
        break;
    }
    case 6:
    case 7: { /* a batch of exact Irecvs (claimed at post), then any/any Irecvs */
        MPI_Request rq[BATCH_MAX];
        MPI_Status sts[BATCH_MAX];
        msg_t *pre[BATCH_MAX];
        int ne = 1 + (int)rng_below(&x->rr, 4), nw, nr = 0;
        for (int i = 0; i < ne && x->unclaimed > 0; i++) {
            pick(x, &src, &tag);
            pre[nr] = claim(x, src, tag, "batch MPI_Irecv(exact)");
            size_t cap = rng_below(&x->rr, 2) ? pre[nr]->size : x->cap;
            MPI_CHECK(MPI_Irecv(fresh(x, 1 + nr), (int)cap, MPI_BYTE, src, tag, c, &rq[nr]));
            nr++;
        }
        nw = (int)rng_below(&x->rr, 4);
        if (nw > x->unclaimed) nw = (int)x->unclaimed;
        g_ops[8] += (uint64_t)nw;
        for (int i = 0; i < nw; i++) {
            pre[nr] = NULL;
            MPI_CHECK(MPI_Irecv(fresh(x, 1 + nr), (int)x->cap, MPI_BYTE, MPI_ANY_SOURCE,
                                MPI_ANY_TAG, c, &rq[nr]));
            nr++;
        }
        const char *cmpl;
        switch (rng_below(&x->rr, 3)) {
        case 0:
            cmpl = "Waitall";
            MPI_CHECK(MPI_Waitall(nr, rq, sts));
            break;
        case 1:
            cmpl = "Waitany";
            for (int done = 0; done < nr; done++) {
                int idx;
                MPI_Status s1;
                MPI_CHECK(MPI_Waitany(nr, rq, &idx, &s1));
                if (idx == MPI_UNDEFINED) fail("MPI_Waitany returned MPI_UNDEFINED early");
                sts[idx] = s1;
            }
            break;
        default:
            cmpl = "Testsome";
            for (int done = 0; done < nr;) {
                int outc, idx[BATCH_MAX];
                MPI_Status s1[BATCH_MAX];
                MPI_CHECK(MPI_Testsome(nr, rq, &outc, idx, s1));
                if (outc == MPI_UNDEFINED) fail("MPI_Testsome returned MPI_UNDEFINED early");
                for (int k = 0; k < outc; k++) sts[idx[k]] = s1[k];
                done += outc;
            }
            break;
        }
        /* verify in posting order: wildcards claim in posting order (non-overtaking) */
        for (int i = 0; i < nr; i++) {
            snprintf(how, sizeof how, "batch MPI_Irecv(%s)+%s", pre[i] ? "exact" : "any/any",
                     cmpl);
            msg_t *m = pre[i] ? pre[i] : claim(x, sts[i].MPI_SOURCE, sts[i].MPI_TAG, how);
            verify_msg(x, m, x->slots[1 + i], &sts[i], how);
        }
        break;
    }
    default: { /* single Irecv completed by a Test loop */
        MPI_Request rq;
        unsigned char *b = fresh(x, 0);
        snprintf(how, sizeof how, "MPI_Irecv(%s)+MPI_Test", mode_name(src, tag));
        MPI_CHECK(MPI_Irecv(b, (int)x->cap, MPI_BYTE, src, tag, c, &rq));
        while (!flag) MPI_CHECK(MPI_Test(&rq, &flag, &st));
        check_spec(x, &st, src, tag, how);
        verify_msg(x, claim(x, st.MPI_SOURCE, st.MPI_TAG, how), b, &st, how);
        break;
    }
    }
}

/* HXMPI_INJECT: deliberately break the program, to prove the checks catch it (negative
 * control).  Applied by world rank 0 to its own sends in round 0 of the random traffic, or
 * (coll) to one Allreduce input. */
static const char *inject;

static void inject_fault(msg_t *ms, int ns, unsigned char **sbuf, int *order, int *stag)
{
    if (!strcmp(inject, "corrupt")) { /* flip one payload byte */
        for (int i = 0; i < ns; i++)
            if (ms[i].size >= 100) {
                sbuf[i][ms[i].size / 2] ^= 0x01;
                return;
            }
    } else if (!strcmp(inject, "swaptag")) { /* two messages to one peer swap tags */
        for (int i = 0; i < ns; i++)
            for (int j = i + 1; j < ns; j++)
                if (ms[i].dst == ms[j].dst && ms[i].tag != ms[j].tag) {
                    stag[i] = ms[j].tag;
                    stag[j] = ms[i].tag;
                    return;
                }
    } else if (!strcmp(inject, "reorder")) { /* two messages of one stream sent out of order */
        for (int i = 0; i < ns; i++)
            for (int j = i + 1; j < ns; j++)
                if (ms[i].dst == ms[j].dst && ms[i].tag == ms[j].tag) {
                    order[i] = j;
                    order[j] = i;
                    return;
                }
    } else if (!strcmp(inject, "drop")) { /* the last message (last of its stream) is never
                                             * sent: its receiver must hang -> watchdog */
        order[ns - 1] = -1;
        return;
    } else if (!strcmp(inject, "coll")) {
        return;
    }
    fail("HXMPI_INJECT=%s: unknown or not applicable (corrupt|swaptag|reorder|drop|coll)", inject);
}

static void random_round(MPI_Comm comm, int cid, const char *cname, int round)
{
    int n, me;
    MPI_CHECK(MPI_Comm_rank(comm, &me));
    MPI_CHECK(MPI_Comm_size(comm, &n));
    rx_t x;
    memset(&x, 0, sizeof x);
    x.comm = comm;
    x.cid = cid;
    x.cname = cname;
    x.round = round;
    x.me = me;
    x.n = n;
    x.rr = rng_for(1, (uint64_t)round, (uint64_t)me);

    /* the whole plan, identical on every rank */
    msg_t **plan = xmalloc(sizeof *plan * (size_t)n);
    int *cnt = xmalloc(sizeof *cnt * (size_t)n);
    int *seqc = xmalloc(sizeof *seqc * (size_t)n * NTAGS);
    for (int s = 0; s < n; s++) {
        rng_t r = rng_for(2, (uint64_t)round, (uint64_t)s);
        int nrand = 16 + (int)rng_below(&r, 32);
        int total = nrand + (int)NBOUNDARY;
        plan[s] = xmalloc(sizeof(msg_t) * (size_t)total);
        cnt[s] = total;
        size_t *sizes = xmalloc(sizeof(size_t) * (size_t)total);
        for (int i = 0; i < nrand; i++) sizes[i] = rand_size(&r);
        for (size_t i = 0; i < NBOUNDARY; i++) sizes[nrand + (int)i] = BOUNDARY[i];
        for (int i = total - 1; i > 0; i--) { /* shuffle */
            int j = (int)rng_below(&r, (uint64_t)i + 1);
            size_t t = sizes[i];
            sizes[i] = sizes[j];
            sizes[j] = t;
        }
        memset(seqc, 0, sizeof *seqc * (size_t)n * NTAGS);
        for (int i = 0; i < total; i++) {
            msg_t *m = &plan[s][i];
            m->src = s;
            if (!no_self && rng_below(&r, 25) == 0)
                m->dst = s;
            else
                m->dst = (s + 1 + (int)rng_below(&r, (uint64_t)n - 1)) % n;
            m->tagi = rand_tagi(&r);
            m->tag = TAGS[m->tagi];
            m->sync = rng_below(&r, 5) == 0;
            m->persistent = rng_below(&r, 8) == 0;
            m->idx = (uint32_t)i;
            m->seq = (uint32_t)seqc[m->dst * NTAGS + m->tagi]++;
            m->size = sizes[i];
        }
        free(sizes);
    }
    free(seqc);

    /* my receive streams, in non-overtaking order */
    x.streams = calloc((size_t)n * NTAGS, sizeof(stream_t));
    if (!x.streams) fail("out of memory");
    for (int s = 0; s < n; s++)
        for (int i = 0; i < cnt[s]; i++)
            if (plan[s][i].dst == me) {
                stream_t *st = &x.streams[s * NTAGS + plan[s][i].tagi];
                st->m = realloc(st->m, sizeof(msg_t *) * (size_t)(st->n + 1));
                if (!st->m) fail("out of memory");
                st->m[st->n++] = &plan[s][i];
                x.unclaimed++;
                if (plan[s][i].size > x.cap) x.cap = plan[s][i].size;
            }
    for (int i = 0; i < NSLOTS; i++) x.slots[i] = xmalloc(x.cap + GUARD);

    /* pre-post some exact receives before sending (expected-queue path) */
    MPI_Request pre_rq[PREPOST_MAX];
    msg_t *pre_m[PREPOST_MAX];
    int npre = (int)rng_below(&x.rr, PREPOST_MAX + 1);
    if (npre > x.unclaimed) npre = (int)x.unclaimed;
    for (int i = 0; i < npre; i++) {
        int src, tag;
        pick(&x, &src, &tag);
        pre_m[i] = claim(&x, src, tag, "pre-posted MPI_Irecv");
        g_ops[7]++;
        MPI_CHECK(MPI_Irecv(fresh(&x, 1 + BATCH_MAX + i), (int)x.cap, MPI_BYTE, src, tag, comm,
                            &pre_rq[i]));
    }

    /* send everything nonblocking, so no blocking receive can deadlock */
    int ns = cnt[me];
    MPI_Request *srq = xmalloc(sizeof *srq * (size_t)ns);
    unsigned char **sbuf = xmalloc(sizeof *sbuf * (size_t)ns);
    int *order = xmalloc(sizeof *order * (size_t)ns), *stag = xmalloc(sizeof *stag * (size_t)ns);
    for (int i = 0; i < ns; i++) {
        msg_t *m = &plan[me][i];
        sbuf[i] = xmalloc(m->size);
        fill_pattern(sbuf[i], m->size, msg_key(&x, m));
        if (m->size >= 16) {
            put32(sbuf[i], (uint32_t)m->src | (uint32_t)m->dst << 16);
            put32(sbuf[i] + 4, (uint32_t)m->tag | (uint32_t)round << 16);
            put32(sbuf[i] + 8, m->idx);
            put32(sbuf[i] + 12, m->seq);
        }
        order[i] = i;
        stag[i] = m->tag;
        if (m->sync) g_ops[9]++;
    }
    if (me == 0 && round == 0 && inject) inject_fault(plan[me], ns, sbuf, order, stag);
    for (int k = 0; k < ns; k++) {
        int i = order[k];
        if (i < 0) { /* dropped by fault injection (only ever the last message, in place) */
            srq[k] = MPI_REQUEST_NULL;
            continue;
        }
        msg_t *m = &plan[me][i];
        if (m->persistent) {
            if (m->sync)
                MPI_CHECK(MPI_Ssend_init(sbuf[i], (int)m->size, MPI_BYTE, m->dst, stag[i], comm,
                                         &srq[i]));
            else
                MPI_CHECK(MPI_Send_init(sbuf[i], (int)m->size, MPI_BYTE, m->dst, stag[i], comm,
                                        &srq[i]));
            MPI_CHECK(MPI_Start(&srq[i]));
        } else if (m->sync) {
            MPI_CHECK(MPI_Issend(sbuf[i], (int)m->size, MPI_BYTE, m->dst, stag[i], comm, &srq[i]));
        } else {
            MPI_CHECK(MPI_Isend(sbuf[i], (int)m->size, MPI_BYTE, m->dst, stag[i], comm, &srq[i]));
        }
    }
    free(order);
    free(stag);

    while (x.unclaimed > 0) rx_step(&x);

    if (npre) {
        MPI_Status sts[PREPOST_MAX];
        MPI_CHECK(MPI_Waitall(npre, pre_rq, sts));
        for (int i = 0; i < npre; i++)
            verify_msg(&x, pre_m[i], x.slots[1 + BATCH_MAX + i], &sts[i], "pre-posted MPI_Irecv");
    }
    MPI_CHECK(MPI_Waitall(ns, srq, MPI_STATUSES_IGNORE));
    for (int i = 0; i < ns; i++) {
        if (plan[me][i].persistent && srq[i] != MPI_REQUEST_NULL)
            MPI_CHECK(MPI_Request_free(&srq[i]));
        free(sbuf[i]);
    }

    /* nothing extra (duplicates) may be waiting on this communicator.  Nobody can send on it
     * again before we start our next round's sends, so this cannot see legitimate traffic. */
    {
        int flag = 0;
        MPI_Status st;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &st));
        if (flag) {
            int c = -1;
            MPI_Get_count(&st, MPI_BYTE, &c);
            fail("p2p comm=%s round=%d: unexpected extra message after all expected ones were "
                 "received: source=%d tag=%d count=%d",
                 cname, round, st.MPI_SOURCE, st.MPI_TAG, c);
        }
    }

    for (int i = 0; i < NSLOTS; i++) free(x.slots[i]);
    for (int i = 0; i < n * NTAGS; i++) free(x.streams[i].m);
    free(x.streams);
    free(srq);
    free(sbuf);
    for (int s = 0; s < n; s++) free(plan[s]);
    free(plan);
    free(cnt);
}

/* ------------------------------------------------------------------ other point-to-point */

static void zero_byte(void)
{
    set_phase("zero-byte");
    int n = g_size, me = g_rank;
    MPI_Request *rq = xmalloc(sizeof *rq * (size_t)n);
    char dummy = 0;
    int k = 0;
    for (int d = 0; d < n; d++)
        if (d != me)
            MPI_CHECK(MPI_Isend((d & 1) ? NULL : &dummy, 0, MPI_BYTE, d, TAG_ZERO,
                                MPI_COMM_WORLD, &rq[k++]));
    int *seen = calloc((size_t)n, sizeof(int));
    for (int i = 0; i < n - 1; i++) {
        MPI_Status st;
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, MPI_ANY_SOURCE, TAG_ZERO, MPI_COMM_WORLD, &st));
        expect_status("zero-byte MPI_Recv(any-source)", &st, MPI_ANY_SOURCE, TAG_ZERO, 0);
        if (st.MPI_SOURCE < 0 || st.MPI_SOURCE >= n || st.MPI_SOURCE == me || seen[st.MPI_SOURCE]++)
            fail("zero-byte: unexpected or duplicate message from source=%d tag=%d",
                 st.MPI_SOURCE, st.MPI_TAG);
    }
    MPI_CHECK(MPI_Waitall(k, rq, MPI_STATUSES_IGNORE));
    /* zero-byte synchronous send around the ring, receive into a non-empty buffer */
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    unsigned char b[8 + GUARD];
    memset(b, GUARD_BYTE, sizeof b);
    MPI_Request r;
    MPI_Status st;
    MPI_CHECK(MPI_Irecv(b, 8, MPI_BYTE, prev, TAG_ZERO_RING, MPI_COMM_WORLD, &r));
    MPI_CHECK(MPI_Ssend(NULL, 0, MPI_BYTE, next, TAG_ZERO_RING, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Wait(&r, &st));
    expect_status("zero-byte MPI_Ssend->MPI_Irecv", &st, prev, TAG_ZERO_RING, 0);
    if (check_guard(b, sizeof b) != SIZE_MAX)
        fail("zero-byte: a 0-byte message modified the receive buffer (peer=%d tag=%d)", prev,
             TAG_ZERO_RING);
    free(seen);
    free(rq);
    g_msgs += (uint64_t)n;
}

static void sync_sends(void)
{
    int n = g_size, me = g_rank, next = (me + 1) % n, prev = (me + n - 1) % n;
    MPI_Status st;

    /* Issend must not complete before the receiver has started the matching receive */
    set_phase("issend-semantics");
    static const size_t sizes[] = {8, 100000};
    for (int it = 0; it < 2; it++) {
        size_t sz = sizes[it];
        unsigned char *s = xmalloc(sz), *b = xmalloc(sz + GUARD);
        fill_pattern(s, sz, key5(10, (uint64_t)me, (uint64_t)next, sz, 0));
        memset(b, GUARD_BYTE, sz + GUARD);
        MPI_Request rs, rg;
        int flag = 0, go = 1, gin = 0;
        MPI_CHECK(MPI_Issend(s, (int)sz, MPI_BYTE, next, TAG_SYNC, MPI_COMM_WORLD, &rs));
        double t = MPI_Wtime();
        while (MPI_Wtime() - t < 0.05) {
            MPI_CHECK(MPI_Test(&rs, &flag, &st));
            if (flag)
                fail("MPI_Issend of %zu bytes to peer=%d tag=%d completed before the receiver "
                     "posted a receive",
                     sz, next, TAG_SYNC);
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        MPI_CHECK(MPI_Isend(&go, 1, MPI_INT, next, TAG_GO, MPI_COMM_WORLD, &rg));
        MPI_CHECK(MPI_Recv(&gin, 1, MPI_INT, prev, TAG_GO, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Recv(b, (int)sz, MPI_BYTE, prev, TAG_SYNC, MPI_COMM_WORLD, &st));
        expect_status("issend-semantics MPI_Recv", &st, prev, TAG_SYNC, sz);
        expect_pattern("issend-semantics", b, sz, key5(10, (uint64_t)prev, (uint64_t)me, sz, 0),
                       prev, TAG_SYNC, 1);
        MPI_CHECK(MPI_Wait(&rs, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Wait(&rg, MPI_STATUS_IGNORE));
        free(s);
        free(b);
        g_msgs++;
        g_bytes += sz;
    }

    /* blocking MPI_Ssend between pairs (0,1), (2,3), ...; both directions */
    set_phase("ssend-pairs");
    static const size_t ss[] = {0, 1000, 70000};
    int partner = me ^ 1;
    if (partner < n) {
        for (size_t i = 0; i < 3; i++) {
            size_t sz = ss[i];
            unsigned char *s = xmalloc(sz), *b = xmalloc(sz + GUARD);
            for (int dir = 0; dir < 2; dir++) {
                int sender = dir == 0 ? (me & ~1) : (me | 1);
                if (me == sender) {
                    fill_pattern(s, sz, key5(11, (uint64_t)me, (uint64_t)partner, sz, 0));
                    MPI_CHECK(MPI_Ssend(s, (int)sz, MPI_BYTE, partner, TAG_SS, MPI_COMM_WORLD));
                } else {
                    memset(b, GUARD_BYTE, sz + GUARD);
                    MPI_CHECK(MPI_Recv(b, (int)sz, MPI_BYTE, partner, TAG_SS, MPI_COMM_WORLD,
                                       &st));
                    expect_status("MPI_Ssend->MPI_Recv", &st, partner, TAG_SS, sz);
                    expect_pattern("MPI_Ssend->MPI_Recv", b, sz,
                                   key5(11, (uint64_t)partner, (uint64_t)me, sz, 0), partner,
                                   TAG_SS, 1);
                    g_msgs++;
                    g_bytes += sz;
                }
            }
            free(s);
            free(b);
        }
    }

    /* MPI_Sendrecv ring shift with sizes that differ per rank, and MPI_Sendrecv_replace */
    set_phase("sendrecv");
    for (int it = 0; it < 3; it++) {
        size_t mysz = (size_t)(mix64(key5(12, (uint64_t)me, (uint64_t)it, 0, 0)) % 200000);
        size_t prsz = (size_t)(mix64(key5(12, (uint64_t)prev, (uint64_t)it, 0, 0)) % 200000);
        unsigned char *s = xmalloc(mysz), *b = xmalloc(prsz + GUARD);
        fill_pattern(s, mysz, key5(13, (uint64_t)me, (uint64_t)it, 0, 0));
        memset(b, GUARD_BYTE, prsz + GUARD);
        int src = it == 2 ? MPI_ANY_SOURCE : prev;
        MPI_CHECK(MPI_Sendrecv(s, (int)mysz, MPI_BYTE, next, TAG_SR, b, (int)prsz, MPI_BYTE, src,
                               TAG_SR, MPI_COMM_WORLD, &st));
        expect_status("MPI_Sendrecv", &st, prev, TAG_SR, prsz);
        expect_pattern("MPI_Sendrecv", b, prsz, key5(13, (uint64_t)prev, (uint64_t)it, 0, 0),
                       prev, TAG_SR, 1);
        free(s);
        free(b);
        g_msgs++;
        g_bytes += prsz;
    }
    {
        size_t sz = 50000;
        unsigned char *b = xmalloc(sz);
        fill_pattern(b, sz, key5(14, (uint64_t)me, 0, 0, 0));
        MPI_CHECK(MPI_Sendrecv_replace(b, (int)sz, MPI_BYTE, next, TAG_SR, prev, TAG_SR,
                                       MPI_COMM_WORLD, &st));
        expect_status("MPI_Sendrecv_replace", &st, prev, TAG_SR, sz);
        expect_pattern("MPI_Sendrecv_replace", b, sz, key5(14, (uint64_t)prev, 0, 0, 0), prev,
                       TAG_SR, 0);
        free(b);
    }
}

static void probes(void)
{
    set_phase("probe-semantics");
    int n = g_size, me = g_rank, next = (me + 1) % n, prev = (me + n - 1) % n;
    MPI_Status st, st2;
    int flag = 0;

    /* a probe does not consume: Iprobe until seen, Probe again, same message, then receive */
    {
        size_t sz = 3000;
        unsigned char *s = xmalloc(sz), *b = xmalloc(sz + GUARD);
        MPI_Request r;
        fill_pattern(s, sz, key5(20, (uint64_t)me, 0, 0, 0));
        MPI_CHECK(MPI_Isend(s, (int)sz, MPI_BYTE, next, TAG_PROBE, MPI_COMM_WORLD, &r));
        while (!flag) MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, TAG_PROBE, MPI_COMM_WORLD, &flag, &st));
        expect_status("MPI_Iprobe", &st, prev, TAG_PROBE, sz);
        MPI_CHECK(MPI_Probe(prev, MPI_ANY_TAG, MPI_COMM_WORLD, &st2));
        expect_status("MPI_Probe after MPI_Iprobe", &st2, prev, TAG_PROBE, sz);
        memset(b, GUARD_BYTE, sz + GUARD);
        MPI_CHECK(MPI_Recv(b, (int)sz, MPI_BYTE, prev, TAG_PROBE, MPI_COMM_WORLD, &st));
        expect_status("MPI_Recv after probes", &st, prev, TAG_PROBE, sz);
        expect_pattern("MPI_Recv after probes", b, sz, key5(20, (uint64_t)prev, 0, 0, 0), prev,
                       TAG_PROBE, 1);
        MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        free(s);
        free(b);
    }

    /* a matched message is out of matching: a later receive gets the next one */
    set_phase("mprobe-semantics");
    static const size_t sa[2] = {100, 100000}, sb[2] = {200, 5000};
    for (int it = 0; it < 2; it++) {
        int tag = it ? TAG_MP2 : TAG_MP;
        unsigned char *a = xmalloc(sa[it]), *bb = xmalloc(sb[it]);
        unsigned char *ra = xmalloc(sa[it] + GUARD), *rb = xmalloc(sb[it] + GUARD);
        uint64_t ka = key5(21, (uint64_t)me, (uint64_t)it, 0, 0), kb = key5(22, (uint64_t)me, (uint64_t)it, 0, 0);
        uint64_t pka = key5(21, (uint64_t)prev, (uint64_t)it, 0, 0), pkb = key5(22, (uint64_t)prev, (uint64_t)it, 0, 0);
        fill_pattern(a, sa[it], ka);
        fill_pattern(bb, sb[it], kb);
        memset(ra, GUARD_BYTE, sa[it] + GUARD);
        memset(rb, GUARD_BYTE, sb[it] + GUARD);
        MPI_Request sr[2], rr[2];
        MPI_CHECK(MPI_Isend(a, (int)sa[it], MPI_BYTE, next, tag, MPI_COMM_WORLD, &sr[0]));
        MPI_CHECK(MPI_Isend(bb, (int)sb[it], MPI_BYTE, next, tag, MPI_COMM_WORLD, &sr[1]));
        MPI_Message mh;
        MPI_Status sts[2];
        if (it == 0) {
            MPI_CHECK(MPI_Mprobe(prev, tag, MPI_COMM_WORLD, &mh, &st));
            expect_status("MPI_Mprobe (first of two)", &st, prev, tag, sa[it]);
            MPI_CHECK(MPI_Recv(rb, (int)sb[it], MPI_BYTE, prev, tag, MPI_COMM_WORLD, &sts[1]));
            MPI_CHECK(MPI_Mrecv(ra, (int)sa[it], MPI_BYTE, &mh, &sts[0]));
        } else {
            flag = 0;
            while (!flag)
                MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &flag, &mh, &st));
            expect_status("MPI_Improbe (first of two)", &st, prev, tag, sa[it]);
            MPI_CHECK(MPI_Irecv(rb, (int)sb[it], MPI_BYTE, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD,
                                &rr[1]));
            MPI_CHECK(MPI_Imrecv(ra, (int)sa[it], MPI_BYTE, &mh, &rr[0]));
            MPI_CHECK(MPI_Waitall(2, rr, sts));
        }
        expect_status("receive after matched probe (second message)", &sts[1], prev, tag, sb[it]);
        expect_pattern("receive after matched probe (second message)", rb, sb[it], pkb, prev, tag, 1);
        expect_status("Mrecv/Imrecv of matched first message", &sts[0], prev, tag, sa[it]);
        expect_pattern("Mrecv/Imrecv of matched first message", ra, sa[it], pka, prev, tag, 1);
        MPI_CHECK(MPI_Waitall(2, sr, MPI_STATUSES_IGNORE));
        free(a);
        free(bb);
        free(ra);
        free(rb);
    }
}

static void cancels(void)
{
    set_phase("cancel-unmatched");
    int n = g_size, me = g_rank, next = (me + 1) % n, prev = (me + n - 1) % n;
    MPI_Status st;
    int flag = -1;
    char b[64];
    for (int it = 0; it < 2; it++) {
        MPI_Request r;
        int src = it ? prev : MPI_ANY_SOURCE;
        MPI_CHECK(MPI_Irecv(b, (int)sizeof b, MPI_BYTE, src, TAG_NEVER, MPI_COMM_WORLD, &r));
        MPI_CHECK(MPI_Cancel(&r));
        MPI_CHECK(MPI_Wait(&r, &st));
        MPI_CHECK(MPI_Test_cancelled(&st, &flag));
        if (!flag)
            fail("MPI_Cancel of a posted receive that cannot match (source=%d tag=%d): "
                 "MPI_Test_cancelled says not cancelled",
                 src, TAG_NEVER);
        if (r != MPI_REQUEST_NULL) fail("cancelled request not freed by MPI_Wait");
    }

    /* a receive that has matched (the Ssend to us completed) cannot be cancelled */
    set_phase("cancel-matched");
    static const size_t sizes[] = {100, 100000};
    for (int it = 0; it < 2; it++) {
        size_t sz = sizes[it];
        unsigned char *s = xmalloc(sz), *rb = xmalloc(sz + GUARD);
        fill_pattern(s, sz, key5(30, (uint64_t)me, sz, 0, 0));
        memset(rb, GUARD_BYTE, sz + GUARD);
        MPI_Request r;
        MPI_CHECK(MPI_Irecv(rb, (int)sz, MPI_BYTE, prev, TAG_CANCEL, MPI_COMM_WORLD, &r));
        MPI_CHECK(MPI_Ssend(s, (int)sz, MPI_BYTE, next, TAG_CANCEL, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); /* now every Ssend has been matched */
        MPI_CHECK(MPI_Cancel(&r));
        MPI_CHECK(MPI_Wait(&r, &st));
        MPI_CHECK(MPI_Test_cancelled(&st, &flag));
        if (flag)
            fail("MPI_Cancel of a receive already matched by an MPI_Ssend (peer=%d tag=%d "
                 "size=%zu): MPI_Test_cancelled says cancelled",
                 prev, TAG_CANCEL, sz);
        expect_status("receive after failed cancel", &st, prev, TAG_CANCEL, sz);
        expect_pattern("receive after failed cancel", rb, sz,
                       key5(30, (uint64_t)prev, sz, 0, 0), prev, TAG_CANCEL, 1);
        free(s);
        free(rb);
    }
}

static void big_message(size_t big)
{
    set_phase("big-message");
    int me = g_rank, last = g_size - 1;
    if (me != 0 && me != last) return;
    int peer = me == 0 ? last : 0;
    unsigned char *s = xmalloc(big), *b = xmalloc(big + GUARD);
    MPI_Status st;
    for (int it = 0; it < 3; it++) {
        /* it 0: both directions at once; it 1: 0 -> last; it 2: last -> 0 */
        fill_pattern(s, big, key5(40, (uint64_t)me, (uint64_t)it, 0, 0));
        memset(b, GUARD_BYTE, big + GUARD);
        uint64_t pk = key5(40, (uint64_t)peer, (uint64_t)it, 0, 0);
        int received = 0;
        if (it == 0) {
            MPI_Request r[2];
            MPI_Status sts[2];
            MPI_CHECK(MPI_Irecv(b, (int)big, MPI_BYTE, peer, TAG_BIG, MPI_COMM_WORLD, &r[0]));
            MPI_CHECK(MPI_Isend(s, (int)big, MPI_BYTE, peer, TAG_BIG, MPI_COMM_WORLD, &r[1]));
            MPI_CHECK(MPI_Waitall(2, r, sts));
            st = sts[0];
            received = 1;
        } else if ((it == 1) == (me == 0)) {
            MPI_CHECK(MPI_Send(s, (int)big, MPI_BYTE, peer, TAG_BIG, MPI_COMM_WORLD));
        } else {
            MPI_CHECK(MPI_Recv(b, (int)big, MPI_BYTE, peer, TAG_BIG, MPI_COMM_WORLD, &st));
            received = 1;
        }
        if (received) {
            expect_status("big message", &st, peer, TAG_BIG, big);
            expect_pattern("big message", b, big, pk, peer, TAG_BIG, 1);
            g_msgs++;
            g_bytes += big;
        }
    }
    free(s);
    free(b);
}

/* ------------------------------------------------------------------ communicators */

static void isolation(MPI_Comm *comms, const int *cids, const char **names, int nc)
{
    set_phase("comm-isolation");
    /* send on every communicator with the same tag, last communicator first; receive with
     * full wildcards on the first communicator first: nothing may cross over */
    MPI_Request rq[8];
    unsigned char sb[8][1000];
    int k = 0;
    for (int i = nc - 1; i >= 0; i--) {
        int r, n;
        MPI_CHECK(MPI_Comm_rank(comms[i], &r));
        MPI_CHECK(MPI_Comm_size(comms[i], &n));
        size_t sz = 100 + 100 * (size_t)i;
        fill_pattern(sb[i], sz, key5(50, (uint64_t)cids[i], (uint64_t)r, 0, 0));
        MPI_CHECK(MPI_Isend(sb[i], (int)sz, MPI_BYTE, (r + 1) % n, TAG_ISO, comms[i], &rq[k++]));
    }
    for (int i = 0; i < nc; i++) {
        int r, n;
        MPI_Status st;
        unsigned char b[1000 + GUARD];
        MPI_CHECK(MPI_Comm_rank(comms[i], &r));
        MPI_CHECK(MPI_Comm_size(comms[i], &n));
        int prev = (r + n - 1) % n;
        size_t sz = 100 + 100 * (size_t)i;
        memset(b, GUARD_BYTE, sizeof b);
        MPI_CHECK(MPI_Recv(b, 1000, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, comms[i], &st));
        char what[128];
        snprintf(what, sizeof what, "comm-isolation on %s", names[i]);
        expect_status(what, &st, prev, TAG_ISO, sz);
        expect_pattern(what, b, sz, key5(50, (uint64_t)cids[i], (uint64_t)prev, 0, 0), prev,
                       TAG_ISO, 1);
        g_msgs++;
    }
    MPI_CHECK(MPI_Waitall(k, rq, MPI_STATUSES_IGNORE));
}

/* ------------------------------------------------------------------ collectives */

static int ival(int cid, int q, size_t i, int what)
{
    return (int)(mix64(key5(60, (uint64_t)cid, (uint64_t)q, i, (uint64_t)what)) % 200001) - 100000;
}
static double dval(int cid, int q, size_t i, int what)
{
    return 0.25 * (double)ival(cid, q, i, what + 100);
}

static void coll_suite(MPI_Comm c, int cid, const char *cname)
{
    int r, n;
    char what[160];
    MPI_CHECK(MPI_Comm_rank(c, &r));
    MPI_CHECK(MPI_Comm_size(c, &n));

    set_phase("coll-barrier");
    for (int i = 0; i < 3; i++) MPI_CHECK(MPI_Barrier(c));

    set_phase("coll-allreduce");
    static const size_t icounts[] = {1, 1000, 262144};
    for (size_t ci = 0; ci < 3; ci++) {
        size_t cnt = icounts[ci];
        int *in = xmalloc(cnt * sizeof(int)), *out = xmalloc(cnt * sizeof(int));
        for (size_t i = 0; i < cnt; i++) in[i] = ival(cid, r, i, (int)ci);
        if (inject && !strcmp(inject, "coll") && g_rank == 0 && cid == CID_WORLD && cnt == 1000)
            in[7] += 1;
        MPI_CHECK(MPI_Allreduce(in, out, (int)cnt, MPI_INT, MPI_SUM, c));
        for (size_t i = 0; i < cnt; i++) {
            long ref = 0;
            for (int q = 0; q < n; q++) ref += ival(cid, q, i, (int)ci);
            if (out[i] != ref)
                fail("MPI_Allreduce(MPI_INT, MPI_SUM) comm=%s count=%zu index=%zu: got %d "
                     "expected %ld",
                     cname, cnt, i, out[i], ref);
        }
        if (cnt == 1000) {
            MPI_CHECK(MPI_Allreduce(in, out, (int)cnt, MPI_INT, MPI_MAX, c));
            for (size_t i = 0; i < cnt; i++) {
                int ref = ival(cid, 0, i, (int)ci);
                for (int q = 1; q < n; q++)
                    if (ival(cid, q, i, (int)ci) > ref) ref = ival(cid, q, i, (int)ci);
                if (out[i] != ref)
                    fail("MPI_Allreduce(MPI_INT, MPI_MAX) comm=%s index=%zu: got %d expected %d",
                         cname, i, out[i], ref);
            }
            /* in place, MIN */
            memcpy(out, in, cnt * sizeof(int));
            MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, out, (int)cnt, MPI_INT, MPI_MIN, c));
            for (size_t i = 0; i < cnt; i++) {
                int ref = ival(cid, 0, i, (int)ci);
                for (int q = 1; q < n; q++)
                    if (ival(cid, q, i, (int)ci) < ref) ref = ival(cid, q, i, (int)ci);
                if (out[i] != ref)
                    fail("MPI_Allreduce(MPI_IN_PLACE, MPI_INT, MPI_MIN) comm=%s index=%zu: got "
                         "%d expected %d",
                         cname, i, out[i], ref);
            }
            /* Reduce to the last rank */
            MPI_CHECK(MPI_Reduce(in, out, (int)cnt, MPI_INT, MPI_SUM, n - 1, c));
            if (r == n - 1)
                for (size_t i = 0; i < cnt; i++) {
                    long ref = 0;
                    for (int q = 0; q < n; q++) ref += ival(cid, q, i, (int)ci);
                    if (out[i] != ref)
                        fail("MPI_Reduce(MPI_INT, MPI_SUM, root=%d) comm=%s index=%zu: got %d "
                             "expected %ld",
                             n - 1, cname, i, out[i], ref);
                }
        }
        free(in);
        free(out);
    }
    static const size_t dcounts[] = {1, 1000, 131072};
    for (size_t ci = 0; ci < 3; ci++) {
        size_t cnt = dcounts[ci];
        double *in = xmalloc(cnt * sizeof(double)), *out = xmalloc(cnt * sizeof(double));
        for (size_t i = 0; i < cnt; i++) in[i] = dval(cid, r, i, (int)ci);
        for (int op = 0; op < 2; op++) {
            MPI_CHECK(MPI_Allreduce(in, out, (int)cnt, MPI_DOUBLE, op ? MPI_MAX : MPI_SUM, c));
            for (size_t i = 0; i < cnt; i++) {
                double ref = dval(cid, 0, i, (int)ci);
                for (int q = 1; q < n; q++) {
                    double v = dval(cid, q, i, (int)ci);
                    if (op)
                        ref = v > ref ? v : ref;
                    else
                        ref += v; /* quarter-integers: exact in any order */
                }
                if (out[i] != ref)
                    fail("MPI_Allreduce(MPI_DOUBLE, %s) comm=%s count=%zu index=%zu: got %.17g "
                         "expected %.17g",
                         op ? "MPI_MAX" : "MPI_SUM", cname, cnt, i, out[i], ref);
            }
        }
        free(in);
        free(out);
    }

    set_phase("coll-bcast");
    for (int root = 0; root < n; root++) {
        unsigned char b[13 + GUARD];
        uint64_t k = key5(61, (uint64_t)cid, (uint64_t)root, 13, 0);
        memset(b, GUARD_BYTE, sizeof b);
        if (r == root) fill_pattern(b, 13, k);
        MPI_CHECK(MPI_Bcast(b, 13, MPI_BYTE, root, c));
        snprintf(what, sizeof what, "MPI_Bcast(13 bytes, root=%d) comm=%s", root, cname);
        expect_pattern(what, b, 13, k, root, -1, 1);
    }
    {
        size_t sz = 8u << 20;
        unsigned char *b = xmalloc(sz + GUARD);
        int roots[2] = {0, n - 1};
        for (int i = 0; i < (n > 1 ? 2 : 1); i++) {
            uint64_t k = key5(62, (uint64_t)cid, (uint64_t)roots[i], sz, 0);
            memset(b, GUARD_BYTE, sz + GUARD);
            if (r == roots[i]) fill_pattern(b, sz, k);
            MPI_CHECK(MPI_Bcast(b, (int)sz, MPI_BYTE, roots[i], c));
            snprintf(what, sizeof what, "MPI_Bcast(8 MiB, root=%d) comm=%s", roots[i], cname);
            expect_pattern(what, b, sz, k, roots[i], -1, 1);
        }
        free(b);
    }

    set_phase("coll-alltoall");
    static const int blocks[] = {37, 4096};
    for (int bi = 0; bi < 2; bi++) {
        int B = blocks[bi];
        int *in = xmalloc(sizeof(int) * (size_t)B * (size_t)n);
        int *out = xmalloc(sizeof(int) * (size_t)B * (size_t)n);
        for (int d = 0; d < n; d++)
            for (int i = 0; i < B; i++)
                in[d * B + i] = ival(cid, r, (size_t)(d * B + i), 70 + bi);
        memset(out, 0xA5, sizeof(int) * (size_t)B * (size_t)n);
        MPI_CHECK(MPI_Alltoall(in, B, MPI_INT, out, B, MPI_INT, c));
        for (int s = 0; s < n; s++)
            for (int i = 0; i < B; i++) {
                int ref = ival(cid, s, (size_t)(r * B + i), 70 + bi);
                if (out[s * B + i] != ref)
                    fail("MPI_Alltoall(%d ints per peer) comm=%s from peer=%d index=%d: got %d "
                         "expected %d",
                         B, cname, s, i, out[s * B + i], ref);
            }
        free(in);
        free(out);
    }
    {
        /* Alltoallv: counts differ per (source, destination), some zero */
        int *scnt = xmalloc(sizeof(int) * (size_t)n), *rcnt = xmalloc(sizeof(int) * (size_t)n);
        int *sdis = xmalloc(sizeof(int) * (size_t)n), *rdis = xmalloc(sizeof(int) * (size_t)n);
        int stot = 0, rtot = 0;
        for (int q = 0; q < n; q++) {
            scnt[q] = (int)(mix64(key5(63, (uint64_t)cid, (uint64_t)r, (uint64_t)q, 0)) % 20000);
            rcnt[q] = (int)(mix64(key5(63, (uint64_t)cid, (uint64_t)q, (uint64_t)r, 0)) % 20000);
            if (scnt[q] < 2000) scnt[q] = 0;
            if (rcnt[q] < 2000) rcnt[q] = 0;
            sdis[q] = stot;
            rdis[q] = rtot;
            stot += scnt[q];
            rtot += rcnt[q];
        }
        int *in = xmalloc(sizeof(int) * (size_t)stot), *out = xmalloc(sizeof(int) * (size_t)rtot);
        for (int q = 0; q < n; q++)
            for (int i = 0; i < scnt[q]; i++) in[sdis[q] + i] = ival(cid, r, (size_t)i, 80 + q);
        MPI_CHECK(MPI_Alltoallv(in, scnt, sdis, MPI_INT, out, rcnt, rdis, MPI_INT, c));
        for (int q = 0; q < n; q++)
            for (int i = 0; i < rcnt[q]; i++)
                if (out[rdis[q] + i] != ival(cid, q, (size_t)i, 80 + r))
                    fail("MPI_Alltoallv comm=%s from peer=%d count=%d index=%d: got %d expected "
                         "%d",
                         cname, q, rcnt[q], i, out[rdis[q] + i], ival(cid, q, (size_t)i, 80 + r));
        free(in);
        free(out);
        free(scnt);
        free(rcnt);
        free(sdis);
        free(rdis);
    }

    set_phase("coll-allgather");
    static const int gcounts[] = {333, 40000};
    for (int gi = 0; gi < 2; gi++) {
        int G = gcounts[gi];
        int *in = xmalloc(sizeof(int) * (size_t)G), *out = xmalloc(sizeof(int) * (size_t)G * (size_t)n);
        for (int i = 0; i < G; i++) in[i] = ival(cid, r, (size_t)i, 90 + gi);
        MPI_CHECK(MPI_Allgather(in, G, MPI_INT, out, G, MPI_INT, c));
        for (int q = 0; q < n; q++)
            for (int i = 0; i < G; i++)
                if (out[q * G + i] != ival(cid, q, (size_t)i, 90 + gi))
                    fail("MPI_Allgather(%d ints) comm=%s from peer=%d index=%d: got %d expected "
                         "%d",
                         G, cname, q, i, out[q * G + i], ival(cid, q, (size_t)i, 90 + gi));
        free(in);
        free(out);
    }
    MPI_CHECK(MPI_Barrier(c));
}

/* nobody leaves a barrier before everybody entered it (checked among ranks sharing a host,
 * whose CLOCK_MONOTONIC readings are comparable) */
static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void barrier_semantics(void)
{
    set_phase("barrier-semantics");
    MPI_Comm node;
    int nr, nn;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL,
                                  &node));
    MPI_CHECK(MPI_Comm_rank(node, &nr));
    MPI_CHECK(MPI_Comm_size(node, &nn));
    double *all = xmalloc(sizeof(double) * 2 * (size_t)nn);
    for (int it = 0; it < 3; it++) {
        double t[2];
        if (g_rank == it % g_size) {
            struct timespec ts = {0, 20000000};
            nanosleep(&ts, NULL);
        }
        t[0] = mono();
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        t[1] = mono();
        MPI_CHECK(MPI_Gather(t, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, node));
        if (nr == 0) {
            int late = 0, early = 0;
            for (int q = 1; q < nn; q++) {
                if (all[2 * q] > all[2 * late]) late = q;
                if (all[2 * q + 1] < all[2 * early + 1]) early = q;
            }
            if (all[2 * late] > all[2 * early + 1])
                fail("MPI_Barrier: node-local rank %d left the barrier %.6f s before node-local "
                     "rank %d entered it (iteration %d)",
                     early, all[2 * late] - all[2 * early + 1], late, it);
        }
    }
    free(all);
    MPI_CHECK(MPI_Comm_free(&node));
}

/* ------------------------------------------------------------------ truncation */

static void truncation(void)
{
    set_phase("truncation");
    int n = g_size, me = g_rank, next = (me + 1) % n, prev = (me + n - 1) % n;
    MPI_Comm tc;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &tc));
    MPI_CHECK(MPI_Comm_set_errhandler(tc, MPI_ERRORS_RETURN));
    /* cases 0-1 stay below every Open MPI eager limit.  Cases 2-3 (messages past the eager
     * limit) are opt-in with HXMPI_TRUNC_LARGE=1: Open MPI 4.1.4's ob1 writes past the receive
     * buffer and crashes there (vader above 4 KiB, tcp above 64 KiB), so they cannot be
     * validated against the default transports. */
    static const size_t msz[] = {100, 2000, 200000, 5000}, rsz[] = {50, 1000, 100000, 4000};
    int ncases = trunc_large ? 4 : 2;
    for (int it = 0; it < ncases; it++) {
        unsigned char *s = xmalloc(msz[it]), *b = xmalloc(rsz[it] + GUARD);
        fill_pattern(s, msz[it], key5(100, (uint64_t)me, (uint64_t)it, 0, 0));
        memset(b, GUARD_BYTE, rsz[it] + GUARD);
        MPI_Request sr, rr;
        MPI_Status st;
        MPI_CHECK(MPI_Isend(s, (int)msz[it], MPI_BYTE, next, TAG_TRUNC, tc, &sr));
        int rc, cls = -1;
        const char *how;
        if (it % 2 == 0) {
            how = "MPI_Recv";
            rc = MPI_Recv(b, (int)rsz[it], MPI_BYTE, prev, TAG_TRUNC, tc, &st);
        } else {
            how = "MPI_Irecv+MPI_Wait";
            MPI_CHECK(MPI_Irecv(b, (int)rsz[it], MPI_BYTE, prev, TAG_TRUNC, tc, &rr));
            rc = MPI_Wait(&rr, &st);
        }
        if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
        if (cls != MPI_ERR_TRUNCATE)
            fail("truncation: %s of a %zu-byte message into %zu bytes from peer=%d tag=%d "
                 "returned %d (class %d), expected class MPI_ERR_TRUNCATE (%d)",
                 how, msz[it], rsz[it], prev, TAG_TRUNC, rc, cls, MPI_ERR_TRUNCATE);
        size_t g = check_guard(b + rsz[it], GUARD);
        if (g != SIZE_MAX)
            fail("truncation: %s of a %zu-byte message into %zu bytes wrote past the buffer "
                 "(peer=%d tag=%d offset=%zu)",
                 how, msz[it], rsz[it], prev, TAG_TRUNC, rsz[it] + g);
        rc = MPI_Wait(&sr, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            MPI_Error_class(rc, &cls);
            /* the standard leaves the sender's outcome open; accept success or truncate */
            if (cls != MPI_ERR_TRUNCATE)
                fail("truncation: the sender's MPI_Wait for a %zu-byte message to peer=%d "
                     "returned error class %d",
                     msz[it], next, cls);
        }
        free(s);
        free(b);
    }
    /* the job and both communicators still work */
    set_phase("after-truncation");
    for (int ci = 0; ci < 2; ci++) {
        MPI_Comm c = ci ? MPI_COMM_WORLD : tc;
        size_t sz = 70000;
        unsigned char *s = xmalloc(sz), *b = xmalloc(sz + GUARD);
        MPI_Status st;
        fill_pattern(s, sz, key5(101, (uint64_t)me, (uint64_t)ci, 0, 0));
        memset(b, GUARD_BYTE, sz + GUARD);
        MPI_CHECK(MPI_Sendrecv(s, (int)sz, MPI_BYTE, next, TAG_AFTER, b, (int)sz, MPI_BYTE, prev,
                               TAG_AFTER, c, &st));
        expect_status("exchange after truncation", &st, prev, TAG_AFTER, sz);
        expect_pattern("exchange after truncation", b, sz,
                       key5(101, (uint64_t)prev, (uint64_t)ci, 0, 0), prev, TAG_AFTER, 1);
        free(s);
        free(b);
    }
    MPI_CHECK(MPI_Barrier(tc));
    MPI_CHECK(MPI_Comm_free(&tc));
}

/* ------------------------------------------------------------------ main */

/* HXMPI_SKIP=group,group,...: leave out whole groups of checks */
static const char *const GROUPS = "zero random sync probe cancel big isolation barrier coll trunc";
static int skipped(const char *group)
{
    const char *v = getenv("HXMPI_SKIP");
    size_t gl = strlen(group);
    for (const char *p = v; p && *p;) {
        size_t l = strcspn(p, ", ");
        if (l == gl && !strncmp(p, group, l)) return 1;
        p += l;
        p += strspn(p, ", ");
    }
    return 0;
}

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    long x = strtol(v, &end, 0);
    return *end ? dflt : x;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    g_t0 = MPI_Wtime();
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));

    const char *sv = argc > 1 ? argv[1] : getenv("HXMPI_SEED");
    if (sv && *sv) g_seed = strtoull(sv, NULL, 0);
    int rounds = (int)env_long("HXMPI_ROUNDS", 6);
    size_t big = (size_t)env_long("HXMPI_BIG_MB", 64) << 20;
    no_self = env_long("HXMPI_NO_SELF", 0) != 0;
    trunc_large = env_long("HXMPI_TRUNC_LARGE", 0) != 0;
    inject = getenv("HXMPI_INJECT");
    if (inject && !*inject) inject = NULL;
    g_timeout = (int)env_long("HXMPI_TIMEOUT", 180);
    g_verbose = env_long("HXMPI_VERBOSE", 0) != 0;
    set_phase("init");
    signal(SIGALRM, on_alarm);
    alarm((unsigned)g_timeout);

    if (g_size < 2) fail("needs at least 2 ranks, got %d", g_size);
    int ub_flag = 0;
    int *ub = NULL;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &ub_flag));
    if (!ub_flag || *ub < 32767) fail("MPI_TAG_UB is %d, must be at least 32767", ub_flag ? *ub : -1);

    /* communicators */
    set_phase("comm-create");
    MPI_Comm dup, split, splitdup;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, -g_rank, &split)); /* reversed order */
    MPI_CHECK(MPI_Comm_dup(split, &splitdup));
    {
        int cmp, sr, ssz, exp_r = 0, exp_n = 0;
        MPI_CHECK(MPI_Comm_compare(dup, MPI_COMM_WORLD, &cmp));
        if (cmp != MPI_CONGRUENT) fail("MPI_Comm_compare(dup, world) = %d, not congruent", cmp);
        MPI_CHECK(MPI_Comm_rank(split, &sr));
        MPI_CHECK(MPI_Comm_size(split, &ssz));
        for (int q = 0; q < g_size; q++)
            if (q % 2 == g_rank % 2) {
                exp_n++;
                if (q > g_rank) exp_r++;
            }
        if (sr != exp_r || ssz != exp_n)
            fail("MPI_Comm_split(color=rank%%2, key=-rank): rank %d of %d, expected %d of %d", sr,
                 ssz, exp_r, exp_n);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    {
        const char *v = getenv("HXMPI_SKIP");
        for (const char *p = v; p && *p;) {
            size_t l = strcspn(p, ", ");
            int ok = 0;
            for (const char *g = GROUPS; *g;) {
                size_t gl = strcspn(g, " ");
                if (gl == l && !strncmp(g, p, l)) ok = 1;
                g += gl;
                g += strspn(g, " ");
            }
            if (!ok && l) fail("HXMPI_SKIP: unknown group '%.*s' (groups: %s)", (int)l, p, GROUPS);
            p += l;
            p += strspn(p, ", ");
        }
    }

    if (!skipped("zero")) zero_byte();

    for (int round = 0; round < rounds && !skipped("random"); round++) {
        static char ph[64];
        snprintf(ph, sizeof ph, "random-p2p round %d", round);
        set_phase(ph);
        if (round % 2 == 0)
            random_round(MPI_COMM_WORLD, CID_WORLD, "world", round);
        else
            random_round(dup, CID_DUP, "dup(world)", round);
    }
    /* the random traffic on the split communicator: different ranks, same tags */
    set_phase("random-p2p split");
    {
        int ss;
        MPI_CHECK(MPI_Comm_size(split, &ss));
        if (ss >= 2 && !skipped("random")) random_round(split, CID_SPLIT, "split(world) (ranks in split numbering)", rounds);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    if (!skipped("sync")) sync_sends();
    if (!skipped("probe")) probes();
    if (!skipped("cancel")) cancels();
    if (!skipped("big")) big_message(big);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    {
        MPI_Comm comms[4] = {MPI_COMM_WORLD, dup, split, splitdup};
        int cids[4] = {CID_WORLD, CID_DUP, CID_SPLIT, CID_SPLITDUP};
        const char *names[4] = {"world", "dup(world)", "split(world)", "dup(split)"};
        if (!skipped("isolation")) isolation(comms, cids, names, 4);
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        if (!skipped("barrier")) barrier_semantics();
        for (int i = 0; i < 3 && !skipped("coll"); i++) coll_suite(comms[i], cids[i], names[i]);
    }

    if (!skipped("trunc")) truncation();

    set_phase("finish");
    uint64_t mine[2 + NOPS] = {g_msgs, g_bytes}, tot[2 + NOPS] = {0};
    memcpy(mine + 2, g_ops, sizeof g_ops);
    MPI_CHECK(MPI_Reduce(mine, tot, 2 + NOPS, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
    char ops[512];
    size_t ol = 0;
    for (int i = 0; i < NOPS; i++)
        ol += (size_t)snprintf(ops + ol, sizeof ops - ol, "%s%s:%" PRIu64, i ? "," : "",
                               OP_NAMES[i], tot[2 + i]);
    MPI_CHECK(MPI_Comm_free(&splitdup));
    MPI_CHECK(MPI_Comm_free(&split));
    MPI_CHECK(MPI_Comm_free(&dup));
    double el = MPI_Wtime() - g_t0;
    if (g_rank == 0) {
        printf("OK correctness.c ranks=%d seed=%" PRIu64 " rounds=%d p2p_msgs_checked=%" PRIu64
               " p2p_bytes_checked=%" PRIu64 " big=%zuMiB ops=%s skipped=%s time=%.2fs\n",
               g_size, g_seed, rounds, tot[0], tot[1], big >> 20, ops,
               getenv("HXMPI_SKIP") && *getenv("HXMPI_SKIP") ? getenv("HXMPI_SKIP") : "none", el);
        fflush(stdout);
    }
    alarm(0);
    MPI_Finalize();
    return 0;
}
