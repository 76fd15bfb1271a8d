/* Tests posd's decoding of what peers send: the message decoder (sched/wire.c), each verdict
 * from one byte off a good message, and the NAMES parser (posd_names_message): ids in order,
 * a name under two ids refused within a message and across messages, a refused message
 * leaving the known names as they were, and the protocol's cap on ids. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sched/names.h"
#include "sched/wire.h"
#include "tests/engine_outside.h"
#include "tests/cunit_main.h"

static size_t msg(uint8_t *buf, int type, const void *body, size_t len)
{
    struct pos_msg_hdr h = {POS_PROTO_MAGIC, POS_PROTO_VERSION, (uint16_t)type, (uint32_t)len, 0};
    memcpy(buf, &h, sizeof h);
    if (len) /* BODY may be NULL for none (UBSan: memcpy's arguments are never null) */
        memcpy(buf + sizeof h, body, len);
    return sizeof h + len;
}

static void test_decoder_verdicts(void)
{
    uint8_t buf[POS_REQ_MAX + 16] = {0};
    struct posd_msg m;
    struct pos_hello hello = {.record_version = 7, .shm_version = 9};
    size_t n = msg(buf, POS_MSG_HELLO, &hello, sizeof hello);
    CU_ASSERT_EQUAL(posd_msg_decode(buf, n, &m), POSD_MSG_OK);
    CU_ASSERT_EQUAL(m.hello.record_version, 7);
    CU_ASSERT_EQUAL(m.hello.shm_version, 9);
    CU_ASSERT_PTR_EQUAL(m.body, buf + sizeof m.hdr);
    CU_ASSERT_EQUAL(posd_msg_decode(buf, n - 1, &m), POSD_MSG_LENGTH);
    CU_ASSERT_EQUAL(posd_msg_decode(buf, sizeof m.hdr - 1, &m), POSD_MSG_SHORT);
    CU_ASSERT_EQUAL(posd_msg_decode(buf, POS_REQ_MAX + 1, &m), POSD_MSG_OVERSIZED);
    /* a HELLO one byte short, its header saying so */
    n = msg(buf, POS_MSG_HELLO, &hello, sizeof hello - 1);
    CU_ASSERT_EQUAL(posd_msg_decode(buf, n, &m), POSD_MSG_BAD_BODY);
    n = msg(buf, POS_MSG_STATS_REQ, NULL, 0);
    CU_ASSERT_EQUAL(posd_msg_decode(buf, n, &m), POSD_MSG_OK);
    buf[0] ^= 1; /* magic */
    CU_ASSERT_EQUAL(posd_msg_decode(buf, n, &m), POSD_MSG_FOREIGN);
    buf[0] ^= 1;
    buf[4] ^= 1; /* version */
    CU_ASSERT_EQUAL(posd_msg_decode(buf, n, &m), POSD_MSG_FOREIGN);
    CU_ASSERT_EQUAL(m.hdr.version, POS_PROTO_VERSION ^ 1); /* for the REJECT's text */
    buf[4] ^= 1;
    n = msg(buf, POS_MSG_KERNELS + 1, NULL, 0); /* past the last type */
    CU_ASSERT_EQUAL(posd_msg_decode(buf, n, &m), POSD_MSG_UNKNOWN);
    n = msg(buf, POS_MSG_WELCOME, NULL, 0); /* posd's own messages are not for it to take */
    CU_ASSERT_EQUAL(posd_msg_decode(buf, n, &m), POSD_MSG_UNKNOWN);
}

/* A NAMES body: ids FIRST.. named NAMES[0..COUNT-1]. */
static size_t names_body(uint8_t *buf, uint32_t first, const char *const *names, uint32_t count)
{
    struct pos_names h = {.first = first, .count = count};
    memcpy(buf, &h, sizeof h);
    size_t off = sizeof h;
    for (uint32_t i = 0; i < count; i++) {
        uint16_t len = (uint16_t)strlen(names[i]);
        memcpy(buf + off, &len, sizeof len);
        memcpy(buf + off + sizeof len, names[i], len);
        off += sizeof len + len;
    }
    return off;
}

