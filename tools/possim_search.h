/* possim search: static stage schedules for a known mix (docs/schedule.md), found as POS and
 * IOS find theirs. A stage runs a contiguous run of each model's next operators (possibly
 * none) at once, with a barrier after it; its cost is measured by running it on the virtual-GPU
 * model (sim/gpu_model.c) in virtual time, on fresh contexts and streams. Three methods:
 * sequential (models one at a time), greedy (the stage that overlaps best, stage by stage) and
 * dynamic programming over the models' progress vectors (IOS's method; exact for independent
 * chains under the cost model, within the pruning limits). */
#ifndef POS_TOOLS_POSSIM_SEARCH_H
#define POS_TOOLS_POSSIM_SEARCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sched/schedule.h"
#include "sim/device_presets.h"
#include "sim/request.h"
#include "tools/possim_scenario.h"

#define SEARCH_MAX_MODELS 8

/* ---- the problem, abstracted from the device --------------------------------------------------
 */

/* The cost of a stage in which model m runs its units START[m] .. START[m] + LEN[m] - 1, in ns. */
typedef int64_t (*search_cost_fn)(void *arg, const uint32_t *start, const uint32_t *len);

struct search_problem {
    size_t n;                          /* models */
    uint32_t units[SEARCH_MAX_MODELS]; /* each model's chain of units */
    search_cost_fn cost;
    void *arg;
    /* optional lower bounds: solo[m][u] <= the time unit u of model m takes in any stage; a
     * stage costs at least the largest sum of its runs' (NULL: no bound pruning) */
    const int64_t *solo[SEARCH_MAX_MODELS];
    int64_t barrier_ns; /* added to every stage (the follower's stage barrier in posd) */
};

struct search_limits {
    uint32_t max_run; /* units one model runs in a stage of several models (0: no limit) */
    int bound;        /* prune by lower bounds (exact while co-running never speeds a run) */
    int solo_any;     /* stages of one model may be any length (sequential stays reachable) */
};

struct search_plan {
    size_t nstages;
    uint32_t *runs;        /* [nstages * n] units */
    int64_t *cost_ns;      /* [nstages] without the barrier */
    int64_t total_ns;      /* with the barriers */
    uint64_t evals;        /* cost calls */
    uint64_t states;       /* DP states reached */
    uint64_t pruned;       /* transitions cut by the bounds */
    uint64_t bound_misses; /* stages that came in under their lower bound */
};

int search_sequential(const struct search_problem *p, struct search_plan *out);
int search_greedy(const struct search_problem *p, const struct search_limits *lim,
                  struct search_plan *out);
int search_dp(const struct search_problem *p, const struct search_limits *lim,
              struct search_plan *out);
void search_plan_free(struct search_plan *pl);

/* ---- the mix on the virtual GPU ---------------------------------------------------------------
 */

struct search_model {
    char name[64];
    char client[POSSIM_NAME_MAX];
    uint32_t batch;
    struct sim_request req;
    uint64_t *keys; /* [req.nops] */
    uint32_t nunits;
    uint32_t *unit_start; /* [nunits + 1]: unit u is ops unit_start[u] .. unit_start[u+1]-1 */
    int64_t *unit_solo;   /* [nunits]: each unit alone on the device, ns (a lower bound) */
};

struct search_mix;

/* The mix of SC's clients (each a model at its batch) on SC's device. UNITS > 0 coarsens each
 * model to at most UNITS units of about equal solo time (0: one unit per operator). Returns
 * NULL with a message in ERR. */
struct search_mix *search_mix_new(const struct possim_scenario *sc, uint32_t units, char *err,
                                  size_t errlen);
void search_mix_free(struct search_mix *x);
size_t search_mix_models(const struct search_mix *x);
const struct search_model *search_mix_model(const struct search_mix *x, size_t m);

/* The problem over X's units (its cost function simulates each stage once, then caches). */
void search_mix_problem(struct search_mix *x, int64_t barrier_ns, struct search_problem *p);

/* One stage in operators, simulated (not cached): OP_START[m], OP_LEN[m] per model. */
int64_t search_mix_stage_ns(struct search_mix *x, const uint32_t *op_start, const uint32_t *op_len);

/* Stage simulations and cache hits so far. */
void search_mix_counts(const struct search_mix *x, uint64_t *sims, uint64_t *hits);

/* The schedule of PLAN (in X's units) as a struct pos_schedule (runs in operators). */
int search_plan_schedule(const struct search_mix *x, const struct search_plan *plan,
                         struct pos_schedule *out);

/* The schedule file (docs/schedule.md). */
int search_write_schedule(FILE *f, const struct pos_schedule *s, const char *comment);

/* `possim search ...` (argv[0] is "search"). Returns the exit status. */
int possim_search_main(int argc, char **argv);

#endif
