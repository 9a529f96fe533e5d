/*
 * firewall.c: builds and sends the nftables batches of firewall.h with libnftnl over libmnl.
 *
 * Layout: batch buffers (a growable array of nlmsgs between BATCH_BEGIN and BATCH_END); rule
 * building blocks (one function per nftables match, each appending the expressions `nft` itself
 * would generate, so that `nft list table inet sbx` prints the rules in their usual syntax); the
 * structure batch; element batches; netlink talk (send a batch, read every ack; dumps); and the
 * public functions.
 */
#include "host/firewall.h"

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

const char *const fw_drop_reason_names[FW_DROP_COUNT] = {
    "host",    "private", "metadata", "special", "ipv6",
    "inbound", "spoofed", "egress",   "dns",     "policy",
};

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
/* Egress (issue 15): host-wide ports and resolvers, per-Sandbox policy membership. nft's datatype
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
/* v2: the spoofing check before `established`; v3: egress; v4: an allowlist Sandbox's TCP DNS
 * redirected to the forwarder too; v5: the callback API's 443 open to `egress: none` Sandboxes.
 * A worker finding an older table replaces it. */
#define TABLE_COMMENT_FMT "sbx firewall v5 pool %s: managed by sbx, do not edit"

struct fw {
    pthread_mutex_t lock;
    struct mnl_socket *nl;
    uint32_t portid;
    uint32_t seq;
};

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

/* libnftnl objects are small; running out of memory building one is not recoverable here. */
static void *must(void *p)
{
    if (!p) {
        fputs("firewall: out of memory\n", stderr);
        abort();
    }
    return p;
}

/* ---- pool ---- */

struct pool4 {
    struct in_addr net;
    int len;
};

static int parse_prefix(const char *cidr, struct pool4 *out, char *err, size_t errlen)
{
    char addr[INET_ADDRSTRLEN + 4];
    const char *slash = strchr(cidr, '/');
    if (!slash || (size_t)(slash - cidr) >= INET_ADDRSTRLEN)
        return fail(err, errlen, "net_pool \"%s\": expected a.b.c.d/len", cidr);
    memcpy(addr, cidr, (size_t)(slash - cidr));
    addr[slash - cidr] = '\0';
    char *end;
    long len = strtol(slash + 1, &end, 10);
    if (*end || len < 1 || len > 30 || inet_pton(AF_INET, addr, &out->net) != 1)
        return fail(err, errlen, "net_pool \"%s\": expected a.b.c.d/len with len 1..30", cidr);
    uint32_t mask = htonl(~0u << (32 - len));
    if (out->net.s_addr & ~mask)
        return fail(err, errlen, "net_pool \"%s\": host bits set", cidr);
    out->len = (int)len;
    return 0;
}

/* ---- batch buffers ---- */

void fw_batch_free(struct fw_batch *b)
{
    free(b->buf);
    memset(b, 0, sizeof(*b));
}

/* Room for one more message: rules of this file stay far below this. */
#define MSG_ROOM 8192

static char *batch_tail(struct fw_batch *b)
{
    if (b->cap - b->len < MSG_ROOM) {
        size_t cap = b->cap ? b->cap * 2 : 4 * MSG_ROOM;
        b->buf = must(realloc(b->buf, cap));
        memset(b->buf + b->len, 0, cap - b->len);
        b->cap = cap;
    }
    return b->buf + b->len;
}

static void batch_commit(struct fw_batch *b, struct nlmsghdr *nlh)
{
    b->len += NLMSG_ALIGN(nlh->nlmsg_len);
}

static void batch_begin(struct fw_batch *b, uint32_t seq)
{
    b->seq = seq;
    batch_commit(b, nftnl_batch_begin(batch_tail(b), b->seq++));
}

/* Only the last message asks for an ack: the kernel reports every failing message anyway (and
 * applies nothing then), so one ack and no error mean the whole batch was applied. An ack per
 * message would overflow the socket's receive queue for large batches (each ack is an skb). */
static void batch_end(struct fw_batch *b)
{
    if (b->messages)
        ((struct nlmsghdr *)(b->buf + b->last))->nlmsg_flags |= NLM_F_ACK;
    batch_commit(b, nftnl_batch_end(batch_tail(b), b->seq++));
}

static struct nlmsghdr *batch_msg(struct fw_batch *b, uint16_t type, uint16_t flags)
{
    b->messages++;
    b->last = b->len;
    return nftnl_nlmsg_build_hdr(batch_tail(b), type, NFPROTO_INET, flags, b->seq++);
}

static void batch_table(struct fw_batch *b, uint16_t type, uint16_t flags, const char *comment)
{
    struct nftnl_table *t = must(nftnl_table_alloc());
    nftnl_table_set_str(t, NFTNL_TABLE_NAME, FW_TABLE);
    nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
    struct nftnl_udata_buf *ud = NULL;
    if (comment) {
        ud = must(nftnl_udata_buf_alloc(256));
        nftnl_udata_put_strz(ud, NFTNL_UDATA_TABLE_COMMENT, comment);
        nftnl_table_set_data(t, NFTNL_TABLE_USERDATA, nftnl_udata_buf_data(ud),
                             nftnl_udata_buf_len(ud));
    }
    struct nlmsghdr *nlh = batch_msg(b, type, flags);
    nftnl_table_nlmsg_build_payload(nlh, t);
    batch_commit(b, nlh);
    nftnl_table_free(t);
    if (ud)
        nftnl_udata_buf_free(ud);
}

static void batch_chain(struct fw_batch *b, const char *name, const char *type, int hook, int prio)
{
    struct nftnl_chain *c = must(nftnl_chain_alloc());
    nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, FW_TABLE);
    nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
    nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
    if (type) {
        nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, type);
        nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, (uint32_t)hook);
        nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, prio);
        nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
    }
    struct nlmsghdr *nlh = batch_msg(b, NFT_MSG_NEWCHAIN, NLM_F_CREATE);
    nftnl_chain_nlmsg_build_payload(nlh, c);
    batch_commit(b, nlh);
    nftnl_chain_free(c);
}

/* A set keyed by key_type (nft's datatype id) of key_len bytes, with flags (0: a plain set) and a
 * comment (none when NULL). */
static void batch_set_typed(struct fw_batch *b, const char *name, uint32_t id, uint32_t key_type,
                            uint32_t key_len, uint32_t flags, const char *comment)
{
    struct nftnl_set *s = must(nftnl_set_alloc());
    nftnl_set_set_str(s, NFTNL_SET_TABLE, FW_TABLE);
    nftnl_set_set_str(s, NFTNL_SET_NAME, name);
    nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
    nftnl_set_set_u32(s, NFTNL_SET_ID, id);
    nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, key_type);
    nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, key_len);
    nftnl_set_set_u32(s, NFTNL_SET_FLAGS, flags);
    struct nftnl_udata_buf *ud = NULL;
    if (comment) {
        ud = must(nftnl_udata_buf_alloc(256));
        nftnl_udata_put_strz(ud, NFTNL_UDATA_SET_COMMENT, comment);
        nftnl_set_set_data(s, NFTNL_SET_USERDATA, nftnl_udata_buf_data(ud),
                           nftnl_udata_buf_len(ud));
    }
    struct nlmsghdr *nlh = batch_msg(b, NFT_MSG_NEWSET, NLM_F_CREATE);
    nftnl_set_nlmsg_build_payload(nlh, s);
    batch_commit(b, nlh);
    nftnl_set_free(s);
    if (ud)
        nftnl_udata_buf_free(ud);
}

static void batch_set(struct fw_batch *b, const char *name, uint32_t id, const char *comment)
{
    batch_set_typed(b, name, id, KEY_TYPE_IFNAME_IPV4, KEY_LEN, 0, comment);
}

static void batch_counter(struct fw_batch *b, const char *name)
{
    struct nftnl_obj *o = must(nftnl_obj_alloc());
    nftnl_obj_set_str(o, NFTNL_OBJ_TABLE, FW_TABLE);
    nftnl_obj_set_str(o, NFTNL_OBJ_NAME, name);
    nftnl_obj_set_u32(o, NFTNL_OBJ_FAMILY, NFPROTO_INET);
    nftnl_obj_set_u32(o, NFTNL_OBJ_TYPE, NFT_OBJECT_COUNTER);
    struct nlmsghdr *nlh = batch_msg(b, NFT_MSG_NEWOBJ, NLM_F_CREATE);
    nftnl_obj_nlmsg_build_payload(nlh, o);
    batch_commit(b, nlh);
    nftnl_obj_free(o);
}

static void batch_rule(struct fw_batch *b, struct nftnl_rule *r)
{
    struct nlmsghdr *nlh = batch_msg(b, NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND);
    nftnl_rule_nlmsg_build_payload(nlh, r);
    batch_commit(b, nlh);
    nftnl_rule_free(r);
}

