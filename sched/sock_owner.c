/* The owner of a local TCP peer's socket (see sock_owner.h): one SOCK_DIAG_BY_FAMILY request
 * for the exact four-tuple of the peer's socket (its source is our peer address, its
 * destination our local address), answered by the kernel before send returns. */
#include "sched/sock_owner.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int posd_sock_owner_open(void)
{
    int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    return nl < 0 ? -errno : nl;
}

/* The peer socket's id, as the kernel keys it: source PEER, destination LOCAL. Returns its
 * family (an IPv4 peer seen through an IPv6 socket is asked for as IPv4), or -EAFNOSUPPORT. */
static int peer_id(const struct sockaddr_storage *local, const struct sockaddr_storage *peer,
                   struct inet_diag_sockid *id)
{
    memset(id, 0, sizeof *id);
    id->idiag_cookie[0] = id->idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    if (local->ss_family == AF_INET && peer->ss_family == AF_INET) {
        const struct sockaddr_in *l = (const struct sockaddr_in *)local;
        const struct sockaddr_in *p = (const struct sockaddr_in *)peer;
        id->idiag_sport = p->sin_port;
        id->idiag_dport = l->sin_port;
        id->idiag_src[0] = p->sin_addr.s_addr;
        id->idiag_dst[0] = l->sin_addr.s_addr;
        return AF_INET;
    }
    if (local->ss_family != AF_INET6 || peer->ss_family != AF_INET6)
        return -EAFNOSUPPORT;
    const struct sockaddr_in6 *l = (const struct sockaddr_in6 *)local;
    const struct sockaddr_in6 *p = (const struct sockaddr_in6 *)peer;
    id->idiag_sport = p->sin6_port;
    id->idiag_dport = l->sin6_port;
    if (IN6_IS_ADDR_V4MAPPED(&p->sin6_addr) && IN6_IS_ADDR_V4MAPPED(&l->sin6_addr)) {
        memcpy(&id->idiag_src[0], &p->sin6_addr.s6_addr[12], 4);
        memcpy(&id->idiag_dst[0], &l->sin6_addr.s6_addr[12], 4);
        return AF_INET;
    }
    memcpy(id->idiag_src, &p->sin6_addr, sizeof p->sin6_addr);
    memcpy(id->idiag_dst, &l->sin6_addr, sizeof l->sin6_addr);
    return AF_INET6;
}

int posd_sock_owner_of_peer(int nl, int conn, uid_t *uid)
{
    struct sockaddr_storage local = {0}, peer = {0}; /* filled by the calls below */
    socklen_t llen = sizeof local, plen = sizeof peer;
    if (getsockname(conn, (struct sockaddr *)&local, &llen) < 0 ||
        getpeername(conn, (struct sockaddr *)&peer, &plen) < 0)
        return errno == ENOTCONN ? -ECONNRESET : -errno;
    static uint32_t seq;
    struct {
        struct nlmsghdr h;
        struct inet_diag_req_v2 r;
    } q = {.h = {.nlmsg_len = sizeof q,
                 .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                 .nlmsg_flags = NLM_F_REQUEST,
                 .nlmsg_seq = ++seq},
           .r = {.sdiag_protocol = IPPROTO_TCP, .idiag_states = ~0u}};
    int family = peer_id(&local, &peer, &q.r.id);
    if (family < 0)
        return family;
    q.r.sdiag_family = (uint8_t)family;
    if (send(nl, &q, sizeof q, 0) != (ssize_t)sizeof q)
        return -errno;
    /* the kernel has answered by now: a reply of an earlier request that failed half-way is
     * skipped by its sequence number */
    for (;;) {
        _Alignas(struct nlmsghdr) char buf[1024];
        ssize_t n = recv(nl, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0)
            return -errno;
        const struct nlmsghdr *h = (const struct nlmsghdr *)buf;
        if (!NLMSG_OK(h, (size_t)n))
            return -EPROTO;
        if (h->nlmsg_seq != q.h.nlmsg_seq)
            continue;
        if (h->nlmsg_type == NLMSG_ERROR) {
            const struct nlmsgerr *e = NLMSG_DATA(h);
            return h->nlmsg_len >= NLMSG_LENGTH(sizeof *e) && e->error ? e->error : -EPROTO;
        }
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
            h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
            return -EPROTO;
        const struct inet_diag_msg *m = NLMSG_DATA(h);
        /* no inode: the peer closed its socket (an orphan in FIN_WAIT or TIME_WAIT) */
        if (m->idiag_inode == 0)
            return -ECONNRESET;
        *uid = m->idiag_uid;
        return 0;
    }
}
