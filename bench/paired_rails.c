/*
 * paired_rails: would rail threads close the one-way gap to iperf3 on unlimited testbed rails
 * (issue 10)? Over veth the sender's CPU runs the whole TCP path of both hosts, and the receiver
 * copies the bytes out on its own CPU, so with one thread per rank every byte crosses from CPU 0
 * to CPU 1. iperf3's free-running pairs put each rail's client and server on one CPU, and no
 * byte crosses. This probe moves bytes over RAILS TCP connections at once, like hxcomm's
 * ranks, with THREADS I/O threads per process: thread t owns rails t, t+THREADS, ... and is
 * pinned to CPU (t mod CPUS) when THREADS > 1 (then rail k's writer and reader share a CPU);
 * with THREADS=1 the caller places the process (taskset). Each thread spins over its
 * nonblocking sockets (sleeping in poll(2) after a pass that moved nothing), writing CHUNK-byte pieces of a 4 MiB buffer (the sender) or reading
 * into one (the receiver). The sockets take hxcomm's rail defaults: SO_SNDBUF 768 KiB,
 * TCP_NOTSENT_LOWAT 128 KiB, TCP_NODELAY (KERNEL_BUFFERS=1: none of them, as iperf3).
 *
 *   paired_rails recv PORT0 RAILS THREADS                  (in the receiving host: 10.10.k.2)
 *   paired_rails send PORT0 RAILS THREADS SECS CHUNK       (in the sending host: 10.10.k.1)
 *
 * The sender prints MB/s (10^6 bytes/s: bytes sent over the time until the receiver had read
 * them all) and its CPU seconds per GB (getrusage, user + system). MAIN=spin adds a main thread
 * to each process that spins on sched_yield on CPU 0 (sender) or 1 (receiver), as an engine's
 * waiting rank would.
 * Build: cc -O2 -pthread -o paired_rails bench/paired_rails.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_RAILS 16
#define BUF (4u << 20)

static int fds[MAX_RAILS];
static int rails, threads, sending, secs;
static size_t chunk;
static atomic_int stop;
static atomic_ullong moved;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what) {
  perror(what);
  exit(1);
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (pthread_setaffinity_np(pthread_self(), sizeof s, &s)) die("pin");
}

static void options(int fd) {
  if (getenv("KERNEL_BUFFERS")) return;
  int one = 1, snd = 768 * 1024, lowat = 128 * 1024;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (sending) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof snd);
    setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat);
  }
}

static void *io(void *arg) {
  long t = (long)arg;
  if (threads > 1) pin(t % 2);
  char *buf = malloc(BUF);
  if (!buf) die("malloc");
  memset(buf, 7, BUF);
  size_t off[MAX_RAILS] = {0};
  unsigned long long mine = 0;
  int open_rails = 0, eof[MAX_RAILS] = {0};
  for (int k = t; k < rails; k += threads) open_rails++;
  /* The sender stops at the flag; a receiver thread when each of its rails reached EOF. */
  while (sending ? !atomic_load_explicit(&stop, memory_order_relaxed) : open_rails > 0) {
    int progress = 0;
    for (int k = t; k < rails; k += threads) {
      if (eof[k]) continue;
      size_t n = sending ? chunk : BUF - off[k];
      if (sending && off[k] + n > BUF) off[k] = 0;
      ssize_t r = sending ? send(fds[k], buf + off[k], n, MSG_DONTWAIT | MSG_NOSIGNAL)
                          : recv(fds[k], buf + off[k], n, MSG_DONTWAIT);
      if (r > 0) {
        off[k] = sending ? off[k] + r : (off[k] + r) % BUF;
        mine += r;
        progress = 1;
      } else if ((r == 0 && !sending) || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        if (sending) {
          perror("send");
          atomic_store(&stop, 1);
        } else {
          eof[k] = 1;
          open_rails--;
        }
      }
    }
    /* A pass that moved nothing sleeps until a socket is ready: two spinning threads on one
     * CPU would each hold it until the scheduler's tick. */
    if (!progress && open_rails > 0) {
      struct pollfd p[MAX_RAILS];
      int n = 0;
      for (int k = t; k < rails; k += threads)
        if (!eof[k]) p[n++] = (struct pollfd){.fd = fds[k], .events = sending ? POLLOUT : POLLIN};
      poll(p, n, 10);
    }
  }
  atomic_fetch_add(&moved, mine);
  return NULL;
}

static void *spinner(void *arg) {
  pin((int)(long)arg);
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) sched_yield();
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s recv PORT0 RAILS THREADS | send PORT0 RAILS THREADS SECS CHUNK\n",
            argv[0]);
    return 2;
  }
  sending = !strcmp(argv[1], "send");
  int port0 = atoi(argv[2]);
  rails = atoi(argv[3]);
  threads = atoi(argv[4]);
  if (rails < 1 || rails > MAX_RAILS || threads < 1 || threads > rails) {
    fprintf(stderr, "paired_rails: 1 <= THREADS <= RAILS <= %d\n", MAX_RAILS);
    return 2;
  }
  if (sending) {
    if (argc < 7) return 2;
    secs = atoi(argv[5]);
    chunk = strtoul(argv[6], NULL, 0);
    if (chunk < 1 || chunk > BUF) return 2;
  }
  for (int k = 0; k < rails; k++) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port0 + k)};
    char ip[32];
    snprintf(ip, sizeof ip, "10.10.%d.2", k);
    inet_pton(AF_INET, ip, &a.sin_addr);
    if (sending) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      options(fd);
      int tries = 0;
      while (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (++tries > 200) die("connect");
        usleep(10000);
        close(fd);
        fd = socket(AF_INET, SOCK_STREAM, 0);
        options(fd);
      }
      fds[k] = fd;
    } else {
      int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
      setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1)) die("listen");
      fds[k] = accept(l, NULL, NULL);
      if (fds[k] < 0) die("accept");
      options(fds[k]);
      close(l);
    }
  }
  pthread_t th[MAX_RAILS], sp;
  int spin = getenv("MAIN") && !strcmp(getenv("MAIN"), "spin");
  if (spin) pthread_create(&sp, NULL, spinner, (void *)(long)(sending ? 0 : 1));
  double t0 = now();
  for (long t = 0; t < threads; t++) pthread_create(&th[t], NULL, io, (void *)t);
  if (sending) {
    usleep(secs * 1000000);
    atomic_store(&stop, 1);
  }
  for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
  atomic_store(&stop, 1);
  if (sending) {
    /* The receiver has read everything once it closes its end. */
    for (int k = 0; k < rails; k++) shutdown(fds[k], SHUT_WR);
    char c;
    for (int k = 0; k < rails; k++)
      while (recv(fds[k], &c, 1, 0) > 0) {
      }
    double dt = now() - t0;
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    double cpu = u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
                 u.ru_stime.tv_usec / 1e6;
    unsigned long long b = atomic_load(&moved);
    printf("threads %d MB/s %.0f cpu_s_per_GB %.3f\n", threads, b / dt / 1e6, cpu / (b / 1e9));
  } else {
    for (int k = 0; k < rails; k++) close(fds[k]);
  }
  if (spin) pthread_join(sp, NULL);
  return 0;
}
