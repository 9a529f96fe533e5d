/*
 * test_firewall_batch.c: decodes the nlmsgs sbx's firewall sends (worker/host/firewall.c) back with
 * libnftnl and checks them: the structure batch creates exactly the table, counters, sets, chains
 * and rules of the network boundary (docs/network.md), each rule with exactly the expressions
 * expected; a Sandbox change is element messages only (never a rule, chain or table), naming its
 * owner.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "host/firewall.h"

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/expr.h>
#include <libnftnl/object.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each rule of the structure, in order: its chain and its expressions as libnftnl prints them
 * (what `nft --debug=netlink` shows), counters as [counter NAME]. Byte strings are shown as
 * little-endian words: 0x0000bb01 is port 443 (01 bb), 0x0000f0ff the mask ff.f0.0.0 of a /12. */
static const struct {
    const char *chain;
    const char *exprs;
} expected_rules[] = {
    {"sandbox_to_host", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x0000000a ][counter "
                        "drop_ipv6][immediate reg 0 drop ]"},
    {"sandbox_to_host", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname "
                        "=> reg 8 ][payload load 4b @ network header + 12 => reg 12 ][lookup reg 8 "
                        "set sandboxes 0x1 ][log prefix sbx drop_spoofed  group 5213 snaplen 64 "
                        "qthreshold 0 ][counter drop_spoofed][immediate reg 0 drop ]"},
    {"sandbox_to_host", "[ct load state => reg 1 ][bitwise reg 1 = ( reg 1 & 0x00000006 ) ^ "
                        "0x00000000 ][cmp neq reg 1 0x00000000 ][immediate reg 0 accept ]"},
    {"sandbox_to_host",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname => reg 8 ][payload "
     "load 4b @ network header + 12 => reg 12 ][lookup reg 8 set nfs ][meta load l4proto => reg 1 "
     "][cmp eq reg 1 0x00000006 ][payload load 2b @ transport header + 2 => reg 1 ][cmp eq reg 1 "
     "0x00000108 ][immediate reg 0 accept ]"},
    /* the callback API's 443, before egress none's drop */
    {"sandbox_to_host",
     "[meta load l4proto => reg 1 ][cmp eq reg 1 0x00000006 ][payload load 2b @ transport header + "
     "2 => reg 1 ][cmp eq reg 1 0x0000bb01 ][immediate reg 0 accept ]"},
    /* a Sandbox with secrets: its connection redirected to its worker's proxy */
    {"sandbox_to_host",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname => reg 8 ][payload "
     "load 4b @ network header + 12 => reg 12 ][lookup reg 8 set secret_proxy ][ct load status => "
     "reg 1 ][bitwise reg 1 = ( reg 1 & 0x00000020 ) ^ 0x00000000 ][cmp neq reg 1 0x00000000 "
     "][immediate reg 0 accept ]"},
    {"sandbox_to_host", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname "
                        "=> reg 8 ][payload load 4b @ network header + 12 => reg 12 ][lookup reg 8 "
                        "set egress_none ][log prefix sbx drop_policy  group 5213 snaplen 64 "
                        "qthreshold 0 ][counter drop_policy][immediate reg 0 drop ]"},
    {"sandbox_to_host",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname => reg 8 ][payload "
     "load 4b @ network header + 12 => reg 12 ][lookup reg 8 set egress_allowlist ][meta load "
     "l4proto => reg 1 ][cmp eq reg 1 0x00000011 ][payload load 2b @ transport header + 2 => reg 1 "
     "][cmp eq reg 1 0x0000b414 ][immediate reg 0 accept ]"},
    {"sandbox_to_host",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname => reg 8 ][payload "
     "load 4b @ network header + 12 => reg 12 ][lookup reg 8 set egress_allowlist ][meta load "
     "l4proto => reg 1 ][cmp eq reg 1 0x00000006 ][payload load 2b @ transport header + 2 => reg 1 "
     "][cmp eq reg 1 0x0000b414 ][immediate reg 0 accept ]"},
    /* a Sandbox with secrets: its DNS, redirected to the forwarder, whatever its policy */
    {"sandbox_to_host",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname => reg 8 ][payload "
     "load 4b @ network header + 12 => reg 12 ][lookup reg 8 set secret_proxy ][meta load l4proto "
     "=> reg 1 ][cmp eq reg 1 0x00000011 ][payload load 2b @ transport header + 2 => reg 1 ][cmp "
     "eq reg 1 0x0000b414 ][immediate reg 0 accept ]"},
    {"sandbox_to_host",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname => reg 8 ][payload "
     "load 4b @ network header + 12 => reg 12 ][lookup reg 8 set secret_proxy ][meta load l4proto "
     "=> reg 1 ][cmp eq reg 1 0x00000006 ][payload load 2b @ transport header + 2 => reg 1 ][cmp "
     "eq reg 1 0x0000b414 ][immediate reg 0 accept ]"},
    {"sandbox_to_host", "[log prefix sbx drop_host  group 5213 snaplen 64 qthreshold 0 ][counter "
                        "drop_host][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x0000000a ][counter "
                    "drop_ipv6][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname => "
                    "reg 8 ][payload load 4b @ network header + 12 => reg 12 ][lookup reg 8 set "
                    "sandboxes 0x1 ][log prefix sbx drop_spoofed  group 5213 snaplen 64 qthreshold "
                    "0 ][counter drop_spoofed][immediate reg 0 drop ]"},
    {"sandbox_out", "[ct load state => reg 1 ][bitwise reg 1 = ( reg 1 & 0x00000006 ) ^ 0x00000000 "
                    "][cmp neq reg 1 0x00000000 ][immediate reg 0 accept ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x000000ff ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x0000000a ][log prefix sbx drop_private  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_private][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x0000f0ff ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x000010ac ][log prefix sbx drop_private  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_private][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x0000ffff ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x0000a8c0 ][log prefix sbx drop_private  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_private][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x0000ffff ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x0000fea9 ][log prefix sbx drop_metadata  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_metadata][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x000000ff ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x00000000 ][log prefix sbx drop_special  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_special][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x0000c0ff ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x00004064 ][log prefix sbx drop_special  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_special][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x000000ff ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x0000007f ][log prefix sbx drop_special  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_special][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x00ffffff ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x000000c0 ][log prefix sbx drop_special  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_special][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x00ffffff ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x000200c0 ][log prefix sbx drop_special  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_special][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x0000feff ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x000012c6 ][log prefix sbx drop_special  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_special][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x00ffffff ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x006433c6 ][log prefix sbx drop_special  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_special][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x00ffffff ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x007100cb ][log prefix sbx drop_special  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_special][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x000000f0 ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x000000e0 ][log prefix sbx drop_special  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_special][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ "
                    "network header + 16 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x000000f0 ) ^ "
                    "0x00000000 ][cmp eq reg 1 0x000000f0 ][log prefix sbx drop_special  group "
                    "5213 snaplen 64 qthreshold 0 ][counter drop_special][immediate reg 0 drop ]"},
    {"sandbox_out",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ network header + "
     "16 => reg 1 ][cmp eq reg 1 0xffffffff ][log prefix sbx drop_special  group 5213 snaplen 64 "
     "qthreshold 0 ][counter drop_special][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname => "
                    "reg 8 ][payload load 4b @ network header + 12 => reg 12 ][lookup reg 8 set "
                    "egress_none ][log prefix sbx drop_policy  group 5213 snaplen 64 qthreshold 0 "
                    "][counter drop_policy][immediate reg 0 drop ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname => "
                    "reg 8 ][payload load 4b @ network header + 12 => reg 12 ][lookup reg 8 set "
                    "egress_allowlist ][immediate reg 0 jump -> egress_dispatch ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load l4proto => "
                    "reg 1 ][cmp eq reg 1 0x00000011 ][payload load 4b @ network header + 16 => "
                    "reg 1 ][lookup reg 1 set resolvers ][payload load 2b @ transport header + 2 "
                    "=> reg 1 ][cmp eq reg 1 0x00003500 ][immediate reg 0 accept ]"},
    {"sandbox_out", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load l4proto => "
                    "reg 1 ][cmp eq reg 1 0x00000006 ][payload load 4b @ network header + 16 => "
                    "reg 1 ][lookup reg 1 set resolvers ][payload load 2b @ transport header + 2 "
                    "=> reg 1 ][cmp eq reg 1 0x00003500 ][immediate reg 0 accept ]"},
    {"sandbox_out",
     "[meta load l4proto => reg 1 ][cmp eq reg 1 0x00000011 ][payload load 2b @ transport header + "
     "2 => reg 1 ][cmp eq reg 1 0x00003500 ][log prefix sbx drop_dns  group 5213 snaplen 64 "
     "qthreshold 0 ][counter drop_dns][immediate reg 0 drop ]"},
    {"sandbox_out",
     "[meta load l4proto => reg 1 ][cmp eq reg 1 0x00000006 ][payload load 2b @ transport header + "
     "2 => reg 1 ][cmp eq reg 1 0x00003500 ][log prefix sbx drop_dns  group 5213 snaplen 64 "
     "qthreshold 0 ][counter drop_dns][immediate reg 0 drop ]"},
    {"sandbox_out",
     "[meta load l4proto => reg 1 ][cmp eq reg 1 0x00000006 ][payload load 2b @ transport header + "
     "2 => reg 1 ][lookup reg 1 set egress_ports ][immediate reg 0 accept ]"},
    {"sandbox_out", "[log prefix sbx drop_egress  group 5213 snaplen 64 qthreshold 0 ][counter "
                    "drop_egress][immediate reg 0 drop ]"},
    {"sandbox_in", "[ct load state => reg 1 ][bitwise reg 1 = ( reg 1 & 0x00000006 ) ^ 0x00000000 "
                   "][cmp neq reg 1 0x00000000 ][immediate reg 0 accept ]"},
    {"sandbox_in", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x0000000a ][counter "
                   "drop_ipv6][immediate reg 0 drop ]"},
    {"sandbox_in", "[counter drop_inbound][immediate reg 0 drop ]"},
    {"input", "[meta load iifname => reg 1 ][cmp eq reg 1 0x00786273 ][immediate reg 0 jump -> "
              "sandbox_to_host ]"},
    {"forward", "[meta load oifname => reg 1 ][cmp eq reg 1 0x00786273 ][immediate reg 0 jump -> "
                "sandbox_in ]"},
    {"forward", "[meta load iifname => reg 1 ][cmp eq reg 1 0x00786273 ][immediate reg 0 jump -> "
                "sandbox_out ]"},
    {"output", "[meta load oifname => reg 1 ][cmp eq reg 1 0x00786273 ][immediate reg 0 jump -> "
               "sandbox_in ]"},
    {"postrouting",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][payload load 4b @ network header + "
     "12 => reg 1 ][bitwise reg 1 = ( reg 1 & 0x0000ffff ) ^ 0x00000000 ][cmp eq reg 1 0x0000d50a "
     "][meta load oifname => reg 1 ][cmp neq reg 1 0x00786273 ][masq ]"},
    {"prerouting",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname => reg 8 ][payload "
     "load 4b @ network header + 12 => reg 12 ][lookup reg 8 set egress_allowlist ][meta load "
     "l4proto => reg 1 ][cmp eq reg 1 0x00000011 ][payload load 2b @ transport header + 2 => reg 1 "
     "][cmp eq reg 1 0x00003500 ][immediate reg 1 0x0000b414 ][redir proto_min reg 1 ]"},
    {"prerouting",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname => reg 8 ][payload "
     "load 4b @ network header + 12 => reg 12 ][lookup reg 8 set secret_proxy ][meta load l4proto "
     "=> reg 1 ][cmp eq reg 1 0x00000011 ][payload load 2b @ transport header + 2 => reg 1 ][cmp "
     "eq reg 1 0x00003500 ][immediate reg 1 0x0000b414 ][redir proto_min reg 1 ]"},
    {"prerouting",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname => reg 8 ][payload "
     "load 4b @ network header + 12 => reg 12 ][lookup reg 8 set egress_allowlist ][meta load "
     "l4proto => reg 1 ][cmp eq reg 1 0x00000006 ][payload load 2b @ transport header + 2 => reg 1 "
     "][cmp eq reg 1 0x00003500 ][immediate reg 1 0x0000b414 ][redir proto_min reg 1 ]"},
    {"prerouting",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load iifname => reg 8 ][payload "
     "load 4b @ network header + 12 => reg 12 ][lookup reg 8 set secret_proxy ][meta load l4proto "
     "=> reg 1 ][cmp eq reg 1 0x00000006 ][payload load 2b @ transport header + 2 => reg 1 ][cmp "
     "eq reg 1 0x00003500 ][immediate reg 1 0x0000b414 ][redir proto_min reg 1 ]"},
    /* TCP 443 and 80 of a Sandbox with secrets: judged by its egress rules, then redirected */
    {"secret_proxy_judge",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load l4proto => reg 1 ][cmp eq "
     "reg 1 0x00000006 ][payload load 2b @ transport header + 2 => reg 1 ][cmp eq reg 1 0x0000bb01 "
     "][fib daddr type => reg 1 ][cmp neq reg 1 0x00000002 ][meta load iifname => reg 8 ][payload "
     "load 4b @ network header + 12 => reg 12 ][lookup reg 8 set secret_proxy ][immediate reg 0 "
     "jump -> sandbox_out ]"},
    {"prerouting", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load l4proto => "
                   "reg 1 ][cmp eq reg 1 0x00000006 ][payload load 2b @ transport header + 2 => "
                   "reg 1 ][cmp eq reg 1 0x0000bb01 ][fib daddr type => reg 1 ][cmp neq reg 1 "
                   "0x00000002 ][meta load iifname => reg 8 ][payload load 4b @ network header + "
                   "12 => reg 12 ][lookup reg 8 set secret_proxy dreg 1 ][redir proto_min reg 1 ]"},
    {"secret_proxy_judge",
     "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load l4proto => reg 1 ][cmp eq "
     "reg 1 0x00000006 ][payload load 2b @ transport header + 2 => reg 1 ][cmp eq reg 1 0x00005000 "
     "][fib daddr type => reg 1 ][cmp neq reg 1 0x00000002 ][meta load iifname => reg 8 ][payload "
     "load 4b @ network header + 12 => reg 12 ][lookup reg 8 set secret_proxy ][immediate reg 0 "
     "jump -> sandbox_out ]"},
    {"prerouting", "[meta load nfproto => reg 1 ][cmp eq reg 1 0x00000002 ][meta load l4proto => "
                   "reg 1 ][cmp eq reg 1 0x00000006 ][payload load 2b @ transport header + 2 => "
                   "reg 1 ][cmp eq reg 1 0x00005000 ][fib daddr type => reg 1 ][cmp neq reg 1 "
                   "0x00000002 ][meta load iifname => reg 8 ][payload load 4b @ network header + "
                   "12 => reg 12 ][lookup reg 8 set secret_proxy dreg 1 ][redir proto_min reg 1 ]"},
};

