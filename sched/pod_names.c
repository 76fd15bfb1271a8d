/* The kubelet's word on a pod's names: its log directories (/var/log/pods/NS_POD_UID/CONTAINER/
 * and the links /var/log/containers/POD_NS_CONTAINER-ID.log), its device manager's checkpoint
 * (which devices each pod UID's containers hold), and the pod-resources List, read and joined
 * to the kernel's pod UID and container ID (sched/pod.h says in which order). The join is pure;
 * the readers only read files. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sched/pod.h"

#define LABEL_CHARS     "abcdefghijklmnopqrstuvwxyz0123456789-"
#define SUBDOMAIN_CHARS LABEL_CHARS "."
#define CHECKPOINT_MAX  (16u << 20) /* a checkpoint larger than this is not the kubelet's */

static int valid_chars(const char *s, size_t len, size_t max, const char *chars)
{
    if (!len || len >= max)
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!s[i] || !strchr(chars, s[i]))
            return 0;
    return 1;
}

/* ---- the table ------------------------------------------------------------------------------ */

void posd_pod_entry_free(struct posd_pod_entry *p)
{
    free(p->containers);
    p->containers = NULL;
    p->ncontainers = 0;
}

void posd_pod_table_free(struct posd_pod_table *t)
{
    for (size_t i = 0; i < t->npods; i++)
        posd_pod_entry_free(&t->pods[i]);
    free(t->pods);
    t->pods = NULL;
    t->npods = 0;
}

const struct posd_pod_entry *posd_pod_table_find(const struct posd_pod_table *t, const char *uid)
{
    for (size_t i = 0; t && uid[0] && i < t->npods; i++)
        if (strcmp(t->pods[i].uid, uid) == 0)
            return &t->pods[i];
    return NULL;
}

const struct posd_pod_container *posd_pod_entry_container(const struct posd_pod_entry *p,
                                                          const char *id)
{
    for (size_t i = 0; p && id[0] && i < p->ncontainers; i++)
        if (strcmp(p->containers[i].id, id) == 0)
            return &p->containers[i];
    return NULL;
}

const struct posd_pod_container *posd_pod_client_container(const struct posd_pod_entry *p,
                                                           const char *id)
{
    const struct posd_pod_container *c = posd_pod_entry_container(p, id), *only = NULL;
    if (c || !p || !id[0])
        return c;
    for (size_t i = 0; i < p->ncontainers; i++) {
        if (p->containers[i].id[0])
            return NULL; /* a source names this pod's container IDs, and not ID */
        if (p->containers[i].devices[0]) {
            if (only)
                return NULL; /* two hold devices: which one is not known */
            only = &p->containers[i];
        }
    }
    return only;
}

static struct posd_pod_container *add_container(struct posd_pod_entry *p, const char *name,
                                                size_t len)
{
    for (size_t i = 0; i < p->ncontainers; i++)
        if (strlen(p->containers[i].name) == len && !memcmp(p->containers[i].name, name, len))
            return &p->containers[i];
    struct posd_pod_container *c = realloc(p->containers, (p->ncontainers + 1) * sizeof *c);
    if (!c)
        return NULL;
    p->containers = c;
    c = &c[p->ncontainers++];
    memset(c, 0, sizeof *c);
    memcpy(c->name, name, len);
    return c;
}

static struct posd_pod_entry *add_pod(struct posd_pod_table *t)
{
    struct posd_pod_entry *p = realloc(t->pods, (t->npods + 1) * sizeof *p);
    if (!p)
        return NULL;
    t->pods = p;
    p = &p[t->npods++];
    memset(p, 0, sizeof *p);
    return p;
}

/* ---- the log directories ---------------------------------------------------------------------- */

