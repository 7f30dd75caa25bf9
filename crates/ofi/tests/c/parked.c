/* Two processes of one host (shared memory between them) through the hxcomm provider: the
 * receive a CQ poll serves straight from the ring (a "parked" receive, engine_backend.rs) keeps
 * every rule of a posted one: receives match in the order they were posted and messages in the
 * order they were sent, a probe does not see what a posted receive takes, cancel, truncation,
 * large messages, messages that came first, another tag ahead in the ring, a send of its own
 * in flight, cancel after it was posted behind a second receive, zero-length, CQ data and
 * source, a window of receives held at once (the message of each turn to each, several
 * entries from one read, more than the provider holds, a message for the second of two held
 * receives first, cancel of the middle one of three), sends that complete as they return, the
 * peer dying while a receive from it is held; and the same rules for a receive that a run of
 * receives and answers armed without the domain's state (a hold, domain.rs): truncation, a
 * large message through the ring, cancel, a second receive behind it, the peer dying.
 * Usage: FI_PROVIDER_PATH=<dir> HX_JOB_SECRET=<hex> ./parked */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
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
			fprintf(stderr, "%s %s:%d: %s = %ld (%s)\n", who, __FILE__, __LINE__, #x, \
				_r, fi_strerror((int)-_r));                               \
			return 1;                                                         \
		}                                                                         \
	} while (0)
#define EXPECT(c)                                                                         \
	do {                                                                              \
		if (!(c)) {                                                               \
			fprintf(stderr, "%s %s:%d: expected %s\n", who, __FILE__, __LINE__, #c); \
			return 1;                                                         \
		}                                                                         \
	} while (0)

#define BIG (1 << 20)
#define HOLD_REPS 10
#define WINDOW_MAX 600

static const char *who = "?";
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_cq *cq;
static struct fid_ep *ep;
static fi_addr_t peer;
static int to_peer, from_peer; /* pipes, for "go" signals outside the provider */

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Polls the CQ (never sleeps on it: that is the path under test) for one entry or an error,
 * for up to 10 s. Returns 1 for an entry, -FI_EAVAIL for an error entry, 0 on timeout. */
static int poll_one(struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
	double end = now() + 10;
	while (now() < end) {
		ssize_t n = fi_cq_readfrom(cq, e, 1, src);
		if (n == 1 || n == -FI_EAVAIL)
			return (int)n;
		if (n != -FI_EAGAIN) {
			fprintf(stderr, "%s fi_cq_readfrom: %zd (%s)\n", who, n, fi_strerror((int)-n));
			return 0;
		}
	}
	fprintf(stderr, "%s: no completion within 10 s\n", who);
	return 0;
}

static int signal_peer(void)
{
	char c = 'g';
	return write(to_peer, &c, 1) == 1 ? 0 : 1;
}

static int wait_peer(void)
{
	char c;
	return read(from_peer, &c, 1) == 1 ? 0 : 1;
}

/* A send that completes: polls until its own completion. */
static int send_done(const void *buf, size_t len, uint64_t tag)
{
	struct fi_context ctx;
	struct fi_cq_tagged_entry e;
	CHECK(fi_tsend(ep, buf, len, NULL, peer, tag, &ctx));
	EXPECT(poll_one(&e, NULL) == 1);
	EXPECT(e.op_context == &ctx && (e.flags & FI_SEND));
	return 0;
}

/* The peer's name, as its fi_getname gave it. */
static char peer_name[64];

static int open_all(void)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	char name[64], other[64];
	size_t len = sizeof name;

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE | FI_REMOTE_CQ_DATA;
	hints->domain_attr->cq_data_size = 8;
	hints->mode = FI_CONTEXT;
	hints->fabric_attr->prov_name = strdup("hxcomm");
	hints->domain_attr->av_type = FI_AV_TABLE;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	CHECK(fi_av_open(domain, &av_attr, &av, NULL));
	struct fi_cq_attr cq_attr = { .size = 64, .format = FI_CQ_FORMAT_TAGGED };
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_endpoint(domain, info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(ep));
	CHECK(fi_getname(&ep->fid, name, &len));
	EXPECT(write(to_peer, name, 64) == 64);
	EXPECT(read(from_peer, other, 64) == 64);
	EXPECT(fi_av_insert(av, other, 1, &peer, 0, NULL) == 1);
	memcpy(peer_name, other, sizeof peer_name);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}

