/*
 * links_rtnl.c: rtnetlink over libmnl for Sandbox links (links_internal.h): a socket, one request
 * and its answers, links, addresses, routes and veth pairs, and a socket inside a Sandbox's
 * network namespace to configure its end.
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

/* ---- rtnetlink ---- */

int rtnl_open(struct rtnl *r, char *err, size_t errlen)
{
    r->nl = mnl_socket_open(NETLINK_ROUTE);
    if (!r->nl || mnl_socket_bind(r->nl, 0, MNL_SOCKET_AUTOPID) < 0) {
        int e = errno;
        if (r->nl)
            mnl_socket_close(r->nl);
        r->nl = NULL;
        return fail(err, errlen, "rtnetlink socket: %s", strerror(e));
    }
    int one = 1;
    mnl_socket_setsockopt(r->nl, NETLINK_CAP_ACK, &one, sizeof(one));
    r->portid = mnl_socket_get_portid(r->nl);
    r->seq = (uint32_t)time(NULL);
    return 0;
}

void rtnl_close(struct rtnl *r)
{
    if (r->nl)
        mnl_socket_close(r->nl);
    r->nl = NULL;
}

struct nlmsghdr *rtnl_msg(struct rtnl *r, char *buf, uint16_t type, uint16_t flags)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = type;
    nlh->nlmsg_flags = NLM_F_REQUEST | flags;
    nlh->nlmsg_seq = ++r->seq;
    return nlh;
}

/* Sends a request and runs cb on the answers until the ack or the end of a dump. Returns 0 or a
 * negative errno (the kernel's answer). */
int rtnl_talk(struct rtnl *r, struct nlmsghdr *nlh, mnl_cb_t cb, void *data)
{
    if (mnl_socket_sendto(r->nl, nlh, nlh->nlmsg_len) < 0)
        return -errno;
    uint32_t seq = nlh->nlmsg_seq;
    char buf[MNL_SOCKET_BUFFER_SIZE];
    for (;;) {
        ssize_t n = mnl_socket_recvfrom(r->nl, buf, sizeof(buf));
        if (n < 0)
            return -errno;
        int ret = mnl_cb_run(buf, (size_t)n, seq, r->portid, cb, data);
        if (ret < 0)
            return -errno;
        if (ret == MNL_CB_STOP)
            return 0;
    }
}

static int link_attr_cb(const struct nlattr *a, void *data)
{
    const struct nlattr **tb = data;
    int type = mnl_attr_get_type(a);
    if (type <= IFLA_MAX)
        tb[type] = a;
    return MNL_CB_OK;
}

static int linkinfo_attr_cb(const struct nlattr *a, void *data)
{
    const struct nlattr **tb = data;
    int type = mnl_attr_get_type(a);
    if (type <= IFLA_INFO_MAX)
        tb[type] = a;
    return MNL_CB_OK;
}

void link_parse(const struct nlmsghdr *nlh, struct link_info *out)
{
    const struct ifinfomsg *ifi = mnl_nlmsg_get_payload(nlh);
    const struct nlattr *tb[IFLA_MAX + 1] = {0};
    mnl_attr_parse(nlh, sizeof(*ifi), link_attr_cb, tb);
    memset(out, 0, sizeof(*out));
    out->ifindex = ifi->ifi_index;
    if (tb[IFLA_IFNAME])
        snprintf(out->name, sizeof(out->name), "%s", mnl_attr_get_str(tb[IFLA_IFNAME]));
    if (tb[IFLA_IFALIAS])
        snprintf(out->alias, sizeof(out->alias), "%s", mnl_attr_get_str(tb[IFLA_IFALIAS]));
    if (tb[IFLA_LINKINFO]) {
        const struct nlattr *info[IFLA_INFO_MAX + 1] = {0};
        mnl_attr_parse_nested(tb[IFLA_LINKINFO], linkinfo_attr_cb, info);
        out->tap =
            info[IFLA_INFO_KIND] && strcmp(mnl_attr_get_str(info[IFLA_INFO_KIND]), "tun") == 0;
    }
}

static int link_get_cb(const struct nlmsghdr *nlh, void *data)
{
    link_parse(nlh, data);
    return MNL_CB_OK;
}

/* 0 with the link's index and alias, or -ENODEV. */
int link_get(struct rtnl *r, const char *name, struct link_info *out)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = rtnl_msg(r, buf, RTM_GETLINK, NLM_F_ACK);
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
    ifi->ifi_family = AF_UNSPEC;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
    memset(out, 0, sizeof(*out));
    out->ifindex = 0;
    int rc = rtnl_talk(r, nlh, link_get_cb, out);
    if (rc == 0 && out->ifindex == 0)
        return -ENODEV;
    return rc;
}

/* Sets the link up, and its alias when alias is not NULL. */
int link_set_up(struct rtnl *r, int ifindex, const char *alias)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = rtnl_msg(r, buf, RTM_NEWLINK, NLM_F_ACK);
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
    ifi->ifi_family = AF_UNSPEC;
    ifi->ifi_index = ifindex;
    ifi->ifi_flags = IFF_UP;
    ifi->ifi_change = IFF_UP;
    if (alias)
        mnl_attr_put_strz(nlh, IFLA_IFALIAS, alias);
    return rtnl_talk(r, nlh, NULL, NULL);
}

int link_del(struct rtnl *r, int ifindex)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = rtnl_msg(r, buf, RTM_DELLINK, NLM_F_ACK);
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
    ifi->ifi_family = AF_UNSPEC;
    ifi->ifi_index = ifindex;
    return rtnl_talk(r, nlh, NULL, NULL);
}

