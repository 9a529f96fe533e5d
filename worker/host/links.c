/*
 * links.c: Sandbox links over rtnetlink (libmnl): veth pairs into a Sandbox's network namespace,
 * tap devices for VMs, their addresses and routes, their removal and reconciliation, conntrack
 * (ending a detached NFS Workspace's connections), and the worker-level calls that pair each link
 * with its firewall elements. See links.h for the model.
 *
 * Hidden state: `net`, the process's one network (its address pool and firewall handle). net_init
 * sets it up; every driver's init calls it and the first one makes it (later calls find it made),
 * so it is there before any Sandbox boots; net_shutdown closes it. Which Sandboxes are live is not
 * known here: reconciliation asks the caller (is_live; recovery/host_reconcile.c asks the store).
 */
#include "clock.h"
#include "host/links.h"

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

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- pool and slots ---- */

int net_pool_parse(const char *cidr, struct net_pool *out, char *err, size_t errlen)
{
    char addr[INET_ADDRSTRLEN];
    const char *slash = strchr(cidr, '/');
    if (!slash || (size_t)(slash - cidr) >= sizeof(addr))
        return fail(err, errlen, "net_pool \"%s\": expected a.b.c.d/len", cidr);
    memcpy(addr, cidr, (size_t)(slash - cidr));
    addr[slash - cidr] = '\0';
    char *end;
    long len = strtol(slash + 1, &end, 10);
    if (*end || len < 8 || len > 30 || inet_pton(AF_INET, addr, &out->net) != 1)
        return fail(err, errlen, "net_pool \"%s\": expected a.b.c.d/len with len 8..30", cidr);
    if (ntohl(out->net.s_addr) & ~(~0u << (32 - len)))
        return fail(err, errlen, "net_pool \"%s\": host bits set", cidr);
    out->len = (int)len;
    out->slots = 1u << (30 - len);
    return 0;
}

static void link_for_slot(const struct net_pool *pool, uint32_t slot, const char *sandbox_id,
                          struct net_link *out)
{
    memset(out, 0, sizeof(*out));
    if (sandbox_id)
        snprintf(out->sandbox_id, sizeof(out->sandbox_id), "%s", sandbox_id);
    snprintf(out->ifname, sizeof(out->ifname), FW_IFNAME_PREFIX "%u", slot);
    out->slot = slot;
    uint32_t base = ntohl(pool->net.s_addr) + slot * 4;
    out->host_addr.s_addr = htonl(base + 1);
    out->sandbox_addr.s_addr = htonl(base + 2);
    out->prefix_len = 30;
}

/* The slot of "sbx<digits>", or -1 for any other name. */
static long slot_of_ifname(const char *name)
{
    size_t p = strlen(FW_IFNAME_PREFIX);
    if (strncmp(name, FW_IFNAME_PREFIX, p) != 0 || !name[p])
        return -1;
    char *end;
    long slot = strtol(name + p, &end, 10);
    return *end || slot < 0 ? -1 : slot;
}

void net_link_sandbox_address(const struct net_link *link, char *out, size_t outlen)
{
    if (!inet_ntop(AF_INET, &link->sandbox_addr, out, (socklen_t)outlen) && outlen)
        out[0] = '\0';
}

struct fw_sandbox net_link_fw(const struct net_link *link)
{
    return (struct fw_sandbox){link->sandbox_id, link->ifname, link->sandbox_addr};
}

/* Probing starts at a random slot so that a slot just freed is not handed out again at once. */
static uint32_t first_probe(const struct net_pool *pool)
{
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != sizeof(r))
        r = (uint32_t)time(NULL) ^ (uint32_t)getpid();
    return r % pool->slots;
}

/* ---- rtnetlink ---- */

struct rtnl {
    struct mnl_socket *nl;
    uint32_t portid;
    uint32_t seq;
};

static int rtnl_open(struct rtnl *r, char *err, size_t errlen)
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

static void rtnl_close(struct rtnl *r)
{
    if (r->nl)
        mnl_socket_close(r->nl);
    r->nl = NULL;
}

static struct nlmsghdr *rtnl_msg(struct rtnl *r, char *buf, uint16_t type, uint16_t flags)
{
    struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
    nlh->nlmsg_type = type;
    nlh->nlmsg_flags = NLM_F_REQUEST | flags;
    nlh->nlmsg_seq = ++r->seq;
    return nlh;
}