static int close_all(void)
{
	CHECK(fi_close(&ep->fid));
	CHECK(fi_close(&av->fid));
	CHECK(fi_close(&cq->fid));
	CHECK(fi_close(&domain->fid));
	CHECK(fi_close(&fabric->fid));
	return 0;
}

/* Reads completions (up to 16 per read, never sleeping) of `n` operations whose contexts are
 * ctx[0..n), each exactly once, with `flags` set; for up to 10 s. Returns the most entries one
 * read gave, or -1. */
static int window_done(struct fi_context *ctx, int n, uint64_t flags)
{
	static char seen[WINDOW_MAX];
	struct fi_cq_tagged_entry es[16];
	int got = 0, most = 0;
	double end = now() + 10;
	memset(seen, 0, sizeof seen);
	while (got < n && now() < end) {
		ssize_t r = fi_cq_read(cq, es, 16);
		if (r == -FI_EAGAIN)
			continue;
		if (r <= 0) {
			fprintf(stderr, "%s fi_cq_read: %zd (%s)\n", who, r, fi_strerror((int)-r));
			return -1;
		}
		for (ssize_t j = 0; j < r; j++) {
			long k = (struct fi_context *)es[j].op_context - ctx;
			if (k < 0 || k >= n || seen[k] || (es[j].flags & flags) != flags) {
				fprintf(stderr, "%s: unexpected completion %ld of %d\n", who, k, n);
				return -1;
			}
			seen[k] = 1;
		}
		got += (int)r;
		if (r > most)
			most = (int)r;
	}
	if (got < n)
		fprintf(stderr, "%s: %d of %d completions within 10 s\n", who, got, n);
	return got == n ? most : -1;
}

/* A window of `n` receives of `tag` into slots of their own, read once the peer has sent all
 * its messages: slot k must hold k, the k-th message sent. Returns the most entries one read
 * gave, or -1. */
static int recv_window(int n, uint64_t tag)
{
	static uint64_t slot[WINDOW_MAX];
	static struct fi_context cw[WINDOW_MAX];
	for (int k = 0; k < n; k++) {
		slot[k] = ~0ULL;
		if (fi_trecv(ep, &slot[k], sizeof slot[k], NULL, peer, tag, 0, &cw[k]))
			return -1;
	}
	if (signal_peer() || wait_peer())
		return -1;
	int most = window_done(cw, n, FI_RECV | FI_TAGGED);
	for (int k = 0; most > 0 && k < n; k++) {
		if (slot[k] != (uint64_t)k) {
			fprintf(stderr, "%s: slot %d holds %llu\n", who, k, (unsigned long long)slot[k]);
			return -1;
		}
	}
	return most;
}

/* The sending side of recv_window: `n` sends of 0..n from buffers of their own, each
 * completing (as it returns: they are small). */
static int send_window(int n, uint64_t tag)
{
	static uint64_t v[WINDOW_MAX];
	static struct fi_context cs[WINDOW_MAX];
	for (int k = 0; k < n; k++) {
		v[k] = (uint64_t)k;
		CHECK(fi_tsend(ep, &v[k], sizeof v[k], NULL, peer, tag, &cs[k]));
	}
	CHECK(signal_peer());
	EXPECT(window_done(cs, n, FI_SEND | FI_TAGGED) > 0);
	return 0;
}

/* A run of `n` turns of a ping-pong on `tag` (the receiving side: receive i, answer it),
 * every value checked: afterwards the provider holds the peer's lane for such receives and
 * answers (a "hold", domain.rs), and the next receive of `tag` is armed without the state. */
