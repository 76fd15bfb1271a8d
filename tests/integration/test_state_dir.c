/* posd's files as a hostile local user would try them (issue 25): the state directory is a
 * place only posd's user writes (made private when missing; one another user owns, one that
 * is a symbolic link or one others may write is refused at start with one line, and no file
 * of root's outside it is written); a FIFO where the profiles are neither blocks posd's start
 * nor keeps SIGTERM from ending it; the temporaries a killed posd's saves left are removed at
 * the next start; `posctl profiles load` follows no symbolic link anywhere on the path and
 * opens only regular files. The parts played by another user run as uid 65534 (setpriv), so
 * they need root and say so when skipped. Real processes: posd, posctl. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cunit_main.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

#define OUT_MAX 16384
#define NOBODY  65534

static struct suite suite;
static char *state_was; /* POSD_STATE_DIR of the run, put back at the end */

static int suite_init(void)
{
    const char *v = getenv("POSD_STATE_DIR");
    state_was = v ? strdup(v) : NULL;
    return suite_open(&suite, "state-dir", "[daemon]\nlog_level = info\n");
}

static int suite_clean(void)
{
    util_posd_stop(&suite.posd, SIGKILL); /* a test that stopped half-way left it */
    if (state_was)
        setenv("POSD_STATE_DIR", state_was, 1);
    free(state_was);
    return suite_close(&suite);
}

static int is_root(const char *test)
{
    if (geteuid() == 0)
        return 1;
    fprintf(stderr, "%s: needs root (plays another user as uid %d): skipped\n", test, NOBODY);
    return 0;
}

/* Runs posd with state directory STATE until it exits (at most 5 s): its exit status, its
 * output in OUT, and how long it ran in *SECONDS. */
static int posd_refused(const char *state, char *out, size_t cap, double *seconds)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "POSD_STATE_DIR=%s timeout 5 build/posd -f -c %s -s %s", state,
             suite.conf, suite.sock);
    double t0 = util_now();
    int rc = util_run(cmd, out, cap);
    *seconds = util_now() - t0;
    return rc;
}

/* Runs shell line CMD as uid and gid 65534 with no groups; its exit status. */
static int as_nobody(const char *cmd)
{
    char line[1500], out[OUT_MAX];
    snprintf(line, sizeof line, "setpriv --reuid=%d --regid=%d --clear-groups sh -c '%s'", NOBODY,
             NOBODY, cmd);
    return util_run(line, out, sizeof out);
}

/* A file of root's outside any state directory: TEXT in it, mode 0644. */
static void victim_make(char *path, size_t cap, const char *text)
{
    snprintf(path, cap, "%s/victim", suite.dir);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
    chmod(path, 0644);
}

static int victim_is(const char *path, const char *text)
{
    char buf[256] = "";
    return util_read_file(path, buf, sizeof buf) >= 0 && strcmp(buf, text) == 0;
}

/* A missing state directory is made, mode 0700, and posd's profiles are saved in it. */
static void test_a_missing_state_directory_is_made_private(void)
{
    char state[200], out[OUT_MAX];
    snprintf(state, sizeof state, "%s/made", suite.dir);
    setenv("POSD_STATE_DIR", state, 1);
    CU_ASSERT_FATAL(suite_posd_start(&suite, "priority") > 0);
    struct stat st;
    CU_ASSERT_EQUAL_FATAL(stat(state, &st), 0);
    CU_ASSERT(S_ISDIR(st.st_mode));
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0700);
    CU_ASSERT_EQUAL(st.st_uid, geteuid());
    char cmd[400];
    snprintf(cmd, sizeof cmd, "build/posctl -s %s profiles save", suite.sock);
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "kernel profiles saved to"));
    util_posd_stop(&suite.posd, SIGTERM);
}

/* Another user made the state directory first (as with state_dir = /tmp/pos) and planted
 * symbolic links at the names posd writes, to a file of root's: posd refuses the directory
 * at once with one line that says whose it is, and the file is untouched. */
