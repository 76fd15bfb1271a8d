/* posd's configuration: the daemon settings, scheduling classes and the admin's rules that
 * match clients (by app name, uid, gid, cgroup) and set their class, priority, SLO, weight,
 * in-flight limit, SM share, GPU memory limit and device. Loaded with libinih from posd.conf plus
 * the drop-ins of policy.d/ in lexical order; docs/policy.md documents every key. */
#ifndef POS_SCHED_CONFIG_H
#define POS_SCHED_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "sched/mem_limit.h"
#include "sched/policy/policy.h"

#define POSD_NAME_MAX       64
#define POSD_CLASS_NAME_MAX 16
#define POSD_MAX_CLASSES    16
#define POSD_PATH_MAX       256
#define POSD_DEFAULT_STATE_DIR "/var/lib/posd"
/* Pod identity (sched/pod.h): a pod UID (36 characters, or 32 for a static pod) and a
 * container ID (64 hex digits as the runtimes write them, at most 128) */
#define POSD_POD_UID_MAX      40
#define POSD_CONTAINER_ID_MAX 129
#define POSD_K8S_NAMESPACE_MAX 64  /* a DNS label (KUBE_NAMESPACE_MAX) */
#define POSD_K8S_POD_MAX       254 /* a DNS subdomain (KUBE_POD_MAX) */
#define POSD_K8S_CONTAINER_MAX 64  /* a DNS label (KUBE_CONTAINER_MAX) */
#define POSD_K8S_DEVICES_MAX   128 /* device IDs of one resource, comma-separated */

enum posd_log_level { POSD_LOG_ERROR = 0, POSD_LOG_WARN, POSD_LOG_INFO, POSD_LOG_DEBUG };
/* [daemon] telemetry: auto loads eBPF telemetry when permitted, on refuses to start without */
enum posd_telemetry_mode { POSD_TELEMETRY_AUTO = 0, POSD_TELEMETRY_ON, POSD_TELEMETRY_OFF };
/* [kubernetes] enable: auto is on where the kubelet's log directory or pod-resources socket
 * exists at start */
enum posd_k8s_mode { POSD_K8S_AUTO = 0, POSD_K8S_YES, POSD_K8S_NO };
#define POSD_LISTEN_MAX 80 /* [metrics] listen, --metrics: "[ADDR6]:PORT" with room to spare */

struct posd_class {
    char name[POSD_CLASS_NAME_MAX];
    int priority;          /* lower number = more important */
    uint32_t max_inflight; /* operators in flight per client of the class; 0 = no limit */
    double min_share;      /* starvation guard: least share of each guard period, 0..1 */
    uint32_t sm_share;     /* percent of SMs (1..100) for its clients through MPS; 0 = unset */
    int cpu; /* the CPU lever of its clients: 0 = [policy] cpu's, else enum pos_cpu_lever + 1 */
    struct sched_mem_limit mem_limit; /* GPU memory of each client (SCHED_MEM_NO_LIMIT: none) */
};

struct posd_rule {
    char name[POSD_NAME_MAX];
    char file[POSD_PATH_MAX]; /* where it was defined, for messages */
    int line;
    /* matchers: a rule applies when every matcher it has matches */
    char match_app[POSD_NAME_MAX]; /* fnmatch pattern on the app name */
    int has_uid;
    uid_t uid;
    int has_gid;
    gid_t gid;
    char match_cgroup[POSD_PATH_MAX]; /* fnmatch pattern on the cgroup path */
    /* fnmatch patterns on the pod's names (sched/pod.h); a client without them never matches */
    char match_namespace[POSD_K8S_NAMESPACE_MAX];
    char match_pod[POSD_K8S_POD_MAX];
    char match_container[POSD_K8S_CONTAINER_MAX];
    /* settings: each applies when has_* is set */
    int has_class;
    char class_name[POSD_CLASS_NAME_MAX];
    int class_line;
    int has_priority;
    int priority;
    int has_slo;
    double slo_ms;
    int has_weight;
    double weight;
    int has_max_inflight;
    uint32_t max_inflight;
    int has_sm_share;
    uint32_t sm_share; /* percent of SMs (1..100), applied through MPS where present */
    int has_mem_limit;
    struct sched_mem_limit mem_limit; /* GPU memory the client may hold on each device */
    int has_device;
    int device;
};

