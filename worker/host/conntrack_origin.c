/*
 * conntrack_origin.c: conntrack_origin.h over libmnl: one IPCTNL_MSG_CT_GET by the reply tuple,
 * and the original tuple's destination read from the answer.
 */
#include "host/conntrack_origin.h"

#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void put_tuple(struct nlmsghdr *nlh, uint16_t type, struct in_addr src, uint16_t sport,
                      struct in_addr dst, uint16_t dport)
{
    struct nlattr *t = mnl_attr_nest_start(nlh, type);
    struct nlattr *ip = mnl_attr_nest_start(nlh, CTA_TUPLE_IP);
    mnl_attr_put_u32(nlh, CTA_IP_V4_SRC, src.s_addr);
    mnl_attr_put_u32(nlh, CTA_IP_V4_DST, dst.s_addr);
    mnl_attr_nest_end(nlh, ip);
    struct nlattr *proto = mnl_attr_nest_start(nlh, CTA_TUPLE_PROTO);
    mnl_attr_put_u8(nlh, CTA_PROTO_NUM, IPPROTO_UDP);
    mnl_attr_put_u16(nlh, CTA_PROTO_SRC_PORT, htons(sport));
    mnl_attr_put_u16(nlh, CTA_PROTO_DST_PORT, htons(dport));
    mnl_attr_nest_end(nlh, proto);
    mnl_attr_nest_end(nlh, t);
}

struct origin {
    struct in_addr dst;
    bool found;
};

/* The nested attribute of the given type inside a, or NULL. */
static const struct nlattr *nested(const struct nlattr *a, uint16_t type)
{
    const struct nlattr *n;
    mnl_attr_for_each_nested(n, a)
    {
        if (mnl_attr_get_type(n) == type)
            return n;
    }
    return NULL;
}

static int on_attr(const struct nlattr *a, void *data)
{
    struct origin *o = data;
    if (mnl_attr_get_type(a) != CTA_TUPLE_ORIG)
        return MNL_CB_OK;
    const struct nlattr *ip = nested(a, CTA_TUPLE_IP);
    const struct nlattr *dst = ip ? nested(ip, CTA_IP_V4_DST) : NULL;
    if (dst && mnl_attr_get_payload_len(dst) == 4) {
        memcpy(&o->dst.s_addr, mnl_attr_get_payload(dst), 4);
        o->found = true;
    }
    return MNL_CB_OK;
}

static int on_msg(const struct nlmsghdr *nlh, void *data)
{
    return mnl_attr_parse(nlh, sizeof(struct nfgenmsg), on_attr, data);
}

int conntrack_udp_original_dst(struct in_addr local, uint16_t local_port, struct in_addr peer,
                               uint16_t peer_port, struct in_addr *orig_dst)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    unsigned seq = (unsigned)time(NULL);
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET;
    nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK; /* the ACK ends the exchange */
    nlh->nlmsg_seq = seq;
    struct nfgenmsg *g = mnl_nlmsg_put_extra_header(nlh, sizeof *g);
    g->nfgen_family = AF_INET;
    g->version = NFNETLINK_V0;
    g->res_id = 0;
    put_tuple(nlh, CTA_TUPLE_REPLY, local, local_port, peer, peer_port);

    struct mnl_socket *nl = mnl_socket_open(NETLINK_NETFILTER);
    if (!nl)
        return -1;
    int rc = -1;
    struct origin o = {.found = false};
    if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) == 0 &&
        mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) >= 0) {
        unsigned portid = mnl_socket_get_portid(nl);
        for (;;) { /* buf is reused for the answer: nlh is not read again */
            ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof buf);
            if (n <= 0)
                break;
            int r = mnl_cb_run(buf, (size_t)n, seq, portid, on_msg, &o);
            if (r <= MNL_CB_STOP) {
                rc = r == MNL_CB_STOP ? 0 : -1;
                break;
            }
        }
    }
    int saved = errno;
    mnl_socket_close(nl);
    if (rc == 0 && o.found) {
        *orig_dst = o.dst;
        return 0;
    }
    errno = rc == 0 ? ENOENT : saved;
    return -1;
}