/* NAME is "NAMESPACE_PODNAME_PODUID" (no part has a '_'): into P's names. */
static int read_pod_dir_name(const char *name, struct posd_pod_entry *p)
{
    const char *a = strchr(name, '_'), *b = a ? strchr(a + 1, '_') : NULL;
    if (!a || !b || strchr(b + 1, '_'))
        return -EINVAL;
    size_t nl = (size_t)(a - name), pl = (size_t)(b - a - 1);
    if (!valid_chars(name, nl, sizeof p->namespace_, LABEL_CHARS) ||
        !valid_chars(a + 1, pl, sizeof p->name, SUBDOMAIN_CHARS) || !posd_pod_uid_valid(b + 1))
        return -EINVAL;
    memset(p, 0, sizeof *p);
    memcpy(p->namespace_, name, nl);
    memcpy(p->name, a + 1, pl);
    snprintf(p->uid, sizeof p->uid, "%s", b + 1);
    return 0;
}

/* The container directories of pod directory PATH into P. */
static int read_containers_of(const char *path, struct posd_pod_entry *p)
{
    DIR *dir = opendir(path);
    if (!dir)
        return -errno;
    const struct dirent *e;
    int rc = 0;
    while ((e = readdir(dir)) && !rc) {
        size_t len = strlen(e->d_name);
        if (valid_chars(e->d_name, len, KUBE_CONTAINER_MAX, LABEL_CHARS) &&
            !add_container(p, e->d_name, len))
            rc = -ENOMEM;
    }
    closedir(dir);
    return rc;
}

/* A container log link's name "POD_NS_CONTAINER-ID.log": its parts. */
struct link_name {
    char pod[KUBE_POD_MAX], ns[KUBE_NAMESPACE_MAX], container[KUBE_CONTAINER_MAX];
    char id[POSD_CONTAINER_ID_MAX];
};

static int read_link_name(const char *name, struct link_name *l)
{
    size_t len = strlen(name);
    if (len < 5 || strcmp(name + len - 4, ".log") != 0)
        return -EINVAL;
    len -= 4;
    const char *a = memchr(name, '_', len);
    const char *b = a ? memchr(a + 1, '_', len - (size_t)(a + 1 - name)) : NULL;
    if (!a || !b || memchr(b + 1, '_', len - (size_t)(b + 1 - name)))
        return -EINVAL;
    const char *rest = b + 1, *end = name + len, *dash = end;
    while (dash > rest && dash[-1] != '-')
        dash--;
    if (dash <= rest + 1)
        return -EINVAL;
    size_t pl = (size_t)(a - name), nl = (size_t)(b - a - 1), cl = (size_t)(dash - 1 - rest);
    size_t il = (size_t)(end - dash);
    if (!valid_chars(name, pl, sizeof l->pod, SUBDOMAIN_CHARS) ||
        !valid_chars(a + 1, nl, sizeof l->ns, LABEL_CHARS) ||
        !valid_chars(rest, cl, sizeof l->container, LABEL_CHARS) ||
        !valid_chars(dash, il, sizeof l->id, "0123456789abcdef") || il < 12)
        return -EINVAL;
    memset(l, 0, sizeof *l);
    memcpy(l->pod, name, pl);
    memcpy(l->ns, a + 1, nl);
    memcpy(l->container, rest, cl);
    memcpy(l->id, dash, il);
    return 0;
}

/* The pod UID a container log link points into (.../NS_POD_UID/CONTAINER/N.log), or "". */
static void link_target_uid(int dirfd, const char *name, char *uid)
{
    char target[1024];
    uid[0] = '\0';
    ssize_t n = readlinkat(dirfd, name, target, sizeof target - 1);
    if (n <= 0)
        return;
    target[n] = '\0';
    /* the component two above the file */
    char *file = strrchr(target, '/');
    if (!file)
        return;
    *file = '\0';
    char *cont = strrchr(target, '/');
    if (!cont)
        return;
    *cont = '\0';
    char *pod = strrchr(target, '/');
    struct posd_pod_entry p;
    if (read_pod_dir_name(pod ? pod + 1 : target, &p) == 0)
        snprintf(uid, POSD_POD_UID_MAX, "%s", p.uid);
}

