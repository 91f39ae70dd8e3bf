/* The cheapest relay a process can be: one epoll loop, one buffer per direction, no HTTP. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF 65536
struct side { int fd; struct side *peer; char buf[BUF]; int off, len; /* bytes read from fd, not yet written to peer */ };

static int ep;
static void nb(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); int one = 1; setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); }
static void watch(struct side *s, int op, unsigned ev) { struct epoll_event e = { .events = ev, .data.ptr = s }; epoll_ctl(ep, op, s->fd, &e); }
/* What a side waits for: reading while its own bytes are all written, writing while its peer's are not. */
static void update(struct side *x) { watch(x, EPOLL_CTL_MOD, (x->len == 0 ? EPOLLIN : 0) | (x->peer->len > 0 ? EPOLLOUT : 0)); }
static struct side *dead[128];
static int ndead;
/* Closed now, freed after the batch of events (which may still name either side). */
static void drop(struct side *s) { struct side *p = s->peer; close(s->fd); close(p->fd); s->fd = p->fd = -1; dead[ndead++] = s < p ? s : p; }

int main(int argc, char **argv) {
  int origin = atoi(argv[1]);
  int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  if (bind(l, (void *)&a, sizeof a) || listen(l, 511)) { perror("listen"); return 1; }
  socklen_t al = sizeof a; getsockname(l, (void *)&a, &al);
  printf("{\"port\":%d}\n", ntohs(a.sin_port)); fflush(stdout);
  ep = epoll_create1(0);
  struct epoll_event le = { .events = EPOLLIN, .data.ptr = NULL }; epoll_ctl(ep, EPOLL_CTL_ADD, l, &le);
  struct epoll_event evs[64];
  for (;;) {
    int n = epoll_wait(ep, evs, 64, -1);
    for (int i = 0; i < n; i++) {
      struct side *s = evs[i].data.ptr;
      if (!s) {
        int c = accept(l, NULL, NULL); if (c < 0) continue;
        int o = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in oa = { .sin_family = AF_INET, .sin_port = htons(origin), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (connect(o, (void *)&oa, sizeof oa)) { close(c); close(o); continue; }
        nb(c); nb(o);
        struct side *pair = calloc(2, sizeof *pair);
        pair[0].fd = c; pair[1].fd = o; pair[0].peer = &pair[1]; pair[1].peer = &pair[0];
        watch(&pair[0], EPOLL_CTL_ADD, EPOLLIN); watch(&pair[1], EPOLL_CTL_ADD, EPOLLIN);
        continue;
      }
      if (s->fd < 0) continue;
      struct side *p = s->peer;
      if (evs[i].events & EPOLLOUT) { /* p's pending bytes can go to s */
        ssize_t w = write(s->fd, p->buf + p->off, p->len - p->off);
        if (w < 0 && errno != EAGAIN) { drop(s); goto next; }
        if (w > 0) p->off += w;
        if (p->off == p->len) { p->off = p->len = 0; update(s); update(p); }
      }
      if ((evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && s->len == 0) {
        ssize_t r = read(s->fd, s->buf, BUF);
        if (r <= 0) { if (r < 0 && errno == EAGAIN) continue; drop(s); goto next; }
        ssize_t w = write(p->fd, s->buf, r);
        if (w < 0 && errno != EAGAIN) { drop(s); goto next; }
        if (w < r) { s->off = w < 0 ? 0 : w; s->len = r; update(s); update(p); }
      }
    next:;
    }
    while (ndead) free(dead[--ndead]);
  }
}
