/* Tests sched/weights.c: a file encoded and parsed again has the same features, actions, meta,
 * names and parameters (and encodes to the same bytes); a file is refused whole, with the
 * reason in one line, when it is cut short anywhere (each prefix says where), has another
 * magic or version, a network whose inputs are not the header's features, a non-finite
 * parameter, a checksum that does not match, a byte after the checksum, a repeated, empty or
 * unterminated name, meta too long or holding a NUL, or no networks. The refusals other than
 * the checksum's are made by editing a good file and computing its checksum again, so that the
 * check under test is the one that refuses. */
#include "tests/cunit_main.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "sched/weights.h"

static const char meta[] = "trainer=test\nsteps=10\n";

/* Two networks of 3 features and 2 actions: "actor" 3-4-2 (26 parameters), "q1" 3-2 (8). */
static void good_weights(struct pos_weights *w)
{
    memset(w, 0, sizeof *w);
    w->features = 3;
    w->actions = 2;
    memcpy(w->meta, meta, sizeof meta);
    const int actor[] = {3, 4, 2}, q1[] = {3, 2};
    struct nn_mlp m;
    uint64_t rng = 5;
    CU_ASSERT_EQUAL_FATAL(nn_mlp_init(&m, 2, actor), 0);
    nn_mlp_randomize(&m, &rng, 1.0f);
    CU_ASSERT_EQUAL_FATAL(pos_weights_add(w, "actor", &m), 0);
    nn_mlp_free(&m);
    CU_ASSERT_EQUAL_FATAL(nn_mlp_init(&m, 1, q1), 0);
    for (size_t k = 0; k < m.nparams; k++)
        m.p[k] = (float)k - 3.5f;
    CU_ASSERT_EQUAL_FATAL(pos_weights_add(w, "q1", &m), 0);
    nn_mlp_free(&m);
}

/* The encoding of good_weights in *BUF (malloc'd) of *LEN bytes. */
static void good_file(uint8_t **buf, size_t *len)
{
    struct pos_weights w;
    good_weights(&w);
    void *b;
    CU_ASSERT_EQUAL_FATAL(pos_weights_encode(&w, &b, len), 0);
    *buf = b;
    pos_weights_free(&w);
}

/* Offsets in good_file: the header's fields, the networks' names and parameters. */
#define OFF_VERSION  8
#define OFF_FEATURES 12
#define OFF_MLEN     20
#define OFF_META     24
#define OFF_NNETS    (OFF_META + sizeof meta - 1)
#define OFF_ACTOR    (OFF_NNETS + 4)              /* its name */
#define OFF_ACTOR_P  (OFF_ACTOR + 16 + 4 + 3 * 4) /* its parameters */
#define OFF_Q1       (OFF_ACTOR_P + 26 * 4)
#define OFF_Q1_P     (OFF_Q1 + 16 + 4 + 2 * 4)

static void put_u32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

/* The last 8 bytes of the LEN at BUF set to the FNV-1a 64 of those before them. */
static void fix_checksum(uint8_t *buf, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len - 8; i++) {
        h ^= buf[i];
        h *= 0x100000001b3ULL;
    }
    for (int i = 0; i < 8; i++)
        buf[len - 8 + i] = (uint8_t)(h >> (8 * i));
}

/* The LEN bytes at BUF are refused with WANT in the message, and leave no network behind. */
static void expect_refused(const uint8_t *buf, size_t len, const char *want)
{
    struct pos_weights w;
    char err[256] = "";
    int rc = pos_weights_parse(buf, len, &w, err, sizeof err);
    CU_ASSERT_EQUAL(rc, -EINVAL);
    CU_ASSERT_EQUAL(w.nnets, 0);
    CU_ASSERT_PTR_NULL(w.nets[0].net.p);
    CU_ASSERT_PTR_NULL(strchr(err, '\n'));
    if (!strstr(err, want)) {
        CU_FAIL("refused for another reason");
        fprintf(stderr, "\n  length %zu: wanted \"%s\", got \"%s\"", len, want, err);
    }
}

