/* The answer to a posctl request (POS_MSG_CONTROL_REPLY): given at once by control.c, or when
 * a profile save ends by saver.c, which control.c calls. Below both, so that the save's end
 * calls down to answer. */
#include <stdio.h>
#include <string.h>

#include "sched/clients.h"
#include "sched/control_reply.h"

int posd_control_answer(struct posd *d, struct posd_client *c, const char *op, int status,
                        const char *msg)
{
    struct pos_control_reply r;
    memset(&r, 0, sizeof r);
    r.status = status;
    snprintf(r.message, sizeof r.message, "%s", msg);
    if (op) /* a change: logged with who asked */
        posd_log(status ? POSD_LOG_WARN : POSD_LOG_INFO, "control %s by pid %d uid %u: %s", op,
                 (int)c->ident.pid, (unsigned)c->ident.uid, r.message);
    r.drained = d->drained;
    return posd_client_send(c, POS_MSG_CONTROL_REPLY, &r, sizeof r) < 0 ? -1 : 0;
}
