/* posd's log: one line per event on stderr (systemd's journal takes it from there), with a
 * level and a monotonic timestamp. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "sched/posd.h"

static int log_level = POSD_LOG_INFO;

void posd_set_log_level(int level)
{
    log_level = level;
}

void posd_log(int level, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    if (level > log_level)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    fprintf(stderr, "posd[%ld.%03ld] %s: %s\n", (long)ts.tv_sec, ts.tv_nsec / 1000000,
            names[level < 0   ? 0
                  : level > 3 ? 3
                              : level],
            msg);
}