/* One element (key, optional owner comment) of set_name, added or deleted. */
static void batch_elem(struct fw_batch *b, uint16_t type, uint16_t flags, const char *set_name,
                       const char *ifname, struct in_addr addr, const char *owner)
{
    struct nftnl_set *s = must(nftnl_set_alloc());
    nftnl_set_set_str(s, NFTNL_SET_TABLE, FW_TABLE);
    nftnl_set_set_str(s, NFTNL_SET_NAME, set_name);
    nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
    struct nftnl_set_elem *e = must(nftnl_set_elem_alloc());
    char key[KEY_LEN] = {0};
    strncpy(key, ifname, KEY_IFNAME_LEN - 1);
    memcpy(key + KEY_IFNAME_LEN, &addr.s_addr, 4);
    nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, KEY_LEN);
    struct nftnl_udata_buf *ud = NULL;
    if (owner) {
        ud = must(nftnl_udata_buf_alloc(FW_OWNER_LEN + 8));
        nftnl_udata_put_strz(ud, NFTNL_UDATA_SET_ELEM_COMMENT, owner);
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

/* Makes sure the element is absent at this point of the batch, whether or not it existed: an add
 * without NLM_F_EXCL (a no-op when present) followed by a delete. The kernel's DESTROYSETELEM
 * does this in one message, but only from Linux 6.3. */
static void batch_elem_absent(struct fw_batch *b, const char *set_name, const char *ifname,
                              struct in_addr addr)
{
    batch_elem(b, NFT_MSG_NEWSETELEM, NLM_F_CREATE, set_name, ifname, addr, NULL);
    batch_elem(b, NFT_MSG_DELSETELEM, 0, set_name, ifname, addr, NULL);
}

/* ---- rule building blocks ---- */

static struct nftnl_rule *rule_new(const char *chain)
{
    struct nftnl_rule *r = must(nftnl_rule_alloc());
    nftnl_rule_set_str(r, NFTNL_RULE_TABLE, FW_TABLE);
    nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
    nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
    return r;
}

static struct nftnl_expr *expr_new(struct nftnl_rule *r, const char *name)
{
    struct nftnl_expr *e = must(nftnl_expr_alloc(name));
    nftnl_rule_add_expr(r, e);
    return e;
}

static void x_meta(struct nftnl_rule *r, uint32_t key, uint32_t dreg)
{
    struct nftnl_expr *e = expr_new(r, "meta");
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
    nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, dreg);
}

static void x_cmp(struct nftnl_rule *r, uint32_t sreg, uint32_t op, const void *data, uint32_t len)
{
    struct nftnl_expr *e = expr_new(r, "cmp");
    nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, sreg);
    nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
    nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
}

static void x_payload(struct nftnl_rule *r, uint32_t base, uint32_t offset, uint32_t len,
                      uint32_t dreg)
{
    struct nftnl_expr *e = expr_new(r, "payload");
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, base);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, offset);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
    nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, dreg);
}

static void x_bitwise(struct nftnl_rule *r, uint32_t reg, const void *mask, const void * xor,
                      uint32_t len)
{
    struct nftnl_expr *e = expr_new(r, "bitwise");
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, reg);
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, reg);
    nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, len);
    nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, mask, len);
    nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, xor, len);
}

static void x_lookup(struct nftnl_rule *r, uint32_t sreg, const char *set, uint32_t set_id,
                     bool inverted)
{
    struct nftnl_expr *e = expr_new(r, "lookup");
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, sreg);
    nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set);
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, set_id);
    if (inverted)
        nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
}

static void x_counter(struct nftnl_rule *r, enum fw_drop_reason reason)
{
    char name[32];
    snprintf(name, sizeof(name), "drop_%s", fw_drop_reason_names[reason]);
    struct nftnl_expr *e = expr_new(r, "objref");
    nftnl_expr_set_u32(e, NFTNL_EXPR_OBJREF_IMM_TYPE, NFT_OBJECT_COUNTER);
    nftnl_expr_set_str(e, NFTNL_EXPR_OBJREF_IMM_NAME, name);
}

/* log prefix "sbx drop_<reason> " group FW_NFLOG_GROUP snaplen FW_NFLOG_SNAPLEN: the denial, for
 * egress_log.c (NFLOG), before the counter counts it. */
static void x_log(struct nftnl_rule *r, enum fw_drop_reason reason)
{
    char prefix[48];
    snprintf(prefix, sizeof(prefix), FW_NFLOG_PREFIX "%s ", fw_drop_reason_names[reason]);
    struct nftnl_expr *e = expr_new(r, "log");
    nftnl_expr_set_str(e, NFTNL_EXPR_LOG_PREFIX, prefix);
    nftnl_expr_set_u16(e, NFTNL_EXPR_LOG_GROUP, FW_NFLOG_GROUP);
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOG_SNAPLEN, FW_NFLOG_SNAPLEN);
}

static void x_verdict(struct nftnl_rule *r, int verdict, const char *chain)
{
    struct nftnl_expr *e = expr_new(r, "immediate");
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)verdict);
    if (chain)
        nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, chain);
}

/* iifname/oifname "sbx*" (or != with op NFT_CMP_NEQ): a prefix compare, as nft makes it. */
static void m_ifname_prefix(struct nftnl_rule *r, uint32_t meta_key, uint32_t op)
{
    x_meta(r, meta_key, NFT_REG_1);
    x_cmp(r, NFT_REG_1, op, FW_IFNAME_PREFIX, sizeof(FW_IFNAME_PREFIX) - 1);
}

static void m_nfproto(struct nftnl_rule *r, uint8_t proto)
{
    x_meta(r, NFT_META_NFPROTO, NFT_REG_1);
    x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &proto, 1);
}

/* ct state established,related */
static void m_ct_established(struct nftnl_rule *r)
{
    struct nftnl_expr *e = expr_new(r, "ct");
    nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_STATE);
    nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
    uint32_t mask = NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED), zero = 0;
    x_bitwise(r, NFT_REG_1, &mask, &zero, 4);
    x_cmp(r, NFT_REG_1, NFT_CMP_NEQ, &zero, 4);
}

/* tcp dport <port> (in the inet family: meta l4proto tcp first) */
static void m_tcp_dport(struct nftnl_rule *r, uint16_t port)
{
    uint8_t tcp = IPPROTO_TCP;
    x_meta(r, NFT_META_L4PROTO, NFT_REG_1);
    x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &tcp, 1);
    uint16_t be = htons(port);
    x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG_1);
    x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &be, 2);
}

static void m_l4proto(struct nftnl_rule *r, uint8_t proto)
{
    x_meta(r, NFT_META_L4PROTO, NFT_REG_1);
    x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &proto, 1);
}

/* The destination port into reg 1 (tcp dport / udp dport: the same offset); l4proto matched. */
static void x_dport(struct nftnl_rule *r)
{
    x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG_1);
}

/* ip saddr/daddr <net>/<len>; the caller has matched meta nfproto ipv4. */
static void m_ip_prefix(struct nftnl_rule *r, uint32_t offset, struct in_addr net, int len)
{
    x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, offset, 4, NFT_REG_1);
    if (len < 32) {
        uint32_t mask = htonl(~0u << (32 - len)), zero = 0;
        x_bitwise(r, NFT_REG_1, &mask, &zero, 4);
    }
    x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &net.s_addr, 4);
}

/* iifname . ip saddr [!=] @set; the caller has matched meta nfproto ipv4. */
static void m_iif_saddr_in(struct nftnl_rule *r, const char *set, uint32_t set_id, bool inverted)
{
    x_meta(r, NFT_META_IIFNAME, NFT_REG32_00);
    x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 12, 4, NFT_REG32_04);
    x_lookup(r, NFT_REG32_00, set, set_id, inverted);
}

#define OFF_SADDR 12
#define OFF_DADDR 16

static struct in_addr addr4(const char *s)
{
    struct in_addr a;
    if (inet_pton(AF_INET, s, &a) != 1)
        abort(); /* only literals of this file */
    return a;
}

