/* Grant round trip of posd: a client that must wait for every launch. It registers as the
 * shim does (HELLO, shared memory, kick eventfd), and for each operator: submits it, reports
 * the previous one complete, and when posd has not granted it yet, kicks posd and sleeps on
 * the grant futex, timing from the kick to the grant. Run it under a configuration where it is
 * windowed with one operator in flight (bench/posd.sh does). Prints p50/p99/mean in us. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "pos/client_shm.h"
#include "pos/op_record.h"
#include "pos/proto.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    const char *path = getenv("POS_SOCKET") ? getenv("POS_SOCKET") : POS_DEFAULT_SOCKET;
    int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) {
        fprintf(stderr, "grant_rtt: cannot connect to %s: %s\n", path, strerror(errno));
        return 1;
    }
    struct {
        struct pos_msg_hdr h;
        struct pos_hello b;
    } hello = {{POS_PROTO_MAGIC, POS_PROTO_VERSION, POS_MSG_HELLO, sizeof(struct pos_hello), 0},
               {POS_OP_RECORD_VERSION, POS_SHM_VERSION}};
    send(s, &hello, sizeof hello, 0);
    char buf[256];
    union {
        char c[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {buf, sizeof buf};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.c, .msg_controllen = sizeof ctl.c};
    struct cmsghdr *cm;
    if (recvmsg(s, &m, 0) <= 0 || !(cm = CMSG_FIRSTHDR(&m))) {
        fprintf(stderr, "grant_rtt: posd did not welcome us\n");
        return 1;
    }
    int fds[2];
    memcpy(fds, CMSG_DATA(cm), sizeof fds);
    struct pos_welcome w;
    memcpy(&w, buf + sizeof(struct pos_msg_hdr), sizeof w);
    struct pos_client_shm *shm =
        mmap(NULL, w.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    if (shm == MAP_FAILED)
        return 1;
    uint64_t *rtt = calloc((size_t)n, sizeof *rtt);
    int waited = 0;
    for (int i = 0; i < n; i++) {
        uint64_t seq = atomic_fetch_add(&shm->next_seq, 1) + 1;
        struct pos_submission *slot = &shm->sub[seq % POS_SUB_RING];
        slot->seq = seq;
        slot->kind = POS_OP_KERNEL;
        slot->flags = 0;
        atomic_store_explicit(&slot->stamp, seq, memory_order_release);
        if (seq > 1) { /* the previous operator has completed */
            uint64_t t = atomic_load(&shm->done_tail);
            struct pos_completion_rec *r = &shm->done[t % POS_DONE_RING];
            r->seq = seq - 1;
            r->complete_ns = now_ns();
            atomic_store_explicit(&r->stamp, t + 1, memory_order_release);
            atomic_store_explicit(&shm->done_tail, t + 1, memory_order_release);
        }
        if (atomic_load(&shm->grant_mode) == POS_GRANT_FREE || seq <= atomic_load(&shm->granted))
            continue;
        uint64_t t0 = now_ns(), one = 1;
        atomic_fetch_add(&shm->waiters, 1);
        if (write(fds[1], &one, sizeof one) != sizeof one)
            return 1;
        while (seq > atomic_load(&shm->granted) &&
               atomic_load(&shm->grant_mode) != POS_GRANT_FREE) {
            uint32_t word = atomic_load(&shm->grant_word);
            if (seq <= atomic_load(&shm->granted))
                break;
            struct timespec ts = {1, 0};
            syscall(SYS_futex, (uint32_t *)&shm->grant_word, FUTEX_WAIT, word, &ts, NULL, 0);
        }
        atomic_fetch_sub(&shm->waiters, 1);
        rtt[waited++] = now_ns() - t0;
    }
    if (!waited) {
        printf("waits 0 (posd never held this client: check the configuration)\n");
        return 1;
    }
    qsort(rtt, (size_t)waited, sizeof *rtt, cmp);
    double sum = 0;
    for (int i = 0; i < waited; i++)
        sum += (double)rtt[i];
    printf("waits %d p50_us %.1f p99_us %.1f mean_us %.1f\n", waited, rtt[waited / 2] / 1e3,
           rtt[(size_t)((waited - 1) * 0.99)] / 1e3, sum / waited / 1e3);
    return 0;
}
