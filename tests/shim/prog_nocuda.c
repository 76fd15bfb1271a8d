/* A program that loads the shim (LD_PRELOAD) but never touches CUDA: the driver must not get
 * loaded, and looking a driver symbol up must find nothing, exactly as without the shim.
 * Exits 0 when that holds. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static int driver_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        found |= strstr(line, "libcuda.so") != NULL;
    if (f)
        fclose(f);
    return found;
}

int main(void)
{
    if (dlsym(RTLD_DEFAULT, "cuInit") || dlsym(RTLD_DEFAULT, "cuLaunchKernel")) {
        fprintf(stderr, "a driver symbol was found without a driver\n");
        return 1;
    }
    if (driver_mapped()) {
        fprintf(stderr, "libcuda.so was loaded by a process that never used CUDA\n");
        return 1;
    }
    if (!dlsym(RTLD_DEFAULT, "printf")) {
        fprintf(stderr, "dlsym does not find ordinary symbols any more\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}
