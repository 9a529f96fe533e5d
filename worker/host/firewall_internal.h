/*
 * firewall_internal.h: what the firewall's files share and nothing else includes: the table's
 * set, chain and key names, the netlink handle (struct fw), and each file's calls the others use.
 *   firewall.c          the public functions of firewall.h: open, replace or check the table,
 *                       per-Sandbox elements, reconcile, counters, the nft listing
 *   firewall_batch.c    batch buffers and the rule building blocks (one per nftables match)
 *   firewall_rules.c    the table's structure: its chains, sets and rules
 *   firewall_netlink.c  sending batches and reading the kernel's answers and dumps
 *   firewall_egress.c   egress: host-wide sets, per-App chains and names, per-Sandbox membership
 */
#ifndef SBX_FIREWALL_INTERNAL_H
#define SBX_FIREWALL_INTERNAL_H

#include "host/firewall.h"

#include <libmnl/libmnl.h>
#include <libnftnl/rule.h>
#include <linux/netfilter/nf_tables.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The sets' key: the interface name (16 bytes, zero padded, as `meta iifname` loads it) followed
 * by the IPv4 address (network order). nft's datatype ids: ifname 41, ipv4_addr 7; a concatenation
 * is (first << 6) | second. */
#define KEY_IFNAME_LEN IFNAMSIZ
#define KEY_LEN (KEY_IFNAME_LEN + 4)
#define KEY_TYPE_IFNAME_IPV4 ((41u << 6) | 7u)
#define SET_SANDBOXES "sandboxes"
#define SET_NFS "nfs"
#define SET_ID_SANDBOXES 1
#define SET_ID_NFS 2
/* Egress: host-wide ports and resolvers, per-Sandbox policy membership. nft's datatype
 * ids: inet_service 13. */
#define SET_EGRESS_PORTS "egress_ports"
#define SET_RESOLVERS "resolvers"
#define SET_EGRESS_NONE "egress_none"
#define SET_EGRESS_ALLOWLIST "egress_allowlist"
#define CHAIN_EGRESS_DISPATCH "egress_dispatch"
#define APP_MEMBERS_PREFIX "members_"
#define SET_ID_APP_MEMBERS 101
#define SET_ID_EGRESS_PORTS 3
#define SET_ID_EGRESS_ALLOWLIST 6
#define SET_ID_RESOLVERS 4
#define SET_ID_EGRESS_NONE 5
#define KEY_TYPE_IPV4 7u
#define KEY_TYPE_INET_SERVICE 13u
#define APP_CHAIN_PREFIX "egress_"
/* The brokering proxy (firewall_secret_proxy.c): the map interface . address -> proxy port, and
 * the filter chain at prerouting that judges a connection before its redirect. */
#define MAP_SECRET_PROXY "secret_proxy"
#define SET_ID_SECRET_PROXY 7
#define CHAIN_SECRET_PROXY_JUDGE "secret_proxy_judge"
/* v2: the spoofing check before `established`; v3: egress; v4: an allowlist Sandbox's TCP DNS
 * redirected to the forwarder too; v5: the callback API's 443 open to `egress: none` Sandboxes;
 * v6: TCP 80/443 of Apps with secrets redirected to the brokering proxy; v7: their DNS to the
 * forwarder too. A worker finding an older table replaces it. */
#define TABLE_COMMENT_FMT "sbx firewall v7 pool %s: managed by sbx, do not edit"

struct fw {
    pthread_mutex_t lock;
    struct mnl_socket *nl;
    uint32_t portid;
    uint32_t seq;
};

struct pool4 {
    struct in_addr net;
    int len;
};

#define OFF_SADDR 12
#define OFF_DADDR 16

/* One element of a set as a dump gave it: its key and its comment. */
struct set_elem_raw {
    char key[KEY_LEN]; /* zero past key_len */
    uint32_t key_len;
    char comment[FW_OWNER_LEN];
};

struct set_dump {
    struct set_elem_raw *v;
    size_t n, cap;
};

