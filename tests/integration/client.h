/* A posd client by hand, for the tests and the hostile client (no CUnit here): connecting to
 * posd's socket, HELLO, and a registration that maps the shared memory posd sends. */
#ifndef POS_TESTS_INTEGRATION_CLIENT_H
#define POS_TESTS_INTEGRATION_CLIENT_H

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "pos/client_shm.h"
#include "pos/op_record.h"
#include "pos/proto.h"

/* A connection to the socket at PATH (receives and sends time out after TIMEOUT_S), or -1. */
static inline int client_connect(const char *path, int nonblock, int timeout_s)
{
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%.*s", (int)sizeof a.sun_path - 1, path);
    struct timeval tv = {.tv_sec = timeout_s};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) {
        close(s);
        return -1;
    }
    return s;
}

/* Says HELLO on S with SHM_VERSION; returns what send returned. */
static inline ssize_t client_hello(int s, uint32_t shm_version)
{
    struct {
        struct pos_msg_hdr h;
        struct pos_hello b;
    } m = {{POS_PROTO_MAGIC, POS_PROTO_VERSION, POS_MSG_HELLO, sizeof(struct pos_hello), 0},
           {POS_OP_RECORD_VERSION, shm_version}};
    return send(s, &m, sizeof m, MSG_NOSIGNAL);
}

/* A registered client: its connection, the memfd and kick eventfd posd sent, the mapping,
 * and posd's WELCOME. */
struct client {
    int sock;
    int fds[2];
    struct pos_client_shm *shm;
    size_t size;
    struct pos_welcome welcome;
};

/* Registers on the socket at PATH. Returns 0, or -1 (nothing left open). */
static inline int client_register(const char *path, struct client *c)
{
    memset(c, 0, sizeof *c);
    c->sock = client_connect(path, 0, 10); /* generous: CI machines can be loaded */
    if (c->sock < 0)
        return -1;
    char buf[512];
    union {
        char b[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {buf, sizeof buf};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
    ssize_t n =
        client_hello(c->sock, POS_SHM_VERSION) < 0 ? -1 : recvmsg(c->sock, &m, MSG_CMSG_CLOEXEC);
    struct cmsghdr *cm = n > 0 ? CMSG_FIRSTHDR(&m) : NULL;
    if (n < (ssize_t)(sizeof(struct pos_msg_hdr) + sizeof(struct pos_welcome)) || !cm) {
        close(c->sock);
        return -1;
    }
    memcpy(c->fds, CMSG_DATA(cm), sizeof c->fds);
    struct pos_welcome w;
    memcpy(&w, buf + sizeof(struct pos_msg_hdr), sizeof w);
    c->welcome = w;
    c->size = w.shm_size;
    c->shm = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, c->fds[0], 0);
    if (c->shm == MAP_FAILED) {
        close(c->fds[0]);
        close(c->fds[1]);
        close(c->sock);
        return -1;
    }
    return 0;
}

static inline double client_clock(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One request of a client that waits for each grant: a kernel submitted (sequence ++*SEQ),
 * posd kicked, a spin until posd grants it (at most BOUND seconds); then its completion
 * reported (*DONE counts them), as the shim's collector would. Returns the wait in seconds,
 * or -1 when no grant came within BOUND. */
static inline double client_grant_wait(struct client *c, uint64_t *seq_io, uint64_t *done,
                                       double bound)
{
    uint64_t seq = ++*seq_io;
    struct pos_submission *s = &c->shm->sub[seq % POS_SUB_RING];
    memset((uint8_t *)s + sizeof s->stamp, 0, sizeof *s - sizeof s->stamp);
    s->seq = seq;
    s->kind = POS_OP_KERNEL;
    s->grid[0] = s->grid[1] = s->grid[2] = 1;
    s->block[0] = s->block[1] = s->block[2] = 32;
    s->tid = (uint32_t)getpid();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s->submit_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    atomic_store(&c->shm->next_seq, seq);
    atomic_store(&s->stamp, seq);
    double t0 = client_clock();
    uint64_t one = 1;
    int lost = write(c->fds[1], &one, sizeof one) != sizeof one;
    while (atomic_load(&c->shm->granted) < seq && client_clock() - t0 < bound)
        ;
    double t = client_clock() - t0;
    if (atomic_load(&c->shm->granted) < seq)
        lost = 1;
    uint64_t i = (*done)++;
    struct pos_completion_rec *r = &c->shm->done[i % POS_DONE_RING];
    r->seq = seq;
    r->how = POS_DONE_MARKER;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    r->complete_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    atomic_store(&r->stamp, i + 1);
    atomic_store(&c->shm->done_tail, i + 1);
    atomic_store(&c->shm->local_done, seq);
    return lost ? -1 : t;
}

static inline void client_close(struct client *c)
{
    munmap(c->shm, c->size);
    close(c->sock);
    close(c->fds[0]);
    close(c->fds[1]);
}

#endif
