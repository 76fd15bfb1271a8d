/* Integration tests of posd's Prometheus endpoint (--metrics) and posstat -o prom: a scrape
 * over HTTP is checked line by line against the text exposition format (HELP and TYPE before
 * each family's samples, metric and label names, label value escapes, counters ending in
 * _total, no non-base units, histogram buckets cumulative in increasing le ending at +Inf,
 * equal to _count), posstat -o prom prints the same families, docs/metrics.md lists exactly
 * the families served, and a port alone binds loopback only. Real processes: posd, posapp
 * under the shim on the simulated driver. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pos/proto.h"
#include "tests/cunit_main.h"
#include "tests/integration/suite.h"
#include "tests/integration/util.h"

#define OUT_MAX (1 << 20)

static struct suite suite;

static int suite_init(void)
{
    return suite_open(&suite, "metrics", "");
}

static int suite_clean(void)
{
    return suite_close(&suite);
}

/* A TCP port that was free a moment ago. */
static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (bind(s, (struct sockaddr *)&a, sizeof a) < 0 || getsockname(s, (struct sockaddr *)&a, &len))
        return -1;
    close(s);
    return ntohs(a.sin_port);
}

/* The suite's posd serving metrics on a port that was free, at ADDR ("127.0.0.1:", or "" for
 * a port alone); returns the port. */
static int posd_with_metrics(const char *addr)
{
    int port = free_port();
    CU_ASSERT_FATAL(port > 0);
    char spec[32];
    snprintf(spec, sizeof spec, "%s%d", addr, port);
    const char *const args[] = {"--metrics", spec, NULL};
    suite_posd_start_args(&suite, args);
    CU_ASSERT_FATAL(access(suite.sock, F_OK) == 0);
    return port;
}

/* HTTP GET PATH from 127.0.0.1:PORT; the whole response in OUT. Returns its status code. */
static int http_get(int port, const char *path, char *out, size_t cap)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = 10};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    out[0] = '\0';
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) {
        close(s);
        return -1;
    }
    char req[256];
    int n = snprintf(req, sizeof req,
                     "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", path);
    if (send(s, req, (size_t)n, 0) != n) {
        close(s);
        return -1;
    }
    size_t len = 0;
    ssize_t k;
    while (len < cap - 1 && (k = recv(s, out + len, cap - 1 - len, 0)) > 0)
        len += (size_t)k;
    out[len] = '\0';
    close(s);
    int code = -1;
    sscanf(out, "HTTP/1.%*d %d", &code);
    return code;
}

/* ---- the format checker --------------------------------------------------------------------- */

#define MAX_FAMILIES 64

struct family {
    char name[128];
    char type[32];
    int help, samples;
};

struct checker {
    struct family fam[MAX_FAMILIES];
    int n;
    int errors;
    /* the histogram series being read: its labels without le, last le and count */
    char hist_series[512];
    double last_le, last_count;
    int hist_open; /* buckets seen, +Inf not yet */
    double inf_count;
};

static void complain(struct checker *c, int line, const char *what, const char *text)
{
    c->errors++;
    if (c->errors <= 10)
        fprintf(stderr, "\n  line %d: %s: %.200s", line, what, text);
}

static struct family *family(struct checker *c, const char *name, int create)
{
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->fam[i].name, name) == 0)
            return &c->fam[i];
    if (!create || c->n == MAX_FAMILIES)
        return NULL;
    struct family *f = &c->fam[c->n++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    return f;
}