/* Gives T's containers their IDs from the links in CONTAINERS_DIR (ONLY_ID: that one alone). */
static int read_links(const char *containers_dir, struct posd_pod_table *t, const char *only_id)
{
    DIR *dir = opendir(containers_dir);
    if (!dir)
        return -errno;
    const struct dirent *e;
    int rc = 0;
    while ((e = readdir(dir)) && !rc) {
        struct link_name l;
        if (read_link_name(e->d_name, &l) < 0 || (only_id && strcmp(l.id, only_id) != 0))
            continue;
        char uid[POSD_POD_UID_MAX];
        link_target_uid(dirfd(dir), e->d_name, uid);
        for (size_t i = 0; i < t->npods; i++) {
            struct posd_pod_entry *p = &t->pods[i];
            /* the pod's names must be the link's, and its UID the one the link's target
             * names (a pod deleted and made again under its name has another UID) */
            if ((uid[0] && strcmp(p->uid, uid) != 0) || strcmp(p->namespace_, l.ns) != 0 ||
                strcmp(p->name, l.pod) != 0)
                continue;
            struct posd_pod_container *c = add_container(p, l.container, strlen(l.container));
            if (!c) {
                rc = -ENOMEM;
                break;
            }
            snprintf(c->id, sizeof c->id, "%s", l.id);
        }
    }
    closedir(dir);
    return rc;
}

int posd_pod_logs_read(const char *log_dir, const char *containers_dir, struct posd_pod_table *t)
{
    posd_pod_table_free(t);
    DIR *dir = opendir(log_dir);
    if (!dir)
        return -errno;
    const struct dirent *e;
    int rc = 0;
    while ((e = readdir(dir)) && !rc) {
        struct posd_pod_entry parsed, *p;
        if (read_pod_dir_name(e->d_name, &parsed) < 0)
            continue;
        if (!(p = add_pod(t))) {
            rc = -ENOMEM;
            break;
        }
        *p = parsed;
        char path[POSD_PATH_MAX + 320];
        snprintf(path, sizeof path, "%s/%s", log_dir, e->d_name);
        if (read_containers_of(path, p) == -ENOMEM)
            rc = -ENOMEM;
    }
    closedir(dir);
    if (!rc && containers_dir && containers_dir[0]) {
        int lr = read_links(containers_dir, t, NULL);
        if (lr == -ENOMEM)
            rc = lr;
    }
    if (rc < 0)
        posd_pod_table_free(t);
    return rc;
}

int posd_pod_logs_find(const char *log_dir, const char *containers_dir, const char *uid,
                       const char *cid, struct posd_pod_entry *out)
{
    memset(out, 0, sizeof *out);
    if (!uid[0])
        return 0;
    DIR *dir = opendir(log_dir);
    if (!dir)
        return -errno;
    const struct dirent *e;
    size_t ul = strlen(uid);
    int found = 0;
    char name[POSD_PATH_MAX];
    while (!found && (e = readdir(dir))) {
        size_t len = strlen(e->d_name);
        if (len > ul && e->d_name[len - ul - 1] == '_' && !strcmp(e->d_name + len - ul, uid) &&
            read_pod_dir_name(e->d_name, out) == 0) {
            snprintf(name, sizeof name, "%s", e->d_name);
            found = 1;
        }
    }
    closedir(dir);
    if (!found || !cid[0] || !containers_dir || !containers_dir[0])
        return found;
    struct posd_pod_table t = {.npods = 1, .pods = out};
    int rc = read_links(containers_dir, &t, cid);
    if (rc == -ENOMEM) {
        posd_pod_entry_free(out);
        return rc;
    }
    return 1;
}

/* ---- the device manager's checkpoint (a small JSON reader for what posd needs of it) --------- */

struct json {
    const char *s, *end;
    int depth;
};

static void ws(struct json *j)
{
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r'))
        j->s++;
}

static int peek(struct json *j, char c)
{
    ws(j);
    return j->s < j->end && *j->s == c;
}

static int eat(struct json *j, char c)
{
    if (!peek(j, c))
        return 0;
    j->s++;
    return 1;
}

/* A string into OUT (CAP bytes; NULL: skipped). Escapes are read; a \u escape of anything but
 * printable ASCII, a control character or a string too long refuses the whole file. */
