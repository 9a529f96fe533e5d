/*
 * firewall.h: the nftables firewall around every Sandbox, programmed with libnftnl and libmnl.
 *
 * sbx owns exactly one nftables table, `table inet sbx`, in the network namespace of the worker
 * (the host). Its structure (chains, base rules, named sets, named drop counters) is created once,
 * in one atomic batch, by fw_init(). A Sandbox is then nothing but set elements: adding, removing
 * or changing one is one atomic batch of element changes, never a rebuild of the ruleset, so its
 * cost does not grow with the number of Sandboxes (tools/bench/firewall measures it).
 *
 * A Sandbox's traffic is recognised by its host-side interface (every Sandbox interface is named
 * FW_IFNAME_PREFIX + slot, see links.h) together with its IPv4 address: the element
 * `"<ifname>" . <address>` in the set `sandboxes`. Each element carries the Sandbox id as its
 * comment, so the kernel itself records which Sandbox owns which element (fw_elements, fw_list,
 * reconciliation). The rules, for traffic from a Sandbox (docs/network.md has the listing):
 *   - replies within established/related connections: accepted;
 *   - all IPv6: dropped                                          (counter drop_ipv6);
 *   - a source that is not the Sandbox's own interface+address:  dropped (counter drop_spoofed);
 *   - new connections to the host: dropped (drop_host) except TCP 443, and TCP 2049 while the
 *     Sandbox is in the set `nfs` (fw_sandbox_set_nfs);
 *   - to 10/8, 172.16/12, 192.168/16, other Sandboxes included: dropped   (drop_private);
 *   - to 169.254/16 (cloud metadata): dropped                              (drop_metadata);
 *   - to the other special-use IPv4 ranges: dropped                        (drop_special);
 *   - a Sandbox of an App whose egress is "none" (set `egress_none`): dropped (drop_policy), and
 *     so are its new connections to the host's 443 (NFS while attached stays open);
 *   - a Sandbox of an allowlist App (set `egress_allowlist`, and its App's `members_<app>`, which
 *     the App's rule in chain egress_dispatch jumps from to the chain egress_<app>): what its App's
 *     chain does not return from is dropped (drop_policy); what it returns goes on below;
 *   - DNS (UDP/TCP 53) to an address of the set `resolvers`: accepted; to any other: dropped
 *     (drop_dns);
 *   - TCP to a port of the set `egress_ports`: accepted and masqueraded to the uplink;
 *   - anything else to public IPv4 (other ports, UDP, ICMP): dropped (drop_egress).
 * And into a Sandbox: nothing new, from anywhere (drop_inbound).
 * Interfaces named FW_IFNAME_PREFIX* that are not in `sandboxes` get the same treatment and fail
 * closed (their traffic counts as spoofed). Other tables of the host are never read or changed.
 *
 * Each struct fw holds one netlink socket, bound to the network namespace of the thread that called
 * fw_init(); calls on one struct fw are serialised by its mutex and may come from any thread.
 * Functions return 0, or -1 with a human-readable reason in err.
 */
#ifndef SBX_FIREWALL_H
#define SBX_FIREWALL_H

#include <netinet/in.h>
#include <net/if.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FW_TABLE "sbx"
/* Every Sandbox's host-side interface starts with this; the base rules match it as a wildcard. */
#define FW_IFNAME_PREFIX "sbx"
#define FW_OWNER_LEN 64 /* room for a Sandbox id */

/* Every drop of a packet from a Sandbox (all reasons but ipv6 and inbound) is also logged to this
 * NFLOG group with the prefix "sbx drop_<reason> " and the first FW_NFLOG_SNAPLEN bytes of the
 * packet (IPv4 header and ports): worker/host/egress_log.h reads them. */
#define FW_NFLOG_GROUP 5213
#define FW_NFLOG_PREFIX "sbx drop_"
#define FW_NFLOG_SNAPLEN 64
/* UDP DNS from a Sandbox of an allowlist App, to any address, is redirected to this port of the
 * host (nat prerouting), where sbx's DNS forwarder answers (host/dns_forwarder.h). */
#define FW_DNS_FORWARDER_PORT 5300

