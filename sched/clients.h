/* clients.c: registration and teardown */
#ifndef POS_SCHED_CLIENTS_H
#define POS_SCHED_CLIENTS_H

#include "sched/posd.h"

/* A new peer on SOCK, or NULL when it was refused (table full, its uid over its cap; SOCK is
 * then closed). */
struct posd_client *posd_client_new(struct posd *d, int sock);
void posd_client_close(struct posd *d, struct posd_client *c, const char *why);
/* Closes the connections past their deadline (POSD_REGISTER_NS). Returns the earliest deadline
 * left, or 0 when none is. */
int64_t posd_clients_expire(struct posd *d, int64_t now);
/* C said HELLO: who it is read from /proc, its rules matched, its shared memory and kick
 * eventfd made and sent (WELCOME), or a REJECT it can read. Returns 0, or a negative errno
 * value to drop C (a refused or failed registration's reason). */
int posd_client_register(struct posd *d, struct posd_client *c, const struct pos_hello *h);
/* Sends C a REJECT with REASON (the shim prints it). */
void posd_client_reject(struct posd_client *c, const char *reason);
/* posd's decision: every client's rings read (posd_engine_read), a client that broke the
 * protocol closed, the core's decision published (posd_engine_decide). Returns the delay in
 * ns until the next tick is wanted, or -1 when nothing needs one (idle). */
int64_t posd_clients_tick(struct posd *d);
/* Closes the clients a part below this file asked to close (posd_client_ask_close): called by
 * the loop once that part has returned. */
void posd_clients_close_asked(struct posd *d);
/* Looks up the group whose members see every client in STATS (POSD_STATS_GROUP), at start
 * and at every reload. */
void posd_lookup_stats_group(struct posd *d);
/* Re-applies the configuration to every client (after SIGHUP). */
void posd_clients_reconfigure(struct posd *d);
/* The pod resolver has a new table (sched/pod.h; a posd_loop_watch function on its eventfd):
 * clients whose pod names changed are matched against the rules again, as on a reload (one
 * posctl changed keeps its settings), and logged. */
int64_t posd_clients_pod_news(struct posd *d, int fd, void *arg);
/* Root, or a member of POSD_STATS_GROUP (its groups as the kernel recorded them at connect):
 * sees every client in STATS and may change posd (CONTROL). */
int posd_peer_privileged(const struct posd *d, const struct posd_client *c);
/* Sends C one message of TYPE with BODY (LEN bytes). Returns 0 or -1. */
int posd_client_send(struct posd_client *c, int type, const void *body, size_t len);

#endif
