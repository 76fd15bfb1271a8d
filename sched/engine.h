/* engine.c: the adapter between the clients' shared memory and the scheduling core */
#ifndef POS_SCHED_ENGINE_H
#define POS_SCHED_ENGINE_H

#include "sched/posd.h"

/* The core's tunables from the configuration. */
void posd_engine_params(const struct posd_config *cfg, struct sched_params *p);
/* Creates the core (policy from d->policy). Returns 0 or a negative errno. */
int posd_engine_init(struct posd *d);
/* Reads every client's rings into the core (at NOW). Returns how many clients wrote
 * out-of-range values into their shared memory, their pointers in BAD (POSD_MAX_CLIENTS
 * room): the caller closes them before the decision (posd_clients_tick). */
int posd_engine_read(struct posd *d, int64_t now, struct posd_client **bad);
/* Runs the core's decision and publishes the grants. Returns the delay in ns until the next
 * tick is wanted, or -1 when nothing needs one (idle). */
int64_t posd_engine_decide(struct posd *d, int64_t now);
/* A client registered / left. */
int posd_engine_add(struct posd *d, struct posd_client *c);
void posd_engine_remove(struct posd *d, struct posd_client *c);
/* The client's policy settings changed (reload). */
void posd_engine_reconf(struct posd *d, struct posd_client *c);
/* Tells C's waiting threads that posd is going away (they launch freely from now on). */
void posd_engine_release(struct posd_client *c);

#endif
