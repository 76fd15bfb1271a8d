/* Linux's pressure stall information (Documentation/accounting/psi.rst): the "some" line of
 * /proc/pressure/cpu, "some avg10=0.13 avg60=0.17 avg300=0.05 total=1879050054", whose total
 * is the microseconds during which some runnable task waited for a CPU, since boot. Pure. */
#ifndef POS_PSI_H
#define POS_PSI_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The "some" line's total (us) in TEXT (NUL-terminated): 0, or -1 where TEXT has no such
 * line or its total is not a number. */
static inline int pos_psi_some_total_us(const char *text, uint64_t *us)
{
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        if (!strncmp(line, "some ", 5)) {
            const char *t = strstr(line, " total=");
            if (!t || (end && t > end))
                return -1;
            t += 7;
            if (*t < '0' || *t > '9')
                return -1;
            char *stop;
            unsigned long long v = strtoull(t, &stop, 10);
            if (*stop && *stop != '\n' && *stop != ' ')
                return -1;
            *us = v;
            return 0;
        }
        line = end ? end + 1 : NULL;
    }
    return -1;
}

#endif
