/* control_reply.c: the answer to posctl's requests */
#ifndef POS_SCHED_CONTROL_REPLY_H
#define POS_SCHED_CONTROL_REPLY_H

#include "sched/posd.h"

/* What a handler returns when its answer comes later (posd_control_answer). */
#define POSD_CONTROL_LATER 1
/* Answers C's request with STATUS (0 or -errno) and MSG; a change (OP, its name; NULL for a
 * question) is logged with who asked. Returns 0, or -1 when it could not be sent (the caller
 * drops C). */
int posd_control_answer(struct posd *d, struct posd_client *c, const char *op, int status,
                        const char *msg);

#endif
