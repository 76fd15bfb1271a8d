/* libFuzzer target: the model workload parser (sim/model_file.c), which posapp and possim
 * run on files users write. The first byte picks the batch (1..256); the rest is the file.
 * Checks that a model it accepts has operators with whole grids and non-negative costs, and
 * that a refusal says why. */
#include <assert.h>

#include "memfile.h"
#include "sim/model_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint32_t batch = 1u + data[0];
    const char *path = memfile(data + 1, size - 1);
    struct sim_model m;
    char err[512] = "";
    int rc = sim_model_load(path, batch, &m, err, sizeof err);
    if (rc == 0) {
        for (size_t i = 0; i < m.nops; i++) {
            const struct sim_model_op *op = &m.ops[i];
            assert(op->grid[0] && op->grid[1] && op->grid[2]);
            assert(op->flops >= 0 && op->bytes >= 0);
        }
    } else {
        assert(err[0]);
    }
    sim_model_free(&m);
    return 0;
}
