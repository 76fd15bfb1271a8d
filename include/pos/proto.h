/* The posd wire protocol: messages on the Unix socket (SOCK_SEQPACKET) between posd and its
 * peers: shims registering as clients, and tools (posstat, posctl) asking for statistics.
 * Every message starts with struct pos_msg_hdr; a peer with another magic or version is
 * refused with POS_MSG_REJECT and a reason. Fixed layouts, little-endian, no pointers. */
#ifndef POS_PROTO_H
#define POS_PROTO_H

#include <stdint.h>

#define POS_PROTO_MAGIC    0x44534f50u /* "POSD" */
#define POS_PROTO_VERSION  7 /* 7: pod identity in STATS; 6: memory limits and accounts */
#define POS_MSG_MAX        131072 /* largest message posd sends (a stats reply) */
#define POS_REQ_MAX        4096   /* largest message a peer may send to posd */
#define POS_DEFAULT_SOCKET "/run/posd/posd.sock"
#define POS_APP_NAME_MAX   64

/* What a committed byte is (the rows of the ledger). IPC-imported memory is shown but held
 * against its exporter's limit, not the importer's (docs/memory.md). */
enum pos_mem_kind {
    POS_MEM_LINEAR = 0, /* cuMemAlloc */
    POS_MEM_PITCHED,    /* cuMemAllocPitch */
    POS_MEM_MANAGED,    /* cuMemAllocManaged: counted (docs/memory.md says why) */
    POS_MEM_ARRAY,      /* cuArrayCreate, cuArray3DCreate, cuMipmappedArrayCreate */
    POS_MEM_POOL,       /* stream-ordered: cuMemAllocAsync, cuMemAllocFromPoolAsync */
    POS_MEM_VMM,        /* cuMemCreate with a device location (physical memory) */
    POS_MEM_IPC,        /* cuIpcOpenMemHandle: imported, not counted in used */
    POS_MEM_CONTEXT,    /* measured at context creation */
    POS_MEM_MODULE,     /* measured at module load */
    POS_MEM_KINDS
};

enum pos_msg_type {
    POS_MSG_HELLO = 1,     /* shim -> posd: register as a client */
    POS_MSG_WELCOME,       /* posd -> shim: accepted; carries the client's memfd and eventfd */
    POS_MSG_REJECT,        /* posd -> peer: refused; the text says why */
    POS_MSG_STATS_REQ,     /* tool -> posd */
    POS_MSG_STATS,         /* posd -> tool: struct pos_stats_reply + clients */
    POS_MSG_NAMES,         /* shim -> posd: kernel names, struct pos_names + entries */
    POS_MSG_CONTROL,       /* tool (posctl) -> posd: struct pos_control */
    POS_MSG_CONTROL_REPLY, /* posd -> tool: struct pos_control_reply */
    POS_MSG_KERNELS_REQ,   /* tool -> posd: the kernel profiles (no body) */
    POS_MSG_KERNELS,       /* posd -> tool: struct pos_kernels_reply + kernels */
};

struct pos_msg_hdr {
    uint32_t magic;   /* POS_PROTO_MAGIC */
    uint16_t version; /* POS_PROTO_VERSION */
    uint16_t type;    /* enum pos_msg_type */
    uint32_t len;     /* bytes after this header */
    uint32_t reserved;
};

/* HELLO: what the shim says of itself. posd identifies the client by SO_PEERCRED and /proc,
 * never by this; it only checks versions. */
struct pos_hello {
    uint32_t record_version; /* POS_OP_RECORD_VERSION of the shim */
    uint32_t shm_version;    /* POS_SHM_VERSION the shim understands */
};

/* WELCOME, with SCM_RIGHTS: [0] memfd of struct pos_client_shm, [1] eventfd to kick posd.
 * SM_SHARE is the percentage of the device's SMs (1..100) the client's contexts may use, which
 * the shim puts in CUDA_MPS_ACTIVE_THREAD_PERCENTAGE before the driver creates its first
 * context; 0 when none applies (no rule sets one, or the device has no MPS). */
