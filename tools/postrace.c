/* postrace: merges the shim's POS_TRACE files (docs/shim.md, "Trace format") of one or more
 * processes into one timeline in the Chrome trace-event JSON format (tools/timeline.c), on
 * their shared clock (CLOCK_MONOTONIC): a process per file, a track per stream, a slice per
 * operator. The shim records when each operator was submitted and when its completion was
 * learnt, not when it started on the GPU: an operator's slice starts at its submission or at
 * the completion of the operator before it on its stream, whichever is later. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pos/op_record.h"
#include "tools/timeline.h"

static const char usage_text[] =
    "usage: postrace [-o FILE] TRACE...\n"
    "Merges POS_TRACE files (LD_PRELOAD=libposshim.so POS_TRACE=/tmp/app.%p.trace ...) into\n"
    "one Chrome trace-event JSON timeline that Perfetto (ui.perfetto.dev) and chrome://tracing\n"
    "open: a process per file, a track per stream, a slice per operator (docs/timeline.md).\n"
    "  -o, --output FILE  write it there (default: standard output)\n"
    "  -h, --help         this text\n"
    "Exit status: 0; 1 when a file cannot be read or written; 2 for a bad option or a file\n"
    "that is not a pos trace (FILE:LINE: what).\n";

#define MAX_STREAMS 256
#define FIELDS_MAX  64

struct stream {
    uint64_t stream, key; /* its handle, and the context or the thread it belongs to */
};

/* One operator, kept until the file is read: the collector writes them in the order their
 * completions were learnt, and a stream's slices are laid out in submission order. */
struct op {
    int track;
    int64_t submit_ns, done_ns;
    char *name, *kind;
    char args[160];
};

struct trace_file {
    const char *path;
    uint32_t pid;
    char exe[256];
    struct stream streams[MAX_STREAMS];
    int nstreams;
    uint64_t ops, unknown; /* operators, those without a completion time */
    struct op *op;
    size_t nop, capop;
};

static int bad(const char *path, int line, const char *what)
{
    fprintf(stderr, "postrace: %s:%d: %s\n", path, line, what);
    return -2;
}

/* The track of STREAM (of context CTX, launched by thread TID) in F, made on first sight.
 * The per-thread default stream (POS_STREAM_PER_THREAD) is the launching thread's; any other stream
 * belongs to its context. */
static int track_of(struct timeline *tl, struct trace_file *f, uint64_t stream, uint64_t ctx,
                    uint32_t tid)
{
    uint64_t key = stream == POS_STREAM_PER_THREAD ? tid : ctx;
    for (int i = 0; i < f->nstreams; i++)
        if (f->streams[i].stream == stream && f->streams[i].key == key)
            return i;
    if (f->nstreams == MAX_STREAMS)
        return -1;
    int i = f->nstreams++;
    f->streams[i] = (struct stream){stream, key};
    char name[96];
    if (stream == POS_STREAM_PER_THREAD)
        snprintf(name, sizeof name, "per-thread stream of thread %u", tid);
    else
        snprintf(name, sizeof name, "stream 0x%" PRIx64 " ctx 0x%" PRIx64, stream, ctx);
    timeline_track(tl, f->pid, (uint32_t)i + 1, name);
    return i;
}

/* One operator line, split into fields: seq tid kind NAME... grid block smem stream ctx
 * submit_ns complete_ns done (the name may hold blanks: it is what lies between). */
static int add_op(struct timeline *tl, struct trace_file *f, char **fld, int n, int line)
{
    if (n < 12)
        return bad(f->path, line, "an operator line has fewer than 12 fields");
    char name[1024] = "";
    size_t len = 0;
    for (int i = 3; i < n - 8; i++)
        len += (size_t)snprintf(name + len, len < sizeof name ? sizeof name - len : 0, "%s%s",
                                i > 3 ? " " : "", fld[i]);
    char **r = fld + n - 8; /* grid block smem stream ctx submit complete done */
    char *end;
    uint32_t tid = (uint32_t)strtoul(fld[1], &end, 10);
    uint64_t stream = strtoull(r[3], NULL, 0), ctx = strtoull(r[4], NULL, 0);
    errno = 0;
    int64_t submit = (int64_t)strtoll(r[5], &end, 10);
    if (errno || *end || submit <= 0)
        return bad(f->path, line, "bad submit_ns");
    f->ops++;
    if (strcmp(r[6], "-") == 0) {
        f->unknown++; /* never learnt complete: no slice to draw */
        return 0;
    }
    int64_t done = (int64_t)strtoll(r[6], &end, 10);
    if (*end || done <= 0)
        return bad(f->path, line, "bad complete_ns");
    int t = track_of(tl, f, stream, ctx, tid);
    if (t < 0)
        return bad(f->path, line, "more than 256 streams in one process");
    if (f->nop == f->capop) {
        size_t cap = f->capop ? f->capop * 2 : 1024;
        struct op *o = realloc(f->op, cap * sizeof *o);
        if (!o)
            return bad(f->path, line, "out of memory");
        f->op = o;
        f->capop = cap;
    }
    struct op *o = &f->op[f->nop];
    o->track = t;
    o->submit_ns = submit;
    o->done_ns = done;
    o->name = strdup(name[0] ? name : "?");
    o->kind = strdup(fld[2]);
    if (!o->name || !o->kind) {
        free(o->name);
        free(o->kind);
        return bad(f->path, line, "out of memory");
    }
    f->nop++;
    /* args are JSON written raw: only what was checked to be digits and commas goes in */
    int shapes =
        strspn(r[0], "0123456789,") == strlen(r[0]) && strspn(r[1], "0123456789,") == strlen(r[1]);
    snprintf(o->args, sizeof o->args, "\"seq\":%llu,\"done\":\"%s\"%s%s%s%s%s",
             strtoull(fld[0], NULL, 10),
             strcmp(r[7], "marker") == 0 || strcmp(r[7], "bound") == 0 ? r[7] : "-",
             shapes ? ",\"grid\":\"" : "", shapes ? r[0] : "", shapes ? "\",\"block\":\"" : "",
             shapes ? r[1] : "", shapes ? "\"" : "");
    return 0;
}

