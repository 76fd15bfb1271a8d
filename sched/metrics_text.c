/* The Prometheus text exposition of posd's statistics (see metrics_text.h): one table of
 * device metrics, one of client metrics, and the two histograms. Base units (seconds),
 * counters end in _total, every family gets its HELP and TYPE once, before its samples. */
#include "sched/metrics_text.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "sched/mem_limit.h"

#define NS 1e-9

/* ---- device ------------------------------------------------------------------------------- */

struct device_metric {
    const char *name, *type, *help;
    double (*value)(const struct pos_device_stats *d);
    uint32_t needs; /* POS_TELE_* parts it comes from (only shown when posd runs them) */
};

static double dev_uptime(const struct pos_device_stats *d)
{
    return (double)d->uptime_ns * NS;
}
static double dev_clients(const struct pos_device_stats *d)
{
    return d->clients;
}
static double dev_submitted(const struct pos_device_stats *d)
{
    return (double)d->submitted;
}
static double dev_released(const struct pos_device_stats *d)
{
    return (double)d->released;
}
static double dev_completed(const struct pos_device_stats *d)
{
    return (double)d->completed;
}
static double dev_busy(const struct pos_device_stats *d)
{
    return (double)d->busy_ns * NS;
}
static double dev_profiles(const struct pos_device_stats *d)
{
    return (double)d->profiles;
}
static double dev_profiles_refused(const struct pos_device_stats *d)
{
    return (double)d->profiles_refused;
}
static double dev_unmanaged(const struct pos_device_stats *d)
{
    return d->unmanaged;
}
static double dev_untracked(const struct pos_device_stats *d)
{
    return (double)d->unmanaged_untracked;
}

static const struct device_metric device_metrics[] = {
    {"posd_uptime_seconds", "gauge", "Time since posd started.", dev_uptime, 0},
    {"posd_clients", "gauge", "Registered clients (visible to the reader).", dev_clients, 0},
    {"posd_device_submitted_operators_total", "counter",
     "Operators submitted by every client since posd started, departed clients included.",
     dev_submitted, 0},
    {"posd_device_released_operators_total", "counter",
     "Operators released to the GPU (granted, or launched freely) since posd started.",
     dev_released, 0},
    {"posd_device_completed_operators_total", "counter",
     "Operators known complete since posd started.", dev_completed, 0},
    {"posd_device_busy_seconds_total", "counter",
     "Time with at least one operator of any client in flight.", dev_busy, 0},
    {"posd_kernel_profiles", "gauge", "Kernel profiles posd holds, every user's.", dev_profiles, 0},
    {"posd_kernel_profiles_refused_total", "counter",
     "New kernel shapes not learnt because their user had profile_user_max profiles already.",
     dev_profiles_refused, 0},
    {"posd_unmanaged_processes", "gauge",
     "Processes using the GPU driver that are not posd's clients (eBPF discovery).",
     dev_unmanaged, POS_TELE_DISCOVERY},
    {"posd_unmanaged_untracked_total", "counter",
     "Processes that initialised the GPU driver while the kernel side's table of GPU processes "
     "was full: never tracked nor counted in posd_unmanaged_processes.",
     dev_untracked, POS_TELE_DISCOVERY},
};

/* ---- clients ------------------------------------------------------------------------------ */

struct client_metric {
    const char *name, *type, *help;
    double (*value)(const struct pos_client_stats *c);
};

#define CLIENT_COUNTER(fn, field)                                                                  \
    static double fn(const struct pos_client_stats *c)                                             \
    {                                                                                              \
        return (double)c->field;                                                                   \
    }
#define CLIENT_SECONDS(fn, field)                                                                  \
    static double fn(const struct pos_client_stats *c)                                             \
    {                                                                                              \
        return (double)c->field * NS;                                                              \
    }
