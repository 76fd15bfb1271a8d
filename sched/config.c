/* posd's configuration loader: parses posd.conf and the policy.d drop-ins with libinih over the
 * defaults into a new config that replaces the caller's only when all of it is valid, and
 * matches a client's identity against the rules. */
#include "sched/config.h"
#include "kube/podres.h"
#include "sched/core.h"
#include "sched/ini_lines.h"
#include "sched/policy/policy.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <grp.h>
#include <ini.h>
#include <math.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pos/proto.h"

#define MAX_SECTION_KEYS  24
#define CLASS_NAME_CHARS  "abcdefghijklmnopqrstuvwxyz0123456789_-"
#define RULE_NAME_CHARS   CLASS_NAME_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZ."

static const struct posd_class builtin_classes[] = {
    {.name = "realtime", .priority = 0, .mem_limit = SCHED_MEM_NO_LIMIT},
    {.name = "latency", .priority = 10, .mem_limit = SCHED_MEM_NO_LIMIT},
    {.name = "batch", .priority = 20, .max_inflight = 0, .mem_limit = SCHED_MEM_NO_LIMIT},
};
#define NBUILTIN (int)(sizeof builtin_classes / sizeof builtin_classes[0])

void posd_config_defaults(struct posd_config *c)
{
    memset(c, 0, sizeof *c);
    snprintf(c->socket, sizeof c->socket, "%s", POS_DEFAULT_SOCKET);
    snprintf(c->policy, sizeof c->policy, "%s", SCHED_DEFAULT_POLICY);
    snprintf(c->default_class, sizeof c->default_class, "latency");
    c->tick_us = SCHED_DEFAULT_TICK_US;
    c->credits = SCHED_DEFAULT_CREDITS;
    c->log_level = POSD_LOG_INFO;
    snprintf(c->state_dir, sizeof c->state_dir, "%s", POSD_DEFAULT_STATE_DIR);
    c->profile_min = SCHED_DEFAULT_PROFILE_MIN;
    c->profile_user_max = 65536;
    c->guard_period_ms = SCHED_DEFAULT_GUARD_PERIOD_MS;
    c->stall_ms = SCHED_DEFAULT_STALL_MS;
    c->window_us = SCHED_DEFAULT_WINDOW_US;
    c->idle_grace_us = SCHED_DEFAULT_IDLE_GRACE_US;
    c->cpu = SCHED_DEFAULT_CPU;
    c->cpu_nice = SCHED_DEFAULT_CPU_NICE;
    c->cpu_hold_ms = SCHED_DEFAULT_CPU_HOLD_MS;
    c->min_share = SCHED_DEFAULT_MIN_SHARE;
    snprintf(c->k8s_proc_root, sizeof c->k8s_proc_root, "/proc");
    snprintf(c->k8s_log_dir, sizeof c->k8s_log_dir, "/var/log/pods");
    snprintf(c->k8s_containers_dir, sizeof c->k8s_containers_dir, "/var/log/containers");
    snprintf(c->k8s_pod_resources, sizeof c->k8s_pod_resources,
             "/var/lib/kubelet/pod-resources/kubelet.sock");
    snprintf(c->k8s_checkpoint, sizeof c->k8s_checkpoint,
             "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint");
    snprintf(c->k8s_resource, sizeof c->k8s_resource, "%s", KUBE_DEFAULT_RESOURCE);
    c->k8s_refresh_s = 5;
    for (int i = 0; i < NBUILTIN; i++) {
        c->classes[i] = builtin_classes[i];
        c->classes[i].min_share = c->min_share;
    }
    c->nclasses = NBUILTIN;
}

void posd_config_free(struct posd_config *c)
{
    free(c->rules);
    c->rules = NULL;
    c->nrules = 0;
}

const struct posd_class *posd_config_class(const struct posd_config *c, const char *name)
{
    for (int i = 0; i < c->nclasses; i++)
        if (strcmp(c->classes[i].name, name) == 0)
            return &c->classes[i];
    return NULL;
}

/* ---- the loader's state ------------------------------------------------------------------- */

struct section_spec;

/* The section whose keys inih is handing over: opened by the reader when it passes the
 * section's header line, closed (checked) at the next header or at the end of the file. */
struct open_section {
    const struct section_spec *spec; /* NULL before the file's first header */
    char title[POSD_NAME_MAX + 8];   /* "rule detector", as messages show it */
    int line;                        /* of the header */
    void *base;                      /* the object its keys set */
    int class_index;
    int new_class;
    int match_all;
    int seen[MAX_SECTION_KEYS]; /* line where each key was set in this section, 0 = not yet */
    int seen_param[POS_POLICY_ARGS_MAX]; /* [policy]: the same for cfg->policy_args.v[i] */
};

struct loader {
    struct posd_config *cfg; /* being built; the caller's config is not touched */
    size_t rules_cap;
    int min_share_set[POSD_MAX_CLASSES]; /* the class set its own min_share */
    char default_class_file[POSD_PATH_MAX];
    int default_class_line;
    /* the file being read */
    const char *path;
    int in_main; /* the file being read is the main file */
    FILE *fp;
    char *buf;
    size_t bufcap;
    int line;
    struct open_section sect;
    /* the first error stops everything */
    int rc;
    char reason[192]; /* why a value parser refused a value */
    char msg[768];    /* "FILE:LINE: what is wrong" */
};

/* Records the first error as "WHERE: what is wrong" and stops the load. */
static int vfail(struct loader *ld, int rc, const char *where, const char *fmt, va_list ap)
{
    char raw[sizeof ld->msg];
    int n = snprintf(raw, sizeof raw, "%s: ", where);
    if (n >= 0 && (size_t)n < sizeof raw)
        vsnprintf(raw + n, sizeof raw - (size_t)n, fmt, ap);
    ini_escape(ld->msg, sizeof ld->msg, raw); /* a broken or hostile file's bytes */
    ld->rc = rc;
    return rc;
}

