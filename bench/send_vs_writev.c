/*
 * send_vs_writev: what one small write costs the kernel over loopback TCP by each system call
 * (BENCHMARKS.md, "Small messages over TCP faster than MPICH"): a 56-byte frame (an 8-byte
 * message behind its 48-byte header) as send(2) of one buffer, writev(2) of two pieces and of
 * one, and sendmsg(2) of two pieces. The receiving socket is drained every 64 writes; on
 * loopback its kernel work runs in the sender's call, as on a veth pair. Why hxcomm's TCP rails
 * gather writes of up to 512 bytes into one buffer for send(2).
 *
 * Usage: send_vs_writev [N [ROUNDS]]   (defaults 100000, 3)
 * Prints one line per round, nanoseconds per write:
 *   send1 2664  writev2 2967  writev1 2923  sendmsg2 3026 ns
 * Build: cc -O2 -o send_vs_writev bench/send_vs_writev.c
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void drain(int s)
{
    static char rb[1 << 16];
    while (recv(s, rb, sizeof rb, MSG_DONTWAIT) > 0) {
    }
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100000;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (void *)&a, al) || listen(l, 1) || getsockname(l, (void *)&a, &al)) {
        perror("listen");
        return 1;
    }
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (void *)&a, al)) {
        perror("connect");
        return 1;
    }
    int s = accept(l, NULL, NULL);
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char hdr[48] = {0}, body[8] = {0}, frame[56];
    for (int r = 0; r < rounds; r++) {
        double t0 = now_ns();
        for (int i = 0; i < n; i++) {
            memcpy(frame, hdr, 48);
            memcpy(frame + 48, body, 8);
            send(c, frame, 56, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (i % 64 == 63)
                drain(s);
        }
        double t1 = now_ns();
        for (int i = 0; i < n; i++) {
            struct iovec v[2] = {{hdr, 48}, {body, 8}};
            writev(c, v, 2);
            if (i % 64 == 63)
                drain(s);
        }
        double t2 = now_ns();
        for (int i = 0; i < n; i++) {
            memcpy(frame, hdr, 48);
            memcpy(frame + 48, body, 8);
            struct iovec v[1] = {{frame, 56}};
            writev(c, v, 1);
            if (i % 64 == 63)
                drain(s);
        }
        double t3 = now_ns();
        for (int i = 0; i < n; i++) {
            struct iovec v[2] = {{hdr, 48}, {body, 8}};
            struct msghdr m = {.msg_iov = v, .msg_iovlen = 2};
            sendmsg(c, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (i % 64 == 63)
                drain(s);
        }
        double t4 = now_ns();
        printf("send1 %.0f  writev2 %.0f  writev1 %.0f  sendmsg2 %.0f ns\n", (t1 - t0) / n,
               (t2 - t1) / n, (t3 - t2) / n, (t4 - t3) / n);
    }
    return 0;
}
