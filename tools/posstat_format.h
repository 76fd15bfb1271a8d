/* posstat's pure half: checking a STATS reply from posd, turning one or two snapshots into a
 * report of rates, wait percentiles from the grant-wait histogram, the Average: block, and the
 * text and JSON renderings. No sockets and no clocks: the unit tests drive all of it. */
#ifndef POS_TOOLS_POSSTAT_FORMAT_H
#define POS_TOOLS_POSSTAT_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pos/proto.h"

/* The real GPU's own figures (NVML, tools/posstat_nvml.c) at a snapshot; NaN: not available. */
struct posstat_gpu {
    int valid; /* 0: not read (no NVML, no such GPU) */
    unsigned index;
    double util_pct, mem_used_mib, mem_total_mib, power_w, sm_clock_mhz;
};

/* One STATS reply, copied out of the message. Owns clients[]. */
struct posstat_snapshot {
    struct pos_device_stats dev;
    uint32_t nclients;
    struct pos_client_stats *clients;
    double time; /* wall clock when it arrived, seconds since the epoch; set by the caller */
    struct posstat_gpu gpu; /* set by the caller; valid 0 when it has none */
    uint32_t nunmanaged;
    struct pos_unmanaged_stats *unmanaged; /* owned */
};

/* Checks a received message (header included) and copies it into *snap.
 * Returns 0; -EPROTO for a malformed message, -ECONNREFUSED for a REJECT (err holds posd's
 * reason), -ENOMEM. On error err holds one line without "posstat: " and *snap is untouched. */
int posstat_parse_reply(const void *msg, size_t len, struct posstat_snapshot *snap, char *err,
                        size_t errlen);
void posstat_snapshot_free(struct posstat_snapshot *snap);

/* The value at percentile PCT (1..100, nearest rank) of a grant-wait histogram, reported as the
 * upper bound in us of the bucket holding it: 2 for bucket 0, 2^(i+1) for bucket i. NaN when
 * the histogram is empty. */
double posstat_wait_percentile(const uint64_t hist[POS_WAIT_BUCKETS], unsigned pct);

enum posstat_report_kind {
    POSSTAT_TOTAL,    /* one snapshot: totals since each client registered */
    POSSTAT_INTERVAL, /* rates between two snapshots */
    POSSTAT_AVERAGE,  /* first to last snapshot of a run; levels averaged over its reports */
};

/* Every double is NaN when the value is not available ('-' in text, null in JSON). */
struct posstat_device_row {
    char policy[sizeof(((struct pos_device_stats *)0)->policy)];
    double clients; /* connected clients (mean over the reports in an Average) */
    double uptime_s;
    double span_s; /* time the rates cover */
    double submitted_per_s, released_per_s, completed_per_s;
    double busy_pct;
    double submitted, released, completed; /* totals since posd started (JSON only) */
    double unmanaged; /* GPU processes that are not clients (NaN without discovery) */
    /* processes that initialised the driver when posd's kernel-side table was full: never
     * tracked (NaN without discovery; JSON and CSV only) */
    double unmanaged_untracked;
};

/* The GPU block (posstat's device view): NVML's figures, levels at the snapshot (means in an
 * Average), NaN when not available. */
struct posstat_gpu_row {
    double index;
    double util_pct, mem_used_mib, mem_total_mib, power_w, sm_clock_mhz;
};

struct posstat_client_row {
    uint32_t client_id;
    int32_t pid;
    char app[POS_APP_NAME_MAX];
    char class_name[sizeof(((struct pos_client_stats *)0)->class_name)];
    double span_s; /* the interval, or the time since it registered for a client new to it */
    double launches_per_s;
    double queued, in_flight; /* levels at the snapshot (means in an Average) */
    double wait_p50_us, wait_p99_us;
    double gpu_ms_per_s;
    /* requests as posd infers them; the latency quantiles cover its whole registration */
    double requests_per_s, req_p50_ms, req_p99_ms;
    double sync_lag_p50_us, sync_lag_p99_us; /* how late posd read its sync reports */
    double op_us;                            /* posd's estimate of one operator's GPU time */
    double stalls;
    int held; /* 1 yes, 0 no, -1 not available */
    char cpu[8]; /* the CPU lever on its threads now: "idle", "nice" or "no" */
    /* eBPF telemetry, posd's figures of the last second (NaN without it) */
    double runq_us;         /* mean wake-up to running delay of its launching threads */
    double runq_ms_per_s;   /* time its launching threads waited to run */
    double offcpu_ms_per_s; /* off-CPU time of its launching threads */
    double ioctls_per_s;    /* its ioctl() calls (the driver's) */
    double ioctl_us;        /* their mean latency */
    /* device memory as its shim accounts it (the snapshot's figures, in an Average too) */
    double mem_used, mem_peak; /* bytes */
    double mem_refused;        /* allocations refused for its limit since it registered */
    double mem_limit;          /* bytes on its device; NaN: none, or a share of a device whose
                                * size is not known yet */
    char mem_limit_text[16];   /* "2GiB", "50%", "none" */
    /* its Kubernetes pod ("" outside one or while posd does not know it), and for text the
     * three as "NAMESPACE/POD/CONTAINER" */
    char k8s_namespace[POS_K8S_NAMESPACE_MAX];
    char pod[POS_K8S_POD_MAX];
    char container[POS_K8S_CONTAINER_MAX];
    char pod_devices[POS_K8S_DEVICES_MAX];
    char pod_text[POS_K8S_NAMESPACE_MAX + POS_K8S_POD_MAX + POS_K8S_CONTAINER_MAX];
};