CLIENT_COUNTER(cl_submitted, submitted)
CLIENT_COUNTER(cl_released, released)
CLIENT_COUNTER(cl_completed, completed)
CLIENT_COUNTER(cl_queued, queued)
CLIENT_COUNTER(cl_in_flight, in_flight)
CLIENT_COUNTER(cl_syncs, syncs)
CLIENT_COUNTER(cl_stalls, stalls)
CLIENT_COUNTER(cl_priority, priority)
CLIENT_SECONDS(cl_busy, busy_ns)
CLIENT_SECONDS(cl_sync, sync_ns)
CLIENT_SECONDS(cl_connected, connected_ns)
CLIENT_SECONDS(cl_op, op_ns)

static double cl_held(const struct pos_client_stats *c)
{
    return (c->flags & POS_CLIENT_HELD) != 0;
}
static double cl_cpu_lowered(const struct pos_client_stats *c)
{
    return (c->flags & (POS_CLIENT_CPU_IDLE | POS_CLIENT_CPU_NICE)) != 0;
}
static double cl_cpu_threads(const struct pos_client_stats *c)
{
    return c->cpu_threads;
}
static double cl_override(const struct pos_client_stats *c)
{
    return (c->flags & POS_CLIENT_OVERRIDE) != 0;
}
CLIENT_COUNTER(cl_mem_used, mem_used)
CLIENT_COUNTER(cl_mem_peak, mem_peak)
CLIENT_COUNTER(cl_mem_refused, mem_refused)
/* none (or a share of a device whose size its shim has not seen yet): +Inf */
static double cl_mem_limit(const struct pos_client_stats *c)
{
    return c->mem_limit == POS_MEM_UNLIMITED ? INFINITY : (double)c->mem_limit;
}

static const struct client_metric client_metrics[] = {
    {"posd_client_submitted_operators_total", "counter", "Operators the client submitted.",
     cl_submitted},
    {"posd_client_released_operators_total", "counter",
     "Operators of the client released (granted, or launched freely).", cl_released},
    {"posd_client_completed_operators_total", "counter", "Operators of the client known complete.",
     cl_completed},
    {"posd_client_queued_operators", "gauge", "Operators submitted and not yet released.",
     cl_queued},
    {"posd_client_in_flight_operators", "gauge", "Operators released and not yet complete.",
     cl_in_flight},
    {"posd_client_busy_seconds_total", "counter",
     "Time with at least one of the client's operators in flight.", cl_busy},
    {"posd_client_sync_seconds_total", "counter",
     "Time the client's threads spent in synchronisation calls.", cl_sync},
    {"posd_client_syncs_total", "counter", "Synchronisation calls of the client.", cl_syncs},
    {"posd_client_stalls_total", "counter",
     "Times the client was found with work in flight and no completion for stall_ms.", cl_stalls},
    {"posd_client_held", "gauge", "1 when the policy held the client at the last decision.",
     cl_held},
    {"posd_client_cpu_lowered", "gauge",
     "1 when the CPU lever holds the client's threads lowered ([policy] cpu).", cl_cpu_lowered},
    {"posd_client_cpu_lowered_threads", "gauge",
     "The client's threads the CPU lever holds lowered now.", cl_cpu_threads},
    {"posd_client_override", "gauge", "1 when posctl set the client's class or priority.",
     cl_override},
    {"posd_client_priority", "gauge", "The client's priority (lower is more important).",
     cl_priority},
    {"posd_client_connected_seconds", "gauge", "Time since the client registered.", cl_connected},
    {"posd_client_operator_seconds", "gauge", "posd's running estimate of one operator's GPU time.",
     cl_op},
    {"posd_client_mem_used_bytes", "gauge",
     "Device memory the client holds, reserved and committed, IPC imports aside, summed over its "
     "devices, as its shim accounts it.",
     cl_mem_used},
    {"posd_client_mem_limit_bytes", "gauge",
     "The client's device memory limit on its device (+Inf: none).", cl_mem_limit},
    {"posd_client_mem_peak_bytes", "gauge", "The most device memory the client has held.",
     cl_mem_peak},
    {"posd_client_mem_refused_total", "counter",
     "Device memory allocations of the client refused for its limit.", cl_mem_refused},
};