struct pos_welcome {
    uint32_t client_id;
    uint32_t shm_size;
    uint32_t sm_share;
    uint32_t mem_limit_ppm; /* as the shared memory's (pos/client_shm.h), which posd also writes */
    uint64_t mem_limit;     /* bytes, POS_MEM_UNLIMITED (UINT64_MAX) for none: the limit when the
                             * shim starts, for CUDA_MPS_PINNED_DEVICE_MEM_LIMIT */
};

/* REJECT: a NUL-terminated reason follows. */

/* NAMES: the client's kernel ids FIRST .. FIRST + COUNT - 1, in order, each entry a uint16_t
 * length and that many bytes of mangled name (no NUL). Ids are sent once each, from 1 up;
 * a name is at most POS_KERNEL_NAME_MAX bytes (longer ones are cut there, on both sides:
 * posd's kernel key is the 64-bit FNV-1a hash of the bytes it received). */
#define POS_KERNEL_NAME_MAX 1024
#define POS_MAX_KERNEL_IDS  32768

struct pos_names {
    uint32_t first;
    uint32_t count;
};

/* ---- statistics ------------------------------------------------------------------------- */

/* Grant waits: bucket 0 counts waits under 2 us, bucket i (1..22) waits of [2^i, 2^(i+1)) us,
 * and the last bucket every wait of 2^23 us (8.4 s) or more. */
#define POS_WAIT_BUCKETS   24
#define POS_CLASS_NAME_MAX 16
#define POS_K8S_NAMESPACE_MAX 64  /* with the NUL: a DNS label */
#define POS_K8S_POD_MAX       256 /* a DNS subdomain (253) */
#define POS_K8S_CONTAINER_MAX 64
#define POS_K8S_DEVICES_MAX   128

struct pos_device_stats {
    uint64_t uptime_ns;
    uint32_t clients;
    uint32_t policy_len;
    char policy[16];
    uint64_t submitted, released, completed; /* since posd started, departed clients too */
    uint64_t busy_ns; /* time with at least one operator of any client in flight */
    uint32_t telemetry; /* POS_TELE_* of the eBPF telemetry running (0: none, docs/telemetry.md) */
    uint32_t unmanaged; /* processes using the GPU that are not clients (POS_TELE_DISCOVERY) */
    uint32_t flags;     /* POS_DEV_* */
    uint32_t reserved;
    /* processes that initialised the driver (cuInit) when the kernel side's table of them
     * (POS_TELE_MAX_GPU, bpf/telemetry.h) was full: not in `unmanaged`, never listed */
    uint64_t unmanaged_untracked;
    uint64_t profiles;         /* kernel profiles posd holds, every user's */
    uint64_t profiles_refused; /* new kernel shapes not learnt: their user had profile_user_max */
};

#define POS_DEV_EVERYONE 0x1 /* the reply lists every client and the unmanaged processes: the
                                asker is root or in the group posd */

#define POS_TELE_EXITS     0x1 /* client exits seen at once */
#define POS_TELE_CPU       0x2 /* run-queue delay and off-CPU time of clients */
#define POS_TELE_DISCOVERY 0x4 /* processes that use the GPU without the shim */
#define POS_TELE_IOCTL     0x8 /* ioctl() count and latency of clients */

