/* The request builder (see request.h). */
#include "sim/request.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const sim_request_reserved_names[] = {"pos_vadd",     "pos_fill", "pos_scale",
                                                  "pos_checksum", "tiny",     NULL};

static int name_taken(const char *name, const struct sim_request_op *ops, size_t count)
{
    for (size_t i = 0; sim_request_reserved_names[i]; i++)
        if (strcmp(name, sim_request_reserved_names[i]) == 0)
            return 1;
    for (size_t i = 0; i < count; i++)
        if (strcmp(name, ops[i].name) == 0)
            return 1;
    return 0;
}

/* Kernel name of op I: its model name with characters the module format does not allow
 * replaced by '_', suffixed ".I" (then ".I.k") when it is taken already. */
static void kernel_name(const struct sim_model *m, size_t i, struct sim_request_op *ops)
{
    char base[128];
    size_t len = 0;
    for (const char *p = m->ops[i].name; *p && len < sizeof base - 1; p++)
        base[len++] = (isalnum((unsigned char)*p) || strchr("_.$/:<>,-", *p)) ? *p : '_';
    base[len] = '\0';
    if (len == 0)
        snprintf(base, sizeof base, "op");
    char *name = ops[i].name;
    snprintf(name, SIM_REQUEST_NAME_MAX, "%s", base);
    for (unsigned k = 0; name_taken(name, ops, i); k++) {
        if (k == 0)
            snprintf(name, SIM_REQUEST_NAME_MAX, "%s.%zu", base, i);
        else
            snprintf(name, SIM_REQUEST_NAME_MAX, "%s.%zu.%u", base, i, k);
    }
}

int sim_request_build(const struct sim_model *m, struct sim_request *out)
{
    memset(out, 0, sizeof *out);
    struct sim_request_op *ops = calloc(m->nops ? m->nops : 1, sizeof *ops);
    if (!ops)
        return -ENOMEM;
    for (size_t i = 0; i < m->nops; i++) {
        const struct sim_model_op *mo = &m->ops[i];
        struct sim_request_op *op = &ops[i];
        kernel_name(m, i, ops);
        memcpy(op->grid, mo->grid, sizeof op->grid);
        memcpy(op->block, mo->block, sizeof op->block);
        op->smem = mo->smem;
        op->flops = mo->flops;
        op->bytes = mo->bytes;
        op->fp16 = m->fp16 != 0;
    }
    out->nops = m->nops;
    out->ops = ops;
    return 0;
}

void sim_request_free(struct sim_request *r)
{
    free(r->ops);
    memset(r, 0, sizeof *r);
}

uint64_t sim_request_name_key(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}
