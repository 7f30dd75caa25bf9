// Plain TCP ping-pong between two testbed hosts, busy-polling like hxcomm's rails, with the
// median of each block of messages and the sender's TCP state after it: how a fresh connection
// warms up (BENCHMARKS.md, "Rail sockets on BBR until they carry bulk data").
//
//   tcp_warmup server PORT SIZE MESSAGES
//   tcp_warmup client ADDR PORT SIZE MESSAGES BLOCK
//
// CC=cubic|bbr|... sets TCP_CONGESTION on both ends (default: the kernel's).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void all(int fd, char *buf, size_t len, int reading) {
  size_t done = 0;
  while (done < len) {
    ssize_t r = reading ? recv(fd, buf + done, len - done, MSG_DONTWAIT)
                        : send(fd, buf + done, len - done, 0);
    if (r < 0 && errno == EAGAIN) continue;
    if (r <= 0) { perror(reading ? "recv" : "send"); exit(1); }
    done += (size_t)r;
  }
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int server = argc == 5 && !strcmp(argv[1], "server");
  if (!server && !(argc == 7 && !strcmp(argv[1], "client"))) {
    fprintf(stderr, "usage: tcp_warmup server PORT SIZE MESSAGES | client ADDR PORT SIZE MESSAGES BLOCK\n");
    return 2;
  }
  int one = 1, fd;
  struct sockaddr_in a = {.sin_family = AF_INET};
  size_t size = (size_t)atol(argv[server ? 3 : 4]);
  int messages = atoi(argv[server ? 4 : 5]);
  if (server) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    a.sin_port = htons((unsigned short)atoi(argv[2]));
    if (bind(l, (void *)&a, sizeof a) || listen(l, 1)) { perror("listen"); return 1; }
    fd = accept(l, NULL, NULL);
  } else {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_port = htons((unsigned short)atoi(argv[3]));
    inet_pton(AF_INET, argv[2], &a.sin_addr);
    if (connect(fd, (void *)&a, sizeof a)) { perror("connect"); return 1; }
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const char *cc = getenv("CC");
  if (cc && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc))) { perror("TCP_CONGESTION"); return 1; }
  char *buf = calloc(1, size);
  if (server) {
    for (int i = 0; i < messages; i++) { all(fd, buf, size, 1); all(fd, buf, size, 0); }
    return 0;
  }
  int block = atoi(argv[6]);
  double *t = malloc(sizeof(double) * (size_t)block);
  printf("# messages  median_us  p90_us  snd_cwnd  rtt_us  rcv_space\n");
  for (int i = 0; i + block <= messages; i += block) {
    for (int j = 0; j < block; j++) {
      double s = now_us();
      all(fd, buf, size, 0);
      all(fd, buf, size, 1);
      t[j] = (now_us() - s) / 2;
    }
    qsort(t, (size_t)block, sizeof(double), by_value);
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len);
    printf("%10d  %9.2f  %6.2f  %8u  %6u  %9u\n", i + block, t[block / 2], t[block * 9 / 10],
           ti.tcpi_snd_cwnd, ti.tcpi_rtt, ti.tcpi_rcv_space);
  }
  return 0;
}
