/* possim's scenario parser (see possim_scenario.h). libinih splits the lines; a reader in
 * front of it counts them, checks each as inih will read it and opens the section a header
 * starts (Debian's inih passes no line numbers to handlers), as sched/config.c does. */
#include "tools/possim_scenario.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pos/rules.h"
#include "sched/core.h"
#include "sched/ini_lines.h"
#include "sched/policy/policy.h"
#include "sim/model_file.h"

enum sect_kind { SECT_NONE, SECT_DEVICE, SECT_SCHED, SECT_POSD, SECT_HOST, SECT_CLIENT };

enum value_type { V_U32, V_U64, V_INT, V_DOUBLE, V_SPECIAL };

struct key_spec {
    const char *name;
    enum value_type type;
    size_t off; /* in the section's object */
    double lo, hi;
    int lo_open;
    /* --help: the value shown (NULL: the default, read at off from the defaults), and what
     * the key means ('\n' between lines) */
    const char *shown, *help;
};

#define SC(f) offsetof(struct possim_scenario, f)
#define CL(f) offsetof(struct possim_client_spec, f)

static const struct key_spec device_keys[] = {
    {"preset", V_SPECIAL, 0, 0, 0, 0, "xavier-nx",
     "xavier-nx, orin-agx, rtx3080 or h200 (default xavier-nx)"},
    {"file", V_SPECIAL, 0, 0, 0, 0, "PATH", "or a device file (docs/sim.md), instead of preset"},
    {"mode", V_SPECIAL, 0, 0, 0, 0, "timeslice",
     "timeslice or mps (default: the preset's or file's)"},
    {"timeslice_us", V_DOUBLE, SC(dev.timeslice_us), 0, 1e9, 1, "2000",
     "time slice in timeslice mode (default: the device's)"},
    {"notify_us", V_DOUBLE, SC(notify_us), 0, 1e9, 0, NULL,
     "an op's completion reaches the host this late (a marker\nlands, a synchronisation returns)"},
};
static const struct key_spec sched_keys[] = {
    {"policy", V_SPECIAL, 0, 0, 0, 0, SCHED_DEFAULT_POLICY,
     "fifo, priority, pos, staged (any policy posd knows) or none"},
    {"tick_us", V_DOUBLE, SC(tick_us), 0, 1e9, 1, NULL,
     "decision period while a client waits or is windowed"},
    {"stall_ms", V_DOUBLE, SC(stall_ms), 0, 1e9, 1, NULL,
     "in flight this long with no completion: stalled"},
    {"guard_period_ms", V_DOUBLE, SC(guard_period_ms), 0, 1e9, 1, NULL, "starvation-guard period"},
    {"min_share", V_DOUBLE, SC(min_share), 0, 1, 0, NULL, "starvation-guard share of every client"},
    {"credits", V_U32, SC(credits), 1, 1 << 20, 0, NULL,
     "grant window beyond what a client submitted"},
    {"window_us", V_DOUBLE, SC(window_us), 0, 1e9, 1, NULL,
     "device time a windowed client without a cap may have in\nflight, by posd's estimate of "
     "its operators"},
    {"idle_grace_us", V_DOUBLE, SC(idle_grace_us), 0, 1e9, 0, NULL,
     "a client idle this briefly still holds lower classes"},
    {"profile_min", V_U32, SC(profile_min), 0, 1 << 20, 0, NULL,
     "kernel shapes with fewer solo samples get a marker behind\nevery launch (profiling); 0: "
     "learn from the markers there are"},
    {"profiles", V_SPECIAL, 0, 0, 0, 0, "FILE",
     "kernel profiles to start from (docs/policy.md format)"},
    {"cpu", V_SPECIAL, 0, 0, 0, 0, NULL,
     "the CPU lever (posd's [policy] cpu): off, idle or nice; with\na [host] model, an "
     "outranked client's threads run at\nSCHED_IDLE's or cpu_nice's weight while the core says "
     "so"},
    {"cpu_nice", V_INT, SC(cpu_nice), 1, 19, 0, NULL, "the nice value of cpu = nice (1..19)"},
    {"cpu_hold_ms", V_DOUBLE, SC(cpu_hold_ms), 0, 60000, 0, NULL,
     "lowered this long after the last outranking request ended"},
};
static const struct key_spec posd_keys[] = {
    {"poll_us", V_DOUBLE, SC(poll_us), 0, 1e9, 0, NULL,
     "the shim collector's poll interval while records are pending"},
    {"prompt_poll_us", V_DOUBLE, SC(prompt_poll_us), 0, 1e9, 0, NULL,
     "the same while posd asks for kicks (kick_on_done)"},
    {"wake_us", V_DOUBLE, SC(wake_us), 0, 1e9, 0, NULL, "posd's wake-up after a kick"},
    {"grant_wake_us", V_DOUBLE, SC(grant_wake_us), 0, 1e9, 0, NULL,
     "a client thread's wake-up after a grant it sleeps on"},
    {"spin_us", V_DOUBLE, SC(spin_us), 0, 1e9, 0, NULL,
     "a thread spins this long for a grant before it sleeps\nand kicks posd"},
    {"help_spin_us", V_DOUBLE, SC(help_spin_us), 0, 1e9, 0, NULL,
     "... or this long for a window step, doing the collector's\npass itself, while its recent "
     "helped waits averaged"},
    {"help_when_us", V_DOUBLE, SC(help_when_us), 0, 1e9, 0, NULL,
     "less than this (and every 16th window-step wait)"},
};
static const struct key_spec host_keys[] = {
    {"cores", V_SPECIAL, 0, 0, 0, 0, "2",
     "cores (default: this machine's online CPUs); unlimited (or\n0): no host model, host work "
     "never waits for a core"},
    {"driver_us", V_DOUBLE, SC(host.driver_us), 0, 1e9, 0, NULL,
     "CPU of the simulated driver's work per launch (docs/possim.md)"},
    {"sync_us", V_DOUBLE, SC(host.sync_us), 0, 1e9, 0, NULL,
     "CPU of one synchronisation return or event query"},
    {"collector_us", V_DOUBLE, SC(host.collector_us), 0, 1e9, 0, NULL,
     "CPU of one pass of the shim's collector"},
    {"decide_us", V_DOUBLE, SC(host.decide_us), 0, 1e9, 0, NULL,
     "CPU of one posd wake-up (drain, decide, publish)"},
    {"device_us", V_DOUBLE, SC(host.device_us), 0, 1e9, 0, NULL,
     "CPU of one look of the simulated driver's device process\n(at an op with an effect or a "
     "client's last op); 0: none"},
    {"agent_us", V_DOUBLE, SC(host.agent_us), 0, 1e9, 0, NULL,
     "CPU of one wake-up of a client's driver agent for what a\nlook wrote it (with device_us); "
     "0: none"},
    {"device_rt", V_INT, SC(host.device_rt), 0, 1, 0, NULL,
     "1: the device process runs real-time, before every fair\ntask, as the simulated driver "
     "makes it where it may (root\nor CAP_SYS_NICE); 0: at nice -10, as it runs without"},
    {"slice_us", V_DOUBLE, SC(host.slice_us), 0, 1e9, 0, "1500",
     "time slices of this length, a task per core, as Linux's\nEEVDF gives them (default: its "
     "base slice for the cores,\n750 x (1 + log2 of the cores, at most 8), 1500 on 2);\n0: the "
     "cores are shared fluidly"},
};
static const struct key_spec client_keys[] = {
    {"model", V_SPECIAL, 0, 0, 0, 0, "resnet50",
     "sim/models name, $POS_MODELS_DIR/NAME.model, or a path"},
    {"batch", V_U32, CL(batch), 1, 4096, 0, NULL, ""},
    {"requests", V_U64, CL(requests), 1, 100000000, 0, NULL, ""},
    {"arrival", V_SPECIAL, 0, 0, 0, 0, "closed",
     "closed | poisson:RATE | gamma:SHAPE:RATE (requests/s)"},
    {"class_priority", V_INT, CL(priority), -1000000, 1000000, 0, NULL, "lower = more important"},
    {"max_inflight", V_U32, CL(max_inflight), 0, 1 << 20, 0, NULL,
     "the class's in-flight cap (0: none)"},
    {"slo_ms", V_DOUBLE, CL(slo_ms), 0, 1e9, 0, NULL, "latency objective; 0: none"},
    {"sm_share", V_U32, CL(sm_share), 1, 100, 0, "25",
     "its context may use 25% of the SMs (CUDA_MPS_ACTIVE_THREAD_\nPERCENTAGE; mps mode only; "
     "default: all)"},
    {"host_us", V_DOUBLE, CL(host_us), 0, 1e9, 0, NULL,
     "host time before each launch (posapp --host-us)"},
    {"launch_us", V_DOUBLE, CL(launch_us), 0, 1e9, 0, NULL, "host cost of one launch call"},
    {"seed", V_U64, CL(seed), 0, 1.8446744073709552e19, 0, NULL,
     "seeds the arrival schedule (posapp --seed)"},
    {"sample", V_U32, CL(sample), 0, 1 << 20, 0, NULL,
     "the shim's POS_SAMPLE: a marker every N launches (0: only\nwindowed launches carry one)"},
    {"start_ms", V_DOUBLE, CL(start_ms), 0, 1e9, 0, NULL, "the process starts this late"},
    {"sleep_slack_us", V_DOUBLE, CL(sleep_slack_us), 0, 1e9, 0, NULL,
     "how late the thread's timed sleeps end (open loop)"},
    {"stop_with", V_SPECIAL, 0, 0, 0, 0, "NAME",
     "killed when client NAME finishes (default: never)"},
    {"sched", V_SPECIAL, 0, 0, 0, 0, "normal",
     "its host threads' Linux policy: normal or idle (chrt -i 0)"},
    {"nice", V_INT, CL(nice), -20, 19, 0, NULL, "their nice value, -20..19 (normal only)"},
};