/* An error at a line of a file: "FILE:LINE: what is wrong". */
static int fail_at(struct loader *ld, const char *path, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(struct loader *ld, const char *path, int line, const char *fmt, ...)
{
    char where[POSD_PATH_MAX + 16];
    snprintf(where, sizeof where, "%s:%d", path, line);
    va_list ap;
    va_start(ap, fmt);
    vfail(ld, -EINVAL, where, fmt, ap);
    va_end(ap);
    return ld->rc;
}

/* An error about a whole file or directory (it cannot be opened or read): "PATH: ...". */
static int fail_file(struct loader *ld, const char *path, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_file(struct loader *ld, const char *path, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(ld, rc, path, fmt, ap);
    va_end(ap);
    return rc;
}

static int refuse(struct loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(struct loader *ld, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->reason, sizeof ld->reason, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* ---- values ------------------------------------------------------------------------------- */

struct key_spec;
typedef int (*value_parser)(struct loader *ld, const struct key_spec *k, const char *value,
                            void *field);

struct key_spec {
    const char *name;
    value_parser parse;
    size_t off;     /* the field, in the section's object */
    size_t size;    /* the field's size (strings: with the NUL) */
    size_t has_off; /* a rule's has_ flag for the field; 0 = none (offset 0 is the rule's name) */
    double lo, hi;  /* numbers: the accepted range */
    int lo_open;    /* lo itself is refused */
    const char *const *words; /* words: those accepted */
};

_Static_assert(offsetof(struct posd_rule, name) == 0, "has_off 0 must mean 'no flag'");

static int valid_name(const char *s, size_t max, const char *chars)
{
    size_t len = strlen(s);
    return len >= 1 && len <= max && strspn(s, chars) == len;
}

static int valid_class_name(const char *s)
{
    return valid_name(s, POSD_CLASS_NAME_MAX - 1, CLASS_NAME_CHARS);
}

/* A decimal integer and nothing else ("+5", " 5", "5x" and "0x5" are refused). */
static int read_integer(const char *s, long long *out)
{
    const char *digits = s + (*s == '-');
    if (*digits < '0' || *digits > '9')
        return -EINVAL;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return -EINVAL;
    *out = v;
    return 0;
}

static int read_ranged_integer(struct loader *ld, const struct key_spec *k, const char *value,
                               long long *out)
{
    if (read_integer(value, out) < 0 || *out < (long long)k->lo || *out > (long long)k->hi)
        return refuse(ld, "expected an integer in %.15g..%.15g", k->lo, k->hi);
    return 0;
}

static int parse_int(struct loader *ld, const struct key_spec *k, const char *value, void *field)
{
    long long v = 0;
    if (read_ranged_integer(ld, k, value, &v) < 0)
        return -EINVAL;
    *(int *)field = (int)v;
    return 0;
}

static int parse_u32(struct loader *ld, const struct key_spec *k, const char *value, void *field)
{
    long long v = 0;
    if (read_ranged_integer(ld, k, value, &v) < 0)
        return -EINVAL;
    *(uint32_t *)field = (uint32_t)v;
    return 0;
}

/* A finite decimal number ("1", "0.5", "2e3"; not "nan", "inf" or hex). */
static int parse_number(struct loader *ld, const struct key_spec *k, const char *value, void *field)
{
    char *end;
    double v = 0;
    int ok = *value && strspn(value, "0123456789.eE+-") == strlen(value);
    if (ok) {
        errno = 0;
        v = strtod(value, &end);
        ok = !errno && !*end && isfinite(v) && v <= k->hi && (k->lo_open ? v > k->lo : v >= k->lo);
    }
    if (!ok)
        return refuse(ld, "expected a number %s %.15g and <= %.15g", k->lo_open ? ">" : ">=", k->lo,
                      k->hi);
    *(double *)field = v;
    return 0;
}

/* "a, b or c" */
static void join_words(const char *const *words, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; words[i] && n < len; i++) {
        const char *sep = i == 0 ? "" : words[i + 1] ? ", " : " or ";
        n += (size_t)snprintf(buf + n, len - n, "%s%s", sep, words[i]);
    }
}

static int find_word(struct loader *ld, const struct key_spec *k, const char *value)
{
    for (int i = 0; k->words[i]; i++)
        if (strcmp(k->words[i], value) == 0)
            return i;
    char list[128];
    join_words(k->words, list, sizeof list);
    return refuse(ld, "expected %s", list);
}

/* [daemon] policy: the field gets a name the registry knows (sched/policy/registry.c). */
static int parse_policy(struct loader *ld, const struct key_spec *k, const char *value,
                        void *field)
{
    if (!pos_policy_find(value) || strlen(value) >= k->size) {
        const char *names[32 + 1];
        int n = 0;
        while (n < 32 && pos_policies[n]) {
            names[n] = pos_policies[n]->name;
            n++;
        }
        names[n] = NULL;
        char list[128];
        join_words(names, list, sizeof list);
        refuse(ld, "expected %s", list);
        return -EINVAL;
    }
    snprintf(field, k->size, "%s", value);
    return 0;
}

/* The field is an int that gets the word's index. */
static int parse_word_index(struct loader *ld, const struct key_spec *k, const char *value,
                            void *field)
{
    int i = find_word(ld, k, value);
    if (i < 0)
        return -EINVAL;
    *(int *)field = i;
    return 0;
}

static int parse_path(struct loader *ld, const struct key_spec *k, const char *value, void *field)
{
    if (value[0] != '/' || strlen(value) >= k->size)
        return refuse(ld, "expected an absolute path of at most %zu characters", k->size - 1);
    snprintf(field, k->size, "%s", value);
    return 0;
}

static int parse_app_pattern(struct loader *ld, const struct key_spec *k, const char *value,
                             void *field)
{
    if (!*value || strlen(value) >= k->size)
        return refuse(ld, "expected a pattern of 1..%zu characters", k->size - 1);
    snprintf(field, k->size, "%s", value);
    return 0;
}

/* Kubernetes names (namespace, pod, container) are DNS labels and subdomains: lowercase
 * letters, digits, '-' and '.'; a pattern with anything else but glob characters never matches
 * one, which is a mistake worth a message. */
static int parse_k8s_pattern(struct loader *ld, const struct key_spec *k, const char *value,
                             void *field)
{
    static const char chars[] = "abcdefghijklmnopqrstuvwxyz0123456789-.*?[]!^";
    size_t len = strlen(value);
    if (!len || len >= k->size || strspn(value, chars) != len)
        return refuse(ld,
                      "expected a pattern of 1..%zu characters of a-z, 0-9, '-', '.' and the "
                      "glob characters * ? [ ] ! (Kubernetes names are lowercase)",
                      k->size - 1);
    snprintf(field, k->size, "%s", value);
    return 0;
}

/* A resource name as the kubelet writes it: "DOMAIN/NAME" (pos.dev/gpu). */
static int parse_resource(struct loader *ld, const struct key_spec *k, const char *value,
                          void *field)
{
    static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._/";
    size_t len = strlen(value);
    const char *slash = strchr(value, '/');
    if (!len || len >= k->size || strspn(value, chars) != len || !slash || slash == value ||
        !slash[1] || strchr(slash + 1, '/'))
        return refuse(ld, "expected a resource name DOMAIN/NAME such as pos.dev/gpu");
    snprintf(field, k->size, "%s", value);
    return 0;
}

/* The drop-ins' directory decides which files are read after the main one: only the main file
 * may say it. */
static int parse_policy_dir(struct loader *ld, const struct key_spec *k, const char *value,
                            void *field)
{
    if (!ld->in_main)
        return refuse(ld, "policy_dir may be set in the main file only (it says which drop-ins "
                          "are read)");
    return parse_path(ld, k, value, field);
}

/* Cgroup paths start with '/': a pattern that cannot match one is a mistake worth a message. */
static int parse_cgroup_pattern(struct loader *ld, const struct key_spec *k, const char *value,
                                void *field)
{
    if ((value[0] != '/' && value[0] != '*') || strlen(value) >= k->size)
        return refuse(ld,
                      "expected a pattern of the cgroup path, starting with '/' or '*', "
                      "of at most %zu characters",
                      k->size - 1);
    snprintf(field, k->size, "%s", value);
    return 0;
}

socklen_t posd_parse_listen(const char *spec, struct sockaddr_storage *sa)
{
    char host[64] = "127.0.0.1";
    const char *port = spec, *colon = strrchr(spec, ':');
    if (colon) {
        const char *h = spec;
        size_t n = (size_t)(colon - spec);
        if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
            h++;
            n -= 2;
        }
        if (n == 0 || n >= sizeof host)
            return 0;
        memcpy(host, h, n);
        host[n] = '\0';
        port = colon + 1;
    }
    long long p = 0;
    if (read_integer(port, &p) < 0 || p < 1 || p > 65535)
        return 0;
    memset(sa, 0, sizeof *sa);
    struct sockaddr_in *v4 = (struct sockaddr_in *)sa;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)sa;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)p);
        return sizeof *v4;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)p);
        return sizeof *v6;
    }
    return 0;
}

