/* posapp: the stand-in for an unmodified inference framework process. Owns main(), option
 * parsing and every CUDA driver API call: it declares a model's kernels in a simulated-
 * driver module, runs the model's kernel sequence once per request (closed loop or a
 * fixed open-loop arrival schedule, N streams x T threads), optionally checks results
 * with the built-in twin kernels, and prints one JSON line. It knows nothing of pos.
 * Usage and semantics: docs/posapp.md. */
#include <cuda.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sim/model_file.h"
#include "sim/request.h"
#include "sim/twin_math.h"
#include "tools/posapp_arrival.h"
#include "tools/posapp_stats.h"

#define VERIFY_N     4096u /* floats per --verify buffer */
#define VERIFY_EVERY 4     /* a twin step after every 4th model op */
#define TWIN_BLOCK   256u
#define POLL_NS      50000 /* open loop: how often an idle thread polls its oldest request */
#define MAX_STREAMS  256
#define MAX_THREADS  256

/* --- errors ------------------------------------------------------------------------------ */

/* Shared by all threads, explicitly: only the first fatal error prints and exits. */
static atomic_flag fatal_once = ATOMIC_FLAG_INIT;

static void __attribute__((noreturn, format(printf, 2, 3))) die(int status, const char *fmt, ...)
{
    if (atomic_flag_test_and_set(&fatal_once))
        for (;;)
            pause(); /* another thread is already exiting */
    va_list ap;
    va_start(ap, fmt);
    fputs("posapp: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(status);
}

/* CALL is the failed call's text or name; only the part before '(' is printed. */
static void __attribute__((noreturn)) cu_fail(const char *call, CUresult rc, const char *ctx)
{
    const char *name = NULL, *desc = NULL;
    char code[32];
    if (cuGetErrorName(rc, &name) != CUDA_SUCCESS || !name) {
        snprintf(code, sizeof code, "CUresult %d", (int)rc);
        name = code;
    }
    if (cuGetErrorString(rc, &desc) != CUDA_SUCCESS || !desc)
        desc = "unrecognized error code";
    die(1, "%.*s failed: %s (%s)%s%s", (int)strcspn(call, "("), call, name, desc,
        ctx ? " for " : "", ctx ? ctx : "");
}

/* A direct driver call, named by its own text; CUN names a call made through a pointer. */
#define CU(call)                                                                                   \
    do {                                                                                           \
        CUresult rc_ = (call);                                                                     \
        if (rc_ != CUDA_SUCCESS)                                                                   \
            cu_fail(#call, rc_, NULL);                                                             \
    } while (0)
#define CUN(name, call)                                                                            \
    do {                                                                                           \
        CUresult rc_ = (call);                                                                     \
        if (rc_ != CUDA_SUCCESS)                                                                   \
            cu_fail((name), rc_, NULL);                                                            \
    } while (0)

/* --- options ----------------------------------------------------------------------------- */

struct options {
    const char *model;
    uint32_t batch;
    uint64_t requests;
    uint64_t seed;
    struct posapp_arrival arrival;
    uint32_t streams;
    uint32_t threads;
    int ptds;
    double slo_ms; /* NAN: not set */
    int verify;
    uint64_t microbench;      /* 0: off */
    const char *launch_times; /* microbench: where each launch's start and return go */
    uint32_t host_us;
    double duration_s;       /* --duration: stop issuing after this long; 0: off */
    int real;                /* --real: synthetic kernels from a fatbin on a real GPU */
    const char *real_module; /* --real-module FILE; NULL: <exe dir>/posapp_real.fatbin */
};

static const char usage_text[] =
    "usage: posapp --model NAME|FILE [options]\n"
    "       posapp --microbench N [--ptds] [--launch-times FILE]\n"
    "Runs a model's kernel sequence once per request through the CUDA driver API and\n"
    "prints one JSON line of results on stdout (docs/posapp.md).\n"
    "  --model NAME|FILE    sim/models/NAME.model, $POS_MODELS_DIR/NAME.model or a path\n"
    "  --batch N            batch size the model is scaled to (default 1)\n"
    "  --requests N         requests this process runs, all threads together (default 100)\n"
    "  --seed N             seed of the arrival schedule and --verify values (default 1)\n"
    "  --arrival SPEC       closed | poisson:RATE | gamma:SHAPE:RATE (default closed);\n"
    "                       RATE in requests/s, gamma gaps have mean 1/RATE, CV 1/sqrt(SHAPE)\n"
    "  --streams N          streams per thread; request i runs on stream i mod N (default 1)\n"
    "  --threads T          host threads issuing requests, one shared context (default 1)\n"
    "  --ptds               launch into the per-thread default stream through\n"
    "                       cuGetProcAddress(..., PER_THREAD_DEFAULT_STREAM); needs --streams 1\n"
    "  --slo MS             report the fraction of requests with latency <= MS\n"
    "  --verify             add built-in twin kernels and check their results on the CPU\n"
    "  --microbench N       time N back-to-back launches of a tiny kernel (no model needed)\n"
    "  --launch-times FILE  with --microbench: write each launch's call and return times\n"
    "                       (CLOCK_MONOTONIC ns), one line \"T0 T1\" per launch\n"
    "  --host-us US         spin US microseconds of CPU time before each model op (default 0)\n"
    "  --duration S         closed loop: stop issuing after S seconds (--requests caps it),\n"
    "                       or at SIGINT/SIGTERM, and print the results so far\n"
    "  --real               real NVIDIA GPU: run each op as a synthetic kernel doing its FLOPs\n"
    "                       and bytes with its grid (posapp_real.fatbin beside the executable)\n"
    "  --real-module FILE   the fatbin --real loads (built by tests/gpu/build.sh)\n"
    "  -h, --help           this text\n";

static uint64_t parse_uint(const char *opt, const char *s, uint64_t min, uint64_t max)
{
    char *end = NULL;
    errno = 0;
    int digit = isdigit((unsigned char)s[0]) != 0;
    unsigned long long v = digit ? strtoull(s, &end, 10) : 0;
    if (!digit || errno || *end || v < min || v > max)
        die(2, "bad --%s '%s' (want an integer in [%llu, %llu])", opt, s, (unsigned long long)min,
            (unsigned long long)max);
    return v;
}

static double parse_positive(const char *opt, const char *s)
{
    char *end = NULL;
    errno = 0;
    int number = isdigit((unsigned char)s[0]) || s[0] == '.';
    double v = number ? strtod(s, &end) : -1.0;
    if (!number || v <= 0.0 || errno || *end || !isfinite(v))
        die(2, "bad --%s '%s' (want a number > 0)", opt, s);
    return v;
}

static const struct option long_options[] = {
    {"model", required_argument, NULL, 'm'},
    {"batch", required_argument, NULL, 'b'},
    {"requests", required_argument, NULL, 'r'},
    {"seed", required_argument, NULL, 's'},
    {"arrival", required_argument, NULL, 'a'},
    {"streams", required_argument, NULL, 'S'},
    {"threads", required_argument, NULL, 't'},
    {"ptds", no_argument, NULL, 'P'},
    {"slo", required_argument, NULL, 'L'},
    {"verify", no_argument, NULL, 'V'},
    {"microbench", required_argument, NULL, 'M'},
    {"host-us", required_argument, NULL, 'H'},
    {"launch-times", required_argument, NULL, 'T'},
    {"real", no_argument, NULL, 'R'},
    {"duration", required_argument, NULL, 'D'},
    {"real-module", required_argument, NULL, 'F'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void apply_option(struct options *o, int c, const char *arg)
{
    char err[256];
    switch (c) {
    case 'm':
        o->model = arg;
        break;
    case 'b':
        o->batch = (uint32_t)parse_uint("batch", arg, 1, 4096);
        break;
    case 'r':
        o->requests = parse_uint("requests", arg, 1, 100000000);
        break;
    case 's':
        o->seed = parse_uint("seed", arg, 0, UINT64_MAX);
        break;
    case 'a':
        if (posapp_arrival_parse(arg, &o->arrival, err, sizeof err) < 0)
            die(2, "%s", err);
        break;
    case 'S':
        o->streams = (uint32_t)parse_uint("streams", arg, 1, MAX_STREAMS);
        break;
    case 't':
        o->threads = (uint32_t)parse_uint("threads", arg, 1, MAX_THREADS);
        break;
    case 'P':
        o->ptds = 1;
        break;
    case 'L':
        o->slo_ms = parse_positive("slo", arg);
        break;
    case 'V':
        o->verify = 1;
        break;
    case 'M':
        o->microbench = parse_uint("microbench", arg, 1, 10000000);
        break;
    case 'H':
        o->host_us = (uint32_t)parse_uint("host-us", arg, 0, 1000000);
        break;
    case 'T':
        o->launch_times = arg;
        break;
    case 'R':
        o->real = 1;
        break;
    case 'D':
        o->duration_s = parse_positive("duration", arg);
        break;
    case 'F':
        o->real_module = arg;
        break;
    }
}

static void parse_options(int argc, char **argv, struct options *o)
{
    *o = (struct options){
        .batch = 1, .requests = 100, .seed = 1, .streams = 1, .threads = 1, .slo_ms = NAN};
    o->arrival = (struct posapp_arrival){.kind = POSAPP_ARRIVAL_CLOSED, .shape = 1.0};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", long_options, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage_text, stdout);
            exit(0);
        }
        if (c == ':')
            die(2, "option '%s' needs a value (see --help)", argv[optind - 1]);
        if (c == '?')
            die(2, "bad option '%s' (see --help)", argv[optind - 1]);
        apply_option(o, c, optarg);
    }
    if (optind < argc)
        die(2, "unexpected argument '%s' (see --help)", argv[optind]);
    if (o->ptds && o->streams > 1)
        die(2, "--ptds launches into the thread's default stream; it needs --streams 1");
    if (!o->microbench && !o->model)
        die(2, "--model is required (or --microbench N; see --help)");
    if (o->launch_times && !o->microbench)
        die(2, "--launch-times needs --microbench");
    if (o->duration_s > 0 && (o->microbench || o->arrival.kind != POSAPP_ARRIVAL_CLOSED))
        die(2, "--duration needs the closed loop (no --arrival, no --microbench)");
    if (o->real_module && !o->real)
        die(2, "--real-module needs --real");
    if (o->real && o->verify)
        die(2, "--verify needs the simulated driver's twin kernels; it does not go with --real");
}

/* --- time ---------------------------------------------------------------------------------- */

static int64_t ts_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return ts_ns(&t);
}

static void sleep_until(int64_t when_ns)
{
    struct timespec t = {.tv_sec = when_ns / 1000000000, .tv_nsec = when_ns % 1000000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
        ;
}

/* Burns US microseconds of this thread's CPU time, as framework code between ops does. */
static void host_spin(uint32_t us)
{
    if (!us)
        return;
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    int64_t end = ts_ns(&t) + (int64_t)us * 1000;
    do
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    while (ts_ns(&t) < end);
}

/* --- driver entry points used on streams --------------------------------------------------- */

/* Direct exports, or their per-thread-default-stream (_ptsz) versions with --ptds. */
struct stream_api {
    __typeof__(cuLaunchKernel) *launch;
    __typeof__(cuMemcpyDtoHAsync) *dtoh_async;
    __typeof__(cuEventRecord) *event_record;
    __typeof__(cuStreamSynchronize) *stream_sync;
};

static void *resolve_ptds(const char *name)
{
    void *pfn = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult rc = cuGetProcAddress(name, &pfn, CUDA_VERSION,
                                   CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
    if (rc != CUDA_SUCCESS)
        cu_fail("cuGetProcAddress", rc, name);
    if (st != CU_GET_PROC_ADDRESS_SUCCESS || !pfn)
        die(1, "cuGetProcAddress failed: status %d, no per-thread version of %s", (int)st, name);
    return pfn;
}

static void stream_api_init(struct stream_api *api, int ptds)
{
    if (!ptds) {
        *api = (struct stream_api){cuLaunchKernel, cuMemcpyDtoHAsync, cuEventRecord,
                                   cuStreamSynchronize};
        return;
    }
    api->launch = (__typeof__(cuLaunchKernel) *)resolve_ptds("cuLaunchKernel");
    api->dtoh_async = (__typeof__(cuMemcpyDtoHAsync) *)resolve_ptds("cuMemcpyDtoHAsync");
    api->event_record = (__typeof__(cuEventRecord) *)resolve_ptds("cuEventRecord");
    api->stream_sync = (__typeof__(cuStreamSynchronize) *)resolve_ptds("cuStreamSynchronize");
}

/* --- the module ------------------------------------------------------------------------------ */

struct kernels {
    CUmodule mod;
    size_t nops;
    CUfunction *ops;
    CUfunction vadd, fill, scale, checksum, tiny;
    /* --real: the synthetic kernel, its buffer and each op's parameters */
    CUfunction synth;
    CUdeviceptr buf, out;
    unsigned long long mask4; /* float4s in buf - 1 (a power of two) */
    struct real_op {
        unsigned n_fma, n_load;
        unsigned long long off4; /* where its loads start, in float4s */
    } * real_ops;
};

/* The text module (docs/sim-formats.md) for model M and its request R (NULL: twins and tiny
 * only): one kernel per op of the request, under the builder's name. */
static char *module_text(const struct sim_model *m, const struct sim_request *r)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        die(1, "out of memory");
    fprintf(f, ".pos_sim_module 1\n# posapp: model %s batch %u\n", m ? m->name : "(none)",
            m ? m->batch : 1);
    for (size_t i = 0; r && i < r->nops; i++) {
        const struct sim_request_op *op = &r->ops[i];
        fprintf(f, ".kernel %s flops=%.17g bytes=%.17g dtype=%s smem=%u\n", op->name, op->flops,
                op->bytes, op->fp16 ? "fp16" : "fp32", op->smem);
    }
    fputs(".kernel pos_vadd twin=vector_add\n"
          ".kernel pos_fill twin=fill\n"
          ".kernel pos_scale twin=scale\n"
          ".kernel pos_checksum twin=checksum\n"
          ".kernel tiny flops=0 bytes=0\n",
          f);
    if (fclose(f) != 0)
        die(1, "out of memory");
    return text;
}

static void get_function(CUfunction *f, CUmodule mod, const char *name)
{
    CUresult rc = cuModuleGetFunction(f, mod, name);
    if (rc != CUDA_SUCCESS)
        cu_fail("cuModuleGetFunction", rc, name);
}

static void kernels_load(struct kernels *k, const struct sim_model *m, const struct sim_request *r)
{
    size_t nops = r ? r->nops : 0;
    k->nops = nops;
    k->ops = calloc(nops ? nops : 1, sizeof *k->ops); /* NOLINT: CUfunction is a handle */
    if (!k->ops)
        die(1, "out of memory");
    char *text = module_text(m, r);
    CU(cuModuleLoadData(&k->mod, text));
    free(text);
    for (size_t i = 0; i < nops; i++)
        get_function(&k->ops[i], k->mod, r->ops[i].name);
    get_function(&k->vadd, k->mod, "pos_vadd");
    get_function(&k->fill, k->mod, "pos_fill");
    get_function(&k->scale, k->mod, "pos_scale");
    get_function(&k->checksum, k->mod, "pos_checksum");
    get_function(&k->tiny, k->mod, "tiny");
}

/* --real: the fatbin beside the executable unless --real-module names one. */
static char *real_module_path(const struct options *o)
{
    if (o->real_module)
        return strdup(o->real_module);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        die(1, "--real: cannot find the executable's folder (readlink /proc/self/exe)");
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    *slash = 0;
    char *path = NULL;
    if (asprintf(&path, "%s/posapp_real.fatbin", exe) < 0)
        die(1, "out of memory");
    return path;
}

static void *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die(2, "--real: cannot open %s: %s (build it with tests/gpu/build.sh, or --real-module)",
            path, strerror(errno));
    char *data = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len == cap && !(data = realloc(data, cap = cap ? 2 * cap : 1 << 16)))
            die(1, "out of memory");
        got = fread(data + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    fclose(f);
    *size = len;
    return data;
}

/* --real: the synthetic kernels of the fatbin; each op of R becomes pos_synth with N_FMA =
 * FLOPs / (2 * threads) and N_LOAD = bytes / (16 * threads), launched with the op's grid,
 * block and shared memory (tools/posapp_real.cu). */
static void kernels_load_real(struct kernels *k, const struct options *o,
                              const struct sim_request *r)
{
    char *path = real_module_path(o);
    size_t size;
    void *image = read_file(path, &size);
    CUresult rc = cuModuleLoadData(&k->mod, image);
    if (rc != CUDA_SUCCESS) {
        const char *name = NULL;
        if (cuGetErrorName(rc, &name) != CUDA_SUCCESS || !name)
            name = "?";
        die(1,
            "--real: cuModuleLoadData failed: %s for %s; --real needs an NVIDIA GPU and driver "
            "(the simulated driver runs only its own text modules)",
            name, path);
    }
    free(image);
    free(path);
    get_function(&k->synth, k->mod, "pos_synth");
    get_function(&k->tiny, k->mod, "pos_tiny");
    size_t nops = r ? r->nops : 0;
    k->nops = nops;
    k->real_ops = calloc(nops ? nops : 1, sizeof *k->real_ops);
    if (!k->real_ops)
        die(1, "out of memory");
    double max_bytes = 0, at = 0;
    uint32_t max_smem = 0;
    for (size_t i = 0; i < nops; i++) {
        const struct sim_request_op *op = &r->ops[i];
        double threads = (double)sim_request_op_blocks(op) * (double)sim_request_op_threads(op);
        if (threads < 1)
            threads = 1;
        double fma = ceil(op->flops / (2.0 * threads)), load = ceil(op->bytes / (16.0 * threads));
        k->real_ops[i].n_fma = fma > 4e9 ? 4000000000u : (unsigned)fma;
        k->real_ops[i].n_load = load > 4e9 ? 4000000000u : (unsigned)load;
        k->real_ops[i].off4 = (unsigned long long)(at / 16.0);
        at += op->bytes;
        max_bytes = op->bytes > max_bytes ? op->bytes : max_bytes;
        max_smem = op->smem > max_smem ? op->smem : max_smem;
    }
    if (max_smem > 48 * 1024)
        CU(cuFuncSetAttribute(k->synth, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              (int)max_smem));
    /* one buffer, a power of two from 256 MiB (several times any L2 cache, so the ops' loads go
     * to DRAM) to 1 GiB, the size of the largest op's bytes when larger; consecutive ops walk
     * consecutive regions of it (offsets wrap with the mask), and an op that touches more than
     * it holds wraps around it */
    size_t bytes = (size_t)1 << 28;
    while (bytes < max_bytes && bytes < ((size_t)1 << 30))
        bytes *= 2;
    CU(cuMemAlloc(&k->buf, bytes));
    CU(cuMemsetD32(k->buf, 0, bytes / 4));
    CU(cuMemAlloc(&k->out, sizeof(float)));
    k->mask4 = bytes / 16 - 1;
}

/* --- shared run state -------------------------------------------------------------------- */

struct shared {
    const struct options *o;
    const struct sim_model *model; /* NULL in --microbench */
    const struct sim_request *req; /* the model's request (sim/request.h); NULL likewise */
    CUdevice dev;
    struct kernels k;
    struct stream_api api;
    const double *schedule; /* open-loop arrival offsets (s); NULL for closed loop */
    int64_t *arrive_ns;     /* per global request; written only by the thread that owns it */
    int64_t *done_ns;
    pthread_barrier_t ready; /* every thread has set up its streams */
    pthread_barrier_t go;    /* t0_ns is set */
    int64_t t0_ns;
};

/* One stream of one thread, with its completion event and --verify buffers. */
struct slot {
    CUstream stream; /* NULL with --ptds: the thread's default stream */
    CUevent done;
    CUdeviceptr x, y, out;
    uint64_t *pinned;
};

struct worker {
    struct shared *sh;
    pthread_t tid;
    uint32_t index;
    struct slot *slots;
    float *hx, *hy; /* CPU replay of --verify */
    uint64_t launches;
    uint64_t mismatches;
};

static void context_enter(const struct shared *sh)
{
    CUcontext ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, sh->dev));
    CU(cuCtxSetCurrent(ctx));
}

