/* The shim's configuration, read once at load from the environment (POS_MODE, POS_DEBUG,
 * POS_TRACE, POS_SAMPLE, POS_POLL_US, POS_PROMPT_POLL_US, POS_HELP_WHEN_US, POS_DEVTIME), and
 * the two settings that follow from it and change later: whether posd may be asked (not after
 * a fork of an attached process) and the marker rate (posd may ask for another). */
#include "shim/shim.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct shim_config shim_cfg;
int shim_sched_allowed;
_Atomic uint32_t shim_sample;

static uint32_t env_u32(const char *name, uint32_t dflt, uint32_t max)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (errno || *end || x > max) {
        shim_log("ignoring %s='%s' (want an integer 0..%u); using %u", name, v, max, dflt);
        return dflt;
    }
    return (uint32_t)x;
}

void shim_config_read(void)
{
    const char *mode = getenv("POS_MODE");
    shim_cfg.debug = env_u32("POS_DEBUG", 0, 9);
    shim_cfg.mode_requested = -1;
    if (mode && *mode) {
        if (strcmp(mode, "off") == 0)
            shim_cfg.mode_requested = SHIM_MODE_OFF;
        else if (strcmp(mode, "passthrough") == 0)
            shim_cfg.mode_requested = SHIM_MODE_PASSTHROUGH;
        else if (strcmp(mode, "scheduled") == 0)
            shim_cfg.mode_requested = SHIM_MODE_SCHEDULED;
        else
            shim_log("ignoring POS_MODE='%s' (off, passthrough or scheduled)", mode);
    }
    /* Records are kept unless off; posd is asked unless passthrough was asked for. The mode
     * is scheduled while attached to posd, passthrough otherwise. */
    shim_cfg.mode =
        shim_cfg.mode_requested == SHIM_MODE_OFF ? SHIM_MODE_OFF : SHIM_MODE_PASSTHROUGH;
    shim_sched_allowed =
        shim_cfg.mode_requested == -1 || shim_cfg.mode_requested == SHIM_MODE_SCHEDULED;
    const char *trace = getenv("POS_TRACE");
    if (trace && *trace) {
        if (strlen(trace) >= sizeof shim_cfg.trace_path)
            shim_log("POS_TRACE path too long; no trace");
        else
            strcpy(shim_cfg.trace_path, trace);
    }
    /* a trace wants every operator's completion; otherwise sample */
    shim_cfg.sample =
        env_u32("POS_SAMPLE", shim_cfg.trace_path[0] ? 1 : POS_SAMPLE_DEFAULT, 1u << 20);
    shim_cfg.poll_us = env_u32("POS_POLL_US", POS_POLL_US_DEFAULT, 1000000);
    shim_cfg.prompt_poll_us = env_u32("POS_PROMPT_POLL_US", POS_PROMPT_POLL_US_DEFAULT, 1000000);
    shim_cfg.help_when_us = env_u32("POS_HELP_WHEN_US", POS_HELP_WHEN_US_DEFAULT, 1000000);
    /* 0: sampled markers keep the collector's poll times (no timing events) */
    shim_cfg.devtime = (int)env_u32("POS_DEVTIME", 1, 1);
    if (shim_cfg.prompt_poll_us == 0)
        shim_cfg.prompt_poll_us = 1;
    atomic_store(&shim_sample, shim_cfg.sample);
    if (shim_cfg.poll_us == 0)
        shim_cfg.poll_us = 1;
}