static int parse_listen(struct loader *ld, const struct key_spec *k, const char *value, void *field)
{
    struct sockaddr_storage sa;
    if (strlen(value) >= k->size || !posd_parse_listen(value, &sa))
        return refuse(ld, "expected PORT (on 127.0.0.1), ADDR:PORT or [ADDR6]:PORT");
    snprintf(field, k->size, "%s", value);
    return 0;
}

/* A number, or a name that NSS resolves now (a user added later needs a reload). */
static int parse_uid(struct loader *ld, const struct key_spec *k, const char *value, void *field)
{
    long long v = 0;
    if (read_integer(value, &v) == 0) {
        if (v < 0 || v >= (long long)(uid_t)-1)
            return refuse(ld, "expected a user name or a uid in 0..%u", (unsigned)(uid_t)-2);
        *(uid_t *)field = (uid_t)v;
        return 0;
    }
    struct passwd pw, *found = NULL;
    char buf[16384];
    int rc = getpwnam_r(value, &pw, buf, sizeof buf, &found);
    if (rc)
        return refuse(ld, "cannot look up the user: %s", strerror(rc));
    if (!found)
        return refuse(ld, "no such user");
    *(uid_t *)field = pw.pw_uid;
    return 0;
}

static int parse_gid(struct loader *ld, const struct key_spec *k, const char *value, void *field)
{
    long long v = 0;
    if (read_integer(value, &v) == 0) {
        if (v < 0 || v >= (long long)(gid_t)-1)
            return refuse(ld, "expected a group name or a gid in 0..%u", (unsigned)(gid_t)-2);
        *(gid_t *)field = (gid_t)v;
        return 0;
    }
    struct group gr, *found = NULL;
    char buf[16384];
    int rc = getgrnam_r(value, &gr, buf, sizeof buf, &found);
    if (rc)
        return refuse(ld, "cannot look up the group: %s", strerror(rc));
    if (!found)
        return refuse(ld, "no such group");
    *(gid_t *)field = gr.gr_gid;
    return 0;
}

/* mem_limit: a size, a percentage of the device, or none (mem_limit.h) */
static int parse_mem_limit(struct loader *ld, const struct key_spec *k, const char *value,
                           void *field)
{
    return sched_mem_limit_parse(value, field, ld->reason, sizeof ld->reason);
}