static void slots_create(struct worker *w)
{
    const struct options *o = w->sh->o;
    w->slots = calloc(o->streams, sizeof *w->slots);
    w->hx = malloc(VERIFY_N * sizeof(float));
    w->hy = malloc(VERIFY_N * sizeof(float));
    if (!w->slots || !w->hx || !w->hy)
        die(1, "out of memory");
    for (uint32_t i = 0; i < o->streams; i++) {
        struct slot *s = &w->slots[i];
        if (!o->ptds)
            CU(cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING));
        CU(cuEventCreate(&s->done, CU_EVENT_DISABLE_TIMING));
        if (!o->verify)
            continue;
        CU(cuMemAlloc(&s->x, VERIFY_N * sizeof(float)));
        CU(cuMemAlloc(&s->y, VERIFY_N * sizeof(float)));
        CU(cuMemAlloc(&s->out, sizeof(uint64_t)));
        CU(cuMemAllocHost((void **)&s->pinned, sizeof(uint64_t)));
    }
}

static void slots_destroy(struct worker *w)
{
    const struct options *o = w->sh->o;
    for (uint32_t i = 0; i < o->streams; i++) {
        struct slot *s = &w->slots[i];
        if (o->verify) {
            CU(cuMemFreeHost(s->pinned));
            CU(cuMemFree(s->out));
            CU(cuMemFree(s->y));
            CU(cuMemFree(s->x));
        }
        CU(cuEventDestroy(s->done));
        if (s->stream)
            CU(cuStreamDestroy(s->stream));
    }
    free(w->slots);
    free(w->hx);
    free(w->hy);
}

