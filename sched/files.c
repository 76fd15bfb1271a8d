/* posd's files (files.h): the state directory through one descriptor, and files users name
 * opened component by component. */
#include "sched/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char state_path[4096]; /* for messages: the directory posd_state_open opened */

int posd_state_open(const char *path, char *msg, size_t cap)
{
    snprintf(state_path, sizeof state_path, "%s", path);
    const char *what = "(state_dir in [daemon], or POSD_STATE_DIR)";
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        if (mkdir(path, 0700) < 0 && errno != EEXIST) {
            int e = errno;
            snprintf(msg, cap, "cannot create the state directory %s: %s %s", path,
                     strerror(e), what);
            return -e;
        }
        fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
        int e = errno;
        struct stat st;
        if ((e == ELOOP || e == ENOTDIR) && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
            snprintf(msg, cap,
                     "the state directory %s is a symbolic link: posd keeps its state only in a "
                     "directory itself %s, not through a link another user could point "
                     "elsewhere",
                     path, what);
        else
            snprintf(msg, cap, "the state directory %s: %s %s", path, strerror(e), what);
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        snprintf(msg, cap, "the state directory %s: %s", path, strerror(e));
        return -e;
    }
    if (st.st_uid != geteuid()) {
        close(fd);
        snprintf(msg, cap,
                 "the state directory %s belongs to uid %u, not to posd's user (uid %u): that "
                 "user could change what posd reads and writes there; remove it, or give posd "
                 "another %s",
                 path, (unsigned)st.st_uid, (unsigned)geteuid(), what);
        return -EPERM;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        close(fd);
        snprintf(msg, cap,
                 "the state directory %s may be written by others (mode %04o): chmod go-w %s, "
                 "or give posd another %s",
                 path, (unsigned)(st.st_mode & 07777), path, what);
        return -EPERM;
    }
    return fd;
}

/* NAME.tmp.* */
static int is_temporary(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && strncmp(entry + n, ".tmp.", 5) == 0;
}

int posd_state_remove_stale(int dirfd, const char *name)
{
    int dup_fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    DIR *dir = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!dir) {
        if (dup_fd >= 0)
            close(dup_fd);
        return 0;
    }
    rewinddir(dir);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        struct stat st;
        if (!is_temporary(e->d_name, name) ||
            fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (unlinkat(dirfd, e->d_name, 0) == 0)
            removed++;
    }
    closedir(dir);
    return removed;
}

/* FD (opened O_NONBLOCK) as a stream to read, when it is a regular file; else NULL, FD closed,
 * -errno in *ERR and "SHOWN: what" (SHOWN_DIR/SHOWN when SHOWN_DIR is given) in MSG. */
static FILE *regular_stream(int fd, const char *shown_dir, const char *shown, int *err,
                            char *msg, size_t cap)
{
    struct stat st;
    const char *sep = shown_dir ? "/" : "";
    shown_dir = shown_dir ? shown_dir : "";
    if (fd < 0 || fstat(fd, &st) < 0) {
        *err = -errno;
        if (fd >= 0)
            close(fd);
        if (*err != -ENOENT)
            snprintf(msg, cap, "%s%s%s: %s", shown_dir, sep, shown,
                     *err == -ELOOP ? "a symbolic link" : strerror(-*err));
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        *err = -EINVAL;
        snprintf(msg, cap, "%s%s%s: not a regular file", shown_dir, sep, shown);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "r");
    if (!f) {
        *err = -errno;
        close(fd);
        snprintf(msg, cap, "%s%s%s: %s", shown_dir, sep, shown, strerror(-*err));
    }
    return f;
}

FILE *posd_state_read(int dirfd, const char *name, int *err, char *msg, size_t cap)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    return regular_stream(fd, state_path, name, err, msg, cap);
}

FILE *posd_open_regular(const char *path, int *err, char *msg, size_t cap)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    return regular_stream(fd, NULL, path, err, msg, cap);
}

/* A name for a temporary of NAME nobody can guess: NAME.tmp. and 16 random hex digits. */
static int temporary_name(const char *name, char *out, size_t len)
{
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r ^= ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
             (uint64_t)(uintptr_t)&r;
    }
    return snprintf(out, len, "%s.tmp.%016llx", name, (unsigned long long)r) < (int)len ? 0 : -1;
}

