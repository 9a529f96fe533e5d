/*
 * firewall_rules.c: the structure of the firewall's table (firewall_internal.h): its chains,
 * sets and rules, and the batch that adds one Sandbox's elements.
 */
#include "host/firewall_internal.h"

#include "ipv4_ranges.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/gen.h>
#include <libnftnl/object.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* ---- the structure ---- */

/* The Sandboxes whose DNS goes to sbx's forwarder, whatever resolver they name: an allowlist
 * App's, so that a lookup opens only what the App allows; and an App with secrets' (a key of the
 * map secret_proxy, whatever its policy), so that the names its HTTP(S) goes to are the names
 * the host's resolvers gave, asked on the host, and its DNS carries nothing to a resolver of the
 * agent's choosing beside the brokered connections. */
static const struct {
    const char *set;
    uint32_t id;
} dns_forwarded[] = {{SET_EGRESS_ALLOWLIST, SET_ID_EGRESS_ALLOWLIST},
                     {MAP_SECRET_PROXY, SET_ID_SECRET_PROXY}};

/* Base rule: `<iifname|oifname> "sbx*" jump <chain>` */
static void rule_dispatch(struct fw_batch *b, const char *base, uint32_t meta_key, const char *to)
{
    struct nftnl_rule *r = rule_new(base);
    m_ifname_prefix(r, meta_key, NFT_CMP_EQ);
    x_verdict(r, NFT_JUMP, to);
    batch_rule(b, r);
}

/* The rules every packet from a Sandbox passes first, to the host or elsewhere. The interface
 * and address check comes before `established`: conntrack knows nothing of interfaces, so a
 * packet from another Sandbox carrying this Sandbox's address and ports matches this Sandbox's
 * connection and would be accepted as part of it. */
static void rules_from_sandbox_common(struct fw_batch *b, const char *chain)
{
    struct nftnl_rule *r = rule_new(chain); /* meta nfproto ipv6 counter name "drop_ipv6" drop */
    m_nfproto(r, NFPROTO_IPV6);
    x_counter(r, FW_DROP_IPV6);
    x_verdict(r, NF_DROP, NULL);
    batch_rule(b, r);

    r = rule_new(chain); /* meta nfproto ipv4 iifname . ip saddr != @sandboxes ... drop */
    m_nfproto(r, NFPROTO_IPV4);
    m_iif_saddr_in(r, SET_SANDBOXES, SET_ID_SANDBOXES, true);
    x_log(r, FW_DROP_SPOOFED);
    x_counter(r, FW_DROP_SPOOFED);
    x_verdict(r, NF_DROP, NULL);
    batch_rule(b, r);

    r = rule_new(chain); /* ct state established,related accept */
    m_ct_established(r);
    x_verdict(r, NF_ACCEPT, NULL);
    batch_rule(b, r);
}

/* meta nfproto ipv4 iifname . ip saddr @egress_none counter name "drop_policy" drop */
static void rule_egress_none(struct fw_batch *b, const char *chain)
{
    struct nftnl_rule *r = rule_new(chain);
    m_nfproto(r, NFPROTO_IPV4);
    m_iif_saddr_in(r, SET_EGRESS_NONE, SET_ID_EGRESS_NONE, false);
    x_log(r, FW_DROP_POLICY);
    x_counter(r, FW_DROP_POLICY);
    x_verdict(r, NF_DROP, NULL);
    batch_rule(b, r);
}

