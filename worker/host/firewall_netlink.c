/*
 * firewall_netlink.c: the firewall's netlink talk (firewall_internal.h): sending a batch and
 * reading every ack, and reading the table back: its comment, the ruleset generation and set
 * dumps.
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

/* ---- netlink talk ---- */

/* Sends a batch and reads every answer. nfnetlink handles a batch inside sendmsg(), so all
 * answers are queued by the time it returns: read until the queue is empty. */
int fw_send_batch(struct fw *fw, struct fw_batch *b, char *err, size_t errlen)
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
int fw_request(struct fw *fw, const char *what, struct nlmsghdr *nlh, mnl_cb_t cb, void *data,
               char *err, size_t errlen)
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

uint32_t fw_next_seq(struct fw *fw)
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
void udata_comment(const void *data, uint32_t len, char *out, size_t outlen)
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
int fw_get_table(struct fw *fw, char comment[160], char *err, size_t errlen)
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
int fw_dump_set(struct fw *fw, const char *set_name, struct set_dump *d, char *err, size_t errlen)
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
bool elem_key_sandbox(const struct set_elem_raw *r, char ifname[IFNAMSIZ], struct in_addr *addr)
{
    if (r->key_len != KEY_LEN)
        return false;
    memcpy(ifname, r->key, IFNAMSIZ - 1);
    ifname[IFNAMSIZ - 1] = '\0';
    memcpy(&addr->s_addr, r->key + KEY_IFNAME_LEN, 4);
    return true;
}

/* Both sets, merged per interface and address (an element only in `nfs` still shows). */
int fw_read_elements(struct fw *fw, struct elems_acc *acc, char *err, size_t errlen)
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
