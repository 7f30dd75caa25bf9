/* Remote memory access and atomics through libfabric, as a user meets them: a target process
 * registers a region (read-write) and a read-only one and keeps progressing; the initiator
 * writes, reads back, adds, compares-and-swaps, writes with remote CQ data (fi_writedata,
 * fi_writemsg with FI_REMOTE_CQ_DATA, fi_inject_writedata: at the target each an entry on its
 * receive CQ with the data and the write's length, its bytes already in place), and makes the
 * accesses the target must refuse (unknown key, past the region's end, a write into the
 * read-only region), each an error entry whose err_data names why; then the target checks its
 * memory. Endpoints without FI_RMA refuse RMA calls. Names, keys and addresses travel over
 * pipes.
 *
 *   rma
 */
#include <inttypes.h>
#include "node.h"
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LEN (1 << 20)

/* One completion of `ctx`: 1 done (flags in *flags), -FI_E* from its error entry. */
static int wait_for(struct node *n, void *ctx, uint64_t *flags, char *why) {
    double end = now() + 20;
    while (now() < end) {
        struct fi_cq_data_entry e;
        ssize_t r = fi_cq_sread(n->cq, &e, 1, NULL, 100);
        if (r == 1) {
            EXPECT(e.op_context == ctx);
            if (flags)
                *flags = e.flags;
            return 1;
        }
        if (r == -FI_EAVAIL) {
            struct fi_cq_err_entry err;
            memset(&err, 0, sizeof err);
            static char buf[256];
            err.err_data = buf;
            err.err_data_size = sizeof buf;
            CHECK(fi_cq_readerr(n->cq, &err, 0));
            EXPECT(err.op_context == ctx);
            /* The provider's message: who refused and why. */
            if (why)
                snprintf(why, 256, "%s", err.err_data_size ? (char *)err.err_data : "");
            return -err.err;
        }
        if (r != -FI_EAGAIN)
            CHECK(r);
    }
    fprintf(stderr, "no completion in 20 s\n");
    exit(1);
}

struct target_info {
    uint64_t rw_key, rw_addr, ro_key, ro_addr;
};

/* The writes with remote CQ data: where in the read-write region, how long, their data, and the
 * byte at offset i of each. */
#define NOTICES 3
static const size_t notice_off[NOTICES] = {LEN / 2, LEN / 2 + 8192, LEN / 2 + 8192 + 65536};
static const size_t notice_len[NOTICES] = {4096, 65536, 16};
static const uint64_t notice_data[NOTICES] = {0x1111, 0xfeedface2222ULL, 0x3333};
static char notice_byte(int w, size_t i) { return (char)(i * (w + 5) + w); }

/* A receive-CQ entry of a remote write with CQ data: which of the writes, its bytes in place;
 * returns its index. */
static int notice_seen(const struct fi_cq_data_entry *e, const char *rw) {
    EXPECT(e->op_context == NULL);
    EXPECT(e->flags == (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA));
    for (int w = 0; w < NOTICES; w++) {
        if (e->data != notice_data[w])
            continue;
        EXPECT(e->len == notice_len[w]);
        for (size_t i = 0; i < notice_len[w]; i++)
            EXPECT(rw[notice_off[w] + i] == notice_byte(w, i));
        return w;
    }
    fprintf(stderr, "unexpected remote CQ data %#" PRIx64 "\n", (uint64_t)e->data);
    exit(1);
}

