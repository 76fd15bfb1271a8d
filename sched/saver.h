/* saver.c: kernel profile saves in a child process (the loop never waits for one) */
#ifndef POS_SCHED_SAVER_H
#define POS_SCHED_SAVER_H

#include "sched/posd.h"

/* A save asked by ASKER (posctl; NULL: the periodic one). Returns POSD_CONTROL_LATER when
 * ASKER is answered at the end of a save that begins after now (one is started, or follows
 * the running one), 0 when the periodic one was started or is not needed (one runs), or the
 * result of a save written in this thread when no child could be made (0 or -errno, MSG). */
int posd_saver_request(struct posd *d, struct posd_client *asker, char *msg, size_t cap);
/* Ends a running save (its child killed and reaped, its temporary removed): before a reset,
 * so that no older table is renamed over the removal. Its askers get the next save. */
void posd_saver_abort(struct posd *d);
/* The periodic save, when due (and the count of profiles refused at profile_user_max logged).
 * Returns when the next one is due. */
int64_t posd_saver_periodic(struct posd *d);
/* At exit: a running save ended, the profiles written in this thread, its askers answered. */
void posd_saver_finish(struct posd *d);

#endif