/* ---- the structure ---- */

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

    rule_egress_none(b, chain); /* egress none: nothing else to the host */

    /* meta nfproto ipv4 iifname . ip saddr @egress_allowlist meta l4proto udp|tcp th dport 5300
     * accept: an allowlist Sandbox's DNS, redirected to the forwarder (one rule each) */
    for (int i = 0; i < 2; i++) {
        r = rule_new(chain);
        m_nfproto(r, NFPROTO_IPV4);
        m_iif_saddr_in(r, SET_EGRESS_ALLOWLIST, SET_ID_EGRESS_ALLOWLIST, false);
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

/* After the blocked ranges, public IPv4 (issue 15): the App's policy narrows first, then DNS only
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

/* meta nfproto ipv4 iifname . ip saddr @egress_allowlist meta l4proto udp udp dport 53
 * redirect to :FW_DNS_FORWARDER_PORT -- an allowlist Sandbox's DNS, whatever resolver it names,
 * goes to sbx's forwarder, which answers only allowed names (so DNS carries nothing out). The
 * same for TCP (proto IPPROTO_TCP): a resolver library retries there when an answer did not fit
 * in UDP. */
static void rule_dns_redirect(struct fw_batch *b, uint8_t proto)
{
    struct nftnl_rule *r = rule_new("prerouting");
    m_nfproto(r, NFPROTO_IPV4);
    m_iif_saddr_in(r, SET_EGRESS_ALLOWLIST, SET_ID_EGRESS_ALLOWLIST, false);
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

/* The whole table, after the table message itself. Base chains run before the host's usual
 * filter priority so that the drops are counted here first; a drop is final in nftables whatever
 * other tables say, and an accept here still leaves other tables their say. */
static void batch_structure(struct fw_batch *b, const struct pool4 *pool)
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

    batch_chain(b, "sandbox_to_host", NULL, 0, 0);
    batch_chain(b, "sandbox_out", NULL, 0, 0);
    batch_chain(b, "sandbox_in", NULL, 0, 0);
    batch_chain(b, CHAIN_EGRESS_DISPATCH, NULL, 0, 0);
    batch_chain(b, "input", "filter", NF_INET_LOCAL_IN, -10);
    batch_chain(b, "forward", "filter", NF_INET_FORWARD, -10);
    batch_chain(b, "output", "filter", NF_INET_LOCAL_OUT, -10);
    batch_chain(b, "postrouting", "nat", NF_INET_POST_ROUTING, 100);
    batch_chain(b, "prerouting", "nat", NF_INET_PRE_ROUTING, -100);

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
}

static void table_comment(const char *pool, char *out, size_t outlen)
{
    snprintf(out, outlen, TABLE_COMMENT_FMT, pool);
}

static void batch_add_sandbox(struct fw_batch *b, const struct fw_sandbox *sb)
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

static int check_sandbox(const struct fw_sandbox *sb, char *err, size_t errlen)
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

/* ---- netlink talk ---- */

/* Sends a batch and reads every answer. nfnetlink handles a batch inside sendmsg(), so all
 * answers are queued by the time it returns: read until the queue is empty. */
static int fw_send_batch(struct fw *fw, struct fw_batch *b, char *err, size_t errlen)
{
    if (mnl_socket_sendto(fw->nl, b->buf, b->len) < 0)
        return fail(err, errlen, "nftables: send: %s", strerror(errno));
    char buf[MNL_SOCKET_BUFFER_SIZE];
    size_t acks = 0;
    int first_error = 0;
    uint32_t error_seq = 0;
    for (;;) {
        ssize_t n = recv(mnl_socket_get_fd(fw->nl), buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return fail(err, errlen, "nftables: receive: %s", strerror(errno));
        }
        const struct nlmsghdr *nlh = (const struct nlmsghdr *)buf;
        int len = (int)n;
        for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
            if (nlh->nlmsg_type != NLMSG_ERROR)
                continue;
            const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);
            if (e->error == 0)
                acks++;
            else if (!first_error) {
                first_error = -e->error;
                error_seq = nlh->nlmsg_seq;
            }
        }
    }
    if (first_error) {
        uint32_t first_seq = b->seq - (uint32_t)b->messages - 2; /* BATCH_BEGIN's */
        fail(err, errlen, "nftables: batch refused at message %u of %zu: %s", error_seq - first_seq,
             b->messages, strerror(first_error));
        errno = first_error; /* for callers that handle one answer (EEXIST) themselves */
        return -1;
    }
    if (b->messages && acks != 1)
        return fail(err, errlen, "nftables: batch of %zu messages not acknowledged", b->messages);
    return 0;
}

/* One request (a get or a dump); cb sees every answer. */
static int fw_request(struct fw *fw, const char *what, struct nlmsghdr *nlh, mnl_cb_t cb,
                      void *data, char *err, size_t errlen)
{
    uint32_t seq = nlh->nlmsg_seq;
    if (mnl_socket_sendto(fw->nl, nlh, nlh->nlmsg_len) < 0)
        return fail(err, errlen, "nftables: send: %s", strerror(errno));
    /* The kernel sizes each part of a dump to the largest buffer this socket has read into (up
     * to 32 KB): one of 32 KB takes a set of thousands of elements in an eighth of the walks a
     * page would, so the dump is shorter and a concurrent change less likely to tear it. */
    char buf[32768];
    for (;;) {
        ssize_t n = mnl_socket_recvfrom(fw->nl, buf, sizeof(buf));
        if (n < 0)
            return fail(err, errlen, "nftables: receive: %s", strerror(errno));
        int ret = mnl_cb_run(buf, (size_t)n, seq, fw->portid, cb, data);
        if (ret < 0) {
            int e = errno; /* the kernel's answer; fw_get_table tells ENOENT apart */
            fail(err, errlen, "nftables: %s: %s", what, strerror(e));
            errno = e;
            return -1;
        }
        if (ret == MNL_CB_STOP)
            return 0;
    }
}

static uint32_t fw_next_seq(struct fw *fw)
{
    return fw->seq++;
}

/* ---- reading the table ---- */

static int udata_comment_cb(const struct nftnl_udata *attr, void *data)
{
    const struct nftnl_udata **tb = data;
    if (nftnl_udata_type(attr) == 0 /* *_COMMENT is the first type of tables and elements */)
        tb[0] = attr;
    return 0;
}

/* The comment of a table or set element's userdata ("" if none). */
static void udata_comment(const void *data, uint32_t len, char *out, size_t outlen)
{
    const struct nftnl_udata *tb[1] = {NULL};
    out[0] = '\0';
    if (!data || nftnl_udata_parse(data, len, udata_comment_cb, tb) < 0 || !tb[0])
        return;
    snprintf(out, outlen, "%.*s", (int)nftnl_udata_len(tb[0]),
             (const char *)nftnl_udata_get(tb[0]));
}

static int table_cb(const struct nlmsghdr *nlh, void *data)
{
    char *comment = data;
    struct nftnl_table *t = must(nftnl_table_alloc());
    if (nftnl_table_nlmsg_parse(nlh, t) == 0) {
        uint32_t len = 0;
        const void *ud = nftnl_table_get_data(t, NFTNL_TABLE_USERDATA, &len);
        udata_comment(ud, len, comment, 160);
        if (!*comment)
            strcpy(comment, "?");
    }
    nftnl_table_free(t);
    return MNL_CB_OK;
}

/* 1 with its comment when the table exists, 0 when it does not. */
static int fw_get_table(struct fw *fw, char comment[160], char *err, size_t errlen)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh =
        nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETTABLE, NFPROTO_INET, NLM_F_ACK, fw_next_seq(fw));
    struct nftnl_table *t = must(nftnl_table_alloc());
    nftnl_table_set_str(t, NFTNL_TABLE_NAME, FW_TABLE);
    nftnl_table_nlmsg_build_payload(nlh, t);
    nftnl_table_free(t);
    comment[0] = '\0';
    char why[200];
    if (fw_request(fw, "table inet " FW_TABLE, nlh, table_cb, comment, why, sizeof(why)) < 0) {
        if (errno == ENOENT)
            return 0;
        return fail(err, errlen, "%s", why);
    }
    return comment[0] ? 1 : 0;
}

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

static int set_dump_cb(const struct nlmsghdr *nlh, void *data)
{
    struct set_dump *d = data;
    struct nftnl_set *s = must(nftnl_set_alloc());
    if (nftnl_set_elems_nlmsg_parse(nlh, s) == 0) {
        struct nftnl_set_elems_iter *it = must(nftnl_set_elems_iter_create(s));
        for (struct nftnl_set_elem *e = nftnl_set_elems_iter_next(it); e;
             e = nftnl_set_elems_iter_next(it)) {
            uint32_t klen = 0, ulen = 0;
            const char *key = nftnl_set_elem_get(e, NFTNL_SET_ELEM_KEY, &klen);
            if (!key || klen == 0 || klen > KEY_LEN)
                continue;
            if (d->n == d->cap) {
                d->cap = d->cap ? d->cap * 2 : 64;
                d->v = must(realloc(d->v, d->cap * sizeof(*d->v)));
            }
            struct set_elem_raw *r = &d->v[d->n++];
            memset(r->key, 0, sizeof(r->key));
            memcpy(r->key, key, klen);
            r->key_len = klen;
            const void *ud = nftnl_set_elem_get(e, NFTNL_SET_ELEM_USERDATA, &ulen);
            udata_comment(ud, ulen, r->comment, sizeof(r->comment));
        }
        nftnl_set_elems_iter_destroy(it);
    }
    nftnl_set_free(s);
    return MNL_CB_OK;
}

static int set_elem_raw_cmp(const void *a, const void *b)
{
    const struct set_elem_raw *x = a, *y = b;
    if (x->key_len != y->key_len)
        return x->key_len < y->key_len ? -1 : 1;
    return memcmp(x->key, y->key, x->key_len);
}

static int gen_cb(const struct nlmsghdr *nlh, void *data)
{
    uint32_t *id = data;
    struct nftnl_gen *g = must(nftnl_gen_alloc());
    if (nftnl_gen_nlmsg_parse(nlh, g) == 0)
        *id = nftnl_gen_get_u32(g, NFTNL_GEN_ID);
    nftnl_gen_free(g);
    return MNL_CB_OK;
}

/* The network namespace's ruleset generation: every committed nftables transaction, this
 * worker's or any other's, moves it on. */
static int fw_get_gen(struct fw *fw, uint32_t *id, char *err, size_t errlen)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh =
        nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETGEN, AF_UNSPEC, NLM_F_ACK, fw_next_seq(fw));
    return fw_request(fw, "ruleset generation", nlh, gen_cb, id, err, errlen);
}

