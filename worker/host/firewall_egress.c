/*
 * firewall_egress.c: egress in the firewall's table (firewall_internal.h): host-wide sets,
 * per-App chains and resolved names, per-Sandbox membership, and carrying it over a table
 * replacement.
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

int forget_egress(struct fw *fw, const struct fw_sandbox *sb, char *err, size_t errlen)
{
    struct sandbox_egress x = {sb, FW_EGRESS_PUBLIC, NULL, ""};
    return apply_sandbox_egress(fw, &x, err, errlen);
}

/* ---- carrying egress state over a table replacement ---- */

/* The host-wide sets as they were, and every Sandbox under a policy into egress_none: the App
 * chains do not survive the replacement, so an allowlist Sandbox fails closed until its worker
 * applies its App's policy again. */
int batch_carry_egress(struct fw *fw, struct fw_batch *b, char *err, size_t errlen)
{
    static const struct {
        const char *from, *to;
    } carry[] = {{SET_EGRESS_PORTS, SET_EGRESS_PORTS},
                 {SET_RESOLVERS, SET_RESOLVERS},
                 {SET_EGRESS_NONE, SET_EGRESS_NONE},
                 {SET_EGRESS_ALLOWLIST, SET_EGRESS_NONE},
                 /* a Sandbox with secrets loses its proxy: it fails closed the same way */
                 {MAP_SECRET_PROXY, SET_EGRESS_NONE}};
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
