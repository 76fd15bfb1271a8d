/* The replies to posd's tools: STATS (the device and every client posd schedules, with their
 * telemetry and memory accounts, and the unmanaged GPU processes; also what the metrics
 * endpoint renders) and KERNELS (the kernel profiles, most device time first). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/mem_ledger.h"
#include "sched/names.h"
#include "sched/stats.h"
#include "sched/telemetry.h"

static double device_time(const struct pos_kprof *k)
{
    return (double)k->launches * (k->n ? k->mean_ns : 0);
}

static int by_device_time(const void *a, const void *b)
{
    const struct pos_kprof *x = *(const struct pos_kprof *const *)a,
                           *y = *(const struct pos_kprof *const *)b;
    double dx = device_time(x), dy = device_time(y);
    if (dx != dy)
        return dx < dy ? 1 : -1;
    return x->launches < y->launches ? 1 : x->launches > y->launches ? -1 : 0;
}

size_t posd_stats_kernels(struct posd *d, void *buf, size_t cap, int all, uid_t uid)
{
    struct pos_kernels_reply r = {.uptime_ns = (uint64_t)(posd_now() - d->started_at)};
    size_t room = cap > sizeof r ? (cap - sizeof r) / sizeof(struct pos_kernel_stats) : 0;
    /* an array of pointers to the profiles: sizeof *list is a pointer's, as meant */
    const struct pos_kprof **list = malloc((d->prof.count ? d->prof.count : 1) *
                                           sizeof *list); /* NOLINT(bugprone-sizeof-expression) */
    if (!list) { /* an empty reply rather than none */
        memcpy(buf, &r, sizeof r);
        return sizeof r;
    }
    size_t n = 0;
    for (size_t i = 0; i < d->prof.cap && n < d->prof.count; i++) {
        const struct pos_kprof *k = &d->prof.t[i];
        if (k->used && (all || k->uid == (uint32_t)uid))
            list[n++] = k;
    }
    qsort(list, n, sizeof list[0], by_device_time); /* NOLINT(bugprone-sizeof-expression) */
    r.total = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    r.nkernels = (uint32_t)(n < room ? n : room);
    uint8_t *out = (uint8_t *)buf + sizeof r;
    for (uint32_t i = 0; i < r.nkernels; i++) {
        const struct pos_kprof *k = list[i];
        struct pos_kernel_stats s = {
            .key = k->key,
            .uid = k->uid,
            .co_ratio_milli = k->co_n ? (uint32_t)(k->co_ratio * 1000 + 0.5) : 0,
            .launches = k->launches,
            .samples = k->n,
            .mean_ns = (uint64_t)k->mean_ns,
            .sd_ns = (uint64_t)pos_kprof_sd(k),
            .co_samples = k->co_n,
        };
        memcpy(s.grid, k->grid, sizeof s.grid);
        memcpy(s.block, k->block, sizeof s.block);
        snprintf(s.name, sizeof s.name, "%s", posd_name_of(k->key));
        memcpy(out + i * sizeof s, &s, sizeof s);
    }
    free(list);
    memcpy(buf, &r, sizeof r);
    return sizeof r + r.nkernels * sizeof(struct pos_kernel_stats);
}

