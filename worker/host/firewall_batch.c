/*
 * firewall_batch.c: the firewall's building blocks (firewall_internal.h): the Sandbox pool's
 * prefix, batch buffers (a growable array of nlmsgs between BATCH_BEGIN and BATCH_END) and one
 * function per nftables match, each appending the expressions `nft` itself would generate, so
 * that `nft list table inet sbx` prints the rules in their usual syntax.
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

/* ---- pool ---- */

int parse_prefix(const char *cidr, struct pool4 *out, char *err, size_t errlen)
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

void batch_commit(struct fw_batch *b, struct nlmsghdr *nlh)
{
    b->len += NLMSG_ALIGN(nlh->nlmsg_len);
}

void batch_begin(struct fw_batch *b, uint32_t seq)
{
    b->seq = seq;
    batch_commit(b, nftnl_batch_begin(batch_tail(b), b->seq++));
}

/* Only the last message asks for an ack: the kernel reports every failing message anyway (and
 * applies nothing then), so one ack and no error mean the whole batch was applied. An ack per
 * message would overflow the socket's receive queue for large batches (each ack is an skb). */
void batch_end(struct fw_batch *b)
{
    if (b->messages)
        ((struct nlmsghdr *)(b->buf + b->last))->nlmsg_flags |= NLM_F_ACK;
    batch_commit(b, nftnl_batch_end(batch_tail(b), b->seq++));
}

struct nlmsghdr *batch_msg(struct fw_batch *b, uint16_t type, uint16_t flags)
{
    b->messages++;
    b->last = b->len;
    return nftnl_nlmsg_build_hdr(batch_tail(b), type, NFPROTO_INET, flags, b->seq++);
}

void batch_table(struct fw_batch *b, uint16_t type, uint16_t flags, const char *comment)
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

void batch_chain(struct fw_batch *b, const char *name, const char *type, int hook, int prio)
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
void batch_set_typed(struct fw_batch *b, const char *name, uint32_t id, uint32_t key_type,
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

void batch_set(struct fw_batch *b, const char *name, uint32_t id, const char *comment)
{
    batch_set_typed(b, name, id, KEY_TYPE_IFNAME_IPV4, KEY_LEN, 0, comment);
}

void batch_counter(struct fw_batch *b, const char *name)
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

void batch_rule(struct fw_batch *b, struct nftnl_rule *r)
{
    struct nlmsghdr *nlh = batch_msg(b, NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND);
    nftnl_rule_nlmsg_build_payload(nlh, r);
    batch_commit(b, nlh);
    nftnl_rule_free(r);
}

/* One element (key, optional owner comment) of set_name, added or deleted. */
void batch_elem(struct fw_batch *b, uint16_t type, uint16_t flags, const char *set_name,
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
void batch_elem_absent(struct fw_batch *b, const char *set_name, const char *ifname,
                       struct in_addr addr)
{
    batch_elem(b, NFT_MSG_NEWSETELEM, NLM_F_CREATE, set_name, ifname, addr, NULL);
    batch_elem(b, NFT_MSG_DELSETELEM, 0, set_name, ifname, addr, NULL);
}

/* ---- rule building blocks ---- */

struct nftnl_rule *rule_new(const char *chain)
{
    struct nftnl_rule *r = must(nftnl_rule_alloc());
    nftnl_rule_set_str(r, NFTNL_RULE_TABLE, FW_TABLE);
    nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
    nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
    return r;
}

struct nftnl_expr *expr_new(struct nftnl_rule *r, const char *name)
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

void x_cmp(struct nftnl_rule *r, uint32_t sreg, uint32_t op, const void *data, uint32_t len)
{
    struct nftnl_expr *e = expr_new(r, "cmp");
    nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, sreg);
    nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
    nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
}

void x_payload(struct nftnl_rule *r, uint32_t base, uint32_t offset, uint32_t len, uint32_t dreg)
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

void x_lookup(struct nftnl_rule *r, uint32_t sreg, const char *set, uint32_t set_id, bool inverted)
{
    struct nftnl_expr *e = expr_new(r, "lookup");
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, sreg);
    nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set);
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, set_id);
    if (inverted)
        nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
}