struct elems_acc {
    struct fw_element *v;
    size_t n;
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

/* libnftnl objects are small; running out of memory building one is not recoverable here. */
static inline void *must(void *p)
{
    if (!p) {
        fputs("firewall: out of memory\n", stderr);
        abort();
    }
    return p;
}

/* ---- firewall.c ---- */

int fw_apply(struct fw *fw, void (*fill)(struct fw_batch *, const void *), const void *arg,
             char *err, size_t errlen);

/* ---- firewall_batch.c ---- */

int parse_prefix(const char *cidr, struct pool4 *out, char *err, size_t errlen);
void batch_commit(struct fw_batch *b, struct nlmsghdr *nlh);
void batch_begin(struct fw_batch *b, uint32_t seq);
void batch_end(struct fw_batch *b);
struct nlmsghdr *batch_msg(struct fw_batch *b, uint16_t type, uint16_t flags);
void batch_table(struct fw_batch *b, uint16_t type, uint16_t flags, const char *comment);
void batch_chain(struct fw_batch *b, const char *name, const char *type, int hook, int prio);
void batch_set_typed(struct fw_batch *b, const char *name, uint32_t id, uint32_t key_type,
                     uint32_t key_len, uint32_t flags, const char *comment);
void batch_set(struct fw_batch *b, const char *name, uint32_t id, const char *comment);
void batch_counter(struct fw_batch *b, const char *name);
void batch_rule(struct fw_batch *b, struct nftnl_rule *r);
void batch_elem(struct fw_batch *b, uint16_t type, uint16_t flags, const char *set_name,
                const char *ifname, struct in_addr addr, const char *owner);
void batch_elem_absent(struct fw_batch *b, const char *set_name, const char *ifname,
                       struct in_addr addr);
struct nftnl_rule *rule_new(const char *chain);
struct nftnl_expr *expr_new(struct nftnl_rule *r, const char *name);
void x_cmp(struct nftnl_rule *r, uint32_t sreg, uint32_t op, const void *data, uint32_t len);
void x_payload(struct nftnl_rule *r, uint32_t base, uint32_t offset, uint32_t len, uint32_t dreg);
void x_lookup(struct nftnl_rule *r, uint32_t sreg, const char *set, uint32_t set_id, bool inverted);
void x_counter(struct nftnl_rule *r, enum fw_drop_reason reason);
void x_log(struct nftnl_rule *r, enum fw_drop_reason reason);
void x_verdict(struct nftnl_rule *r, int verdict, const char *chain);
void m_ifname_prefix(struct nftnl_rule *r, uint32_t meta_key, uint32_t op);
void m_nfproto(struct nftnl_rule *r, uint8_t proto);
void m_ct_established(struct nftnl_rule *r);
void m_tcp_dport(struct nftnl_rule *r, uint16_t port);
void m_l4proto(struct nftnl_rule *r, uint8_t proto);
void x_dport(struct nftnl_rule *r);
void m_ip_prefix(struct nftnl_rule *r, uint32_t offset, struct in_addr net, int len);
void m_iif_saddr_in(struct nftnl_rule *r, const char *set, uint32_t set_id, bool inverted);
struct in_addr addr4(const char *s);

/* ---- firewall_rules.c ---- */

void batch_structure(struct fw_batch *b, const struct pool4 *pool);
void table_comment(const char *pool, char *out, size_t outlen);
void batch_add_sandbox(struct fw_batch *b, const struct fw_sandbox *sb);
int check_sandbox(const struct fw_sandbox *sb, char *err, size_t errlen);

/* ---- firewall_secret_proxy.c ---- */

void batch_secret_proxy_map(struct fw_batch *b);
void rules_secret_proxy(struct fw_batch *b);
void rule_secret_proxy_to_host(struct fw_batch *b, const char *chain);
/* Out of the map (absent already is success). */
int forget_secret_proxy(struct fw *fw, const struct fw_sandbox *sb, char *err, size_t errlen);

/* ---- firewall_netlink.c ---- */

int fw_send_batch(struct fw *fw, struct fw_batch *b, char *err, size_t errlen);
int fw_request(struct fw *fw, const char *what, struct nlmsghdr *nlh, mnl_cb_t cb, void *data,
               char *err, size_t errlen);
uint32_t fw_next_seq(struct fw *fw);
void udata_comment(const void *data, uint32_t len, char *out, size_t outlen);
int fw_get_table(struct fw *fw, char comment[160], char *err, size_t errlen);
int fw_dump_set(struct fw *fw, const char *set_name, struct set_dump *d, char *err, size_t errlen);
bool elem_key_sandbox(const struct set_elem_raw *r, char ifname[IFNAMSIZ], struct in_addr *addr);
int fw_read_elements(struct fw *fw, struct elems_acc *acc, char *err, size_t errlen);

/* ---- firewall_egress.c ---- */

/* Out of any egress policy. */
int forget_egress(struct fw *fw, const struct fw_sandbox *sb, char *err, size_t errlen);
/* The egress sets' contents, for a replacement batch. */
int batch_carry_egress(struct fw *fw, struct fw_batch *b, char *err, size_t errlen);

#endif
