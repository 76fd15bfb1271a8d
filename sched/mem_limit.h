/* A GPU memory limit as people write it: in the policy files' mem_limit key and in posctl set
 * --mem-limit. Bytes with binary units (K, M, G, T, P, each 1024 times the one before, with or
 * without "i" and "B": 4G = 4Gi = 4GiB = 4GB = 2^32 bytes), a share of the device ("50%", kept
 * in millionths as the shared memory's mem_limit_ppm), or none. Pure: posd, posctl and posstat
 * link it. */
#ifndef POS_SCHED_MEM_LIMIT_H
#define POS_SCHED_MEM_LIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "pos/client_shm.h"

/* A limit as posd writes it into a client's shared memory (include/pos/client_shm.h). */
struct sched_mem_limit {
    uint64_t bytes; /* POS_MEM_UNLIMITED: none; ignored (POS_MEM_UNLIMITED) when ppm is set */
    uint32_t ppm;   /* non-zero: this share of each device's memory, in millionths */
};

#define SCHED_MEM_NO_LIMIT ((struct sched_mem_limit){.bytes = POS_MEM_UNLIMITED, .ppm = 0})

/* Reads TEXT: "none"; a size such as 512M, 1.5T, 4GiB or 4 GB (a number with at most 9
 * decimals, rounded down to a whole byte; no unit or B is bytes, which must be whole); or a
 * percentage such as 50% or 12.5% (0..100, at most 4 decimals). 0 and 0% are a limit of no
 * memory at all. Returns 0, or -EINVAL with why in WHY (CAP bytes). */
int sched_mem_limit_parse(const char *text, struct sched_mem_limit *out, char *why, size_t cap);

/* "none", "50%", "12.5%", "4GiB", "1.5GiB", "100B" into BUF: one word, which
 * sched_mem_limit_parse reads back (to the precision shown). */
void sched_mem_limit_format(struct sched_mem_limit l, char *buf, size_t cap);

/* BYTES in the largest binary unit that leaves a number of at least 1, to 3 significant digits
 * ("1.5GiB", "512MiB", "1000KiB", "100B"): one word. */
void sched_mem_bytes_format(uint64_t bytes, char *buf, size_t cap);

/* The name of a row of the ledger (enum pos_mem_kind): "linear", "pitched", ... "module". */
const char *sched_mem_kind_name(int kind);

static inline int sched_mem_limit_equal(struct sched_mem_limit a, struct sched_mem_limit b)
{
    return a.bytes == b.bytes && a.ppm == b.ppm;
}

#endif
