/* sm_share.c: SM shares through MPS */
#ifndef POS_SCHED_SM_SHARE_H
#define POS_SCHED_SM_SHARE_H

#include "sched/posd.h"

/* Logs once, for the configuration just loaded, the rules and classes whose sm_share cannot
 * apply because the device runs processes one at a time (no MPS). */
void posd_shares_check(const struct posd *d);
/* The share C's WELCOME carries: its policy's sm_share where the device has MPS, else 0. */
uint32_t posd_share_for(const struct posd *d, const struct posd_client *c);
/* After a reload: says when a running client's share changed (it applies to its next start). */
void posd_share_reconf(const struct posd *d, const struct posd_client *c);

#endif
