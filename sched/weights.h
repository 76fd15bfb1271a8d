/* The weights file of policy learned (docs/learned.md): the networks possim train wrote, read
 * by posd and possim for the policy, by possim train to resume. Pure: parsed from and encoded
 * into memory; the adapters read and write the file.
 *
 * Format (version 1), little-endian:
 *   8 bytes   magic "POSWGT1\n"
 *   u32       version (POS_WEIGHTS_VERSION)
 *   u32       features: inputs of the policy's state (the code's POS_LEARNED_FEATURES)
 *   u32       actions: outputs (the code's POS_LEARNED_ACTIONS)
 *   u32       meta length M (at most POS_WEIGHTS_META_MAX - 1), then M bytes of text (what
 *             trained it: key=value lines; no NUL)
 *   u32       networks N (1..POS_WEIGHTS_MAX_NETS)
 *   N times:  16 bytes name (NUL-padded, NUL-terminated: "actor", "q1", ...), u32 layers L,
 *             (L + 1) u32 dims, then nn_mlp_count(L, dims) float32 parameters (sched/nn.h's
 *             order)
 *   u64       FNV-1a 64 of every byte before it
 * Nothing may follow. A file is refused whole: truncated, another magic or version, a shape
 * nn.h does not allow, a network whose inputs are not FEATURES or outputs not ACTIONS, a
 * non-finite parameter, a checksum that does not match, bytes after the checksum. */
#ifndef POS_SCHED_WEIGHTS_H
#define POS_SCHED_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "sched/nn.h"

#define POS_WEIGHTS_VERSION  1
#define POS_WEIGHTS_MAX_NETS 8
#define POS_WEIGHTS_NAME_MAX 16
#define POS_WEIGHTS_META_MAX 1024

struct pos_weights {
    uint32_t features, actions;
    char meta[POS_WEIGHTS_META_MAX]; /* NUL-terminated */
    size_t nnets;
    struct pos_weights_net {
        char name[POS_WEIGHTS_NAME_MAX];
        struct nn_mlp net;
    } nets[POS_WEIGHTS_MAX_NETS];
};

/* Parses LEN bytes at BUF into *W (zeroed first; free with pos_weights_free). Returns 0, or
 * -EINVAL (-ENOMEM) with what is wrong in ERR, one line without the file's name ("truncated
 * in network 2 'q1'", "version 3, this build reads 1", "checksum mismatch", ...). */
int pos_weights_parse(const void *buf, size_t len, struct pos_weights *w, char *err, size_t errlen);
/* Encodes W into a buffer malloc'd into *BUF of *LEN bytes. 0, -EINVAL (a shape or name
 * not allowed, meta too long), -ENOMEM. */
int pos_weights_encode(const struct pos_weights *w, void **buf, size_t *len);
/* The network named NAME in W, or NULL. */
const struct nn_mlp *pos_weights_net(const struct pos_weights *w, const char *name);
/* Adds a copy of NET named NAME to W. 0, -EINVAL (full, name too long), -ENOMEM. */
int pos_weights_add(struct pos_weights *w, const char *name, const struct nn_mlp *net);
void pos_weights_free(struct pos_weights *w);

#endif
