/* Parser of the simulated driver's text modules (docs/sim-formats.md) and the cost of one
 * launch of a declared kernel. */
#include "sim/module_text.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct sim_twin_sig twin_sigs[] = {
    [SIM_TWIN_VECTOR_ADD] = {"vector_add", 4, {8, 8, 8, 4}},
    [SIM_TWIN_FILL] = {"fill", 3, {8, 4, 4}},
    [SIM_TWIN_SCALE] = {"scale", 3, {8, 4, 4}},
    [SIM_TWIN_CHECKSUM] = {"checksum", 3, {8, 4, 8}},
};

#define NTWINS ((int)(sizeof twin_sigs / sizeof twin_sigs[0]))

const struct sim_twin_sig *sim_twin_signature(int twin)
{
    if (twin <= SIM_TWIN_NONE || twin >= NTWINS)
        return NULL;
    return &twin_sigs[twin];
}

int sim_module_is_text(const void *text, size_t len)
{
    const char *s = text;
    size_t i = 0;
    /* skip blank lines and comments */
    while (i < len && s[i]) {
        while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n'))
            i++;
        if (i < len && s[i] == '#') {
            while (i < len && s[i] && s[i] != '\n')
                i++;
            continue;
        }
        break;
    }
    size_t m = strlen(SIM_MODULE_MAGIC);
    return i + m <= len && strncmp(s + i, SIM_MODULE_MAGIC, m) == 0;
}

static int name_char_ok(char c)
{
    return isalnum((unsigned char)c) || strchr("_.$/:<>,-", c) != NULL;
}

static int parse_number(const char *v, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(d) || d < 0)
        return -1;
    *out = d;
    return 0;
}

static int parse_u32(const char *v, uint32_t *out)
{
    double d;
    if (parse_number(v, &d) < 0 || d != floor(d) || d > UINT32_MAX)
        return -1;
    *out = (uint32_t)d;
    return 0;
}

/* Applies one key=value to D; returns NULL or what is wrong. */
static const char *apply_key(struct sim_kernel_decl *d, const char *key, const char *val)
{
    if (strcmp(key, "flops") == 0) {
        d->cost_given = 1;
        return parse_number(val, &d->flops) < 0 ? "bad number for flops" : NULL;
    }
    if (strcmp(key, "bytes") == 0) {
        d->cost_given = 1;
        return parse_number(val, &d->bytes) < 0 ? "bad number for bytes" : NULL;
    }
    if (strcmp(key, "per") == 0) {
        if (strcmp(val, "launch") == 0)
            d->per = SIM_PER_LAUNCH;
        else if (strcmp(val, "block") == 0)
            d->per = SIM_PER_BLOCK;
        else if (strcmp(val, "thread") == 0)
            d->per = SIM_PER_THREAD;
        else
            return "per must be launch, block or thread";
        return NULL;
    }
    if (strcmp(key, "dtype") == 0) {
        if (strcmp(val, "fp32") == 0)
            d->fp16 = 0;
        else if (strcmp(val, "fp16") == 0)
            d->fp16 = 1;
        else
            return "dtype must be fp32 or fp16";
        return NULL;
    }
    if (strcmp(key, "smem") == 0)
        return parse_u32(val, &d->smem) < 0 ? "bad number for smem" : NULL;
    if (strcmp(key, "regs") == 0)
        return parse_u32(val, &d->regs) < 0 || d->regs > 255 ? "regs must be 0..255" : NULL;
    if (strcmp(key, "maxthreads") == 0)
        return parse_u32(val, &d->maxthreads) < 0 || d->maxthreads < 1 || d->maxthreads > 1024
                   ? "maxthreads must be 1..1024"
                   : NULL;
    if (strcmp(key, "cost") == 0) {
        if (strcmp(val, "args") != 0)
            return "cost must be 'args'";
        d->cost_args = 1;
        return NULL;
    }
    if (strcmp(key, "twin") == 0) {
        for (int t = 1; t < NTWINS; t++) {
            if (strcmp(val, twin_sigs[t].name) == 0) {
                d->twin = t;
                return NULL;
            }
        }
        return "unknown twin (vector_add, fill, scale, checksum)";
    }
    return "unknown key";
}