static void fill_client_stats(struct posd *d, struct posd_client *c, struct pos_client_stats *s,
                              int64_t now)
{
    int slot = (int)(c - d->clients);
    struct sched_client_stats k;
    sched_core_client_stats(d->core, slot, now, &k);
    memset(s, 0, sizeof *s);
    s->client_id = c->id;
    s->pid = c->ident.pid;
    s->uid = c->ident.uid;
    s->gid = c->ident.gid;
    snprintf(s->app, sizeof s->app, "%s", c->ident.app);
    snprintf(s->class_name, sizeof s->class_name, "%s", c->pol.class_name);
    snprintf(s->k8s_namespace, sizeof s->k8s_namespace, "%s", c->ident.k8s_namespace);
    snprintf(s->pod, sizeof s->pod, "%s", c->ident.pod);
    snprintf(s->container, sizeof s->container, "%s", c->ident.container);
    snprintf(s->pod_devices, sizeof s->pod_devices, "%s", c->ident.devices);
    s->priority = c->pol.priority;
    s->flags = (sched_core_client_held(d->core, slot) ? POS_CLIENT_HELD : 0) |
               (c->overridden ? POS_CLIENT_OVERRIDE : 0) |
               (c->cpu.low == POS_CPU_IDLE ? POS_CLIENT_CPU_IDLE : 0) |
               (c->cpu.low == POS_CPU_NICE ? POS_CLIENT_CPU_NICE : 0);
    s->cpu_threads = (uint32_t)c->cpu.nthreads;
    s->submitted = k.submitted;
    s->released = k.released;
    s->completed = k.completed;
    s->in_flight = k.in_flight;
    s->queued = k.queued;
    s->busy_ns = k.busy_ns;
    s->requests = k.requests;
    s->req_p50_ns = k.req_p50_ns;
    s->req_p99_ns = k.req_p99_ns;
    s->stalls = k.stalls;
    s->sync_lag_n = k.sync_lag_n;
    s->sync_lag_p50_ns = k.sync_lag_p50_ns;
    s->sync_lag_p99_ns = k.sync_lag_p99_ns;
    s->op_ns = k.op_ns;
    s->sync_ns = atomic_load_explicit(&c->shm->sync_ns, memory_order_relaxed);
    s->syncs = atomic_load_explicit(&c->shm->syncs, memory_order_relaxed);
    s->waits = atomic_load_explicit(&c->shm->waits, memory_order_relaxed);
    for (int b = 0; b < POS_WAIT_BUCKETS; b++)
        s->wait_hist[b] = atomic_load_explicit(&c->shm->wait_hist[b], memory_order_relaxed);
    s->connected_ns = (uint64_t)(now - c->connected_at);
    _Static_assert(SCHED_REQ_POW_BUCKETS == POS_WAIT_BUCKETS, "one bucket layout on the wire");
    memcpy(s->req_hist, k.req_pow, sizeof s->req_hist);
    s->req_sum_ns = k.req_sum_ns;
    s->device = c->pol.device;
    posd_telemetry_client_current(d, c, now);
    s->runq_delay_ns = c->tele.runq_delay_ns;
    s->runq_ns_per_s = c->tele.runq_ns_per_s;
    s->offcpu_ns_per_s = c->tele.offcpu_ns_per_s;
    s->ioctls_per_s = c->tele.ioctls_per_s;
    s->ioctl_ns = c->tele.ioctl_mean_ns;
    struct posd_mem_figures m;
    posd_mem_read(c, &m);
    s->mem_used = m.used;
    s->mem_peak = m.peak;
    s->mem_refused = m.refused;
    s->mem_limit = m.limit;
    s->mem_limit_ppm = c->mem.limit.ppm;
    s->mem_total = m.total;
    memcpy(s->mem_bytes, m.bytes, sizeof s->mem_bytes);
}

size_t posd_stats_clients(struct posd *d, void *buf, size_t cap, int all, uid_t uid)
{
    struct pos_stats_reply *r = buf;
    int64_t now = posd_now();
    memset(r, 0, sizeof *r);
    r->dev.uptime_ns = (uint64_t)(now - d->started_at);
    snprintf(r->dev.policy, sizeof r->dev.policy, "%s", sched_core_policy(d->core)->name);
    r->dev.policy_len = (uint32_t)strlen(r->dev.policy);
    struct sched_device_stats ds;
    sched_core_device_stats(d->core, now, &ds);
    r->dev.submitted = ds.submitted;
    r->dev.released = ds.released;
    r->dev.completed = ds.completed;
    r->dev.busy_ns = ds.busy_ns;
    size_t len = sizeof *r;
    struct pos_client_stats *cs = (struct pos_client_stats *)(r + 1);
    for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
        struct posd_client *c = &d->clients[i];
        if (!c->used || !c->registered || (!all && c->ident.uid != uid))
            continue;
        r->dev.clients++;
        if (len + sizeof *cs > cap)
            continue;
        fill_client_stats(d, c, &cs[r->nclients], now);
        r->nclients++;
        len += sizeof *cs;
    }
    /* unmanaged processes: pids and commands of any user, so only to those who see all */
    struct pos_unmanaged_stats *us = (struct pos_unmanaged_stats *)((uint8_t *)buf + len);
    size_t room = (cap - len) / sizeof *us;
    size_t n = posd_telemetry_unmanaged(d, us, all ? room : 0);
    r->dev.telemetry = posd_telemetry_parts();
    r->dev.unmanaged = (uint32_t)n;
    r->dev.unmanaged_untracked = posd_telemetry_untracked();
    r->dev.flags = all ? POS_DEV_EVERYONE : 0;
    r->dev.profiles = d->prof.count;
    r->dev.profiles_refused = d->prof.user_refused;
    r->nunmanaged = all ? (uint32_t)(n < room ? n : room) : 0;
    return len + r->nunmanaged * sizeof *us;
}
