/* The text module format of the simulated driver (docs/sim-formats.md): how a program
 * declares its kernels, their cost and optional built-in CPU twins. Pure parsing. */
#ifndef POS_SIM_MODULE_TEXT_H
#define POS_SIM_MODULE_TEXT_H

#include <stddef.h>
#include <stdint.h>

#define SIM_MODULE_MAGIC    ".pos_sim_module"
#define SIM_KERNEL_NAME_MAX 256

enum sim_cost_per { SIM_PER_LAUNCH = 0, SIM_PER_BLOCK, SIM_PER_THREAD };

enum sim_twin {
    SIM_TWIN_NONE = 0,
    SIM_TWIN_VECTOR_ADD,
    SIM_TWIN_FILL,
    SIM_TWIN_SCALE,
    SIM_TWIN_CHECKSUM,
};

struct sim_kernel_decl {
    char name[SIM_KERNEL_NAME_MAX];
    double flops;
    double bytes;
    int cost_given; /* flops or bytes appeared */
    int per;        /* enum sim_cost_per */
    int fp16;
    int cost_args; /* flops, bytes come from the first two parameters */
    int twin;      /* enum sim_twin */
    uint32_t smem;
    uint32_t regs;
    uint32_t maxthreads;
};

/* Parameter layout of a twin: number of parameters and the size of each. */
struct sim_twin_sig {
    const char *name;
    int nparams;
    uint8_t size[4];
};

/* Signature of TWIN (never SIM_TWIN_NONE). */
const struct sim_twin_sig *sim_twin_signature(int twin);

/* True when TEXT (LEN bytes, or up to a NUL) starts like a text module. */
int sim_module_is_text(const void *text, size_t len);

/* Parses a module. On success returns 0 and a malloc'd array of N declarations in *OUT.
 * On error returns -EINVAL (or -ENOMEM) and "line N: what" in ERR. */
int sim_module_parse(const char *text, size_t len, struct sim_kernel_decl **out, size_t *n,
                     char *err, size_t errlen);

/* Cost of one launch of D with the given grid: fills FLOPS and BYTES. ARGS_FLOPS and
 * ARGS_BYTES are the first two parameters when D->cost_args; N is the element count
 * parameter of a twin (0 otherwise). */
void sim_kernel_cost(const struct sim_kernel_decl *d, uint64_t blocks, uint64_t threads_per_block,
                     uint64_t args_flops, uint64_t args_bytes, uint32_t twin_n, double *flops,
                     double *bytes);

#endif
