/* Small dense networks for policy learned (sched/policy/learned.c) and possim train
 * (tools/possim_sac.c): multilayer perceptrons with ReLU hidden layers and a linear output,
 * their gradients by backpropagation, Adam, Polyak averaging, a masked softmax and a seeded
 * random generator. Pure code (no I/O, no clock), single precision, one sample at a time: the
 * networks are small (tens of units a layer) and posd evaluates one per client per decision.
 *
 * A network's parameters are one contiguous vector (NN's p), layer after layer: layer l's
 * weights W_l as dims[l] rows (one per input) of dims[l+1] columns (one per output), then its
 * biases b_l (dims[l+1]). Layer l computes y = x W_l + b_l (ReLU but on the last layer). One
 * vector makes Adam, target-network averaging and the weights file one loop each. */
#ifndef POS_SCHED_NN_H
#define POS_SCHED_NN_H

#include <stddef.h>
#include <stdint.h>

#define NN_MAX_LAYERS 4   /* weight layers */
#define NN_MAX_DIM    256 /* units of any layer, inputs and outputs included */

struct nn_mlp {
    int nlayers;                 /* weight layers, 1..NN_MAX_LAYERS */
    int dims[NN_MAX_LAYERS + 1]; /* dims[0] inputs, ..., dims[nlayers] outputs */
    size_t nparams;
    float *p; /* [nparams] */
};

/* Parameters of a network of NLAYERS layers of DIMS (0 when the shape is not allowed: a layer
 * count outside 1..NN_MAX_LAYERS or a dimension outside 1..NN_MAX_DIM). */
size_t nn_mlp_count(int nlayers, const int *dims);
/* Makes M of that shape with every parameter 0. Returns 0, -EINVAL for a shape not allowed,
 * -ENOMEM. */
int nn_mlp_init(struct nn_mlp *m, int nlayers, const int *dims);
void nn_mlp_free(struct nn_mlp *m);
/* A copy of SRC's shape and parameters into DST (initialised or zeroed). 0, -ENOMEM. */
int nn_mlp_copy(struct nn_mlp *dst, const struct nn_mlp *src);
/* Weights He-uniform (+-sqrt(6 / fan_in)), the last layer's scaled by OUT_SCALE (small values
 * start a policy near uniform), biases 0, drawn from *RNG. */
void nn_mlp_randomize(struct nn_mlp *m, uint64_t *rng, float out_scale);

/* Floats of the activation buffer of M: its input and every layer's output, kept by the
 * forward pass for the backward one. */
size_t nn_mlp_acts(const struct nn_mlp *m);
/* Floats of the scratch buffer nn_mlp_backward needs (2 x NN_MAX_DIM at most). */
size_t nn_mlp_scratch(const struct nn_mlp *m);
/* The outputs of M at input X (dims[0] floats). ACT holds nn_mlp_acts(M) floats; the outputs
 * returned are its last dims[nlayers]. */
const float *nn_mlp_forward(const struct nn_mlp *m, const float *x, float *act);
/* Backpropagation of the gradient GOUT of a loss with respect to M's outputs at the input
 * whose forward pass filled ACT: adds the gradient with respect to the parameters into GRAD
 * (nparams floats), and writes the gradient with respect to the input into GX (dims[0]
 * floats; NULL: not wanted). SCRATCH holds nn_mlp_scratch(M) floats. */
void nn_mlp_backward(const struct nn_mlp *m, const float *act, const float *gout, float *grad,
                     float *gx, float *scratch);

/* Adam (Kingma and Ba) over N parameters. */
struct nn_adam {
    size_t n;
    float *m, *v;
    float lr, b1, b2, eps;
    double b1t, b2t; /* b1^t, b2^t */
};
/* lr LR, b1 0.9, b2 0.999, eps 1e-8. 0, -ENOMEM. */
int nn_adam_init(struct nn_adam *a, size_t n, float lr);
void nn_adam_free(struct nn_adam *a);
/* One step on P (n floats) down the gradient GRAD x SCALE (e.g. 1 / batch size); a
 * non-finite gradient entry is taken as 0. */
void nn_adam_step(struct nn_adam *a, float *p, const float *grad, float scale);

/* TARGET = (1 - TAU) TARGET + TAU SRC over N floats. */
void nn_polyak(float *target, const float *src, size_t n, float tau);

/* P = softmax(Z) over the N entries MASK allows (mask[i] != 0; NULL: all); the others 0. With
 * none allowed, P is all 0. Stable for any finite Z. Returns the log-sum-exp over those
 * allowed (-INFINITY with none). */
float nn_softmax_masked(const float *z, const uint8_t *mask, int n, float *p);

/* A seeded generator (splitmix64): the next 64 bits, and a double in [0, 1). */
uint64_t nn_rng_next(uint64_t *state);
double nn_rng_uniform(uint64_t *state);

#endif
