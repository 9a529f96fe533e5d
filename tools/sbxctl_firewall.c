/*
 * sbxctl_firewall.c: `sbxctl firewall`: the kernel's nftables table `inet sbx` next to the store.
 *
 * The worker's firewall (worker/firewall.h) keeps one table, `inet sbx`, in the host's network
 * namespace; a Sandbox is an element "<ifname> . <address>" of the set `sandboxes` whose comment
 * is the Sandbox id, and drops are counted in named counters drop_<reason>. This reads the table
 * with `nft -j list table inet sbx` (read-only, needs CAP_NET_ADMIN like any netlink dump of
 * nftables), and compares its owners with the store: an element of an ended or unknown Sandbox is
 * a leftover rule, a live Sandbox with an address but no element is unprotected. Either makes the
 * exit code 1.
 *
 * Why not fw_list() from worker/firewall.h: it needs a struct fw from fw_init(), which creates the
 * table when it is missing and replaces it when its net_pool differs from ours. A read-only tool
 * must not change the firewall it inspects, so this reads the kernel's dump instead.
 */
#include "sbxctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Runs cmd and returns its stdout (caller frees), or NULL; *exit_status gets its status. */
static char *run_capture(const char *cmd, int *exit_status)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (n + 1 >= cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    int st = pclose(p);
    *exit_status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* The elements of one set of the nft JSON dump as {ifname, address, owner} objects. */
static void collect_set(json_t *set, json_t *out)
{
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(set, "elem"), i, e)
    {
        json_t *inner = json_object_get(e, "elem");
        json_t *val = inner ? json_object_get(inner, "val") : e;
        const char *comment = inner ? json_string_value(json_object_get(inner, "comment")) : NULL;
        json_t *concat = json_object_get(val, "concat");
        const char *ifname = json_string_value(json_array_get(concat, 0));
        const char *addr = json_string_value(json_array_get(concat, 1));
        json_array_append_new(out, json_pack("{s:s?,s:s?,s:s?}", "owner", comment, "ifname", ifname,
                                             "address", addr));
    }
}

/* Reads the table: the `sandboxes` and `nfs` elements and the named counters. */
static int read_table(json_t *elements, json_t *nfs, json_t *counters, char *err, size_t errlen)
{
    int status = 0;
    char *out = run_capture("nft -j list table inet sbx 2>/dev/null", &status);
    if (!out || status != 0) {
        snprintf(err, errlen, "%s",
                 !out ? "cannot run nft"
                      : "no table `inet sbx` (no worker "
                        "has set up its firewall, or nft "
                        "is missing or not permitted)");
        free(out);
        return -1;
    }
    json_t *doc = json_loads(out, 0, NULL);
    free(out);
    if (!doc) {
        snprintf(err, errlen, "cannot read nft's JSON output");
        return -1;
    }
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(doc, "nftables"), i, item)
    {
        json_t *set = json_object_get(item, "set");
        json_t *counter = json_object_get(item, "counter");
        const char *name = json_string_value(json_object_get(set ? set : counter, "name"));
        if (set && name && strcmp(name, "sandboxes") == 0)
            collect_set(set, elements);
        else if (set && name && strcmp(name, "nfs") == 0)
            collect_set(set, nfs);
        else if (counter && name)
            json_array_append_new(counters, json_pack("{sssOsO}", "name", name, "packets",
                                                      json_object_get(counter, "packets"), "bytes",
                                                      json_object_get(counter, "bytes")));
    }
    json_decref(doc);
    return 0;
}

static bool in_list(json_t *list, const char *key, const char *value)
{
    size_t i;
    json_t *o;
    json_array_foreach(list, i, o)
    {
        const char *v = json_string_value(json_object_get(o, key));
        if (v && value && strcmp(v, value) == 0)
            return true;
    }
    return false;
}

