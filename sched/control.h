/* control.c: posctl's requests (POS_MSG_CONTROL) */
#ifndef POS_SCHED_CONTROL_H
#define POS_SCHED_CONTROL_H

#include "sched/posd.h"

/* Handles one CONTROL request (body of LEN bytes) from C and answers it. Returns 0, or -1
 * to drop C (it could not be answered). */
int posd_control(struct posd *d, struct posd_client *c, const void *body, size_t len);

#endif
