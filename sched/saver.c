/* Saves of the kernel profiles off the scheduling path: a child process, forked with the
 * table as it is at that instant (copy-on-write), writes STATE_DIR/profiles while the loop
 * goes on; the loop learns the end from a pidfd it watches and the result from a pipe. One
 * save runs at a time. A posctl save is answered when a save that began after it was asked
 * ends (one is started, or follows the one running); the periodic save is skipped while one
 * runs. A reset and posd's exit end a running save first (its child killed and reaped, its
 * temporary removed), so that no older table is renamed over what they did; the exit's own
 * save is written in the loop's thread, which has nothing left to do. Where no child can be
 * made (fork or pidfd_open fails), the save is written in the loop's thread, as before.
 * Measured in docs/results/reliability.md ("Saves beside the loop"). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sched/clients.h"
#include "sched/control_reply.h"
#include "sched/files.h"
#include "sched/profile_store.h"
#include "sched/saver.h"
#include "sched/watch.h"

#define SAVER_WAITERS 32

/* What the child says before it exits (one write, under PIPE_BUF: never torn). */
struct save_result {
    int32_t status; /* profiles written (>= 0), or -errno */
    char msg[480];
};

struct waiter {
    int slot;
    uint32_t gen;   /* the slot's generation: an asker that left is not answered */
    uint64_t need;  /* answered when save NEED (or a later one) ends */
};

static struct {
    pid_t pid;      /* the running save's child, 0 when none */
    int pidfd;      /* watched by the loop: readable once the child has exited */
    int pipe_rd;    /* its result */
    int aborted;    /* ended on purpose (posd_saver_abort killed and reaped it): no save */
    uint64_t gen;   /* the running (or last) save's number */
    int again;      /* an asker waits for a save that begins after the running one */
    struct waiter w[SAVER_WAITERS];
    int nw;
    int no_child_said; /* a save without a child was logged */
} S = {.pidfd = -1, .pipe_rd = -1};

static int pidfd_of(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/* Closes every descriptor above stdio but KEEP_A and KEEP_B: the child holds no client's
 * socket, shared memory, eventfd, listening socket or BPF link, so that nobody waits for its
 * exit to see posd gone. */
static void close_all_but(int keep_a, int keep_b)
{
    int lo = keep_a < keep_b ? keep_a : keep_b, hi = keep_a < keep_b ? keep_b : keep_a;
    int from = 3;
    int keep[2] = {lo, hi};
    for (int i = 0; i < 2; i++) {
        if (keep[i] < from)
            continue;
        if (keep[i] > from && syscall(SYS_close_range, from, keep[i] - 1, 0) < 0)
            for (int fd = from; fd < keep[i]; fd++)
                close(fd);
        from = keep[i] + 1;
    }
    if (syscall(SYS_close_range, from, ~0u, 0) < 0)
        for (int fd = from; fd < 65536; fd++)
            close(fd);
}

/* The child: the table as it was at the fork, written the way every save is (files.h), under
 * SCHED_IDLE, so that it takes its CPU time from nobody's work (at nice 10 the grant p99 beside
 * a save was 1.24x its p99 away from saves, SCHED_IDLE 1.00x: docs/results/saves.md). On a
 * machine with no idle time the save still gets a sliver and ends, later; posctl waits 120 s. */
static void child_save(struct posd *d, int out)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* a SIGTERM for it ends it */
    signal(SIGPIPE, SIG_DFL);
    close_all_but(d->state_fd, out);
    struct sched_param sp = {0};
    (void)sched_setscheduler(0, SCHED_IDLE, &sp); /* never ahead of anyone's work */
    struct save_result r;
    memset(&r, 0, sizeof r);
    r.status = posd_profiles_write(d, r.msg, sizeof r.msg);
    if (write(out, &r, sizeof r) != (ssize_t)sizeof r)
        _exit(2);
    _exit(r.status < 0 ? 1 : 0);
}

static int64_t on_end(struct posd *d, int fd, void *arg);

/* Forks the next save. Returns 0, or -errno when no child could be made. */
static int start(struct posd *d)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return -e;
    }
    if (pid == 0)
        child_save(d, p[1]);
    close(p[1]);
    int pfd = pidfd_of(pid);
    if (pfd < 0 || fcntl(pfd, F_SETFD, FD_CLOEXEC) < 0 ||
        posd_loop_watch_once(d, pfd, on_end, NULL) < 0) {
        int e = pfd < 0 ? errno : ENOSPC;
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        if (pfd >= 0)
            close(pfd);
        close(p[0]);
        posd_state_remove_stale(d->state_fd, POSD_PROFILES_NAME);
        return -e;
    }
    S.pid = pid;
    S.pidfd = pfd;
    S.pipe_rd = p[0];
    S.aborted = S.again = 0;
    S.gen++;
    return 0;
}

/* Answers every asker whose save has ended (NEED <= the save just ended) with STATUS, MSG. */
static void answer(struct posd *d, uint64_t upto, int status, const char *msg)
{
    int k = 0;
    for (int i = 0; i < S.nw; i++) {
        struct waiter w = S.w[i];
        if (w.need > upto) {
            S.w[k++] = w;
            continue;
        }
        struct posd_client *c = &d->clients[w.slot];
        if (c->used && c->gen == w.gen &&
            posd_control_answer(d, c, "profiles save", status, msg) < 0)
            posd_client_close(d, c, "its answer could not be sent");
    }
    S.nw = k;
}

