/* Unit tests of posd's configuration (sched/config.c): defaults, layering of posd.conf and
 * policy.d, classes, rule matching, every error's exact "FILE:LINE: message", and the example
 * files in etc/. Writes its files under a mkdtemp directory; run from the repository root. */
#include "sched/config.h"
#include "sched/policy/policy.h"
#include "sched/metrics_text.h"
#include "tests/cunit_main.h"

#include <CUnit/Basic.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pos/proto.h"

static char tmp_root[] = "/tmp/pos-test-config.XXXXXX";

/* One test's files: DIR/posd.conf and DIR/policy.d/. */
#define DIR_MAX 1024 /* tmp_root and a test's name */

struct files {
    char dir[DIR_MAX];
    char main[DIR_MAX + 16];
    char dropins[DIR_MAX + 16];
};

/* --- helpers ------------------------------------------------------------------------------ */

/* A new directory for one test's files. */
static struct files files_at(const char *name)
{
    struct files f;
    snprintf(f.dir, sizeof f.dir, "%s/%s", tmp_root, name);
    snprintf(f.main, sizeof f.main, "%s/posd.conf", f.dir);
    snprintf(f.dropins, sizeof f.dropins, "%s/policy.d", f.dir);
    CU_ASSERT_FATAL(mkdir(f.dir, 0755) == 0);
    return f;
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    CU_ASSERT_FATAL(fp != NULL);
    fputs(text, fp);
    CU_ASSERT_FATAL(fclose(fp) == 0);
}

static void put_main(const struct files *f, const char *text)
{
    write_file(f->main, text);
}

/* Writes policy.d/NAME (creating policy.d) and returns its path in PATH (if not NULL). */
static void put_dropin(const struct files *f, const char *name, const char *text, char *path)
{
    char p[DIR_MAX + 128];
    if (mkdir(f->dropins, 0755) < 0)
        CU_ASSERT_FATAL(errno == EEXIST);
    snprintf(p, sizeof p, "%s/%s", f->dropins, name);
    write_file(p, text);
    if (path)
        snprintf(path, PATH_MAX, "%s", p);
}

/* Loads F (posd.conf required) into C, which starts from the defaults. */
static int load(const struct files *f, struct posd_config *c, char *err, size_t errlen)
{
    posd_config_defaults(c);
    int rc = posd_config_load(f->main, 0, f->dropins, c, err, errlen);
    if (rc < 0)
        fprintf(stderr, "\n  %s\n", err);
    return rc;
}

/* The class NAME of C: a failed assertion, and a blank class, when there is none. */
static const struct posd_class *class_of(const struct posd_config *c, const char *name)
{
    static const struct posd_class none;
    const struct posd_class *k = posd_config_class(c, name);
    CU_ASSERT_PTR_NOT_NULL(k);
    if (!k)
        fprintf(stderr, "\n  no class '%s'\n", name);
    return k ? k : &none;
}

static struct posd_identity ident(const char *app, uid_t uid, gid_t gid, const char *cgroup)
{
    struct posd_identity id;
    memset(&id, 0, sizeof id);
    id.pid = 4242;
    id.uid = uid;
    id.gid = gid;
    snprintf(id.app, sizeof id.app, "%s", app);
    snprintf(id.exe, sizeof id.exe, "/usr/bin/%s", app);
    snprintf(id.cgroup, sizeof id.cgroup, "%s", cgroup);
    return id;
}

static struct posd_client_policy match(const struct posd_config *c, struct posd_identity id)
{
    struct posd_client_policy p;
    memset(&p, 0x5a, sizeof p); /* whatever match leaves unset shows */
    posd_config_match(c, &id, &p);
    return p;
}

/* Loads, expecting failure with exactly "PATH:LINE: MSG", and checks that the previous
 * configuration (a marker in tick_us) is left as it was. */
