/*
 * firewall.c: builds and sends the nftables batches of firewall.h with libnftnl over libmnl.
 *
 * This file has the public functions; the batches, rules, netlink talk and egress are in the
 * files firewall_internal.h lists.
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

const char *const fw_drop_reason_names[FW_DROP_COUNT] = {
    "host",    "private", "metadata", "special", "ipv6",
    "inbound", "spoofed", "egress",   "dns",     "policy",
};

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
int fw_apply(struct fw *fw, void (*fill)(struct fw_batch *, const void *), const void *arg,
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
        if (rc == 0)
            rc = forget_secret_proxy(fw, &sb, err, errlen);
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
