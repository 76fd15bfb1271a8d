/* How often a stopped process stalls the simulated GPU for everyone (docs/sim.md, "A process
 * stopped inside the device lock"): CLIENTS processes share one virtual GPU, each launching a
 * short kernel and synchronising in a loop and counting its loops in shared memory. STOPS
 * times, after a random 2-20 ms, a random client is SIGSTOPped for WINDOW ms while the others'
 * counters are sampled every 0.5 ms, then SIGCONTed; a window in which no other client
 * completed a loop for STALL ms or more is a stall. Control windows, alternating with the
 * stops, watch the same way with nobody stopped: what the machine's own scheduling gaps
 * produce. For each stall it also reads which thread held the device lock (the robust
 * mutex's futex word holds the owner's TID): the stopped client's main thread (a launch or
 * synchronisation), its driver agent thread, or someone else. Prints one JSON line.
 *
 *   simstop [-n CLIENTS] [-k STOPS] [-w WINDOW_MS] [-x STALL_MS] [-d KERNEL_US] [-s SEED]
 */
#include "sim/driver/drv.h" /* struct sim_shm: where the device lock is */
#include "bench/sim_kernel.h"

#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLIENTS 16

struct shared {
    _Atomic int quit;
    _Atomic int ready;
    _Atomic unsigned long long loops[MAX_CLIENTS];
};

static struct shared *sh;
static const struct sim_shm *gpu; /* the virtual GPU's segment, read-only */

/* Maps the virtual GPU's segment read-only (named as the driver names it). */
static void map_gpu(void)
{
    char name[160];
    const char *inst = getenv("POS_SIM_INSTANCE");
    snprintf(name, sizeof name, "/pos-sim.%u.%s", (unsigned)getuid(),
             inst && *inst ? inst : "default");
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0)
        return;
    void *p = mmap(NULL, sizeof *gpu, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    gpu = p == MAP_FAILED ? NULL : p;
}

/* The TID holding the device lock, 0 if none or unknown. */
static pid_t lock_holder(void)
{
    if (!gpu)
        return 0;
    return (pid_t)((unsigned)atomic_load((_Atomic int *)&gpu->lock.__data.__lock) & 0x3fffffffu);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(double ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1e3),
                          .tv_nsec = (long)((ms - (time_t)(ms / 1e3) * 1e3) * 1e6)};
    nanosleep(&ts, NULL);
}

