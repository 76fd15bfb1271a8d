/* posctl cdi end to end: the spec it writes is valid against our schema of CDI 0.6.0
 * (tests/kube/cdi_check.py), the same on stdout as in the file, takes posd's socket from -s, and
 * bad input is refused with a reason and the right exit status, leaving no file. Then a
 * container started by podman with the CDI device pos.dev/gpu=gpu0 from that spec, on a rootfs
 * built from this host (posapp and the libraries ldd lists; the shim and the simulated driver
 * reach it only through the spec's mounts, LD_PRELOAD only through its env), runs posapp under
 * a real posd on the host: posd registers it and counts its launches, and posapp finishes.
 * Without podman (scripts/deps.sh --podman), root or a working container runtime, that part
 * says why and is skipped. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kube/cdi.h"
#include "tests/cunit_main.h"
#include "tests/integration/suite.h"

static struct suite s;
static char cwd[512];

static int init(void)
{
    if (!getcwd(cwd, sizeof cwd) || suite_open(&s, "posctl-cdi", "") < 0)
        return -1;
    char run[256];
    snprintf(run, sizeof run, "%s/run", s.dir);
    snprintf(s.sock, sizeof s.sock, "%s/run/posd.sock", s.dir); /* a directory of its own */
    return mkdir(run, 0755);
}

static int clean(void)
{
    return suite_close(&s);
}

/* Runs the shell line FMT..., its stderr joined to its stdout in OUT; its exit status (-1 for a
 * line too long to run) */
static int sh(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int sh(char *out, size_t cap, const char *fmt, ...)
{
    static char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd - 8, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof cmd - 8)
        return -1;
    strcat(cmd, " 2>&1");
    return util_run_stdout(cmd, out, cap);
}

/* posctl cdi ARGS, stdout and stderr in OUT; its exit status */
static int posctl_cdi(const char *args, char *out, size_t cap)
{
    return sh(out, cap, "build/posctl cdi %s", args);
}

static int check_spec(const char *path, char *out, size_t cap)
{
    return sh(out, cap, "/usr/bin/python3 tests/kube/cdi_check.py tests/kube/cdi-schema.json '%s'",
              path);
}

/* the options of a spec for this build: its shim, the suite's posd, the simulated driver */
static const char *build_opts(void)
{
    static char buf[1536];
    snprintf(buf, sizeof buf,
             "--shim %s/build/libposshim.so --socket %s --dev-dir none --driver-dir %s/build/sim",
             cwd, s.sock, cwd);
    return buf;
}

static void test_posctl_cdi_writes_a_valid_spec(void)
{
    char out[65536], args[2048], spec[256];
    snprintf(spec, sizeof spec, "%s/cdi/pos.json", s.dir);
    snprintf(args, sizeof args, "--output %s %s", spec, build_opts());
    CU_ASSERT_EQUAL(posctl_cdi(args, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "wrote"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "gpu0 all"));
    CU_ASSERT_EQUAL(check_spec(spec, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "ok\n");
    struct stat st;
    CU_ASSERT(stat(spec, &st) == 0 && (st.st_mode & 07777) == 0644);
    /* the same document on stdout */
    CU_ASSERT_EQUAL(
        sh(out, sizeof out, "build/posctl cdi --output - %s | cmp - %s", build_opts(), spec), 0);
    /* several GPUs: one device each and all, in 0.5.0 for older runtimes */
    snprintf(args, sizeof args, "--output - --gpus 0-2 --cdi-version 0.5.0 %s", build_opts());
    CU_ASSERT_EQUAL(sh(out, sizeof out, "build/posctl cdi %s > %s/cdi/three.json", args, s.dir), 0);
    snprintf(spec, sizeof spec, "%s/cdi/three.json", s.dir);
    CU_ASSERT_EQUAL(check_spec(spec, out, sizeof out), 0);
    CU_ASSERT_EQUAL(sh(out, sizeof out,
                       "/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
                       "print(d[\"cdiVersion\"], d[\"kind\"], *[x[\"name\"] for x in "
                       "d[\"devices\"]])' %s",
                       spec),
                    0);
    CU_ASSERT_STRING_EQUAL(out, "0.5.0 pos.dev/gpu gpu0 gpu1 gpu2 all\n");
    /* the socket comes from posctl's -s when cdi has no --socket: its directory is mounted, and
     * POS_SOCKET names the socket inside */
    CU_ASSERT_EQUAL(sh(out, sizeof out,
                       "build/posctl -s %s/run/other.sock cdi --output - --shim "
                       "%s/build/libposshim.so --dev-dir none",
                       s.dir, cwd),
                    0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"POS_SOCKET=/run/posd/other.sock\""));
    snprintf(args, sizeof args, "\"hostPath\": \"%s/run\"", s.dir);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, args));
}

