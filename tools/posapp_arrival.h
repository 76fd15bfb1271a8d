/* posapp's request arrival processes and its seeded PRNG: parsing of --arrival specs
 * (closed, poisson:RATE, gamma:SHAPE:RATE), inter-arrival gaps, the fixed open-loop
 * schedule, and the hash that derives --verify values. Pure code: no CUDA, no I/O. */
#ifndef POS_TOOLS_POSAPP_ARRIVAL_H
#define POS_TOOLS_POSAPP_ARRIVAL_H

#include <stddef.h>
#include <stdint.h>

/* xoshiro256** state, seeded through splitmix64. */
struct posapp_rng {
    uint64_t s[4];
};

void posapp_rng_seed(struct posapp_rng *r, uint64_t seed);
uint64_t posapp_rng_u64(struct posapp_rng *r);
/* Uniform in (0, 1]: never 0, so log() of it is finite. */
double posapp_rng_uniform(struct posapp_rng *r);
/* Standard normal (Box-Muller). */
double posapp_rng_normal(struct posapp_rng *r);
/* Exponential with mean MEAN (> 0). */
double posapp_rng_exponential(struct posapp_rng *r, double mean);
/* Gamma(SHAPE, SCALE), SHAPE > 0, SCALE > 0: Marsaglia-Tsang, with the
 * U^(1/SHAPE) boost for SHAPE < 1. Mean SHAPE * SCALE. */
double posapp_rng_gamma(struct posapp_rng *r, double shape, double scale);

/* One step of splitmix64 over X: a bijective 64-bit mixer. */
uint64_t posapp_mix64(uint64_t x);
/* A hash of three words (seed, request, step): what --verify derives its values from. */
uint64_t posapp_hash3(uint64_t a, uint64_t b, uint64_t c);

enum posapp_arrival_kind {
    POSAPP_ARRIVAL_CLOSED,
    POSAPP_ARRIVAL_POISSON,
    POSAPP_ARRIVAL_GAMMA,
};

struct posapp_arrival {
    enum posapp_arrival_kind kind;
    double rate;  /* requests per second (open loop) */
    double shape; /* gamma shape; 1 for poisson */
};

/* Parses "closed", "poisson:RATE" or "gamma:SHAPE:RATE" (RATE, SHAPE finite and > 0).
 * Returns 0, or -1 with a message (no "posapp: " prefix, no newline) in ERR. */
int posapp_arrival_parse(const char *spec, struct posapp_arrival *out, char *err, size_t errlen);

/* One inter-arrival gap in seconds (0 for closed loop). */
double posapp_arrival_gap(const struct posapp_arrival *a, struct posapp_rng *r);

/* Fills TIMES[0..n) with the open-loop arrival offsets in seconds from the start:
 * TIMES[0] = 0 and TIMES[i] = TIMES[i-1] + gap, the gaps drawn from a PRNG seeded with
 * SEED. The same (spec, seed, n) always gives the same schedule. All zeros for closed. */
void posapp_arrival_schedule(const struct posapp_arrival *a, uint64_t seed, double *times,
                             size_t n);

#endif