/* Every element of set_name, sorted by key, as it stood at one moment.
 *
 * A dump that does not fit one netlink message is several walks of the set, each skipping as many
 * elements as the walks before it gave, and the kernel marks none of it inconsistent. So a dump
 * is torn, silently, when between two of those walks
 *  - another transaction (another worker's, another thread's) adds or removes elements: the
 *    positions shift, and elements are given twice or not at all;
 *  - the kernel resizes the set's hash table, which it does in a deferred worker after the
 *    transaction that grew or shrank the set: the walk order changes, and some elements are
 *    given twice and as many not at all.
 * As nft's own cache does, the dump is bracketed by two reads of the ruleset generation: equal,
 * no transaction came between, the set's contents stood still. A resize is no transaction; but
 * with the contents still, the dump gives at least as many elements as the set holds, so one
 * without a repeated key is whole. Either kind of tear is read again.
 *
 * errno is the kernel's answer on a refusal (ENOENT: no such set), EAGAIN when every dump was
 * torn. */
static int fw_dump_set(struct fw *fw, const char *set_name, struct set_dump *d, char *err,
                       size_t errlen)
{
    enum { TRIES = 10 };
    memset(d, 0, sizeof(*d));
    char what[80];
    snprintf(what, sizeof(what), "set %s", set_name);
    for (int attempt = 0; attempt < TRIES; attempt++) {
        if (attempt > 0) {
            /* Let the resize or the other writer finish: 1, 2, 4 ... 32 ms, 159 ms in all. */
            int ms = attempt < 6 ? 1 << (attempt - 1) : 32;
            struct timespec pause = {0, ms * 1000000L};
            nanosleep(&pause, NULL);
        }
        uint32_t gen_before = 0, gen_after = 0;
        if (fw_get_gen(fw, &gen_before, err, errlen) < 0)
            goto refused;
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETSETELEM, NFPROTO_INET,
                                                     NLM_F_DUMP, fw_next_seq(fw));
        struct nftnl_set *s = must(nftnl_set_alloc());
        nftnl_set_set_str(s, NFTNL_SET_TABLE, FW_TABLE);
        nftnl_set_set_str(s, NFTNL_SET_NAME, set_name);
        nftnl_set_elems_nlmsg_build_payload(nlh, s);
        nftnl_set_free(s);
        d->n = 0;
        if (fw_request(fw, what, nlh, set_dump_cb, d, err, errlen) < 0 ||
            fw_get_gen(fw, &gen_after, err, errlen) < 0)
            goto refused;
        if (gen_after != gen_before)
            continue;
        if (d->n > 1)
            qsort(d->v, d->n, sizeof(*d->v), set_elem_raw_cmp);
        bool torn = false;
        for (size_t i = 1; i < d->n && !torn; i++)
            torn = set_elem_raw_cmp(&d->v[i - 1], &d->v[i]) == 0;
        if (!torn)
            return 0;
    }
    free(d->v);
    memset(d, 0, sizeof(*d));
    fail(err, errlen, "nftables: set %s: each of %d dumps was torn by a concurrent change",
         set_name, TRIES);
    errno = EAGAIN;
    return -1;
refused:;
    int e = errno;
    free(d->v);
    memset(d, 0, sizeof(*d));
    errno = e;
    return -1;
}

/* A Sandbox element's interface and address from its key; false for a key of another shape. */
static bool elem_key_sandbox(const struct set_elem_raw *r, char ifname[IFNAMSIZ],
                             struct in_addr *addr)
{
    if (r->key_len != KEY_LEN)
        return false;
    memcpy(ifname, r->key, IFNAMSIZ - 1);
    ifname[IFNAMSIZ - 1] = '\0';
    memcpy(&addr->s_addr, r->key + KEY_IFNAME_LEN, 4);
    return true;
}

struct elems_acc {
    struct fw_element *v;
    size_t n;
};

/* Both sets, merged per interface and address (an element only in `nfs` still shows). */
static int fw_read_elements(struct fw *fw, struct elems_acc *acc, char *err, size_t errlen)
{
    memset(acc, 0, sizeof(*acc));
    struct set_dump sandboxes, nfs;
    if (fw_dump_set(fw, SET_SANDBOXES, &sandboxes, err, errlen) < 0)
        return -1;
    if (fw_dump_set(fw, SET_NFS, &nfs, err, errlen) < 0) {
        free(sandboxes.v);
        return -1;
    }
    acc->v = must(calloc(sandboxes.n + nfs.n + 1, sizeof(*acc->v)));
    /* kept[i]: where the i-th element of `sandboxes` went in acc (SIZE_MAX: not a Sandbox's). */
    size_t *kept = must(calloc(sandboxes.n + 1, sizeof(*kept)));
    for (size_t i = 0; i < sandboxes.n; i++) {
        struct fw_element *x = &acc->v[acc->n];
        kept[i] = SIZE_MAX;
        if (!elem_key_sandbox(&sandboxes.v[i], x->ifname, &x->addr))
            continue;
        memcpy(x->owner, sandboxes.v[i].comment, sizeof(x->owner));
        kept[i] = acc->n++;
    }
    /* Both dumps are sorted by key: one pass merges them. */
    size_t j = 0;
    for (size_t i = 0; i < nfs.n; i++) {
        while (j < sandboxes.n && set_elem_raw_cmp(&sandboxes.v[j], &nfs.v[i]) < 0)
            j++;
        if (j < sandboxes.n && kept[j] != SIZE_MAX &&
            set_elem_raw_cmp(&sandboxes.v[j], &nfs.v[i]) == 0) {
            acc->v[kept[j]].nfs = true;
            continue;
        }
        struct fw_element *x = &acc->v[acc->n];
        if (!elem_key_sandbox(&nfs.v[i], x->ifname, &x->addr))
            continue;
        memcpy(x->owner, nfs.v[i].comment, sizeof(x->owner));
        x->nfs = true;
        acc->n++;
    }
    free(kept);
    free(sandboxes.v);
    free(nfs.v);
    return 0;
}

/* ---- public functions ---- */

static struct fw *fw_open_socket(char *err, size_t errlen)
{
    struct fw *fw = calloc(1, sizeof(*fw));
    if (!fw) {
        fail(err, errlen, "out of memory");
        return NULL;
    }
    fw->nl = mnl_socket_open(NETLINK_NETFILTER);
    if (!fw->nl || mnl_socket_bind(fw->nl, 0, MNL_SOCKET_AUTOPID) < 0) {
        fail(err, errlen, "nftables: netlink socket: %s (CAP_NET_ADMIN needed)", strerror(errno));
        if (fw->nl)
            mnl_socket_close(fw->nl);
        free(fw);
        return NULL;
    }
    /* Acks carry only the header of each request, not its payload. */
    int one = 1;
    mnl_socket_setsockopt(fw->nl, NETLINK_CAP_ACK, &one, sizeof(one));
    /* A batch goes in one sendmsg(): a table replaced with 16,384 Sandboxes' elements is ~5 MB,
     * beyond the default socket buffer; a batch that fails may answer with as many errors.
     * Forcing the sizes needs CAP_NET_ADMIN, which nftables needs anyway. */
    int bufsize = 8 << 20;
    setsockopt(mnl_socket_get_fd(fw->nl), SOL_SOCKET, SO_SNDBUFFORCE, &bufsize, sizeof(bufsize));
    setsockopt(mnl_socket_get_fd(fw->nl), SOL_SOCKET, SO_RCVBUFFORCE, &bufsize, sizeof(bufsize));
    fw->portid = mnl_socket_get_portid(fw->nl);
    fw->seq = (uint32_t)time(NULL);
    pthread_mutex_init(&fw->lock, NULL);
    return fw;
}

void fw_close(struct fw *fw)
{
    if (!fw)
        return;
    mnl_socket_close(fw->nl);
    pthread_mutex_destroy(&fw->lock);
    free(fw);
}

/* Sends b with this socket's sequence numbers (b was built with a placeholder). */
static int fw_send_built(struct fw *fw, struct fw_batch *b, char *err, size_t errlen)
{
    uint32_t seq = fw->seq;
    size_t off = 0;
    while (off < b->len) {
        struct nlmsghdr *nlh = (struct nlmsghdr *)(b->buf + off);
        nlh->nlmsg_seq = seq++;
        off += NLMSG_ALIGN(nlh->nlmsg_len);
    }
    fw->seq = seq;
    b->seq = seq;
    return fw_send_batch(fw, b, err, errlen);
}

/* The egress sets' contents, for a replacement batch (with the egress functions, below). */
static int batch_carry_egress(struct fw *fw, struct fw_batch *b, char *err, size_t errlen);