static int name_char(char ch, int first)
{
    return isalpha((unsigned char)ch) || ch == '_' || ch == ':' ||
           (!first && isdigit((unsigned char)ch));
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* Parses "{k="v",...}" at *P into LABELS (without le, as given) and LE; returns 0 or -1. */
static int parse_labels(const char **p, char *labels, size_t cap, char *le, size_t lecap)
{
    const char *s = *p;
    size_t n = 0;
    le[0] = '\0';
    labels[0] = '\0';
    if (*s != '{')
        return 0;
    s++;
    while (*s != '}') {
        char key[64];
        size_t k = 0;
        if (!name_char(*s, 1) || *s == ':')
            return -1;
        while (name_char(*s, 0) && *s != ':' && k < sizeof key - 1)
            key[k++] = *s++;
        key[k] = '\0';
        if (*s++ != '=' || *s++ != '"')
            return -1;
        char val[256];
        size_t v = 0;
        while (*s && *s != '"') {
            if (*s == '\\') {
                s++;
                if (*s != '\\' && *s != '"' && *s != 'n')
                    return -1; /* the only escapes the format has */
            } else if (*s == '\n') {
                return -1;
            }
            if (v < sizeof val - 1)
                val[v++] = *s;
            s++;
        }
        val[v] = '\0';
        if (*s++ != '"')
            return -1;
        if (strcmp(key, "le") == 0)
            snprintf(le, lecap, "%s", val);
        else
            n += (size_t)snprintf(labels + n, n < cap ? cap - n : 0, "%s=%s;", key, val);
        if (*s == ',')
            s++;
        else if (*s != '}')
            return -1;
    }
    *p = s + 1;
    return 0;
}

static void check_sample(struct checker *c, int line, const char *text)
{
    char name[128];
    size_t k = 0;
    const char *p = text;
    if (!name_char(*p, 1)) {
        complain(c, line, "bad metric name", text);
        return;
    }
    while (name_char(*p, 0) && k < sizeof name - 1)
        name[k++] = *p++;
    name[k] = '\0';
    char labels[512], le[256];
    if (parse_labels(&p, labels, sizeof labels, le, sizeof le) < 0) {
        complain(c, line, "bad label syntax", text);
        return;
    }
    if (*p++ != ' ') {
        complain(c, line, "no blank before the value", text);
        return;
    }
    char *end;
    double v = strtod(p, &end);
    if (end == p || (*end && *end != ' ')) {
        complain(c, line, "bad value", text);
        return;
    }
    if (strncmp(name, "posd_", 5) != 0)
        complain(c, line, "name without the posd_ prefix", text);
    /* its family: a histogram's samples carry suffixes */
    char base[128];
    snprintf(base, sizeof base, "%s", name);
    struct family *f = family(c, base, 0);
    const char *suffix = "";
    if (!f) {
        static const char *const sfx[] = {"_bucket", "_sum", "_count"};
        for (int i = 0; i < 3 && !f; i++)
            if (ends_with(name, sfx[i])) {
                base[strlen(name) - strlen(sfx[i])] = '\0';
                f = family(c, base, 0);
                suffix = sfx[i];
            }
    }
    if (!f || !f->help || !f->type[0]) {
        complain(c, line, "sample before its family's HELP and TYPE", text);
        return;
    }
    f->samples++;
    if (strcmp(f->type, "histogram") != 0) {
        if (*suffix || le[0])
            complain(c, line, "histogram suffix or le on a non-histogram", text);
        return;
    }
    if (strcmp(suffix, "_bucket") == 0) {
        if (!le[0]) {
            complain(c, line, "bucket without le", text);
            return;
        }
        double b = strcmp(le, "+Inf") == 0 ? INFINITY : strtod(le, NULL);
        if (!c->hist_open || strcmp(c->hist_series, labels) != 0) {
            if (c->hist_open)
                complain(c, line, "a histogram's buckets end without +Inf", text);
            snprintf(c->hist_series, sizeof c->hist_series, "%s", labels);
            c->hist_open = 1;
            c->last_le = -INFINITY;
            c->last_count = 0;
        }
        if (!(b > c->last_le))
            complain(c, line, "le not increasing", text);
        if (v < c->last_count)
            complain(c, line, "buckets not cumulative", text);
        c->last_le = b;
        c->last_count = v;
        if (isinf(b)) {
            c->hist_open = 0;
            c->inf_count = v;
        }
    } else if (strcmp(suffix, "_count") == 0) {
        if (c->hist_open || strcmp(c->hist_series, labels) != 0)
            complain(c, line, "_count of a histogram whose buckets did not end at +Inf", text);
        else if (v != c->inf_count)
            complain(c, line, "_count differs from the +Inf bucket", text);
    } else if (!*suffix) {
        complain(c, line, "histogram sample without _bucket, _sum or _count", text);
    }
}

/* Checks TEXT line by line; returns the number of errors (each printed). */
static int check_exposition(const char *text, struct checker *c)
{
    memset(c, 0, sizeof *c);
    int line = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        if (!nl) {
            complain(c, line + 1, "last line without a newline", p);
            break;
        }
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)(nl - p), p);
        p = nl + 1;
        line++;
        if (!buf[0])
            continue;
        char name[128], rest[900];
        if (strncmp(buf, "# HELP ", 7) == 0) {
            if (sscanf(buf + 7, "%127s %899[^\n]", name, rest) != 2) {
                complain(c, line, "HELP without a name and text", buf);
                continue;
            }
            struct family *f = family(c, name, 1);
            if (f->help || f->samples)
                complain(c, line, "HELP twice or after samples", buf);
            f->help = 1;
        } else if (strncmp(buf, "# TYPE ", 7) == 0) {
            char type[32];
            if (sscanf(buf + 7, "%127s %31s", name, type) != 2) {
                complain(c, line, "TYPE without a name and type", buf);
                continue;
            }
            struct family *f = family(c, name, 1);
            if (f->type[0] || f->samples)
                complain(c, line, "TYPE twice or after samples", buf);
            if (strcmp(type, "counter") && strcmp(type, "gauge") && strcmp(type, "histogram"))
                complain(c, line, "unknown type", buf);
            snprintf(f->type, sizeof f->type, "%s", type);
            if (strcmp(type, "counter") == 0 && !ends_with(name, "_total"))
                complain(c, line, "counter not ending in _total", buf);
            if (strstr(name, "_ms") || strstr(name, "_us") || strstr(name, "_ns") ||
                strstr(name, "_percent") || strstr(name, "_milli"))
                complain(c, line, "not a base unit", buf);
        } else if (buf[0] == '#') {
            continue; /* a comment */
        } else {
            check_sample(c, line, buf);
        }
    }
    if (c->hist_open)
        complain(c, line, "the last histogram's buckets end without +Inf", "");
    return c->errors;
}

