/* A peer's message, decoded (wire.c), handed to its handler: a table indexed by message type,
 * one handler per type a peer may send. Each judges what the message means for the connection
 * (a second HELLO, NAMES before HELLO, CONTROL from a client) and calls down: registration
 * (clients.c), kernel names (names.c), the STATS and KERNELS replies, posctl's requests
 * (control.c). Called by the loop for every message received. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sched/clients.h"
#include "sched/control.h"
#include "sched/handlers.h"
#include "sched/names.h"
#include "sched/stats.h"
#include "sched/wire.h"

/* Each handler: 0, or a negative errno value to drop C (as posd_client_message). WHO names
 * the peer in log lines. */
typedef int (*msg_fn)(struct posd *d, struct posd_client *c, const struct posd_msg *m,
                      const char *who);

/* A tool's request: a peer that has not registered is a tool from now on, idle from now. */
static void tool_request(struct posd_client *c)
{
    if (!c->registered) {
        c->is_tool = 1;
        c->deadline = posd_now() + POSD_REGISTER_NS;
    }
}

static int on_hello(struct posd *d, struct posd_client *c, const struct posd_msg *m,
                    const char *who)
{
    if (c->registered || c->is_tool) {
        posd_log(POSD_LOG_WARN, "pid %d: bad HELLO: disconnecting", (int)c->ident.pid);
        return -EPROTO;
    }
    return posd_client_register(d, c, &m->hello);
}

static int on_names(struct posd *d, struct posd_client *c, const struct posd_msg *m,
                    const char *who)
{
    if (!c->registered || posd_names_message(c, m->body, m->body_len) < 0) {
        posd_log(POSD_LOG_WARN, "%s (pid %d): malformed kernel names: disconnecting", who,
                 (int)c->ident.pid);
        return -EPROTO;
    }
    return 0;
}

/* The fill of a tool's reply into BUF (CAP bytes): every user's rows when ALL, else UID's. */
typedef size_t (*reply_fn)(struct posd *d, void *buf, size_t cap, int all, uid_t uid);

/* A tool's request answered with the reply of TYPE that FILL writes (WHAT: its name in the
 * log). */
static int reply(struct posd *d, struct posd_client *c, int type, reply_fn fill, const char *what)
{
    static uint8_t buf[POS_MSG_MAX];
    tool_request(c);
    size_t len = fill(d, buf, sizeof buf - sizeof(struct pos_msg_hdr), posd_peer_privileged(d, c),
                      c->ident.uid);
    if (posd_client_send(c, type, buf, len) < 0)
        posd_log(POSD_LOG_DEBUG, "%s reply to a tool failed: %s", what, strerror(errno));
    return 0;
}

static int on_stats_req(struct posd *d, struct posd_client *c, const struct posd_msg *m,
                        const char *who)
{
    return reply(d, c, POS_MSG_STATS, posd_stats_clients, "stats");
}

static int on_kernels_req(struct posd *d, struct posd_client *c, const struct posd_msg *m,
                          const char *who)
{
    return reply(d, c, POS_MSG_KERNELS, posd_stats_kernels, "kernels");
}

static int on_control(struct posd *d, struct posd_client *c, const struct posd_msg *m,
                      const char *who)
{
    if (c->registered) {
        posd_log(POSD_LOG_WARN, "%s (pid %d): CONTROL from a client: disconnecting", who,
                 (int)c->ident.pid);
        return -EPROTO;
    }
    tool_request(c);
    return posd_control(d, c, m->body, m->body_len);
}

static const msg_fn handlers[] = {
    [POS_MSG_HELLO] = on_hello,
    [POS_MSG_NAMES] = on_names,
    [POS_MSG_STATS_REQ] = on_stats_req,
    [POS_MSG_KERNELS_REQ] = on_kernels_req,
    [POS_MSG_CONTROL] = on_control,
};

/* A message the decoder refused (VERDICT): logged, and the peer told why where it can read
 * it. Returns -EPROTO. */
static int undecoded(struct posd_client *c, int verdict, const struct posd_msg *m, size_t len,
                     const char *who)
{
    int pid = (int)c->ident.pid;
    char why[128];
    switch (verdict) {
    case POSD_MSG_OVERSIZED:
        posd_log(POSD_LOG_WARN, "%s (pid %d): oversized message (%zu bytes): disconnecting", who,
                 pid, len);
        break;
    case POSD_MSG_SHORT:
        posd_log(POSD_LOG_WARN, "%s (pid %d): short message: disconnecting", who, pid);
        break;
    case POSD_MSG_FOREIGN:
        posd_log(POSD_LOG_WARN,
                 "%s (pid %d): not pos protocol v%d (magic %#x version %u): "
                 "disconnecting",
                 who, pid, POS_PROTO_VERSION, m->hdr.magic, m->hdr.version);
        snprintf(why, sizeof why, "posd speaks protocol v%d; this peer sent v%u", POS_PROTO_VERSION,
                 m->hdr.version);
        posd_client_reject(c, why);
        break;
    case POSD_MSG_LENGTH:
        posd_log(POSD_LOG_WARN, "%s (pid %d): message length mismatch: disconnecting", who, pid);
        break;
    case POSD_MSG_BAD_BODY:
        posd_log(POSD_LOG_WARN, "pid %d: bad HELLO: disconnecting", pid);
        break;
    default:
        posd_log(POSD_LOG_WARN, "%s (pid %d): unknown message type %u: disconnecting", who, pid,
                 m->hdr.type);
        posd_client_reject(c, "unknown message type");
        break;
    }
    return -EPROTO;
}

int posd_client_message(struct posd *d, struct posd_client *c, size_t len)
{
    const char *who = c->registered ? c->ident.app : "peer";
    struct posd_msg m;
    int verdict = posd_msg_decode(c->rx, len, &m);
    if (verdict != POSD_MSG_OK)
        return undecoded(c, verdict, &m, len, who);
    msg_fn fn = m.hdr.type < sizeof handlers / sizeof handlers[0] ? handlers[m.hdr.type] : NULL;
    if (!fn) { /* a type the decoder takes but nothing here handles: a bug, not the peer's */
        posd_log(POSD_LOG_ERROR, "%s (pid %d): message type %u has no handler: disconnecting",
                 who, (int)c->ident.pid, m.hdr.type);
        return -ENOSYS;
    }
    return fn(d, c, &m, who);
}