static int hold_recv_run(uint64_t tag, int n)
{
	struct fi_cq_tagged_entry e;
	struct fi_context c;
	uint64_t v;
	for (uint64_t i = 0; i < (uint64_t)n; i++) {
		CHECK(fi_trecv(ep, &v, sizeof v, NULL, peer, tag, 0, &c));
		EXPECT(poll_one(&e, NULL) == 1);
		EXPECT(e.op_context == &c && v == i * 3 + tag && e.tag == tag);
		CHECK(fi_tinject(ep, &v, sizeof v, peer, tag));
	}
	return 0;
}

/* The sending side of hold_recv_run: send i, receive it back. */
static int hold_send_run(uint64_t tag, int n)
{
	struct fi_cq_tagged_entry e;
	struct fi_context c;
	uint64_t v;
	for (uint64_t i = 0; i < (uint64_t)n; i++) {
		v = i * 3 + tag;
		CHECK(fi_tinject(ep, &v, sizeof v, peer, tag));
		CHECK(fi_trecv(ep, &v, sizeof v, NULL, peer, tag, 0, &c));
		EXPECT(poll_one(&e, NULL) == 1);
		EXPECT(e.op_context == &c && v == i * 3 + tag);
	}
	return 0;
}

/* The receiving side: every check is here. */
static int receiver(void)
{
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	struct fi_context c1, c2;
	fi_addr_t src;
	char b1[64], b2[64];
	uint64_t v;

	/* 1. Ping-pong, directed receives, every value checked, with CQ data and source. */
	for (uint64_t i = 0; i < 3000; i++) {
		CHECK(fi_trecv(ep, &v, sizeof v, NULL, peer, 1, 0, &c1));
		if (i == 0)
			CHECK(signal_peer());
		EXPECT(poll_one(&e, &src) == 1);
		EXPECT(e.op_context == &c1 && e.len == 8 && v == i * 7 && e.tag == 1);
		EXPECT(src == peer && e.data == i && (e.flags & FI_REMOTE_CQ_DATA));
		v = i * 7 + 1;
		CHECK(fi_tinject(ep, &v, sizeof v, peer, 1));
	}
	/* The same with any-source receives. */
	for (uint64_t i = 0; i < 1000; i++) {
		CHECK(fi_trecv(ep, &v, sizeof v, NULL, FI_ADDR_UNSPEC, 1, 0, &c1));
		EXPECT(poll_one(&e, &src) == 1);
		EXPECT(e.op_context == &c1 && v == i && src == peer);
		CHECK(fi_tinject(ep, &v, sizeof v, peer, 1));
	}
	/* 15. The peer's name inserted again, at another index: a directed receive from that
	 * index reports the first live index as its source; once the first is removed, the new
	 * one (the source's address is looked up again after every removal). */
	fi_addr_t again;
	EXPECT(fi_av_insert(av, peer_name, 1, &again, 0, NULL) == 1 && again != peer);
	for (uint64_t i = 0; i < 1000; i++) {
		if (i == 500)
			CHECK(fi_av_remove(av, &peer, 1, 0));
		CHECK(fi_trecv(ep, &v, sizeof v, NULL, again, 1, 0, &c1));
		EXPECT(poll_one(&e, &src) == 1);
		EXPECT(e.op_context == &c1 && v == i && src == (i < 500 ? peer : again));
		CHECK(fi_tinject(ep, &v, sizeof v, again, 1));
	}
	peer = again;

	/* 16-19, ten times over runs of other lengths (whether the receive after a run is armed
	 * by its hold depends on where the run's holds began and ended). Each case's receive has
	 * a length of its own (16, 1 MiB, 24, 40), by which parked.rs finds, in the provider's
	 * trace, that a receive a hold had armed was posted the usual way in each case. */
	for (int rep = 0; rep < HOLD_REPS; rep++) {
		/* 16. A receive armed by a hold, and a message too long for it: an error entry with the
		 * overflow length, the buffer holding what fits. */
		CHECK(hold_recv_run(22, 200 + 23 * rep));
		memset(b1, 0, sizeof b1);
		CHECK(fi_trecv(ep, b1, 16, NULL, peer, 22, 0, &c1));
		EXPECT(poll_one(&e, NULL) == -FI_EAVAIL);
		memset(&err, 0, sizeof err);
		EXPECT(fi_cq_readerr(cq, &err, 0) == 1);
		EXPECT(err.op_context == &c1 && err.err == FI_ETRUNC && err.olen == 16);
		EXPECT(!memcmp(b1, "longer than eigh", 16) && b1[16] == 0);
		/* 17. ... and a large message (through the ring, not the lane), every byte checked. */
		CHECK(hold_recv_run(23, 200 + 23 * rep));
		unsigned char *large = calloc(1, BIG);
		EXPECT(large);
		CHECK(fi_trecv(ep, large, BIG, NULL, peer, 23, 0, &c1));
		EXPECT(poll_one(&e, NULL) == 1);
		EXPECT(e.op_context == &c1 && e.len == BIG);
		for (int i = 0; i < BIG; i++)
			EXPECT(large[i] == (unsigned char)(i * 5 + 3));
		free(large);
		/* 18. ... cancelled: FI_ECANCELED, and the next receive takes the message. */
		CHECK(hold_recv_run(24, 200 + 23 * rep));
		CHECK(fi_trecv(ep, b1, 24, NULL, peer, 24, 0, &c1));
		CHECK(fi_cancel(&ep->fid, &c1));
		EXPECT(poll_one(&e, NULL) == -FI_EAVAIL);
		memset(&err, 0, sizeof err);
		EXPECT(fi_cq_readerr(cq, &err, 0) == 1);
		EXPECT(err.op_context == &c1 && err.err == FI_ECANCELED);
		CHECK(fi_trecv(ep, &v, sizeof v, NULL, peer, 24, 0, &c2));
		CHECK(signal_peer());
		EXPECT(poll_one(&e, NULL) == 1);
		EXPECT(e.op_context == &c2 && v == 77);
		/* 19. ... with a second receive posted behind it: each takes its message, in order. */
		CHECK(hold_recv_run(25, 200 + 23 * rep));
		uint64_t v2;
		CHECK(fi_trecv(ep, b1, 40, NULL, peer, 25, 0, &c1));
		CHECK(fi_trecv(ep, &v2, sizeof v2, NULL, peer, 25, 0, &c2));
		CHECK(signal_peer());
		EXPECT(poll_one(&e, NULL) == 1);
		memcpy(&v, b1, sizeof v);
		EXPECT(e.op_context == &c1 && e.len == 8 && v == 1);
		EXPECT(poll_one(&e, NULL) == 1);
		EXPECT(e.op_context == &c2 && v2 == 2);
	}

	/* 2. Two receives for one tag: the first posted takes the first sent. */
	CHECK(fi_trecv(ep, b1, sizeof b1, NULL, peer, 2, 0, &c1));
	CHECK(fi_trecv(ep, b2, sizeof b2, NULL, peer, 2, 0, &c2));
	CHECK(signal_peer());
	int got_c1 = 0, got_c2 = 0;
	for (int k = 0; k < 2; k++) {
		EXPECT(poll_one(&e, NULL) == 1);
		if (e.op_context == &c1) {
			EXPECT(!got_c1 && !strcmp(b1, "first"));
			got_c1 = 1;
		} else {
			EXPECT(e.op_context == &c2 && !got_c2 && !strcmp(b2, "second"));
			got_c2 = 1;
		}
	}
	/* One receive, two messages: the first sent. */
	CHECK(fi_trecv(ep, b1, sizeof b1, NULL, FI_ADDR_UNSPEC, 3, 0, &c1));
	CHECK(signal_peer());
	EXPECT(poll_one(&e, NULL) == 1);
	EXPECT(e.op_context == &c1 && !strcmp(b1, "A"));
	CHECK(fi_trecv(ep, b1, sizeof b1, NULL, FI_ADDR_UNSPEC, 3, 0, &c1));
	EXPECT(poll_one(&e, NULL) == 1);
	EXPECT(e.op_context == &c1 && !strcmp(b1, "B"));

	/* 3. A probe does not see the message a posted receive takes. */
	memset(b1, 0, sizeof b1);
	CHECK(fi_trecv(ep, b1, sizeof b1, NULL, peer, 4, 0, &c1));
	CHECK(signal_peer());
	CHECK(wait_peer()); /* it is in the ring now */
	struct fi_context pctx;
	struct fi_msg_tagged m = { .addr = FI_ADDR_UNSPEC, .tag = 4, .context = &pctx };
	CHECK(fi_trecvmsg(ep, &m, FI_PEEK | FI_COMPLETION));
	int got_recv = 0, got_peek = 0;
	for (int k = 0; k < 2; k++) {
		int r = poll_one(&e, NULL);
		if (r == 1) {
			EXPECT(e.op_context == &c1 && !strcmp(b1, "m4"));
			got_recv = 1;
		} else {
			EXPECT(r == -FI_EAVAIL);
			memset(&err, 0, sizeof err);
			EXPECT(fi_cq_readerr(cq, &err, 0) == 1);
			EXPECT(err.op_context == &pctx && err.err == FI_ENOMSG);
			got_peek = 1;
		}
	}
	EXPECT(got_recv && got_peek);

	/* 4. Cancel; the message then goes to the next receive. */
	CHECK(fi_trecv(ep, b1, sizeof b1, NULL, peer, 6, 0, &c1));
	CHECK(fi_cancel(&ep->fid, &c1));
	EXPECT(poll_one(&e, NULL) == -FI_EAVAIL);
	memset(&err, 0, sizeof err);
	EXPECT(fi_cq_readerr(cq, &err, 0) == 1);
	EXPECT(err.op_context == &c1 && err.err == FI_ECANCELED);
	CHECK(signal_peer());
	CHECK(fi_trecv(ep, b2, sizeof b2, NULL, peer, 6, 0, &c2));
	EXPECT(poll_one(&e, NULL) == 1);
	EXPECT(e.op_context == &c2 && !strcmp(b2, "m6"));

	/* 5. A large message (rendezvous) into such a receive, every byte checked. */
	unsigned char *big = calloc(1, BIG);
	EXPECT(big);
	CHECK(fi_trecv(ep, big, BIG, NULL, peer, 7, 0, &c1));
	CHECK(signal_peer());
	EXPECT(poll_one(&e, NULL) == 1);
	EXPECT(e.op_context == &c1 && e.len == BIG);
	for (int i = 0; i < BIG; i++)
		EXPECT(big[i] == (unsigned char)(i * 31 + 7));
	free(big);

	/* 6. Truncation: an error entry with the overflow length. */
	CHECK(fi_trecv(ep, b1, 4, NULL, peer, 8, 0, &c1));
	CHECK(signal_peer());
	EXPECT(poll_one(&e, NULL) == -FI_EAVAIL);
	memset(&err, 0, sizeof err);
	EXPECT(fi_cq_readerr(cq, &err, 0) == 1);
	EXPECT(err.op_context == &c1 && err.err == FI_ETRUNC && err.olen == 4);
	EXPECT(!memcmp(b1, "1234", 4));

	/* 7. A message that came before its receive, in the ring or already read. */
	CHECK(signal_peer());
	CHECK(wait_peer());
	CHECK(fi_trecv(ep, b1, sizeof b1, NULL, peer, 9, 0, &c1));
	EXPECT(poll_one(&e, NULL) == 1);
	EXPECT(e.op_context == &c1 && !strcmp(b1, "early"));
	CHECK(signal_peer());
	CHECK(wait_peer());
	for (int k = 0; k < 200; k++)
		EXPECT(fi_cq_read(cq, &e, 1) == -FI_EAGAIN);
	CHECK(fi_trecv(ep, b1, sizeof b1, NULL, peer, 9, 0, &c1));
	EXPECT(poll_one(&e, NULL) == 1);
	EXPECT(e.op_context == &c1 && !strcmp(b1, "later"));

	/* 8. Another tag ahead of it in the ring. */
	CHECK(fi_trecv(ep, b1, sizeof b1, NULL, peer, 10, 0, &c1));
	CHECK(signal_peer());
	EXPECT(poll_one(&e, NULL) == 1);
	EXPECT(e.op_context == &c1 && e.tag == 10 && !strcmp(b1, "Y"));
	CHECK(fi_trecv(ep, b2, sizeof b2, NULL, peer, 11, 0, &c2));
	EXPECT(poll_one(&e, NULL) == 1);
	EXPECT(e.op_context == &c2 && e.tag == 11 && !strcmp(b2, "X"));

	/* 9. While a large send of this side is in flight (a request the engine must progress). */
	unsigned char *out = malloc(BIG);
	EXPECT(out);
	for (int i = 0; i < BIG; i++)
		out[i] = (unsigned char)(i * 13 + 1);
	struct fi_context sctx;
	CHECK(fi_tsend(ep, out, BIG, NULL, peer, 12, &sctx));
	memset(b1, 0, sizeof b1);
	CHECK(fi_trecv(ep, b1, sizeof b1, NULL, peer, 13, 0, &c1));
	CHECK(signal_peer());
	int got_small = 0, got_send = 0;
	for (int k = 0; k < 2; k++) {
		EXPECT(poll_one(&e, NULL) == 1);
		if (e.op_context == &c1) {
			EXPECT(!strcmp(b1, "small") && e.tag == 13);
			got_small = 1;
		} else {
			EXPECT(e.op_context == &sctx && (e.flags & FI_SEND));
			got_send = 1;
		}
	}
	EXPECT(got_small && got_send);
	free(out);

	/* 10. Cancel of a receive that was held, then posted behind a second one. */
	CHECK(fi_trecv(ep, b1, sizeof b1, NULL, peer, 14, 0, &c1));
	CHECK(fi_trecv(ep, b2, sizeof b2, NULL, peer, 14, 0, &c2));
	CHECK(fi_cancel(&ep->fid, &c1));
	EXPECT(poll_one(&e, NULL) == -FI_EAVAIL);
	memset(&err, 0, sizeof err);
	EXPECT(fi_cq_readerr(cq, &err, 0) == 1);
	EXPECT(err.op_context == &c1 && err.err == FI_ECANCELED);
	EXPECT(fi_cancel(&ep->fid, &c1) == -FI_ENOENT);
	CHECK(signal_peer());
	EXPECT(poll_one(&e, NULL) == 1);
	EXPECT(e.op_context == &c2 && !strcmp(b2, "r2"));

	/* 11. A zero-length message into a zero-length receive without a buffer. */
	CHECK(fi_trecv(ep, NULL, 0, NULL, peer, 15, 0, &c1));
	CHECK(signal_peer());
	EXPECT(poll_one(&e, &src) == 1);
	EXPECT(e.op_context == &c1 && e.len == 0 && e.tag == 15 && src == peer);

	/* 13. A window of receives held at once, as a message-rate test posts them: each takes
	 * the message of its turn, and one read returns several. */
	int most = recv_window(64, 17);
	EXPECT(most > 1);
	/* More receives than the provider holds at once (then they are all posted). */
	EXPECT(recv_window(WINDOW_MAX, 21) > 0);

	/* 14. Two held receives, of two tags, the second one's message sent first: each takes
	 * its own. */
	CHECK(fi_trecv(ep, b1, sizeof b1, NULL, peer, 18, 0, &c1));
	CHECK(fi_trecv(ep, b2, sizeof b2, NULL, peer, 19, 0, &c2));
	CHECK(signal_peer());
	got_c1 = got_c2 = 0;
	for (int k = 0; k < 2; k++) {
		EXPECT(poll_one(&e, NULL) == 1);
		if (e.op_context == &c1) {
			EXPECT(!got_c1 && !strcmp(b1, "t18") && e.tag == 18);
			got_c1 = 1;
		} else {
			EXPECT(e.op_context == &c2 && !got_c2 && !strcmp(b2, "t19") && e.tag == 19);
			got_c2 = 1;
		}
	}
	/* Cancel of the middle one of three held receives: the other two take the messages, in
	 * the order they were posted. */
	struct fi_context c3;
	char b3[64];
	CHECK(fi_trecv(ep, b1, sizeof b1, NULL, peer, 20, 0, &c1));
	CHECK(fi_trecv(ep, b2, sizeof b2, NULL, peer, 20, 0, &c2));
	CHECK(fi_trecv(ep, b3, sizeof b3, NULL, peer, 20, 0, &c3));
	CHECK(fi_cancel(&ep->fid, &c2));
	EXPECT(poll_one(&e, NULL) == -FI_EAVAIL);
	memset(&err, 0, sizeof err);
	EXPECT(fi_cq_readerr(cq, &err, 0) == 1);
	EXPECT(err.op_context == &c2 && err.err == FI_ECANCELED);
	EXPECT(fi_cancel(&ep->fid, &c2) == -FI_ENOENT);
	CHECK(signal_peer());
	EXPECT(poll_one(&e, NULL) == 1);
	EXPECT(e.op_context == &c1 && !strcmp(b1, "u0"));
	EXPECT(poll_one(&e, NULL) == 1);
	EXPECT(e.op_context == &c3 && !strcmp(b3, "u1"));

	/* 12. The peer dies (no close, as a crash) while a receive from it is held (here one a
	 * hold armed): polling (never sleeping) reports the receive failed, naming the peer,
	 * instead of waiting. */
	CHECK(hold_recv_run(16, 200));
	CHECK(fi_trecv(ep, b1, sizeof b1, NULL, peer, 16, 0, &c1));
	CHECK(signal_peer());
	EXPECT(poll_one(&e, NULL) == -FI_EAVAIL);
	char msg[256];
	memset(&err, 0, sizeof err);
	err.err_data = msg;
	err.err_data_size = sizeof msg;
	EXPECT(fi_cq_readerr(cq, &err, 0) == 1);
	EXPECT(err.op_context == &c1 && err.err == FI_EIO);
	return close_all();
}

