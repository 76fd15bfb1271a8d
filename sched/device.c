/* What posd knows of the GPU it schedules (struct pos_sched_device): its SMs and per-SM limits
 * from the CUDA driver the clients use, and whether kernels of different processes run at once
 * (MPS). The driver is asked by a short-lived child process, so posd itself never loads it:
 * no driver threads, memory or crash in the daemon, and no simulated device held for posd's
 * whole life. Without a driver posd assumes documented defaults (docs/posd.md). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sched/device.h"

/* The CUDA driver API subset the probe calls, by the driver's own ABI (cuda.h), so posd needs
 * neither the toolkit's headers nor a link-time libcuda. */
typedef int cu_result;
typedef cu_result (*cu_init_fn)(unsigned);
typedef cu_result (*cu_count_fn)(int *);
typedef cu_result (*cu_get_fn)(int *, int);
typedef cu_result (*cu_attr_fn)(int *, int, int);
typedef cu_result (*cu_name_fn)(char *, int, int);
typedef cu_result (*cu_errname_fn)(cu_result, const char **);
typedef cu_result (*sim_mps_fn)(int, int *);

/* CUdevice_attribute values (stable across CUDA releases) */
#define CU_ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR 81
#define CU_ATTR_MULTIPROCESSOR_COUNT                 16
#define CU_ATTR_MAX_THREADS_PER_MULTIPROCESSOR       39
#define CU_ATTR_MAX_BLOCKS_PER_MULTIPROCESSOR        106

/* The simulated driver's default device (xavier-nx, docs/sim.md): what posd assumes when no
 * driver answers. */
#define DEFAULT_SMS            6
#define DEFAULT_THREADS_PER_SM 2048
#define DEFAULT_BLOCKS_PER_SM  32
#define DEFAULT_SMEM_PER_SM    (96 * 1024)

#define PROBE_TIMEOUT_MS 10000 /* a driver that hangs in cuInit longer is given up on */
#define MPS_PIPE_DEFAULT "/tmp/nvidia-mps"

/* What the child reports. */
struct probe_result {
    int ok;    /* the driver answered every query */
    int sim;   /* it is pos's simulated driver */
    int mps;   /* sim only: its mps mode */
    int count; /* devices */
    uint32_t sms, threads, blocks, smem;
    char name[96];
    char why[160]; /* when !ok */
};

static void probe_fail(struct probe_result *r, const char *what, cu_result rc,
                       cu_errname_fn errname)
{
    const char *s = NULL;
    if (errname)
        errname(rc, &s);
    snprintf(r->why, sizeof r->why, "%s failed: %s (%d)", what, s ? s : "error", rc);
}

static int attr(cu_attr_fn get, int what, int dev, uint32_t *out)
{
    int v = 0;
    cu_result rc = get(&v, what, dev);
    if (rc == 0 && v > 0)
        *out = (uint32_t)v;
    return rc;
}

/* In the child: loads libcuda.so.1 as the clients do (LD_LIBRARY_PATH picks the simulated one)
 * and asks it about device 0, without creating a context. */
static void probe_driver(struct probe_result *r)
{
    /* the probe must not be an MPS client: as root it would make the MPS control daemon start
     * a server for root, and only one user's server may run at a time; it reads the device's
     * own limits either way */
    setenv("CUDA_MPS_PIPE_DIRECTORY", "/dev/null/posd-probe", 1);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(r->why, sizeof r->why, "no CUDA driver (%s)", dlerror());
        return;
    }
    cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
    cu_count_fn count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
    cu_get_fn get = (cu_get_fn)dlsym(h, "cuDeviceGet");
    cu_attr_fn getattr = (cu_attr_fn)dlsym(h, "cuDeviceGetAttribute");
    cu_name_fn getname = (cu_name_fn)dlsym(h, "cuDeviceGetName");
    cu_errname_fn errname = (cu_errname_fn)dlsym(h, "cuGetErrorName");
    sim_mps_fn sim_mps = (sim_mps_fn)dlsym(h, "pos_sim_device_mps");
    if (!init || !count || !get || !getattr || !getname) {
        snprintf(r->why, sizeof r->why, "libcuda.so.1 lacks the device entry points");
        return;
    }
    cu_result rc;
    int dev = 0;
    if ((rc = init(0)) != 0) {
        probe_fail(r, "cuInit", rc, errname);
        return;
    }
    if ((rc = count(&r->count)) != 0) {
        probe_fail(r, "cuDeviceGetCount", rc, errname);
        return;
    }
    if (r->count < 1) {
        snprintf(r->why, sizeof r->why, "the CUDA driver sees no device");
        return;
    }
    if ((rc = get(&dev, 0)) != 0) {
        probe_fail(r, "cuDeviceGet", rc, errname);
        return;
    }
    if ((rc = getname(r->name, sizeof r->name, dev)) != 0) {
        probe_fail(r, "cuDeviceGetName", rc, errname);
        return;
    }
    r->name[sizeof r->name - 1] = '\0';
    if ((rc = attr(getattr, CU_ATTR_MULTIPROCESSOR_COUNT, dev, &r->sms)) != 0 ||
        (rc = attr(getattr, CU_ATTR_MAX_THREADS_PER_MULTIPROCESSOR, dev, &r->threads)) != 0 ||
        (rc = attr(getattr, CU_ATTR_MAX_BLOCKS_PER_MULTIPROCESSOR, dev, &r->blocks)) != 0 ||
        (rc = attr(getattr, CU_ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev, &r->smem)) != 0) {
        probe_fail(r, "cuDeviceGetAttribute", rc, errname);
        return;
    }
    if (sim_mps) {
        r->sim = 1;
        if ((rc = sim_mps(dev, &r->mps)) != 0) {
            probe_fail(r, "pos_sim_device_mps", rc, errname);
            return;
        }
    }
    r->ok = r->sms > 0 && r->threads > 0 && r->blocks > 0 && r->smem > 0;
    if (!r->ok)
        snprintf(r->why, sizeof r->why, "the driver reported a zero SM count or limit");
}

