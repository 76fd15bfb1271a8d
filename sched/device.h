/* device.c: what posd knows of the GPU */
#ifndef POS_SCHED_DEVICE_H
#define POS_SCHED_DEVICE_H

#include "sched/posd.h"

/* Fills DEV for device 0 from the CUDA driver the clients use (asked by a child process) and
 * whether processes run at once on it (MPS); the documented defaults when no driver answers.
 * Logs what it found. Returns 0, or -1 when the defaults were used. */
int posd_device_probe(struct pos_sched_device *dev);
/* Where posd looks for an MPS control daemon: $CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps. */
const char *posd_mps_pipe_dir(void);

#endif
