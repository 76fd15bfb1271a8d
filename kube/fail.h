/* The kube/ files' one way to fail: a negative errno value returned, and one line saying why
 * written into the caller's buffer (which may be NULL). */
#ifndef POS_KUBE_FAIL_H
#define POS_KUBE_FAIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static inline int kube_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline int kube_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return rc;
}

#endif
