/* posstat's pure half (see posstat_format.h): reply validation, rates between snapshots,
 * histogram percentiles, Average: sums, and the text and JSON renderings driven by one column
 * table, so that both outputs always carry the same fields. */
#include "tools/posstat_format.h"
#include "sched/mem_limit.h"
#include "tools/posclient.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --- reply validation ------------------------------------------------------------------- */

static int check_client(const struct pos_client_stats *c, char *err, size_t errlen)
{
    if (!posclient_terminated(c->app, sizeof c->app))
        return posclient_fail(-EPROTO, err, errlen,
                    "bad STATS reply from posd: client %u (pid %d) has an app name that is not "
                    "NUL-terminated",
                    c->client_id, c->pid);
    if (!posclient_terminated(c->class_name, sizeof c->class_name))
        return posclient_fail(-EPROTO, err, errlen,
                    "bad STATS reply from posd: client %u (pid %d) has a class name that is not "
                    "NUL-terminated",
                    c->client_id, c->pid);
    if (!posclient_terminated(c->k8s_namespace, sizeof c->k8s_namespace) ||
        !posclient_terminated(c->pod, sizeof c->pod) ||
        !posclient_terminated(c->container, sizeof c->container) ||
        !posclient_terminated(c->pod_devices, sizeof c->pod_devices))
        return posclient_fail(-EPROTO, err, errlen,
                    "bad STATS reply from posd: client %u (pid %d) has a pod name that is not "
                    "NUL-terminated",
                    c->client_id, c->pid);
    return 0;
}

static int check_unmanaged(const struct pos_unmanaged_stats *u, char *err, size_t errlen)
{
    if (!posclient_terminated(u->comm, sizeof u->comm))
        return posclient_fail(-EPROTO, err, errlen,
                    "bad STATS reply from posd: unmanaged process %d has a command that is not "
                    "NUL-terminated",
                    u->pid);
    return 0;
}

int posstat_parse_reply(const void *msg, size_t len, struct posstat_snapshot *snap, char *err,
                        size_t errlen)
{
    const void *bodyp;
    size_t blen;
    int hrc = posclient_check_msg(msg, len, POS_MSG_STATS, &bodyp, &blen, err, errlen);
    if (hrc < 0)
        return hrc;
    const char *body = bodyp;
    struct pos_stats_reply rep;
    if (blen < sizeof rep)
        return posclient_fail(-EPROTO, err, errlen,
                    "short STATS reply from posd (%zu bytes, want at least %zu)", blen, sizeof rep);
    memcpy(&rep, body, sizeof rep);
    /* In 64 bits, where nclients * size cannot wrap. */
    size_t room = blen - sizeof rep;
    const size_t csize = sizeof(struct pos_client_stats);
    const size_t usize = sizeof(struct pos_unmanaged_stats);
    if ((uint64_t)rep.nclients * csize + (uint64_t)rep.nunmanaged * usize != room)
        return posclient_fail(-EPROTO, err, errlen,
                    "bad STATS reply from posd: it says %u clients and %u unmanaged processes "
                    "but carries %zu bytes for them (%zu and %zu each)",
                    rep.nclients, rep.nunmanaged, room, csize, usize);
    size_t croom = rep.nclients * csize, uroom = rep.nunmanaged * usize;
    if (!posclient_terminated(rep.dev.policy, sizeof rep.dev.policy))
        return posclient_fail(-EPROTO, err, errlen,
                    "bad STATS reply from posd: the policy name is not NUL-terminated");
    if (rep.dev.policy_len != strlen(rep.dev.policy)) {
        char policy[sizeof rep.dev.policy];
        posclient_printable(policy, sizeof policy, rep.dev.policy);
        return posclient_fail(-EPROTO, err, errlen,
                    "bad STATS reply from posd: policy_len %u, but the policy name '%s' has %zu "
                    "bytes",
                    rep.dev.policy_len, policy, strlen(rep.dev.policy));
    }

    struct pos_client_stats *clients = NULL;
    struct pos_unmanaged_stats *unmanaged = NULL;
    if ((croom && !(clients = malloc(croom))) || (uroom && !(unmanaged = malloc(uroom)))) {
        free(clients);
        return posclient_fail(-ENOMEM, err, errlen, "out of memory");
    }
    if (croom)
        memcpy(clients, body + sizeof rep, croom);
    if (uroom)
        memcpy(unmanaged, body + sizeof rep + croom, uroom);
    int rc = 0;
    /* croom and uroom are the counts' sizes: no records, no array */
    for (uint32_t i = 0; clients && i < rep.nclients && !rc; i++)
        rc = check_client(&clients[i], err, errlen);
    for (uint32_t i = 0; unmanaged && i < rep.nunmanaged && !rc; i++)
        rc = check_unmanaged(&unmanaged[i], err, errlen);
    if (rc < 0) {
        free(clients);
        free(unmanaged);
        return rc;
    }
    *snap = (struct posstat_snapshot){.dev = rep.dev,
                                      .nclients = rep.nclients,
                                      .clients = clients,
                                      .nunmanaged = rep.nunmanaged,
                                      .unmanaged = unmanaged};
    return 0;
}

void posstat_snapshot_free(struct posstat_snapshot *snap)
{
    free(snap->clients);
    snap->clients = NULL;
    snap->nclients = 0;
    free(snap->unmanaged);
    snap->unmanaged = NULL;
    snap->nunmanaged = 0;
}

/* --- percentiles ------------------------------------------------------------------------ */

static uint64_t add_saturating(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}

double posstat_wait_percentile(const uint64_t hist[POS_WAIT_BUCKETS], unsigned pct)
{
    uint64_t total = 0;
    for (int i = 0; i < POS_WAIT_BUCKETS; i++)
        total = add_saturating(total, hist[i]);
    if (total == 0)
        return NAN;
    if (pct > 100)
        pct = 100;
    /* Nearest rank, ceil(total * pct / 100), without the product overflowing. */
    uint64_t rank = total / 100 * pct + (total % 100 * pct + 99) / 100;
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (int i = 0; i < POS_WAIT_BUCKETS; i++) {
        seen = add_saturating(seen, hist[i]);
        if (seen >= rank)
            return (double)(UINT64_C(2) << i);
    }
    return (double)(UINT64_C(2) << (POS_WAIT_BUCKETS - 1));
}

