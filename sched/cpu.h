/* cpu.c: the CPU lever's hands (the core decides, sched_grant.cpu_low) */
#ifndef POS_SCHED_CPU_H
#define POS_SCHED_CPU_H

#include "sched/posd.h"

/* At start: the fatal signals' handler that restores lowered threads is installed, and what a
 * posd killed before left lowered (STATE_DIR/cpu-lowered) is put back. */
void posd_cpu_start(struct posd *d);
void posd_cpu_recover(struct posd *d);
/* After a decision: C's threads lowered as LOW (enum pos_cpu_lever) says, new ones found every
 * POSD_CPU_RESCAN_NS, or put back when LOW is POS_CPU_OFF. Failures are logged once per client. */
void posd_cpu_apply(struct posd *d, struct posd_client *c, int low, int64_t now);
/* C leaves: its threads are put back. */
void posd_cpu_client_remove(struct posd *d, struct posd_client *c);
/* Whether some client is lowered now. */
int posd_cpu_any_lowered(const struct posd *d);
/* At exit: every lowered thread put back, the record removed. */
void posd_cpu_restore_all(struct posd *d);

#endif