/* Parses one ".kernel NAME k=v ..." line (LINE is modified). */
static const char *parse_kernel_line(char *line, struct sim_kernel_decl *d, char *badkey,
                                     size_t badlen)
{
    memset(d, 0, sizeof *d);
    d->regs = 32;
    d->maxthreads = 1024;
    char *save = NULL;
    strtok_r(line, " \t", &save); /* ".kernel" */
    char *name = strtok_r(NULL, " \t", &save);
    if (!name)
        return "missing kernel name";
    size_t nlen = strlen(name);
    if (nlen >= SIM_KERNEL_NAME_MAX)
        return "kernel name too long (max 255)";
    for (size_t i = 0; i < nlen; i++)
        if (!name_char_ok(name[i]))
            return "bad character in kernel name";
    memcpy(d->name, name, nlen + 1);
    for (char *tok; (tok = strtok_r(NULL, " \t", &save)) != NULL;) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok || !eq[1]) {
            snprintf(badkey, badlen, "%s", tok);
            return "expected key=value";
        }
        *eq = '\0';
        const char *what = apply_key(d, tok, eq + 1);
        if (what) {
            snprintf(badkey, badlen, "%s=%s", tok, eq + 1);
            return what;
        }
    }
    if (d->cost_args && d->twin)
        return "cost=args and twin= exclude each other";
    if (d->cost_args && d->cost_given)
        return "cost=args and flops/bytes exclude each other";
    return NULL;
}

int sim_module_parse(const char *text, size_t len, struct sim_kernel_decl **out, size_t *n,
                     char *err, size_t errlen)
{
    size_t cap = 16, count = 0;
    struct sim_kernel_decl *v = malloc(cap * sizeof *v);
    if (!v)
        return -ENOMEM;
    int seen_magic = 0, lineno = 0;
    size_t i = 0;
    while (i < len && text[i]) {
        size_t start = i;
        while (i < len && text[i] && text[i] != '\n')
            i++;
        size_t llen = i - start;
        if (i < len && text[i] == '\n')
            i++;
        lineno++;
        char line[2048];
        if (llen >= sizeof line) {
            snprintf(err, errlen, "line %d: line too long", lineno);
            goto fail;
        }
        memcpy(line, text + start, llen);
        line[llen] = '\0';
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        size_t plen = strlen(p);
        while (plen > 0 && (p[plen - 1] == ' ' || p[plen - 1] == '\t' || p[plen - 1] == '\r'))
            p[--plen] = '\0';
        if (!*p)
            continue;
        if (!seen_magic) {
            if (strcmp(p, SIM_MODULE_MAGIC " 1") != 0) {
                snprintf(err, errlen, "line %d: expected '%s 1' header", lineno, SIM_MODULE_MAGIC);
                goto fail;
            }
            seen_magic = 1;
            continue;
        }
        if (strcmp(p, ".kernel") == 0) {
            snprintf(err, errlen, "line %d: missing kernel name", lineno);
            goto fail;
        }
        if (strncmp(p, ".kernel", 7) != 0 || (p[7] != ' ' && p[7] != '\t')) {
            snprintf(err, errlen, "line %d: expected '.kernel NAME key=value...'", lineno);
            goto fail;
        }
        if (count == cap) {
            cap *= 2;
            struct sim_kernel_decl *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                free(v);
                return -ENOMEM;
            }
            v = nv;
        }
        char badkey[64] = "";
        const char *what = parse_kernel_line(p, &v[count], badkey, sizeof badkey);
        if (what) {
            if (badkey[0])
                snprintf(err, errlen, "line %d: %s: %s", lineno, what, badkey);
            else
                snprintf(err, errlen, "line %d: %s", lineno, what);
            goto fail;
        }
        for (size_t k = 0; k < count; k++) {
            if (strcmp(v[k].name, v[count].name) == 0) {
                snprintf(err, errlen, "line %d: duplicate kernel '%s'", lineno, v[count].name);
                goto fail;
            }
        }
        count++;
    }
    if (!seen_magic) {
        snprintf(err, errlen, "line %d: no '%s 1' header", lineno, SIM_MODULE_MAGIC);
        goto fail;
    }
    *out = v;
    *n = count;
    return 0;
fail:
    free(v);
    return -EINVAL;
}

void sim_kernel_cost(const struct sim_kernel_decl *d, uint64_t blocks, uint64_t threads_per_block,
                     uint64_t args_flops, uint64_t args_bytes, uint32_t twin_n, double *flops,
                     double *bytes)
{
    if (d->cost_args) {
        *flops = (double)args_flops;
        *bytes = (double)args_bytes;
        return;
    }
    if (d->twin && !d->cost_given) {
        double n = twin_n;
        switch (d->twin) {
        case SIM_TWIN_VECTOR_ADD:
            *flops = n, *bytes = 12 * n;
            break;
        case SIM_TWIN_FILL:
            *flops = 0, *bytes = 4 * n;
            break;
        case SIM_TWIN_SCALE:
            *flops = n, *bytes = 8 * n;
            break;
        default:
            *flops = n, *bytes = 4 * n + 8;
            break;
        }
        return;
    }
    double mult = 1;
    if (d->per == SIM_PER_BLOCK)
        mult = (double)blocks;
    else if (d->per == SIM_PER_THREAD)
        mult = (double)blocks * (double)threads_per_block;
    *flops = d->flops * mult;
    *bytes = d->bytes * mult;
}
