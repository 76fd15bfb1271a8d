/* Pod names kept fresh off posd's loop: a thread of its own reads the kubelet's sources (log
 * directories, the device manager's checkpoint, the pod-resources List, which may block for
 * up to POD_LIST_TIMEOUT_MS) every [kubernetes] refresh_s and when the loop meets a pod it does
 * not know, joins them into a table and hands it over through an eventfd the loop watches. The
 * loop only looks names up in the newest table (or, for a pod not in it yet, in the log
 * directories at once: local files, never the kubelet's API), and logs the sources' health
 * when it changes, never per client. */
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sched/pod.h"
#include "sched/posd.h"

#define POD_LIST_TIMEOUT_MS 1000
#define POD_MIN_GAP_NS      200000000LL /* rounds asked for by the loop: at most 5 a second */

enum pod_source { SRC_LOGS, SRC_CHECKPOINT, SRC_PODRES, SRC_COUNT };
static const char *const source_names[SRC_COUNT] = {
    "the pod log directory", "the device manager's checkpoint", "pod-resources"};

/* The health of each source in one round: 0, or -errno with what a person should read. */
struct health {
    int rc[SRC_COUNT];
    char why[SRC_COUNT][POSD_PATH_MAX + 160];
};

static struct {
    int on;
    /* what the thread reads (fixed at start) */
    char proc_root[POSD_PATH_MAX], log_dir[POSD_PATH_MAX], containers_dir[POSD_PATH_MAX];
    char podres[POSD_PATH_MAX], checkpoint[POSD_PATH_MAX], resource[POSD_NAME_MAX];
    int64_t refresh_ns;
    /* shared with the thread, under mu */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int want, stop;
    struct posd_pod_table ready; /* a table not yet taken */
    int has_ready;
    struct health ready_health;
    int news_fd;
    /* the loop's own */
    struct posd_pod_table cur;
    struct health said; /* as last logged */
    int said_any;
    int bad_said, xdev_said;
} R = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .news_fd = -1};

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- the thread ------------------------------------------------------------------------------- */

static void read_podres(struct kube_pod_list *list, struct health *h)
{
#ifndef POS_NO_PODRES
    h->rc[SRC_PODRES] = kube_podres_list(R.podres, POD_LIST_TIMEOUT_MS, list, h->why[SRC_PODRES],
                                         sizeof h->why[SRC_PODRES]);
#else /* the real-GPU suite's posd (tests/gpu/build.sh): the device has no protobuf-c, nghttp2 */
    (void)list;
    h->rc[SRC_PODRES] = -ENOSYS;
    snprintf(h->why[SRC_PODRES], sizeof h->why[SRC_PODRES],
             "this posd is built without the pod-resources client (POS_NO_PODRES)");
#endif
}

/* One round: every source read, joined into T. */
static void round_of_reads(struct posd_pod_table *t, struct health *h)
{
    memset(h, 0, sizeof *h);
    int rc = posd_pod_logs_read(R.log_dir, R.containers_dir, t);
    if (rc < 0) {
        h->rc[SRC_LOGS] = rc;
        snprintf(h->why[SRC_LOGS], sizeof h->why[SRC_LOGS], "%s: %s", R.log_dir, strerror(-rc));
    }
    struct posd_pod_checkpoint ck = {0};
    int have_ck = 0;
    if (R.checkpoint[0]) {
        rc = posd_pod_checkpoint_read(R.checkpoint, &ck);
        have_ck = rc == 0;
        if (rc < 0) {
            h->rc[SRC_CHECKPOINT] = rc;
            snprintf(h->why[SRC_CHECKPOINT], sizeof h->why[SRC_CHECKPOINT], "%s: %s",
                     R.checkpoint,
                     rc == -EPROTO ? "not the kubelet's checkpoint JSON" : strerror(-rc));
        }
    }
    struct kube_pod_list list = {0};
    read_podres(&list, h);
    if (posd_pod_join(t, have_ck ? &ck : NULL, h->rc[SRC_PODRES] == 0 ? &list : NULL,
                      R.resource) < 0) {
        h->rc[SRC_LOGS] = -ENOMEM;
        snprintf(h->why[SRC_LOGS], sizeof h->why[SRC_LOGS], "out of memory");
    }
#ifndef POS_NO_PODRES
    if (h->rc[SRC_PODRES] == 0)
        kube_pod_list_free(&list);
#endif
    if (have_ck)
        posd_pod_checkpoint_free(&ck);
}

