/* possim's simulation: a virtual-time discrete-event run of a scenario (possim_scenario.h)
 * through the very same scheduling core (sched/core.h), policies and virtual-GPU model
 * (sim/gpu_model.h) that posd and the simulated driver run, with a model of what posd learns
 * of its clients and when (docs/possim.md). Pure: no clock but the virtual one, no I/O but
 * the report writers. The same scenario and seed always give the same result. */
#ifndef POS_TOOLS_POSSIM_SIM_H
#define POS_TOOLS_POSSIM_SIM_H

#include <stdint.h>
#include <stdio.h>

#include "tools/possim_scenario.h"

struct possim_client_result {
    char name[POSSIM_NAME_MAX];
    char model[64];
    uint32_t batch;
    int priority;
    uint64_t requests, launches; /* requests completed (all of them, unless killed) */
    double p50_ms, p90_ms, p99_ms, mean_ms, max_ms;
    double active_s;                    /* first arrival to last completion (or its kill) */
    double throughput_rps, launch_rate; /* over active_s */
    double slo_ms;                      /* 0: none */
    double slo_attainment;              /* NAN without an SLO */
    uint64_t grant_waits;               /* launches that waited for a grant */
    double grant_wait_ms;               /* their total wait */
    uint64_t markers;                   /* completion markers its launches carried */
    uint64_t windowed;                  /* launches submitted while its grant was WINDOW */
    int killed;                         /* stopped when its stop_with client finished */
    double posd_op_us;                  /* the core's estimate of one of its operators */
    uint64_t posd_requests;             /* requests the core told apart */
    double *lat_ms;                     /* [requests], in request order */
};

/* One kernel of a client's model: what posd learnt of it against the device model's own
 * solo duration (possim --profile-check). */
struct possim_kcheck {
    char client[POSSIM_NAME_MAX];
    char kernel[160];
    uint64_t key; /* posd's kernel key of it */
    uint32_t blocks;
    double truth_ns;   /* the device model's: back to back behind itself on an idle device */
    double learned_ns; /* the core's profile: solo mean (0: none) */
    double sd_ns;
    uint64_t n, co_n;
    double co_ratio;
};

struct possim_result {
    uint64_t seed;
    double makespan_s; /* virtual: 0 to the last completion */
    double busy_fraction;
    uint64_t launches;
    uint64_t decisions; /* sched_core_decide calls */
    uint64_t events;    /* events the simulator handled */
    double decide_us;   /* real (not virtual) time of one sched_core_decide call, mean */
    char policy_note[160]; /* the policy's note at the end ("": none) */
    int host_cores;           /* the host model's cores (0: unlimited, no host model) */
    double host_busy;         /* the cores' busy time / (makespan x cores) */
    double posd_core_wait_ms; /* posd's wake-ups' waits for a core, in all */
    /* the host's core time by role, in cores (core seconds per second of makespan): the
     * clients' launching threads, their collectors, their driver agents, posd, the device
     * process */
    double host_threads, host_collectors, host_agents, host_posd, host_device;
    size_t nclients;
    struct possim_client_result clients[POSSIM_MAX_CLIENTS];
    struct possim_kcheck *kcheck; /* with profile_check: every kernel of every client */
    size_t nkcheck;
};

/* Runs SC with run seed SEED (client I's arrival seed is its seed + SEED - 1; the collector's
 * poll delays are drawn from SEED). Returns 0, or a negative errno with a message in ERR. */
int possim_run(const struct possim_scenario *sc, uint64_t seed, struct possim_result *out,
               char *err, size_t errlen);
/* The same, adding to TL (when not NULL) one track per client (its stream), a slice per op
 * where it ran on the virtual device and a slice per request from its issue to the moment
 * the client knew it complete (it encloses the request's ops). */
struct timeline;
int possim_run_timeline(const struct possim_scenario *sc, uint64_t seed, struct possim_result *out,
                        struct timeline *tl, char *err, size_t errlen);
/* The same with possim train's LEARNER (struct pos_learned_learner, sched/policy/learned.h)
 * handed to the policy (learned), which then makes its choices through it. */
int possim_run_learning(const struct possim_scenario *sc, uint64_t seed,
                        struct possim_result *out, struct timeline *tl, const void *learner,
                        char *err, size_t errlen);
void possim_result_free(struct possim_result *r);

/* Writers. CPU_S is the simulator's own CPU time for the run (its speed line/key is the last
 * line of the text, the last key of the JSON object); CPU_S <= 0 leaves the speed out. */
void possim_write_text(FILE *f, const struct possim_scenario *sc, const struct possim_result *r,
                       double cpu_s);
void possim_write_json(FILE *f, const struct possim_scenario *sc, const struct possim_result *r,
                       double cpu_s);

#endif
