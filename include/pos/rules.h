/* The rules of a client's side of pos, each written once: when a launch may go, which launches
 * carry a completion marker, how a thread waits for its grant, how often the shim's collector
 * looks for completions and what it holds back, what posd publishes, and in which order posd
 * reads what a client wrote. They decide what posd learns and when, so they change behaviour as
 * much as the policy does: the shim (which reads shared memory with atomics, through
 * include/pos/client_shm.h), posd's engine and possim (plain copies) call these same functions.
 * Pure functions over plain values, but for the counter pos_wait_helps shares between threads. */
#ifndef POS_RULES_H
#define POS_RULES_H

#include <stdatomic.h>
#include <stdint.h>

#include "pos/op_record.h"

/* ---- defaults and fixed times (the shim's environment variables, possim's keys) ------------ */

#define POS_SAMPLE_DEFAULT         32     /* POS_SAMPLE: a marker every N launches */
#define POS_POLL_US_DEFAULT        100    /* POS_POLL_US: the collector's poll, work pending */
#define POS_PROMPT_POLL_US_DEFAULT 20     /* POS_PROMPT_POLL_US: the same, prompt */
#define POS_HELP_WHEN_US_DEFAULT   60     /* POS_HELP_WHEN_US: see pos_wait_helps */
#define POS_SPIN_NS                20000  /* a grant wait spins this long, then sleeps */
#define POS_HELP_SPIN_NS           200000 /* ... or this long, helping, for a window step */
#define POS_HELP_PROBE             16     /* one long window-step wait in 16 helps anyway */
#define POS_IDLE_POLL_US           2000   /* the collector's idle back-off: from 2 ms ... */
#define POS_IDLE_POLL_MAX_US       5000   /* ... doubling while below 5 ms (2, 4, 8, 8 ms) */
#define POS_COLLECTOR_DUTY         4      /* a prompt collector sleeps >= 4 x its pass's CPU */

/* ---- grants ------------------------------------------------------------------------------- */

/* How the client may launch. */
enum pos_grant_mode {
    POS_GRANT_FREE = 0, /* launch at once; posd only counts (no scheduler constraint) */
    POS_GRANT_WINDOW,   /* launch SEQ only when pos_grant_allows says so */
};

/* What a launching thread decides by: the grant posd published last and the client's own
 * completion prefix. */
struct pos_grant_view {
    uint32_t mode;    /* enum pos_grant_mode */
    uint32_t window;  /* the window cap: launches beyond DONE that may be in flight; 0 = none */
    uint64_t granted; /* the highest seq posd granted */
    uint64_t done;    /* every seq <= DONE completed, as the client's collector reported it; read
                       * only with a window cap */
};

/* Whether launch SEQ may go: FREE mode, posd's grant covers it, or the window cap over the
 * client's own completion prefix does (the collector moves that prefix and wakes the waiters:
 * a window step needs no round trip through posd). */
static inline int pos_grant_allows(struct pos_grant_view g, uint64_t seq)
{
    return g.mode == POS_GRANT_FREE || seq <= g.granted || (g.window && seq <= g.done + g.window);
}

/* Whether launch SEQ, submitted while the mode was WINDOW, is the last one G allows: it needs a
 * completion marker of its own, whatever the sample, because the window moves on (or posd
 * grants more) only once its completion is known. The mode is not looked at: a launch
 * submitted in FREE mode fills no window, and the caller, which submitted it, knows. */
static inline int pos_grant_last(struct pos_grant_view g, uint64_t seq)
{
    return g.window ? seq >= g.done + g.window : seq >= g.granted;
}

/* ---- waiting for a grant ----------------------------------------------------------------- */

/* Whether a wait under G is for a window step: the client's own next completion lets the thread
 * go, with no decision of posd's. */
static inline int pos_wait_for_step(struct pos_grant_view g)
{
    return g.window != 0 && g.mode == POS_GRANT_WINDOW;
}