static void rules_sandbox_to_host(struct fw_batch *b)
{
    const char *chain = "sandbox_to_host";
    rules_from_sandbox_common(b, chain);

    struct nftnl_rule *r = rule_new(chain); /* meta nfproto ipv4 iifname . ip saddr @nfs tcp dport
                                               2049 accept */
    m_nfproto(r, NFPROTO_IPV4);
    m_iif_saddr_in(r, SET_NFS, SET_ID_NFS, false);
    m_tcp_dport(r, 2049);
    x_verdict(r, NF_ACCEPT, NULL);
    batch_rule(b, r);

    /* tcp dport 443 accept: the callback API (callback.h), for every Sandbox, `egress: none`
     * ones too: it reaches the platform, not the internet. */
    r = rule_new(chain);
    m_tcp_dport(r, 443);
    x_verdict(r, NF_ACCEPT, NULL);
    batch_rule(b, r);

    /* a connection of a Sandbox of an App with secrets, redirected to its worker's proxy */
    rule_secret_proxy_to_host(b, chain);

    rule_egress_none(b, chain); /* egress none: nothing else to the host */

    /* meta nfproto ipv4 iifname . ip saddr @egress_allowlist meta l4proto udp|tcp th dport 5300
     * accept, and the same for @secret_proxy: the DNS of a Sandbox whose lookups go through the
     * forwarder, redirected there (rule_dns_redirect) */
    for (size_t k = 0; k < sizeof dns_forwarded / sizeof *dns_forwarded; k++)
        for (int i = 0; i < 2; i++) {
            r = rule_new(chain);
            m_nfproto(r, NFPROTO_IPV4);
            m_iif_saddr_in(r, dns_forwarded[k].set, dns_forwarded[k].id, false);
            m_l4proto(r, i == 0 ? IPPROTO_UDP : IPPROTO_TCP);
            uint16_t fwd = htons(FW_DNS_FORWARDER_PORT);
            x_dport(r);
            x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &fwd, 2);
            x_verdict(r, NF_ACCEPT, NULL);
            batch_rule(b, r);
        }

    r = rule_new(chain); /* counter name "drop_host" drop */
    x_log(r, FW_DROP_HOST);
    x_counter(r, FW_DROP_HOST);
    x_verdict(r, NF_DROP, NULL);
    batch_rule(b, r);
}

static void rule_drop_daddr(struct fw_batch *b, const char *chain, const char *net, int len,
                            enum fw_drop_reason reason)
{
    struct nftnl_rule *r = rule_new(chain); /* meta nfproto ipv4 ip daddr N/L counter drop */
    m_nfproto(r, NFPROTO_IPV4);
    m_ip_prefix(r, OFF_DADDR, addr4(net), len);
    x_log(r, reason);
    x_counter(r, reason);
    x_verdict(r, NF_DROP, NULL);
    batch_rule(b, r);
}

/* After the blocked ranges, public IPv4: the App's policy narrows first, then DNS only
 * to the resolvers, TCP only to egress_ports, everything else dropped. */
static void rules_public_egress(struct fw_batch *b, const char *chain)
{
    rule_egress_none(b, chain);

    /* meta nfproto ipv4 iifname . ip saddr @egress_allowlist jump egress_dispatch: an allowlist
     * Sandbox goes through its App's chain (egress_dispatch holds one rule per App) */
    struct nftnl_rule *r = rule_new(chain);
    m_nfproto(r, NFPROTO_IPV4);
    m_iif_saddr_in(r, SET_EGRESS_ALLOWLIST, SET_ID_EGRESS_ALLOWLIST, false);
    x_verdict(r, NFT_JUMP, CHAIN_EGRESS_DISPATCH);
    batch_rule(b, r);

    static const uint8_t dns_protos[2] = {IPPROTO_UDP, IPPROTO_TCP};
    for (int i = 0; i < 2; i++) { /* meta l4proto udp ip daddr @resolvers udp dport 53 accept */
        uint16_t dns = htons(53);
        r = rule_new(chain);
        m_nfproto(r, NFPROTO_IPV4);
        m_l4proto(r, dns_protos[i]);
        x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, OFF_DADDR, 4, NFT_REG_1);
        x_lookup(r, NFT_REG_1, SET_RESOLVERS, SET_ID_RESOLVERS, false);
        x_dport(r);
        x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &dns, 2);
        x_verdict(r, NF_ACCEPT, NULL);
        batch_rule(b, r);
    }
    for (int i = 0; i < 2; i++) { /* meta l4proto udp udp dport 53 counter "drop_dns" drop */
        uint16_t dns = htons(53);
        r = rule_new(chain);
        m_l4proto(r, dns_protos[i]);
        x_dport(r);
        x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &dns, 2);
        x_log(r, FW_DROP_DNS);
        x_counter(r, FW_DROP_DNS);
        x_verdict(r, NF_DROP, NULL);
        batch_rule(b, r);
    }
    r = rule_new(chain); /* meta l4proto tcp tcp dport @egress_ports accept */
    m_l4proto(r, IPPROTO_TCP);
    x_dport(r);
    x_lookup(r, NFT_REG_1, SET_EGRESS_PORTS, SET_ID_EGRESS_PORTS, false);
    x_verdict(r, NF_ACCEPT, NULL);
    batch_rule(b, r);

    r = rule_new(chain); /* counter name "drop_egress" drop */
    x_log(r, FW_DROP_EGRESS);
    x_counter(r, FW_DROP_EGRESS);
    x_verdict(r, NF_DROP, NULL);
    batch_rule(b, r);
}

