/* possim's host CPU (see possim_host.h): weighted processor sharing of a few cores, or their
 * time slices. */
#include "tools/possim_host.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#define WEIGHT_NICE0 1024.0
#define WEIGHT_IDLE  3.0 /* the kernel's weight of a SCHED_IDLE task */

double possim_host_weight(int nice, int sched_idle)
{
    if (sched_idle)
        return WEIGHT_IDLE;
    /* CFS: each nice level is worth about 10% of CPU against a task one level away */
    return round(WEIGHT_NICE0 / pow(1.25, nice));
}

int possim_host_init(struct possim_host *h, int cores, size_t ntasks)
{
    *h = (struct possim_host){
        .cores = cores > 0 ? cores : 1, .n = ntasks, .next_t = POSSIM_HOST_NONE};
    h->t = calloc(ntasks ? ntasks : 1, sizeof *h->t);
    if (!h->t)
        return -ENOMEM;
    for (size_t i = 0; i < ntasks; i++) {
        h->t[i].weight = WEIGHT_NICE0;
        h->t[i].core = -1;
    }
    return 0;
}

void possim_host_set_slice(struct possim_host *h, int64_t slice_ns)
{
    h->slice_ns = slice_ns > 0 ? slice_ns : 0;
}

/* ---- time slices ------------------------------------------------------------------------ */

/* Serves every running task up to T: its work, its vruntime; the least vruntime of the
 * runnable tasks never goes back. */
static void sl_advance(struct possim_host *h, int64_t t)
{
    if (t <= h->at)
        return;
    double dt = (double)(t - h->at), least = INFINITY;
    int waits = 0;
    for (size_t i = 0; i < h->n; i++) {
        struct possim_host_task *k = &h->t[i];
        if (!k->on)
            continue;
        waits |= k->core < 0;
        if (k->core >= 0) {
            h->busy_ns += dt;
            k->served_ns += dt;
            if (!k->rt)
                k->vruntime += dt * WEIGHT_NICE0 / k->weight;
            if (isfinite(k->left))
                k->left = k->left > dt ? k->left - dt : 0;
        }
        if (!k->rt && k->vruntime < least)
            least = k->vruntime;
    }
    if (isfinite(least) && least > h->min_vruntime)
        h->min_vruntime = least;
    if (waits)
        h->stall_ns += dt;
    h->at = t;
}

/* The waiting runnable task to run next: a real-time one (the lowest), else the fair one of
 * least vruntime (ties: the lowest); -1 if none waits. */
static long sl_waiting(const struct possim_host *h)
{
    long best = -1;
    for (size_t i = 0; i < h->n; i++) {
        const struct possim_host_task *k = &h->t[i];
        if (!k->on || k->core >= 0)
            continue;
        if (k->rt)
            return (long)i;
        if (best < 0 || k->vruntime < h->t[best].vruntime)
            best = (long)i;
    }
    return best;
}

/* A core no task runs on, or -1. */
static int sl_free_core(const struct possim_host *h)
{
    int running = 0;
    for (size_t i = 0; i < h->n; i++)
        running += h->t[i].on && h->t[i].core >= 0;
    if (running >= h->cores)
        return -1;
    for (int c = 0;; c++) { /* one is free: the lowest */
        int taken = 0;
        for (size_t i = 0; i < h->n && !taken; i++)
            taken = h->t[i].on && h->t[i].core == c;
        if (!taken)
            return c;
    }
}

/* Gives every free core to the waiting task of least vruntime. */
static void sl_fill(struct possim_host *h)
{
    for (;;) {
        long w = sl_waiting(h);
        int c = w < 0 ? -1 : sl_free_core(h);
        if (c < 0)
            return;
        h->t[w].core = c;
        h->t[w].ran_since = h->at;
    }
}

