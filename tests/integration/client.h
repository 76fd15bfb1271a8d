/* A posd client by hand, for the tests and the hostile client (no CUnit here): connecting to
 * posd's socket, HELLO, and a registration that maps the shared memory posd sends. */
#ifndef POS_TESTS_INTEGRATION_CLIENT_H
#define POS_TESTS_INTEGRATION_CLIENT_H

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
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

/* A registered client: its connection, the memfd and kick eventfd posd sent, the mapping. */
struct client {
    int sock;
    int fds[2];
    struct pos_client_shm *shm;
    size_t size;
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

static inline void client_close(struct client *c)
{
    munmap(c->shm, c->size);
    close(c->sock);
    close(c->fds[0]);
    close(c->fds[1]);
}

#endif
