/* posd's side of the memory ledger (docs/memory.md): it writes each client's limit into the
 * client's shared memory, where the shim reserves against it, and reads the account the shim
 * keeps there. A client writes its own account, so each value is read once and clamped to
 * POSD_MEM_DEVICE_MAX and to the device's memory as the client gave it: a false account
 * misreports that client alone, and its limit is posd's own copy, never read back. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "sched/mem_ledger.h"

static uint64_t at_most(uint64_t v, uint64_t max)
{
    return v < max ? v : max;
}

void posd_mem_limit_publish(struct posd_client *c, struct sched_mem_limit l)
{
    struct pos_client_shm *shm = c->shm;
    /* the shim may read the pair between the two stores: the order makes it see either the old
     * limit or the new one, never a third. A share (ppm) outranks the bytes, so a share is
     * stored before the bytes it makes ignored, and bytes before the share that hid them is
     * cleared. */
    if (l.ppm) {
        atomic_store_explicit(&shm->mem_limit_ppm, l.ppm, memory_order_release);
        atomic_store_explicit(&shm->mem_limit, l.bytes, memory_order_release);
    } else {
        atomic_store_explicit(&shm->mem_limit, l.bytes, memory_order_release);
        atomic_store_explicit(&shm->mem_limit_ppm, 0, memory_order_release);
    }
    atomic_fetch_add_explicit(&shm->mem_word, 1, memory_order_release);
    c->mem.limit = l;
}

uint64_t posd_mem_limit_bytes(const struct posd_client *c, uint64_t total)
{
    /* none stays none (pos_mem_limit_of would say the device's size), and a share of a device
     * whose size is not known yet is not known either */
    if (sched_mem_limit_equal(c->mem.limit, SCHED_MEM_NO_LIMIT) || (c->mem.limit.ppm && !total))
        return POS_MEM_UNLIMITED;
    return pos_mem_limit_of(c->mem.limit.bytes, c->mem.limit.ppm, total);
}

/* The device posd's figures of C are about: the one its rules put it on, when accounted. */
static const struct pos_mem_account *rule_account(const struct posd_client *c)
{
    int dev = c->pol.device;
    return dev >= 0 && dev < POS_MEM_MAX_DEVICES ? &c->shm->mem[dev] : NULL;
}

void posd_mem_read_device(const struct posd_client *c, uint64_t *used, uint64_t *limit)
{
    const struct pos_mem_account *a = rule_account(c);
    uint64_t total = 0, u = 0;
    if (a) {
        total = at_most(atomic_load_explicit(&a->total, memory_order_relaxed), POSD_MEM_DEVICE_MAX);
        u = at_most(atomic_load_explicit(&a->used, memory_order_relaxed), total);
    }
    *used = u;
    *limit = posd_mem_limit_bytes(c, total);
}

void posd_mem_read(const struct posd_client *c, struct posd_mem_figures *f)
{
    memset(f, 0, sizeof *f);
    const struct pos_mem_account *rule = rule_account(c);
    for (int dev = 0; dev < POS_MEM_MAX_DEVICES; dev++) {
        const struct pos_mem_account *a = &c->shm->mem[dev];
        /* a device the client never used has total 0, and so nothing on it counts */
        uint64_t total =
            at_most(atomic_load_explicit(&a->total, memory_order_relaxed), POSD_MEM_DEVICE_MAX);
        uint64_t used = at_most(atomic_load_explicit(&a->used, memory_order_relaxed), total);
        f->used += used;
        f->peak += at_most(atomic_load_explicit(&a->peak, memory_order_relaxed), total);
        f->refused +=
            at_most(atomic_load_explicit(&a->refused, memory_order_relaxed), POSD_MEM_DEVICE_MAX);
        for (int k = 0; k < POS_MEM_KINDS; k++)
            f->bytes[k] += at_most(atomic_load_explicit(&a->bytes[k], memory_order_relaxed), total);
        if (a == rule)
            f->total = total;
    }
    f->limit = posd_mem_limit_bytes(c, f->total);
}

void posd_mem_reconf(struct posd_client *c)
{
    if (sched_mem_limit_equal(c->pol.mem_limit, c->mem.limit))
        return;
    char was[24], now[24], over[POSD_MEM_OVER_MAX];
    sched_mem_limit_format(c->mem.limit, was, sizeof was);
    posd_mem_limit_publish(c, c->pol.mem_limit);
    sched_mem_limit_format(c->mem.limit, now, sizeof now);
    posd_mem_over(c, over, sizeof over);
    posd_log(POSD_LOG_INFO, "client %u (pid %d, app '%s'): mem_limit %s (was %s)%s", c->id,
             (int)c->ident.pid, c->ident.app, now, was, over);
}

void posd_mem_over(const struct posd_client *c, char *buf, size_t cap)
{
    uint64_t used, limit;
    posd_mem_read_device(c, &used, &limit);
    buf[0] = '\0';
    if (used <= limit)
        return;
    char u[24], l[24];
    sched_mem_bytes_format(used, u, sizeof u);
    sched_mem_bytes_format(limit, l, sizeof l);
    snprintf(buf, cap,
             "; it uses %s on device %d, above %s: new allocations fail until it frees enough", u,
             c->pol.device, l);
}
