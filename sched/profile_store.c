/* posd's kernel profiles in its state directory (STATE_DIR/profiles, the format of
 * profile_file.c): loaded at start with the admin's import over them, written whole (in
 * saver.c's child, or in posd's thread when no child can be made), and forgotten with the
 * file removed (posctl profiles reset). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sched/files.h"
#include "sched/profile_store.h"

/* Loads what posd learnt before (STATE_DIR/profiles) and imports the admin's offline file
 * ([policy] profiles) over it. A file that is refused is logged and left out: posd starts with
 * what it has. */
void posd_profiles_load(struct posd *d)
{
    char err[768];
    int e = -ENOENT;
    FILE *f = d->state_fd < 0 ? NULL
                              : posd_state_read(d->state_fd, POSD_PROFILES_NAME, &e, err, sizeof err);
    if (f) {
        char name[POSD_PATH_MAX + 16];
        snprintf(name, sizeof name, "%s/" POSD_PROFILES_NAME, d->state_dir);
        int rc = pos_prof_load_file(&d->prof, &d->device, f, name, err, sizeof err);
        fclose(f);
        if (rc == 0)
            posd_log(POSD_LOG_INFO, "kernel profiles: %zu from %s", d->prof.count, name);
        else
            posd_log(POSD_LOG_WARN, "kernel profiles refused, starting without them: %s", err);
    } else if (e != -ENOENT) {
        posd_log(POSD_LOG_WARN, "kernel profiles refused, starting without them: %s", err);
    }
    if (d->cfg.profiles[0]) {
        size_t before = d->prof.count;
        int rc = 0; /* not a regular file, or not there: refused without waiting */
        f = posd_open_regular(d->cfg.profiles, &rc, err, sizeof err);
        if (f) {
            rc = pos_prof_load_file(&d->prof, &d->device, f, d->cfg.profiles, err, sizeof err);
            fclose(f);
        } else if (rc == -ENOENT) {
            snprintf(err, sizeof err, "%s: %s", d->cfg.profiles, strerror(ENOENT));
        }
        if (rc == 0)
            posd_log(POSD_LOG_INFO, "kernel profiles: imported %s (%zu new)", d->cfg.profiles,
                     d->prof.count - before);
        else
            posd_log(POSD_LOG_WARN, "kernel profile import refused: %s", err);
    }
}

static int write_profiles(FILE *f, void *arg)
{
    struct posd *d = arg;
    return pos_prof_write(&d->prof, &d->device, f);
}

int posd_profiles_write(struct posd *d, char *msg, size_t cap)
{
    if (d->state_fd < 0) {
        snprintf(msg, cap, "posd has no state directory");
        return -EBADF;
    }
    int n = posd_state_replace(d->state_fd, POSD_PROFILES_NAME, write_profiles, d, msg, cap);
    if (n >= 0)
        snprintf(msg, cap, "%d kernel profiles saved to %s/" POSD_PROFILES_NAME, n, d->state_dir);
    return n < 0 ? n : 0;
}

int posd_profiles_reset(struct posd *d, char *msg, size_t cap)
{
    size_t n = d->prof.count;
    pos_prof_reset(&d->prof);
    int rc = d->state_fd < 0 ? 0 : posd_state_remove(d->state_fd, POSD_PROFILES_NAME);
    if (rc < 0) {
        snprintf(msg, cap, "%zu kernel profiles forgotten, but %s/" POSD_PROFILES_NAME " stays: %s",
                 n, d->state_dir, strerror(-rc));
        return rc;
    }
    snprintf(msg, cap, "%zu kernel profiles forgotten (%s/" POSD_PROFILES_NAME " removed)", n,
             d->state_dir);
    return 0;
}
