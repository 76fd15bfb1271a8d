/* The request builder: the one sequence of kernel launches that one inference request of a
 * model workload makes, in launch order, with each kernel's shape and cost. posapp launches
 * it through the CUDA driver API (its module declares one kernel per op under the name given
 * here); possim submits the same ops to the core and the device model. Pure: no CUDA, no I/O. */
#ifndef POS_SIM_REQUEST_H
#define POS_SIM_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "sim/model_file.h"

#define SIM_REQUEST_NAME_MAX 160

/* Names a launcher's own kernels use; no model op is given one of them. */
extern const char *const sim_request_reserved_names[]; /* NULL-terminated */

struct sim_request_op {
    char name[SIM_REQUEST_NAME_MAX]; /* kernel name: unique within the request */
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t smem; /* static shared memory per block, bytes */
    double flops;
    double bytes;
    int fp16; /* the model's dtype is fp16: tensor-core peak */
};

struct sim_request {
    size_t nops;
    struct sim_request_op *ops; /* launch order */
};

/* Builds the request of model M (already scaled to its batch). Returns 0 or -ENOMEM; on
 * failure *OUT is zeroed. */
int sim_request_build(const struct sim_model *m, struct sim_request *out);
void sim_request_free(struct sim_request *r);

/* Blocks of a launch (grid product) and threads per block (block product), as the driver
 * counts them. */
static inline uint64_t sim_request_op_blocks(const struct sim_request_op *op)
{
    return (uint64_t)op->grid[0] * op->grid[1] * op->grid[2];
}

static inline uint64_t sim_request_op_threads(const struct sim_request_op *op)
{
    return (uint64_t)op->block[0] * op->block[1] * op->block[2];
}

/* 64-bit FNV-1a of a kernel name: the key posd gives a kernel from its name. */
uint64_t sim_request_name_key(const char *name);

#endif