/* Replaces a table of another version or pool in one batch, carrying the elements over. */
static int fw_replace_table(struct fw *fw, const char *net_pool, char *err, size_t errlen)
{
    struct pool4 pool;
    if (parse_prefix(net_pool, &pool, err, errlen) < 0)
        return -1;
    struct elems_acc acc;
    if (fw_read_elements(fw, &acc, err, errlen) < 0) {
        if (errno != ENOENT)
            return -1; /* never replace a table whose elements could not all be read */
        acc = (struct elems_acc){0}; /* an older layout without these sets: nothing to carry */
    }
    char comment[160];
    table_comment(net_pool, comment, sizeof(comment));
    struct fw_batch b = {0};
    batch_begin(&b, 0);
    batch_table(&b, NFT_MSG_DELTABLE, 0, NULL);
    batch_table(&b, NFT_MSG_NEWTABLE, NLM_F_CREATE | NLM_F_EXCL, comment);
    batch_structure(&b, &pool);
    for (size_t i = 0; i < acc.n; i++) {
        const char *owner = acc.v[i].owner[0] ? acc.v[i].owner : NULL;
        batch_elem(&b, NFT_MSG_NEWSETELEM, NLM_F_CREATE, SET_SANDBOXES, acc.v[i].ifname,
                   acc.v[i].addr, owner);
        if (acc.v[i].nfs)
            batch_elem(&b, NFT_MSG_NEWSETELEM, NLM_F_CREATE, SET_NFS, acc.v[i].ifname,
                       acc.v[i].addr, owner);
    }
    free(acc.v);
    if (batch_carry_egress(fw, &b, err, errlen) < 0) {
        fw_batch_free(&b);
        return -1;
    }
    batch_end(&b);
    int rc = fw_send_built(fw, &b, err, errlen);
    fw_batch_free(&b);
    return rc;
}

static int fw_ensure_structure(struct fw *fw, const char *net_pool, char *err, size_t errlen)
{
    char want[160], have[160];
    table_comment(net_pool, want, sizeof(want));
    for (int attempt = 0; attempt < 3; attempt++) {
        int exists = fw_get_table(fw, have, err, errlen);
        if (exists < 0)
            return -1;
        if (exists && strcmp(have, want) == 0)
            return 0;
        if (exists)
            return fw_replace_table(fw, net_pool, err, errlen);
        struct fw_batch b;
        if (fw_build_structure(net_pool, &b, err, errlen) < 0)
            return -1;
        int rc = fw_send_built(fw, &b, err, errlen);
        int e = errno;
        fw_batch_free(&b);
        if (rc == 0)
            return 0;
        errno = e;
        /* EEXIST: another worker created the table between our get and our batch; look again. */
        if (errno != EEXIST)
            return -1;
    }
    return fail(err, errlen, "nftables: table inet %s keeps changing under us", FW_TABLE);
}

struct fw *fw_open(char *err, size_t errlen)
{
    return fw_open_socket(err, errlen);
}

struct fw *fw_init(const char *net_pool, char *err, size_t errlen)
{
    struct fw *fw = fw_open_socket(err, errlen);
    if (!fw)
        return NULL;
    if (fw_ensure_structure(fw, net_pool, err, errlen) < 0) {
        fw_close(fw);
        return NULL;
    }
    return fw;
}

/* Builds a one-purpose batch with fill(), sends it under the lock. */
static int fw_apply(struct fw *fw, void (*fill)(struct fw_batch *, const void *), const void *arg,
                    char *err, size_t errlen)
{
    struct fw_batch b = {0};
    batch_begin(&b, 0);
    fill(&b, arg);
    batch_end(&b);
    pthread_mutex_lock(&fw->lock);
    int rc = fw_send_built(fw, &b, err, errlen);
    int e = errno;
    pthread_mutex_unlock(&fw->lock);
    fw_batch_free(&b);
    errno = e; /* the kernel's answer, for callers that handle one (ENOENT) */
    return rc;
}

static void fill_add(struct fw_batch *b, const void *arg)
{
    batch_add_sandbox(b, arg);
}

static void fill_nfs_on(struct fw_batch *b, const void *arg)
{
    const struct fw_sandbox *sb = arg;
    batch_elem(b, NFT_MSG_NEWSETELEM, NLM_F_CREATE, SET_NFS, sb->ifname, sb->addr, sb->sandbox_id);
}

static void fill_nfs_off(struct fw_batch *b, const void *arg)
{
    const struct fw_sandbox *sb = arg;
    batch_elem_absent(b, SET_NFS, sb->ifname, sb->addr);
}

static void fill_remove(struct fw_batch *b, const void *arg)
{
    const struct fw_sandbox *sb = arg;
    batch_elem_absent(b, SET_NFS, sb->ifname, sb->addr);
    batch_elem_absent(b, SET_SANDBOXES, sb->ifname, sb->addr);
}

/* Out of any egress policy (below, with the egress functions). */
static int forget_egress(struct fw *fw, const struct fw_sandbox *sb, char *err, size_t errlen);

/* A new Sandbox is under the host-wide rules only, whatever a stale element of the same slot was
 * under, until its App's policy is applied (fw_sandbox_set_egress). */
int fw_sandbox_add(struct fw *fw, const struct fw_sandbox *sb, char *err, size_t errlen)
{
    if (check_sandbox(sb, err, errlen) < 0 || fw_apply(fw, fill_add, sb, err, errlen) < 0)
        return -1;
    return forget_egress(fw, sb, err, errlen);
}

int fw_sandbox_set_nfs(struct fw *fw, const struct fw_sandbox *sb, bool attached, char *err,
                       size_t errlen)
{
    if (check_sandbox(sb, err, errlen) < 0)
        return -1;
    return fw_apply(fw, attached ? fill_nfs_on : fill_nfs_off, sb, err, errlen);
}

int fw_sandbox_remove(struct fw *fw, const struct fw_sandbox *sb, char *err, size_t errlen)
{
    if (check_sandbox(sb, err, errlen) < 0 || forget_egress(fw, sb, err, errlen) < 0)
        return -1;
    return fw_apply(fw, fill_remove, sb, err, errlen);
}

int fw_elements(struct fw *fw, struct fw_element **out, size_t *n, char *err, size_t errlen)
{
    struct elems_acc acc;
    pthread_mutex_lock(&fw->lock);
    int rc = fw_read_elements(fw, &acc, err, errlen);
    pthread_mutex_unlock(&fw->lock);
    if (rc < 0)
        return -1;
    *out = acc.v;
    *n = acc.n;
    return 0;
}

/* One batch removing the elements of which keep() says false. */
static int fw_remove_where(struct fw *fw, bool (*keep)(const struct fw_element *, void *),
                           void *arg, size_t *removed, char *err, size_t errlen)
{
    struct fw_element *v;
    size_t n, gone = 0;
    if (fw_elements(fw, &v, &n, err, errlen) < 0)
        return -1;
    struct fw_batch b = {0};
    batch_begin(&b, 0);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (keep(&v[i], arg))
            continue;
        batch_elem_absent(&b, SET_NFS, v[i].ifname, v[i].addr);
        batch_elem_absent(&b, SET_SANDBOXES, v[i].ifname, v[i].addr);
        gone++;
        struct fw_sandbox sb = {v[i].owner[0] ? v[i].owner : "-", v[i].ifname, v[i].addr};
        rc = forget_egress(fw, &sb, err, errlen); /* its policy membership, separately */
    }
    batch_end(&b);
    free(v);
    if (rc == 0 && gone) {
        pthread_mutex_lock(&fw->lock);
        rc = fw_send_built(fw, &b, err, errlen);
        pthread_mutex_unlock(&fw->lock);
    }
    fw_batch_free(&b);
    if (rc == 0 && removed)
        *removed = gone;
    return rc;
}

static bool keep_other_owner(const struct fw_element *e, void *arg)
{
    return strcmp(e->owner, (const char *)arg) != 0;
}

int fw_sandbox_remove_owner(struct fw *fw, const char *sandbox_id, char *err, size_t errlen)
{
    return fw_remove_where(fw, keep_other_owner, (void *)sandbox_id, NULL, err, errlen);
}

struct live_query {
    bool (*is_live)(const char *sandbox_id, void *arg);
    void *arg;
};

/* Elements without an owner were not written by sbx's add (which always names one): removed. */
static bool keep_live(const struct fw_element *e, void *arg)
{
    const struct live_query *q = arg;
    return e->owner[0] && q->is_live(e->owner, q->arg);
}

int fw_reconcile(struct fw *fw, bool (*is_live)(const char *sandbox_id, void *arg), void *arg,
                 size_t *removed, char *err, size_t errlen)
{
    struct live_query q = {is_live, arg};
    return fw_remove_where(fw, keep_live, &q, removed, err, errlen);
}

struct counters_acc {
    struct fw_counter *out;
    int found;
};

static int counter_cb(const struct nlmsghdr *nlh, void *data)
{
    struct counters_acc *acc = data;
    struct fw_counter *out = acc->out;
    struct nftnl_obj *o = must(nftnl_obj_alloc());
    if (nftnl_obj_nlmsg_parse(nlh, o) == 0 && nftnl_obj_is_set(o, NFTNL_OBJ_NAME)) {
        const char *name = nftnl_obj_get_str(o, NFTNL_OBJ_NAME);
        for (int i = 0; i < FW_DROP_COUNT; i++)
            if (strncmp(name, "drop_", 5) == 0 && strcmp(name + 5, fw_drop_reason_names[i]) == 0) {
                out[i].packets = nftnl_obj_get_u64(o, NFTNL_OBJ_CTR_PKTS);
                out[i].bytes = nftnl_obj_get_u64(o, NFTNL_OBJ_CTR_BYTES);
                acc->found++;
            }
    }
    nftnl_obj_free(o);
    return MNL_CB_OK;
}