/* A save written in the loop's thread (no child could be made). */
static int save_here(struct posd *d, int why, char *msg, size_t cap)
{
    if (!S.no_child_said)
        posd_log(POSD_LOG_WARN,
                 "kernel profiles are saved in posd's own thread (scheduling waits for each "
                 "save): no child process for it: %s",
                 strerror(-why));
    S.no_child_said = 1;
    return posd_profiles_write(d, msg, cap);
}

static void said_periodic(struct posd *d, int status, const char *msg)
{
    if (status < 0) {
        if (!d->prof_save_failed)
            posd_log(POSD_LOG_WARN, "kernel profiles not saved: %s", msg);
        d->prof_save_failed = 1;
    } else {
        d->prof_save_failed = 0;
    }
}

/* The running save's child has exited. */
static int64_t on_end(struct posd *d, int fd, void *arg)
{
    (void)arg;
    struct save_result r = {.status = -EIO};
    int st = 0;
    if (!S.aborted)
        while (waitpid(S.pid, &st, 0) < 0 && errno == EINTR)
            ;
    ssize_t got = read(S.pipe_rd, &r, sizeof r);
    close(S.pipe_rd);
    close(fd);
    S.pipe_rd = S.pidfd = -1;
    S.pid = 0;
    if (S.aborted) {
        /* a reset or the exit ended it: whoever waits gets the next save */
        for (int i = 0; i < S.nw; i++)
            S.w[i].need = S.gen + 1;
        S.again = S.nw > 0;
    } else {
        if (got != (ssize_t)sizeof r) {
            r.status = -EIO;
            snprintf(r.msg, sizeof r.msg, "the process saving them %s %d",
                     WIFSIGNALED(st) ? "was killed by signal" : "exited with status",
                     WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            posd_state_remove_stale(d->state_fd, POSD_PROFILES_NAME);
        }
        r.msg[sizeof r.msg - 1] = '\0';
        said_periodic(d, r.status, r.msg);
        answer(d, S.gen, r.status < 0 ? r.status : 0, r.msg);
    }
    if (S.again && !d->stop) {
        int e = start(d);
        if (e < 0) {
            char msg[512];
            int n = save_here(d, e, msg, sizeof msg);
            answer(d, UINT64_MAX, n < 0 ? n : 0, msg);
        }
    }
    return 0;
}

int posd_saver_request(struct posd *d, struct posd_client *asker, char *msg, size_t cap)
{
    if (d->state_fd < 0) {
        snprintf(msg, cap, "posd has no state directory");
        return -EBADF;
    }
    if (S.pid) {
        if (!asker)
            return 0; /* periodic: the running one will do */
        if (S.nw == SAVER_WAITERS) {
            snprintf(msg, cap, "busy: %d saves are waiting already; ask again later", S.nw);
            return -EBUSY;
        }
        S.w[S.nw++] = (struct waiter){(int)(asker - d->clients), asker->gen, S.gen + 1};
        S.again = 1;
        return POSD_CONTROL_LATER;
    }
    int e = start(d);
    if (e < 0) {
        int n = save_here(d, e, msg, cap);
        if (!asker)
            said_periodic(d, n, msg);
        return n < 0 ? n : 0;
    }
    if (asker)
        S.w[S.nw++] = (struct waiter){(int)(asker - d->clients), asker->gen, S.gen};
    return POSD_CONTROL_LATER;
}

void posd_saver_abort(struct posd *d)
{
    if (!S.pid || S.aborted)
        return;
    kill(S.pid, SIGKILL);
    while (waitpid(S.pid, NULL, 0) < 0 && errno == EINTR)
        ;
    S.aborted = 1;
    posd_state_remove_stale(d->state_fd, POSD_PROFILES_NAME);
}

int64_t posd_saver_periodic(struct posd *d)
{
    int64_t now = posd_now();
    if (now < d->prof_save_at)
        return d->prof_save_at;
    d->prof_save_at = now + POSD_PROFILE_SAVE_NS;
    if (d->prof.user_refused > d->prof_refused_said) {
        posd_log(POSD_LOG_WARN,
                 "kernel profiles: %llu new kernel shapes not learnt: their user has "
                 "profile_user_max (%zu) profiles already",
                 (unsigned long long)(d->prof.user_refused - d->prof_refused_said),
                 d->prof.user_max);
        d->prof_refused_said = d->prof.user_refused;
    }
    if (d->prof.count > 0) {
        char msg[512];
        posd_saver_request(d, NULL, msg, sizeof msg);
    }
    return d->prof_save_at;
}

void posd_saver_finish(struct posd *d)
{
    posd_saver_abort(d);
    if (S.pid) { /* the loop has ended: nobody else closes them */
        close(S.pidfd);
        close(S.pipe_rd);
        S.pid = 0;
        S.pidfd = S.pipe_rd = -1;
    }
    if (d->state_fd < 0 || (d->prof.count == 0 && S.nw == 0))
        return;
    char msg[512];
    int n = posd_profiles_write(d, msg, sizeof msg);
    said_periodic(d, n, msg);
    answer(d, UINT64_MAX, n < 0 ? n : 0, msg);
}
