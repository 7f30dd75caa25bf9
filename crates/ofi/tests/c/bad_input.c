/* Bad input and failures through libfabric, as a user would meet them (issue 8): malformed
 * addresses, unknown fi_addr_t, a peer that dies with operations outstanding, a stranger
 * without the job secret. The parent and its forked children are separate processes with
 * their own domains; names travel over pipes.
 *
 *   bad_input SECRET_HEX OTHER_SECRET_HEX
 */
#include <errno.h>
#include "node.h"
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Waits up to `secs` for one completion; returns 1 ok, -1 error entry (filled in), 0 none. */
static int wait_one(struct node *n, struct fi_cq_tagged_entry *e, struct fi_cq_err_entry *err,
                    double secs) {
    double end = now() + secs;
    while (now() < end) {
        ssize_t r = fi_cq_sread(n->cq, e, 1, NULL, 100);
        if (r == 1)
            return 1;
        if (r == -FI_EAVAIL) {
            memset(err, 0, sizeof *err);
            static char buf[256];
            err->err_data = buf;
            err->err_data_size = sizeof buf;
            CHECK(fi_cq_readerr(n->cq, err, 0));
            return -1;
        }
        if (r != -FI_EAGAIN)
            CHECK(r);
    }
    return 0;
}

/* A child: its own domain with `secret`; gives its name, takes the parent's, then `role`. */
static void child(const char *secret, int to_parent, int from_parent, const char *role) {
    /* Wait for the parent before opening anything. */
    char go;
    EXPECT(read(from_parent, &go, 1) == 1);
    setenv("HX_JOB_SECRET", secret, 1);
    setenv("HX_RANK_TIMEOUT", "2", 1);
    struct node n;
    open_node(&n, FI_TAGGED | FI_MSG | FI_DIRECTED_RECV, 0, FI_CQ_FORMAT_TAGGED);
    EXPECT(write(to_parent, n.name, 64) == 64);
    char parent[64];
    EXPECT(read(from_parent, parent, 64) == 64);
    fi_addr_t p;
    EXPECT(fi_av_insert(n.av, parent, 1, &p, 0, NULL) == 1);
    if (!strcmp(role, "echo-then-die")) {
        /* Answer one message, then die with the parent waiting on us. */
        char buf[16];
        struct fi_cq_tagged_entry e;
        struct fi_cq_err_entry err;
        CHECK(fi_trecv(n.ep, buf, sizeof buf, NULL, p, 1, 0, buf));
        EXPECT(wait_one(&n, &e, &err, 10) == 1);
        CHECK(fi_tsend(n.ep, buf, e.len, NULL, p, 2, buf));
        EXPECT(wait_one(&n, &e, &err, 10) == 1);
        char go;
        EXPECT(read(from_parent, &go, 1) == 1);
        _exit(0); /* no fi_close: as a crash would */
    }
    if (!strcmp(role, "stranger")) {
        /* Without the job secret: the send must fail, not hang and not arrive. */
        struct fi_cq_tagged_entry e;
        struct fi_cq_err_entry err;
        char msg[8] = "intrude";
        CHECK(fi_tsend(n.ep, msg, sizeof msg, NULL, p, 7, msg));
        int r = wait_one(&n, &e, &err, 20);
        if (r != -1) {
            fprintf(stderr, "stranger: send did not fail (%d)\n", r);
            _exit(3);
        }
        fprintf(stderr, "stranger: send failed as it should: %s\n", (char *)err.err_data);
        close_node(&n);
        _exit(0);
    }
    _exit(2);
}