int fw_counters(struct fw *fw, struct fw_counter out[FW_DROP_COUNT], char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out) * FW_DROP_COUNT);
    char buf[MNL_SOCKET_BUFFER_SIZE];
    pthread_mutex_lock(&fw->lock);
    struct nlmsghdr *nlh =
        nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETOBJ, NFPROTO_INET, NLM_F_DUMP, fw_next_seq(fw));
    struct nftnl_obj *o = must(nftnl_obj_alloc());
    nftnl_obj_set_str(o, NFTNL_OBJ_TABLE, FW_TABLE);
    nftnl_obj_set_u32(o, NFTNL_OBJ_TYPE, NFT_OBJECT_COUNTER);
    nftnl_obj_nlmsg_build_payload(nlh, o);
    nftnl_obj_free(o);
    struct counters_acc acc = {out, 0};
    int rc = fw_request(fw, "table inet " FW_TABLE " counters", nlh, counter_cb, &acc, err, errlen);
    pthread_mutex_unlock(&fw->lock);
    if (rc == 0 && acc.found != FW_DROP_COUNT)
        return fail(err, errlen, "table inet %s: %d of %d drop counters (no worker set it up?)",
                    FW_TABLE, acc.found, FW_DROP_COUNT);
    return rc;
}

int fw_metrics_text(struct fw *fw, char *out, size_t outlen, char *err, size_t errlen)
{
    struct fw_counter c[FW_DROP_COUNT];
    if (fw_counters(fw, c, err, errlen) < 0)
        return -1;
    static const char *const what[2] = {"packets", "bytes"};
    size_t n = 0;
    for (int k = 0; k < 2; k++) {
        int w = snprintf(out + n, outlen - n,
                         "# HELP sbx_firewall_dropped_%s_total %s from or to Sandboxes dropped by "
                         "the firewall, by reason.\n# TYPE sbx_firewall_dropped_%s_total counter\n",
                         what[k], k ? "Bytes" : "Packets", what[k]);
        for (int i = 0; w >= 0 && (size_t)w < outlen - n && i < FW_DROP_COUNT; i++) {
            n += (size_t)w;
            w = snprintf(out + n, outlen - n, "sbx_firewall_dropped_%s_total{reason=\"%s\"} %llu\n",
                         what[k], fw_drop_reason_names[i],
                         (unsigned long long)(k ? c[i].bytes : c[i].packets));
        }
        if (w < 0 || (size_t)w >= outlen - n)
            return fail(err, errlen, "metrics: %zu bytes are not enough", outlen);
        n += (size_t)w;
    }
    return 0;
}

int fw_destroy(struct fw *fw, char *err, size_t errlen)
{
    struct fw_batch b = {0};
    batch_begin(&b, 0);
    batch_table(&b, NFT_MSG_DELTABLE, 0, NULL);
    batch_end(&b);
    pthread_mutex_lock(&fw->lock);
    int rc = fw_send_built(fw, &b, err, errlen);
    pthread_mutex_unlock(&fw->lock);
    fw_batch_free(&b);
    return rc;
}

/* ---- fw_list: nft's own printer, through libnftables loaded at run time ---- */

/* The few libnftables functions used (its ABI, libnftables.so.1, is stable). Loading it at run
 * time keeps the worker free of a link dependency on nft's library and its headers. */
struct nft_api {
    void *(*ctx_new)(uint32_t flags);
    void (*ctx_free)(void *ctx);
    int (*buffer_output)(void *ctx);
    int (*buffer_error)(void *ctx);
    const char *(*get_output)(void *ctx);
    const char *(*get_error)(void *ctx);
    int (*run_cmd)(void *ctx, const char *buf);
};

static int nft_api_load(struct nft_api *api, void **handle, char *err, size_t errlen)
{
    *handle = dlopen("libnftables.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!*handle)
        return fail(err, errlen, "cannot load libnftables.so.1 (install nftables): %s", dlerror());
    struct {
        void **slot;
        const char *name;
    } syms[] = {
        {(void **)&api->ctx_new, "nft_ctx_new"},
        {(void **)&api->ctx_free, "nft_ctx_free"},
        {(void **)&api->buffer_output, "nft_ctx_buffer_output"},
        {(void **)&api->buffer_error, "nft_ctx_buffer_error"},
        {(void **)&api->get_output, "nft_ctx_get_output_buffer"},
        {(void **)&api->get_error, "nft_ctx_get_error_buffer"},
        {(void **)&api->run_cmd, "nft_run_cmd_from_buffer"},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        *syms[i].slot = dlsym(*handle, syms[i].name);
        if (!*syms[i].slot) {
            dlclose(*handle);
            return fail(err, errlen, "libnftables.so.1 lacks %s", syms[i].name);
        }
    }
    return 0;
}

static int print_nft_table(FILE *out, char *err, size_t errlen)
{
    struct nft_api api;
    void *handle;
    if (nft_api_load(&api, &handle, err, errlen) < 0)
        return -1;
    void *ctx = api.ctx_new(0);
    int rc = -1;
    if (!ctx) {
        fail(err, errlen, "nft_ctx_new failed");
    } else {
        api.buffer_output(ctx);
        api.buffer_error(ctx);
        if (api.run_cmd(ctx, "list table inet " FW_TABLE) != 0) {
            fail(err, errlen, "nft list table inet %s: %s", FW_TABLE, api.get_error(ctx));
        } else {
            fputs(api.get_output(ctx), out);
            rc = 0;
        }
        api.ctx_free(ctx);
    }
    dlclose(handle);
    return rc;
}

int fw_list(struct fw *fw, FILE *out, char *err, size_t errlen)
{
    struct fw_element *v;
    size_t n;
    if (print_nft_table(out, err, errlen) < 0 || fw_elements(fw, &v, &n, err, errlen) < 0)
        return -1;
    fprintf(out, "\n# %zu Sandbox element(s): interface . address -> owner\n", n);
    for (size_t i = 0; i < n; i++) {
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &v[i].addr, a, sizeof(a));
        fprintf(out, "%s . %s -> %s%s\n", v[i].ifname, a, v[i].owner[0] ? v[i].owner : "(none)",
                v[i].nfs ? " (nfs)" : "");
    }
    free(v);
    return 0;
}

/* ---- egress: host-wide sets, per-App chains, per-Sandbox membership ---- */

/* One element of set_name with a raw key. */
static void batch_elem_raw(struct fw_batch *b, uint16_t type, uint16_t flags, const char *set_name,
                           const void *key, uint32_t klen)
{
    struct nftnl_set *s = must(nftnl_set_alloc());
    nftnl_set_set_str(s, NFTNL_SET_TABLE, FW_TABLE);
    nftnl_set_set_str(s, NFTNL_SET_NAME, set_name);
    nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
    struct nftnl_set_elem *e = must(nftnl_set_elem_alloc());
    nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, klen);
    nftnl_set_elem_add(s, e);
    struct nlmsghdr *nlh = batch_msg(b, type, flags);
    nftnl_set_elems_nlmsg_build_payload(nlh, s);
    batch_commit(b, nlh);
    nftnl_set_free(s);
}

/* A set's delete-elements message without elements: the kernel empties the set. */
static void batch_flush_set(struct fw_batch *b, const char *set_name)
{
    struct nftnl_set *s = must(nftnl_set_alloc());
    nftnl_set_set_str(s, NFTNL_SET_TABLE, FW_TABLE);
    nftnl_set_set_str(s, NFTNL_SET_NAME, set_name);
    nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
    struct nlmsghdr *nlh = batch_msg(b, NFT_MSG_DELSETELEM, 0);
    nftnl_set_elems_nlmsg_build_payload(nlh, s);
    batch_commit(b, nlh);
    nftnl_set_free(s);
}

struct egress_sets {
    const uint16_t *ports;
    size_t nports;
    const struct in_addr *resolvers;
    size_t nresolvers;
};

static void fill_egress_sets(struct fw_batch *b, const void *arg)
{
    const struct egress_sets *e = arg;
    batch_flush_set(b, SET_EGRESS_PORTS);
    for (size_t i = 0; i < e->nports; i++) {
        uint16_t be = htons(e->ports[i]);
        batch_elem_raw(b, NFT_MSG_NEWSETELEM, NLM_F_CREATE, SET_EGRESS_PORTS, &be, 2);
    }
    batch_flush_set(b, SET_RESOLVERS);
    for (size_t i = 0; i < e->nresolvers; i++)
        batch_elem_raw(b, NFT_MSG_NEWSETELEM, NLM_F_CREATE, SET_RESOLVERS, &e->resolvers[i].s_addr,
                       4);
}

int fw_set_egress(struct fw *fw, const uint16_t *ports, size_t nports,
                  const struct in_addr *resolvers, size_t nresolvers, char *err, size_t errlen)
{
    struct egress_sets e = {ports, nports, resolvers, nresolvers};
    return fw_apply(fw, fill_egress_sets, &e, err, errlen);
}

