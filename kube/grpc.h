/* gRPC over HTTP/2 on unix sockets, as much of it as the kubelet's APIs need: a server of unary
 * and server-streaming methods (the device plugin) and a blocking unary client with a deadline
 * (registration, pod resources). Messages are protobuf-c's; framing is nghttp2's. */
#ifndef POS_KUBE_GRPC_H
#define POS_KUBE_GRPC_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

/* gRPC's status codes (grpc/doc/statuscodes.md), those used here. */
enum kube_grpc_status {
    KUBE_GRPC_OK = 0,
    KUBE_GRPC_CANCELLED = 1,
    KUBE_GRPC_UNKNOWN = 2,
    KUBE_GRPC_INVALID_ARGUMENT = 3,
    KUBE_GRPC_DEADLINE_EXCEEDED = 4,
    KUBE_GRPC_RESOURCE_EXHAUSTED = 8,
    KUBE_GRPC_FAILED_PRECONDITION = 9,
    KUBE_GRPC_UNIMPLEMENTED = 12,
    KUBE_GRPC_INTERNAL = 13,
    KUBE_GRPC_UNAVAILABLE = 14,
};

/* gRPC's default largest message (grpc-go's and grpc core's receive limit). */
#define KUBE_GRPC_MSG_MAX_DEFAULT (4u << 20)

/* --- server ------------------------------------------------------------------------------ */

/* What a handler answers: status OK and a packed reply (kube_grpc_reply_pack), or another
 * status and a one-line message for the caller (grpc-message). */
struct kube_grpc_reply {
    int status;
    char message[256];
    uint8_t *body; /* malloc'd, the server frees it */
    size_t len;
};

/* Packs M into REP (status OK). Returns 0, or -ENOMEM (REP then says INTERNAL). */
int kube_grpc_reply_pack(struct kube_grpc_reply *rep, const ProtobufCMessage *m);
/* Sets REP to STATUS with the message FMT. */
void kube_grpc_reply_error(struct kube_grpc_reply *rep, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One method of the table a server serves. */
struct kube_grpc_method {
    const char *path;                          /* "/v1beta1.DevicePlugin/Allocate" */
    const ProtobufCMessageDescriptor *request; /* the request is unpacked with this */
    /* Server-streaming: the handler's reply is the first message, the stream stays open and
     * kube_grpc_server_push sends the next ones, until the client goes. */
    int streaming;
    void (*handle)(void *ctx, const ProtobufCMessage *req, struct kube_grpc_reply *rep);
};

struct kube_grpc_server;

/* A server of METHODS[0..N) (the table must outlive it), calling handlers with CTX; requests
 * over MSG_MAX bytes are refused with RESOURCE_EXHAUSTED. Not listening yet. NULL when out of
 * memory. Single-threaded: every call below from one thread. */
struct kube_grpc_server *kube_grpc_server_new(const struct kube_grpc_method *methods, size_t n,
                                              void *ctx, size_t msg_max);
/* Listens on the unix socket PATH (a stale socket file there is removed first), closing the
 * listener it had, if any; connections already accepted stay. Returns 0 or a negative errno,
 * with one line in ERR. */
int kube_grpc_server_listen(struct kube_grpc_server *s, const char *path, char *err,
                            size_t errlen);
/* One descriptor that is readable whenever the server has work (an epoll set of its listener
 * and connections): poll it beside the caller's own, then call kube_grpc_server_step. */
int kube_grpc_server_fd(const struct kube_grpc_server *s);
/* Does what is ready: accepts, reads, answers, writes, closes. Never blocks. */
void kube_grpc_server_step(struct kube_grpc_server *s);
/* Sends M to every open stream of the streaming method PATH. Returns how many. */
int kube_grpc_server_push(struct kube_grpc_server *s, const char *path, const ProtobufCMessage *m);
/* How many streams of PATH are open. */
int kube_grpc_server_streams(const struct kube_grpc_server *s, const char *path);
/* Closes the listener and every connection (no socket file is removed) and frees S. */
void kube_grpc_server_free(struct kube_grpc_server *s);

/* --- client ------------------------------------------------------------------------------ */

/* One unary call of METHOD_PATH with REQ on the unix socket SOCKET_PATH, all of it (connect,
 * request, reply) within TIMEOUT_MS. A reply over REPLY_MAX bytes is refused. On success
 * *REPLY holds the reply unpacked with REPLY_DESC (free it with protobuf_c_message_free_unpacked)
 * and 0 is returned. Else a negative errno and one line in ERR: -ENOENT (no socket),
 * -ECONNREFUSED (nobody listens), -ETIMEDOUT (no reply in time, or the server's
 * DEADLINE_EXCEEDED: the request carries grpc-timeout), -EMSGSIZE (reply too large), -EPROTO (not a valid
 * gRPC reply, a reply that does not unpack, or a status other than OK: then in *STATUS, which
 * may be NULL, else -1 there). */
int kube_grpc_call(const char *socket_path, const char *method_path, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *reply_desc, size_t reply_max, int timeout_ms,
                   ProtobufCMessage **reply, int *status, char *err, size_t errlen);

#endif
