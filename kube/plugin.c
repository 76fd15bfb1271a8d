/* The device plugin (see plugin.h): its DevicePlugin methods, posd's health, registration with
 * the kubelet, and the loop that ties them together.
 *
 * One thread owns the gRPC server and everything the kubelet sees; two helpers block so that it
 * never does: the health thread asks posd for its statistics every second (a real request with
 * a timeout: a stopped posd still accepts connections) and reports changes on a pipe, and a
 * registration thread makes each Register call, because the kubelet dials the plugin back
 * inside its Register handler and a loop blocked in that call could not answer it. The kubelet's
 * directory is watched with inotify: a restarted kubelet removes pos.sock and creates a new
 * kubelet.sock, and either makes the plugin listen again and register again at once. */
#include "plugin.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "deviceplugin_v1beta1.pb-c.h"
#include "edits.h"
#include "grpc.h"
#include "tools/posclient.h"

#define HEALTH_PERIOD_MS   1000
#define HEALTH_TIMEOUT_S   1 /* posd's reply to a STATS request */
#define REGISTER_TIMEOUT_MS 5000
#define RETRY_FIRST_MS     100
#define RETRY_MAX_MS       5000
#define PATH_LEN           512

#define M_LIST_AND_WATCH "/v1beta1.DevicePlugin/ListAndWatch"

struct health_event {
    int up;
    char why[200];
};

struct register_event {
    int rc;
    char err[240];
};

struct plugin {
    const struct kube_plugin_config *cfg;
    struct kube_grpc_server *srv;
    char sock[PATH_LEN], kubelet[PATH_LEN];

    /* what ListAndWatch sends: every share, all Healthy or all Unhealthy */
    int healthy;
    size_t n_devices;
    V1beta1__Device *devices;
    V1beta1__Device **device_ptrs;
    char (*ids)[KUBE_SHARE_ID_MAX];

    int health_pipe[2], stop_pipe[2];
    pthread_t health_thread;
    int health_started;

    int reg_pipe[2];
    int reg_running, reg_pending, reg_failing, reg_backoff_ms;
    long long reg_retry_at, reg_asked_at; /* ms on CLOCK_MONOTONIC; retry 0: none due */