/* --- launches ------------------------------------------------------------------------------ */

static void launch(struct worker *w, CUfunction f, const uint32_t grid[3], const uint32_t block[3],
                   CUstream s, void **params)
{
    CUN("cuLaunchKernel", w->sh->api.launch(f, grid[0], grid[1], grid[2], block[0], block[1],
                                            block[2], 0, s, params, NULL));
    w->launches++;
}

static void launch_twin(struct worker *w, CUfunction f, CUstream s, void **params)
{
    static const uint32_t grid[3] = {(VERIFY_N + TWIN_BLOCK - 1) / TWIN_BLOCK, 1, 1};
    static const uint32_t block[3] = {TWIN_BLOCK, 1, 1};
    launch(w, f, grid, block, s, params);
}

/* --verify values: exact in binary floating point, so results stay finite and exact. */
static float verify_fill_value(uint64_t seed, uint64_t req, unsigned which)
{
    return 0.5f + (float)(posapp_hash3(seed, req, UINT64_MAX - which) % 64) / 32.0f;
}

static float verify_alpha(uint64_t seed, uint64_t req, uint64_t step)
{
    static const float alphas[] = {0.5f, 0.75f, 1.25f, 1.5f, 2.0f};
    return alphas[posapp_hash3(seed, req, step) % (sizeof alphas / sizeof *alphas)];
}