static void *resolver(void *arg)
{
    int64_t last = 0;
    pthread_mutex_lock(&R.mu);
    while (!R.stop) {
        int64_t now = mono_ns();
        int64_t due = last ? last + R.refresh_ns : now;
        if (R.want && last + POD_MIN_GAP_NS < due)
            due = last + POD_MIN_GAP_NS;
        if (now < due) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts); /* the condition variable's clock */
            int64_t at = ts.tv_sec * 1000000000LL + ts.tv_nsec + (due - now);
            ts = (struct timespec){.tv_sec = at / 1000000000LL, .tv_nsec = at % 1000000000LL};
            pthread_cond_timedwait(&R.cv, &R.mu, &ts);
            continue;
        }
        R.want = 0;
        pthread_mutex_unlock(&R.mu);
        struct posd_pod_table t = {0};
        struct health h;
        round_of_reads(&t, &h);
        last = mono_ns();
        pthread_mutex_lock(&R.mu);
        posd_pod_table_free(&R.ready);
        R.ready = t;
        R.has_ready = 1;
        R.ready_health = h;
        uint64_t one = 1;
        if (write(R.news_fd, &one, sizeof one) < 0) {
            /* a full counter still reads as news */
        }
    }
    pthread_mutex_unlock(&R.mu);
    return NULL;
}

/* ---- start and stop ----------------------------------------------------------------------------- */

static int exists(const char *path)
{
    struct stat st;
    return path[0] && stat(path, &st) == 0;
}

/* posd in a container with a cgroup namespace of its own (containerd and CRI-O give one to every
 * container on cgroup v2, and Kubernetes has no field to ask for the host's) reads every other
 * process's cgroup as "/../..." and cannot tell its pods. posd shares the host's PID namespace
 * (hostPID), so PID 1's namespace is the host's: posd joins it, before its threads start (a
 * namespace belongs to a thread; those made later inherit it). Needs CAP_SYS_ADMIN; without it
 * posd says so once and the clients read as outside its namespace. */
static void join_host_cgroupns(const char *proc_root)
{
    char path[POSD_PATH_MAX + 16];
    struct stat mine, host;
    snprintf(path, sizeof path, "%s/1/ns/cgroup", proc_root);
    if (stat("/proc/self/ns/cgroup", &mine) != 0 || stat(path, &host) != 0)
        return; /* no cgroup namespaces here, or no PID 1 to read */
    if (mine.st_ino == host.st_ino && mine.st_dev == host.st_dev)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWCGROUP) != 0) {
        int e = errno;
        posd_log(POSD_LOG_WARN,
                 "pod identity: posd has a cgroup namespace of its own and cannot join the "
                 "host's (%s: %s): clients in other cgroups read as outside it",
                 path, strerror(e));
    } else {
        posd_log(POSD_LOG_INFO, "pod identity: joined the host's cgroup namespace (%s)", path);
    }
    if (fd >= 0)
        close(fd);
}

