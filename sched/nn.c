/* Small dense networks (sched/nn.h): multilayer perceptrons with ReLU hidden layers and a
 * linear output, their forward and backward passes, Adam, Polyak averaging, a masked softmax
 * and the splitmix64 generator. Pure: no I/O, no clock; the only library calls are for memory
 * and single-precision maths.
 *
 * The inner loops run over contiguous memory in blocks of AXPY_BLOCK floats with a scalar
 * remainder: a block of known length is what GCC's default -O2 cost model vectorises (a loop
 * of unknown length it leaves scalar), and no -ffast-math is needed since each block keeps the
 * order of the additions the scalar code has. */
#include "sched/nn.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define AXPY_BLOCK 8

/* ---- shapes -------------------------------------------------------------------------------- */

size_t nn_mlp_count(int nlayers, const int *dims)
{
    if (!dims || nlayers < 1 || nlayers > NN_MAX_LAYERS)
        return 0;
    for (int l = 0; l <= nlayers; l++)
        if (dims[l] < 1 || dims[l] > NN_MAX_DIM)
            return 0;
    size_t n = 0;
    for (int l = 0; l < nlayers; l++)
        n += (size_t)dims[l] * (size_t)dims[l + 1] + (size_t)dims[l + 1];
    return n;
}

int nn_mlp_init(struct nn_mlp *m, int nlayers, const int *dims)
{
    memset(m, 0, sizeof *m);
    size_t n = nn_mlp_count(nlayers, dims);
    if (!n)
        return -EINVAL;
    m->p = calloc(n, sizeof *m->p);
    if (!m->p)
        return -ENOMEM;
    m->nlayers = nlayers;
    memcpy(m->dims, dims, (size_t)(nlayers + 1) * sizeof *dims);
    m->nparams = n;
    return 0;
}

void nn_mlp_free(struct nn_mlp *m)
{
    free(m->p);
    memset(m, 0, sizeof *m);
}

int nn_mlp_copy(struct nn_mlp *dst, const struct nn_mlp *src)
{
    if (dst == src)
        return 0;
    if (!dst->p || dst->nparams != src->nparams) {
        float *p = realloc(dst->p, (src->nparams ? src->nparams : 1) * sizeof *p);
        if (!p)
            return -ENOMEM;
        dst->p = p;
    }
    dst->nlayers = src->nlayers;
    memcpy(dst->dims, src->dims, sizeof dst->dims);
    dst->nparams = src->nparams;
    if (src->nparams)
        memcpy(dst->p, src->p, src->nparams * sizeof *dst->p);
    return 0;
}

void nn_mlp_randomize(struct nn_mlp *m, uint64_t *rng, float out_scale)
{
    float *p = m->p;
    for (int l = 0; l < m->nlayers; l++) {
        int in = m->dims[l], out = m->dims[l + 1];
        float bound = sqrtf(6.0f / (float)in);
        if (l == m->nlayers - 1)
            bound *= out_scale;
        for (int k = 0; k < in * out; k++)
            *p++ = (float)(2.0 * nn_rng_uniform(rng) - 1.0) * bound;
        memset(p, 0, (size_t)out * sizeof *p);
        p += out;
    }
}

size_t nn_mlp_acts(const struct nn_mlp *m)
{
    size_t n = 0;
    for (int l = 0; l <= m->nlayers; l++)
        n += (size_t)m->dims[l];
    return n;
}

size_t nn_mlp_scratch(const struct nn_mlp *m)
{
    int widest = 0;
    for (int l = 0; l <= m->nlayers; l++)
        if (m->dims[l] > widest)
            widest = m->dims[l];
    return 2 * (size_t)widest;
}

/* ---- forward and backward ------------------------------------------------------------------ */

/* Y[j] += A W[j] for j < N. */
static void axpy(float *restrict y, const float *restrict w, float a, int n)
{
    int j = 0;
    for (; j + AXPY_BLOCK <= n; j += AXPY_BLOCK)
        for (int k = 0; k < AXPY_BLOCK; k++)
            y[j + k] += a * w[j + k];
    for (; j < n; j++)
        y[j] += a * w[j];
}

/* The sum of W[j] D[j] for j < N, in AXPY_BLOCK partial sums (each in order). */
static float dot(const float *restrict w, const float *restrict d, int n)
{
    float acc[AXPY_BLOCK] = {0};
    int j = 0;
    for (; j + AXPY_BLOCK <= n; j += AXPY_BLOCK)
        for (int k = 0; k < AXPY_BLOCK; k++)
            acc[k] += w[j + k] * d[j + k];
    float s = 0;
    for (; j < n; j++)
        s += w[j] * d[j];
    for (int k = 0; k < AXPY_BLOCK; k++)
        s += acc[k];
    return s;
}

const float *nn_mlp_forward(const struct nn_mlp *m, const float *x, float *act)
{
    memcpy(act, x, (size_t)m->dims[0] * sizeof *act);
    const float *p = m->p;
    float *in_act = act;
    for (int l = 0; l < m->nlayers; l++) {
        int in = m->dims[l], out = m->dims[l + 1];
        const float *w = p, *b = p + (size_t)in * (size_t)out;
        float *y = in_act + in;
        memcpy(y, b, (size_t)out * sizeof *y);
        for (int i = 0; i < in; i++)
            if (in_act[i] != 0.0f) /* half a ReLU layer's outputs are 0: their rows add nothing */
                axpy(y, w + (size_t)i * (size_t)out, in_act[i], out);
        if (l < m->nlayers - 1)
            for (int j = 0; j < out; j++)
                if (y[j] < 0.0f) /* a NaN stays one, for the caller to see */
                    y[j] = 0.0f;
        p = b + out;
        in_act = y;
    }
    return in_act;
}

