/* posd's log: one line per event on stderr (systemd's journal takes it from there), with a
 * level and a monotonic timestamp. Each kind of line (one format string of posd's source) is
 * rate-limited: a burst of LOG_BURST, then one a second, and one line a second at most saying
 * how many of that kind were suppressed, so that no peer can flood the log. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sched/ini_lines.h"
#include "sched/posd.h"

#define LOG_KINDS     64
#define LOG_BURST     10           /* lines of one kind printed in a row */
#define LOG_PERIOD_NS 1000000000LL /* then one more per period; a summary at most as often */

struct log_kind {
    const char *fmt; /* the key: the call site's format string */
    int level;
    int tokens;
    int64_t refilled_at;
    uint64_t suppressed;
    int64_t suppressed_since; /* the first suppressed line since the last summary */
    char last[160];           /* the last suppressed line, shown in the summary */
};

static int log_level = POSD_LOG_INFO;
static struct log_kind kinds[LOG_KINDS];
static int nkinds;

void posd_set_log_level(int level)
{
    log_level = level;
}

static int64_t log_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void emit(int level, int64_t now, const char *raw)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    char msg[4 * 1024 + 8];
    ini_escape(msg, sizeof msg, raw); /* app names and paths come from clients */
    fprintf(stderr, "posd[%lld.%03lld] %s: %s\n", (long long)(now / 1000000000LL),
            (long long)(now % 1000000000LL / 1000000),
            names[level < 0   ? 0
                  : level > 3 ? 3
                              : level],
            msg);
}

static void emit_summary(struct log_kind *k, int64_t now)
{
    char msg[sizeof k->last + 96];
    snprintf(msg, sizeof msg, "%llu similar lines suppressed in %.1f s, the last: %s",
             (unsigned long long)k->suppressed, (double)(now - k->suppressed_since) / 1e9, k->last);
    emit(k->level, now, msg);
    k->suppressed = 0;
}

/* The kind of FMT (the last slot is shared when posd has more kinds than slots). */
static struct log_kind *kind_of(const char *fmt, int level, int64_t now)
{
    for (int i = 0; i < nkinds; i++)
        if (kinds[i].fmt == fmt)
            return &kinds[i];
    if (nkinds == LOG_KINDS)
        return &kinds[LOG_KINDS - 1];
    struct log_kind *k = &kinds[nkinds++];
    *k = (struct log_kind){.fmt = fmt, .level = level, .tokens = LOG_BURST, .refilled_at = now};
    return k;
}

static int take_token(struct log_kind *k, int64_t now)
{
    int64_t periods = (now - k->refilled_at) / LOG_PERIOD_NS;
    if (periods > 0) {
        k->tokens = periods >= LOG_BURST || k->tokens + periods >= LOG_BURST
                        ? LOG_BURST
                        : k->tokens + (int)periods;
        k->refilled_at += periods * LOG_PERIOD_NS;
    }
    if (k->tokens == 0)
        return 0;
    k->tokens--;
    return 1;
}

int64_t posd_log_flush(void)
{
    int64_t now = log_now(), due = 0;
    for (int i = 0; i < nkinds; i++) {
        struct log_kind *k = &kinds[i];
        if (!k->suppressed)
            continue;
        if (now - k->suppressed_since >= LOG_PERIOD_NS)
            emit_summary(k, now);
        else if (!due || k->suppressed_since + LOG_PERIOD_NS < due)
            due = k->suppressed_since + LOG_PERIOD_NS;
    }
    return due;
}

int64_t posd_log_due(void)
{
    int64_t due = 0;
    for (int i = 0; i < nkinds; i++)
        if (kinds[i].suppressed && (!due || kinds[i].suppressed_since + LOG_PERIOD_NS < due))
            due = kinds[i].suppressed_since + LOG_PERIOD_NS;
    return due;
}

void posd_log(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int64_t now = log_now();
    struct log_kind *k = kind_of(fmt, level, now);
    if (!take_token(k, now)) {
        if (!k->suppressed++)
            k->suppressed_since = now;
        snprintf(k->last, sizeof k->last, "%.*s", (int)sizeof k->last - 1, msg);
        return;
    }
    if (k->suppressed)
        emit_summary(k, now);
    emit(level, now, msg);
}
