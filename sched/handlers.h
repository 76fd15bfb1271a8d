/* handlers.c: a peer's message to its handler */
#ifndef POS_SCHED_HANDLERS_H
#define POS_SCHED_HANDLERS_H

#include "sched/posd.h"

/* A message arrived on C's socket (LEN bytes in c->rx). Returns 0, or a negative errno value
 * to drop C (-EPROTO: it broke the protocol; a refused or failed registration's reason). */
int posd_client_message(struct posd *d, struct posd_client *c, size_t len);

#endif
