/* The driver's process state and its basic accessors, at the bottom of sim/driver (they call
 * nothing of it): struct drv_proc drv, the initialisation check every entry point makes, the
 * clocks (device time is (CLOCK_MONOTONIC - origin) / POS_SIM_SCALE), the debug log, and the
 * start time of a process (liveness). */
#include "sim/driver/drv.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct drv_proc drv = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .cond = PTHREAD_COND_INITIALIZER,
    .owner = -1,
};

CUresult drv_check_init(void)
{
    if (!atomic_load_explicit(&drv.initialized, memory_order_acquire) || drv.forked)
        return CUDA_ERROR_NOT_INITIALIZED;
    return CUDA_SUCCESS;
}

CUresult drv_check_init_out(const void *out)
{
    CUresult rc = drv_check_init();
    return rc != CUDA_SUCCESS ? rc : out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

int64_t drv_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t drv_device_now(void)
{
    return (int64_t)((double)(drv_mono_ns() - drv.origin_ns) / drv.scale);
}

int64_t drv_wall_of_device(int64_t dev_ns)
{
    if (dev_ns == INT64_MAX)
        return INT64_MAX;
    return drv.origin_ns + (int64_t)((double)dev_ns * drv.scale);
}

void drv_debug(const char *fmt, ...)
{
    static int enabled = -1;
    if (enabled < 0) {
        const char *v = getenv("POS_SIM_DEBUG");
        enabled = v && *v && strcmp(v, "0") != 0;
    }
    if (!enabled)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "pos-sim[%d]: %s\n", (int)getpid(), buf);
}

/* Start time of PID in clock ticks since boot (field 22 of /proc/PID/stat), 0 if gone. A zombie
 * (state Z or X) is gone: it has exited, and its parent has only not reaped it yet; a real
 * driver has its memory back at the exit, when its files close. */
uint64_t drv_proc_start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X')
        return 0;
    /* after ") " come fields 3.. ; starttime is field 22 */
    int field = 2;
    for (; *p && field < 22; p++)
        if (*p == ' ')
            field++;
    return strtoull(p, NULL, 10);
}

void drv_path_expand(const char *pattern, char *out, size_t len)
{
    size_t k = 0;
    for (const char *p = pattern; *p && k + 16 < len; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            k += (size_t)snprintf(out + k, len - k, "%d", (int)getpid());
            p++;
        } else {
            out[k++] = *p;
        }
    }
    out[k] = '\0';
}