static void test_round_trip_keeps_params_meta_and_names(void)
{
    struct pos_weights w, r;
    good_weights(&w);
    void *buf;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(pos_weights_encode(&w, &buf, &len), 0);
    CU_ASSERT_EQUAL(len, OFF_Q1_P + 8 * 4 + 8);
    char err[256] = "";
    CU_ASSERT_EQUAL_FATAL(pos_weights_parse(buf, len, &r, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(err, "");
    CU_ASSERT_EQUAL(r.features, 3);
    CU_ASSERT_EQUAL(r.actions, 2);
    CU_ASSERT_STRING_EQUAL(r.meta, meta);
    CU_ASSERT_EQUAL_FATAL(r.nnets, 2);
    for (size_t k = 0; k < 2; k++) {
        const struct nn_mlp *a = &w.nets[k].net, *b = &r.nets[k].net;
        CU_ASSERT_STRING_EQUAL(r.nets[k].name, w.nets[k].name);
        CU_ASSERT_EQUAL(b->nlayers, a->nlayers);
        CU_ASSERT_EQUAL(memcmp(b->dims, a->dims, sizeof a->dims), 0);
        CU_ASSERT_EQUAL_FATAL(b->nparams, a->nparams);
        CU_ASSERT_EQUAL(memcmp(b->p, a->p, a->nparams * sizeof *a->p), 0);
    }
    CU_ASSERT_PTR_EQUAL(pos_weights_net(&r, "q1"), &r.nets[1].net);
    CU_ASSERT_PTR_EQUAL(pos_weights_net(&r, "actor"), &r.nets[0].net);
    CU_ASSERT_PTR_NULL(pos_weights_net(&r, "q2"));
    CU_ASSERT_PTR_NULL(pos_weights_net(&r, "act"));

    void *again;
    size_t len2;
    CU_ASSERT_EQUAL_FATAL(pos_weights_encode(&r, &again, &len2), 0);
    CU_ASSERT_EQUAL(len2, len);
    CU_ASSERT_EQUAL(memcmp(again, buf, len), 0);
    free(again);
    free(buf);
    pos_weights_free(&w);
    pos_weights_free(&r);
    CU_ASSERT_EQUAL(r.nnets, 0);
}

static void test_the_encoding_is_little_endian_and_checksummed(void)
{
    uint8_t *buf;
    size_t len;
    good_file(&buf, &len);
    CU_ASSERT_EQUAL(memcmp(buf, "POSWGT1\n", 8), 0);
    const uint8_t version[4] = {1, 0, 0, 0}, mlen[4] = {sizeof meta - 1, 0, 0, 0};
    CU_ASSERT_EQUAL(memcmp(buf + OFF_VERSION, version, 4), 0);
    CU_ASSERT_EQUAL(memcmp(buf + OFF_MLEN, mlen, 4), 0);
    CU_ASSERT_EQUAL(memcmp(buf + OFF_Q1, "q1\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16), 0);
    /* q1's parameter 1 is -2.5f: 0xc0200000 */
    const uint8_t m25[4] = {0x00, 0x00, 0x20, 0xc0};
    CU_ASSERT_EQUAL(memcmp(buf + OFF_Q1_P + 4, m25, 4), 0);
    uint8_t *copy = malloc(len);
    memcpy(copy, buf, len);
    fix_checksum(copy, len);
    CU_ASSERT_EQUAL(memcmp(copy, buf, len), 0);
    free(copy);
    free(buf);
}

static void test_every_truncation_is_refused(void)
{
    uint8_t *buf;
    size_t len;
    good_file(&buf, &len);
    for (size_t n = 0; n < len; n++)
        expect_refused(buf, n, "truncated");
    /* and each says where */
    expect_refused(buf, OFF_MLEN + 2, "truncated in the header");
    expect_refused(buf, OFF_META + 3, "truncated in the meta text");
    expect_refused(buf, OFF_NNETS + 1, "truncated in the header");
    expect_refused(buf, OFF_ACTOR + 4, "truncated in network 1");
    expect_refused(buf, OFF_ACTOR_P + 9, "truncated in network 1 'actor'");
    expect_refused(buf, OFF_Q1_P, "truncated in network 2 'q1'");
    expect_refused(buf, len - 1, "truncated in the checksum");
    free(buf);
}

static void test_wrong_magic_is_refused(void)
{
    uint8_t *buf;
    size_t len;
    good_file(&buf, &len);
    buf[6] = '2';
    fix_checksum(buf, len);
    expect_refused(buf, len, "magic");
    free(buf);
}

static void test_another_version_is_refused(void)
{
    uint8_t *buf;
    size_t len;
    good_file(&buf, &len);
    put_u32(buf + OFF_VERSION, 2);
    fix_checksum(buf, len);
    expect_refused(buf, len, "version 2, this build reads 1");
    free(buf);
}

static void test_inputs_other_than_the_features_are_refused(void)
{
    uint8_t *buf;
    size_t len;
    good_file(&buf, &len);
    put_u32(buf + OFF_FEATURES, 4);
    fix_checksum(buf, len);
    expect_refused(buf, len, "network 'actor': 3 inputs, the header says 4 features");
    free(buf);
    good_file(&buf, &len);
    put_u32(buf + OFF_FEATURES + 4, 3); /* actions */
    fix_checksum(buf, len);
    expect_refused(buf, len, "network 'actor': 2 outputs, the header says 3 actions");
    free(buf);
}

static void test_shapes_nn_does_not_allow_are_refused(void)
{
    uint8_t *buf;
    size_t len;
    good_file(&buf, &len);
    put_u32(buf + OFF_ACTOR + 16, NN_MAX_LAYERS + 1);
    fix_checksum(buf, len);
    expect_refused(buf, len, "layers");
    free(buf);
    good_file(&buf, &len);
    put_u32(buf + OFF_ACTOR + 16 + 4 + 4, 0); /* the hidden width */
    fix_checksum(buf, len);
    expect_refused(buf, len, "layer width 0");
    free(buf);
}

static void test_a_non_finite_parameter_is_refused(void)
{
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 3; i++) {
        uint8_t *buf;
        size_t len;
        good_file(&buf, &len);
        uint32_t bits;
        memcpy(&bits, &bad[i], sizeof bits);
        put_u32(buf + OFF_ACTOR_P + 17 * 4, bits);
        fix_checksum(buf, len);
        expect_refused(buf, len, "network 'actor': parameter 17 is not finite");
        free(buf);
    }
}

static void test_a_checksum_mismatch_is_refused(void)
{
    uint8_t *buf;
    size_t len;
    good_file(&buf, &len);
    buf[OFF_ACTOR_P + 5 * 4] ^= 0x01; /* the lowest mantissa bit: still finite */
    expect_refused(buf, len, "checksum mismatch");
    buf[OFF_ACTOR_P + 5 * 4] ^= 0x01;
    buf[len - 3] ^= 0x40; /* the checksum itself */
    expect_refused(buf, len, "checksum mismatch");
    free(buf);
}

static void test_a_byte_after_the_checksum_is_refused(void)
{
    uint8_t *buf;
    size_t len;
    good_file(&buf, &len);
    uint8_t *more = malloc(len + 1);
    memcpy(more, buf, len);
    more[len] = 0;
    expect_refused(more, len + 1, "1 byte after the checksum");
    free(more);
    free(buf);
}

static void test_bad_names_are_refused(void)
{
    uint8_t *buf;
    size_t len;
    good_file(&buf, &len);
    memcpy(buf + OFF_Q1, "actor", 6); /* "actor\0" over "q1\0\0\0\0" */
    fix_checksum(buf, len);
    expect_refused(buf, len, "network 2: name 'actor' repeats network 1");
    free(buf);

    good_file(&buf, &len);
    memset(buf + OFF_Q1, 'q', 16);
    fix_checksum(buf, len);
    expect_refused(buf, len, "network 2: name not NUL-terminated");
    free(buf);

    good_file(&buf, &len);
    buf[OFF_ACTOR] = '\0';
    fix_checksum(buf, len);
    expect_refused(buf, len, "network 1: empty name");
    free(buf);

    good_file(&buf, &len);
    buf[OFF_Q1 + 9] = 'x'; /* after the terminator */
    fix_checksum(buf, len);
    expect_refused(buf, len, "name not NUL-padded");
    free(buf);
}

static void test_bad_meta_is_refused(void)
{
    uint8_t *buf;
    size_t len;
    good_file(&buf, &len);
    buf[OFF_META + 4] = '\0';
    fix_checksum(buf, len);
    expect_refused(buf, len, "NUL");
    free(buf);
    good_file(&buf, &len);
    put_u32(buf + OFF_MLEN, POS_WEIGHTS_META_MAX);
    fix_checksum(buf, len);
    expect_refused(buf, len, "meta of 1024 bytes, at most 1023");
    free(buf);
}

static void test_zero_or_too_many_networks_are_refused(void)
{
    /* the header of good_file, no networks, a checksum */
    uint8_t *buf;
    size_t len;
    good_file(&buf, &len);
    size_t n = OFF_NNETS + 4 + 8;
    put_u32(buf + OFF_NNETS, 0);
    fix_checksum(buf, n);
    expect_refused(buf, n, "0 networks");
    put_u32(buf + OFF_NNETS, POS_WEIGHTS_MAX_NETS + 1);
    fix_checksum(buf, n);
    expect_refused(buf, n, "9 networks");
    free(buf);
}

static void test_encode_and_add_refuse_what_no_file_holds(void)
{
    struct pos_weights w;
    good_weights(&w);
    const struct nn_mlp *actor = pos_weights_net(&w, "actor");
    CU_ASSERT_EQUAL(pos_weights_add(&w, "actor", actor), -EINVAL);            /* repeated */
    CU_ASSERT_EQUAL(pos_weights_add(&w, "0123456789abcdef", actor), -EINVAL); /* 16 bytes */
    CU_ASSERT_EQUAL(pos_weights_add(&w, "", actor), -EINVAL);
    CU_ASSERT_EQUAL(pos_weights_add(&w, "0123456789abcde", actor), 0); /* 15 bytes */
    CU_ASSERT_EQUAL(w.nnets, 3);
    while (w.nnets < POS_WEIGHTS_MAX_NETS) {
        char name[8];
        snprintf(name, sizeof name, "n%zu", w.nnets);
        CU_ASSERT_EQUAL_FATAL(pos_weights_add(&w, name, actor), 0);
    }
    CU_ASSERT_EQUAL(pos_weights_add(&w, "full", actor), -EINVAL);

    void *buf = (void *)1;
    size_t len = 1;
    memset(w.meta, 'm', sizeof w.meta); /* no terminator: too long */
    CU_ASSERT_EQUAL(pos_weights_encode(&w, &buf, &len), -EINVAL);
    CU_ASSERT_PTR_NULL(buf);
    w.meta[POS_WEIGHTS_META_MAX - 1] = '\0'; /* 1023 bytes: the most */
    CU_ASSERT_EQUAL_FATAL(pos_weights_encode(&w, &buf, &len), 0);
    struct pos_weights r;
    char err[256];
    CU_ASSERT_EQUAL(pos_weights_parse(buf, len, &r, err, sizeof err), 0);
    CU_ASSERT_EQUAL(strlen(r.meta), POS_WEIGHTS_META_MAX - 1);
    CU_ASSERT_EQUAL(r.nnets, POS_WEIGHTS_MAX_NETS);
    pos_weights_free(&r);
    free(buf);

    w.features = 4; /* the networks' inputs are 3 */
    CU_ASSERT_EQUAL(pos_weights_encode(&w, &buf, &len), -EINVAL);
    w.features = 3;
    w.nets[1].net.p[0] = NAN;
    CU_ASSERT_EQUAL(pos_weights_encode(&w, &buf, &len), -EINVAL);
    pos_weights_free(&w);
    CU_ASSERT_EQUAL(pos_weights_encode(&w, &buf, &len), -EINVAL); /* no networks */
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("weights", NULL, NULL);
    POS_ADD_TEST(s, test_round_trip_keeps_params_meta_and_names);
    POS_ADD_TEST(s, test_the_encoding_is_little_endian_and_checksummed);
    POS_ADD_TEST(s, test_every_truncation_is_refused);
    POS_ADD_TEST(s, test_wrong_magic_is_refused);
    POS_ADD_TEST(s, test_another_version_is_refused);
    POS_ADD_TEST(s, test_inputs_other_than_the_features_are_refused);
    POS_ADD_TEST(s, test_shapes_nn_does_not_allow_are_refused);
    POS_ADD_TEST(s, test_a_non_finite_parameter_is_refused);
    POS_ADD_TEST(s, test_a_checksum_mismatch_is_refused);
    POS_ADD_TEST(s, test_a_byte_after_the_checksum_is_refused);
    POS_ADD_TEST(s, test_bad_names_are_refused);
    POS_ADD_TEST(s, test_bad_meta_is_refused);
    POS_ADD_TEST(s, test_zero_or_too_many_networks_are_refused);
    POS_ADD_TEST(s, test_encode_and_add_refuse_what_no_file_holds);
}
