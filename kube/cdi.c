/* The CDI spec of pos's GPUs (see cdi.h): the edits of kube_edits_make written as CDI's
 * containerEdits, one device per GPU and one for all of them. */
#include "fail.h"
#include "cdi.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- JSON --------------------------------------------------------------------------------- */

/* The length of the UTF-8 sequence at S (1..4), 0 when it is not one: overlong forms,
 * surrogates and code points over U+10FFFF are not UTF-8 (RFC 3629). */
static size_t utf8_seq(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
    if (!len || s[0] > 0xf4)
        return 0;
    uint32_t cp = s[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) /* the NUL that ends S stops here too */
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

static int utf8_valid(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t len = utf8_seq(p);
        if (!len)
            return 0;
        p += len;
    }
    return 1;
}

int kube_cdi_json_string(FILE *f, const char *s)
{
    if (!utf8_valid(s))
        return -EINVAL;
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\b':
            fputs("\\b", f);
            break;
        case '\f':
            fputs("\\f", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
    return 0;
}

/* Every string the spec will carry, checked before anything is written: JSON carries UTF-8
 * only, and a path that is not cannot be written without changing it. */
static int edits_utf8(const struct kube_edits *e, char *err, size_t errlen)
{
    for (size_t i = 0; i < e->n_env; i++)
        if (!utf8_valid(e->env[i].value))
            return kube_fail(err, errlen, -EINVAL, "%s is not valid UTF-8, which JSON cannot carry",
                             e->env[i].name);
    for (size_t i = 0; i < e->n_mounts; i++)
        if (!utf8_valid(e->mounts[i].host))
            return kube_fail(err, errlen, -EINVAL,
                             "a mount's host path is not valid UTF-8, which JSON cannot carry");
    for (size_t i = 0; i < e->n_nodes; i++)
        if (!utf8_valid(e->nodes[i].path))
            return kube_fail(err, errlen, -EINVAL,
                             "a device node's path is not valid UTF-8, which JSON cannot carry");
    return 0;
}

/* ---- the spec ----------------------------------------------------------------------------- */

/* "NAME=VALUE" as one JSON string */
static void write_env(FILE *f, const struct kube_env *v)
{
    char kv[sizeof v->name + sizeof v->value + 1];
    snprintf(kv, sizeof kv, "%s=%s", v->name, v->value);
    kube_cdi_json_string(f, kv);
}

static void write_edits(FILE *f, const struct kube_edits *e, const char *ind)
{
    fprintf(f, "{\n%s  \"env\": [", ind);
    for (size_t i = 0; i < e->n_env; i++) {
        fprintf(f, "%s\n%s    ", i ? "," : "", ind);
        write_env(f, &e->env[i]);
    }
    fprintf(f, "\n%s  ],\n%s  \"mounts\": [", ind, ind);
    for (size_t i = 0; i < e->n_mounts; i++) {
        const struct kube_mount *m = &e->mounts[i];
        fprintf(f, "%s\n%s    {\"hostPath\": ", i ? "," : "", ind);
        kube_cdi_json_string(f, m->host);
        fputs(", \"containerPath\": ", f);
        kube_cdi_json_string(f, m->container);
        /* a bind mount: "type" is a dummy for the runtime, the options say what it is */
        fprintf(f, ", \"type\": \"bind\", \"options\": [\"%s\", \"nosuid\", \"nodev\", \"bind\"]}",
                m->read_only ? "ro" : "rw");
    }
    fprintf(f, "\n%s  ]", ind);
    if (e->n_nodes) {
        fprintf(f, ",\n%s  \"deviceNodes\": [", ind);
        for (size_t i = 0; i < e->n_nodes; i++) {
            const struct kube_devnode *d = &e->nodes[i];
            fprintf(f, "%s\n%s    {\"path\": ", i ? "," : "", ind);
            kube_cdi_json_string(f, d->path);
            fprintf(f,
                    ", \"type\": \"%c\", \"major\": %u, \"minor\": %u, \"permissions\": ", d->type,
                    d->major, d->minor);
            kube_cdi_json_string(f, d->perms);
            fputc('}', f);
        }
        fprintf(f, "\n%s  ]", ind);
    }
    fprintf(f, "\n%s}", ind);
}

static void write_device(FILE *f, const char *name, const struct kube_edits *e, int last)
{
    fprintf(f, "    {\n      \"name\": \"%s\",\n      \"containerEdits\": ", name);
    write_edits(f, e, "      ");
    fprintf(f, "\n    }%s\n", last ? "" : ",");
}

static int check_gpus(const int *gpus, size_t n, char *err, size_t errlen)
{
    if (n == 0)
        return kube_fail(err, errlen, -EINVAL, "no GPU given");
    if (n > KUBE_CDI_MAX_GPUS)
        return kube_fail(err, errlen, -EINVAL, "%zu GPUs given, at most %d", n, KUBE_CDI_MAX_GPUS);
    for (size_t i = 0; i < n; i++) {
        if (gpus[i] < 0 || gpus[i] >= KUBE_CDI_MAX_GPUS)
            return kube_fail(err, errlen, -EINVAL, "GPU ordinal %d is out of 0..%d", gpus[i],
                             KUBE_CDI_MAX_GPUS - 1);
        for (size_t j = 0; j < i; j++)
            if (gpus[j] == gpus[i])
                return kube_fail(err, errlen, -EINVAL, "GPU %d is given twice", gpus[i]);
    }
    return 0;
}

int kube_cdi_write(FILE *f, const struct kube_edits_opts *o, const int *gpus, size_t n,
                   const char *version, char *err, size_t errlen)
{
    if (!version)
        version = KUBE_CDI_VERSION;
    if (strcmp(version, KUBE_CDI_VERSION) != 0 && strcmp(version, KUBE_CDI_VERSION_OLD) != 0)
        return kube_fail(err, errlen, -EINVAL, "cdiVersion '%s' is not one this writes (%s, %s)",
                         version, KUBE_CDI_VERSION, KUBE_CDI_VERSION_OLD);
    int rc = check_gpus(gpus, n, err, errlen);
    if (rc < 0)
        return rc;
    /* one per GPU, then all's */
    struct kube_edits *e = calloc(n + 1, sizeof *e);
    if (!e)
        return kube_fail(err, errlen, -ENOMEM, "out of memory");
    for (size_t i = 0; i <= n && rc == 0; i++) {
        rc = i < n ? kube_edits_make(o, &gpus[i], 1, &e[i], err, errlen)
                   : kube_edits_make(o, gpus, n, &e[i], err, errlen);
        if (rc == 0)
            rc = edits_utf8(&e[i], err, errlen);
    }
    if (rc == 0) {
        fprintf(f, "{\n  \"cdiVersion\": \"%s\",\n  \"kind\": \"%s\",\n  \"devices\": [\n", version,
                KUBE_CDI_KIND);
        for (size_t i = 0; i < n; i++) {
            char name[16];
            snprintf(name, sizeof name, "gpu%d", gpus[i]);
            write_device(f, name, &e[i], 0);
        }
        write_device(f, "all", &e[n], 1);
        fputs("  ]\n}\n", f);
        if (fflush(f) != 0 || ferror(f))
            rc = kube_fail(err, errlen, -EIO, "cannot write the spec: %s", strerror(errno));
    }
    free(e);
    return rc;
}

/* ---- GPU lists ---------------------------------------------------------------------------- */

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The ordinals of DIR's nvidiaN character devices */
static int gpus_present(const char *dir, int *gpus, size_t *n, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d)
        return kube_fail(err, errlen, -EINVAL, "--gpus auto: cannot read %s: %s", dir,
                         strerror(errno));
    *n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *p = e->d_name;
        if (strncmp(p, "nvidia", 6) != 0 || p[6] < '0' || p[6] > '9')
            continue;
        char *end;
        long v = strtol(p + 6, &end, 10);
        struct stat st;
        if (*end || v >= KUBE_CDI_MAX_GPUS || fstatat(dirfd(d), p, &st, 0) != 0 ||
            !S_ISCHR(st.st_mode))
            continue;
        gpus[(*n)++] = (int)v;
    }
    closedir(d);
    return 0;
}

