/* The CDI spec (kube/cdi.c): JSON strings escaped and only UTF-8 written; GPU lists; the spec
 * carries exactly kube_edits_make's edits for each device, gpuN and all, and is valid against our
 * schema of CDI 0.6.0 (tests/kube/cdi_check.py, tests/kube/cdi-schema.json), in a directory whose
 * name needs every escape; the file is replaced atomically, 0644 whatever the umask, and a
 * failure leaves the old one and no temporary file; bad input is refused with a reason and
 * writes nothing. Device nodes are made with mknod (root); without root those parts say so and
 * are skipped. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kube/cdi.h"
#include "tests/cunit_main.h"

/* A directory name that needs every kind of JSON escape, and UTF-8 that needs none */
#define ODD_NAME "we\"ird\\ dir\n\t\x01 \xc3\xa9\xe2\x82\xac"

static char top[128], world[256];
static int have_nodes; /* mknod worked (root) */

static int make_node(const char *dir, const char *name, unsigned maj, unsigned min)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return mknod(p, S_IFCHR | 0666, makedev(maj, min));
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
}

static void path_in(char *out, size_t cap, const char *rel)
{
    snprintf(out, cap, "%s/%s", world, rel);
}

static int suite_init(void)
{
    snprintf(top, sizeof top, "/tmp/pos-test-cdi-%d", (int)getpid());
    snprintf(world, sizeof world, "%s/" ODD_NAME, top);
    if (mkdir(top, 0755) < 0 || mkdir(world, 0755) < 0)
        return -1;
    char p[512];
    static const char *const dirs[] = {"run", "driver", "dev", "empty"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        path_in(p, sizeof p, dirs[i]);
        if (mkdir(p, 0755) < 0)
            return -1;
    }
    path_in(p, sizeof p, "libposshim.so");
    touch(p);
    path_in(p, sizeof p, "dev");
    have_nodes = make_node(p, "nvidiactl", 195, 255) == 0 &&
                 make_node(p, "nvidia-uvm", 511, 0) == 0 && make_node(p, "nvidia0", 195, 0) == 0 &&
                 make_node(p, "nvidia2", 195, 2) == 0;
    if (!have_nodes)
        fprintf(stderr, "test_cdi: mknod: %s (not root?): the device-node parts are skipped\n",
                strerror(errno));
    /* not a device: auto skips it, and a GPU asked for by it is refused */
    path_in(p, sizeof p, "dev/nvidia5");
    touch(p);
    return 0;
}

static int suite_clean(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
    return system(cmd) == 0 ? 0 : -1;
}

/* The options of a node with the world's shim, socket, driver, and DEV device nodes */
static struct kube_edits_opts opts_of(int with_driver, int with_dev)
{
    static char shim[512], sock[512], driver[512], dev[512];
    path_in(shim, sizeof shim, "libposshim.so");
    path_in(sock, sizeof sock, "run/posd.sock");
    path_in(driver, sizeof driver, "driver");
    path_in(dev, sizeof dev, "dev");
    return (struct kube_edits_opts){.shim = shim,
                                    .socket = sock,
                                    .driver_dir = with_driver ? driver : NULL,
                                    .dev_dir = with_dev ? dev : NULL};
}

/* ---- JSON strings --------------------------------------------------------------------------- */

static int json_of(const char *s, char *out, size_t cap)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int rc = kube_cdi_json_string(f, s);
    fclose(f);
    snprintf(out, cap, "%s", buf);
    free(buf);
    return rc;
}

static void test_json_strings_are_escaped_and_utf8_kept(void)
{
    static const char *const cases[][2] = {
        {"plain /opt/pos", "\"plain /opt/pos\""},
        {"a\"b\\c", "\"a\\\"b\\\\c\""},
        {"\n\t\r\b\f", "\"\\n\\t\\r\\b\\f\""},
        {"\x01\x1f\x7f", "\"\\u0001\\u001f\\u007f\""},
        {"/", "\"/\""},
        {"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\""},
        {"", "\"\""},
    };
    char out[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CU_ASSERT_EQUAL(json_of(cases[i][0], out, sizeof out), 0);
        CU_ASSERT_STRING_EQUAL(out, cases[i][1]);
    }
}

static void test_strings_that_are_not_utf8_are_refused(void)
{
    static const char *const bad[] = {
        "\xff",             /* never in UTF-8 */
        "a\x80",            /* a continuation alone */
        "\xc0\xaf",         /* overlong '/' */
        "\xe0\x80\xaf",     /* overlong, three bytes */
        "\xed\xa0\x80",     /* a surrogate */
        "\xf4\x90\x80\x80", /* over U+10FFFF */
        "\xe2\x82",         /* cut short */
    };
    char out[64];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(json_of(bad[i], out, sizeof out), -EINVAL);
        CU_ASSERT_STRING_EQUAL(out, ""); /* nothing written */
    }
}

