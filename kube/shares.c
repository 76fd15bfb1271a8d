/* Share IDs and their packing onto the fewest GPUs (see shares.h). */
#include "shares.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void kube_share_id(char *buf, int gpu, int k)
{
    snprintf(buf, KUBE_SHARE_ID_MAX, "gpu%d-%d", gpu, k);
}

/* A decimal number of at most 3 digits at *P, no leading zero: its value, or -1. */
static int small_decimal(const char **p)
{
    const char *s = *p;
    int v = 0, n = 0;
    while (s[n] >= '0' && s[n] <= '9' && n < 4)
        v = v * 10 + (s[n++] - '0');
    if (n == 0 || n > 3 || (n > 1 && s[0] == '0'))
        return -1;
    *p = s + n;
    return v;
}

int kube_share_parse(const char *id, int *gpu, int *k)
{
    if (strncmp(id, "gpu", 3) != 0)
        return -EINVAL;
    const char *p = id + 3;
    int g = small_decimal(&p);
    if (g < 0 || g >= KUBE_GPUS_MAX || *p++ != '-')
        return -EINVAL;
    int s = small_decimal(&p);
    if (s < 0 || s >= KUBE_SHARES_MAX || *p)
        return -EINVAL;
    *gpu = g;
    *k = s;
    return 0;
}

static int already(const char *const *out, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(out[i], id) == 0)
            return 1;
    return 0;
}

/* Adds AVAIL's IDs of GPU G to OUT until it holds SIZE. */
static size_t take_gpu(const char *const *avail, size_t n_avail, int g, size_t size,
                       const char **out, size_t n)
{
    for (size_t i = 0; i < n_avail && n < size; i++) {
        int gpu, k;
        if (kube_share_parse(avail[i], &gpu, &k) == 0 && gpu == g && !already(out, n, avail[i]))
            out[n++] = avail[i];
    }
    return n;
}

size_t kube_shares_prefer(const char *const *avail, size_t n_avail, const char *const *must,
                          size_t n_must, size_t size, const char **out)
{
    size_t n = 0;
    int used[KUBE_GPUS_MAX] = {0}, free_shares[KUBE_GPUS_MAX] = {0};
    for (size_t i = 0; i < n_must && n < size; i++) {
        int g, k;
        if (kube_share_parse(must[i], &g, &k) < 0 || already(out, n, must[i]))
            continue;
        out[n++] = must[i];
        used[g] = 1;
    }
    for (size_t i = 0; i < n_avail; i++) {
        int g, k;
        if (kube_share_parse(avail[i], &g, &k) == 0 && !already(out, n, avail[i]))
            free_shares[g]++;
    }
    /* first the GPUs the container has already, then the fullest of the others: taking from
     * the GPUs with the most shares first touches the fewest to reach SIZE */
    for (int g = 0; g < KUBE_GPUS_MAX && n < size; g++)
        if (used[g])
            n = take_gpu(avail, n_avail, g, size, out, n);
    while (n < size) {
        int best = -1;
        for (int g = 0; g < KUBE_GPUS_MAX; g++)
            if (!used[g] && free_shares[g] > 0 && (best < 0 || free_shares[g] > free_shares[best]))
                best = g;
        if (best < 0)
            break;
        used[best] = 1;
        n = take_gpu(avail, n_avail, best, size, out, n);
    }
    return n;
}
