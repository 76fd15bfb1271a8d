/* make install PREFIX=... DESTDIR=... lays out a working installation and make uninstall takes
 * it away: the installed tools run from there (--help; possim finds the installed models and
 * scenarios; posapp runs on the installed simulated driver), the man pages render without
 * warnings, the systemd unit points at the prefix, and nothing is left after uninstall. Runs
 * make itself, on the build already made (make test builds everything first). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cunit_main.h"
#include "tests/integration/util.h"

#define PREFIX "/opt/pos-test"

static char dest[96], sanitize[128];

static int suite_init(void)
{
    snprintf(dest, sizeof dest, "/tmp/pos-test-install-%d", (int)getpid());
    /* the build's own sanitizer setting, so that install does not rebuild */
    if (util_read_file("build/.sanitize", sanitize, sizeof sanitize) < 0)
        sanitize[0] = '\0';
    return 0;
}

static int suite_clean(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dest);
    return system(cmd) == 0 ? 0 : -1;
}

static int make(const char *target, char *out, size_t cap)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory %s "
             "PREFIX=" PREFIX " DESTDIR=%s SANITIZE='%s'",
             target, dest, sanitize);
    return util_run(cmd, out, cap);
}

static int exists(const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s%s", dest, rel);
    return access(path, F_OK) == 0;
}

static void test_install_runs_and_uninstall_removes_it(void)
{
    static char out[65536];
    char cmd[1024];
    CU_ASSERT_EQUAL_FATAL(make("install", out, sizeof out), 0);
    static const char *const files[] = {
        PREFIX "/bin/posd",
        PREFIX "/bin/posctl",
        PREFIX "/bin/posstat",
        PREFIX "/bin/possim",
        PREFIX "/bin/postrace",
        PREFIX "/bin/posapp",
        PREFIX "/bin/pos-device-plugin",
        PREFIX "/lib/pos/libposshim.so",
        PREFIX "/lib/pos/sim/libcuda.so.1",
        PREFIX "/share/man/man8/posd.8",
        PREFIX "/share/man/man8/posctl.8",
        PREFIX "/share/man/man8/pos-device-plugin.8",
        PREFIX "/share/man/man1/posstat.1",
        PREFIX "/share/man/man1/possim.1",
        PREFIX "/share/man/man5/posd.conf.5",
        PREFIX "/share/man/man7/libposshim.7",
        PREFIX "/share/pos/models/resnet18.model",
        PREFIX "/share/pos/possim/mixed.ini",
        PREFIX "/share/doc/pos/posd.conf.example",
        PREFIX "/lib/systemd/system/posd.service",
        "/etc/posd/posd.conf",
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        CU_ASSERT(exists(files[i]));
        if (!exists(files[i]))
            fprintf(stderr, "\n  not installed: %s", files[i]);
    }
    /* the installed tools run from there */
    static const char *const tools[] = {"posd", "posctl", "posstat", "possim", "postrace",
                                        "pos-device-plugin"};
    for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s" PREFIX "/bin/%s --help", dest, tools[i]);
        CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "usage:"));
    }
    snprintf(cmd, sizeof cmd,
             "cd / && LD_LIBRARY_PATH=%s" PREFIX "/lib/pos/sim POS_SIM_INSTANCE=test-install-%d "
             "%s" PREFIX "/bin/posapp --model resnet18 --requests 2",
             dest, (int)getpid(), dest);
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0); /* finds the installed model by itself */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "\"requests\":2"));
    snprintf(cmd, sizeof cmd,
             "cd / && %s" PREFIX "/bin/possim %s" PREFIX "/share/pos/possim/mixed.ini", dest, dest);
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "detector"));
    /* man pages: troff that renders without a warning */
    snprintf(cmd, sizeof cmd,
             "for m in %s" PREFIX "/share/man/man*/*; do man --warnings -l -Tutf8 \"$m\" "
             ">/dev/null || echo FAILED $m; done",
             dest);
    if (util_run("command -v man", out, sizeof out) == 0) {
        CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
        CU_ASSERT_STRING_EQUAL(out, "");
        if (out[0])
            fprintf(stderr, "\n  man: %s", out);
    } else {
        fprintf(stderr, "test_install: no man(1) here: the man pages' rendering skipped\n");
    }
    snprintf(cmd, sizeof cmd,
             "grep -c '^ExecStart=" PREFIX "/bin/posd -f$' %s" PREFIX
             "/lib/systemd/system/posd.service",
             dest);
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
    /* uninstall leaves no file behind */
    CU_ASSERT_EQUAL_FATAL(make("uninstall", out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "find %s -type f -o -type l", dest);
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "");
    if (out[0])
        fprintf(stderr, "\n  left after uninstall:\n%s", out);
}

/* A make target whose tool is absent says which Debian package to install, in one line,
 * rather than failing on a missing command: make format and make bench on a PATH that holds
 * only make and a shell. */
static void test_a_missing_tool_names_its_debian_package(void)
{
    char bin[128], cmd[512], out[8192];
    snprintf(bin, sizeof bin, "%s-bin", dest);
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s && for c in make bash sh env; do ln -sf \"$(command -v $c)\" %s/$c; "
             "done",
             bin, bin);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    static const char *const cases[][2] = {
        {"format", "make format: needs clang-format, which is not installed: apt-get install "
                   "clang-format"},
        {"check-static", "make check-static: needs cppcheck, which is not installed: apt-get "
                         "install cppcheck"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd,
                 "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL PATH=%s make -s --no-print-directory "
                 "%s -o build/.deps-ok -o build/gen/cu_errors.h",
                 bin, cases[i][0]);
        CU_ASSERT_NOT_EQUAL(util_run(cmd, out, sizeof out), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, cases[i][1]));
        if (!strstr(out, cases[i][1]))
            fprintf(stderr, "\n  make %s said:\n%s", cases[i][0], out);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", bin);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("install", suite_init, suite_clean);
    POS_ADD_TEST(s, test_install_runs_and_uninstall_removes_it);
    POS_ADD_TEST(s, test_a_missing_tool_names_its_debian_package);
}