/* --- reports ---------------------------------------------------------------------------- */

static int posd_restarted(const struct pos_device_stats *p, const struct pos_device_stats *c)
{
    return c->uptime_ns < p->uptime_ns;
}

/* The same client in PREV: same id and pid, registered no later than then. posd never reuses
 * an id while it runs; a restart is caught before this. */
static const struct pos_client_stats *same_client(const struct posstat_snapshot *prev,
                                                  const struct pos_client_stats *c)
{
    for (uint32_t i = 0; prev && i < prev->nclients; i++) {
        const struct pos_client_stats *p = &prev->clients[i];
        if (p->client_id == c->client_id && p->pid == c->pid)
            return c->connected_ns >= p->connected_ns ? p : NULL;
    }
    return NULL;
}

static double per_second(uint64_t delta, uint64_t span_ns)
{
    return span_ns ? (double)delta * 1e9 / (double)span_ns : NAN;
}

/* The rate of a counter that went from BEFORE to NOW: NaN if it went back, which a cumulative
 * counter never does (some client counters come from memory the client itself writes). */
static double counter_rate(uint64_t now, uint64_t before, uint64_t span_ns)
{
    return now >= before ? per_second(now - before, span_ns) : NAN;
}

/* Percentile PCT of the waits between BASE and C; NaN if none, or if a bucket went back. */
static double wait_percentile(const struct pos_client_stats *base, const struct pos_client_stats *c,
                              unsigned pct)
{
    uint64_t hist[POS_WAIT_BUCKETS];
    for (int i = 0; i < POS_WAIT_BUCKETS; i++) {
        if (c->wait_hist[i] < base->wait_hist[i])
            return NAN;
        hist[i] = c->wait_hist[i] - base->wait_hist[i];
    }
    return posstat_wait_percentile(hist, pct);
}

/* BASE is the earlier state of the same device; all zeros means "since posd started". */
static void device_row(struct posstat_device_row *row, const struct pos_device_stats *base,
                       const struct pos_device_stats *d)
{
    uint64_t span = d->uptime_ns - base->uptime_ns;
    memcpy(row->policy, d->policy, sizeof row->policy);
    row->clients = d->clients;
    row->uptime_s = (double)d->uptime_ns / 1e9;
    row->span_s = (double)span / 1e9;
    row->submitted_per_s = counter_rate(d->submitted, base->submitted, span);
    row->released_per_s = counter_rate(d->released, base->released, span);
    row->completed_per_s = counter_rate(d->completed, base->completed, span);
    row->busy_pct = counter_rate(d->busy_ns, base->busy_ns, span) / 1e9 * 100.0;
    row->submitted = (double)d->submitted;
    row->released = (double)d->released;
    row->completed = (double)d->completed;
    row->unmanaged = d->telemetry & POS_TELE_DISCOVERY ? (double)d->unmanaged : NAN;
    row->unmanaged_untracked =
        d->telemetry & POS_TELE_DISCOVERY ? (double)d->unmanaged_untracked : NAN;
}

static void gpu_row(struct posstat_gpu_row *row, const struct posstat_gpu *g)
{
    row->index = g->index;
    row->util_pct = g->valid ? g->util_pct : NAN;
    row->mem_used_mib = g->valid ? g->mem_used_mib : NAN;
    row->mem_total_mib = g->valid ? g->mem_total_mib : NAN;
    row->power_w = g->valid ? g->power_w : NAN;
    row->sm_clock_mhz = g->valid ? g->sm_clock_mhz : NAN;
}

/* The memory columns: the limit in bytes where it is known, and as a person writes it. */
static void mem_cells(struct posstat_client_row *row, const struct pos_client_stats *c)
{
    row->mem_used = (double)c->mem_used;
    row->mem_peak = (double)c->mem_peak;
    row->mem_refused = (double)c->mem_refused;
    row->mem_limit = c->mem_limit == POS_MEM_UNLIMITED ? NAN : (double)c->mem_limit;
    struct sched_mem_limit l = {.bytes = c->mem_limit, .ppm = 0};
    if (c->mem_limit_ppm && c->mem_limit == POS_MEM_UNLIMITED) /* its device's size unknown */
        l = (struct sched_mem_limit){.bytes = POS_MEM_UNLIMITED, .ppm = c->mem_limit_ppm};
    sched_mem_limit_format(l, row->mem_limit_text, sizeof row->mem_limit_text);
}