static void expect_error(const struct files *f, const char *path, int line, const char *msg)
{
    struct posd_config c;
    char err[1024], want[1024];
    posd_config_defaults(&c);
    c.tick_us = 777;
    int rc = posd_config_load(f->main, 0, f->dropins, &c, err, sizeof err);
    if (line > 0)
        snprintf(want, sizeof want, "%s:%d: %s", path, line, msg);
    else
        snprintf(want, sizeof want, "%s: %s", path, msg);
    CU_ASSERT(rc < 0);
    CU_ASSERT_STRING_EQUAL(err, want);
    if (strcmp(err, want) != 0)
        fprintf(stderr, "\n  got:  %s\n  want: %s\n", err, want);
    CU_ASSERT_EQUAL(c.tick_us, 777);
    CU_ASSERT_PTR_NULL(c.rules);
    posd_config_free(&c);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int suite_init(void)
{
    return mkdtemp(tmp_root) ? 0 : -1;
}

static int suite_clean(void)
{
    return nftw(tmp_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* --- defaults and layering ------------------------------------------------------------------ */

static void test_defaults(void)
{
    struct posd_config c;
    posd_config_defaults(&c);
    CU_ASSERT_STRING_EQUAL(c.socket, POS_DEFAULT_SOCKET);
    CU_ASSERT_STRING_EQUAL(c.policy, "pos");
    CU_ASSERT_STRING_EQUAL(c.default_class, "latency");
    CU_ASSERT_EQUAL(c.tick_us, 200);
    CU_ASSERT_EQUAL(c.credits, 1024);
    CU_ASSERT_EQUAL(c.log_level, POSD_LOG_INFO);
    CU_ASSERT_EQUAL(c.telemetry, POSD_TELEMETRY_AUTO);
    CU_ASSERT_STRING_EQUAL(c.telemetry_driver, "");
    CU_ASSERT_EQUAL(c.telemetry_sample_ms, 0);
    CU_ASSERT_EQUAL(c.telemetry_ioctl, 0);
    CU_ASSERT_STRING_EQUAL(c.metrics_listen, ""); /* the endpoint is off */
    CU_ASSERT_EQUAL(c.metrics_labels, POS_METRICS_LABELS_FULL);
    CU_ASSERT_DOUBLE_EQUAL(c.guard_period_ms, 200, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(c.min_share, 0.01, 1e-12);
    CU_ASSERT_EQUAL(c.nclasses, 3);
    static const struct {
        const char *name;
        int priority;
        uint32_t max_inflight;
    } want[] = {{"realtime", 0, 0}, {"latency", 10, 0}, {"batch", 20, 0}};
    for (int i = 0; i < 3; i++) {
        const struct posd_class *k = class_of(&c, want[i].name);
        CU_ASSERT_EQUAL(k->priority, want[i].priority);
        CU_ASSERT_EQUAL(k->max_inflight, want[i].max_inflight);
        CU_ASSERT_DOUBLE_EQUAL(k->min_share, 0.01, 1e-12);
    }
    CU_ASSERT_PTR_NULL(posd_config_class(&c, "gold"));
    CU_ASSERT_PTR_NULL(c.rules);
    CU_ASSERT_EQUAL(c.nrules, 0);
}

static void test_missing_files(void)
{
    struct files f = files_at("missing");
    struct posd_config c;
    char err[512] = "junk";
    posd_config_defaults(&c);
    c.tick_us = 5;
    /* an optional main file and the drop-in directory may be absent: the defaults */
    CU_ASSERT_EQUAL(posd_config_load(f.main, 1, f.dropins, &c, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(err, "");
    CU_ASSERT_EQUAL(c.tick_us, 200);
    CU_ASSERT_EQUAL(c.nclasses, 3);
    /* a required one may not */
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "%s: cannot open: No such file or directory", f.main);
    CU_ASSERT_EQUAL(posd_config_load(f.main, 0, f.dropins, &c, err, sizeof err), -ENOENT);
    CU_ASSERT_STRING_EQUAL(err, want);
    /* drop-ins alone, with no main file */
    put_dropin(&f, "10-a.conf", "[daemon]\ntick_us = 300\n", NULL);
    CU_ASSERT_EQUAL(posd_config_load(f.main, 1, f.dropins, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.tick_us, 300);
    posd_config_free(&c);
}

static void test_every_global_key(void)
{
    struct files f = files_at("global");
    put_main(&f, "[daemon]\n"
                 "socket = /tmp/posd-test.sock\n"
                 "policy = fifo\n"
                 "default_class = batch\n"
                 "tick_us = 10\n"
                 "credits = 1000000\n"
                 "log_level = debug\n"
                 "telemetry = on\n"
                 "telemetry_driver = /opt/nvidia/libcuda.so.1\n"
                 "telemetry_sample_ms = 500\n"
                 "telemetry_ioctl = on\n"
                 "[policy]\n"
                 "guard_period_ms = 60000\n"
                 "min_share = 0.25\n"
                 "cpu = nice\n"
                 "cpu_nice = 7\n"
                 "cpu_hold_ms = 250\n"
                 "[metrics]\n"
                 "listen = [::1]:9464\n"
                 "labels = anonymous\n"
                 "[class latency]\n"
                 "min_share = 0.5\n"
                 "[class batch]\n"
                 "cpu = idle\n");
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(c.socket, "/tmp/posd-test.sock");
    CU_ASSERT_STRING_EQUAL(c.policy, "fifo");
    CU_ASSERT_STRING_EQUAL(c.default_class, "batch");
    CU_ASSERT_EQUAL(c.tick_us, 10);
    CU_ASSERT_EQUAL(c.credits, 1000000);
    CU_ASSERT_EQUAL(c.log_level, POSD_LOG_DEBUG);
    CU_ASSERT_EQUAL(c.telemetry, POSD_TELEMETRY_ON);
    CU_ASSERT_STRING_EQUAL(c.telemetry_driver, "/opt/nvidia/libcuda.so.1");
    CU_ASSERT_EQUAL(c.telemetry_sample_ms, 500);
    CU_ASSERT_EQUAL(c.telemetry_ioctl, 1);
    CU_ASSERT_DOUBLE_EQUAL(c.guard_period_ms, 60000, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(c.min_share, 0.25, 1e-12);
    CU_ASSERT_STRING_EQUAL(c.metrics_listen, "[::1]:9464");
    CU_ASSERT_EQUAL(c.metrics_labels, POS_METRICS_LABELS_ANONYMOUS);
    /* [policy] min_share is the default of every class that sets none, wherever it stands */
    CU_ASSERT_DOUBLE_EQUAL(class_of(&c, "realtime")->min_share, 0.25, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(class_of(&c, "batch")->min_share, 0.25, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(class_of(&c, "latency")->min_share, 0.5, 1e-12);
    /* the CPU lever: [policy]'s for every class but one that names its own */
    CU_ASSERT_EQUAL(c.cpu, POS_CPU_NICE);
    CU_ASSERT_EQUAL(c.cpu_nice, 7);
    CU_ASSERT_DOUBLE_EQUAL(c.cpu_hold_ms, 250, 1e-9);
    struct posd_identity id = {.pid = 1, .uid = 1000, .gid = 1000};
    snprintf(id.app, sizeof id.app, "app");
    struct posd_client_policy pol;
    posd_config_match(&c, &id, &pol); /* the default class, batch */
    CU_ASSERT_EQUAL(pol.cpu, POS_CPU_IDLE);
    snprintf(c.default_class, sizeof c.default_class, "latency");
    posd_config_match(&c, &id, &pol);
    CU_ASSERT_EQUAL(pol.cpu, POS_CPU_NICE);
    posd_config_free(&c);
}

static void test_layering(void)
{
    struct files f = files_at("layers");
    put_main(&f, "[daemon]\ntick_us = 300\ncredits = 64\n"
                 "[rule m1]\nmatch_app = app*\npriority = 1\n");
    put_dropin(&f, "20-b.conf", "[daemon]\ntick_us = 400\n[rule b1]\nmatch_app = app*\n", NULL);
    put_dropin(&f, "10-a.conf", "[rule a1]\nmatch_app = app*\n\n[rule a2]\nmatch_uid = 7\n", NULL);
    put_dropin(&f, "05-z.conf", "[rule z1]\nmatch_app = app*\npriority = 3\n", NULL);
    /* ignored: other names, hidden files, directories, and what is not a regular file */
    put_dropin(&f, "README", "not ini at all\n", NULL);
    put_dropin(&f, "30-c.conf.bak", "[bogus]\n", NULL);
    put_dropin(&f, ".40-hidden.conf", "[bogus]\n", NULL);
    char sub[PATH_MAX + 16];
    snprintf(sub, sizeof sub, "%s/50-dir.conf", f.dropins);
    CU_ASSERT_FATAL(mkdir(sub, 0755) == 0);
    snprintf(sub, sizeof sub, "%s/60-fifo.conf", f.dropins);
    CU_ASSERT_FATAL(mkfifo(sub, 0644) == 0);

    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.tick_us, 400); /* the later file wins */
    CU_ASSERT_EQUAL(c.credits, 64);  /* what it does not set stays */
    static const char *const order[] = {"m1", "z1", "a1", "a2", "b1"};
    static const int lines[] = {4, 1, 1, 4, 3};
    static const char *const files[] = {"posd.conf", "policy.d/05-z.conf", "policy.d/10-a.conf",
                                        "policy.d/10-a.conf", "policy.d/20-b.conf"};
    CU_ASSERT_EQUAL_FATAL(c.nrules, 5);
    for (size_t i = 0; i < 5; i++) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", f.dir, files[i]);
        CU_ASSERT_STRING_EQUAL(c.rules[i].name, order[i]);
        CU_ASSERT_STRING_EQUAL(c.rules[i].file, path);
        CU_ASSERT_EQUAL(c.rules[i].line, lines[i]);
    }
    /* m1 (main) sets priority 1, z1 (a later drop-in) sets 3: the later rule wins */
    struct posd_client_policy p = match(&c, ident("app1", 1000, 1000, ""));
    CU_ASSERT_EQUAL(p.priority, 3);
    CU_ASSERT_STRING_EQUAL(p.rule, "b1");
    posd_config_free(&c);
}

/* A policy's own keys (pos's corun_budget, pos's and staged's schedule) go to the policy's
 * parameters, whatever [daemon] policy is (a reload may switch it); a later file's value
 * replaces an earlier one's, and a key not given is left to the policy's default. */
static void test_policy_parameters(void)
{
    struct files f = files_at("policy-params");
    put_main(&f, "[daemon]\npolicy = fifo\n[policy]\ncorun_budget = 1.5\n"
                 "schedule = /etc/posd/mix.sched\n");
    put_dropin(&f, "10-a.conf", "[policy]\ncorun_budget = 2.5\n", NULL);
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.policy_args.n, 2);
    const struct pos_policy_arg *cb = pos_policy_arg(&c.policy_args, "corun_budget");
    const struct pos_policy_arg *sc = pos_policy_arg(&c.policy_args, "schedule");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sc);
    CU_ASSERT_DOUBLE_EQUAL(cb->number, 2.5, 1e-12);
    CU_ASSERT_STRING_EQUAL(sc->file, "/etc/posd/mix.sched");
    CU_ASSERT_PTR_NULL(sc->schedule); /* read by posd (policy_posd.c), not by the loader */
    posd_config_free(&c);
    posd_config_defaults(&c);
    CU_ASSERT_EQUAL(c.policy_args.n, 0);
    CU_ASSERT(pos_policy_number(&c.policy_args, pos_policy_param_find("corun_budget")) == 1.2);
}

/* The same key in two instances of one section is an update, not a duplicate. */
static void test_repeated_sections(void)
{
    struct files f = files_at("repeat");
    put_main(&f, "[daemon]\ntick_us = 300\n[policy]\n[daemon]\ntick_us = 500\n"
                 "[class batch]\npriority = 25\n[class batch]\npriority = 26\n");
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.tick_us, 500);
    CU_ASSERT_EQUAL(class_of(&c, "batch")->priority, 26);
    posd_config_free(&c);
}

static void test_classes(void)
{
    struct files f = files_at("classes");
    put_main(&f, "[class batch]\n"
                 "max_inflight = 8\n"
                 "[class gold]\n"
                 "priority = 5\n"
                 "[rule r]\n"
                 "match_app = late\n"
                 "class = silver\n");
    /* a class may be defined in a later file than the rule that names it */
    put_dropin(&f, "10-silver.conf",
               "[class silver]\npriority = -3\nmax_inflight = 4\nmin_share = 0.1\n"
               "[class gold]\nmax_inflight = 6\n",
               NULL);
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.nclasses, 5);
    const struct posd_class *batch = class_of(&c, "batch");
    const struct posd_class *gold = class_of(&c, "gold");
    const struct posd_class *silver = class_of(&c, "silver");
    /* an update changes only the keys it sets */
    CU_ASSERT_EQUAL(batch->priority, 20);
    CU_ASSERT_EQUAL(batch->max_inflight, 8);
    CU_ASSERT_DOUBLE_EQUAL(batch->min_share, 0.01, 1e-12);
    CU_ASSERT_EQUAL(gold->priority, 5);
    CU_ASSERT_EQUAL(gold->max_inflight, 6);
    CU_ASSERT_DOUBLE_EQUAL(gold->min_share, 0.01, 1e-12);
    CU_ASSERT_EQUAL(silver->priority, -3);
    CU_ASSERT_EQUAL(silver->max_inflight, 4);
    CU_ASSERT_DOUBLE_EQUAL(silver->min_share, 0.1, 1e-12);
    struct posd_client_policy p = match(&c, ident("late", 1, 1, ""));
    CU_ASSERT_STRING_EQUAL(p.class_name, "silver");
    CU_ASSERT_EQUAL(p.priority, -3);
    CU_ASSERT_EQUAL(p.max_inflight, 4);
    CU_ASSERT_DOUBLE_EQUAL(p.min_share, 0.1, 1e-12);
    posd_config_free(&c);
}

static void test_class_limit(void)
{
    struct files f = files_at("class-limit");
    char text[4096];
    size_t n = 0;
    for (int i = 0; i < POSD_MAX_CLASSES - 3; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "[class c%d]\npriority = %d\n", i, i);
    put_main(&f, text);
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.nclasses, POSD_MAX_CLASSES);
    posd_config_free(&c);
    snprintf(text + n, sizeof text - n, "[class batch]\npriority = 1\n[class one-more]\n");
    put_main(&f, text);
    expect_error(&f, f.main, 2 * (POSD_MAX_CLASSES - 3) + 3,
                 "too many classes: at most 16, counting the built-in realtime, latency and "
                 "batch");
}

/* --- matching ------------------------------------------------------------------------------- */

static const char match_rules[] = "[rule detector]\n"
                                  "match_app = yolo*\n"
                                  "class = realtime\n"
                                  "slo_ms = 33.5\n"
                                  "sm_share = 40\n"
                                  "\n"
                                  "[rule alice]\n"
                                  "match_uid = 1001\n"
                                  "class = batch\n"
                                  "weight = 2.5\n"
                                  "\n"
                                  "[rule video]\n"
                                  "match_gid = 44\n"
                                  "device = 3\n"
                                  "\n"
                                  "[rule training]\n"
                                  "match_cgroup = /system.slice/train-*.service\n"
                                  "class = batch\n"
                                  "max_inflight = 0\n"
                                  "\n"
                                  "[rule alice-yolo]\n"
                                  "match_app = yolo*\n"
                                  "match_uid = 1001\n"
                                  "match_cgroup = /user.slice/*\n"
                                  "priority = 7\n";

static void test_match(void)
{
    struct files f = files_at("match");
    put_main(&f, match_rules);
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(c.nrules, 5);
    CU_ASSERT_EQUAL(c.rules[1].uid, 1001);
    CU_ASSERT(c.rules[1].has_uid && !c.rules[1].has_gid);
    CU_ASSERT_EQUAL(c.rules[0].class_line, 3);

    /* nothing matches: the default class, its values, and the neutral settings */
    struct posd_client_policy p = match(&c, ident("resnet", 1000, 1000, "/user.slice/x"));
    CU_ASSERT_STRING_EQUAL(p.class_name, "latency");
    CU_ASSERT_EQUAL(p.priority, 10);
    CU_ASSERT_EQUAL(p.max_inflight, 0);
    CU_ASSERT_DOUBLE_EQUAL(p.min_share, 0.01, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(p.slo_ms, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(p.weight, 1, 0);
    CU_ASSERT_EQUAL(p.sm_share, 0);
    CU_ASSERT_EQUAL(p.device, 0);
    CU_ASSERT_STRING_EQUAL(p.rule, "");

    /* by app glob */
    p = match(&c, ident("yolov8", 1000, 1000, "/user.slice/x"));
    CU_ASSERT_STRING_EQUAL(p.class_name, "realtime");
    CU_ASSERT_EQUAL(p.priority, 0);
    CU_ASSERT_DOUBLE_EQUAL(p.slo_ms, 33.5, 1e-12);
    CU_ASSERT_EQUAL(p.sm_share, 40);
    CU_ASSERT_STRING_EQUAL(p.rule, "detector");
    CU_ASSERT_STRING_EQUAL(match(&c, ident("xyolo", 1000, 1000, "")).rule, "");

    /* by uid: batch, with the class's in-flight cap */
    p = match(&c, ident("resnet", 1001, 1000, "/user.slice/x"));
    CU_ASSERT_STRING_EQUAL(p.class_name, "batch");
    CU_ASSERT_EQUAL(p.priority, 20);
    CU_ASSERT_EQUAL(p.max_inflight, 0);
    CU_ASSERT_DOUBLE_EQUAL(p.weight, 2.5, 1e-12);
    CU_ASSERT_STRING_EQUAL(p.rule, "alice");

    /* by gid */
    p = match(&c, ident("resnet", 1000, 44, ""));
    CU_ASSERT_STRING_EQUAL(p.class_name, "latency");
    CU_ASSERT_EQUAL(p.device, 3);
    CU_ASSERT_STRING_EQUAL(p.rule, "video");

    /* by cgroup glob ('*' spans '/'); a rule's max_inflight 0 lifts the class's cap */
    p = match(&c, ident("python3", 0, 0, "/system.slice/train-bert.service"));
    CU_ASSERT_STRING_EQUAL(p.class_name, "batch");
    CU_ASSERT_EQUAL(p.max_inflight, 0);
    CU_ASSERT_STRING_EQUAL(p.rule, "training");
    CU_ASSERT_STRING_EQUAL(match(&c, ident("python3", 0, 0, "/system.slice/x")).rule, "");

    /* every rule that matches applies, later settings over earlier ones: detector sets
     * realtime, alice batch (later), alice-yolo priority 7 (over the class's) */
    p = match(&c, ident("yolov8", 1001, 44, "/user.slice/user-1001.slice/s.scope"));
    CU_ASSERT_STRING_EQUAL(p.class_name, "batch");
    CU_ASSERT_EQUAL(p.priority, 7);
    CU_ASSERT_EQUAL(p.max_inflight, 0);
    CU_ASSERT_DOUBLE_EQUAL(p.slo_ms, 33.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(p.weight, 2.5, 1e-12);
    CU_ASSERT_EQUAL(p.sm_share, 40);
    CU_ASSERT_EQUAL(p.device, 3);
    CU_ASSERT_STRING_EQUAL(p.rule, "alice-yolo");

    /* a rule with several matchers needs all of them: one missing cgroup, one missing uid */
    p = match(&c, ident("yolov8", 1001, 1000, "/system.slice/x"));
    CU_ASSERT_STRING_EQUAL(p.rule, "alice");
    CU_ASSERT_EQUAL(p.priority, 20);
    p = match(&c, ident("yolov8", 1002, 1000, "/user.slice/x"));
    CU_ASSERT_STRING_EQUAL(p.rule, "detector");
    CU_ASSERT_EQUAL(p.priority, 0);
    posd_config_free(&c);
}

static struct posd_identity in_pod(const char *ns, const char *pod, const char *container)
{
    struct posd_identity id = ident("python3", 1000, 1000,
                                    "/kubepods.slice/kubepods-pod1234.slice/x.scope");
    snprintf(id.pod_uid, sizeof id.pod_uid, "1234abcd-5678-90ab-cdef-0123456789ab");
    snprintf(id.k8s_namespace, sizeof id.k8s_namespace, "%s", ns);
    snprintf(id.pod, sizeof id.pod, "%s", pod);
    snprintf(id.container, sizeof id.container, "%s", container);
    return id;
}

/* match_namespace, match_pod and match_container are globs on the pod's names; a rule with only
 * them is valid; a client without a pod, or whose names are not known, never matches them and
 * is scheduled by its other rules. */
static void test_pod_matchers(void)
{
    struct files f = files_at("pod-match");
    put_main(&f, "[rule by-uid]\nmatch_uid = 1000\npriority = 15\n"
                 "[rule ml]\nmatch_namespace = ml-*\nclass = realtime\nslo_ms = 20\n"
                 "[rule trainer]\nmatch_namespace = ml-*\nmatch_pod = trainer-*\nclass = batch\n"
                 "[rule side]\nmatch_container = [lm]og*\nclass = batch\nsm_share = 10\n");
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(c.rules[1].match_namespace, "ml-*");
    CU_ASSERT_STRING_EQUAL(c.rules[2].match_pod, "trainer-*");

    struct posd_client_policy p = match(&c, in_pod("ml-prod", "detector-1", "infer"));
    CU_ASSERT_STRING_EQUAL(p.class_name, "realtime");
    CU_ASSERT_STRING_EQUAL(p.rule, "ml");
    CU_ASSERT_EQUAL(p.priority, 15); /* by-uid's priority stays: a setting of a matching rule */
    p = match(&c, in_pod("ml-prod", "trainer-0", "train"));
    CU_ASSERT_STRING_EQUAL(p.class_name, "batch");
    CU_ASSERT_STRING_EQUAL(p.rule, "trainer");
    p = match(&c, in_pod("web", "trainer-0", "logger"));
    CU_ASSERT_STRING_EQUAL(p.rule, "side");
    CU_ASSERT_EQUAL(p.sm_share, 10);
    CU_ASSERT_STRING_EQUAL(match(&c, in_pod("mlx", "a", "b")).rule, "by-uid");

    /* no pod: only its other rules */
    p = match(&c, ident("python3", 1000, 1000, "/user.slice/x"));
    CU_ASSERT_STRING_EQUAL(p.rule, "by-uid");
    CU_ASSERT_STRING_EQUAL(p.class_name, "latency");
    /* a pod whose names are not known yet: "" matches no pattern, not even '*' */
    struct posd_config all;
    struct files g = files_at("pod-match-star");
    put_main(&g, "[rule any-pod]\nmatch_namespace = *\nclass = batch\n"
                 "[rule any-container]\nmatch_container = *\nclass = realtime\n");
    CU_ASSERT_EQUAL_FATAL(load(&g, &all, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(match(&all, in_pod("", "", "")).rule, "");
    CU_ASSERT_STRING_EQUAL(match(&all, in_pod("ns", "pod", "")).rule, "any-pod");
    CU_ASSERT_STRING_EQUAL(match(&all, in_pod("ns", "pod", "c")).rule, "any-container");
    CU_ASSERT_STRING_EQUAL(match(&all, ident("x", 0, 0, "")).rule, "");
    posd_config_free(&all);
    posd_config_free(&c);
}

static void test_kubernetes_section(void)
{
    struct posd_config c;
    posd_config_defaults(&c);
    CU_ASSERT_EQUAL(c.k8s_enable, POSD_K8S_AUTO);
    CU_ASSERT_STRING_EQUAL(c.k8s_proc_root, "/proc");
    CU_ASSERT_STRING_EQUAL(c.k8s_log_dir, "/var/log/pods");
    CU_ASSERT_STRING_EQUAL(c.k8s_containers_dir, "/var/log/containers");
    CU_ASSERT_STRING_EQUAL(c.k8s_pod_resources, "/var/lib/kubelet/pod-resources/kubelet.sock");
    CU_ASSERT_STRING_EQUAL(c.k8s_checkpoint,
                           "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint");
    CU_ASSERT_STRING_EQUAL(c.k8s_resource, "pos.dev/gpu");
    CU_ASSERT_DOUBLE_EQUAL(c.k8s_refresh_s, 5, 0);
    struct files f = files_at("kubernetes");
    put_main(&f, "[kubernetes]\nenable = yes\nproc_root = /tmp/p\nlog_dir = /tmp/l\n"
                 "containers_log_dir = /tmp/c\npod_resources_socket = /tmp/s.sock\n"
                 "checkpoint = /tmp/ck\nresource = example.com/gpu\nrefresh_s = 0.5\n");
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.k8s_enable, POSD_K8S_YES);
    CU_ASSERT_STRING_EQUAL(c.k8s_proc_root, "/tmp/p");
    CU_ASSERT_STRING_EQUAL(c.k8s_log_dir, "/tmp/l");
    CU_ASSERT_STRING_EQUAL(c.k8s_containers_dir, "/tmp/c");
    CU_ASSERT_STRING_EQUAL(c.k8s_pod_resources, "/tmp/s.sock");
    CU_ASSERT_STRING_EQUAL(c.k8s_checkpoint, "/tmp/ck");
    CU_ASSERT_STRING_EQUAL(c.k8s_resource, "example.com/gpu");
    CU_ASSERT_DOUBLE_EQUAL(c.k8s_refresh_s, 0.5, 0);
    put_main(&f, "[kubernetes]\nenable = no\n");
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.k8s_enable, POSD_K8S_NO);
    posd_config_free(&c);
}

/* [daemon] policy_dir: the drop-ins' directory, as a ConfigMap volume lays it out (the files
 * are links into "..data", itself a link to a hidden timestamped directory): every *.conf link
 * is read, the ".."-entries are not. */
static void test_policy_dir_as_a_configmap(void)
{
    struct files f = files_at("configmap");
    char cm[DIR_MAX + 32], path[DIR_MAX + 128], cmd[4 * DIR_MAX];
    snprintf(cm, sizeof cm, "%s/cm", f.dir);
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/..2024_05_01_10_00_00.123 && ln -s ..2024_05_01_10_00_00.123 "
             "%s/..data && ln -s ..data/10-ns.conf %s/10-ns.conf",
             cm, cm, cm);
    CU_ASSERT_FATAL(system(cmd) == 0);
    snprintf(path, sizeof path, "%s/..2024_05_01_10_00_00.123/10-ns.conf", cm);
    write_file(path, "[rule ml]\nmatch_namespace = ml\nclass = batch\nmem_limit = 2GiB\n");
    /* a file of the same name in the hidden directory itself is not a drop-in of its own */
    snprintf(path, sizeof path, "%s/..2024_05_01_10_00_00.123/..x.conf", cm);
    write_file(path, "[bogus]\n");
    char main[DIR_MAX + 64];
    snprintf(main, sizeof main, "[daemon]\npolicy_dir = %s\n", cm);
    put_main(&f, main);
    put_dropin(&f, "50-beside.conf", "[rule beside]\nmatch_app = x\n", NULL);
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(c.policy_dir, cm);
    CU_ASSERT_EQUAL_FATAL(c.nrules, 1); /* policy.d beside posd.conf is not read */
    CU_ASSERT_STRING_EQUAL(c.rules[0].name, "ml");
    CU_ASSERT_STRING_EQUAL(match(&c, in_pod("ml", "p", "c")).class_name, "batch");
    /* without policy_dir: the policy.d beside the main file, and it says so */
    put_main(&f, "[daemon]\n");
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(c.policy_dir, f.dropins);
    CU_ASSERT_STRING_EQUAL(c.rules[0].name, "beside");
    posd_config_free(&c);
}

/* A class's sm_share is every client of the class's, unless a rule sets its own; the built-in
 * classes set none. */
static void test_sm_share_from_class_and_rule(void)
{
    struct files f = files_at("sm-share");
    put_main(&f, "[class batch]\nsm_share = 30\n"
                 "[rule trainer]\nmatch_app = train*\nclass = batch\n"
                 "[rule big]\nmatch_app = train-big\nsm_share = 70\n"
                 "[rule other]\nmatch_app = other\nclass = latency\n");
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(posd_config_class(&c, "batch")->sm_share, 30);
    CU_ASSERT_EQUAL(posd_config_class(&c, "latency")->sm_share, 0);
    CU_ASSERT_EQUAL(match(&c, ident("train-small", 1, 1, "")).sm_share, 30);
    CU_ASSERT_EQUAL(match(&c, ident("train-big", 1, 1, "")).sm_share, 70);
    CU_ASSERT_EQUAL(match(&c, ident("other", 1, 1, "")).sm_share, 0);
    posd_config_free(&c);
}

/* --- memory limits (sched/mem_limit.c) ------------------------------------------------------ */

static const struct mem_case {
    const char *text;
    uint64_t bytes;
    uint32_t ppm;
} mem_cases[] = {
    {"none", POS_MEM_UNLIMITED, 0},
    {"0", 0, 0},
    {"4096", 4096, 0},
    {"100B", 100, 0},
    {"512M", 512ull << 20, 0},
    {"4G", 4ull << 30, 0},
    {"4g", 4ull << 30, 0},
    {"4GB", 4ull << 30, 0}, /* binary, as systemd and docker read it */
    {"4Gi", 4ull << 30, 0},
    {"4GiB", 4ull << 30, 0},
    {"4 GiB", 4ull << 30, 0},
    {"1.5T", 3ull << 39, 0},
    {"1K", 1024, 0},
    {"1.1K", 1126, 0}, /* 1126.4: rounded down to a whole byte */
    {"2P", 2ull << 50, 0},
    {"50%", POS_MEM_UNLIMITED, 500000},
    {"12.5%", POS_MEM_UNLIMITED, 125000},
    {"0.0001%", POS_MEM_UNLIMITED, 1},
    {"100%", POS_MEM_UNLIMITED, 1000000},
    {"0%", 0, 0}, /* a share of nothing is a limit of nothing */
};

/* Sizes in binary units, percentages to a millionth, none: exact, with no floating point. */
static void test_mem_limit_values_in_binary_units_and_percent(void)
{
    for (size_t i = 0; i < sizeof mem_cases / sizeof mem_cases[0]; i++) {
        const struct mem_case *m = &mem_cases[i];
        struct sched_mem_limit l = {7, 7};
        char why[192] = "";
        int rc = sched_mem_limit_parse(m->text, &l, why, sizeof why);
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_EQUAL(l.bytes, m->bytes);
        CU_ASSERT_EQUAL(l.ppm, m->ppm);
        if (rc || l.bytes != m->bytes || l.ppm != m->ppm)
            fprintf(stderr, "\n  '%s': rc %d bytes %llu ppm %u (%s)\n", m->text, rc,
                    (unsigned long long)l.bytes, l.ppm, why);
    }
}

/* What is not a limit is refused with a reason, never read as something else. */
static void test_mem_limit_refuses_what_is_not_a_size(void)
{
    static const char *const bad[] = {
        "", "-1G", "+1G", "G", "1.5", "0x10", "1e9", "inf", "nan", "1..5G", ".5G", "5.G",
        "101%", "100.0001%", "1.00001%", "50 %%", "1GiBB", "1Gb2", "15E", "16E", "16384P",
        "18446744073709551615", "18446744073709551616", "1.0000000001G", "None", "unlimited",
        " 1G", "1G ",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct sched_mem_limit l = {7, 7};
        char why[192] = "";
        int rc = sched_mem_limit_parse(bad[i], &l, why, sizeof why);
        CU_ASSERT_EQUAL(rc, -EINVAL);
        CU_ASSERT(why[0] != '\0');
        CU_ASSERT(l.bytes == 7 && l.ppm == 7);
        if (rc != -EINVAL)
            fprintf(stderr, "\n  '%s' taken: bytes %llu ppm %u\n", bad[i],
                    (unsigned long long)l.bytes, l.ppm);
    }
    /* the largest size there is: one byte short of "none" */
    struct sched_mem_limit l;
    CU_ASSERT_EQUAL(sched_mem_limit_parse("18446744073709551614", &l, NULL, 0), 0);
    CU_ASSERT_EQUAL(l.bytes, POS_MEM_UNLIMITED - 1);
}

/* A limit written back is one word that reads back as itself (to the digits shown). */
static void test_mem_limit_format_reads_back(void)
{
    static const struct {
        struct sched_mem_limit l;
        const char *text;
    } cases[] = {
        {{POS_MEM_UNLIMITED, 0}, "none"}, {{0, 0}, "0B"},
        {{100, 0}, "100B"},               {{4ull << 30, 0}, "4GiB"},
        {{3ull << 39, 0}, "1.5TiB"},      {{1000ull << 20, 0}, "1000MiB"},
        {{POS_MEM_UNLIMITED, 500000}, "50%"}, {{POS_MEM_UNLIMITED, 125000}, "12.5%"},
        {{POS_MEM_UNLIMITED, 1}, "0.0001%"},  {{POS_MEM_UNLIMITED, 1000000}, "100%"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[24];
        sched_mem_limit_format(cases[i].l, buf, sizeof buf);
        CU_ASSERT_STRING_EQUAL(buf, cases[i].text);
        struct sched_mem_limit back;
        CU_ASSERT_EQUAL(sched_mem_limit_parse(buf, &back, NULL, 0), 0);
        CU_ASSERT(sched_mem_limit_equal(back, cases[i].l));
    }
}

/* The limit that the loaded C gives a client named APP, against BYTES and PPM. */
static void expect_mem_limit(const struct posd_config *c, const char *app, uint64_t bytes,
                             uint32_t ppm)
{
    struct sched_mem_limit l = match(c, ident(app, 1, 1, "")).mem_limit;
    CU_ASSERT(l.bytes == bytes && l.ppm == ppm);
    if (l.bytes != bytes || l.ppm != ppm)
        fprintf(stderr, "\n  %s: bytes %llu ppm %u\n", app, (unsigned long long)l.bytes, l.ppm);
}

/* A rule's mem_limit overrides its class's, none included; no mem_limit anywhere is none; a
 * reload with a bad mem_limit leaves the running limits as they were. */
static void test_mem_limit_from_class_and_rule_and_a_bad_reload_keeps_them(void)
{
    struct files f = files_at("mem-limit");
    put_main(&f, "[class batch]\nmem_limit = 4G\n"
                 "[class tiny]\npriority = 30\nmem_limit = 25%\n"
                 "[rule trainer]\nmatch_app = train*\nclass = batch\n"
                 "[rule small]\nmatch_app = train-small\nmem_limit = 512MiB\n"
                 "[rule free]\nmatch_app = train-free\nmem_limit = none\n"
                 "[rule toy]\nmatch_app = toy\nclass = tiny\n");
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(class_of(&c, "batch")->mem_limit.bytes, 4ull << 30);
    CU_ASSERT(sched_mem_limit_equal(class_of(&c, "latency")->mem_limit, SCHED_MEM_NO_LIMIT));
    expect_mem_limit(&c, "train-big", 4ull << 30, 0);
    expect_mem_limit(&c, "train-small", 512ull << 20, 0);
    expect_mem_limit(&c, "train-free", POS_MEM_UNLIMITED, 0);
    expect_mem_limit(&c, "toy", POS_MEM_UNLIMITED, 250000);
    expect_mem_limit(&c, "other", POS_MEM_UNLIMITED, 0);

    /* a reload with a bad mem_limit leaves the running limits as they were */
    put_dropin(&f, "20-mem.conf", "[class batch]\nmem_limit = 2G\n[rule s]\nmatch_all = yes\n"
                                  "mem_limit = 2 gigs\n",
               NULL);
    CU_ASSERT(posd_config_load(f.main, 0, f.dropins, &c, err, sizeof err) < 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "20-mem.conf:5: bad value '2 gigs' for 'mem_limit'"));
    CU_ASSERT_EQUAL(class_of(&c, "batch")->mem_limit.bytes, 4ull << 30);
    CU_ASSERT_EQUAL(c.nrules, 4);
    expect_mem_limit(&c, "train-small", 512ull << 20, 0);
    expect_mem_limit(&c, "toy", POS_MEM_UNLIMITED, 250000);
    posd_config_free(&c);
}

/* A class given by app name and uid goes only to that uid: a process of another user that
 * names itself into the rule (POS_APP, or its executable's name) gets the default class. */
static void test_app_name_alone_does_not_promote_another_uid(void)
{
    struct files f = files_at("bind");
    put_main(&f, "[rule camera]\nmatch_app = detector\nmatch_uid = 1001\nclass = realtime\n");
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(match(&c, ident("detector", 1001, 1001, "")).class_name, "realtime");
    CU_ASSERT_STRING_EQUAL(match(&c, ident("detector", 1000, 1001, "")).class_name, "latency");
    CU_ASSERT_STRING_EQUAL(match(&c, ident("other", 1001, 1001, "")).class_name, "latency");
    posd_config_free(&c);
}

static void test_match_all_and_default_class(void)
{
    struct files f = files_at("match-all");
    put_main(&f, "[daemon]\ndefault_class = batch\n"
                 "[rule everyone]\nmatch_all = yes\nweight = 3\n"
                 "[rule fast]\nmatch_app = fast\nclass = latency\n");
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    struct posd_client_policy p = match(&c, ident("anything", 5, 5, ""));
    CU_ASSERT_STRING_EQUAL(p.class_name, "batch");
    CU_ASSERT_EQUAL(p.priority, 20);
    CU_ASSERT_DOUBLE_EQUAL(p.weight, 3, 0);
    CU_ASSERT_STRING_EQUAL(p.rule, "everyone");
    p = match(&c, ident("fast", 5, 5, ""));
    CU_ASSERT_STRING_EQUAL(p.class_name, "latency");
    CU_ASSERT_EQUAL(p.priority, 10);
    CU_ASSERT_DOUBLE_EQUAL(p.weight, 3, 0);
    CU_ASSERT_STRING_EQUAL(p.rule, "fast");
    posd_config_free(&c);

    /* the class is settled first: a priority set before the rule that sets the class stays,
     * and what no rule set comes from that class */
    put_main(&f, "[rule prio]\nmatch_all = yes\npriority = 5\n"
                 "[rule cls]\nmatch_app = x\nclass = batch\n");
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    p = match(&c, ident("x", 5, 5, ""));
    CU_ASSERT_STRING_EQUAL(p.class_name, "batch");
    CU_ASSERT_EQUAL(p.priority, 5);
    CU_ASSERT_EQUAL(p.max_inflight, 0);
    p = match(&c, ident("y", 5, 5, ""));
    CU_ASSERT_STRING_EQUAL(p.class_name, "latency");
    CU_ASSERT_EQUAL(p.priority, 5);
    CU_ASSERT_EQUAL(p.max_inflight, 0);
    posd_config_free(&c);
}

static void test_user_and_group_names(void)
{
    struct files f = files_at("names");
    put_main(&f, "[rule root-user]\nmatch_uid = root\n[rule root-group]\nmatch_gid = root\n"
                 "[rule numbers]\nmatch_uid = 4294967294\nmatch_gid = 0\n");
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(c.nrules, 3);
    CU_ASSERT(c.rules[0].has_uid);
    CU_ASSERT_EQUAL(c.rules[0].uid, 0);
    CU_ASSERT(c.rules[1].has_gid);
    CU_ASSERT_EQUAL(c.rules[1].gid, 0);
    CU_ASSERT_EQUAL(c.rules[2].uid, 4294967294u);
    CU_ASSERT_STRING_EQUAL(match(&c, ident("x", 0, 1, "")).rule, "root-user");
    posd_config_free(&c);
}

/* Blanks, comments, CRLF, a byte order mark, ':' for '=' and ';' comments after a value. */
static void test_lexical(void)
{
    struct files f = files_at("lexical");
    put_main(&f, "\xEF\xBB\xBF# comment\r\n"
                 "; another\r\n"
                 "   [daemon]   ; trailing comment\r\n"
                 "    tick_us   =   250   ; inline comment\r\n"
                 "\t  credits: 7\r\n"
                 "\r\n"
                 "[ rule  spaced ]\n"
                 "  match_app = a b\n");
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.tick_us, 250);
    CU_ASSERT_EQUAL(c.credits, 7);
    CU_ASSERT_EQUAL_FATAL(c.nrules, 1);
    CU_ASSERT_STRING_EQUAL(c.rules[0].name, "spaced");
    CU_ASSERT_STRING_EQUAL(c.rules[0].match_app, "a b");
    posd_config_free(&c);
}

/* --- errors --------------------------------------------------------------------------------- */

/* MSG may hold one %s: the main file's path. */
static const struct error_case {
    const char *main;
    const char *dropin; /* policy.d/50-x.conf, or NULL */
    int in_dropin;      /* the error is reported in the drop-in */
    int line;
    const char *msg;
} error_cases[] = {
    /* bytes a terminal would act on are shown escaped, never raw */
    {"[daemon]\npolicy = \x1b[2J\x1b]0;owned\x07\xff\n", NULL, 0, 2,
     "bad value '\\x1b[2J\\x1b]0;owned\\x07\\xff' for 'policy' in [daemon]: expected fifo, "
     "priority, pos, staged or learned"},
    {"[da\remon]\n", NULL, 0, 1,
     "unknown section [da\\x0demon] (use [daemon], [policy], [metrics], [kubernetes], "
     "[class NAME] or [rule NAME])"},
    {"[bogus]\n", NULL, 0, 1,
     "unknown section [bogus] (use [daemon], [policy], [metrics], [kubernetes], [class NAME] "
     "or [rule NAME])"},
    {"# c\ntick_us = 100\n", NULL, 0, 2,
     "key 'tick_us' is outside any section: put it under [daemon], [policy], [metrics], "
     "[kubernetes], [class NAME] or [rule NAME]"},
    {"[daemon]\ntick_us 100\n", NULL, 0, 2, "syntax error: expected 'key = value'"},
    {"[daemon\n", NULL, 0, 1, "syntax error: no ']' closes the section name"},
    {"[daemon] tick_us = 1\n", NULL, 0, 1, "syntax error: text after ']'"},
    {"[daemon main]\n", NULL, 0, 1, "[daemon] takes no name"},
    {"[policy x]\n", NULL, 0, 1, "[policy] takes no name"},
    {"[class]\n", NULL, 0, 1, "[class] needs a name: [class NAME]"},
    {"[rule  ]\n", NULL, 0, 1, "[rule] needs a name: [rule NAME]"},
    {"[class Gold]\npriority = 1\n", NULL, 0, 1,
     "bad class name 'Gold' (1..15 characters of a-z, 0-9, '_' and '-')"},
    {"[class abcdefghijklmnop]\npriority = 1\n", NULL, 0, 1,
     "bad class name 'abcdefghijklmnop' (1..15 characters of a-z, 0-9, '_' and '-')"},
    {"[rule a/b]\nmatch_all = yes\n", NULL, 0, 1,
     "bad rule name 'a/b' (1..63 characters of A-Z, a-z, 0-9, '_', '-' and '.')"},
    {"[rule a b]\nmatch_all = yes\n", NULL, 0, 1,
     "bad rule name 'a b' (1..63 characters of A-Z, a-z, 0-9, '_', '-' and '.')"},
    {"[rule detector]\nmatch_app = det*\nmax_inflght = 2\n", NULL, 0, 3,
     "unknown key 'max_inflght' in [rule detector]"},
    {"[daemon]\nmin_share = 0.1\n", NULL, 0, 2, "unknown key 'min_share' in [daemon]"},
    {"[class batch]\nweight = 2\n", NULL, 0, 2, "unknown key 'weight' in [class batch]"},
    {"[daemon]\ntick_us = 100\n\ntick_us = 200\n", NULL, 0, 4,
     "duplicate key 'tick_us' in [daemon] (first set on line 2)"},
    {"[rule r]\nmatch_uid = 5\nmatch_uid = 6\n", NULL, 0, 3,
     "duplicate key 'match_uid' in [rule r] (first set on line 2)"},
    {"[daemon]\ntick_us = 9\n", NULL, 0, 2,
     "bad value '9' for 'tick_us' in [daemon]: expected an integer in 10..100000"},
    {"[daemon]\ntick_us = 100001\n", NULL, 0, 2,
     "bad value '100001' for 'tick_us' in [daemon]: expected an integer in 10..100000"},
    {"[daemon]\ntick_us = 100us\n", NULL, 0, 2,
     "bad value '100us' for 'tick_us' in [daemon]: expected an integer in 10..100000"},
    {"[daemon]\ntick_us = +100\n", NULL, 0, 2,
     "bad value '+100' for 'tick_us' in [daemon]: expected an integer in 10..100000"},
    {"[daemon]\ntick_us =\n", NULL, 0, 2,
     "bad value '' for 'tick_us' in [daemon]: expected an integer in 10..100000"},
    {"[daemon]\ncredits = 0\n", NULL, 0, 2,
     "bad value '0' for 'credits' in [daemon]: expected an integer in 1..1000000"},
    {"[daemon]\ncredits = 99999999999999999999\n", NULL, 0, 2,
     "bad value '99999999999999999999' for 'credits' in [daemon]: expected an integer in "
     "1..1000000"},
    {"[daemon]\nsocket = run/posd.sock\n", NULL, 0, 2,
     "bad value 'run/posd.sock' for 'socket' in [daemon]: expected an absolute path of at most "
     "107 characters"},
    {"[daemon]\npolicy = rr\n", NULL, 0, 2,
     "bad value 'rr' for 'policy' in [daemon]: expected fifo, priority, pos, staged or "
     "learned"},
    {"[daemon]\npolicy = fifo # not a comment\n", NULL, 0, 2,
     "bad value 'fifo # not a comment' for 'policy' in [daemon]: expected fifo, priority, "
     "pos, staged or learned"},
    {"[daemon]\nlog_level = verbose\n", NULL, 0, 2,
     "bad value 'verbose' for 'log_level' in [daemon]: expected error, warn, info or debug"},
    {"[daemon]\n\ntelemetry = yes\n", NULL, 0, 3,
     "bad value 'yes' for 'telemetry' in [daemon]: expected auto, on or off"},
    {"[daemon]\ntelemetry_driver = libcuda.so.1\n", NULL, 0, 2,
     "bad value 'libcuda.so.1' for 'telemetry_driver' in [daemon]: expected an absolute path of "
     "at most 255 characters"},
    {"[daemon]\ntelemetry_ioctl = yes\n", NULL, 0, 2,
     "bad value 'yes' for 'telemetry_ioctl' in [daemon]: expected off or on"},
    {"[daemon]\ntelemetry_sample_ms = 60001\n", NULL, 0, 2,
     "bad value '60001' for 'telemetry_sample_ms' in [daemon]: expected an integer in 0..60000"},
    {"[daemon]\ndefault_class = Fast!\n", NULL, 0, 2,
     "bad value 'Fast!' for 'default_class' in [daemon]: expected a class name (1..15 "
     "characters of a-z, 0-9, '_' and '-')"},
    {"[daemon]\n\ndefault_class = nosuch\n", NULL, 0, 3,
     "bad value 'nosuch' for 'default_class' in [daemon]: no such class (classes: realtime, "
     "latency, batch)"},
    {"[policy]\nguard_period_ms = 0\n", NULL, 0, 2,
     "bad value '0' for 'guard_period_ms' in [policy]: expected a number >= 1 and <= 60000"},
    {"[policy]\ncpu = on\n", NULL, 0, 2,
     "bad value 'on' for 'cpu' in [policy]: expected off, idle or nice"},
    {"[policy]\ncpu_nice = 20\n", NULL, 0, 2,
     "bad value '20' for 'cpu_nice' in [policy]: expected an integer in 1..19"},
    {"[policy]\ncpu_nice = 0\n", NULL, 0, 2,
     "bad value '0' for 'cpu_nice' in [policy]: expected an integer in 1..19"},
    {"[policy]\ncpu_hold_ms = -1\n", NULL, 0, 2,
     "bad value '-1' for 'cpu_hold_ms' in [policy]: expected a number >= 0 and <= 60000"},
    {"[class batch]\ncpu = high\n", NULL, 0, 2,
     "bad value 'high' for 'cpu' in [class batch]: expected policy, off, idle or nice"},
    {"[policy]\nmin_share = 1.5\n", NULL, 0, 2,
     "bad value '1.5' for 'min_share' in [policy]: expected a number >= 0 and <= 1"},
    {"[policy]\nmin_share = nan\n", NULL, 0, 2,
     "bad value 'nan' for 'min_share' in [policy]: expected a number >= 0 and <= 1"},
    {"[policy]\nmin_share = 0.1.2\n", NULL, 0, 2,
     "bad value '0.1.2' for 'min_share' in [policy]: expected a number >= 0 and <= 1"},
    {"[metrics]\nlabels = none\n", NULL, 0, 2,
     "bad value 'none' for 'labels' in [metrics]: expected full or anonymous"},
    {"[metrics]\nlisten = 99999\n", NULL, 0, 2,
     "bad value '99999' for 'listen' in [metrics]: expected PORT (on 127.0.0.1), ADDR:PORT or "
     "[ADDR6]:PORT"},
    {"[metrics]\nlisten = localhost:9464\n", NULL, 0, 2,
     "bad value 'localhost:9464' for 'listen' in [metrics]: expected PORT (on 127.0.0.1), "
     "ADDR:PORT or [ADDR6]:PORT"},
    {"[metrics]\n\nlisten = [::1]:+9464\n", NULL, 0, 3,
     "bad value '[::1]:+9464' for 'listen' in [metrics]: expected PORT (on 127.0.0.1), "
     "ADDR:PORT or [ADDR6]:PORT"},
    {"[metrics x]\n", NULL, 0, 1, "[metrics] takes no name"},
    {"[class batch]\npriority = 1001\n", NULL, 0, 2,
     "bad value '1001' for 'priority' in [class batch]: expected an integer in -1000..1000"},
    {"[class batch]\nmax_inflight = -1\n", NULL, 0, 2,
     "bad value '-1' for 'max_inflight' in [class batch]: expected an integer in 0..100000"},
    {"[class batch]\nmin_share = -0.1\n", NULL, 0, 2,
     "bad value '-0.1' for 'min_share' in [class batch]: expected a number >= 0 and <= 1"},
    {"# x\n\n[class gold]\nmax_inflight = 3\n", NULL, 0, 3, "new class 'gold' must set priority"},
    {"[rule r]\nmatch_all = 1\nslo_ms = 0\n", NULL, 0, 3,
     "bad value '0' for 'slo_ms' in [rule r]: expected a number > 0 and <= 86400000"},
    {"[rule r]\nmatch_all = 1\nweight = -1\n", NULL, 0, 3,
     "bad value '-1' for 'weight' in [rule r]: expected a number > 0 and <= 1000000"},
    {"[rule r]\nmatch_all = 1\nsm_share = 0\n", NULL, 0, 3,
     "bad value '0' for 'sm_share' in [rule r]: expected an integer in 1..100"},
    {"[rule r]\nmatch_all = 1\nsm_share = 101\n", NULL, 0, 3,
     "bad value '101' for 'sm_share' in [rule r]: expected an integer in 1..100"},
    {"[rule r]\nmatch_all = 1\nsm_share = 50%\n", NULL, 0, 3,
     "bad value '50%%' for 'sm_share' in [rule r]: expected an integer in 1..100"},
    {"[class batch]\nsm_share = 0\n", NULL, 0, 2,
     "bad value '0' for 'sm_share' in [class batch]: expected an integer in 1..100"},
    {"[class batch]\n\nsm_share = 12.5\n", NULL, 0, 3,
     "bad value '12.5' for 'sm_share' in [class batch]: expected an integer in 1..100"},
    {"[rule r]\nmatch_all = 1\ndevice = 64\n", NULL, 0, 3,
     "bad value '64' for 'device' in [rule r]: expected an integer in 0..63"},
    {"[rule r]\nmatch_all = 1\npriority = -1001\n", NULL, 0, 3,
     "bad value '-1001' for 'priority' in [rule r]: expected an integer in -1000..1000"},
    {"[rule r]\nmatch_all = 1\nmax_inflight = 100001\n", NULL, 0, 3,
     "bad value '100001' for 'max_inflight' in [rule r]: expected an integer in 0..100000"},
    {"[rule r]\nmatch_uid = pos-no-such-user\n", NULL, 0, 2,
     "bad value 'pos-no-such-user' for 'match_uid' in [rule r]: no such user"},
    {"[rule r]\nmatch_gid = pos-no-such-group\n", NULL, 0, 2,
     "bad value 'pos-no-such-group' for 'match_gid' in [rule r]: no such group"},
    {"[rule r]\nmatch_uid = -1\n", NULL, 0, 2,
     "bad value '-1' for 'match_uid' in [rule r]: expected a user name or a uid in "
     "0..4294967294"},
    {"[rule r]\nmatch_gid = 4294967295\n", NULL, 0, 2,
     "bad value '4294967295' for 'match_gid' in [rule r]: expected a group name or a gid in "
     "0..4294967294"},
    {"[rule r]\nmatch_all = maybe\n", NULL, 0, 2,
     "bad value 'maybe' for 'match_all' in [rule r]: expected yes or no"},
    {"[rule r]\nmatch_app =\n", NULL, 0, 2,
     "bad value '' for 'match_app' in [rule r]: expected a pattern of 1..63 characters"},
    {"[rule r]\nmatch_cgroup = system.slice/*\n", NULL, 0, 2,
     "bad value 'system.slice/*' for 'match_cgroup' in [rule r]: expected a pattern of the "
     "cgroup path, starting with '/' or '*', of at most 255 characters"},
    {"[rule r]\nmatch_all = yes\nclass = Gold\n", NULL, 0, 3,
     "bad value 'Gold' for 'class' in [rule r]: expected a class name (1..15 characters of "
     "a-z, 0-9, '_' and '-')"},
    {"[rule r]\nmatch_all = yes\n\nclass = gold\n", "[class silver]\npriority = 1\n", 0, 4,
     "bad value 'gold' for 'class' in [rule r]: no such class (classes: realtime, latency, "
     "batch, silver)"},
    {"[daemon]\n[rule r]\nclass = batch\n", NULL, 0, 2,
     "rule 'r' has no matcher: set match_app, match_uid, match_gid, match_cgroup, "
     "match_namespace, match_pod or match_container, or match_all = yes"},
    {"[rule r]\nmatch_all = no\n[daemon]\n", NULL, 0, 1,
     "rule 'r' has no matcher: set match_app, match_uid, match_gid, match_cgroup, "
     "match_namespace, match_pod or match_container, or match_all = yes"},
    {"[policy]\n[rule r]\nmatch_all = yes\nmatch_app = x\n", NULL, 0, 2,
     "rule 'r' sets match_all = yes and a match_* key: keep one or the other"},
    {"[rule r]\nmatch_all = yes\n[rule r]\nmatch_all = yes\n", NULL, 0, 3,
     "rule 'r' is already defined at %s:1"},
    {"\n[rule r]\nmatch_all = yes\n", "[daemon]\n[rule r]\nmatch_app = x\n", 1, 2,
     "rule 'r' is already defined at %s:2"},
    {"[daemon]\n", "[rule d]\nmatch_app = d*\nmax_inflght = 2\n", 1, 3,
     "unknown key 'max_inflght' in [rule d]"},
    {"[daemon]\n", "[rule d]\n", 1, 1,
     "rule 'd' has no matcher: set match_app, match_uid, match_gid, match_cgroup, "
     "match_namespace, match_pod or match_container, or match_all = yes"},
    {"[rule r]\nmatch_namespace = ML\n", NULL, 0, 2,
     "bad value 'ML' for 'match_namespace' in [rule r]: expected a pattern of 1..63 characters "
     "of a-z, 0-9, '-', '.' and the glob characters * ? [ ] ! (Kubernetes names are lowercase)"},
    {"[rule r]\nmatch_pod = a_b\n", NULL, 0, 2,
     "bad value 'a_b' for 'match_pod' in [rule r]: expected a pattern of 1..253 characters of "
     "a-z, 0-9, '-', '.' and the glob characters * ? [ ] ! (Kubernetes names are lowercase)"},
    {"[rule r]\nmatch_container =\n", NULL, 0, 2,
     "bad value '' for 'match_container' in [rule r]: expected a pattern of 1..63 characters "
     "of a-z, 0-9, '-', '.' and the glob characters * ? [ ] ! (Kubernetes names are lowercase)"},
    {"[kubernetes]\nenable = maybe\n", NULL, 0, 2,
     "bad value 'maybe' for 'enable' in [kubernetes]: expected auto, yes or no"},
    {"[kubernetes]\nlog_dir = var/log/pods\n", NULL, 0, 2,
     "bad value 'var/log/pods' for 'log_dir' in [kubernetes]: expected an absolute path of at "
     "most 255 characters"},
    {"[kubernetes]\nresource = gpu\n", NULL, 0, 2,
     "bad value 'gpu' for 'resource' in [kubernetes]: expected a resource name DOMAIN/NAME "
     "such as pos.dev/gpu"},
    {"[kubernetes]\nrefresh_s = 0\n", NULL, 0, 2,
     "bad value '0' for 'refresh_s' in [kubernetes]: expected a number >= 0.1 and <= 3600"},
    {"[daemon]\n", "[daemon]\npolicy_dir = /etc/posd/other.d\n", 1, 2,
     "bad value '/etc/posd/other.d' for 'policy_dir' in [daemon]: policy_dir may be set in the "
     "main file only (it says which drop-ins are read)"},
    /* the first error is the one reported */
    {"[daemon]\ntick_us = 1\n[bogus]\n", NULL, 0, 2,
     "bad value '1' for 'tick_us' in [daemon]: expected an integer in 10..100000"},
    {"[daemon]\ntick_us = 100\n", "[daemon]\ntick_us = 1\n", 1, 2,
     "bad value '1' for 'tick_us' in [daemon]: expected an integer in 10..100000"},
    {"[class batch]\nmem_limit = 4X\n", NULL, 0, 2,
     "bad value '4X' for 'mem_limit' in [class batch]: expected none, a size such as 512M, 1.5G "
     "or 4GiB (binary units K, M, G, T, P), or a percentage of the device such as 50%%"},
    {"[rule r]\nmatch_all = yes\n\nmem_limit = 101%\n", NULL, 0, 4,
     "bad value '101%%' for 'mem_limit' in [rule r]: a percentage of the device must be at most "
     "100%%"},
    {"[rule r]\nmatch_all = yes\nmem_limit = 1.5\n", NULL, 0, 3,
     "bad value '1.5' for 'mem_limit' in [rule r]: a number of bytes must be whole"},
    {"[daemon]\n", "[class batch]\nmem_limit = 32768P\n", 1, 2,
     "bad value '32768P' for 'mem_limit' in [class batch]: too large: at most 16 EiB less 2 "
     "bytes"},
    {"[class batch]\nmem_limit = 1G\nmem_limit = 2G\n", NULL, 0, 3,
     "duplicate key 'mem_limit' in [class batch] (first set on line 2)"},
    /* the keys a policy declares (pos_policy_ops.params): in [policy] only */
    {"[policy]\ncorun_budget = 0.9\n", NULL, 0, 2,
     "bad value '0.9' for 'corun_budget' in [policy]: expected a number >= 1 and <= 100"},
    {"[policy]\ncorun_room = 17\n", NULL, 0, 2,
     "bad value '17' for 'corun_room' in [policy]: expected a number >= 1 and <= 16"},
    {"[policy]\nschedule = mix.sched\n", NULL, 0, 2,
     "bad value 'mix.sched' for 'schedule' in [policy]: expected an absolute path of at most "
     "255 characters"},
    {"[policy]\ncorun_budget = 2\n\ncorun_budget = 3\n", NULL, 0, 4,
     "duplicate key 'corun_budget' in [policy] (first set on line 2)"},
    {"[daemon]\ncorun_budget = 2\n", NULL, 0, 2, "unknown key 'corun_budget' in [daemon]"},
};

static void test_errors(void)
{
    for (size_t i = 0; i < sizeof error_cases / sizeof error_cases[0]; i++) {
        const struct error_case *e = &error_cases[i];
        char name[32], dropin[PATH_MAX] = "", msg[1024];
        snprintf(name, sizeof name, "error-%zu", i);
        struct files f = files_at(name);
        put_main(&f, e->main);
        if (e->dropin)
            put_dropin(&f, "50-x.conf", e->dropin, dropin);
        snprintf(msg, sizeof msg, e->msg, f.main);
        expect_error(&f, e->in_dropin ? dropin : f.main, e->line, msg);
    }
}

/* Values longer than their field, lines longer than libinih's buffer, NUL bytes. */
static void test_long_values(void)
{
    struct files f = files_at("long");
    char text[1024], want[512], value[300];

    memset(value, 'a', 107);
    value[0] = '/';
    value[107] = '\0';
    snprintf(text, sizeof text, "[daemon]\nsocket = %s\n", value);
    put_main(&f, text);
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(c.socket, value);
    posd_config_free(&c);
    strcat(value, "a");
    snprintf(text, sizeof text, "[daemon]\nsocket = %s\n", value);
    put_main(&f, text);
    snprintf(want, sizeof want,
             "bad value '%s' for 'socket' in [daemon]: expected an absolute path of at most 107 "
             "characters",
             value);
    expect_error(&f, f.main, 2, want);

    memset(value, 'x', 64);
    value[64] = '\0';
    snprintf(text, sizeof text, "[rule r]\nmatch_app = %s\n", value);
    put_main(&f, text);
    snprintf(want, sizeof want,
             "bad value '%s' for 'match_app' in [rule r]: expected a pattern of 1..63 characters",
             value);
    expect_error(&f, f.main, 2, want);

    memset(value, 'x', 250);
    value[250] = '\0';
    snprintf(text, sizeof text, "[rule r]\nmatch_all = yes\n# %s\n", value);
    put_main(&f, text);
    expect_error(&f, f.main, 3, "line longer than 198 characters");

    static const char nul[] = "[daemon]\ntick_us = 1\0002\n";
    FILE *fp = fopen(f.main, "w");
    CU_ASSERT_FATAL(fp != NULL);
    CU_ASSERT(fwrite(nul, 1, sizeof nul - 1, fp) == sizeof nul - 1);
    CU_ASSERT_FATAL(fclose(fp) == 0);
    expect_error(&f, f.main, 2, "the line holds a NUL byte");
}

static void test_file_errors(void)
{
    struct files f = files_at("file-errors");
    put_main(&f, "[daemon]\n");
    /* a drop-in that cannot be read: here a link to nothing */
    char link[PATH_MAX + 16], target[PATH_MAX + 16];
    put_dropin(&f, "10-ok.conf", "[daemon]\n", NULL);
    snprintf(link, sizeof link, "%s/20-gone.conf", f.dropins);
    snprintf(target, sizeof target, "%s/nowhere", f.dir);
    CU_ASSERT_FATAL(symlink(target, link) == 0);
    expect_error(&f, link, 0, "cannot open: No such file or directory");
    CU_ASSERT_FATAL(unlink(link) == 0);
    /* a link to a regular file is a drop-in like any other */
    put_main(&f, "[daemon]\ntick_us = 300\n");
    CU_ASSERT_FATAL(symlink(f.main, link) == 0);
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL(load(&f, &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c.tick_us, 300);
    posd_config_free(&c);
    CU_ASSERT_FATAL(unlink(link) == 0);

    /* unreadable: only meaningful when not root (root reads anything) */
    if (geteuid() != 0) {
        char path[PATH_MAX];
        put_dropin(&f, "30-secret.conf", "[daemon]\n", path);
        CU_ASSERT_FATAL(chmod(path, 0) == 0);
        expect_error(&f, path, 0, "cannot open: Permission denied");
        CU_ASSERT_FATAL(unlink(path) == 0);
    }

    /* paths longer than a rule can record; messages longer than the buffer are cut */
    char longpath[1100], want[1200], err2[1200];
    size_t n = (size_t)snprintf(longpath, sizeof longpath, "%s", f.dir);
    while (n + 10 < sizeof longpath)
        n += (size_t)snprintf(longpath + n, sizeof longpath - n, "/aaaaaaaa");
    posd_config_defaults(&c);
    CU_ASSERT_EQUAL(posd_config_load(longpath, 1, NULL, &c, err2, sizeof err2), -ENAMETOOLONG);
    snprintf(want, sizeof want, "%s: path longer than 255 characters", longpath);
    CU_ASSERT(strncmp(err2, want, 700) == 0);
    CU_ASSERT_EQUAL(posd_config_load(f.main, 1, longpath, &c, err2, sizeof err2), 0);
    CU_ASSERT_EQUAL(c.tick_us, 300);
    posd_config_free(&c);

    /* the main file must be a regular file; the drop-in directory a directory */
    struct files g = files_at("file-errors-2");
    CU_ASSERT_FATAL(mkdir(g.main, 0755) == 0);
    expect_error(&g, g.main, 0, "not a regular file");
    CU_ASSERT_FATAL(rmdir(g.main) == 0);
    put_main(&g, "[daemon]\n");
    write_file(g.dropins, "[daemon]\n");
    expect_error(&g, g.dropins, 0, "cannot read the directory: Not a directory");
}

/* A load that fails leaves the running configuration exactly as it was. */
static void test_failed_load_keeps_config(void)
{
    struct files f = files_at("keep");
    put_main(&f, "[daemon]\npolicy = fifo\ntick_us = 300\n[class gold]\npriority = 4\n"
                 "[rule r]\nmatch_app = a*\nclass = gold\n");
    struct posd_config c;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(load(&f, &c, err, sizeof err), 0);
    struct posd_config before = c;
    struct posd_rule rule = c.rules[0];

    put_dropin(&f, "10-bad.conf",
               "[daemon]\ntick_us = 400\n[class gold]\npriority = 9\n"
               "[rule s]\nmatch_app = b*\nclass = nosuch\n",
               NULL);
    CU_ASSERT(posd_config_load(f.main, 0, f.dropins, &c, err, sizeof err) < 0);
    CU_ASSERT(memcmp(&before, &c, sizeof c) == 0);
    CU_ASSERT_PTR_EQUAL(c.rules, before.rules);
    CU_ASSERT(memcmp(&rule, &c.rules[0], sizeof rule) == 0);
    CU_ASSERT_EQUAL(class_of(&c, "gold")->priority, 4);

    /* and a good load replaces it whole: nothing of the old one stays */
    put_dropin(&f, "10-bad.conf", "[rule s]\nmatch_app = b*\n", NULL);
    put_main(&f, "[daemon]\ncredits = 5\n");
    CU_ASSERT_EQUAL(posd_config_load(f.main, 0, f.dropins, &c, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(c.policy, "pos");
    CU_ASSERT_EQUAL(c.tick_us, 200);
    CU_ASSERT_EQUAL(c.credits, 5);
    CU_ASSERT_PTR_NULL(posd_config_class(&c, "gold"));
    CU_ASSERT_EQUAL_FATAL(c.nrules, 1);
    CU_ASSERT_STRING_EQUAL(c.rules[0].name, "s");
    posd_config_free(&c);
}

/* --- the example files ---------------------------------------------------------------------- */

/* etc/ of the repository: from the working directory, else beside build/tests/. */
static int find_etc(char *out, size_t len)
{
    char exe[PATH_MAX];
    if (access("etc/posd.conf", R_OK) == 0)
        return snprintf(out, len, "etc") < (int)len ? 0 : -1;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return -1;
    exe[n] = '\0';
    snprintf(out, len, "%s/../../etc", dirname(exe));
    return 0;
}

/* Copies SRC to DST without the ';' that comments out the examples to enable. */
static void uncomment_examples(const char *src, const char *dst)
{
    FILE *in = fopen(src, "r"), *out = fopen(dst, "w");
    CU_ASSERT_FATAL(in && out);
    char line[512];
    while (fgets(line, sizeof line, in))
        fputs(line[0] == ';' ? line + 1 : line, out);
    fclose(in);
    CU_ASSERT_FATAL(fclose(out) == 0);
}

static void test_example_files(void)
{
    char etc[PATH_MAX], main_conf[PATH_MAX + 16], dropins[PATH_MAX + 16], example[PATH_MAX + 48];
    char err[1024];
    CU_ASSERT_FATAL(find_etc(etc, sizeof etc) == 0);
    snprintf(main_conf, sizeof main_conf, "%s/posd.conf", etc);
    snprintf(dropins, sizeof dropins, "%s/policy.d", etc);
    snprintf(example, sizeof example, "%s/10-example.conf", dropins);
    struct posd_config c, defaults;
    posd_config_defaults(&c);
    posd_config_defaults(&defaults);
    /* posd.conf states the defaults */
    int rc = posd_config_load(main_conf, 0, NULL, &c, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT(memcmp(&c, &defaults, sizeof c) == 0);

    /* the example rules, as shipped: none matches an ordinary process */
    rc = posd_config_load(main_conf, 0, dropins, &c, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(c.nrules, 3);
    struct posd_client_policy p = match(&c, ident("yolov8", 1000, 1000, "/user.slice/a"));
    CU_ASSERT_STRING_EQUAL(p.class_name, "latency");
    CU_ASSERT_DOUBLE_EQUAL(p.slo_ms, 33, 0);
    p = match(&c, ident("python3", 0, 0, "/system.slice/train-bert.service"));
    CU_ASSERT_STRING_EQUAL(p.class_name, "batch");
    CU_ASSERT_EQUAL(p.max_inflight, 4);
    CU_ASSERT_STRING_EQUAL(match(&c, ident("bash", 1001, 44, "/user.slice/a")).rule, "");

    /* and with the ';' examples enabled */
    struct files f = files_at("examples");
    CU_ASSERT_FATAL(mkdir(f.dropins, 0755) == 0);
    char enabled[DIR_MAX + 64];
    snprintf(enabled, sizeof enabled, "%s/10-example.conf", f.dropins);
    uncomment_examples(example, enabled);
    rc = posd_config_load(main_conf, 0, f.dropins, &c, err, sizeof err);
    if (rc < 0)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(c.nrules, 7);
    struct posd_identity trainer = ident("python3", 0, 0, "/kubepods.slice/x");
    snprintf(trainer.k8s_namespace, sizeof trainer.k8s_namespace, "ml-batch");
    snprintf(trainer.pod, sizeof trainer.pod, "train-0");
    snprintf(trainer.container, sizeof trainer.container, "trainer");
    p = match(&c, trainer);
    CU_ASSERT_STRING_EQUAL(p.class_name, "batch");
    CU_ASSERT_EQUAL(p.sm_share, 33);
    CU_ASSERT(p.mem_limit.bytes == 4ull << 30);
    p = match(&c, ident("bash", 1001, 44, "/user.slice/a"));
    CU_ASSERT_STRING_EQUAL(p.class_name, "batch");
    CU_ASSERT_EQUAL(p.max_inflight, 1);
    CU_ASSERT_EQUAL(p.device, 1);
    CU_ASSERT_EQUAL(p.sm_share, 50);
    CU_ASSERT(p.mem_limit.bytes == 8ull << 30 && p.mem_limit.ppm == 0);
    posd_config_free(&c);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("config", suite_init, suite_clean);
    POS_ADD_TEST(s, test_defaults);
    POS_ADD_TEST(s, test_missing_files);
    POS_ADD_TEST(s, test_every_global_key);
    POS_ADD_TEST(s, test_layering);
    POS_ADD_TEST(s, test_policy_parameters);
    POS_ADD_TEST(s, test_repeated_sections);
    POS_ADD_TEST(s, test_classes);
    POS_ADD_TEST(s, test_class_limit);
    POS_ADD_TEST(s, test_match);
    POS_ADD_TEST(s, test_app_name_alone_does_not_promote_another_uid);
    POS_ADD_TEST(s, test_match_all_and_default_class);
    POS_ADD_TEST(s, test_sm_share_from_class_and_rule);
    POS_ADD_TEST(s, test_mem_limit_values_in_binary_units_and_percent);
    POS_ADD_TEST(s, test_mem_limit_refuses_what_is_not_a_size);
    POS_ADD_TEST(s, test_mem_limit_format_reads_back);
    POS_ADD_TEST(s, test_mem_limit_from_class_and_rule_and_a_bad_reload_keeps_them);
    POS_ADD_TEST(s, test_user_and_group_names);
    POS_ADD_TEST(s, test_lexical);
    POS_ADD_TEST(s, test_errors);
    POS_ADD_TEST(s, test_long_values);
    POS_ADD_TEST(s, test_file_errors);
    POS_ADD_TEST(s, test_failed_load_keeps_config);
    POS_ADD_TEST(s, test_example_files);
    POS_ADD_TEST(s, test_pod_matchers);
    POS_ADD_TEST(s, test_kubernetes_section);
    POS_ADD_TEST(s, test_policy_dir_as_a_configmap);
}
