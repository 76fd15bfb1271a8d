/* posstat's real-GPU figures from NVML (utilisation, memory, power, SM clock), with
 * libnvidia-ml.so.1 opened by dlopen on first use: no build dependency, and '-' where the
 * machine has no NVML or no such GPU. */
#ifndef POS_TOOLS_POSSTAT_NVML_H
#define POS_TOOLS_POSSTAT_NVML_H

#include "tools/posstat_format.h"

/* Reads GPU INDEX into *G (G->valid set, unavailable figures NaN). Returns 0, or -ENOENT when
 * NVML or the GPU is not there (G->valid 0). */
int posstat_nvml_read(unsigned index, struct posstat_gpu *g);

#endif