/* Whether a wait (for a window step when STEP) spins up to POS_HELP_SPIN_NS doing the
 * collector's pass itself, so that the moment the client's marker lands the window moves and
 * the thread goes: where the client's operators are so short that the step is the cost (its
 * helped waits averaged AVG_NS, under WHEN_NS), and on one wait in POS_HELP_PROBE otherwise, to
 * notice when they get short; LONG_WAITS counts those, over all the client's threads. Clients
 * with longer operators sleep after POS_SPIN_NS instead, so that a batch client does not spend
 * the CPU that the clients above it need. */
static inline int pos_wait_helps(int step, uint64_t avg_ns, uint64_t when_ns,
                                 _Atomic uint32_t *long_waits)
{
    if (!step)
        return 0;
    return avg_ns < when_ns ||
           atomic_fetch_add_explicit(long_waits, 1, memory_order_relaxed) % POS_HELP_PROBE == 0;
}

/* The moving average of helped waits (weight 1/8) after one of NS. */
static inline uint64_t pos_wait_avg(uint64_t avg_ns, uint64_t ns)
{
    return avg_ns - avg_ns / 8 + ns / 8;
}

/* ---- completion markers ------------------------------------------------------------------- */

/* The marker rate the shim follows: posd (WANT) may ask for more markers than the shim's own
 * POS_SAMPLE (OWN), never fewer; 0 asks for nothing (OWN 0: no sampled markers at all). */
static inline uint32_t pos_sample_follow(uint32_t own, uint32_t want)
{
    return own && want && want < own ? want : own;
}

/* Whether a thread's launch carries a sampled marker: every SAMPLE-th, counted down in *UNTIL;
 * a lower SAMPLE (posd asked for markers more often) takes effect at once. */
static inline int pos_marker_due(uint32_t *until, uint32_t sample)
{
    if (__builtin_expect(*until > sample, 0))
        *until = sample;
    int due = sample && --*until == 0;
    if (due)
        *until = sample;
    return due;
}

/* ---- the collector ------------------------------------------------------------------------ */

/* Whether the collector looks promptly: posd waits on this client's completions (it asked for
 * kicks, or it runs the client in a window, whose every step waits for one). */
static inline int pos_collector_prompt(uint32_t kick_on_done, uint32_t window)
{
    return kick_on_done || window;
}

/* The collector's sleep before its next pass, in ns: PROMPT_POLL_NS while it is PROMPT and
 * records are PENDING (every step of a window costs this poll), POLL_NS while either, else the
 * idle back-off *IDLE_US (2, 4, 8, 8, ... ms), which any work or promptness resets. */
static inline uint64_t pos_collector_sleep_ns(int prompt, int pending, uint64_t poll_ns,
                                              uint64_t prompt_poll_ns, uint32_t *idle_us)
{
    if (prompt || pending) {
        *idle_us = POS_IDLE_POLL_US;
        return prompt && pending ? prompt_poll_ns : poll_ns;
    }
    uint64_t ns = (uint64_t)*idle_us * 1000;
    if (*idle_us < POS_IDLE_POLL_MAX_US)
        *idle_us *= 2;
    return ns;
}

/* The host's CPU pressure as a collector follows it: the share of wall time during which some
 * runnable task waited for a core (Linux's PSI "some" on /proc/pressure/cpu, possim's host model
 * the same), measured over windows of POS_PRESSURE_WINDOW_NS. */
#define POS_PRESSURE_WINDOW_NS 10000000ull /* 10 ms */
#define POS_PRESSURE_CONTENDED 100         /* per mille: a host where tasks wait 10 % of the time */
struct pos_cpu_pressure {
    uint64_t t0_ns, stall0_ns; /* the current window's start, and the stall counter then */
    uint32_t permille;         /* the last whole window's share, 0..1000 */
    int known;                 /* a whole window was seen */
};