#define NRULES (sizeof(expected_rules) / sizeof(expected_rules[0]))

/* The counter names a rule refers to, in order, read from the raw attributes: libnftnl 1.2.4
 * writes NFTA_OBJREF_IMM_NAME without its NUL and reads it back with strdup(), which runs into the
 * next attribute when the name fills its 4-byte alignment (the kernel, which bounds the copy by the
 * attribute's length, is not affected). */
struct objref_names {
    char v[32][32];
    size_t n, next;
};

static void collect_objref(const struct nlattr *expr, struct objref_names *out)
{
    const struct nlattr *a, *name = NULL, *data = NULL;
    mnl_attr_for_each_nested(a, expr)
    {
        if (mnl_attr_get_type(a) == NFTA_EXPR_NAME)
            name = a;
        else if (mnl_attr_get_type(a) == NFTA_EXPR_DATA)
            data = a;
    }
    if (!name || strcmp(mnl_attr_get_str(name), "objref") != 0 || !data)
        return;
    mnl_attr_for_each_nested(a, data)
    {
        if (mnl_attr_get_type(a) == NFTA_OBJREF_IMM_NAME && out->n < 32)
            snprintf(out->v[out->n++], 32, "%.*s", (int)mnl_attr_get_payload_len(a),
                     (const char *)mnl_attr_get_payload(a));
    }
}

