/* Model workload files (sim/models/NAME.model): the parser, the scaling to a batch size and
 * the lookup of a model by name. The format is docs/sim-formats.md, "Model workloads". */
#include "sim/model_file.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* CUDA launch limits that a line must respect (after scaling, for grid X). */
#define GRID_X_MAX        2147483647u
#define GRID_YZ_MAX       65535u
#define BLOCK_XY_MAX      1024u
#define BLOCK_Z_MAX       64u
#define BLOCK_THREADS_MAX 1024u

#define OP_FIELDS 8 /* op NAME GRID BLOCK SMEM FLOPS WEIGHT_BYTES ACT_BYTES */

struct parser {
    const char *path;
    unsigned line;
    char *err;
    size_t errlen;
};

/* Writes "PATH:LINE: message" (or "PATH: message" when LINE is 0) to the error buffer and
 * returns RC. */
__attribute__((format(printf, 3, 4))) static int fail(const struct parser *p, int rc,
                                                      const char *fmt, ...)
{
    if (!p->err || p->errlen == 0)
        return rc;
    int n = p->line ? snprintf(p->err, p->errlen, "%s:%u: ", p->path, p->line)
                    : snprintf(p->err, p->errlen, "%s: ", p->path);
    if (n < 0 || (size_t)n >= p->errlen)
        return rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return rc;
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Splits S in place into at most MAX whitespace-separated fields; returns how many there
 * were (which may exceed MAX: the extra ones are counted, not stored). */
static int split_fields(char *s, char **fields, int max)
{
    int n = 0;
    while (*s) {
        while (is_blank(*s))
            s++;
        if (!*s)
            break;
        if (n < max)
            fields[n] = s;
        n++;
        while (*s && !is_blank(*s))
            s++;
        if (*s)
            *s++ = '\0';
    }
    return n;
}

/* Op and model names: 1..MAX characters of the kernel-name alphabet of the module format
 * ([A-Za-z0-9_.$/:<>,-]), so that an op name can name a kernel unchanged. */
static int valid_name(const char *s, size_t max)
{
    size_t len = strlen(s);
    if (len == 0 || len > max)
        return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr("_.$/:<>,-", c)))
            return 0;
    }
    return 1;
}

/* Parses a decimal unsigned integer of at most MAX. Returns 0 or -EINVAL. */
static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return -EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return -EINVAL;
    *out = v;
    return 0;
}

/* Parses a finite, non-negative decimal number ("1.2e9" allowed). Returns 0 or -EINVAL. */
static int parse_amount(const char *s, double *out)
{
    if (!((*s >= '0' && *s <= '9') || (*s == '.' && s[1] >= '0' && s[1] <= '9')))
        return -EINVAL; /* no sign, no hex, no inf/nan */
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < 0)
        return -EINVAL;
    *out = v;
    return 0;
}

/* Parses "X,Y,Z" of three integers >= 1 into D. Returns 0 or -EINVAL. */
static int parse_dims(char *s, uint32_t d[3])
{
    char *parts[3];
    int n = 0;
    parts[n++] = s;
    for (char *c = s; *c; c++) {
        if (*c == ',') {
            if (n == 3)
                return -EINVAL;
            *c = '\0';
            parts[n++] = c + 1;
        }
    }
    if (n != 3)
        return -EINVAL;
    for (int i = 0; i < 3; i++) {
        uint64_t v;
        if (parse_u64(parts[i], UINT32_MAX, &v) < 0 || v == 0)
            return -EINVAL;
        d[i] = (uint32_t)v;
    }
    return 0;
}

/* Parses the fields of one op line (after "op") into OP, scaled to BATCH. */
static int parse_op(const struct parser *p, char **f, int nf, uint32_t batch,
                    struct sim_model_op *op)
{
    if (nf != OP_FIELDS - 1)
        return fail(p, -EINVAL,
                    "op line has %d fields after 'op', expected %d: "
                    "NAME GX,GY,GZ BX,BY,BZ SMEM FLOPS WEIGHT_BYTES ACT_BYTES",
                    nf, OP_FIELDS - 1);
    if (!valid_name(f[0], sizeof op->name - 1))
        return fail(p, -EINVAL, "op name '%.*s' must be 1-%zu characters of [A-Za-z0-9_.$/:<>,-]",
                    64, f[0], sizeof op->name - 1);
    snprintf(op->name, sizeof op->name, "%s", f[0]);