static const char *const bool_words[] = {"no", "yes", "false", "true", "off", "on", "0", "1", NULL};

/* Not a field of the rule: a rule without matchers matches every client, and match_all = yes
 * is how a file says that is meant (checked when the section closes). */
static int parse_match_all(struct loader *ld, const struct key_spec *k, const char *value,
                           void *field)
{
    for (int i = 0; bool_words[i]; i++) {
        if (strcmp(bool_words[i], value) == 0) {
            ld->sect.match_all = i % 2;
            return 0;
        }
    }
    return refuse(ld, "expected yes or no");
}

/* A class is looked up once every file is loaded: a later file may define it. */
static int parse_class_ref(struct loader *ld, const struct key_spec *k, const char *value,
                           void *field)
{
    if (!valid_class_name(value))
        return refuse(ld, "expected a class name (1..%d characters of a-z, 0-9, '_' and '-')",
                      POSD_CLASS_NAME_MAX - 1);
    snprintf(field, k->size, "%s", value);
    return 0;
}

static int parse_default_class(struct loader *ld, const struct key_spec *k, const char *value,
                               void *field)
{
    if (parse_class_ref(ld, k, value, field) < 0)
        return -EINVAL;
    snprintf(ld->default_class_file, sizeof ld->default_class_file, "%s", ld->path);
    ld->default_class_line = ld->line;
    return 0;
}

static int parse_rule_class(struct loader *ld, const struct key_spec *k, const char *value,
                            void *field)
{
    if (parse_class_ref(ld, k, value, field) < 0)
        return -EINVAL;
    ((struct posd_rule *)ld->sect.base)->class_line = ld->line;
    return 0;
}

/* ---- the keys of each section --------------------------------------------------------------- */

#define AT(T, m)    .off = offsetof(T, m), .size = sizeof(((T *)0)->m)
#define CFG(m)      AT(struct posd_config, m)
#define CLASS(m)    AT(struct posd_class, m)
#define RULE(m)     AT(struct posd_rule, m)
#define HAS(m)      .has_off = offsetof(struct posd_rule, m)
#define RANGE(a, b) .lo = (a), .hi = (b)

/* in enum posd_log_level order */
static const char *const log_words[] = {"error", "warn", "info", "debug", NULL};
/* in enum posd_telemetry_mode order */
static const char *const telemetry_words[] = {"auto", "on", "off", NULL};
static const char *const off_on_words[] = {"off", "on", NULL};
/* in enum pos_metrics_labels order */
/* [policy] cpu: enum pos_cpu_lever's order; [class] cpu: the same after "policy" */
static const char *const cpu_words[] = {"off", "idle", "nice", NULL};
static const char *const class_cpu_words[] = {"policy", "off", "idle", "nice", NULL};
static const char *const labels_words[] = {"full", "anonymous", NULL};
/* in enum posd_k8s_mode order */
static const char *const k8s_words[] = {"auto", "yes", "no", NULL};

static const struct key_spec daemon_keys[] = {
    {"socket", parse_path, CFG(socket)},
    {"policy", parse_policy, CFG(policy)},
    {"default_class", parse_default_class, CFG(default_class)},
    {"tick_us", parse_u32, CFG(tick_us), RANGE(10, 100000)},
    {"credits", parse_u32, CFG(credits), RANGE(1, 1000000)},
    {"log_level", parse_word_index, CFG(log_level), .words = log_words},
    {"state_dir", parse_path, CFG(state_dir)},
    {"telemetry", parse_word_index, CFG(telemetry), .words = telemetry_words},
    {"telemetry_driver", parse_path, CFG(telemetry_driver)},
    {"telemetry_sample_ms", parse_u32, CFG(telemetry_sample_ms), RANGE(0, 60000)},
    {"telemetry_ioctl", parse_word_index, CFG(telemetry_ioctl), .words = off_on_words},
    {"policy_dir", parse_policy_dir, CFG(policy_dir)},
};

static const struct key_spec kubernetes_keys[] = {
    {"enable", parse_word_index, CFG(k8s_enable), .words = k8s_words},
    {"proc_root", parse_path, CFG(k8s_proc_root)},
    {"log_dir", parse_path, CFG(k8s_log_dir)},
    {"containers_log_dir", parse_path, CFG(k8s_containers_dir)},
    {"pod_resources_socket", parse_path, CFG(k8s_pod_resources)},
    {"checkpoint", parse_path, CFG(k8s_checkpoint)},
    {"resource", parse_resource, CFG(k8s_resource)},
    {"refresh_s", parse_number, CFG(k8s_refresh_s), RANGE(0.1, 3600)},
};

static const struct key_spec policy_keys[] = {
    {"guard_period_ms", parse_number, CFG(guard_period_ms), RANGE(1, 60000)},
    {"min_share", parse_number, CFG(min_share), RANGE(0, 1)},
    {"stall_ms", parse_number, CFG(stall_ms), RANGE(1, 60000)},
    {"window_us", parse_number, CFG(window_us), RANGE(1, 1000000)},
    {"idle_grace_us", parse_number, CFG(idle_grace_us), RANGE(0, 1000000)},
    {"profile_min", parse_u32, CFG(profile_min), RANGE(0, 100000)},
    {"profile_user_max", parse_u32, CFG(profile_user_max), RANGE(0, 1048576)},
    {"profiles", parse_path, CFG(profiles)},
    {"cpu", parse_word_index, CFG(cpu), .words = cpu_words},
    {"cpu_nice", parse_u32, CFG(cpu_nice), RANGE(1, 19)},
    {"cpu_hold_ms", parse_number, CFG(cpu_hold_ms), RANGE(0, 60000)},
};

static const struct key_spec metrics_keys[] = {
    {"listen", parse_listen, CFG(metrics_listen)},
    {"labels", parse_word_index, CFG(metrics_labels), .words = labels_words},
};