static void objref_names_of(const struct nlmsghdr *nlh, struct objref_names *out)
{
    memset(out, 0, sizeof(*out));
    const struct nlattr *a;
    mnl_attr_for_each(a, nlh, sizeof(struct nfgenmsg))
    {
        if (mnl_attr_get_type(a) != NFTA_RULE_EXPRESSIONS)
            continue;
        const struct nlattr *elem;
        mnl_attr_for_each_nested(elem, a) collect_objref(elem, out);
    }
}

static struct objref_names *current_names;

static int render_expr(struct nftnl_expr *e, void *data)
{
    char *out = data, buf[512];
    const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);
    if (strcmp(name, "objref") == 0) {
        assert_int_equal(nftnl_expr_get_u32(e, NFTNL_EXPR_OBJREF_IMM_TYPE), NFT_OBJECT_COUNTER);
        assert_true(current_names->next < current_names->n);
        snprintf(buf, sizeof(buf), "[counter %s]", current_names->v[current_names->next++]);
    } else {
        char body[480];
        nftnl_expr_snprintf(body, sizeof(body), e, NFTNL_OUTPUT_DEFAULT, 0);
        snprintf(buf, sizeof(buf), "[%s %s]", name, body);
    }
    strcat(out, buf);
    return 0;
}

static uint16_t msg_type(const struct nlmsghdr *nlh)
{
    return (uint16_t)(nlh->nlmsg_type & 0xff);
}

