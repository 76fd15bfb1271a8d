/* A -lcuda program that prints with puts, for an interposer of puts to wrap
 * (tests/shim/lib_interpose.c). Prints "launches 0" last, as every shim test program does. */
#include "prog_common.h"

int main(void)
{
    PROG_CHECK(cuInit(0));
    puts("hello");
    puts("again");
    printf("launches %d\n", 0); /* not puts */
    return 0;
}