static void test_a_state_directory_another_user_owns_is_refused(void)
{
    if (!is_root(__func__))
        return;
    char state[240], victim[200], cmd[1400], out[OUT_MAX];
    victim_make(victim, sizeof victim, "root's own\n");
    char tmp[180]; /* a directory anyone may create in, as /tmp */
    snprintf(tmp, sizeof tmp, "%s/tmp", suite.dir);
    mkdir(tmp, 0700);
    chmod(tmp, 01777);
    snprintf(state, sizeof state, "%s/pos", tmp);
    chmod(suite.dir, 0755);
    snprintf(cmd, sizeof cmd,
             "mkdir -m 0777 %s && ln -s %s %s/profiles && for i in $(seq 1 64); do "
             "ln -s %s %s/profiles.tmp.$i; done",
             state, victim, state, victim, state);
    CU_ASSERT_EQUAL_FATAL(as_nobody(cmd), 0);
    chmod(state, 0700); /* refused as theirs, whatever the mode */
    double took;
    CU_ASSERT_EQUAL(posd_refused(state, out, sizeof out, &took), 1);
    CU_ASSERT(took < 1.0 * util_time_scale());
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "belongs to uid 65534"));
    CU_ASSERT_EQUAL(util_count(out, "\n"), 1);
    CU_ASSERT(victim_is(victim, "root's own\n"));
    CU_ASSERT_NOT_EQUAL(access(suite.sock, F_OK), 0); /* no socket for clients to find */
    if (!strstr(out, "belongs to uid 65534"))
        fprintf(stderr, "\n  posd said: %s", out);
    chmod(suite.dir, 0700);
}

/* A state directory that is a symbolic link (to a directory of root's, even) is refused. */
static void test_a_state_directory_that_is_a_symbolic_link_is_refused(void)
{
    char real[200], link[200], out[OUT_MAX];
    snprintf(real, sizeof real, "%s/real", suite.dir);
    snprintf(link, sizeof link, "%s/link", suite.dir);
    mkdir(real, 0700);
    CU_ASSERT_EQUAL_FATAL(symlink(real, link), 0);
    double took;
    CU_ASSERT_EQUAL(posd_refused(link, out, sizeof out, &took), 1);
    CU_ASSERT(took < 1.0 * util_time_scale());
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "is a symbolic link"));
    CU_ASSERT_EQUAL(util_count(out, "\n"), 1);
    if (!strstr(out, "is a symbolic link"))
        fprintf(stderr, "\n  posd said: %s", out);
}

/* A state directory others may write (mode 0777, or group-writable) is refused, with what to
 * do. */
static void test_a_state_directory_others_may_write_is_refused(void)
{
    char state[200], out[OUT_MAX];
    snprintf(state, sizeof state, "%s/open", suite.dir);
    mkdir(state, 0700);
    static const mode_t modes[] = {0777, 0770, 0702};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        chmod(state, modes[i]);
        double took;
        CU_ASSERT_EQUAL(posd_refused(state, out, sizeof out, &took), 1);
        CU_ASSERT(took < 1.0 * util_time_scale());
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "may be written by others"));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "chmod go-w"));
        if (!strstr(out, "may be written by others"))
            fprintf(stderr, "\n  posd (mode %04o) said: %s", (unsigned)modes[i], out);
    }
}

/* Starts posd with configuration CONF, waits up to 1 s for "listening on" in its log (in LOG),
 * then sends SIGTERM and waits up to 1 s for it to end: 1 when it both listened and ended
 * with status 0. */
static int starts_and_ends(const char *conf, char *log, size_t cap)
{
    truncate(suite.log, 0);
    double t0 = util_now();
    const char *const args[] = {"-p", "priority", NULL};
    suite.posd = util_posd_start_args(conf, suite.sock, suite.log, args);
    if (suite.posd <= 0)
        return 0;
    int listening = 0;
    while (!listening && util_now() - t0 < 1.0 * util_time_scale()) {
        util_read_file(suite.log, log, cap);
        listening = strstr(log, "listening on") != NULL;
        usleep(10000);
    }
    double t1 = util_now();
    kill(suite.posd, SIGTERM);
    int rc = -1;
    while (util_now() - t1 < 1.0 * util_time_scale()) {
        int st;
        if (waitpid(suite.posd, &st, WNOHANG) == suite.posd) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            suite.posd = -1;
            break;
        }
        usleep(10000);
    }
    util_posd_stop(&suite.posd, SIGKILL);
    util_read_file(suite.log, log, cap);
    if (!listening || rc != 0)
        fprintf(stderr, "\n  posd: listening %d, exit %d; log:\n%s", listening, rc, log);
    return listening && rc == 0;
}

