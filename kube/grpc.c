/* gRPC over HTTP/2 on unix sockets (see grpc.h): the framing gRPC puts on HTTP/2 (grpc/doc/
 * PROTOCOL-HTTP2.md: the 5-byte message prefix, content-type application/grpc, the status in
 * the trailers) over nghttp2, with protobuf-c's messages.
 *
 * Why not gRPC's own C library: its C core (grpc.h, the "core surface") is documented as no
 * public API for applications, and its supported C++ API would bring C++ and a large dependency
 * into a C project for four small unary methods and one stream. The kubelet needs nothing of
 * gRPC beyond this framing: no compression (none is advertised), no TLS (unix sockets), no
 * name resolution.
 *
 * The server is single-threaded and non-blocking over one epoll set that the caller polls
 * beside its own descriptors: the device plugin pushes ListAndWatch updates from its own loop
 * (health changes, re-registration), which then needs no lock around nghttp2's sessions (not
 * thread-safe), and a peer that stalls or writes a frame byte by byte holds nobody up. What a
 * peer can make it hold is bounded: connections, streams per connection, request bytes per
 * message (RESOURCE_EXHAUSTED beyond), unsent reply bytes per stream. The client blocks, with a
 * deadline over the whole call: its callers (registration, posd's pod-resources reader) run it
 * off their loops. */
#include "fail.h"
#include "grpc.h"

#include <errno.h>
#include <fcntl.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PREFIX_LEN  5  /* compressed flag (1 byte), message length (4, big-endian) */
#define MAX_CONNS   32 /* the kubelet holds one or two */
#define MAX_STREAMS 16 /* per connection (SETTINGS_MAX_CONCURRENT_STREAMS) */
#define IO_CHUNK    16384

/* A growing byte buffer with a read offset. */
struct buf {
    uint8_t *p;
    size_t len, off, cap;
};

static int buf_add(struct buf *b, const void *data, size_t n)
{
    if (b->off && b->off == b->len)
        b->off = b->len = 0;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p)
            return -ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

static size_t buf_pending(const struct buf *b)
{
    return b->len - b->off;
}

static void buf_free(struct buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Appends M with its gRPC prefix to B. */
static int buf_add_message(struct buf *b, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *p = malloc(PREFIX_LEN + n);
    if (!p)
        return -ENOMEM;
    p[0] = 0;
    p[1] = (uint8_t)(n >> 24);
    p[2] = (uint8_t)(n >> 16);
    p[3] = (uint8_t)(n >> 8);
    p[4] = (uint8_t)n;
    protobuf_c_message_pack(m, p + PREFIX_LEN);
    int rc = buf_add(b, p, PREFIX_LEN + n);
    free(p);
    return rc;
}

/* The one message of a unary body P (LEN bytes) in *MSG, *MSG_LEN. Returns 0, or a gRPC status
 * with the reason in WHY. */
static int one_message(const uint8_t *p, size_t len, const uint8_t **msg, size_t *msg_len,
                       char *why, size_t whylen)
{
    if (len < PREFIX_LEN)
        return kube_fail(why, whylen, KUBE_GRPC_INVALID_ARGUMENT,
                         "no gRPC message (%zu bytes, less than the 5-byte prefix)", len);
    if (p[0] != 0)
        return kube_fail(why, whylen, KUBE_GRPC_UNIMPLEMENTED,
                         "compressed gRPC message: no compression is supported");
    size_t n = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
    if (n != len - PREFIX_LEN)
        return kube_fail(why, whylen, KUBE_GRPC_INVALID_ARGUMENT,
                         "the gRPC prefix says %zu bytes, %zu follow (one message expected)", n,
                         len - PREFIX_LEN);
    *msg = p + PREFIX_LEN;
    *msg_len = n;
    return 0;
}

/* The length the gRPC prefix at P declares (P holds at least PREFIX_LEN bytes). */
static size_t declared_len(const uint8_t *p)
{
    return (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE             \
    }

/* grpc-message is percent-encoded: bytes outside printable ASCII and '%' itself. */
static void percent_encode(char *dst, size_t cap, const char *src)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *s = (const unsigned char *)src; *s && o + 4 < cap; s++) {
        if (*s >= 0x20 && *s < 0x7f && *s != '%') {
            dst[o++] = (char)*s;
        } else {
            dst[o++] = '%';
            dst[o++] = hex[*s >> 4];
            dst[o++] = hex[*s & 15];
        }
    }
    dst[o] = '\0';
}

