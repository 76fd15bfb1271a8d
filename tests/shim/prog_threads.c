/* A -lcuda program that churns threads as thread pools and data loaders do: THREADS short-lived
 * threads, at most ALIVE at once, each launching PER kernels into the legacy default stream and
 * synchronising before it exits. Far more threads than the shim has rings ever launch, so
 * every launch is in the trace only if a ring is reused once its thread has gone. With LATE 1,
 * each thread also launches (and synchronises) once more from a thread-exit destructor of its
 * own, which runs after the shim's: as a library's cleanup at thread exit may.
 * Usage: prog_threads [THREADS [ALIVE [PER [LATE]]]] (default 2000 64 3 0). */
#include <pthread.h>
#include <stdatomic.h>

#include "prog_common.h"

#define MAX_ALIVE 1024

static CUcontext ctx;
static CUfunction tiny;
static int per_thread = 3;
static int late;
static pthread_key_t late_key; /* created after the shim's: its destructor runs after */
static atomic_long launched;

static void launch_and_sync(int n)
{
    for (int i = 0; i < n; i++) {
        PROG_CHECK(cuLaunchKernel(tiny, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
        atomic_fetch_add(&launched, 1);
    }
    PROG_CHECK(cuStreamSynchronize(NULL));
}

static void late_launch(void *arg)
{
    (void)arg;
    launch_and_sync(1);
}

static void *worker(void *arg)
{
    (void)arg;
    PROG_CHECK(cuCtxSetCurrent(ctx));
    launch_and_sync(per_thread);
    if (late && pthread_setspecific(late_key, &late) != 0)
        exit(1);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2000;
    int alive = argc > 2 ? atoi(argv[2]) : 64;
    per_thread = argc > 3 ? atoi(argv[3]) : 3;
    late = argc > 4 ? atoi(argv[4]) : 0;
    if (threads < 0 || alive < 1 || alive > MAX_ALIVE || per_thread < 0) {
        fprintf(stderr, "usage: prog_threads [THREADS [ALIVE(1..%d) [PER [LATE]]]]\n", MAX_ALIVE);
        return 2;
    }
    if (late && pthread_key_create(&late_key, late_launch) != 0)
        return 1;
    tiny = prog_kernel(prog_start(&ctx), "tiny");
    /* a window of ALIVE threads: thread i reuses the place of thread i - ALIVE, joined first */
    static pthread_t window[MAX_ALIVE];
    for (int i = 0; i < threads; i++) {
        if (i >= alive && pthread_join(window[i % alive], NULL) != 0)
            return 1;
        int rc = pthread_create(&window[i % alive], NULL, worker, NULL);
        if (rc != 0) {
            fprintf(stderr, "pthread_create: %s\n", strerror(rc));
            return 1;
        }
    }
    for (int i = threads > alive ? threads - alive : 0; i < threads; i++)
        if (pthread_join(window[i % alive], NULL) != 0)
            return 1;
    printf("launches %ld\n", atomic_load(&launched));
    return 0;
}