static int string(struct json *j, char *out, size_t cap)
{
    if (!eat(j, '"'))
        return -EPROTO;
    size_t n = 0;
    while (j->s < j->end && *j->s != '"') {
        char c = *j->s++;
        if ((unsigned char)c < 0x20)
            return -EPROTO;
        if (c == '\\') {
            if (j->s >= j->end)
                return -EPROTO;
            char x = *j->s++;
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *at = strchr(from, x);
            if (x == 'u') {
                unsigned v = 0;
                for (int i = 0; i < 4; i++, j->s++) {
                    if (j->s >= j->end || !strchr("0123456789abcdefABCDEF", *j->s) || !*j->s)
                        return -EPROTO;
                    char h = *j->s;
                    v = v * 16 + (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
                }
                if (v < 0x20 || v > 0x7e)
                    return -EPROTO;
                c = (char)v;
            } else if (x && at) {
                c = to[at - from];
            } else {
                return -EPROTO;
            }
        }
        if (out) {
            if (n + 1 >= cap)
                return -EPROTO;
            out[n++] = c;
        }
    }
    if (!eat(j, '"'))
        return -EPROTO;
    if (out)
        out[n] = '\0';
    return 0;
}

static int skip_value(struct json *j);

static int skip_container(struct json *j, char open, char close)
{
    if (++j->depth > 32)
        return -EPROTO;
    eat(j, open);
    if (!eat(j, close)) {
        do {
            if (open == '{' && (string(j, NULL, 0) < 0 || !eat(j, ':')))
                return -EPROTO;
            if (skip_value(j) < 0)
                return -EPROTO;
        } while (eat(j, ','));
        if (!eat(j, close))
            return -EPROTO;
    }
    j->depth--;
    return 0;
}

static int skip_value(struct json *j)
{
    ws(j);
    if (j->s >= j->end)
        return -EPROTO;
    if (*j->s == '"')
        return string(j, NULL, 0);
    if (*j->s == '{')
        return skip_container(j, '{', '}');
    if (*j->s == '[')
        return skip_container(j, '[', ']');
    const char *start = j->s;
    while (j->s < j->end && strchr("0123456789+-.eEtrufalsn", *j->s) && *j->s)
        j->s++;
    return j->s > start ? 0 : -EPROTO;
}

/* Calls FN for each member of an object, with the cursor on its value. */
typedef int (*member_fn)(struct json *j, const char *key, void *arg);
static int object(struct json *j, member_fn fn, void *arg)
{
    if (!eat(j, '{') || ++j->depth > 32)
        return -EPROTO;
    if (!eat(j, '}')) {
        do {
            char key[64];
            if (string(j, key, sizeof key) < 0 || !eat(j, ':'))
                return -EPROTO;
            int rc = fn(j, key, arg);
            if (rc < 0)
                return rc;
        } while (eat(j, ','));
        if (!eat(j, '}'))
            return -EPROTO;
    }
    j->depth--;
    return 0;
}

static int id_list(struct json *j, struct posd_pod_devices *e)
{
    if (!eat(j, '['))
        return -EPROTO;
    if (eat(j, ']'))
        return 0;
    do {
        char id[KUBE_DEVICE_ID_MAX];
        if (string(j, id, sizeof id) < 0)
            return -EPROTO;
        char(*ids)[KUBE_DEVICE_ID_MAX] = realloc(e->ids, (e->nids + 1) * sizeof *ids);
        if (!ids)
            return -ENOMEM;
        e->ids = ids;
        memcpy(e->ids[e->nids++], id, sizeof id);
    } while (eat(j, ','));
    return eat(j, ']') ? 0 : -EPROTO;
}

/* DeviceIDs: a list (older kubelets), or NUMA node -> list */
static int numa_member(struct json *j, const char *key, void *arg)
{
    return id_list(j, arg);
}

static int entry_member(struct json *j, const char *key, void *arg)
{
    struct posd_pod_devices *e = arg;
    if (!strcmp(key, "PodUID"))
        return string(j, e->uid, sizeof e->uid);
    if (!strcmp(key, "ContainerName"))
        return string(j, e->container, sizeof e->container);
    if (!strcmp(key, "ResourceName"))
        return string(j, e->resource, sizeof e->resource);
    if (!strcmp(key, "DeviceIDs"))
        return peek(j, '[') ? id_list(j, e) : object(j, numa_member, e);
    return skip_value(j);
}

static int entries(struct json *j, struct posd_pod_checkpoint *out)
{
    if (!eat(j, '['))
        return peek(j, 'n') ? skip_value(j) : -EPROTO; /* null: none */
    if (eat(j, ']'))
        return 0;
    do {
        struct posd_pod_devices *e = realloc(out->e, (out->n + 1) * sizeof *e);
        if (!e)
            return -ENOMEM;
        out->e = e;
        e = &e[out->n++];
        memset(e, 0, sizeof *e);
        int rc = object(j, entry_member, e);
        if (rc < 0)
            return rc;
        if (!posd_pod_uid_valid(e->uid) || !e->container[0] || !e->resource[0])
            return -EPROTO;
    } while (eat(j, ','));
    return eat(j, ']') ? 0 : -EPROTO;
}

static int data_member(struct json *j, const char *key, void *arg)
{
    return !strcmp(key, "PodDeviceEntries") ? entries(j, arg) : skip_value(j);
}

static int root_member(struct json *j, const char *key, void *arg)
{
    return !strcmp(key, "Data") ? object(j, data_member, arg) : skip_value(j);
}

void posd_pod_checkpoint_free(struct posd_pod_checkpoint *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->e[i].ids);
    free(c->e);
    c->e = NULL;
    c->n = 0;
}