static int addr_add(struct rtnl *r, int ifindex, struct in_addr local, int prefix_len)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = rtnl_msg(r, buf, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK);
    struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
    ifa->ifa_family = AF_INET;
    ifa->ifa_prefixlen = (unsigned char)prefix_len;
    ifa->ifa_scope = RT_SCOPE_UNIVERSE;
    ifa->ifa_index = (unsigned)ifindex;
    mnl_attr_put_u32(nlh, IFA_LOCAL, local.s_addr);
    mnl_attr_put_u32(nlh, IFA_ADDRESS, local.s_addr);
    return rtnl_talk(r, nlh, NULL, NULL);
}

static int route_add_default(struct rtnl *r, int ifindex, struct in_addr gateway)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = rtnl_msg(r, buf, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK);
    struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
    rtm->rtm_family = AF_INET;
    rtm->rtm_dst_len = 0;
    rtm->rtm_table = RT_TABLE_MAIN;
    rtm->rtm_protocol = RTPROT_STATIC;
    rtm->rtm_scope = RT_SCOPE_UNIVERSE;
    rtm->rtm_type = RTN_UNICAST;
    mnl_attr_put_u32(nlh, RTA_GATEWAY, gateway.s_addr);
    mnl_attr_put_u32(nlh, RTA_OIF, (uint32_t)ifindex);
    return rtnl_talk(r, nlh, NULL, NULL);
}

/* RTM_NEWLINK veth: `name` here, `peer` in the namespace of process pid, or of the namespace file
 * descriptor nsfd when nsfd >= 0. */
int veth_add(struct rtnl *r, const char *name, const char *peer, pid_t pid, int nsfd)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = rtnl_msg(r, buf, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK);
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
    ifi->ifi_family = AF_UNSPEC;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
    struct nlattr *linkinfo = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
    mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "veth");
    struct nlattr *data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
    struct nlattr *peer_attr = mnl_attr_nest_start(nlh, VETH_INFO_PEER);
    struct ifinfomsg *pifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*pifi));
    pifi->ifi_family = AF_UNSPEC;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, peer);
    if (nsfd >= 0)
        mnl_attr_put_u32(nlh, IFLA_NET_NS_FD, (uint32_t)nsfd);
    else
        mnl_attr_put_u32(nlh, IFLA_NET_NS_PID, (uint32_t)pid);
    mnl_attr_nest_end(nlh, peer_attr);
    mnl_attr_nest_end(nlh, data);
    mnl_attr_nest_end(nlh, linkinfo);
    return rtnl_talk(r, nlh, NULL, NULL);
}

/* ---- inside a Sandbox's namespace ---- */

struct ns_open {
    pid_t pid;
    struct rtnl rtnl;
    char err[200];
};

/* A netlink socket belongs to the namespace it was created in. setns() changes only the calling
 * thread's namespace, so a short-lived thread enters the Sandbox's, opens the socket and ends:
 * the worker's own threads never leave the host namespace. */
static void *ns_open_thread(void *arg)
{
    struct ns_open *o = arg;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)o->pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fail(o->err, sizeof(o->err), "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (setns(fd, CLONE_NEWNET) < 0) {
        fail(o->err, sizeof(o->err), "setns %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    close(fd);
    rtnl_open(&o->rtnl, o->err, sizeof(o->err));
    return NULL;
}

static int rtnl_open_in(pid_t pid, struct rtnl *out, char *err, size_t errlen)
{
    struct ns_open o = {.pid = pid};
    pthread_t t;
    int rc = pthread_create(&t, NULL, ns_open_thread, &o);
    if (rc != 0)
        return fail(err, errlen, "thread: %s", strerror(rc));
    pthread_join(t, NULL);
    if (!o.rtnl.nl)
        return fail(err, errlen, "Sandbox network namespace: %s", o.err);
    *out = o.rtnl;
    return 0;
}

/* eth0 and lo up, the Sandbox's address on eth0, default route via the host side. */
int configure_inside(pid_t pid, const struct net_link *link, char *err, size_t errlen)
{
    struct rtnl r;
    if (rtnl_open_in(pid, &r, err, errlen) < 0)
        return -1;
    struct link_info eth0, lo;
    int rc = link_get(&r, "eth0", &eth0);
    const char *step = "find eth0";
    if (rc == 0) {
        step = "address eth0";
        rc = addr_add(&r, eth0.ifindex, link->sandbox_addr, link->prefix_len);
    }
    if (rc == 0) {
        step = "set eth0 up";
        rc = link_set_up(&r, eth0.ifindex, NULL);
    }
    if (rc == 0) {
        step = "set lo up";
        rc = link_get(&r, "lo", &lo);
        if (rc == 0)
            rc = link_set_up(&r, lo.ifindex, NULL);
    }
    if (rc == 0) {
        step = "default route";
        rc = route_add_default(&r, eth0.ifindex, link->host_addr);
    }
    rtnl_close(&r);
    return rc == 0 ? 0
                   : fail(err, errlen, "in the Sandbox of pid %d: %s: %s", (int)pid, step,
                          strerror(-rc));
}

/* Alias, host-side address, up. */
int configure_host_side(struct rtnl *r, const struct net_link *link, int *ifindex, char *err,
                        size_t errlen)
{
    struct link_info li;
    int rc = link_get(r, link->ifname, &li);
    const char *step = "find";
    if (rc == 0) {
        *ifindex = li.ifindex;
        step = "address";
        rc = addr_add(r, li.ifindex, link->host_addr, link->prefix_len);
    }
    if (rc == 0) {
        step = "alias and up";
        rc = link_set_up(r, li.ifindex, link->sandbox_id);
    }
    return rc == 0 ? 0 : fail(err, errlen, "%s: %s: %s", link->ifname, step, strerror(-rc));
}