    int inotify, sigfd;
};

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("pos-device-plugin: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static long long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* --- the device list ---------------------------------------------------------------------- */

static int devices_make(struct plugin *p)
{
    const struct kube_plugin_config *c = p->cfg;
    p->n_devices = c->n_gpus * (size_t)c->shares;
    p->devices = calloc(p->n_devices, sizeof *p->devices);
    /* protobuf-c's repeated fields are arrays of pointers */
    /* NOLINTNEXTLINE(bugprone-sizeof-expression) */
    p->device_ptrs = calloc(p->n_devices, sizeof *p->device_ptrs);
    p->ids = calloc(p->n_devices, sizeof *p->ids);
    if (!p->devices || !p->device_ptrs || !p->ids)
        return -ENOMEM;
    size_t i = 0;
    for (size_t g = 0; g < c->n_gpus; g++)
        for (int k = 0; k < c->shares; k++, i++) {
            V1beta1__Device d = V1BETA1__DEVICE__INIT;
            kube_share_id(p->ids[i], c->gpus[g], k);
            d.id = p->ids[i];
            p->devices[i] = d;
            p->device_ptrs[i] = &p->devices[i];
        }
    return 0;
}

static void devices_set_health(struct plugin *p, int healthy)
{
    p->healthy = healthy;
    for (size_t i = 0; i < p->n_devices; i++)
        p->devices[i].health = healthy ? "Healthy" : "Unhealthy";
}

static V1beta1__ListAndWatchResponse device_list(const struct plugin *p)
{
    V1beta1__ListAndWatchResponse r = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    r.n_devices = p->n_devices;
    r.devices = p->device_ptrs;
    return r;
}

/* --- the DevicePlugin methods --------------------------------------------------------------- */

static void get_options(void *ctx, const ProtobufCMessage *req, struct kube_grpc_reply *rep)
{
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    o.get_preferred_allocation_available = 1;
    kube_grpc_reply_pack(rep, &o.base);
}

static void list_and_watch(void *ctx, const ProtobufCMessage *req, struct kube_grpc_reply *rep)
{
    struct plugin *p = ctx;
    V1beta1__ListAndWatchResponse r = device_list(p);
    if (p->cfg->verbose)
        say("ListAndWatch: a watcher (%zu shares %s)", p->n_devices,
            p->healthy ? "Healthy" : "Unhealthy");
    kube_grpc_reply_pack(rep, &r.base);
}

static int gpu_is_ours(const struct kube_plugin_config *c, int gpu)
{
    for (size_t i = 0; i < c->n_gpus; i++)
        if (c->gpus[i] == gpu)
            return 1;
    return 0;
}

/* The GPUs (ascending, each once) that the share IDs of R name, in GPUS; *N their number.
 * Returns 0, or a gRPC status with REP's message set. */
static int request_gpus(const struct plugin *p, char *const *ids, size_t n_ids, int *gpus,
                        size_t *n, struct kube_grpc_reply *rep)
{
    int seen[KUBE_GPUS_MAX] = {0};
    for (size_t i = 0; i < n_ids; i++) {
        int g, k;
        if (kube_share_parse(ids[i], &g, &k) < 0 || !gpu_is_ours(p->cfg, g) ||
            k >= p->cfg->shares) {
            kube_grpc_reply_error(rep, KUBE_GRPC_INVALID_ARGUMENT,
                                  "unknown device ID '%.64s' for %s: this plugin advertises "
                                  "gpu<N>-<K> for its %zu GPU(s), K 0..%d",
                                  ids[i], p->cfg->resource, p->cfg->n_gpus, p->cfg->shares - 1);
            return KUBE_GRPC_INVALID_ARGUMENT;
        }
        seen[g] = 1;
    }
    *n = 0;
    for (int g = 0; g < KUBE_GPUS_MAX; g++)
        if (seen[g])
            gpus[(*n)++] = g;
    return 0;
}

/* One container's answer and the storage its strings and pointers live in. */
struct container_answer {
    V1beta1__ContainerAllocateResponse r;
    struct kube_edits e;
    V1beta1__ContainerAllocateResponse__EnvsEntry env[KUBE_EDITS_ENV];
    V1beta1__ContainerAllocateResponse__EnvsEntry *env_ptrs[KUBE_EDITS_ENV];
    V1beta1__Mount mounts[KUBE_EDITS_MOUNTS];
    V1beta1__Mount *mount_ptrs[KUBE_EDITS_MOUNTS];
    V1beta1__DeviceSpec nodes[KUBE_EDITS_NODES];
    V1beta1__DeviceSpec *node_ptrs[KUBE_EDITS_NODES];
    V1beta1__CDIDevice cdi[KUBE_GPUS_MAX];
    V1beta1__CDIDevice *cdi_ptrs[KUBE_GPUS_MAX];
    char cdi_names[KUBE_GPUS_MAX][48];
};

static void answer_cdi(struct container_answer *a, const int *gpus, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        V1beta1__CDIDevice d = V1BETA1__CDIDEVICE__INIT;
        snprintf(a->cdi_names[i], sizeof a->cdi_names[i], "%s=gpu%d", KUBE_CDI_KIND, gpus[i]);
        d.name = a->cdi_names[i];
        a->cdi[i] = d;
        a->cdi_ptrs[i] = &a->cdi[i];
    }
    a->r.n_cdi_devices = n;
    a->r.cdi_devices = a->cdi_ptrs;
}

