/* libFuzzer target: the parsers of pod identity (sched/pod_cgroup.c, sched/pod_names.c) on
 * hostile bytes. The input is read both as a /proc/PID/cgroup file and as the device manager's
 * checkpoint: a pod found has a valid UID and a container ID of hex digits, a checkpoint
 * accepted has entries with valid UIDs and NUL-terminated names, and a join of what it gave
 * with an empty table stays within its bounds. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "sched/pod.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    struct posd_pod_ref ref;
    char bad[POSD_PATH_MAX];
    if (posd_pod_from_cgroup(text, &ref, bad, sizeof bad) == 1) {
        assert(posd_pod_uid_valid(ref.uid));
        assert(strspn(ref.container_id, "0123456789abcdef") == strlen(ref.container_id));
    }
    struct posd_pod_checkpoint ck;
    if (posd_pod_checkpoint_parse(text, size, &ck) == 0) {
        for (size_t i = 0; i < ck.n; i++) {
            assert(posd_pod_uid_valid(ck.e[i].uid));
            assert(memchr(ck.e[i].container, '\0', sizeof ck.e[i].container));
        }
        struct posd_pod_table t = {0};
        if (posd_pod_join(&t, &ck, NULL, "pos.dev/gpu") == 0)
            assert(t.npods == 0); /* without a List, the checkpoint names no pod */
        posd_pod_table_free(&t);
        posd_pod_checkpoint_free(&ck);
    }
    free(text);
    return 0;
}