int posd_state_replace(int dirfd, const char *name, int (*write)(FILE *f, void *arg),
                       void *arg, char *msg, size_t cap)
{
    struct stat dst;
    if (fstat(dirfd, &dst) == 0 && dst.st_nlink == 0) {
        snprintf(msg, cap,
                 "the state directory %s was removed while posd ran: restart posd to make it "
                 "again",
                 state_path);
        return -ENOENT;
    }
    char tmp[256];
    int fd = -1;
    for (int i = 0; i < 8 && fd < 0; i++) {
        if (temporary_name(name, tmp, sizeof tmp) < 0) {
            snprintf(msg, cap, "%s: name too long", name);
            return -ENAMETOOLONG;
        }
        fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int e = errno;
        snprintf(msg, cap, "%s/%s: %s", state_path, tmp, strerror(e));
        return -e;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        unlinkat(dirfd, tmp, 0);
        snprintf(msg, cap, "%s/%s: %s", state_path, tmp, strerror(e));
        return -e;
    }
    errno = 0;
    int n = write(f, arg);
    int bad = n < 0 || ferror(f);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        bad = 1;
    int e = errno ? errno : EIO;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno ? errno : EIO;
    }
    if (!bad && renameat(dirfd, tmp, dirfd, name) != 0) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        unlinkat(dirfd, tmp, 0);
        snprintf(msg, cap, "%s/%s: %s", state_path, name, strerror(e));
        return -e;
    }
    (void)fsync(dirfd); /* the rename itself durable */
    return n;
}

int posd_state_remove(int dirfd, const char *name)
{
    return unlinkat(dirfd, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
}

/* Whether user UID/GID has permission BIT (4 read, 1 search) on what ST describes. */
static int user_may(uid_t uid, gid_t gid, const struct stat *st, unsigned bit)
{
    if (uid == 0)
        return 1;
    if (st->st_uid == uid)
        return (st->st_mode & (bit << 6)) != 0;
    if (st->st_gid == gid)
        return (st->st_mode & (bit << 3)) != 0;
    return (st->st_mode & bit) != 0;
}

FILE *posd_open_as_user(const char *path, const char *shown, uid_t uid, gid_t gid, int *err,
                        char *msg, size_t cap)
{
    char buf[4096];
    if (path[0] != '/' || strlen(path) >= sizeof buf) {
        *err = -EINVAL;
        snprintf(msg, cap, "%s: the profile file must be an absolute path", shown);
        return NULL;
    }
    snprintf(buf, sizeof buf, "%s", path);
    int dfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC), fd = -1;
    struct stat st;
    if (dfd < 0 || fstat(dfd, &st) < 0)
        goto sys;
    char *save = NULL, *c = strtok_r(buf, "/", &save);
    const char *last = NULL;
    if (!c) {
        *err = -EISDIR;
        snprintf(msg, cap, "%s: not a regular file", shown);
        goto out;
    }
    while (c) {
        char *next = strtok_r(NULL, "/", &save);
        if (strcmp(c, ".") == 0) {
            c = next;
            continue;
        }
        if (strcmp(c, "..") == 0) {
            *err = -EINVAL;
            snprintf(msg, cap, "%s: '..' on the path: give the file's own path", shown);
            goto out;
        }
        if (!user_may(uid, gid, &st, 1)) { /* the directory it is in: may the user enter it? */
            *err = -EACCES;
            snprintf(msg, cap, "%s: you may not enter a directory on the path", shown);
            goto out;
        }
        fd = openat(dfd, c, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0)
            goto sys;
        if (S_ISLNK(st.st_mode)) {
            *err = -ELOOP;
            snprintf(msg, cap, "%s: a symbolic link on the path: give the file's own path",
                     shown);
            goto out;
        }
        if (next && !S_ISDIR(st.st_mode)) {
            *err = -ENOTDIR;
            snprintf(msg, cap, "%s: %s", shown, strerror(ENOTDIR));
            goto out;
        }
        if (next) {
            close(dfd);
            dfd = fd;
            fd = -1;
        }
        last = c;
        c = next;
    }
    if (fd < 0 || !S_ISREG(st.st_mode)) {
        *err = -EINVAL;
        snprintf(msg, cap, "%s: not a regular file", shown);
        goto out;
    }
    if (!user_may(uid, gid, &st, 4)) {
        *err = -EACCES;
        snprintf(msg, cap, "%s: you may not read it", shown);
        goto out;
    }
    /* the very file looked at, opened to read (through /proc's link to the descriptor; without
     * /proc, by name in the directory looked at, and only if it is still that file) */
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    int rfd = open(proc, O_RDONLY | O_NOCTTY | O_CLOEXEC);
    if (rfd < 0) {
        struct stat again;
        rfd = openat(dfd, last, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (rfd >= 0 && (fstat(rfd, &again) < 0 || again.st_dev != st.st_dev ||
                         again.st_ino != st.st_ino)) {
            close(rfd);
            rfd = -1;
            errno = ESTALE;
        }
    }
    if (rfd < 0)
        goto sys;
    FILE *f = fdopen(rfd, "r");
    if (!f) {
        close(rfd);
        goto sys;
    }
    close(fd);
    close(dfd);
    return f;
sys:
    *err = -errno;
    snprintf(msg, cap, "%s: %s", shown, strerror(errno));
out:
    if (fd >= 0)
        close(fd);
    if (dfd >= 0)
        close(dfd);
    return NULL;
}
