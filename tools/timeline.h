/* A writer of timelines in the Chrome trace-event JSON format (the "JSON Object Format" that
 * Perfetto's UI and chrome://tracing open): processes and their tracks (named by metadata
 * events) and complete slices ("ph":"X") with times in microseconds. Events are kept and
 * written sorted per track (by start, the enclosing slice first), so that each track's times
 * only go forward and slices that contain others come before them. possim --timeline and
 * postrace write through it. */
#ifndef POS_TOOLS_TIMELINE_H
#define POS_TOOLS_TIMELINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct timeline_event;

struct timeline {
    struct timeline_event *ev;
    size_t n, cap;
    int failed; /* out of memory: timeline_write says so */
};

void timeline_init(struct timeline *t);
/* Names process PID and its track TID (both shown in the viewer's track list). */
void timeline_process(struct timeline *t, uint32_t pid, const char *name);
void timeline_track(struct timeline *t, uint32_t pid, uint32_t tid, const char *name);
/* A slice NAME of category CAT on track (PID, TID) from START_NS for DUR_NS (ns on any one
 * clock); ARGS is a JSON object's inside ("\"seq\":3"), or NULL. */
void timeline_slice(struct timeline *t, uint32_t pid, uint32_t tid, const char *name,
                    const char *cat, int64_t start_ns, int64_t dur_ns, const char *args);
/* Writes everything to F, times relative to ORIGIN_NS. Returns 0, or -ENOMEM / -EIO. */
int timeline_write(struct timeline *t, FILE *f, int64_t origin_ns);
void timeline_free(struct timeline *t);

#endif