/* BASE is the earlier state of the same client; all zeros means "since it registered". */
static void client_row(struct posstat_client_row *row, const struct pos_client_stats *base,
                       const struct pos_client_stats *c, uint32_t telemetry)
{
    uint64_t span = c->connected_ns - base->connected_ns;
    row->client_id = c->client_id;
    row->pid = c->pid;
    memcpy(row->app, c->app, sizeof row->app);
    memcpy(row->class_name, c->class_name, sizeof row->class_name);
    memcpy(row->k8s_namespace, c->k8s_namespace, sizeof row->k8s_namespace);
    memcpy(row->pod, c->pod, sizeof row->pod);
    memcpy(row->container, c->container, sizeof row->container);
    memcpy(row->pod_devices, c->pod_devices, sizeof row->pod_devices);
    row->pod_text[0] = '\0';
    if (c->pod[0])
        snprintf(row->pod_text, sizeof row->pod_text, "%s/%s/%s", c->k8s_namespace, c->pod,
                 c->container[0] ? c->container : "-");
    row->span_s = (double)span / 1e9;
    row->launches_per_s = counter_rate(c->submitted, base->submitted, span);
    row->queued = (double)c->queued;
    row->in_flight = (double)c->in_flight;
    row->wait_p50_us = wait_percentile(base, c, 50);
    row->wait_p99_us = wait_percentile(base, c, 99);
    row->gpu_ms_per_s = counter_rate(c->busy_ns, base->busy_ns, span) / 1e6;
    row->requests_per_s = counter_rate(c->requests, base->requests, span);
    row->req_p50_ms = c->requests ? (double)c->req_p50_ns / 1e6 : NAN;
    row->req_p99_ms = c->requests ? (double)c->req_p99_ns / 1e6 : NAN;
    row->sync_lag_p50_us = c->sync_lag_n ? (double)c->sync_lag_p50_ns / 1e3 : NAN;
    row->sync_lag_p99_us = c->sync_lag_n ? (double)c->sync_lag_p99_ns / 1e3 : NAN;
    row->op_us = c->op_ns ? (double)c->op_ns / 1e3 : NAN;
    row->stalls = (double)c->stalls;
    row->held = (c->flags & POS_CLIENT_HELD) != 0;
    snprintf(row->cpu, sizeof row->cpu, "%s",
             c->flags & POS_CLIENT_CPU_IDLE   ? "idle"
             : c->flags & POS_CLIENT_CPU_NICE ? "nice"
                                              : "no");
    int cpu = (telemetry & POS_TELE_CPU) != 0;
    row->runq_us = cpu ? (double)c->runq_delay_ns / 1e3 : NAN;
    row->runq_ms_per_s = cpu ? (double)c->runq_ns_per_s / 1e6 : NAN;
    row->offcpu_ms_per_s = cpu ? (double)c->offcpu_ns_per_s / 1e6 : NAN;
    int ioctl = (telemetry & POS_TELE_IOCTL) != 0;
    row->ioctls_per_s = ioctl ? (double)c->ioctls_per_s : NAN;
    row->ioctl_us = ioctl && c->ioctls_per_s ? (double)c->ioctl_ns / 1e3 : NAN;
    mem_cells(row, c);
}

static void unmanaged_row(struct posstat_unmanaged_row *row, const struct pos_unmanaged_stats *u)
{
    row->pid = u->pid;
    memcpy(row->comm, u->comm, sizeof row->comm);
    row->contexts = (double)u->contexts;
    size_t len = 0;
    row->devices[0] = '\0';
    for (int dev = 0; dev < 32 && len < sizeof row->devices - 4; dev++)
        if (u->devices >> dev & 1)
            len += (size_t)snprintf(row->devices + len, sizeof row->devices - len, "%s%d",
                                    len ? "," : "", dev);
    if (!len)
        snprintf(row->devices, sizeof row->devices, "-");
    row->launches_per_s = u->flags & POS_UNMANAGED_SAMPLED ? (double)u->launches_per_s : NAN;
    row->seen_s = (double)u->seen_ns / 1e9;
}

int posstat_report_build(struct posstat_report *r, const struct posstat_snapshot *prev,
                         const struct posstat_snapshot *cur, enum posstat_report_kind kind)
{
    static const struct pos_device_stats no_device;
    static const struct pos_client_stats no_client;

    if (prev && posd_restarted(&prev->dev, &cur->dev))
        prev = NULL;
    *r = (struct posstat_report){.kind = kind,
                                 .time = cur->time,
                                 .nclients = cur->nclients,
                                 .telemetry = cur->dev.telemetry,
                                 .everyone = (cur->dev.flags & POS_DEV_EVERYONE) != 0};
    if (cur->dev.clients > cur->nclients)
        r->clients_not_shown = cur->dev.clients - cur->nclients;
    if (cur->nclients) {
        r->clients = calloc(cur->nclients, sizeof *r->clients);
        if (!r->clients)
            return -ENOMEM;
    }
    if (cur->nunmanaged) {
        r->unmanaged = calloc(cur->nunmanaged, sizeof *r->unmanaged);
        if (!r->unmanaged) {
            posstat_report_free(r);
            return -ENOMEM;
        }
        r->nunmanaged = cur->nunmanaged;
    }
    device_row(&r->dev, prev ? &prev->dev : &no_device, &cur->dev);
    gpu_row(&r->gpu, &cur->gpu);
    for (uint32_t i = 0; i < cur->nclients; i++) {
        if (cur->clients[i].pod[0])
            r->telemetry |= POSSTAT_PODS;
        const struct pos_client_stats *base = same_client(prev, &cur->clients[i]);
        client_row(&r->clients[i], base ? base : &no_client, &cur->clients[i], cur->dev.telemetry);
    }
    for (uint32_t i = 0; i < cur->nunmanaged; i++)
        unmanaged_row(&r->unmanaged[i], &cur->unmanaged[i]);
    return 0;
}

void posstat_report_free(struct posstat_report *r)
{
    free(r->clients);
    r->clients = NULL;
    r->nclients = 0;
    free(r->unmanaged);
    r->unmanaged = NULL;
    r->nunmanaged = 0;
}

/* --- Average: --------------------------------------------------------------------------- */

static struct posstat_level_sum *find_levels(const struct posstat_average *a, uint32_t id,
                                             int32_t pid)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->levels[i].client_id == id && a->levels[i].pid == pid)
            return &a->levels[i];
    return NULL;
}

/* Keeps the sums of this report's clients only: the Average: block shows the clients of the
 * last report, and posd never gives an id back, so a client gone now does not return. The
 * sums of a long run stay as small as one report. */
int posstat_average_add(struct posstat_average *a, const struct posstat_report *r)
{
    struct posstat_level_sum *next = NULL;
    if (r->nclients) {
        next = calloc(r->nclients, sizeof *next);
        if (!next)
            return -ENOMEM;
    }
    for (uint32_t i = 0; i < r->nclients; i++) {
        const struct posstat_client_row *row = &r->clients[i];
        const struct posstat_level_sum *old = find_levels(a, row->client_id, row->pid);
        next[i] =
            old ? *old : (struct posstat_level_sum){.client_id = row->client_id, .pid = row->pid};
        next[i].queued += row->queued;
        next[i].in_flight += row->in_flight;
        next[i].samples++;
    }
    free(a->levels);
    a->levels = next;
    a->n = r->nclients;
    a->reports++;
    a->clients += r->dev.clients;
    a->gpu.index = r->gpu.index;
    a->gpu.util_pct += r->gpu.util_pct;
    a->gpu.mem_used_mib += r->gpu.mem_used_mib;
    a->gpu.mem_total_mib += r->gpu.mem_total_mib;
    a->gpu.power_w += r->gpu.power_w;
    a->gpu.sm_clock_mhz += r->gpu.sm_clock_mhz;
    return 0;
}

