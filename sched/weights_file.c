/* The weights file on disk (weights_file.h): the I/O around the pure codec of weights.c. */
#include "sched/weights_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pos_weights_load(const char *path, struct pos_weights *w, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        return -e;
    }
    size_t cap = 0, n = 0;
    char *b = NULL;
    int rc = 0;
    for (;;) {
        if (n == cap) {
            if (cap >= POS_WEIGHTS_FILE_MAX) {
                snprintf(err, errlen, "%s: larger than %u MiB", path, POS_WEIGHTS_FILE_MAX >> 20);
                rc = -EFBIG;
                break;
            }
            cap = cap ? 2 * cap : 65536;
            char *nb = realloc(b, cap);
            if (!nb) {
                snprintf(err, errlen, "%s: out of memory", path);
                rc = -ENOMEM;
                break;
            }
            b = nb;
        }
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                snprintf(err, errlen, "%s: cannot read it", path);
                rc = -EIO;
            }
            break;
        }
    }
    fclose(f);
    if (rc == 0) {
        char what[256];
        rc = pos_weights_parse(b, n, w, what, sizeof what);
        if (rc < 0)
            snprintf(err, errlen, "%s: %s", path, what);
    }
    free(b);
    return rc;
}

int pos_weights_save(const char *path, const struct pos_weights *w, char *err, size_t errlen)
{
    void *buf = NULL;
    size_t len = 0;
    int rc = pos_weights_encode(w, &buf, &len);
    if (rc < 0) {
        snprintf(err, errlen, "%s: cannot encode the weights: %s", path, strerror(-rc));
        return rc;
    }
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp) {
        free(buf);
        snprintf(err, errlen, "%s: name too long", path);
        return -ENAMETOOLONG;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int e = errno;
        free(buf);
        snprintf(err, errlen, "%s: %s", tmp, strerror(e));
        return -e;
    }
    int bad = fwrite(buf, 1, len, f) != len;
    bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    int e = errno;
    bad |= fclose(f) != 0;
    free(buf);
    if (!bad && rename(tmp, path) == 0)
        return 0;
    e = errno ? errno : e;
    unlink(tmp);
    snprintf(err, errlen, "%s: cannot write it: %s", path, strerror(e));
    return -e;
}
