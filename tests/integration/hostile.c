/* A client that speaks posd's protocol badly, in one of many ways, for a while:
 *   hostile SOCKET CASE SECONDS [SEED]
 * test_hostile runs it as an unprivileged user against a root posd while a well-behaved
 * client measures its grants. Each case loops until SECONDS have passed (the idle case holds
 * its connections that long), then exits 0; it exits 2 when it could not do what its case is
 * about (no connection at all, no registration where the case needs one), so that a case
 * that tried nothing cannot pass. It prints one line: the case, its rounds and how many of
 * them posd answered by closing the connection. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/client.h"

static const char *sock_path;
static struct timespec t_start;
static double seconds;
static unsigned long long rounds, closed_by_posd, registrations;
static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int running(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t_start.tv_sec) + (t.tv_nsec - t_start.tv_nsec) / 1e9 < seconds;
}

static int connect_posd(int nonblock)
{
    return client_connect(sock_path, nonblock, 5);
}

static void fill_hdr(struct pos_msg_hdr *h, int type, size_t len)
{
    *h = (struct pos_msg_hdr){POS_PROTO_MAGIC, POS_PROTO_VERSION, (uint16_t)type, (uint32_t)len, 0};
}

static ssize_t send_hello(int s)
{
    return client_hello(s, POS_SHM_VERSION);
}

/* Whether posd closes S within MS (after any REJECT). */
static int sees_close(int s, int ms)
{
    char buf[POS_MSG_MAX];
    for (;;) {
        struct pollfd p = {.fd = s, .events = POLLIN};
        if (poll(&p, 1, ms) <= 0)
            return 0;
        ssize_t n = recv(s, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return 1;
        if (n < 0 && errno != EAGAIN)
            return 0;
    }
}

/* Sends LEN bytes at BUF on a fresh connection and counts whether posd hangs up. */
static void one_message(const void *buf, size_t len)
{
    int s = connect_posd(0);
    if (s < 0)
        return;
    rounds++;
    send(s, buf, len, MSG_NOSIGNAL);
    closed_by_posd += sees_close(s, 1000);
    close(s);
}

/* Registers as a client (client.h), counted. */
static int do_register(struct client *c)
{
    if (client_register(sock_path, c) < 0)
        return -1;
    registrations++;
    return 0;
}

static void kick(struct client *c)
{
    uint64_t one = 1;
    if (write(c->fds[1], &one, sizeof one) < 0)
        return;
}

/* ---- the cases ----------------------------------------------------------------------- */

static void case_garbage(void)
{
    uint8_t buf[512];
    while (running()) {
        size_t n = 1 + rnd() % sizeof buf;
        for (size_t i = 0; i < n; i++)
            buf[i] = (uint8_t)rnd();
        one_message(buf, n);
    }
}

static void case_wrong_magic_version(void)
{
    while (running()) {
        struct pos_msg_hdr h;
        fill_hdr(&h, POS_MSG_HELLO, 0);
        if (rounds & 1)
            h.magic = (uint32_t)rnd();
        else
            h.version = (uint16_t)(POS_PROTO_VERSION + 1 + rnd() % 100);
        one_message(&h, sizeof h);
    }
}

static void case_truncated(void)
{
    while (running()) {
        uint8_t buf[64];
        struct pos_msg_hdr h;
        fill_hdr(&h, (int)(1 + rnd() % 6), 8 + rnd() % 64); /* claims more than it sends */
        memcpy(buf, &h, sizeof h);
        size_t n = rounds % 3 == 0   ? 1 + rnd() % (sizeof h - 1) /* not even a header */
                   : rounds % 3 == 1 ? sizeof h + rnd() % 8
                                     : sizeof h + 4; /* a HELLO cut short */
        if (rounds % 3 == 2) {
            fill_hdr(&h, POS_MSG_HELLO, 4);
            memcpy(buf, &h, sizeof h);
        }
        one_message(buf, n);
    }
}

static void case_oversized(void)
{
    static uint8_t big[POS_MSG_MAX];
    while (running()) {
        struct pos_msg_hdr h;
        size_t n = POS_REQ_MAX + 1 + rnd() % (sizeof big - POS_REQ_MAX - 1);
        fill_hdr(&h, POS_MSG_NAMES, n - sizeof h);
        memcpy(big, &h, sizeof h);
        one_message(big, n);
    }
}

static void case_double_hello(void)
{
    while (running()) {
        struct client c;
        if (do_register(&c) < 0)
            continue;
        rounds++;
        send_hello(c.sock);
        closed_by_posd += sees_close(c.sock, 1000);
        client_close(&c);
    }
}

/* HELLO and NAMES carrying descriptors (SCM_RIGHTS): posd takes none of them. */
static void case_fds_passed(void)
{
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int pipefd[2];
    if (devnull < 0 || pipe(pipefd) < 0)
        exit(2);
    while (running()) {
        int s = connect_posd(0);
        if (s < 0)
            continue;
        rounds++;
        struct {
            struct pos_msg_hdr h;
            struct pos_hello b;
        } m;
        fill_hdr(&m.h, rounds & 1 ? POS_MSG_HELLO : POS_MSG_STATS_REQ, rounds & 1 ? sizeof m.b : 0);
        m.b = (struct pos_hello){POS_OP_RECORD_VERSION, POS_SHM_VERSION};
        int fds[3] = {devnull, pipefd[0], pipefd[1]};
        union {
            char b[CMSG_SPACE(sizeof fds)];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {&m, rounds & 1 ? sizeof m : sizeof m.h};
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof fds);
        memcpy(CMSG_DATA(cm), fds, sizeof fds);
        sendmsg(s, &mh, MSG_NOSIGNAL);
        /* a tool's reply or a WELCOME (with posd's descriptors: not kept here) */
        char buf[POS_MSG_MAX];
        union {
            char b[CMSG_SPACE(2 * sizeof(int))];
            struct cmsghdr align;
        } rctl;
        struct iovec riov = {buf, sizeof buf};
        struct msghdr rm = {.msg_iov = &riov,
                            .msg_iovlen = 1,
                            .msg_control = rctl.b,
                            .msg_controllen = sizeof rctl.b};
        if (recvmsg(s, &rm, MSG_CMSG_CLOEXEC) > 0)
            for (cm = CMSG_FIRSTHDR(&rm); cm; cm = CMSG_NXTHDR(&rm, cm))
                for (size_t k = 0; k < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++)
                    close(((int *)CMSG_DATA(cm))[k]);
        close(s);
    }
}

/* Registered, then random values written anywhere in its shared memory, kicked. */
static void case_ring_values(void)
{
    while (running()) {
        struct client c;
        if (do_register(&c) < 0)
            continue;
        rounds++;
        for (int k = 0; k < 64 && running(); k++) {
            /* half of them at the words posd reads first: the rings' tails and stamps */
            static const size_t hot[] = {
                offsetof(struct pos_client_shm, next_seq),
                offsetof(struct pos_client_shm, waiters),
                offsetof(struct pos_client_shm, sync_next),
                offsetof(struct pos_client_shm, done_tail),
                offsetof(struct pos_client_shm, sub[1].stamp),
                offsetof(struct pos_client_shm, sub[2].stamp),
                offsetof(struct pos_client_shm, done[0].stamp),
                offsetof(struct pos_client_shm, done[0].seq),
                offsetof(struct pos_client_shm, sync_ring[0].stamp),
                offsetof(struct pos_client_shm, sync_ring[0].covers),
            };
            size_t off =
                rnd() % 2 ? hot[rnd() % (sizeof hot / sizeof hot[0])] : rnd() % c.size & ~(size_t)7;
            uint64_t v = rnd();
            switch (rnd() % 4) {
            case 0: /* near the seqs posd expects */
                v %= 2 * POS_SUB_RING;
                break;
            case 1:
                v = ~(uint64_t)0 - v % 4;
                break;
            }
            memcpy((uint8_t *)c.shm + off, &v, sizeof v);
            kick(&c);
        }
        closed_by_posd += sees_close(c.sock, 20);
        client_close(&c);
    }
}

/* Registered, then every way to resize or punch the memfd posd reads. */
static void case_memfd_shrink(void)
{
    while (running()) {
        struct client c;
        if (do_register(&c) < 0)
            continue;
        rounds++;
        if (ftruncate(c.fds[0], 0) == 0 || ftruncate(c.fds[0], (off_t)c.size * 2) == 0 ||
            ftruncate(c.fds[0], (off_t)c.size - 4096) == 0)
            fprintf(stderr, "hostile: the memfd could be resized\n");
        fallocate(c.fds[0], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)c.size);
        atomic_store(&c.shm->done_tail, 1); /* posd reads the punched pages */
        kick(&c);
        closed_by_posd += sees_close(c.sock, 100);
        client_close(&c);
    }
}

