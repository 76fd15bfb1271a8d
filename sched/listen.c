/* posd's listening socket: its path made free (nothing there, or a socket a dead posd left:
 * probed first, so that a live posd is never unlinked), bound and opened to every local user,
 * there only once it listens, and removed at exit. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "sched/listen.h"

static int make_parent_dir(const char *path)
{
    char dir[108];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* What to do when this user may not put its socket at a path (the default, /run/posd, is
 * root's): said after the error itself. */
static const char *access_hint(int e)
{
    return e == EACCES || e == EPERM || e == EROFS
               ? ": as another user than root, give posd a socket in a directory this user can "
                 "write (-s /tmp/pos/posd.sock, or POS_SOCKET)"
               : "";
}

static const char *file_kind(mode_t mode)
{
    return S_ISREG(mode)    ? "a regular file"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISLNK(mode)  ? "a symbolic link"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
                            : "not a socket";
}

enum probe_result {
    PROBE_DEAD,   /* nobody listens there (ECONNREFUSED): a posd that died left it */
    PROBE_LIVE,   /* a posd answered */
    PROBE_BUSY,   /* its backlog is full (EAGAIN): someone listens and does not accept */
    PROBE_SILENT, /* it accepts but did not answer in time */
    PROBE_ERROR,
};

#define PROBE_ANSWER_MS 1000
#define PROBE_RETRY_NS  2000000000LL

/* Waits up to MS for EVENTS on S. Returns poll's revents, 0 on timeout. */
static int wait_for(int s, short events, int ms)
{
    struct pollfd p = {.fd = s, .events = events};
    int n;
    do
        n = poll(&p, 1, ms);
    while (n < 0 && errno == EINTR);
    return n > 0 ? p.revents : 0;
}

/* One try: a non-blocking connect (it cannot hang: a full backlog says EAGAIN), then a STATS
 * request that a posd answers within PROBE_ANSWER_MS. A connection reset before the answer is
 * a posd on its way out. */
static int probe_once(const struct sockaddr_un *a, int *err, int *reset)
{
    *reset = 0;
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) {
        *err = errno;
        return PROBE_ERROR;
    }
    int rc = connect(s, (const struct sockaddr *)a, sizeof *a), e = rc < 0 ? errno : 0;
    if (rc < 0 && e == EINPROGRESS && wait_for(s, POLLOUT, PROBE_ANSWER_MS)) {
        socklen_t len = sizeof e;
        getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &len);
        rc = e ? -1 : 0;
    }
    if (rc < 0) {
        close(s);
        *err = e;
        return e == ECONNREFUSED || e == ENOENT  ? PROBE_DEAD
               : e == EAGAIN || e == EINPROGRESS ? PROBE_BUSY
                                                 : PROBE_ERROR;
    }
    const struct pos_msg_hdr h = {
        .magic = POS_PROTO_MAGIC, .version = POS_PROTO_VERSION, .type = POS_MSG_STATS_REQ};
    send(s, &h, sizeof h, MSG_DONTWAIT | MSG_NOSIGNAL);
    int ev = wait_for(s, POLLIN, PROBE_ANSWER_MS);
    char byte;
    ssize_t n = ev ? recv(s, &byte, 1, MSG_DONTWAIT) : -1;
    close(s);
    if (n > 0)
        return PROBE_LIVE;
    *reset = ev != 0;
    return PROBE_SILENT;
}

/* Who is at the socket A: tried again while connections are reset (a posd killed a moment ago
 * still holds its socket until the kernel has torn down its io_uring). */
static int probe(const struct sockaddr_un *a, int *err)
{
    int64_t give_up = posd_now() + PROBE_RETRY_NS;
    for (;;) {
        int reset, r = probe_once(a, err, &reset);
        if (!reset || posd_now() >= give_up)
            return r;
        usleep(10000);
    }
}

/* Makes PATH free for posd's socket: nothing there, or a socket nobody listens on (removed).
 * Anything else is left as it is, and posd says what is there. */