    uint32_t grid[3], block[3];
    if (parse_dims(f[1], grid) < 0)
        return fail(p, -EINVAL, "op %s: grid must be GX,GY,GZ, three integers >= 1", op->name);
    if (parse_dims(f[2], block) < 0)
        return fail(p, -EINVAL, "op %s: block must be BX,BY,BZ, three integers >= 1", op->name);
    if (grid[0] > GRID_X_MAX || grid[1] > GRID_YZ_MAX || grid[2] > GRID_YZ_MAX)
        return fail(p, -EINVAL, "op %s: grid %u,%u,%u is over the CUDA limits %u,%u,%u", op->name,
                    grid[0], grid[1], grid[2], GRID_X_MAX, GRID_YZ_MAX, GRID_YZ_MAX);
    uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
    if (block[0] > BLOCK_XY_MAX || block[1] > BLOCK_XY_MAX || block[2] > BLOCK_Z_MAX ||
        threads > BLOCK_THREADS_MAX)
        return fail(p, -EINVAL,
                    "op %s: block %u,%u,%u is over the CUDA limits (x, y <= %u, z <= %u, "
                    "%u threads)",
                    op->name, block[0], block[1], block[2], BLOCK_XY_MAX, BLOCK_Z_MAX,
                    BLOCK_THREADS_MAX);

    uint64_t smem;
    if (parse_u64(f[3], UINT32_MAX, &smem) < 0)
        return fail(p, -EINVAL, "op %s: SMEM '%s' is not a byte count", op->name, f[3]);
    static const char *const what[3] = {"FLOPS", "WEIGHT_BYTES", "ACT_BYTES"};
    double v[3];
    for (int i = 0; i < 3; i++)
        if (parse_amount(f[4 + i], &v[i]) < 0)
            return fail(p, -EINVAL, "op %s: %s '%s' is not a non-negative number", op->name,
                        what[i], f[4 + i]);

    if ((uint64_t)grid[0] * batch > GRID_X_MAX)
        return fail(p, -EOVERFLOW, "op %s: grid X %u x batch %u is over the CUDA limit %u",
                    op->name, grid[0], batch, GRID_X_MAX);
    op->grid[0] = grid[0] * batch;
    op->grid[1] = grid[1];
    op->grid[2] = grid[2];
    memcpy(op->block, block, sizeof op->block);
    op->smem = (uint32_t)smem;
    op->flops = v[0] * batch;
    op->bytes = v[1] + v[2] * batch;
    return 0;
}

static int cmp_op_name(const void *a, const void *b, void *ops)
{
    const struct sim_model_op *o = ops;
    return strcmp(o[*(const size_t *)a].name, o[*(const size_t *)b].name);
}

/* Rejects two ops of the same name (the later line is named). */
static int check_unique(struct parser *p, const struct sim_model *m, const unsigned *lines)
{
    if (m->nops < 2)
        return 0;
    size_t *idx = malloc(m->nops * sizeof *idx);
    if (!idx)
        return fail(p, -ENOMEM, "out of memory");
    for (size_t i = 0; i < m->nops; i++)
        idx[i] = i;
    qsort_r(idx, m->nops, sizeof *idx, cmp_op_name, m->ops);
    int rc = 0;
    for (size_t i = 1; i < m->nops && rc == 0; i++) {
        size_t a = idx[i - 1], b = idx[i];
        if (strcmp(m->ops[a].name, m->ops[b].name) == 0) {
            size_t first = a < b ? a : b, second = a < b ? b : a;
            p->line = lines[second];
            rc = fail(p, -EINVAL, "op name '%s' is used already on line %u", m->ops[a].name,
                      lines[first]);
        }
    }
    free(idx);
    return rc;
}