static void target(int to_init, int from_init) {
    struct node n;
    open_node(&n, FI_MSG | FI_RMA | FI_ATOMIC, FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED,
              FI_CQ_FORMAT_DATA);
    char *rw = calloc(1, LEN), *ro = malloc(LEN);
    for (int i = 0; i < LEN; i++)
        ro[i] = (char)(i * 7);
    struct fid_mr *mr_rw, *mr_ro;
    CHECK(fi_mr_reg(n.domain, rw, LEN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr_rw, NULL));
    CHECK(fi_mr_reg(n.domain, ro, LEN, FI_REMOTE_READ, 0, 0, 0, &mr_ro, NULL));
    EXPECT(fi_mr_key(mr_rw) != fi_mr_key(mr_ro));
    struct target_info t = {fi_mr_key(mr_rw), (uint64_t)(uintptr_t)rw, fi_mr_key(mr_ro),
                            (uint64_t)(uintptr_t)ro};
    /* A posted untagged receive is not what remote CQ data completes (no FI_RX_CQ_DATA):
     * cancelled at the end, untouched. */
    char rbuf[16], rctx[8];
    CHECK(fi_recv(n.ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, rctx));
    EXPECT(write(to_init, n.name, 64) == 64);
    EXPECT(write(to_init, &t, sizeof t) == sizeof t);
    /* Serve until the initiator says it is done: a read of the CQ is what progresses. */
    char go = 0;
    struct fi_cq_data_entry e;
    int seen[NOTICES] = {0}, notices = 0;
    while (1) {
        if (fi_cq_read(n.cq, &e, 1) == 1) {
            seen[notice_seen(&e, rw)]++;
            notices++;
        }
        fd_set fds;
        FD_ZERO(&fds);
        FD_SET(from_init, &fds);
        struct timeval tv = {0, 200};
        if (select(from_init + 1, &fds, NULL, NULL, &tv) == 1) {
            EXPECT(read(from_init, &go, 1) == 1);
            break;
        }
    }
    /* The inject's notice may come after the initiator is done. */
    for (double end = now() + 20; notices < NOTICES && now() < end;) {
        if (fi_cq_read(n.cq, &e, 1) == 1) {
            seen[notice_seen(&e, rw)]++;
            notices++;
        }
    }
    for (int w = 0; w < NOTICES; w++)
        EXPECT(seen[w] == 1);
    EXPECT(fi_cq_read(n.cq, &e, 1) == -FI_EAGAIN);
    CHECK(fi_cancel(&n.ep->fid, rctx));
    struct fi_cq_err_entry cerr;
    memset(&cerr, 0, sizeof cerr);
    EXPECT(fi_cq_read(n.cq, &e, 1) == -FI_EAVAIL);
    CHECK(fi_cq_readerr(n.cq, &cerr, 0));
    EXPECT(cerr.op_context == rctx && cerr.err == FI_ECANCELED);
    /* What the initiator wrote and added. */
    for (int i = 0; i < LEN / 2; i++)
        EXPECT(rw[i] == (char)(i * 3 + 1));
    uint64_t counter;
    memcpy(&counter, rw + LEN - 8, 8);
    EXPECT(counter == 1000 + 5 + 99);
    uint32_t word;
    memcpy(&word, rw + LEN - 16, 4);
    EXPECT(word == 77);
    CHECK(fi_close(&mr_rw->fid));
    CHECK(fi_close(&mr_ro->fid));
    close_node(&n);
    printf("target ok\n");
    exit(0);
}

