/*
 * links_worker.c: the worker's network calls (links.h): attach a Sandbox (its link and its
 * firewall elements together), NFS on and off, release and reconciliation.
 *
 * Process-wide state: `net`, the process's one network (its address pool, firewall handle and
 * installation tag; links.h says so too). net_init sets it up; every driver's init calls it and
 * the first one makes it (later calls find it made), so it is there before any Sandbox boots;
 * net_shutdown closes it. Which Sandboxes are live is not known here: reconciliation asks the
 * caller (is_live; recovery/host_reconcile.c asks the store).
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

int net_sandbox_set_nfs(const struct net_link *link, bool attached, char *err, size_t errlen)
{
    if (need_init(err, errlen) < 0)
        return -1;
    struct fw_sandbox sb = net_link_fw(link);
    if (fw_sandbox_set_nfs(net.fw, &sb, attached, err, errlen) < 0)
        return -1;
    return attached ? 0 : conntrack_drop_nfs(link->sandbox_addr, err, errlen);
}

int net_sandbox_drop_egress_flows(const struct net_link *link, char *err, size_t errlen)
{
    return conntrack_drop_egress(link->sandbox_addr, link->host_addr, err, errlen);
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