static void percent_decode(char *dst, size_t cap, const uint8_t *src, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < cap; i++) {
        unsigned v;
        if (src[i] == '%' && i + 2 < len && sscanf((const char *)src + i + 1, "%2x", &v) == 1) {
            dst[o++] = (char)v;
            i += 2;
        } else {
            dst[o++] = (char)src[i];
        }
    }
    dst[o] = '\0';
}

static int header_is(const uint8_t *name, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(name, want, len) == 0;
}

/* --- server ------------------------------------------------------------------------------ */

int kube_grpc_reply_pack(struct kube_grpc_reply *rep, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    rep->body = malloc(n ? n : 1);
    if (!rep->body) {
        kube_grpc_reply_error(rep, KUBE_GRPC_INTERNAL, "out of memory packing the reply");
        return -ENOMEM;
    }
    rep->len = protobuf_c_message_pack(m, rep->body);
    rep->status = KUBE_GRPC_OK;
    return 0;
}

void kube_grpc_reply_error(struct kube_grpc_reply *rep, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rep->message, sizeof rep->message, fmt, ap);
    va_end(ap);
    rep->status = status;
    free(rep->body);
    rep->body = NULL;
    rep->len = 0;
}

struct conn;

/* One stream: a request being read, then its reply being written. */
struct call {
    struct conn *c;
    int32_t id;
    char path[128];
    int post, grpc_type; /* :method POST, content-type application/grpc[+...] */
    struct buf req;
    int refused;   /* answered early (too large): what else arrives is dropped */
    int answered;  /* a reply is submitted */
    int streaming; /* an open server stream: pushes go here */
    const struct kube_grpc_method *m;
    struct buf resp;
    struct call *next;
};

struct conn {
    struct kube_grpc_server *s;
    int fd;
    nghttp2_session *h2;
    struct buf out;  /* bytes nghttp2 gave that the socket did not take yet */
    size_t buffered; /* request bytes held by this connection's calls */
    int epollout;
    struct call *calls;
    struct conn *next;
};

struct kube_grpc_server {
    const struct kube_grpc_method *methods;
    size_t n_methods;
    void *ctx;
    size_t msg_max;
    int epfd, lfd;
    int n_conns;
    struct conn *conns;
};

static const struct kube_grpc_method *find_method(const struct kube_grpc_server *s,
                                                  const char *path)
{
    for (size_t i = 0; i < s->n_methods; i++)
        if (strcmp(s->methods[i].path, path) == 0)
            return &s->methods[i];
    return NULL;
}

static void call_free(struct call *k)
{
    buf_free(&k->req);
    buf_free(&k->resp);
    free(k);
}

static void call_unlink(struct call *k)
{
    for (struct call **pp = &k->c->calls; *pp; pp = &(*pp)->next)
        if (*pp == k) {
            *pp = k->next;
            break;
        }
    k->c->buffered -= k->req.cap;
}

/* The data of a reply: what RESP holds; then, for a unary call, the trailers. A stream with
 * nothing to send waits (DEFERRED) until a push resumes it. */
static ssize_t reply_read(nghttp2_session *h2, int32_t id, uint8_t *out, size_t len,
                          uint32_t *flags, nghttp2_data_source *src, void *user)
{
    struct call *k = src->ptr;
    size_t n = buf_pending(&k->resp);
    if (n > len)
        n = len;
    memcpy(out, k->resp.p + k->resp.off, n);
    k->resp.off += n;
    if (buf_pending(&k->resp))
        return (ssize_t)n;
    if (k->streaming)
        return n ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    nghttp2_nv trailers[] = {NV("grpc-status", "0")};
    nghttp2_submit_trailer(h2, id, trailers, 1);
    return (ssize_t)n;
}

/* A reply with no message: the status alone, in one HEADERS frame that ends the stream. */
static void answer_status(struct call *k, int status, const char *message)
{
    char code[16], msg[768];
    snprintf(code, sizeof code, "%d", status);
    percent_encode(msg, sizeof msg, message);
    nghttp2_nv h[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                      NV("grpc-status", code), NV("grpc-message", msg)};
    nghttp2_submit_response(k->c->h2, k->id, h, msg[0] ? 4 : 3, NULL);
    k->answered = 1;
}