/* ---- GPU lists ------------------------------------------------------------------------------ */

static void test_gpu_lists(void)
{
    int g[KUBE_CDI_MAX_GPUS];
    size_t n;
    char err[256];
    CU_ASSERT_EQUAL(kube_cdi_parse_gpus("0,2-3", NULL, g, &n, err, sizeof err), 0);
    CU_ASSERT(n == 3 && g[0] == 0 && g[1] == 2 && g[2] == 3);
    CU_ASSERT_EQUAL(kube_cdi_parse_gpus("3,1", NULL, g, &n, err, sizeof err), 0);
    CU_ASSERT(n == 2 && g[0] == 1 && g[1] == 3);
    CU_ASSERT_EQUAL(kube_cdi_parse_gpus("0-63", NULL, g, &n, err, sizeof err), 0);
    CU_ASSERT_EQUAL(n, 64);
    static const char *const bad[] = {"",   "x",  "1,1", "0-1,1", "0-64", "64", "2-1",
                                      "1,", ",1", "-1",  "1-",    "1 ",   "0x1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CU_ASSERT_EQUAL(kube_cdi_parse_gpus(bad[i], NULL, g, &n, err, sizeof err), -EINVAL);
        CU_ASSERT(err[0] != '\0');
    }
    char dir[512];
    path_in(dir, sizeof dir, "empty");
    CU_ASSERT_EQUAL(kube_cdi_parse_gpus("auto", dir, g, &n, err, sizeof err), 0);
    CU_ASSERT(n == 1 && g[0] == 0); /* no node: the one device of the simulated driver */
    CU_ASSERT_EQUAL(kube_cdi_parse_gpus("auto", "/nonexistent", g, &n, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent"));
    if (!have_nodes)
        return;
    path_in(dir, sizeof dir, "dev");
    CU_ASSERT_EQUAL(kube_cdi_parse_gpus("auto", dir, g, &n, err, sizeof err), 0);
    CU_ASSERT(n == 2 && g[0] == 0 && g[1] == 2); /* not nvidiactl, nvidia-uvm, the file nvidia5 */
}

/* ---- the spec is the edits ------------------------------------------------------------------ */

static void put_hex(FILE *f, const char *s)
{
    fputc(' ', f);
    if (!*s)
        fputs("-", f); /* never: every string the edits make has a character */
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        fprintf(f, "%02x", *p);
}

/* The edits of GPUS[0..N) as tests/kube/cdi_check.py reads them, for device NAME */
static int put_expected(FILE *f, const char *name, const struct kube_edits_opts *o, const int *gpus,
                        size_t n)
{
    static struct kube_edits e;
    char err[256];
    if (kube_edits_make(o, gpus, n, &e, err, sizeof err) < 0) {
        fprintf(stderr, "\n  kube_edits_make: %s", err);
        return -1;
    }
    fprintf(f, "device %s\n", name);
    for (size_t i = 0; i < e.n_env; i++) {
        char kv[1024];
        snprintf(kv, sizeof kv, "%s=%s", e.env[i].name, e.env[i].value);
        fputs("env", f);
        put_hex(f, kv);
        fputc('\n', f);
    }
    for (size_t i = 0; i < e.n_mounts; i++) {
        fputs("mount", f);
        put_hex(f, e.mounts[i].host);
        put_hex(f, e.mounts[i].container);
        fprintf(f, " %s\n", e.mounts[i].read_only ? "ro" : "rw");
    }
    for (size_t i = 0; i < e.n_nodes; i++) {
        fputs("node", f);
        put_hex(f, e.nodes[i].path);
        fprintf(f, " %c %u %u %s\n", e.nodes[i].type, e.nodes[i].major, e.nodes[i].minor,
                e.nodes[i].perms);
    }
    return 0;
}

/* Writes the spec of GPUS with O to the world's out/pos.json, the edits to expected, and runs
 * the checker; returns its exit status, its output in OUT */
static int spec_against_edits(const struct kube_edits_opts *o, const int *gpus, size_t n,
                              const char *version, char *out, size_t cap)
{
    char spec[512], want[512], err[512], cmd[2048];
    path_in(spec, sizeof spec, "out/a/pos.json"); /* out/a is made by the writer */
    path_in(want, sizeof want, "expected");
    int rc = kube_cdi_write_file(spec, o, gpus, n, version, err, sizeof err);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc < 0) {
        fprintf(stderr, "\n  kube_cdi_write_file: %s", err);
        return -1;
    }
    FILE *f = fopen(want, "w");
    if (!f)
        return -1;
    fprintf(f, "version %s\n", version ? version : KUBE_CDI_VERSION);
    for (size_t i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "gpu%d", gpus[i]);
        put_expected(f, name, o, &gpus[i], 1);
    }
    put_expected(f, "all", o, gpus, n);
    fclose(f);
    /* the paths have every character a shell or JSON cares about: handed over in the
     * environment, not on the command line */
    setenv("CDI_SPEC", spec, 1);
    setenv("CDI_WANT", want, 1);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 tests/kube/cdi_check.py tests/kube/cdi-schema.json \"$CDI_SPEC\" "
             "\"$CDI_WANT\" 2>&1");
    out[0] = '\0';
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t got = fread(out, 1, cap - 1, p);
    out[got] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_the_spec_carries_the_edits_of_each_device(void)
{
    char out[8192];
    const int one[] = {0}, two[] = {0, 2};
    struct kube_edits_opts o = opts_of(1, 0);
    /* no device nodes: a spec for the simulated driver (its directory and /dev/shm mounted) */
    CU_ASSERT_EQUAL(spec_against_edits(&o, one, 1, NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "ok\n");
    o = opts_of(0, 0);
    CU_ASSERT_EQUAL(spec_against_edits(&o, two, 2, KUBE_CDI_VERSION_OLD, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "ok\n");
    if (strcmp(out, "ok\n") != 0)
        fprintf(stderr, "\n  %s", out);
    if (!have_nodes)
        return;
    /* the nodes of a GPU node: the control nodes in every device, each GPU's own in its device
     * and in all */
    o = opts_of(1, 1);
    CU_ASSERT_EQUAL(spec_against_edits(&o, two, 2, NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "ok\n");
    if (strcmp(out, "ok\n") != 0)
        fprintf(stderr, "\n  %s", out);
}

/* The checker itself refuses a spec that differs from the edits: one of them edited by hand
 * (a mount made read-write, a device's node taken away) and one that is not JSON. */
static void test_the_checker_sees_a_difference(void)
{
    char out[8192], cmd[1024];
    const int one[] = {0};
    struct kube_edits_opts o = opts_of(1, 0);
    CU_ASSERT_EQUAL_FATAL(spec_against_edits(&o, one, 1, NULL, out, sizeof out), 0);
    static const char *const edits[] = {
        "s/\"ro\", \"nosuid\"/\"rw\", \"nosuid\"/", /* a read-only mount made writable */
        "s/POS_SOCKET=/POS_SOCKEX=/",               /* an env entry changed */
        "s/\"name\": \"all\"/\"name\": \"every\"/", /* a device renamed */
        "s/\"cdiVersion\": \"0.6.0\"/\"cdiVersion\": \"six\"/", /* against the schema */
        "s/\\\\\"/\"/",                                         /* an escape taken away: not JSON */
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        setenv("CDI_SED", edits[i], 1);
        snprintf(cmd, sizeof cmd,
                 "cp \"$CDI_SPEC\" \"$CDI_SPEC.orig\" && sed -i \"$CDI_SED\" \"$CDI_SPEC\" && "
                 "! cmp -s \"$CDI_SPEC\" \"$CDI_SPEC.orig\" && ! /usr/bin/python3 "
                 "tests/kube/cdi_check.py tests/kube/cdi-schema.json \"$CDI_SPEC\" \"$CDI_WANT\" "
                 ">/dev/null; rc=$?; mv \"$CDI_SPEC.orig\" \"$CDI_SPEC\"; exit $rc");
        int rc = system(cmd);
        CU_ASSERT_EQUAL(rc, 0);
        if (rc != 0)
            fprintf(stderr, "\n  the checker passed a spec edited by %s", edits[i]);
    }
}

/* ---- the file ------------------------------------------------------------------------------- */

static int count_entries(const char *dir)
{
    char cmd[1024], out[64];
    setenv("CDI_DIR", dir, 1);
    snprintf(cmd, sizeof cmd, "ls -A \"$CDI_DIR\" | wc -l");
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    out[0] = '\0';
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    pclose(p);
    return atoi(out);
}

static void test_the_file_is_replaced_atomically_and_kept_on_failure(void)
{
    char dir[512], spec[600], second[600], err[512], buf[64];
    path_in(dir, sizeof dir, "atomic");
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    snprintf(spec, sizeof spec, "%s/pos.json", dir);
    snprintf(second, sizeof second, "%s/old.json", dir);
    FILE *f = fopen(spec, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("old", f);
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(link(spec, second), 0); /* the old inode, seen from a second name */
    const int one[] = {0};
    struct kube_edits_opts o = opts_of(1, 0);
    mode_t old_mask = umask(077);
    int rc = kube_cdi_write_file(spec, &o, one, 1, NULL, err, sizeof err);
    umask(old_mask);
    CU_ASSERT_EQUAL(rc, 0);
    struct stat st, lt;
    CU_ASSERT_EQUAL(stat(spec, &st), 0);
    CU_ASSERT_EQUAL(stat(second, &lt), 0);
    CU_ASSERT_NOT_EQUAL(st.st_ino, lt.st_ino); /* a new file renamed over it, not rewritten */
    CU_ASSERT_EQUAL(st.st_mode & 07777, 0644);
    f = fopen(second, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    buf[fread(buf, 1, sizeof buf - 1, f)] = '\0';
    fclose(f);
    CU_ASSERT_STRING_EQUAL(buf, "old");
    CU_ASSERT_EQUAL(count_entries(dir), 2); /* no temporary file left */
    /* a failure (no such shim) leaves the spec as it was, and nothing beside it */
    CU_ASSERT_EQUAL(unlink(second), 0);
    CU_ASSERT_EQUAL(link(spec, second), 0);
    o.shim = "/nonexistent/libposshim.so";
    CU_ASSERT_EQUAL(kube_cdi_write_file(spec, &o, one, 1, NULL, err, sizeof err), -ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent/libposshim.so"));
    CU_ASSERT_EQUAL(stat(spec, &st), 0);
    CU_ASSERT_EQUAL(stat(second, &lt), 0);
    CU_ASSERT_EQUAL(st.st_ino, lt.st_ino);
    CU_ASSERT_EQUAL(count_entries(dir), 2);
    /* a directory is not a file name */
    o = opts_of(1, 0);
    CU_ASSERT_EQUAL(kube_cdi_write_file("/tmp/", &o, one, 1, NULL, err, sizeof err), -EINVAL);
}

/* Each refusal returns its errno, says why in one line, and writes nothing. */
static void test_bad_input_is_refused_with_a_reason(void)
{
    char err[512], odd[600];
    const int one[] = {0}, twice[] = {0, 0}, five[] = {5}, seven[] = {7};
    struct {
        struct kube_edits_opts o;
        const int *gpus;
        size_t n;
        const char *version;
        int rc;
        const char *says;
    } cases[] = {
        {opts_of(1, 0), one, 0, NULL, -EINVAL, "no GPU"},
        {opts_of(1, 0), twice, 2, NULL, -EINVAL, "twice"},
        {opts_of(1, 0), one, 1, "0.7.0", -EINVAL, "0.7.0"},
        {opts_of(1, 1), five, 1, NULL, -ENOTTY, "nvidia5 is not a device node"},
        {opts_of(1, 1), seven, 1, NULL, -ENOENT, "nvidia7"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].o.dev_dir && !have_nodes)
            continue;
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        err[0] = '\0';
        int rc = kube_cdi_write(f, &cases[i].o, cases[i].gpus, cases[i].n, cases[i].version, err,
                                sizeof err);
        fclose(f);
        CU_ASSERT_EQUAL(rc, cases[i].rc);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, cases[i].says));
        CU_ASSERT_EQUAL(len, 0);
        if (rc != cases[i].rc || !strstr(err, cases[i].says))
            fprintf(stderr, "\n  case %zu: %d '%s'", i, rc, err);
        free(buf);
    }
    /* a relative shim, a socket directory that is not there, a shim path that is not UTF-8 */
    struct kube_edits_opts o = opts_of(0, 0);
    o.shim = "libposshim.so";
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CU_ASSERT_EQUAL(kube_cdi_write(f, &o, one, 1, NULL, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "absolute"));
    o = opts_of(0, 0);
    o.socket = "/nonexistent/posd.sock";
    CU_ASSERT_EQUAL(kube_cdi_write(f, &o, one, 1, NULL, err, sizeof err), -ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent"));
    path_in(odd, sizeof odd, "shim-\xff.so");
    touch(odd);
    o = opts_of(0, 0);
    o.shim = odd;
    CU_ASSERT_EQUAL(kube_cdi_write(f, &o, one, 1, NULL, err, sizeof err), -EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "UTF-8"));
    fclose(f);
    CU_ASSERT_EQUAL(len, 0);
    free(buf);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("cdi", suite_init, suite_clean);
    POS_ADD_TEST(s, test_json_strings_are_escaped_and_utf8_kept);
    POS_ADD_TEST(s, test_strings_that_are_not_utf8_are_refused);
    POS_ADD_TEST(s, test_gpu_lists);
    POS_ADD_TEST(s, test_the_spec_carries_the_edits_of_each_device);
    POS_ADD_TEST(s, test_the_checker_sees_a_difference);
    POS_ADD_TEST(s, test_the_file_is_replaced_atomically_and_kept_on_failure);
    POS_ADD_TEST(s, test_bad_input_is_refused_with_a_reason);
}
