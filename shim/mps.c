/* SM shares through MPS: puts the share posd gave this process (its WELCOME) in
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE before the driver starts, since MPS reads the variable when
 * a context is created and a context keeps that share for its life. The admin's share is a
 * ceiling: a smaller value the user set is kept, a larger one is lowered to the share.
 * POS_SHIM_SM_SHARE records what the shim put there, so that a child process tells a share
 * it inherited from its parent's shim from its user's own (docs/shim.md). posd's memory limit goes
 * into CUDA_MPS_PINNED_DEVICE_MEM_LIMIT the same way, per device ("0=1024M,1=512M", NVIDIA's
 * format), after cuInit and before the first context (docs/memory.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pos/client_shm.h"
#include "shim/shim.h"

#define MPS_VAR      "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
#define MARK_VAR     "POS_SHIM_SM_SHARE"
#define MPS_MEM_VAR  "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
#define MARK_MEM_VAR "POS_SHIM_MEM_LIMIT"

/* A percentage in (0, 100], or 0 when V is not one. */
static double percentage(const char *v)
{
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    return !errno && !*end && isfinite(x) && x > 0 && x <= 100 ? x : 0;
}

void shim_mps_apply(uint32_t share)
{
    const char *cur = getenv(MPS_VAR), *mark = getenv(MARK_VAR);
    int inherited = cur && mark && strcmp(cur, mark) == 0;
    double user = inherited ? 0 : percentage(cur);
    if (share == 0) {
        /* no share for this process: one its parent's shim set is not its own */
        if (inherited) {
            unsetenv(MPS_VAR);
            unsetenv(MARK_VAR);
        }
        return;
    }
    if (user > 0 && user <= share) {
        unsetenv(MARK_VAR);
        if (shim_cfg.debug)
            shim_log("keeping %s=%s: below posd's share of %u%%", MPS_VAR, cur, share);
        return;
    }
    char v[16];
    snprintf(v, sizeof v, "%u", share);
    if (shim_cfg.debug && cur && !inherited)
        shim_log("%s=%s lowered to posd's share of %u%%", MPS_VAR, cur, share);
    setenv(MPS_VAR, v, 1);
    setenv(MARK_VAR, v, 1);
}

/* ---- memory limits ------------------------------------------------------------------------ */

/* Bytes of "<number>[K|M|G|T][B]" at *P (binary units), moving *P past it; 0 when not one. */
static uint64_t mem_value(const char **p)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(*p, &end, 10);
    if (errno || end == *p)
        return 0;
    static const char units[] = "KMGT";
    const char *u = *end ? strchr(units, *end & ~0x20) : NULL;
    if (u) {
        for (const char *k = units; k <= u; k++)
            x = x > (UINT64_MAX >> 10) ? UINT64_MAX : x << 10;
        end++;
        if (*end == 'B' || *end == 'b')
            end++;
    }
    *p = end;
    return x;
}

/* The user's limit of device DEV in V ("0=1G,1=512M"), 0 when none. */
static uint64_t user_mem_limit(const char *v, int dev)
{
    for (const char *p = v; p && *p;) {
        char *end;
        long d = strtol(p, &end, 10);
        if (end == p || *end != '=')
            return 0;
        p = end + 1;
        uint64_t x = mem_value(&p);
        if (d == dev)
            return x;
        if (*p != ',')
            return 0;
        p++;
    }
    return 0;
}

void shim_mps_apply_mem(uint64_t limit, uint32_t ppm, int ndev, const uint64_t *totals)
{
    const char *cur = getenv(MPS_MEM_VAR), *mark = getenv(MARK_MEM_VAR);
    int inherited = cur && mark && strcmp(cur, mark) == 0;
    char v[POS_MEM_MAX_DEVICES * 32] = "";
    size_t len = 0;
    int lowered = 0;
    for (int d = 0; d < ndev && d < POS_MEM_MAX_DEVICES; d++) {
        uint64_t ours = pos_mem_limit_of(limit, ppm, totals[d]);
        uint64_t user = inherited || !cur ? 0 : user_mem_limit(cur, d);
        uint64_t want = user && user <= ours ? user : ours;
        if (want == POS_MEM_UNLIMITED)
            continue;
        lowered |= !user || user > ours;
        /* in MiB, rounded down: never above posd's limit */
        len += (size_t)snprintf(v + len, sizeof v - len, "%s%d=%lluM", len ? "," : "", d,
                                (unsigned long long)(want >> 20));
    }
    if (!len || !lowered) {
        if (cur && !inherited && shim_cfg.debug)
            shim_log("keeping %s=%s: within posd's memory limit", MPS_MEM_VAR, cur);
        if (!lowered)
            unsetenv(MARK_MEM_VAR);
        return;
    }
    if (shim_cfg.debug && cur && !inherited)
        shim_log("%s=%s lowered to posd's memory limit: %s", MPS_MEM_VAR, cur, v);
    setenv(MPS_MEM_VAR, v, 1);
    setenv(MARK_MEM_VAR, v, 1);
}
