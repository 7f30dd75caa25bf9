// Plain TCP between two testbed hosts: rounds of [client sleeps IDLE_MS; CC_IDLE set on both
// ends; 300 ping-pongs of 16 KiB (medians of 30); CC_BULK set; 64 MiB one way, timed]. With
// CC_START=bbr CC_BULK=cubic it is what hxcomm's rails did before ddebc9a (cubic after BBR,
// kept); with CC_IDLE=bbr as well, what they do now (BENCHMARKS.md, "After idle").
//
//   ip netns exec H1 tcp_idle_cycle server PORT ROUNDS
//   ip netns exec H0 tcp_idle_cycle client ADDR PORT ROUNDS IDLE_MS
//   (environment: CC_EARLY (set on the listener and before connect, so the connection's
//   first algorithm is this one), CC_START (set once connected), CC_BULK, CC_IDLE:
//   TCP_CONGESTION names, each optional)
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
static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static void all(int fd, char *buf, size_t len, int reading) {
  size_t done = 0;
  while (done < len) {
    ssize_t r = reading ? recv(fd, buf + done, len - done, MSG_DONTWAIT) : send(fd, buf + done, len - done, 0);
    if (r < 0 && errno == EAGAIN) continue;
    if (r <= 0) { perror(reading ? "recv" : "send"); exit(1); }
    done += (size_t)r;
  }
}
static int by_value(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static void setcc(int fd, const char *cc) { if (cc && *cc && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc))) { perror(cc); exit(1); } }
#define SIZE 16384
#define MSGS 300
#define BLOCK 30
#define BULK (64u << 20)
int main(int argc, char **argv) {
  // tcp_cycle server PORT ROUNDS | client ADDR PORT ROUNDS IDLE_MS   env: CC_START CC_BULK CC_IDLE
  int server = !strcmp(argv[1], "server");
  int one = 1, fd, rounds = atoi(argv[server ? 3 : 4]);
  struct sockaddr_in a = {.sin_family = AF_INET};
  if (server) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setcc(l, getenv("CC_EARLY"));
    a.sin_port = htons((unsigned short)atoi(argv[2]));
    if (bind(l, (void *)&a, sizeof a) || listen(l, 1)) { perror("listen"); return 1; }
    fd = accept(l, NULL, NULL);
  } else {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    setcc(fd, getenv("CC_EARLY"));
    a.sin_port = htons((unsigned short)atoi(argv[3]));
    inet_pton(AF_INET, argv[2], &a.sin_addr);
    if (connect(fd, (void *)&a, sizeof a)) { perror("connect"); return 1; }
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setcc(fd, getenv("CC_START"));
  char *buf = calloc(1, BULK);
  double t[BLOCK];
  int idle = server ? 0 : atoi(argv[5]);
  for (int r = 0; r < rounds; r++) {
    if (!server) usleep((useconds_t)idle * 1000);
    if (r > 0) setcc(fd, getenv("CC_IDLE"));
    if (!server) printf("round %d: pingpong", r);
    for (int i = 0; i < MSGS; i += BLOCK) {
      for (int j = 0; j < BLOCK; j++) {
        double s = now_us();
        if (server) { all(fd, buf, SIZE, 1); all(fd, buf, SIZE, 0); }
        else { all(fd, buf, SIZE, 0); all(fd, buf, SIZE, 1); }
        t[j] = (now_us() - s) / 2;
      }
      qsort(t, BLOCK, sizeof(double), by_value);
      if (!server) printf(" %.1f", t[BLOCK / 2]);
    }
    setcc(fd, getenv("CC_BULK"));
    double s = now_us();
    if (server) { all(fd, buf, BULK, 1); all(fd, buf, 1, 0); }
    else { all(fd, buf, BULK, 0); all(fd, buf, 1, 1); }
    if (!server) printf(" | bulk %.0f MB/s\n", BULK / (now_us() - s));
    fflush(stdout);
  }
  return 0;
}
