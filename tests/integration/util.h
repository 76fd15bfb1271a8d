/* Small helpers shared by the integration tests: reading a whole file, and reading a number
 * out of a program's output. */
#ifndef POS_TESTS_INTEGRATION_UTIL_H
#define POS_TESTS_INTEGRATION_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads PATH into BUF (NUL-terminated, at most CAP-1 bytes). Returns 0 or -1. */
static inline int util_read_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return 0;
}

/* The number after "KEY": (JSON) or after "KEY " (a program's "key N" line), -1 if absent. */
static inline long long util_number(const char *text, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(text, pat);
    if (!p) {
        snprintf(pat, sizeof pat, "%s ", key);
        p = strstr(text, pat);
    }
    return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

#endif
