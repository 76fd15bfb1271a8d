/* Virtual-GPU device parameters: the built-in presets from the vendors' published figures,
 * INI device files (libinih) and the POS_SIM_* environment. Sources are in docs/sim.md. */
#include "sim/device_presets.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define GIB (UINT64_C(1) << 30)
#define MIB (UINT64_C(1) << 20)

/* Defaults shared by every preset unless it says otherwise. */
#define COMMON_DEFAULTS                                                                            \
    .max_threads_per_block = 1024, .graph_node_latency_us = 0.8, .copy_latency_us = 8.0,           \
    .ctx_switch_us = 50.0, .timeslice_us = 2000.0, .mode = SIM_MODE_TIMESLICE, .scale = 1.0,         \
    .module_mem_bytes = 2 * MIB

/* A context's device memory (docs/sim.md, "Device memory"): the local memory of the default
 * 1 KiB stack for every thread the device can hold (threads/SM x SMs), the 8 MiB malloc heap,
 * the 1 MiB printf FIFO and 64 MiB of the driver's own (its queues and internal kernels'
 * state), rounded up to 2 MiB: an estimate, as no vendor publishes the figure. */
#define CTX_MEM(sms, threads)                                                                      \
    ((((uint64_t)(sms) * (threads) * 1024 + 73 * MIB) + 2 * MIB - 1) / (2 * MIB) * (2 * MIB))

static const struct sim_dev_params presets[] = {
    {
        /* Jetson Xavier NX: Volta, 6 SMs / 384 CUDA cores / 48 tensor cores at 1.1 GHz,
         * 8 GB LPDDR4x at 51.2 GB/s. FP32 = 384*2*1.1e9; FP16 = 48 TCs * 64 FMA * 2 * 1.1e9. */
        .preset = "xavier-nx",
        .name = "NVIDIA Jetson Xavier NX (pos-sim)",
        .cc_major = 7,
        .cc_minor = 2,
        .num_sms = 6,
        .max_threads_per_sm = 2048,
        .max_blocks_per_sm = 32,
        .smem_per_sm = 96 * 1024,
        .smem_per_block = 48 * 1024,
        .regs_per_sm = 65536,
        .clock_khz = 1100000,
        .mem_clock_khz = 1600000,
        .mem_bus_width = 128,
        .fp32_flops = 0.845e12,
        .fp16_flops = 6.76e12,
        .dram_bw = 51.2e9,
        .copy_bw = 20e9,
        .mem_bytes = 8 * GIB,
        .ctx_mem_bytes = CTX_MEM(6, 2048), /* 86 MiB */
        .launch_latency_us = 6.0,
        COMMON_DEFAULTS,
    },
    {
        /* Jetson AGX Orin 64GB: Ampere, 16 SMs / 2048 CUDA cores / 64 tensor cores at
         * 1.3 GHz, 64 GB LPDDR5 at 204.8 GB/s. FP32 5.3 TFLOP/s; dense FP16 tensor 42.5
         * TFLOP/s (half of the 85 dense INT8 TOPS of the GPU). */
        .preset = "orin-agx",
        .name = "NVIDIA Jetson AGX Orin (pos-sim)",
        .cc_major = 8,
        .cc_minor = 7,
        .num_sms = 16,
        .max_threads_per_sm = 1536,
        .max_blocks_per_sm = 16,
        .smem_per_sm = 164 * 1024,
        .smem_per_block = 163 * 1024,
        .regs_per_sm = 65536,
        .clock_khz = 1300000,
        .mem_clock_khz = 3200000,
        .mem_bus_width = 256,
        .fp32_flops = 5.32e12,
        .fp16_flops = 42.5e12,
        .dram_bw = 204.8e9,
        .copy_bw = 50e9,
        .mem_bytes = 64 * GIB,
        .ctx_mem_bytes = CTX_MEM(16, 1536), /* 98 MiB */
        .launch_latency_us = 4.0,
        COMMON_DEFAULTS,
    },
    {
        /* GeForce RTX 3080 (10 GB): GA102, 68 SMs / 8704 CUDA cores at 1.71 GHz boost,
         * 29.8 TFLOP/s FP32, 59.5 TFLOP/s dense FP16 tensor with FP32 accumulate,
         * 10 GB GDDR6X at 760 GB/s, PCIe 4.0 x16. */
        .preset = "rtx3080",
        .name = "NVIDIA GeForce RTX 3080 (pos-sim)",
        .cc_major = 8,
        .cc_minor = 6,
        .num_sms = 68,
        .max_threads_per_sm = 1536,
        .max_blocks_per_sm = 16,
        .smem_per_sm = 100 * 1024,
        .smem_per_block = 99 * 1024,
        .regs_per_sm = 65536,
        .clock_khz = 1710000,
        .mem_clock_khz = 9500000,
        .mem_bus_width = 320,
        .fp32_flops = 29.77e12,
        .fp16_flops = 59.5e12,
        .dram_bw = 760e9,
        .copy_bw = 25e9,
        .mem_bytes = 10 * GIB,
        .ctx_mem_bytes = CTX_MEM(68, 1536), /* 176 MiB */
        .launch_latency_us = 2.5,
        COMMON_DEFAULTS,
    },
    {
        /* H200 SXM: GH100, 132 SMs at 1.98 GHz boost, 67 TFLOP/s FP32, 989.5 TFLOP/s dense
         * FP16/BF16 tensor, 141 GB HBM3e at 4.8 TB/s, PCIe 5.0 x16. */
        .preset = "h200",
        .name = "NVIDIA H200 (pos-sim)",
        .cc_major = 9,
        .cc_minor = 0,
        .num_sms = 132,
        .max_threads_per_sm = 2048,
        .max_blocks_per_sm = 32,
        .smem_per_sm = 228 * 1024,
        .smem_per_block = 227 * 1024,
        .regs_per_sm = 65536,
        .clock_khz = 1980000,
        .mem_clock_khz = 2619000,
        .mem_bus_width = 6144,
        .fp32_flops = 67e12,
        .fp16_flops = 989.5e12,
        .dram_bw = 4.8e12,
        .copy_bw = 55e9,
        .mem_bytes = 141ULL * 1000 * 1000 * 1000,
        .ctx_mem_bytes = CTX_MEM(132, 2048), /* 338 MiB */
        .launch_latency_us = 2.0,
        COMMON_DEFAULTS,
    },
};

