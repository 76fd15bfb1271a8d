/* possim's host CPU (see possim_host.h): weighted processor sharing of a few cores. */
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
    *h = (struct possim_host){.cores = cores > 0 ? cores : 1, .n = ntasks,
                              .next_t = POSSIM_HOST_NONE};
    h->t = calloc(ntasks ? ntasks : 1, sizeof *h->t);
    if (!h->t)
        return -ENOMEM;
    for (size_t i = 0; i < ntasks; i++)
        h->t[i].weight = WEIGHT_NICE0;
    return 0;
}

void possim_host_free(struct possim_host *h)
{
    free(h->t);
    h->t = NULL;
    h->n = 0;
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
    for (size_t i = 0; i < h->n; i++) {
        struct possim_host_task *k = &h->t[i];
        if (!k->on)
            continue;
        h->busy_ns += k->rate * dt;
        if (isfinite(k->left)) {
            k->left -= k->rate * dt;
            if (k->left < 0)
                k->left = 0;
        }
    }
    h->at = t;
}

/* The rates: with no more runnable tasks than cores each has a core; else the cores are split
 * by weight, a task whose part would exceed a core gets one and the rest is split again among
 * the others (water-filling), so the cores are never idle while a task waits. */
static void share(struct possim_host *h)
{
    size_t on = 0;
    double wsum = 0;
    for (size_t i = 0; i < h->n; i++)
        if (h->t[i].on) {
            on++;
            wsum += h->t[i].weight;
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
    double cores = h->cores;
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
    advance(h, t);
    possim_host_set_weight(h, task, weight);
    share(h);
    find_next(h);
}

void possim_host_run(struct possim_host *h, size_t task, double work_ns, int64_t t)
{
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
    advance(h, t);
    h->t[task].on = 0;
    h->t[task].left = 0;
    share(h);
    find_next(h);
}

size_t possim_host_finish(struct possim_host *h)
{
    size_t i = h->next_i;
    advance(h, h->next_t);
    h->t[i].on = 0;
    h->t[i].left = 0;
    share(h);
    find_next(h);
    return i;
}