/* The earliest end of a running task's work, or of a slice while a task waits. */
static void sl_find_next(struct possim_host *h)
{
    h->next_t = POSSIM_HOST_NONE;
    int waiting = sl_waiting(h) >= 0;
    for (size_t i = 0; i < h->n; i++) {
        const struct possim_host_task *k = &h->t[i];
        if (!k->on || k->core < 0)
            continue;
        if (isfinite(k->left)) {
            int64_t end = h->at + (int64_t)ceil(k->left);
            if (end < h->next_t) {
                h->next_t = end;
                h->next_i = i;
                h->next_slice = 0;
            }
        }
        if (waiting && !k->rt) {
            /* slices follow one another while it runs (EEVDF renews its deadline each
             * slice): the next boundary after now */
            int64_t end = k->ran_since + ((h->at - k->ran_since) / h->slice_ns + 1) * h->slice_ns;
            if (end < h->next_t) {
                h->next_t = end;
                h->next_i = i;
                h->next_slice = 1;
            }
        }
    }
}

/* The running fair task a waking task of class RT (real-time) or normal may take the core
 * from at once: for a real-time one any fair task, a SCHED_IDLE one first, else the one
 * furthest ahead in vruntime; for a normal one only a SCHED_IDLE task. -1 if none. */
static long sl_preemptible(const struct possim_host *h, int rt)
{
    long best = -1;
    for (size_t i = 0; i < h->n; i++) {
        const struct possim_host_task *k = &h->t[i];
        if (!k->on || k->core < 0 || k->rt)
            continue;
        int idle = k->weight <= WEIGHT_IDLE;
        if (!rt && !idle)
            continue;
        if (best < 0) {
            best = (long)i;
            continue;
        }
        int best_idle = h->t[best].weight <= WEIGHT_IDLE;
        if ((idle && !best_idle) || (idle == best_idle && k->vruntime > h->t[best].vruntime))
            best = (long)i;
    }
    return best;
}

/* A task that wakes takes a free core, or waits for a slice to end: it is placed at the least
 * vruntime (no credit for its sleep) and preempts nobody, as under EEVDF a woken task with no
 * lag and the same slice does not, but a SCHED_IDLE task, which a normal one preempts at
 * once; a real-time task preempts a fair one. */
static void sl_run(struct possim_host *h, size_t task, double work_ns, int64_t t)
{
    sl_advance(h, t);
    struct possim_host_task *k = &h->t[task];
    k->left = work_ns;
    if (!k->on) {
        k->on = 1;
        k->core = -1;
        if (!k->rt && k->vruntime < h->min_vruntime)
            k->vruntime = h->min_vruntime;
        int c = sl_free_core(h);
        if (c < 0 && (k->rt || k->weight > WEIGHT_IDLE)) {
            /* a normal task that wakes preempts a SCHED_IDLE one at once (Linux does), a
             * real-time one any fair task */
            long v = sl_preemptible(h, k->rt);
            if (v >= 0) {
                c = h->t[v].core;
                h->t[v].core = -1;
            }
        }
        if (c >= 0) {
            k->core = c;
            k->ran_since = t;
        }
    }
    sl_find_next(h);
}

static void sl_stop(struct possim_host *h, size_t task, int64_t t)
{
    sl_advance(h, t);
    h->t[task].on = 0;
    h->t[task].left = 0;
    h->t[task].core = -1;
    sl_fill(h);
    sl_find_next(h);
}

static size_t sl_finish(struct possim_host *h)
{
    size_t i = h->next_i;
    sl_advance(h, h->next_t);
    if (!h->next_slice) {
        sl_stop(h, i, h->at);
        return i;
    }
    /* its slice is over and a task waits: the one of least vruntime runs */
    struct possim_host_task *k = &h->t[i];
    long w = sl_waiting(h);
    if (w >= 0 && h->t[w].vruntime < k->vruntime) {
        h->t[w].core = k->core;
        h->t[w].ran_since = h->at;
        k->core = -1;
    }
    sl_find_next(h);
    return POSSIM_HOST_NO_TASK;
}

void possim_host_free(struct possim_host *h)
{
    free(h->t);
    h->t = NULL;
    h->n = 0;
}

void possim_host_set_rt(struct possim_host *h, size_t task, int rt)
{
    h->t[task].rt = rt != 0;
}

void possim_host_set_weight(struct possim_host *h, size_t task, double weight)
{
    h->t[task].weight = weight > 0 ? weight : WEIGHT_IDLE;
}

