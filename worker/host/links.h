/*
 * links.h: each Sandbox's link to the host (a veth pair into its network namespace for the process
 * driver, a tap device for VMs), its addresses, routing, and their removal; plus the worker-level
 * calls that tie a link to its firewall elements (firewall.h).
 *
 * Addresses come from config net_pool (default 10.213.0.0/16), cut into /30 slots: slot k is
 * pool + 4k; its first address (.1) is the host side and the Sandbox's gateway, the second (.2)
 * the Sandbox's own. The host-side interface of slot k is named "sbx<k>" (FW_IFNAME_PREFIX).
 *
 * Allocation is race-free across threads and worker processes without any shared file or table:
 * a slot is taken by creating its interface, and the kernel refuses a second interface of the
 * same name (RTM_NEWLINK with NLM_F_EXCL, TUNSETIFF with IFF_TUN_EXCL) under its rtnl lock. The
 * interface's alias (IFLA_IFALIAS) records the Sandbox id that owns it, so the kernel's own state
 * says which slot belongs to whom; no store table can drift from it. A veth disappears with its
 * network namespace, which frees the slot when a Sandbox's last process dies even if no worker is
 * left to clean up; a tap persists until it is deleted (net_sandbox_release or reconciliation).
 *
 * Everything is done over rtnetlink with libmnl (no iproute2 processes): a Sandbox start costs a
 * few netlink round trips. Functions return 0, or -1 with a human-readable reason in err.
 */
#ifndef SBX_NETNS_H
#define SBX_NETNS_H

#include "host/firewall.h"

#include <netinet/in.h>
#include <net/if.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct net_pool {
    struct in_addr net;
    int len;
    uint32_t slots; /* /30s in the pool */
};
int net_pool_parse(const char *cidr, struct net_pool *out, char *err, size_t errlen);

/* One Sandbox's link, as made or as found on the host. */
struct net_link {
    char sandbox_id[FW_OWNER_LEN]; /* the owner (see net_set_installation), the interface's alias */
    char ifname[IFNAMSIZ];         /* host side, "sbx<slot>" */
    uint32_t slot;
    struct in_addr host_addr;    /* the host side and the Sandbox's default gateway */
    struct in_addr sandbox_addr; /* the Sandbox's own address */
    int prefix_len;              /* 30 */
    bool tap;                    /* a tap device (VM) rather than a veth */
};

/* "a.b.c.d" of the Sandbox side: what drivers record as the Sandbox's net_address. */
void net_link_sandbox_address(const struct net_link *link, char *out, size_t outlen);
/* The firewall's view of the link. */
struct fw_sandbox net_link_fw(const struct net_link *link);

/* The link of a Sandbox address of the pool (what the store recorded as its net_address), without
 * looking at the host: -1 if the address is not a Sandbox address of pool. */
int net_link_of_address(const struct net_pool *pool, const char *sandbox_id,
                        const char *net_address, struct net_link *out);

/* Creates a veth pair: "sbx<slot>" in the caller's (the host's) namespace, "eth0" in the network
 * namespace of process pid, with the slot's addresses on both ends, both up (and lo in the
 * Sandbox), and a default route in the Sandbox via the host side. */
int net_veth_create(const struct net_pool *pool, const char *sandbox_id, pid_t pid,
                    struct net_link *out, char *err, size_t errlen);
/* Creates a persistent tap "sbx<slot>" with the host-side address, up, owned by uid/gid (-1: root
 * only) so that a VMM dropped to that uid can open it by name. The guest configures
 * out->sandbox_addr/30 with gateway out->host_addr itself (e.g. the kernel's ip= argument). */
int net_tap_create(const struct net_pool *pool, const char *sandbox_id, uid_t uid, gid_t gid,
                   struct net_link *out, char *err, size_t errlen);
/* Attaches an fd to the existing tap ifname (to hand to a VMM): the fd, or -1. A tap takes one
 * fd at a time. The fd that made it (net_tap_create) is closed before this, but a child forked by
 * another thread in that moment holds a copy until it execs, and meanwhile the kernel says EBUSY;
 * nothing else can hold a tap of the caller's own slot, so EBUSY is retried for busy_wait_ms. */
int net_tap_open(const char *ifname, int busy_wait_ms, char *err, size_t errlen);
/* For a VMM confined to a network namespace of its own (Firecracker's jailer --netns), bind-mounted
 * at netns_path: a veth "sbx<slot>" here / "eth0" there, and there a persistent tap tap_name owned
 * by uid/gid (-1: root) bridged with eth0 on "br0", all up, no address in that namespace. The
 * guest configures out->sandbox_addr/30 via out->host_addr and is then on the host's link directly.
 * Removing the host side (net_sandbox_release) takes eth0 along; the tap and bridge go with the
 * namespace. */
int net_veth_create_bridged(const struct net_pool *pool, const char *sandbox_id,
                            const char *netns_path, const char *tap_name, uid_t uid, gid_t gid,
                            struct net_link *out, char *err, size_t errlen);
