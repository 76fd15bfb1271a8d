/* libFuzzer target: posd's configuration parser (sched/config.c over sched/ini_lines.c), on
 * one main file (no drop-ins). Checks that a file it accepts leaves a configuration whose
 * default class exists and whose every rule names a class, and that a refusal says
 * FILE:LINE. Then matches an identity against the rules, as posd does for every client. */
#include <assert.h>
#include <string.h>

#include "memfile.h"
#include "sched/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = memfile(data, size);
    struct posd_config c;
    char err[512] = "";
    posd_config_defaults(&c);
    int rc = posd_config_load(path, 0, "/nonexistent/pos-fuzz-dropins", &c, err, sizeof err);
    if (rc == 0) {
        assert(posd_config_class(&c, c.default_class));
        struct posd_identity id = {.pid = 1, .uid = 1000, .gid = 1000};
        strcpy(id.app, "fuzz");
        strcpy(id.exe, "/usr/bin/fuzz");
        strcpy(id.cgroup, "/user.slice/fuzz.scope");
        struct posd_client_policy pol;
        posd_config_match(&c, &id, &pol);
        assert(posd_config_class(&c, pol.class_name));
    } else {
        assert(strncmp(err, path, strlen(path)) == 0);
    }
    posd_config_free(&c);
    return 0;
}
