/* The client side of posd's protocol (include/pos/proto.h) for the tools and the tests:
 * connecting to posd's socket with one-line errors that say what to do, sending a request,
 * receiving and checking a reply (magic, protocol version, length, REJECT), and the STATS and
 * CONTROL exchanges. posstat, posctl and the integration tests speak to posd through it; the
 * shim keeps its own code (its registration carries descriptors and runs inside the
 * application). Every function returns 0 or a negative errno and fills ERR with one line
 * (no program name, no newline) on error. */
#ifndef POS_TOOLS_POSCLIENT_H
#define POS_TOOLS_POSCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "pos/proto.h"

#define POSCLIENT_TIMEOUT_S 5 /* a posd that takes longer to answer is wedged: say so */

struct posclient {
    int fd;
    char path[108];
};

/* The socket a tool uses when none is given: $POS_SOCKET when set and not empty, else
 * POS_DEFAULT_SOCKET. */
const char *posclient_default_socket(void);

/* Formats FMT into ERR (ERRLEN bytes) and returns RC: how the tools say what went wrong. */
int posclient_fail(int rc, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Whether posd's fixed-size text field S (SIZE bytes) holds its terminating NUL. */
int posclient_terminated(const char *s, size_t size);
/* Copies posd's words SRC into DST (DSTLEN bytes) for a person to read: anything but
 * printable ASCII becomes '?'. */
void posclient_printable(char *dst, size_t dstlen, const char *src);

/* Connects to posd at PATH (replies wait at most TIMEOUT_S seconds; 0: POSCLIENT_TIMEOUT_S).
 * Errors name the socket and the remedy: -ENOENT (no posd there: start it or give its
 * socket), -ECONNREFUSED (a dead posd's socket), -EACCES (this user may not open it), -EAGAIN
 * (posd does not accept), -ENAMETOOLONG. */
int posclient_connect(struct posclient *c, const char *path, int timeout_s, char *err,
                      size_t errlen);
void posclient_close(struct posclient *c);

/* Checks a received message MSG of LEN bytes (header included): posd's magic, this protocol
 * version (another one says which tool to use), the length, and type WANT. A REJECT becomes
 * -ECONNREFUSED with posd's reason (made printable); anything else wrong is -EPROTO. On
 * success *BODY and *BODY_LEN give what follows the header. Pure: the unit tests drive it. */
int posclient_check_msg(const void *msg, size_t len, int want, const void **body, size_t *body_len,
                        char *err, size_t errlen);

/* Sends one message of TYPE with BODY (LEN bytes) and receives posd's reply into BUF (CAP
 * bytes, at least POS_MSG_MAX for STATS), unchecked. Returns 0 with the reply's length in
 * *GOT. */
int posclient_exchange(struct posclient *c, int type, const void *body, size_t len, void *buf,
                       size_t cap, size_t *got, char *err, size_t errlen);

/* One STATS request; the whole reply message (header included) in BUF (CAP >= POS_MSG_MAX),
 * its header checked; the body's contents are the caller's to check (posstat_parse_reply). */
int posclient_stats(struct posclient *c, void *buf, size_t cap, size_t *got, char *err,
                    size_t errlen);

/* One CONTROL request. Returns 0 when posd did it, its refusal (a negative errno: -EPERM,
 * -ESRCH, -EINVAL, ...) otherwise; either way posd's one-line answer is in ERR (success too),
 * and *REP (may be NULL) holds the reply. */
int posclient_control(struct posclient *c, const struct pos_control *req,
                      struct pos_control_reply *rep, char *err, size_t errlen);

#endif