/* A label value as the format wants it: backslash, double quote and newline escaped. */
static void put_label_value(FILE *out, const char *s, size_t max)
{
    for (size_t i = 0; i < max && s[i]; i++) {
        if (s[i] == '\\' || s[i] == '"')
            fprintf(out, "\\%c", s[i]);
        else if (s[i] == '\n')
            fputs("\\n", out);
        else
            fputc(s[i], out);
    }
}

/* A client's labels: device, app, class, its pod's namespace, pod and container (a client in
 * a pod only) and pid; or, anonymous, device, class and client (a series needs labels of its
 * own, and posd's number for a client tells no one who runs it, nor does a pod's name);
 * then KEY="VALUE" when KEY is not NULL (a histogram's le, a memory kind). */
static void put_labels(FILE *out, const struct pos_client_stats *c, enum pos_metrics_labels labels,
                       const char *key, const char *value)
{
    fprintf(out, "{device=\"%d\"", c->device);
    if (labels == POS_METRICS_LABELS_FULL) {
        fputs(",app=\"", out);
        put_label_value(out, c->app, sizeof c->app);
        fputc('"', out);
    }
    fputs(",class=\"", out);
    put_label_value(out, c->class_name, sizeof c->class_name);
    fputc('"', out);
    /* a client in a pod: its names, for the cluster's monitoring (absent outside a pod) */
    static const struct {
        const char *key;
        size_t off, size;
    } pod_labels[] = {
        {"namespace", offsetof(struct pos_client_stats, k8s_namespace), POS_K8S_NAMESPACE_MAX},
        {"pod", offsetof(struct pos_client_stats, pod), POS_K8S_POD_MAX},
        {"container", offsetof(struct pos_client_stats, container), POS_K8S_CONTAINER_MAX},
    };
    for (size_t i = 0; labels == POS_METRICS_LABELS_FULL && c->pod[0] && i < 3; i++) {
        fprintf(out, ",%s=\"", pod_labels[i].key);
        put_label_value(out, (const char *)c + pod_labels[i].off, pod_labels[i].size);
        fputc('"', out);
    }
    if (labels == POS_METRICS_LABELS_FULL)
        fprintf(out, ",pid=\"%d\"", c->pid);
    else
        fprintf(out, ",client=\"%u\"", c->client_id);
    if (key)
        fprintf(out, ",%s=\"%s\"", key, value);
    fputc('}', out);
}

/* A sample's value: whole numbers exactly (bytes, counts), +Inf as the format spells it. */
static void put_value(FILE *out, double v)
{
    if (isinf(v))
        fputs(v > 0 ? " +Inf\n" : " -Inf\n", out);
    else if (v == floor(v) && fabs(v) < 9007199254740992.0) /* 2^53 */
        fprintf(out, " %.0f\n", v);
    else
        fprintf(out, " %.9g\n", v);
}

/* The clients' committed memory by kind (enum pos_mem_kind), one series per kind. */
static void put_mem_kinds(FILE *out, const struct pos_client_stats *cs, size_t n,
                          enum pos_metrics_labels labels)
{
    fputs("# HELP posd_client_mem_committed_bytes Device memory the client's allocations hold, "
          "by kind (IPC: imported from another process, held against the exporter's limit).\n"
          "# TYPE posd_client_mem_committed_bytes gauge\n",
          out);
    for (size_t j = 0; j < n; j++)
        for (int k = 0; k < POS_MEM_KINDS; k++) {
            fputs("posd_client_mem_committed_bytes", out);
            put_labels(out, &cs[j], labels, "kind", sched_mem_kind_name(k));
            fprintf(out, " %" PRIu64 "\n", cs[j].mem_bytes[k]);
        }
}

/* ---- histograms --------------------------------------------------------------------------- */

/* The upper bound of bucket B of POS_WAIT_BUCKETS in seconds ("+Inf" for the last). Bucket 0
 * holds values under 2 us, bucket b values under 2^(b+1) us. */
