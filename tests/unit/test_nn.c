/* Tests sched/nn.c: the forward pass computes x W + b layer by layer with ReLU but on the last
 * layer, in the parameter order nn.h documents; the backward pass's parameter and input
 * gradients match central differences for every parameter of a random three-layer network,
 * and are added, not written, into the gradient; Adam's first step moves each parameter by
 * about its learning rate against the gradient's sign, it minimises a quadratic, and it takes a
 * non-finite gradient entry as 0; Polyak averaging; the masked softmax sums to 1 over the
 * allowed entries, is 0 elsewhere, is stable for large logits and is all 0 (log-sum-exp
 * -INFINITY) with none allowed; shapes outside nn.h's bounds are refused; the generator is
 * splitmix64, reproducible from its seed and uniform in [0, 1). */
#include "tests/cunit_main.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "sched/nn.h"

/* M with every parameter, biases included, drawn uniformly from [-1, 1). */
static void random_net(struct nn_mlp *m, int nlayers, const int *dims, uint64_t seed)
{
    CU_ASSERT_EQUAL_FATAL(nn_mlp_init(m, nlayers, dims), 0);
    for (size_t k = 0; k < m->nparams; k++)
        m->p[k] = (float)(2.0 * nn_rng_uniform(&seed) - 1.0);
}

/* ---- the forward pass ---------------------------------------------------------------------- */