/* Which header directives a file has had (each may appear once). */
enum { SEEN_MODEL = 1, SEEN_SOURCE = 2, SEEN_DTYPE = 4, SEEN_PARAMS = 8 };

/* Handles one directive line (comments and blank lines are filtered out already). */
static int parse_line(struct parser *p, char *s, struct sim_model *m, size_t *cap, unsigned **lines,
                      int *seen)
{
    char *kw = s;
    while (*s && !is_blank(*s))
        s++;
    if (*s)
        *s++ = '\0';
    while (is_blank(*s))
        s++;
    /* S is now the rest of the line, trailing blanks already stripped. */

    if (!(*seen & SEEN_MODEL) && strcmp(kw, "model") != 0)
        return fail(p, -EINVAL, "'%.32s' before the 'model NAME' directive, which must come first",
                    kw);

    if (strcmp(kw, "model") == 0) {
        char *f[2];
        if (*seen & SEEN_MODEL)
            return fail(p, -EINVAL, "second 'model' directive");
        if (split_fields(s, f, 2) != 1 || !valid_name(f[0], sizeof m->name - 1))
            return fail(p, -EINVAL,
                        "'model' takes one name of 1-%zu characters of [A-Za-z0-9_.$/:<>,-]",
                        sizeof m->name - 1);
        snprintf(m->name, sizeof m->name, "%s", f[0]);
        *seen |= SEEN_MODEL;
    } else if (strcmp(kw, "source") == 0) {
        if (*seen & SEEN_SOURCE)
            return fail(p, -EINVAL, "second 'source' directive");
        if (!*s || strlen(s) > sizeof m->source - 1)
            return fail(p, -EINVAL, "'source' takes a text of 1-%zu characters",
                        sizeof m->source - 1);
        snprintf(m->source, sizeof m->source, "%s", s);
        *seen |= SEEN_SOURCE;
    } else if (strcmp(kw, "dtype") == 0) {
        char *f[2];
        if (*seen & SEEN_DTYPE)
            return fail(p, -EINVAL, "second 'dtype' directive");
        if (split_fields(s, f, 2) != 1 || (strcmp(f[0], "fp32") != 0 && strcmp(f[0], "fp16") != 0))
            return fail(p, -EINVAL, "'dtype' takes fp32 or fp16");
        m->fp16 = strcmp(f[0], "fp16") == 0;
        *seen |= SEEN_DTYPE;
    } else if (strcmp(kw, "params") == 0) {
        char *f[2];
        uint64_t v;
        if (*seen & SEEN_PARAMS)
            return fail(p, -EINVAL, "second 'params' directive");
        if (split_fields(s, f, 2) != 1 || parse_u64(f[0], UINT64_MAX, &v) < 0)
            return fail(p, -EINVAL, "'params' takes one non-negative integer");
        m->params = v;
        *seen |= SEEN_PARAMS;
    } else if (strcmp(kw, "op") == 0) {
        char *f[OP_FIELDS];
        int nf = split_fields(s, f, OP_FIELDS);
        if (m->nops == *cap) {
            size_t ncap = *cap ? *cap * 2 : 64;
            struct sim_model_op *ops = realloc(m->ops, ncap * sizeof *ops);
            if (!ops)
                return fail(p, -ENOMEM, "out of memory");
            m->ops = ops;
            unsigned *nl = realloc(*lines, ncap * sizeof *nl);
            if (!nl)
                return fail(p, -ENOMEM, "out of memory");
            *lines = nl;
            *cap = ncap;
        }
        struct sim_model_op *op = &m->ops[m->nops];
        memset(op, 0, sizeof *op);
        int rc = parse_op(p, f, nf, m->batch, op);
        if (rc < 0)
            return rc;
        (*lines)[m->nops++] = p->line;
    } else {
        return fail(p, -EINVAL,
                    "unknown directive '%.32s' (expected model, source, dtype, params or op)", kw);
    }
    return 0;
}

