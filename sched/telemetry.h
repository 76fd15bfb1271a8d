/* telemetry.c: eBPF telemetry (bpf/telemetry.bpf.c), as [daemon] telemetry says. Without it
 * (telemetry = off, a build without eBPF, no privilege, a kernel without the features) every
 * call does nothing and every figure stays 0. */
#ifndef POS_SCHED_TELEMETRY_H
#define POS_SCHED_TELEMETRY_H

#include "sched/posd.h"

/* Loads and attaches what the machine allows. Returns 0, or a negative errno value when
 * telemetry = on and it could not load (posd then refuses to start); otherwise it logs once
 * why not. */
int posd_telemetry_start(struct posd *d);
void posd_telemetry_stop(struct posd *d);
/* C registered / is about to leave: the kernel side starts / stops following its tgid. */
void posd_telemetry_client_add(struct posd *d, struct posd_client *c);
void posd_telemetry_client_remove(struct posd *d, struct posd_client *c);
/* A launch of C's thread TID was read: the kernel side follows that thread from now on. */
void posd_telemetry_follow(struct posd_client *c, uint32_t tid);
/* C's figures for STATS: a client that has no whole interval yet (it registered less than
 * one refresh ago) is measured from when it was first followed to NOW, so that its first
 * second is not shown as zero. */
void posd_telemetry_client_current(struct posd *d, struct posd_client *c, int64_t now);
/* Which parts are running (POS_TELE_* of include/pos/proto.h). */
uint32_t posd_telemetry_parts(void);
/* How many processes initialised the driver while the kernel side's table of GPU processes
 * was full (they are not tracked). */
uint64_t posd_telemetry_untracked(void);
/* Fills at most CAP unmanaged processes into OUT; returns how many there are (may be > CAP). */
size_t posd_telemetry_unmanaged(struct posd *d, struct pos_unmanaged_stats *out, size_t cap);

#endif