/* ---- tests ---------------------------------------------------------------------------------- */

/* Waits until posd has seen requests of a client (up to 5 s). */
static void wait_requests(void)
{
    for (int i = 0; i < 100; i++) {
        struct pos_device_stats dev;
        struct pos_client_stats cs[4];
        if (util_stats(suite.sock, &dev, cs, 4) > 0 && cs[0].requests > 3)
            return;
        usleep(50000);
    }
}

static char body[OUT_MAX], resp[OUT_MAX], prom[OUT_MAX], doc[1 << 16];

/* A scrape is well-formed exposition text, with every family documented and every
 * documented family served; posstat -o prom prints the same families, also well-formed. */
static void test_scrape_is_valid_exposition_and_documented(void)
{
    int port = posd_with_metrics("127.0.0.1:");
    pid_t app = util_posapp_until_killed("we\"ird\\app", "resnet18");
    wait_requests();
    CU_ASSERT_EQUAL(http_get(port, "/metrics", resp, sizeof resp), 200);
    CU_ASSERT_PTR_NOT_NULL(strstr(resp, "Content-Type: text/plain; version=0.0.4"));
    const char *b = strstr(resp, "\r\n\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    snprintf(body, sizeof body, "%s", b + 4);
    struct checker c;
    CU_ASSERT_EQUAL(check_exposition(body, &c), 0);
    CU_ASSERT(c.n >= 10);
    /* the odd name comes back escaped; the request histogram has counts and a sum */
    CU_ASSERT_PTR_NOT_NULL(strstr(body, "app=\"we\\\"ird\\\\app\""));
    const char *cnt = strstr(body, "posd_client_request_duration_seconds_count{");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cnt);
    CU_ASSERT(strtod(strchr(cnt, '}') + 1, NULL) > 0);
    const char *sum = strstr(body, "posd_client_request_duration_seconds_sum{");
    CU_ASSERT_PTR_NOT_NULL_FATAL(sum);
    CU_ASSERT(strtod(strchr(sum, '}') + 1, NULL) > 0);
    /* docs/metrics.md names exactly these families */
    CU_ASSERT_EQUAL_FATAL(util_read_file("docs/metrics.md", doc, sizeof doc), 0);
    for (int i = 0; i < c.n; i++) {
        char quoted[160];
        snprintf(quoted, sizeof quoted, "`%s`", c.fam[i].name);
        CU_ASSERT_PTR_NOT_NULL(strstr(doc, quoted));
        if (!strstr(doc, quoted))
            fprintf(stderr, "\n  docs/metrics.md does not list %s", c.fam[i].name);
    }
    for (const char *p = doc; (p = strstr(p, "| `posd_")) != NULL; p += 8) {
        char name[128];
        /* a metric of a telemetry part this posd does not run is absent, and says so */
        const char *eol = strchr(p, '\n');
        const char *absent = strstr(p, "absent without discovery");
        int may_be_absent = absent && (!eol || absent < eol) &&
                            !strstr(body, "posd_unmanaged_processes{");
        if (sscanf(p + 3, "%127[a-z_]", name) == 1 && !family(&c, name, 0) && !may_be_absent) {
            CU_FAIL("docs/metrics.md lists a metric posd does not serve");
            fprintf(stderr, "\n  not served: %s", name);
        }
    }
    /* posstat -o prom: the same families */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "build/posstat -s %s -o prom", suite.sock);
    CU_ASSERT_EQUAL(util_run_stdout(cmd, prom, sizeof prom), 0);
    struct checker c2;
    CU_ASSERT_EQUAL(check_exposition(prom, &c2), 0);
    CU_ASSERT_EQUAL(c2.n, c.n);
    for (int i = 0; i < c.n; i++)
        CU_ASSERT_PTR_NOT_NULL(family(&c2, c.fam[i].name, 0));
    /* only /metrics */
    CU_ASSERT_EQUAL(http_get(port, "/", resp, sizeof resp), 404);
    kill(app, SIGKILL);
    waitpid(app, NULL, 0);
    util_posd_stop(&suite.posd, SIGTERM);
}

