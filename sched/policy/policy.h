/* The scheduling policies' one interface: a policy sees every client of a device (its class,
 * limits, what it has submitted, what is in flight, whether it waits) and the clock, and
 * decides each client's grant. Pure code: no I/O, no clock of its own, so the same policy
 * runs in posd (real time) and in a simulator (virtual time). */
#ifndef POS_SCHED_POLICY_H
#define POS_SCHED_POLICY_H

#include <stddef.h>
#include <stdint.h>

/* One client as a policy sees it. Inputs are filled by the engine; a policy sets the outputs. */
struct pos_sched_client {
    /* identity and configuration */
    uint32_t id;
    int priority;          /* lower = more important */
    uint32_t max_inflight; /* 0 = no limit */
    double min_share;      /* starvation guard share, 0..1 */
    double weight;
    double slo_ms;
    int device;
    /* state */
    uint64_t submitted; /* operators submitted (seq of the last one) */
    uint64_t launched;  /* of those, launched (granted, or launched freely) */
    uint64_t completed; /* of those, known complete */
    uint64_t granted;   /* the current grant: seqs <= granted may launch */
    int waiting;        /* threads blocked on a grant */
    int64_t served_ns;  /* time with operators in flight in the current guard period */
    /* outputs */
    uint32_t mode; /* enum pos_grant_mode */
    uint64_t new_granted;
    int held; /* held back by the policy at this decision */
};

struct pos_sched_view {
    int64_t now;          /* ns */
    int64_t period_start; /* start of the current guard period */
    int64_t guard_period_ns;
    uint32_t credits; /* grant window beyond what a client has submitted */
    struct pos_sched_client *clients;
    size_t nclients;
};

static inline uint64_t pos_sched_inflight(const struct pos_sched_client *c)
{
    return c->launched > c->completed ? c->launched - c->completed : 0;
}

static inline uint64_t pos_sched_queued(const struct pos_sched_client *c)
{
    return c->submitted > c->launched ? c->submitted - c->launched : 0;
}

struct pos_policy_ops {
    const char *name;
    const char *summary;
    /* Decides mode, new_granted and held for every client of V. */
    void (*decide)(struct pos_sched_view *v);
};

/* The policy named NAME, or NULL. */
const struct pos_policy_ops *pos_policy_find(const char *name);

/* Every policy, NULL-terminated. */
extern const struct pos_policy_ops *const pos_policies[];

#endif
