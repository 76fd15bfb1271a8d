/* An interposer as other LD_PRELOAD libraries are written: it wraps puts and finds the next
 * puts with dlsym(RTLD_NEXT), and asks RTLD_NEXT for a driver function too. Loaded after the
 * shim, RTLD_NEXT must still mean "after this library": were it resolved after the shim, it
 * would hand back this puts itself (it says so and exits 3 rather than recurse). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int puts(const char *s)
{
    static int (*next)(const char *);
    static const char *driver = "?";
    if (!next) {
        void *p = dlsym(RTLD_NEXT, "puts");
        memcpy(&next, &p, sizeof p);
        /* what the program would call: the same function either way */
        void *a = dlsym(RTLD_NEXT, "cuInit"), *b = dlsym(RTLD_DEFAULT, "cuInit");
        driver = !a ? "none" : a == b ? "same" : "other";
    }
    if (!next || next == puts) {
        static const char msg[] = "interpose: dlsym(RTLD_NEXT, \"puts\") gave this puts\n";
        ssize_t n = write(2, msg, sizeof msg - 1);
        (void)n;
        _exit(3);
    }
    printf("interposed (cuInit %s): ", driver);
    return next(s);
}