int sim_model_load(const char *path, uint32_t batch, struct sim_model *out, char *err,
                   size_t errlen)
{
    struct parser p = {.path = path, .line = 0, .err = err, .errlen = errlen};
    if (err && errlen)
        err[0] = '\0';
    memset(out, 0, sizeof *out);
    if (batch < 1)
        return fail(&p, -EINVAL, "batch %u: the batch size must be at least 1", batch);

    FILE *f = fopen(path, "r");
    if (!f) {
        int rc = -errno;
        return fail(&p, rc, "cannot open: %s", strerror(-rc));
    }

    struct sim_model m = {.batch = batch};
    size_t cap = 0;
    unsigned *lines = NULL;
    int seen = 0, rc = 0;
    char *buf = NULL;
    size_t bufsize = 0;
    ssize_t len;
    while ((len = getline(&buf, &bufsize, f)) >= 0) {
        p.line++;
        if (memchr(buf, '\0', (size_t)len)) {
            rc = fail(&p, -EINVAL, "NUL byte in the line");
            break;
        }
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || is_blank(buf[len - 1])))
            buf[--len] = '\0';
        char *s = buf;
        while (is_blank(*s))
            s++;
        if (*s == '\0' || *s == '#')
            continue;
        rc = parse_line(&p, s, &m, &cap, &lines, &seen);
        if (rc < 0)
            break;
    }
    if (rc == 0 && ferror(f))
        rc = fail(&p, -EIO, "read error");
    free(buf);
    fclose(f);

    p.line = 0;
    if (rc == 0 && !(seen & SEEN_MODEL))
        rc = fail(&p, -EINVAL, "no 'model NAME' directive");
    if (rc == 0 && m.nops == 0)
        rc = fail(&p, -EINVAL, "no op lines");
    if (rc == 0)
        rc = check_unique(&p, &m, lines);
    free(lines);
    if (rc < 0) {
        free(m.ops);
        return rc;
    }
    *out = m;
    return 0;
}

void sim_model_free(struct sim_model *m)
{
    if (!m)
        return;
    free(m->ops);
    m->ops = NULL;
    m->nops = 0;
}

/* Copies CANDIDATE to PATH if it is a readable file: 0, -ENOENT or -ENAMETOOLONG. */
static int take(const char *candidate, char *path, size_t pathlen)
{
    if (access(candidate, R_OK) != 0)
        return -ENOENT;
    if (strlen(candidate) >= pathlen)
        return -ENAMETOOLONG;
    memcpy(path, candidate, strlen(candidate) + 1);
    return 0;
}

int sim_model_find(const char *name, char *path, size_t pathlen)
{
    if (!name || !*name || !path || pathlen == 0)
        return -ENOENT;
    size_t nlen = strlen(name);
    if (strchr(name, '/') || (nlen > 6 && strcmp(name + nlen - 6, ".model") == 0))
        return take(name, path, pathlen);

    char candidate[PATH_MAX + 64];
    const char *dir = getenv("POS_MODELS_DIR");
    if (dir && *dir) {
        int n = snprintf(candidate, sizeof candidate, "%s/%s.model", dir, name);
        if (n > 0 && (size_t)n < sizeof candidate) {
            int rc = take(candidate, path, pathlen);
            if (rc != -ENOENT)
                return rc;
        }
    }

    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return -ENOENT;
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -ENOENT;
    *slash = '\0'; /* the folder of the executable */
    static const char *const rel[] = {"../sim/models", "../share/pos/models"};
    for (size_t i = 0; i < sizeof rel / sizeof *rel; i++) {
        int n = snprintf(candidate, sizeof candidate, "%s/%s/%s.model", exe, rel[i], name);
        if (n <= 0 || (size_t)n >= sizeof candidate)
            continue;
        int rc = take(candidate, path, pathlen);
        if (rc != -ENOENT)
            return rc;
    }
    return -ENOENT;
}