static void test_posctl_cdi_refuses_bad_input(void)
{
    char out[8192], args[2048], spec[256];
    snprintf(spec, sizeof spec, "%s/bad/pos.json", s.dir);
    static const struct {
        const char *args;
        int status;
        const char *says;
    } cases[] = {
        {"--gpus 0,0", 2, "GPU 0 twice"},
        {"--gpus one", 2, "bad GPU list 'one'"},
        {"--cdi-version 1.0", 2, "bad --cdi-version '1.0'"},
        {"--frobnicate", 2, "bad option '--frobnicate' for cdi"},
        {"extra", 2, "unexpected argument 'extra'"},
        {"--shim /nonexistent/libposshim.so", 1,
         "the shim /nonexistent/libposshim.so is not a file"},
        {"--socket relative.sock", 1, "posd's socket 'relative.sock' is not an absolute path"},
        {"--socket /nonexistent/posd.sock", 1, "socket directory /nonexistent is not there"},
        {"--dev-dir /nonexistent", 2, "cannot read /nonexistent"},
        {"--driver-dir /nonexistent", 1, "driver directory /nonexistent is not there"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* the case's option last: it overrides build_opts' */
        snprintf(args, sizeof args, "--output %s %s %s", spec, build_opts(), cases[i].args);
        int rc = posctl_cdi(args, out, sizeof out);
        CU_ASSERT_EQUAL(rc, cases[i].status);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, cases[i].says));
        CU_ASSERT_EQUAL(util_count(out, "\n"), 1); /* one line */
        if (rc != cases[i].status || !strstr(out, cases[i].says))
            fprintf(stderr, "\n  posctl cdi %s: %d: %s", cases[i].args, rc, out);
        CU_ASSERT_NOT_EQUAL(access(spec, F_OK), 0);
    }
}

/* ---- a container under posd ----------------------------------------------------------------- */

/* Why podman cannot be tried here, or NULL */
static const char *podman_missing(void)
{
    char out[256];
    if (util_run("command -v podman", out, sizeof out) != 0)
        return "podman is not installed (scripts/deps.sh --podman installs Debian's)";
    if (geteuid() != 0)
        return "podman runs containers with CDI devices as root only here (rootless podman "
               "cannot bind the host's /dev/shm and device nodes the spec names)";
    if (util_run("command -v unshare", out, sizeof out) != 0)
        return "no unshare(1) (util-linux)";
    const char *rt = getenv("POS_TEST_SAN_RUNTIME");
    if (rt && *rt)
        return "a sanitized shim needs its runtime first in LD_PRELOAD, which the spec's "
               "LD_PRELOAD (the shim alone) does not give";
    return NULL;
}

/* A rootfs in DIR/rootfs from this host: posapp, a model, and every library that posapp, the
 * shim, the simulated driver and its device process load (the shim and driver themselves come
 * from the spec's mounts). */
static int make_rootfs(char *out, size_t cap)
{
    return sh(out, cap,
              "set -e; R=%s/rootfs; mkdir -p $R/bin $R/models $R/proc $R/sys $R/dev $R/tmp "
              "$R/etc; cp build/posapp /bin/true $R/bin/; cp sim/models/resnet18.model $R/models/; "
              "for f in build/posapp build/libposshim.so build/sim/libcuda.so.1 "
              "build/sim/pos-sim-device; do ldd $f; done | awk '$2 == \"=>\" && $3 ~ /^\\// "
              "{ print $3 } $1 ~ /^\\// { print $1 }' | sort -u | "
              "grep -v '^%s/' | while read l; do mkdir -p $R$(dirname $l); cp -L $l $R$l; done",
              s.dir, cwd);
}

/* podman run of COMMAND with OPTS in a mount namespace of its own whose /run is
 * a fresh tmpfs holding only the spec SPEC in /run/cdi (podman 4.3 reads CDI specs from
 * /etc/cdi and /var/run/cdi only, and has no option to look elsewhere: the host's /run is left
 * alone), with storage of the test's own. Two things this VM needs, both only undone in that
 * namespace: crun refuses a hybrid cgroup layout whose cgroup2 mount has a controller ("cgroups
 * in hybrid mode not supported, drop all controllers from cgroupv2"), so the cgroup2 mount of a
 * hybrid layout is unmounted there (crun then uses cgroup v1); and root here lacks
 * CAP_SYS_RESOURCE, so crun may not set podman's default RLIMIT_NOFILE and RLIMIT_NPROC above
 * the hard limits: the container gets lower ones. */