/* Twin step STEP of request REQ: scale(x, alpha) on even steps, x = x + y on odd ones. */
static void launch_verify_step(struct worker *w, struct slot *s, uint64_t req, uint64_t step)
{
    const struct kernels *k = &w->sh->k;
    unsigned n = VERIFY_N;
    if (step % 2 == 0) {
        float alpha = verify_alpha(w->sh->o->seed, req, step);
        launch_twin(w, k->scale, s->stream, (void *[]){&s->x, &alpha, &n});
    } else {
        launch_twin(w, k->vadd, s->stream, (void *[]){&s->x, &s->y, &s->x, &n});
    }
}

/* The checksum request REQ must produce, replayed on the CPU with sim/twin_math.h. */
static uint64_t verify_expected(struct worker *w, uint64_t req)
{
    uint64_t seed = w->sh->o->seed;
    size_t steps = w->sh->k.nops / VERIFY_EVERY;
    pos_sim_fill_f32(w->hx, verify_fill_value(seed, req, 0), VERIFY_N);
    pos_sim_fill_f32(w->hy, verify_fill_value(seed, req, 1), VERIFY_N);
    for (size_t step = 0; step < steps; step++) {
        if (step % 2 == 0)
            pos_sim_scale_f32(w->hx, verify_alpha(seed, req, step), VERIFY_N);
        else
            pos_sim_vector_add_f32(w->hx, w->hy, w->hx, VERIFY_N);
    }
    return pos_sim_checksum_f32(w->hx, VERIFY_N);
}