int posstat_average_report(struct posstat_report *r, const struct posstat_average *a,
                           const struct posstat_snapshot *first,
                           const struct posstat_snapshot *last)
{
    int rc = posstat_report_build(r, first, last, POSSTAT_AVERAGE);
    if (rc < 0)
        return rc;
    if (a->reports) {
        double n = (double)a->reports;
        r->dev.clients = a->clients / n;
        r->gpu = (struct posstat_gpu_row){a->gpu.index,
                                          a->gpu.util_pct / n,
                                          a->gpu.mem_used_mib / n,
                                          a->gpu.mem_total_mib / n,
                                          a->gpu.power_w / n,
                                          a->gpu.sm_clock_mhz / n};
    }
    for (uint32_t i = 0; i < r->nclients; i++) {
        struct posstat_client_row *row = &r->clients[i];
        const struct posstat_level_sum *l = find_levels(a, row->client_id, row->pid);
        if (l && l->samples) {
            row->queued = l->queued / (double)l->samples;
            row->in_flight = l->in_flight / (double)l->samples;
        }
        row->held = -1; /* a state, not a quantity: no mean to give */
        row->cpu[0] = '\0';
    }
    return 0;
}

void posstat_average_free(struct posstat_average *a)
{
    free(a->levels);
    *a = (struct posstat_average){0};
}

/* --- columns ---------------------------------------------------------------------------- */

enum cell_kind {
    CELL_NAME,  /* char array: text shows it sanitised and cut to the width; JSON escapes it */
    CELL_I32,   /* int32_t */
    CELL_U32,   /* uint32_t */
    CELL_RATE,  /* double with the column's decimals in text, 3 in JSON */
    CELL_WHOLE, /* double holding a whole number */
    CELL_LEVEL, /* double: whole at a snapshot, a mean (decimals) in an Average */
    CELL_BOOL,  /* int: 1 yes, 0 no, -1 not available */
    CELL_BYTES, /* double holding bytes: text in binary units (1.5GiB), JSON the number */
};

struct column {
    const char *title; /* text header; NULL: JSON only */
    const char *unit;  /* second text header line */
    const char *key;   /* JSON member name */
    int width;         /* text; negative: left-aligned */
    enum cell_kind kind;
    int decimals; /* CELL_RATE in text */
    size_t offset;
    uint32_t needs; /* POS_TELE_* parts the value comes from: text shows it only with them */
};

/* the offset of a field, and the telemetry parts it needs (TDEV, TCLI) */
#define DEV(field)         offsetof(struct posstat_device_row, field), 0
#define CLI(field)         offsetof(struct posstat_client_row, field), 0
#define TDEV(field, parts) offsetof(struct posstat_device_row, field), (parts)
#define TCLI(field, parts) offsetof(struct posstat_client_row, field), (parts)

static const struct column device_columns[] = {
    {"policy", "", "policy", -10, CELL_NAME, 0, DEV(policy)},
    {"clients", "", "clients", 7, CELL_LEVEL, 0, DEV(clients)},
    {NULL, NULL, "uptime_s", 0, CELL_RATE, 0, DEV(uptime_s)},
    {"submitted", "op/s", "submitted_per_s", 10, CELL_RATE, 1, DEV(submitted_per_s)},
    {"released", "op/s", "released_per_s", 10, CELL_RATE, 1, DEV(released_per_s)},
    {"completed", "op/s", "completed_per_s", 10, CELL_RATE, 1, DEV(completed_per_s)},
    {"busy", "%", "busy_pct", 6, CELL_RATE, 1, DEV(busy_pct)},
    {NULL, NULL, "submitted", 0, CELL_WHOLE, 0, DEV(submitted)},
    {NULL, NULL, "released", 0, CELL_WHOLE, 0, DEV(released)},
    {NULL, NULL, "completed", 0, CELL_WHOLE, 0, DEV(completed)},
    {"unmgd", "procs", "unmanaged", 6, CELL_LEVEL, 0, TDEV(unmanaged, POS_TELE_DISCOVERY)},
    {NULL, NULL, "unmanaged_untracked", 0, CELL_WHOLE, 0,
     TDEV(unmanaged_untracked, POS_TELE_DISCOVERY)},
};

#define GPU(field) offsetof(struct posstat_gpu_row, field), 0

/* NVML's figures; '-' without NVML */
static const struct column gpu_columns[] = {
    {"gpu", "", "index", 5, CELL_WHOLE, 0, GPU(index)},
    {"util", "%", "util_pct", 6, CELL_RATE, 1, GPU(util_pct)},
    {"mem", "MiB", "mem_used_mib", 8, CELL_RATE, 0, GPU(mem_used_mib)},
    {"mem_total", "MiB", "mem_total_mib", 9, CELL_RATE, 0, GPU(mem_total_mib)},
    {"power", "W", "power_w", 7, CELL_RATE, 1, GPU(power_w)},
    {"sm_clk", "MHz", "sm_clock_mhz", 7, CELL_RATE, 0, GPU(sm_clock_mhz)},
};