static const struct key_spec class_keys[] = {
    {"priority", parse_int, CLASS(priority), RANGE(-1000, 1000)},
    {"max_inflight", parse_u32, CLASS(max_inflight), RANGE(0, 100000)},
    {"min_share", parse_number, CLASS(min_share), RANGE(0, 1)},
    {"sm_share", parse_u32, CLASS(sm_share), RANGE(1, 100)},
    {"cpu", parse_word_index, CLASS(cpu), .words = class_cpu_words},
    {"mem_limit", parse_mem_limit, CLASS(mem_limit)},
};

static const struct key_spec rule_keys[] = {
    {.name = "match_all", .parse = parse_match_all},
    {"match_app", parse_app_pattern, RULE(match_app)},
    {"match_uid", parse_uid, RULE(uid), HAS(has_uid)},
    {"match_gid", parse_gid, RULE(gid), HAS(has_gid)},
    {"match_cgroup", parse_cgroup_pattern, RULE(match_cgroup)},
    {"match_namespace", parse_k8s_pattern, RULE(match_namespace)},
    {"match_pod", parse_k8s_pattern, RULE(match_pod)},
    {"match_container", parse_k8s_pattern, RULE(match_container)},
    {"class", parse_rule_class, RULE(class_name), HAS(has_class)},
    {"priority", parse_int, RULE(priority), HAS(has_priority), RANGE(-1000, 1000)},
    {"slo_ms", parse_number, RULE(slo_ms), HAS(has_slo), RANGE(0, 86400000), .lo_open = 1},
    {"weight", parse_number, RULE(weight), HAS(has_weight), RANGE(0, 1000000), .lo_open = 1},
    {"max_inflight", parse_u32, RULE(max_inflight), HAS(has_max_inflight), RANGE(0, 100000)},
    {"sm_share", parse_u32, RULE(sm_share), HAS(has_sm_share), RANGE(1, 100)},
    {"mem_limit", parse_mem_limit, RULE(mem_limit), HAS(has_mem_limit)},
    {"device", parse_int, RULE(device), HAS(has_device), RANGE(0, 63)},
};

/* What a matching rule sets, merged in rule order by posd_config_match. */
#define SETTING(has, m) .has_off = offsetof(struct posd_rule, has), RULE(m)
static const struct rule_setting {
    size_t has_off, off, size;
} rule_settings[] = {
    {SETTING(has_class, class_name)},
    {SETTING(has_priority, priority)},
    {SETTING(has_slo, slo_ms)},
    {SETTING(has_weight, weight)},
    {SETTING(has_max_inflight, max_inflight)},
    {SETTING(has_sm_share, sm_share)},
    {SETTING(has_mem_limit, mem_limit)},
    {SETTING(has_device, device)},
};

/* ---- sections ----------------------------------------------------------------------------- */

struct section_spec {
    const char *kind;
    int named; /* [kind NAME], not [kind] */
    const struct key_spec *keys;
    size_t nkeys;
    int (*open)(struct loader *ld, const char *name); /* sets sect.base */
    int (*close)(struct loader *ld);                  /* checks the section as a whole */
};

static int key_seen(const struct open_section *s, const char *key)
{
    for (size_t i = 0; i < s->spec->nkeys; i++)
        if (strcmp(s->spec->keys[i].name, key) == 0)
            return s->seen[i];
    return 0;
}

static int open_global(struct loader *ld, const char *name)
{
    ld->sect.base = ld->cfg;
    return 0;
}

static int open_class(struct loader *ld, const char *name)
{
    struct posd_config *c = ld->cfg;
    if (!valid_class_name(name))
        return fail_at(ld, ld->path, ld->line,
                       "bad class name '%s' (1..%d characters of a-z, 0-9, '_' and '-')", name,
                       POSD_CLASS_NAME_MAX - 1);
    int i = 0;
    while (i < c->nclasses && strcmp(c->classes[i].name, name) != 0)
        i++;
    if (i == c->nclasses) {
        if (c->nclasses == POSD_MAX_CLASSES)
            return fail_at(ld, ld->path, ld->line,
                           "too many classes: at most %d, counting the built-in realtime, "
                           "latency and batch",
                           POSD_MAX_CLASSES);
        memset(&c->classes[i], 0, sizeof c->classes[i]);
        snprintf(c->classes[i].name, sizeof c->classes[i].name, "%s", name);
        c->classes[i].mem_limit = SCHED_MEM_NO_LIMIT;
        c->nclasses++;
        ld->sect.new_class = 1;
    }
    ld->sect.class_index = i;
    ld->sect.base = &c->classes[i];
    return 0;
}

static int close_class(struct loader *ld)
{
    const struct open_section *s = &ld->sect;
    if (s->new_class && !key_seen(s, "priority"))
        return fail_at(ld, ld->path, s->line, "new class '%s' must set priority",
                       ld->cfg->classes[s->class_index].name);
    if (key_seen(s, "min_share"))
        ld->min_share_set[s->class_index] = 1;
    return 0;
}

