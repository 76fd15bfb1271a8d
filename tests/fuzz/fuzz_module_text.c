/* libFuzzer target: the simulated driver's text-module parser (sim/module_text.c), as
 * cuModuleLoadData hands it any bytes a program loads. Checks that a parse that succeeds
 * gives declarations whose costs can be computed, and that a failure says why. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "sim/module_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1); /* the driver passes modules as they come, NUL or not */
    memcpy(text, data, size);
    text[size] = '\0';
    (void)sim_module_is_text(text, size);
    struct sim_kernel_decl *decls = NULL;
    size_t n = 0;
    char err[256] = "";
    int rc = sim_module_parse(text, size, &decls, &n, err, sizeof err);
    if (rc == 0) {
        for (size_t i = 0; i < n; i++) {
            double flops, bytes;
            sim_kernel_cost(&decls[i], 1 + size % 1000, 256, size, size, 1024, &flops, &bytes);
            assert(flops >= 0 && bytes >= 0);
        }
    } else {
        assert(err[0]);
    }
    free(decls);
    free(text);
    return 0;
}
