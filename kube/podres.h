/* The kubelet's pod-resources API (k8s.io/kubelet/pkg/apis/podresources/v1, service
 * v1.PodResourcesLister, method List), as posd reads it: every pod on the node, its containers,
 * and the devices each container was given. A client of a unix-socket gRPC server
 * (/var/lib/kubelet/pod-resources/kubelet.sock on a node), built on kube/grpc.c.
 *
 * What List returns has no pod UID and no container ID; posd joins it to what the kernel says
 * of a process (its cgroup: pod UID and container ID) through the kubelet's own files (see
 * docs/kubernetes.md, "Pod identity"). Nothing here comes from inside a container. */
#ifndef POS_KUBE_PODRES_H
#define POS_KUBE_PODRES_H

#include <stddef.h>

/* Kubernetes' limits: a namespace and a container name are DNS labels (63), a pod name a DNS
 * subdomain (253). Longer names on the wire are refused, not cut. */
#define KUBE_NAMESPACE_MAX 64
#define KUBE_POD_MAX       254
#define KUBE_CONTAINER_MAX 64
#define KUBE_RESOURCE_MAX  254
#define KUBE_DEVICE_ID_MAX 254

/* The extended resource pos advertises (pos-device-plugin --resource) and posd looks for
 * ([kubernetes] resource), unless told another. */
#define KUBE_DEFAULT_RESOURCE "pos.dev/gpu"

struct kube_device {
    char resource[KUBE_RESOURCE_MAX]; /* e.g. "pos.dev/gpu" */
    char id[KUBE_DEVICE_ID_MAX];      /* one device ID the plugin advertised, e.g. "gpu0-3" */
};

struct kube_container {
    char name[KUBE_CONTAINER_MAX];
    size_t n_devices;
    struct kube_device *devices;
};

struct kube_pod {
    char namespace_[KUBE_NAMESPACE_MAX];
    char name[KUBE_POD_MAX];
    size_t n_containers;
    struct kube_container *containers;
};

struct kube_pod_list {
    size_t n_pods;
    struct kube_pod *pods;
};

/* Asks the pod-resources server at SOCKET_PATH for List, waiting at most TIMEOUT_MS in all
 * (connect, request, reply). On success fills OUT (free it with kube_pod_list_free) and returns
 * 0. On failure returns a negative errno value (-ENOENT: no socket; -ECONNREFUSED; -ETIMEDOUT;
 * -EPROTO: a reply that is not a valid ListPodResourcesResponse or a gRPC status other than OK;
 * -EMSGSIZE: a reply over 16 MiB or a name over its limit) and writes one line saying why into
 * ERR (ERRLEN bytes). Unknown fields in the reply are skipped. Blocking: call it off posd's
 * loop. */
int kube_podres_list(const char *socket_path, int timeout_ms, struct kube_pod_list *out,
                     char *err, size_t errlen);

void kube_pod_list_free(struct kube_pod_list *l);

#endif