static bool is_nftables(const struct nlmsghdr *nlh)
{
    return (nlh->nlmsg_type >> 8) == NFNL_SUBSYS_NFTABLES;
}

static int comment_cb(const struct nftnl_udata *attr, void *data)
{
    if (nftnl_udata_type(attr) == 0)
        *(const struct nftnl_udata **)data = attr;
    return 0;
}

static void check_framing(const struct fw_batch *b, size_t *n_msgs)
{
    const struct nlmsghdr *nlh = (const struct nlmsghdr *)b->buf;
    int len = (int)b->len;
    size_t i = 0, count = 0;
    uint16_t last = 0;
    for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len), i++) {
        if (i == 0)
            assert_int_equal(nlh->nlmsg_type, NFNL_MSG_BATCH_BEGIN);
        else if (nlh->nlmsg_type != NFNL_MSG_BATCH_END) {
            assert_true(is_nftables(nlh));
            /* Only the last message asks for an ack (errors come anyway). */
            const struct nlmsghdr *next = mnl_nlmsg_next(nlh, &(int){len});
            bool is_last = next->nlmsg_type == NFNL_MSG_BATCH_END;
            assert_int_equal(!!(nlh->nlmsg_flags & NLM_F_ACK), is_last);
            count++;
        }
        last = nlh->nlmsg_type;
    }
    assert_int_equal(len, 0); /* nothing after the last message */
    assert_int_equal(last, NFNL_MSG_BATCH_END);
    assert_int_equal(count, b->messages);
    *n_msgs = count;
}