/* Whether a window ended at T_NS (the caller then reads the stall counter and calls
 * pos_cpu_pressure_take). */
static inline int pos_cpu_pressure_due(const struct pos_cpu_pressure *p, uint64_t t_ns)
{
    return !p->t0_ns || t_ns - p->t0_ns >= POS_PRESSURE_WINDOW_NS;
}

/* The stall counter STALL_NS (ns some task waited, since any origin) read at T_NS: ends the
 * window begun at the last reading. */
static inline void pos_cpu_pressure_take(struct pos_cpu_pressure *p, uint64_t t_ns,
                                         uint64_t stall_ns)
{
    if (p->t0_ns && t_ns > p->t0_ns && stall_ns >= p->stall0_ns) {
        uint64_t d = (stall_ns - p->stall0_ns) * 1000 / (t_ns - p->t0_ns);
        p->permille = d > 1000 ? 1000 : (uint32_t)d;
        p->known = 1;
    }
    p->t0_ns = t_ns;
    p->stall0_ns = stall_ns;
}

/* Whether the host is short of cores: its last window's pressure reached
 * POS_PRESSURE_CONTENDED, or nothing tells (no window yet, or no counter: assume so). */
static inline int pos_cpu_contended(const struct pos_cpu_pressure *p)
{
    return !p->known || p->permille >= POS_PRESSURE_CONTENDED;
}

/* The prompt poll interval of a collector whose pass (its work, its sleep's and wake-up's cost
 * in the kernel) takes PASS_NS of CPU: PROMPT_POLL_NS; on a host short of cores (CONTENDED)
 * POS_COLLECTOR_DUTY times the pass where that is longer, so that a prompt collector takes at
 * most a fifth of a core there (on 2 busy cores a 20 us poll of a 22 us pass took most of one:
 * the CPU its own process's launching thread and everyone else's wanted; with cores to spare
 * that CPU is free and the prompt poll releases the next operator sooner). The floor stops at
 * POLL_NS, and a PROMPT_POLL_NS set above POLL_NS stays as set. */
static inline uint64_t pos_collector_prompt_ns(uint64_t prompt_poll_ns, uint64_t poll_ns,
                                               uint64_t pass_ns, int contended)
{
    uint64_t floor = contended ? pass_ns * POS_COLLECTOR_DUTY : 0;
    if (floor > poll_ns)
        floor = poll_ns;
    return floor > prompt_poll_ns ? floor : prompt_poll_ns;
}

/* Whether HOW (enum pos_completion) is an operator's own marker: seen landing (a poll time), or
 * with the device's time of its end. */
static inline int pos_done_exact(uint32_t how)
{
    return how == POS_DONE_MARKER || how == POS_DONE_DEVICE;
}

/* Whether a completion learnt as HOW (enum pos_completion) applies to a record that knows
 * CUR_HOW: its own marker, exact, to any record it has not landed on yet; a bound (a later
 * marker on its stream, a synchronisation that covered it) only to a record whose completion is
 * unknown, because bounds come in time order, so the first is the tightest. */
static inline int pos_done_takes(uint32_t cur_how, uint32_t how)
{
    return pos_done_exact(how) ? !pos_done_exact(cur_how) : cur_how == POS_DONE_UNKNOWN;
}

/* Whether the collector still holds a record back from posd: its completion is unknown, or it
 * carries a marker (MARKED) that has not landed yet, whose exact time posd learns from. */
static inline int pos_done_pending(uint32_t how, int marked)
{
    return how == POS_DONE_UNKNOWN || (marked && !pos_done_exact(how));
}

/* Whether a synchronisation that covered every launch up to COVERS leaves the client idle: it
 * covered every launch so far (LAST, the last seq handed out). The next launch then starts a
 * request, and kicks posd if it asks for kicks: posd holds others for it. */
static inline int pos_sync_idles(uint64_t covers, uint64_t last)
{
    return covers == last;
}