static int answer_edits(const struct plugin *p, struct container_answer *a, const int *gpus,
                        size_t n, struct kube_grpc_reply *rep)
{
    const struct kube_plugin_config *c = p->cfg;
    struct kube_edits_opts o = {.shim = c->shim,
                                .socket = c->posd_socket,
                                .driver_dir = c->driver_dir,
                                .dev_dir = c->dev_dir};
    char err[300];
    if (kube_edits_make(&o, gpus, c->dev_dir ? n : 0, &a->e, err, sizeof err) < 0) {
        kube_grpc_reply_error(rep, KUBE_GRPC_FAILED_PRECONDITION, "cannot put the container "
                              "under pos on this node: %s", err);
        return KUBE_GRPC_FAILED_PRECONDITION;
    }
    for (size_t i = 0; i < a->e.n_env; i++) {
        V1beta1__ContainerAllocateResponse__EnvsEntry v =
            V1BETA1__CONTAINER_ALLOCATE_RESPONSE__ENVS_ENTRY__INIT;
        v.key = a->e.env[i].name;
        v.value = a->e.env[i].value;
        a->env[i] = v;
        a->env_ptrs[i] = &a->env[i];
    }
    for (size_t i = 0; i < a->e.n_mounts; i++) {
        V1beta1__Mount m = V1BETA1__MOUNT__INIT;
        m.host_path = a->e.mounts[i].host;
        m.container_path = a->e.mounts[i].container;
        m.read_only = a->e.mounts[i].read_only;
        a->mounts[i] = m;
        a->mount_ptrs[i] = &a->mounts[i];
    }
    for (size_t i = 0; i < a->e.n_nodes; i++) {
        V1beta1__DeviceSpec d = V1BETA1__DEVICE_SPEC__INIT;
        d.host_path = d.container_path = a->e.nodes[i].path;
        d.permissions = a->e.nodes[i].perms;
        a->nodes[i] = d;
        a->node_ptrs[i] = &a->nodes[i];
    }
    a->r.n_envs = a->e.n_env;
    a->r.envs = a->env_ptrs;
    a->r.n_mounts = a->e.n_mounts;
    a->r.mounts = a->mount_ptrs;
    a->r.n_devices = a->e.n_nodes;
    a->r.devices = a->node_ptrs;
    return 0;
}