struct pos_client_stats {
    uint32_t client_id;
    int32_t pid;
    uint32_t uid, gid;
    char app[POS_APP_NAME_MAX];
    char class_name[POS_CLASS_NAME_MAX];
    int32_t priority;
    uint32_t flags; /* POS_CLIENT_* */
    uint64_t submitted, released, completed;
    uint64_t in_flight, queued;
    uint64_t busy_ns; /* time with at least one of its operators in flight */
    uint64_t sync_ns, syncs;
    uint64_t waits; /* launches that had to wait for a grant */
    uint64_t wait_hist[POS_WAIT_BUCKETS];
    uint64_t connected_ns; /* how long it has been registered */
    /* requests as posd infers them from synchronisations (docs/posd.md) */
    uint64_t requests;
    uint64_t req_p50_ns, req_p99_ns;
    uint64_t stalls;     /* times found in flight with no completion for stall_ms */
    uint64_t sync_lag_n; /* synchronisation reports, and how long after the call returned */
    uint64_t sync_lag_p50_ns, sync_lag_p99_ns; /* posd read them */
    uint64_t op_ns; /* posd's running estimate of one of its operators' GPU time */
    /* request latencies in the buckets of wait_hist, and their sum (Prometheus histograms) */
    uint64_t req_hist[POS_WAIT_BUCKETS];
    uint64_t req_sum_ns;
    int32_t device; /* the device its rules put it on */
    uint32_t cpu_threads; /* its threads the CPU lever holds lowered now (POS_CLIENT_CPU_*) */
    /* eBPF telemetry over its last second (0 without POS_TELE_CPU) */
    uint64_t runq_delay_ns;   /* mean wake-up to running delay of its launching threads */
    uint64_t runq_ns_per_s;   /* time its launching threads waited to run, per second */
    uint64_t offcpu_ns_per_s; /* off-CPU time of its launching threads per second */
    uint64_t ioctls_per_s;    /* ioctl() calls (the driver's) of its threads per second */
    uint64_t ioctl_ns;        /* their mean latency (0 without POS_TELE_IOCTL) */
    /* device memory (docs/memory.md): its account as its shim keeps it, summed over devices,
     * and the limit posd gives it (UINT64_MAX: none) on the device its rules put it on */
    uint64_t mem_used, mem_peak, mem_refused;
    uint64_t mem_limit;
    uint64_t mem_total; /* that device's memory, as the shim saw it (0: not known yet) */
    uint32_t mem_limit_ppm; /* non-zero: the limit is this share of the device (millionths), and
                             * mem_limit that share of mem_total (UINT64_MAX until it is known) */
    uint32_t mem_reserved;
    uint64_t mem_bytes[POS_MEM_KINDS]; /* committed, by kind */
    /* its Kubernetes pod (docs/posd.md, "Pod identity"), from its cgroup and the kubelet's
     * files and API, never from the client: each "" outside a pod or while it is not known */
    char k8s_namespace[POS_K8S_NAMESPACE_MAX];
    char pod[POS_K8S_POD_MAX];
    char container[POS_K8S_CONTAINER_MAX];
    char pod_devices[POS_K8S_DEVICES_MAX]; /* the device IDs of [kubernetes] resource it holds,
                                            * comma-separated */
};

/* A process that uses the GPU driver without being a client (seen by eBPF uprobes). */
struct pos_unmanaged_stats {
    int32_t pid;
    uint32_t contexts; /* contexts it created or retained */
    uint32_t devices;  /* bit D: a context on device D */
    uint32_t flags;    /* POS_UNMANAGED_* */
    uint64_t seen_ns;  /* since its first driver call */
    uint64_t launches_per_s; /* when POS_UNMANAGED_SAMPLED: launches a second in the window */
    char comm[16];
};

#define POS_UNMANAGED_SAMPLED 0x1

#define POS_CLIENT_HELD     0x1 /* held by policy at the last decision */
#define POS_CLIENT_OVERRIDE 0x2 /* posctl set its class, priority or memory limit (until exit
                                   * or reload) */
#define POS_CLIENT_CPU_IDLE 0x4 /* the CPU lever holds its threads at SCHED_IDLE now */
#define POS_CLIENT_CPU_NICE 0x8 /* the CPU lever holds its threads at [policy] cpu_nice now */

/* STATS reply: a pos_device_stats, then nclients pos_client_stats, then nunmanaged
 * pos_unmanaged_stats (only to root and the group posd: pids and commands of anyone). Root and members of the
 * group posd get every client; anyone else only those of their own uid, and dev.clients counts
 * those alone (the device totals stay machine-wide). When more clients are
 * registered than fit in POS_MSG_MAX, dev.clients is larger than nclients: the reply carries
 * the first nclients of them. Client counters that come from the client's own shared memory
 * (sync_ns, syncs, waits, wait_hist) are as the client wrote them. */