/* Deletes the host interface ifname if its alias is owner (any alias when owner is NULL).
 * An interface that is gone, or that belongs to another Sandbox now, is not an error. */
int net_link_delete(const char *ifname, const char *owner, char *err, size_t errlen);
/* The Sandbox links on the host (interfaces named sbx<digits>). *out is the caller's, free() it. */
int net_links(const struct net_pool *pool, struct net_link **out, size_t *n, char *err,
              size_t errlen);
/* net.ipv4.ip_forward = 1 in the caller's network namespace (Sandbox traffic is routed). */
int net_enable_forwarding(char *err, size_t errlen);

/* ---- the worker's calls (links_worker.c) ----
 *
 * They share one network state per process, a static in links_worker.c: the address pool, the
 * firewall handle (net_firewall) and the installation tag (net_set_installation). The first
 * net_init makes it (each driver's init calls net_init, so it is there before any Sandbox boots),
 * net_shutdown closes it; the calls below that need it fail with "net_init was not called"
 * before. Only net_set_installation, net_init and net_shutdown write it. */

/* Tags this process's links and firewall elements with the installation (installation.h), before
 * net_init: the owner the kernel records (interface alias, element comment) is then
 * "<installation>/<sandboxId>", and reconciliation judges only owners of this installation, so
 * two sbx installations on one host never remove each other's. Interface names stay
 * "sbx<slot>": the slot and its addresses are taken by creating the interface (the kernel's name
 * uniqueness is what keeps installations sharing a net_pool apart), and a name of 15 characters
 * has no room for a tag. Without a call, owners are bare Sandbox ids (and every owner found is
 * judged). Owners without an installation, written before tagging, count as this one's. */
#define NET_INSTALLATION_LEN 16
void net_set_installation(const char *installation_id);
/* The Sandbox id in an owner found on the host (a firewall element's comment, an interface's
 * alias) when it is this installation's; NULL when it is another's. */
const char *net_owner_sandbox_id(const char *owner);

/* Parses net_pool, enables forwarding and makes sure the firewall table exists (fw_init).
 * Call once, at worker start, before any Sandbox boots. */
int net_init(const char *net_pool, char *err, size_t errlen);
void net_shutdown(void);
/* The worker's firewall handle (NULL before net_init): for fw_counters, fw_list. */
struct fw *net_firewall(void);

/* Process driver, after clone(CLONE_NEWNET) and before the Sandbox's command runs: the veth pair
 * into pid's namespace and the Sandbox's firewall elements. On failure nothing is left behind. */
int net_sandbox_attach_process(const char *sandbox_id, pid_t pid, struct net_link *out, char *err,
                               size_t errlen);
/* VM drivers, before the VMM starts: a tap with its firewall elements. */
int net_sandbox_attach_tap(const char *sandbox_id, uid_t uid, gid_t gid, struct net_link *out,
                           char *err, size_t errlen);
/* The worker's pool (after net_init). */
const struct net_pool *net_worker_pool(void);
/* Firecracker: net_veth_create_bridged with the Sandbox's firewall elements. */
int net_sandbox_attach_netns_tap(const char *sandbox_id, const char *netns_path,
                                 const char *tap_name, uid_t uid, gid_t gid, struct net_link *out,
                                 char *err, size_t errlen);
/* NFS Workspace attached (true) or detached (false): new TCP connections to the host's 2049
 * allowed or not; on detach the Sandbox's open connections to 2049 are ended too (conntrack). */
int net_sandbox_set_nfs(const struct net_link *link, bool attached, char *err, size_t errlen);
/* Ends the connections the Sandbox opened to anywhere but the host's side of its link (conntrack),
 * after its egress policy changed: the firewall accepts established flows before any policy
 * rule, so without this a connection opened before the change would keep flowing. A connection
 * the new policy still allows goes on: its next packet is tracked again (nf_conntrack_tcp_loose)
 * and passes the rules as a new flow. */
int net_sandbox_drop_egress_flows(const struct net_link *link, char *err, size_t errlen);
/* Terminate and reap: removes the Sandbox's firewall elements and its interface. net_address is
 * what the store recorded (the Sandbox side address, "" or NULL if unknown: then the owner is
 * looked up in the whole table). Idempotent; never touches another Sandbox's slot. */
int net_sandbox_release(const char *sandbox_id, const char *net_address, char *err, size_t errlen);

struct net_reconcile_report {
    size_t links_removed;
    size_t elements_removed;
};
/* Start-up reconciliation: removes the interfaces and firewall elements of every Sandbox for which
 * is_live() is false. The host's state is read before is_live() is first called, so anything a
 * Sandbox made after it was recorded as live is kept. report may be NULL. */
int net_reconcile(bool (*is_live)(const char *sandbox_id, void *arg), void *arg,
                  struct net_reconcile_report *report, char *err, size_t errlen);

#endif