static int app_chain_name(const char *app_id, char *out, size_t outlen, char *err, size_t errlen)
{
    if (!app_id || !*app_id ||
        strspn(app_id, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(app_id) ||
        strlen(app_id) >= FW_OWNER_LEN)
        return fail(err, errlen, "\"%s\" is not an App id", app_id ? app_id : "");
    snprintf(out, outlen, "%s%s", APP_CHAIN_PREFIX, app_id);
    return 0;
}

#define APP_NAMES_PREFIX "names_"
#define SET_ID_APP_NAMES 100
/* address . port, as nft concatenates them: each field padded to 4 bytes */
#define KEY_TYPE_IPV4_SERVICE ((KEY_TYPE_IPV4 << 6) | KEY_TYPE_INET_SERVICE)
#define KEY_LEN_IPV4_SERVICE 8

struct app_policy {
    const char *app_id;
    const char *chain;
    const char *names_set;
    const char *members_set;
    bool add_dispatch; /* egress_dispatch has no rule for this App yet */
    const struct fw_allow_net *allow;
    size_t n;
};

static void fill_app_policy(struct fw_batch *b, const void *arg)
{
    const struct app_policy *p = arg;
    /* names_<app>: `ipv4_addr . inet_service` elements with timeouts, filled by the DNS
     * forwarder */
    batch_set_typed(b, p->names_set, SET_ID_APP_NAMES, KEY_TYPE_IPV4_SERVICE, KEY_LEN_IPV4_SERVICE,
                    NFT_SET_TIMEOUT, NULL);
    batch_flush_set(b, p->names_set); /* a new list: names resolve again under it */
    batch_set_typed(b, p->members_set, SET_ID_APP_MEMBERS, KEY_TYPE_IFNAME_IPV4, KEY_LEN, 0,
                    "the App's allowlist Sandboxes");
    batch_chain(b, p->chain, NULL, 0, 0);
    if (p->add_dispatch) { /* iifname . ip saddr @members_<app> jump egress_<app> */
        struct nftnl_rule *d = rule_new(CHAIN_EGRESS_DISPATCH);
        m_nfproto(d, NFPROTO_IPV4);
        m_iif_saddr_in(d, p->members_set, SET_ID_APP_MEMBERS, false);
        x_verdict(d, NFT_JUMP, p->chain);
        struct nftnl_udata_buf *ud = must(nftnl_udata_buf_alloc(FW_OWNER_LEN + 8));
        nftnl_udata_put_strz(ud, NFTNL_UDATA_RULE_COMMENT, p->app_id);
        nftnl_rule_set_data(d, NFTNL_RULE_USERDATA, nftnl_udata_buf_data(ud),
                            nftnl_udata_buf_len(ud));
        batch_rule(b, d);
        nftnl_udata_buf_free(ud);
    }
    struct nftnl_rule *r = rule_new(p->chain); /* flush: a delete-rules message without a handle */
    struct nlmsghdr *nlh = batch_msg(b, NFT_MSG_DELRULE, 0);
    nftnl_rule_nlmsg_build_payload(nlh, r);
    batch_commit(b, nlh);
    nftnl_rule_free(r);
    for (size_t i = 0; i < p->n; i++) { /* ip daddr N/L [tcp dport P] return */
        r = rule_new(p->chain);
        m_nfproto(r, NFPROTO_IPV4);
        m_ip_prefix(r, OFF_DADDR, p->allow[i].net, p->allow[i].len);
        if (p->allow[i].port)
            m_tcp_dport(r, p->allow[i].port);
        x_verdict(r, NFT_RETURN, NULL);
        batch_rule(b, r);
    }
    /* meta l4proto tcp ip daddr . tcp dport @names_<app> return: what allowed names resolved to */
    r = rule_new(p->chain);
    m_nfproto(r, NFPROTO_IPV4);
    m_l4proto(r, IPPROTO_TCP);
    x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, OFF_DADDR, 4, NFT_REG32_00);
    x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG32_01);
    x_lookup(r, NFT_REG32_00, p->names_set, SET_ID_APP_NAMES, false);
    x_verdict(r, NFT_RETURN, NULL);
    batch_rule(b, r);
    r = rule_new(p->chain); /* counter name "drop_policy" drop */
    x_log(r, FW_DROP_POLICY);
    x_counter(r, FW_DROP_POLICY);
    x_verdict(r, NF_DROP, NULL);
    batch_rule(b, r);
}

struct dispatch_scan {
    const char *app_id;
    int found;
};

static int dispatch_rule_cb(const struct nlmsghdr *nlh, void *data)
{
    struct dispatch_scan *d = data;
    struct nftnl_rule *r = must(nftnl_rule_alloc());
    if (nftnl_rule_nlmsg_parse(nlh, r) == 0 && nftnl_rule_is_set(r, NFTNL_RULE_USERDATA)) {
        uint32_t len = 0;
        const void *ud = nftnl_rule_get_data(r, NFTNL_RULE_USERDATA, &len);
        char owner[FW_OWNER_LEN];
        udata_comment(ud, len, owner, sizeof owner);
        if (strcmp(owner, d->app_id) == 0)
            d->found = 1;
    }
    nftnl_rule_free(r);
    return MNL_CB_OK;
}

/* 1 when egress_dispatch has the App's rule (its comment is the App id), 0 when not. */
static int dispatch_rule_exists(struct fw *fw, const char *app_id, char *err, size_t errlen)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    pthread_mutex_lock(&fw->lock);
    struct nlmsghdr *nlh =
        nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETRULE, NFPROTO_INET, NLM_F_DUMP, fw_next_seq(fw));
    struct nftnl_rule *r = must(nftnl_rule_alloc());
    nftnl_rule_set_str(r, NFTNL_RULE_TABLE, FW_TABLE);
    nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, CHAIN_EGRESS_DISPATCH);
    nftnl_rule_nlmsg_build_payload(nlh, r);
    nftnl_rule_free(r);
    struct dispatch_scan d = {app_id, 0};
    int rc = fw_request(fw, "chain " CHAIN_EGRESS_DISPATCH, nlh, dispatch_rule_cb, &d, err, errlen);
    pthread_mutex_unlock(&fw->lock);
    return rc < 0 ? -1 : d.found;
}

int fw_app_policy_set(struct fw *fw, const char *app_id, const struct fw_allow_net *allow, size_t n,
                      char *err, size_t errlen)
{
    char chain[FW_OWNER_LEN + 16];
    if (app_chain_name(app_id, chain, sizeof chain, err, errlen) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (allow[i].len < 0 || allow[i].len > 32)
            return fail(err, errlen, "allow entry %zu: prefix length %d", i, allow[i].len);
    char names[FW_OWNER_LEN + 16], members[FW_OWNER_LEN + 16];
    snprintf(names, sizeof names, "%s%s", APP_NAMES_PREFIX, app_id);
    snprintf(members, sizeof members, "%s%s", APP_MEMBERS_PREFIX, app_id);
    int has = dispatch_rule_exists(fw, app_id, err, errlen);
    if (has < 0)
        return -1;
    struct app_policy p = {app_id, chain, names, members, !has, allow, n};
    return fw_apply(fw, fill_app_policy, &p, err, errlen);
}

struct sandbox_egress {
    const struct fw_sandbox *sb;
    enum fw_egress_mode mode;
    const char *app_id;          /* FW_EGRESS_ALLOWLIST */
    char prev_app[FW_OWNER_LEN]; /* the allowlist App it is under now ("" none) */
};

static void sandbox_key(const struct fw_sandbox *sb, char key[KEY_LEN])
{
    memset(key, 0, KEY_LEN);
    strncpy(key, sb->ifname, KEY_IFNAME_LEN - 1);
    memcpy(key + KEY_IFNAME_LEN, &sb->addr.s_addr, 4);
}

/* Plain set elements only: no verdict map, whose every change makes the kernel validate all
 * its jumps (a cost growing with the number of Sandboxes). */
static void fill_sandbox_egress(struct fw_batch *b, const void *arg)
{
    const struct sandbox_egress *x = arg;
    char members[FW_OWNER_LEN + 16];
    batch_elem_absent(b, SET_EGRESS_NONE, x->sb->ifname, x->sb->addr);
    if (x->prev_app[0]) {
        snprintf(members, sizeof members, "%s%s", APP_MEMBERS_PREFIX, x->prev_app);
        batch_elem(b, NFT_MSG_DELSETELEM, 0, SET_EGRESS_ALLOWLIST, x->sb->ifname, x->sb->addr,
                   NULL);
        batch_elem_absent(b, members, x->sb->ifname, x->sb->addr);
    }
    if (x->mode == FW_EGRESS_NONE) {
        batch_elem(b, NFT_MSG_NEWSETELEM, NLM_F_CREATE, SET_EGRESS_NONE, x->sb->ifname, x->sb->addr,
                   x->sb->sandbox_id);
    } else if (x->mode == FW_EGRESS_ALLOWLIST) {
        snprintf(members, sizeof members, "%s%s", APP_MEMBERS_PREFIX, x->app_id);
        batch_elem(b, NFT_MSG_NEWSETELEM, NLM_F_CREATE | NLM_F_EXCL, SET_EGRESS_ALLOWLIST,
                   x->sb->ifname, x->sb->addr, x->app_id);
        batch_elem(b, NFT_MSG_NEWSETELEM, NLM_F_CREATE, members, x->sb->ifname, x->sb->addr,
                   x->sb->sandbox_id);
    }
}

/* The comment of the (one) element in the answer: the allowlist App. */
static int elem_comment_cb(const struct nlmsghdr *nlh, void *data)
{
    char *app = data;
    struct nftnl_set *s = must(nftnl_set_alloc());
    if (nftnl_set_elems_nlmsg_parse(nlh, s) == 0) {
        struct nftnl_set_elems_iter *it = must(nftnl_set_elems_iter_create(s));
        struct nftnl_set_elem *e = nftnl_set_elems_iter_next(it);
        uint32_t ulen = 0;
        const void *ud = e ? nftnl_set_elem_get(e, NFTNL_SET_ELEM_USERDATA, &ulen) : NULL;
        udata_comment(ud, ulen, app, FW_OWNER_LEN);
        if (e && !app[0])
            strcpy(app, "?"); /* an element without its App: still to be deleted */
        nftnl_set_elems_iter_destroy(it);
    }
    nftnl_set_free(s);
    return MNL_CB_OK;
}

/* 1 with the App (app_out) when the Sandbox is in egress_allowlist, 0 when not, -1 when it cannot
 * tell. */
static int allowlist_app_of(struct fw *fw, const struct fw_sandbox *sb, char app_out[FW_OWNER_LEN])
{
    char buf[MNL_SOCKET_BUFFER_SIZE], key[KEY_LEN], why[256];
    sandbox_key(sb, key);
    pthread_mutex_lock(&fw->lock);
    struct nlmsghdr *nlh =
        nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETSETELEM, NFPROTO_INET, NLM_F_ACK, fw_next_seq(fw));
    struct nftnl_set *s = must(nftnl_set_alloc());
    nftnl_set_set_str(s, NFTNL_SET_TABLE, FW_TABLE);
    nftnl_set_set_str(s, NFTNL_SET_NAME, SET_EGRESS_ALLOWLIST);
    struct nftnl_set_elem *e = must(nftnl_set_elem_alloc());
    nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, KEY_LEN);
    nftnl_set_elem_add(s, e);
    nftnl_set_elems_nlmsg_build_payload(nlh, s);
    nftnl_set_free(s);
    app_out[0] = '\0';
    int rc =
        fw_request(fw, "set " SET_EGRESS_ALLOWLIST, nlh, elem_comment_cb, app_out, why, sizeof why);
    int e2 = errno;
    pthread_mutex_unlock(&fw->lock);
    if (rc < 0)
        return e2 == ENOENT ? 0 : -1;
    return app_out[0] ? 1 : 0;
}

