/* possim: a virtual-time discrete-event simulator of pos. It runs a scenario's clients (model
 * workloads, arrival processes, classes) through the very same scheduling core, policies and
 * virtual-GPU model as posd and the simulated driver, with a model of what posd learns and
 * when, and prints per-client latency and throughput. Usage and semantics: docs/possim.md. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/possim_scenario.h"
#include "tools/possim_search.h"
#include "tools/possim_sim.h"
#include "tools/possim_train.h"
#include "tools/timeline.h"

static const char usage_text[] =
    "usage: possim [-o text|json] [--seed N] [--timeline FILE] [--profiles-out FILE]\n"
    "              [--profile-check] SCENARIO\n"
    "       possim search [options] SCENARIO   (a static stage schedule: possim search -h)\n"
    "       possim train [options] CURRICULUM  (policy learned's network: possim train -h)\n"
    "Simulates the clients of SCENARIO on one virtual GPU in virtual time, through posd's own\n"
    "scheduling core and policies (or none), and prints per-client latency and throughput\n"
    "(docs/possim.md). The same scenario and seed give the same output, except the last\n"
    "line or key: the simulator's own speed.\n"
    "  -o, --output text|json  a table with '#' header lines (default), or one JSON object\n"
    "  --seed N                run seed (default 1): each client's arrival seed is its seed\n"
    "                          + N - 1; the collector's poll delays are drawn from N\n"
    "  --timeline FILE         also write what ran where as a Chrome trace-event JSON file\n"
    "                          (Perfetto, chrome://tracing): a track per client, a slice per\n"
    "                          op on the virtual device, requests as enclosing slices\n"
    "  --profiles-out FILE     save the kernel profiles the core learnt (docs/policy.md)\n"
    "  --profile-check         list every kernel of every client: the profile learnt against\n"
    "                          the device model's own solo duration (kcheck lines)\n"
    "  -h, --help              this text\n"
    "Exit status: 0, 1 when the run fails, 2 for a bad option or scenario (FILE:LINE: what).\n"
    "\n";

static int write_timeline(struct timeline *tl, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "cannot write the timeline %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = timeline_write(tl, f, 0);
    if (fclose(f) != 0 || rc < 0) {
        snprintf(err, errlen, "cannot write the timeline %s: %s", path,
                 rc == -ENOMEM ? "out of memory" : strerror(errno));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"seed", required_argument, NULL, 's'},
        {"timeline", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {"profiles-out", required_argument, NULL, 'P'},
        {"profile-check", no_argument, NULL, 'K'},
        {NULL, 0, NULL, 0},
    };
    if (argc > 1 && strcmp(argv[1], "search") == 0)
        return possim_search_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "train") == 0)
        return possim_train_main(argc - 1, argv + 1);
    int json = 0, c, check = 0;
    const char *prof_out = NULL;
    const char *timeline_path = NULL;
    uint64_t seed = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            if (strcmp(optarg, "json") == 0)
                json = 1;
            else if (strcmp(optarg, "text") == 0)
                json = 0;
            else {
                fprintf(stderr, "possim: bad -o '%s' (want text or json)\n", optarg);
                return 2;
            }
            break;
        case 's':
            if (possim_parse_u64(optarg, &seed) < 0) {
                fprintf(stderr, "possim: bad --seed '%s' (want an integer >= 0)\n", optarg);
                return 2;
            }
            break;
        case 'P':
            if (!*optarg || strlen(optarg) >= POSSIM_PATH_MAX) {
                fprintf(stderr, "possim: bad --profiles-out '%s'\n", optarg);
                return 2;
            }
            prof_out = optarg;
            break;
        case 'K':
            check = 1;
            break;
        case 't':
            timeline_path = optarg;
            break;
        case 'h':
            fputs(usage_text, stdout);
            possim_scenario_usage(stdout);
            return 0;
        case ':':
            fprintf(stderr, "possim: option '%s' needs a value (see --help)\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "possim: bad option '%s' (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "possim: %s (see --help)\n",
                optind < argc ? "one scenario file, please" : "no scenario file given");
        return 2;
    }
    struct possim_scenario *sc = calloc(1, sizeof *sc);
    struct possim_result *r = calloc(1, sizeof *r);
    if (!sc || !r) {
        fprintf(stderr, "possim: out of memory\n");
        free(r);
        free(sc);
        return 1;
    }
    char err[1024];
    if (possim_scenario_load(argv[optind], sc, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        free(r);
        free(sc);
        return 2;
    }
    if (prof_out)
        snprintf(sc->profiles_out, sizeof sc->profiles_out, "%s", prof_out);
    sc->profile_check = check;
    struct timeline tl;
    timeline_init(&tl);
    double t0 = possim_cpu_seconds();
    int rc = possim_run_timeline(sc, seed, r, timeline_path ? &tl : NULL, err, sizeof err);
    double cpu = possim_cpu_seconds() - t0;
    if (rc == 0 && timeline_path && write_timeline(&tl, timeline_path, err, sizeof err) < 0)
        rc = -EIO;
    timeline_free(&tl);
    if (rc < 0) {
        fprintf(stderr, "possim: %s\n", err);
        possim_result_free(r);
        free(r);
        free(sc);
        return 1;
    }
    if (cpu <= 0)
        cpu = 1e-9;
    if (json)
        possim_write_json(stdout, sc, r, cpu);
    else
        possim_write_text(stdout, sc, r, cpu);
    possim_result_free(r);
    free(r);
    free(sc);
    return fflush(stdout) == 0 ? 0 : 1;
}