const char *const sim_preset_names[] = {"xavier-nx", "orin-agx", "rtx3080", "h200", NULL};

int sim_preset_get(const char *name, struct sim_dev_params *out)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(presets[i].preset, name) == 0) {
            *out = presets[i];
            return 0;
        }
    }
    return -ENOENT;
}

/* --- device files --------------------------------------------------------------------- */

enum field_type { F_U32, F_INT, F_DBL, F_U64, F_STR, F_MODE };

struct field {
    const char *key;
    enum field_type type;
    size_t off;
    size_t size; /* F_STR only */
};

#define FLD(k, t)                                                                                  \
    {                                                                                              \
#k, t, offsetof(struct sim_dev_params, k), 0                                               \
    }
static const struct field fields[] = {
    {"name", F_STR, offsetof(struct sim_dev_params, name),
     sizeof(((struct sim_dev_params *)0)->name)},
    FLD(cc_major, F_INT),
    FLD(cc_minor, F_INT),
    FLD(num_sms, F_U32),
    FLD(max_threads_per_sm, F_U32),
    FLD(max_blocks_per_sm, F_U32),
    FLD(max_threads_per_block, F_U32),
    FLD(smem_per_sm, F_U32),
    FLD(smem_per_block, F_U32),
    FLD(regs_per_sm, F_U32),
    FLD(clock_khz, F_U32),
    FLD(mem_clock_khz, F_U32),
    FLD(mem_bus_width, F_U32),
    FLD(fp32_flops, F_DBL),
    FLD(fp16_flops, F_DBL),
    FLD(dram_bw, F_DBL),
    FLD(copy_bw, F_DBL),
    FLD(mem_bytes, F_U64),
    FLD(ctx_mem_bytes, F_U64),
    FLD(module_mem_bytes, F_U64),
    FLD(launch_latency_us, F_DBL),
    FLD(graph_node_latency_us, F_DBL),
    FLD(copy_latency_us, F_DBL),
    FLD(ctx_switch_us, F_DBL),
    FLD(timeslice_us, F_DBL),
    FLD(mode, F_MODE),
    FLD(scale, F_DBL),
};
#undef FLD

