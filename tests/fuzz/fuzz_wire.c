/* libFuzzer target: posd's wire-protocol decoder (sched/wire.c) and the NAMES body parser
 * (posd_names_message), on one connection's worth of messages. Input: messages, each a byte of
 * flags, a little-endian uint16 length and that many bytes; flag 0x1 writes a correct header
 * over the message's first bytes (magic, version, length), so the fuzzer reaches the bodies
 * without having to find them. Checks that a message decoded OK says what its bytes say and
 * that the kernel-key table never holds more ids than the protocol allows. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "sched/names.h"
#include "sched/wire.h"
#include "tests/engine_outside.h"

static struct posd_client C;

static void check_decoded(const uint8_t *msg, size_t len, const struct posd_msg *m, int v)
{
    if (v != POSD_MSG_OK)
        return;
    assert(len >= sizeof m->hdr && len <= POS_REQ_MAX);
    assert(m->body == msg + sizeof m->hdr && m->body_len == len - sizeof m->hdr);
    assert(m->hdr.magic == POS_PROTO_MAGIC && m->hdr.version == POS_PROTO_VERSION);
    if (m->hdr.type == POS_MSG_HELLO)
        assert(m->body_len == sizeof m->hello);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t msg[POS_REQ_MAX + 64];
    memset(&C, 0, sizeof C);
    C.registered = 1;
    size_t off = 0;
    while (off + 3 <= size) {
        uint8_t flags = data[off];
        size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
        off += 3;
        if (len > size - off)
            len = size - off;
        if (len > sizeof msg)
            len = sizeof msg;
        memcpy(msg, data + off, len);
        off += len;
        if ((flags & 1) && len >= sizeof(struct pos_msg_hdr)) {
            struct pos_msg_hdr h;
            memcpy(&h, msg, sizeof h);
            h.magic = POS_PROTO_MAGIC;
            h.version = POS_PROTO_VERSION;
            h.len = (uint32_t)(len - sizeof h);
            memcpy(msg, &h, sizeof h);
        }
        struct posd_msg m;
        int v = posd_msg_decode(msg, len, &m);
        check_decoded(msg, len, &m, v);
        if (v == POSD_MSG_OK && m.hdr.type == POS_MSG_NAMES) {
            uint32_t before = C.names.nkeys;
            int rc = posd_names_message(&C, m.body, m.body_len);
            assert(C.names.nkeys <= POS_MAX_KERNEL_IDS);
            assert(rc == 0 ? C.names.nkeys > before : C.names.nkeys == before);
        }
    }
    free(C.names.keys);
    free(C.names.key_set);
    return 0;
}
