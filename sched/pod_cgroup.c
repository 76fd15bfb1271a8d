/* The kernel's word on a process's pod: its cgroup path parsed into the pod's UID and the
 * container's ID, for every form the kubelet makes (cgroup v1 and v2; the systemd driver's
 * kubepods.slice/kubepods-QOS.slice/kubepods-QOS-podUID.slice/RUNTIME-ID.scope, its UID's '-'
 * written '_'; the cgroupfs driver's /kubepods/QOS/podUID/ID). Pure: no I/O. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sched/pod.h"

#define HEX "0123456789abcdef"

/* One segment of a path: [s, s + len). */
struct seg {
    const char *s;
    size_t len;
};

static int seg_is(struct seg g, const char *word)
{
    return g.len == strlen(word) && memcmp(g.s, word, g.len) == 0;
}

/* Cuts the prefix P off G when G starts with it. */
static int seg_eat(struct seg *g, const char *p)
{
    size_t n = strlen(p);
    if (g->len < n || memcmp(g->s, p, n) != 0)
        return 0;
    g->s += n;
    g->len -= n;
    return 1;
}

/* Cuts the suffix P off G when G ends with it. */
static int seg_eat_end(struct seg *g, const char *p)
{
    size_t n = strlen(p);
    if (g->len < n || memcmp(g->s + g->len - n, p, n) != 0)
        return 0;
    g->len -= n;
    return 1;
}

static size_t split(const char *path, struct seg *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = path; *p && n < cap;) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        size_t len = strcspn(p, "/");
        out[n++] = (struct seg){p, len};
        p += len;
    }
    return n;
}

static int all_hex(const char *s, size_t len)
{
    return len && strspn(s, HEX) >= len;
}

/* A pod UID as the API writes it, from G (UNDERSCORE: '_' stands for '-', as in a systemd
 * slice's name): 8-4-4-4-12 lowercase hex digits, or 32 of them (a static pod's UID is the
 * hash of its manifest). */
static int read_uid(struct seg g, int underscore, char *out)
{
    char u[POSD_POD_UID_MAX];
    if (g.len != 36 && g.len != 32)
        return -EINVAL;
    for (size_t i = 0; i < g.len; i++) {
        if (underscore && g.s[i] == '-') /* '-' separates a slice's parents in its name */
            return -EINVAL;
        u[i] = underscore && g.s[i] == '_' ? '-' : g.s[i];
    }
    u[g.len] = '\0';
    if (g.len == 32)
        return all_hex(u, 32) ? (memcpy(out, u, 33), 0) : -EINVAL;
    static const size_t dash[] = {8, 13, 18, 23};
    for (size_t i = 0, d = 0; i < 36; i++) {
        if (d < 4 && i == dash[d]) {
            if (u[i] != '-')
                return -EINVAL;
            d++;
        } else if (!strchr(HEX, u[i]) || !u[i]) {
            return -EINVAL;
        }
    }
    memcpy(out, u, 37);
    return 0;
}

int posd_pod_uid_valid(const char *uid)
{
    char out[POSD_POD_UID_MAX];
    return read_uid((struct seg){uid, strlen(uid)}, 0, out) == 0;
}

/* A container's segment: "cri-containerd-ID.scope", "crio-ID.scope", "docker-ID.scope", or
 * (cgroupfs) the same without ".scope", or the bare ID; ID is 12..128 hex digits (64 as the
 * runtimes write them). Anything else ("crio-conmon-ID.scope") is no container. */
static int read_container(struct seg g, char *out)
{
    seg_eat_end(&g, ".scope");
    if (!seg_eat(&g, "cri-containerd-") && !seg_eat(&g, "crio-"))
        seg_eat(&g, "docker-");
    if (g.len < 12 || g.len >= POSD_CONTAINER_ID_MAX || !all_hex(g.s, g.len))
        return -EINVAL;
    memcpy(out, g.s, g.len);
    out[g.len] = '\0';
    return 0;
}