/* ---- what posd publishes ---------------------------------------------------------------- */

/* A client's grant state as posd published it last. */
struct pos_published {
    uint32_t mode;         /* enum pos_grant_mode */
    uint32_t window;       /* the window cap over the client's completion prefix; 0 = none */
    uint64_t granted;      /* the highest seq the client may launch in WINDOW mode */
    uint32_t sample;       /* a completion marker every SAMPLE launches, as posd wants it */
    uint32_t kick_on_done; /* posd wants a kick when completions are reported and at the first
                            * launch of a request */
};

/* What a registration leaves before posd's first decision: no launch goes ahead of the policy,
 * and every launch has a marker. */
static inline struct pos_published pos_published_init(void)
{
    return (struct pos_published){.mode = POS_GRANT_WINDOW, .sample = 1};
}

enum { POS_PUB_SAMPLE = 1, POS_PUB_KICK = 2, POS_PUB_GRANT = 4, POS_PUB_ALL = 7 };

/* Takes posd's decision NEXT for a client into what it published, *PUB: the sample and the
 * kick request as they are at every decision, the grant (mode, grant, window cap) only when
 * the decision CHANGED it. Returns what changed (POS_PUB_*): what must be written, and, with
 * POS_PUB_GRANT, that waiting threads must look again. */
static inline unsigned pos_publish(struct pos_published *pub, struct pos_published next,
                                   int changed)
{
    unsigned what = 0;
    if (next.sample != pub->sample) {
        pub->sample = next.sample;
        what |= POS_PUB_SAMPLE;
    }
    if (next.kick_on_done != pub->kick_on_done) {
        pub->kick_on_done = next.kick_on_done;
        what |= POS_PUB_KICK;
    }
    if (changed) {
        pub->mode = next.mode;
        pub->window = next.window;
        pub->granted = next.granted;
        what |= POS_PUB_GRANT;
    }
    return what;
}

/* What a thread of the client decides by under PUB, with its completion prefix DONE. */
static inline struct pos_grant_view pos_grant_view_of(const struct pos_published *pub,
                                                      uint64_t done)
{
    return (struct pos_grant_view){
        .mode = pub->mode, .window = pub->window, .granted = pub->granted, .done = done};
}

/* ---- what posd reads, in which order ------------------------------------------------------ */

/* One client's reports as posd reads them at a wake-up (posd's shared memory, possim's copies).
 * Each returns 0 (or as said), or -1 when the client broke the protocol. */
struct pos_drain_ops {
    /* the next synchronisation report that is ready: 1 and what it covers; 0 when none is */
    int (*sync_next)(void *src, uint64_t *covers);
    /* the submissions up to seq UPTO (UINT64_MAX: all) into the core */
    int (*submissions)(void *src, uint64_t upto);
    /* the report sync_next gave into the core: 1, or 0 when a submission it covers is still
     * being written (the report waits for the next wake-up) */
    int (*sync)(void *src);
    /* the completions into the core */
    int (*completions)(void *src);
};

/* The synchronisation reports, each after the submissions it covers and before later ones (so
 * that requests are told apart however late posd looks), then the submissions after the last
 * one. */
static inline int pos_drain_syncs(const struct pos_drain_ops *o, void *src)
{
    uint64_t covers;
    int rc;
    while ((rc = o->sync_next(src, &covers)) > 0) {
        if (o->submissions(src, covers) < 0 || (rc = o->sync(src)) < 0)
            return -1;
        if (rc == 0)
            break;
    }
    if (rc < 0)
        return -1;
    return o->submissions(src, UINT64_MAX);
}

/* Everything a client wrote since posd's last look: the submissions with the synchronisations,
 * then the completions, which refer to them. */
static inline int pos_drain(const struct pos_drain_ops *o, void *src)
{
    return pos_drain_syncs(o, src) < 0 || o->completions(src) < 0 ? -1 : 0;
}

#endif
