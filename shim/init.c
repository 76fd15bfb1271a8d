/* libposshim.so's life in a process: at load, the configuration is read, the real dlsym found,
 * the record rings reserved, the fork handler put in place and the lower layers given the
 * collector's hooks (a new ring to drain; a waiting thread's collector pass); at unload, the
 * collector stops (drain, trace, summary). The driver itself is found at first use
 * (shim/real.c). */
#include "shim/shim.h"

__attribute__((constructor)) static void shim_load(void)
{
    shim_config_read();
    shim_real_start();
    if (shim_cfg.mode == SHIM_MODE_OFF)
        return;
    shim_session_helper(shim_collector_help);
    if (shim_threads_start(shim_collector_attached) != 0)
        return;
    shim_fork_start();
    shim_active = 1;
}

__attribute__((destructor)) static void shim_unload(void)
{
    if (shim_active)
        shim_collector_stop();
}