static const char *const cpu_words[] = {"off", "idle", "nice"}; /* enum pos_cpu_lever */

#define MAX_KEYS 24
#define NKEYS(t) (sizeof t / sizeof t[0])

struct parser {
    struct possim_scenario *sc;
    const char *path;
    FILE *fp;
    char *buf;
    size_t bufcap;
    int line;
    enum sect_kind kind;
    char title[POSSIM_NAME_MAX + 16];
    struct possim_client_spec *client;   /* of an open [client NAME] */
    int seen[MAX_KEYS];                  /* line each key of the open section was set on */
    int seen_param[POS_POLICY_ARGS_MAX]; /* [sched]: the same for sc->policy_args.v[i] */
    int seen_sect[SECT_CLIENT];          /* line of each global section's header */
    int device_line[2];                  /* lines of preset and file */
    int mode_set;
    int rc;
    char reason[192];
    char *err;
    size_t errlen;
};

static int fail(struct parser *p, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct parser *p, int line, const char *fmt, ...)
{
    if (p->rc)
        return p->rc;
    int n = snprintf(p->err, p->errlen, "%s:%d: ", p->path, line);
    if (n >= 0 && (size_t)n < p->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    p->rc = -EINVAL;
    return p->rc;
}

static int refuse(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(struct parser *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->reason, sizeof p->reason, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* ---- values ------------------------------------------------------------------------------- */

/* A decimal integer and nothing else ("+5", " 5", "5x" and "0x5" are refused). */
static int read_integer(const char *s, double lo, double hi, long long *out,
                        unsigned long long *uout)
{
    const char *digits = s + (*s == '-');
    if (*digits < '0' || *digits > '9')
        return -EINVAL;
    char *end;
    errno = 0;
    if (*s == '-') {
        long long v = strtoll(s, &end, 10);
        if (errno || *end || (double)v < lo)
            return -EINVAL;
        *out = v;
        *uout = 0;
        return 0;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || (double)v > hi || (double)v < lo)
        return -EINVAL;
    *uout = v;
    *out = v > (unsigned long long)INT64_MAX ? INT64_MAX : (long long)v;
    return 0;
}

static int parse_value(struct parser *p, const struct key_spec *k, const char *value, void *field)
{
    long long v = 0;
    unsigned long long u = 0;
    switch (k->type) {
    case V_U32:
    case V_U64:
    case V_INT:
        if (read_integer(value, k->lo, k->hi, &v, &u) < 0)
            return refuse(p, "expected an integer in %.0f..%.0f", k->lo, k->hi);
        if (k->type == V_U32)
            *(uint32_t *)field = (uint32_t)u;
        else if (k->type == V_U64)
            *(uint64_t *)field = u;
        else
            *(int *)field = (int)v;
        return 0;
    case V_DOUBLE: {
        char *end;
        double d = 0;
        int ok = *value && strspn(value, "0123456789.eE+-") == strlen(value);
        if (ok) {
            errno = 0;
            d = strtod(value, &end);
            ok = !errno && !*end && isfinite(d) && d <= k->hi &&
                 (k->lo_open ? d > k->lo : d >= k->lo);
        }
        if (!ok)
            return refuse(p, "expected a number %s %.15g and <= %.15g",
                          k->lo_open ? ">" : ">=", k->lo, k->hi);
        *(double *)field = d;
        return 0;
    }
    default:
        return -EINVAL;
    }
}

static int known_policy(const char *name)
{
    return strcmp(name, "none") == 0 || pos_policy_find(name) != NULL;
}

static void policy_list(char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; pos_policies[i] && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s, ", pos_policies[i]->name);
    if (n < len)
        snprintf(buf + n, len - n, "or none");
}

#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"

/* Keys whose values are words, files or specs. */
static int parse_special(struct parser *p, const char *key, const char *value)
{
    struct possim_scenario *sc = p->sc;
    char msg[512];
    if (p->kind == SECT_DEVICE && strcmp(key, "preset") == 0) {
        if (p->device_line[1])
            return refuse(p, "give preset or file, not both (file is set on line %d)",
                          p->device_line[1]);
        double ts = sc->dev.timeslice_us;
        int mode = sc->dev.mode;
        if (sim_preset_get(value, &sc->dev) < 0)
            return refuse(p, "expected xavier-nx, orin-agx, rtx3080 or h200");
        if (p->seen[3])
            sc->dev.timeslice_us = ts;
        if (p->mode_set)
            sc->dev.mode = mode;
        snprintf(sc->device_name, sizeof sc->device_name, "%s", value);
        p->device_line[0] = p->line;
        return 0;
    }
    if (p->kind == SECT_DEVICE && strcmp(key, "file") == 0) {
        if (p->device_line[0])
            return refuse(p, "give preset or file, not both (preset is set on line %d)",
                          p->device_line[0]);
        double ts = sc->dev.timeslice_us;
        int mode = sc->dev.mode;
        if (sim_params_load_file(value, &sc->dev, msg, sizeof msg) < 0)
            return refuse(p, "%s", msg);
        if (p->seen[3])
            sc->dev.timeslice_us = ts;
        if (p->mode_set)
            sc->dev.mode = mode;
        snprintf(sc->device_name, sizeof sc->device_name, "%s", value);
        p->device_line[1] = p->line;
        return 0;
    }
    if (p->kind == SECT_DEVICE && strcmp(key, "mode") == 0) {
        if (strcmp(value, "timeslice") == 0)
            sc->dev.mode = SIM_MODE_TIMESLICE;
        else if (strcmp(value, "mps") == 0)
            sc->dev.mode = SIM_MODE_MPS;
        else
            return refuse(p, "expected timeslice or mps");
        p->mode_set = 1;
        return 0;
    }
    if (p->kind == SECT_SCHED && strcmp(key, "policy") == 0) {
        if (!known_policy(value)) {
            char list[128];
            policy_list(list, sizeof list);
            return refuse(p, "expected %s", list);
        }
        snprintf(sc->policy, sizeof sc->policy, "%s", value);
        sc->no_core = strcmp(value, "none") == 0;
        return 0;
    }
    if (p->kind == SECT_SCHED && strcmp(key, "cpu") == 0) {
        for (int i = 0; i < 3; i++)
            if (strcmp(value, cpu_words[i]) == 0) {
                sc->cpu = i;
                return 0;
            }
        return refuse(p, "expected off, idle or nice");
    }
    if (p->kind == SECT_SCHED && strcmp(key, "profiles") == 0) {
        if (!*value || strlen(value) >= sizeof sc->profiles_in)
            return refuse(p, "expected the path of a kernel profile file");
        snprintf(sc->profiles_in, sizeof sc->profiles_in, "%s", value);
        return 0;
    }
    struct possim_client_spec *c = p->client;
    if (p->kind == SECT_CLIENT && strcmp(key, "model") == 0) {
        if (!*value || strlen(value) >= sizeof c->model)
            return refuse(p, "expected a model name or path");
        int rc = sim_model_find(value, c->model_path, sizeof c->model_path);
        if (rc < 0)
            return refuse(p,
                          "no such model (no %s.model in $POS_MODELS_DIR or sim/models; or "
                          "give a path)",
                          value);
        snprintf(c->model, sizeof c->model, "%s", value);
        return 0;
    }
    if (p->kind == SECT_CLIENT && strcmp(key, "stop_with") == 0) {
        size_t len = strlen(value);
        if (!len || len >= POSSIM_NAME_MAX || strspn(value, NAME_CHARS) != len)
            return refuse(p, "expected a client name");
        if (strcmp(value, c->name) == 0)
            return refuse(p, "a client cannot stop with itself");
        snprintf(c->stop_with, sizeof c->stop_with, "%s", value);
        c->stop_with_line = p->line;
        return 0;
    }
    if (p->kind == SECT_CLIENT && strcmp(key, "sched") == 0) {
        if (strcmp(value, "normal") == 0)
            c->sched_idle = 0;
        else if (strcmp(value, "idle") == 0)
            c->sched_idle = 1;
        else
            return refuse(p, "expected normal or idle");
        return 0;
    }
    if (p->kind == SECT_HOST && strcmp(key, "cores") == 0) {
        long long v;
        unsigned long long u;
        if (strcmp(value, "unlimited") == 0)
            sc->host.cores = 0;
        else if (read_integer(value, 0, POSSIM_HOST_CORES_MAX, &v, &u) == 0)
            sc->host.cores = (int)v;
        else
            return refuse(p, "expected an integer in 1..%d, or unlimited (or 0: no host model)",
                          POSSIM_HOST_CORES_MAX);
        return 0;
    }
    if (p->kind == SECT_CLIENT && strcmp(key, "arrival") == 0) {
        if (strlen(value) >= sizeof c->arrival_spec)
            return refuse(p, "expected closed, poisson:RATE or gamma:SHAPE:RATE");
        if (posapp_arrival_parse(value, &c->arrival, msg, sizeof msg) < 0)
            return refuse(p, "%s", msg);
        snprintf(c->arrival_spec, sizeof c->arrival_spec, "%s", value);
        return 0;
    }
    return -EINVAL;
}

/* ---- sections ----------------------------------------------------------------------------- */

static const struct key_spec *section_keys(enum sect_kind kind, size_t *n)
{
    switch (kind) {
    case SECT_DEVICE:
        *n = NKEYS(device_keys);
        return device_keys;
    case SECT_SCHED:
        *n = NKEYS(sched_keys);
        return sched_keys;
    case SECT_POSD:
        *n = NKEYS(posd_keys);
        return posd_keys;
    case SECT_HOST:
        *n = NKEYS(host_keys);
        return host_keys;
    case SECT_CLIENT:
        *n = NKEYS(client_keys);
        return client_keys;
    default:
        *n = 0;
        return NULL;
    }
}

/* Checks the section being left. */
static int close_section(struct parser *p)
{
    if (p->kind == SECT_CLIENT && !p->client->model[0])
        return fail(p, p->client->line, "[%s] has no model: set model = NAME", p->title);
    return 0;
}

static void client_defaults(struct possim_client_spec *c)
{
    memset(c, 0, sizeof *c);
    c->batch = 1;
    c->requests = 100;
    c->arrival = (struct posapp_arrival){.kind = POSAPP_ARRIVAL_CLOSED, .shape = 1.0};
    snprintf(c->arrival_spec, sizeof c->arrival_spec, "closed");
    c->priority = 10;
    c->launch_us = 2;
    c->seed = 1;
    c->sleep_slack_us = 50;
    c->sample = POS_SAMPLE_DEFAULT;
    c->stop_with_index = -1;
}

/* TEXT is what stands between the brackets of a header: "kind" or "kind NAME". */
static int open_section(struct parser *p, char *text)
{
    if (close_section(p) < 0)
        return p->rc;
    memset(p->seen, 0, sizeof p->seen);
    memset(p->seen_param, 0, sizeof p->seen_param);
    p->client = NULL;
    text = ini_trim(text);
    char *name = text + strcspn(text, " \t");
    size_t kind_len = (size_t)(name - text);
    name = ini_trim(name);
    static const char *const kinds[] = {NULL, "device", "sched", "posd", "host", "client"};
    enum sect_kind kind = SECT_NONE;
    for (int i = SECT_DEVICE; i <= SECT_CLIENT; i++)
        if (strlen(kinds[i]) == kind_len && strncmp(kinds[i], text, kind_len) == 0)
            kind = (enum sect_kind)i;
    if (kind == SECT_NONE)
        return fail(p, p->line,
                    "unknown section [%s] (use [device], [sched], [posd], [host] or [client NAME])",
                    text);
    if (kind == SECT_CLIENT) {
        if (!*name)
            return fail(p, p->line, "[client] needs a name: [client NAME]");
        size_t len = strlen(name);
        if (len >= POSSIM_NAME_MAX || strspn(name, NAME_CHARS) != len)
            return fail(p, p->line, "bad client name '%s' (1..%d letters, digits, '_', '.' or '-')",
                        name, POSSIM_NAME_MAX - 1);
        for (size_t i = 0; i < p->sc->nclients; i++)
            if (strcmp(p->sc->clients[i].name, name) == 0)
                return fail(p, p->line, "duplicate [client %s] (first on line %d)", name,
                            p->sc->clients[i].line);
        if (p->sc->nclients == POSSIM_MAX_CLIENTS)
            return fail(p, p->line, "too many clients (at most %d)", POSSIM_MAX_CLIENTS);
        p->client = &p->sc->clients[p->sc->nclients++];
        client_defaults(p->client);
        snprintf(p->client->name, sizeof p->client->name, "%s", name);
        p->client->line = p->line;
    } else {
        if (*name)
            return fail(p, p->line, "[%s] takes no name", kinds[kind]);
        if (p->seen_sect[kind])
            return fail(p, p->line, "duplicate section [%s] (first on line %d)", kinds[kind],
                        p->seen_sect[kind]);
        p->seen_sect[kind] = p->line;
    }
    p->kind = kind;
    snprintf(p->title, sizeof p->title, "%s%s%s", kinds[kind], *name ? " " : "", name);
    return 0;
}

/* Checks one trimmed line as inih will read it, and opens the section a header starts. */
static int check_line(struct parser *p, char *s)
{
    char text[256];
    const char *why = NULL;
    switch (ini_classify(s, text, sizeof text, &why)) {
    case INI_LINE_ERROR:
        return fail(p, p->line, "%s", why);
    case INI_LINE_SECTION:
        return open_section(p, text);
    default:
        return 0;
    }
}

/* inih's reader: one physical line at a time, so p->line is the line of every handler call.
 * Leading blanks are dropped, so an indented line never continues the previous value. */
static char *next_line(char *str, int num, void *stream)
{
    struct parser *p = stream;
    if (p->rc || num < 2)
        return NULL;
    const char *why;
    char *s = ini_next_line(p->fp, &p->buf, &p->bufcap, p->line + 1, (size_t)num - 2, &why);
    if (!s && !why)
        return NULL;
    p->line++;
    if (!s) {
        if (strcmp(why, "line too long") == 0)
            fail(p, p->line, "line longer than %d characters", num - 2);
        else
            fail(p, p->line, "%s", why);
        return NULL;
    }
    if (check_line(p, s) < 0)
        return NULL;
    size_t len = strlen(s);
    memcpy(str, s, len);
    memcpy(str + len, "\n", 2);
    return str;
}

/* [sched] KEY that a policy declares (pos_policy_param_find): a number in its bounds, or a
 * schedule file, into sc->policy_args. Returns 1 when KEY is one (0 after an error), -ENOENT
 * when it is none. */
static int policy_param_key(struct parser *p, const char *key, const char *value)
{
    const struct pos_policy_param *pp = pos_policy_param_find(key);
    if (!pp || p->kind != SECT_SCHED)
        return -ENOENT;
    struct pos_policy_arg *a = pos_policy_arg_set(&p->sc->policy_args, pp);
    if (!a) {
        fail(p, p->line, "too many policy parameters (at most %d)", POS_POLICY_ARGS_MAX);
        return 0;
    }
    size_t i = (size_t)(a - p->sc->policy_args.v);
    if (p->seen_param[i]) {
        fail(p, p->line, "duplicate key '%s' in [%s] (first set on line %d)", key, p->title,
             p->seen_param[i]);
        return 0;
    }
    p->reason[0] = '\0';
    int rc = 0;
    if (pp->type == POS_PARAM_NUMBER) {
        const struct key_spec k = {pp->name, V_DOUBLE, 0, pp->lo, pp->hi, 0, NULL, NULL};
        rc = parse_value(p, &k, value, &a->number);
    } else if (!*value || strlen(value) >= sizeof a->file) {
        rc = refuse(p, pp->type == POS_PARAM_SCHEDULE ? "expected a schedule file (docs/schedule.md)"
                                                      : "expected a weights file (docs/learned.md)");
    } else {
        snprintf(a->file, sizeof a->file, "%s", value);
    }
    if (rc < 0) {
        fail(p, p->line, "bad value '%s' for '%s' in [%s]: %s", value, key, p->title, p->reason);
        return 0;
    }
    p->seen_param[i] = p->line;
    return 1;
}

static int on_key(void *user, const char *section, const char *key, const char *value)
{
    struct parser *p = user;
    (void)section;
    if (p->rc)
        return 0;
    if (p->kind == SECT_NONE) {
        fail(p, p->line,
             "key '%s' is outside any section: put it under [device], [sched], [posd], [host] "
             "or [client NAME]",
             key);
        return 0;
    }
    size_t n, i = 0;
    const struct key_spec *keys = section_keys(p->kind, &n);
    while (i < n && strcmp(keys[i].name, key) != 0)
        i++;
    if (i == n) {
        int rc = policy_param_key(p, key, value);
        if (rc != -ENOENT)
            return rc;
        fail(p, p->line, "unknown key '%s' in [%s]", key, p->title);
        return 0;
    }
    if (p->seen[i]) {
        fail(p, p->line, "duplicate key '%s' in [%s] (first set on line %d)", key, p->title,
             p->seen[i]);
        return 0;
    }
    const struct key_spec *k = &keys[i];
    p->reason[0] = '\0';
    void *base = p->kind == SECT_CLIENT ? (void *)p->client : (void *)p->sc;
    int rc = k->type == V_SPECIAL ? parse_special(p, key, value)
                                  : parse_value(p, k, value, (char *)base + k->off);
    if (rc < 0) {
        fail(p, p->line, "bad value '%s' for '%s' in [%s]: %s", value, key, p->title, p->reason);
        return 0;
    }
    p->seen[i] = p->line;
    return 1;
}

/* [host]'s defaults: this machine's cores, and the costs bench/hostcal.sh measured on the
 * development machine (docs/results/hostcal.md). */
static void host_defaults(struct possim_host_spec *h)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    h->cores = n < 1 ? 1 : n > POSSIM_HOST_CORES_MAX ? POSSIM_HOST_CORES_MAX : (int)n;
    h->driver_us = POSSIM_HOST_DRIVER_US;
    h->sync_us = POSSIM_HOST_SYNC_US;
    h->collector_us = POSSIM_HOST_COLLECTOR_US;
    h->decide_us = POSSIM_HOST_DECIDE_US;
    h->device_us = POSSIM_HOST_DEVICE_US;
    h->agent_us = POSSIM_HOST_AGENT_US;
    h->device_rt = 1;
    h->slice_us = -1; /* Linux's for the cores (possim_sim.c) */
}

static void scenario_defaults(struct possim_scenario *sc, const char *path)
{
    memset(sc, 0, sizeof *sc);
    snprintf(sc->path, sizeof sc->path, "%s", path);
    sim_preset_get("xavier-nx", &sc->dev);
    snprintf(sc->device_name, sizeof sc->device_name, "xavier-nx");
    snprintf(sc->policy, sizeof sc->policy, "%s", SCHED_DEFAULT_POLICY);
    sc->tick_us = SCHED_DEFAULT_TICK_US;
    sc->stall_ms = SCHED_DEFAULT_STALL_MS;
    sc->guard_period_ms = SCHED_DEFAULT_GUARD_PERIOD_MS;
    sc->min_share = SCHED_DEFAULT_MIN_SHARE;
    sc->credits = SCHED_DEFAULT_CREDITS;
    sc->window_us = SCHED_DEFAULT_WINDOW_US;
    sc->idle_grace_us = SCHED_DEFAULT_IDLE_GRACE_US;
    sc->profile_min = SCHED_DEFAULT_PROFILE_MIN;
    sc->cpu = SCHED_DEFAULT_CPU;
    sc->cpu_nice = SCHED_DEFAULT_CPU_NICE;
    sc->cpu_hold_ms = SCHED_DEFAULT_CPU_HOLD_MS;
    /* the shim's own */
    sc->poll_us = POS_POLL_US_DEFAULT;
    sc->prompt_poll_us = POS_PROMPT_POLL_US_DEFAULT;
    sc->spin_us = POS_SPIN_NS / 1e3;
    sc->help_spin_us = POS_HELP_SPIN_NS / 1e3;
    sc->help_when_us = POS_HELP_WHEN_US_DEFAULT;
    sc->wake_us = 20;
    sc->grant_wake_us = 10;
    host_defaults(&sc->host);
}

static int parse_fp(const char *path, FILE *fp, struct possim_scenario *out, char *err,
                    size_t errlen)
{
    struct possim_scenario *sc = calloc(1, sizeof *sc);
    if (!sc) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    scenario_defaults(sc, path);
    struct parser p = {.sc = sc, .path = path, .fp = fp, .err = err, .errlen = errlen};
    int rc = ini_parse_stream(next_line, &p, on_key, &p);
    if (!p.rc) {
        if (ferror(fp)) {
            snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno ? errno : EIO));
            p.rc = -EIO;
        } else if (rc > 0) {
            fail(&p, rc, "syntax error");
        } else if (rc < 0) {
            snprintf(err, errlen, "%s: out of memory", path);
            p.rc = -ENOMEM;
        } else if (close_section(&p) == 0 && sc->nclients == 0) {
            fail(&p, p.line > 0 ? p.line : 1, "no clients: add a [client NAME] section");
        }
    }
    for (size_t i = 0; !p.rc && i < sc->nclients; i++) {
        struct possim_client_spec *c = &sc->clients[i];
        if (!c->stop_with[0])
            continue;
        for (size_t k = 0; k < sc->nclients; k++)
            if (strcmp(sc->clients[k].name, c->stop_with) == 0)
                c->stop_with_index = (int)k;
        if (c->stop_with_index < 0)
            fail(&p, c->stop_with_line,
                 "bad value '%s' for 'stop_with' in [client %s]: no such client", c->stop_with,
                 c->name);
    }
    if (!p.rc) {
        char msg[256];
        if (sim_params_validate(&sc->dev, msg, sizeof msg) < 0)
            fail(&p, p.seen_sect[SECT_DEVICE] ? p.seen_sect[SECT_DEVICE] : 1, "%s", msg);
    }
    free(p.buf);
    if (!p.rc)
        *out = *sc;
    free(sc);
    return p.rc;
}