static void test_structure_batch(void **state)
{
    (void)state;
    struct fw_batch b;
    char err[256];
    assert_int_equal(fw_build_structure("10.213.0.0/16", &b, err, sizeof(err)), 0);
    size_t n;
    check_framing(&b, &n);

    size_t tables = 0, counters = 0, sets = 0, chains = 0, rules = 0;
    const struct nlmsghdr *nlh = (const struct nlmsghdr *)b.buf;
    int len = (int)b.len;
    for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
        if (!is_nftables(nlh))
            continue;
        switch (msg_type(nlh)) {
        case NFT_MSG_NEWTABLE: {
            struct nftnl_table *t = nftnl_table_alloc();
            assert_int_equal(nftnl_table_nlmsg_parse(nlh, t), 0);
            assert_string_equal(nftnl_table_get_str(t, NFTNL_TABLE_NAME), FW_TABLE);
            assert_int_equal(nftnl_table_get_u32(t, NFTNL_TABLE_FAMILY), NFPROTO_INET);
            /* Created exclusively: never on top of a table another worker just made. */
            assert_true(nlh->nlmsg_flags & NLM_F_EXCL);
            uint32_t ulen;
            const void *ud = nftnl_table_get_data(t, NFTNL_TABLE_USERDATA, &ulen);
            const struct nftnl_udata *c = NULL;
            assert_int_equal(nftnl_udata_parse(ud, ulen, comment_cb, &c), 0);
            assert_non_null(c);
            assert_non_null(strstr(nftnl_udata_get(c), "pool 10.213.0.0/16"));
            nftnl_table_free(t);
            tables++;
            break;
        }
        case NFT_MSG_NEWOBJ: {
            struct nftnl_obj *o = nftnl_obj_alloc();
            assert_int_equal(nftnl_obj_nlmsg_parse(nlh, o), 0);
            assert_int_equal(nftnl_obj_get_u32(o, NFTNL_OBJ_TYPE), NFT_OBJECT_COUNTER);
            char want[32];
            snprintf(want, sizeof(want), "drop_%s", fw_drop_reason_names[counters]);
            assert_string_equal(nftnl_obj_get_str(o, NFTNL_OBJ_NAME), want);
            nftnl_obj_free(o);
            counters++;
            break;
        }
        case NFT_MSG_NEWSET: {
            struct nftnl_set *s = nftnl_set_alloc();
            assert_int_equal(nftnl_set_nlmsg_parse(nlh, s), 0);
            /* ifname (16 bytes) . ipv4_addr (4): nft's type id (41 << 6) | 7; inet_service 13,
             * ipv4_addr 7. */
            static const struct {
                const char *name;
                uint32_t key_len, key_type, flags;
            } want_sets[] = {
                {"sandboxes", 20, (41 << 6) | 7, 0},
                {"nfs", 20, (41 << 6) | 7, 0},
                {"egress_ports", 2, 13, 0},
                {"resolvers", 4, 7, 0},
                {"egress_none", 20, (41 << 6) | 7, 0},
                {"egress_allowlist", 20, (41 << 6) | 7, 0},
                {"secret_proxy", 20, (41 << 6) | 7, NFT_SET_MAP}, /* -> inet_service */
            };
            assert_true(sets < sizeof want_sets / sizeof want_sets[0]);
            assert_string_equal(nftnl_set_get_str(s, NFTNL_SET_NAME), want_sets[sets].name);
            assert_int_equal(nftnl_set_get_u32(s, NFTNL_SET_KEY_LEN), want_sets[sets].key_len);
            assert_int_equal(nftnl_set_get_u32(s, NFTNL_SET_KEY_TYPE), want_sets[sets].key_type);
            assert_int_equal(nftnl_set_get_u32(s, NFTNL_SET_FLAGS), want_sets[sets].flags);
            nftnl_set_free(s);
            sets++;
            break;
        }
        case NFT_MSG_NEWCHAIN: {
            struct nftnl_chain *c = nftnl_chain_alloc();
            assert_int_equal(nftnl_chain_nlmsg_parse(nlh, c), 0);
            const char *name = nftnl_chain_get_str(c, NFTNL_CHAIN_NAME);
            if (nftnl_chain_is_set(c, NFTNL_CHAIN_HOOKNUM)) {
                uint32_t hook = nftnl_chain_get_u32(c, NFTNL_CHAIN_HOOKNUM);
                int32_t prio = nftnl_chain_get_s32(c, NFTNL_CHAIN_PRIO);
                const char *type = nftnl_chain_get_str(c, NFTNL_CHAIN_TYPE);
                assert_int_equal(nftnl_chain_get_u32(c, NFTNL_CHAIN_POLICY), NF_ACCEPT);
                if (strcmp(name, "postrouting") == 0) {
                    assert_int_equal(hook, NF_INET_POST_ROUTING);
                    assert_string_equal(type, "nat");
                    assert_int_equal(prio, 100);
                } else if (strcmp(name, "prerouting") == 0) { /* DNS to sbx's forwarder */
                    assert_int_equal(hook, NF_INET_PRE_ROUTING);
                    assert_string_equal(type, "nat");
                    assert_int_equal(prio, -100);
                } else if (strcmp(name, "secret_proxy_judge") == 0) { /* before the redirect */
                    assert_int_equal(hook, NF_INET_PRE_ROUTING);
                    assert_string_equal(type, "filter");
                    assert_int_equal(prio, -150);
                } else {
                    assert_string_equal(type, "filter");
                    assert_int_equal(prio, -10);
                    assert_int_equal(hook, strcmp(name, "input") == 0     ? NF_INET_LOCAL_IN
                                           : strcmp(name, "forward") == 0 ? NF_INET_FORWARD
                                                                          : NF_INET_LOCAL_OUT);
                    assert_true(strcmp(name, "input") == 0 || strcmp(name, "forward") == 0 ||
                                strcmp(name, "output") == 0);
                }
            }
            nftnl_chain_free(c);
            chains++;
            break;
        }
        case NFT_MSG_NEWRULE: {
            struct nftnl_rule *r = nftnl_rule_alloc();
            assert_int_equal(nftnl_rule_nlmsg_parse(nlh, r), 0);
            assert_true(rules < NRULES);
            char got[4096] = "";
            struct objref_names names;
            objref_names_of(nlh, &names);
            current_names = &names;
            nftnl_expr_foreach(r, render_expr, got);
            assert_int_equal(names.next, names.n);
            const char *chain = nftnl_rule_get_str(r, NFTNL_RULE_CHAIN);
            if (strcmp(chain, expected_rules[rules].chain) != 0 ||
                strcmp(got, expected_rules[rules].exprs) != 0)
                fail_msg("rule %zu:\n  want %s: %s\n  got  %s: %s", rules,
                         expected_rules[rules].chain, expected_rules[rules].exprs, chain, got);
            nftnl_rule_free(r);
            rules++;
            break;
        }
        default:
            fail_msg("unexpected message type %d in the structure batch", msg_type(nlh));
        }
    }
    assert_int_equal(tables, 1);
    assert_int_equal(counters, FW_DROP_COUNT);
    assert_int_equal(sets, 7);
    assert_int_equal(chains, 10);
    assert_int_equal(rules, NRULES);
    fw_batch_free(&b);
}