int cmd_firewall(struct ctl *ctl, int argc, char **argv)
{
    bool raw = false;
    const struct ctl_opt opts[] = {{"--raw", NULL, &raw}, {0}};
    const struct ctl_command *cmd = ctl_find_command("firewall");
    const char *pos[1];
    int npos, rc;
    char err[256];
    if (ctl_parse(cmd, argc, argv, opts, pos, 0, &npos, &rc) != 0)
        return rc;
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;
    json_t *elements = json_array(), *nfs = json_array(), *counters = json_array();
    bool have_table = read_table(elements, nfs, counters, err, sizeof err) == 0;

    /* Each element with the store's view of its owner. */
    size_t i;
    json_t *e, *problems = json_array();
    json_array_foreach(elements, i, e)
    {
        const char *owner = json_string_value(json_object_get(e, "owner"));
        json_t *sb = ctl_query_one(ctl,
                                   "SELECT state, session_id, app_id, net_address FROM sandboxes "
                                   "WHERE id = ?1",
                                   "s", owner);
        bool live = sb && json_is_object(sb) &&
                    strcmp(json_string_value(json_object_get(sb, "state")), "terminated") != 0 &&
                    strcmp(json_string_value(json_object_get(sb, "state")), "failed") != 0;
        json_object_set(e, "state",
                        json_is_object(sb) ? json_object_get(sb, "state") : json_null());
        json_object_set(e, "session_id",
                        json_is_object(sb) ? json_object_get(sb, "session_id") : json_null());
        json_object_set_new(
            e, "nfs",
            json_boolean(
                in_list(nfs, "owner", owner) ||
                in_list(nfs, "address", json_string_value(json_object_get(e, "address")))));
        if (!live)
            json_array_append_new(problems,
                                  json_pack("{s:s,s:s?,s:s}", "problem", "leftover-element",
                                            "sandbox_id", owner, "detail",
                                            json_is_object(sb) ? "its Sandbox has ended"
                                                               : "no such Sandbox in the store"));
        json_decref(sb);
    }
    /* Live Sandboxes that have an address but no element. */
    json_t *live = ctl_query(ctl,
                             "SELECT id, state, session_id, net_address FROM sandboxes WHERE "
                             "state NOT IN ('terminated', 'failed') AND net_address IS NOT NULL "
                             "ORDER BY created_at",
                             NULL);
    json_array_foreach(live, i, e)
    {
        const char *id = json_string_value(json_object_get(e, "id"));
        if (!in_list(elements, "owner", id))
            json_array_append_new(problems, json_pack("{ssssss}", "problem", "missing-element",
                                                      "sandbox_id", id, "detail",
                                                      "a live Sandbox with an address is not in "
                                                      "the set `sandboxes`"));
    }
    if (ctl->json) {
        json_t *out = json_pack("{sbsOsOsO}", "table_present", have_table, "elements", elements,
                                "counters", counters, "problems", problems);
        ctl_print_json(out, false);
        json_decref(out);
    } else {
        static const struct ctl_col el_cols[] = {{"owner", "SANDBOX"},
                                                 {"ifname", "IFNAME"},
                                                 {"address", "ADDRESS"},
                                                 {"nfs", "NFS"},
                                                 {"state", "STATE"},
                                                 {"session_id", "SESSION"},
                                                 {0}};
        static const struct ctl_col counter_cols[] = {
            {"name", "COUNTER"}, {"packets", "PACKETS"}, {"bytes", "BYTES"}, {0}};
        static const struct ctl_col problem_cols[] = {
            {"problem", "PROBLEM"}, {"sandbox_id", "SANDBOX"}, {"detail", "DETAIL"}, {0}};
        if (!have_table)
            printf("table inet sbx: %s\n", err);
        printf("Sandboxes in the firewall (%zu)\n", json_array_size(elements));
        ctl_print_table(ctl, elements, el_cols);
        printf("\nDrop counters\n");
        ctl_print_table(ctl, counters, counter_cols);
        printf("\nProblems (%zu)\n", json_array_size(problems));
        ctl_print_table(ctl, problems, problem_cols);
        if (raw && have_table) {
            int st;
            char *text = run_capture("nft list table inet sbx 2>&1", &st);
            printf("\n%s", text ? text : "");
            free(text);
        }
    }
    rc = !live ? CTL_ERROR : json_array_size(problems) ? CTL_FAIL : CTL_OK;
    json_decref(live);
    json_decref(elements);
    json_decref(nfs);
    json_decref(counters);
    json_decref(problems);
    return rc;
}
