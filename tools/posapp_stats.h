/* posapp's statistics and output: nearest-rank percentiles, means, SLO attainment, the
 * summary of one run, and the one-line JSON report with its fixed key order.
 * Pure code: no CUDA, no clocks, no I/O. */
#ifndef POS_TOOLS_POSAPP_STATS_H
#define POS_TOOLS_POSAPP_STATS_H

#include <stddef.h>
#include <stdint.h>

/* Sorts V[0..n) ascending. */
void posapp_sort(double *v, size_t n);

/* Nearest-rank percentile of SORTED[0..n): the value at 1-based rank ceil(PCT/100 * n),
 * clamped to [1, n]; PCT in [0, 100]. NAN when n == 0. */
double posapp_percentile(const double *sorted, size_t n, double pct);

/* Arithmetic mean; NAN when n == 0. */
double posapp_mean(const double *v, size_t n);

/* Fraction of V[0..n) that is <= LIMIT; NAN when n == 0. */
double posapp_fraction_le(const double *v, size_t n, double limit);

/* A fixed-capacity JSON object writer. Non-finite numbers are written as null. */
struct posapp_json {
    char *buf;
    size_t cap;
    size_t len;
    int fields;
    int overflow;
};

void posapp_json_begin(struct posapp_json *j, char *buf, size_t cap);
void posapp_json_string(struct posapp_json *j, const char *key, const char *s); /* NULL: null */
void posapp_json_uint(struct posapp_json *j, const char *key, uint64_t v);
/* DECIMALS < 0: shortest "%.15g" form; else fixed with that many decimals. */
void posapp_json_number(struct posapp_json *j, const char *key, double v, int decimals);
void posapp_json_null(struct posapp_json *j, const char *key);
/* TRI < 0: null, 0: false, > 0: true. */
void posapp_json_bool(struct posapp_json *j, const char *key, int tri);
/* Closes the object. Returns its length, or -1 if it did not fit (BUF is then "{}"). */
int posapp_json_end(struct posapp_json *j);

/* Everything posapp prints, in one place. NAN in a double means null. */
struct posapp_report {
    const char *model; /* NULL: null */
    uint32_t batch;
    uint64_t requests;
    uint64_t launches;
    double p50_ms, p90_ms, p99_ms, mean_ms;
    double throughput_rps;
    double makespan_s;
    double slo_ms; /* NAN: --slo not given */
    double slo_attainment;
    int verified;   /* -1 null, 0 false, 1 true */
    int microbench; /* adds launch_ns_p50, launch_ns_p99 and launch_ns_mean */
    double launch_ns_p50, launch_ns_p99, launch_ns_mean;
};

/* Fills the latency and SLO fields of R from LAT_MS[0..n) (sorted in place), and the
 * throughput from MAKESPAN_S. R->slo_ms must be set first (NAN for none). */
void posapp_report_latencies(struct posapp_report *r, double *lat_ms, size_t n, double makespan_s);

/* Writes R as one JSON object (no newline) into BUF. Returns the length or -1. */
int posapp_report_json(const struct posapp_report *r, char *buf, size_t cap);

#endif