/* Sends a request and runs cb on the answers until the ack or the end of a dump. Returns 0 or a
 * negative errno (the kernel's answer). */
static int rtnl_talk(struct rtnl *r, struct nlmsghdr *nlh, mnl_cb_t cb, void *data)
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

struct link_info {
    int ifindex;
    char name[IFNAMSIZ];
    char alias[FW_OWNER_LEN];
    bool tap;
};

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

static void link_parse(const struct nlmsghdr *nlh, struct link_info *out)
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
static int link_get(struct rtnl *r, const char *name, struct link_info *out)
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
static int link_set_up(struct rtnl *r, int ifindex, const char *alias)
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

static int link_del(struct rtnl *r, int ifindex)
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
static int veth_add(struct rtnl *r, const char *name, const char *peer, pid_t pid, int nsfd)
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
static int configure_inside(pid_t pid, const struct net_link *link, char *err, size_t errlen)
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
static int configure_host_side(struct rtnl *r, const struct net_link *link, int *ifindex, char *err,
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

/* ---- links ---- */

static int check_owner(const char *sandbox_id, char *err, size_t errlen)
{
    if (!sandbox_id || !*sandbox_id || strlen(sandbox_id) >= FW_OWNER_LEN)
        return fail(err, errlen, "a Sandbox link needs its Sandbox id");
    return 0;
}

/* The peer must land in a namespace of the Sandbox's own: with a pid still in the host's, "eth0"
 * would be created (or found) on the host itself. */
static int check_own_namespace(pid_t pid, char *err, size_t errlen)
{
    char path[64];
    struct stat self, child;
    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
    if (stat("/proc/thread-self/ns/net", &self) < 0 || stat(path, &child) < 0)
        return fail(err, errlen, "%s: %s", path, strerror(errno));
    if (self.st_ino == child.st_ino && self.st_dev == child.st_dev)
        return fail(err, errlen, "pid %d is in the host's network namespace (no CLONE_NEWNET?)",
                    (int)pid);
    return 0;
}

int net_veth_create(const struct net_pool *pool, const char *sandbox_id, pid_t pid,
                    struct net_link *out, char *err, size_t errlen)
{
    if (check_owner(sandbox_id, err, errlen) < 0 || check_own_namespace(pid, err, errlen) < 0)
        return -1;
    struct rtnl r;
    if (rtnl_open(&r, err, errlen) < 0)
        return -1;
    uint32_t start = first_probe(pool);
    int rc = -EEXIST;
    for (uint32_t i = 0; i < pool->slots && rc == -EEXIST; i++) {
        link_for_slot(pool, (start + i) % pool->slots, sandbox_id, out);
        rc = veth_add(&r, out->ifname, "eth0", pid, -1);
        if (rc == -EEXIST) {
            /* Taken slot, or an eth0 already in the Sandbox: only the first is worth a retry. */
            struct link_info li;
            if (link_get(&r, out->ifname, &li) == -ENODEV) {
                rtnl_close(&r);
                return fail(err, errlen, "pid %d already has an eth0", (int)pid);
            }
        }
    }
    if (rc != 0) {
        rtnl_close(&r);
        return fail(err, errlen, "veth for pid %d: %s", (int)pid,
                    rc == -EEXIST ? "net_pool exhausted" : strerror(-rc));
    }
    int ifindex = 0;
    if (configure_host_side(&r, out, &ifindex, err, errlen) < 0 ||
        configure_inside(pid, out, err, errlen) < 0) {
        if (ifindex)
            link_del(&r, ifindex); /* takes the Sandbox's end with it */
        rtnl_close(&r);
        return -1;
    }
    rtnl_close(&r);
    return 0;
}

/* 0, -EBUSY when the name is taken, or another negative errno. */
static int tap_add(const char *name, uid_t uid, gid_t gid)
{
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
    ifr.ifr_flags = (short)(IFF_TAP | IFF_NO_PI | IFF_TUN_EXCL);
    int rc = 0;
    if (ioctl(fd, TUNSETIFF, &ifr) < 0)
        rc = -errno;
    else if ((uid != (uid_t)-1 && ioctl(fd, TUNSETOWNER, (unsigned long)uid) < 0) ||
             (gid != (gid_t)-1 && ioctl(fd, TUNSETGROUP, (unsigned long)gid) < 0) ||
             ioctl(fd, TUNSETPERSIST, 1L) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

int net_tap_open(const char *ifname, int busy_wait_ms, char *err, size_t errlen)
{
    int64_t deadline = clock_mono_ms() + busy_wait_ms;
    for (;;) {
        int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
        if (fd < 0)
            return fail(err, errlen, "open /dev/net/tun: %s", strerror(errno));
        struct ifreq ifr = {0};
        ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
        if (ioctl(fd, TUNSETIFF, &ifr) == 0)
            return fd;
        int e = errno;
        close(fd);
        if (e != EBUSY || clock_mono_ms() >= deadline)
            return fail(err, errlen, "open tap %s: %s", ifname,
                        e == EBUSY ? "still held by another fd (Device or resource busy)"
                                   : strerror(e));
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int net_tap_create(const struct net_pool *pool, const char *sandbox_id, uid_t uid, gid_t gid,
                   struct net_link *out, char *err, size_t errlen)
{
    if (check_owner(sandbox_id, err, errlen) < 0)
        return -1;
    uint32_t start = first_probe(pool);
    int rc = -EBUSY;
    for (uint32_t i = 0; i < pool->slots && rc == -EBUSY; i++) {
        link_for_slot(pool, (start + i) % pool->slots, sandbox_id, out);
        rc = tap_add(out->ifname, uid, gid);
    }
    if (rc != 0)
        return fail(err, errlen, "tap: %s", rc == -EBUSY ? "net_pool exhausted" : strerror(-rc));
    out->tap = true;
    struct rtnl r;
    if (rtnl_open(&r, err, errlen) < 0) {
        net_link_delete(out->ifname, NULL, NULL, 0);
        return -1;
    }
    int ifindex = 0;
    rc = configure_host_side(&r, out, &ifindex, err, errlen);
    if (rc < 0 && ifindex)
        link_del(&r, ifindex);
    rtnl_close(&r);
    return rc;
}

/* ---- a tap behind a bridge in a VMM's own namespace (Firecracker's jailer --netns) ---- */

static int bridge_add(struct rtnl *r, const char *name)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = rtnl_msg(r, buf, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK);
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
    ifi->ifi_family = AF_UNSPEC;
    mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
    struct nlattr *linkinfo = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
    mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "bridge");
    mnl_attr_nest_end(nlh, linkinfo);
    return rtnl_talk(r, nlh, NULL, NULL);
}

static int link_set_master_up(struct rtnl *r, int ifindex, int master)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = rtnl_msg(r, buf, RTM_NEWLINK, NLM_F_ACK);
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
    ifi->ifi_family = AF_UNSPEC;
    ifi->ifi_index = ifindex;
    ifi->ifi_flags = IFF_UP;
    ifi->ifi_change = IFF_UP;
    mnl_attr_put_u32(nlh, IFLA_MASTER, (uint32_t)master);
    return rtnl_talk(r, nlh, NULL, NULL);
}

struct bridge_job {
    const char *netns_path;
    const char *tap_name;
    uid_t uid;
    gid_t gid;
    char err[256];
};

/* In the VMM's namespace (this thread only): a persistent tap owned by the VMM's uid, a bridge
 * "br0" holding it and eth0 (the veth from the host), everything up. No address there: the guest
 * owns the Sandbox address and talks to the host side across the bridge, so the host firewall
 * sees exactly what it sees from a process Sandbox. */
static void *bridge_thread(void *arg)
{
    struct bridge_job *j = arg;
    int fd = open(j->netns_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
        fail(j->err, sizeof(j->err), "%s: %s", j->netns_path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    close(fd);
    struct rtnl r;
    if (rtnl_open(&r, j->err, sizeof(j->err)) < 0)
        return NULL;
    struct link_info eth0, tap, br, lo;
    const char *step = "tap";
    int rc = tap_add(j->tap_name, j->uid, j->gid);
    if (rc == 0) {
        step = "bridge";
        rc = bridge_add(&r, "br0");
    }
    if (rc == 0) {
        step = "find links";
        rc = link_get(&r, "br0", &br);
        if (rc == 0)
            rc = link_get(&r, "eth0", &eth0);
        if (rc == 0)
            rc = link_get(&r, j->tap_name, &tap);
        if (rc == 0)
            rc = link_get(&r, "lo", &lo);
    }
    if (rc == 0) {
        step = "enslave and up";
        rc = link_set_master_up(&r, eth0.ifindex, br.ifindex);
        if (rc == 0)
            rc = link_set_master_up(&r, tap.ifindex, br.ifindex);
        if (rc == 0)
            rc = link_set_up(&r, br.ifindex, NULL);
        if (rc == 0)
            rc = link_set_up(&r, lo.ifindex, NULL);
    }
    rtnl_close(&r);
    if (rc != 0)
        fail(j->err, sizeof(j->err), "in %s: %s: %s", j->netns_path, step, strerror(-rc));
    return NULL;
}

int net_veth_create_bridged(const struct net_pool *pool, const char *sandbox_id,
                            const char *netns_path, const char *tap_name, uid_t uid, gid_t gid,
                            struct net_link *out, char *err, size_t errlen)
{
    if (check_owner(sandbox_id, err, errlen) < 0)
        return -1;
    if (!tap_name || !*tap_name || strlen(tap_name) >= IFNAMSIZ)
        return fail(err, errlen, "tap name \"%s\" is not an interface name",
                    tap_name ? tap_name : "");
    struct stat self, target;
    if (stat("/proc/thread-self/ns/net", &self) < 0 || stat(netns_path, &target) < 0)
        return fail(err, errlen, "%s: %s", netns_path, strerror(errno));
    if (self.st_ino == target.st_ino && self.st_dev == target.st_dev)
        return fail(err, errlen, "%s is the host's network namespace", netns_path);
    int nsfd = open(netns_path, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0)
        return fail(err, errlen, "%s: %s", netns_path, strerror(errno));
    struct rtnl r;
    if (rtnl_open(&r, err, errlen) < 0) {
        close(nsfd);
        return -1;
    }
    uint32_t start = first_probe(pool);
    int rc = -EEXIST;
    bool has_eth0 = false;
    for (uint32_t i = 0; i < pool->slots && rc == -EEXIST && !has_eth0; i++) {
        link_for_slot(pool, (start + i) % pool->slots, sandbox_id, out);
        rc = veth_add(&r, out->ifname, "eth0", 0, nsfd);
        struct link_info li;
        has_eth0 = rc == -EEXIST && link_get(&r, out->ifname, &li) == -ENODEV;
    }
    close(nsfd);
    if (rc != 0) {
        rtnl_close(&r);
        if (has_eth0)
            return fail(err, errlen, "%s already has an eth0", netns_path);
        return fail(err, errlen, "veth into %s: %s", netns_path,
                    rc == -EEXIST ? "net_pool exhausted" : strerror(-rc));
    }
    int ifindex = 0;
    int ret = configure_host_side(&r, out, &ifindex, err, errlen);
    if (ret == 0) {
        struct bridge_job j = {netns_path, tap_name, uid, gid, ""};
        pthread_t t;
        int prc = pthread_create(&t, NULL, bridge_thread, &j);
        if (prc != 0)
            ret = fail(err, errlen, "thread: %s", strerror(prc));
        else {
            pthread_join(t, NULL);
            if (j.err[0])
                ret = fail(err, errlen, "%s", j.err);
        }
    }
    if (ret != 0 && ifindex)
        link_del(&r, ifindex); /* the tap and bridge stay in the VMM's namespace, which its
                                  owner removes */
    rtnl_close(&r);
    return ret;
}

int net_link_delete(const char *ifname, const char *owner, char *err, size_t errlen)
{
    struct rtnl r;
    if (rtnl_open(&r, err, errlen) < 0)
        return -1;
    struct link_info li;
    int rc = link_get(&r, ifname, &li);
    if (rc == 0 && (!owner || strcmp(li.alias, owner) == 0))
        rc = link_del(&r, li.ifindex);
    rtnl_close(&r);
    if (rc == -ENODEV)
        return 0; /* gone already: a veth dies with its namespace */
    return rc == 0 ? 0 : fail(err, errlen, "delete %s: %s", ifname, strerror(-rc));
}

struct links_acc {
    const struct net_pool *pool;
    struct net_link *v;
    size_t n, cap;
};

static int links_cb(const struct nlmsghdr *nlh, void *data)
{
    struct links_acc *acc = data;
    struct link_info li;
    link_parse(nlh, &li);
    long slot = slot_of_ifname(li.name);
    if (slot < 0)
        return MNL_CB_OK;
    if (acc->n == acc->cap) {
        size_t cap = acc->cap ? acc->cap * 2 : 64;
        struct net_link *v = realloc(acc->v, cap * sizeof(*v));
        if (!v)
            return MNL_CB_ERROR;
        acc->v = v;
        acc->cap = cap;
    }
    struct net_link *l = &acc->v[acc->n++];
    link_for_slot(acc->pool, (uint32_t)slot % acc->pool->slots, li.alias, l);
    snprintf(l->ifname, sizeof(l->ifname), "%s", li.name);
    l->tap = li.tap;
    return MNL_CB_OK;
}

int net_links(const struct net_pool *pool, struct net_link **out, size_t *n, char *err,
              size_t errlen)
{
    struct rtnl r;
    if (rtnl_open(&r, err, errlen) < 0)
        return -1;
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = rtnl_msg(&r, buf, RTM_GETLINK, NLM_F_DUMP);
    struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
    ifi->ifi_family = AF_UNSPEC;
    struct links_acc acc = {.pool = pool};
    int rc = rtnl_talk(&r, nlh, links_cb, &acc);
    rtnl_close(&r);
    if (rc < 0) {
        free(acc.v);
        return fail(err, errlen, "list links: %s", strerror(-rc));
    }
    *out = acc.v;
    *n = acc.n;
    return 0;
}

int net_enable_forwarding(char *err, size_t errlen)
{
    const char *path = "/proc/sys/net/ipv4/ip_forward";
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(err, errlen, "%s: %s", path, strerror(errno));
    ssize_t n = write(fd, "1\n", 2);
    int e = errno;
    close(fd);
    return n == 2 ? 0 : fail(err, errlen, "%s: %s", path, strerror(e));
}

/* ---- the worker's network state ---- */

static struct {
    struct fw *fw;
    struct net_pool pool;
    char installation[NET_INSTALLATION_LEN]; /* "" until net_set_installation */
} net;

void net_set_installation(const char *installation_id)
{
    snprintf(net.installation, sizeof net.installation, "%s",
             installation_id ? installation_id : "");
}

/* The owner the kernel records for sandbox_id: "<installation>/<sandboxId>" (the bare id before
 * net_set_installation). */
static const char *owner_of(const char *sandbox_id, char out[FW_OWNER_LEN])
{
    if (!net.installation[0] || !sandbox_id)
        return sandbox_id;
    snprintf(out, FW_OWNER_LEN, "%s/%s", net.installation, sandbox_id);
    return out;
}

/* Whose an owner found on the host is: this installation's (with *sandbox_id the bare id), or
 * another's. One without an installation ("sbx_..." as written before installations were
 * tagged) counts as this installation's: it can only be a leftover of an older version. */
static bool owner_is_ours(const char *owner, const char **sandbox_id)
{
    const char *slash = strchr(owner, '/');
    size_t n = strlen(net.installation);
    if (!slash) {
        *sandbox_id = owner;
        return true;
    }
    if (n == 0 || (size_t)(slash - owner) != n || strncmp(owner, net.installation, n) != 0)
        return false;
    *sandbox_id = slash + 1;
    return true;
}

const char *net_owner_sandbox_id(const char *owner)
{
    const char *sandbox_id = NULL;
    return owner && owner_is_ours(owner, &sandbox_id) ? sandbox_id : NULL;
}

int net_init(const char *net_pool, char *err, size_t errlen)
{
    if (net.fw)
        return 0;
    if (net_pool_parse(net_pool, &net.pool, err, errlen) < 0 ||
        net_enable_forwarding(err, errlen) < 0)
        return -1;
    net.fw = fw_init(net_pool, err, errlen);
    if (!net.fw)
        return -1;
    log_info("network: table inet %s ready, Sandbox links from %s (%u slots)", FW_TABLE, net_pool,
             net.pool.slots);
    return 0;
}

void net_shutdown(void)
{
    fw_close(net.fw);
    net.fw = NULL;
}

struct fw *net_firewall(void)
{
    return net.fw;
}

static int need_init(char *err, size_t errlen)
{
    return net.fw ? 0 : fail(err, errlen, "network: net_init was not called");
}

/* Firewall elements for a new link; on failure the link goes too. */
static int attach_firewall(struct net_link *link, char *err, size_t errlen)
{
    struct fw_sandbox sb = net_link_fw(link);
    if (fw_sandbox_add(net.fw, &sb, err, errlen) == 0)
        return 0;
    net_link_delete(link->ifname, link->sandbox_id, NULL, 0);
    return -1;
}

int net_sandbox_attach_process(const char *sandbox_id, pid_t pid, struct net_link *out, char *err,
                               size_t errlen)
{
    char owner[FW_OWNER_LEN];
    if (need_init(err, errlen) < 0 ||
        net_veth_create(&net.pool, owner_of(sandbox_id, owner), pid, out, err, errlen) < 0)
        return -1;
    return attach_firewall(out, err, errlen);
}

int net_sandbox_attach_tap(const char *sandbox_id, uid_t uid, gid_t gid, struct net_link *out,
                           char *err, size_t errlen)
{
    char owner[FW_OWNER_LEN];
    if (need_init(err, errlen) < 0 ||
        net_tap_create(&net.pool, owner_of(sandbox_id, owner), uid, gid, out, err, errlen) < 0)
        return -1;
    return attach_firewall(out, err, errlen);
}

int net_sandbox_attach_netns_tap(const char *sandbox_id, const char *netns_path,
                                 const char *tap_name, uid_t uid, gid_t gid, struct net_link *out,
                                 char *err, size_t errlen)
{
    char owner[FW_OWNER_LEN];
    if (need_init(err, errlen) < 0 ||
        net_veth_create_bridged(&net.pool, owner_of(sandbox_id, owner), netns_path, tap_name, uid,
                                gid, out, err, errlen) < 0)
        return -1;
    return attach_firewall(out, err, errlen);
}

/* ---- conntrack: connections that outlive an NFS detach ---- */

struct ct_tuple {
    uint32_t src, dst; /* network order */
    uint16_t sport, dport;
    uint8_t proto;
};

struct ct_scan {
    struct in_addr from;
    uint16_t dport; /* network order */
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
        if (t.src == scan->from.s_addr && t.proto == IPPROTO_TCP && t.dport == scan->dport &&
            scan->n < sizeof(scan->v) / sizeof(scan->v[0]))
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

/* Ends the Sandbox's TCP connections to the host's port 2049: the rule only refuses new ones, and
 * an NFS connection that outlived its detach would keep the host's NFS server reachable. */
static int conntrack_drop_nfs(struct in_addr from, char *err, size_t errlen)
{
    struct rtnl r;
    r.nl = mnl_socket_open(NETLINK_NETFILTER);
    if (!r.nl || mnl_socket_bind(r.nl, 0, MNL_SOCKET_AUTOPID) < 0) {
        int e = errno;
        if (r.nl)
            mnl_socket_close(r.nl);
        return fail(err, errlen, "conntrack socket: %s", strerror(e));
    }
    r.portid = mnl_socket_get_portid(r.nl);
    r.seq = (uint32_t)time(NULL);
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct ct_scan *scan = calloc(1, sizeof(*scan));
    if (!scan) {
        rtnl_close(&r);
        return fail(err, errlen, "out of memory");
    }
    scan->from = from;
    scan->dport = htons(2049);
    int rc = rtnl_talk(&r, ct_msg(&r, buf, IPCTNL_MSG_CT_GET, NLM_F_DUMP), ct_scan_cb, scan);
    for (size_t i = 0; rc == 0 && i < scan->n; i++) {
        struct nlmsghdr *nlh = ct_msg(&r, buf, IPCTNL_MSG_CT_DELETE, NLM_F_ACK);
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
        rc = rtnl_talk(&r, nlh, NULL, NULL);
        if (rc == -ENOENT)
            rc = 0; /* ended meanwhile */
    }
    free(scan);
    rtnl_close(&r);
    return rc == 0 ? 0 : fail(err, errlen, "conntrack: %s", strerror(-rc));
}

int net_sandbox_set_nfs(const struct net_link *link, bool attached, char *err, size_t errlen)
{
    if (need_init(err, errlen) < 0)
        return -1;
    struct fw_sandbox sb = net_link_fw(link);
    if (fw_sandbox_set_nfs(net.fw, &sb, attached, err, errlen) < 0)
        return -1;
    return attached ? 0 : conntrack_drop_nfs(link->sandbox_addr, err, errlen);
}

int net_link_of_address(const struct net_pool *pool, const char *sandbox_id,
                        const char *net_address, struct net_link *out)
{
    char owner[FW_OWNER_LEN];
    struct in_addr a;
    sandbox_id = owner_of(sandbox_id, owner);
    if (!net_address || inet_pton(AF_INET, net_address, &a) != 1)
        return -1;
    uint32_t off = ntohl(a.s_addr) - ntohl(pool->net.s_addr);
    if (off / 4 >= pool->slots || off % 4 != 2)
        return -1;
    link_for_slot(pool, off / 4, sandbox_id, out);
    return 0;
}

const struct net_pool *net_worker_pool(void)
{
    return net.fw ? &net.pool : NULL;
}

/* Without an address: every element and interface whose owner is owner (tagged) or sandbox_id
 * (untagged, made before installations were tagged). */
static int release_by_owner(const char *owner, const char *sandbox_id, char *err, size_t errlen)
{
    if (fw_sandbox_remove_owner(net.fw, owner, err, errlen) < 0 ||
        (owner != sandbox_id && fw_sandbox_remove_owner(net.fw, sandbox_id, err, errlen) < 0))
        return -1;
    struct net_link *links;
    size_t n;
    if (net_links(&net.pool, &links, &n, err, errlen) < 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (strcmp(links[i].sandbox_id, owner) == 0 || strcmp(links[i].sandbox_id, sandbox_id) == 0)
            rc = net_link_delete(links[i].ifname, links[i].sandbox_id, err, errlen);
    free(links);
    return rc;
}

int net_sandbox_release(const char *sandbox_id, const char *net_address, char *err, size_t errlen)
{
    if (need_init(err, errlen) < 0 || check_owner(sandbox_id, err, errlen) < 0)
        return -1;
    struct net_link link;
    char owner_buf[FW_OWNER_LEN];
    const char *owner = owner_of(sandbox_id, owner_buf);
    if (net_link_of_address(&net.pool, sandbox_id, net_address, &link) < 0)
        return release_by_owner(owner, sandbox_id, err, errlen);
    /* A slot whose interface now carries another Sandbox's alias was reused after a crash: its
     * elements are that Sandbox's now. */
    struct rtnl r;
    if (rtnl_open(&r, err, errlen) < 0)
        return -1;
    struct link_info li;
    int rc = link_get(&r, link.ifname, &li);
    bool reused = rc == 0 && strcmp(li.alias, owner) != 0 && strcmp(li.alias, sandbox_id) != 0;
    if (rc == 0 && !reused && strcmp(li.alias, owner) != 0)
        snprintf(link.sandbox_id, sizeof link.sandbox_id, "%s", sandbox_id); /* untagged */
    if (rc == 0 && !reused)
        rc = link_del(&r, li.ifindex);
    rtnl_close(&r);
    if (rc < 0 && rc != -ENODEV)
        return fail(err, errlen, "delete %s: %s", link.ifname, strerror(-rc));
    if (reused)
        return 0;
    struct fw_sandbox sb = net_link_fw(&link);
    return fw_sandbox_remove(net.fw, &sb, err, errlen);
}

/* The caller's is_live, asked only about this installation's owners: another installation's
 * links and elements are never this one's to judge (its store does not know their Sandboxes). */
struct owned_query {
    bool (*is_live)(const char *sandbox_id, void *arg);
    void *arg;
};

static bool keep_owner(const char *owner, void *arg)
{
    const struct owned_query *q = arg;
    const char *sandbox_id;
    return !owner_is_ours(owner, &sandbox_id) || q->is_live(sandbox_id, q->arg);
}

int net_reconcile(bool (*is_live)(const char *sandbox_id, void *arg), void *arg,
                  struct net_reconcile_report *report, char *err, size_t errlen)
{
    if (need_init(err, errlen) < 0)
        return -1;
    struct net_reconcile_report rep = {0};
    struct owned_query q = {is_live, arg};
    struct net_link *links;
    size_t n;
    if (net_links(&net.pool, &links, &n, err, errlen) < 0)
        return -1;
    /* Elements: read, then judged (is_live after both snapshots). */
    int rc = fw_reconcile(net.fw, keep_owner, &q, &rep.elements_removed, err, errlen);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        /* No alias: being created this very moment by another worker (alias follows creation
         * within microseconds). Left alone; a veth goes with its namespace anyway. */
        if (!links[i].sandbox_id[0] || keep_owner(links[i].sandbox_id, &q))
            continue;
        rc = net_link_delete(links[i].ifname, links[i].sandbox_id, err, errlen);
        if (rc == 0)
            rep.links_removed++;
    }
    free(links);
    if (report)
        *report = rep;
    return rc;
}