int kube_cdi_parse_gpus(const char *list, const char *dev_dir, int *gpus, size_t *n, char *err,
                        size_t errlen)
{
    *n = 0;
    if (strcmp(list, "auto") == 0) {
        int rc = gpus_present(dev_dir ? dev_dir : "/dev", gpus, n, err, errlen);
        if (rc < 0)
            return rc;
        if (*n == 0)
            gpus[(*n)++] = 0;
        qsort(gpus, *n, sizeof *gpus, cmp_int);
        return 0;
    }
    const char *p = list;
    for (;;) {
        char *end;
        if (*p < '0' || *p > '9')
            return kube_fail(err, errlen, -EINVAL,
                             "bad GPU list '%s': want auto or ordinals and ranges such as 0,2-3",
                             list);
        long lo = strtol(p, &end, 10), hi = lo;
        if (*end == '-') {
            if (end[1] < '0' || end[1] > '9')
                return kube_fail(err, errlen, -EINVAL, "bad GPU range in '%s'", list);
            hi = strtol(end + 1, &end, 10);
        }
        if (lo > hi || hi >= KUBE_CDI_MAX_GPUS)
            return kube_fail(err, errlen, -EINVAL,
                             "bad GPU list '%s': ordinals are 0..%d, ranges low-high", list,
                             KUBE_CDI_MAX_GPUS - 1);
        for (long g = lo; g <= hi; g++) {
            for (size_t j = 0; j < *n; j++)
                if (gpus[j] == g)
                    return kube_fail(err, errlen, -EINVAL, "bad GPU list '%s': GPU %ld twice", list,
                                     g);
            gpus[(*n)++] = (int)g;
        }
        if (!*end)
            break;
        if (*end != ',')
            return kube_fail(err, errlen, -EINVAL,
                             "bad GPU list '%s': want auto or ordinals and ranges such as 0,2-3",
                             list);
        p = end + 1;
    }
    qsort(gpus, *n, sizeof *gpus, cmp_int);
    return 0;
}