static const struct column client_columns[] = {
    {NULL, NULL, "id", 0, CELL_U32, 0, CLI(client_id)},
    {"pid", "", "pid", 7, CELL_I32, 0, CLI(pid)},
    {"app", "", "app", -16, CELL_NAME, 0, CLI(app)},
    {"class", "", "class", -10, CELL_NAME, 0, CLI(class_name)},
    {"pod", "", NULL, -40, CELL_NAME, 0, TCLI(pod_text, POSSTAT_PODS)}, /* text only */
    {"launches", "op/s", "launches_per_s", 9, CELL_RATE, 1, CLI(launches_per_s)},
    {"queued", "ops", "queued", 7, CELL_LEVEL, 0, CLI(queued)},
    {"inflight", "ops", "in_flight", 8, CELL_LEVEL, 0, CLI(in_flight)},
    {"wait_p50", "us", "wait_p50_us", 9, CELL_WHOLE, 0, CLI(wait_p50_us)},
    {"wait_p99", "us", "wait_p99_us", 9, CELL_WHOLE, 0, CLI(wait_p99_us)},
    {"gpu", "ms/s", "gpu_ms_per_s", 7, CELL_RATE, 1, CLI(gpu_ms_per_s)},
    {"req", "/s", "requests_per_s", 7, CELL_RATE, 1, CLI(requests_per_s)},
    {"req_p50", "ms", "req_p50_ms", 8, CELL_RATE, 1, CLI(req_p50_ms)},
    {"req_p99", "ms", "req_p99_ms", 8, CELL_RATE, 1, CLI(req_p99_ms)},
    {"held", "", "held", -4, CELL_BOOL, 0, CLI(held)},
    {"cpu", "", "cpu", -4, CELL_NAME, 0, CLI(cpu)},
    {"runq", "us", "runq_us", 7, CELL_RATE, 1, TCLI(runq_us, POS_TELE_CPU)},
    {"runq", "ms/s", "runq_ms_per_s", 7, CELL_RATE, 1, TCLI(runq_ms_per_s, POS_TELE_CPU)},
    {"offcpu", "ms/s", "offcpu_ms_per_s", 7, CELL_RATE, 1, TCLI(offcpu_ms_per_s, POS_TELE_CPU)},
    {"ioctl", "/s", "ioctls_per_s", 7, CELL_RATE, 0, TCLI(ioctls_per_s, POS_TELE_IOCTL)},
    {"ioctl", "us", "ioctl_us", 7, CELL_RATE, 1, TCLI(ioctl_us, POS_TELE_IOCTL)},
    {"used", "mem", "mem_used_bytes", 8, CELL_BYTES, 0, CLI(mem_used)},
    {"limit", "mem", "mem_limit", 8, CELL_NAME, 0, CLI(mem_limit_text)},
    {"peak", "mem", "mem_peak_bytes", 8, CELL_BYTES, 0, CLI(mem_peak)},
    {"refused", "allocs", "mem_refused", 7, CELL_WHOLE, 0, CLI(mem_refused)},
    {NULL, NULL, "mem_limit_bytes", 0, CELL_BYTES, 0, CLI(mem_limit)},
    {NULL, NULL, "sync_lag_p50_us", 0, CELL_RATE, 0, CLI(sync_lag_p50_us)},
    {NULL, NULL, "sync_lag_p99_us", 0, CELL_RATE, 0, CLI(sync_lag_p99_us)},
    {NULL, NULL, "op_us", 0, CELL_RATE, 0, CLI(op_us)},
    {NULL, NULL, "stalls", 0, CELL_WHOLE, 0, CLI(stalls)},
    {NULL, NULL, "span_s", 0, CELL_RATE, 0, CLI(span_s)},
    {NULL, NULL, "namespace", 0, CELL_NAME, 0, CLI(k8s_namespace)},
    {NULL, NULL, "pod", 0, CELL_NAME, 0, CLI(pod)},
    {NULL, NULL, "container", 0, CELL_NAME, 0, CLI(container)},
    {NULL, NULL, "pod_devices", 0, CELL_NAME, 0, CLI(pod_devices)},
};

#define UNM(field) offsetof(struct posstat_unmanaged_row, field), POS_TELE_DISCOVERY

static const struct column unmanaged_columns[] = {
    {"pid", "", "pid", 7, CELL_I32, 0, UNM(pid)},
    {"command", "", "command", -16, CELL_NAME, 0, UNM(comm)},
    {"contexts", "", "contexts", 8, CELL_WHOLE, 0, UNM(contexts)},
    {"devices", "", "devices", -8, CELL_NAME, 0, UNM(devices)},
    {"launches", "op/s", "launches_per_s", 9, CELL_RATE, 1, UNM(launches_per_s)},
    {"seen", "s", "seen_s", 8, CELL_RATE, 1, UNM(seen_s)},
};

#define NCOLS(t) (sizeof(t) / sizeof((t)[0]))

static double double_at(const void *row, size_t offset)
{
    double v;
    memcpy(&v, (const char *)row + offset, sizeof v);
    return v;
}

static int int_at(const void *row, size_t offset)
{
    int v;
    memcpy(&v, (const char *)row + offset, sizeof v);
    return v;
}

static uint32_t u32_at(const void *row, size_t offset)
{
    uint32_t v;
    memcpy(&v, (const char *)row + offset, sizeof v);
    return v;
}

/* --- text ------------------------------------------------------------------------------- */

struct line {
    char buf[1024];
    size_t len;
};

