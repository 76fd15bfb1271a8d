/* The build's sanitizer switch (make SANITIZE=...): every compile and link line carries
 * -fsanitize=..., and the value is remembered in the build directory, so switching it makes
 * every object out of date. The eBPF switch (POS_NO_BPF=1, what make does on a machine
 * without BTF or a BPF-targeting clang): posd builds without telemetry, make says so in one
 * line, and that posd refuses telemetry = on. Runs make itself, in a scratch build directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cunit_main.h"
#include "tests/integration/util.h"

static char tmp[64];

/* Runs make ARGS with B=tmp CC=cc outside the caller's make (no jobserver, no make level);
 * returns its exit status, its output in OUT (may be NULL). */
static int make(const char *args, char *out, size_t cap)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory B=%s CC=cc %s 2>&1",
             tmp, args);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t n = 0, got;
    char sink[4096];
    while ((got = fread(out ? out + n : sink, 1, out ? cap - 1 - n : sizeof sink, f)) > 0)
        if (out)
            n += got;
    if (out)
        out[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int suite_init(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/pos-test-build-%d", (int)getpid());
    char cmd[512];
    /* the package check is not what is tested: it passed for this build */
    snprintf(cmd, sizeof cmd, "mkdir -p %s && touch %s/.deps-ok", tmp, tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static int suite_clean(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    return system(cmd) == 0 ? 0 : -1;
}

/* Counts the compiler lines of a dry run of everything, and those with FLAG. */
static void count_lines(const char *sanitize, const char *flag, int *lines, int *with)
{
    static char out[1 << 20];
    char args[256];
    snprintf(args, sizeof args, "-n -B SANITIZE=%s test", sanitize);
    CU_ASSERT_EQUAL(make(args, out, sizeof out), 0);
    *lines = *with = 0;
    for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
        if (strncmp(l, "cc ", 3) != 0)
            continue;
        (*lines)++;
        *with += strstr(l, flag) != NULL;
    }
}

static void test_every_compile_and_link_line_is_sanitized(void)
{
    int lines, with;
    count_lines("address,undefined", " -fsanitize=address,undefined ", &lines, &with);
    CU_ASSERT(lines > 80); /* every object, library, program and test */
    CU_ASSERT_EQUAL(with, lines);
    if (with != lines)
        fprintf(stderr, "%d of %d compiler lines carry -fsanitize=address,undefined\n", with,
                lines);
    count_lines("thread", " -fsanitize=thread ", &lines, &with);
    CU_ASSERT_EQUAL(with, lines);
    count_lines("", "-fsanitize", &lines, &with);
    CU_ASSERT(lines > 80);
    CU_ASSERT_EQUAL(with, 0);
}

static void test_switching_sanitize_rebuilds(void)
{
    char obj[256];
    snprintf(obj, sizeof obj, "%s/obj/tools/posapp_stats.o", tmp);
    char args[512];
    snprintf(args, sizeof args, "%s", obj);
    CU_ASSERT_EQUAL_FATAL(make(args, NULL, 0), 0);
    snprintf(args, sizeof args, "-q %s", obj);
    CU_ASSERT_EQUAL(make(args, NULL, 0), 0); /* up to date */
    snprintf(args, sizeof args, "-q SANITIZE=undefined %s", obj);
    CU_ASSERT_EQUAL(make(args, NULL, 0), 1); /* another value: out of date */
    snprintf(args, sizeof args, "SANITIZE=undefined %s", obj);
    CU_ASSERT_EQUAL(make(args, NULL, 0), 0);
    snprintf(args, sizeof args, "-q SANITIZE=undefined %s", obj);
    CU_ASSERT_EQUAL(make(args, NULL, 0), 0);
    snprintf(args, sizeof args, "-q %s", obj);
    CU_ASSERT_EQUAL(make(args, NULL, 0), 1); /* and back */
}

static void test_pos_no_bpf_builds_posd_without_telemetry(void)
{
    static char out[1 << 16];
    char args[512], path[256];
    snprintf(args, sizeof args, "POS_NO_BPF=1 %s/posd", tmp);
    CU_ASSERT_EQUAL_FATAL(make(args, out, sizeof out), 0);
    /* one line says why, once */
    CU_ASSERT_EQUAL(util_count(out, "posd is built without eBPF telemetry: POS_NO_BPF=1\n"), 1);
    CU_ASSERT_PTR_NULL(strstr(out, "-target bpf"));
    CU_ASSERT_PTR_NULL(strstr(out, "gen skeleton"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "-DPOS_NO_BPF"));
    /* that posd runs without it and refuses telemetry = on, saying why */
    snprintf(path, sizeof path, "%s/on.conf", tmp);
    FILE *f = fopen(path, "w");
    fputs("[daemon]\ntelemetry = on\n", f);
    fclose(f);
    snprintf(args, sizeof args, "%s/posd -f -c %s -s %s/posd.sock 2>&1", tmp, path, tmp);
    FILE *p = popen(args, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "telemetry = on, but it cannot run: posd was built without "
                                       "eBPF"));
    /* and without the switch, on this machine, the programs are built (when it can) */
    snprintf(args, sizeof args, "-n %s/obj/sched/telemetry.o", tmp);
    CU_ASSERT_EQUAL(make(args, out, sizeof out), 0);
    if (access("/sys/kernel/btf/vmlinux", R_OK) == 0) {
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "-target bpf"));
    } else {
        fprintf(stderr, "%s: no BTF here: the part with eBPF skipped\n", __func__);
    }
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("build", suite_init, suite_clean);
    POS_ADD_TEST(s, test_every_compile_and_link_line_is_sanitized);
    POS_ADD_TEST(s, test_switching_sanitize_rebuilds);
    POS_ADD_TEST(s, test_pos_no_bpf_builds_posd_without_telemetry);
}