void x_counter(struct nftnl_rule *r, enum fw_drop_reason reason)
{
    char name[32];
    snprintf(name, sizeof(name), "drop_%s", fw_drop_reason_names[reason]);
    struct nftnl_expr *e = expr_new(r, "objref");
    nftnl_expr_set_u32(e, NFTNL_EXPR_OBJREF_IMM_TYPE, NFT_OBJECT_COUNTER);
    nftnl_expr_set_str(e, NFTNL_EXPR_OBJREF_IMM_NAME, name);
}

/* log prefix "sbx drop_<reason> " group FW_NFLOG_GROUP snaplen FW_NFLOG_SNAPLEN: the denial, for
 * egress_log.c (NFLOG), before the counter counts it. */
void x_log(struct nftnl_rule *r, enum fw_drop_reason reason)
{
    char prefix[48];
    snprintf(prefix, sizeof(prefix), FW_NFLOG_PREFIX "%s ", fw_drop_reason_names[reason]);
    struct nftnl_expr *e = expr_new(r, "log");
    nftnl_expr_set_str(e, NFTNL_EXPR_LOG_PREFIX, prefix);
    nftnl_expr_set_u16(e, NFTNL_EXPR_LOG_GROUP, FW_NFLOG_GROUP);
    nftnl_expr_set_u32(e, NFTNL_EXPR_LOG_SNAPLEN, FW_NFLOG_SNAPLEN);
}

void x_verdict(struct nftnl_rule *r, int verdict, const char *chain)
{
    struct nftnl_expr *e = expr_new(r, "immediate");
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
    nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)verdict);
    if (chain)
        nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, chain);
}

/* iifname/oifname "sbx*" (or != with op NFT_CMP_NEQ): a prefix compare, as nft makes it. */
void m_ifname_prefix(struct nftnl_rule *r, uint32_t meta_key, uint32_t op)
{
    x_meta(r, meta_key, NFT_REG_1);
    x_cmp(r, NFT_REG_1, op, FW_IFNAME_PREFIX, sizeof(FW_IFNAME_PREFIX) - 1);
}

void m_nfproto(struct nftnl_rule *r, uint8_t proto)
{
    x_meta(r, NFT_META_NFPROTO, NFT_REG_1);
    x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &proto, 1);
}

/* ct state established,related */
void m_ct_established(struct nftnl_rule *r)
{
    struct nftnl_expr *e = expr_new(r, "ct");
    nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_STATE);
    nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
    uint32_t mask = NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED), zero = 0;
    x_bitwise(r, NFT_REG_1, &mask, &zero, 4);
    x_cmp(r, NFT_REG_1, NFT_CMP_NEQ, &zero, 4);
}

/* tcp dport <port> (in the inet family: meta l4proto tcp first) */
void m_tcp_dport(struct nftnl_rule *r, uint16_t port)
{
    uint8_t tcp = IPPROTO_TCP;
    x_meta(r, NFT_META_L4PROTO, NFT_REG_1);
    x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &tcp, 1);
    uint16_t be = htons(port);
    x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG_1);
    x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &be, 2);
}

void m_l4proto(struct nftnl_rule *r, uint8_t proto)
{
    x_meta(r, NFT_META_L4PROTO, NFT_REG_1);
    x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &proto, 1);
}

/* The destination port into reg 1 (tcp dport / udp dport: the same offset); l4proto matched. */
void x_dport(struct nftnl_rule *r)
{
    x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, NFT_REG_1);
}

/* ip saddr/daddr <net>/<len>; the caller has matched meta nfproto ipv4. */
void m_ip_prefix(struct nftnl_rule *r, uint32_t offset, struct in_addr net, int len)
{
    x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, offset, 4, NFT_REG_1);
    if (len < 32) {
        uint32_t mask = htonl(~0u << (32 - len)), zero = 0;
        x_bitwise(r, NFT_REG_1, &mask, &zero, 4);
    }
    x_cmp(r, NFT_REG_1, NFT_CMP_EQ, &net.s_addr, 4);
}

/* iifname . ip saddr [!=] @set; the caller has matched meta nfproto ipv4. */
void m_iif_saddr_in(struct nftnl_rule *r, const char *set, uint32_t set_id, bool inverted)
{
    x_meta(r, NFT_META_IIFNAME, NFT_REG32_00);
    x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 12, 4, NFT_REG32_04);
    x_lookup(r, NFT_REG32_00, set, set_id, inverted);
}

struct in_addr addr4(const char *s)
{
    struct in_addr a;
    if (inet_pton(AF_INET, s, &a) != 1)
        abort(); /* only literals of this file */
    return a;
}