static void answer_reply(struct call *k, const struct kube_grpc_reply *rep)
{
    uint8_t p[PREFIX_LEN] = {0, (uint8_t)(rep->len >> 24), (uint8_t)(rep->len >> 16),
                             (uint8_t)(rep->len >> 8), (uint8_t)rep->len};
    if (buf_add(&k->resp, p, sizeof p) < 0 || buf_add(&k->resp, rep->body, rep->len) < 0) {
        answer_status(k, KUBE_GRPC_INTERNAL, "out of memory");
        return;
    }
    nghttp2_nv h[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
    nghttp2_data_provider prd = {.source.ptr = k, .read_callback = reply_read};
    k->streaming = k->m->streaming;
    nghttp2_submit_response(k->c->h2, k->id, h, 2, &prd);
    k->answered = 1;
}

/* The whole request is in: check it, unpack it, call its handler, submit the answer. */
static void dispatch(struct call *k)
{
    char why[200];
    if (!k->post || !k->grpc_type) {
        answer_status(k, KUBE_GRPC_INVALID_ARGUMENT,
                      "not a gRPC request (want POST and content-type application/grpc)");
        return;
    }
    k->m = find_method(k->c->s, k->path);
    if (!k->m) {
        snprintf(why, sizeof why, "unknown method %s", k->path);
        answer_status(k, KUBE_GRPC_UNIMPLEMENTED, why);
        return;
    }
    const uint8_t *msg = NULL;
    size_t len = 0;
    int st = one_message(k->req.p, k->req.len, &msg, &len, why, sizeof why);
    if (st) {
        answer_status(k, st, why);
        return;
    }
    ProtobufCMessage *req = protobuf_c_message_unpack(k->m->request, NULL, len, msg);
    if (!req) {
        snprintf(why, sizeof why, "the request is not a valid %s message", k->m->request->name);
        answer_status(k, KUBE_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    struct kube_grpc_reply rep = {.status = KUBE_GRPC_UNKNOWN};
    k->m->handle(k->c->s->ctx, req, &rep);
    protobuf_c_message_free_unpacked(req, NULL);
    if (rep.status == KUBE_GRPC_OK)
        answer_reply(k, &rep);
    else
        answer_status(k, rep.status, rep.message[0] ? rep.message : "failed");
    free(rep.body);
}

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
    struct conn *c = user;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct call *k = calloc(1, sizeof *k);
    if (!k)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    k->c = c;
    k->id = f->hd.stream_id;
    k->next = c->calls;
    c->calls = k;
    nghttp2_session_set_stream_user_data(h2, k->id, k);
    return 0;
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    struct call *k = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (!k || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (header_is(name, namelen, ":path")) {
        size_t n = valuelen < sizeof k->path ? valuelen : sizeof k->path - 1;
        memcpy(k->path, value, n);
        k->path[n] = '\0';
    } else if (header_is(name, namelen, ":method")) {
        k->post = header_is(value, valuelen, "POST");
    } else if (header_is(name, namelen, "content-type")) {
        k->grpc_type = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0 &&
                       (valuelen == 16 || value[16] == '+' || value[16] == ';');
    }
    return 0;
}

/* Refuses K at once (a request too large): the status now, then RST_STREAM once the status is
 * sent (on_frame_send: nghttp2 would send a reset queued now before the HEADERS), so that the
 * client stops sending what nobody reads. */
static void refuse_early(struct call *k, int status, const char *why)
{
    answer_status(k, status, why);
    k->c->buffered -= k->req.cap;
    buf_free(&k->req);
    k->refused = 1;
}

static int on_data(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *user)
{
    struct conn *c = user;
    struct call *k = nghttp2_session_get_stream_user_data(h2, id);
    if (!k || k->refused || k->answered)
        return 0;
    size_t max = c->s->msg_max + PREFIX_LEN;
    char why[160];
    /* the declared length first: an oversized message is refused before it is buffered */
    uint8_t head[PREFIX_LEN];
    size_t have = k->req.len < PREFIX_LEN ? k->req.len : PREFIX_LEN;
    if (have)
        memcpy(head, k->req.p, have);
    size_t take = PREFIX_LEN - have < len ? PREFIX_LEN - have : len;
    memcpy(head + have, data, take);
    if (have + take == PREFIX_LEN && declared_len(head) > c->s->msg_max) {
        snprintf(why, sizeof why, "request of %zu bytes is over the limit of %zu",
                 declared_len(head), c->s->msg_max);
        refuse_early(k, KUBE_GRPC_RESOURCE_EXHAUSTED, why);
        return 0;
    }
    if (k->req.len + len > max) {
        snprintf(why, sizeof why, "request over the limit of %zu bytes", c->s->msg_max);
        refuse_early(k, KUBE_GRPC_RESOURCE_EXHAUSTED, why);
        return 0;
    }
    size_t cap_before = k->req.cap;
    if (buf_add(&k->req, data, len) < 0) {
        refuse_early(k, KUBE_GRPC_RESOURCE_EXHAUSTED, "out of memory for the request");
        return 0;
    }
    c->buffered += k->req.cap - cap_before;
    /* all streams of a connection together hold at most two largest messages */
    if (c->buffered > 2 * max)
        refuse_early(k, KUBE_GRPC_RESOURCE_EXHAUSTED,
                     "too many request bytes in flight on this connection");
    return 0;
}

static int on_frame_recv(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
    if ((f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS) ||
        !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    struct call *k = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (k && !k->refused && !k->answered)
        dispatch(k);
    return 0;
}

static int on_frame_send(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
    if (f->hd.type != NGHTTP2_HEADERS || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    const struct call *k = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (k && k->refused)
        nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, k->id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t id, uint32_t code, void *user)
{
    struct call *k = nghttp2_session_get_stream_user_data(h2, id);
    if (!k)
        return 0;
    nghttp2_session_set_stream_user_data(h2, id, NULL);
    call_unlink(k);
    call_free(k);
    return 0;
}

static void conn_free(struct conn *c)
{
    struct kube_grpc_server *s = c->s;
    for (struct conn **pp = &s->conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    s->n_conns--;
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    nghttp2_session_del(c->h2); /* calls no stream-close callback: the calls go here */
    while (c->calls) {
        struct call *k = c->calls;
        c->calls = k->next;
        call_free(k);
    }
    buf_free(&c->out);
    free(c);
}

static void conn_watch(struct conn *c, int out)
{
    if (c->epollout == out)
        return;
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(c->s->epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->epollout = out;
}

/* Writes what nghttp2 has to send until the socket is full. Returns 0, or -1 when the
 * connection is to go (an error, or nothing more to read or write). */
static int conn_flush(struct conn *c)
{
    for (;;) {
        while (buf_pending(&c->out)) {
            ssize_t n = send(c->fd, c->out.p + c->out.off, buf_pending(&c->out),
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                conn_watch(c, 1);
                return 0;
            }
            if (n <= 0)
                return -1;
            c->out.off += (size_t)n;
        }
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->h2, &data);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        if (buf_add(&c->out, data, (size_t)n) < 0)
            return -1;
    }
    conn_watch(c, 0);
    return nghttp2_session_want_read(c->h2) || nghttp2_session_want_write(c->h2) ? 0 : -1;
}

static int conn_read(struct conn *c)
{
    uint8_t b[IO_CHUNK];
    for (;;) {
        ssize_t n = recv(c->fd, b, sizeof b, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return -1; /* the peer went, mid-stream or not */
        if (nghttp2_session_mem_recv(c->h2, b, (size_t)n) < 0)
            return -1; /* not HTTP/2: nothing more to say to it */
        if ((size_t)n < sizeof b)
            return 0;
    }
}

static void conn_accept(struct kube_grpc_server *s)
{
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct conn *c = s->n_conns < MAX_CONNS ? calloc(1, sizeof *c) : NULL;
        nghttp2_session_callbacks *cb = NULL;
        if (!c || nghttp2_session_callbacks_new(&cb) != 0) {
            free(c);
            close(fd);
            continue;
        }
        nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
        nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
        nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
        int rc = nghttp2_session_server_new(&c->h2, cb, c);
        nghttp2_session_callbacks_del(cb);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (rc != 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            if (rc == 0)
                nghttp2_session_del(c->h2);
            free(c);
            close(fd);
            continue;
        }
        c->s = s;
        c->fd = fd;
        c->next = s->conns;
        s->conns = c;
        s->n_conns++;
        nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS}};
        nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 1);
        if (conn_flush(c) < 0)
            conn_free(c);
    }
}

struct kube_grpc_server *kube_grpc_server_new(const struct kube_grpc_method *methods, size_t n,
                                              void *ctx, size_t msg_max)
{
    struct kube_grpc_server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->methods = methods;
    s->n_methods = n;
    s->ctx = ctx;
    s->msg_max = msg_max;
    s->lfd = -1;
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epfd < 0) {
        free(s);
        return NULL;
    }
    return s;
}

int kube_grpc_server_listen(struct kube_grpc_server *s, const char *path, char *err, size_t errlen)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path)
        return kube_fail(err, errlen, -ENAMETOOLONG, "socket path %s is longer than %zu bytes",
                         path, sizeof a.sun_path - 1);
    memcpy(a.sun_path, path, strlen(path) + 1);
    if (s->lfd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->lfd, NULL);
        close(s->lfd);
        s->lfd = -1;
    }
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return kube_fail(err, errlen, -errno, "cannot make a socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 16) < 0) {
        int e = errno;
        close(fd);
        return kube_fail(err, errlen, -e, "cannot listen on %s: %s", path, strerror(e));
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
        int e = errno;
        close(fd);
        return kube_fail(err, errlen, -e, "cannot watch %s: %s", path, strerror(e));
    }
    s->lfd = fd;
    return 0;
}