static pid_t spawn(const char *secret, const char *role, int *to_child, int *from_child) {
    int a[2], b[2];
    EXPECT(pipe(a) == 0 && pipe(b) == 0);
    pid_t pid = fork();
    EXPECT(pid >= 0);
    if (pid == 0) {
        close(a[0]);
        close(b[1]);
        child(secret, a[1], b[0], role);
    }
    close(a[1]);
    close(b[0]);
    *from_child = a[0];
    *to_child = b[1];
    return pid;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: bad_input SECRET OTHER_SECRET\n");
        return 2;
    }
    /* Children first: forked after the parent opened its domain they would hold copies of its
     * sockets (a dead child's connections would then stay open in nobody's hands). */
    int to_child, from_child, to_stranger, from_stranger;
    pid_t pid = spawn(argv[1], "echo-then-die", &to_child, &from_child);
    pid_t stranger = spawn(argv[2], "stranger", &to_stranger, &from_stranger);
    setenv("HX_JOB_SECRET", argv[1], 1);
    setenv("HX_RANK_TIMEOUT", "2", 1);
    struct node n;
    open_node(&n, FI_TAGGED | FI_MSG | FI_DIRECTED_RECV, 0, FI_CQ_FORMAT_TAGGED);

    /* Malformed addresses: nothing inserted, the entry says FI_ADDR_NOTAVAIL. */
    char bad[64];
    memcpy(bad, n.name, 64);
    bad[0] ^= 0x5a;
    fi_addr_t a = 0;
    EXPECT(fi_av_insert(n.av, bad, 1, &a, 0, NULL) == 0);
    EXPECT(a == FI_ADDR_NOTAVAIL);
    char zero[64] = {0};
    EXPECT(fi_av_insert(n.av, zero, 1, &a, 0, NULL) == 0);
    /* An fi_addr_t that names nobody. */
    char x = 1;
    EXPECT(fi_tsend(n.ep, &x, 1, NULL, (fi_addr_t)123456, 1, &x) == -FI_EINVAL);
    EXPECT(fi_tinject(n.ep, &x, 1, (fi_addr_t)123456, 1) == -FI_EINVAL);

    /* A peer that dies with a receive from it posted: the receive fails, naming it. */
    char cname[64];
    EXPECT(write(to_child, "s", 1) == 1);
    EXPECT(read(from_child, cname, 64) == 64);
    EXPECT(write(to_child, n.name, 64) == 64);
    fi_addr_t c;
    EXPECT(fi_av_insert(n.av, cname, 1, &c, 0, NULL) == 1);
    char buf[16] = "ping", back[16];
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry err;
    CHECK(fi_tsend(n.ep, buf, 5, NULL, c, 1, buf));
    CHECK(fi_trecv(n.ep, back, sizeof back, NULL, c, 2, 0, back));
    int got = 0;
    while (got < 2) {
        EXPECT(wait_one(&n, &e, &err, 10) == 1);
        got++;
    }
    EXPECT(!strcmp(back, "ping"));
    /* Receives from it, and from anyone while it is the only peer: both fail when it dies
     * (nothing is left that could match them) rather than wait forever. */
    char late[16], anylate[16];
    CHECK(fi_trecv(n.ep, late, sizeof late, NULL, c, 3, 0, late));
    CHECK(fi_trecv(n.ep, anylate, sizeof anylate, NULL, FI_ADDR_UNSPEC, 4, 0, anylate));
    EXPECT(write(to_child, "g", 1) == 1);
    int status;
    EXPECT(waitpid(pid, &status, 0) == pid);
    double t0 = now();
    int failed_late = 0, failed_any = 0;
    for (int k = 0; k < 2; k++) {
        int r = wait_one(&n, &e, &err, 10);
        if (r != -1 || err.err != FI_EIO || (err.op_context != late && err.op_context != anylate)) {
            fprintf(stderr, "receive from a dead peer: r=%d err=%d after %.1f s\n", r, err.err,
                    now() - t0);
            return 1;
        }
        failed_late += err.op_context == late;
        failed_any += err.op_context == anylate;
        printf("dead peer: %s receive failed after %.2f s: %s\n",
               err.op_context == late ? "directed" : "any-source", now() - t0,
               (char *)err.err_data);
    }
    EXPECT(failed_late == 1 && failed_any == 1);

    /* A stranger (another job secret) cannot deliver anything. */
    struct fi_cq_tagged_entry se;
    char intruded[8];
    CHECK(fi_trecv(n.ep, intruded, sizeof intruded, NULL, FI_ADDR_UNSPEC, 7, 0, intruded));
    EXPECT(write(to_stranger, "s", 1) == 1);
    EXPECT(read(from_stranger, cname, 64) == 64);
    EXPECT(write(to_stranger, n.name, 64) == 64);
    /* Keep making progress (refusing its connections) until the stranger gives up. */
    double deadline = now() + 30;
    while (waitpid(stranger, &status, WNOHANG) == 0) {
        EXPECT(now() < deadline);
        EXPECT(wait_one(&n, &se, &err, 0.1) == 0); /* nothing arrives from it */
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "stranger child ended with status %#x\n", status);
        return 1;
    }
    CHECK(fi_cancel(&n.ep->fid, intruded));
    EXPECT(wait_one(&n, &se, &err, 5) == -1 && err.err == FI_ECANCELED);

    close_node(&n);
    printf("bad input ok\n");
    return 0;
}
