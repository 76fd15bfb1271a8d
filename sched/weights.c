/* The weights file of policy learned (sched/weights.h has the format): parsed from memory into
 * struct pos_weights, refused whole with one line saying what is wrong, and encoded back. Pure:
 * the adapters read and write the file. Every integer is read and written a byte at a time,
 * little-endian whatever the host; a float is its IEEE bits as a u32. */
#include "sched/fnv.h"
#include "sched/weights.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t magic[8] = {'P', 'O', 'S', 'W', 'G', 'T', '1', '\n'};

/* The length of NAME up to its first NUL within MAX bytes, MAX when there is none. */
static size_t name_len(const char *name, size_t max)
{
    size_t n = 0;
    while (n < max && name[n])
        n++;
    return n;
}

/* ---- parsing ------------------------------------------------------------------------------- */

struct reader {
    const uint8_t *p;
    size_t len, pos;
};

static int have(const struct reader *r, size_t n)
{
    return r->len - r->pos >= n;
}

static uint32_t u32_at(const uint8_t *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* The next u32 into *V, or 0 when fewer than 4 bytes are left. */
static int get_u32(struct reader *r, uint32_t *v)
{
    if (!have(r, 4))
        return 0;
    *v = u32_at(r->p + r->pos);
    r->pos += 4;
    return 1;
}

static uint64_t get_u64_at(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* Writes what is wrong into ERR (ERRLEN bytes; 0: not wanted); the value is RC. */
#define FAIL(rc, ...) (snprintf(err, errlen, __VA_ARGS__), (rc))

/* Network K (0-based; 1-based in messages) at R into W->nets[K]. */
static int parse_net(struct reader *r, struct pos_weights *w, size_t k, char *err, size_t errlen)
{
    struct pos_weights_net *n = &w->nets[k];
    size_t no = k + 1;
    if (!have(r, POS_WEIGHTS_NAME_MAX))
        return FAIL(-EINVAL, "truncated in network %zu", no);
    memcpy(n->name, r->p + r->pos, POS_WEIGHTS_NAME_MAX);
    r->pos += POS_WEIGHTS_NAME_MAX;
    size_t nl = name_len(n->name, POS_WEIGHTS_NAME_MAX);
    if (nl == POS_WEIGHTS_NAME_MAX) {
        n->name[0] = '\0';
        return FAIL(-EINVAL, "network %zu: name not NUL-terminated", no);
    }
    if (!nl)
        return FAIL(-EINVAL, "network %zu: empty name", no);
    for (size_t i = nl; i < POS_WEIGHTS_NAME_MAX; i++)
        if (n->name[i])
            return FAIL(-EINVAL, "network %zu '%s': name not NUL-padded", no, n->name);
    for (size_t j = 0; j < k; j++)
        if (!memcmp(w->nets[j].name, n->name, POS_WEIGHTS_NAME_MAX))
            return FAIL(-EINVAL, "network %zu: name '%s' repeats network %zu", no, n->name, j + 1);

    uint32_t layers;
    if (!get_u32(r, &layers))
        return FAIL(-EINVAL, "truncated in network %zu '%s'", no, n->name);
    if (layers < 1 || layers > NN_MAX_LAYERS)
        return FAIL(-EINVAL, "network '%s': %u layers, not 1..%d", n->name, layers, NN_MAX_LAYERS);
    int dims[NN_MAX_LAYERS + 1];
    for (uint32_t l = 0; l <= layers; l++) {
        uint32_t d;
        if (!get_u32(r, &d))
            return FAIL(-EINVAL, "truncated in network %zu '%s'", no, n->name);
        if (d < 1 || d > NN_MAX_DIM)
            return FAIL(-EINVAL, "network '%s': layer width %u, not 1..%d", n->name, d, NN_MAX_DIM);
        dims[l] = (int)d;
    }
    if ((uint32_t)dims[0] != w->features)
        return FAIL(-EINVAL, "network '%s': %d inputs, the header says %u features", n->name,
                    dims[0], w->features);
    if ((uint32_t)dims[layers] != w->actions)
        return FAIL(-EINVAL, "network '%s': %d outputs, the header says %u actions", n->name,
                    dims[layers], w->actions);
    size_t count = nn_mlp_count((int)layers, dims);
    if (!count) /* the bounds above are nn.h's, so this is not expected */
        return FAIL(-EINVAL, "network '%s': shape not allowed", n->name);
    if (!have(r, count * 4))
        return FAIL(-EINVAL, "truncated in network %zu '%s'", no, n->name);
    int rc = nn_mlp_init(&n->net, (int)layers, dims);
    if (rc < 0)
        return FAIL(rc, "network '%s': %s", n->name,
                    rc == -ENOMEM ? "out of memory" : "shape not allowed");
    for (size_t i = 0; i < count; i++) {
        uint32_t bits = u32_at(r->p + r->pos); /* have() above counted them */
        r->pos += 4;
        float f;
        memcpy(&f, &bits, sizeof f);
        if (!isfinite(f)) /* I, 0-based, is the parameter's index in nn.h's order */
            return FAIL(-EINVAL, "network '%s': parameter %zu is not finite", n->name, i);
        n->net.p[i] = f;
    }
    return 0;
}

static int parse(const uint8_t *buf, size_t len, struct pos_weights *w, char *err, size_t errlen)
{
    struct reader r = {buf, len, 0};
    if (!have(&r, sizeof magic))
        return FAIL(-EINVAL, "truncated in the header");
    if (memcmp(buf, magic, sizeof magic) != 0)
        return FAIL(-EINVAL, "not a weights file (wrong magic)");
    r.pos = sizeof magic;
    uint32_t version, mlen, nnets;
    if (!get_u32(&r, &version))
        return FAIL(-EINVAL, "truncated in the header");
    if (version != POS_WEIGHTS_VERSION)
        return FAIL(-EINVAL, "version %u, this build reads %d", version, POS_WEIGHTS_VERSION);
    if (!get_u32(&r, &w->features) || !get_u32(&r, &w->actions) || !get_u32(&r, &mlen))
        return FAIL(-EINVAL, "truncated in the header");
    if (mlen > POS_WEIGHTS_META_MAX - 1)
        return FAIL(-EINVAL, "meta of %u bytes, at most %d", mlen, POS_WEIGHTS_META_MAX - 1);
    if (!have(&r, mlen))
        return FAIL(-EINVAL, "truncated in the meta text");
    for (uint32_t i = 0; i < mlen; i++)
        if (!buf[r.pos + i])
            return FAIL(-EINVAL, "meta text has a NUL at byte %u", i);
    memcpy(w->meta, buf + r.pos, mlen);
    w->meta[mlen] = '\0';
    r.pos += mlen;
    if (!get_u32(&r, &nnets))
        return FAIL(-EINVAL, "truncated in the header");
    if (nnets < 1 || nnets > POS_WEIGHTS_MAX_NETS)
        return FAIL(-EINVAL, "%u networks, not 1..%d", nnets, POS_WEIGHTS_MAX_NETS);
    for (size_t k = 0; k < nnets; k++) {
        int rc = parse_net(&r, w, k, err, errlen);
        w->nnets = k + 1; /* what parse_net allocated is freed with the rest */
        if (rc < 0)
            return rc;
    }
    if (!have(&r, 8))
        return FAIL(-EINVAL, "truncated in the checksum");
    uint64_t want = get_u64_at(buf + r.pos), got = pos_fnv1a(buf, r.pos);
    r.pos += 8;
    if (r.pos != len)
        return FAIL(-EINVAL, "%zu byte%s after the checksum", len - r.pos,
                    len - r.pos == 1 ? "" : "s");
    if (want != got)
        return FAIL(-EINVAL, "checksum mismatch");
    return 0;
}

int pos_weights_parse(const void *buf, size_t len, struct pos_weights *w, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    if (!err)
        errlen = 0;
    if (errlen)
        err[0] = '\0';
    int rc = parse(buf, len, w, err, errlen);
    if (rc < 0)
        pos_weights_free(w);
    return rc;
}

/* ---- encoding ------------------------------------------------------------------------------ */

static uint8_t *put_u32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        *b++ = (uint8_t)(v >> (8 * i));
    return b;
}

/* Whether NAME is a network name a file may hold: 1..NAME_MAX - 1 bytes. */
static int name_ok(const char *name)
{
    size_t n = name_len(name, POS_WEIGHTS_NAME_MAX);
    return n > 0 && n < POS_WEIGHTS_NAME_MAX;
}

/* What pos_weights_parse would refuse in W is not written either: a shape, a name, meta, or
 * a network whose inputs and outputs are not W's features and actions, a repeated name, a
 * non-finite parameter. */
static int encodable(const struct pos_weights *w, size_t *size)
{
    size_t mlen = name_len(w->meta, POS_WEIGHTS_META_MAX);
    if (mlen == POS_WEIGHTS_META_MAX || w->nnets < 1 || w->nnets > POS_WEIGHTS_MAX_NETS)
        return -EINVAL;
    size_t n = sizeof magic + 5 * 4 + mlen + 8;
    for (size_t k = 0; k < w->nnets; k++) {
        const struct pos_weights_net *net = &w->nets[k];
        const struct nn_mlp *m = &net->net;
        if (!name_ok(net->name))
            return -EINVAL;
        for (size_t j = 0; j < k; j++)
            if (!memcmp(w->nets[j].name, net->name, strlen(net->name) + 1))
                return -EINVAL;
        size_t count = nn_mlp_count(m->nlayers, m->dims);
        if (!count || count != m->nparams || !m->p || (uint32_t)m->dims[0] != w->features ||
            (uint32_t)m->dims[m->nlayers] != w->actions)
            return -EINVAL;
        for (size_t i = 0; i < count; i++)
            if (!isfinite(m->p[i]))
                return -EINVAL;
        n += POS_WEIGHTS_NAME_MAX + 4 + 4 * ((size_t)m->nlayers + 1) + 4 * count;
    }
    *size = n;
    return 0;
}

int pos_weights_encode(const struct pos_weights *w, void **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    size_t size;
    int rc = encodable(w, &size);
    if (rc < 0)
        return rc;
    uint8_t *out = malloc(size), *b = out;
    if (!out)
        return -ENOMEM;
    memcpy(b, magic, sizeof magic);
    b += sizeof magic;
    b = put_u32(b, POS_WEIGHTS_VERSION);
    b = put_u32(b, w->features);
    b = put_u32(b, w->actions);
    size_t mlen = strlen(w->meta);
    b = put_u32(b, (uint32_t)mlen);
    memcpy(b, w->meta, mlen);
    b += mlen;
    b = put_u32(b, (uint32_t)w->nnets);
    for (size_t k = 0; k < w->nnets; k++) {
        const struct nn_mlp *m = &w->nets[k].net;
        size_t nl = strlen(w->nets[k].name);
        memset(b, 0, POS_WEIGHTS_NAME_MAX);
        memcpy(b, w->nets[k].name, nl);
        b += POS_WEIGHTS_NAME_MAX;
        b = put_u32(b, (uint32_t)m->nlayers);
        for (int l = 0; l <= m->nlayers; l++)
            b = put_u32(b, (uint32_t)m->dims[l]);
        for (size_t i = 0; i < m->nparams; i++) {
            uint32_t bits;
            memcpy(&bits, &m->p[i], sizeof bits);
            b = put_u32(b, bits);
        }
    }
    uint64_t h = pos_fnv1a(out, (size_t)(b - out));
    for (int i = 0; i < 8; i++)
        *b++ = (uint8_t)(h >> (8 * i));
    *buf = out;
    *len = size;
    return 0;
}

/* ---- the networks -------------------------------------------------------------------------- */

const struct nn_mlp *pos_weights_net(const struct pos_weights *w, const char *name)
{
    if (!name)
        return NULL;
    size_t n = strlen(name);
    if (n >= POS_WEIGHTS_NAME_MAX)
        return NULL;
    for (size_t k = 0; k < w->nnets; k++)
        if (!memcmp(w->nets[k].name, name, n + 1))
            return &w->nets[k].net;
    return NULL;
}

/* A repeated or empty name is refused as well as a long one: no file could hold it. */
int pos_weights_add(struct pos_weights *w, const char *name, const struct nn_mlp *net)
{
    if (w->nnets >= POS_WEIGHTS_MAX_NETS || !name || !name_ok(name) || pos_weights_net(w, name))
        return -EINVAL;
    if (!nn_mlp_count(net->nlayers, net->dims) ||
        net->nparams != nn_mlp_count(net->nlayers, net->dims) || !net->p)
        return -EINVAL;
    struct pos_weights_net *slot = &w->nets[w->nnets];
    memset(slot, 0, sizeof *slot);
    int rc = nn_mlp_copy(&slot->net, net);
    if (rc < 0)
        return rc;
    memcpy(slot->name, name, strlen(name));
    w->nnets++;
    return 0;
}

void pos_weights_free(struct pos_weights *w)
{
    for (size_t k = 0; k < w->nnets && k < POS_WEIGHTS_MAX_NETS; k++)
        nn_mlp_free(&w->nets[k].net);
    memset(w, 0, sizeof *w);
}