/* STATS requests whose replies it never reads, on a connection it keeps, then a registered
 * client that never reads either. */
static void case_never_draining(void)
{
    int tools[8], ntools = 0;
    struct pos_msg_hdr h;
    fill_hdr(&h, POS_MSG_STATS_REQ, 0);
    while (running()) {
        if (ntools < 8) {
            tools[ntools] = connect_posd(1);
            if (tools[ntools] >= 0)
                ntools++;
        }
        for (int i = 0; i < ntools; i++)
            if (send(tools[i], &h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT) > 0)
                rounds++;
        usleep(1000);
    }
    for (int i = 0; i < ntools; i++)
        close(tools[i]);
}

/* As many connections as posd lets it hold, none of them saying a word. */
static void case_idle_slots(void)
{
    static int socks[512];
    int n = 0;
    while (running()) {
        if (n < 512) {
            int s = connect_posd(1);
            if (s >= 0) {
                socks[n++] = s;
                rounds++;
            }
        }
        for (int i = 0; i < n; i++) {
            char c;
            if (socks[i] >= 0 && recv(socks[i], &c, 1, MSG_DONTWAIT) >= 0) {
                closed_by_posd++; /* refused or timed out: take another */
                close(socks[i]);
                socks[i] = socks[--n];
            }
        }
        usleep(n < 512 ? 1000 : 20000);
    }
    for (int i = 0; i < n; i++)
        close(socks[i]);
}