static int podman_run(const char *spec, const char *opts, const char *command, char *out,
                      size_t cap)
{
    return sh(out, cap,
              "unshare -m --propagation private sh -c 'set -e; "
              "if [ \"$(stat -f -c %%T /sys/fs/cgroup)\" = tmpfs ] && "
              "mountpoint -q /sys/fs/cgroup/unified; then umount /sys/fs/cgroup/unified; fi; "
              "mount -t tmpfs tmpfs /run; mkdir /run/cdi; cp %s /run/cdi/pos.json; "
              "exec timeout 120 podman --root %s/storage --runroot %s/runroot --cgroup-manager "
              "cgroupfs run --rm --network none --pid host --ulimit nofile=1024:1024 "
              "--ulimit nproc=1024:1024 --env POS_SIM_INSTANCE=%s %s --rootfs %s/rootfs %s'",
              spec, s.dir, s.dir, s.instance, opts, s.dir, command);
}

static void test_a_container_given_the_cdi_device_runs_under_posd(void)
{
    static char out[65536];
    char args[2048], spec[256];
    const char *why = podman_missing();
    if (why) {
        fprintf(stderr, "\ntest_posctl_cdi: the container part is skipped: %s\n", why);
        return;
    }
    int made = make_rootfs(out, sizeof out);
    if (made != 0)
        fprintf(stderr, "\n  the rootfs: %s", out);
    CU_ASSERT_EQUAL_FATAL(made, 0);
    /* can podman run a container here at all? (no device, no posd) */
    if (podman_run("/dev/null", "", "/bin/true", out, sizeof out) != 0) {
        char *nl = strchr(out, '\n');
        if (nl && nl[1] == '\0')
            *nl = '\0';
        fprintf(stderr,
                "\ntest_posctl_cdi: the container part is skipped: podman cannot run a "
                "container on this machine: %s\n",
                out);
        return;
    }
    CU_ASSERT_FATAL(suite_posd_start(&s, "pos") > 0);
    CU_ASSERT_EQUAL_FATAL(access(s.sock, F_OK), 0);
    snprintf(spec, sizeof spec, "%s/pos.json", s.dir);
    const char *opts = "--env POS_APP=cdi-container --device pos.dev/gpu=gpu0";
    const char *posapp = "/bin/posapp --model /models/resnet18.model --requests 20";
    /* the default version first; a runtime whose CDI library predates 0.6.0 (Debian 12's
     * podman 4.3) refuses it, and gets the same devices as 0.5.0 */
    const char *versions[] = {KUBE_CDI_VERSION, "0.5.0"};
    int rc = -1;
    for (size_t v = 0; v < 2; v++) {
        snprintf(args, sizeof args, "--output %s --cdi-version %s %s", spec, versions[v],
                 build_opts());
        CU_ASSERT_EQUAL_FATAL(posctl_cdi(args, out, sizeof out), 0);
        rc = podman_run(spec, opts, posapp, out, sizeof out);
        if (rc == 0 || !strstr(out, "unresolvable CDI devices") || v == 1)
            break;
        fprintf(stderr,
                "\ntest_posctl_cdi: podman refused the spec of cdiVersion %s (%s); trying 0.5.0\n",
                versions[v], "its CDI library is older");
    }
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"requests\":20"));
    if (rc != 0 || !strstr(out, "\"requests\":20"))
        fprintf(stderr, "\n  podman run: %d: %s", rc, out);
    /* posd registered the container's process and counted its launches */
    static char log[65536];
    suite_log_from(&s, 0, log, sizeof log);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "app 'cdi-container'"));
    struct pos_device_stats dev;
    struct pos_client_stats cs[4];
    CU_ASSERT(util_stats(s.sock, &dev, cs, 4) >= 0);
    CU_ASSERT(dev.submitted >= (uint64_t)util_number(out, "launches"));
    CU_ASSERT(dev.submitted > 0);
    if (!strstr(log, "app 'cdi-container'"))
        fprintf(stderr, "\n  posd's log:\n%s", log);
    util_posd_stop(&s.posd, SIGTERM);
}

void pos_test_register(void)
{
    CU_pSuite p = POS_ADD_SUITE("posctl cdi", init, clean);
    POS_ADD_TEST(p, test_posctl_cdi_writes_a_valid_spec);
    POS_ADD_TEST(p, test_posctl_cdi_refuses_bad_input);
    POS_ADD_TEST(p, test_a_container_given_the_cdi_device_runs_under_posd);
}