static void bucket_le(int b, char *buf, size_t cap)
{
    if (b == POS_WAIT_BUCKETS - 1)
        snprintf(buf, cap, "+Inf");
    else
        snprintf(buf, cap, "%.9g", (double)(2ull << b) * 1e-6);
}

static void put_histogram(FILE *out, const char *name, const struct pos_client_stats *c,
                          enum pos_metrics_labels labels, const uint64_t *hist, int has_sum,
                          uint64_t sum_ns)
{
    uint64_t cum = 0;
    char le[32];
    for (int b = 0; b < POS_WAIT_BUCKETS; b++) {
        cum += hist[b];
        bucket_le(b, le, sizeof le);
        fprintf(out, "%s_bucket", name);
        put_labels(out, c, labels, "le", le);
        fprintf(out, " %" PRIu64 "\n", cum);
    }
    if (has_sum) {
        fprintf(out, "%s_sum", name);
        put_labels(out, c, labels, NULL, NULL);
        fprintf(out, " %.9g\n", (double)sum_ns * NS);
    }
    fprintf(out, "%s_count", name);
    put_labels(out, c, labels, NULL, NULL);
    fprintf(out, " %" PRIu64 "\n", cum);
}

int posd_metrics_text(FILE *out, const struct pos_device_stats *dev,
                      const struct pos_client_stats *cs, size_t n, enum pos_metrics_labels labels)
{
    fputs("# HELP posd_info posd's scheduling policy.\n# TYPE posd_info gauge\n", out);
    fputs("posd_info{policy=\"", out);
    put_label_value(out, dev->policy, sizeof dev->policy);
    fputs("\"} 1\n", out);
    for (size_t i = 0; i < sizeof device_metrics / sizeof device_metrics[0]; i++) {
        const struct device_metric *m = &device_metrics[i];
        if ((dev->telemetry & m->needs) != m->needs)
            continue;
        /* posd schedules one device (docs/posd.md, Limits): its totals are device 0's */
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n%s{device=\"0\"}", m->name, m->help, m->name,
                m->type, m->name);
        put_value(out, m->value(dev));
    }
    /* the sum of the rows below: a client's false account moves it by its own row alone */
    uint64_t mem_used = 0;
    for (size_t j = 0; j < n; j++)
        mem_used += cs[j].mem_used;
    fprintf(out,
            "# HELP posd_device_mem_used_bytes Device memory the clients hold (the sum of "
            "posd_client_mem_used_bytes).\n# TYPE posd_device_mem_used_bytes gauge\n"
            "posd_device_mem_used_bytes{device=\"0\"} %" PRIu64 "\n",
            mem_used);
    for (size_t i = 0; i < sizeof client_metrics / sizeof client_metrics[0]; i++) {
        const struct client_metric *m = &client_metrics[i];
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name, m->type);
        for (size_t j = 0; j < n; j++) {
            fputs(m->name, out);
            put_labels(out, &cs[j], labels, NULL, NULL);
            put_value(out, m->value(&cs[j]));
        }
    }
    put_mem_kinds(out, cs, n, labels);
    /* the shim counts its waits in buckets only: no sum to give */
    fputs("# HELP posd_client_grant_wait_seconds Time launches waited for a grant, in the shim "
          "(launches that did not wait are not counted).\n"
          "# TYPE posd_client_grant_wait_seconds histogram\n",
          out);
    for (size_t j = 0; j < n; j++)
        put_histogram(out, "posd_client_grant_wait_seconds", &cs[j], labels, cs[j].wait_hist, 0, 0);
    fputs("# HELP posd_client_request_duration_seconds Latency of the client's requests as posd "
          "infers them from synchronisations.\n"
          "# TYPE posd_client_request_duration_seconds histogram\n",
          out);
    for (size_t j = 0; j < n; j++)
        put_histogram(out, "posd_client_request_duration_seconds", &cs[j], labels, cs[j].req_hist,
                      1, cs[j].req_sum_ns);
    return ferror(out) ? -EIO : 0;
}