struct elem_msg {
    uint16_t type;
    uint16_t flags;
    char set[32];
    char key[20];
    char owner[64];
};

static void decode_elements(const struct fw_batch *b, struct elem_msg *out, size_t *n)
{
    const struct nlmsghdr *nlh = (const struct nlmsghdr *)b->buf;
    int len = (int)b->len;
    *n = 0;
    for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
        if (!is_nftables(nlh))
            continue;
        uint16_t t = msg_type(nlh);
        /* A Sandbox change is elements only: never a table, chain, set or rule. */
        assert_true(t == NFT_MSG_NEWSETELEM || t == NFT_MSG_DELSETELEM);
        struct nftnl_set *s = nftnl_set_alloc();
        assert_int_equal(nftnl_set_elems_nlmsg_parse(nlh, s), 0);
        struct elem_msg *m = &out[(*n)++];
        memset(m, 0, sizeof(*m));
        m->type = t;
        m->flags = nlh->nlmsg_flags;
        snprintf(m->set, sizeof(m->set), "%s", nftnl_set_get_str(s, NFTNL_SET_NAME));
        struct nftnl_set_elems_iter *it = nftnl_set_elems_iter_create(s);
        struct nftnl_set_elem *e = nftnl_set_elems_iter_next(it);
        assert_non_null(e);
        uint32_t klen, ulen = 0;
        const void *key = nftnl_set_elem_get(e, NFTNL_SET_ELEM_KEY, &klen);
        assert_int_equal(klen, 20);
        memcpy(m->key, key, 20);
        const void *ud = nftnl_set_elem_get(e, NFTNL_SET_ELEM_USERDATA, &ulen);
        if (ud) {
            const struct nftnl_udata *c = NULL;
            nftnl_udata_parse(ud, ulen, comment_cb, &c);
            assert_non_null(c);
            snprintf(m->owner, sizeof(m->owner), "%s", (const char *)nftnl_udata_get(c));
        }
        assert_null(nftnl_set_elems_iter_next(it)); /* one element per message */
        nftnl_set_elems_iter_destroy(it);
        nftnl_set_free(s);
    }
}