static int open_rule(struct loader *ld, const char *name)
{
    struct posd_config *c = ld->cfg;
    if (!valid_name(name, POSD_NAME_MAX - 1, RULE_NAME_CHARS))
        return fail_at(ld, ld->path, ld->line,
                       "bad rule name '%s' (1..%d characters of A-Z, a-z, 0-9, '_', '-' and '.')",
                       name, POSD_NAME_MAX - 1);
    for (size_t i = 0; i < c->nrules; i++)
        if (strcmp(c->rules[i].name, name) == 0)
            return fail_at(ld, ld->path, ld->line, "rule '%s' is already defined at %s:%d", name,
                           c->rules[i].file, c->rules[i].line);
    if (c->nrules == ld->rules_cap) {
        size_t cap = ld->rules_cap ? 2 * ld->rules_cap : 8;
        struct posd_rule *r = realloc(c->rules, cap * sizeof *r);
        if (!r)
            return fail_file(ld, ld->path, -ENOMEM, "out of memory");
        c->rules = r;
        ld->rules_cap = cap;
    }
    struct posd_rule *r = &c->rules[c->nrules++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    snprintf(r->file, sizeof r->file, "%s", ld->path);
    r->line = ld->line;
    ld->sect.base = r;
    return 0;
}

static int close_rule(struct loader *ld)
{
    const struct posd_rule *r = ld->sect.base;
    int has_matcher = r->match_app[0] || r->has_uid || r->has_gid || r->match_cgroup[0] ||
                      r->match_namespace[0] || r->match_pod[0] || r->match_container[0];
    if (ld->sect.match_all && has_matcher)
        return fail_at(ld, ld->path, r->line,
                       "rule '%s' sets match_all = yes and a match_* key: keep one or the other",
                       r->name);
    if (!ld->sect.match_all && !has_matcher)
        return fail_at(ld, ld->path, r->line,
                       "rule '%s' has no matcher: set match_app, match_uid, match_gid, "
                       "match_cgroup, match_namespace, match_pod or match_container, or "
                       "match_all = yes",
                       r->name);
    return 0;
}

#define KEYS(t) t, sizeof t / sizeof t[0]
static const struct section_spec sections[] = {
    {"daemon", 0, KEYS(daemon_keys), open_global, NULL},
    {"policy", 0, KEYS(policy_keys), open_global, NULL},
    {"metrics", 0, KEYS(metrics_keys), open_global, NULL},
    {"kubernetes", 0, KEYS(kubernetes_keys), open_global, NULL},
    {"class", 1, KEYS(class_keys), open_class, close_class},
    {"rule", 1, KEYS(rule_keys), open_rule, close_rule},
};

static int close_section(struct loader *ld)
{
    const struct section_spec *spec = ld->sect.spec;
    return spec && spec->close ? spec->close(ld) : 0;
}

/* TEXT is what stands between the brackets of a header: "kind" or "kind NAME". */
static int open_section(struct loader *ld, char *text)
{
    if (close_section(ld) < 0)
        return ld->rc;
    struct open_section *s = &ld->sect;
    memset(s, 0, sizeof *s);
    text = ini_trim(text);
    char *name = text + strcspn(text, " \t");
    size_t kind_len = (size_t)(name - text);
    name = ini_trim(name);
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        const struct section_spec *spec = &sections[i];
        if (strlen(spec->kind) != kind_len || strncmp(spec->kind, text, kind_len) != 0)
            continue;
        if (spec->named && !*name)
            return fail_at(ld, ld->path, ld->line, "[%s] needs a name: [%s NAME]", spec->kind,
                           spec->kind);
        if (!spec->named && *name)
            return fail_at(ld, ld->path, ld->line, "[%s] takes no name", spec->kind);
        if (spec->open(ld, name) < 0)
            return ld->rc;
        s->spec = spec;
        s->line = ld->line;
        snprintf(s->title, sizeof s->title, "%s%s%s", spec->kind, *name ? " " : "", name);
        return 0;
    }
    return fail_at(ld, ld->path, ld->line,
                   "unknown section [%s] (use [daemon], [policy], [metrics], [kubernetes], "
                   "[class NAME] or [rule NAME])",
                   text);
}

/* Checks one trimmed line as inih will read it, and opens the section a header starts. */
static int check_line(struct loader *ld, char *s)
{
    char text[POSD_PATH_MAX];
    const char *why = NULL;
    switch (ini_classify(s, text, sizeof text, &why)) {
    case INI_LINE_ERROR:
        return fail_at(ld, ld->path, ld->line, "%s", why);
    case INI_LINE_SECTION:
        return open_section(ld, text);
    default:
        return 0;
    }
}

/* inih's reader: hands over one physical line at a time, so ld->line is the line of every
 * handler call. Leading blanks are dropped, so an indented line never continues the previous
 * value (posd's files have no multi-line values). Returns NULL to stop at the first error. */
static char *next_line(char *str, int num, void *stream)
{
    struct loader *ld = stream;
    if (ld->rc || num < 2)
        return NULL;
    const char *why;
    char *s = ini_next_line(ld->fp, &ld->buf, &ld->bufcap, ld->line + 1, (size_t)num - 2, &why);
    if (!s && !why) {
        if (ferror(ld->fp))
            fail_file(ld, ld->path, errno ? -errno : -EIO, "cannot read: %s",
                      strerror(errno ? errno : EIO));
        return NULL;
    }
    ld->line++;
    if (!s) {
        if (strcmp(why, "line too long") == 0)
            fail_at(ld, ld->path, ld->line, "line longer than %d characters", num - 2);
        else
            fail_at(ld, ld->path, ld->line, "%s", why);
        return NULL;
    }
    if (check_line(ld, s) < 0)
        return NULL;
    size_t len = strlen(s);
    memcpy(str, s, len);
    memcpy(str + len, "\n", 2);
    return str;
}

/* [policy] KEY that a policy declares (pos_policy_param_find): a number in its bounds, or a
 * schedule's absolute path (like the socket's), into cfg->policy_args. Returns 1 when KEY is
 * one (0 after an error), -ENOENT when it is none. */
