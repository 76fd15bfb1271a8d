/* The shim's log: one line on stderr, tagged with the process, for what a user should hear of
 * (a setting ignored, a driver that refused something) and POS_DEBUG's details. */
#include "shim/shim.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

void shim_log(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "posshim[%d]: %s\n", (int)getpid(), buf);
}
