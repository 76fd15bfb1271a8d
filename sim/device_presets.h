/* Virtual-GPU device parameters: the built-in presets (xavier-nx, orin-agx, rtx3080, h200),
 * device files, and the POS_SIM_* environment that selects and adjusts them. */
#ifndef POS_SIM_DEVICE_PRESETS_H
#define POS_SIM_DEVICE_PRESETS_H

#include <stddef.h>
#include <stdint.h>

enum sim_mode {
    SIM_MODE_TIMESLICE = 0, /* kernels of different contexts never overlap */
    SIM_MODE_MPS = 1,       /* kernels of all contexts share the SMs */
};

struct sim_dev_params {
    char preset[32];        /* preset name, or "file" */
    char name[96];          /* what cuDeviceGetName reports */
    int cc_major, cc_minor; /* compute capability */
    uint32_t num_sms;
    uint32_t max_threads_per_sm;
    uint32_t max_blocks_per_sm;
    uint32_t max_threads_per_block;
    uint32_t smem_per_sm;    /* bytes of shared memory per SM */
    uint32_t smem_per_block; /* largest shared memory one block may use */
    uint32_t regs_per_sm;
    uint32_t clock_khz;
    uint32_t mem_clock_khz;
    uint32_t mem_bus_width;       /* bits */
    double fp32_flops;            /* peak FLOP/s on CUDA cores */
    double fp16_flops;            /* peak dense FP16 tensor-core FLOP/s */
    double dram_bw;               /* bytes/s */
    double copy_bw;               /* host<->device copy bytes/s (one direction) */
    uint64_t mem_bytes;           /* device memory */
    uint64_t ctx_mem_bytes;       /* device memory a context holds from creation (estimate) */
    uint64_t module_mem_bytes;    /* device memory a loaded module or library holds */
    double launch_latency_us;     /* GPU-side cost of starting one kernel from a stream */
    double graph_node_latency_us; /* the same for a kernel node of a launched graph */
    double copy_latency_us;       /* fixed cost of one host<->device copy */
    double ctx_switch_us;         /* cost of one time-slice context switch */
    double timeslice_us;          /* time slice in timeslice mode */
    int mode;                     /* enum sim_mode */
    double scale;                 /* wall time = device time * scale */
};

/* Copies the built-in preset NAME into OUT. Returns 0 or -ENOENT. */
int sim_preset_get(const char *name, struct sim_dev_params *out);

/* The names of the built-in presets, NULL-terminated. */
extern const char *const sim_preset_names[];

/* Loads a device file (INI, keys as in docs/sim.md; an optional `base = PRESET` starts from
 * a preset). Returns 0 or a negative errno with "file:line: what" in ERR. */
int sim_params_load_file(const char *path, struct sim_dev_params *out, char *err, size_t errlen);

/* Builds the parameters from the environment: POS_SIM_DEVICE (preset name or file, default
 * xavier-nx), POS_SIM_MODE (timeslice|mps), POS_SIM_TIMESLICE_US, POS_SIM_SCALE.
 * Returns 0 or a negative errno with a message in ERR. */
int sim_params_from_env(struct sim_dev_params *out, char *err, size_t errlen);

/* Checks that every field is in range. Returns 0 or -EINVAL with a message in ERR. */
int sim_params_validate(const struct sim_dev_params *p, char *err, size_t errlen);

#endif