/* Why a packet was dropped: one named nftables counter each ("drop_<name>"). */
enum fw_drop_reason {
    FW_DROP_HOST,     /* new connection to the host other than TCP 443 (and 2049 with NFS) */
    FW_DROP_PRIVATE,  /* to 10/8, 172.16/12, 192.168/16 (other Sandboxes included) */
    FW_DROP_METADATA, /* to 169.254/16 */
    FW_DROP_SPECIAL,  /* to another special-use IPv4 range */
    FW_DROP_IPV6,     /* any IPv6 from or to a Sandbox */
    FW_DROP_INBOUND,  /* a new connection into a Sandbox */
    FW_DROP_SPOOFED,  /* from a Sandbox interface with an address that is not its own */
    FW_DROP_EGRESS, /* to public IPv4: not TCP to a port of egress_ports (nor DNS to a resolver) */
    FW_DROP_DNS,    /* DNS (port 53) to an address that is not a configured resolver */
    FW_DROP_POLICY, /* refused by the App's egress policy (none, or not on its allowlist) */
    FW_DROP_COUNT
};
/* "host", "private", ...: the counter of reason r is named "drop_" + fw_drop_reason_names[r]. */
extern const char *const fw_drop_reason_names[FW_DROP_COUNT];

/* What identifies one Sandbox's traffic. */
struct fw_sandbox {
    const char *sandbox_id; /* the owner, stored as the elements' comment */
    const char *ifname;     /* host-side interface, FW_IFNAME_PREFIX + ... */
    struct in_addr addr;    /* the Sandbox's IPv4 address */
};

/* One Sandbox as the kernel's table has it. */
struct fw_element {
    char owner[FW_OWNER_LEN]; /* the Sandbox id of the comment ("" if none) */
    char ifname[IFNAMSIZ];
    struct in_addr addr;
    bool nfs; /* also in the set `nfs` */
};

struct fw_counter {
    uint64_t packets;
    uint64_t bytes;
};

struct fw;

/* Makes sure `table inet sbx` exists with this version's structure for net_pool ("a.b.c.d/len",
 * the addresses masqueraded to the uplink). An existing table of the same version and pool is kept
 * as it is (other worker processes may be using it); one of another version or pool is replaced in
 * one batch that carries its Sandbox elements over. NULL on failure. */
struct fw *fw_init(const char *net_pool, char *err, size_t errlen);
/* Read-only access for inspection (sbxctl firewall, the gateway's /metrics): opens the netlink
 * socket without creating or changing anything. fw_elements, fw_counters and fw_list then fail
 * with "table inet sbx: No such file or directory" until a worker has called fw_init. */
struct fw *fw_open(char *err, size_t errlen);
void fw_close(struct fw *fw);

/* Adds the Sandbox's element (replacing a stale one with the same interface and address). */
int fw_sandbox_add(struct fw *fw, const struct fw_sandbox *sb, char *err, size_t errlen);
/* Allows (attached=true) or stops allowing new TCP connections to the host's port 2049. */
int fw_sandbox_set_nfs(struct fw *fw, const struct fw_sandbox *sb, bool attached, char *err,
                       size_t errlen);
/* Removes the Sandbox's elements from every set; removing what is absent is not an error. */
int fw_sandbox_remove(struct fw *fw, const struct fw_sandbox *sb, char *err, size_t errlen);
/* Removes every element whose owner is sandbox_id, whatever its interface and address. */
int fw_sandbox_remove_owner(struct fw *fw, const char *sandbox_id, char *err, size_t errlen);

/* The Sandboxes in the table. *out is the caller's, free() it. */
int fw_elements(struct fw *fw, struct fw_element **out, size_t *n, char *err, size_t errlen);

/* Reconciliation: removes the elements of every Sandbox for which is_live(owner) is false.
 * is_live is called only after the table was read, so a Sandbox that is live when the caller's
 * answer is computed and was added before is kept. *removed (may be NULL): elements removed. */
int fw_reconcile(struct fw *fw, bool (*is_live)(const char *sandbox_id, void *arg), void *arg,
                 size_t *removed, char *err, size_t errlen);

/* The drop counters, indexed by enum fw_drop_reason. */
int fw_counters(struct fw *fw, struct fw_counter out[FW_DROP_COUNT], char *err, size_t errlen);

/* The counters in Prometheus text format, for GET /metrics:
 *   sbx_firewall_dropped_packets_total{reason="host"} 3   (and _bytes_total), one per reason.
 * Writes at most outlen bytes (NUL included); -1 when they do not fit or cannot be read. */
int fw_metrics_text(struct fw *fw, char *out, size_t outlen, char *err, size_t errlen);

/* For `sbxctl firewall`: prints the live table as `nft list table inet sbx` prints it (through
 * libnftables, loaded at run time), then one line per element: which Sandbox owns it. */