void nn_mlp_backward(const struct nn_mlp *m, const float *act, const float *gout, float *grad,
                     float *gx, float *scratch)
{
    /* Where each layer's parameters and input activations start. */
    size_t poff[NN_MAX_LAYERS] = {0}, aoff[NN_MAX_LAYERS] = {0};
    size_t po = 0, ao = 0;
    for (int l = 0; l < m->nlayers; l++) {
        poff[l] = po;
        aoff[l] = ao;
        po += (size_t)m->dims[l] * (size_t)m->dims[l + 1] + (size_t)m->dims[l + 1];
        ao += (size_t)m->dims[l];
    }
    size_t half = nn_mlp_scratch(m) / 2;
    float *delta = scratch, *dx = scratch + half; /* a layer's output and input gradients */
    memcpy(delta, gout, (size_t)m->dims[m->nlayers] * sizeof *delta);
    for (int l = m->nlayers - 1; l >= 0; l--) {
        int in = m->dims[l], out = m->dims[l + 1];
        const float *x = act + aoff[l];
        const float *w = m->p + poff[l];
        float *gw = grad + poff[l], *gb = gw + (size_t)in * (size_t)out;
        for (int i = 0; i < in; i++)
            if (x[i] != 0.0f)
                axpy(gw + (size_t)i * (size_t)out, delta, x[i], out);
        for (int j = 0; j < out; j++)
            gb[j] += delta[j];
        if (l == 0) {
            if (gx)
                for (int i = 0; i < in; i++)
                    gx[i] = dot(w + (size_t)i * (size_t)out, delta, out);
            break;
        }
        /* X is the previous layer's ReLU output: its derivative is 1 where X > 0, else 0. */
        for (int i = 0; i < in; i++)
            dx[i] = x[i] > 0.0f ? dot(w + (size_t)i * (size_t)out, delta, out) : 0.0f;
        float *t = delta;
        delta = dx;
        dx = t;
    }
}

/* ---- optimisation -------------------------------------------------------------------------- */

int nn_adam_init(struct nn_adam *a, size_t n, float lr)
{
    memset(a, 0, sizeof *a);
    a->m = calloc(n ? n : 1, sizeof *a->m);
    a->v = calloc(n ? n : 1, sizeof *a->v);
    if (!a->m || !a->v) {
        nn_adam_free(a);
        return -ENOMEM;
    }
    a->n = n;
    a->lr = lr;
    a->b1 = 0.9f;
    a->b2 = 0.999f;
    a->eps = 1e-8f;
    a->b1t = 1.0;
    a->b2t = 1.0;
    return 0;
}

void nn_adam_free(struct nn_adam *a)
{
    free(a->m);
    free(a->v);
    memset(a, 0, sizeof *a);
}

void nn_adam_step(struct nn_adam *a, float *p, const float *grad, float scale)
{
    a->b1t *= a->b1;
    a->b2t *= a->b2;
    /* The bias corrections 1 / (1 - b^t), b^t kept in double so that it does not stall. */
    float c1 = (float)(1.0 / (1.0 - a->b1t)), c2 = (float)(1.0 / (1.0 - a->b2t));
    float b1 = a->b1, b2 = a->b2;
    for (size_t i = 0; i < a->n; i++) {
        float g = grad[i] * scale;
        if (!isfinite(g))
            g = 0.0f;
        a->m[i] = b1 * a->m[i] + (1.0f - b1) * g;
        a->v[i] = b2 * a->v[i] + (1.0f - b2) * g * g;
        p[i] -= a->lr * (a->m[i] * c1) / (sqrtf(a->v[i] * c2) + a->eps);
    }
}

void nn_polyak(float *target, const float *src, size_t n, float tau)
{
    for (size_t i = 0; i < n; i++)
        target[i] = (1.0f - tau) * target[i] + tau * src[i];
}

float nn_softmax_masked(const float *z, const uint8_t *mask, int n, float *p)
{
    int top = -1; /* the first allowed entry of the largest Z */
    for (int i = 0; i < n; i++)
        if ((!mask || mask[i]) && (top < 0 || z[i] > z[top]))
            top = i;
    if (top < 0) {
        if (n > 0)
            memset(p, 0, (size_t)n * sizeof *p);
        return -INFINITY;
    }
    /* exp(z - max): TOP's term is 1 and none is larger, so nothing overflows and the sum is at
     * least 1. */
    float max = z[top], sum = 1.0f;
    for (int i = 0; i < n; i++) {
        p[i] = i != top && (!mask || mask[i]) ? expf(z[i] - max) : 0.0f;
        sum += p[i];
    }
    p[top] = 1.0f;
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++)
        p[i] *= inv;
    return max + logf(sum);
}

/* ---- random numbers ------------------------------------------------------------------------ */

uint64_t nn_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double nn_rng_uniform(uint64_t *state)
{
    return (double)(nn_rng_next(state) >> 11) * 0x1.0p-53; /* the top 53 bits */
}
