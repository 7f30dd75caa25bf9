/* What tests/c/bad_input.c and rma.c share: checks that end the process, and one libfabric node
 * (fabric, domain, map AV, one CQ with a wait fd, one RDM endpoint) opened through hxcomm. */
#ifndef HXCOMM_TEST_NODE_H
#define HXCOMM_TEST_NODE_H

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(x)                                                                          \
    do {                                                                                  \
        int _r = (int)(x);                                                                \
        if (_r < 0) {                                                                     \
            fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__, __LINE__, #x, _r,          \
                    fi_strerror(-_r));                                                    \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)
#define EXPECT(c)                                                                         \
    do {                                                                                  \
        if (!(c)) {                                                                       \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #c);              \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

struct node {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    char name[64];
};

/* Opens `n` with `caps` (all of which must be given), `mr_mode` (0: the provider's default) and
 * a CQ of `cq_format`; its name is in n->name. */
static inline void open_node(struct node *n, uint64_t caps, int mr_mode,
                             enum fi_cq_format cq_format) {
    struct fi_info *hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = caps;
    if (mr_mode)
        hints->domain_attr->mr_mode = mr_mode;
    hints->fabric_attr->prov_name = strdup("hxcomm");
    CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &n->info));
    fi_freeinfo(hints);
    EXPECT((n->info->caps & caps) == caps);
    CHECK(fi_fabric(n->info->fabric_attr, &n->fabric, NULL));
    CHECK(fi_domain(n->fabric, n->info, &n->domain, NULL));
    struct fi_av_attr av = {.type = FI_AV_MAP};
    CHECK(fi_av_open(n->domain, &av, &n->av, NULL));
    struct fi_cq_attr cq = {.format = cq_format, .wait_obj = FI_WAIT_FD};
    CHECK(fi_cq_open(n->domain, &cq, &n->cq, NULL));
    CHECK(fi_endpoint(n->domain, n->info, &n->ep, NULL));
    CHECK(fi_ep_bind(n->ep, &n->av->fid, 0));
    CHECK(fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK(fi_enable(n->ep));
    size_t len = sizeof n->name;
    CHECK(fi_getname(&n->ep->fid, n->name, &len));
}

static inline void close_node(struct node *n) {
    CHECK(fi_close(&n->ep->fid));
    CHECK(fi_close(&n->av->fid));
    CHECK(fi_close(&n->cq->fid));
    CHECK(fi_close(&n->domain->fid));
    CHECK(fi_close(&n->fabric->fid));
    fi_freeinfo(n->info);
}

static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#endif
