/* Reading a schedule file (docs/schedule.md) for posd and possim: the file's bytes, then the
 * pure parser of sched/schedule.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sched/schedule_file.h"

#define MAX_FILE (64u << 20)

int pos_schedule_load(const char *path, struct pos_schedule *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    /* O_NONBLOCK: a FIFO given as the file must not hang posd */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_FILE) {
        snprintf(err, errlen, "%s: not a regular file of at most %u MiB", path, MAX_FILE >> 20);
        close(fd);
        return -EINVAL;
    }
    size_t len = (size_t)st.st_size, got = 0;
    char *text = malloc(len + 1);
    if (!text) {
        close(fd);
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    while (got < len) {
        ssize_t n = read(fd, text + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    int rc = pos_schedule_parse(path, text, got, out, err, errlen);
    free(text);
    return rc;
}
