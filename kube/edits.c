/* The container edits that put a container under pos (see edits.h): one function, used by the
 * device plugin's Allocate and by the CDI spec. */
#include "fail.h"
#include "edits.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

static int abs_path(const char *what, const char *p, char *err, size_t errlen)
{
    if (!p || p[0] != '/')
        return kube_fail(err, errlen, -EINVAL, "%s '%s' is not an absolute path", what, p ? p : "");
    if (strlen(p) >= KUBE_PATH_MAX)
        return kube_fail(err, errlen, -EINVAL, "%s is longer than %d bytes", what,
                         KUBE_PATH_MAX - 1);
    return 0;
}

static void add_env(struct kube_edits *e, const char *name, const char *value)
{
    struct kube_env *v = &e->env[e->n_env++];
    snprintf(v->name, sizeof v->name, "%s", name);
    snprintf(v->value, sizeof v->value, "%s", value);
}

static void add_mount(struct kube_edits *e, const char *host, const char *container, int ro)
{
    struct kube_mount *m = &e->mounts[e->n_mounts++];
    snprintf(m->host, sizeof m->host, "%s", host);
    snprintf(m->container, sizeof m->container, "%s", container);
    m->read_only = ro;
}

/* Adds DIR/NAME as a device node. Returns 0, -ENOENT when absent (OPTIONAL: 0 and nothing
 * added), -ENOTTY when it is not a device. */
static int add_node(struct kube_edits *e, const char *dir, const char *name, int optional,
                    char *err, size_t errlen)
{
    char path[KUBE_PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return kube_fail(err, errlen, -EINVAL, "device node path %s/%s is too long", dir, name);
    struct stat st;
    if (stat(path, &st) != 0) {
        if (optional)
            return 0;
        return kube_fail(err, errlen, -ENOENT, "GPU device node %s: %s", path, strerror(errno));
    }
    if (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode))
        return kube_fail(err, errlen, -ENOTTY, "%s is not a device node", path);
    struct kube_devnode *d = &e->nodes[e->n_nodes++];
    memcpy(d->path, path, sizeof path);
    d->type = S_ISCHR(st.st_mode) ? 'c' : 'b';
    d->major = major(st.st_rdev);
    d->minor = minor(st.st_rdev);
    snprintf(d->perms, sizeof d->perms, "rw");
    return 0;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int kube_edits_make(const struct kube_edits_opts *o, const int *gpus, size_t n,
                    struct kube_edits *e, char *err, size_t errlen)
{
    int rc;
    memset(e, 0, sizeof *e);
    if ((rc = abs_path("the shim", o->shim, err, errlen)) < 0 ||
        (rc = abs_path("posd's socket", o->socket, err, errlen)) < 0)
        return rc;
    struct stat st;
    if (stat(o->shim, &st) != 0 || !S_ISREG(st.st_mode))
        return kube_fail(err, errlen, -ENOENT, "the shim %s is not a file", o->shim);

    char sockdir[KUBE_PATH_MAX];
    snprintf(sockdir, sizeof sockdir, "%s", o->socket);
    char *slash = strrchr(sockdir, '/');
    const char *sockname = slash + 1;
    if (!*sockname)
        return kube_fail(err, errlen, -EINVAL, "posd's socket '%s' names a directory", o->socket);
    if (slash == sockdir)
        return kube_fail(err, errlen, -EINVAL,
                         "posd's socket '%s' is in /: give it a directory of its own", o->socket);
    *slash = '\0';
    if (!is_dir(sockdir))
        return kube_fail(err, errlen, -ENOENT, "posd's socket directory %s is not there", sockdir);

    add_mount(e, o->shim, KUBE_CONTAINER_SHIM, 1);
    add_mount(e, sockdir, KUBE_CONTAINER_SOCKET_DIR, 0);
    add_env(e, "LD_PRELOAD", KUBE_CONTAINER_SHIM);
    char v[KUBE_PATH_MAX + 64];
    snprintf(v, sizeof v, "%s/%s", KUBE_CONTAINER_SOCKET_DIR, sockname);
    add_env(e, "POS_SOCKET", v);

    if (o->driver_dir) {
        if ((rc = abs_path("the driver directory", o->driver_dir, err, errlen)) < 0)
            return rc;
        if (!is_dir(o->driver_dir))
            return kube_fail(err, errlen, -ENOENT, "the driver directory %s is not there",
                             o->driver_dir);
        add_mount(e, o->driver_dir, KUBE_CONTAINER_DRIVER_DIR, 1);
        add_mount(e, "/dev/shm", "/dev/shm", 0);
        add_env(e, "LD_LIBRARY_PATH", KUBE_CONTAINER_DRIVER_DIR);
    }

    if (!o->dev_dir)
        return 0;
    if ((rc = abs_path("the device directory", o->dev_dir, err, errlen)) < 0)
        return rc;
    static const char *const control[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                          "nvidia-modeset"};
    for (size_t i = 0; i < sizeof control / sizeof control[0]; i++)
        if ((rc = add_node(e, o->dev_dir, control[i], 1, err, errlen)) < 0)
            return rc;
    for (size_t i = 0; i < n; i++) {
        if (gpus[i] < 0 || gpus[i] > 63)
            return kube_fail(err, errlen, -EINVAL, "GPU ordinal %d is out of 0..63", gpus[i]);
        int seen = 0;
        for (size_t j = 0; j < i; j++)
            seen |= gpus[j] == gpus[i];
        if (seen)
            continue;
        char name[32];
        snprintf(name, sizeof name, "nvidia%d", gpus[i]);
        if ((rc = add_node(e, o->dev_dir, name, 0, err, errlen)) < 0)
            return rc;
    }
    return 0;
}