/* Serves every runnable task its rate up to T. */
static void advance(struct possim_host *h, int64_t t)
{
    if (t <= h->at)
        return;
    double dt = (double)(t - h->at);
    int waits = 0;
    for (size_t i = 0; i < h->n; i++) {
        struct possim_host_task *k = &h->t[i];
        if (!k->on)
            continue;
        waits |= k->rate < 1 - 1e-9;
        h->busy_ns += k->rate * dt;
        k->served_ns += k->rate * dt;
        if (isfinite(k->left)) {
            k->left -= k->rate * dt;
            if (k->left < 0)
                k->left = 0;
        }
    }
    if (waits)
        h->stall_ns += dt;
    h->at = t;
}

/* The rates: with no more runnable tasks than cores each has a core; else the cores are split
 * by weight, a task whose part would exceed a core gets one and the rest is split again among
 * the others (water-filling), so the cores are never idle while a task waits; real-time
 * tasks take their cores first. */
static void share(struct possim_host *h)
{
    size_t on = 0, rt = 0;
    double wsum = 0;
    for (size_t i = 0; i < h->n; i++)
        if (h->t[i].on) {
            on++;
            rt += h->t[i].rt;
            wsum += h->t[i].rt ? 0 : h->t[i].weight;
            h->t[i].rate = -1; /* not yet capped at a core */
        } else {
            h->t[i].rate = 0;
        }
    if (on <= (size_t)h->cores) {
        for (size_t i = 0; i < h->n; i++)
            if (h->t[i].on)
                h->t[i].rate = 1;
        return;
    }
    /* real-time tasks first, a core each while there are cores (more of them: shared) */
    double cores = h->cores, rt_rate = rt <= (size_t)h->cores ? 1 : cores / (double)rt;
    for (size_t i = 0; i < h->n; i++)
        if (h->t[i].on && h->t[i].rt) {
            h->t[i].rate = rt_rate;
            cores -= rt_rate;
        }
    for (int capped = 1; capped && wsum > 0;) {
        capped = 0;
        for (size_t i = 0; i < h->n; i++) {
            struct possim_host_task *k = &h->t[i];
            if (k->on && k->rate < 0 && k->weight * cores / wsum >= 1) {
                k->rate = 1;
                cores -= 1;
                wsum -= k->weight;
                capped = 1;
            }
        }
    }
    for (size_t i = 0; i < h->n; i++)
        if (h->t[i].on && h->t[i].rate < 0)
            h->t[i].rate = wsum > 0 ? h->t[i].weight * cores / wsum : 0;
}

/* The earliest end of a runnable task's work (ties: the lowest task). */
static void find_next(struct possim_host *h)
{
    h->next_t = POSSIM_HOST_NONE;
    for (size_t i = 0; i < h->n; i++) {
        const struct possim_host_task *k = &h->t[i];
        if (!k->on || !isfinite(k->left) || k->rate <= 0)
            continue;
        double d = ceil(k->left / k->rate);
        int64_t end = d >= (double)(INT64_MAX / 2) ? INT64_MAX / 2 : h->at + (int64_t)d;
        if (end < h->next_t) {
            h->next_t = end;
            h->next_i = i;
        }
    }
}

void possim_host_reweight(struct possim_host *h, size_t task, double weight, int64_t t)
{
    if (h->slice_ns) {
        sl_advance(h, t);
        possim_host_set_weight(h, task, weight);
        return; /* the vruntime from now on grows at the new weight's pace */
    }
    advance(h, t);
    possim_host_set_weight(h, task, weight);
    share(h);
    find_next(h);
}

void possim_host_run(struct possim_host *h, size_t task, double work_ns, int64_t t)
{
    if (h->slice_ns) {
        sl_run(h, task, work_ns, t);
        return;
    }
    advance(h, t);
    h->t[task].on = 1;
    h->t[task].left = work_ns;
    share(h);
    find_next(h);
}

void possim_host_stop(struct possim_host *h, size_t task, int64_t t)
{
    if (!h->t[task].on)
        return;
    if (h->slice_ns) {
        sl_stop(h, task, t);
        return;
    }
    advance(h, t);
    h->t[task].on = 0;
    h->t[task].left = 0;
    share(h);
    find_next(h);
}

size_t possim_host_finish(struct possim_host *h)
{
    if (h->slice_ns)
        return sl_finish(h);
    size_t i = h->next_i;
    advance(h, h->next_t);
    h->t[i].on = 0;
    h->t[i].left = 0;
    share(h);
    find_next(h);
    return i;
}
