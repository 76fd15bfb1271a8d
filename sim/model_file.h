/* Model workload files (sim/models/NAME.model): the per-layer kernel sequence of one
 * inference request, parsed and scaled to a batch size. Format: docs/sim-formats.md. */
#ifndef POS_SIM_MODEL_FILE_H
#define POS_SIM_MODEL_FILE_H

#include <stddef.h>
#include <stdint.h>

struct sim_model_op {
    char name[128];
    uint32_t grid[3]; /* at the scaled batch */
    uint32_t block[3];
    uint32_t smem; /* static shared memory per block, bytes */
    double flops;  /* at the scaled batch */
    double bytes;  /* weight bytes + batch * activation bytes */
};

struct sim_model {
    char name[64];
    char source[256];
    int fp16; /* dtype fp16 */
    uint32_t batch;
    uint64_t params; /* 'params' directive: parameters the model declares (0: not given) */
    size_t nops;
    struct sim_model_op *ops;
};

/* Parses the model file at PATH and scales it to BATCH (>= 1). Returns 0, or a negative
 * errno with a one-line message (file:line: what is wrong) in ERR; on failure *OUT is left
 * zeroed, so sim_model_free() on it is harmless. */
int sim_model_load(const char *path, uint32_t batch, struct sim_model *out, char *err,
                   size_t errlen);

/* Resolves NAME to a file: NAME itself if it contains a '/' or ends in ".model";
 * else $POS_MODELS_DIR/NAME.model, then <dir of the executable>/../sim/models/NAME.model,
 * then <dir of the executable>/../share/pos/models/NAME.model. Returns 0, -ENOENT, or
 * -ENAMETOOLONG when the path found does not fit in PATHLEN. */
int sim_model_find(const char *name, char *path, size_t pathlen);

void sim_model_free(struct sim_model *m);

#endif