/* In posstat_report.telemetry beside the POS_TELE_* bits: some client is in a pod, so text
 * shows the pod column (JSON always has the pod's fields). */
#define POSSTAT_PODS 0x80000000u

/* A process using the GPU without being a client. */
struct posstat_unmanaged_row {
    int32_t pid;
    char comm[sizeof(((struct pos_unmanaged_stats *)0)->comm)];
    double contexts;
    char devices[40]; /* "0,1" */
    double launches_per_s; /* NaN unless posd sampled it */
    double seen_s;         /* since its first driver call */
};

/* What a text or JSON report shows (posstat -d, -a); 0 shows both. */
#define POSSTAT_SHOW_DEVICE 0x1
#define POSSTAT_SHOW_APPS   0x2

struct posstat_report {
    enum posstat_report_kind kind;
    unsigned show;  /* POSSTAT_SHOW_*, 0: both (set by the caller after building) */
    int epoch_time; /* text: the time column in seconds since the epoch (posstat -H) */
    int show_gpu;   /* the GPU block with the device block (set by the caller) */
    struct posstat_gpu_row gpu;
    double time; /* of the newest snapshot, seconds since the epoch */
    struct posstat_device_row dev;
    uint32_t nclients;
    uint32_t clients_not_shown; /* posd counts more clients than its reply carries */
    struct posstat_client_row *clients;
    uint32_t nunmanaged;
    struct posstat_unmanaged_row *unmanaged;
    uint32_t telemetry; /* POS_TELE_* parts posd runs: text shows their columns only */
    int everyone;       /* posd listed every client and the unmanaged processes (POS_DEV_EVERYONE) */
};

/* Builds the report of CUR against PREV (NULL: totals since each client registered). A client
 * is compared with PREV only when PREV holds the same client (same id and pid, registered no
 * later); otherwise it is new and shows its totals. If posd restarted in between (its uptime
 * went back), PREV is ignored. A counter that went back has no rate, a wait histogram with a
 * bucket that went back no percentiles. Returns 0 or -ENOMEM. */
int posstat_report_build(struct posstat_report *r, const struct posstat_snapshot *prev,
                         const struct posstat_snapshot *cur, enum posstat_report_kind kind);
void posstat_report_free(struct posstat_report *r);

/* The sums behind an Average: block: the levels of each client of the latest interval report,
 * summed over the reports it was in. */
struct posstat_level_sum {
    uint32_t client_id;
    int32_t pid;
    double queued, in_flight;
    uint64_t samples;
};

struct posstat_average {
    uint64_t reports;
    double clients;             /* summed over the reports */
    struct posstat_gpu_row gpu; /* summed over the reports (NaN once one lacked a figure) */
    size_t n;
    struct posstat_level_sum *levels;
};

int posstat_average_add(struct posstat_average *a, const struct posstat_report *r);
/* The Average: report: rates from FIRST to LAST, levels the means of the reports added. */
int posstat_average_report(struct posstat_report *r, const struct posstat_average *a,
                           const struct posstat_snapshot *first,
                           const struct posstat_snapshot *last);
void posstat_average_free(struct posstat_average *a);

/* Text: '#' lines naming the columns and their units, a device line, a line per client; the
 * first column is the local time HH:MM:SS, or "Average:"; telemetry columns only when posd
 * runs that part. JSON: one object on one line, every member always (null when not
 * available), the unmanaged processes in "unmanaged".
 * Both return 0 or -EIO when OUT failed. */
int posstat_render_text(FILE *out, const struct posstat_report *r);
int posstat_render_json(FILE *out, const struct posstat_report *r);
/* posstat -u: the device line, then one line per unmanaged process (JSON: the same object as
 * posstat_render_json, which always has "unmanaged"). */
int posstat_render_unmanaged_text(FILE *out, const struct posstat_report *r);

/* posstat -k: a KERNELS reply. Owns k[]. */
struct posstat_kernels {
    double uptime_s; /* posd's, when it answered */
    uint32_t n, total;
    struct pos_kernel_stats *k;
};

/* Checks a received KERNELS message (header included) and copies it into *OUT; 0 or a
 * negative errno with one line in ERR. */
int posstat_parse_kernels(const void *msg, size_t len, struct posstat_kernels *out, char *err,
                          size_t errlen);
void posstat_kernels_free(struct posstat_kernels *ks);
/* The kernel view: launches a second over the interval since PREV (NULL: since posd started),
 * the solo mean and spread, samples and co-run ratio; the first TOP (0: all); text or JSON. */
int posstat_render_kernels(FILE *out, const struct posstat_kernels *cur,
                           const struct posstat_kernels *prev, int json, uint32_t top);

#endif
