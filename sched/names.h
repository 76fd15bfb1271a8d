/* names.c: kernel names */
#ifndef POS_SCHED_NAMES_H
#define POS_SCHED_NAMES_H

#include "sched/posd.h"

/* A NAMES message (body of LEN bytes) from C: its ids' keys kept, the names learnt. Returns 0,
 * -EPROTO when it is malformed (C's keys as they were), or -ENOMEM. */
int posd_names_message(struct posd_client *c, const uint8_t *body, size_t len);
/* C leaves: its keys freed. */
void posd_names_forget(struct posd_client *c);
/* The name posd learnt for KEY (its first 63 bytes), or "". */
const char *posd_name_of(uint64_t key);

#endif
