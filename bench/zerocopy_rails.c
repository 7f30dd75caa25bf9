/*
 * zerocopy_rails: does MSG_ZEROCOPY pay off on the testbed's rails (issue 10: "MSG_ZEROCOPY or
 * io_uring where they pay off")? One sending and one receiving process, each a single thread
 * spinning over RAILS TCP connections at once (as hxcomm's ranks do), the sender writing
 * CHUNK-byte pieces of one 4 MiB buffer round the rails for SECS seconds, by plain send(2)
 * ("copy") or by send(2) with MSG_ZEROCOPY ("zc", completions reaped from the error queue; the
 * buffer is never rewritten, so nothing waits for them to keep the bytes right). The sockets
 * take hxcomm's rail defaults: SO_SNDBUF 768 KiB, TCP_NOTSENT_LOWAT 128 KiB, TCP_NODELAY.
 *
 *   zerocopy_rails recv PORT0 RAILS                    (in the receiving host: 10.10.k.2)
 *   zerocopy_rails send copy|zc PORT0 RAILS SECS CHUNK (in the sending host: 10.10.k.1)
 *
 * e.g. on `hxcomm net up --name rp --hosts 2 --rails 4 --rate none`, placed as hxcomm's ranks:
 *   ip netns exec rp1 taskset -c 1 ./zerocopy_rails recv 5500 4 &
 *   ip netns exec rp0 taskset -c 0 ./zerocopy_rails send zc 5500 4 2 1048576
 *
 * The sender prints: mode, MB/s (10^6 bytes/s: the bytes sent over the time until the receiver
 * had read them all), its CPU seconds per GB (user + system, getrusage), the zero-copy
 * completions and how many of them the kernel reports as copied after all
 * (SO_EE_CODE_ZEROCOPY_COPIED: it copies a packet that reaches a socket of the same kernel, as
 * every packet over veth does).
 * Build: cc -O2 -o zerocopy_rails bench/zerocopy_rails.c
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif
#define MAX_RAILS 16
#define BUF (4u << 20)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
           u.ru_stime.tv_usec * 1e-6;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static struct sockaddr_in addr(int rail, int host, int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    char s[32];
    snprintf(s, sizeof s, "10.10.%d.%d", rail, host);
    inet_pton(AF_INET, s, &a.sin_addr);
    return a;
}

static int recv_side(int port0, int rails)
{
    int ls[MAX_RAILS], s[MAX_RAILS], one = 1, open = rails;
    for (int k = 0; k < rails; k++) {
        struct sockaddr_in a = addr(k, 2, port0 + k);
        ls[k] = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(ls[k], SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(ls[k], (struct sockaddr *)&a, sizeof a) || listen(ls[k], 1))
            die("bind/listen");
    }
    for (int k = 0; k < rails; k++)
        if ((s[k] = accept(ls[k], NULL, NULL)) < 0)
            die("accept");
    char *buf = malloc(BUF);
    struct pollfd p[MAX_RAILS];
    for (int k = 0; k < rails; k++)
        p[k] = (struct pollfd){.fd = s[k], .events = POLLIN};
    /* Spins over the rails, as hxcomm's ranks do (a receiver asleep in poll costs its sender
     * the wakeups); gives up after 10 s without data. */
    double idle_since = now();
    while (open > 0) {
        int got = 0;
        for (int k = 0; k < rails; k++) {
            if (p[k].fd < 0)
                continue;
            ssize_t n = recv(s[k], buf, BUF, MSG_DONTWAIT);
            if (n == 0) {
                close(s[k]);
                p[k].fd = -1;
                open--;
            } else if (n > 0)
                got = 1;
            else if (errno != EAGAIN)
                die("recv");
        }
        if (got)
            idle_since = now();
        else if (now() - idle_since > 10)
            die("receiver: no data for 10 s");
    }
    return 0;
}

/* Reaps zero-copy completions; returns how many sends they covered, counting copied ones. */
static long reap(int s, long *copied)
{
    long done = 0;
    for (;;) {
        char ctrl[128];
        struct msghdr m = {.msg_control = ctrl, .msg_controllen = sizeof ctrl};
        if (recvmsg(s, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
            if (errno == EAGAIN)
                return done;
            die("recvmsg(MSG_ERRQUEUE)");
        }
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            struct sock_extended_err *e = (struct sock_extended_err *)CMSG_DATA(c);
            if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY)
                continue;
            long n = (long)e->ee_data - (long)e->ee_info + 1;
            done += n;
            if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
                *copied += n;
        }
    }
}