/* A FIFO where the profiles are (a user that could write the directory before it was posd's,
 * or an admin's mistake), or as the admin's profile import ([policy] profiles): posd neither
 * waits for a writer nor stops hearing SIGTERM; it says the file is not a regular file,
 * starts without it within 1 s, and ends within 1 s of SIGTERM. */
static void test_a_fifo_for_profiles_neither_blocks_nor_deafens_posd(void)
{
    char state[200], fifo[240], conf[240], log[OUT_MAX];
    snprintf(state, sizeof state, "%s/fifo", suite.dir);
    snprintf(fifo, sizeof fifo, "%s/profiles", state);
    mkdir(state, 0700);
    CU_ASSERT_EQUAL_FATAL(mkfifo(fifo, 0600), 0);
    setenv("POSD_STATE_DIR", state, 1);
    CU_ASSERT(starts_and_ends(suite.conf, log, sizeof log));
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "profiles: not a regular file"));
    /* the admin's import a FIFO, the state directory's file gone */
    unlink(fifo);
    char import[240];
    snprintf(import, sizeof import, "%s/import.fifo", suite.dir);
    CU_ASSERT_EQUAL_FATAL(mkfifo(import, 0600), 0);
    snprintf(conf, sizeof conf, "%s/import.conf", suite.dir);
    FILE *f = fopen(conf, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "[daemon]\nlog_level = info\n[policy]\nprofiles = %s\n", import);
    fclose(f);
    CU_ASSERT(starts_and_ends(conf, log, sizeof log));
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "import.fifo: not a regular file"));
}

/* What a posd killed during saves left (profiles.tmp.*) is removed at the next start; other
 * files stay. */
static void test_leftovers_of_killed_saves_are_removed_at_start(void)
{
    char state[200], path[300], log[OUT_MAX];
    snprintf(state, sizeof state, "%s/left", suite.dir);
    mkdir(state, 0700);
    static const char *const left[] = {"profiles.tmp.4242", "profiles.tmp.0123456789abcdef",
                                       "profiles.tmp.x"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", state, left[i]);
        FILE *f = fopen(path, "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fputs("pos-profiles 1\n", f);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/notes.tmp.1", state);
    fclose(fopen(path, "w"));
    setenv("POSD_STATE_DIR", state, 1);
    truncate(suite.log, 0);
    CU_ASSERT_FATAL(suite_posd_start(&suite, "priority") > 0);
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", state, left[i]);
        CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
    }
    snprintf(path, sizeof path, "%s/notes.tmp.1", state);
    CU_ASSERT_EQUAL(access(path, F_OK), 0);
    util_posd_stop(&suite.posd, SIGTERM);
    util_read_file(suite.log, log, sizeof log);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "removed 3 temporary files"));
}

/* `posctl profiles load` as root: a symbolic link as the file or anywhere on its path is
 * refused (posctl sends the path as given), so is a FIFO (at once: posd does not open it to
 * read) and a device node; the same file by its own path, or relative to the working
 * directory, loads. */
static void test_profiles_load_follows_no_link_and_opens_only_regular_files(void)
{
    char state[200], file[240], dir[200], cmd[1400], out[OUT_MAX];
    snprintf(state, sizeof state, "%s/load", suite.dir);
    setenv("POSD_STATE_DIR", state, 1);
    CU_ASSERT_FATAL(suite_posd_start(&suite, "priority") > 0);
    snprintf(dir, sizeof dir, "%s/files", suite.dir);
    mkdir(dir, 0700);
    snprintf(file, sizeof file, "%s/good", dir);
    FILE *f = fopen(file, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("pos-profiles 1\ndevice sms 0\n"
          "k 0 00000000000000aa 1,1,1 32,1,1 10 1000.0 10.0 10 0 1.0000\nend 1\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "cd %s && ln -s good link && ln -s %s dirlink && mkfifo fifo && "
             "ln -s /etc/shadow shadow",
             dir, dir);
    CU_ASSERT_EQUAL_FATAL(util_run(cmd, out, sizeof out), 0);
    struct {
        const char *path, *said;
    } refused[] = {{"link", "a symbolic link on the path"},
                   {"dirlink/good", "a symbolic link on the path"},
                   {"shadow", "a symbolic link on the path"},
                   {"fifo", "not a regular file"},
                   {"/dev/null", "not a regular file"},
                   {"../files/good", "'..' on the path"}};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const char *p = refused[i].path;
        char full[400];
        if (p[0] == '/')
            snprintf(full, sizeof full, "%s", p);
        else
            snprintf(full, sizeof full, "%s/%s", dir, p);
        snprintf(cmd, sizeof cmd, "timeout 5 build/posctl -s %s profiles load %s", suite.sock,
                 full);
        double t0 = util_now();
        CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 1);
        CU_ASSERT(util_now() - t0 < 1.0 * util_time_scale());
        CU_ASSERT_PTR_NOT_NULL(strstr(out, refused[i].said));
        if (!strstr(out, refused[i].said))
            fprintf(stderr, "\n  profiles load %s: %s", full, out);
    }
    snprintf(cmd, sizeof cmd, "build/posctl -s %s profiles load %s", suite.sock, file);
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "(1 new)"));
    char cwd[512];
    CU_ASSERT_PTR_NOT_NULL_FATAL(getcwd(cwd, sizeof cwd));
    snprintf(cmd, sizeof cmd, "cd %s && %s/build/posctl -s %s profiles load good", dir, cwd,
             suite.sock);
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "loaded"));
    util_posd_stop(&suite.posd, SIGTERM);
}