static void rules_sandbox_out(struct fw_batch *b)
{
    const char *chain = "sandbox_out";
    rules_from_sandbox_common(b, chain);
    static const enum fw_drop_reason reason_of[] = {
        [IPV4_RANGE_PRIVATE] = FW_DROP_PRIVATE,
        [IPV4_RANGE_METADATA] = FW_DROP_METADATA,
        [IPV4_RANGE_SPECIAL] = FW_DROP_SPECIAL,
    };
    for (size_t i = 0; i < ipv4_blocked_range_count; i++)
        rule_drop_daddr(b, chain, ipv4_blocked_ranges[i].net, ipv4_blocked_ranges[i].len,
                        reason_of[ipv4_blocked_ranges[i].kind]);
    rules_public_egress(b, chain);
}

static void rules_sandbox_in(struct fw_batch *b)
{
    const char *chain = "sandbox_in";
    struct nftnl_rule *r = rule_new(chain);
    m_ct_established(r);
    x_verdict(r, NF_ACCEPT, NULL);
    batch_rule(b, r);

    r = rule_new(chain);
    m_nfproto(r, NFPROTO_IPV6);
    x_counter(r, FW_DROP_IPV6);
    x_verdict(r, NF_DROP, NULL);
    batch_rule(b, r);

    r = rule_new(chain);
    x_counter(r, FW_DROP_INBOUND);
    x_verdict(r, NF_DROP, NULL);
    batch_rule(b, r);
}

/* meta nfproto ipv4 ip saddr <pool> oifname != "sbx*" masquerade */
static void rule_masquerade(struct fw_batch *b, const struct pool4 *pool)
{
    struct nftnl_rule *r = rule_new("postrouting");
    m_nfproto(r, NFPROTO_IPV4);
    m_ip_prefix(r, OFF_SADDR, pool->net, pool->len);
    m_ifname_prefix(r, NFT_META_OIFNAME, NFT_CMP_NEQ);
    expr_new(r, "masq");
    batch_rule(b, r);
}

/* meta nfproto ipv4 iifname . ip saddr @<set> meta l4proto udp udp dport 53 redirect to
 * :FW_DNS_FORWARDER_PORT, for each set of dns_forwarded -- such a Sandbox's DNS, whatever
 * resolver it names, goes to sbx's forwarder, which answers per the App's policy and asks only
 * the host's resolvers. The same for TCP (proto IPPROTO_TCP): a resolver library retries there
 * when an answer did not fit in UDP. */
static void rule_dns_redirect(struct fw_batch *b, uint8_t proto)
{
    for (size_t k = 0; k < sizeof dns_forwarded / sizeof *dns_forwarded; k++) {
        struct nftnl_rule *r = rule_new("prerouting");
        m_nfproto(r, NFPROTO_IPV4);
        m_iif_saddr_in(r, dns_forwarded[k].set, dns_forwarded[k].id, false);
        m_l4proto(r, proto);
        uint16_t dns = htons(53), to = htons(FW_DNS_FORWARDER_PORT);
        x_dport(r);
        x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &dns, 2);
        struct nftnl_expr *e = expr_new(r, "immediate");
        nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_1);
        nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &to, 2);
        e = expr_new(r, "redir");
        nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MIN, NFT_REG_1);
        batch_rule(b, r);
    }
}

/* The whole table, after the table message itself. Base chains run before the host's usual
 * filter priority so that the drops are counted here first; a drop is final in nftables whatever
 * other tables say, and an accept here still leaves other tables their say. */