int fw_list(struct fw *fw, FILE *out, char *err, size_t errlen);

/* Deletes `table inet sbx` (and nothing else). For tests and `sbx down`; workers do not call it
 * on exit, since other workers may still rely on the table. */
int fw_destroy(struct fw *fw, char *err, size_t errlen);

/* ---- egress: the host-wide ports and resolvers, and the per-App policies ---- */

/* Replaces the contents of the sets `egress_ports` (TCP ports open to public IPv4) and `resolvers`
 * (where DNS may go) in one batch. Every worker calls it at start with the host's settings. */
int fw_set_egress(struct fw *fw, const uint16_t *ports, size_t nports,
                  const struct in_addr *resolvers, size_t nresolvers, char *err, size_t errlen);

enum fw_egress_mode {
    FW_EGRESS_PUBLIC,    /* the host-wide rules only */
    FW_EGRESS_NONE,      /* nothing leaves but NFS while attached and replies */
    FW_EGRESS_ALLOWLIST, /* only what the App's chain returns from, then the host-wide rules */
};

/* One address entry of an App's allowlist: net/len, TCP port (0: any of egress_ports). */
struct fw_allow_net {
    struct in_addr net;
    int len;
    uint16_t port;
};

/* Creates or replaces the chain egress_<app_id>: one rule per entry, then drop_policy. One batch,
 * whatever the number of the App's Sandboxes: they all jump to this chain. */
int fw_app_policy_set(struct fw *fw, const char *app_id, const struct fw_allow_net *allow, size_t n,
                      char *err, size_t errlen);

/* The addresses an allowed name resolved to, for an App: the elements `address . port` of its
 * set names_<app_id> (which its chain returns from), each expiring after timeout_ms. An existing
 * element gets the new timeout. */
struct fw_name_addr {
    struct in_addr addr;
    uint16_t port;
    uint32_t timeout_ms;
};
int fw_app_names_add(struct fw *fw, const char *app_id, const struct fw_name_addr *v, size_t n,
                     char *err, size_t errlen);

/* The Sandboxes under an allowlist (the set egress_allowlist, whose elements' comments name their
 * App): which App each one's address serves. */
struct fw_egress_member {
    char ifname[IFNAMSIZ];
    struct in_addr addr;
    char app_id[FW_OWNER_LEN];
};
int fw_egress_members(struct fw *fw, struct fw_egress_member **out, size_t *n, char *err,
                      size_t errlen);

/* Puts the Sandbox under mode (app_id names the chain for FW_EGRESS_ALLOWLIST, which must exist:
 * fw_app_policy_set). Replaces what it was under before, in one batch. */
int fw_sandbox_set_egress(struct fw *fw, const struct fw_sandbox *sb, enum fw_egress_mode mode,
                          const char *app_id, char *err, size_t errlen);

/* ---- the brokering proxy (secret_proxy.h) ---- */

/* Redirects the Sandbox's new TCP connections to ports 80 and 443 of addresses that are not the
 * host's to the host's TCP port (its worker's proxy), after judging them by its egress rules;
 * port 0 stops it. Replaces what the Sandbox had. */
int fw_sandbox_set_secret_proxy(struct fw *fw, const struct fw_sandbox *sb, uint16_t port,
                                char *err, size_t errlen);

/* The Sandboxes with a proxy port (the map secret_proxy), as members with an empty app_id: the
 * DNS forwarder serves them too (their DNS is redirected to it, whatever their policy). */
int fw_secret_proxy_members(struct fw *fw, struct fw_egress_member **out, size_t *n, char *err,
                            size_t errlen);

/* ---- for tests and inspection: the batches fw_* send, as bytes (nlmsgs, BATCH_BEGIN..END) ---- */
struct fw_batch {
    char *buf;
    size_t len;
    size_t cap;
    uint32_t seq;
    size_t messages; /* between BATCH_BEGIN and BATCH_END */
    size_t last;     /* offset of the last of them: the one that asks for an ack */
};
void fw_batch_free(struct fw_batch *b);
/* The structure batch of fw_init() on an empty host (pool as in fw_init). */
int fw_build_structure(const char *net_pool, struct fw_batch *out, char *err, size_t errlen);
/* The element batch of fw_sandbox_add(). */
int fw_build_sandbox_add(const struct fw_sandbox *sb, struct fw_batch *out, char *err,
                         size_t errlen);

#endif
