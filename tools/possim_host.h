/* possim's host CPU: a fixed number of cores shared by the host tasks of a run (each client's
 * launching thread and collector, posd) as Linux's fair scheduler shares them, idealised as
 * weighted processor sharing: every runnable task runs at once, at the rate its weight gives
 * it (a task never gets more than one core), so a task with W of CPU work left ends when that
 * much has been served. Weights are CFS's: nice 0 is 1024, each nice step 1.25 times less,
 * SCHED_IDLE 3. Pure and deterministic: times are integer nanoseconds of virtual time. */
#ifndef POS_TOOLS_POSSIM_HOST_H
#define POS_TOOLS_POSSIM_HOST_H

#include <stddef.h>
#include <stdint.h>

#define POSSIM_HOST_NONE INT64_MAX

struct possim_host_task {
    double weight;
    double left; /* ns of CPU work left; INFINITY: runnable until stopped (a spin) */
    double rate; /* cores it gets now (0..1) */
    int on;      /* runnable */
};

struct possim_host {
    int cores;
    size_t n;
    struct possim_host_task *t;
    int64_t at;     /* every task's left is as of this time */
    int64_t next_t; /* the earliest end of a runnable task's work, POSSIM_HOST_NONE if none */
    size_t next_i;
    double busy_ns; /* core time served, over all tasks */
};

/* The CFS weight of a normal task of nice NICE (-20..19), or of a SCHED_IDLE one. */
double possim_host_weight(int nice, int sched_idle);

/* NTASKS tasks on CORES (>= 1) cores, each weighted 1024 until set. Returns 0 or -ENOMEM. */
int possim_host_init(struct possim_host *h, int cores, size_t ntasks);
void possim_host_free(struct possim_host *h);
void possim_host_set_weight(struct possim_host *h, size_t task, double weight);
/* The same at T while the host runs: what was served up to T at the old weight stays. */
void possim_host_reweight(struct possim_host *h, size_t task, double weight, int64_t t);

/* Task TASK becomes runnable at T with WORK_NS of CPU work (INFINITY: until stopped). */
void possim_host_run(struct possim_host *h, size_t task, double work_ns, int64_t t);
/* Task TASK stops being runnable at T (its work, if any was left, is dropped). */
void possim_host_stop(struct possim_host *h, size_t task, int64_t t);
/* The task whose work ends first, at h->next_t (ties: the lowest task), ended at that time:
 * it is no longer runnable. Returns it. Call only when h->next_t != POSSIM_HOST_NONE. */
size_t possim_host_finish(struct possim_host *h);

#endif