/* Launches request REQ on slot S and records its completion event. */
static void issue_request(struct worker *w, struct slot *s, uint64_t req)
{
    const struct shared *sh = w->sh;
    const struct options *o = sh->o;
    const struct sim_request *rq = sh->req;
    unsigned n = VERIFY_N;
    if (o->verify) {
        float v = verify_fill_value(o->seed, req, 0), u = verify_fill_value(o->seed, req, 1);
        launch_twin(w, sh->k.fill, s->stream, (void *[]){&s->x, &v, &n});
        launch_twin(w, sh->k.fill, s->stream, (void *[]){&s->y, &u, &n});
    }
    for (size_t j = 0; j < rq->nops; j++) {
        host_spin(o->host_us);
        if (o->real) {
            const struct kernels *k = &sh->k;
            unsigned long long mask4 = k->mask4, off4 = k->real_ops[j].off4;
            unsigned n_fma = k->real_ops[j].n_fma, n_load = k->real_ops[j].n_load;
            const uint32_t *g = rq->ops[j].grid, *b = rq->ops[j].block;
            void *params[] = {(void *)&k->buf, &mask4, &off4, &n_fma, &n_load, (void *)&k->out};
            CUN("cuLaunchKernel", sh->api.launch(k->synth, g[0], g[1], g[2], b[0], b[1], b[2],
                                                 rq->ops[j].smem, s->stream, params, NULL));
            w->launches++;
            continue;
        }
        launch(w, sh->k.ops[j], rq->ops[j].grid, rq->ops[j].block, s->stream, NULL);
        if (o->verify && (j + 1) % VERIFY_EVERY == 0)
            launch_verify_step(w, s, req, (j + 1) / VERIFY_EVERY - 1);
    }
    if (o->verify) {
        launch_twin(w, sh->k.checksum, s->stream, (void *[]){&s->x, &n, &s->out});
        CUN("cuMemcpyDtoHAsync",
            sh->api.dtoh_async(s->pinned, s->out, sizeof(uint64_t), s->stream));
    }
    CUN("cuEventRecord", sh->api.event_record(s->done, s->stream));
}

