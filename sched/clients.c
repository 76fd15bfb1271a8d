/* posd's peers (the socket they come through is listen.c's): registration of shims as clients
 * (identity from SO_PEERCRED and /proc, never from the client; a shared-memory region and a
 * kick eventfd sent back over SCM_RIGHTS), teardown, and the tick that closes the clients the
 * engine found broken (posd_clients_tick). Messages reach it through handlers.c. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pos/op_record.h"
#include "sched/arm.h"
#include "sched/bucket.h"
#include "sched/clients.h"
#include "sched/cpu.h"
#include "sched/engine.h"
#include "sched/identity.h"
#include "sched/mem_ledger.h"
#include "sched/pod.h"
#include "sched/sm_share.h"
#include "sched/telemetry.h"

/* ---- messages ----------------------------------------------------------------------------- */

static void fill_hdr(struct pos_msg_hdr *h, int type, size_t len)
{
    memset(h, 0, sizeof *h);
    h->magic = POS_PROTO_MAGIC;
    h->version = POS_PROTO_VERSION;
    h->type = (uint16_t)type;
    h->len = (uint32_t)len;
}

static int send_msg(int sock, int type, const void *body, size_t len, const int *fds, int nfds)
{
    struct pos_msg_hdr h;
    fill_hdr(&h, type, len);
    struct iovec iov[2] = {{&h, sizeof h}, {(void *)body, len}};
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
    if (nfds) {
        m.msg_control = ctl.buf;
        m.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
    }
    ssize_t n = sendmsg(sock, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    return n == (ssize_t)(sizeof h + len) ? 0 : -1;
}

int posd_client_send(struct posd_client *c, int type, const void *body, size_t len)
{
    return send_msg(c->sock, type, body, len, NULL, 0);
}

void posd_client_reject(struct posd_client *c, const char *reason)
{
    send_msg(c->sock, POS_MSG_REJECT, reason, strlen(reason) + 1, NULL, 0);
}

/* Whether UID may register now (root always may). */
static int registration_allowed(struct posd *d, uid_t uid, int64_t now)
{
    if (uid == 0)
        return 1;
    struct posd_reg_uid *r = NULL, *oldest = &d->reg_uids[0];
    for (int i = 0; i < POSD_REG_UIDS && !r; i++) {
        struct posd_reg_uid *e = &d->reg_uids[i];
        if (e->used && e->uid == uid)
            r = e;
        else if (!e->used || (oldest->used && e->last_ns < oldest->last_ns))
            oldest = e;
    }
    if (!r) { /* a uid not seen lately starts with a full bucket */
        r = oldest;
        *r = (struct posd_reg_uid){.used = 1, .uid = uid};
    }
    r->last_ns = now;
    return posd_bucket_take(&r->b, now, POSD_REG_BURST, POSD_REG_PERIOD_NS);
}

static int register_client(struct posd *d, struct posd_client *c, const struct pos_hello *h)
{
    char why[160];
    if (!registration_allowed(d, c->ident.uid, posd_now())) {
        snprintf(why, sizeof why,
                 "uid %u registers too often (more than %d a second after a burst of %d): this "
                 "process runs unscheduled",
                 (unsigned)c->ident.uid, (int)(1000000000 / POSD_REG_PERIOD_NS), POSD_REG_BURST);
        posd_log(POSD_LOG_WARN, "refusing pid %d: %s", (int)c->ident.pid, why);
        posd_client_reject(c, why);
        return -EAGAIN;
    }
    if (h->shm_version != POS_SHM_VERSION || h->record_version != POS_OP_RECORD_VERSION) {
        snprintf(why, sizeof why,
                 "version mismatch: the shim speaks shared-memory v%u / records v%u, posd v%u / "
                 "v%u; update the shim or posd",
                 h->shm_version, h->record_version, (unsigned)POS_SHM_VERSION,
                 (unsigned)POS_OP_RECORD_VERSION);
        posd_log(POSD_LOG_WARN, "refusing pid %d: %s", (int)c->ident.pid, why);
        posd_client_reject(c, why);
        return -EPROTO;
    }
    size_t size = (sizeof(struct pos_client_shm) + 4095) & ~(size_t)4095;
    int memfd = memfd_create("pos-client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    /* sealed at its size before the client holds it: a client that could shrink it would
     * make posd's reads of the mapping fault (SIGBUS) */
    const char *step = "memfd";
    int ok = memfd >= 0 && ftruncate(memfd, (off_t)size) == 0 &&
             fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0;
    void *p = MAP_FAILED;
    if (ok) {
        step = "mmap";
        p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
        ok = p != MAP_FAILED;
    }
    if (ok) {
        step = "eventfd";
        c->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        ok = c->kick_fd >= 0;
    }
    if (!ok) {
        int e = errno;
        int no_fds = e == EMFILE || e == ENFILE;
        posd_log(POSD_LOG_ERROR, "cannot register pid %d: %s: %s%s", (int)c->ident.pid, step,
                 strerror(e),
                 e == EMFILE   ? " (posd is out of file descriptors: raise its LimitNOFILE)"
                 : e == ENFILE ? " (the system is out of file descriptors)"
                               : "");
        if (p != MAP_FAILED)
            munmap(p, size);
        if (memfd >= 0)
            close(memfd);
        posd_client_reject(c, no_fds ? "posd is out of file descriptors (its open-file limit); "
                                       "ask the admin to raise posd's LimitNOFILE"
                              : e == ENOMEM ? "posd is out of memory"
                                            : "posd could not allocate shared memory");
        return e ? -e : -ENOMEM;
    }
    c->shm = p;
    c->shm_size = size;
    c->shm->magic = POS_SHM_MAGIC;
    c->shm->version = POS_SHM_VERSION;
    c->shm->size = (uint32_t)size;
    c->shm->client_id = c->id;
    posd_mem_limit_publish(c, c->pol.mem_limit); /* before WELCOME, which says the same */
    c->rings.pub = pos_published_init();
    pos_shm_publish(c->shm, &c->rings.pub, POS_PUB_ALL);
    if (posd_engine_add(d, c) < 0) {
        munmap(p, size);
        c->shm = NULL;
        close(memfd);
        posd_client_reject(c, "posd is out of memory");
        return -ENOMEM;
    }
    c->registered = 1;
    c->deadline = 0;
    c->connected_at = posd_now();
    posd_telemetry_client_add(d, c);
    /* decide before the client starts, so it never launches ahead of its policy */
    posd_clients_tick(d);
    c->sm_share = posd_share_for(d, c);
    struct pos_welcome w = {
        .client_id = c->id,
        .shm_size = (uint32_t)size,
        .sm_share = c->sm_share,
        .mem_limit = atomic_load(&c->shm->mem_limit),
        .mem_limit_ppm = atomic_load(&c->shm->mem_limit_ppm)};
    int fds[2] = {memfd, c->kick_fd};
    int rc = send_msg(c->sock, POS_MSG_WELCOME, &w, sizeof w, fds, 2);
    close(memfd);
    if (rc < 0)
        return -EIO;
    char share[32] = "", mem[48] = "";
    if (c->sm_share)
        snprintf(share, sizeof share, " sm_share %u%%", c->sm_share);
    if (!sched_mem_limit_equal(c->mem.limit, SCHED_MEM_NO_LIMIT)) {
        char limit[24];
        sched_mem_limit_format(c->mem.limit, limit, sizeof limit);
        snprintf(mem, sizeof mem, " mem_limit %s", limit);
    }
    char pod[POSD_POD_WORDS_MAX];
    posd_pod_words(&c->ident, pod, sizeof pod);
    posd_log(POSD_LOG_INFO, "client %u: pid %d uid %u app '%s'%s class %s priority %d%s%s%s%s",
             c->id, (int)c->ident.pid, (unsigned)c->ident.uid, c->ident.app, pod,
             c->pol.class_name, c->pol.priority, share, mem, c->pol.rule[0] ? " rule " : "",
             c->pol.rule);
    return 0;
}

int posd_client_register(struct posd *d, struct posd_client *c, const struct pos_hello *h)
{
    c->id = (uint32_t)++d->next_client_id; /* tools get no id */
    posd_identify(&c->ident, c->ident.pid);
    posd_config_match(&d->cfg, &c->ident, &c->pol);
    return register_client(d, c, h);
}

void posd_lookup_stats_group(struct posd *d)
{
    struct group gr, *found = NULL;
    char buf[16384];
    d->has_stats_group = getgrnam_r(POSD_STATS_GROUP, &gr, buf, sizeof buf, &found) == 0 && found;
    d->stats_gid = d->has_stats_group ? gr.gr_gid : (gid_t)-1;
}

int posd_peer_privileged(const struct posd *d, const struct posd_client *c)
{
    if (c->ident.uid == 0)
        return 1;
    if (!d->has_stats_group)
        return 0;
    if (c->ident.gid == d->stats_gid)
        return 1;
    static gid_t groups[NGROUPS_MAX]; /* posd is single-threaded */
    socklen_t len = sizeof groups;
    if (getsockopt(c->sock, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
        return 0;
    for (size_t i = 0; i < len / sizeof groups[0]; i++)
        if (groups[i] == d->stats_gid)
            return 1;
    return 0;
}

/* ---- the table ---------------------------------------------------------------------------- */

static int peers_of_uid(const struct posd *d, uid_t uid)
{
    int n = 0;
    for (int i = 0; i < POSD_MAX_CLIENTS; i++)
        n += d->clients[i].used && d->clients[i].ident.uid == uid;
    return n;
}

/* Refuses a peer that has no slot: a REJECT it can read (the shim prints it), then close. */
static void refuse_peer(int sock, const char *why)
{
    send_msg(sock, POS_MSG_REJECT, why, strlen(why) + 1, NULL, 0);
    close(sock);
}

struct posd_client *posd_client_new(struct posd *d, int sock)
{
    struct ucred cred = {.pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1};
    socklen_t cl = sizeof cred;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
        posd_log(POSD_LOG_WARN, "a peer without credentials (%s): refusing it", strerror(errno));
        close(sock);
        return NULL;
    }
    if (cred.uid != 0 && peers_of_uid(d, cred.uid) >= POSD_PEERS_PER_UID) {
        char why[128];
        snprintf(why, sizeof why, "uid %u already holds %d connections to posd, its limit",
                 (unsigned)cred.uid, POSD_PEERS_PER_UID);
        posd_log(POSD_LOG_WARN, "refusing pid %d: %s", (int)cred.pid, why);
        refuse_peer(sock, why);
        return NULL;
    }
    for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
        struct posd_client *c = &d->clients[i];
        if (c->used || c->pending)
            continue;
        uint32_t gen = c->gen + 1;
        /* every field, the I/O state too: nothing of an earlier client survives */
        memset(c, 0, sizeof *c);
        c->gen = gen;
        c->used = 1;
        c->sock = sock;
        c->kick_fd = -1;
        c->deadline = posd_now() + POSD_REGISTER_NS;
        c->ident.pid = cred.pid;
        c->ident.uid = cred.uid;
        c->ident.gid = cred.gid;
        /* the rest of who it is (/proc) at HELLO: a peer that never registers costs no reads
         * of /proc (a connect/close flood made posd read three files per connection) */
        return c;
    }
    posd_log(POSD_LOG_WARN, "too many peers (%d): refusing pid %d", POSD_MAX_CLIENTS,
             (int)cred.pid);
    refuse_peer(sock, "posd's table of clients is full");
    return NULL;
}

int64_t posd_clients_expire(struct posd *d, int64_t now)
{
    int64_t next = 0;
    for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
        struct posd_client *c = &d->clients[i];
        if (!c->used || !c->deadline)
            continue;
        if (c->deadline <= now) {
            posd_log(POSD_LOG_INFO, "pid %d (uid %u) %s within %lld s: closing its connection",
                     (int)c->ident.pid, (unsigned)c->ident.uid,
                     c->is_tool ? "made no further request" : "did not register",
                     POSD_REGISTER_NS / 1000000000LL);
            posd_client_close(d, c, NULL);
        } else if (!next || c->deadline < next) {
            next = c->deadline;
        }
    }
    return next;
}

void posd_client_close(struct posd *d, struct posd_client *c, const char *why)
{
    if (!c->used)
        return;
    if (c->close_asked) {
        c->close_asked = 0;
        d->close_asked--;
    }
    if (c->registered) {
        posd_telemetry_client_remove(d, c);
        posd_cpu_client_remove(d, c);
        posd_engine_remove(d, c);
        posd_log(why ? POSD_LOG_WARN : POSD_LOG_INFO, "client %u (pid %d, %s) %s", c->id,
                 (int)c->ident.pid, c->ident.app, why ? why : "left");
    }
    if (c->kick.parked) {
        c->kick.parked = 0;
        d->kicks_parked--;
    }
    if (c->kick_fd >= 0) {
        /* the pending read of the kick eventfd must not outlive the slot */
        struct io_uring_sqe *sqe = io_uring_get_sqe(&d->ring);
        if (sqe) {
            io_uring_prep_cancel64(
                sqe, posd_event_data(EV_CLIENT_KICK, (int)(c - d->clients), c->gen), 0);
            io_uring_sqe_set_data64(sqe, EV_CANCEL);
        }
        close(c->kick_fd);
        c->kick_fd = -1;
    }
    if (c->shm)
        munmap(c->shm, c->shm_size);
    c->shm = NULL;
    if (c->sock >= 0) {
        /* the pending recv holds the socket open: shut it down so the peer sees the end now */
        shutdown(c->sock, SHUT_RDWR);
        close(c->sock);
    }
    c->sock = -1;
    c->used = 0;
    c->registered = 0;
    if (posd_cpu_any_lowered(d))
        posd_arm_tick(d, 0); /* a client lowered for this one's sake may be restored now */
}

int64_t posd_clients_tick(struct posd *d)
{
    struct posd_client *bad[POSD_MAX_CLIENTS];
    int64_t now = posd_now();
    int nbad = posd_engine_read(d, now, bad);
    for (int i = 0; i < nbad; i++)
        posd_client_close(d, bad[i], "wrote out-of-range values into its shared memory");
    return posd_engine_decide(d, now);
}

void posd_clients_close_asked(struct posd *d)
{
    for (int i = 0; i < POSD_MAX_CLIENTS && d->close_asked; i++) {
        struct posd_client *c = &d->clients[i];
        if (c->close_asked)
            posd_client_close(d, c, c->close_why);
    }
}

/* C matched against the rules again, and what changed applied. */
static void reconfigure(struct posd *d, struct posd_client *c)
{
    posd_config_match(&d->cfg, &c->ident, &c->pol);
    posd_share_reconf(d, c);
    posd_mem_reconf(c);
    c->overridden = 0; /* posctl's overrides last until the configuration reloads */
    posd_engine_reconf(d, c);
}

void posd_clients_reconfigure(struct posd *d)
{
    for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
        struct posd_client *c = &d->clients[i];
        if (c->used && c->registered)
            reconfigure(d, c);
    }
}

int64_t posd_clients_pod_news(struct posd *d, int fd, void *arg)
{
    if (!posd_pod_take_news())
        return 0;
    int changed = 0;
    for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
        struct posd_client *c = &d->clients[i];
        if (!c->used || !c->registered || !posd_pod_refresh_names(&c->ident))
            continue;
        /* as on reload; a client posctl changed keeps that until it exits or posd reloads */
        if (!c->overridden)
            reconfigure(d, c);
        char pod[POSD_POD_WORDS_MAX];
        posd_pod_words(&c->ident, pod, sizeof pod);
        posd_log(POSD_LOG_INFO, "client %u (pid %d):%s: class %s priority %d%s%s%s", c->id,
                 (int)c->ident.pid, pod, c->pol.class_name, c->pol.priority,
                 c->pol.rule[0] ? " rule " : "", c->pol.rule,
                 c->overridden ? " (posctl's settings kept)" : "");
        changed = 1;
    }
    if (changed)
        posd_arm_tick(d, 0); /* decide under the new classes */
    return 0;
}
