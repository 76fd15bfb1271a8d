/* The weights file (sched/weights.h) on disk: read whole and parsed, written whole. */
#ifndef POS_SCHED_WEIGHTS_FILE_H
#define POS_SCHED_WEIGHTS_FILE_H

#include <stddef.h>

#include "sched/weights.h"

#define POS_WEIGHTS_FILE_MAX (64u << 20) /* a larger file is refused */

/* Reads PATH into *W. 0, or a negative errno with "PATH: what" in ERR. */
int pos_weights_load(const char *path, struct pos_weights *w, char *err, size_t errlen);
/* Writes W to PATH through a temporary file beside it renamed over PATH (a reader sees the old
 * file or the new one, whole). 0, or a negative errno with "PATH: what" in ERR. */
int pos_weights_save(const char *path, const struct pos_weights *w, char *err, size_t errlen);

#endif
