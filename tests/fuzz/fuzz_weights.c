/* libFuzzer target: the weights file parser of policy learned (sched/weights.c), which posd
 * runs on the file posd.conf names. Checks that a file it accepts has finite parameters of a
 * shape nn.h allows and re-encodes to the very same bytes, and that a refusal says why. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct pos_weights *w = calloc(1, sizeof *w);
    assert(w);
    char err[256] = "";
    int rc = pos_weights_parse(data, size, w, err, sizeof err);
    if (rc == 0) {
        assert(w->nnets >= 1 && w->nnets <= POS_WEIGHTS_MAX_NETS);
        for (size_t i = 0; i < w->nnets; i++) {
            const struct nn_mlp *m = &w->nets[i].net;
            assert(m->nparams == nn_mlp_count(m->nlayers, m->dims));
            for (size_t k = 0; k < m->nparams; k++)
                assert(isfinite(m->p[k]));
        }
        void *buf;
        size_t len;
        assert(pos_weights_encode(w, &buf, &len) == 0);
        assert(len == size && memcmp(buf, data, size) == 0);
        free(buf);
    } else {
        assert(err[0]);
    }
    pos_weights_free(w);
    free(w);
    return 0;
}