int posd_pod_start(const struct posd_config *cfg)
{
    if (cfg->k8s_enable == POSD_K8S_NO)
        return 0;
    if (cfg->k8s_enable == POSD_K8S_AUTO && !exists(cfg->k8s_log_dir) &&
        !exists(cfg->k8s_pod_resources)) {
        posd_log(POSD_LOG_INFO,
                 "pod identity off: neither %s nor %s exists (no kubelet here; [kubernetes] "
                 "enable = yes turns it on)",
                 cfg->k8s_log_dir, cfg->k8s_pod_resources);
        return 0;
    }
    snprintf(R.proc_root, sizeof R.proc_root, "%s", cfg->k8s_proc_root);
    join_host_cgroupns(R.proc_root);
    snprintf(R.log_dir, sizeof R.log_dir, "%s", cfg->k8s_log_dir);
    snprintf(R.containers_dir, sizeof R.containers_dir, "%s", cfg->k8s_containers_dir);
    snprintf(R.podres, sizeof R.podres, "%s", cfg->k8s_pod_resources);
    snprintf(R.checkpoint, sizeof R.checkpoint, "%s", cfg->k8s_checkpoint);
    snprintf(R.resource, sizeof R.resource, "%s", cfg->k8s_resource);
    R.refresh_ns = (int64_t)(cfg->k8s_refresh_s * 1e9);
    R.news_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (R.news_fd < 0) {
        int e = errno;
        posd_log(POSD_LOG_ERROR, "pod identity off: eventfd: %s", strerror(e));
        return -e;
    }
    int rc = pthread_create(&R.thread, NULL, resolver, NULL);
    if (rc) {
        posd_log(POSD_LOG_ERROR, "pod identity off: cannot start its thread: %s", strerror(rc));
        close(R.news_fd);
        R.news_fd = -1;
        return -rc;
    }
    R.started = 1;
    R.on = 1;
    posd_log(POSD_LOG_INFO,
             "pod identity on: cgroups from %s, names from %s and %s, devices of %s from %s and "
             "%s, every %.3g s",
             R.proc_root, R.log_dir, R.containers_dir, R.resource, R.checkpoint, R.podres,
             cfg->k8s_refresh_s);
    return 0;
}

void posd_pod_stop(void)
{
    if (R.started) {
        pthread_mutex_lock(&R.mu);
        R.stop = 1;
        pthread_cond_signal(&R.cv);
        pthread_mutex_unlock(&R.mu);
        pthread_join(R.thread, NULL);
        R.started = 0;
    }
    if (R.news_fd >= 0)
        close(R.news_fd);
    R.news_fd = -1;
    posd_pod_table_free(&R.ready);
    posd_pod_table_free(&R.cur);
    R.on = 0;
}

int posd_pod_enabled(void)
{
    return R.on;
}

int posd_pod_news_fd(void)
{
    return R.news_fd;
}

/* ---- the loop's side ---------------------------------------------------------------------------- */

static void ask_for_round(void)
{
    pthread_mutex_lock(&R.mu);
    R.want = 1;
    pthread_cond_signal(&R.cv);
    pthread_mutex_unlock(&R.mu);
}

/* One line per source whose health changed since the last line about it. */
static void log_health(const struct health *h)
{
    for (int s = 0; s < SRC_COUNT; s++) {
        int was = R.said_any ? R.said.rc[s] : 0;
        if (h->rc[s] == was && (h->rc[s] == 0 || !strcmp(h->why[s], R.said.why[s])))
            continue;
        if (h->rc[s] == 0)
            posd_log(POSD_LOG_INFO, "pod identity: %s answers again", source_names[s]);
        else if (s == SRC_PODRES)
            posd_log(POSD_LOG_WARN,
                     "pod identity: %s: %s: names from the log directories only, no devices "
                     "from it (said once until it answers)",
                     source_names[s], h->why[s]);
        else
            posd_log(POSD_LOG_WARN, "pod identity: %s: %s (said once until it is read again)",
                     source_names[s], h->why[s]);
    }
    R.said = *h;
    R.said_any = 1;
}