void batch_structure(struct fw_batch *b, const struct pool4 *pool)
{
    for (int i = 0; i < FW_DROP_COUNT; i++) {
        char name[32];
        snprintf(name, sizeof(name), "drop_%s", fw_drop_reason_names[i]);
        batch_counter(b, name);
    }
    batch_set(b, SET_SANDBOXES, SET_ID_SANDBOXES, "live Sandboxes: host interface . address");
    batch_set(b, SET_NFS, SET_ID_NFS, "Sandboxes with an NFS Workspace: may reach TCP 2049");
    batch_set_typed(b, SET_EGRESS_PORTS, SET_ID_EGRESS_PORTS, KEY_TYPE_INET_SERVICE, 2, 0,
                    "TCP ports open to public IPv4 (egress_ports)");
    batch_set_typed(b, SET_RESOLVERS, SET_ID_RESOLVERS, KEY_TYPE_IPV4, 4, 0,
                    "the only DNS resolvers (dns_resolvers)");
    batch_set(b, SET_EGRESS_NONE, SET_ID_EGRESS_NONE, "Sandboxes of Apps with egress none");
    batch_set(b, SET_EGRESS_ALLOWLIST, SET_ID_EGRESS_ALLOWLIST,
              "Sandboxes of allowlist Apps (each element's comment: its App)");
    batch_secret_proxy_map(b);

    batch_chain(b, "sandbox_to_host", NULL, 0, 0);
    batch_chain(b, "sandbox_out", NULL, 0, 0);
    batch_chain(b, "sandbox_in", NULL, 0, 0);
    batch_chain(b, CHAIN_EGRESS_DISPATCH, NULL, 0, 0);
    batch_chain(b, "input", "filter", NF_INET_LOCAL_IN, -10);
    batch_chain(b, "forward", "filter", NF_INET_FORWARD, -10);
    batch_chain(b, "output", "filter", NF_INET_LOCAL_OUT, -10);
    batch_chain(b, "postrouting", "nat", NF_INET_POST_ROUTING, 100);
    batch_chain(b, "prerouting", "nat", NF_INET_PRE_ROUTING, -100);
    batch_chain(b, CHAIN_SECRET_PROXY_JUDGE, "filter", NF_INET_PRE_ROUTING, -150);

    rules_sandbox_to_host(b);
    rules_sandbox_out(b);
    rules_sandbox_in(b);
    rule_dispatch(b, "input", NFT_META_IIFNAME, "sandbox_to_host");
    /* Into a Sandbox first: a packet between two Sandboxes must meet the inbound rule even when
     * the pool is public address space that sandbox_out would accept. */
    rule_dispatch(b, "forward", NFT_META_OIFNAME, "sandbox_in");
    rule_dispatch(b, "forward", NFT_META_IIFNAME, "sandbox_out");
    rule_dispatch(b, "output", NFT_META_OIFNAME, "sandbox_in");
    rule_masquerade(b, pool);
    rule_dns_redirect(b, IPPROTO_UDP);
    rule_dns_redirect(b, IPPROTO_TCP);
    rules_secret_proxy(b);
}

void table_comment(const char *pool, char *out, size_t outlen)
{
    snprintf(out, outlen, TABLE_COMMENT_FMT, pool);
}

void batch_add_sandbox(struct fw_batch *b, const struct fw_sandbox *sb)
{
    /* Replaces a stale element left by a Sandbox that had the same interface (a crash before
     * reconciliation) in the same batch, so the comment names the new owner. */
    batch_elem_absent(b, SET_SANDBOXES, sb->ifname, sb->addr);
    batch_elem_absent(b, SET_NFS, sb->ifname, sb->addr);
    batch_elem(b, NFT_MSG_NEWSETELEM, NLM_F_CREATE | NLM_F_EXCL, SET_SANDBOXES, sb->ifname,
               sb->addr, sb->sandbox_id);
}

int fw_build_structure(const char *net_pool, struct fw_batch *out, char *err, size_t errlen)
{
    struct pool4 pool;
    if (parse_prefix(net_pool, &pool, err, errlen) < 0)
        return -1;
    char comment[160];
    table_comment(net_pool, comment, sizeof(comment));
    memset(out, 0, sizeof(*out));
    batch_begin(out, (uint32_t)time(NULL));
    batch_table(out, NFT_MSG_NEWTABLE, NLM_F_CREATE | NLM_F_EXCL, comment);
    batch_structure(out, &pool);
    batch_end(out);
    return 0;
}

int check_sandbox(const struct fw_sandbox *sb, char *err, size_t errlen)
{
    if (!sb->ifname || strncmp(sb->ifname, FW_IFNAME_PREFIX, strlen(FW_IFNAME_PREFIX)) != 0 ||
        strlen(sb->ifname) >= IFNAMSIZ)
        return fail(err, errlen, "interface \"%s\" is not a Sandbox interface (%s*)",
                    sb->ifname ? sb->ifname : "", FW_IFNAME_PREFIX);
    if (!sb->sandbox_id || !*sb->sandbox_id || strlen(sb->sandbox_id) >= FW_OWNER_LEN)
        return fail(err, errlen, "a Sandbox element needs its Sandbox id");
    return 0;
}

int fw_build_sandbox_add(const struct fw_sandbox *sb, struct fw_batch *out, char *err,
                         size_t errlen)
{
    if (check_sandbox(sb, err, errlen) < 0)
        return -1;
    memset(out, 0, sizeof(*out));
    batch_begin(out, (uint32_t)time(NULL));
    batch_add_sandbox(out, sb);
    batch_end(out);
    return 0;
}
