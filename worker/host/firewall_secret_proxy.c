/*
 * firewall_secret_proxy.c: the firewall's side of the brokering egress proxy (secret_proxy.h).
 * A Sandbox of an App with secrets has an element in the map `secret_proxy`
 * (interface . address -> the TCP port of its worker's proxy): its new TCP connections to ports
 * 80 and 443 of any address that is not the host's are
 *   1. judged first, in a filter chain at prerouting (priority -150, before the redirect), by the
 *      very rules its forwarded traffic meets (`jump sandbox_out`: the blocked ranges, the App's
 *      policy, egress_ports), so the proxy never reaches what the Sandbox itself could not;
 *   2. redirected (nat prerouting) to its worker's proxy port, which the proxy's original
 *      destination (SO_ORIGINAL_DST) undoes for the upstream connection;
 *   3. accepted on the host (sandbox_to_host: a member of the map whose connection was
 *      destination-NATed), where every other new connection but the callback API's is dropped.
 * A map rather than one port for all: each worker runs its own proxy and holds its own
 * Sandboxes' secrets, so a Sandbox's connections must reach its own worker.
 */
#include "host/firewall_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libnftnl/common.h>
#include <pthread.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/udata.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/rtnetlink.h>
#include <stdlib.h>
#include <string.h>

static const uint16_t proxied_ports[] = {443, 80};

void batch_secret_proxy_map(struct fw_batch *b)
{
    struct nftnl_set *s = must(nftnl_set_alloc());
    nftnl_set_set_str(s, NFTNL_SET_TABLE, FW_TABLE);
    nftnl_set_set_str(s, NFTNL_SET_NAME, MAP_SECRET_PROXY);
    nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
    nftnl_set_set_u32(s, NFTNL_SET_ID, SET_ID_SECRET_PROXY);
    nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, KEY_TYPE_IFNAME_IPV4);
    nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, KEY_LEN);
    nftnl_set_set_u32(s, NFTNL_SET_FLAGS, NFT_SET_MAP);
    nftnl_set_set_u32(s, NFTNL_SET_DATA_TYPE, KEY_TYPE_INET_SERVICE);
    nftnl_set_set_u32(s, NFTNL_SET_DATA_LEN, 2);
    struct nftnl_udata_buf *ud = must(nftnl_udata_buf_alloc(256));
    nftnl_udata_put_strz(ud, NFTNL_UDATA_SET_COMMENT,
                         "Sandboxes of Apps with secrets: their worker's proxy port");
    nftnl_set_set_data(s, NFTNL_SET_USERDATA, nftnl_udata_buf_data(ud), nftnl_udata_buf_len(ud));
    struct nlmsghdr *nlh = batch_msg(b, NFT_MSG_NEWSET, NLM_F_CREATE);
    nftnl_set_nlmsg_build_payload(nlh, s);
    batch_commit(b, nlh);
    nftnl_set_free(s);
    nftnl_udata_buf_free(ud);
}

/* tcp dport P, fib daddr type != local, iifname . ip saddr in the map (dreg: its port). */
static void m_proxied(struct nftnl_rule *r, uint16_t port, bool want_port)
{
    m_nfproto(r, NFPROTO_IPV4);
    m_tcp_dport(r, port);
    struct nftnl_expr *e = expr_new(r, "fib");
    nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_FLAGS, NFTA_FIB_F_DADDR);
    nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_RESULT, NFT_FIB_RESULT_ADDRTYPE);
    nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_DREG, NFT_REG_1);
    uint32_t local = RTN_LOCAL;
    x_cmp(r, NFT_REG_1, NFT_CMP_NEQ, &local, 4);
    e = expr_new(r, "meta");
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, NFT_META_IIFNAME);
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG32_00);
    x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, OFF_SADDR, 4, NFT_REG32_04);
    e = expr_new(r, "lookup");
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG32_00);
    nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, MAP_SECRET_PROXY);
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, SET_ID_SECRET_PROXY);
    if (want_port)
        nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_DREG, NFT_REG_1);
}

void rules_secret_proxy(struct fw_batch *b)
{
    for (size_t i = 0; i < sizeof proxied_ports / sizeof *proxied_ports; i++) {
        /* ... jump sandbox_out: the Sandbox's own egress rules judge the original destination */
        struct nftnl_rule *r = rule_new(CHAIN_SECRET_PROXY_JUDGE);
        m_proxied(r, proxied_ports[i], false);
        x_verdict(r, NFT_JUMP, "sandbox_out");
        batch_rule(b, r);

        /* ... redirect to :<the map's port> */
        r = rule_new("prerouting");
        m_proxied(r, proxied_ports[i], true);
        struct nftnl_expr *e = expr_new(r, "redir");
        nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MIN, NFT_REG_1);
        batch_rule(b, r);
    }
}

/* In sandbox_to_host: meta nfproto ipv4 iifname . ip saddr @secret_proxy ct status dnat accept */
void rule_secret_proxy_to_host(struct fw_batch *b, const char *chain)
{
    struct nftnl_rule *r = rule_new(chain);
    m_nfproto(r, NFPROTO_IPV4);
    m_iif_saddr_in(r, MAP_SECRET_PROXY, SET_ID_SECRET_PROXY, false);
    struct nftnl_expr *e = expr_new(r, "ct");
    nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_STATUS);
    nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
    uint32_t mask = IPS_DST_NAT, zero = 0;
    e = expr_new(r, "bitwise");
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, 4);
    nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, &mask, 4);
    nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, &zero, 4);
    x_cmp(r, NFT_REG_1, NFT_CMP_NEQ, &zero, 4);
    x_verdict(r, NF_ACCEPT, NULL);
    batch_rule(b, r);
}