static void test_sandbox_add_batch(void **state)
{
    (void)state;
    struct fw_sandbox sb = {"sbx_0123456789abcdefghij", "sbx42", {0}};
    inet_pton(AF_INET, "10.213.0.170", &sb.addr);
    struct fw_batch b;
    char err[256];
    assert_int_equal(fw_build_sandbox_add(&sb, &b, err, sizeof(err)), 0);
    size_t n;
    check_framing(&b, &n);
    struct elem_msg m[16];
    size_t k;
    decode_elements(&b, m, &k);
    assert_int_equal(k, 5);
    /* The key: "sbx42" zero-padded to 16 bytes, then 10.213.0.170 in network order. */
    char want_key[20] = "sbx42";
    memcpy(want_key + 16, "\x0a\xd5\x00\xaa", 4);
    for (size_t i = 0; i < k; i++)
        assert_memory_equal(m[i].key, want_key, 20);
    /* A stale element with this key (a Sandbox that crashed) is cleared from both sets first,
     * then the new one is added exclusively with its owner. */
    assert_int_equal(m[0].type, NFT_MSG_NEWSETELEM);
    assert_string_equal(m[0].set, "sandboxes");
    assert_false(m[0].flags & NLM_F_EXCL);
    assert_int_equal(m[1].type, NFT_MSG_DELSETELEM);
    assert_string_equal(m[1].set, "sandboxes");
    assert_int_equal(m[2].type, NFT_MSG_NEWSETELEM);
    assert_string_equal(m[2].set, "nfs");
    assert_int_equal(m[3].type, NFT_MSG_DELSETELEM);
    assert_string_equal(m[3].set, "nfs");
    assert_int_equal(m[4].type, NFT_MSG_NEWSETELEM);
    assert_string_equal(m[4].set, "sandboxes");
    assert_true(m[4].flags & NLM_F_EXCL);
    assert_string_equal(m[4].owner, "sbx_0123456789abcdefghij");
    fw_batch_free(&b);
}

static void test_refuses_bad_input(void **state)
{
    (void)state;
    struct fw_batch b;
    char err[256];
    assert_int_equal(fw_build_structure("10.213.0.0", &b, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "a.b.c.d/len"));
    assert_int_equal(fw_build_structure("10.213.0.1/16", &b, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "host bits"));
    struct fw_sandbox sb = {"sbx_x", "eth0", {0}};
    assert_int_equal(fw_build_sandbox_add(&sb, &b, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "not a Sandbox interface"));
    sb.ifname = "sbx1";
    sb.sandbox_id = "";
    assert_int_equal(fw_build_sandbox_add(&sb, &b, err, sizeof(err)), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_structure_batch),
        cmocka_unit_test(test_sandbox_add_batch),
        cmocka_unit_test(test_refuses_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