int possim_scenario_load(const char *path, struct possim_scenario *out, char *err, size_t errlen)
{
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -errno;
    }
    int rc = parse_fp(path, fp, out, err, errlen);
    fclose(fp);
    return rc;
}

int possim_scenario_parse(const char *path, const char *text, struct possim_scenario *out,
                          char *err, size_t errlen)
{
    FILE *fp = fmemopen((void *)text, strlen(text), "r");
    if (!fp) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    int rc = parse_fp(path, fp, out, err, errlen);
    fclose(fp);
    return rc;
}

/* ---- --help ------------------------------------------------------------------------------- */

/* "  KEY = VALUE" padded to the comment column, then HELP's lines. */
static void usage_line(FILE *f, const char *key, const char *value, const char *help)
{
    char left[96];
    if (value)
        snprintf(left, sizeof left, "  %s = %s", key, value);
    else
        snprintf(left, sizeof left, "  %s", key);
    if (!help || !*help) {
        fprintf(f, "%s\n", left);
        return;
    }
    fprintf(f, "%-25s ; ", left);
    for (const char *h = help; *h; h++) {
        fputc(*h, f);
        if (*h == '\n')
            fprintf(f, "%-25s ; ", "");
    }
    fputc('\n', f);
}

static void usage_keys(FILE *f, const struct key_spec *keys, size_t n, const void *defaults)
{
    for (size_t i = 0; i < n; i++) {
        const struct key_spec *k = &keys[i];
        char v[64];
        const char *shown = k->shown;
        const void *at = (const char *)defaults + k->off;
        if (!shown && k->type != V_SPECIAL) {
            if (k->type == V_U32)
                snprintf(v, sizeof v, "%u", *(const uint32_t *)at);
            else if (k->type == V_U64)
                snprintf(v, sizeof v, "%llu", (unsigned long long)*(const uint64_t *)at);
            else if (k->type == V_INT)
                snprintf(v, sizeof v, "%d", *(const int *)at);
            else
                snprintf(v, sizeof v, "%g", *(const double *)at);
            shown = v;
        }
        usage_line(f, k->name, shown, k->help);
    }
}

