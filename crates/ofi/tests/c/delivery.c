/* FI_DELIVERY_COMPLETE through the hxcomm provider, two processes of one host: a send that
 * asks for it (as the endpoint's default op_flags, which Open MPI's btl/ofi sets, or per
 * fi_sendmsg) completes only once the receiver holds the message. The receiver posts no
 * receive at first: the sender polls its CQ for a while and must see nothing; then the
 * receiver posts, and both complete with every byte. Sizes: 0, 8 bytes and 16 KiB (below
 * the eager limit, where a plain send finishes at once). A plain send on the same endpoint
 * without the flag (fi_sendmsg, flags FI_COMPLETION) completes without a receive. Last, the
 * sender closes its endpoint with a delivery-complete send still waiting and scribbles over
 * and frees its buffer: the receiver, posting afterwards, still gets the bytes as sent.
 * Usage: FI_PROVIDER_PATH=<dir> HX_JOB_SECRET=<hex> ./delivery */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <sys/uio.h>
#include <sys/select.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
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

static const char *who = "?";
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_cq *cq;
static struct fid_ep *ep;
static fi_addr_t peer;
static int to_peer, from_peer;
static const size_t sizes[] = { 0, 8, 16384 }; /* all below the eager limit */

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Polls the CQ for `secs`: 1 for an entry (in *e), -FI_EAVAIL for an error, 0 for none. */
static int poll_for(struct fi_cq_msg_entry *e, double secs)
{
	double end = now() + secs;
	while (now() < end) {
		ssize_t n = fi_cq_read(cq, e, 1);
		if (n == 1 || n == -FI_EAVAIL)
			return (int)n;
		if (n != -FI_EAGAIN) {
			fprintf(stderr, "%s fi_cq_read: %zd (%s)\n", who, n, fi_strerror((int)-n));
			return -1;
		}
	}
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

static int open_all(void)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	char name[64], other[64];
	size_t len = sizeof name;

	/* What Open MPI 4.1's btl/ofi asks for in its two-sided mode. */
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->fabric_attr->prov_name = strdup("hxcomm");
	hints->domain_attr->mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
	hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	hints->tx_attr->iov_limit = 1;
	hints->rx_attr->iov_limit = 1;
	CHECK(fi_getinfo(FI_VERSION(1, 5), NULL, NULL, 0, hints, &info));
	EXPECT(info->tx_attr->op_flags & FI_DELIVERY_COMPLETE);
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	struct fi_av_attr av_attr = { .type = FI_AV_MAP };
	CHECK(fi_av_open(domain, &av_attr, &av, NULL));
	struct fi_cq_attr cq_attr = { .size = 64, .format = FI_CQ_FORMAT_MSG };
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_endpoint(domain, info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(ep));
	CHECK(fi_getname(&ep->fid, name, &len));
	EXPECT(write(to_peer, name, 64) == 64);
	EXPECT(read(from_peer, other, 64) == 64);
	EXPECT(fi_av_insert(av, other, 1, &peer, 0, NULL) == 1);
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

static int sender(void)
{
	static char buf[BIG];
	struct fi_context2 ctx;
	struct fi_cq_msg_entry e;
	for (int i = 0; i < 3; i++) {
		size_t n = sizes[i];
		for (size_t j = 0; j < n; j++)
			buf[j] = (char)(j * 7 + i);
		CHECK(fi_send(ep, buf, n, NULL, peer, &ctx));
		/* The receiver has posted nothing: no completion may come. */
		EXPECT(poll_for(&e, 0.3) == 0);
		CHECK(signal_peer());
		EXPECT(poll_for(&e, 10) == 1);
		EXPECT(e.op_context == &ctx && (e.flags & FI_SEND));
		CHECK(wait_peer());
	}
	/* Without the flag (fi_sendmsg's flags replace the default): done without a receive. */
	struct iovec iov = { .iov_base = buf, .iov_len = 8 };
	struct fi_msg msg = { .msg_iov = &iov, .iov_count = 1, .addr = peer, .context = &ctx };
	CHECK(fi_sendmsg(ep, &msg, FI_COMPLETION));
	EXPECT(poll_for(&e, 10) == 1);
	EXPECT(e.op_context == &ctx);
	CHECK(signal_peer());
	CHECK(wait_peer());
	/* A send still waiting when its endpoint closes: it goes on with its own copy. */
	char *gone = malloc(BIG);
	EXPECT(gone != NULL);
	for (size_t j = 0; j < BIG; j++)
		gone[j] = (char)(j * 13 + 5);
	CHECK(fi_send(ep, gone, BIG, NULL, peer, &ctx));
	EXPECT(poll_for(&e, 0.1) == 0);
	CHECK(fi_close(&ep->fid));
	memset(gone, 0xee, BIG);
	free(gone);
	CHECK(signal_peer());
	/* The domain still moves it (reads of the CQ drive progress); nothing is reported. */
	double end = now() + 10;
	struct timespec ms = { 0, 1000000 };
	struct fi_cq_msg_entry e2;
	int got = 0;
	while (now() < end && !got) {
		EXPECT(fi_cq_read(cq, &e2, 1) == -FI_EAGAIN);
		fd_set fds;
		FD_ZERO(&fds);
		FD_SET(from_peer, &fds);
		struct timeval tv = { 0, 0 };
		if (select(from_peer + 1, &fds, NULL, NULL, &tv) == 1)
			got = 1;
		else
			nanosleep(&ms, NULL);
	}
	EXPECT(got);
	CHECK(wait_peer());
	CHECK(fi_close(&av->fid));
	CHECK(fi_close(&cq->fid));
	CHECK(fi_close(&domain->fid));
	CHECK(fi_close(&fabric->fid));
	return 0;
}

static int receiver(void)
{
	static char buf[BIG];
	struct fi_context2 ctx;
	struct fi_cq_msg_entry e;
	for (int i = 0; i < 3; i++) {
		size_t n = sizes[i];
		CHECK(wait_peer());
		memset(buf, 0x5a, n);
		CHECK(fi_recv(ep, buf, BIG, NULL, FI_ADDR_UNSPEC, &ctx));
		EXPECT(poll_for(&e, 10) == 1);
		EXPECT(e.op_context == &ctx && (e.flags & FI_RECV) && e.len == n);
		for (size_t j = 0; j < n; j++)
			EXPECT(buf[j] == (char)(j * 7 + i));
		CHECK(signal_peer());
	}
	CHECK(wait_peer());
	CHECK(fi_recv(ep, buf, BIG, NULL, FI_ADDR_UNSPEC, &ctx));
	EXPECT(poll_for(&e, 10) == 1);
	EXPECT(e.len == 8);
	CHECK(signal_peer());
	/* The sender has closed its endpoint and freed the buffer of a send still waiting. */
	CHECK(wait_peer());
	memset(buf, 0, BIG);
	CHECK(fi_recv(ep, buf, BIG, NULL, FI_ADDR_UNSPEC, &ctx));
	EXPECT(poll_for(&e, 10) == 1);
	EXPECT(e.len == BIG);
	for (size_t j = 0; j < BIG; j++)
		EXPECT(buf[j] == (char)(j * 13 + 5));
	CHECK(signal_peer());
	return close_all();
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
	close(to_peer);
	int st;
	waitpid(pid, &st, 0);
	if (r || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "delivery: failed (receiver %d, sender status %d)\n", r, st);
		return 1;
	}
	printf("delivery ok\n");
	return 0;
}
