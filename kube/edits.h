/* What puts a container under pos: the container edits that the device plugin's Allocate
 * answer (kube/plugin.c) and the CDI spec (kube/cdi.c, `posctl cdi`) both carry, made in one
 * place so that the two can never disagree. The shim is bind-mounted read-only and preloaded,
 * posd's socket directory is bind-mounted (the directory, not the socket, so that a restarted
 * posd's new socket is seen by running containers), and the GPU's device nodes are passed where
 * the caller owns them. */
#ifndef POS_KUBE_EDITS_H
#define POS_KUBE_EDITS_H

#include <stddef.h>

/* Where the edits put things inside a container (chosen to meet nothing an image ships). */
#define KUBE_CONTAINER_SHIM       "/opt/pos/lib/libposshim.so"
#define KUBE_CONTAINER_SOCKET_DIR "/run/posd"
#define KUBE_CONTAINER_DRIVER_DIR "/opt/pos/driver"

#define KUBE_PATH_MAX     512
#define KUBE_EDITS_ENV    8
#define KUBE_EDITS_MOUNTS 8
#define KUBE_EDITS_NODES  72 /* the control nodes and up to 64 GPUs */

struct kube_env {
    char name[64];
    char value[KUBE_PATH_MAX + 64];
};

struct kube_mount {
    char host[KUBE_PATH_MAX];
    char container[KUBE_PATH_MAX];
    int read_only;
};

struct kube_devnode {
    char path[KUBE_PATH_MAX]; /* the same path on the host and in the container */
    char type;                /* 'c' or 'b' */
    unsigned major, minor;
    char perms[4]; /* "rw" (cgroup device permissions: r, w, m) */
};

struct kube_edits {
    size_t n_env;
    struct kube_env env[KUBE_EDITS_ENV];
    size_t n_mounts;
    struct kube_mount mounts[KUBE_EDITS_MOUNTS];
    size_t n_nodes;
    struct kube_devnode nodes[KUBE_EDITS_NODES];
};

struct kube_edits_opts {
    const char *shim;   /* the host's libposshim.so (absolute) */
    const char *socket; /* posd's socket on the host (absolute); its directory is mounted */
    /* NULL, or a host directory holding a libcuda.so.1 to use instead of the image's (the
     * simulated driver, for tests and demos): mounted read-only and put first on
     * LD_LIBRARY_PATH, and the host's /dev/shm mounted, where the simulated GPU lives. */
    const char *driver_dir;
    /* NULL: no device nodes (another plugin or the runtime passes them). Else the directory
     * where the NVIDIA nodes are looked for ("/dev" on a node; a test's directory): the
     * control nodes nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset where present, and
     * nvidiaN for each GPU asked for, which must be present. */
    const char *dev_dir;
};

/* Fills E with the edits for the GPUs GPUS[0..N) (ordinals; N may be 0 when DEV_DIR is NULL).
 * Returns 0, or a negative errno value with one line saying why in ERR: -EINVAL for a relative
 * or over-long path or an ordinal out of 0..63, -ENOENT for a shim, socket directory, driver
 * directory or GPU node that is not there, -ENOTTY for a node that is not a device. */
int kube_edits_make(const struct kube_edits_opts *o, const int *gpus, size_t n,
                    struct kube_edits *e, char *err, size_t errlen);

#endif
