/* posd's statistics in the Prometheus text exposition format (version 0.0.4): what posd's
 * --metrics endpoint serves and posstat -o prom prints, from one STATS reply's contents.
 * docs/metrics.md lists every metric. Pure: no sockets, no clocks. */
#ifndef POS_SCHED_METRICS_TEXT_H
#define POS_SCHED_METRICS_TEXT_H

#include <stddef.h>
#include <stdio.h>

#include "pos/proto.h"

/* What a client's series are labelled with besides device and class ([metrics] labels). */
enum pos_metrics_labels {
    POS_METRICS_LABELS_FULL = 0,  /* app and pid: who runs what */
    POS_METRICS_LABELS_ANONYMOUS, /* client (posd's number for it): no pid, no app name */
};

/* Writes the exposition of DEV and its N clients CS to OUT, their series labelled as LABELS
 * says. Returns 0 or -EIO. */
int posd_metrics_text(FILE *out, const struct pos_device_stats *dev,
                      const struct pos_client_stats *cs, size_t n, enum pos_metrics_labels labels);

#endif
