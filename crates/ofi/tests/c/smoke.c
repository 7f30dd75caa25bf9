/* End-to-end check of the hxcomm libfabric provider through libfabric's loader (one process,
 * the endpoint talks to itself and to a second endpoint of the same domain).
 * Usage: FI_PROVIDER_PATH=<dir with libhxcomm_fi.so> ./smoke map|table */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define CHECK(x)                                                                          \
	do {                                                                              \
		long _r = (long)(x);                                                      \
		if (_r) {                                                                 \
			fprintf(stderr, "%s:%d: %s = %ld (%s)\n", __FILE__, __LINE__, #x, _r, \
				fi_strerror((int)-_r));                                   \
			return 1;                                                         \
		}                                                                         \
	} while (0)
#define EXPECT(c)                                                                         \
	do {                                                                              \
		if (!(c)) {                                                               \
			fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #c);  \
			return 1;                                                         \
		}                                                                         \
	} while (0)

static struct fid_cq *cq;

/* One completion within a second. */
static int wait_one(struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
	ssize_t n = fi_cq_sreadfrom(cq, e, 1, src, NULL, 1000);
	if (n != 1) {
		fprintf(stderr, "fi_cq_sreadfrom: %zd (%s)\n", n, fi_strerror((int)-n));
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int table = argc > 1 && !strcmp(argv[1], "table");
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_ep *ep, *ep2;
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	struct fi_context rctx, sctx, cctx, pctx;
	char name[64], name2[64], rbuf[64];
	size_t len;
	fi_addr_t self, other, src;
	int fd;

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV | FI_SOURCE;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->fabric_attr->prov_name = strdup("hxcomm");
	hints->domain_attr->av_type = table ? FI_AV_TABLE : FI_AV_MAP;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->tx_attr->op_flags = FI_COMPLETION;
	hints->rx_attr->op_flags = FI_COMPLETION;
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	EXPECT(!strcmp(info->fabric_attr->prov_name, "hxcomm"));
	EXPECT(info->domain_attr->threading == FI_THREAD_DOMAIN);
	EXPECT(info->mode == 0);

	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	struct fi_av_attr av_attr = { .type = info->domain_attr->av_type };
	CHECK(fi_av_open(domain, &av_attr, &av, NULL));
	struct fi_cq_attr cq_attr = { .size = 100, .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD };
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_endpoint(domain, info, &ep, NULL));
	CHECK(fi_endpoint(domain, info, &ep2, NULL));
	EXPECT(fi_enable(ep) == -FI_ENOAV);
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	EXPECT(fi_enable(ep) == -FI_ENOCQ);
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION));
	CHECK(fi_enable(ep));
	CHECK(fi_ep_bind(ep2, &av->fid, 0));
	CHECK(fi_ep_bind(ep2, &cq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION));
	CHECK(fi_enable(ep2));
	CHECK(fi_control(&cq->fid, FI_GETWAIT, &fd));
	EXPECT(fd >= 0);

	len = 8;
	EXPECT(fi_getname(&ep->fid, name, &len) == -FI_ETOOSMALL && len == 64);
	CHECK(fi_getname(&ep->fid, name, &len));
	EXPECT(len == 64);
	len = 64;
	CHECK(fi_getname(&ep2->fid, name2, &len));
	EXPECT(fi_av_insert(av, name, 1, &self, 0, NULL) == 1);
	EXPECT(fi_av_insert(av, name2, 1, &other, 0, NULL) == 1);
	EXPECT(self != other);
	char straddr[128];
	len = sizeof straddr;
	EXPECT(fi_av_straddr(av, name, straddr, &len) == straddr);
	char back[64];
	len = sizeof back;
	CHECK(fi_av_lookup(av, self, back, &len));
	EXPECT(len == 64 && !memcmp(back, name, 64));

	/* Tag matching with an ignore mask, remote CQ data, source address. */
	memset(rbuf, 0, sizeof rbuf);
	CHECK(fi_trecv(ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, 0x1200, 0xff, &rctx));
	CHECK(fi_tsend(ep, "not me", 7, NULL, self, 0x2200, &sctx));
	CHECK(wait_one(&e, &src));
	EXPECT(e.op_context == &sctx && (e.flags & FI_SEND));
	EXPECT(fi_cq_read(cq, &e, 1) == -FI_EAGAIN);
	CHECK(fi_tsenddata(ep2, "hello hxcomm", 13, NULL, 0xdeadbeef, self, 0x1234, &sctx));
	for (int i = 0; i < 2; i++) {
		CHECK(wait_one(&e, &src));
		if (e.op_context == &sctx)
			continue;
		EXPECT(e.op_context == &rctx);
		EXPECT((e.flags & (FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA)) == (FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA));
		EXPECT(e.tag == 0x1234 && e.data == 0xdeadbeef && e.len == 13);
		EXPECT(!memcmp(rbuf, "hello hxcomm", 13));
		EXPECT(src == other);
	}
	/* The unmatched "not me" (tag 0x2200) is still there: directed receive from self. */
	CHECK(fi_trecv(ep, rbuf, sizeof rbuf, NULL, self, 0x2200, 0, &rctx));
	CHECK(wait_one(&e, &src));
	EXPECT(e.op_context == &rctx && e.len == 7 && !strcmp(rbuf, "not me") && src == self);

	/* Inject: no completion for the send. */
	CHECK(fi_tinject(ep, "inj", 4, self, 7));
	CHECK(fi_trecv(ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, 7, 0, &rctx));
	CHECK(wait_one(&e, NULL));
	EXPECT(e.op_context == &rctx && !strcmp(rbuf, "inj"));
	EXPECT(fi_cq_read(cq, &e, 1) == -FI_EAGAIN);

	/* Open MPI's Ssend ACK: zero iov, NULL context, flags 0 -> no completion. */
	struct fi_msg_tagged m = { .msg_iov = NULL, .iov_count = 0, .addr = self, .tag = 9 };
	CHECK(fi_tsendmsg(ep, &m, 0));
	CHECK(fi_trecv(ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, 9, 0, &rctx));
	CHECK(wait_one(&e, NULL));
	EXPECT(e.op_context == &rctx && e.len == 0);
	EXPECT(fi_cq_read(cq, &e, 1) == -FI_EAGAIN);

	/* Peek without a message: FI_ENOMSG; with one: found, then claimed and received. */
	m = (struct fi_msg_tagged){ .addr = FI_ADDR_UNSPEC, .tag = 42, .context = &pctx };
	CHECK(fi_trecvmsg(ep, &m, FI_PEEK | FI_COMPLETION));
	EXPECT(fi_cq_read(cq, &e, 1) == -FI_EAVAIL);
	memset(&err, 0, sizeof err);
	EXPECT(fi_cq_readerr(cq, &err, 0) == 1);
	EXPECT(err.err == FI_ENOMSG && err.op_context == &pctx);
	CHECK(fi_tsenddata(ep, "peeked", 7, NULL, 5, self, 42, &sctx));
	CHECK(wait_one(&e, NULL));
	CHECK(fi_trecvmsg(ep, &m, FI_PEEK | FI_CLAIM | FI_COMPLETION));
	CHECK(wait_one(&e, NULL));
	EXPECT(e.op_context == &pctx && e.len == 7 && e.tag == 42 && e.data == 5);
	struct iovec iov = { rbuf, sizeof rbuf };
	m = (struct fi_msg_tagged){ .msg_iov = &iov, .iov_count = 1, .addr = 0, .tag = 42, .context = &pctx };
	CHECK(fi_trecvmsg(ep, &m, FI_CLAIM | FI_COMPLETION));
	CHECK(wait_one(&e, NULL));
	EXPECT(e.op_context == &pctx && e.len == 7 && !strcmp(rbuf, "peeked"));

	/* Cancel of a posted receive: an FI_ECANCELED error entry. */
	CHECK(fi_trecv(ep, rbuf, sizeof rbuf, NULL, FI_ADDR_UNSPEC, 0x9999, 0, &cctx));
	CHECK(fi_cancel(&ep->fid, &cctx));
	EXPECT(fi_cq_read(cq, &e, 1) == -FI_EAVAIL);
	char errbuf[64];
	memset(&err, 0, sizeof err);
	err.err_data = errbuf;
	err.err_data_size = sizeof errbuf;
	EXPECT(fi_cq_readerr(cq, &err, 0) == 1);
	EXPECT(err.err == FI_ECANCELED && err.op_context == &cctx);
	EXPECT(fi_cancel(&ep->fid, &cctx) == -FI_ENOENT);
	EXPECT(fi_cq_readerr(cq, &err, 0) == -FI_EAGAIN);
	EXPECT(fi_cq_sread(cq, &e, 1, NULL, 10) == -FI_EAGAIN);

	/* Errors on the data path. */
	EXPECT(fi_tsend(ep, "x", 1, NULL, 12345, 1, &sctx) == -FI_EINVAL);
	EXPECT(fi_tinject(ep, rbuf, 5000, self, 1) == -FI_EMSGSIZE);
	struct iovec two[2] = { { rbuf, 1 }, { rbuf, 1 } };
	EXPECT(fi_tsendv(ep, two, NULL, 2, self, 1, &sctx) == -FI_EINVAL);

	/* A removed address names nothing any more, even right after it was used (the provider
	 * caches the last address it looked up). */
	CHECK(fi_tinject(ep, "y", 2, other, 1));
	CHECK(fi_av_remove(av, &other, 1, 0));
	EXPECT(fi_tinject(ep, "y", 2, other, 1) == -FI_EINVAL);
	EXPECT(fi_tsend(ep, "y", 2, NULL, other, 1, &sctx) == -FI_EINVAL);
	EXPECT(fi_trecv(ep, rbuf, sizeof rbuf, NULL, other, 1, 0, &rctx) == -FI_EINVAL);
	CHECK(fi_tinject(ep, "z", 2, self, 1));

	/* Open MPI's close order; the domain refuses to go while children are open. */
	EXPECT(fi_close(&domain->fid) == -FI_EBUSY);
	EXPECT(fi_close(&cq->fid) == -FI_EBUSY);
	CHECK(fi_close(&ep2->fid));
	CHECK(fi_close(&ep->fid));
	CHECK(fi_close(&av->fid));
	CHECK(fi_close(&cq->fid));
	CHECK(fi_close(&domain->fid));
	CHECK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	fi_freeinfo(hints);
	printf("smoke ok (%s)\n", table ? "table" : "map");
	return 0;
}