#define CK(x)                                                                                      \
    do {                                                                                           \
        CUresult rc_ = (x);                                                                        \
        if (rc_ != CUDA_SUCCESS) {                                                                 \
            fprintf(stderr, "simstop: %s failed: %d\n", #x, (int)rc_);                             \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

static void client(int id, double kernel_us)
{
    CUcontext ctx;
    CUmodule m;
    CUfunction k;
    CK(cuInit(0));
    CK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CK(cuCtxSetCurrent(ctx));
    CK(bench_kernel_of_us(kernel_us, &m, &k));
    atomic_fetch_add(&sh->ready, 1);
    while (!atomic_load(&sh->quit)) {
        for (int i = 0; i < 4; i++)
            CK(cuLaunchKernel(k, 1024, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL));
        CK(cuCtxSynchronize());
        atomic_fetch_add(&sh->loops[id], 1);
    }
    exit(0); /* the driver leaves the virtual GPU at exit; the last one out removes it */
}

/* Watches the clients other than SKIP (N: all of them) for WINDOW ms; returns the longest time in
 * ms in which none of them completed a loop. */
static double watch(int n, int skip, double window)
{
    unsigned long long last[MAX_CLIENTS];
    for (int i = 0; i < n; i++)
        last[i] = atomic_load(&sh->loops[i]);
    double t0 = now_ms(), moved = t0, worst = 0;
    for (double t = t0; t - t0 < window; t = now_ms()) {
        for (int i = 0; i < n; i++) {
            unsigned long long v = atomic_load(&sh->loops[i]);
            if (i != skip && v != last[i])
                moved = t;
            last[i] = v;
        }
        if (t - moved > worst)
            worst = t - moved;
        sleep_ms(0.5);
    }
    return worst;
}

/* Waits until every client moved again (at most 2 s): the next trial starts from a running
 * device. */
static void settle(int n)
{
    unsigned long long seen[MAX_CLIENTS];
    for (int i = 0; i < n; i++)
        seen[i] = atomic_load(&sh->loops[i]);
    double t0 = now_ms();
    for (int all = 0; !all && now_ms() - t0 < 2000;) {
        sleep_ms(1);
        all = 1;
        for (int i = 0; i < n; i++)
            all &= atomic_load(&sh->loops[i]) != seen[i];
    }
}

int main(int argc, char **argv)
{
    int n = 4, stops = 200, opt;
    double window = 150, stall = 100, kernel_us = 100;
    unsigned seed = (unsigned)time(NULL);
    while ((opt = getopt(argc, argv, "n:k:w:x:d:s:")) != -1) {
        switch (opt) {
        case 'n':
            n = atoi(optarg);
            break;
        case 'k':
            stops = atoi(optarg);
            break;
        case 'w':
            window = atof(optarg);
            break;
        case 'x':
            stall = atof(optarg);
            break;
        case 'd':
            kernel_us = atof(optarg);
            break;
        case 's':
            seed = (unsigned)strtoul(optarg, NULL, 10);
            break;
        default:
            fprintf(stderr, "usage: simstop [-n CLIENTS] [-k STOPS] [-w WINDOW_MS] [-x STALL_MS] "
                            "[-d KERNEL_US] [-s SEED]\n");
            return 2;
        }
    }
    if (n < 2 || n > MAX_CLIENTS || stops < 1 || stall >= window) {
        fprintf(stderr, "simstop: want 2..%d clients, STOPS >= 1, STALL < WINDOW\n", MAX_CLIENTS);
        return 2;
    }
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    pid_t pids[MAX_CLIENTS];
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            client(i, kernel_us);
    }
    for (double t0 = now_ms(); atomic_load(&sh->ready) < n && now_ms() - t0 < 10000;)
        sleep_ms(5);
    if (atomic_load(&sh->ready) < n) {
        fprintf(stderr, "simstop: the clients did not start\n");
        atomic_store(&sh->quit, 1);
        return 1;
    }
    settle(n);
    map_gpu();
    srand(seed);
    int stalls = 0, control_stalls = 0, held_main = 0, held_agent = 0, held_other = 0;
    double worst = 0, control_worst = 0;
    for (int k = 0; k < stops; k++) {
        sleep_ms(2 + rand() % 19);
        int victim = rand() % n;
        kill(pids[victim], SIGSTOP);
        double gap = watch(n, victim, window);
        pid_t holder = lock_holder();
        kill(pids[victim], SIGCONT);
        if (gap >= stall) {
            char task[64];
            snprintf(task, sizeof task, "/proc/%d/task/%d", (int)pids[victim], (int)holder);
            if (holder == pids[victim])
                held_main++;
            else if (holder && access(task, F_OK) == 0)
                held_agent++;
            else
                held_other++;
        }
        stalls += gap >= stall;
        worst = gap > worst ? gap : worst;
        settle(n);
        double cgap = watch(n, n, window);
        control_stalls += cgap >= stall;
        control_worst = cgap > control_worst ? cgap : control_worst;
    }
    atomic_store(&sh->quit, 1);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        int st;
        kill(pids[i], SIGCONT);
        waitpid(pids[i], &st, 0);
        failed += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    printf("{\"clients\":%d,\"kernel_us\":%g,\"window_ms\":%g,\"stall_ms\":%g,\"stops\":%d,"
           "\"stalls\":%d,\"stall_rate\":%.4f,\"worst_gap_ms\":%.1f,\"control_windows\":%d,"
           "\"control_stalls\":%d,\"control_worst_gap_ms\":%.1f,\"held_by_main\":%d,"
           "\"held_by_agent\":%d,\"held_by_other\":%d,\"client_failures\":%d,\"seed\":%u}\n",
           n, kernel_us, window, stall, stops, stalls, (double)stalls / stops, worst, stops,
           control_stalls, control_worst, held_main, held_agent, held_other, failed, seed);
    return failed ? 1 : 0;
}