static int clear_socket_path(const char *path, const struct sockaddr_un *a)
{
    struct stat st;
    if (lstat(path, &st) < 0) {
        if (errno == ENOENT)
            return 0;
        int e = errno;
        posd_log(POSD_LOG_ERROR, "cannot look at %s: %s%s", path, strerror(e), access_hint(e));
        return -e;
    }
    if (!S_ISSOCK(st.st_mode)) {
        posd_log(POSD_LOG_ERROR,
                 "%s is %s, not a socket: posd removes only a socket a posd left there; "
                 "move it away or give posd another socket path (-s)",
                 path, file_kind(st.st_mode));
        return -EEXIST;
    }
    int err = 0;
    switch (probe(a, &err)) {
    case PROBE_DEAD:
        break;
    case PROBE_LIVE:
        posd_log(POSD_LOG_ERROR, "another posd is listening on %s", path);
        return -EADDRINUSE;
    case PROBE_BUSY:
        posd_log(POSD_LOG_ERROR,
                 "another posd is listening on %s, its backlog full (busy or stopped)", path);
        return -EADDRINUSE;
    case PROBE_SILENT:
        posd_log(POSD_LOG_ERROR,
                 "a process listening on %s accepts connections but did not answer within %d "
                 "ms: a posd stopped or wedged? stop it first",
                 path, PROBE_ANSWER_MS);
        return -EADDRINUSE;
    default:
        posd_log(POSD_LOG_ERROR, "cannot probe the socket %s: %s", path, strerror(err));
        return -err;
    }
    if (unlink(path) < 0 && errno != ENOENT) {
        int e = errno;
        posd_log(POSD_LOG_ERROR, "cannot remove the dead socket %s: %s%s", path, strerror(e),
                 access_hint(e));
        return -e;
    }
    return 0;
}

int posd_listen(struct posd *d)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(d->socket_path) >= sizeof a.sun_path) {
        posd_log(POSD_LOG_ERROR, "socket path too long: %s", d->socket_path);
        return -ENAMETOOLONG;
    }
    strcpy(a.sun_path, d->socket_path);
    int rc = make_parent_dir(d->socket_path);
    if (rc < 0) {
        posd_log(POSD_LOG_ERROR, "cannot create the directory of %s: %s%s", d->socket_path,
                 strerror(-rc), access_hint(-rc));
        return rc;
    }
    rc = clear_socket_path(d->socket_path, &a);
    if (rc < 0)
        return rc;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        posd_log(POSD_LOG_ERROR, "cannot make a socket for %s: %s", d->socket_path, strerror(-rc));
        return rc;
    }
    /* The socket is made listening under a name of this process's and then linked to its
     * path: whoever sees the path can connect at once (a socket bound and not yet listening
     * refuses connections), and link, unlike rename, fails when another posd got there first. */
    struct sockaddr_un t = {.sun_family = AF_UNIX};
    int staged = snprintf(t.sun_path, sizeof t.sun_path, "%s.%d", d->socket_path, (int)getpid()) <
                 (int)sizeof t.sun_path;
    const struct sockaddr_un *at = staged ? &t : &a;
    if (staged)
        unlink(t.sun_path); /* a name of a dead process of this pid's */
    if (bind(fd, (const struct sockaddr *)at, sizeof *at) < 0 || listen(fd, 64) < 0 ||
        /* any local user may register; identity and policy come from the kernel's word */
        chmod(at->sun_path, 0666) < 0 || (staged && link(t.sun_path, d->socket_path) < 0)) {
        rc = -errno;
        posd_log(POSD_LOG_ERROR, "cannot listen on %s: %s%s", d->socket_path, strerror(-rc),
                 rc == -EEXIST ? " (another posd took the path while this one started)"
                               : access_hint(-rc));
        if (staged)
            unlink(t.sun_path);
        close(fd);
        return rc;
    }
    if (staged)
        unlink(t.sun_path);
    d->listen_fd = fd;
    return 0;
}

void posd_unlink_socket(struct posd *d)
{
    if (d->listen_fd >= 0) {
        close(d->listen_fd);
        d->listen_fd = -1;
        unlink(d->socket_path);
    }
}
