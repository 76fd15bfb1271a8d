/* mem_ledger.c: posd's side of the memory ledger (docs/memory.md) */
#ifndef POS_SCHED_MEM_LEDGER_H
#define POS_SCHED_MEM_LEDGER_H

#include "sched/posd.h"

/* Every figure of a client's account is read clamped to this (and to the device's memory as
 * the client gave it): more than any device has, and small enough that the sums over devices
 * and clients cannot wrap. */
#define POSD_MEM_DEVICE_MAX (UINT64_C(1) << 48) /* 256 TiB */
/* A client's account as posd reports it: summed over its devices, each value read once. */
struct posd_mem_figures {
    uint64_t used, peak, refused;  /* used: reserved and committed, IPC imports aside */
    uint64_t bytes[POS_MEM_KINDS]; /* committed, by kind */
    uint64_t total; /* the memory of the device its rules put it on, as its shim saw it (0: not
                     * known yet) */
    uint64_t limit; /* its limit there (POS_MEM_UNLIMITED: none, or a share of a device whose
                     * size is not known yet) */
};
/* Writes L into C's shared memory (its limit from now on) and bumps mem_word. */
void posd_mem_limit_publish(struct posd_client *c, struct sched_mem_limit l);
/* C's limit in bytes on a device of TOTAL bytes (0: not known), from posd's own copy. */
uint64_t posd_mem_limit_bytes(const struct posd_client *c, uint64_t total);
/* C's account, in F. */
void posd_mem_read(const struct posd_client *c, struct posd_mem_figures *f);
/* Only what C uses on its rules' device and its limit there: two values read, for each tick. */
void posd_mem_read_device(const struct posd_client *c, uint64_t *used, uint64_t *limit);
/* After a reload: C's limit written and logged when its rules' changed. */
void posd_mem_reconf(struct posd_client *c);
/* "; it uses 3GiB on device 0, above 2GiB: ..." into BUF when C uses more than
 * its limit on its rules' device (its account read once), else "". */
#define POSD_MEM_OVER_MAX 128
void posd_mem_over(const struct posd_client *c, char *buf, size_t cap);

#endif
