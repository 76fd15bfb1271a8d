/* Pod identity (docs/posd.md, "Pod identity"): which Kubernetes pod and container a client
 * process runs in, from the kernel's word (its cgroup: the pod's UID and the container's ID),
 * and the names the kubelet's own files and API give that UID and ID (namespace, pod,
 * container, and the devices of one resource the container holds). Never from anything the
 * container says. pod_cgroup.c parses cgroups; pod_names.c reads and joins the kubelet's
 * sources; pod_resolver.c keeps the names fresh in a thread of its own, off posd's loop. */
#ifndef POS_SCHED_POD_H
#define POS_SCHED_POD_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kube/podres.h"
#include "sched/config.h"

/* ---- pod_cgroup.c: the kernel's word ------------------------------------------------------- */

/* What a cgroup path says of a pod: its UID (dashes, as the API writes it: a systemd slice's
 * '_' read as '-') and its container's ID ("" when the process is in the pod but in no
 * container's cgroup, as conmon is). */
struct posd_pod_ref {
    char uid[POSD_POD_UID_MAX];
    char container_id[POSD_CONTAINER_ID_MAX];
};

/* The pod of one cgroup PATH (a line's path, "/kubepods.slice/..."). Returns 1 with REF filled
 * when it names a pod; 0 when it is not under kubepods at all; -EINVAL when it is under
 * kubepods but names no pod (a QoS slice itself, a malformed UID); -EXDEV when it is relative to
 * posd's cgroup namespace ("/../..."): posd cannot tell where it is anchored. */
int posd_pod_from_path(const char *path, struct posd_pod_ref *ref);

/* Whether UID is a pod UID as the API writes it (8-4-4-4-12 lowercase hex digits, or 32). */
int posd_pod_uid_valid(const char *uid);

/* The pod of a process from the contents of its /proc/PID/cgroup (TEXT): the unified
 * hierarchy's line ("0::PATH") first, then each cgroup v1 line ("N:CONTROLLERS:PATH") in order.
 * Returns as posd_pod_from_path for the first line that names a pod; else the first error met
 * (its path in BAD, BADLEN bytes), else 0. */
int posd_pod_from_cgroup(const char *text, struct posd_pod_ref *ref, char *bad, size_t badlen);

/* ---- pod_names.c: the kubelet's word ------------------------------------------------------- */

#define POSD_POD_DEVICES_MAX POSD_K8S_DEVICES_MAX

/* One container of a pod, as the sources know it. */
struct posd_pod_container {
    char id[POSD_CONTAINER_ID_MAX]; /* "" when no source gave its ID */
    char name[KUBE_CONTAINER_MAX];
    char devices[POSD_POD_DEVICES_MAX]; /* of [kubernetes] resource */
    int has_devices;                    /* a source said which (possibly none) */
};

/* One pod: its UID and names, and its containers. */
struct posd_pod_entry {
    char uid[POSD_POD_UID_MAX];
    char namespace_[KUBE_NAMESPACE_MAX];
    char name[KUBE_POD_MAX];
    int listed; /* pod-resources List has it (names confirmed by the kubelet's API) */
    size_t ncontainers;
    struct posd_pod_container *containers;
};

/* Everything the sources said at one time. */
struct posd_pod_table {
    size_t npods;
    struct posd_pod_entry *pods;
};

/* The device-manager checkpoint's PodDeviceEntries: one per container and resource. */
struct posd_pod_devices {
    char uid[POSD_POD_UID_MAX];
    char container[KUBE_CONTAINER_MAX];
    char resource[KUBE_RESOURCE_MAX];
    size_t nids;
    char (*ids)[KUBE_DEVICE_ID_MAX];
};
struct posd_pod_checkpoint {
    size_t n;
    struct posd_pod_devices *e;
};

/* Reads LOG_DIR (/var/log/pods: one NAMESPACE_PODNAME_PODUID directory per pod, one
 * CONTAINERNAME directory in it per container) and CONTAINERS_DIR (/var/log/containers:
 * PODNAME_NAMESPACE_CONTAINERNAME-CONTAINERID.log) into T (which it empties first). Entries
 * whose names do not parse are skipped. Returns 0, or -errno when LOG_DIR cannot be read
 * (CONTAINERS_DIR missing only leaves container IDs unknown). */
int posd_pod_logs_read(const char *log_dir, const char *containers_dir, struct posd_pod_table *t);