static int policy_param_key(struct loader *ld, const char *key, const char *value)
{
    struct open_section *s = &ld->sect;
    const struct pos_policy_param *p = pos_policy_param_find(key);
    if (!p || strcmp(s->spec->kind, "policy") != 0)
        return -ENOENT;
    struct pos_policy_arg *a = pos_policy_arg_set(&ld->cfg->policy_args, p);
    if (!a) {
        fail_at(ld, ld->path, ld->line, "too many policy parameters (at most %d)",
                POS_POLICY_ARGS_MAX);
        return 0;
    }
    size_t i = (size_t)(a - ld->cfg->policy_args.v);
    if (s->seen_param[i]) {
        fail_at(ld, ld->path, ld->line, "duplicate key '%s' in [%s] (first set on line %d)", key,
                s->title, s->seen_param[i]);
        return 0;
    }
    struct key_spec k = {.name = p->name, .lo = p->lo, .hi = p->hi};
    ld->reason[0] = '\0';
    int rc;
    if (p->type == POS_PARAM_NUMBER) {
        rc = parse_number(ld, &k, value, &a->number);
    } else {
        k.size = POSD_PATH_MAX;
        rc = parse_path(ld, &k, value, a->file);
    }
    if (rc < 0) {
        fail_at(ld, ld->path, ld->line, "bad value '%s' for '%s' in [%s]: %s", value, key, s->title,
                ld->reason);
        return 0;
    }
    s->seen_param[i] = ld->line;
    return 1;
}

static int on_key(void *user, const char *section, const char *key, const char *value)
{
    struct loader *ld = user;
    struct open_section *s = &ld->sect;
    if (ld->rc)
        return 0;
    if (!s->spec) {
        fail_at(ld, ld->path, ld->line,
                "key '%s' is outside any section: put it under [daemon], [policy], "
                "[metrics], [kubernetes], [class NAME] or [rule NAME]",
                key);
        return 0;
    }
    size_t i = 0;
    while (i < s->spec->nkeys && strcmp(s->spec->keys[i].name, key) != 0)
        i++;
    if (i == s->spec->nkeys) {
        int rc = policy_param_key(ld, key, value);
        if (rc != -ENOENT)
            return rc;
        fail_at(ld, ld->path, ld->line, "unknown key '%s' in [%s]", key, s->title);
        return 0;
    }
    if (s->seen[i]) {
        fail_at(ld, ld->path, ld->line, "duplicate key '%s' in [%s] (first set on line %d)", key,
                s->title, s->seen[i]);
        return 0;
    }
    const struct key_spec *k = &s->spec->keys[i];
    ld->reason[0] = '\0';
    if (k->parse(ld, k, value, (char *)s->base + k->off) < 0) {
        fail_at(ld, ld->path, ld->line, "bad value '%s' for '%s' in [%s]: %s", value, key, s->title,
                ld->reason);
        return 0;
    }
    if (k->has_off)
        *(int *)((char *)s->base + k->has_off) = 1;
    s->seen[i] = ld->line;
    return 1;
}

/* ---- files -------------------------------------------------------------------------------- */

static int load_file(struct loader *ld, const char *path, int optional)
{
    if (strlen(path) >= POSD_PATH_MAX)
        return fail_file(ld, path, -ENAMETOOLONG, "path longer than %d characters",
                         POSD_PATH_MAX - 1);
    /* O_NONBLOCK: a FIFO given as the file must not hang the daemon */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT && optional)
            return 0;
        return fail_file(ld, path, -errno, "cannot open: %s", strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail_file(ld, path, -EINVAL, "not a regular file");
    }
    FILE *fp = fdopen(fd, "r");
    if (!fp) {
        close(fd);
        return fail_file(ld, path, -ENOMEM, "out of memory");
    }
    ld->path = path;
    ld->fp = fp;
    ld->line = 0;
    memset(&ld->sect, 0, sizeof ld->sect);
    int rc = ini_parse_stream(next_line, ld, on_key, ld);
    if (!ld->rc) {
        if (rc > 0) /* check_line lets nothing through that inih refuses; just in case */
            fail_at(ld, path, rc, "syntax error");
        else if (rc < 0)
            fail_file(ld, path, -ENOMEM, "out of memory");
        else
            close_section(ld);
    }
    fclose(fp);
    ld->fp = NULL;
    return ld->rc;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_dropin_name(const char *name)
{
    size_t len = strlen(name);
    return name[0] != '.' && len > 5 && strcmp(name + len - 5, ".conf") == 0;
}

/* The names of DIR's *.conf entries (not yet checked for being regular files), sorted. */
static int list_dropins(struct loader *ld, DIR *dir, const char *path, char ***out, size_t *count)
{
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        errno = 0;
        const struct dirent *e = readdir(dir);
        if (!e) {
            int err = errno;
            if (err)
                rc = fail_file(ld, path, -err, "cannot read the directory: %s", strerror(err));
            break;
        }
        if (!is_dropin_name(e->d_name))
            continue;
        if (n == cap) {
            char **more = realloc(names, (cap ? 2 * cap : 16) * sizeof *names);
            if (!more) {
                rc = fail_file(ld, path, -ENOMEM, "out of memory");
                break;
            }
            names = more;
            cap = cap ? 2 * cap : 16;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = fail_file(ld, path, -ENOMEM, "out of memory");
            break;
        }
        n++;
    }
    if (rc < 0) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return rc;
    }
    if (n)
        qsort(names, n, sizeof *names, compare_names);
    *out = names;
    *count = n;
    return 0;
}

