/* Kernel profiles: the text file posd persists and imports (docs/policy.md, "Kernel
 * profiles"). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sched/profile.h"


int pos_prof_write(const struct pos_profiles *p, const struct pos_sched_device *dev, FILE *f)
{
    fprintf(f, "# pos kernel profiles (docs/policy.md): uid key grid block samples mean_ns sd_ns"
               " tries corun_samples corun_ratio\n");
    fprintf(f, "pos-profiles %d\n", POS_PROF_VERSION);
    fprintf(f, "device sms %u\n", dev ? dev->sm_count : 0);
    size_t n = 0;
    for (size_t i = 0; i < p->cap; i++) {
        const struct pos_kprof *k = &p->t[i];
        if (!k->used || (k->n == 0 && k->co_n == 0))
            continue;
        char uid[16];
        if (k->uid == POS_PROF_ANY_UID)
            snprintf(uid, sizeof uid, "*");
        else
            snprintf(uid, sizeof uid, "%u", k->uid);
        fprintf(f, "k %s %016llx %u,%u,%u %u,%u,%u %llu %.1f %.1f %llu %llu %.4f\n", uid,
                (unsigned long long)k->key, k->grid[0], k->grid[1], k->grid[2], k->block[0],
                k->block[1], k->block[2], (unsigned long long)k->n, k->mean_ns, pos_kprof_sd(k),
                (unsigned long long)k->tries, (unsigned long long)k->co_n,
                k->co_n ? k->co_ratio : 1.0);
        n++;
    }
    fprintf(f, "end %zu\n", n);
    if (ferror(f))
        return -EIO;
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

int pos_prof_save(const struct pos_profiles *p, const struct pos_sched_device *dev,
                  const char *path, char *err, size_t errlen)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%s: path too long", path);
        return -ENAMETOOLONG;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", tmp, strerror(e));
        return -e;
    }
    int n = pos_prof_write(p, dev, f);
    int bad = n < 0;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        bad = 1;
    if (fclose(f) != 0)
        bad = 1;
    if (bad || rename(tmp, path) != 0) {
        int e = errno ? errno : EIO;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        unlink(tmp);
        return -e;
    }
    return n;
}

static int parse_u32s(const char *s, uint32_t v[3])
{
    char *end;
    for (int i = 0; i < 3; i++) {
        errno = 0;
        unsigned long x = strtoul(s, &end, 10);
        if (errno || end == s || x == 0 || x > UINT32_MAX || *s == '-')
            return -EINVAL;
        v[i] = (uint32_t)x;
        if (i < 2) {
            if (*end != ',')
                return -EINVAL;
            s = end + 1;
        }
    }
    return *end == '\0' ? 0 : -EINVAL;
}

int pos_prof_load(struct pos_profiles *p, const struct pos_sched_device *dev, const char *path,
                  char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        return -e;
    }
    int rc = pos_prof_load_file(p, dev, f, path, err, errlen);
    fclose(f);
    return rc;
}

int pos_prof_load_file(struct pos_profiles *p, const struct pos_sched_device *dev, FILE *f,
                       const char *path, char *err, size_t errlen)
{
    struct pos_kprof *in = NULL;
    size_t nin = 0, capin = 0;
    char line[1024];
    int lineno = 0, have_version = 0, ended = 0, rc = -EINVAL;
    const char *what = NULL;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n') {
            what = feof(f) ? "truncated line (no newline at the end of the file)" : "line too long";
            goto bad;
        }
        line[--len] = '\0';
        if (line[0] == '#' || line[0] == '\0')
            continue;
        if (ended) {
            what = "text after the end line";
            goto bad;
        }
        int version;
        unsigned sms;
        size_t count;
        char c;
        if (!have_version) {
            if (sscanf(line, "pos-profiles %d %c", &version, &c) != 1) {
                what = "not a pos profile file (expected 'pos-profiles VERSION' first)";
                goto bad;
            }
            if (version != POS_PROF_VERSION) {
                snprintf(err, errlen, "%s:%d: profile file version %d, this posd reads %d", path,
                         lineno, version, POS_PROF_VERSION);
                goto out;
            }
            have_version = 1;
            continue;
        }
        if (sscanf(line, "device sms %u %c", &sms, &c) == 1) {
            if (dev && dev->sm_count && sms && sms != dev->sm_count) {
                snprintf(err, errlen, "%s:%d: measured on a device with %u SMs, this one has %u",
                         path, lineno, sms, dev->sm_count);
                goto out;
            }
            continue;
        }
        if (sscanf(line, "end %zu %c", &count, &c) == 1) {
            if (count != nin) {
                snprintf(err, errlen, "%s:%d: end line counts %zu profiles, the file has %zu",
                         path, lineno, count, nin);
                goto out;
            }
            ended = 1;
            continue;
        }
        char uid[16], keys[24], gs[48], bs[48];
        unsigned long long n, tries, co_n;
        double mean, sd, ratio;
        if (sscanf(line, "k %15s %23s %47s %47s %llu %lf %lf %llu %llu %lf %c", uid, keys, gs, bs,
                   &n, &mean, &sd, &tries, &co_n, &ratio, &c) != 10) {
            what = "expected 'k UID KEY GX,GY,GZ BX,BY,BZ SAMPLES MEAN_NS SD_NS TRIES "
                   "CORUN_SAMPLES CORUN_RATIO'";
            goto bad;
        }
        struct pos_kprof k = {.used = 1};
        char *end;
        if (strcmp(uid, "*") == 0) {
            k.uid = POS_PROF_ANY_UID;
        } else {
            errno = 0;
            unsigned long u = strtoul(uid, &end, 10);
            if (errno || *end || uid[0] == '-' || u >= UINT32_MAX) {
                what = "bad uid (a number or *)";
                goto bad;
            }
            k.uid = (uint32_t)u;
        }
        errno = 0;
        k.key = strtoull(keys, &end, 16);
        if (errno || *end || strlen(keys) != 16) {
            what = "bad kernel key (16 hex digits)";
            goto bad;
        }
        if (parse_u32s(gs, k.grid) < 0 || parse_u32s(bs, k.block) < 0) {
            what = "bad grid or block (three positive integers, comma-separated)";
            goto bad;
        }
        if (!isfinite(mean) || mean < 0 || mean > 1e12 || (n && mean == 0 && sd > 0) ||
            !isfinite(sd) || sd < 0 || sd > 1e12) {
            what = "impossible duration (mean and sd in 0..1e12 ns)";
            goto bad;
        }
        if (!isfinite(ratio) || ratio < 0.01 || ratio > 100 || (co_n && !n)) {
            what = "impossible co-run ratio (0.01..100, and only with solo samples)";
            goto bad;
        }
        if (n == 0 && co_n == 0) {
            what = "a profile without samples";
            goto bad;
        }
        if (tries < n) {
            what = "fewer tries than samples";
            goto bad;
        }
        k.n = n;
        k.mean_ns = mean;
        uint64_t m = n < POS_PROF_MEAN_EXACT ? n : POS_PROF_MEAN_EXACT;
        k.m2 = m > 1 ? sd * sd * (double)(m - 1) : 0;
        k.tries = tries;
        k.co_n = co_n;
        k.co_ratio = co_n ? ratio : 0;
        if (nin == capin) {
            size_t nc = capin ? capin * 2 : 256;
            struct pos_kprof *t = realloc(in, nc * sizeof *t);
            if (!t) {
                rc = -ENOMEM;
                snprintf(err, errlen, "%s: out of memory", path);
                goto out;
            }
            in = t;
            capin = nc;
        }
        in[nin++] = k;
    }
    if (ferror(f)) {
        rc = -EIO;
        snprintf(err, errlen, "%s: read error", path);
        goto out;
    }
    if (!have_version) {
        lineno = lineno ? lineno : 1;
        what = "empty: not a pos profile file";
        goto bad;
    }
    if (!ended) {
        what = "truncated (no end line)";
        goto bad;
    }
    for (size_t i = 0; i < nin; i++) {
        struct pos_kprof *k = pos_prof_get(p, in[i].uid, in[i].key, in[i].grid, in[i].block, 1);
        if (!k) {
            rc = -ENOSPC;
            if (p->user_max && in[i].uid != POS_PROF_ANY_UID &&
                pos_prof_user_count(p, in[i].uid) >= p->user_max)
                snprintf(err, errlen,
                         "%s: uid %u has %zu profiles, the most one user may (%zu of %zu "
                         "loaded)",
                         path, in[i].uid, pos_prof_user_count(p, in[i].uid), i, nin);
            else
                snprintf(err, errlen, "%s: the profile table is full (%zu of %zu loaded)",
                         path, i, nin);
            goto out;
        }
        *k = in[i];
    }
    rc = 0;
    goto out;
bad:
    snprintf(err, errlen, "%s:%d: %s", path, lineno, what);
out:
    free(in);
    return rc;
}
