/* wire.c: decoding a peer's message */
#ifndef POS_SCHED_WIRE_H
#define POS_SCHED_WIRE_H

#include "sched/posd.h"

enum posd_msg_verdict {
    POSD_MSG_OK,
    POSD_MSG_OVERSIZED, /* longer than POS_REQ_MAX */
    POSD_MSG_SHORT,     /* shorter than a header */
    POSD_MSG_FOREIGN,   /* another magic or version */
    POSD_MSG_LENGTH,    /* the header's length is not the message's */
    POSD_MSG_BAD_BODY,  /* a body of the wrong size for its type */
    POSD_MSG_UNKNOWN,   /* a type posd does not take */
};
struct posd_msg {
    struct pos_msg_hdr hdr; /* a copy: valid unless SHORT or OVERSIZED */
    const uint8_t *body;    /* into the buffer decoded; NULL unless the length is right */
    size_t body_len;
    struct pos_hello hello; /* HELLO's body, copied */
};
/* Decodes the LEN bytes at BUF into M. Returns an enum posd_msg_verdict. A NAMES body is
 * checked by posd_names_message (names.c), which keeps the client's keys. */
int posd_msg_decode(const uint8_t *buf, size_t len, struct posd_msg *m);

#endif
