/* identity.c: who a client is */
#ifndef POS_SCHED_IDENTITY_H
#define POS_SCHED_IDENTITY_H

#include "sched/posd.h"

/* Fills the rest of ID (its pid, uid and gid set from SO_PEERCRED) from /proc/PID: exe, app,
 * cgroup, pod. */
void posd_identify(struct posd_identity *id, pid_t pid);
/* " pod NS/POD container NAME" for a log line, or "" without a pod, into BUF (CAP bytes;
 * POSD_POD_WORDS_MAX holds any). */
#define POSD_POD_WORDS_MAX                                                                     \
    (POSD_K8S_NAMESPACE_MAX + POSD_K8S_POD_MAX + POSD_K8S_CONTAINER_MAX + POSD_K8S_DEVICES_MAX + 48)
void posd_pod_words(const struct posd_identity *id, char *buf, size_t cap);

#endif
