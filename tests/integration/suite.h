/* An integration suite's own world: a temporary directory that holds posd's socket,
 * configuration and log, a virtual GPU of its own, the environment its children inherit, its
 * posd, and the clean-up of all of it. One per test binary (util.h holds the smaller helpers). */
#ifndef POS_TESTS_INTEGRATION_SUITE_H
#define POS_TESTS_INTEGRATION_SUITE_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/integration/util.h"

struct suite {
    char dir[128];     /* /tmp/pos-test-NAME-PID: whatever the suite writes */
    char sock[160];    /* in dir: posd's socket, */
    char conf[160];    /* its configuration */
    char log[160];     /* and its log (its stderr, appended) */
    char instance[64]; /* its virtual GPU (POS_SIM_INSTANCE): test-NAME-PID */
    pid_t posd;        /* the posd it runs, -1 when none */
};

/* Makes suite S named NAME: its directory, posd's configuration there with the text CONF (no
 * file when NULL), and the environment every child inherits: the simulated driver
 * (LD_LIBRARY_PATH), the suite's own virtual GPU (POS_SIM_INSTANCE) and its posd's socket
 * (POS_SOCKET). Returns 0, or -1 when the directory could not be made or the configuration not
 * written. */
static inline int suite_open(struct suite *s, const char *name, const char *conf)
{
    s->posd = -1;
    snprintf(s->dir, sizeof s->dir, "/tmp/pos-test-%s-%d", name, (int)getpid());
    if (mkdir(s->dir, 0700) < 0 && errno != EEXIST)
        return -1;
    snprintf(s->sock, sizeof s->sock, "%s/posd.sock", s->dir);
    snprintf(s->conf, sizeof s->conf, "%s/posd.conf", s->dir);
    snprintf(s->log, sizeof s->log, "%s/posd.log", s->dir);
    snprintf(s->instance, sizeof s->instance, "test-%s-%d", name, (int)getpid());
    setenv("LD_LIBRARY_PATH", "build/sim", 1);
    setenv("POS_SIM_INSTANCE", s->instance, 1);
    setenv("POS_SOCKET", s->sock, 1);
    if (!conf)
        return 0;
    FILE *f = fopen(s->conf, "w");
    if (!f)
        return -1;
    fputs(conf, f);
    fclose(f);
    return 0;
}

/* Stops the suite's posd (SIGKILL: a clean stop is the tests' own business), removes its
 * virtual GPU's segment (the clients a test kills leave it) and its directory. Returns 0 or
 * -1. */
static inline int suite_close(struct suite *s)
{
    util_posd_stop(&s->posd, SIGKILL);
    util_sim_segment_remove(s->instance);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", s->dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Starts the suite's posd on its configuration, socket and log with ARGS after (NULL-terminated,
 * such as {"-p", "fifo", NULL}) and waits up to 2 s for its socket (util_posd_start_args).
 * Returns its pid (also in s->posd), -1 if fork failed; the caller checks the socket. */
static inline pid_t suite_posd_start_args(struct suite *s, const char *const *args)
{
    s->posd = util_posd_start_args(s->conf, s->sock, s->log, args);
    return s->posd;
}

/* The same under scheduling policy POLICY. */
static inline pid_t suite_posd_start(struct suite *s, const char *policy)
{
    const char *const args[] = {"-p", policy, NULL};
    return suite_posd_start_args(s, args);
}

/* The size of the suite's posd log now: what a test logs starts there. */
static inline long suite_log_size(const struct suite *s)
{
    struct stat st;
    return stat(s->log, &st) == 0 ? (long)st.st_size : 0;
}

/* The suite's posd log from offset FROM on (its posd runs share one file) in BUF. */
static inline void suite_log_from(const struct suite *s, long from, char *buf, size_t cap)
{
    buf[0] = '\0';
    FILE *f = fopen(s->log, "r");
    if (!f)
        return;
    fseek(f, from, SEEK_SET);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

#endif