struct posd_config {
    /* [daemon] */
    char socket[108];
    char policy[16];
    char default_class[POSD_CLASS_NAME_MAX];
    uint32_t tick_us; /* scheduling period while clients wait or work is in flight */
    uint32_t credits; /* grant window handed to a client beyond what it submitted */
    int log_level;    /* enum posd_log_level */
    char state_dir[POSD_PATH_MAX]; /* kernel profiles persist here (absolute) */
    int telemetry;    /* enum posd_telemetry_mode (read at start only) */
    char telemetry_driver[POSD_PATH_MAX]; /* the libcuda.so.1 to probe; "" = search for it */
    uint32_t telemetry_sample_ms; /* launch-rate window for unmanaged processes; 0 = off */
    int telemetry_ioctl;          /* 1: time clients' ioctl calls (a probe on every syscall) */
    char policy_dir[POSD_PATH_MAX]; /* the drop-ins' directory (main file only; "" = policy.d
                                     * beside it); after a load: the one that was read */
    /* [kubernetes] (read at start only) */
    int k8s_enable;                            /* enum posd_k8s_mode */
    char k8s_proc_root[POSD_PATH_MAX];         /* PROC_ROOT/PID/cgroup */
    char k8s_log_dir[POSD_PATH_MAX];           /* /var/log/pods */
    char k8s_containers_dir[POSD_PATH_MAX];    /* /var/log/containers */
    char k8s_pod_resources[POSD_PATH_MAX];     /* the pod-resources socket */
    char k8s_checkpoint[POSD_PATH_MAX];        /* the device manager's checkpoint */
    char k8s_resource[POSD_NAME_MAX];          /* whose devices a client is shown with */
    double k8s_refresh_s;                      /* the resolver's period */
    /* [policy] */
    double guard_period_ms;
    double min_share; /* default for classes that do not set one */
    double stall_ms;  /* in flight this long with no completion: no longer outranks anyone */
    double window_us; /* device time a windowed client without a cap may have in flight */
    double idle_grace_us; /* a client idle this briefly still holds less important ones */
    uint32_t profile_min; /* kernel shapes with fewer samples get a marker per launch */
    uint32_t profile_user_max; /* most kernel profiles one user's kernels may take */
    char profiles[POSD_PATH_MAX]; /* an offline profile file imported at start ("" none) */
    /* the keys the policies declare (corun_budget, schedule: pos_policy_ops.params), as given
     * (a schedule: its absolute path; policy_posd.c reads it) */
    struct pos_policy_args policy_args;
    int cpu;              /* enum pos_cpu_lever: clients outranked by one with a request under
                           * way run their threads at SCHED_IDLE or cpu_nice (classes may
                           * differ) */
    uint32_t cpu_nice;    /* the nice value of cpu = nice (1..19) */
    double cpu_hold_ms;   /* lowered this long after the last such request ended */
    /* [metrics] */
    char metrics_listen[POSD_LISTEN_MAX]; /* the endpoint's address, "" off (read at start) */
    int metrics_labels; /* enum pos_metrics_labels (metrics_text.h): full, or anonymous */
    /* [class NAME] */
    struct posd_class classes[POSD_MAX_CLASSES];
    int nclasses;
    /* [rule NAME], in the order they apply */
    struct posd_rule *rules;
    size_t nrules;
};

/* Who a client is, as posd established it (SO_PEERCRED and /proc, never the client's word). */
struct posd_identity {
    pid_t pid;
    uid_t uid;
    gid_t gid;
    char app[POSD_NAME_MAX];    /* POS_APP from its environment, else its executable's name */
    char exe[POSD_PATH_MAX];    /* /proc/PID/exe */
    char cgroup[POSD_PATH_MAX]; /* unified (v2) cgroup path, "" if none */
    /* its pod (sched/pod.h): UID and container ID from its cgroup, the names from the
     * kubelet's files and API; all "" outside a pod, and each name "" while it is not known */
    char pod_uid[POSD_POD_UID_MAX];
    char container_id[POSD_CONTAINER_ID_MAX];
    char k8s_namespace[POSD_K8S_NAMESPACE_MAX];
    char pod[POSD_K8S_POD_MAX];
    char container[POSD_K8S_CONTAINER_MAX];
    char devices[POSD_K8S_DEVICES_MAX]; /* of [kubernetes] resource the container holds */
};

/* What the configuration says of one client. */
struct posd_client_policy {
    char class_name[POSD_CLASS_NAME_MAX];
    int priority;
    double slo_ms; /* 0 = none */
    double weight; /* default 1 */
    uint32_t max_inflight;
    double min_share;
    uint32_t sm_share; /* 0 = not set */
    struct sched_mem_limit mem_limit; /* its rule's, else its class's (SCHED_MEM_NO_LIMIT) */
    int device;
    int cpu; /* enum pos_cpu_lever: its class's CPU lever, else [policy] cpu */
    char rule[POSD_NAME_MAX]; /* last rule that matched, "" if none */
};

/* Sets the built-in defaults (the scheduling ones are sched/core.h's SCHED_DEFAULT_*): socket
 * POS_DEFAULT_SOCKET, policy "pos", default class "latency", classes realtime (0), latency
 * (10), batch (20, no in-flight cap), none with a memory limit, tick 200 us, credits 1024,
 * guard period 200 ms, min share 0.01, stall 50 ms, cpu off (cpu_nice 19, cpu_hold 1000 ms). */
void posd_config_defaults(struct posd_config *c);

/* Loads MAIN (a missing MAIN is not an error when MAIN_OPTIONAL) and then every *.conf in
 * the main file's [daemon] policy_dir, else DROPIN_DIR, in lexical order (a missing directory
 * is fine) over the defaults; OUT's policy_dir says which was read. Returns 0, or
 * -EINVAL with "FILE:LINE: what is wrong" in ERR (the config is then untouched). */
int posd_config_load(const char *main, int main_optional, const char *dropin_dir,
                     struct posd_config *out, char *err, size_t errlen);

void posd_config_free(struct posd_config *c);

/* A metrics address, "PORT" (on 127.0.0.1), "ADDR:PORT" or "[ADDR6]:PORT", into *SA. Returns
 * its size, or 0 when SPEC is none of them. */
socklen_t posd_parse_listen(const char *spec, struct sockaddr_storage *sa);

/* The class named NAME, or NULL. */
const struct posd_class *posd_config_class(const struct posd_config *c, const char *name);

/* Applies every rule that matches ID, in order (later rules override earlier settings), over
 * the default class. */
void posd_config_match(const struct posd_config *c, const struct posd_identity *id,
                       struct posd_client_policy *out);

#endif