/* The batch leaves the App the Sandbox is under now (its members_<app> set is named by the
 * egress_allowlist element's comment), so it asks first; a batch the kernel refuses costs
 * milliseconds (its abort path). Should the answer be stale, it asks once more. */
static int apply_sandbox_egress(struct fw *fw, struct sandbox_egress *x, char *err, size_t errlen)
{
    for (int attempt = 0;; attempt++) {
        if (allowlist_app_of(fw, x->sb, x->prev_app) < 0)
            return fail(err, errlen, "nftables: cannot read set %s", SET_EGRESS_ALLOWLIST);
        if (fw_apply(fw, fill_sandbox_egress, x, err, errlen) == 0)
            return 0;
        if (attempt == 1 || (errno != ENOENT && errno != EEXIST))
            return -1;
    }
}

int fw_sandbox_set_egress(struct fw *fw, const struct fw_sandbox *sb, enum fw_egress_mode mode,
                          const char *app_id, char *err, size_t errlen)
{
    if (check_sandbox(sb, err, errlen) < 0)
        return -1;
    char chain[FW_OWNER_LEN + 16] = "";
    if (mode == FW_EGRESS_ALLOWLIST && app_chain_name(app_id, chain, sizeof chain, err, errlen) < 0)
        return -1;
    struct sandbox_egress x = {sb, mode, app_id, ""};
    return apply_sandbox_egress(fw, &x, err, errlen);
}

static int forget_egress(struct fw *fw, const struct fw_sandbox *sb, char *err, size_t errlen)
{
    struct sandbox_egress x = {sb, FW_EGRESS_PUBLIC, NULL, ""};
    return apply_sandbox_egress(fw, &x, err, errlen);
}

/* ---- carrying egress state over a table replacement ---- */

/* The host-wide sets as they were, and every Sandbox under a policy into egress_none: the App
 * chains do not survive the replacement, so an allowlist Sandbox fails closed until its worker
 * applies its App's policy again. */
static int batch_carry_egress(struct fw *fw, struct fw_batch *b, char *err, size_t errlen)
{
    static const struct {
        const char *from, *to;
    } carry[] = {{SET_EGRESS_PORTS, SET_EGRESS_PORTS},
                 {SET_RESOLVERS, SET_RESOLVERS},
                 {SET_EGRESS_NONE, SET_EGRESS_NONE},
                 {SET_EGRESS_ALLOWLIST, SET_EGRESS_NONE}};
    for (size_t c = 0; c < sizeof carry / sizeof carry[0]; c++) {
        struct set_dump d;
        if (fw_dump_set(fw, carry[c].from, &d, err, errlen) < 0) {
            if (errno == ENOENT)
                continue; /* an older layout without this set: nothing to carry */
            return -1;
        }
        for (size_t i = 0; i < d.n; i++)
            batch_elem_raw(b, NFT_MSG_NEWSETELEM, NLM_F_CREATE, carry[c].to, d.v[i].key,
                           d.v[i].key_len);
        free(d.v);
    }
    return 0;
}

/* ---- names resolved through sbx's DNS forwarder ---- */

struct names_add {
    const char *set;
    const struct fw_name_addr *v;
    size_t n;
};

static void name_key(const struct fw_name_addr *a, char key[KEY_LEN_IPV4_SERVICE])
{
    memset(key, 0, KEY_LEN_IPV4_SERVICE);
    memcpy(key, &a->addr.s_addr, 4);
    uint16_t be = htons(a->port);
    memcpy(key + 4, &be, 2);
}

/* Each element made absent, then added with its timeout: an add of an existing element would
 * keep the old timeout. */
static void fill_names_add(struct fw_batch *b, const void *arg)
{
    const struct names_add *x = arg;
    for (size_t i = 0; i < x->n; i++) {
        char key[KEY_LEN_IPV4_SERVICE];
        name_key(&x->v[i], key);
        batch_elem_raw(b, NFT_MSG_NEWSETELEM, NLM_F_CREATE, x->set, key, sizeof key);
        batch_elem_raw(b, NFT_MSG_DELSETELEM, 0, x->set, key, sizeof key);
        struct nftnl_set *s = must(nftnl_set_alloc());
        nftnl_set_set_str(s, NFTNL_SET_TABLE, FW_TABLE);
        nftnl_set_set_str(s, NFTNL_SET_NAME, x->set);
        nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
        struct nftnl_set_elem *e = must(nftnl_set_elem_alloc());
        nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, sizeof key);
        nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, x->v[i].timeout_ms);
        nftnl_set_elem_add(s, e);
        struct nlmsghdr *nlh = batch_msg(b, NFT_MSG_NEWSETELEM, NLM_F_CREATE);
        nftnl_set_elems_nlmsg_build_payload(nlh, s);
        batch_commit(b, nlh);
        nftnl_set_free(s);
    }
}

int fw_app_names_add(struct fw *fw, const char *app_id, const struct fw_name_addr *v, size_t n,
                     char *err, size_t errlen)
{
    char chain[FW_OWNER_LEN + 16], set[FW_OWNER_LEN + 16];
    if (app_chain_name(app_id, chain, sizeof chain, err, errlen) < 0)
        return -1;
    if (n == 0)
        return 0;
    snprintf(set, sizeof set, "%s%s", APP_NAMES_PREFIX, app_id);
    struct names_add x = {set, v, n};
    return fw_apply(fw, fill_names_add, &x, err, errlen);
}

int fw_egress_members(struct fw *fw, struct fw_egress_member **out, size_t *n, char *err,
                      size_t errlen)
{
    struct set_dump d;
    pthread_mutex_lock(&fw->lock);
    int rc = fw_dump_set(fw, SET_EGRESS_ALLOWLIST, &d, err, errlen);
    pthread_mutex_unlock(&fw->lock);
    if (rc < 0)
        return -1;
    struct fw_egress_member *v = must(calloc(d.n + 1, sizeof(*v)));
    size_t k = 0;
    for (size_t i = 0; i < d.n; i++) {
        if (!d.v[i].comment[0] || !elem_key_sandbox(&d.v[i], v[k].ifname, &v[k].addr))
            continue;
        snprintf(v[k].app_id, sizeof v[k].app_id, "%s", d.v[i].comment);
        k++;
    }
    free(d.v);
    *out = v;
    *n = k;
    return 0;
}
