/* posctl's requests (POS_MSG_CONTROL, include/pos/proto.h): one handler per operation in a
 * table. Changing posd needs root or the posd group (the peer's credentials as the kernel
 * recorded them at connect); every change is logged with who asked. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sched/arm.h"
#include "sched/clients.h"
#include "sched/control.h"
#include "sched/control_reply.h"
#include "sched/engine.h"
#include "sched/files.h"
#include "sched/ini_lines.h"
#include "sched/mem_ledger.h"
#include "sched/profile_store.h"
#include "sched/reload.h"
#include "sched/saver.h"

/* Each handler does its operation and writes one line for the person who asked into MSG.
 * Returns 0 or a negative errno. */
typedef int (*control_fn)(struct posd *d, const struct posd_client *asker,
                          const struct pos_control *q, char *msg, size_t cap);

static struct posd_client *client_by_id(struct posd *d, uint32_t id)
{
    for (int i = 0; i < POSD_MAX_CLIENTS; i++) {
        struct posd_client *c = &d->clients[i];
        if (c->used && c->registered && c->id == id)
            return c;
    }
    return NULL;
}

static int control_status(struct posd *d, const struct posd_client *asker, const struct pos_control *q,
                          char *msg, size_t cap)
{
    snprintf(msg, cap, "policy %s", d->policy->name);
    return 0;
}

static void list_classes(const struct posd *d, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < d->cfg.nclasses && len < cap; i++)
        len +=
            (size_t)snprintf(out + len, cap - len, "%s%s", i ? ", " : "", d->cfg.classes[i].name);
}

static int control_set(struct posd *d, const struct posd_client *asker, const struct pos_control *q,
                          char *msg, size_t cap)
{
    struct posd_client *c = client_by_id(d, q->client_id);
    if (!c) {
        snprintf(msg, cap, "no client %u (posctl list shows the clients)", q->client_id);
        return -ESRCH;
    }
    if (!(q->flags & (POS_CTL_HAS_CLASS | POS_CTL_HAS_PRIORITY | POS_CTL_HAS_MEM_LIMIT))) {
        snprintf(msg, cap, "nothing to set: give a class, a priority, a memory limit or more");
        return -EINVAL;
    }
    struct sched_mem_limit mem = c->pol.mem_limit;
    if (q->flags & POS_CTL_HAS_MEM_LIMIT) {
        if (q->mem_limit_ppm > POS_MEM_PPM_WHOLE) {
            snprintf(msg, cap,
                     "bad memory limit: a share of %u millionths of the device (at most "
                     "%u)",
                     q->mem_limit_ppm, POS_MEM_PPM_WHOLE);
            return -EINVAL;
        }
        mem = q->mem_limit_ppm
                  ? (struct sched_mem_limit){.bytes = POS_MEM_UNLIMITED, .ppm = q->mem_limit_ppm}
                  : (struct sched_mem_limit){.bytes = q->mem_limit, .ppm = 0};
    }
    struct posd_client_policy pol = c->pol;
    if (q->flags & POS_CTL_HAS_CLASS) {
        char name[POS_CLASS_NAME_MAX + 1];
        snprintf(name, sizeof name, "%.*s", POS_CLASS_NAME_MAX, q->class_name);
        const struct posd_class *cls = memchr(q->class_name, '\0', sizeof q->class_name)
                                           ? posd_config_class(&d->cfg, name)
                                           : NULL;
        if (!cls) {
            char classes[160];
            list_classes(d, classes, sizeof classes);
            snprintf(msg, cap, "no class '%.16s' in the configuration (classes: %s)", name,
                     classes);
            return -EINVAL;
        }
        snprintf(pol.class_name, sizeof pol.class_name, "%s", cls->name);
        pol.priority = cls->priority;
        pol.max_inflight = cls->max_inflight;
        pol.min_share = cls->min_share;
        pol.cpu = cls->cpu ? cls->cpu - 1 : d->cfg.cpu;
    }
    if (q->flags & POS_CTL_HAS_PRIORITY)
        pol.priority = q->priority;
    pol.mem_limit = mem;
    c->pol = pol;
    c->overridden = 1;
    if (!sched_mem_limit_equal(c->mem.limit, mem))
        posd_mem_limit_publish(c, mem);
    posd_engine_reconf(d, c);
    posd_arm_tick(d, posd_clients_tick(d));
    /* the memory limit when it was asked for or there is one, and whether use is above it */
    char limit[24], said[40] = "", over[POSD_MEM_OVER_MAX];
    if ((q->flags & POS_CTL_HAS_MEM_LIMIT) ||
        !sched_mem_limit_equal(c->mem.limit, SCHED_MEM_NO_LIMIT)) {
        sched_mem_limit_format(c->mem.limit, limit, sizeof limit);
        snprintf(said, sizeof said, "; mem_limit %s", limit);
    }
    posd_mem_over(c, over, sizeof over);
    snprintf(msg, cap,
             "client %u (pid %d, %s): class %s priority %d until it exits or the configuration "
             "reloads%s%s",
             c->id, (int)c->ident.pid, c->ident.app, c->pol.class_name, c->pol.priority, said,
             over);
    return 0;
}

static int control_reload(struct posd *d, const struct posd_client *asker, const struct pos_control *q,
                          char *msg, size_t cap)
{
    return posd_reload(d, msg, cap);
}

