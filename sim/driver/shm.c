/* The shared virtual GPU: one POSIX shared-memory segment per POS_SIM_INSTANCE, created by
 * its first user (drv_attach, cuInit's work), and unlinked by its last user (at exit);
 * segments of other instances whose processes are all gone are reclaimed at attach. The lock
 * that guards it is lock.c's. */
#include "sim/driver/drv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void instance_name(char *out, size_t len)
{
    const char *inst = getenv("POS_SIM_INSTANCE");
    char clean[65];
    size_t k = 0;
    if (!inst || !*inst)
        inst = "default";
    for (size_t i = 0; inst[i] && k < sizeof clean - 1; i++) {
        char c = inst[i];
        clean[k++] = (char)((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                    (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'
                                ? c
                                : '_');
    }
    clean[k] = '\0';
    snprintf(out, len, "/pos-sim.%u.%s", (unsigned)getuid(), clean);
}

static void shm_init_header(struct sim_shm *shm, const struct sim_dev_params *p)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    /* Priority inheritance: a holder that the host scheduler ranks low (SCHED_IDLE, a high
     * nice value, posd's CPU lever) runs at the priority of the device process while the
     * latter waits for it, so a low thread inside the lock delays the virtual GPU no longer
     * than its critical section (the device process is real-time where it may be). */
    pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT);
    pthread_mutex_init(&shm->lock, &a);
    pthread_mutexattr_destroy(&a);
    shm->magic = SIM_SHM_MAGIC;
    shm->version = SIM_SHM_VERSION;
    shm->dead = 0;
    shm->origin_ns = drv_mono_ns();
    shm->last_liveness_ns = 0;
    sim_gpu_init(&shm->gpu, p, 0);
}

static int same_device(const struct sim_dev_params *a, const struct sim_dev_params *b)
{
    return strcmp(a->preset, b->preset) == 0 && strcmp(a->name, b->name) == 0 &&
           a->num_sms == b->num_sms && a->mode == b->mode && a->timeslice_us == b->timeslice_us &&
           a->scale == b->scale && a->fp32_flops == b->fp32_flops && a->dram_bw == b->dram_bw;
}

static int any_owner(const struct sim_gpu *g)
{
    for (int i = 0; i < SIM_MAX_OWNERS; i++)
        if (g->owners[i].used)
            return 1;
    return 0;
}

static size_t segment_size(void)
{
    return (sizeof(struct sim_shm) + 4095) & ~(size_t)4095;
}

/* The segment's creator still holds its advisory lock on FD: it is alive and initialising. */
static int creator_busy(int fd)
{
    if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
        flock(fd, LOCK_UN);
        return 0;
    }
    return errno == EWOULDBLOCK;
}

/* Maps the segment NAME, creating it if needed. Returns 0, or -EAGAIN to retry. */
static int map_segment(const struct sim_dev_params *p, struct sim_shm **out)
{
    size_t size = segment_size();
    int created = 1;
    int fd = shm_open(drv.shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        created = 0;
        fd = shm_open(drv.shm_name, O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0 && errno == ENOENT)
            return -EAGAIN; /* unlinked meanwhile */
    }
    if (fd < 0)
        return -errno;
    /* The creator holds an advisory lock on the segment until it is initialised (a dead
     * creator's goes with it), so that a waiter tells a slow creator (starved, at SCHED_IDLE)
     * from a dead one: only a dead one's segment is replaced. */
    if (created)
        flock(fd, LOCK_EX);
    if (created && ftruncate(fd, (off_t)size) < 0) {
        int e = errno;
        close(fd);
        shm_unlink(drv.shm_name);
        return -e;
    }
    if (!created) {
        /* the creator may not have sized it yet: wait while it lives (after 2 s, a creator
         * that holds no lock on it is dead) */
        struct stat st;
        for (int i = 0;; i++) {
            if (fstat(fd, &st) == 0 && (size_t)st.st_size >= size)
                break;
            if (i >= 2000 && !creator_busy(fd))
                break;
            usleep(1000);
        }
        if (fstat(fd, &st) < 0 || (size_t)st.st_size != size) {
            close(fd);
            drv_debug("segment %s has the wrong size: replacing it", drv.shm_name);
            shm_unlink(drv.shm_name);
            return -EAGAIN;
        }
    }
    struct sim_shm *shm = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (shm == MAP_FAILED) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (created) {
        shm_init_header(shm, p);
        /* fault injection for tests: a creator that is slow to initialise (starved) */
        const char *slow = getenv("POS_SIM_FAULT_SLOW_CREATE_MS");
        if (slow && *slow)
            usleep((useconds_t)atoi(slow) * 1000u);
        atomic_store_explicit(&shm->ready, 1, memory_order_release);
    } else {
        for (int i = 0; !atomic_load_explicit(&shm->ready, memory_order_acquire); i++) {
            if (i >= 2000 && !creator_busy(fd))
                break;
            usleep(1000);
        }
        if (!atomic_load(&shm->ready) || shm->magic != SIM_SHM_MAGIC ||
            shm->version != SIM_SHM_VERSION) {
            /* its creator died before finishing, or an older build made it */
            drv_debug("segment %s is unusable: replacing it", drv.shm_name);
            munmap(shm, size);
            close(fd);
            shm_unlink(drv.shm_name);
            return -EAGAIN;
        }
    }
    close(fd); /* the creator's advisory lock goes with it */
    drv.shm_size = size;
    *out = shm;
    return 0;
}