int kube_grpc_server_fd(const struct kube_grpc_server *s)
{
    return s->epfd;
}

void kube_grpc_server_step(struct kube_grpc_server *s)
{
    struct epoll_event ev[MAX_CONNS + 1];
    int n = epoll_wait(s->epfd, ev, MAX_CONNS + 1, 0);
    for (int i = 0; i < n; i++) {
        struct conn *c = ev[i].data.ptr;
        if (!c) {
            conn_accept(s);
            continue;
        }
        int gone = 0;
        if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
            gone = conn_read(c) < 0;
        if (gone || conn_flush(c) < 0)
            conn_free(c);
    }
}

int kube_grpc_server_push(struct kube_grpc_server *s, const char *path, const ProtobufCMessage *m)
{
    int sent = 0;
    for (struct conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        for (struct call *k = c->calls; k; k = k->next) {
            if (!k->streaming || !k->m || strcmp(k->m->path, path) != 0)
                continue;
            /* a watcher that reads nothing gets reset, not an ever longer queue */
            if (buf_pending(&k->resp) > 2 * s->msg_max) {
                nghttp2_submit_rst_stream(c->h2, NGHTTP2_FLAG_NONE, k->id, NGHTTP2_CANCEL);
                continue;
            }
            if (buf_add_message(&k->resp, m) == 0) {
                nghttp2_session_resume_data(c->h2, k->id);
                sent++;
            }
        }
        if (conn_flush(c) < 0)
            conn_free(c);
    }
    return sent;
}

