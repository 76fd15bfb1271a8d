/* Who a client is, from the kernel's word and never from the client: its executable, app name
 * (POS_APP in its environment as a hint), cgroup and pod read from /proc at HELLO; and its pod
 * in words for posd's log lines. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sched/identity.h"
#include "sched/pod.h"

static ssize_t read_small_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = 0;
    ssize_t n;
    while (len < cap - 1 && (n = read(fd, buf + len, cap - 1 - len)) > 0)
        len += (size_t)n;
    close(fd);
    buf[len] = '\0';
    return (ssize_t)len;
}

void posd_identify(struct posd_identity *id, pid_t pid)
{
    char path[64];
    static char buf[65536]; /* environments can be large; posd is single-threaded */
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(path, id->exe, sizeof id->exe - 1);
    id->exe[n > 0 ? n : 0] = '\0';
    const char *base = strrchr(id->exe, '/');
    snprintf(id->app, sizeof id->app, "%.*s", (int)sizeof id->app - 1, base ? base + 1 : id->exe);
    /* POS_APP in its environment is a name hint (readable as root or as the same user) */
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    ssize_t len = read_small_file(path, buf, sizeof buf);
    for (ssize_t i = 0; len > 0 && i < len; i += (ssize_t)strlen(buf + i) + 1) {
        if (strncmp(buf + i, "POS_APP=", 8) == 0 && buf[i + 8]) {
            snprintf(id->app, sizeof id->app, "%s", buf + i + 8);
            break;
        }
    }
    /* the unified hierarchy's line: "0::/path" */
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    id->cgroup[0] = '\0';
    if (read_small_file(path, buf, sizeof buf) <= 0)
        buf[0] = '\0';
    /* its pod, from the same lines (cgroup v1 too), before the v2 line is cut out of them */
    posd_pod_identify(id, buf);
    char *line = strstr(buf, "0::");
    if (line) {
        line += 3;
        line[strcspn(line, "\n")] = '\0';
        snprintf(id->cgroup, sizeof id->cgroup, "%s", line);
    }
}

void posd_pod_words(const struct posd_identity *id, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (!id->pod_uid[0])
        return;
    if (!id->pod[0])
        snprintf(buf, cap, " pod uid %s (names not known yet)", id->pod_uid);
    else
        snprintf(buf, cap, " pod %s/%s container %s%s%s", id->k8s_namespace, id->pod,
                 id->container[0] ? id->container : "-", id->devices[0] ? " devices " : "",
                 id->devices);
}