/* Every process recorded in the segment SHM is gone (pid and start time), or it has none. A
 * read without the lock: a caller that acts on it checks again under the lock. */
static int all_owners_dead(const struct sim_shm *shm)
{
    for (int i = 0; i < SIM_MAX_OWNERS; i++)
        if (shm->gpu.owners[i].used && drv_owner_alive(&shm->gpu.owners[i]))
            return 0;
    return 1;
}

/* One segment of another instance of this uid: unlinks it if it is initialised, of this
 * layout, and every process it records is gone (its last process was killed, so none
 * unlinked it). Under its lock, with the protocol of drv_detach (dead = 1, then unlink), so
 * a process attaching to it meanwhile sees it dead and makes a new one; a lock that is held
 * (a live user, or a stopped one) leaves it alone. */
static void reclaim_segment(const char *name, size_t size)
{
    int fd = shm_open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_uid != getuid() || !S_ISREG(st.st_mode) ||
        (size_t)st.st_size != size) {
        close(fd);
        return;
    }
    struct sim_shm *shm = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (shm == MAP_FAILED)
        return;
    if (atomic_load_explicit(&shm->ready, memory_order_acquire) && shm->magic == SIM_SHM_MAGIC &&
        shm->version == SIM_SHM_VERSION && !shm->dead && all_owners_dead(shm)) {
        int rc = pthread_mutex_trylock(&shm->lock);
        if (rc == 0 || rc == EOWNERDEAD) {
            char path[320];
            struct stat now;
            snprintf(path, sizeof path, "/dev/shm%s", name);
            /* still the same segment under that name, and still unused */
            if (!shm->dead && all_owners_dead(shm) && stat(path, &now) == 0 &&
                now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
                shm->dead = 1;
                shm_unlink(name);
                drv_debug("unlinked %s: every process of that virtual GPU is gone", name);
            }
            if (rc == EOWNERDEAD)
                pthread_mutex_consistent(&shm->lock);
            pthread_mutex_unlock(&shm->lock);
        }
    }
    munmap(shm, size);
}

/* At attach: the segments of this uid's other instances whose processes are all gone (killed,
 * so none unlinked it) are unlinked, so that instances named per run (tests, scripts) leave
 * nothing behind for long in /dev/shm (docs/sim.md). This instance's own segment is reused
 * afresh by drv_attach instead. */
static void reclaim_dead_segments(size_t size)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return;
    char prefix[48];
    snprintf(prefix, sizeof prefix, "pos-sim.%u.", (unsigned)getuid());
    struct dirent *e;
    while ((e = readdir(d))) {
        char name[300];
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        snprintf(name, sizeof name, "/%s", e->d_name);
        if (strcmp(name, drv.shm_name) != 0)
            reclaim_segment(name, size);
    }
    closedir(d);
}