static int parse_mode(const char *v, int *mode)
{
    if (strcasecmp(v, "timeslice") == 0)
        *mode = SIM_MODE_TIMESLICE;
    else if (strcasecmp(v, "mps") == 0)
        *mode = SIM_MODE_MPS;
    else
        return -EINVAL;
    return 0;
}

static int parse_double(const char *v, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end != '\0' || !isfinite(d))
        return -EINVAL;
    *out = d;
    return 0;
}

static int set_field(struct sim_dev_params *p, const struct field *f, const char *v)
{
    char *base = (char *)p + f->off;
    double d;
    switch (f->type) {
    case F_STR:
        if (strlen(v) >= f->size)
            return -ENAMETOOLONG;
        strcpy(base, v);
        return 0;
    case F_MODE:
        return parse_mode(v, (int *)base);
    default:
        break;
    }
    if (parse_double(v, &d) < 0)
        return -EINVAL;
    switch (f->type) {
    case F_DBL:
        *(double *)base = d;
        return 0;
    case F_INT:
        if (d != floor(d) || d < 0 || d > 1000)
            return -EINVAL;
        *(int *)base = (int)d;
        return 0;
    case F_U32:
        if (d != floor(d) || d < 0 || d > UINT32_MAX)
            return -EINVAL;
        *(uint32_t *)base = (uint32_t)d;
        return 0;
    case F_U64:
        if (d != floor(d) || d < 0 || d > 1.8e19)
            return -EINVAL;
        *(uint64_t *)base = (uint64_t)d;
        return 0;
    default:
        return -EINVAL;
    }
}

struct file_ctx {
    struct sim_dev_params *p;
    char *err;
    size_t errlen;
    int failed;
    int seen_key;
};

/* Debian's inih passes no line number to handlers: a handler that fails returns 0 and
 * ini_parse then returns that line, which sim_params_load_file puts in front of the message. */
static int file_handler(void *user, const char *section, const char *key, const char *value)
{
    struct file_ctx *c = user;
    if (c->failed)
        return 0;
    if (section[0] != '\0' && strcmp(section, "device") != 0) {
        snprintf(c->err, c->errlen, "unknown section [%s] (use [device] or none)", section);
        c->failed = 1;
        return 0;
    }
    if (strcmp(key, "base") == 0) {
        if (c->seen_key) {
            snprintf(c->err, c->errlen, "'base' must come before any other key");
            c->failed = 1;
            return 0;
        }
        if (sim_preset_get(value, c->p) < 0) {
            snprintf(c->err, c->errlen,
                     "unknown base preset '%s' (xavier-nx, orin-agx, rtx3080, h200)", value);
            c->failed = 1;
            return 0;
        }
        strcpy(c->p->preset, "file");
        return 1;
    }
    c->seen_key = 1;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (strcmp(fields[i].key, key) != 0)
            continue;
        if (set_field(c->p, &fields[i], value) < 0) {
            snprintf(c->err, c->errlen, "bad value '%s' for %s", value, key);
            c->failed = 1;
            return 0;
        }
        return 1;
    }
    snprintf(c->err, c->errlen, "unknown key '%s'", key);
    c->failed = 1;
    return 0;
}

int sim_params_load_file(const char *path, struct sim_dev_params *out, char *err, size_t errlen)
{
    struct sim_dev_params p;
    /* A file without 'base' starts from the first preset's common defaults. */
    sim_preset_get("xavier-nx", &p);
    strcpy(p.preset, "file");
    char msg[256] = "";
    struct file_ctx c = {.p = &p, .err = msg, .errlen = sizeof msg};
    int rc = ini_parse(path, file_handler, &c);
    if (rc == -1) {
        snprintf(err, errlen, "%s: cannot open device file", path);
        return -ENOENT;
    }
    if (c.failed) {
        snprintf(err, errlen, "%s:%d: %s", path, rc, msg);
        return -EINVAL;
    }
    if (rc != 0) {
        snprintf(err, errlen, "%s:%d: syntax error", path, rc);
        return -EINVAL;
    }
    if (sim_params_validate(&p, msg, sizeof msg) < 0) {
        snprintf(err, errlen, "%s: %s", path, msg);
        return -EINVAL;
    }
    *out = p;
    return 0;
}

