/* The client side of posd's protocol (see posclient.h): connect with errors that say what to
 * do, one request and its reply, and the checks every reply gets before anyone reads it. */
#include "tools/posclient.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

int posclient_fail(int rc, char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

const char *posclient_default_socket(void)
{
    const char *env = getenv("POS_SOCKET");
    return env && *env ? env : POS_DEFAULT_SOCKET;
}

/* What a failed connect means, and what to do about it. */
static const struct {
    int err;
    const char *what;
} connect_hints[] = {
    {ENOENT, "no posd socket there: is posd running? start it, or give its socket with -s or "
             "POS_SOCKET"},
    {ECONNREFUSED, "nobody listens there (a posd that died left its socket): start posd"},
    {EACCES, "permission denied: this user may not open posd's socket or its directory; ask "
             "the admin (docs/posctl.md, the posd group)"},
    {EPERM, "permission denied: this user may not open posd's socket; ask the admin"},
    {EAGAIN, "posd is not accepting connections (its backlog is full): is it stopped or "
             "wedged?"},
    {ENOTSOCK, "that is not a socket: give posd's socket with -s or POS_SOCKET"},
};

int posclient_connect(struct posclient *c, const char *path, int timeout_s, char *err,
                      size_t errlen)
{
    c->fd = -1;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (!*path || strlen(path) >= sizeof a.sun_path)
        return posclient_fail(-ENAMETOOLONG, err, errlen, "bad socket path '%s' (want 1 to %zu bytes)", path,
                    sizeof a.sun_path - 1);
    snprintf(c->path, sizeof c->path, "%s", path);
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return posclient_fail(-errno, err, errlen, "cannot create a socket: %s", strerror(errno));
    struct timeval t = {.tv_sec = timeout_s > 0 ? timeout_s : POSCLIENT_TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        int e = errno;
        close(fd);
        struct stat st;
        /* connect() answers ECONNREFUSED for a file that is not a socket too */
        if (e == ECONNREFUSED && lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
            e = ENOTSOCK;
        for (size_t i = 0; i < sizeof connect_hints / sizeof connect_hints[0]; i++)
            if (connect_hints[i].err == e)
                return posclient_fail(-e, err, errlen, "cannot connect to posd at %s: %s", path,
                            connect_hints[i].what);
        return posclient_fail(-e, err, errlen, "cannot connect to posd at %s: %s (is posd running?)", path,
                    strerror(e));
    }
    c->fd = fd;
    return 0;
}

void posclient_close(struct posclient *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

int posclient_terminated(const char *s, size_t size)
{
    return memchr(s, '\0', size) != NULL;
}

void posclient_printable(char *dst, size_t dstlen, const char *src)
{
    size_t i = 0;
    for (; i + 1 < dstlen && src[i]; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    dst[i] = '\0';
}

static int rejected(const char *body, size_t len, char *err, size_t errlen)
{
    if (len == 0 || body[0] == '\0')
        return posclient_fail(-ECONNREFUSED, err, errlen, "posd refused the request (no reason given)");
    if (!posclient_terminated(body, len))
        return posclient_fail(-ECONNREFUSED, err, errlen,
                    "posd refused the request (its reason is not NUL-terminated)");
    char reason[200];
    posclient_printable(reason, sizeof reason, body);
    return posclient_fail(-ECONNREFUSED, err, errlen, "posd refused the request: %s", reason);
}

int posclient_check_msg(const void *msg, size_t len, int want, const void **body, size_t *body_len,
                        char *err, size_t errlen)
{
    struct pos_msg_hdr h;
    if (len < sizeof h)
        return posclient_fail(-EPROTO, err, errlen,
                    "short reply from posd (%zu bytes, less than a message header)", len);
    memcpy(&h, msg, sizeof h);
    if (h.magic != POS_PROTO_MAGIC)
        return posclient_fail(-EPROTO, err, errlen, "the reply is not from posd (magic 0x%08x, want 0x%08x)",
                    h.magic, POS_PROTO_MAGIC);
    if (h.version != POS_PROTO_VERSION)
        return posclient_fail(-EPROTO, err, errlen,
                    "posd speaks protocol version %u, this %s speaks %u; use the %s that came "
                    "with this posd",
                    h.version, program_invocation_short_name, POS_PROTO_VERSION,
                    program_invocation_short_name);
    if (h.len != len - sizeof h)
        return posclient_fail(-EPROTO, err, errlen,
                    "bad reply from posd: its header says %u bytes follow, %zu did", h.len,
                    len - sizeof h);
    const char *b = (const char *)msg + sizeof h;
    if (h.type == POS_MSG_REJECT)
        return rejected(b, h.len, err, errlen);
    if (h.type != want)
        return posclient_fail(-EPROTO, err, errlen, "unexpected reply from posd: message type %u, want %d",
                    h.type, want);
    *body = b;
    *body_len = h.len;
    return 0;
}

int posclient_exchange(struct posclient *c, int type, const void *body, size_t len, void *buf,
                       size_t cap, size_t *got, char *err, size_t errlen)
{
    struct pos_msg_hdr h = {.magic = POS_PROTO_MAGIC,
                            .version = POS_PROTO_VERSION,
                            .type = (uint16_t)type,
                            .len = (uint32_t)len};
    struct iovec iov[2] = {{&h, sizeof h}, {(void *)body, len}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
    ssize_t n;
    do
        n = sendmsg(c->fd, &m, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)(sizeof h + len))
        return posclient_fail(n < 0 ? -errno : -EIO, err, errlen, "cannot send the request to posd at %s: %s",
                    c->path, n < 0 ? strerror(errno) : "short send");
    /* MSG_TRUNC: the whole message's length, so that an oversized one is not taken cut */
    do
        n = recv(c->fd, buf, cap, MSG_TRUNC);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return posclient_fail(-ETIMEDOUT, err, errlen, "no reply from posd at %s in time: is it wedged?",
                    c->path);
    if (n < 0)
        return posclient_fail(-errno, err, errlen, "cannot read posd's reply on %s: %s", c->path,
                    strerror(errno));
    if (n == 0)
        return posclient_fail(-ECONNRESET, err, errlen,
                    "posd at %s closed the connection without a reply (an older posd? see its log)",
                    c->path);
    if ((size_t)n > cap)
        return posclient_fail(-EPROTO, err, errlen,
                    "bad reply from posd: %zd bytes, more than the %zu expected", n, cap);
    *got = (size_t)n;
    return 0;
}

int posclient_stats(struct posclient *c, void *buf, size_t cap, size_t *got, char *err,
                    size_t errlen)
{
    return posclient_exchange(c, POS_MSG_STATS_REQ, NULL, 0, buf, cap, got, err, errlen);
}

int posclient_control(struct posclient *c, const struct pos_control *req,
                      struct pos_control_reply *rep, char *err, size_t errlen)
{
    _Alignas(8) unsigned char buf[sizeof(struct pos_msg_hdr) + sizeof *rep + 64];
    size_t got = 0;
    int rc = posclient_exchange(c, POS_MSG_CONTROL, req, sizeof *req, buf, sizeof buf, &got, err,
                                errlen);
    if (rc < 0)
        return rc;
    const void *body = NULL;
    size_t blen = 0;
    rc = posclient_check_msg(buf, got, POS_MSG_CONTROL_REPLY, &body, &blen, err, errlen);
    if (rc < 0)
        return rc;
    struct pos_control_reply r;
    if (blen != sizeof r)
        return posclient_fail(-EPROTO, err, errlen, "bad CONTROL reply from posd: %zu bytes, want %zu", blen,
                    sizeof r);
    memcpy(&r, body, sizeof r);
    if (!posclient_terminated(r.message, sizeof r.message))
        return posclient_fail(-EPROTO, err, errlen, "bad CONTROL reply from posd: its text is not ended");
    if (r.status > 0 || r.status < -4095)
        return posclient_fail(-EPROTO, err, errlen, "bad CONTROL reply from posd: status %d", r.status);
    posclient_printable(err, errlen, r.message);
    if (rep)
        *rep = r;
    return r.status;
}