/* Whether something listens on TCP ADDR (hex, as /proc/net/tcp writes it):PORT. */
static int listening_on(const char *hex_addr, int port)
{
    char want[32], text[1 << 16];
    snprintf(want, sizeof want, "%s:%04X 00000000:0000 0A", hex_addr, port);
    return util_read_file("/proc/net/tcp", text, sizeof text) == 0 && strstr(text, want);
}

/* A port alone binds the loopback address only; a bad spec or a port in use stops posd at
 * start with one line. */
static void test_port_alone_is_loopback_and_bad_specs_stop_posd(void)
{
    int port = posd_with_metrics("");
    CU_ASSERT(listening_on("0100007F", port));
    CU_ASSERT(!listening_on("00000000", port));
    CU_ASSERT_EQUAL(http_get(port, "/metrics", resp, sizeof resp), 200);
    /* a second posd on the same port (on another socket) refuses to start */
    char cmd[512], out[4096];
    snprintf(cmd, sizeof cmd, "build/posd -f -c %s -s %s/second.sock --metrics %d", suite.conf,
             suite.dir, port);
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "cannot serve metrics on"));
    util_posd_stop(&suite.posd, SIGTERM);
    snprintf(cmd, sizeof cmd, "build/posd -f -c %s -s %s/third.sock --metrics 99999", suite.conf,
             suite.dir);
    CU_ASSERT_EQUAL(util_run(cmd, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "bad --metrics '99999'"));
}

void pos_test_register(void)
{
    CU_pSuite s = POS_ADD_SUITE("metrics", suite_init, suite_clean);
    POS_ADD_TEST(s, test_scrape_is_valid_exposition_and_documented);
    POS_ADD_TEST(s, test_port_alone_is_loopback_and_bad_specs_stop_posd);
}