/* --- the request loop of one thread ---------------------------------------------------------- */

/* Completes this thread's oldest in-flight request (local index *REAPED): waits for it if
 * BLOCK, else only checks. Returns 1 if it completed. */
static int reap_oldest(struct worker *w, uint64_t *reaped, int block)
{
    const struct options *o = w->sh->o;
    struct slot *s = &w->slots[*reaped % o->streams]; /* NOLINT: --streams >= 1 (parse_uint) */
    if (block) {
        CU(cuEventSynchronize(s->done));
    } else {
        CUresult rc = cuEventQuery(s->done);
        if (rc == CUDA_ERROR_NOT_READY)
            return 0;
        if (rc != CUDA_SUCCESS)
            cu_fail("cuEventQuery", rc, NULL);
    }
    uint64_t req = w->index + *reaped * o->threads;
    w->sh->done_ns[req] = now_ns();
    if (o->verify && *s->pinned != verify_expected(w, req))
        w->mismatches++;
    (*reaped)++;
    return 1;
}

/* Open loop: sleeps until WHEN, completing in-flight requests as they finish meanwhile. */
static void wait_arrival(struct worker *w, int64_t when, uint64_t issued, uint64_t *reaped)
{
    for (;;) {
        int64_t now = now_ns();
        if (now >= when)
            return;
        if (*reaped == issued)
            sleep_until(when);
        else if (!reap_oldest(w, reaped, 0))
            sleep_until(when < now + POLL_NS ? when : now + POLL_NS);
    }
}

