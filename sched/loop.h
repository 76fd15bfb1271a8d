/* loop.c: the event loop */
#ifndef POS_SCHED_LOOP_H
#define POS_SCHED_LOOP_H

#include "sched/posd.h"

/* Blocks the signals the loop reads from its signalfd (SIGHUP, SIGTERM, SIGINT): called before
 * the socket exists, so that one sent as soon as it does waits for the loop (their default
 * action killed posd, its socket left behind). */
void posd_block_signals(void);
int posd_loop(struct posd *d);

#endif