int kube_grpc_server_streams(const struct kube_grpc_server *s, const char *path)
{
    int n = 0;
    for (const struct conn *c = s->conns; c; c = c->next)
        for (const struct call *k = c->calls; k; k = k->next)
            n += k->streaming && k->m && strcmp(k->m->path, path) == 0;
    return n;
}

void kube_grpc_server_free(struct kube_grpc_server *s)
{
    if (!s)
        return;
    for (struct conn *c = s->conns, *next; c; c = next) {
        next = c->next;
        conn_free(c);
    }
    if (s->lfd >= 0)
        close(s->lfd);
    close(s->epfd);
    free(s);
}

/* --- client ------------------------------------------------------------------------------ */

struct ccall {
    struct buf req;
    int32_t id;
    int closed;
    uint32_t close_code;
    int http_status, grpc_status, grpc_type;
    char grpc_message[256];
    struct buf body;
    size_t max;
    int too_big;
};

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static ssize_t request_read(nghttp2_session *h2, int32_t id, uint8_t *out, size_t len,
                            uint32_t *flags, nghttp2_data_source *src, void *user)
{
    struct ccall *k = src->ptr;
    size_t n = buf_pending(&k->req) < len ? buf_pending(&k->req) : len;
    memcpy(out, k->req.p + k->req.off, n);
    k->req.off += n;
    if (!buf_pending(&k->req))
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int c_on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                       size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                       void *user)
{
    struct ccall *k = user;
    if (f->hd.stream_id != k->id)
        return 0;
    char v[16];
    size_t n = valuelen < sizeof v - 1 ? valuelen : sizeof v - 1;
    memcpy(v, value, n);
    v[n] = '\0';
    if (header_is(name, namelen, ":status"))
        k->http_status = atoi(v);
    else if (header_is(name, namelen, "grpc-status"))
        k->grpc_status = atoi(v);
    else if (header_is(name, namelen, "grpc-message"))
        percent_decode(k->grpc_message, sizeof k->grpc_message, value, valuelen);
    else if (header_is(name, namelen, "content-type"))
        k->grpc_type = valuelen >= 16 && memcmp(value, "application/grpc", 16) == 0;
    return 0;
}

