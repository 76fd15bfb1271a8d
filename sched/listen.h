/* listen.c: posd's listening socket */
#ifndef POS_SCHED_LISTEN_H
#define POS_SCHED_LISTEN_H

#include "sched/posd.h"

/* Listens on d->socket_path (its directory made; a dead posd's socket there removed, anything
 * else left and said). Returns 0 or a negative errno (logged). */
int posd_listen(struct posd *d);
/* At exit: the socket closed and its path removed. */
void posd_unlink_socket(struct posd *d);

#endif