static int set_drained(struct posd *d, const struct pos_control *q, int on, char *msg, size_t cap)
{
    if (q->device < 0 || q->device >= POS_CTL_MAX_DEVICES) {
        snprintf(msg, cap, "bad device %d (want 0 to %d)", q->device, POS_CTL_MAX_DEVICES - 1);
        return -EINVAL;
    }
    uint64_t bit = 1ull << q->device;
    d->drained = on ? d->drained | bit : d->drained & ~bit;
    sched_core_set_drained(d->core, d->drained);
    posd_arm_tick(d, posd_clients_tick(d));
    if (on)
        snprintf(msg, cap, "device %d drained: its clients get no new work until posctl undrain %d",
                 q->device, q->device);
    else
        snprintf(msg, cap, "device %d undrained: its clients are scheduled again", q->device);
    return 0;
}

static int control_drain(struct posd *d, const struct posd_client *asker, const struct pos_control *q,
                          char *msg, size_t cap)
{
    return set_drained(d, q, 1, msg, cap);
}

static int control_undrain(struct posd *d, const struct posd_client *asker, const struct pos_control *q,
                          char *msg, size_t cap)
{
    return set_drained(d, q, 0, msg, cap);
}

/* ---- kernel profiles ---------------------------------------------------------------------- */

static int control_profiles_save(struct posd *d, const struct posd_client *asker,
                                 const struct pos_control *q, char *msg, size_t cap)
{
    return posd_saver_request(d, (struct posd_client *)asker, msg, cap);
}

static int control_profiles_reset(struct posd *d, const struct posd_client *asker,
                                  const struct pos_control *q, char *msg, size_t cap)
{
    posd_saver_abort(d); /* a save running renames no older table over the removal */
    return posd_profiles_reset(d, msg, cap);
}

static int control_profiles_load(struct posd *d, const struct posd_client *asker,
                                 const struct pos_control *q, char *msg, size_t cap)
{
    if (!memchr(q->path, '\0', sizeof q->path) || q->path[0] != '/') {
        snprintf(msg, cap, "the profile file must be an absolute path");
        return -EINVAL;
    }
    char path[4 * sizeof q->path];
    ini_escape(path, sizeof path, q->path); /* the asker's bytes, printable */
    /* posd reads it as root: for the asker's uid and gid, with no symbolic link on the way and
     * only a regular file, checked before it is opened to read (files.h) */
    int e = 0;
    FILE *f = posd_open_as_user(q->path, path, asker->ident.uid, asker->ident.gid, &e, msg, cap);
    if (!f)
        return e;
    size_t before = d->prof.count;
    char err[512];
    int rc = pos_prof_load_file(&d->prof, &d->device, f, path, err, sizeof err);
    fclose(f);
    if (rc < 0) {
        snprintf(msg, cap, "%s: %s",
                 rc == -ENOSPC ? "stopped at a limit, the profiles before it kept"
                               : "refused, nothing loaded",
                 err);
        return rc;
    }
    snprintf(msg, cap, "loaded %s: %zu kernel profiles now (%zu new)", path, d->prof.count,
             d->prof.count - before);
    return 0;
}

static const struct control_op {
    uint32_t op;
    const char *name;
    int changes; /* needs root or the posd group */
    control_fn fn;
} control_ops[] = {
    {POS_CTL_STATUS, "status", 0, control_status},    {POS_CTL_SET, "set", 1, control_set},
    {POS_CTL_RELOAD, "reload", 1, control_reload},    {POS_CTL_DRAIN, "drain", 1, control_drain},
    {POS_CTL_UNDRAIN, "undrain", 1, control_undrain},
    {POS_CTL_PROFILES_SAVE, "profiles save", 1, control_profiles_save},
    {POS_CTL_PROFILES_LOAD, "profiles load", 1, control_profiles_load},
    {POS_CTL_PROFILES_RESET, "profiles reset", 1, control_profiles_reset},
};

int posd_control(struct posd *d, struct posd_client *c, const void *body, size_t len)
{
    struct pos_control_reply r;
    memset(&r, 0, sizeof r);
    struct pos_control q = {0};
    const struct control_op *op = NULL;
    if (len == sizeof q) {
        memcpy(&q, body, sizeof q);
        for (size_t i = 0; i < sizeof control_ops / sizeof control_ops[0]; i++)
            if (control_ops[i].op == q.op)
                op = &control_ops[i];
    }
    if (!op) {
        r.status = -EINVAL;
        snprintf(r.message, sizeof r.message,
                 "posd does not know this request (%zu bytes, operation %u): use the posctl "
                 "that came with this posd",
                 len, len == sizeof q ? q.op : 0);
    } else if (op->changes && !posd_peer_privileged(d, c)) {
        r.status = -EPERM;
        snprintf(r.message, sizeof r.message,
                 "permission denied: posctl %s needs root or membership of the group '%s'%s",
                 op->name, POSD_STATS_GROUP,
                 d->has_stats_group ? "" : " (no such group on this machine: groupadd it)");
        posd_log(POSD_LOG_WARN, "control %s by pid %d uid %u refused: not root or group %s",
                 op->name, (int)c->ident.pid, (unsigned)c->ident.uid, POSD_STATS_GROUP);
    } else {
        int status = op->fn(d, c, &q, r.message, sizeof r.message);
        if (status == POSD_CONTROL_LATER) {
            c->deadline = 0; /* not idle while posd owes it an answer (posd_control_answer) */
            return 0;
        }
        return posd_control_answer(d, c, op->changes ? op->name : NULL, status, r.message);
    }
    r.drained = d->drained;
    if (!c->registered && !c->deadline) { /* answered late: idle from now */
        c->deadline = posd_now() + POSD_REGISTER_NS;
        posd_arm_housekeeping(d, c->deadline);
    }
    return posd_client_send(c, POS_MSG_CONTROL_REPLY, &r, sizeof r) < 0 ? -1 : 0;
}