/* --duration: SIGINT or SIGTERM ends the run as its time would (results are printed) */
static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void run_requests(struct worker *w)
{
    struct shared *sh = w->sh;
    const struct options *o = sh->o;
    uint64_t issued = 0, reaped = 0;
    int64_t stop = o->duration_s > 0 ? sh->t0_ns + (int64_t)llround(o->duration_s * 1e9) : 0;
    for (uint64_t req = w->index; req < o->requests; req += o->threads, issued++) {
        int64_t arrive = 0;
        if (stop && (stop_requested || now_ns() >= stop))
            break;
        if (sh->schedule) {
            arrive = sh->t0_ns + (int64_t)llround(sh->schedule[req] * 1e9);
            wait_arrival(w, arrive, issued, &reaped);
        }
        if (issued - reaped == o->streams)
            reap_oldest(w, &reaped, 1);
        sh->arrive_ns[req] = sh->schedule ? arrive : now_ns();
        issue_request(w, &w->slots[issued % o->streams], req); /* NOLINT: --streams >= 1 */
    }
    while (reaped < issued)
        reap_oldest(w, &reaped, 1);
}

static void barrier_wait(pthread_barrier_t *b)
{
    int rc = pthread_barrier_wait(b);
    if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD)
        die(1, "pthread_barrier_wait failed: %s", strerror(rc));
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    context_enter(w->sh);
    slots_create(w);
    barrier_wait(&w->sh->ready);
    barrier_wait(&w->sh->go);
    run_requests(w);
    slots_destroy(w);
    CU(cuDevicePrimaryCtxRelease(w->sh->dev));
    return NULL;
}

/* --- the two modes ---------------------------------------------------------------------------- */

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p)
        die(1, "out of memory");
    return p;
}

/* Starts the threads, releases them together at t0 and waits for them. */
static void run_threads(struct shared *sh, struct worker *workers)
{
    const struct options *o = sh->o;
    uint32_t t = o->threads;
    if (pthread_barrier_init(&sh->ready, NULL, t + 1) || pthread_barrier_init(&sh->go, NULL, t + 1))
        die(1, "pthread_barrier_init failed");
    for (uint32_t i = 0; i < t; i++) {
        workers[i] = (struct worker){.sh = sh, .index = i};
        int rc = pthread_create(&workers[i].tid, NULL, worker_main, &workers[i]);
        if (rc)
            die(1, "pthread_create failed: %s", strerror(rc));
    }
    barrier_wait(&sh->ready);
    sh->t0_ns = now_ns();
    barrier_wait(&sh->go);
    for (uint32_t i = 0; i < t; i++)
        pthread_join(workers[i].tid, NULL);
    pthread_barrier_destroy(&sh->ready);
    pthread_barrier_destroy(&sh->go);
}

static void run_load(struct shared *sh, struct posapp_report *r)
{
    const struct options *o = sh->o;
    uint64_t n = o->requests;
    double *schedule = NULL;
    if (o->arrival.kind != POSAPP_ARRIVAL_CLOSED) {
        schedule = xcalloc(n, sizeof *schedule);
        posapp_arrival_schedule(&o->arrival, o->seed, schedule, n);
    }
    sh->schedule = schedule;
    sh->arrive_ns = xcalloc(n, sizeof *sh->arrive_ns);
    sh->done_ns = xcalloc(n, sizeof *sh->done_ns);
    struct worker *workers = xcalloc(o->threads, sizeof *workers);
    if (o->duration_s > 0) {
        struct sigaction sa = {.sa_handler = on_stop_signal};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
    }
    run_threads(sh, workers);

    uint64_t mismatches = 0;
    for (uint32_t i = 0; i < o->threads; i++) {
        r->launches += workers[i].launches;
        mismatches += workers[i].mismatches;
    }
    double *lat_ms = xcalloc(n, sizeof *lat_ms);
    int64_t first = INT64_MAX, last = INT64_MIN;
    uint64_t done = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!sh->done_ns[i])
            continue; /* --duration: never issued */
        lat_ms[done++] = (double)(sh->done_ns[i] - sh->arrive_ns[i]) / 1e6;
        first = sh->arrive_ns[i] < first ? sh->arrive_ns[i] : first;
        last = sh->done_ns[i] > last ? sh->done_ns[i] : last;
    }
    r->requests = done;
    posapp_report_latencies(r, lat_ms, done, (double)(last - first) / 1e9);
    if (o->verify) {
        r->verified = mismatches == 0;
        if (mismatches)
            fprintf(stderr, "posapp: --verify: %llu of %llu requests gave a wrong checksum\n",
                    (unsigned long long)mismatches, (unsigned long long)n);
    }
    free(lat_ms);
    free(workers);
    free(sh->done_ns);
    free(sh->arrive_ns);
    free(schedule);
}

