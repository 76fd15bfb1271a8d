/* SM shares through MPS: puts the share posd gave this process (its WELCOME) in
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE before the driver starts, since MPS reads the variable when
 * a context is created and a context keeps that share for its life. The admin's share is a
 * ceiling: a smaller value the user set is kept, a larger one is lowered to the share.
 * POS_SHIM_SM_SHARE records what the shim put there, so that a child process tells a share
 * it inherited from its parent's shim from its user's own (docs/shim.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim/shim.h"

#define MPS_VAR  "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
#define MARK_VAR "POS_SHIM_SM_SHARE"

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
