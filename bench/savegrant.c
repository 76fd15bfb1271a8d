/* A client that waits for each grant, for bench/saves.sh: registers with posd on SOCKET, then
 * for SECONDS asks for one grant every PACE_US microseconds (client_grant_wait: a kernel
 * submitted, posd kicked, a spin until it is granted) and writes one line per request to OUT:
 * when it was asked (CLOCK_MONOTONIC seconds) and how long the grant took (-1: none within a
 * second).
 *   savegrant SOCKET SECONDS PACE_US OUT */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/integration/client.h"

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: savegrant SOCKET SECONDS PACE_US OUT\n");
        return 2;
    }
    double seconds = atof(argv[2]);
    useconds_t pace = (useconds_t)atoi(argv[3]);
    FILE *out = fopen(argv[4], "w");
    struct client c;
    if (!out || client_register(argv[1], &c) < 0) {
        fprintf(stderr, "savegrant: cannot %s\n", out ? "register with posd" : "open OUT");
        return 1;
    }
    uint64_t seq = 0, done = 0;
    double end = client_clock() + seconds;
    while (client_clock() < end) {
        double t0 = client_clock();
        double w = client_grant_wait(&c, &seq, &done, 1.0);
        fprintf(out, "%.6f %.7f\n", t0, w);
        usleep(pace);
    }
    client_close(&c);
    return fclose(out) == 0 ? 0 : 1;
}