static int sender(void)
{
	struct fi_cq_tagged_entry e;
	struct fi_context c;
	uint64_t v;

	CHECK(wait_peer());
	for (uint64_t i = 0; i < 3000; i++) {
		v = i * 7;
		CHECK(fi_tinjectdata(ep, &v, sizeof v, i, peer, 1));
		CHECK(fi_trecv(ep, &v, sizeof v, NULL, peer, 1, 0, &c));
		EXPECT(poll_one(&e, NULL) == 1);
		EXPECT(e.op_context == &c && v == i * 7 + 1);
	}
	for (int round = 0; round < 2; round++) {
		for (uint64_t i = 0; i < 1000; i++) {
			v = i;
			CHECK(fi_tinject(ep, &v, sizeof v, peer, 1));
			CHECK(fi_trecv(ep, &v, sizeof v, NULL, peer, 1, 0, &c));
			EXPECT(poll_one(&e, NULL) == 1);
			EXPECT(v == i);
		}
	}
	for (int rep = 0; rep < HOLD_REPS; rep++) {
		CHECK(hold_send_run(22, 200 + 23 * rep));
		static const char longer[32] = "longer than eight bytes";
		CHECK(fi_tinject(ep, longer, sizeof longer, peer, 22));
		CHECK(hold_send_run(23, 200 + 23 * rep));
		unsigned char *large = malloc(BIG);
		EXPECT(large);
		for (int i = 0; i < BIG; i++)
			large[i] = (unsigned char)(i * 5 + 3);
		CHECK(send_done(large, BIG, 23));
		free(large);
		CHECK(hold_send_run(24, 200 + 23 * rep));
		CHECK(wait_peer());
		v = 77;
		CHECK(fi_tinject(ep, &v, sizeof v, peer, 24));
		CHECK(hold_send_run(25, 200 + 23 * rep));
		CHECK(wait_peer());
		v = 1;
		CHECK(fi_tinject(ep, &v, sizeof v, peer, 25));
		v = 2;
		CHECK(fi_tinject(ep, &v, sizeof v, peer, 25));
	}
	CHECK(wait_peer());
	CHECK(send_done("first", 6, 2));
	CHECK(send_done("second", 7, 2));
	CHECK(wait_peer());
	CHECK(send_done("A", 2, 3));
	CHECK(send_done("B", 2, 3));
	CHECK(wait_peer());
	CHECK(send_done("m4", 3, 4));
	CHECK(signal_peer());
	CHECK(wait_peer());
	CHECK(send_done("m6", 3, 6));
	unsigned char *big = malloc(BIG);
	EXPECT(big);
	for (int i = 0; i < BIG; i++)
		big[i] = (unsigned char)(i * 31 + 7);
	CHECK(wait_peer());
	CHECK(send_done(big, BIG, 7));
	free(big);
	CHECK(wait_peer());
	CHECK(send_done("12345678", 8, 8));
	CHECK(wait_peer());
	CHECK(send_done("early", 6, 9));
	CHECK(signal_peer());
	CHECK(wait_peer());
	CHECK(send_done("later", 6, 9));
	CHECK(signal_peer());
	CHECK(wait_peer());
	CHECK(send_done("X", 2, 11));
	CHECK(send_done("Y", 2, 10));
	CHECK(wait_peer());
	CHECK(send_done("small", 6, 13));
	big = calloc(1, BIG);
	EXPECT(big);
	CHECK(fi_trecv(ep, big, BIG, NULL, peer, 12, 0, &c));
	EXPECT(poll_one(&e, NULL) == 1);
	EXPECT(e.op_context == &c && e.len == BIG);
	for (int i = 0; i < BIG; i++)
		EXPECT(big[i] == (unsigned char)(i * 13 + 1));
	free(big);
	CHECK(wait_peer());
	CHECK(send_done("r2", 3, 14));
	CHECK(wait_peer());
	CHECK(send_done(NULL, 0, 15));
	CHECK(wait_peer());
	CHECK(send_window(64, 17));
	CHECK(wait_peer());
	CHECK(send_window(WINDOW_MAX, 21));
	CHECK(wait_peer());
	CHECK(send_done("t19", 4, 19));
	CHECK(send_done("t18", 4, 18));
	CHECK(wait_peer());
	CHECK(send_done("u0", 3, 20));
	CHECK(send_done("u1", 3, 20));
	/* Die without a word once the receiver holds a receive from us. */
	CHECK(hold_send_run(16, 200));
	CHECK(wait_peer());
	_exit(0);
}

int main(void)
{
	int a[2], b[2];
	if (pipe(a) || pipe(b))
		return 1;
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		who = "sender";
		to_peer = b[1];
		from_peer = a[0];
		close(a[1]);
		close(b[0]);
		if (open_all())
			return 1;
		return sender();
	}
	who = "receiver";
	to_peer = a[1];
	from_peer = b[0];
	close(a[0]);
	close(b[1]);
	int r = open_all() || receiver();
	/* A sender waiting for a signal that will not come sees the pipe close. */
	close(to_peer);
	int st;
	waitpid(pid, &st, 0);
	if (r || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "parked: failed (receiver %d, sender status %d)\n", r, st);
		return 1;
	}
	printf("parked ok\n");
	return 0;
}