struct pos_stats_reply {
    struct pos_device_stats dev;
    uint32_t nclients;
    uint32_t nunmanaged;
    /* struct pos_client_stats clients[nclients], struct pos_unmanaged_stats [nunmanaged] */
};

/* ---- kernels (posstat -k) ------------------------------------------------------------------ */

/* One kernel profile (docs/policy.md, "Kernel profiles"): a user's kernel at one launch shape,
 * with the name a client of that user gave it (the first 63 bytes, as sent). */
struct pos_kernel_stats {
    uint64_t key; /* 64-bit FNV-1a of the mangled name */
    uint32_t uid;
    uint32_t co_ratio_milli; /* co-run samples' mean over the solo mean, x 1000 (0: none) */
    uint32_t grid[3], block[3];
    uint64_t launches; /* seen since posd started */
    uint64_t samples, mean_ns, sd_ns; /* solo duration */
    uint64_t co_samples;
    char name[64]; /* NUL-terminated; "" when no client sent it */
};

/* KERNELS reply: then nkernels pos_kernel_stats, most device time (launches x mean) first.
 * Root and the group posd get every user's kernels; anyone else only their own uid's. total
 * counts what the asker may see; the reply carries what fits in POS_MSG_MAX. */
struct pos_kernels_reply {
    uint64_t uptime_ns; /* posd's */
    uint32_t nkernels;
    uint32_t total;
    /* struct pos_kernel_stats kernels[nkernels] */
};

/* ---- control (posctl) --------------------------------------------------------------------- */

/* What a CONTROL request asks. Changes are accepted from root and members of the group posd
 * alone (SO_PEERCRED, SO_PEERGROUPS); anyone else gets status -EPERM. POS_CTL_STATUS changes
 * nothing and is open to all. */
enum pos_control_op {
    POS_CTL_STATUS = 1, /* nothing: the reply's drained mask */
    POS_CTL_SET,        /* client_id's class and/or priority (flags), until it exits or the
                           configuration reloads */
    POS_CTL_RELOAD,     /* reload the configuration, as SIGHUP does */
    POS_CTL_DRAIN,      /* grant no new work on device */
    POS_CTL_UNDRAIN,
    POS_CTL_PROFILES_SAVE,  /* write the kernel profiles to posd's state file now */
    POS_CTL_PROFILES_LOAD,  /* import the profile file at path (which the asker may read) */
    POS_CTL_PROFILES_RESET, /* forget every kernel profile, and the state file */
};

#define POS_CTL_HAS_CLASS    0x1 /* SET: class_name (its priority and in-flight cap too) */
#define POS_CTL_HAS_PRIORITY 0x2 /* SET: priority, over the class's */
#define POS_CTL_HAS_MEM_LIMIT 0x4 /* SET: mem_limit / mem_limit_ppm, over its rules' */
#define POS_CTL_MAX_DEVICES  64

struct pos_control {
    uint32_t op; /* enum pos_control_op */
    uint32_t flags;
    uint32_t client_id;
    int32_t priority;
    int32_t device;
    uint32_t mem_limit_ppm; /* SET with POS_CTL_HAS_MEM_LIMIT: as pos_welcome's */
    char class_name[POS_CLASS_NAME_MAX];
    char path[256]; /* PROFILES_LOAD: an absolute path, NUL-terminated */
    uint64_t mem_limit; /* SET with POS_CTL_HAS_MEM_LIMIT: bytes, UINT64_MAX for none */
};

struct pos_control_reply {
    int32_t status; /* 0, or a negative errno: -EPERM, -ESRCH (no such client), -EINVAL */
    uint32_t reserved;
    uint64_t drained;  /* bit D: device D is drained (after the request) */
    char message[240]; /* one NUL-terminated line for a person: what was done, or why not */
};

#endif
