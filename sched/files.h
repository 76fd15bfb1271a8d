/* posd's files: its state directory, a place only posd's user writes, reached through one
 * descriptor so that no name in it can be redirected; and the files users name to it, opened
 * without following a symbolic link anywhere on the path and only when regular
 * (docs/security.md, "Files"). */
#ifndef POS_SCHED_FILES_H
#define POS_SCHED_FILES_H

#include <stdio.h>
#include <sys/types.h>

/* Opens state directory PATH (absolute), creating it (mode 0700) when it is missing. Refuses,
 * with one line in MSG saying what to do, a directory that is a symbolic link, is not a
 * directory, is not owned by this process's user, or that others (group or anyone) may write.
 * Returns the directory's descriptor, or -errno. */
int posd_state_open(const char *path, char *msg, size_t cap);

/* Removes the temporary files a save left when posd was killed during it (NAME.tmp.*: regular
 * files only). Returns how many it removed. */
int posd_state_remove_stale(int dirfd, const char *name);

/* Opens NAME in the state directory to read it: not through a symbolic link, without blocking
 * (a FIFO or device there is refused, not waited for) and only when it is a regular file.
 * Returns a stream, or NULL with -errno in *ERR and one line in MSG (*ERR -ENOENT, and MSG
 * untouched, when there is no such file). */
FILE *posd_state_read(int dirfd, const char *name, int *err, char *msg, size_t cap);

/* Replaces NAME in the state directory with what WRITE writes (it returns a count >= 0, or < 0
 * on failure): a temporary of an unpredictable name created exclusively (mode 0600), synced,
 * renamed over NAME, the directory synced. Returns WRITE's count, or -errno with one line in
 * MSG. */
int posd_state_replace(int dirfd, const char *name, int (*write)(FILE *f, void *arg),
                       void *arg, char *msg, size_t cap);

/* Opens PATH (the admin's: symbolic links followed) to read it without blocking, and only
 * when it is a regular file. Returns a stream, or NULL with -errno in *ERR and one line in
 * MSG. */
FILE *posd_open_regular(const char *path, int *err, char *msg, size_t cap);

/* Removes NAME from the state directory. Returns 0 (also when there was none), or -errno. */
int posd_state_remove(int dirfd, const char *name);

/* Opens PATH (absolute) to read it for a user UID/GID (uid 0: root, who may read anything):
 * every component is opened without following a symbolic link (one on the path is refused),
 * each directory must be one that user may search and the file a regular file that user may
 * read, all checked on what was opened before the file is opened for reading (so a device
 * node or a FIFO is never opened). Returns a stream, or NULL with -errno in *ERR and one line
 * in MSG, which names the path as SHOWN (PATH made printable by the caller). */
FILE *posd_open_as_user(const char *path, const char *shown, uid_t uid, gid_t gid, int *err,
                        char *msg, size_t cap);

#endif