int posd_pod_checkpoint_parse(const char *text, size_t len, struct posd_pod_checkpoint *out)
{
    struct json j = {.s = text, .end = text + len};
    memset(out, 0, sizeof *out);
    int rc = object(&j, root_member, out);
    ws(&j);
    if (!rc && j.s != j.end)
        rc = -EPROTO;
    if (rc < 0)
        posd_pod_checkpoint_free(out);
    return rc;
}

int posd_pod_checkpoint_read(const char *path, struct posd_pod_checkpoint *out)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > CHECKPOINT_MAX) {
        close(fd);
        return -EPROTO;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t len = 0;
    ssize_t n = 0;
    while (buf && len < (size_t)st.st_size &&
           (n = read(fd, buf + len, (size_t)st.st_size - len)) > 0)
        len += (size_t)n;
    close(fd);
    if (!buf)
        return -ENOMEM;
    int rc = n < 0 ? -EIO : posd_pod_checkpoint_parse(buf, len, out);
    free(buf);
    return rc;
}

/* ---- the join ----------------------------------------------------------------------------------- */

/* ID appended to the list OUT ("a,b,c", LEN bytes so far); an ID that does not fit ends the
 * list with "...". Returns 0, or -ENOSPC once the list is full. */
static int append_id(char *out, size_t cap, size_t *len, const char *id)
{
    size_t need = strlen(id) + (*len ? 1 : 0);
    if (*len + need + 4 > cap) {
        snprintf(out + *len, cap - *len, "%s...", *len ? "," : "");
        return -ENOSPC;
    }
    *len += (size_t)snprintf(out + *len, cap - *len, "%s%s", *len ? "," : "", id);
    return 0;
}

/* The IDs of the devices of RESOURCE among DEVS (N), into OUT. */
static void list_devices(char *out, size_t cap, const struct kube_device *devs, size_t n,
                         const char *resource)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        if (!strcmp(devs[i].resource, resource) && append_id(out, cap, &len, devs[i].id) < 0)
            return;
}

/* A checkpoint entry's IDs, into OUT. */
static void list_entry_ids(char *out, size_t cap, const struct posd_pod_devices *e)
{
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < e->nids; i++)
        if (append_id(out, cap, &len, e->ids[i]) < 0)
            return;
}