static int op_order(const void *pa, const void *pb)
{
    const struct op *a = pa, *b = pb;
    if (a->track != b->track)
        return a->track - b->track;
    return a->submit_ns < b->submit_ns ? -1 : a->submit_ns > b->submit_ns;
}

/* F's operators as slices: each starts at its submission or at the end of the one before it
 * on its stream, whichever is later (a stream runs one operator at a time). */
static void lay_out(struct timeline *tl, struct trace_file *f, int64_t *first_ns)
{
    qsort(f->op, f->nop, sizeof *f->op, op_order);
    int64_t last_end = 0;
    for (size_t i = 0; i < f->nop; i++) {
        struct op *o = &f->op[i];
        if (i == 0 || o->track != f->op[i - 1].track)
            last_end = 0;
        int64_t start = o->submit_ns > last_end ? o->submit_ns : last_end;
        int64_t end = o->done_ns > start ? o->done_ns : start; /* bound before its predecessor */
        last_end = end;
        timeline_slice(tl, f->pid, (uint32_t)o->track + 1, o->name, o->kind, start, end - start,
                       o->args);
        if (!*first_ns || start < *first_ns)
            *first_ns = start;
        free(o->name);
        free(o->kind);
    }
    free(f->op);
    f->op = NULL;
    f->nop = f->capop = 0;
}

/* Reads one trace file into TL. Returns 0, -1 (I/O) or -2 (not a pos trace). */
static int read_trace(struct timeline *tl, struct trace_file *f, int64_t *first_ns)
{
    FILE *in = fopen(f->path, "r");
    if (!in) {
        fprintf(stderr, "postrace: cannot read %s: %s\n", f->path, strerror(errno));
        return -1;
    }
    char buf[4096];
    int line = 0, rc = 0, have_pid = 0;
    while (rc == 0 && fgets(buf, sizeof buf, in)) {
        line++;
        buf[strcspn(buf, "\n")] = '\0';
        if (line == 1 && strncmp(buf, "# pos-trace ", 12) != 0) {
            rc = bad(f->path, line, "not a pos trace (no '# pos-trace' line)");
            break;
        }
        if (buf[0] == '#') {
            unsigned pid;
            if (sscanf(buf, "# pid %u exe %255s", &pid, f->exe) == 2) {
                f->pid = pid;
                have_pid = 1;
                const char *base = strrchr(f->exe, '/');
                const char *file = strrchr(f->path, '/');
                char name[600];
                snprintf(name, sizeof name, "%s (pid %u, %s)", base ? base + 1 : f->exe, pid,
                         file ? file + 1 : f->path);
                timeline_process(tl, f->pid, name);
            }
            continue;
        }
        if (!have_pid) {
            rc = bad(f->path, line, "an operator before the '# pid' line");
            break;
        }
        char *fld[FIELDS_MAX], *save = NULL;
        int n = 0;
        for (char *p = strtok_r(buf, " ", &save); p && n < FIELDS_MAX;
             p = strtok_r(NULL, " ", &save))
            fld[n++] = p;
        if (n)
            rc = add_op(tl, f, fld, n, line);
    }
    if (rc == 0 && ferror(in)) {
        fprintf(stderr, "postrace: cannot read %s: %s\n", f->path, strerror(errno));
        rc = -1;
    }
    if (rc == 0 && line == 0)
        rc = bad(f->path, 1, "empty file (a process that died before its first flush?)");
    fclose(in);
    if (rc == 0)
        lay_out(tl, f, first_ns);
    for (size_t i = 0; i < f->nop; i++) {
        free(f->op[i].name);
        free(f->op[i].kind);
    }
    free(f->op);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *out_path = NULL;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            out_path = optarg;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case ':':
            fprintf(stderr, "postrace: option '%s' needs a value (see --help)\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "postrace: bad option '%s' (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind == argc) {
        fprintf(stderr, "postrace: no trace file given (see --help)\n");
        return 2;
    }
    struct timeline tl;
    timeline_init(&tl);
    int64_t first_ns = 0;
    int rc = 0;
    for (int i = optind; i < argc && rc == 0; i++) {
        struct trace_file *f = calloc(1, sizeof *f);
        if (!f) {
            fprintf(stderr, "postrace: out of memory\n");
            rc = -1;
            break;
        }
        f->path = argv[i];
        rc = read_trace(&tl, f, &first_ns);
        if (rc == 0 && f->unknown)
            fprintf(stderr,
                    "postrace: %s: %" PRIu64 " of %" PRIu64 " operators have no "
                    "completion time: left out\n",
                    f->path, f->unknown, f->ops);
        free(f);
    }
    if (rc == 0) {
        int w, closed;
        if (out_path) {
            FILE *out = fopen(out_path, "w");
            w = out ? timeline_write(&tl, out, first_ns) : -errno;
            closed = out ? fclose(out) : -1;
        } else {
            w = timeline_write(&tl, stdout, first_ns);
            closed = fflush(stdout);
        }
        if (closed != 0 || w < 0) {
            fprintf(stderr, "postrace: cannot write %s: %s\n", out_path ? out_path : "stdout",
                    w == -ENOMEM ? "out of memory" : strerror(errno));
            rc = -1;
        }
    }
    timeline_free(&tl);
    return rc == 0 ? 0 : rc == -2 ? 2 : 1;
}
