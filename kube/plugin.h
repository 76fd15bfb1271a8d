/* pos-device-plugin: the kubelet's device plugin for pos (docs/device-plugin.md). It advertises
 * each GPU as a number of shares, answers Allocate with the edits that put a container under
 * pos (kube/edits.h) or with CDI device names, reports every share Unhealthy while posd does
 * not answer, and registers again whenever the kubelet restarts. */
#ifndef POS_KUBE_PLUGIN_H
#define POS_KUBE_PLUGIN_H

#include <stddef.h>

#include "cdi.h" /* KUBE_CDI_KIND: the CDI spec's kind, gpu0, gpu1, ... */
#include "shares.h"

#define KUBE_PLUGIN_SOCKET   "pos.sock"    /* the plugin's endpoint in the kubelet's directory */
#define KUBE_KUBELET_SOCKET  "kubelet.sock"

struct kube_plugin_config {
    const char *kubelet_dir; /* where kubelet.sock is and pos.sock goes */
    const char *resource;    /* the extended resource, e.g. "pos.dev/gpu" */
    int shares;              /* per GPU, 1..KUBE_SHARES_MAX */
    int gpus[KUBE_GPUS_MAX]; /* the GPUs' ordinals */
    size_t n_gpus;
    const char *posd_socket; /* posd's socket on the host */
    const char *shim;        /* libposshim.so on the host */
    const char *dev_dir;     /* NULL: no device nodes in Allocate */
    const char *driver_dir;  /* NULL, or the simulated driver's directory */
    int cdi;                 /* Allocate answers CDI device names */
    int verbose;
};

/* Serves until SIGTERM or SIGINT (then removes its socket). Returns the exit status: 0, or 1
 * after a message on stderr when it cannot start. */
int kube_plugin_run(const struct kube_plugin_config *cfg);

#endif