static void line_add(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void line_add(struct line *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(l->buf + l->len, sizeof l->buf - l->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        l->len += (size_t)n < sizeof l->buf - l->len ? (size_t)n : sizeof l->buf - l->len - 1;
}

/* Ends the line without trailing blanks, so that the last left-aligned column is not padded. */
static void line_put(FILE *out, struct line *l)
{
    while (l->len && l->buf[l->len - 1] == ' ')
        l->len--;
    l->buf[l->len] = '\0';
    fprintf(out, "%s\n", l->buf);
    l->len = 0;
}

/* A name as one whitespace-free text field of at most MAX bytes: anything but printable,
 * non-blank ASCII becomes '?', and an empty name is '-'. */
static void text_name(char *dst, size_t max, const char *src)
{
    size_t i = 0;
    for (; i < max && src[i]; i++) {
        unsigned char c = (unsigned char)src[i];
        dst[i] = c > 0x20 && c < 0x7f ? (char)c : '?';
    }
    if (i == 0)
        dst[i++] = '-';
    dst[i] = '\0';
}

static void text_cell(char *dst, size_t size, const struct column *c, const void *row,
                      enum posstat_report_kind kind)
{
    double v = c->kind == CELL_RATE || c->kind == CELL_WHOLE || c->kind == CELL_LEVEL ||
                       c->kind == CELL_BYTES
                   ? double_at(row, c->offset)
                   : 0.0;
    if (isnan(v)) {
        snprintf(dst, size, "-");
        return;
    }
    switch (c->kind) {
    case CELL_NAME:
        text_name(dst, (size_t)abs(c->width) < size ? (size_t)abs(c->width) : size - 1,
                  (const char *)row + c->offset);
        break;
    case CELL_I32:
        snprintf(dst, size, "%d", int_at(row, c->offset));
        break;
    case CELL_U32:
        snprintf(dst, size, "%u", u32_at(row, c->offset));
        break;
    case CELL_RATE:
        snprintf(dst, size, "%.*f", c->decimals, v);
        break;
    case CELL_WHOLE:
        snprintf(dst, size, "%.0f", v);
        break;
    case CELL_LEVEL:
        snprintf(dst, size, "%.*f", kind == POSSTAT_AVERAGE ? 1 : 0, v);
        break;
    case CELL_BOOL: {
        static const char *const words[] = {"-", "no", "yes"};
        int b = int_at(row, c->offset);
        snprintf(dst, size, "%s", words[b < 0 ? 0 : b ? 2 : 1]);
        break;
    }
    case CELL_BYTES:
        sched_mem_bytes_format((uint64_t)v, dst, size);
        break;
    }
}

/* Whether text shows column C when posd runs the telemetry parts TELEMETRY. */
static int text_shows(const struct column *c, uint32_t telemetry)
{
    return c->title && (c->needs & telemetry) == c->needs;
}

static void text_headers(FILE *out, int time_width, const struct column *cols, size_t ncols,
                         uint32_t telemetry)
{
    struct line names = {.len = 0}, units = {.len = 0};
    line_add(&names, "%-*s", time_width, "# time");
    line_add(&units, "%-*s", time_width, time_width > 8 ? "# s" : "#");
    for (size_t i = 0; i < ncols; i++) {
        if (!text_shows(&cols[i], telemetry))
            continue;
        line_add(&names, "  %*s", cols[i].width, cols[i].title);
        line_add(&units, "  %*s", cols[i].width, cols[i].unit);
    }
    line_put(out, &names);
    line_put(out, &units);
}

static void text_row(FILE *out, int time_width, const char *when, const struct column *cols,
                     size_t ncols, const void *row, const struct posstat_report *r)
{
    struct line l = {.len = 0};
    line_add(&l, "%-*s", time_width, when);
    for (size_t i = 0; i < ncols; i++) {
        if (!text_shows(&cols[i], r->telemetry))
            continue;
        char cell[64];
        text_cell(cell, sizeof cell, &cols[i], row, r->kind);
        line_add(&l, "  %*s", cols[i].width, cell);
    }
    line_put(out, &l);
}

/* The time column of R (and its width): Average:, epoch seconds (-H) or the local time. */
static int report_when(const struct posstat_report *r, char *when, size_t len)
{
    int tw = r->epoch_time ? 10 : 8;
    snprintf(when, len, "Average:");
    if (r->kind != POSSTAT_AVERAGE && r->epoch_time) {
        snprintf(when, len, "%.0f", floor(r->time));
    } else if (r->kind != POSSTAT_AVERAGE) {
        time_t t = (time_t)r->time;
        struct tm tm;
        if (!localtime_r(&t, &tm) || !strftime(when, len, "%H:%M:%S", &tm))
            snprintf(when, len, "-");
    }
    return tw;
}

int posstat_render_unmanaged_text(FILE *out, const struct posstat_report *r)
{
    char when[24];
    int tw = report_when(r, when, sizeof when);
    text_headers(out, tw, device_columns, NCOLS(device_columns), r->telemetry);
    text_row(out, tw, when, device_columns, NCOLS(device_columns), &r->dev, r);
    text_headers(out, tw, unmanaged_columns, NCOLS(unmanaged_columns), r->telemetry);
    for (uint32_t i = 0; i < r->nunmanaged; i++)
        text_row(out, tw, when, unmanaged_columns, NCOLS(unmanaged_columns), &r->unmanaged[i], r);
    if (!(r->telemetry & POS_TELE_DISCOVERY))
        fprintf(out, "# posd does not run GPU process discovery (eBPF telemetry, see its log)\n");
    if (r->dev.unmanaged > r->nunmanaged && !r->everyone)
        fprintf(out, "# %.0f unmanaged processes: only root and the group posd see which\n",
                r->dev.unmanaged);
    else if (r->dev.unmanaged > r->nunmanaged)
        fprintf(out, "# %.0f unmanaged processes, %u shown: posd's reply holds no more\n",
                r->dev.unmanaged, r->nunmanaged);
    if (r->dev.unmanaged_untracked > 0)
        fprintf(out,
                "# %.0f more processes initialised the driver while posd's kernel-side table "
                "of GPU processes was full: not tracked, not shown\n",
                r->dev.unmanaged_untracked);
    return ferror(out) ? -EIO : 0;
}

int posstat_render_text(FILE *out, const struct posstat_report *r)
{
    char when[24];
    int tw = report_when(r, when, sizeof when);
    unsigned show = r->show ? r->show : POSSTAT_SHOW_DEVICE | POSSTAT_SHOW_APPS;
    if (show & POSSTAT_SHOW_DEVICE) {
        text_headers(out, tw, device_columns, NCOLS(device_columns), r->telemetry);
        text_row(out, tw, when, device_columns, NCOLS(device_columns), &r->dev, r);
        if (r->show_gpu) {
            text_headers(out, tw, gpu_columns, NCOLS(gpu_columns), r->telemetry);
            text_row(out, tw, when, gpu_columns, NCOLS(gpu_columns), &r->gpu, r);
        }
    }
    if (!(show & POSSTAT_SHOW_APPS))
        return ferror(out) ? -EIO : 0;
    text_headers(out, tw, client_columns, NCOLS(client_columns), r->telemetry);
    for (uint32_t i = 0; i < r->nclients; i++)
        text_row(out, tw, when, client_columns, NCOLS(client_columns), &r->clients[i], r);
    if (r->clients_not_shown)
        fprintf(out, "# %u more clients in posd than its reply carries\n", r->clients_not_shown);
    return ferror(out) ? -EIO : 0;
}

/* --- JSON ------------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at S (N bytes left), or 0 when there is none. */
static size_t utf8_sequence(const unsigned char *s, size_t n)
{
    static const struct {
        unsigned char mask, lead;
        size_t len;
        uint32_t min;
    } leads[] = {{0xe0, 0xc0, 2, 0x80}, {0xf0, 0xe0, 3, 0x800}, {0xf8, 0xf0, 4, 0x10000}};

    if (s[0] < 0x80)
        return 1;
    for (size_t k = 0; k < sizeof leads / sizeof leads[0]; k++) {
        if ((s[0] & leads[k].mask) != leads[k].lead)
            continue;
        if (leads[k].len > n)
            return 0;
        uint32_t cp = s[0] & (unsigned char)~leads[k].mask;
        for (size_t i = 1; i < leads[k].len; i++) {
            if ((s[i] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i] & 0x3f);
        }
        int surrogate = cp >= 0xd800 && cp <= 0xdfff;
        return cp < leads[k].min || cp > 0x10ffff || surrogate ? 0 : leads[k].len;
    }
    return 0;
}

/* A JSON string: quotes and backslashes escaped, control characters as \n-style or \u00XX
 * escapes, valid UTF-8 kept, and each byte of invalid UTF-8 replaced by U+FFFD. */
static void json_string(FILE *out, const char *str)
{
    static const char short_escapes[0x20] = {
        ['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't'};
    const unsigned char *s = (const unsigned char *)str;
    size_t n = strlen(str);
    fputc('"', out);
    while (n) {
        size_t len = utf8_sequence(s, n);
        if (len == 0) {
            fputs("\\ufffd", out);
            len = 1;
        } else if (*s == '"' || *s == '\\') {
            fprintf(out, "\\%c", *s);
        } else if (*s < 0x20 && short_escapes[*s]) {
            fprintf(out, "\\%c", short_escapes[*s]);
        } else if (*s < 0x20 || *s == 0x7f) {
            fprintf(out, "\\u%04x", *s);
        } else {
            fwrite(s, 1, len, out);
        }
        s += len;
        n -= len;
    }
    fputc('"', out);
}

static void json_number(FILE *out, double v, int decimals)
{
    if (isnan(v))
        fputs("null", out);
    else
        fprintf(out, "%.*f", decimals, v);
}

static void json_value(FILE *out, const struct column *c, const void *row,
                       enum posstat_report_kind kind)
{
    switch (c->kind) {
    case CELL_NAME:
        json_string(out, (const char *)row + c->offset);
        break;
    case CELL_I32:
        fprintf(out, "%d", int_at(row, c->offset));
        break;
    case CELL_U32:
        fprintf(out, "%u", u32_at(row, c->offset));
        break;
    case CELL_RATE:
        json_number(out, double_at(row, c->offset), 3);
        break;
    case CELL_WHOLE:
    case CELL_BYTES:
        json_number(out, double_at(row, c->offset), 0);
        break;
    case CELL_LEVEL:
        json_number(out, double_at(row, c->offset), kind == POSSTAT_AVERAGE ? 3 : 0);
        break;
    case CELL_BOOL: {
        static const char *const words[] = {"null", "false", "true"};
        int b = int_at(row, c->offset);
        fputs(words[b < 0 ? 0 : b ? 2 : 1], out);
        break;
    }
    }
}

static void json_object(FILE *out, const struct column *cols, size_t ncols, const void *row,
                        enum posstat_report_kind kind)
{
    fputc('{', out);
    int n = 0;
    for (size_t i = 0; i < ncols; i++) {
        if (!cols[i].key) /* text only */
            continue;
        fprintf(out, "%s\"%s\":", n++ ? "," : "", cols[i].key);
        json_value(out, &cols[i], row, kind);
    }
    fputc('}', out);
}

int posstat_render_json(FILE *out, const struct posstat_report *r)
{
    static const char *const kinds[] = {
        [POSSTAT_TOTAL] = "total", [POSSTAT_INTERVAL] = "interval", [POSSTAT_AVERAGE] = "average"};
    fprintf(out, "{\"time\":%.3f,\"report\":\"%s\",\"interval_s\":", r->time, kinds[r->kind]);
    json_number(out, r->dev.span_s, 3);
    unsigned show = r->show ? r->show : POSSTAT_SHOW_DEVICE | POSSTAT_SHOW_APPS;
    if (show & POSSTAT_SHOW_DEVICE) {
        fputs(",\"device\":", out);
        json_object(out, device_columns, NCOLS(device_columns), &r->dev, r->kind);
        if (r->show_gpu) {
            fputs(",\"gpu\":", out);
            json_object(out, gpu_columns, NCOLS(gpu_columns), &r->gpu, r->kind);
        }
    }
    if (show & POSSTAT_SHOW_APPS) {
        fputs(",\"clients\":[", out);
        for (uint32_t i = 0; i < r->nclients; i++) {
            if (i)
                fputc(',', out);
            json_object(out, client_columns, NCOLS(client_columns), &r->clients[i], r->kind);
        }
        fputc(']', out);
    }
    fputs(",\"unmanaged\":[", out);
    for (uint32_t i = 0; i < r->nunmanaged; i++) {
        if (i)
            fputc(',', out);
        json_object(out, unmanaged_columns, NCOLS(unmanaged_columns), &r->unmanaged[i], r->kind);
    }
    fputs("]}\n", out);
    return ferror(out) ? -EIO : 0;
}

/* --- kernel profiles (posstat -k) --------------------------------------------------------- */

int posstat_parse_kernels(const void *msg, size_t len, struct posstat_kernels *out, char *err,
                          size_t errlen)
{
    const void *bodyp;
    size_t blen;
    int rc = posclient_check_msg(msg, len, POS_MSG_KERNELS, &bodyp, &blen, err, errlen);
    if (rc < 0)
        return rc;
    const char *body = bodyp;
    struct pos_kernels_reply r;
    if (blen < sizeof r)
        return posclient_fail(-EPROTO, err, errlen, "bad KERNELS reply from posd: %zu bytes", blen);
    memcpy(&r, body, sizeof r);
    if ((uint64_t)r.nkernels * sizeof(struct pos_kernel_stats) != blen - sizeof r ||
        r.nkernels > r.total)
        return posclient_fail(-EPROTO, err, errlen, "bad KERNELS reply from posd: %u kernels in %zu bytes",
                    r.nkernels, blen);
    struct pos_kernel_stats *k = calloc(r.nkernels ? r.nkernels : 1, sizeof *k);
    if (!k)
        return posclient_fail(-ENOMEM, err, errlen, "out of memory");
    memcpy(k, body + sizeof r, r.nkernels * sizeof *k);
    for (uint32_t i = 0; i < r.nkernels; i++)
        if (!posclient_terminated(k[i].name, sizeof k[i].name)) {
            free(k);
            return posclient_fail(-EPROTO, err, errlen, "bad KERNELS reply from posd: a name not ended");
        }
    out->uptime_s = (double)r.uptime_ns / 1e9;
    out->n = r.nkernels;
    out->total = r.total;
    out->k = k;
    return 0;
}

void posstat_kernels_free(struct posstat_kernels *ks)
{
    free(ks->k);
    ks->k = NULL;
    ks->n = 0;
}

static int same_kernel(const struct pos_kernel_stats *a, const struct pos_kernel_stats *b)
{
    return a->key == b->key && a->uid == b->uid && memcmp(a->grid, b->grid, sizeof a->grid) == 0 &&
           memcmp(a->block, b->block, sizeof a->block) == 0;
}

/* Launches a second of K: over the interval since PREV (the same kernel in it), else since
 * posd started. */
static double kernel_rate(const struct pos_kernel_stats *k, const struct posstat_kernels *cur,
                          const struct posstat_kernels *prev)
{
    if (prev && cur->uptime_s > prev->uptime_s) {
        for (uint32_t i = 0; i < prev->n; i++)
            if (same_kernel(&prev->k[i], k))
                return (double)(k->launches - prev->k[i].launches) /
                       (cur->uptime_s - prev->uptime_s);
        return (double)k->launches / (cur->uptime_s - prev->uptime_s);
    }
    return cur->uptime_s > 0 ? (double)k->launches / cur->uptime_s : 0;
}

int posstat_render_kernels(FILE *out, const struct posstat_kernels *cur,
                           const struct posstat_kernels *prev, int json, uint32_t top)
{
    uint32_t n = top && top < cur->n ? top : cur->n;
    if (json) {
        fprintf(out, "{\"uptime_s\":%.3f,\"total\":%u,\"kernels\":[", cur->uptime_s, cur->total);
        for (uint32_t i = 0; i < n; i++) {
            const struct pos_kernel_stats *k = &cur->k[i];
            fprintf(out, "%s{\"name\":", i ? "," : "");
            json_string(out, k->name);
            fprintf(out,
                    ",\"key\":\"%016llx\",\"uid\":%u,\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],"
                    "\"launches\":%llu,\"launches_per_s\":",
                    (unsigned long long)k->key, k->uid, k->grid[0], k->grid[1], k->grid[2],
                    k->block[0], k->block[1], k->block[2], (unsigned long long)k->launches);
            json_number(out, kernel_rate(k, cur, prev), 1);
            fprintf(out, ",\"samples\":%llu,\"mean_us\":", (unsigned long long)k->samples);
            json_number(out, k->samples ? (double)k->mean_ns / 1e3 : NAN, 2);
            fputs(",\"sd_us\":", out);
            json_number(out, k->samples > 1 ? (double)k->sd_ns / 1e3 : NAN, 2);
            fprintf(out, ",\"corun_samples\":%llu,\"corun_ratio\":",
                    (unsigned long long)k->co_samples);
            json_number(out, k->co_samples ? k->co_ratio_milli / 1000.0 : NAN, 3);
            fputc('}', out);
        }
        fputs("]}\n", out);
        return ferror(out) ? -EIO : 0;
    }
    fprintf(out, "# %-32s %6s %13s %9s %10s %9s %9s %7s %7s\n", "kernel", "uid", "grid", "block",
            "launches", "mean", "sd", "samples", "corun");
    fprintf(out, "# %-32s %6s %13s %9s %10s %9s %9s %7s %7s\n", "", "", "", "", "/s", "us", "us",
            "", "x solo");
    for (uint32_t i = 0; i < n; i++) {
        const struct pos_kernel_stats *k = &cur->k[i];
        char name[48], grid[40], block[40], mean[24], sd[24], co[24];
        /* names are the clients' bytes: printable ASCII only on a terminal */
        size_t j = 0;
        for (const char *p = k->name; *p && j < 32; p++)
            name[j++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
        name[j] = '\0';
        if (!j)
            snprintf(name, sizeof name, "%016llx", (unsigned long long)k->key);
        snprintf(grid, sizeof grid, "%u,%u,%u", k->grid[0], k->grid[1], k->grid[2]);
        snprintf(block, sizeof block, "%u,%u,%u", k->block[0], k->block[1], k->block[2]);
        snprintf(mean, sizeof mean, k->samples ? "%.2f" : "-", (double)k->mean_ns / 1e3);
        snprintf(sd, sizeof sd, k->samples > 1 ? "%.2f" : "-", (double)k->sd_ns / 1e3);
        snprintf(co, sizeof co, k->co_samples ? "%.3f" : "-", k->co_ratio_milli / 1000.0);
        fprintf(out, "  %-32s %6u %13s %9s %10.1f %9s %9s %7llu %7s\n", name, k->uid, grid, block,
                kernel_rate(k, cur, prev), mean, sd, (unsigned long long)k->samples, co);
    }
    if (cur->total > n)
        fprintf(out, "# %u more kernels\n", cur->total - n);
    return ferror(out) ? -EIO : 0;
}