/* ---- saves beside the loop ----------------------------------------------------------------- */

#define BIG_TABLE 200000

/* A profile file of BIG_TABLE profiles over four uids (each under profile_user_max). */
static void big_profiles(char *path, size_t cap)
{
    snprintf(path, cap, "%s/big.profiles", suite.dir);
    if (access(path, F_OK) == 0)
        return;
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fprintf(f, "pos-profiles 1\ndevice sms 0\n");
    for (int i = 1; i <= BIG_TABLE; i++)
        fprintf(f, "k %d %016x %d,1,1 128,1,1 10 %d.0 1.0 10 0 1.0000\n", 1000 + i % 4, i,
                i % 64 + 1, 1000 + i % 500);
    fprintf(f, "end %d\n", BIG_TABLE);
    fclose(f);
}

/* posd's first child (a save's), or 0. */
static pid_t child_of(pid_t parent)
{
    char path[64], buf[64] = "";
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)parent, (int)parent);
    return util_read_file(path, buf, sizeof buf) == 0 ? (pid_t)atoi(buf) : 0;
}

/* `posctl profiles save` in the background, its output into OUT (a file). */
static pid_t save_start(const char *out)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl("build/posctl", "posctl", "-s", suite.sock, "profiles", "save", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits up to SECONDS (times the time scale) for PID; its exit status, or -1 if it runs on. */
static int wait_for(pid_t pid, double seconds)
{
    double end = util_now() + seconds * util_time_scale();
    int st;
    while (util_now() < end) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(2000);
    }
    return -1;
}

/* A `posctl profiles save` whose save's child is caught as it starts and, when STOP, stopped
 * there: the child's pid (0: none seen in five tries; each save of BIG_TABLE profiles lasts
 * a few hundred ms), the posctl's in *ASKER, its output file OUT. */
static pid_t catch_save(pid_t posd, int stop, pid_t *asker, const char *out)
{
    for (int tries = 0; tries < 5; tries++) {
        *asker = save_start(out);
        double end = util_now() + 5 * util_time_scale();
        while (util_now() < end) {
            pid_t c = child_of(posd);
            if (c > 0) {
                if (stop)
                    kill(c, SIGSTOP);
                return c;
            }
            if (waitpid(*asker, NULL, WNOHANG) == *asker)
                break; /* answered before its child was seen: again */
        }
    }
    return 0;
}

/* Whether FILE (a profile file) ends with "end N". */
static int profiles_end(const char *file, long n)
{
    char cmd[400], out[256];
    snprintf(cmd, sizeof cmd, "tail -n 1 %s", file);
    return util_run(cmd, out, sizeof out) == 0 && strtol(out + 4, NULL, 10) == n &&
           strncmp(out, "end ", 4) == 0;
}

/* How many temporaries (profiles.tmp.*) are in STATE. */
static int temporaries(const char *state)
{
    char cmd[400], out[256];
    snprintf(cmd, sizeof cmd, "ls -A %s | grep -c '^profiles\\.tmp\\.'", state);
    util_run(cmd, out, sizeof out);
    return atoi(out);
}

static void load_big(void)
{
    char big[300], cmd[600], out[OUT_MAX];
    big_profiles(big, sizeof big);
    snprintf(cmd, sizeof cmd, "build/posctl -s %s profiles load %s", suite.sock, big);
    CU_ASSERT_EQUAL_FATAL(util_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "200000 kernel profiles now"));
}

