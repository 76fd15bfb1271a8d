/* possim train: policy learned's network trained in possim by a discrete soft actor-critic
 * (tools/possim_sac.h) over a curriculum of scenarios (docs/learned.md). The curriculum, the
 * reward and the loop are here; the simulation is possim's own (possim_run_learning), with
 * policy learned asking the trainer for each of its choices. */
#ifndef POS_TOOLS_POSSIM_TRAIN_H
#define POS_TOOLS_POSSIM_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/possim_scenario.h"

#define TRAIN_MAX_MIXES 32

struct train_mix {
    char name[POSSIM_NAME_MAX];
    char path[POSSIM_PATH_MAX]; /* the scenario, resolved against the curriculum's directory */
    int episodes;               /* training runs of it per epoch */
    int line;
    struct possim_scenario *sc; /* loaded, policy learned */
};

/* A curriculum file: [train] with the learner's and the reward's settings, and one [mix NAME]
 * per scenario (docs/learned.md lists the keys and their defaults). */
struct train_curriculum {
    char path[POSSIM_PATH_MAX];
    int epochs;
    int nhidden, hidden[3];
    double lr, polyak, alpha, target_entropy, prior, prior_p;
    int batch, update_every;
    size_t replay;
    double horizon_ms;     /* the reward's discount: exp(-dt / horizon) */
    double miss_penalty;   /* an SLO client's request that ends late, in device-ms of work */
    double latency_weight; /* each SLO client's request, per SLO of its latency */
    double reward_scale;   /* what the learner sees of a reward: times this */
    int eval_seeds;        /* greedy evaluation runs of every mix after each epoch */
    size_t nmixes;
    struct train_mix mixes[TRAIN_MAX_MIXES];
};

/* Reads the curriculum PATH (its mixes' scenarios loaded too). 0, or a negative errno with
 * "FILE:LINE: what" (or "FILE: what") in ERR. Free with train_curriculum_free. */
int train_curriculum_load(const char *path, struct train_curriculum *c, char *err, size_t errlen);
void train_curriculum_free(struct train_curriculum *c);

/* What an evaluation of a policy over the curriculum's mixes gave: the reward per virtual
 * second, the SLO clients' mean attainment and worst p99, the other clients' throughput. */
struct train_eval {
    double reward_per_s;
    double slo_attainment, slo_p99_ms;
    double batch_rps;
    int slo_clients, batch_clients;
};

/* possim train's command line (argv[0] is "train"). */
int possim_train_main(int argc, char **argv);

#endif