/* Runs probe_driver in a child and collects its result (with a timeout). Returns 0 when the
 * child reported, a negative errno value with R->why set otherwise. */
static int probe_in_child(struct probe_result *r)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0) {
        int e = errno;
        snprintf(r->why, sizeof r->why, "pipe: %s", strerror(e));
        return -e;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        snprintf(r->why, sizeof r->why, "fork: %s", strerror(e));
        close(fds[0]);
        close(fds[1]);
        return -e;
    }
    if (pid == 0) {
        close(fds[0]);
        struct probe_result mine;
        memset(&mine, 0, sizeof mine);
        probe_driver(&mine);
        ssize_t n = write(fds[1], &mine, sizeof mine);
        (void)n;
        /* exit, not _exit: the driver's destructors let go of what cuInit took (the simulated
         * driver unlinks its device segment when the probe was its only user) */
        exit(0);
    }
    close(fds[1]);
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    int ready;
    do
        ready = poll(&p, 1, PROBE_TIMEOUT_MS);
    while (ready < 0 && errno == EINTR);
    ssize_t n = ready > 0 ? read(fds[0], r, sizeof *r) : -1;
    close(fds[0]);
    if (n != (ssize_t)sizeof *r) {
        kill(pid, SIGKILL);
        memset(r, 0, sizeof *r);
        snprintf(r->why, sizeof r->why, "the driver probe %s",
                 ready == 0 ? "did not answer within 10 s" : "died");
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    return r->why[0] && !r->ok ? -1 : 0;
}

/* Whether an MPS control daemon listens in DIR: its control socket is there and accepts a
 * connection (a socket left by a daemon that died refuses it). */
static int mps_control_live(const char *dir)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if ((size_t)snprintf(a.sun_path, sizeof a.sun_path, "%s/control", dir) >= sizeof a.sun_path)
        return 0;
    struct stat st;
    if (stat(a.sun_path, &st) < 0 || !S_ISSOCK(st.st_mode))
        return 0;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return 0;
    int live = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    close(s);
    return live;
}

const char *posd_mps_pipe_dir(void)
{
    const char *d = getenv("CUDA_MPS_PIPE_DIRECTORY");
    return d && *d ? d : MPS_PIPE_DEFAULT;
}

int posd_device_probe(struct pos_sched_device *dev)
{
    struct probe_result r;
    memset(&r, 0, sizeof r);
    int found = probe_in_child(&r) == 0 && r.ok;
    dev->index = 0;
    if (found) {
        dev->sm_count = r.sms;
        dev->max_threads_per_sm = r.threads;
        dev->max_blocks_per_sm = r.blocks;
        dev->smem_per_sm = r.smem;
    } else {
        dev->sm_count = DEFAULT_SMS;
        dev->max_threads_per_sm = DEFAULT_THREADS_PER_SM;
        dev->max_blocks_per_sm = DEFAULT_BLOCKS_PER_SM;
        dev->smem_per_sm = DEFAULT_SMEM_PER_SM;
    }
    /* the simulated driver says its mode; on NVIDIA's, processes share the SMs only through
     * an MPS control daemon, which listens where CUDA_MPS_PIPE_DIRECTORY (as posd's clients
     * have it) says */
    const char *pipe_dir = posd_mps_pipe_dir();
    int daemon = !(found && r.sim) && mps_control_live(pipe_dir);
    dev->concurrent = found && r.sim ? r.mps : daemon;
    char how[200];
    if (found && r.sim)
        snprintf(how, sizeof how, "simulated driver in %s mode: %s", r.mps ? "mps" : "timeslice",
                 r.mps ? "processes run at once" : "processes are time-sliced");
    else
        snprintf(how, sizeof how, "%s at %s: %s",
                 daemon ? "MPS control daemon" : "no MPS control daemon", pipe_dir,
                 daemon ? "processes run at once" : "processes are time-sliced");
    if (found)
        posd_log(POSD_LOG_INFO,
                 "device 0: %s, %u SMs, %u threads/SM, %u blocks/SM, %u KiB shared memory/SM; "
                 "%s%s",
                 r.name, dev->sm_count, dev->max_threads_per_sm, dev->max_blocks_per_sm,
                 dev->smem_per_sm / 1024, how,
                 r.count > 1 ? " (more devices present: posd schedules device 0)" : "");
    else
        posd_log(POSD_LOG_WARN,
                 "device 0: %s; assuming the defaults %u SMs, %u threads/SM, %u blocks/SM, %u "
                 "KiB shared memory/SM; %s",
                 r.why, dev->sm_count, dev->max_threads_per_sm, dev->max_blocks_per_sm,
                 dev->smem_per_sm / 1024, how);
    return found ? 0 : -1;
}