struct proxy_elem {
    const struct fw_sandbox *sb;
    uint16_t port;
};

static void map_elem(struct fw_batch *b, uint16_t type, uint16_t flags, const struct proxy_elem *x)
{
    struct nftnl_set *s = must(nftnl_set_alloc());
    nftnl_set_set_str(s, NFTNL_SET_TABLE, FW_TABLE);
    nftnl_set_set_str(s, NFTNL_SET_NAME, MAP_SECRET_PROXY);
    nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
    struct nftnl_set_elem *e = must(nftnl_set_elem_alloc());
    char key[KEY_LEN] = {0};
    strncpy(key, x->sb->ifname, KEY_IFNAME_LEN - 1);
    memcpy(key + KEY_IFNAME_LEN, &x->sb->addr.s_addr, 4);
    nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, KEY_LEN);
    struct nftnl_udata_buf *ud = NULL;
    if (type == NFT_MSG_NEWSETELEM) {
        uint16_t be = htons(x->port);
        nftnl_set_elem_set(e, NFTNL_SET_ELEM_DATA, &be, 2);
        ud = must(nftnl_udata_buf_alloc(FW_OWNER_LEN + 8));
        nftnl_udata_put_strz(ud, NFTNL_UDATA_SET_ELEM_COMMENT, x->sb->sandbox_id);
        nftnl_set_elem_set(e, NFTNL_SET_ELEM_USERDATA, nftnl_udata_buf_data(ud),
                           nftnl_udata_buf_len(ud));
    }
    nftnl_set_elem_add(s, e);
    struct nlmsghdr *nlh = batch_msg(b, type, flags);
    nftnl_set_elems_nlmsg_build_payload(nlh, s);
    batch_commit(b, nlh);
    nftnl_set_free(s);
    if (ud)
        nftnl_udata_buf_free(ud);
}

static void fill_del(struct fw_batch *b, const void *arg)
{
    map_elem(b, NFT_MSG_DELSETELEM, 0, arg);
}

static void fill_add(struct fw_batch *b, const void *arg)
{
    map_elem(b, NFT_MSG_NEWSETELEM, NLM_F_CREATE | NLM_F_EXCL, arg);
}

static int found_cb(const struct nlmsghdr *nlh, void *data)
{
    (void)nlh;
    *(int *)data = 1;
    return MNL_CB_OK;
}

/* 1 when the Sandbox has an element in the map, 0 when not, -1 when it cannot tell. Asked first
 * because a map element cannot be made absent in the batch that adds it, as set elements can
 * (batch_elem_absent: an add of the same key with other data is refused), and a batch the kernel
 * refuses costs milliseconds (its abort path). */
static int map_has(struct fw *fw, const struct fw_sandbox *sb)
{
    char buf[MNL_SOCKET_BUFFER_SIZE], key[KEY_LEN] = {0}, why[256];
    strncpy(key, sb->ifname, KEY_IFNAME_LEN - 1);
    memcpy(key + KEY_IFNAME_LEN, &sb->addr.s_addr, 4);
    pthread_mutex_lock(&fw->lock);
    struct nlmsghdr *nlh =
        nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETSETELEM, NFPROTO_INET, NLM_F_ACK, fw_next_seq(fw));
    struct nftnl_set *s = must(nftnl_set_alloc());
    nftnl_set_set_str(s, NFTNL_SET_TABLE, FW_TABLE);
    nftnl_set_set_str(s, NFTNL_SET_NAME, MAP_SECRET_PROXY);
    struct nftnl_set_elem *e = must(nftnl_set_elem_alloc());
    nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, KEY_LEN);
    nftnl_set_elem_add(s, e);
    nftnl_set_elems_nlmsg_build_payload(nlh, s);
    nftnl_set_free(s);
    int found = 0;
    int rc = fw_request(fw, "map " MAP_SECRET_PROXY, nlh, found_cb, &found, why, sizeof why);
    int e2 = errno;
    pthread_mutex_unlock(&fw->lock);
    if (rc < 0)
        return e2 == ENOENT ? 0 : -1;
    return found;
}

int forget_secret_proxy(struct fw *fw, const struct fw_sandbox *sb, char *err, size_t errlen)
{
    int has = map_has(fw, sb);
    if (has < 0)
        return fail(err, errlen, "nftables: cannot read map %s", MAP_SECRET_PROXY);
    if (!has)
        return 0;
    struct proxy_elem x = {sb, 0};
    if (fw_apply(fw, fill_del, &x, err, errlen) == 0 || errno == ENOENT)
        return 0;
    return -1;
}

int fw_sandbox_set_secret_proxy(struct fw *fw, const struct fw_sandbox *sb, uint16_t port,
                                char *err, size_t errlen)
{
    if (check_sandbox(sb, err, errlen) < 0)
        return -1;
    if (forget_secret_proxy(fw, sb, err, errlen) < 0)
        return -1;
    if (port == 0)
        return 0;
    struct proxy_elem x = {sb, port};
    return fw_apply(fw, fill_add, &x, err, errlen);
}

int fw_secret_proxy_members(struct fw *fw, struct fw_egress_member **out, size_t *n, char *err,
                            size_t errlen)
{
    struct set_dump d;
    pthread_mutex_lock(&fw->lock);
    int rc = fw_dump_set(fw, MAP_SECRET_PROXY, &d, err, errlen);
    pthread_mutex_unlock(&fw->lock);
    if (rc < 0)
        return -1;
    struct fw_egress_member *v = must(calloc(d.n + 1, sizeof(*v)));
    size_t k = 0;
    for (size_t i = 0; i < d.n; i++)
        if (elem_key_sandbox(&d.v[i], v[k].ifname, &v[k].addr))
            k++;
    free(d.v);
    *out = v;
    *n = k;
    return 0;
}
