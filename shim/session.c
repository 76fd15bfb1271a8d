/* The shim's side of posd: registering (HELLO, then a shared-memory region and a kick eventfd
 * over SCM_RIGHTS), submitting each launch and waiting for its grant when posd says so (a short
 * spin, then a futex on shared memory), reporting completions, and failing open: when posd is
 * absent, refuses us, goes away (hang-up, or no decision for a second while we wait) or
 * restarts, launches go straight to the driver and the collector re-attaches later. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "pos/client_shm.h"
#include "pos/proto.h"
#include "shim/shim.h"

#define HELP_EVERY_NS 2000         /* between a helping thread's collector passes */
#define WAIT_SLICE_NS 20000000     /* futex sleeps, between liveness checks */
#define HELP_SLEEP_NS 1000000      /* a helping wait's sleeps once its spin is over */
#define STUCK_NS      1000000000LL /* no decision from posd for this long: treat it as gone */
#define RECONNECT_NS  500000000LL

_Static_assert(POS_SUB_RING_WORDS * 64 == POS_SUB_RING, "one completion bit per ring slot");

static struct shim_session *retired; /* ended sessions threads may still use */
static uint32_t session_gen;
static int64_t last_attempt_ns;
static int refused_said;

/* A waiting thread's collector pass (shim_collector_help, given at load): 1 when it reported
 * completions. NULL until then, and then no pass is done. */
static int (*help_collector)(void);

void shim_session_helper(int (*help)(void))
{
    help_collector = help;
}

static int collector_help(void)
{
    return help_collector ? help_collector() : 0;
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

const char *shim_socket_path(void)
{
    const char *s = getenv("POS_SOCKET");
    return s && *s ? s : POS_DEFAULT_SOCKET;
}

/* The marker rate posd asks for (pos_sample_follow). */
static void follow_sample(struct shim_session *s)
{
    uint32_t want = atomic_load_explicit(&s->shm->sample, memory_order_relaxed);
    uint32_t rate = pos_sample_follow(shim_cfg.sample, want);
    if (atomic_load_explicit(&shim_sample, memory_order_relaxed) != rate)
        atomic_store_explicit(&shim_sample, rate, memory_order_relaxed);
}

/* ---- registration ------------------------------------------------------------------------- */

static int send_hello(int sock)
{
    struct {
        struct pos_msg_hdr h;
        struct pos_hello b;
    } m;
    memset(&m, 0, sizeof m);
    m.h.magic = POS_PROTO_MAGIC;
    m.h.version = POS_PROTO_VERSION;
    m.h.type = POS_MSG_HELLO;
    m.h.len = sizeof m.b;
    m.b.record_version = POS_OP_RECORD_VERSION;
    m.b.shm_version = POS_SHM_VERSION;
    return send(sock, &m, sizeof m, MSG_NOSIGNAL) == (ssize_t)sizeof m ? 0 : -1;
}

/* Receives WELCOME and its two descriptors, or reports a REJECT. Returns 0 or -1. */
static int recv_welcome(int sock, struct pos_welcome *w, int fds[2])
{
    char buf[512];
    union {
        char c[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {buf, sizeof buf - 1};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.c, .msg_controllen = sizeof ctl.c};
    ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
    if (n < (ssize_t)sizeof(struct pos_msg_hdr))
        return -1;
    struct pos_msg_hdr h;
    memcpy(&h, buf, sizeof h);
    if (h.magic != POS_PROTO_MAGIC || h.version != POS_PROTO_VERSION) {
        shim_log("posd at %s speaks another protocol (version %u, this shim %d): passthrough",
                 shim_socket_path(), h.version, POS_PROTO_VERSION);
        return -1;
    }
    if (h.type == POS_MSG_REJECT) {
        buf[n] = '\0';
        if (!refused_said++)
            shim_log("posd refused this process: %s; passthrough", buf + sizeof h);
        return -1;
    }
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    if (h.type == POS_MSG_WELCOME && (m.msg_flags & MSG_CTRUNC)) {
        /* the kernel could not install posd's descriptors here */
        if (cm && cm->cmsg_type == SCM_RIGHTS)
            for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cm) + i * sizeof fd, sizeof fd);
                close(fd);
            }
        if (!refused_said++)
            shim_log("posd's descriptors did not arrive (is this process out of file "
                     "descriptors?); passthrough");
        return -1;
    }
    if (h.type != POS_MSG_WELCOME || h.len != sizeof *w || !cm || cm->cmsg_type != SCM_RIGHTS ||
        cm->cmsg_len != CMSG_LEN(2 * sizeof(int)))
        return -1;
    memcpy(w, buf + sizeof h, sizeof *w);
    memcpy(fds, CMSG_DATA(cm), 2 * sizeof(int));
    return 0;
}

