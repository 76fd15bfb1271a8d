/* Loading a schedule file (docs/schedule.md): posd's and possim's I/O in front of the pure
 * parser of sched/schedule.h. */
#ifndef POS_SCHED_SCHEDULE_FILE_H
#define POS_SCHED_SCHEDULE_FILE_H

#include <stddef.h>

#include "sched/schedule.h"

/* Reads and parses the schedule file PATH into *OUT. Returns 0, or a negative errno with
 * "PATH:LINE: what" (or "PATH: what" when it cannot be read) in ERR. */
int pos_schedule_load(const char *path, struct pos_schedule *out, char *err, size_t errlen);

#endif