static void run_microbench(struct shared *sh, struct posapp_report *r)
{
    uint64_t n = sh->o->microbench;
    CUstream s = NULL;
    if (!sh->o->ptds)
        CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    double *ns = xcalloc(n, sizeof *ns);
    int64_t *at = sh->o->launch_times ? xcalloc(2 * n, sizeof *at) : NULL;
    int64_t start = now_ns();
    for (uint64_t i = 0; i < n; i++) {
        int64_t t0 = now_ns();
        CUresult rc = sh->api.launch(sh->k.tiny, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL);
        int64_t t1 = now_ns();
        if (rc != CUDA_SUCCESS)
            cu_fail("cuLaunchKernel", rc, NULL);
        ns[i] = (double)(t1 - t0);
        if (at) {
            at[2 * i] = t0;
            at[2 * i + 1] = t1;
        }
    }
    CUN("cuStreamSynchronize", sh->api.stream_sync(s));
    int64_t end = now_ns();
    if (s)
        CU(cuStreamDestroy(s));
    r->launches = n;
    r->makespan_s = (double)(end - start) / 1e9;
    r->microbench = 1;
    posapp_sort(ns, n);
    r->launch_ns_p50 = posapp_percentile(ns, n, 50.0);
    r->launch_ns_p99 = posapp_percentile(ns, n, 99.0);
    r->launch_ns_mean = posapp_mean(ns, n);
    free(ns);
    if (at) {
        FILE *f = fopen(sh->o->launch_times, "w");
        if (!f)
            die(1, "cannot write --launch-times %s: %s", sh->o->launch_times, strerror(errno));
        for (uint64_t i = 0; i < n; i++)
            fprintf(f, "%lld %lld\n", (long long)at[2 * i], (long long)at[2 * i + 1]);
        if (fclose(f) != 0)
            die(1, "cannot write --launch-times %s: %s", sh->o->launch_times, strerror(errno));
        free(at);
    }
}

/* --- main ---------------------------------------------------------------------------------- */

static void model_open(const struct options *o, struct sim_model *m)
{
    char path[4096], err[512];
    if (sim_model_find(o->model, path, sizeof path) < 0)
        die(2,
            "unknown model '%s' (no %s.model in $POS_MODELS_DIR or sim/models; "
            "or give a path)",
            o->model, o->model);
    if (sim_model_load(path, o->batch, m, err, sizeof err) < 0)
        die(2, "%s", err);
    if (m->nops == 0)
        die(2, "%s: model '%s' has no op lines", path, m->name);
}

int main(int argc, char **argv)
{
    struct options o;
    parse_options(argc, argv, &o);
    struct sim_model model = {0};
    if (!o.microbench)
        model_open(&o, &model);

    struct sim_request req = {0};
    if (!o.microbench && sim_request_build(&model, &req) < 0)
        die(1, "out of memory");
    struct shared sh = {
        .o = &o, .model = o.microbench ? NULL : &model, .req = o.microbench ? NULL : &req};
    CU(cuInit(0));
    CU(cuDeviceGet(&sh.dev, 0));
    context_enter(&sh);
    stream_api_init(&sh.api, o.ptds);
    if (o.real)
        kernels_load_real(&sh.k, &o, sh.req);
    else
        kernels_load(&sh.k, sh.model, sh.req);

    struct posapp_report r = {
        .model = sh.model ? model.name : NULL,
        .batch = o.batch,
        .p50_ms = NAN,
        .p90_ms = NAN,
        .p99_ms = NAN,
        .mean_ms = NAN,
        .throughput_rps = NAN,
        .makespan_s = NAN,
        .slo_ms = o.slo_ms,
        .slo_attainment = NAN,
        .verified = -1,
    };
    if (o.microbench) {
        r.slo_ms = NAN;
        run_microbench(&sh, &r);
    } else {
        run_load(&sh, &r);
    }

    if (o.real) {
        CU(cuMemFree(sh.k.out));
        CU(cuMemFree(sh.k.buf));
        free(sh.k.real_ops);
    }
    CU(cuModuleUnload(sh.k.mod));
    free(sh.k.ops);
    CU(cuDevicePrimaryCtxRelease(sh.dev));

    char line[2048];
    if (posapp_report_json(&r, line, sizeof line) < 0)
        die(1, "report does not fit its buffer");
    printf("%s\n", line);
    if (sh.model) {
        sim_request_free(&req);
        sim_model_free(&model);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
