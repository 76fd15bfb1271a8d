/* Memory limits as people write them (mem_limit.h): the one reader of "512M", "50%" and
 * "none", exact in integers (no floating point between the text and the bytes), and the one
 * writer of sizes in binary units. */
#include "sched/mem_limit.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_DECIMALS     9 /* of a size: a billionth of a PiB is under a MiB */
#define MAX_PCT_DECIMALS 4 /* of a percentage: a millionth of the device */

static const char unit_letters[] = "KMGTP"; /* 2^10 .. 2^50 */

/* A decimal number: digits, then optionally '.' and digits, into *WHOLE and *FRAC / 10^*NFRAC.
 * Returns the first character after it, or NULL when there is no number or it overflows. */
static const char *read_decimal(const char *s, uint64_t *whole, uint64_t *frac, int *nfrac,
                                int max_frac)
{
    if (!isdigit((unsigned char)*s))
        return NULL;
    uint64_t w = 0;
    for (; isdigit((unsigned char)*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (w > (UINT64_MAX - d) / 10)
            return NULL;
        w = w * 10 + d;
    }
    uint64_t f = 0;
    int n = 0;
    if (*s == '.') {
        s++;
        if (!isdigit((unsigned char)*s))
            return NULL;
        for (; isdigit((unsigned char)*s); s++, n++) {
            if (n == max_frac)
                return NULL;
            f = f * 10 + (uint64_t)(*s - '0');
        }
    }
    *whole = w;
    *frac = f;
    *nfrac = n;
    return s;
}

static uint64_t pow10u(int n)
{
    uint64_t p = 1;
    while (n-- > 0)
        p *= 10;
    return p;
}

/* The unit at S ("", "B", "K", "KB", "Ki", "KiB", ... any case): its size in bytes, 0 when S is
 * not one. */
static uint64_t unit_size(const char *s)
{
    if (!*s)
        return 1;
    if ((s[0] == 'b' || s[0] == 'B') && !s[1])
        return 1;
    const char *at = strchr(unit_letters, toupper((unsigned char)s[0]));
    if (!s[0] || !at)
        return 0;
    const char *rest = s + 1;
    if (*rest == 'i' || *rest == 'I')
        rest++;
    if (*rest == 'b' || *rest == 'B')
        rest++;
    if (*rest)
        return 0;
    return UINT64_C(1) << (10 * (1 + (at - unit_letters)));
}

static int refuse(char *why, size_t cap, const char *text)
{
    if (why && cap)
        snprintf(why, cap, "%s", text);
    return -EINVAL;
}

static int parse_percent(uint64_t whole, uint64_t frac, int nfrac, struct sched_mem_limit *out,
                         char *why, size_t cap)
{
    /* ppm = percent * 10^4, exact: the fraction has at most 4 digits */
    unsigned __int128 ppm =
        (unsigned __int128)whole * 10000 + frac * pow10u(MAX_PCT_DECIMALS - nfrac);
    if (ppm > POS_MEM_PPM_WHOLE)
        return refuse(why, cap, "a percentage of the device must be at most 100%");
    /* 0% cannot be a share (ppm 0 means "bytes"): it is the limit of no memory */
    *out = ppm ? (struct sched_mem_limit){.bytes = POS_MEM_UNLIMITED, .ppm = (uint32_t)ppm}
               : (struct sched_mem_limit){.bytes = 0, .ppm = 0};
    return 0;
}

int sched_mem_limit_parse(const char *text, struct sched_mem_limit *out, char *why, size_t cap)
{
    static const char expected[] =
        "expected none, a size such as 512M, 1.5G or 4GiB (binary units K, M, G, T, P), or a "
        "percentage of the device such as 50%";
    if (strcmp(text, "none") == 0) {
        *out = SCHED_MEM_NO_LIMIT;
        return 0;
    }
    uint64_t whole, frac;
    int nfrac;
    const char *s = read_decimal(text, &whole, &frac, &nfrac, MAX_DECIMALS);
    if (!s) {
        if (isdigit((unsigned char)text[0]))
            return refuse(why, cap, "too large, or more than 9 decimals");
        return refuse(why, cap, expected);
    }
    while (*s == ' ' || *s == '\t')
        s++;
    if (s[0] == '%' && !s[1]) {
        if (nfrac > MAX_PCT_DECIMALS)
            return refuse(why, cap, "a percentage takes at most 4 decimals (a millionth)");
        return parse_percent(whole, frac, nfrac, out, why, cap);
    }
    uint64_t unit = unit_size(s);
    if (!unit)
        return refuse(why, cap, expected);
    if (unit == 1 && frac)
        return refuse(why, cap, "a number of bytes must be whole");
    unsigned __int128 b =
        (unsigned __int128)whole * unit + (unsigned __int128)frac * unit / pow10u(nfrac);
    if (b >= POS_MEM_UNLIMITED)
        return refuse(why, cap, "too large: at most 16 EiB less 2 bytes");
    *out = (struct sched_mem_limit){.bytes = (uint64_t)b, .ppm = 0};
    return 0;
}

void sched_mem_bytes_format(uint64_t bytes, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    uint64_t scale = 1;
    while (u < 6 && bytes / scale >= 1024) {
        scale <<= 10;
        u++;
    }
    if (u == 0) {
        snprintf(buf, cap, "%llu%s", (unsigned long long)bytes, units[0]);
        return;
    }
    double v = (double)bytes / (double)scale;
    if (v >= 1000)
        snprintf(buf, cap, "%.0f%s", v, units[u]);
    else
        snprintf(buf, cap, "%.3g%s", v, units[u]);
}

void sched_mem_limit_format(struct sched_mem_limit l, char *buf, size_t cap)
{
    if (l.ppm) {
        /* millionths as a percentage with the decimals it has: 12.5%, 0.0001% */
        char digits[16];
        snprintf(digits, sizeof digits, "%u.%04u", l.ppm / 10000, l.ppm % 10000);
        size_t n = strlen(digits);
        while (digits[n - 1] == '0')
            digits[--n] = '\0';
        if (digits[n - 1] == '.')
            digits[--n] = '\0';
        snprintf(buf, cap, "%s%%", digits);
    } else if (l.bytes == POS_MEM_UNLIMITED) {
        snprintf(buf, cap, "none");
    } else {
        sched_mem_bytes_format(l.bytes, buf, cap);
    }
}

const char *sched_mem_kind_name(int kind)
{
    static const char *const names[POS_MEM_KINDS] = {
        [POS_MEM_LINEAR] = "linear", [POS_MEM_PITCHED] = "pitched", [POS_MEM_MANAGED] = "managed",
        [POS_MEM_ARRAY] = "array",   [POS_MEM_POOL] = "pool",       [POS_MEM_VMM] = "vmm",
        [POS_MEM_IPC] = "ipc",       [POS_MEM_CONTEXT] = "context", [POS_MEM_MODULE] = "module",
    };
    return kind >= 0 && kind < POS_MEM_KINDS ? names[kind] : "?";
}
