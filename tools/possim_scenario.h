/* possim's scenario files (INI, parsed with libinih): the device, the scheduler's tunables,
 * the model of what posd learns and when, and the clients. Format: docs/possim.md and
 * `possim --help`. Errors are one line, "FILE:LINE: what is wrong". */
#ifndef POS_TOOLS_POSSIM_SCENARIO_H
#define POS_TOOLS_POSSIM_SCENARIO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sched/policy/policy.h"
#include "sim/device_presets.h"
#include "tools/posapp_arrival.h"

#define POSSIM_MAX_CLIENTS 64
#define POSSIM_NAME_MAX    48
#define POSSIM_PATH_MAX    1024

#define POSSIM_HOST_CORES_MAX 4096
/* [host]'s default costs, measured by bench/hostcal.sh (docs/results/hostcal.md) */
#define POSSIM_HOST_DRIVER_US    0.0  /* a launch's CPU in a model run is launch_us's 2 us */
#define POSSIM_HOST_SYNC_US      20.0 /* a synchronisation's return on the waiting thread */
#define POSSIM_HOST_COLLECTOR_US 22.0
#define POSSIM_HOST_DEVICE_US    38.0 /* one look of the simulated driver's device process */
#define POSSIM_HOST_AGENT_US     20.0 /* one wake-up of a process's driver agent */
#define POSSIM_HOST_DECIDE_US    22.0

/* The host's CPU: cores shared by the clients' threads and posd, and what their work costs
 * (docs/possim.md, "The host"). */
struct possim_host_spec {
    int cores;           /* 0: unlimited, no host model */
    double driver_us;    /* the simulated driver's CPU per launch */
    double sync_us;      /* a synchronisation's return, an event query */
    double collector_us; /* one pass of the shim's collector */
    double decide_us;    /* one posd wake-up: drain, decide, publish */
    double slice_us;     /* time slices of the cores (possim_host_set_slice); 0: fluid; < 0
                          * (the default): Linux's base slice for the cores */
    double device_us;    /* the simulated driver's device process: CPU per look; 0: none */
    double agent_us;     /* a client's driver agent: CPU per wake-up after a look; 0: none */
    int device_rt;       /* the device process real-time (else nice -10) */
};

struct possim_client_spec {
    char name[POSSIM_NAME_MAX];
    char model[POSSIM_PATH_MAX];      /* as written */
    char model_path[POSSIM_PATH_MAX]; /* resolved with sim_model_find */
    uint32_t batch;
    uint64_t requests;
    struct posapp_arrival arrival;
    char arrival_spec[64];
    int priority; /* class_priority: lower = more important */
    uint32_t max_inflight;
    double slo_ms;     /* 0: none */
    uint32_t sm_share; /* percent of the SMs its context may use (MPS), 0: all */
    double host_us;    /* host time before each launch */
    double launch_us;  /* host cost of one launch call */
    uint64_t seed;
    uint32_t sample;       /* the shim's POS_SAMPLE: a marker every N launches (0: none) */
    double start_ms;       /* the process starts (registers with posd) this late */
    double sleep_slack_us; /* how late the thread's timed sleeps end (timer slack) */
    char stop_with[POSSIM_NAME_MAX]; /* killed when this client finishes ("": never) */
    int stop_with_index;             /* resolved; -1: none */
    int sched_idle;                  /* its host threads run SCHED_IDLE (chrt -i 0) */
    int nice;                        /* ... or SCHED_OTHER at this nice value */
    int line;                        /* of its [client NAME] header */
    int stop_with_line;
};

struct possim_scenario {
    char path[POSSIM_PATH_MAX];
    /* [device] */
    struct sim_dev_params dev; /* preset or file, with mode and timeslice_us applied */
    char device_name[POSSIM_PATH_MAX];
    double notify_us; /* an op's completion reaches the host this late */
    /* [sched] */
    char policy[32]; /* a pos_policy_find name, or "none" */
    int no_core;     /* policy none: no scheduler at all */
    double tick_us, stall_ms, guard_period_ms, min_share, window_us, idle_grace_us;
    uint32_t credits;
    uint32_t profile_min; /* the core's profile_min */
    /* the keys the policies declare (corun_budget, schedule: pos_policy_ops.params), as
     * given (a schedule: its file, which possim_sim.c reads) */
    struct pos_policy_args policy_args;
    int cpu;                           /* the CPU lever, enum pos_cpu_lever */
    int cpu_nice;                      /* its nice value for POS_CPU_NICE */
    double cpu_hold_ms;                /* the core's cpu_hold */
    char profiles_in[POSSIM_PATH_MAX]; /* kernel profiles loaded at start ("" none) */
    /* set by the command line, not the file */
    char profiles_out[POSSIM_PATH_MAX]; /* the profiles learnt, saved at the end */
    int profile_check;                  /* report learnt profiles against the model's */
    /* [posd] */
    double poll_us, prompt_poll_us, wake_us, grant_wake_us, spin_us, help_spin_us;
    double help_when_us;
    /* [host] */
    struct possim_host_spec host;
    /* [client NAME] */
    size_t nclients;
    struct possim_client_spec clients[POSSIM_MAX_CLIENTS];
};

/* Loads the scenario at PATH into *OUT. Returns 0, or a negative errno with
 * "FILE:LINE: what" (or "FILE: what" when the file cannot be read) in ERR. */
int possim_scenario_load(const char *path, struct possim_scenario *out, char *err, size_t errlen);

/* The same from text held in memory, named PATH in messages. */
int possim_scenario_parse(const char *path, const char *text, struct possim_scenario *out,
                          char *err, size_t errlen);

/* The command lines' helpers (possim, possim search, possim train): this process's CPU time
 * in seconds, and a decimal integer >= 0 into *OUT (0, or -1 for anything else). */
double possim_cpu_seconds(void);
int possim_parse_u64(const char *s, uint64_t *out);

/* The scenario format, as `possim --help` prints it. */
void possim_scenario_usage(FILE *f);

#endif
