/* The drop-in directory watched: posd reloads its configuration when a file in policy_dir is
 * written, added, removed or renamed, as SIGHUP does (a bad file is logged with FILE:LINE and
 * the running configuration stays). A Kubernetes ConfigMap mounted there changes by swapping
 * its "..data" link, so every entry counts, the hidden ones too. A burst of changes is one
 * reload: CONF_SETTLE_NS after the last, at most CONF_MAX_WAIT_NS after the first. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "sched/conf_watch.h"
#include "sched/reload.h"
#include "sched/watch.h"

#define CONF_SETTLE_NS   200000000LL  /* quiet this long: the change is whole */
#define CONF_MAX_WAIT_NS 1000000000LL /* a directory that never settles is read anyway */
#define CONF_EVENTS                                                                         \
    (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ATTRIB |     \
     IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

static struct {
    int in_fd, timer_fd, wd;
    char dir[POSD_PATH_MAX];
    int64_t first_at; /* the first change of the burst not yet read (0: none) */
} W = {.in_fd = -1, .timer_fd = -1, .wd = -1};

static int add_dir_watch(void)
{
    W.wd = inotify_add_watch(W.in_fd, W.dir, CONF_EVENTS);
    return W.wd < 0 ? -errno : 0;
}

static void arm_timer(int64_t at)
{
    struct itimerspec its = {.it_value = {.tv_sec = at / 1000000000LL,
                                          .tv_nsec = at % 1000000000LL}};
    timerfd_settime(W.timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* Changes in the directory: the reload waits for the burst to settle. */
static int64_t on_change(struct posd *d, int fd, void *arg)
{
    _Alignas(struct inotify_event) char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *e = (const struct inotify_event *)p;
            if (e->mask & IN_IGNORED)
                W.wd = -1; /* the directory went away: watched again when it is back */
            p += sizeof *e + e->len;
        }
    }
    int64_t now = posd_now();
    if (!W.first_at)
        W.first_at = now;
    int64_t at = now + CONF_SETTLE_NS;
    arm_timer(at < W.first_at + CONF_MAX_WAIT_NS ? at : W.first_at + CONF_MAX_WAIT_NS);
    return 0;
}

static int64_t on_settled(struct posd *d, int fd, void *arg)
{
    uint64_t expirations;
    if (read(fd, &expirations, sizeof expirations) < 0)
        return 0;
    W.first_at = 0;
    if (W.wd < 0 && add_dir_watch() < 0)
        posd_log(POSD_LOG_WARN, "%s is gone: reloading without it (watched again at restart)",
                 W.dir);
    char msg[600];
    posd_log(POSD_LOG_INFO, "%s changed: reloading the configuration", W.dir);
    posd_reload(d, msg, sizeof msg);
    return 0;
}

int posd_conf_watch_start(struct posd *d, const char *dir)
{
    snprintf(W.dir, sizeof W.dir, "%s", dir);
    W.in_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    W.timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    int rc = W.in_fd < 0 || W.timer_fd < 0 ? -errno : add_dir_watch();
    /* the timer first: a change heard with no timer watched would never be read */
    if (rc == 0 && posd_loop_watch(d, W.timer_fd, on_settled, NULL) < 0)
        rc = -ENOSPC;
    if (rc == 0 && posd_loop_watch(d, W.in_fd, on_change, NULL) < 0) {
        posd_log(POSD_LOG_WARN, "not watching %s for changes (no room in the loop)", dir);
        return -ENOSPC; /* its descriptors stay: the loop may poll the timer's */
    }
    if (rc < 0) {
        posd_log(rc == -ENOENT ? POSD_LOG_INFO : POSD_LOG_WARN,
                 "not watching %s for changes (%s): SIGHUP or posctl reload reads it", dir,
                 rc == -ENOENT ? "it does not exist" : strerror(-rc));
        posd_conf_watch_stop();
        return rc;
    }
    return 0;
}

void posd_conf_watch_stop(void)
{
    if (W.in_fd >= 0)
        close(W.in_fd);
    if (W.timer_fd >= 0)
        close(W.timer_fd);
    W.in_fd = W.timer_fd = W.wd = -1;
}