int posd_pod_take_news(void)
{
    uint64_t n;
    if (R.news_fd < 0 || read(R.news_fd, &n, sizeof n) < 0) {
        /* nothing pending: EAGAIN */
    }
    pthread_mutex_lock(&R.mu);
    int has = R.has_ready;
    struct health h = R.ready_health;
    if (has) {
        posd_pod_table_free(&R.cur);
        R.cur = R.ready;
        R.ready = (struct posd_pod_table){0};
        R.has_ready = 0;
    }
    pthread_mutex_unlock(&R.mu);
    if (has)
        log_health(&h);
    return has;
}

/* ID's cgroup file from proc_root when that is not /proc; else TEXT, what the caller read. */
static int cgroup_of(const struct posd_identity *id, const char *text, struct posd_pod_ref *ref,
                     char *bad, size_t badlen)
{
    static char buf[16384]; /* the loop's thread only */
    if (strcmp(R.proc_root, "/proc") != 0) {
        char path[POSD_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%d/cgroup", R.proc_root, (int)id->pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0)
            close(fd);
        buf[n > 0 ? n : 0] = '\0';
        text = buf;
    }
    return posd_pod_from_cgroup(text ? text : "", ref, bad, badlen);
}

void posd_pod_identify(struct posd_identity *id, const char *cgroup_text)
{
    id->pod_uid[0] = id->container_id[0] = '\0';
    posd_pod_names_set(id, NULL, NULL);
    if (!R.on)
        return;
    struct posd_pod_ref ref;
    char bad[POSD_PATH_MAX];
    int rc = cgroup_of(id, cgroup_text, &ref, bad, sizeof bad);
    if (rc == -EXDEV && !R.xdev_said) {
        R.xdev_said = 1;
        posd_log(POSD_LOG_WARN,
                 "pod identity: pid %d's cgroup '%s' is outside posd's cgroup namespace: run "
                 "posd in the host's cgroup namespace to tell its pods (said once)",
                 (int)id->pid, bad);
    } else if (rc == -EINVAL && !R.bad_said) {
        R.bad_said = 1;
        posd_log(POSD_LOG_WARN,
                 "pod identity: pid %d's cgroup '%s' is under kubepods but names no pod: it is "
                 "scheduled as a client without a pod (said once)",
                 (int)id->pid, bad);
    }
    if (rc != 1)
        return;
    snprintf(id->pod_uid, sizeof id->pod_uid, "%s", ref.uid);
    snprintf(id->container_id, sizeof id->container_id, "%s", ref.container_id);
    const struct posd_pod_entry *p = posd_pod_table_find(&R.cur, ref.uid);
    const struct posd_pod_container *c = posd_pod_client_container(p, ref.container_id);
    if (p && (c || !ref.container_id[0])) {
        posd_pod_names_set(id, p, c);
        return;
    }
    /* a pod (or container) newer than the table: its log directory at once, the rest in the
     * thread's next round */
    struct posd_pod_entry found;
    if (posd_pod_logs_find(R.log_dir, R.containers_dir, ref.uid, ref.container_id, &found) == 1) {
        posd_pod_names_set(id, &found, posd_pod_entry_container(&found, ref.container_id));
        posd_pod_entry_free(&found);
    } else if (p) {
        posd_pod_names_set(id, p, NULL);
    }
    ask_for_round();
}

int posd_pod_refresh_names(struct posd_identity *id)
{
    if (!R.on || !id->pod_uid[0])
        return 0;
    const struct posd_pod_entry *p = posd_pod_table_find(&R.cur, id->pod_uid);
    if (!p)
        return 0; /* a table older than what registration found: keep that */
    const struct posd_pod_container *c = posd_pod_client_container(p, id->container_id);
    struct posd_identity before = *id;
    posd_pod_names_set(id, p, c);
    if (!c && before.container[0]) /* the table lacks what registration found: keep it */
        snprintf(id->container, sizeof id->container, "%s", before.container);
    return strcmp(before.k8s_namespace, id->k8s_namespace) != 0 ||
           strcmp(before.pod, id->pod) != 0 || strcmp(before.container, id->container) != 0 ||
           strcmp(before.devices, id->devices) != 0;
}
