/* Kernel names (POS_MSG_NAMES): the decoder of a client's NAMES messages, which gives each of
 * its kernel ids the key of its name (c->keys, the ids the engine reads in its submissions),
 * and posd's table of names by key for the KERNELS reply (posstat -k). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sched/names.h"
#include "sched/fnv.h"

/* Kernel names by key, for posstat -k: the first 63 bytes of the first name a client sent
 * for a key (a key is the hash of the name's bytes). Bounded; posd is single-threaded. */
#define KNAMES_CAP 65536
static struct kname {
    uint64_t key;
    char name[64];
} knames[KNAMES_CAP];
static size_t knames_n;

static void kname_put(uint64_t key, const uint8_t *name, size_t n)
{
    if (!key || knames_n * 10 >= KNAMES_CAP * 7)
        return;
    size_t i = (size_t)(key ^ (key >> 29)) & (KNAMES_CAP - 1);
    while (knames[i].key && knames[i].key != key)
        i = (i + 1) & (KNAMES_CAP - 1);
    if (knames[i].key)
        return;
    knames[i].key = key;
    memcpy(knames[i].name, name, n < 63 ? n : 63);
    knames[i].name[n < 63 ? n : 63] = '\0';
    knames_n++;
}

const char *posd_name_of(uint64_t key)
{
    size_t i = (size_t)(key ^ (key >> 29)) & (KNAMES_CAP - 1);
    while (knames[i].key && knames[i].key != key)
        i = (i + 1) & (KNAMES_CAP - 1);
    return knames[i].key ? knames[i].name : "";
}

/* The set of C's kernel keys (open addressing, capacity a power of two at least twice the
 * ids): a duplicate name is found at once. A scan of every earlier id cost a message of 1 300
 * names at 30 000 known ids 4.7 ms of posd's one thread, everyone's scheduling stalled. */
static int key_set_add(struct posd_client *c, uint64_t key);

static int key_set_grow(struct posd_client *c, uint32_t ids)
{
    uint32_t cap = 64;
    while (cap < 2 * ids)
        cap *= 2;
    if (cap <= c->names.key_set_cap)
        return 0;
    uint64_t *set = calloc(cap, sizeof *set);
    if (!set)
        return -ENOMEM;
    free(c->names.key_set);
    c->names.key_set = set;
    c->names.key_set_cap = cap;
    c->names.key_set_zero = 0;
    for (uint32_t id = 1; id <= c->names.nkeys; id++)
        key_set_add(c, c->names.keys[id]);
    return 0;
}

/* Adds KEY. Returns 0, or -EEXIST when it is there already. */
static int key_set_add(struct posd_client *c, uint64_t key)
{
    if (!key) { /* the empty slot's mark: kept aside */
        if (c->names.key_set_zero)
            return -EEXIST;
        c->names.key_set_zero = 1;
        return 0;
    }
    uint32_t mask = c->names.key_set_cap - 1;
    for (uint32_t i = (uint32_t)(key ^ key >> 32) & mask;; i = (i + 1) & mask) {
        if (c->names.key_set[i] == key)
            return -EEXIST;
        if (!c->names.key_set[i]) {
            c->names.key_set[i] = key;
            return 0;
        }
    }
}

int posd_names_message(struct posd_client *c, const uint8_t *body, size_t len)
{
    struct pos_names h;
    if (len < sizeof h)
        return -EPROTO;
    memcpy(&h, body, sizeof h);
    if (h.first != c->names.nkeys + 1 || h.count == 0 || h.count > POS_MAX_KERNEL_IDS ||
        h.first + h.count - 1 > POS_MAX_KERNEL_IDS)
        return -EPROTO;                /* ids come once each, in order */
    uint32_t want = h.first + h.count; /* keys[0] unused */
    uint64_t *keys = realloc(c->names.keys, want * sizeof *keys);
    if (!keys)
        return -ENOMEM;
    c->names.keys = keys;
    if (key_set_grow(c, want) < 0)
        return -ENOMEM;
    size_t off = sizeof h;
    int rc = 0;
    for (uint32_t i = 0; i < h.count && rc == 0; i++) {
        uint16_t n;
        if (off + sizeof n > len) {
            rc = -EPROTO;
            break;
        }
        memcpy(&n, body + off, sizeof n);
        off += sizeof n;
        if (n == 0 || n > POS_KERNEL_NAME_MAX || off + n > len) {
            rc = -EPROTO;
            break;
        }
        uint64_t key = pos_fnv1a(body + off, n);
        /* one process interns a name once: the same key under two ids is a broken client */
        rc = key_set_add(c, key) < 0 ? -EPROTO : 0;
        c->names.keys[h.first + i] = key;
        kname_put(key, body + off, n);
        off += n;
    }
    if (rc == 0 && off != len)
        rc = -EPROTO;
    if (rc < 0) {
        /* the set holds this message's keys too: back to the ids known */
        memset(c->names.key_set, 0, c->names.key_set_cap * sizeof *c->names.key_set);
        c->names.key_set_zero = 0;
        for (uint32_t id = 1; id <= c->names.nkeys; id++)
            key_set_add(c, c->names.keys[id]);
        return rc;
    }
    c->names.nkeys = h.first + h.count - 1;
    return 0;
}


void posd_names_forget(struct posd_client *c)
{
    free(c->names.keys);
    c->names.keys = NULL;
    c->names.nkeys = 0;
    free(c->names.key_set);
    c->names.key_set = NULL;
    c->names.key_set_cap = 0;
}
