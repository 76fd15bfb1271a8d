/* posapp's arrival processes and PRNG (see posapp_arrival.h): xoshiro256** seeded with
 * splitmix64, exponential and Gamma variates, --arrival spec parsing and the fixed
 * open-loop schedule. */
#include "tools/posapp_arrival.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPLITMIX_GAMMA UINT64_C(0x9e3779b97f4a7c15)

uint64_t posapp_mix64(uint64_t x)
{
    uint64_t z = x + SPLITMIX_GAMMA;
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

uint64_t posapp_hash3(uint64_t a, uint64_t b, uint64_t c)
{
    return posapp_mix64(posapp_mix64(posapp_mix64(a) ^ b) ^ c);
}

void posapp_rng_seed(struct posapp_rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) {
        r->s[i] = posapp_mix64(x);
        x += SPLITMIX_GAMMA;
    }
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t posapp_rng_u64(struct posapp_rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double posapp_rng_uniform(struct posapp_rng *r)
{
    /* 53 random bits, shifted by one so the result lies in (0, 1]. */
    return (double)((posapp_rng_u64(r) >> 11) + 1) * 0x1.0p-53;
}

double posapp_rng_normal(struct posapp_rng *r)
{
    double u1 = posapp_rng_uniform(r);
    double u2 = posapp_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double posapp_rng_exponential(struct posapp_rng *r, double mean)
{
    return -mean * log(posapp_rng_uniform(r));
}

/* Marsaglia-Tsang for SHAPE >= 1, unit scale. */
static double gamma_ge1(struct posapp_rng *r, double shape)
{
    double d = shape - 1.0 / 3.0;
    double c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = posapp_rng_normal(r);
        double v = 1.0 + c * x;
        if (v <= 0.0)
            continue;
        v = v * v * v;
        double u = posapp_rng_uniform(r);
        double x2 = x * x;
        if (u < 1.0 - 0.0331 * x2 * x2)
            return d * v;
        if (log(u) < 0.5 * x2 + d * (1.0 - v + log(v)))
            return d * v;
    }
}

double posapp_rng_gamma(struct posapp_rng *r, double shape, double scale)
{
    if (shape >= 1.0)
        return gamma_ge1(r, shape) * scale;
    /* Gamma(a) = Gamma(a + 1) * U^(1/a) for a < 1. */
    double g = gamma_ge1(r, shape + 1.0);
    return g * pow(posapp_rng_uniform(r), 1.0 / shape) * scale;
}

/* Parses a finite number > 0 from S up to END (exclusive; NULL = end of string). */
static int parse_positive(const char *s, const char *end, double *out)
{
    size_t len = end ? (size_t)(end - s) : strlen(s);
    char buf[64];
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (!isdigit((unsigned char)buf[0]) && buf[0] != '.')
        return -1;
    char *stop;
    errno = 0;
    double v = strtod(buf, &stop);
    if (errno || *stop != '\0' || !isfinite(v) || v <= 0.0)
        return -1;
    *out = v;
    return 0;
}

static int parse_fail(const char *spec, char *err, size_t errlen)
{
    snprintf(err, errlen,
             "bad --arrival '%s' (want closed, poisson:RATE or gamma:SHAPE:RATE, "
             "numbers > 0)",
             spec);
    return -1;
}

int posapp_arrival_parse(const char *spec, struct posapp_arrival *out, char *err, size_t errlen)
{
    struct posapp_arrival a = {.kind = POSAPP_ARRIVAL_CLOSED, .rate = 0.0, .shape = 1.0};
    if (strcmp(spec, "closed") == 0) {
        *out = a;
        return 0;
    }
    if (strncmp(spec, "poisson:", 8) == 0) {
        a.kind = POSAPP_ARRIVAL_POISSON;
        if (parse_positive(spec + 8, NULL, &a.rate) < 0)
            return parse_fail(spec, err, errlen);
        *out = a;
        return 0;
    }
    if (strncmp(spec, "gamma:", 6) == 0) {
        const char *shape = spec + 6;
        const char *colon = strchr(shape, ':');
        a.kind = POSAPP_ARRIVAL_GAMMA;
        if (!colon || parse_positive(shape, colon, &a.shape) < 0 ||
            parse_positive(colon + 1, NULL, &a.rate) < 0)
            return parse_fail(spec, err, errlen);
        *out = a;
        return 0;
    }
    return parse_fail(spec, err, errlen);
}

double posapp_arrival_gap(const struct posapp_arrival *a, struct posapp_rng *r)
{
    switch (a->kind) {
    case POSAPP_ARRIVAL_POISSON:
        return posapp_rng_exponential(r, 1.0 / a->rate);
    case POSAPP_ARRIVAL_GAMMA:
        /* mean = shape * scale = 1 / rate */
        return posapp_rng_gamma(r, a->shape, 1.0 / (a->shape * a->rate));
    case POSAPP_ARRIVAL_CLOSED:
    default:
        return 0.0;
    }
}

void posapp_arrival_schedule(const struct posapp_arrival *a, uint64_t seed, double *times, size_t n)
{
    struct posapp_rng r;
    posapp_rng_seed(&r, seed);
    double t = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            t += posapp_arrival_gap(a, &r);
        times[i] = t;
    }
}