int main(void) {
    int a[2], b[2];
    EXPECT(pipe(a) == 0 && pipe(b) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(a[0]);
        close(b[1]);
        target(a[1], b[0]);
    }
    close(a[1]);
    close(b[0]);
    struct node n;
    open_node(&n, FI_MSG | FI_RMA | FI_ATOMIC, FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED,
              FI_CQ_FORMAT_DATA);
    char peer_name[64];
    struct target_info t;
    EXPECT(read(a[0], peer_name, 64) == 64);
    EXPECT(read(a[0], &t, sizeof t) == sizeof t);
    fi_addr_t p;
    EXPECT(fi_av_insert(n.av, peer_name, 1, &p, 0, NULL) == 1);
    char *buf = malloc(LEN), *back = malloc(LEN);
    char ctx[8], why[256];
    uint64_t flags;

    /* Write half the region, read it back, read the read-only region. */
    for (int i = 0; i < LEN / 2; i++)
        buf[i] = (char)(i * 3 + 1);
    CHECK(fi_write(n.ep, buf, LEN / 2, NULL, p, t.rw_addr, t.rw_key, ctx));
    EXPECT(wait_for(&n, ctx, &flags, NULL) == 1);
    EXPECT(flags == (FI_RMA | FI_WRITE));
    CHECK(fi_read(n.ep, back, LEN / 2, NULL, p, t.rw_addr, t.rw_key, ctx));
    EXPECT(wait_for(&n, ctx, &flags, NULL) == 1);
    EXPECT(flags == (FI_RMA | FI_READ));
    EXPECT(memcmp(buf, back, LEN / 2) == 0);
    CHECK(fi_read(n.ep, back, 4096, NULL, p, t.ro_addr + 100, t.ro_key, ctx));
    EXPECT(wait_for(&n, ctx, NULL, NULL) == 1);
    for (int i = 0; i < 4096; i++)
        EXPECT(back[i] == (char)((i + 100) * 7));

    /* Atomics: a counter at the region's end. */
    uint64_t v = 1000, old = 0;
    CHECK(fi_atomic(n.ep, &v, 1, NULL, p, t.rw_addr + LEN - 8, t.rw_key, FI_UINT64, FI_ATOMIC_WRITE, ctx));
    EXPECT(wait_for(&n, ctx, &flags, NULL) == 1);
    v = 5;
    CHECK(fi_fetch_atomic(n.ep, &v, 1, NULL, &old, NULL, p, t.rw_addr + LEN - 8, t.rw_key,
                          FI_UINT64, FI_SUM, ctx));
    EXPECT(wait_for(&n, ctx, NULL, NULL) == 1);
    EXPECT(old == 1000);
    uint64_t cmp = 1005, swap = 1104;
    CHECK(fi_compare_atomic(n.ep, &swap, 1, NULL, &cmp, NULL, &old, NULL, p,
                            t.rw_addr + LEN - 8, t.rw_key, FI_UINT64, FI_CSWAP, ctx));
    EXPECT(wait_for(&n, ctx, NULL, NULL) == 1);
    EXPECT(old == 1005);
    uint32_t w = 77, wold = 1;
    CHECK(fi_fetch_atomic(n.ep, &w, 1, NULL, &wold, NULL, p, t.rw_addr + LEN - 16, t.rw_key,
                          FI_UINT32, FI_ATOMIC_WRITE, ctx));
    EXPECT(wait_for(&n, ctx, NULL, NULL) == 1);
    EXPECT(wold == 0);
    size_t count = 0;
    EXPECT(fi_atomicvalid(n.ep, FI_UINT64, FI_SUM, &count) == 0 && count >= 1);
    EXPECT(fi_compare_atomicvalid(n.ep, FI_UINT32, FI_CSWAP, &count) == 0 && count >= 1);
    EXPECT(fi_atomicvalid(n.ep, FI_DOUBLE, FI_SUM, &count) < 0);

    /* Writes with remote CQ data: the initiator's completion is a plain write's. */
    char *wd = malloc(65536);
    for (int w = 0; w < NOTICES; w++) {
        for (size_t i = 0; i < notice_len[w]; i++)
            wd[i] = notice_byte(w, i);
        uint64_t at = t.rw_addr + notice_off[w];
        if (w == 0) {
            CHECK(fi_writedata(n.ep, wd, notice_len[w], NULL, notice_data[w], p, at, t.rw_key, ctx));
            /* One sleeping read: the completion wakes it (a notice that finished inside the
             * read that sent it must not be left for a later one). */
            double t0 = now();
            struct fi_cq_data_entry e;
            EXPECT(fi_cq_sread(n.cq, &e, 1, NULL, 10000) == 1);
            EXPECT(e.op_context == ctx && e.flags == (FI_RMA | FI_WRITE));
            EXPECT(now() - t0 < 5);
            continue;
        } else if (w == 1) {
            struct iovec iov = {wd, notice_len[w]};
            struct fi_rma_iov rma = {at, notice_len[w], t.rw_key};
            struct fi_msg_rma msg = {&iov, NULL, 1, p, &rma, 1, ctx, notice_data[w]};
            CHECK(fi_writemsg(n.ep, &msg, FI_REMOTE_CQ_DATA | FI_COMPLETION));
        } else {
            /* Copied at the call: the buffer is changed at once. */
            CHECK(fi_inject_writedata(n.ep, wd, notice_len[w], notice_data[w], p, at, t.rw_key));
            memset(wd, 0, notice_len[w]);
            break;
        }
        EXPECT(wait_for(&n, ctx, &flags, NULL) == 1);
        EXPECT(flags == (FI_RMA | FI_WRITE));
    }
    /* Remote CQ data goes with writes only. */
    {
        struct iovec iov = {back, 16};
        struct fi_rma_iov rma = {t.rw_addr, 16, t.rw_key};
        struct fi_msg_rma msg = {&iov, NULL, 1, p, &rma, 1, ctx, 7};
        EXPECT(fi_readmsg(n.ep, &msg, FI_REMOTE_CQ_DATA) == -FI_EBADFLAGS);
    }
    printf("writedata ok\n");

    /* Refused, each an error entry that says why; nothing lost or hung. */
    CHECK(fi_read(n.ep, back, 16, NULL, p, t.rw_addr, t.rw_key + 1000, ctx));
    EXPECT(wait_for(&n, ctx, NULL, why) == -FI_EACCES);
    EXPECT(strstr(why, "no region has that key") != NULL);
    CHECK(fi_read(n.ep, back, 16, NULL, p, t.rw_addr + LEN - 8, t.rw_key, ctx));
    EXPECT(wait_for(&n, ctx, NULL, why) == -FI_EACCES);
    EXPECT(strstr(why, "not inside the region") != NULL);
    CHECK(fi_write(n.ep, buf, 16, NULL, p, t.ro_addr, t.ro_key, ctx));
    EXPECT(wait_for(&n, ctx, NULL, why) == -FI_EACCES);
    EXPECT(strstr(why, "does not allow") != NULL);
    /* A refused write with remote CQ data: the error at the initiator, no entry at the target
     * (it would not know 0x4444). */
    CHECK(fi_writedata(n.ep, buf, 16, NULL, 0x4444, p, t.ro_addr, t.ro_key, ctx));
    EXPECT(wait_for(&n, ctx, NULL, why) == -FI_EACCES);
    EXPECT(strstr(why, "does not allow") != NULL);
    CHECK(fi_atomic(n.ep, &v, 1, NULL, p, t.ro_addr, t.ro_key, FI_UINT64, FI_SUM, ctx));
    EXPECT(wait_for(&n, ctx, NULL, why) == -FI_EACCES);
    CHECK(fi_atomic(n.ep, &v, 1, NULL, p, t.rw_addr + 3, t.rw_key, FI_UINT64, FI_SUM, ctx));
    EXPECT(wait_for(&n, ctx, NULL, why) == -FI_EACCES);
    EXPECT(strstr(why, "alignment") != NULL);
    printf("refusals ok: %s\n", why);

    /* The target checks its memory and closes. */
    EXPECT(write(b[1], "x", 1) == 1);
    int status;
    EXPECT(waitpid(pid, &status, 0) == pid);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* An endpoint opened without FI_RMA refuses RMA and atomic calls. */
    struct node m;
    open_node(&m, FI_MSG, FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED, FI_CQ_FORMAT_DATA);
    EXPECT(fi_read(m.ep, back, 16, NULL, 0, 0, 1, ctx) == -FI_EOPNOTSUPP);
    EXPECT(fi_atomic(m.ep, &v, 1, NULL, 0, 0, 1, FI_UINT64, FI_SUM, ctx) == -FI_EOPNOTSUPP);
    close_node(&m);
    close_node(&n);
    printf("rma ok\n");
    return 0;
}