static void test_names_in_order_and_once_each(void)
{
    struct posd_client c = {0};
    uint8_t b[512];
    const char *ab[] = {"conv1", "gemm"}, *cd[] = {"relu", "pool"}, *again[] = {"bias", "conv1"},
               *twice[] = {"x", "x"};
    CU_ASSERT_EQUAL(posd_names_message(&c, b, names_body(b, 1, ab, 2)), 0);
    CU_ASSERT_EQUAL(c.names.nkeys, 2);
    CU_ASSERT_NOT_EQUAL(c.names.keys[1], c.names.keys[2]);
    CU_ASSERT_EQUAL(posd_names_message(&c, b, names_body(b, 1, cd, 2)), -EPROTO); /* ids again */
    CU_ASSERT_EQUAL(posd_names_message(&c, b, names_body(b, 4, cd, 2)), -EPROTO); /* a gap */
    CU_ASSERT_EQUAL(posd_names_message(&c, b, names_body(b, 3, twice, 2)), -EPROTO);
    /* a name known under an earlier id, after a new one of the same message */
    CU_ASSERT_EQUAL(posd_names_message(&c, b, names_body(b, 3, again, 2)), -EPROTO);
    CU_ASSERT_EQUAL(c.names.nkeys, 2);
    /* what the refused messages brought is forgotten: "bias" and "x" are new names still */
    const char *bias[] = {"bias", "x"};
    CU_ASSERT_EQUAL(posd_names_message(&c, b, names_body(b, 3, bias, 2)), 0);
    CU_ASSERT_EQUAL(posd_names_message(&c, b, names_body(b, 5, cd, 2)), 0);
    CU_ASSERT_EQUAL(c.names.nkeys, 6);
    /* trailing bytes after the last name */
    size_t n = names_body(b, 7, (const char *[]){"tail"}, 1);
    CU_ASSERT_EQUAL(posd_names_message(&c, b, n + 1), -EPROTO);
    CU_ASSERT_EQUAL(posd_names_message(&c, b, n), 0);
    free(c.names.keys);
    free(c.names.key_set);
}

/* Ids up to POS_MAX_KERNEL_IDS, each name once, in messages of posd's largest size: every
 * one accepted (the set grows as they come), and one more id refused. */
static void test_names_up_to_the_cap(void)
{
    struct posd_client c = {0};
    static uint8_t b[POS_REQ_MAX];
    static char text[POS_MAX_KERNEL_IDS + 1][8];
    const char *names[1024];
    uint32_t id = 1;
    while (id <= POS_MAX_KERNEL_IDS) {
        uint32_t count = 0;
        while (count < 500 && id + count <= POS_MAX_KERNEL_IDS) {
            snprintf(text[id + count], sizeof text[0], "k%05u", id + count);
            names[count] = text[id + count];
            count++;
        }
        size_t len = names_body(b, id, names, count);
        CU_ASSERT_FATAL(len <= POS_REQ_MAX - sizeof(struct pos_msg_hdr));
        CU_ASSERT_EQUAL_FATAL(posd_names_message(&c, b, len), 0);
        id += count;
    }
    CU_ASSERT_EQUAL(c.names.nkeys, POS_MAX_KERNEL_IDS);
    const char *one[] = {"one_more"};
    CU_ASSERT_EQUAL(posd_names_message(&c, b, names_body(b, id, one, 1)), -EPROTO);
    /* and the first name is still known */
    const char *first[] = {"k00001"};
    struct posd_client d = {0};
    CU_ASSERT_EQUAL(posd_names_message(&d, b, names_body(b, 1, first, 1)), 0);
    CU_ASSERT_EQUAL(d.names.keys[1], c.names.keys[1]);
    free(c.names.keys);
    free(c.names.key_set);
    free(d.names.keys);
    free(d.names.key_set);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("wire", NULL, NULL);
    POS_ADD_TEST(s, test_decoder_verdicts);
    POS_ADD_TEST(s, test_names_in_order_and_once_each);
    POS_ADD_TEST(s, test_names_up_to_the_cap);
}