int sim_params_validate(const struct sim_dev_params *p, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (p->num_sms < 1 || p->num_sms > 160)
        bad = "num_sms must be 1..160";
    else if (p->max_threads_per_sm < 32 || p->max_blocks_per_sm < 1 || p->max_blocks_per_sm > 32)
        bad = "max_threads_per_sm must be >= 32 and max_blocks_per_sm 1..32";
    else if (p->max_threads_per_block < 32 || p->max_threads_per_block > p->max_threads_per_sm)
        bad = "max_threads_per_block must be 32..max_threads_per_sm";
    else if (p->smem_per_block > p->smem_per_sm)
        bad = "smem_per_block must not exceed smem_per_sm";
    else if (!(p->fp32_flops > 0) || !(p->fp16_flops > 0) || !(p->dram_bw > 0) || !(p->copy_bw > 0))
        bad = "fp32_flops, fp16_flops, dram_bw and copy_bw must be > 0";
    else if (p->mem_bytes < (UINT64_C(1) << 20))
        bad = "mem_bytes must be at least 1 MiB";
    else if (p->ctx_mem_bytes > p->mem_bytes / 2 || p->module_mem_bytes > p->mem_bytes / 2)
        bad = "ctx_mem_bytes and module_mem_bytes must be at most half of mem_bytes";
    else if (p->launch_latency_us < 0 || p->graph_node_latency_us < 0 || p->copy_latency_us < 0 ||
             p->ctx_switch_us < 0)
        bad = "latencies must be >= 0";
    else if (!(p->timeslice_us >= 10))
        bad = "timeslice_us must be >= 10";
    else if (!(p->scale >= 0.01 && p->scale <= 10000))
        bad = "scale must be 0.01..10000";
    else if (p->mode != SIM_MODE_TIMESLICE && p->mode != SIM_MODE_MPS)
        bad = "mode must be timeslice or mps";
    if (bad) {
        snprintf(err, errlen, "%s", bad);
        return -EINVAL;
    }
    return 0;
}

int sim_params_from_env(struct sim_dev_params *out, char *err, size_t errlen)
{
    struct sim_dev_params p;
    const char *dev = getenv("POS_SIM_DEVICE");
    if (!dev || !*dev)
        dev = "xavier-nx";
    if (strchr(dev, '/') || strstr(dev, ".ini") || strstr(dev, ".conf")) {
        if (sim_params_load_file(dev, &p, err, errlen) < 0)
            return -EINVAL;
    } else if (sim_preset_get(dev, &p) < 0) {
        snprintf(err, errlen,
                 "POS_SIM_DEVICE='%s' is neither a preset (xavier-nx, orin-agx, rtx3080, h200) "
                 "nor a file path",
                 dev);
        return -EINVAL;
    }
    const char *v = getenv("POS_SIM_MODE");
    if (v && *v && parse_mode(v, &p.mode) < 0) {
        snprintf(err, errlen, "POS_SIM_MODE='%s' must be timeslice or mps", v);
        return -EINVAL;
    }
    v = getenv("POS_SIM_TIMESLICE_US");
    if (v && *v && parse_double(v, &p.timeslice_us) < 0) {
        snprintf(err, errlen, "POS_SIM_TIMESLICE_US='%s' is not a number", v);
        return -EINVAL;
    }
    v = getenv("POS_SIM_SCALE");
    if (v && *v && parse_double(v, &p.scale) < 0) {
        snprintf(err, errlen, "POS_SIM_SCALE='%s' is not a number", v);
        return -EINVAL;
    }
    if (sim_params_validate(&p, err, errlen) < 0)
        return -EINVAL;
    *out = p;
    return 0;
}
