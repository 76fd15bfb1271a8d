/* What the Kubernetes tests share: whether the Python fakes of tests/kube/ can run here (Debian's
 * /usr/bin/python3 with grpcio and protobuf), and a fake as a child process that the test talks
 * to in lines: commands on its stdin, JSON lines back on its stdout. */
#ifndef POS_TESTS_INTEGRATION_KUBE_H
#define POS_TESTS_INTEGRATION_KUBE_H

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/util.h"

#define KUBE_PYTHON "/usr/bin/python3" /* Debian's, which has python3-grpcio */

/* NULL when the fakes can run here, else why not (for the skip message). */
static inline const char *kube_fakes_missing(void)
{
    static char why[256];
    char out[512];
    if (access(KUBE_PYTHON, X_OK) != 0)
        return KUBE_PYTHON " is not there (apt-get install python3)";
    if (util_run(KUBE_PYTHON " -c 'import grpc, google.protobuf'", out, sizeof out) != 0) {
        snprintf(why, sizeof why,
                 KUBE_PYTHON " has no grpcio or protobuf (apt-get install python3-grpcio "
                             "python3-protobuf; scripts/deps.sh does)");
        return why;
    }
    if (access("build/gen/kube/deviceplugin_v1beta1.desc", R_OK) != 0 ||
        access("build/gen/kube/podresources_v1.desc", R_OK) != 0)
        return "the descriptor sets build/gen/kube/*.desc are not built (make)";
    return NULL;
}

struct kube_fake {
    pid_t pid;
    int in, out; /* its stdin (we write), its stdout (we read) */
    char buf[1 << 16];
    size_t len;
};

/* Starts ARGV (NULL-terminated; ARGV[0] a script under tests/kube/) under KUBE_PYTHON, its
 * stderr appended to LOG. Returns 0 or -1. */
static inline int kube_fake_start(struct kube_fake *f, const char *const *argv, const char *log)
{
    int in[2], out[2];
    memset(f, 0, sizeof *f);
    f->pid = -1;
    if (pipe2(in, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(out, O_CLOEXEC) < 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0)
            dup2(fd, 2);
        const char *a[32] = {KUBE_PYTHON};
        int k = 1;
        for (int i = 0; argv[i] && k < 31; i++)
            a[k++] = argv[i];
        a[k] = NULL;
        execv(KUBE_PYTHON, (char *const *)a);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    f->pid = pid;
    f->in = in[1];
    f->out = out[0];
    return pid > 0 ? 0 : -1;
}

/* The next line the fake writes (without its newline) into LINE (CAP bytes), waiting at most
 * TIMEOUT_S seconds (times util_time_scale). Returns 0, or -1 on a timeout or its end. */
static inline int kube_fake_line(struct kube_fake *f, char *line, size_t cap, double timeout_s)
{
    double end = util_now() + timeout_s * util_time_scale();
    for (;;) {
        char *nl = memchr(f->buf, '\n', f->len);
        if (nl) {
            size_t n = (size_t)(nl - f->buf);
            size_t c = n < cap - 1 ? n : cap - 1;
            memcpy(line, f->buf, c);
            line[c] = '\0';
            memmove(f->buf, nl + 1, f->len - n - 1);
            f->len -= n + 1;
            return 0;
        }
        double left = end - util_now();
        if (left <= 0 || f->len == sizeof f->buf)
            return -1;
        struct pollfd p = {.fd = f->out, .events = POLLIN};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
            continue;
        ssize_t k = read(f->out, f->buf + f->len, sizeof f->buf - f->len);
        if (k <= 0)
            return -1;
        f->len += (size_t)k;
    }
}

/* Waits up to TIMEOUT_S for a line that contains WHAT, skipping others; the line in LINE. */
static inline int kube_fake_wait(struct kube_fake *f, const char *what, char *line, size_t cap,
                                 double timeout_s)
{
    double end = util_now() + timeout_s * util_time_scale();
    while (util_now() < end)
        if (kube_fake_line(f, line, cap, end - util_now()) == 0 && strstr(line, what))
            return 0;
    return -1;
}

/* Sends the fake one command line CMD (a newline is added). */
static inline int kube_fake_send(struct kube_fake *f, const char *cmd)
{
    size_t n = strlen(cmd);
    if (write(f->in, cmd, n) != (ssize_t)n || write(f->in, "\n", 1) != 1)
        return -1;
    return 0;
}

/* Ends the fake (SIGTERM, then SIGKILL after 2 s) and reaps it. */
static inline void kube_fake_stop(struct kube_fake *f)
{
    if (f->pid <= 0)
        return;
    kill(f->pid, SIGTERM);
    for (int i = 0; i < 200; i++) {
        if (waitpid(f->pid, NULL, WNOHANG) == f->pid) {
            f->pid = -1;
            break;
        }
        usleep(10000);
    }
    if (f->pid > 0) {
        kill(f->pid, SIGKILL);
        waitpid(f->pid, NULL, 0);
        f->pid = -1;
    }
    close(f->in);
    close(f->out);
}

#endif