static void case_connect_close(void)
{
    while (running()) {
        int s = connect_posd(0);
        if (s < 0)
            continue;
        rounds++;
        if (rounds & 1)
            send_hello(s); /* and gone before the WELCOME */
        close(s);
    }
}

static void case_register_leave(void)
{
    while (running()) {
        struct client c;
        if (do_register(&c) == 0) {
            rounds++;
            client_close(&c);
        }
    }
}

static void case_kick_flood(void)
{
    struct client c;
    /* the cases before may have spent this uid's registrations (posd allows 100 a second
     * after a burst): wait for one */
    while (do_register(&c) < 0) {
        if (!running())
            exit(2);
        usleep(10000);
    }
    while (running()) {
        for (int i = 0; i < 1000; i++)
            kick(&c);
        rounds += 1000;
    }
    closed_by_posd += sees_close(c.sock, 0);
    client_close(&c);
}

/* Every kernel id posd takes, in its largest messages, names it must tell apart; then more
 * than it takes. Again and again on fresh registrations. */
static void case_names_flood(void)
{
    static uint8_t buf[POS_REQ_MAX];
    while (running()) {
        struct client c;
        if (do_register(&c) < 0)
            continue;
        uint32_t id = 1;
        while (running() && id <= POS_MAX_KERNEL_IDS + 1) {
            size_t off = sizeof(struct pos_msg_hdr) + sizeof(struct pos_names);
            uint32_t count = 0;
            while (off + 2 + 10 <= sizeof buf) {
                uint16_t len = (uint16_t)snprintf((char *)buf + off + 2, 11, "k%09u", id + count);
                memcpy(buf + off, &len, sizeof len);
                off += 2 + len;
                count++;
            }
            struct pos_names nh = {.first = id, .count = count};
            struct pos_msg_hdr h;
            fill_hdr(&h, POS_MSG_NAMES, off - sizeof h);
            memcpy(buf, &h, sizeof h);
            memcpy(buf + sizeof h, &nh, sizeof nh);
            if (send(c.sock, buf, off, MSG_NOSIGNAL) < 0)
                break;
            rounds++;
            id += count;
        }
        closed_by_posd += sees_close(c.sock, 1000);
        client_close(&c);
    }
}

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    {"garbage", case_garbage},
    {"magic-version", case_wrong_magic_version},
    {"truncated", case_truncated},
    {"oversized", case_oversized},
    {"double-hello", case_double_hello},
    {"fds-passed", case_fds_passed},
    {"ring-values", case_ring_values},
    {"memfd-shrink", case_memfd_shrink},
    {"never-draining", case_never_draining},
    {"idle-slots", case_idle_slots},
    {"connect-close", case_connect_close},
    {"register-leave", case_register_leave},
    {"kick-flood", case_kick_flood},
    {"names-flood", case_names_flood},
};

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    if (argc < 4) {
        fprintf(stderr, "usage: hostile SOCKET CASE SECONDS [SEED] | hostile --list\n");
        return 1;
    }
    sock_path = argv[1];
    seconds = atof(argv[3]);
    if (argc > 4)
        rng ^= strtoull(argv[4], NULL, 0) * 0x9e3779b97f4a7c15ull;
    clock_gettime(CLOCK_MONOTONIC, &t_start);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[2], cases[i].name) != 0)
            continue;
        cases[i].fn();
        printf("%s: %llu rounds, %llu closed by posd, %llu registrations\n", cases[i].name, rounds,
               closed_by_posd, registrations);
        return rounds ? 0 : 2;
    }
    fprintf(stderr, "hostile: no case %s\n", argv[2]);
    return 1;
}
