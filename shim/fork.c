/* Fork handling: what the child of a fork keeps of the shim. The parent needs nothing done
 * before or after a fork (no pthread_atfork prepare or parent handler): the child's handler
 * alone decides, by whether CUDA was initialised before the fork. */
#include "shim/shim.h"

#include <pthread.h>

/* A child forked before CUDA was initialised here is a process of its own (workers of Python's
 * multiprocessing with the fork start method): none of the parent's other threads exists in
 * it, so every ring is free again, and nothing was started yet (collector, trace and posd
 * session come with a successful cuInit), so its own cuInit starts them as in any process. */
static void fresh_child(void)
{
    shim_self_tls = NULL;
    shim_ctx_known = 0;
    if (!shim_active)
        return;
    shim_threads_forked();
    shim_collector_forked();
    shim_devtime_forked();
    shim_session_fresh_child();
}

static void fork_child(void)
{
    if (!shim_cuda_inited) {
        fresh_child();
        return;
    }
    /* A child of a process that initialised CUDA keeps nothing of the parent's: no
     * collector, no rings, no trace. Its CUDA calls, if any, go straight to the driver, which
     * refuses them (CUDA forbids using the parent's context in a child). */
    shim_active = 0;
    shim_self_tls = NULL;
    shim_ctx_known = 0;
    shim_session_forked();
    shim_cfg.trace_path[0] = '\0';
}

void shim_fork_start(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}