static void log_allocation(const int *gpus, size_t n, size_t shares, int cdi)
{
    char list[KUBE_GPUS_MAX * 4] = "";
    size_t o = 0;
    for (size_t i = 0; i < n && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%d", i ? "," : "", gpus[i]);
    say("Allocate: %zu share(s) on GPU %s (%s)", shares, list, cdi ? "CDI devices" : "edits");
}

static void allocate(void *ctx, const ProtobufCMessage *req, struct kube_grpc_reply *rep)
{
    struct plugin *p = ctx;
    const V1beta1__AllocateRequest *r = (const V1beta1__AllocateRequest *)req;
    size_t n = r->n_container_requests;
    struct container_answer *a = n ? calloc(n, sizeof *a) : NULL;
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers, as protobuf-c wants */
    V1beta1__ContainerAllocateResponse **ptrs = n ? calloc(n, sizeof *ptrs) : NULL;
    if (n && (!a || !ptrs)) {
        kube_grpc_reply_error(rep, KUBE_GRPC_RESOURCE_EXHAUSTED, "out of memory for %zu "
                              "containers", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const V1beta1__ContainerAllocateRequest *cr = r->container_requests[i];
        int gpus[KUBE_GPUS_MAX];
        size_t ng = 0;
        V1beta1__ContainerAllocateResponse init = V1BETA1__CONTAINER_ALLOCATE_RESPONSE__INIT;
        a[i].r = init;
        ptrs[i] = &a[i].r;
        if (request_gpus(p, cr->devices_ids, cr->n_devices_ids, gpus, &ng, rep) != 0)
            goto out;
        if (p->cfg->cdi)
            answer_cdi(&a[i], gpus, ng);
        else if (answer_edits(p, &a[i], gpus, ng, rep) != 0)
            goto out;
        log_allocation(gpus, ng, cr->n_devices_ids, p->cfg->cdi);
    }
    V1beta1__AllocateResponse out = V1BETA1__ALLOCATE_RESPONSE__INIT;
    out.n_container_responses = n;
    out.container_responses = ptrs;
    kube_grpc_reply_pack(rep, &out.base);
out:
    if (rep->status != KUBE_GRPC_OK)
        say("Allocate refused: %s", rep->message);
    free(ptrs);
    free(a);
}

static void preferred_allocation(void *ctx, const ProtobufCMessage *req,
                                 struct kube_grpc_reply *rep)
{
    const V1beta1__PreferredAllocationRequest *r = (const V1beta1__PreferredAllocationRequest *)req;
    size_t n = r->n_container_requests;
    V1beta1__ContainerPreferredAllocationResponse *cr = n ? calloc(n, sizeof *cr) : NULL;
    /* NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers, as protobuf-c wants */
    V1beta1__ContainerPreferredAllocationResponse **ptrs = n ? calloc(n, sizeof *ptrs) : NULL;
    const char ***chosen = n ? calloc(n, sizeof *chosen) : NULL;
    if (n && (!cr || !ptrs || !chosen)) {
        kube_grpc_reply_error(rep, KUBE_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const V1beta1__ContainerPreferredAllocationRequest *q = r->container_requests[i];
        size_t size = q->allocation_size > 0 ? (size_t)q->allocation_size : 0;
        if (size > q->n_available_deviceids + q->n_must_include_deviceids)
            size = q->n_available_deviceids + q->n_must_include_deviceids;
        chosen[i] = calloc(size ? size : 1, sizeof **chosen);
        if (!chosen[i]) {
            kube_grpc_reply_error(rep, KUBE_GRPC_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        V1beta1__ContainerPreferredAllocationResponse init =
            V1BETA1__CONTAINER_PREFERRED_ALLOCATION_RESPONSE__INIT;
        cr[i] = init;
        cr[i].n_deviceids = kube_shares_prefer((const char *const *)q->available_deviceids,
                                               q->n_available_deviceids,
                                               (const char *const *)q->must_include_deviceids,
                                               q->n_must_include_deviceids, size, chosen[i]);
        cr[i].deviceids = (char **)chosen[i];
        ptrs[i] = &cr[i];
    }
    V1beta1__PreferredAllocationResponse out = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
    out.n_container_responses = n;
    out.container_responses = ptrs;
    kube_grpc_reply_pack(rep, &out.base);
out:
    for (size_t i = 0; chosen && i < n; i++)
        free(chosen[i]);
    free(chosen);
    free(ptrs);
    free(cr);
}

static void pre_start(void *ctx, const ProtobufCMessage *req, struct kube_grpc_reply *rep)
{
    V1beta1__PreStartContainerResponse r = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
    kube_grpc_reply_pack(rep, &r.base);
}

static const struct kube_grpc_method methods[] = {
    {"/v1beta1.DevicePlugin/GetDevicePluginOptions", &v1beta1__empty__descriptor, 0,
     get_options},
    {M_LIST_AND_WATCH, &v1beta1__empty__descriptor, 1, list_and_watch},
    {"/v1beta1.DevicePlugin/GetPreferredAllocation",
     &v1beta1__preferred_allocation_request__descriptor, 0, preferred_allocation},
    {"/v1beta1.DevicePlugin/Allocate", &v1beta1__allocate_request__descriptor, 0, allocate},
    {"/v1beta1.DevicePlugin/PreStartContainer", &v1beta1__pre_start_container_request__descriptor,
     0, pre_start},
};

/* --- posd's health -------------------------------------------------------------------------- */

/* Whether posd at SOCK answers a STATS request within HEALTH_TIMEOUT_S: 0, or a negative errno
 * with why in ERR. */
static int posd_answers(const char *sock, char *err, size_t errlen)
{
    unsigned char *buf = malloc(POS_MSG_MAX);
    if (!buf)
        return posclient_fail(-ENOMEM, err, errlen, "out of memory");
    struct posclient c;
    size_t got = 0, blen = 0;
    const void *body = NULL;
    int rc = posclient_connect(&c, sock, HEALTH_TIMEOUT_S, err, errlen);
    if (rc == 0) {
        rc = posclient_stats(&c, buf, POS_MSG_MAX, &got, err, errlen);
        posclient_close(&c);
    }
    if (rc == 0)
        rc = posclient_check_msg(buf, got, POS_MSG_STATS, &body, &blen, err, errlen);
    free(buf);
    return rc;
}

static void *health_main(void *arg)
{
    struct plugin *p = arg;
    int last = p->healthy;
    for (;;) {
        struct pollfd stop = {.fd = p->stop_pipe[0], .events = POLLIN};
        if (poll(&stop, 1, HEALTH_PERIOD_MS) != 0)
            return NULL;
        struct health_event ev = {0};
        ev.up = posd_answers(p->cfg->posd_socket, ev.why, sizeof ev.why) == 0;
        if (ev.up == last)
            continue;
        last = ev.up;
        /* one write of less than PIPE_BUF bytes: the loop reads it whole */
        if (write(p->health_pipe[1], &ev, sizeof ev) != (ssize_t)sizeof ev)
            return NULL;
    }
}

static void on_health(struct plugin *p)
{
    struct health_event ev;
    if (read(p->health_pipe[0], &ev, sizeof ev) != (ssize_t)sizeof ev)
        return;
    ev.why[sizeof ev.why - 1] = '\0';
    devices_set_health(p, ev.up);
    V1beta1__ListAndWatchResponse r = device_list(p);
    int n = kube_grpc_server_push(p->srv, M_LIST_AND_WATCH, &r.base);
    if (ev.up)
        say("posd at %s answers: %zu shares Healthy (%d watcher(s) told)", p->cfg->posd_socket,
            p->n_devices, n);
    else
        say("posd does not answer (%s): %zu shares Unhealthy (%d watcher(s) told)", ev.why,
            p->n_devices, n);
}

/* --- registration ---------------------------------------------------------------------------- */

static void *register_main(void *arg)
{
    struct plugin *p = arg;
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    o.get_preferred_allocation_available = 1;
    V1beta1__RegisterRequest r = V1BETA1__REGISTER_REQUEST__INIT;
    r.version = "v1beta1";
    r.endpoint = KUBE_PLUGIN_SOCKET;
    r.resource_name = (char *)p->cfg->resource;
    r.options = &o;
    struct register_event ev = {0};
    ProtobufCMessage *reply = NULL;
    ev.rc = kube_grpc_call(p->kubelet, "/v1beta1.Registration/Register", &r.base,
                           &v1beta1__empty__descriptor, 4096, REGISTER_TIMEOUT_MS, &reply, NULL,
                           ev.err, sizeof ev.err);
    if (reply)
        protobuf_c_message_free_unpacked(reply, NULL);
    if (write(p->reg_pipe[1], &ev, sizeof ev) != (ssize_t)sizeof ev)
        say("cannot report a registration to the loop: %s", strerror(errno));
    return NULL;
}

static void register_start(struct plugin *p)
{
    if (p->reg_running) {
        p->reg_pending = 1;
        return;
    }
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &a, register_main, p);
    pthread_attr_destroy(&a);
    if (rc != 0) {
        say("cannot start a registration thread: %s; retrying", strerror(rc));
        p->reg_retry_at = now_ms() + RETRY_MAX_MS;
        return;
    }
    p->reg_running = 1;
    p->reg_retry_at = 0;
}

/* The kubelet (re)started, or we did: register from now on, at once. */
static void register_soon(struct plugin *p)
{
    p->reg_asked_at = now_ms();
    p->reg_backoff_ms = RETRY_FIRST_MS;
    p->reg_failing = 0;
    register_start(p);
}

static void on_registered(struct plugin *p)
{
    struct register_event ev;
    if (read(p->reg_pipe[0], &ev, sizeof ev) != (ssize_t)sizeof ev)
        return;
    ev.err[sizeof ev.err - 1] = '\0';
    p->reg_running = 0;
    if (ev.rc == 0) {
        say("registered %s with the kubelet at %s: %zu GPU(s) x %d shares (%lld ms after the "
            "need to register was seen)",
            p->cfg->resource, p->kubelet, p->cfg->n_gpus, p->cfg->shares,
            now_ms() - p->reg_asked_at);
        p->reg_failing = 0;
        p->reg_backoff_ms = RETRY_FIRST_MS;
    } else {
        if (!p->reg_failing)
            say("cannot register with the kubelet: %s; retrying until it answers", ev.err);
        p->reg_failing = 1;
        p->reg_retry_at = now_ms() + p->reg_backoff_ms;
        p->reg_backoff_ms = p->reg_backoff_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS
                                                                 : p->reg_backoff_ms * 2;
    }
    if (p->reg_pending) {
        p->reg_pending = 0;
        register_soon(p);
    }
}

/* --- the kubelet's directory ------------------------------------------------------------------ */

static int listen_on_socket(struct plugin *p)
{
    char err[300];
    if (kube_grpc_server_listen(p->srv, p->sock, err, sizeof err) < 0) {
        say("%s", err);
        return -1;
    }
    return 0;
}

static int on_directory(struct plugin *p)
{
    _Alignas(struct inotify_event) char buf[4096];
    ssize_t n = read(p->inotify, buf, sizeof buf);
    int relisten = 0, reregister = 0;
    for (char *q = buf; n > 0 && q < buf + n;) {
        const struct inotify_event *e = (const struct inotify_event *)q;
        q += sizeof *e + e->len;
        if (!e->len)
            continue;
        if (strcmp(e->name, KUBE_PLUGIN_SOCKET) == 0 && (e->mask & (IN_DELETE | IN_MOVED_FROM)))
            relisten = 1;
        if (strcmp(e->name, KUBE_KUBELET_SOCKET) == 0 && (e->mask & (IN_CREATE | IN_MOVED_TO)))
            reregister = 1;
    }
    struct stat st;
    if (relisten && lstat(p->sock, &st) == 0)
        relisten = 0; /* already made again (ours) */
    if (relisten) {
        say("%s was removed (a kubelet restart?): listening there again", p->sock);
        if (listen_on_socket(p) < 0)
            return -1;
    }
    if (reregister) {
        if (lstat(p->sock, &st) != 0 && listen_on_socket(p) < 0)
            return -1;
        say("the kubelet made %s anew: registering again", p->kubelet);
        register_soon(p);
    } else if (relisten && access(p->kubelet, F_OK) == 0) {
        register_soon(p);
    }
    return 0;
}

/* --- the loop --------------------------------------------------------------------------------- */

static int plugin_open(struct plugin *p, const struct kube_plugin_config *cfg)
{
    memset(p, 0, sizeof *p);
    p->cfg = cfg;
    p->inotify = p->sigfd = -1;
    p->health_pipe[0] = p->health_pipe[1] = p->stop_pipe[0] = p->stop_pipe[1] = -1;
    p->reg_pipe[0] = p->reg_pipe[1] = -1;
    if ((size_t)snprintf(p->sock, sizeof p->sock, "%s/%s", cfg->kubelet_dir,
                         KUBE_PLUGIN_SOCKET) >= sizeof p->sock ||
        (size_t)snprintf(p->kubelet, sizeof p->kubelet, "%s/%s", cfg->kubelet_dir,
                         KUBE_KUBELET_SOCKET) >= sizeof p->kubelet) {
        say("the kubelet directory %s is too long a path", cfg->kubelet_dir);
        return -1;
    }
    if (devices_make(p) < 0) {
        say("out of memory for %zu devices", p->n_devices);
        return -1;
    }
    char err[256];
    int up = posd_answers(cfg->posd_socket, err, sizeof err) == 0;
    devices_set_health(p, up);
    if (up)
        say("posd at %s answers: %zu shares Healthy", cfg->posd_socket, p->n_devices);
    else
        say("posd does not answer (%s): %zu shares Unhealthy until it does", err, p->n_devices);

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigprocmask(SIG_BLOCK, &sigs, NULL); /* before any thread: they inherit the mask */
    signal(SIGPIPE, SIG_IGN);
    p->sigfd = signalfd(-1, &sigs, SFD_CLOEXEC);
    p->inotify = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (p->sigfd < 0 || p->inotify < 0 || pipe2(p->health_pipe, O_CLOEXEC) < 0 ||
        pipe2(p->stop_pipe, O_CLOEXEC) < 0 || pipe2(p->reg_pipe, O_CLOEXEC) < 0) {
        say("cannot set up: %s", strerror(errno));
        return -1;
    }
    if (inotify_add_watch(p->inotify, cfg->kubelet_dir,
                          IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM) < 0) {
        say("cannot watch the kubelet directory %s: %s (does it exist? --kubelet-dir)",
            cfg->kubelet_dir, strerror(errno));
        return -1;
    }
    p->srv = kube_grpc_server_new(methods, sizeof methods / sizeof methods[0], p,
                                  KUBE_GRPC_MSG_MAX_DEFAULT);
    if (!p->srv || listen_on_socket(p) < 0)
        return -1;
    int rc = pthread_create(&p->health_thread, NULL, health_main, p);
    if (rc != 0) {
        say("cannot start the health thread: %s", strerror(rc));
        return -1;
    }
    p->health_started = 1;
    say("serving %s on %s: GPU(s) %zu x %d shares, %s", cfg->resource, p->sock, cfg->n_gpus,
        cfg->shares, cfg->cdi ? "Allocate answers CDI devices" : "Allocate answers edits");
    return 0;
}

static void plugin_close(struct plugin *p)
{
    if (p->stop_pipe[1] >= 0)
        close(p->stop_pipe[1]); /* the health thread ends after its check */
    if (p->health_started)
        pthread_join(p->health_thread, NULL);
    kube_grpc_server_free(p->srv);
    /* a registration thread still running holds the pipe: it goes with the process */
    int fds[] = {p->inotify, p->sigfd, p->health_pipe[0], p->health_pipe[1], p->stop_pipe[0]};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(p->devices);
    free(p->device_ptrs);
    free(p->ids);
}

static int loop(struct plugin *p)
{
    register_soon(p);
    for (;;) {
        struct pollfd f[] = {{.fd = p->sigfd, .events = POLLIN},
                             {.fd = p->inotify, .events = POLLIN},
                             {.fd = p->health_pipe[0], .events = POLLIN},
                             {.fd = p->reg_pipe[0], .events = POLLIN},
                             {.fd = kube_grpc_server_fd(p->srv), .events = POLLIN}};
        int timeout = -1;
        if (p->reg_retry_at && !p->reg_running) {
            long long left = p->reg_retry_at - now_ms();
            timeout = left > 0 ? (int)left : 0;
        }
        int n = poll(f, 5, timeout);
        if (n < 0 && errno != EINTR) {
            say("poll: %s", strerror(errno));
            return 1;
        }
        if (f[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(p->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
                say("%s: removing %s, exiting", strsignal((int)si.ssi_signo), p->sock);
                unlink(p->sock);
                return 0;
            }
        }
        if ((f[1].revents & POLLIN) && on_directory(p) < 0)
            return 1;
        if (f[2].revents & POLLIN)
            on_health(p);
        if (f[3].revents & POLLIN)
            on_registered(p);
        if (f[4].revents & POLLIN)
            kube_grpc_server_step(p->srv);
        if (p->reg_retry_at && !p->reg_running && now_ms() >= p->reg_retry_at)
            register_start(p);
    }
}

int kube_plugin_run(const struct kube_plugin_config *cfg)
{
    struct plugin p;
    int rc = plugin_open(&p, cfg) < 0 ? 1 : loop(&p);
    plugin_close(&p);
    return rc;
}
