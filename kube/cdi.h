/* The CDI spec of pos's GPUs (Container Device Interface, cncf-tags/container-device-interface
 * SPEC.md, version 0.6.0): kind pos.dev/gpu, one device per GPU named gpu0, gpu1, ... and one
 * named all, each carrying the container edits of kube_edits_make (kube/edits.h) for its GPUs,
 * so that a container given pos.dev/gpu=gpuN by a CDI-aware runtime is edited exactly as the
 * device plugin's Allocate would edit it. `posctl cdi` writes it (docs/posctl.md). */
#ifndef POS_KUBE_CDI_H
#define POS_KUBE_CDI_H

#include <stddef.h>
#include <stdio.h>

#include "kube/edits.h"

#define KUBE_CDI_KIND "pos.dev/gpu"
/* The spec version written by default. Its content uses nothing added after 0.5.0, so
 * KUBE_CDI_VERSION_OLD describes the same devices for runtimes built on a CDI library older
 * than 0.6.0 (Debian 12's podman 4.3 refuses "0.6.0" as an invalid version). */
#define KUBE_CDI_VERSION     "0.6.0"
#define KUBE_CDI_VERSION_OLD "0.5.0"
/* Where CDI runtimes look (the spec's default directories: /etc/cdi, /var/run/cdi) */
#define KUBE_CDI_DEFAULT_OUTPUT "/var/run/cdi/pos.json"
/* Where the DaemonSet's init container installs the shim on a node (deploy/kubernetes/) */
#define KUBE_HOST_SHIM "/usr/local/lib/pos/libposshim.so"

#define KUBE_CDI_MAX_GPUS 64

/* Writes the spec for GPUS[0..N) (ordinals 0..63, no repeats, N >= 1) with edits made from O
 * (its dev_dir NULL: no device nodes) as one JSON document to F, in cdiVersion VERSION (NULL:
 * KUBE_CDI_VERSION). Every edit is made before the first byte is written, so a failure writes
 * nothing. Returns 0, or a negative errno value with one line in ERR: kube_edits_make's, -EINVAL
 * for no GPU, a repeated one, an unknown version or a string that is not UTF-8, -EIO when F
 * fails. */
int kube_cdi_write(FILE *f, const struct kube_edits_opts *o, const int *gpus, size_t n,
                   const char *version, char *err, size_t errlen);

/* Writes S to F as a JSON string, quotes included: '"', '\\' and control characters escaped
 * (\n, \t, ... or \u00XX), DEL as \u007f, valid UTF-8 kept as it is. Returns 0, or -EINVAL (and
 * writes nothing) when S is not valid UTF-8, which JSON cannot carry. */
int kube_cdi_json_string(FILE *f, const char *s);

/* Parses a GPU list: "auto" (the nvidiaN nodes in DEV_DIR, "/dev" when NULL; GPU 0 alone when
 * there are none: the simulated driver's one device, or a node whose nodes another component
 * passes), or ordinals and ranges such as "0,2-3". Fills GPUS (at most KUBE_CDI_MAX_GPUS),
 * sorted, and *N. Returns 0, or -EINVAL with one line in ERR. */
int kube_cdi_parse_gpus(const char *list, const char *dev_dir, int *gpus, size_t *n, char *err,
                        size_t errlen);

/* Writes the spec to PATH atomically: a hidden temporary file in PATH's directory (created,
 * with its parents, mode 0755, when missing), mode 0644 whatever the umask, flushed to disk,
 * then renamed over PATH, so that a runtime reading the directory sees the old spec or the new
 * one, never part of one. Nothing is left behind on failure. Returns 0 or a negative errno
 * value with one line in ERR. */
int kube_cdi_write_file(const char *path, const struct kube_edits_opts *o, const int *gpus,
                        size_t n, const char *version, char *err, size_t errlen);

#endif
