/*
 * sbxctl_firewall.c: `sbxctl firewall`: the kernel's nftables table `inet sbx` next to the store.
 *
 * The worker's firewall (worker/host/firewall.h) keeps one table, `inet sbx`, in the host's network
 * namespace; a Sandbox is an element "<ifname> . <address>" of the set `sandboxes` whose comment
 * is the Sandbox id, and drops are counted in named counters drop_<reason>. This reads the table
 * through the firewall's own read-only entry point, fw_open() (which never creates or changes
 * anything; netlink needs CAP_NET_ADMIN), and compares its owners with the store: an element of
 * an ended or unknown Sandbox is a leftover rule, a live Sandbox with an address but no element is
 * unprotected. Either makes the exit code 1.
 */
#include "sbxctl.h"
#include "host/firewall.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads the table: its elements as {owner, ifname, address, nfs} and its drop counters. */
static int read_table(struct fw *fw, json_t *elements, json_t *counters, char *err, size_t errlen)
{
    struct fw_element *els = NULL;
    struct fw_counter cnt[FW_DROP_COUNT];
    size_t n = 0;
    char addr[INET_ADDRSTRLEN], name[64];

    if (fw_elements(fw, &els, &n, err, errlen) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        inet_ntop(AF_INET, &els[i].addr, addr, sizeof addr);
        json_array_append_new(elements,
                              json_pack("{s:s?,s:s,s:s,s:b}", "owner",
                                        els[i].owner[0] ? els[i].owner : NULL, "ifname",
                                        els[i].ifname, "address", addr, "nfs", els[i].nfs));
    }
    free(els);
    if (fw_counters(fw, cnt, err, errlen) != 0)
        return -1;
    for (int r = 0; r < FW_DROP_COUNT; r++) {
        snprintf(name, sizeof name, "drop_%s", fw_drop_reason_names[r]);
        json_array_append_new(counters, json_pack("{sssIsI}", "name", name, "packets",
                                                  (json_int_t)cnt[r].packets, "bytes",
                                                  (json_int_t)cnt[r].bytes));
    }
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
    char err[512] = "";
    if (ctl_parse(cmd, argc, argv, opts, pos, 0, &npos, &rc) != 0)
        return rc;
    if ((rc = ctl_open(ctl)) != CTL_OK)
        return rc;
    json_t *elements = json_array(), *counters = json_array();
    struct fw *fw = fw_open(err, sizeof err);
    bool have_table = fw && read_table(fw, elements, counters, err, sizeof err) == 0;
    /* No table yet is an answer (no worker has set up its firewall); not being able to read it
     * (no CAP_NET_ADMIN, no nf_tables) is not, and must not pass for "no Sandbox is protected". */
    if (!have_table && !strstr(err, "No such file or directory")) {
        fprintf(stderr, "sbxctl: cannot read the firewall: %s (run as root)\n", err);
        if (fw)
            fw_close(fw);
        json_decref(elements);
        json_decref(counters);
        return CTL_ERROR;
    }

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
            printf("firewall: %s\n", err);
        printf("Sandboxes in the firewall (%zu)\n", json_array_size(elements));
        ctl_print_table(ctl, elements, el_cols);
        printf("\nDrop counters\n");
        ctl_print_table(ctl, counters, counter_cols);
        printf("\nProblems (%zu)\n", json_array_size(problems));
        ctl_print_table(ctl, problems, problem_cols);
        if (raw && have_table) {
            printf("\n");
            fflush(stdout);
            if (fw_list(fw, stdout, err, sizeof err) != 0)
                fprintf(stderr, "sbxctl: cannot list the table: %s\n", err);
        }
    }
    rc = !live ? CTL_ERROR : json_array_size(problems) ? CTL_FAIL : CTL_OK;
    json_decref(live);
    if (fw)
        fw_close(fw);
    json_decref(elements);
    json_decref(counters);
    json_decref(problems);
    return rc;
}