static int same_devices(const struct posd_pod_devices *e, const struct kube_container *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_devices; i++) {
        if (strcmp(c->devices[i].resource, e->resource) != 0)
            continue;
        int found = 0;
        for (size_t k = 0; k < e->nids && !found; k++)
            found = !strcmp(e->ids[k], c->devices[i].id);
        if (!found)
            return 0;
        n++;
    }
    return n && n == e->nids;
}

static const struct kube_pod *list_pod(const struct kube_pod_list *l, const char *ns,
                                       const char *name)
{
    for (size_t i = 0; l && i < l->n_pods; i++)
        if (!strcmp(l->pods[i].namespace_, ns) && !strcmp(l->pods[i].name, name))
            return &l->pods[i];
    return NULL;
}

static const struct kube_container *list_container(const struct kube_pod *p, const char *name)
{
    for (size_t i = 0; p && i < p->n_containers; i++)
        if (!strcmp(p->containers[i].name, name))
            return &p->containers[i];
    return NULL;
}

/* The List pod one of whose containers holds exactly E's devices, or NULL. */
static const struct kube_pod *pod_holding(const struct kube_pod_list *l,
                                          const struct posd_pod_devices *e)
{
    for (size_t i = 0; l && i < l->n_pods; i++)
        for (size_t k = 0; k < l->pods[i].n_containers; k++)
            if (!strcmp(l->pods[i].containers[k].name, e->container) &&
                same_devices(e, &l->pods[i].containers[k]))
                return &l->pods[i];
    return NULL;
}

int posd_pod_join(struct posd_pod_table *t, const struct posd_pod_checkpoint *ck,
                  const struct kube_pod_list *list, const char *resource)
{
    /* pods the log directories lack: named through the checkpoint's devices and the List */
    for (size_t i = 0; ck && list && i < ck->n; i++) {
        const struct posd_pod_devices *e = &ck->e[i];
        if (posd_pod_table_find(t, e->uid))
            continue;
        const struct kube_pod *lp = pod_holding(list, e);
        if (!lp)
            continue;
        struct posd_pod_entry *p = add_pod(t);
        if (!p)
            return -ENOMEM;
        snprintf(p->uid, sizeof p->uid, "%s", e->uid);
        snprintf(p->namespace_, sizeof p->namespace_, "%s", lp->namespace_);
        snprintf(p->name, sizeof p->name, "%s", lp->name);
    }
    for (size_t i = 0; i < t->npods; i++) {
        struct posd_pod_entry *p = &t->pods[i];
        const struct kube_pod *lp = list_pod(list, p->namespace_, p->name);
        p->listed = lp != NULL;
        for (size_t k = 0; k < p->ncontainers; k++) {
            struct posd_pod_container *c = &p->containers[k];
            const struct kube_container *lc = list_container(lp, c->name);
            c->has_devices = 0;
            c->devices[0] = '\0';
            if (lc) {
                list_devices(c->devices, sizeof c->devices, lc->devices, lc->n_devices, resource);
                c->has_devices = 1;
            }
        }
        /* the checkpoint's, by UID: over the List's, which is joined by names */
        for (size_t e = 0; ck && e < ck->n; e++) {
            if (strcmp(ck->e[e].uid, p->uid) != 0 || strcmp(ck->e[e].resource, resource) != 0)
                continue;
            const char *cn = ck->e[e].container;
            struct posd_pod_container *c = add_container(p, cn, strlen(cn));
            if (!c)
                return -ENOMEM;
            list_entry_ids(c->devices, sizeof c->devices, &ck->e[e]);
            c->has_devices = 1;
        }
    }
    return 0;
}

void posd_pod_names_set(struct posd_identity *id, const struct posd_pod_entry *p,
                        const struct posd_pod_container *c)
{
    snprintf(id->k8s_namespace, sizeof id->k8s_namespace, "%s", p ? p->namespace_ : "");
    snprintf(id->pod, sizeof id->pod, "%s", p ? p->name : "");
    snprintf(id->container, sizeof id->container, "%s", c ? c->name : "");
    snprintf(id->devices, sizeof id->devices, "%s", c ? c->devices : "");
}
