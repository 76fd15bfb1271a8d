/* The attacker of bench/metricsattack.sh: holds N connections to posd's metrics endpoint on
 * 127.0.0.1:PORT for SECONDS (or until SIGTERM), idle (nothing sent) or slow (a partial
 * request, one header line every INTERVAL_MS, never finished), opening a new one REOPEN_MS
 * after posd closes one (0: at once, a connect flood). Run it as the user to play (setpriv).
 * At the end prints one JSON line: connections opened, closed by posd, and the most open at
 * once on its side (those waiting in posd's listen queue count: they are open to it).
 * `sink` is the control: a listener on 127.0.0.1:PORT that resets every connection as soon as
 * it accepts it (the least any server does), for the attack's cost to the machine without
 * posd.
 *
 *   metricsattack PORT idle|slow N SECONDS [REOPEN_MS [INTERVAL_MS]]
 *   metricsattack sink PORT SECONDS
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 65536

struct conn {
    int fd;         /* -1: closed, to be opened again at reopen_at */
    double next_at; /* slow: the next header line; closed: when to open again */
    int lines;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct sockaddr_in target;
static volatile sig_atomic_t stop;

static void on_term(int sig)
{
    stop = 1;
}

/* A new connection watched as I, or -1 (-2: posd reset it before connect returned). */
static int open_one(int ep, int i)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&target, sizeof target) < 0 && errno != EINPROGRESS) {
        int reset = errno == ECONNRESET;
        close(fd);
        return reset ? -2 : -1;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)i};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    return fd;
}

/* The control's listener: accepts and resets until SIGTERM or SECONDS; prints how many. */
static int sink(int port, double seconds)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, SOMAXCONN) < 0) {
        perror("metricsattack: sink");
        return 1;
    }
    struct timeval tv = {.tv_usec = 100000}; /* to see SIGTERM and the end */
    setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    long n = 0;
    double end = now_s() + seconds;
    while (!stop && now_s() < end) {
        int c = accept(l, NULL, NULL);
        if (c < 0)
            continue;
        struct linger now = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c, SOL_SOCKET, SO_LINGER, &now, sizeof now);
        close(c);
        n++;
    }
    printf("{\"reset\":%ld}\n", n);
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGTERM, on_term);
    if (argc == 4 && strcmp(argv[1], "sink") == 0)
        return sink(atoi(argv[2]), atof(argv[3]));
    if (argc < 5) {
        fprintf(stderr, "usage: metricsattack PORT idle|slow N SECONDS [REOPEN_MS [INTERVAL_MS]]\n"
                        "       metricsattack sink PORT SECONDS\n");
        return 2;
    }
    int port = atoi(argv[1]), slow = strcmp(argv[2], "slow") == 0, n = atoi(argv[3]);
    double seconds = atof(argv[4]);
    double reopen = argc > 5 ? atof(argv[5]) / 1000 : 1.0;
    double interval = argc > 6 ? atof(argv[6]) / 1000 : 7.0;
    if (n < 1 || n > MAX_CONNS || port < 1 || port > 65535) {
        fprintf(stderr, "metricsattack: bad port or count\n");
        return 2;
    }
    /* room for N descriptors: the hard limit is this user's to take */
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < (rlim_t)n + 16) {
        r.rlim_cur = r.rlim_max < (rlim_t)n + 16 ? r.rlim_max : (rlim_t)n + 16;
        setrlimit(RLIMIT_NOFILE, &r);
    }
    target = (struct sockaddr_in){.sin_family = AF_INET,
                                  .sin_port = htons((uint16_t)port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    static struct conn conns[MAX_CONNS];
    int ep = epoll_create1(EPOLL_CLOEXEC);
    long opened = 0, closed = 0;
    int open_now = 0, most = 0;
    double t0 = now_s(), end = t0 + seconds;
    for (int i = 0; i < n; i++) {
        conns[i].fd = open_one(ep, i);
        conns[i].lines = 0;
        conns[i].next_at = conns[i].fd < 0 ? t0 + reopen : slow ? t0 : t0 + 3600;
        opened += conns[i].fd != -1;
        closed += conns[i].fd == -2;
        open_now += conns[i].fd >= 0;
    }
    most = open_now;
    static const char start[] = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n";
    for (;;) {
        double t = now_s();
        if (t >= end || stop)
            break;
        struct epoll_event evs[256];
        int k = epoll_wait(ep, evs, 256, 10);
        t = now_s();
        for (int e = 0; e < k; e++) {
            struct conn *c = &conns[evs[e].data.u32];
            char buf[4096];
            ssize_t got = c->fd >= 0 ? recv(c->fd, buf, sizeof buf, MSG_DONTWAIT) : 1;
            if (c->fd >= 0 && (got == 0 || (got < 0 && errno != EAGAIN))) {
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                c->fd = -1;
                c->next_at = t + reopen;
                closed++;
                open_now--;
            }
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = &conns[i];
            if (c->next_at > t)
                continue;
            if (c->fd < 0) {
                c->fd = open_one(ep, i);
                c->lines = 0;
                c->next_at = c->fd < 0 ? t + reopen : slow ? t : t + 3600;
                opened += c->fd != -1;
                closed += c->fd == -2;
                open_now += c->fd >= 0;
            } else if (slow) {
                char line[64];
                int len = c->lines == 0 ? (int)strlen(start)
                                        : snprintf(line, sizeof line, "X-Slow-%d: 1\r\n", c->lines);
                if (send(c->fd, c->lines == 0 ? start : line, (size_t)len, MSG_NOSIGNAL) < 0 &&
                    errno != EAGAIN) {
                    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                    close(c->fd);
                    c->fd = -1;
                    closed++;
                    open_now--;
                    c->next_at = t + reopen;
                    continue;
                }
                c->lines++;
                c->next_at = t + interval;
            }
        }
        most = open_now > most ? open_now : most;
    }
    printf("{\"opened\":%ld,\"closed_by_posd\":%ld,\"most_open\":%d,\"seconds\":%.1f}\n", opened,
           closed, most, now_s() - t0);
    return 0;
}
