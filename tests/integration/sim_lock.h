/* Stopping a test's process outside the simulated GPU's lock: a process stopped inside it
 * stalls every process of that virtual GPU (docs/sim.md, "stopped processes"), which is the
 * simulator's limit and not what a test of posd is about. Instrumented builds hold the lock
 * longer, so a bare SIGSTOP lands inside it far more often under ThreadSanitizer. */
#ifndef POS_TESTS_INTEGRATION_SIM_LOCK_H
#define POS_TESTS_INTEGRATION_SIM_LOCK_H

#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim/driver/drv.h"

/* The process whose thread holds the simulated GPU's lock (its robust mutex's futex word is
 * the owner's TID), 0 when none or when the segment cannot be read. */
static inline pid_t sim_lock_holder(void)
{
    const char *inst = getenv("POS_SIM_INSTANCE");
    char name[160];
    snprintf(name, sizeof name, "/pos-sim.%u.%s", (unsigned)getuid(), inst ? inst : "default");
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0)
        return 0;
    size_t len = offsetof(struct sim_shm, gpu);
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return 0;
    const struct sim_shm *shm = m;
    unsigned w = (unsigned)atomic_load((const _Atomic int *)&shm->lock.__data.__lock);
    munmap(m, len);
    pid_t tid = (pid_t)(w & 0x3fffffffu), pid = 0;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)tid);
    FILE *f = tid ? fopen(path, "r") : NULL;
    while (f && fgets(buf, sizeof buf, f))
        if (strncmp(buf, "Tgid:", 5) == 0)
            pid = (pid_t)atoi(buf + 5);
    if (f)
        fclose(f);
    return pid;
}

/* Stops PID outside the simulated GPU's lock: a process stopped inside it stalls every
 * process of that virtual GPU (docs/sim.md, "stopped processes"), posd's device probe
 * included, which is the simulator's limit and not what this test is about. */
static inline void stop_outside_sim_lock(pid_t pid)
{
    for (int tries = 0; tries < 100; tries++) {
        kill(pid, SIGSTOP);
        usleep(2000); /* the stop has landed */
        if (sim_lock_holder() != pid)
            return;
        kill(pid, SIGCONT);
        usleep(1000);
    }
}

#endif