/* Where a save test keeps things: its state directory NAME (and the profiles in it), the first
 * asker's output; a posd started on it with BIG_TABLE profiles loaded. */
struct save_place {
    char state[200], file[300], out1[300];
};

static void save_place_start(struct save_place *p, const char *name)
{
    snprintf(p->state, sizeof p->state, "%s/%s", suite.dir, name);
    snprintf(p->file, sizeof p->file, "%s/profiles", p->state);
    snprintf(p->out1, sizeof p->out1, "%s/save1.out", suite.dir);
    setenv("POSD_STATE_DIR", p->state, 1);
    CU_ASSERT_FATAL(suite_posd_start(&suite, "priority") > 0);
    load_big();
}

/* A save of 200,000 profiles is written by a child of posd's: with that child stopped, posd
 * still answers at once; the posctl that asked, and one that asks meanwhile, wait for a save
 * that began after they asked (longer than posd keeps an idle connection), and both are told
 * when it is written; no temporary stays. */
static void test_a_save_runs_beside_the_loop_and_its_askers_wait_for_it(void)
{
    char out2[300], out[OUT_MAX], cmd[600];
    struct save_place pl;
    save_place_start(&pl, "beside");
    const char *state = pl.state, *file = pl.file, *out1 = pl.out1;
    snprintf(out2, sizeof out2, "%s/save2.out", suite.dir);
    pid_t a1 = 0, a2 = 0;
    pid_t child = catch_save(suite.posd, 1, &a1, out1);
    CU_ASSERT(child > 0); /* a save in posd's own thread has no child */
    if (child <= 0) {
        util_posd_stop(&suite.posd, SIGTERM);
        return;
    }
    snprintf(cmd, sizeof cmd, "build/posctl -s %s status", suite.sock);
    double t0 = util_now();
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
    CU_ASSERT(util_now() - t0 < 1.0 * util_time_scale());
    a2 = save_start(out2);
    /* both wait while the save is stopped, longer than an idle connection is kept (2 s) */
    CU_ASSERT_EQUAL(wait_for(a1, 2.5), -1);
    CU_ASSERT_EQUAL(wait_for(a2, 0.01), -1);
    kill(child, SIGCONT);
    CU_ASSERT_EQUAL(wait_for(a1, 20), 0);
    CU_ASSERT_EQUAL(wait_for(a2, 20), 0);
    util_read_file(out1, out, sizeof out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "200000 kernel profiles saved"));
    util_read_file(out2, out, sizeof out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "200000 kernel profiles saved"));
    CU_ASSERT(profiles_end(file, BIG_TABLE));
    CU_ASSERT_EQUAL(temporaries(state), 0);
    util_posd_stop(&suite.posd, SIGTERM);
}

/* A reset while a save runs ends that save first: the older table is never renamed over the
 * reset (the file says 0 profiles), and whoever asked for the save is told of the next one.
 * SIGTERM while a save is stopped: posd ends it and exits within a second, its own last save
 * complete, the asker told, no temporary left. */
static void test_a_reset_and_the_exit_end_a_running_save_first(void)
{
    char out[OUT_MAX], cmd[600];
    struct save_place pl;
    save_place_start(&pl, "abort");
    const char *state = pl.state, *file = pl.file, *out1 = pl.out1;
    pid_t asker = 0;
    pid_t child = catch_save(suite.posd, 1, &asker, out1);
    CU_ASSERT(child > 0);
    if (child <= 0) {
        util_posd_stop(&suite.posd, SIGTERM);
        return;
    }
    snprintf(cmd, sizeof cmd, "build/posctl -s %s profiles reset", suite.sock);
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "forgotten"));
    int ended = kill(child, 0) < 0 && errno == ESRCH;
    CU_ASSERT(ended);
    if (!ended)
        kill(child, SIGCONT);
    CU_ASSERT_EQUAL(wait_for(asker, 20), 0);
    util_read_file(out1, out, sizeof out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "0 kernel profiles saved"));
    usleep(300000); /* an older save let go would rename its table over by now */
    CU_ASSERT(profiles_end(file, 0));
    CU_ASSERT_EQUAL(temporaries(state), 0);
    /* the exit */
    load_big();
    child = catch_save(suite.posd, 1, &asker, out1);
    CU_ASSERT(child > 0);
    if (child <= 0) {
        util_posd_stop(&suite.posd, SIGTERM);
        return;
    }
    double t0 = util_now();
    kill(suite.posd, SIGTERM);
    int rc = wait_for(suite.posd, 5);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT(util_now() - t0 < 1.0 * util_time_scale());
    if (rc < 0)
        util_posd_stop(&suite.posd, SIGKILL);
    suite.posd = -1;
    ended = kill(child, 0) < 0 && errno == ESRCH;
    CU_ASSERT(ended);
    if (!ended) {
        kill(child, SIGKILL);
        usleep(100000);
    }
    CU_ASSERT_EQUAL(wait_for(asker, 5), 0);
    util_read_file(out1, out, sizeof out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "200000 kernel profiles saved"));
    CU_ASSERT(profiles_end(file, BIG_TABLE));
    CU_ASSERT_EQUAL(temporaries(state), 0);
}