CUresult drv_attach(void)
{
    struct sim_dev_params p;
    char err[512];
    if (sim_params_from_env(&p, err, sizeof err) < 0) {
        fprintf(stderr, "pos-sim: %s\n", err);
        return CUDA_ERROR_NO_DEVICE;
    }
    instance_name(drv.shm_name, sizeof drv.shm_name);
    const char *stats = getenv("POS_SIM_STATS");
    drv.lock_stats = stats && *stats;
    drv.attach_mono_ns = drv_mono_ns();
    reclaim_dead_segments(segment_size());
    for (int attempt = 0; attempt < 50; attempt++) {
        struct sim_shm *shm = NULL;
        int rc = map_segment(&p, &shm);
        if (rc == -EAGAIN)
            continue;
        if (rc < 0 || !shm) { /* no segment without an error: only if a call left errno 0 */
            fprintf(stderr, "pos-sim: cannot map the virtual GPU %s: %s\n", drv.shm_name,
                    strerror(rc < 0 ? -rc : EIO));
            return CUDA_ERROR_NO_DEVICE;
        }
        drv.shm = shm;
        drv.owner = -1;
        drv_lock();
        if (shm->dead) {
            drv_unlock();
            munmap(shm, drv.shm_size);
            continue;
        }
        drv_liveness_scan(drv_mono_ns());
        struct sim_gpu *g = &shm->gpu;
        if (!any_owner(g)) {
            /* nobody uses it: it becomes a fresh device of the kind this process asked for */
            shm->origin_ns = drv_mono_ns();
            sim_gpu_init(g, &p, 0);
            for (int i = 0; i < SIM_MAX_OWNERS; i++)
                drv_ring_reset(i);
        } else if (!same_device(&g->p, &p)) {
            fprintf(stderr,
                    "pos-sim: virtual GPU '%s' is in use as %s (%s, scale %g); this process "
                    "asked for %s (%s, scale %g). Use the same POS_SIM_* settings, or another "
                    "POS_SIM_INSTANCE.\n",
                    drv.shm_name, g->p.preset, g->p.mode == SIM_MODE_MPS ? "mps" : "timeslice",
                    g->p.scale, p.preset, p.mode == SIM_MODE_MPS ? "mps" : "timeslice", p.scale);
            drv_unlock();
            munmap(shm, drv.shm_size);
            drv.shm = NULL;
            return CUDA_ERROR_NO_DEVICE;
        }
        int o = sim_gpu_owner_add(g);
        if (o < 0) {
            drv_unlock();
            fprintf(stderr, "pos-sim: virtual GPU %s has %d processes already\n", drv.shm_name,
                    SIM_MAX_OWNERS);
            munmap(shm, drv.shm_size);
            drv.shm = NULL;
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        drv_ring_reset(o);
        g->owners[o].ident[0] = (uint64_t)getpid();
        g->owners[o].ident[1] = drv_proc_start_time(getpid());
        drv.owner = o;
        drv.g = g;
        drv.origin_ns = shm->origin_ns;
        drv.scale = g->p.scale;
        drv.npool = (uint32_t)drv_pool_alloc(drv.pool, DRV_POOL_FILL); /* the first launches' */
        if (drv_server_ensure() < 0) {
            sim_gpu_owner_remove(g, o, drv_device_now());
            drv_ring_reset(o);
            drv.owner = -1;
            drv.g = NULL;
            if (!any_owner(g)) {
                shm->dead = 1;
                shm_unlink(drv.shm_name);
            }
            drv_unlock();
            munmap(shm, drv.shm_size);
            drv.shm = NULL;
            return CUDA_ERROR_NO_DEVICE;
        }
        drv_unlock();
        drv_debug("attached to %s as owner %d (%s, %s)", drv.shm_name, o, g->p.preset,
                  g->p.mode == SIM_MODE_MPS ? "mps" : "timeslice");
        return CUDA_SUCCESS;
    }
    fprintf(stderr, "pos-sim: could not attach to the virtual GPU %s\n", drv.shm_name);
    return CUDA_ERROR_NO_DEVICE;
}

/* At exit: leave the device; the last user unlinks it. */
__attribute__((destructor)) static void drv_detach(void)
{
    if (!drv.shm || drv.forked || drv.owner < 0)
        return;
    drv_agent_stop();
    drv_debug("agent: %llu cycles, %llu woke before anything completed, %llu times its work "
              "was silent for 200 ms",
              (unsigned long long)drv.agent_cycles, (unsigned long long)drv.early_wakes,
              (unsigned long long)drv_device_checks());
    drv_write_lock_stats();
    drv.lock_stats = 0;
    drv_lock();
    struct sim_gpu *g = &drv.shm->gpu;
    sim_gpu_owner_remove(g, drv.owner, drv_device_now());
    drv_ring_reset(drv.owner);
    drv.owner = -1;
    drv_liveness_scan(drv_mono_ns());
    if (!any_owner(g)) {
        drv.shm->dead = 1;
        shm_unlink(drv.shm_name);
    }
    drv_unlock();
    drv_server_kick(); /* it leaves with the last process */
}
