/*
 * links_internal.h: what the files behind links.h share and nothing else includes.
 *   links.c            making and removing links: veth pairs, taps, bridged taps, listing them
 *   links_pool.c       the address pool: slots, their names and addresses
 *   links_rtnl.c       rtnetlink (libmnl): links, addresses, routes, and a socket inside a
 *                      Sandbox's network namespace
 *   links_conntrack.c  conntrack: ending a detached NFS Workspace's connections
 *   links_worker.c     the worker's calls: the process-wide network state (links.h), pairing a
 *                      link with its firewall elements, release and reconciliation
 */
#ifndef SBX_LINKS_INTERNAL_H
#define SBX_LINKS_INTERNAL_H

#include "host/links.h"

#include <libmnl/libmnl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct rtnl {
    struct mnl_socket *nl;
    uint32_t portid;
    uint32_t seq;
};

struct link_info {
    int ifindex;
    char name[IFNAMSIZ];
    char alias[FW_OWNER_LEN];
    bool tap;
};

/* Writes the reason into err; returns -1. */
static inline int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- links.c ---- */

int check_owner(const char *sandbox_id, char *err, size_t errlen);

/* ---- links_pool.c ---- */

void link_for_slot(const struct net_pool *pool, uint32_t slot, const char *sandbox_id,
                   struct net_link *out);
long slot_of_ifname(const char *name);
uint32_t first_probe(const struct net_pool *pool);

/* ---- links_rtnl.c ---- */

int rtnl_open(struct rtnl *r, char *err, size_t errlen);
void rtnl_close(struct rtnl *r);
struct nlmsghdr *rtnl_msg(struct rtnl *r, char *buf, uint16_t type, uint16_t flags);
int rtnl_talk(struct rtnl *r, struct nlmsghdr *nlh, mnl_cb_t cb, void *data);
void link_parse(const struct nlmsghdr *nlh, struct link_info *out);
int link_get(struct rtnl *r, const char *name, struct link_info *out);
int link_set_up(struct rtnl *r, int ifindex, const char *alias);
int link_del(struct rtnl *r, int ifindex);
int veth_add(struct rtnl *r, const char *name, const char *peer, pid_t pid, int nsfd);
int configure_inside(pid_t pid, const struct net_link *link, char *err, size_t errlen);
int configure_host_side(struct rtnl *r, const struct net_link *link, int *ifindex, char *err,
                        size_t errlen);

/* ---- links_conntrack.c ---- */

int conntrack_drop_nfs(struct in_addr from, char *err, size_t errlen);
/* Ends every flow the Sandbox at `from` opened (TCP and UDP) to any address but the host's side
 * of its link (`host`: the callback API and NFS live there and stay). */
int conntrack_drop_egress(struct in_addr from, struct in_addr host, char *err, size_t errlen);

#endif