static int is_qos(struct seg g)
{
    return seg_is(g, "burstable") || seg_is(g, "besteffort");
}

/* systemd: kubepods.slice[/kubepods-QOS.slice]/kubepods[-QOS]-podUID.slice[/CONTAINER[/...]] */
static int from_systemd(const struct seg *g, size_t n, struct posd_pod_ref *ref)
{
    size_t i = 1;
    char prefix[32] = "kubepods-";
    struct seg q = i < n ? g[i] : (struct seg){"", 0};
    if (seg_eat(&q, "kubepods-") && seg_eat_end(&q, ".slice") && is_qos(q)) {
        snprintf(prefix, sizeof prefix, "kubepods-%.*s-", (int)q.len, q.s);
        i++;
    }
    if (i >= n)
        return -EINVAL;
    struct seg p = g[i];
    if (!seg_eat(&p, prefix) || !seg_eat(&p, "pod") || !seg_eat_end(&p, ".slice") ||
        read_uid(p, 1, ref->uid) < 0)
        return -EINVAL;
    if (i + 1 < n && read_container(g[i + 1], ref->container_id) < 0)
        ref->container_id[0] = '\0';
    return 1;
}

/* cgroupfs: kubepods[/QOS]/podUID[/CONTAINER[/...]] */
static int from_cgroupfs(const struct seg *g, size_t n, struct posd_pod_ref *ref)
{
    size_t i = 1;
    if (i < n && is_qos(g[i]))
        i++;
    if (i >= n)
        return -EINVAL;
    struct seg p = g[i];
    if (!seg_eat(&p, "pod") || read_uid(p, 0, ref->uid) < 0)
        return -EINVAL;
    if (i + 1 < n && read_container(g[i + 1], ref->container_id) < 0)
        ref->container_id[0] = '\0';
    return 1;
}

int posd_pod_from_path(const char *path, struct posd_pod_ref *ref)
{
    struct seg g[8];
    size_t n = split(path, g, sizeof g / sizeof g[0]);
    memset(ref, 0, sizeof *ref);
    if (!n)
        return 0;
    int rc = 0;
    if (seg_is(g[0], ".."))
        rc = strstr(path, "kubepods") ? -EXDEV : 0;
    else if (seg_is(g[0], "kubepods.slice"))
        rc = from_systemd(g, n, ref);
    else if (seg_is(g[0], "kubepods"))
        rc = from_cgroupfs(g, n, ref);
    if (rc <= 0)
        memset(ref, 0, sizeof *ref);
    return rc;
}

int posd_pod_from_cgroup(const char *text, struct posd_pod_ref *ref, char *bad, size_t badlen)
{
    int err = 0;
    memset(ref, 0, sizeof *ref);
    if (bad && badlen)
        bad[0] = '\0';
    /* pass 0: the unified hierarchy's line; pass 1: the v1 lines */
    for (int pass = 0; pass < 2; pass++) {
        for (const char *line = text; line && *line;) {
            const char *end = strchr(line, '\n');
            size_t len = end ? (size_t)(end - line) : strlen(line);
            const char *c1 = memchr(line, ':', len);
            const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
            int v2 = c1 && c2 && c1 == line + 1 && line[0] == '0' && c2 == c1 + 1;
            if (c2 && v2 == (pass == 0)) {
                char path[POSD_PATH_MAX];
                size_t plen = len - (size_t)(c2 + 1 - line);
                if (plen < sizeof path) {
                    memcpy(path, c2 + 1, plen);
                    path[plen] = '\0';
                    int rc = posd_pod_from_path(path, ref);
                    if (rc == 1)
                        return 1;
                    if (rc < 0 && !err) {
                        err = rc;
                        if (bad && badlen)
                            snprintf(bad, badlen, "%s", path);
                    }
                }
            }
            line = end ? end + 1 : NULL;
        }
    }
    return err;
}