/* Ten kills during saves of 200,000 profiles: of the child alone (posd removes what it left
 * and tells the asker), or of posd and its child together (the next start removes it). After
 * the last start no temporary is left and the profiles are whole. */
static void test_ten_kills_during_saves_leave_no_temporary(void)
{
    char out[OUT_MAX];
    struct save_place pl;
    save_place_start(&pl, "kills");
    const char *state = pl.state, *file = pl.file, *out1 = pl.out1;
    int left = 0;
    for (int i = 0; i < 10; i++) {
        pid_t asker = 0;
        pid_t child = catch_save(suite.posd, 0, &asker, out1);
        CU_ASSERT(child > 0);
        if (child <= 0)
            break;
        usleep(20000 * (i % 5 + 1)); /* part-way through its writing */
        if (i % 2 == 0) {
            kill(child, SIGKILL);
            CU_ASSERT_EQUAL(wait_for(asker, 20), 1);
            util_read_file(out1, out, sizeof out);
            CU_ASSERT_PTR_NOT_NULL(strstr(out, "killed by signal 9"));
            if (!strstr(out, "killed by signal 9"))
                fprintf(stderr, "\n  the asker of a killed save said: %s", out);
            CU_ASSERT_EQUAL(temporaries(state), 0);
        } else {
            kill(suite.posd, SIGKILL);
            kill(child, SIGKILL);
            wait_for(suite.posd, 5);
            wait_for(asker, 5);
            left += temporaries(state);
            unlink(suite.sock);
            truncate(suite.log, 0);
            CU_ASSERT_FATAL(suite_posd_start(&suite, "priority") > 0);
            char cmd[400];
            snprintf(cmd, sizeof cmd, "build/posctl -s %s status", suite.sock);
            CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 0);
            CU_ASSERT_EQUAL(temporaries(state), 0);
            load_big(); /* no save was ever let finish */
        }
    }
    util_posd_stop(&suite.posd, SIGTERM);
    CU_ASSERT(left > 0); /* the kills did leave some, for the starts to remove */
    CU_ASSERT_EQUAL(temporaries(state), 0);
    CU_ASSERT(profiles_end(file, BIG_TABLE));
    util_read_file(suite.log, out, sizeof out);
    if (left)
        CU_ASSERT_PTR_NOT_NULL(strstr(out, "temporary file"));
}

void pos_test_register(void)
{
    CU_pSuite s = CU_add_suite("state_dir", suite_init, suite_clean);
    POS_ADD_TEST(s, test_a_missing_state_directory_is_made_private);
    POS_ADD_TEST(s, test_a_state_directory_another_user_owns_is_refused);
    POS_ADD_TEST(s, test_a_state_directory_that_is_a_symbolic_link_is_refused);
    POS_ADD_TEST(s, test_a_state_directory_others_may_write_is_refused);
    POS_ADD_TEST(s, test_a_fifo_for_profiles_neither_blocks_nor_deafens_posd);
    POS_ADD_TEST(s, test_leftovers_of_killed_saves_are_removed_at_start);
    POS_ADD_TEST(s, test_profiles_load_follows_no_link_and_opens_only_regular_files);
    POS_ADD_TEST(s, test_a_save_runs_beside_the_loop_and_its_askers_wait_for_it);
    POS_ADD_TEST(s, test_a_reset_and_the_exit_end_a_running_save_first);
    POS_ADD_TEST(s, test_ten_kills_during_saves_leave_no_temporary);
}