/* ---- the file ----------------------------------------------------------------------------- */

/* mkdir -p DIR (mode 0755) */
static int make_dirs(const char *dir, char *err, size_t errlen)
{
    char p[KUBE_PATH_MAX];
    if ((size_t)snprintf(p, sizeof p, "%s", dir) >= sizeof p)
        return kube_fail(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return kube_fail(err, errlen, -errno, "cannot make the directory %s: %s", p,
                             strerror(errno));
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
            return kube_fail(err, errlen, -ENOTDIR, "%s is not a directory", p);
        if (!c)
            return 0;
        *s = c;
    }
}

int kube_cdi_write_file(const char *path, const struct kube_edits_opts *o, const int *gpus,
                        size_t n, const char *version, char *err, size_t errlen)
{
    char dir[KUBE_PATH_MAX], tmp[2 * KUBE_PATH_MAX + 32];
    if ((size_t)snprintf(dir, sizeof dir, "%s", path) >= sizeof dir)
        return kube_fail(err, errlen, -ENAMETOOLONG, "%s: path too long", path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return kube_fail(err, errlen, -EINVAL, "%s names a directory, not a file", path);
    /* runtimes read *.json and *.yaml: a hidden name without the suffix is never read half
     * written */
    if (slash == dir)
        snprintf(tmp, sizeof tmp, "/.%s.tmpXXXXXX", base);
    else if (slash) {
        *slash = '\0';
        snprintf(tmp, sizeof tmp, "%s/.%s.tmpXXXXXX", dir, base);
    } else
        snprintf(tmp, sizeof tmp, ".%s.tmpXXXXXX", base);
    int rc;
    if (slash && slash != dir && (rc = make_dirs(dir, err, errlen)) < 0)
        return rc;
    int fd = mkstemp(tmp);
    if (fd < 0)
        return kube_fail(err, errlen, -errno, "cannot create a file beside %s: %s", path,
                         strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f) {
        rc = kube_fail(err, errlen, -errno, "%s: %s", tmp, strerror(errno));
        close(fd);
    } else {
        rc = kube_cdi_write(f, o, gpus, n, version, err, errlen);
        if (rc == 0 && (fchmod(fd, 0644) != 0 || fsync(fd) != 0))
            rc = kube_fail(err, errlen, -errno, "%s: %s", tmp, strerror(errno));
        if (fclose(f) != 0 && rc == 0)
            rc = kube_fail(err, errlen, -EIO, "cannot write %s: %s", tmp, strerror(errno));
    }
    if (rc == 0 && rename(tmp, path) != 0)
        rc = kube_fail(err, errlen, -errno, "cannot rename %s to %s: %s", tmp, path,
                       strerror(errno));
    if (rc < 0)
        unlink(tmp);
    return rc;
}