/* The names of pod UID and container CID (may be "") from the log directories alone, for one
 * client at its registration: OUT gets the pod and, when CID is known there, that container
 * alone. Returns 1 when the pod is there, 0 when not, -errno when LOG_DIR cannot be read. */
int posd_pod_logs_find(const char *log_dir, const char *containers_dir, const char *uid,
                       const char *cid, struct posd_pod_entry *out);

/* Parses the kubelet's device-manager checkpoint (JSON: Data.PodDeviceEntries[] with PodUID,
 * ContainerName, ResourceName, DeviceIDs as a list or as a map of NUMA node to lists) from
 * TEXT (LEN bytes). Other members are skipped. Returns 0, or -EPROTO when it is not that JSON
 * (-ENOMEM). */
int posd_pod_checkpoint_parse(const char *text, size_t len, struct posd_pod_checkpoint *out);
int posd_pod_checkpoint_read(const char *path, struct posd_pod_checkpoint *out);
void posd_pod_checkpoint_free(struct posd_pod_checkpoint *c);

/* Joins what the log directories said (T, in place) with the checkpoint (CK, may be NULL) and
 * pod-resources' List (LIST, may be NULL), for devices of RESOURCE. Pure. The order of sources
 * (docs/posd.md, "Pod identity"):
 *  - namespace and pod name: the log directory of the UID; else, for a pod the log directories
 *    do not have, the List pod one of whose containers holds exactly the devices the checkpoint
 *    gives that UID (device IDs are unique on a node);
 *  - container name: the container log link of the ID only (no other source names an ID);
 *  - listed: the List has a pod of that namespace and name;
 *  - devices: the checkpoint's, by UID and container name; else the List's, by namespace, pod
 *    and container name.
 * Returns 0 or -ENOMEM (T is then as it was or partly joined, still valid). */
int posd_pod_join(struct posd_pod_table *t, const struct posd_pod_checkpoint *ck,
                  const struct kube_pod_list *list, const char *resource);

/* The pod of UID in T, or NULL. */
const struct posd_pod_entry *posd_pod_table_find(const struct posd_pod_table *t, const char *uid);
/* The container of ID in P, or NULL. */
const struct posd_pod_container *posd_pod_entry_container(const struct posd_pod_entry *p,
                                                          const char *id);
/* The container of a client of P in the container of ID: the container of that ID; else, in a
 * pod no source gives any container ID of (one named through the List: no log directory), the
 * only container that holds devices of [kubernetes] resource, if exactly one does (a client
 * uses the GPU, and only a container the device plugin gave a device has one); else NULL. */
const struct posd_pod_container *posd_pod_client_container(const struct posd_pod_entry *p,
                                                           const char *id);
void posd_pod_table_free(struct posd_pod_table *t);
void posd_pod_entry_free(struct posd_pod_entry *p);

/* Fills ID's namespace, pod, container and devices from P and C (either may be NULL). */
void posd_pod_names_set(struct posd_identity *id, const struct posd_pod_entry *p,
                        const struct posd_pod_container *c);

/* ---- pod_resolver.c: the names kept fresh, off posd's loop ----------------------------------- */

/* Starts the resolver as CFG's [kubernetes] says (enable = auto: only where its log directory
 * or pod-resources socket exists). Returns 0 (on or off: logged), or -errno. After posd
 * detached: it is a thread. */
int posd_pod_start(const struct posd_config *cfg);
void posd_pod_stop(void);
/* Whether pod identity is on. */
int posd_pod_enabled(void);
/* Readable when the thread has a new table (posd's loop watches it). -1 when off. */
int posd_pod_news_fd(void);
/* Takes the table the thread made last, if there is a new one: returns 1 and logs what
 * changed in the sources' health (once per change, never per client), else 0. */
int posd_pod_take_news(void);
/* Fills ID's pod fields for process PID: its cgroup from [kubernetes] proc_root (the caller
 * read /proc already; TEXT is what it read there, used when proc_root is /proc), the names from
 * the newest table, else the log directories at once (and the thread asked for a new table).
 * Never blocks on the kubelet. Everything stays "" without a pod. */
void posd_pod_identify(struct posd_identity *id, const char *cgroup_text);
/* Fills ID's names again from the newest table. Returns 1 when they changed. */
int posd_pod_refresh_names(struct posd_identity *id);

#endif
