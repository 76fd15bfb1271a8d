/* A peer's message to posd, decoded and checked against the protocol: pure (no I/O, no
 * state), so that every byte a peer can send passes through one function the fuzzer runs
 * (tests/fuzz/fuzz_wire.c). What the message means for the connection (a second HELLO, NAMES
 * before HELLO) is for handlers.c to judge. */
#include <string.h>

#include "sched/wire.h"

int posd_msg_decode(const uint8_t *buf, size_t len, struct posd_msg *m)
{
    memset(m, 0, sizeof *m);
    if (len > POS_REQ_MAX)
        return POSD_MSG_OVERSIZED;
    if (len < sizeof m->hdr)
        return POSD_MSG_SHORT;
    memcpy(&m->hdr, buf, sizeof m->hdr);
    if (m->hdr.magic != POS_PROTO_MAGIC || m->hdr.version != POS_PROTO_VERSION)
        return POSD_MSG_FOREIGN;
    if (m->hdr.len != len - sizeof m->hdr)
        return POSD_MSG_LENGTH;
    m->body = buf + sizeof m->hdr;
    m->body_len = m->hdr.len;
    switch (m->hdr.type) {
    case POS_MSG_HELLO:
        if (m->body_len != sizeof m->hello)
            return POSD_MSG_BAD_BODY;
        memcpy(&m->hello, m->body, sizeof m->hello);
        return POSD_MSG_OK;
    case POS_MSG_NAMES:
    case POS_MSG_STATS_REQ:
    case POS_MSG_KERNELS_REQ:
    case POS_MSG_CONTROL: /* its body's size is posd_control's to check */
        return POSD_MSG_OK;
    default:
        return POSD_MSG_UNKNOWN;
    }
}
