/* FI_THREAD_SAFE: two threads drive two endpoints of one domain at once (one engine under the
 * domain's lock), each sending to the other while receiving from it: random sizes from 0 to
 * 70,000 bytes (eager and rendezvous), every byte checked, tags in order.
 * Usage: FI_PROVIDER_PATH=<dir with libhxcomm_fi.so> ./threads */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#define MSGS 1500
#define WINDOW 8
#define MAXLEN 70000

#define CHECK(x)                                                                          \
	do {                                                                              \
		long _r = (long)(x);                                                      \
		if (_r) {                                                                 \
			fprintf(stderr, "%s:%d: %s = %ld (%s)\n", __FILE__, __LINE__, #x, _r, \
				fi_strerror((int)-_r));                                   \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

struct side {
	int id;
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t peer;
	long bytes;
};

static size_t len_of(int sender, int i)
{
	uint32_t x = (uint32_t)(sender * 2654435761u + i * 40503u + 12345u);
	x ^= x >> 13;
	x *= 0x5bd1e995u;
	x ^= x >> 15;
	return (i % 5 == 0) ? 0 : x % MAXLEN;
}

static unsigned char byte_of(int sender, int i, size_t k)
{
	return (unsigned char)(sender * 7 + i * 13 + k * 31 + (k >> 8));
}

static void *run(void *arg)
{
	struct side *s = arg;
	static __thread unsigned char *sbuf[WINDOW], *rbuf[WINDOW];
	struct fi_context sctx[WINDOW], rctx[WINDOW];
	for (int w = 0; w < WINDOW; w++) {
		sbuf[w] = malloc(MAXLEN + 1);
		rbuf[w] = malloc(MAXLEN + 1);
	}
	for (int base = 0; base < MSGS; base += WINDOW) {
		int n = MSGS - base < WINDOW ? MSGS - base : WINDOW;
		for (int w = 0; w < n; w++)
			CHECK(fi_trecv(s->ep, rbuf[w], MAXLEN, NULL, s->peer, (uint64_t)(base + w), 0,
				       &rctx[w]));
		for (int w = 0; w < n; w++) {
			int i = base + w;
			size_t len = len_of(s->id, i);
			for (size_t k = 0; k < len; k++)
				sbuf[w][k] = byte_of(s->id, i, k);
			ssize_t r;
			while ((r = fi_tsend(s->ep, sbuf[w], len, NULL, s->peer, (uint64_t)i, &sctx[w])) ==
			       -FI_EAGAIN)
				(void)fi_cq_read(s->cq, NULL, 0);
			CHECK(r);
		}
		int done = 0;
		while (done < 2 * n) {
			struct fi_cq_tagged_entry e;
			ssize_t r = fi_cq_read(s->cq, &e, 1);
			if (r == -FI_EAGAIN)
				continue;
			if (r != 1) {
				struct fi_cq_err_entry err = {0};
				fi_cq_readerr(s->cq, &err, 0);
				fprintf(stderr, "thread %d: fi_cq_read %zd, error %d\n", s->id, r, err.err);
				exit(1);
			}
			done++;
			if (!(e.flags & FI_RECV))
				continue;
			int w = (struct fi_context *)e.op_context - rctx;
			if (w < 0 || w >= n) {
				fprintf(stderr, "thread %d: unknown context\n", s->id);
				exit(1);
			}
			int i = base + w;
			int from = 1 - s->id;
			size_t want = len_of(from, i);
			if (e.tag != (uint64_t)i || e.len != want) {
				fprintf(stderr, "thread %d: message %d: tag %lu len %zu, want len %zu\n", s->id,
					i, (unsigned long)e.tag, e.len, want);
				exit(1);
			}
			for (size_t k = 0; k < want; k++)
				if (rbuf[w][k] != byte_of(from, i, k)) {
					fprintf(stderr, "thread %d: message %d byte %zu wrong\n", s->id, i, k);
					exit(1);
				}
			s->bytes += (long)want;
		}
	}
	for (int w = 0; w < WINDOW; w++) {
		free(sbuf[w]);
		free(rbuf[w]);
	}
	return NULL;
}

int main(void)
{
	alarm(120);
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED | FI_DIRECTED_RECV;
	hints->fabric_attr->prov_name = strdup("hxcomm");
	hints->domain_attr->threading = FI_THREAD_SAFE;
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	if (info->domain_attr->threading != FI_THREAD_SAFE) {
		fprintf(stderr, "FI_THREAD_SAFE not granted\n");
		return 1;
	}
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	CHECK(fi_av_open(domain, &av_attr, &av, NULL));
	struct side s[2];
	char names[2][64];
	fi_addr_t addrs[2];
	for (int t = 0; t < 2; t++) {
		struct fi_cq_attr cq_attr = { .size = 64, .format = FI_CQ_FORMAT_TAGGED };
		memset(&s[t], 0, sizeof s[t]);
		s[t].id = t;
		CHECK(fi_cq_open(domain, &cq_attr, &s[t].cq, NULL));
		CHECK(fi_endpoint(domain, info, &s[t].ep, NULL));
		CHECK(fi_ep_bind(s[t].ep, &av->fid, 0));
		CHECK(fi_ep_bind(s[t].ep, &s[t].cq->fid, FI_TRANSMIT | FI_RECV));
		CHECK(fi_enable(s[t].ep));
		size_t len = 64;
		CHECK(fi_getname(&s[t].ep->fid, names[t], &len));
	}
	if (fi_av_insert(av, names, 2, addrs, 0, NULL) != 2) {
		fprintf(stderr, "fi_av_insert failed\n");
		return 1;
	}
	s[0].peer = addrs[1];
	s[1].peer = addrs[0];
	pthread_t th[2];
	for (int t = 0; t < 2; t++)
		if (pthread_create(&th[t], NULL, run, &s[t]))
			return 1;
	for (int t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	for (int t = 0; t < 2; t++) {
		CHECK(fi_close(&s[t].ep->fid));
		CHECK(fi_close(&s[t].cq->fid));
	}
	CHECK(fi_close(&av->fid));
	CHECK(fi_close(&domain->fid));
	CHECK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	fi_freeinfo(hints);
	printf("threads ok: %d messages each way, %ld and %ld bytes checked\n", MSGS, s[0].bytes,
	       s[1].bytes);
	return 0;
}
