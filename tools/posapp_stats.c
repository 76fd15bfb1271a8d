/* posapp's statistics and JSON report (see posapp_stats.h). */
#include "tools/posapp_stats.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void posapp_sort(double *v, size_t n)
{
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_double);
}

double posapp_percentile(const double *sorted, size_t n, double pct)
{
    if (n == 0)
        return NAN;
    /* The epsilon keeps e.g. 29% of 100 (28.999999999999996 in binary) at rank 29. */
    double r = pct / 100.0 * (double)n;
    double rank = ceil(r - 1e-9 * (r > 1.0 ? r : 1.0));
    if (rank < 1.0)
        rank = 1.0;
    if (rank > (double)n)
        rank = (double)n;
    return sorted[(size_t)rank - 1];
}

double posapp_mean(const double *v, size_t n)
{
    if (n == 0)
        return NAN;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    return sum / (double)n;
}

double posapp_fraction_le(const double *v, size_t n, double limit)
{
    if (n == 0)
        return NAN;
    size_t ok = 0;
    for (size_t i = 0; i < n; i++)
        ok += v[i] <= limit;
    return (double)ok / (double)n;
}

/* --- JSON ----------------------------------------------------------------------------- */

static void json_append(struct posapp_json *j, const char *fmt, ...)
{
    if (j->overflow)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(j->buf + j->len, j->cap - j->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= j->cap - j->len) {
        j->overflow = 1;
        return;
    }
    j->len += (size_t)n;
}

static void json_quoted(struct posapp_json *j, const char *s)
{
    json_append(j, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            json_append(j, "\\%c", *p);
        else if (*p < 0x20)
            json_append(j, "\\u%04x", *p);
        else
            json_append(j, "%c", *p);
    }
    json_append(j, "\"");
}

static void json_key(struct posapp_json *j, const char *key)
{
    if (j->fields++)
        json_append(j, ",");
    json_quoted(j, key);
    json_append(j, ":");
}

void posapp_json_begin(struct posapp_json *j, char *buf, size_t cap)
{
    j->buf = buf;
    j->cap = cap;
    j->len = 0;
    j->fields = 0;
    j->overflow = cap < 3;
    if (!j->overflow)
        buf[0] = '\0';
    json_append(j, "{");
}

void posapp_json_string(struct posapp_json *j, const char *key, const char *s)
{
    json_key(j, key);
    if (s)
        json_quoted(j, s);
    else
        json_append(j, "null");
}

void posapp_json_uint(struct posapp_json *j, const char *key, uint64_t v)
{
    json_key(j, key);
    json_append(j, "%llu", (unsigned long long)v);
}

void posapp_json_number(struct posapp_json *j, const char *key, double v, int decimals)
{
    json_key(j, key);
    if (!isfinite(v))
        json_append(j, "null");
    else if (decimals < 0)
        json_append(j, "%.15g", v);
    else
        json_append(j, "%.*f", decimals, v);
}

void posapp_json_null(struct posapp_json *j, const char *key)
{
    json_key(j, key);
    json_append(j, "null");
}

void posapp_json_bool(struct posapp_json *j, const char *key, int tri)
{
    json_key(j, key);
    json_append(j, "%s", tri < 0 ? "null" : tri ? "true" : "false");
}

int posapp_json_end(struct posapp_json *j)
{
    json_append(j, "}");
    if (j->overflow) {
        if (j->cap >= 3)
            memcpy(j->buf, "{}", 3);
        return -1;
    }
    return (int)j->len;
}

/* --- report ----------------------------------------------------------------------------- */

void posapp_report_latencies(struct posapp_report *r, double *lat_ms, size_t n, double makespan_s)
{
    posapp_sort(lat_ms, n);
    r->p50_ms = posapp_percentile(lat_ms, n, 50.0);
    r->p90_ms = posapp_percentile(lat_ms, n, 90.0);
    r->p99_ms = posapp_percentile(lat_ms, n, 99.0);
    r->mean_ms = posapp_mean(lat_ms, n);
    r->makespan_s = makespan_s;
    r->throughput_rps = makespan_s > 0.0 ? (double)n / makespan_s : NAN;
    r->slo_attainment = isnan(r->slo_ms) ? NAN : posapp_fraction_le(lat_ms, n, r->slo_ms);
}

int posapp_report_json(const struct posapp_report *r, char *buf, size_t cap)
{
    struct posapp_json j;
    posapp_json_begin(&j, buf, cap);
    posapp_json_string(&j, "model", r->model);
    posapp_json_uint(&j, "batch", r->batch);
    posapp_json_uint(&j, "requests", r->requests);
    posapp_json_uint(&j, "launches", r->launches);
    posapp_json_number(&j, "p50_ms", r->p50_ms, 6);
    posapp_json_number(&j, "p90_ms", r->p90_ms, 6);
    posapp_json_number(&j, "p99_ms", r->p99_ms, 6);
    posapp_json_number(&j, "mean_ms", r->mean_ms, 6);
    posapp_json_number(&j, "throughput_rps", r->throughput_rps, 3);
    posapp_json_number(&j, "makespan_s", r->makespan_s, 6);
    posapp_json_number(&j, "slo_ms", r->slo_ms, -1);
    posapp_json_number(&j, "slo_attainment", r->slo_attainment, 6);
    posapp_json_bool(&j, "verified", r->verified);
    if (r->microbench) {
        posapp_json_number(&j, "launch_ns_p50", r->launch_ns_p50, 1);
        posapp_json_number(&j, "launch_ns_p99", r->launch_ns_p99, 1);
        posapp_json_number(&j, "launch_ns_mean", r->launch_ns_mean, 1);
    }
    return posapp_json_end(&j);
}
