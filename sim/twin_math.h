/* The arithmetic of the simulated driver's built-in kernels (their "CPU twins").
 * Shared by the simulated driver, which runs them on simulated device memory, and by
 * programs that want to check results; docs/sim.md documents the same definitions. */
#ifndef POS_SIM_TWIN_MATH_H
#define POS_SIM_TWIN_MATH_H

#include <stdint.h>
#include <string.h>

/* FNV-1a over the bit patterns of the floats, in index order: order-sensitive, so a
 * reordered or partly applied kernel sequence gives a different value. */
#define POS_SIM_CHECKSUM_SEED  UINT64_C(1469598103934665603)
#define POS_SIM_CHECKSUM_PRIME UINT64_C(1099511628211)

static inline uint64_t pos_sim_checksum_f32(const float *x, uint32_t n)
{
    uint64_t h = POS_SIM_CHECKSUM_SEED;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        h = (h ^ bits) * POS_SIM_CHECKSUM_PRIME;
    }
    return h;
}

static inline void pos_sim_vector_add_f32(const float *a, const float *b, float *c, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        c[i] = a[i] + b[i];
}

static inline void pos_sim_fill_f32(float *x, float v, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        x[i] = v;
}

static inline void pos_sim_scale_f32(float *x, float alpha, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        x[i] *= alpha;
}

#endif
