/* Who holds the other end of a TCP connection that was accepted here, when that end is on this
 * host: the kernel's word (NETLINK_SOCK_DIAG, the peer socket's owner uid), since every local
 * peer has the same address (127.0.0.1) and only its owner tells one local user from another.
 * Used by the metrics endpoint to give each local user a connection limit of its own. */
#ifndef POS_SCHED_SOCK_OWNER_H
#define POS_SCHED_SOCK_OWNER_H

#include <sys/types.h>

/* A NETLINK_SOCK_DIAG socket to ask with, or -errno (a kernel without sock_diag). */
int posd_sock_owner_open(void);

/* The uid owning the peer socket of CONN (an accepted TCP socket), asked on NL. Returns 0 with
 * *UID; -ENOENT when the peer socket is not on this host (a remote peer, another network
 * namespace), so that only its address can be counted; -ECONNRESET when the peer has already
 * closed its socket (the kernel no longer knows its owner, and the connection has nothing more
 * to say); another -errno when the kernel could not answer. */
int posd_sock_owner_of_peer(int nl, int conn, uid_t *uid);

#endif
