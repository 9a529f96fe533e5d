/*
 * links_conntrack.c: conntrack over netlink (links_internal.h): the connections a Sandbox's NFS
 * Workspace leaves behind when it is detached are ended, so none outlives the detach; and the
 * connections a Sandbox opened to the world before its App's egress policy narrowed are ended,
 * so none outlives the change (the firewall accepts established flows before any policy rule).
 */
#include "host/links_internal.h"

#include "clock.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/if_link.h>
#include <linux/if_tun.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- conntrack: connections that outlive an NFS detach ---- */

struct ct_tuple {
    uint32_t src, dst; /* network order */
    uint16_t sport, dport;
    uint8_t proto;
};

struct ct_scan {
    struct in_addr from;
    uint16_t dport;        /* network order; 0: any destination but `except` */
    struct in_addr except; /* with dport 0: the host's side of the link, whose flows are kept */
    struct ct_tuple v[256];
    size_t n;
};

static int nested_cb(const struct nlattr *a, void *data)
{
    const struct nlattr **tb = data;
    if (mnl_attr_get_type(a) < 8)
        tb[mnl_attr_get_type(a)] = a;
    return MNL_CB_OK;
}

static bool ct_parse_tuple(const struct nlattr *orig, struct ct_tuple *t)
{
    const struct nlattr *tup[8] = {0}, *ip[8] = {0}, *proto[8] = {0};
    mnl_attr_parse_nested(orig, nested_cb, tup);
    if (!tup[CTA_TUPLE_IP] || !tup[CTA_TUPLE_PROTO])
        return false;
    mnl_attr_parse_nested(tup[CTA_TUPLE_IP], nested_cb, ip);
    mnl_attr_parse_nested(tup[CTA_TUPLE_PROTO], nested_cb, proto);
    if (!ip[CTA_IP_V4_SRC] || !ip[CTA_IP_V4_DST] || !proto[CTA_PROTO_NUM] ||
        !proto[CTA_PROTO_SRC_PORT] || !proto[CTA_PROTO_DST_PORT])
        return false;
    t->src = mnl_attr_get_u32(ip[CTA_IP_V4_SRC]);
    t->dst = mnl_attr_get_u32(ip[CTA_IP_V4_DST]);
    t->proto = mnl_attr_get_u8(proto[CTA_PROTO_NUM]);
    t->sport = mnl_attr_get_u16(proto[CTA_PROTO_SRC_PORT]);
    t->dport = mnl_attr_get_u16(proto[CTA_PROTO_DST_PORT]);
    return true;
}

static int ct_scan_cb(const struct nlmsghdr *nlh, void *data)
{
    struct ct_scan *scan = data;
    const struct nlattr *a;
    mnl_attr_for_each(a, nlh, sizeof(struct nfgenmsg))
    {
        struct ct_tuple t;
        if (mnl_attr_get_type(a) != CTA_TUPLE_ORIG || !ct_parse_tuple(a, &t))
            continue;
        bool hit = scan->dport ? t.proto == IPPROTO_TCP && t.dport == scan->dport
                               : t.dst != scan->except.s_addr;
        if (t.src == scan->from.s_addr && hit && scan->n < sizeof(scan->v) / sizeof(scan->v[0]))
            scan->v[scan->n++] = t;
    }
    return MNL_CB_OK;
}

static struct nlmsghdr *ct_msg(struct rtnl *r, char *buf, uint16_t type, uint16_t flags)
{
    struct nlmsghdr *nlh = rtnl_msg(r, buf, (uint16_t)((NFNL_SUBSYS_CTNETLINK << 8) | type), flags);
    struct nfgenmsg *nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
    nfg->nfgen_family = AF_INET;
    nfg->version = NFNETLINK_V0;
    return nlh;
}

/* Deletes each flow of scan->v by its original tuple. */
static int ct_delete_all(struct rtnl *r, char *buf, const struct ct_scan *scan)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < scan->n; i++) {
        struct nlmsghdr *nlh = ct_msg(r, buf, IPCTNL_MSG_CT_DELETE, NLM_F_ACK);
        struct nlattr *orig = mnl_attr_nest_start(nlh, CTA_TUPLE_ORIG);
        struct nlattr *ip = mnl_attr_nest_start(nlh, CTA_TUPLE_IP);
        mnl_attr_put_u32(nlh, CTA_IP_V4_SRC, scan->v[i].src);
        mnl_attr_put_u32(nlh, CTA_IP_V4_DST, scan->v[i].dst);
        mnl_attr_nest_end(nlh, ip);
        struct nlattr *proto = mnl_attr_nest_start(nlh, CTA_TUPLE_PROTO);
        mnl_attr_put_u8(nlh, CTA_PROTO_NUM, scan->v[i].proto);
        mnl_attr_put_u16(nlh, CTA_PROTO_SRC_PORT, scan->v[i].sport);
        mnl_attr_put_u16(nlh, CTA_PROTO_DST_PORT, scan->v[i].dport);
        mnl_attr_nest_end(nlh, proto);
        mnl_attr_nest_end(nlh, orig);
        rc = rtnl_talk(r, nlh, NULL, NULL);
        if (rc == -ENOENT)
            rc = 0; /* ended meanwhile */
    }
    return rc;
}

/* Deletes the flows scan matches: a dump, then one delete per flow; again while a dump filled the
 * array (more may be left), up to a bound. Takes scan. */
static int ct_drop(struct ct_scan *scan, char *err, size_t errlen)
{
    struct rtnl r;
    if (!scan)
        return fail(err, errlen, "out of memory");
    r.nl = mnl_socket_open(NETLINK_NETFILTER);
    if (!r.nl || mnl_socket_bind(r.nl, 0, MNL_SOCKET_AUTOPID) < 0) {
        int e = errno;
        if (r.nl)
            mnl_socket_close(r.nl);
        free(scan);
        return fail(err, errlen, "conntrack socket: %s", strerror(e));
    }
    r.portid = mnl_socket_get_portid(r.nl);
    r.seq = (uint32_t)time(NULL);
    char buf[MNL_SOCKET_BUFFER_SIZE];
    int rc = 0;
    for (int round = 0; rc == 0 && round < 64; round++) {
        scan->n = 0;
        rc = rtnl_talk(&r, ct_msg(&r, buf, IPCTNL_MSG_CT_GET, NLM_F_DUMP), ct_scan_cb, scan);
        if (rc == 0)
            rc = ct_delete_all(&r, buf, scan);
        if (scan->n < sizeof(scan->v) / sizeof(scan->v[0]))
            break;
    }
    free(scan);
    rtnl_close(&r);
    return rc == 0 ? 0 : fail(err, errlen, "conntrack: %s", strerror(-rc));
}

/* Ends the Sandbox's TCP connections to the host's port 2049: the rule only refuses new ones, and
 * an NFS connection that outlived its detach would keep the host's NFS server reachable. */
int conntrack_drop_nfs(struct in_addr from, char *err, size_t errlen)
{
    struct ct_scan *scan = calloc(1, sizeof(*scan));
    if (scan) {
        scan->from = from;
        scan->dport = htons(2049);
    }
    return ct_drop(scan, err, errlen);
}

int conntrack_drop_egress(struct in_addr from, struct in_addr host, char *err, size_t errlen)
{
    struct ct_scan *scan = calloc(1, sizeof(*scan));
    if (scan) {
        scan->from = from;
        scan->except = host;
    }
    return ct_drop(scan, err, errlen);
}