static struct shim_session *attach(void)
{
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return NULL;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", shim_socket_path());
    struct timeval tv = {.tv_sec = 1};
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int fds[2] = {-1, -1};
    struct pos_welcome w;
    if (connect(sock, (struct sockaddr *)&a, sizeof a) < 0) {
        close(sock);
        return NULL;
    }
    /* a peer that posd refuses at once finds the REJECT waiting, though its HELLO failed */
    int sent = send_hello(sock);
    if (recv_welcome(sock, &w, fds) < 0 || sent < 0) {
        if (fds[0] >= 0) {
            close(fds[0]);
            close(fds[1]);
        }
        close(sock);
        return NULL;
    }
    struct pos_client_shm *shm =
        mmap(NULL, w.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    close(fds[0]);
    struct shim_session *s = calloc(1, sizeof *s);
    if (shm == MAP_FAILED || !s || w.shm_size < sizeof *shm || shm->magic != POS_SHM_MAGIC ||
        shm->version != POS_SHM_VERSION) {
        if (shm != MAP_FAILED)
            munmap(shm, w.shm_size);
        free(s);
        close(fds[1]);
        close(sock);
        shim_log("posd's shared memory is not what this shim expects: passthrough");
        return NULL;
    }
    s->shm = shm;
    s->shm_size = w.shm_size;
    s->sock = sock;
    s->kick_fd = fds[1];
    s->gen = ++session_gen;
    s->client_id = w.client_id;
    s->sm_share = w.sm_share <= 100 ? w.sm_share : 0;
    s->mem_limit = w.mem_limit;
    s->mem_limit_ppm = w.mem_limit_ppm;
    follow_sample(s);
    /* posd rebuilds this client's ledger from the account it finds here */
    shim_mem_attached(s);
    if (shim_cfg.debug)
        shim_log("attached to posd at %s as client %u (sm_share %u%%)", shim_socket_path(),
                 w.client_id, s->sm_share);
    return s;
}

/* Ends S (posd is gone): waiting threads stop waiting; new launches go straight through. Its
 * mapping and kick descriptor stay until no thread uses S (shim_session_reclaim): a thread may
 * still wait in it or kick posd through it, and a closed descriptor's number may be reused by
 * the application meanwhile. */
static void detach(struct shim_session *s, const char *why)
{
    atomic_store(&shim_session, NULL);
    atomic_store(&shim_sample, shim_cfg.sample);
    atomic_store(&s->shm->posd_state, POS_POSD_GONE);
    atomic_fetch_add(&s->shm->grant_word, 1);
    futex(&s->shm->grant_word, FUTEX_WAKE, INT_MAX, NULL);
    close(s->sock);
    s->retired_next = retired;
    retired = s;
    if (shim_cfg.debug)
        shim_log("posd session %u ended (%s): passthrough until posd is back", s->gen, why);
}

static int in_use(const struct shim_session *s)
{
    for (int i = 0; i < SHIM_MAX_THREADS; i++)
        if (atomic_load_explicit(&shim_threads[i].using, memory_order_seq_cst) == s)
            return 1;
    return 0;
}

void shim_session_reclaim(void)
{
    /* S is no longer current (detach's store comes first), so a thread that announces it
     * after this look sees that and lets go without touching it */
    for (struct shim_session **pp = &retired; *pp;) {
        struct shim_session *s = *pp;
        if (in_use(s)) {
            pp = &s->retired_next;
            continue;
        }
        *pp = s->retired_next;
        munmap(s->shm, s->shm_size);
        close(s->kick_fd);
        if (shim_cfg.debug)
            shim_log("posd session %u released", s->gen);
        free(s);
    }
}

/* Called by the collector every cycle: notices a posd that went away, re-attaches to one that
 * is (back). */
void shim_session_poll(void)
{
    if (!shim_sched_allowed)
        return;
    struct shim_session *s = atomic_load(&shim_session);
    if (s) {
        char c;
        ssize_t n = recv(s->sock, &c, 1, MSG_DONTWAIT | MSG_PEEK);
        int gone = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
                   atomic_load(&s->shm->posd_state) == POS_POSD_GONE;
        if (gone) {
            detach(s, n == 0 ? "hang-up" : "posd gone");
        } else {
            follow_sample(s);
            shim_mem_publish();
        }
        return;
    }
    uint64_t now = shim_now_ns();
    if (last_attempt_ns && (int64_t)(now - (uint64_t)last_attempt_ns) < RECONNECT_NS)
        return;
    last_attempt_ns = (int64_t)now;
    s = attach();
    if (s)
        atomic_store(&shim_session, s);
}

static pthread_once_t before_init_once = PTHREAD_ONCE_INIT;

/* Registers before the driver starts, so that posd's SM share is in the environment when the
 * driver creates the first context. A share arriving in a later session (posd restarted) is too
 * late for the contexts there are: the environment is left as it is. */
static void before_init(void)
{
    shim_session_poll();
    struct shim_session *s = atomic_load(&shim_session);
    if (s)
        shim_mps_apply(s->sm_share);
}

void shim_session_before_init(void)
{
    if (shim_sched_allowed)
        pthread_once(&before_init_once, before_init);
}

static pthread_once_t after_init_once = PTHREAD_ONCE_INIT;

static void after_init(void)
{
    struct shim_session *s = atomic_load(&shim_session);
    if (!s || (s->mem_limit == POS_MEM_UNLIMITED && !s->mem_limit_ppm))
        return;
    int n = 0;
    uint64_t totals[POS_MEM_MAX_DEVICES] = {0};
    if (!shim_real_cuDeviceGetCount || shim_real_cuDeviceGetCount(&n) != CUDA_SUCCESS)
        return;
    if (n > POS_MEM_MAX_DEVICES)
        n = POS_MEM_MAX_DEVICES;
    for (int d = 0; d < n; d++) {
        size_t bytes = 0;
        if (shim_real_cuDeviceTotalMem_v2 &&
            shim_real_cuDeviceTotalMem_v2(&bytes, (CUdevice)d) == CUDA_SUCCESS)
            totals[d] = bytes;
    }
    shim_mps_apply_mem(s->mem_limit, s->mem_limit_ppm, n, totals);
}

void shim_session_after_init(void)
{
    if (shim_sched_allowed)
        pthread_once(&after_init_once, after_init);
}

void shim_session_init_failed(void)
{
    struct shim_session *s = atomic_load(&shim_session);
    if (s && !shim_cuda_inited)
        detach(s, "cuInit failed");
}

void shim_session_fresh_child(void)
{
    /* the parent's once and session are the parent's (a cuInit of its that failed, or one in
     * another thread when it forked) */
    before_init_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    after_init_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    atomic_store(&shim_session, NULL);
}

/* ---- the launch path's slow part ---------------------------------------------------------- */

static void kick(struct shim_session *s)
{
    uint64_t one = 1;
    ssize_t n = write(s->kick_fd, &one, sizeof one);
    (void)n;
}

static int wants_kick(const struct shim_session *s)
{
    return atomic_load_explicit(&s->shm->kick_on_done, memory_order_acquire) != 0;
}

static int posd_gone(const struct shim_session *s)
{
    return atomic_load_explicit(&s->shm->posd_state, memory_order_acquire) == POS_POSD_GONE ||
           atomic_load_explicit(&shim_session, memory_order_acquire) != s;
}

/* Whether SEQ may launch now (pos_grant_allows). */
static int granted(const struct pos_client_shm *shm, uint64_t seq)
{
    return pos_grant_allows(pos_shm_grant(shm), seq);
}

static void note_wait(struct pos_client_shm *shm, uint64_t ns)
{
    uint64_t us = ns / 1000;
    int b = 0;
    while (us >= 2 && b < POS_WAIT_BUCKETS - 1) {
        us >>= 1;
        b++;
    }
    atomic_fetch_add_explicit(&shm->wait_hist[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&shm->waits, 1, memory_order_relaxed);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* Waits until SEQ is granted, posd lets everything go, or posd is gone.
 *
 * A wait for a window step (the cap over the client's own completions) ends when an operator
 * of this process completes. When it helps (pos_wait_helps: the client's operators are so
 * short that the step itself is the cost), the thread spins up to POS_HELP_SPIN_NS and does
 * the collector's pass itself every HELP_EVERY_NS: it sees the completion marker land and
 * steps the window at once, where the collector's next poll and a futex wake-up would each add
 * a scheduler wake-up (tens of us on a small VM); it yields the core between looks. Otherwise
 * it sleeps after POS_SPIN_NS. */
static void wait_grant(struct shim_session *s, uint64_t seq)
{
    struct pos_client_shm *shm = s->shm;
    uint64_t t0 = shim_now_ns(), now = t0, helped = 0;
    int help = pos_wait_helps(pos_wait_for_step(pos_shm_grant(shm)),
                              atomic_load_explicit(&s->wait_avg_ns, memory_order_relaxed),
                              (uint64_t)shim_cfg.help_when_us * 1000, &s->step_waits);
    uint64_t spin = help ? POS_HELP_SPIN_NS : POS_SPIN_NS;
    for (; now - t0 < spin; now = shim_now_ns()) {
        if (granted(shm, seq) || posd_gone(s))
            goto done;
        if (help) {
            if (now - helped >= HELP_EVERY_NS) {
                helped = now;
                if (collector_help())
                    continue; /* completions came: look at the cap again at once */
            }
            /* give the core to whoever makes the completion known (the device's agent in
             * the simulator, the collector): on a small machine they share it with us */
            sched_yield();
        } else {
            cpu_relax();
        }
    }
    atomic_fetch_add(&shm->waiters, 1);
    kick(s);
    uint64_t beat = atomic_load(&shm->heartbeat), beat_at = shim_now_ns(), kicked_at = beat_at;
    for (;;) {
        uint32_t w = atomic_load_explicit(&shm->grant_word, memory_order_acquire);
        if (granted(shm, seq) || posd_gone(s))
            break;
        /* a helping wait that outlasted its spin still looks for the completion itself now
         * and then: the collector may poll rarely (POS_POLL_US), and its next poll would
         * end the wait up to that late */
        struct timespec ts = {0, help ? HELP_SLEEP_NS : WAIT_SLICE_NS};
        futex(&shm->grant_word, FUTEX_WAIT, w, &ts);
        if (help && !granted(shm, seq))
            collector_help();
        uint64_t now = shim_now_ns(), b = atomic_load(&shm->heartbeat);
        if (b != beat) {
            beat = b;
            beat_at = now;
        } else if ((int64_t)(now - beat_at) > STUCK_NS) {
            /* posd holds us but decides nothing: it is stuck, not scheduling. Fail open. */
            atomic_store(&shm->posd_state, POS_POSD_GONE);
            break;
        } else if (!help || now - kicked_at >= WAIT_SLICE_NS) {
            kick(s); /* a helping wait's millisecond looks do not kick posd each time */
            kicked_at = now;
        }
    }
    atomic_fetch_sub(&shm->waiters, 1);
done:
    now = shim_now_ns() - t0;
    if (help) {
        uint64_t avg = atomic_load_explicit(&s->wait_avg_ns, memory_order_relaxed);
        atomic_store_explicit(&s->wait_avg_ns, pos_wait_avg(avg, now), memory_order_relaxed);
    }
    note_wait(shm, now);
}

uint64_t shim_session_submit(struct shim_session *s, const struct shim_submit *sub, int *windowed)
{
    struct pos_client_shm *shm = s->shm;
    uint64_t seq = pos_sub_ring_reserve(shm);
    /* a full ring: posd is behind; wake it and wait for room, or for it to be gone, or, as for
     * a grant, for STUCK_NS without a decision of posd's (a stopped posd held a client whose
     * ring had filled until it was continued) */
    uint64_t beat = 0, beat_at = 0;
    while (!pos_sub_ring_room(shm, seq)) {
        if (posd_gone(s))
            return 0;
        uint64_t now = shim_now_ns(), b = atomic_load(&shm->heartbeat);
        if (!beat_at || b != beat) {
            beat = b;
            beat_at = now;
        } else if ((int64_t)(now - beat_at) > STUCK_NS) {
            atomic_store(&shm->posd_state, POS_POSD_GONE);
            return 0;
        }
        kick(s);
        usleep(50);
    }
    struct pos_submission *slot = pos_sub_ring_slot(shm, seq);
    int go_now = atomic_load_explicit(&shm->grant_mode, memory_order_acquire) == POS_GRANT_FREE;
    slot->seq = seq;
    slot->kernel_id = sub->kernel_id;
    slot->kind = sub->kind;
    slot->flags = (uint16_t)((go_now ? POS_SUBF_FREE : 0) | (sub->ptsz ? POS_SUBF_PTSZ : 0));
    memcpy(slot->grid, sub->grid, sizeof slot->grid);
    memcpy(slot->block, sub->block, sizeof slot->block);
    slot->smem = sub->smem;
    slot->tid = sub->tid;
    slot->stream = sub->stream;
    slot->ctx = sub->ctx;
    slot->submit_ns = sub->submit_ns;
    pos_sub_ring_publish(slot, seq);
    if (pos_sub_ring_half_behind(shm, seq))
        kick(s);
    int last = 0;
    if (!go_now) {
        /* held by posd: the grant that lets it go also says whether it is the last launch
         * that grant allows, which needs a marker of its own (pos_grant_last) */
        struct pos_grant_view g = pos_shm_grant(shm);
        if (!pos_grant_allows(g, seq)) {
            wait_grant(s, seq);
            g = pos_shm_grant(shm);
        }
        last = pos_grant_last(g, seq);
    }
    *windowed = last;
    /* the first launch after an idle point starts a request: posd holds others for it */
    if (unlikely(atomic_load_explicit(&s->idle, memory_order_relaxed)) &&
        atomic_exchange_explicit(&s->idle, 0, memory_order_relaxed) && wants_kick(s))
        kick(s);
    return seq;
}

/* ---- completions (the collector) ---------------------------------------------------------- */

/* The client's own completion prefix: SEQ of session S is complete (or will never run). When
 * the prefix moves and threads wait, they are woken: the window cap may now let them go. */
static void note_local_done(struct shim_session *s, uint64_t seq)
{
    uint64_t done = s->local_done;
    if (seq <= done || seq - done > POS_SUB_RING)
        return; /* known, or too far ahead to track: posd's grants still cover it */
    s->done_bits[seq % POS_SUB_RING / 64] |= UINT64_C(1) << (seq % 64);
    while (s->done_bits[(done + 1) % POS_SUB_RING / 64] & (UINT64_C(1) << ((done + 1) % 64))) {
        done++;
        s->done_bits[done % POS_SUB_RING / 64] &= ~(UINT64_C(1) << (done % 64));
    }
    if (done == s->local_done)
        return;
    s->local_done = done;
    struct pos_client_shm *shm = s->shm;
    atomic_store_explicit(&shm->local_done, done, memory_order_release);
    if (atomic_load_explicit(&shm->window_cap, memory_order_relaxed) &&
        atomic_load_explicit(&shm->waiters, memory_order_acquire) > 0) {
        atomic_fetch_add_explicit(&shm->grant_word, 1, memory_order_release);
        futex(&shm->grant_word, FUTEX_WAKE, INT_MAX, NULL);
    }
}

int shim_session_complete(uint32_t gen, uint64_t seq, uint64_t complete_ns, uint64_t call_ns,
                          uint16_t how, int32_t result)
{
    struct shim_session *s = atomic_load(&shim_session);
    if (!s || s->gen != gen || !seq)
        return 0; /* its session is over: posd forgot it */
    if (pos_done_ring_push(s->shm, seq, complete_ns, call_ns, how, result) < 0) {
        kick(s);
        return -1; /* full: try again next cycle */
    }
    note_local_done(s, seq);
    return 0;
}

/* ---- synchronisations (the launching threads) -------------------------------------------- */

uint64_t shim_session_covers(struct shim_thread *t, uint32_t *gen)
{
    struct shim_session *s = t ? shim_session_enter(t) : NULL;
    if (!s)
        return 0;
    *gen = s->gen;
    uint64_t covers = pos_sub_ring_tail(s->shm);
    shim_session_leave(t);
    return covers;
}

static void report_sync(struct shim_session *s, uint32_t scope, int ptsz, uint32_t tid,
                        uint64_t stream, uint64_t ctx, uint64_t covers, uint64_t end_ns)
{
    struct pos_sync_rec r = {.scope = scope,
                             .tid = tid,
                             .ptsz = (uint32_t)ptsz,
                             .stream = stream,
                             .ctx = ctx,
                             .covers = covers,
                             .end_ns = end_ns};
    if (pos_sync_ring_push(s->shm, &r) < 0)
        return;
    /* it covered everything launched so far: the client is idle until its next launch */
    if (pos_sync_idles(covers, pos_sub_ring_tail(s->shm)))
        atomic_store_explicit(&s->idle, 1, memory_order_relaxed);
    /* always: posd learns of a request's end at once (one eventfd write per sync) */
    kick(s);
}

void shim_session_report_sync(struct shim_thread *t, uint32_t gen, uint32_t scope, int ptsz,
                              uint32_t tid, uint64_t stream, uint64_t ctx, uint64_t covers,
                              uint64_t end_ns)
{
    struct shim_session *s = t && covers ? shim_session_enter(t) : NULL;
    if (!s)
        return;
    if (s->gen == gen)
        report_sync(s, scope, ptsz, tid, stream, ctx, covers, end_ns);
    shim_session_leave(t);
}

int shim_session_prompt(void)
{
    struct shim_session *s = atomic_load_explicit(&shim_session, memory_order_acquire);
    return s &&
           pos_collector_prompt(atomic_load_explicit(&s->shm->kick_on_done, memory_order_acquire),
                                atomic_load_explicit(&s->shm->window_cap, memory_order_relaxed));
}

void shim_session_kick_if_wanted(void)
{
    struct shim_session *s = atomic_load_explicit(&shim_session, memory_order_acquire);
    if (s && wants_kick(s))
        kick(s);
}

/* ---- kernel names (the collector) --------------------------------------------------------- */

void shim_session_send_names(void)
{
    struct shim_session *s = atomic_load_explicit(&shim_session, memory_order_acquire);
    if (!s)
        return;
    uint32_t have = shim_ident_count();
    while (s->names_sent < have) {
        uint8_t buf[POS_REQ_MAX];
        struct pos_msg_hdr h = {
            .magic = POS_PROTO_MAGIC, .version = POS_PROTO_VERSION, .type = POS_MSG_NAMES};
        struct pos_names n = {.first = s->names_sent + 1, .count = 0};
        size_t off = sizeof h + sizeof n;
        for (uint32_t id = n.first; id <= have; id++) {
            const char *name = shim_ident_name(id);
            size_t len = strlen(name);
            if (len > POS_KERNEL_NAME_MAX)
                len = POS_KERNEL_NAME_MAX;
            if (len == 0)
                name = "?", len = 1;
            if (off + sizeof(uint16_t) + len > sizeof buf)
                break;
            uint16_t l16 = (uint16_t)len;
            memcpy(buf + off, &l16, sizeof l16);
            memcpy(buf + off + sizeof l16, name, len);
            off += sizeof l16 + len;
            n.count++;
        }
        h.len = (uint32_t)(off - sizeof h);
        memcpy(buf, &h, sizeof h);
        memcpy(buf + sizeof h, &n, sizeof n);
        if (send(s->sock, buf, off, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)off)
            return; /* next cycle */
        s->names_sent += n.count;
    }
}

void shim_session_note_sync(struct shim_thread *t, uint64_t ns)
{
    struct shim_session *s = shim_session_enter(t);
    if (!s)
        return;
    atomic_fetch_add_explicit(&s->shm->syncs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->shm->sync_ns, ns, memory_order_relaxed);
    shim_session_leave(t);
}

void shim_session_forked(void)
{
    atomic_store(&shim_session, NULL);
    shim_sched_allowed = 0;
}