/* Every policy's own parameters (policy.h), each once, with the policies that take it. */
static void usage_policy_params(FILE *f)
{
    for (int i = 0; pos_policies[i]; i++)
        for (const struct pos_policy_param *pp = pos_policies[i]->params; pp && pp->name; pp++) {
            if (pos_policy_param_find(pp->name) != pp)
                continue; /* declared by an earlier policy too: shown there */
            char who[128] = "", v[64], help[256];
            size_t n = 0;
            for (int j = 0; pos_policies[j]; j++)
                if (pos_policy_takes(pos_policies[j], pp->name) && n < sizeof who)
                    n += (size_t)snprintf(who + n, sizeof who - n, "%s%s", n ? ", " : "",
                                          pos_policies[j]->name);
            if (pp->type == POS_PARAM_NUMBER)
                snprintf(v, sizeof v, "%g", pp->def);
            else
                snprintf(v, sizeof v, "FILE");
            snprintf(help, sizeof help, "%s: %s", who, pp->help ? pp->help : "");
            usage_line(f, pp->name, v, help);
        }
}

void possim_scenario_usage(FILE *f)
{
    struct possim_scenario *sc = calloc(1, sizeof *sc);
    struct possim_client_spec *c = calloc(1, sizeof *c);
    if (!sc || !c) {
        free(sc);
        free(c);
        fputs("possim: out of memory\n", f);
        return;
    }
    scenario_defaults(sc, "");
    client_defaults(c);
    fputs("Scenario file (INI; ';' or '#' starts a comment; the values shown are the defaults\n"
          "but for preset's, file's, mode's, timeslice_us's, cores', slice_us', model's and\n"
          "sm_share's):\n",
          f);
    usage_line(f, "[device]", NULL, NULL);
    usage_keys(f, device_keys, NKEYS(device_keys), sc);
    usage_line(f, "[sched]", NULL, NULL);
    for (size_t i = 0; i < NKEYS(sched_keys); i++)
        if (strcmp(sched_keys[i].name, "cpu") == 0)
            usage_line(f, "cpu", cpu_words[sc->cpu], sched_keys[i].help);
        else
            usage_keys(f, &sched_keys[i], 1, sc);
    usage_policy_params(f);
    usage_line(f, "[posd]", NULL, "what posd learns, and when");
    usage_keys(f, posd_keys, NKEYS(posd_keys), sc);
    usage_line(f, "[host]", NULL, "the host's CPU cores, shared by the clients' threads and posd");
    usage_keys(f, host_keys, NKEYS(host_keys), sc);
    usage_line(f, "[client NAME]", NULL, "one per client process, 1..64 of them");
    usage_keys(f, client_keys, NKEYS(client_keys), c);
    free(sc);
    free(c);
}

double possim_cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int possim_parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}
