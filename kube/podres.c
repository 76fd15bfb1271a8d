/* The kubelet's pod-resources List (see podres.h): one unary call through kube/grpc.c, and the
 * reply copied into posd's fixed-size structures, every name checked against its limit. */
#include "podres.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc.h"
#include "podresources_v1.pb-c.h"

#define PODRES_REPLY_MAX (16u << 20)
#define PODRES_LIST      "/v1.PodResourcesLister/List"

/* One line saying that N WHAT could not be allocated; -ENOMEM. */
static int no_memory(char *err, size_t errlen, size_t n, const char *what)
{
    if (err && errlen)
        snprintf(err, errlen, "out of memory for %zu %s", n, what);
    return -ENOMEM;
}

/* Copies the name SRC (WHAT, for the message) into DST of CAP bytes: -EMSGSIZE when it does not
 * fit (refused, never cut). */
static int copy_name(char *dst, size_t cap, const char *src, const char *what, char *err,
                     size_t errlen)
{
    size_t n = strlen(src);
    if (n >= cap) {
        if (err && errlen)
            snprintf(err, errlen, "a %s of %zu bytes in the pod-resources reply (at most %zu)",
                     what, n, cap - 1);
        return -EMSGSIZE;
    }
    memcpy(dst, src, n + 1);
    return 0;
}

static int copy_container(struct kube_container *dst, const V1__ContainerResources *src,
                          char *err, size_t errlen)
{
    int rc = copy_name(dst->name, sizeof dst->name, src->name, "container name", err, errlen);
    if (rc < 0)
        return rc;
    size_t n = 0;
    for (size_t i = 0; i < src->n_devices; i++)
        n += src->devices[i]->n_device_ids;
    dst->devices = n ? calloc(n, sizeof *dst->devices) : NULL;
    if (n && !dst->devices)
        return no_memory(err, errlen, n, "devices");
    for (size_t i = 0; i < src->n_devices; i++) {
        const V1__ContainerDevices *d = src->devices[i];
        for (size_t j = 0; j < d->n_device_ids && dst->n_devices < n; j++) {
            struct kube_device *o = &dst->devices[dst->n_devices++];
            if ((rc = copy_name(o->resource, sizeof o->resource, d->resource_name,
                                "resource name", err, errlen)) < 0 ||
                (rc = copy_name(o->id, sizeof o->id, d->device_ids[j], "device ID", err,
                                errlen)) < 0)
                return rc;
        }
    }
    return 0;
}

static int copy_pod(struct kube_pod *dst, const V1__PodResources *src, char *err, size_t errlen)
{
    int rc;
    if ((rc = copy_name(dst->namespace_, sizeof dst->namespace_, src->namespace_, "namespace",
                        err, errlen)) < 0 ||
        (rc = copy_name(dst->name, sizeof dst->name, src->name, "pod name", err, errlen)) < 0)
        return rc;
    dst->containers = src->n_containers ? calloc(src->n_containers, sizeof *dst->containers)
                                        : NULL;
    if (src->n_containers && !dst->containers)
        return no_memory(err, errlen, src->n_containers, "containers");
    for (size_t i = 0; i < src->n_containers; i++) {
        dst->n_containers++;
        if ((rc = copy_container(&dst->containers[i], src->containers[i], err, errlen)) < 0)
            return rc;
    }
    return 0;
}

int kube_podres_list(const char *socket_path, int timeout_ms, struct kube_pod_list *out,
                     char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    V1__ListPodResourcesRequest req = V1__LIST_POD_RESOURCES_REQUEST__INIT;
    ProtobufCMessage *m = NULL;
    int rc = kube_grpc_call(socket_path, PODRES_LIST, &req.base,
                            &v1__list_pod_resources_response__descriptor, PODRES_REPLY_MAX,
                            timeout_ms, &m, NULL, err, errlen);
    if (rc < 0)
        return rc;
    const V1__ListPodResourcesResponse *r = (const V1__ListPodResourcesResponse *)m;
    out->pods = r->n_pod_resources ? calloc(r->n_pod_resources, sizeof *out->pods) : NULL;
    if (r->n_pod_resources && !out->pods)
        rc = no_memory(err, errlen, r->n_pod_resources, "pods");
    for (size_t i = 0; rc == 0 && i < r->n_pod_resources; i++) {
        out->n_pods++;
        rc = copy_pod(&out->pods[i], r->pod_resources[i], err, errlen);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    if (rc < 0)
        kube_pod_list_free(out);
    return rc;
}

void kube_pod_list_free(struct kube_pod_list *l)
{
    for (size_t i = 0; i < l->n_pods; i++) {
        for (size_t j = 0; j < l->pods[i].n_containers; j++)
            free(l->pods[i].containers[j].devices);
        free(l->pods[i].containers);
    }
    free(l->pods);
    memset(l, 0, sizeof *l);
}
