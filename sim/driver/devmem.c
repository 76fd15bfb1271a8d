/* Device memory's common ground: the registry of every allocation in the process's address
 * space, the arena (one memfd per process) that backs device memory so that other processes
 * can map it, the descriptions one process hands another, and the charge of device memory
 * against the shared device's capacity and the process's MPS limit. */
#include "sim/driver/drv.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the allocation registry ------------------------------------------------------------ */

static pthread_rwlock_t reg_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct drv_region *regions;
static size_t nregions, capregions;

/* Index of the first region with base > P (caller holds reg_lock). */
static size_t upper_bound(uintptr_t p)
{
    size_t lo = 0, hi = nregions;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (regions[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static const struct drv_region *find_region(uintptr_t p)
{
    size_t i = upper_bound(p);
    if (i == 0)
        return NULL;
    const struct drv_region *r = &regions[i - 1];
    return p < r->base + r->size ? r : NULL;
}

int drv_mem_lookup(const void *ptr, size_t n)
{
    uintptr_t p = (uintptr_t)ptr;
    int kind = 0;
    pthread_rwlock_rdlock(&reg_lock);
    const struct drv_region *r = find_region(p);
    if (r && n <= r->size - (p - r->base)) {
        kind = r->kind;
    } else if (r && r->how == ALLOC_VMM) {
        /* VMM mappings side by side are one range to the device, as a program that maps a
         * growing segment piece by piece (PyTorch's expandable segments) uses them */
        size_t i = (size_t)(r - regions), left = n - (r->size - (p - r->base));
        while (++i < nregions && regions[i].how == ALLOC_VMM &&
               regions[i].base == regions[i - 1].base + regions[i - 1].size &&
               left > regions[i].size)
            left -= regions[i].size;
        if (i < nregions && regions[i].how == ALLOC_VMM &&
            regions[i].base == regions[i - 1].base + regions[i - 1].size && left <= regions[i].size)
            kind = MEM_DEVICE;
    }
    pthread_rwlock_unlock(&reg_lock);
    return kind;
}

int drv_region_find(uintptr_t p, struct drv_region *out)
{
    pthread_rwlock_rdlock(&reg_lock);
    const struct drv_region *r = find_region(p);
    if (r)
        *out = *r;
    pthread_rwlock_unlock(&reg_lock);
    return r != NULL;
}

int drv_region_add(const struct drv_region *r)
{
    pthread_rwlock_wrlock(&reg_lock);
    size_t i = upper_bound(r->base);
    int overlap = (i > 0 && regions[i - 1].base + regions[i - 1].size > r->base) ||
                  (i < nregions && regions[i].base < r->base + r->size);
    if (overlap) {
        pthread_rwlock_unlock(&reg_lock);
        return -EEXIST;
    }
    if (nregions == capregions) {
        size_t cap = capregions ? capregions * 2 : 64;
        struct drv_region *nr = realloc(regions, cap * sizeof *nr);
        if (!nr) {
            pthread_rwlock_unlock(&reg_lock);
            return -ENOMEM;
        }
        regions = nr;
        capregions = cap;
    }
    memmove(&regions[i + 1], &regions[i], (nregions - i) * sizeof *regions);
    regions[i] = *r;
    nregions++;
    pthread_rwlock_unlock(&reg_lock);
    return 0;
}

int drv_region_take(uintptr_t base, int kind, int how, struct drv_region *out)
{
    int found = 0;
    pthread_rwlock_wrlock(&reg_lock);
    size_t i = upper_bound(base);
    if (i > 0 && regions[i - 1].base == base && regions[i - 1].kind == kind &&
        (!how || regions[i - 1].how == how)) {
        if (out)
            *out = regions[i - 1];
        memmove(&regions[i - 1], &regions[i], (nregions - i) * sizeof *regions);
        nregions--;
        found = 1;
    }
    pthread_rwlock_unlock(&reg_lock);
    return found;
}

size_t drv_region_take_all(int how, const void *obj, struct drv_region **out)
{
    size_t n = 0;
    *out = NULL;
    pthread_rwlock_wrlock(&reg_lock);
    for (size_t i = 0; i < nregions; i++)
        n += regions[i].kind == MEM_DEVICE && regions[i].how == how && regions[i].obj == obj;
    struct drv_region *taken = n ? malloc(n * sizeof *taken) : NULL;
    if (taken) {
        size_t k = 0, j = 0;
        for (size_t i = 0; i < nregions; i++) {
            if (regions[i].kind == MEM_DEVICE && regions[i].how == how && regions[i].obj == obj)
                taken[k++] = regions[i];
            else
                regions[j++] = regions[i];
        }
        nregions = j;
    } else {
        n = 0;
    }
    pthread_rwlock_unlock(&reg_lock);
    *out = taken;
    return n;
}

/* ---- the charge ------------------------------------------------------------------------- */

uint64_t drv_device_mem_used(void)
{
    uint64_t used = 0;
    for (int i = 0; i < SIM_MAX_OWNERS; i++)
        if (drv.g->owners[i].used)
            used += drv.g->owners[i].mem_used;
    return used;
}

/* Under the device lock: whether BYTES more fit, on the device and within the MPS limit. */
static int fits(uint64_t bytes, int what, int *by_limit)
{
    uint64_t cap = drv.g->p.mem_bytes, used = drv_device_mem_used();
    *by_limit = 0;
    if (what == CHARGE_ALLOC && drv.mem_limit &&
        (bytes > drv.mem_limit || drv.mem_alloc > drv.mem_limit - bytes)) {
        *by_limit = 1;
        return 0;
    }
    return bytes <= cap && used <= cap - bytes;
}

CUresult drv_mem_charge(uint64_t bytes, int what)
{
    int by_limit;
    drv_lock();
    int ok = fits(bytes, what, &by_limit);
    if (!ok && !by_limit) {
        /* a process that died holding memory must not make a live one fail */
        drv_liveness_scan(drv_mono_ns());
        ok = fits(bytes, what, &by_limit);
    }
    if (ok) {
        drv.g->owners[drv.owner].mem_used += bytes;
        if (what == CHARGE_ALLOC)
            drv.mem_alloc += bytes;
    }
    drv_unlock();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

void drv_mem_uncharge(uint64_t bytes, int what)
{
    drv_lock();
    uint64_t *held = &drv.g->owners[drv.owner].mem_used;
    *held -= bytes < *held ? bytes : *held;
    if (what == CHARGE_ALLOC)
        drv.mem_alloc -= bytes < drv.mem_alloc ? bytes : drv.mem_alloc;
    drv_unlock();
}

/* One size with an optional unit (K, M, G, T: powers of 1024, an optional trailing B) from
 * *P; advances *P. Returns 0, or -1 when it is not one. */
static int parse_size(const char **p, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(*p, &end, 10);
    if (errno || end == *p || **p == '-')
        return -1;
    int shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: break;
    }
    if (shift) {
        end++;
        if (toupper((unsigned char)*end) == 'B')
            end++;
    }
    if (shift && v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    *p = end;
    return 0;
}

/* CUDA_MPS_PINNED_DEVICE_MEM_LIMIT as NVIDIA documents it: "0=1G,1=512M" (device ordinal =
 * size, comma-separated), or one size for every device. The limit of device 0, or 0 when V
 * sets none or is malformed. */
static uint64_t parse_pinned_limit(const char *v)
{
    const char *p = v;
    uint64_t limit = 0;
    if (isdigit((unsigned char)*p) && !strchr(v, '=')) {
        if (parse_size(&p, &limit) < 0 || *p)
            return 0;
        return limit;
    }
    while (*p) {
        char *end;
        errno = 0;
        long dev = strtol(p, &end, 10);
        if (errno || end == p || *end != '=' || dev < 0)
            return 0;
        p = end + 1;
        uint64_t size;
        if (parse_size(&p, &size) < 0 || (*p && *p != ','))
            return 0;
        if (dev == 0)
            limit = size;
        if (*p == ',')
            p++;
    }
    return limit;
}

void drv_mem_limit_read(void)
{
    const char *v = getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
    if (drv.g->p.mode != SIM_MODE_MPS || !v || !*v)
        return;
    uint64_t limit = parse_pinned_limit(v);
    if (!limit) {
        drv_debug("ignoring CUDA_MPS_PINNED_DEVICE_MEM_LIMIT='%s' (want '0=1G,1=512M' or '1G')", v);
        return;
    }
    drv_lock();
    drv.mem_limit = limit;
    drv_unlock();
    drv_debug("device memory limited to %llu bytes (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%s)",
              (unsigned long long)limit, v);
}

/* ---- the arena -------------------------------------------------------------------------- */

/* Offsets are handed out upwards and never reused (a freed range's pages are punched out, so
 * its memory is gone however long a peer keeps it mapped): 2^50 bytes of them is more than
 * any process allocates in its life. */
#define ARENA_SIZE (UINT64_C(1) << 50)

static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
static int arena_fd = -1;
static uint64_t arena_next, arena_ino;

static size_t page_size(void)
{
    static size_t ps;
    if (!ps)
        ps = (size_t)sysconf(_SC_PAGESIZE);
    return ps;
}

/* The arena's descriptor, made on first use (caller holds arena_lock); -1 if it cannot be. */
static int arena_get(void)
{
    if (arena_fd >= 0)
        return arena_fd;
    int fd = memfd_create("pos-sim-device-memory", MFD_CLOEXEC);
    struct stat st;
    if (fd < 0 || ftruncate(fd, (off_t)ARENA_SIZE) < 0 || fstat(fd, &st) < 0) {
        if (fd >= 0)
            close(fd);
        drv_debug("cannot make the device-memory arena: %s", strerror(errno));
        return -1;
    }
    arena_fd = fd;
    arena_ino = (uint64_t)st.st_ino;
    return fd;
}

void *drv_arena_map(int fd, uint64_t off, size_t size, void *at, int prot)
{
    if (fd < 0) {
        pthread_mutex_lock(&arena_lock);
        fd = arena_get();
        pthread_mutex_unlock(&arena_lock);
        if (fd < 0)
            return NULL;
    }
    void *p = mmap(at, size, prot, MAP_SHARED | MAP_NORESERVE | (at ? MAP_FIXED : 0), fd,
                   (off_t)off);
    return p == MAP_FAILED ? NULL : p;
}

int drv_arena_take(size_t size, uint64_t *off)
{
    size_t ps = page_size();
    if (size > ARENA_SIZE)
        return -1;
    uint64_t span = ((uint64_t)size + ps - 1) / ps * ps;
    pthread_mutex_lock(&arena_lock);
    int fd = arena_get();
    int room = fd >= 0 && arena_next <= ARENA_SIZE - span;
    *off = arena_next;
    if (room)
        arena_next += span;
    pthread_mutex_unlock(&arena_lock);
    return room ? 0 : -1;
}

CUresult drv_arena_map_new(size_t size, struct drv_region *r)
{
    uint64_t off;
    if (drv_arena_take(size, &off) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = drv_arena_map(-1, off, size, NULL, PROT_READ | PROT_WRITE);
    if (!p) {
        drv_arena_release(off, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->base = (uintptr_t)p;
    r->size = size;
    r->off = off;
    return CUDA_SUCCESS;
}

CUresult drv_devmem_new(size_t size, int how, void *obj, struct drv_region *r)
{
    *r = (struct drv_region){.kind = MEM_DEVICE, .how = how, .obj = obj};
    CUresult rc = drv_arena_map_new(size, r);
    if (rc == CUDA_SUCCESS && drv_region_add(r) < 0) {
        drv_devmem_drop(r);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return rc;
}

void drv_devmem_drop(const struct drv_region *r)
{
    munmap((void *)r->base, r->size);
    drv_arena_release(r->off, r->size);
}

void drv_arena_release(uint64_t off, size_t size)
{
    size_t ps = page_size();
    pthread_mutex_lock(&arena_lock);
    if (arena_fd >= 0)
        fallocate(arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
                  (off_t)((size + ps - 1) / ps * ps));
    pthread_mutex_unlock(&arena_lock);
}

/* ---- what processes hand each other ----------------------------------------------------- */

int drv_share_fill(struct drv_share *s, int kind, uint64_t off, uint64_t size, uint64_t id)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&arena_lock);
    int fd = arena_get();
    uint64_t ino = arena_ino;
    pthread_mutex_unlock(&arena_lock);
    if (fd < 0)
        return -1;
    *s = (struct drv_share){DRV_SHARE_MAGIC, (uint32_t)kind, (int32_t)getpid(), fd,
                            drv_proc_start_time(getpid()), ino, off, size, id};
    return 0;
}

int drv_share_open(const struct drv_share *s, int kind)
{
    if (s->magic != DRV_SHARE_MAGIC || s->kind != (uint32_t)kind || s->pid <= 0 || s->fd < 0)
        return -1;
    if (s->pid == getpid())
        return -2;
    if (drv_proc_start_time(s->pid) != s->start)
        return -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)s->pid, (int)s->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_ino != s->ino ||
        drv_proc_start_time(s->pid) != s->start) {
        close(fd);
        return -1;
    }
    return fd;
}

int drv_share_fd_make(const struct drv_share *s, const void *extra, size_t n)
{
    int fd = memfd_create("pos-sim-shareable-handle", 0);
    if (fd < 0)
        return -1;
    if (pwrite(fd, s, sizeof *s, 0) != (ssize_t)sizeof *s ||
        (n && pwrite(fd, extra, n, sizeof *s) != (ssize_t)n)) {
        close(fd);
        return -1;
    }
    return fd;
}

CUresult drv_share_export(const struct drv_share *s, const void *extra, size_t n, void *fd_out)
{
    int fd = drv_share_fd_make(s, extra, n);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)fd_out = fd;
    return CUDA_SUCCESS;
}

CUresult drv_share_call_check(const void *out, CUmemAllocationHandleType type,
                              unsigned long long flags)
{
    CUresult rc = drv_check_init_out(out);
    if (rc == CUDA_SUCCESS && (flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        rc = CUDA_ERROR_INVALID_VALUE;
    return rc;
}

int drv_share_fd_read(int fd, struct drv_share *s, void *extra, size_t n)
{
    if (fd < 0 || pread(fd, s, sizeof *s, 0) != (ssize_t)sizeof *s ||
        s->magic != DRV_SHARE_MAGIC || (n && pread(fd, extra, n, sizeof *s) != (ssize_t)n))
        return -1;
    return 0;
}

CUresult drv_mem_props_check(CUmemAllocationType type, unsigned handle_types,
                             const CUmemLocation *location, int *kind)
{
    if (type == CU_MEM_ALLOCATION_TYPE_MANAGED)
        return CUDA_ERROR_NOT_SUPPORTED; /* managed pools and VMM: the device has no support */
    if (type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (handle_types & CU_MEM_HANDLE_TYPE_FABRIC)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (handle_types & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE; /* Win32 handles on Linux */
    *kind = drv_location_kind(location);
    return *kind ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

int drv_location_kind(const CUmemLocation *l)
{
    if (!l)
        return 0;
    switch (l->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        return l->id == 0 ? 1 : 0;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return 2;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA: {
        char path[64];
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d", l->id);
        return l->id >= 0 && (l->id == 0 || access(path, F_OK) == 0) ? 2 : 0;
    }
    default:
        return 0;
    }
}

/* For tests and the shim's checks: the device memory every process holds together (*USED,
 * unclamped, so that over-commitment would show) and this process holds (*MINE). */
API CUresult pos_sim_mem_used(CUdevice dev, unsigned long long *used, unsigned long long *mine)
{
    CUresult rc = drv_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!used || !mine)
        return CUDA_ERROR_INVALID_VALUE;
    drv_lock();
    *used = drv_device_mem_used();
    *mine = drv.g->owners[drv.owner].mem_used;
    drv_unlock();
    return CUDA_SUCCESS;
}