static int send_side(int zc, int port0, int rails, double secs, size_t chunk)
{
    int s[MAX_RAILS], one = 1;
    long sent_calls[MAX_RAILS] = {0}, reaped = 0, copied = 0;
    size_t off[MAX_RAILS] = {0};
    char *buf = malloc(BUF);
    memset(buf, 0x5a, BUF);
    for (int k = 0; k < rails; k++) {
        struct sockaddr_in me = addr(k, 1, 0), peer = addr(k, 2, port0 + k);
        s[k] = socket(AF_INET, SOCK_STREAM, 0);
        if (zc && setsockopt(s[k], SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one))
            die("SO_ZEROCOPY");
        /* hxcomm's rail defaults (HX_SNDBUF, HX_NOTSENT_LOWAT): little in flight, cache-hot. */
        int sndbuf = 768 << 10, lowat = 128 << 10;
        setsockopt(s[k], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
        setsockopt(s[k], IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat);
        setsockopt(s[k], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (bind(s[k], (struct sockaddr *)&me, sizeof me) ||
            connect(s[k], (struct sockaddr *)&peer, sizeof peer))
            die("bind/connect");
    }
    struct pollfd p[MAX_RAILS];
    double c0 = cpu_s(), t0 = now(), end = t0 + secs;
    unsigned long long bytes = 0;
    for (int k = 0; k < rails; k++)
        p[k] = (struct pollfd){.fd = s[k], .events = POLLOUT};
    /* Writes round the rails; sleeps in poll only when every rail was full. */
    while (now() < end) {
        int wrote = 0;
        for (int k = 0; k < rails; k++) {
            if (zc && (sent_calls[k] & 63) == 0)
                reaped += reap(s[k], &copied);
            ssize_t n = send(s[k], buf + off[k], chunk - off[k] % chunk,
                             MSG_DONTWAIT | (zc ? MSG_ZEROCOPY : 0));
            if (n < 0) {
                if (errno == ENOBUFS) { /* too many completions outstanding */
                    reaped += reap(s[k], &copied);
                    continue;
                }
                if (errno != EAGAIN)
                    die("send");
                continue;
            }
            sent_calls[k]++;
            bytes += n;
            off[k] = (off[k] + n) % BUF;
            wrote = 1;
        }
        if (!wrote && poll(p, rails, 1000) < 0)
            die("poll (sender)");
    }
    for (int k = 0; k < rails; k++)
        shutdown(s[k], SHUT_WR);
    /* The receiver closes once it has read everything: then every byte has arrived. */
    char b;
    for (int k = 0; k < rails; k++)
        while (recv(s[k], &b, 1, 0) > 0) {
        }
    double t = now() - t0, c = cpu_s() - c0;
    long calls = 0;
    for (int k = 0; k < rails; k++) {
        if (zc)
            reaped += reap(s[k], &copied);
        calls += sent_calls[k];
        close(s[k]);
    }
    printf("mode=%s rails=%d chunk=%zu mb_per_s=%.0f cpu_s_per_gb=%.3f sends=%ld "
           "zc_completions=%ld zc_copied=%ld\n",
           zc ? "zc" : "copy", rails, chunk, bytes / t / 1e6, c / (bytes / 1e9), calls, reaped,
           copied);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "recv"))
        return recv_side(atoi(argv[2]), atoi(argv[3]));
    if (argc == 7 && !strcmp(argv[1], "send")) {
        int rails = atoi(argv[4]);
        size_t chunk = strtoul(argv[6], NULL, 0);
        if (rails < 1 || rails > MAX_RAILS || chunk < 1 || chunk > BUF || BUF % chunk)
            return fprintf(stderr, "RAILS 1-%d; CHUNK divides 4 MiB\n", MAX_RAILS), 2;
        return send_side(!strcmp(argv[2], "zc"), atoi(argv[3]), rails, atof(argv[5]), chunk);
    }
    fprintf(stderr, "usage: zerocopy_rails recv PORT0 RAILS | send copy|zc PORT0 RAILS SECS "
                    "CHUNK\n");
    return 2;
}
