/* pos-device-plugin's command line (man/pos-device-plugin.8): options into the plugin's
 * configuration, the GPUs found or given, then kube_plugin_run. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plugin.h"
#include "podres.h"

static const char usage[] =
    "usage: pos-device-plugin [--kubelet-dir DIR] [--resource NAME] [--shares N] [--gpus LIST|auto]\n"
    "                         [--socket POSD_SOCKET] [--shim PATH] [--dev-dir DIR|none]\n"
    "                         [--driver-dir DIR] [--cdi] [-v]\n"
    "  --kubelet-dir DIR  the kubelet's device-plugin directory (/var/lib/kubelet/device-plugins)\n"
    "  --resource NAME    the extended resource advertised (pos.dev/gpu)\n"
    "  --shares N         shares per GPU, 1..256 (10)\n"
    "  --gpus LIST|auto   GPU ordinals, e.g. 0,1; auto: the nvidiaN nodes under --dev-dir (auto)\n"
    "  --socket PATH      posd's socket on the host (/run/posd/posd.sock)\n"
    "  --shim PATH        libposshim.so on the host (/usr/local/lib/pos/libposshim.so)\n"
    "  --dev-dir DIR|none where the NVIDIA device nodes are (/dev); none: Allocate passes none\n"
    "  --driver-dir DIR   a directory with a libcuda.so.1 to mount instead (the simulated driver)\n"
    "  --cdi              Allocate answers CDI device names (" KUBE_CDI_KIND "=gpuN), no edits\n"
    "  -v                 log every ListAndWatch watcher too\n";

static int die(const char *fmt, const char *arg)
{
    fprintf(stderr, "pos-device-plugin: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 1;
}

/* A decimal in LO..HI, the whole of S; -1 otherwise. */
static int number(const char *s, int lo, int hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi || !isdigit((unsigned char)s[0]))
        return -1;
    return (int)v;
}

static int add_gpu(struct kube_plugin_config *c, int g)
{
    for (size_t i = 0; i < c->n_gpus; i++)
        if (c->gpus[i] == g)
            return -1;
    if (c->n_gpus == KUBE_GPUS_MAX)
        return -1;
    c->gpus[c->n_gpus++] = g;
    return 0;
}

static int parse_gpus(struct kube_plugin_config *c, const char *list)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int g = number(t, 0, KUBE_GPUS_MAX - 1);
        if (g < 0 || add_gpu(c, g) < 0)
            return -1;
    }
    return c->n_gpus ? 0 : -1;
}

static int by_ordinal(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The nvidiaN character devices under DIR. */
static int find_gpus(struct kube_plugin_config *c, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, "nvidia", 6) != 0)
            continue;
        int g = number(e->d_name + 6, 0, KUBE_GPUS_MAX - 1);
        char path[1024];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (g >= 0 && stat(path, &st) == 0 && S_ISCHR(st.st_mode))
            add_gpu(c, g);
    }
    closedir(d);
    qsort(c->gpus, c->n_gpus, sizeof c->gpus[0], by_ordinal);
    return 0;
}

int main(int argc, char **argv)
{
    struct kube_plugin_config c = {.kubelet_dir = "/var/lib/kubelet/device-plugins",
                                   .resource = KUBE_DEFAULT_RESOURCE,
                                   .shares = 10,
                                   .posd_socket = "/run/posd/posd.sock",
                                   .shim = "/usr/local/lib/pos/libposshim.so",
                                   .dev_dir = "/dev"};
    const char *gpus = "auto";
    enum { O_KUBELET = 256, O_RESOURCE, O_SHARES, O_GPUS, O_SOCKET, O_SHIM, O_DEV, O_DRIVER, O_CDI };
    static const struct option opts[] = {
        {"kubelet-dir", required_argument, NULL, O_KUBELET},
        {"resource", required_argument, NULL, O_RESOURCE},
        {"shares", required_argument, NULL, O_SHARES},
        {"gpus", required_argument, NULL, O_GPUS},
        {"socket", required_argument, NULL, O_SOCKET},
        {"shim", required_argument, NULL, O_SHIM},
        {"dev-dir", required_argument, NULL, O_DEV},
        {"driver-dir", required_argument, NULL, O_DRIVER},
        {"cdi", no_argument, NULL, O_CDI},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    for (int o; (o = getopt_long(argc, argv, "vh", opts, NULL)) != -1;) {
        switch (o) {
        case O_KUBELET: c.kubelet_dir = optarg; break;
        case O_RESOURCE: c.resource = optarg; break;
        case O_SHARES:
            if ((c.shares = number(optarg, 1, KUBE_SHARES_MAX)) < 0)
                return die("--shares %s: want a number of shares per GPU, 1 to 256", optarg);
            break;
        case O_GPUS: gpus = optarg; break;
        case O_SOCKET: c.posd_socket = optarg; break;
        case O_SHIM: c.shim = optarg; break;
        case O_DEV: c.dev_dir = strcmp(optarg, "none") == 0 ? NULL : optarg; break;
        case O_DRIVER: c.driver_dir = optarg; break;
        case O_CDI: c.cdi = 1; break;
        case 'v': c.verbose = 1; break;
        case 'h': fputs(usage, stdout); return 0;
        default: fputs(usage, stderr); return 2;
        }
    }
    if (optind < argc) {
        fputs(usage, stderr);
        return 2;
    }
    if (!*c.resource || strchr(c.resource, '/') == NULL)
        return die("--resource '%s': want a vendor-qualified name such as pos.dev/gpu",
                   c.resource);
    if (strcmp(gpus, "auto") != 0) {
        if (parse_gpus(&c, gpus) < 0)
            return die("--gpus %s: want auto or distinct ordinals 0..63, such as 0,1", gpus);
    } else if (!c.dev_dir) {
        return die("--gpus auto looks under --dev-dir, which is %s: give --gpus 0,1,...", "none");
    } else if (find_gpus(&c, c.dev_dir) < 0) {
        return die("cannot read the device directory %s (--dev-dir)", c.dev_dir);
    } else if (!c.n_gpus) {
        return die("no GPUs: no nvidiaN device nodes under %s (give --gpus, or --dev-dir)",
                   c.dev_dir);
    }
    return kube_plugin_run(&c);
}