static int c_on_data(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data,
                     size_t len, void *user)
{
    struct ccall *k = user;
    if (id != k->id || k->too_big)
        return 0;
    if (k->body.len + len > k->max + PREFIX_LEN || buf_add(&k->body, data, len) < 0)
        k->too_big = 1;
    return 0;
}

static int c_on_close(nghttp2_session *h2, int32_t id, uint32_t code, void *user)
{
    struct ccall *k = user;
    if (id == k->id) {
        k->closed = 1;
        k->close_code = code;
    }
    return 0;
}

static int unix_connect(const char *path, long long deadline, char *err, size_t errlen)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (!*path || strlen(path) >= sizeof a.sun_path)
        return kube_fail(err, errlen, -ENAMETOOLONG, "bad socket path '%s'", path);
    memcpy(a.sun_path, path, strlen(path) + 1);
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return kube_fail(err, errlen, -errno, "cannot make a socket: %s", strerror(errno));
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            return fd;
        int e = errno;
        close(fd);
        if (e == EAGAIN && now_ms() < deadline) { /* the listener's backlog is full */
            usleep(10000);
            continue;
        }
        if (e == EAGAIN)
            return kube_fail(err, errlen, -ETIMEDOUT, "%s does not accept connections in time",
                             path);
        if (e == ENOENT)
            return kube_fail(err, errlen, -ENOENT, "no socket at %s", path);
        if (e == ECONNREFUSED)
            return kube_fail(err, errlen, -ECONNREFUSED, "nobody listens on %s", path);
        return kube_fail(err, errlen, -e, "cannot connect to %s: %s", path, strerror(e));
    }
}

/* Runs the HTTP/2 exchange of K on FD until its stream closes. Returns 0 or a negative errno. */
static int client_run(nghttp2_session *h2, int fd, struct ccall *k, long long deadline,
                      const char *path, char *err, size_t errlen)
{
    struct buf out = {0};
    int rc = 0;
    while (!k->closed && !k->too_big) {
        const uint8_t *data;
        ssize_t n;
        while (!buf_pending(&out) && (n = nghttp2_session_mem_send(h2, &data)) > 0)
            if (buf_add(&out, data, (size_t)n) < 0) {
                rc = kube_fail(err, errlen, -ENOMEM, "out of memory");
                goto out;
            }
        long long left = deadline - now_ms();
        if (left <= 0) {
            rc = kube_fail(err, errlen, -ETIMEDOUT, "no reply from %s in time", path);
            goto out;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN | (buf_pending(&out) ? POLLOUT : 0)};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = kube_fail(err, errlen, -errno, "poll: %s", strerror(errno));
            goto out;
        }
        if (p.revents & POLLOUT) {
            ssize_t w = send(fd, out.p + out.off, buf_pending(&out), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && errno != EAGAIN && errno != EINTR) {
                rc = kube_fail(err, errlen, -EPROTO, "%s closed the connection: %s", path,
                               strerror(errno));
                goto out;
            }
            if (w > 0)
                out.off += (size_t)w;
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            uint8_t b[IO_CHUNK];
            ssize_t got = recv(fd, b, sizeof b, MSG_DONTWAIT);
            if (got < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            if (got <= 0) {
                rc = kube_fail(err, errlen, -EPROTO,
                               "%s closed the connection before its reply ended", path);
                goto out;
            }
            if (nghttp2_session_mem_recv(h2, b, (size_t)got) < 0) {
                rc = kube_fail(err, errlen, -EPROTO, "%s does not speak HTTP/2", path);
                goto out;
            }
        }
    }
out:
    buf_free(&out);
    return rc;
}

