/* The Chrome trace-event JSON writer (see timeline.h). */
#include "tools/timeline.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

enum { EV_PROCESS, EV_TRACK, EV_SLICE };

struct timeline_event {
    int kind;
    uint32_t pid, tid;
    int64_t start_ns, dur_ns;
    char *name, *cat, *args;
};

void timeline_init(struct timeline *t)
{
    memset(t, 0, sizeof *t);
}

static void add(struct timeline *t, int kind, uint32_t pid, uint32_t tid, const char *name,
                const char *cat, int64_t start, int64_t dur, const char *args)
{
    if (t->failed)
        return;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        struct timeline_event *ev = realloc(t->ev, cap * sizeof *ev);
        if (!ev) {
            t->failed = 1;
            return;
        }
        t->ev = ev;
        t->cap = cap;
    }
    struct timeline_event *e = &t->ev[t->n];
    *e = (struct timeline_event){kind,
                                 pid,
                                 tid,
                                 start,
                                 dur < 0 ? 0 : dur,
                                 strdup(name),
                                 cat ? strdup(cat) : NULL,
                                 args ? strdup(args) : NULL};
    if (!e->name || (cat && !e->cat) || (args && !e->args)) {
        free(e->name);
        free(e->cat);
        free(e->args);
        t->failed = 1;
        return;
    }
    t->n++;
}

void timeline_process(struct timeline *t, uint32_t pid, const char *name)
{
    add(t, EV_PROCESS, pid, 0, name, NULL, 0, 0, NULL);
}

void timeline_track(struct timeline *t, uint32_t pid, uint32_t tid, const char *name)
{
    add(t, EV_TRACK, pid, tid, name, NULL, 0, 0, NULL);
}

void timeline_slice(struct timeline *t, uint32_t pid, uint32_t tid, const char *name,
                    const char *cat, int64_t start_ns, int64_t dur_ns, const char *args)
{
    add(t, EV_SLICE, pid, tid, name, cat, start_ns, dur_ns, args);
}

/* Metadata first; then per track by start; at one start an empty slice first (it ended there,
 * before the next began), then the longer (enclosing) one. */
static int event_order(const void *pa, const void *pb)
{
    const struct timeline_event *a = pa, *b = pb;
    if (a->kind != b->kind)
        return a->kind - b->kind;
    if (a->pid != b->pid)
        return a->pid < b->pid ? -1 : 1;
    if (a->tid != b->tid)
        return a->tid < b->tid ? -1 : 1;
    if (a->start_ns != b->start_ns)
        return a->start_ns < b->start_ns ? -1 : 1;
    if ((a->dur_ns == 0) != (b->dur_ns == 0))
        return a->dur_ns == 0 ? -1 : 1;
    if (a->dur_ns != b->dur_ns)
        return a->dur_ns > b->dur_ns ? -1 : 1;
    return 0;
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            fprintf(f, "\\u%04x", *p); /* bytes as code points: valid JSON whatever they are */
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* NS as microseconds with three decimals (the format's unit; no precision lost). */
static void json_us(FILE *f, int64_t ns)
{
    fprintf(f, "%s%" PRId64 ".%03d", ns < 0 ? "-" : "", (ns < 0 ? -ns : ns) / 1000,
            (int)((ns < 0 ? -ns : ns) % 1000));
}

int timeline_write(struct timeline *t, FILE *f, int64_t origin_ns)
{
    if (t->failed)
        return -ENOMEM;
    qsort(t->ev, t->n, sizeof *t->ev, event_order);
    fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", f);
    for (size_t i = 0; i < t->n; i++) {
        const struct timeline_event *e = &t->ev[i];
        if (e->kind != EV_SLICE) {
            fprintf(f, "{\"ph\":\"M\",\"pid\":%u,\"tid\":%u,\"name\":\"%s\",\"args\":{\"name\":",
                    e->pid, e->tid, e->kind == EV_PROCESS ? "process_name" : "thread_name");
            json_string(f, e->name);
            fputs("}}", f);
        } else {
            fprintf(f, "{\"ph\":\"X\",\"pid\":%u,\"tid\":%u,\"ts\":", e->pid, e->tid);
            json_us(f, e->start_ns - origin_ns);
            fputs(",\"dur\":", f);
            json_us(f, e->dur_ns);
            fputs(",\"name\":", f);
            json_string(f, e->name);
            if (e->cat) {
                fputs(",\"cat\":", f);
                json_string(f, e->cat);
            }
            if (e->args)
                fprintf(f, ",\"args\":{%s}", e->args);
            fputc('}', f);
        }
        fputs(i + 1 < t->n ? ",\n" : "\n", f);
    }
    fputs("]}\n", f);
    return ferror(f) ? -EIO : 0;
}

void timeline_free(struct timeline *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->ev[i].name);
        free(t->ev[i].cat);
        free(t->ev[i].args);
    }
    free(t->ev);
    timeline_init(t);
}
