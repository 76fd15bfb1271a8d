/* possim's host CPU: a fixed number of cores shared by the host tasks of a run (each client's
 * launching thread and collector, posd) as Linux's fair scheduler shares them, idealised as
 * weighted processor sharing: every runnable task runs at once, at the rate its weight gives
 * it (a task never gets more than one core), so a task with W of CPU work left ends when that
 * much has been served. Or, with time slices, as CFS does it: a task per core at a time, the
 * least virtual runtime first, a slice at least while others wait. Weights are CFS's: nice 0
 * is 1024, each nice step 1.25 times less, SCHED_IDLE 3; a real-time task runs before them
 * all. Pure and deterministic: times are
 * integer nanoseconds of virtual time. */
#ifndef POS_TOOLS_POSSIM_HOST_H
#define POS_TOOLS_POSSIM_HOST_H

#include <stddef.h>
#include <stdint.h>

#define POSSIM_HOST_NONE INT64_MAX

#define POSSIM_HOST_NO_TASK ((size_t)-1)

struct possim_host_task {
    double weight;
    int rt; /* real-time (SCHED_FIFO): runs before every fair task, preempting one as it wakes */
    double left; /* ns of CPU work left; INFINITY: runnable until stopped (a spin) */
    double rate; /* cores it gets now (0..1) */
    int on;      /* runnable */
    double served_ns; /* core time it has had, in all */
    /* time slices only (slice_ns > 0) */
    double vruntime;   /* ns served, scaled by 1024 / weight, as CFS keeps it */
    int core;          /* the core it runs on, -1 when waiting or not runnable */
    int64_t ran_since; /* when its current slice began */
};

struct possim_host {
    int cores;
    size_t n;
    struct possim_host_task *t;
    int64_t at;     /* every task's left is as of this time */
    int64_t next_t; /* the earliest end of a runnable task's work, POSSIM_HOST_NONE if none;
                     * with time slices, or of a slice while a task waits */
    size_t next_i;
    int next_slice; /* next_t ends next_i's slice, not its work */
    double busy_ns; /* core time served, over all tasks */
    double stall_ns; /* wall time during which some runnable task waited for a core (Linux's
                      * PSI "some" of the CPU): fluid, one served at less than a core */
    /* Time slices (possim_host_set_slice): 0, the fluid sharing above; else each core runs
     * one task at a time, in slices of SLICE_NS from when it got the core (EEVDF's base
     * slice): at a slice's end the waiting task of least vruntime takes the core if it is
     * behind the running one. A task that wakes takes a free core or waits, placed at the
     * least vruntime of the runnable tasks; it preempts nobody (under EEVDF a woken task with
     * no lag and the same slice does not) but a SCHED_IDLE task (weight 3), which a woken
     * normal task preempts at once, as Linux's fair class does. */
    int64_t slice_ns;
    double min_vruntime;
};

/* The CFS weight of a normal task of nice NICE (-20..19), or of a SCHED_IDLE one. */
double possim_host_weight(int nice, int sched_idle);

/* NTASKS tasks on CORES (>= 1) cores, each weighted 1024 until set. Returns 0 or -ENOMEM. */
int possim_host_init(struct possim_host *h, int cores, size_t ntasks);
void possim_host_free(struct possim_host *h);
void possim_host_set_weight(struct possim_host *h, size_t task, double weight);
/* TASK real-time (SCHED_FIFO, one priority) or not, set before the host runs: runnable, it
 * has a core before any fair task (with slices: it preempts one as it wakes, the least
 * important, and no slice ends it; fluid: a core of its own while there are cores). */
void possim_host_set_rt(struct possim_host *h, size_t task, int rt);
/* Time slices of SLICE_NS (0: fluid sharing, the default), set before the host runs. */
void possim_host_set_slice(struct possim_host *h, int64_t slice_ns);
/* The same at T while the host runs: what was served up to T at the old weight stays. */
void possim_host_reweight(struct possim_host *h, size_t task, double weight, int64_t t);

/* Task TASK becomes runnable at T with WORK_NS of CPU work (INFINITY: until stopped). */
void possim_host_run(struct possim_host *h, size_t task, double work_ns, int64_t t);
/* Task TASK stops being runnable at T (its work, if any was left, is dropped). */
void possim_host_stop(struct possim_host *h, size_t task, int64_t t);
/* The task whose work ends first, at h->next_t (ties: the lowest task), ended at that time:
 * it is no longer runnable. Returns it. With time slices, h->next_t may instead end a slice:
 * the cores are given anew and POSSIM_HOST_NO_TASK is returned. Call only when h->next_t !=
 * POSSIM_HOST_NONE. */
size_t possim_host_finish(struct possim_host *h);

#endif