int kube_grpc_call(const char *socket_path, const char *method_path, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *reply_desc, size_t reply_max, int timeout_ms,
                   ProtobufCMessage **reply, int *status, char *err, size_t errlen)
{
    *reply = NULL;
    if (status)
        *status = -1;
    long long deadline = now_ms() + timeout_ms;
    int fd = unix_connect(socket_path, deadline, err, errlen);
    if (fd < 0)
        return fd;
    struct ccall k = {.grpc_status = -1, .max = reply_max};
    nghttp2_session_callbacks *cb = NULL;
    nghttp2_session *h2 = NULL;
    int rc = 0;
    if (buf_add_message(&k.req, req) < 0 || nghttp2_session_callbacks_new(&cb) != 0) {
        rc = kube_fail(err, errlen, -ENOMEM, "out of memory");
        goto out;
    }
    nghttp2_session_callbacks_set_on_header_callback(cb, c_on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, c_on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, c_on_close);
    if (nghttp2_session_client_new(&h2, cb, &k) != 0) {
        rc = kube_fail(err, errlen, -ENOMEM, "out of memory");
        goto out;
    }
    nghttp2_submit_settings(h2, NGHTTP2_FLAG_NONE, NULL, 0);
    char tmo[24];
    /* four fifths of ours: a server that keeps it says DEADLINE_EXCEEDED before we give up */
    snprintf(tmo, sizeof tmo, "%dm", timeout_ms > 5 ? timeout_ms * 4 / 5 : 1);
    nghttp2_nv h[] = {NV(":method", "POST"),
                      NV(":scheme", "http"),
                      NV(":path", method_path),
                      NV(":authority", "localhost"),
                      NV("content-type", "application/grpc"),
                      NV("te", "trailers"),
                      NV("grpc-timeout", tmo),
                      NV("user-agent", "pos-grpc/1")};
    nghttp2_data_provider prd = {.source.ptr = &k, .read_callback = request_read};
    k.id = nghttp2_submit_request(h2, NULL, h, sizeof h / sizeof h[0], &prd, NULL);
    if (k.id < 0) {
        rc = kube_fail(err, errlen, -EPROTO, "cannot make the request: %s", nghttp2_strerror(k.id));
        goto out;
    }
    if ((rc = client_run(h2, fd, &k, deadline, socket_path, err, errlen)) < 0)
        goto out;
    if (k.too_big) {
        rc = kube_fail(err, errlen, -EMSGSIZE, "the reply from %s is over %zu bytes", socket_path,
                       reply_max);
        goto out;
    }
    if (k.grpc_status < 0) {
        rc = kube_fail(err, errlen, -EPROTO,
                       "no gRPC status from %s (HTTP status %d, stream code %u)", socket_path,
                       k.http_status, k.close_code);
        goto out;
    }
    if (status)
        *status = k.grpc_status;
    if (k.grpc_status == KUBE_GRPC_DEADLINE_EXCEEDED) { /* the server kept our grpc-timeout */
        rc = kube_fail(err, errlen, -ETIMEDOUT, "no reply from %s in time (%s: %s)", socket_path,
                       method_path, k.grpc_message[0] ? k.grpc_message : "deadline exceeded");
        goto out;
    }
    if (k.grpc_status != KUBE_GRPC_OK) {
        rc = kube_fail(err, errlen, -EPROTO, "%s answered %s with gRPC status %d: %s", socket_path,
                       method_path, k.grpc_status,
                       k.grpc_message[0] ? k.grpc_message : "(no message)");
        goto out;
    }
    const uint8_t *msg = NULL;
    size_t len = 0;
    char why[200];
    if (one_message(k.body.p, k.body.len, &msg, &len, why, sizeof why) != 0) {
        rc = kube_fail(err, errlen, -EPROTO, "bad reply from %s: %s", socket_path, why);
        goto out;
    }
    *reply = protobuf_c_message_unpack(reply_desc, NULL, len, msg);
    if (!*reply)
        rc = kube_fail(err, errlen, -EPROTO, "the reply from %s is not a valid %s", socket_path,
                       reply_desc->name);
out:
    if (h2)
        nghttp2_session_del(h2);
    if (cb)
        nghttp2_session_callbacks_del(cb);
    buf_free(&k.req);
    buf_free(&k.body);
    close(fd);
    return rc;
}