static int load_dropins(struct loader *ld, const char *dir_path)
{
    DIR *dir = opendir(dir_path);
    if (!dir) {
        if (errno == ENOENT)
            return 0;
        return fail_file(ld, dir_path, -errno, "cannot read the directory: %s", strerror(errno));
    }
    char **names = NULL;
    size_t n = 0;
    int rc = list_dropins(ld, dir, dir_path, &names, &n);
    size_t dlen = strlen(dir_path);
    const char *sep = dlen && dir_path[dlen - 1] == '/' ? "" : "/";
    for (size_t i = 0; i < n && rc == 0; i++) {
        char path[POSD_PATH_MAX + 1];
        struct stat st;
        int len = snprintf(path, sizeof path, "%s%s%s", dir_path, sep, names[i]);
        if (len >= POSD_PATH_MAX)
            rc = fail_file(ld, path, -ENAMETOOLONG, "path longer than %d characters",
                           POSD_PATH_MAX - 1);
        else if (fstatat(dirfd(dir), names[i], &st, 0) < 0)
            rc = fail_file(ld, path, -errno, "cannot open: %s", strerror(errno));
        else if (S_ISREG(st.st_mode))
            rc = load_file(ld, path, 0);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(dir);
    return rc;
}

/* ---- after the last file ------------------------------------------------------------------- */

static void list_classes(const struct posd_config *c, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->nclasses && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", c->classes[i].name);
}

/* Class references (a class may be defined after the rule that names it), and the classes'
 * min_share where they set none ([policy] may come after them). */
static int finish(struct loader *ld)
{
    struct posd_config *c = ld->cfg;
    char names[POSD_MAX_CLASSES * POSD_CLASS_NAME_MAX + 2 * POSD_MAX_CLASSES];
    list_classes(c, names, sizeof names);
    if (!posd_config_class(c, c->default_class))
        return fail_at(ld, ld->default_class_file, ld->default_class_line,
                       "bad value '%s' for 'default_class' in [daemon]: no such class "
                       "(classes: %s)",
                       c->default_class, names);
    for (size_t i = 0; i < c->nrules; i++) {
        const struct posd_rule *r = &c->rules[i];
        if (r->has_class && !posd_config_class(c, r->class_name))
            return fail_at(ld, r->file, r->class_line,
                           "bad value '%s' for 'class' in [rule %s]: no such class "
                           "(classes: %s)",
                           r->class_name, r->name, names);
    }
    for (int i = 0; i < c->nclasses; i++)
        if (!ld->min_share_set[i])
            c->classes[i].min_share = c->min_share;
    return 0;
}

int posd_config_load(const char *main, int main_optional, const char *dropin_dir,
                     struct posd_config *out, char *err, size_t errlen)
{
    struct posd_config fresh;
    posd_config_defaults(&fresh);
    struct loader ld = {.cfg = &fresh};
    if (main) {
        ld.in_main = 1;
        load_file(&ld, main, main_optional);
        ld.in_main = 0;
    }
    if (!fresh.policy_dir[0] && dropin_dir)
        snprintf(fresh.policy_dir, sizeof fresh.policy_dir, "%s", dropin_dir);
    if (!ld.rc && fresh.policy_dir[0])
        load_dropins(&ld, fresh.policy_dir);
    if (!ld.rc)
        finish(&ld);
    free(ld.buf);
    if (ld.rc) {
        if (err && errlen)
            snprintf(err, errlen, "%s", ld.msg);
        posd_config_free(&fresh);
        return ld.rc;
    }
    posd_config_free(out);
    *out = fresh;
    if (err && errlen)
        err[0] = '\0';
    return 0;
}

/* ---- matching ------------------------------------------------------------------------------ */

static int rule_matches(const struct posd_rule *r, const struct posd_identity *id)
{
    if (r->match_app[0] && fnmatch(r->match_app, id->app, 0) != 0)
        return 0;
    if (r->has_uid && r->uid != id->uid)
        return 0;
    if (r->has_gid && r->gid != id->gid)
        return 0;
    if (r->match_cgroup[0] && fnmatch(r->match_cgroup, id->cgroup, 0) != 0)
        return 0;
    /* a client with no pod, or whose names are not known (yet), never matches these */
    if (r->match_namespace[0] &&
        (!id->k8s_namespace[0] || fnmatch(r->match_namespace, id->k8s_namespace, 0) != 0))
        return 0;
    if (r->match_pod[0] && (!id->pod[0] || fnmatch(r->match_pod, id->pod, 0) != 0))
        return 0;
    if (r->match_container[0] &&
        (!id->container[0] || fnmatch(r->match_container, id->container, 0) != 0))
        return 0;
    return 1;
}

void posd_config_match(const struct posd_config *c, const struct posd_identity *id,
                       struct posd_client_policy *out)
{
    /* every matching rule's settings, a later rule's over an earlier one's */
    struct posd_rule set;
    memset(&set, 0, sizeof set);
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < c->nrules; i++) {
        const struct posd_rule *r = &c->rules[i];
        if (!rule_matches(r, id))
            continue;
        for (size_t k = 0; k < sizeof rule_settings / sizeof rule_settings[0]; k++) {
            if (!*(const int *)((const char *)r + rule_settings[k].has_off))
                continue;
            *(int *)((char *)&set + rule_settings[k].has_off) = 1;
            memcpy((char *)&set + rule_settings[k].off, (const char *)r + rule_settings[k].off,
                   rule_settings[k].size);
        }
        snprintf(out->rule, sizeof out->rule, "%s", r->name);
    }
    /* what no matching rule set comes from the class */
    snprintf(out->class_name, sizeof out->class_name, "%s",
             set.has_class ? set.class_name : c->default_class);
    const struct posd_class *cls = posd_config_class(c, out->class_name);
    out->mem_limit = SCHED_MEM_NO_LIMIT;
    if (cls) {
        out->priority = cls->priority;
        out->max_inflight = cls->max_inflight;
        out->min_share = cls->min_share;
        out->sm_share = cls->sm_share;
        out->mem_limit = cls->mem_limit;
    }
    out->cpu = cls && cls->cpu ? cls->cpu - 1 : c->cpu;
    if (set.has_priority)
        out->priority = set.priority;
    if (set.has_max_inflight)
        out->max_inflight = set.max_inflight;
    out->slo_ms = set.has_slo ? set.slo_ms : 0;
    out->weight = set.has_weight ? set.weight : 1;
    if (set.has_sm_share)
        out->sm_share = set.sm_share;
    if (set.has_mem_limit)
        out->mem_limit = set.mem_limit;
    out->device = set.has_device ? set.device : 0;
}