static void test_forward_matches_a_hand_computed_network(void)
{
    /* 2 inputs, 2 hidden units, 1 output. W0 rows are inputs: x0 -> (1, -1), x1 -> (2, 1);
     * b0 = (0.5, -4); W1 = (2, 3) from the hidden units; b1 = 1. */
    const int dims[] = {2, 2, 1};
    struct nn_mlp m;
    CU_ASSERT_EQUAL_FATAL(nn_mlp_init(&m, 2, dims), 0);
    CU_ASSERT_EQUAL_FATAL(m.nparams, 9);
    const float p[] = {1, -1, 2, 1, 0.5f, -4, 2, 3, 1};
    memcpy(m.p, p, sizeof p);
    CU_ASSERT_EQUAL_FATAL(nn_mlp_acts(&m), 5);
    float act[5];
    const float x[] = {1, 2};
    const float *y = nn_mlp_forward(&m, x, act);
    /* hidden: (1 + 4 + 0.5, -1 + 2 - 4) = (5.5, -3) -> ReLU (5.5, 0); out: 11 + 0 + 1 */
    CU_ASSERT_PTR_EQUAL(y, act + 4);
    CU_ASSERT_DOUBLE_EQUAL(act[0], 1, 0);
    CU_ASSERT_DOUBLE_EQUAL(act[1], 2, 0);
    CU_ASSERT_DOUBLE_EQUAL(act[2], 5.5, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(act[3], 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(y[0], 12, 1e-6);
    /* the last layer is linear: a negative output stays negative */
    const float xn[] = {-1, -2};
    m.p[8] = -20;
    y = nn_mlp_forward(&m, xn, act); /* hidden (-5 + 0.5, 1 - 2 - 4) -> (0, 0); out -20 */
    CU_ASSERT_DOUBLE_EQUAL(y[0], -20, 1e-6);
    nn_mlp_free(&m);
    CU_ASSERT_PTR_NULL(m.p);
}

/* The widths are not multiples of the vectorised block, so the remainders are exercised. */
static void test_forward_matches_a_direct_evaluation(void)
{
    const int dims[] = {5, 19, 11, 3};
    struct nn_mlp m;
    random_net(&m, 3, dims, 7);
    float x[5], act[5 + 19 + 11 + 3];
    uint64_t rng = 99;
    for (int i = 0; i < 5; i++)
        x[i] = (float)(4.0 * nn_rng_uniform(&rng) - 2.0);
    const float *y = nn_mlp_forward(&m, x, act);

    double in[NN_MAX_DIM], out[NN_MAX_DIM];
    for (int i = 0; i < 5; i++)
        in[i] = x[i];
    const float *p = m.p;
    for (int l = 0; l < 3; l++) {
        int ni = dims[l], no = dims[l + 1];
        for (int j = 0; j < no; j++) {
            double s = p[ni * no + j];
            for (int i = 0; i < ni; i++)
                s += in[i] * p[i * no + j];
            out[j] = l < 2 && s < 0 ? 0 : s;
        }
        p += ni * no + no;
        memcpy(in, out, sizeof out);
    }
    for (int j = 0; j < 3; j++)
        CU_ASSERT_DOUBLE_EQUAL(y[j], in[j], 1e-4 * (1 + fabs(in[j])));
    nn_mlp_free(&m);
}

/* ---- the backward pass --------------------------------------------------------------------- */

/* sum_j C_j out_j of M at X, in double. */
static double loss(const struct nn_mlp *m, const float *x, const float *c, float *act)
{
    const float *y = nn_mlp_forward(m, x, act);
    double s = 0;
    for (int j = 0; j < m->dims[m->nlayers]; j++)
        s += (double)c[j] * y[j];
    return s;
}

static int close_enough(double a, double n)
{
    return fabs(a - n) <= 2e-2 * fmax(fabs(a), fabs(n)) + 1e-3;
}

static void test_gradients_match_central_differences(void)
{
    const int dims[] = {7, 16, 8, 5};
    const double eps = 1e-3;
    struct nn_mlp m;
    random_net(&m, 3, dims, 42);
    uint64_t rng = 1234;
    float x[7], c[5];
    for (int i = 0; i < 7; i++)
        x[i] = (float)(2.0 * nn_rng_uniform(&rng) - 1.0);
    for (int j = 0; j < 5; j++)
        c[j] = (float)(2.0 * nn_rng_uniform(&rng) - 1.0);

    float act[7 + 16 + 8 + 5], scratch[2 * NN_MAX_DIM], gx[7];
    CU_ASSERT_FATAL(nn_mlp_scratch(&m) <= 2 * NN_MAX_DIM);
    float *grad = calloc(m.nparams, sizeof *grad);
    CU_ASSERT_PTR_NOT_NULL_FATAL(grad);
    for (int i = 0; i < 7; i++)
        gx[i] = 123; /* written, not added to */
    nn_mlp_forward(&m, x, act);
    nn_mlp_backward(&m, act, c, grad, gx, scratch);

    int bad = 0, nonzero = 0;
    for (size_t k = 0; k < m.nparams; k++) {
        float keep = m.p[k];
        m.p[k] = (float)(keep + eps);
        double up = loss(&m, x, c, act);
        m.p[k] = (float)(keep - eps);
        double down = loss(&m, x, c, act);
        m.p[k] = keep;
        double num = (up - down) / (2 * eps);
        if (!close_enough(grad[k], num)) {
            if (bad++ < 5)
                fprintf(stderr, "\n  parameter %zu: backward %g, central difference %g", k, grad[k],
                        num);
        }
        nonzero += grad[k] != 0;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* the network is not dead, so the comparison means something */
    CU_ASSERT(nonzero > (int)m.nparams / 4);

    bad = 0;
    for (int i = 0; i < 7; i++) {
        float xs[7];
        memcpy(xs, x, sizeof xs);
        xs[i] = (float)(x[i] + eps);
        double up = loss(&m, xs, c, act);
        xs[i] = (float)(x[i] - eps);
        double down = loss(&m, xs, c, act);
        double num = (up - down) / (2 * eps);
        if (!close_enough(gx[i], num)) {
            if (bad++ < 5)
                fprintf(stderr, "\n  input %d: backward %g, central difference %g", i, gx[i], num);
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(grad);
    nn_mlp_free(&m);
}

static void test_backward_adds_into_the_gradient(void)
{
    const int dims[] = {3, 4, 2};
    struct nn_mlp m;
    random_net(&m, 2, dims, 5);
    const float x[] = {0.3f, -0.7f, 0.9f}, c[] = {1, -2};
    float act[9], scratch[2 * NN_MAX_DIM];
    float once[26] = {0}, twice[26] = {0};
    CU_ASSERT_EQUAL_FATAL(m.nparams, 26); /* 3 x 4 + 4 + 4 x 2 + 2 */
    nn_mlp_forward(&m, x, act);
    nn_mlp_backward(&m, act, c, once, NULL, scratch);
    nn_mlp_backward(&m, act, c, twice, NULL, scratch);
    nn_mlp_backward(&m, act, c, twice, NULL, scratch);
    int nonzero = 0;
    for (int k = 0; k < 26; k++) {
        CU_ASSERT_DOUBLE_EQUAL(twice[k], 2 * once[k], 1e-6);
        nonzero += once[k] != 0;
    }
    CU_ASSERT(nonzero > 0);
    nn_mlp_free(&m);
}

/* ---- Adam and Polyak ----------------------------------------------------------------------- */

static void test_adam_first_step_moves_by_lr_against_the_gradient(void)
{
    struct nn_adam a;
    CU_ASSERT_EQUAL_FATAL(nn_adam_init(&a, 5, 0.01f), 0);
    float p[5] = {1, 1, 1, 1, 1};
    const float g[5] = {5, -0.01f, 1000, -2, 0};
    nn_adam_step(&a, p, g, 0.5f);
    CU_ASSERT_DOUBLE_EQUAL(p[0], 1 - 0.01, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(p[1], 1 + 0.01, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(p[2], 1 - 0.01, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(p[3], 1 + 0.01, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(p[4], 1, 0); /* no gradient, no move */
    nn_adam_free(&a);
}

static void test_adam_minimises_a_quadratic(void)
{
    /* sum_i (p_i - t_i)^2 from 0; gradient 2 (p_i - t_i) */
    const float t[4] = {3, -3, 0.5f, 10};
    float p[4] = {0}, g[4];
    struct nn_adam a;
    CU_ASSERT_EQUAL_FATAL(nn_adam_init(&a, 4, 0.05f), 0);
    for (int step = 0; step < 2000; step++) {
        for (int i = 0; i < 4; i++)
            g[i] = 2 * (p[i] - t[i]);
        nn_adam_step(&a, p, g, 1.0f);
    }
    for (int i = 0; i < 4; i++)
        CU_ASSERT_DOUBLE_EQUAL(p[i], t[i], 1e-2);
    nn_adam_free(&a);
}

static void test_adam_takes_a_non_finite_gradient_as_zero(void)
{
    struct nn_adam a;
    CU_ASSERT_EQUAL_FATAL(nn_adam_init(&a, 3, 0.1f), 0);
    float p[3] = {1, 2, 3};
    const float g[3] = {NAN, INFINITY, 1};
    nn_adam_step(&a, p, g, 1.0f);
    CU_ASSERT_DOUBLE_EQUAL(p[0], 1, 0);
    CU_ASSERT_DOUBLE_EQUAL(p[1], 2, 0);
    CU_ASSERT_DOUBLE_EQUAL(p[2], 3 - 0.1, 1e-5);
    /* a finite gradient whose scaled value overflows is not finite either */
    const float big[3] = {3e38f, 0, 0};
    nn_adam_step(&a, p, big, 10.0f);
    CU_ASSERT(isfinite(p[0]));
    CU_ASSERT_DOUBLE_EQUAL(p[0], 1, 0);
    nn_adam_free(&a);
}

static void test_polyak_moves_the_target_toward_the_source(void)
{
    float t[3] = {0, 10, -4};
    const float s[3] = {10, 10, 4};
    nn_polyak(t, s, 3, 0.1f);
    CU_ASSERT_DOUBLE_EQUAL(t[0], 1, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(t[1], 10, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(t[2], -3.2, 1e-6);
    nn_polyak(t, s, 3, 1.0f);
    CU_ASSERT_DOUBLE_EQUAL(t[0], 10, 0);
    CU_ASSERT_DOUBLE_EQUAL(t[2], 4, 0);
    nn_polyak(t, (const float[]){0, 0, 0}, 3, 0.0f);
    CU_ASSERT_DOUBLE_EQUAL(t[0], 10, 0);
}

/* ---- softmax ------------------------------------------------------------------------------- */

static void test_softmax_covers_only_the_allowed_entries(void)
{
    const float z[4] = {1, 2, 3, 4};
    const uint8_t mask[4] = {1, 0, 1, 0};
    float p[4];
    float lse = nn_softmax_masked(z, mask, 4, p);
    double e1 = exp(1), e3 = exp(3);
    CU_ASSERT_DOUBLE_EQUAL(p[0], e1 / (e1 + e3), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(p[1], 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(p[2], e3 / (e1 + e3), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(p[3], 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(p[0] + p[2], 1, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(lse, log(e1 + e3), 1e-5);

    lse = nn_softmax_masked(z, NULL, 4, p); /* no mask: all */
    double sum = 0, es = 0;
    for (int i = 0; i < 4; i++) {
        sum += p[i];
        es += exp(z[i]);
    }
    CU_ASSERT_DOUBLE_EQUAL(sum, 1, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(p[3], exp(4) / es, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(lse, log(es), 1e-5);
}

static void test_softmax_is_stable_for_large_logits(void)
{
    const float z[4] = {1000, 999, 1000, -1000};
    float p[4];
    float lse = nn_softmax_masked(z, NULL, 4, p);
    double s = 2 + exp(-1);
    CU_ASSERT(isfinite(lse));
    CU_ASSERT_DOUBLE_EQUAL(lse, 1000 + log(s), 1e-3);
    CU_ASSERT_DOUBLE_EQUAL(p[0], 1 / s, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(p[1], exp(-1) / s, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(p[2], 1 / s, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(p[3], 0, 1e-30);
    const float zn[2] = {-1000, -1001};
    lse = nn_softmax_masked(zn, NULL, 2, p);
    CU_ASSERT_DOUBLE_EQUAL(p[0] + p[1], 1, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(lse, -1000 + log(1 + exp(-1)), 1e-3);
}

static void test_softmax_with_none_allowed_is_all_zero(void)
{
    const float z[3] = {1, 2, 3};
    const uint8_t mask[3] = {0, 0, 0};
    float p[3] = {7, 7, 7};
    float lse = nn_softmax_masked(z, mask, 3, p);
    CU_ASSERT(isinf(lse) && lse < 0);
    for (int i = 0; i < 3; i++)
        CU_ASSERT_DOUBLE_EQUAL(p[i], 0, 0);
}

/* ---- shapes -------------------------------------------------------------------------------- */

static void test_shapes_outside_the_bounds_are_refused(void)
{
    const int ok[] = {7, 16, 8, 5};
    CU_ASSERT_EQUAL(nn_mlp_count(3, ok), 7 * 16 + 16 + 16 * 8 + 8 + 8 * 5 + 5);
    const int widest[] = {NN_MAX_DIM, NN_MAX_DIM, 1, 1, 1};
    CU_ASSERT_EQUAL(nn_mlp_count(NN_MAX_LAYERS, widest),
                    (size_t)NN_MAX_DIM * NN_MAX_DIM + NN_MAX_DIM + NN_MAX_DIM + 1 + 2 + 2);
    const int five[] = {1, 1, 1, 1, 1, 1};
    CU_ASSERT_EQUAL(nn_mlp_count(0, five), 0);
    CU_ASSERT_EQUAL(nn_mlp_count(NN_MAX_LAYERS + 1, five), 0);
    CU_ASSERT_EQUAL(nn_mlp_count(-1, five), 0);
    CU_ASSERT_EQUAL(nn_mlp_count(2, (const int[]){3, 0, 2}), 0);
    CU_ASSERT_EQUAL(nn_mlp_count(2, (const int[]){3, NN_MAX_DIM + 1, 2}), 0);
    CU_ASSERT_EQUAL(nn_mlp_count(1, (const int[]){-3, 2}), 0);

    struct nn_mlp m;
    CU_ASSERT_EQUAL(nn_mlp_init(&m, NN_MAX_LAYERS + 1, five), -EINVAL);
    CU_ASSERT_PTR_NULL(m.p);
    CU_ASSERT_EQUAL(nn_mlp_init(&m, 2, (const int[]){3, NN_MAX_DIM + 1, 2}), -EINVAL);
    CU_ASSERT_EQUAL(nn_mlp_init(&m, 3, ok), 0);
    CU_ASSERT_EQUAL(m.nparams, nn_mlp_count(3, ok));
    for (size_t k = 0; k < m.nparams; k++)
        CU_ASSERT_EQUAL_FATAL(m.p[k], 0);
    CU_ASSERT_EQUAL(nn_mlp_acts(&m), 7 + 16 + 8 + 5);
    CU_ASSERT_EQUAL(nn_mlp_scratch(&m), 2 * 16);
    nn_mlp_free(&m);
}

static void test_copy_is_equal_and_independent(void)
{
    const int dims[] = {3, 5, 2}, other[] = {2, 2};
    struct nn_mlp a, b;
    random_net(&a, 2, dims, 3);
    CU_ASSERT_EQUAL_FATAL(nn_mlp_init(&b, 1, other), 0); /* another shape is replaced */
    CU_ASSERT_EQUAL_FATAL(nn_mlp_copy(&b, &a), 0);
    CU_ASSERT_EQUAL(b.nlayers, 2);
    CU_ASSERT_EQUAL(b.dims[1], 5);
    CU_ASSERT_EQUAL_FATAL(b.nparams, a.nparams);
    CU_ASSERT(b.p != a.p);
    CU_ASSERT_EQUAL(memcmp(a.p, b.p, a.nparams * sizeof *a.p), 0);
    b.p[0] += 1;
    CU_ASSERT(a.p[0] != b.p[0]);
    struct nn_mlp z;
    memset(&z, 0, sizeof z); /* a zeroed one is filled */
    CU_ASSERT_EQUAL_FATAL(nn_mlp_copy(&z, &a), 0);
    CU_ASSERT_EQUAL(memcmp(a.p, z.p, a.nparams * sizeof *a.p), 0);
    nn_mlp_free(&a);
    nn_mlp_free(&b);
    nn_mlp_free(&z);
}

static void test_randomize_draws_he_uniform_weights_and_zero_biases(void)
{
    const int dims[] = {24, 64, 4};
    struct nn_mlp m;
    CU_ASSERT_EQUAL_FATAL(nn_mlp_init(&m, 2, dims), 0);
    for (size_t k = 0; k < m.nparams; k++)
        m.p[k] = 9;
    uint64_t rng = 11;
    nn_mlp_randomize(&m, &rng, 0.01f);
    double b0 = sqrt(6.0 / 24), b1 = 0.01 * sqrt(6.0 / 64), max0 = 0, max1 = 0;
    const float *p = m.p;
    for (int k = 0; k < 24 * 64; k++)
        max0 = fmax(max0, fabs(p[k]));
    p += 24 * 64;
    for (int k = 0; k < 64; k++)
        CU_ASSERT_EQUAL_FATAL(p[k], 0);
    p += 64;
    for (int k = 0; k < 64 * 4; k++)
        max1 = fmax(max1, fabs(p[k]));
    p += 64 * 4;
    for (int k = 0; k < 4; k++)
        CU_ASSERT_EQUAL_FATAL(p[k], 0);
    CU_ASSERT(max0 <= b0 && max0 > 0.9 * b0);
    CU_ASSERT(max1 <= b1 && max1 > 0.8 * b1);
    nn_mlp_free(&m);
}

/* ---- the generator ------------------------------------------------------------------------- */

static void test_rng_is_splitmix64_and_reproducible(void)
{
    uint64_t s = 0;
    CU_ASSERT_EQUAL(nn_rng_next(&s), 0xe220a8397b1dcdafULL); /* splitmix64's published values */
    CU_ASSERT_EQUAL(nn_rng_next(&s), 0x6e789e6aa1b965f4ULL);
    s = 1234567;
    CU_ASSERT_EQUAL(nn_rng_next(&s), 0x599ed017fb08fc85ULL);
    uint64_t a = 77, b = 77, c = 78;
    int same = 1, differ = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t x = nn_rng_next(&a);
        same &= x == nn_rng_next(&b);
        differ |= x != nn_rng_next(&c);
    }
    CU_ASSERT(same);
    CU_ASSERT(differ);
}

static void test_rng_uniform_is_in_zero_one(void)
{
    uint64_t s = 2024;
    enum { N = 100000, BINS = 10 };
    int bins[BINS] = {0};
    double sum = 0;
    for (int i = 0; i < N; i++) {
        double u = nn_rng_uniform(&s);
        CU_ASSERT_FATAL(u >= 0 && u < 1);
        bins[(int)(u * BINS)]++;
        sum += u;
    }
    CU_ASSERT_DOUBLE_EQUAL(sum / N, 0.5, 0.01);
    for (int b = 0; b < BINS; b++)
        CU_ASSERT(abs(bins[b] - N / BINS) < 500); /* about 5 standard deviations */
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("nn", NULL, NULL);
    POS_ADD_TEST(s, test_forward_matches_a_hand_computed_network);
    POS_ADD_TEST(s, test_forward_matches_a_direct_evaluation);
    POS_ADD_TEST(s, test_gradients_match_central_differences);
    POS_ADD_TEST(s, test_backward_adds_into_the_gradient);
    POS_ADD_TEST(s, test_adam_first_step_moves_by_lr_against_the_gradient);
    POS_ADD_TEST(s, test_adam_minimises_a_quadratic);
    POS_ADD_TEST(s, test_adam_takes_a_non_finite_gradient_as_zero);
    POS_ADD_TEST(s, test_polyak_moves_the_target_toward_the_source);
    POS_ADD_TEST(s, test_softmax_covers_only_the_allowed_entries);
    POS_ADD_TEST(s, test_softmax_is_stable_for_large_logits);
    POS_ADD_TEST(s, test_softmax_with_none_allowed_is_all_zero);
    POS_ADD_TEST(s, test_shapes_outside_the_bounds_are_refused);
    POS_ADD_TEST(s, test_copy_is_equal_and_independent);
    POS_ADD_TEST(s, test_randomize_draws_he_uniform_weights_and_zero_biases);
    POS_ADD_TEST(s, test_rng_is_splitmix64_and_reproducible);
    POS_ADD_TEST(s, test_rng_uniform_is_in_zero_one);
}
