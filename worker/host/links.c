/*
 * links.c: Sandbox links (links.h for the model): veth pairs into a Sandbox's network namespace,
 * tap devices for VMs, bridged taps in a VMM's own namespace, their removal and listing. The
 * rtnetlink talk, the address pool, conntrack and the worker-level calls are in the files
 * links_internal.h lists.
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

/* ---- links ---- */

int check_owner(const char *sandbox_id, char *err, size_t errlen)
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
