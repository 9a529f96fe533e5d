/*
 * net_ctl.c: drives sbx's own network code (worker/host/links.c, worker/host/firewall.c) from the
 * network integration test, one call per invocation, in the namespace it runs in. The kernel holds
 * all state between invocations (interfaces with their alias, set elements with their owner),
 * exactly as it does for the worker.
 *
 *   net_ctl [-p POOL] init
 *   net_ctl [-p POOL] attach SANDBOX_ID PID       prints "<ifname> <sandbox address> <host
 * address>" net_ctl [-p POOL] tap SANDBOX_ID              same for a tap device net_ctl [-p POOL]
 * nfs SANDBOX_ID ADDRESS on|off net_ctl [-p POOL] release SANDBOX_ID [ADDRESS] net_ctl [-p POOL]
 * reconcile [LIVE_ID...]      prints "links N elements M" net_ctl [-p POOL] counters prints
 * "drop_<reason> <packets> <bytes>" lines net_ctl [-p POOL] list                        fw_list
 *   net_ctl [-p POOL] destroy                     fw_destroy
 *   net_ctl [-p POOL] tap-held SANDBOX_ID         net_tap_open while a fork holds the tap's fd
 *   net_ctl ro-counters | ro-list | ro-metrics    through fw_open (read-only, no init)
 *   net_ctl store-insert DB                       a booting Sandbox in the SQLite store: its id
 *   net_ctl store-finish DB SANDBOX_ID            that Sandbox terminated
 *   net_ctl [-p POOL] store-reconcile DB          reconcile_host_network (the worker's)
 *   net_ctl [-p POOL] egress PORTS RESOLVERS      fw_set_egress (egress_ports, dns_resolvers)
 *   net_ctl [-p POOL] policy APP_ID [CIDR[:PORT]...]   fw_app_policy_set: the App's allowlist
 *   net_ctl [-p POOL] sandbox-egress SANDBOX_ID ADDRESS public|none|allowlist [APP_ID]
 *   net_ctl [-p POOL] secret-proxy SANDBOX_ID ADDRESS PORT   fw_sandbox_set_secret_proxy (0: off)
 */
#include "clock.h"
#include "egress_settings.h"
#include "host/firewall.h"
#include "log.h"
#include "host/links.h"
#include "recovery/host_reconcile.h"
#include "store.h"

#include <arpa/inet.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *what, const char *err)
{
    fprintf(stderr, "net_ctl: %s: %s\n", what, err);
    return 1;
}

/* A tap whose first fd a forked child still holds (as when another worker thread forks between
 * net_tap_create's close and the driver's open): net_tap_open without a wait is refused, with one
 * it gets the tap once the child lets go. Prints "busy, then opened after <ms> ms". */
static int tap_held(const char *sandbox_id, char *err, size_t errlen)
{
    struct net_link link;
    if (net_sandbox_attach_tap(sandbox_id, (uid_t)-1, (gid_t)-1, &link, err, errlen) < 0)
        return -1;
    int first = net_tap_open(link.ifname, 0, err, errlen);
    if (first < 0)
        return -1;
    pid_t child = fork();
    if (child < 0)
        return snprintf(err, errlen, "fork failed"), -1;
    if (child == 0) {
        struct timespec hold = {0, 300 * 1000 * 1000};
        nanosleep(&hold, NULL);
        _exit(0);
    }
    close(first);
    int fd = net_tap_open(link.ifname, 0, err, errlen);
    if (fd >= 0) {
        close(fd);
        waitpid(child, NULL, 0);
        return snprintf(err, errlen, "opened while the child held it"), -1;
    }
    printf("%s: %s\n", link.ifname, err);
    int64_t t0 = clock_mono_ms();
    fd = net_tap_open(link.ifname, 2000, err, errlen);
    int64_t waited = clock_mono_ms() - t0;
    waitpid(child, NULL, 0);
    if (fd < 0)
        return -1;
    close(fd);
    printf("busy, then opened after %lld ms\n", (long long)waited);
    return 0;
}

struct live_ids {
    char **ids;
    int n;
};

static bool listed(const char *sandbox_id, void *arg)
{
    const struct live_ids *l = arg;
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->ids[i], sandbox_id) == 0)
            return true;
    return false;
}

static void print_link(const struct net_link *link)
{
    char sa[INET_ADDRSTRLEN], ha[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &link->sandbox_addr, sa, sizeof(sa));
    inet_ntop(AF_INET, &link->host_addr, ha, sizeof(ha));
    printf("%s %s %s\n", link->ifname, sa, ha);
}

static int print_counters(struct fw *fw)
{
    char err[512];
    struct fw_counter c[FW_DROP_COUNT];
    if (fw_counters(fw, c, err, sizeof(err)) < 0)
        return die("counters", err);
    for (int i = 0; i < FW_DROP_COUNT; i++)
        printf("drop_%s %llu %llu\n", fw_drop_reason_names[i], (unsigned long long)c[i].packets,
               (unsigned long long)c[i].bytes);
    return 0;
}

/* What sbxctl and the gateway do: look, never create. */
static int read_only(const char *cmd)
{
    char err[512];
    struct fw *fw = fw_open(err, sizeof(err));
    if (!fw)
        return die("open", err);
    int rc;
    char text[4096];
    if (strcmp(cmd, "counters") == 0)
        rc = print_counters(fw);
    else if (strcmp(cmd, "metrics") == 0)
        rc = fw_metrics_text(fw, text, sizeof text, err, sizeof err) < 0 ? die("metrics", err)
                                                                         : (fputs(text, stdout), 0);
    else if (fw_list(fw, stdout, err, sizeof(err)) < 0)
        rc = die("list", err);
    else
        rc = 0;
    fw_close(fw);
    return rc;
}

/* The store side of reconciliation, as the workers keep it. */
static int store_cmd(const char *cmd, const char *db, const char *sandbox_id, const char *pool)
{
    char err[512];
    struct store *st = store_sqlite_open(db, 5000, "NORMAL", err, sizeof(err));
    if (!st)
        return die("store", err);
    struct store_ctx ctx = {"worker:wrk_nettest", NULL};
    struct store_sandbox sb;
    int rc = 0;
    if (strcmp(cmd, "store-insert") == 0) {
        struct store_shape shape = {"process", "default", 1, 128};
        enum store_status s = store_sandbox_insert(st, &ctx, "wrk_nettest", &shape, false, &sb);
        if (s == STORE_OK)
            printf("%s\n", sb.id);
        else
            rc = die("store-insert", store_status_name(s));
    } else if (strcmp(cmd, "store-finish") == 0 && sandbox_id) {
        struct store_usage usage = {-1, -1};
        enum store_status s = store_sandbox_finish(st, &ctx, sandbox_id, false, "test", &usage);
        if (s != STORE_OK)
            rc = die("store-finish", store_status_name(s));
    } else if (strcmp(cmd, "store-reconcile") == 0) {
        struct net_reconcile_report rep;
        if (net_init(pool, err, sizeof(err)) < 0 ||
            reconcile_host_network(st, "", &rep, err, sizeof(err)) < 0)
            rc = die("store-reconcile", err);
        else
            printf("links %zu elements %zu\n", rep.links_removed, rep.elements_removed);
        net_shutdown();
    } else {
        rc = die("usage", "see the comment at the top of net_ctl.c");
    }
    store_close(st);
    return rc;
}

int main(int argc, char **argv)
{
    log_init("net_ctl", "warn");
    const char *pool = "10.213.0.0/16";
    int a = 1;
    if (argc > 2 && strcmp(argv[1], "-p") == 0) {
        pool = argv[2];
        a = 3;
    }
    if (a >= argc)
        return die("usage", "see the comment at the top of net_ctl.c");
    const char *cmd = argv[a++];
    char err[512];
    if (strncmp(cmd, "ro-", 3) == 0)
        return read_only(cmd + 3);
    if (strncmp(cmd, "store-", 6) == 0 && a < argc)
        return store_cmd(cmd, argv[a], a + 1 < argc ? argv[a + 1] : NULL, pool);
    if (net_init(pool, err, sizeof(err)) < 0)
        return die("init", err);
    int rc = 0;
    struct net_link link;
    if (strcmp(cmd, "init") == 0) {
        /* done above */
    } else if (strcmp(cmd, "attach") == 0 && a + 2 == argc) {
        rc = net_sandbox_attach_process(argv[a], (pid_t)atoi(argv[a + 1]), &link, err, sizeof(err));
        if (rc == 0)
            print_link(&link);
    } else if (strcmp(cmd, "tap") == 0 && a + 1 == argc) {
        rc = net_sandbox_attach_tap(argv[a], (uid_t)-1, (gid_t)-1, &link, err, sizeof(err));
        if (rc == 0)
            print_link(&link);
    } else if (strcmp(cmd, "tap-held") == 0 && a + 1 == argc) {
        rc = tap_held(argv[a], err, sizeof err);
    } else if (strcmp(cmd, "bridged") == 0 && a + 3 == argc) {
        rc = net_sandbox_attach_netns_tap(argv[a], argv[a + 1], argv[a + 2], 4242, 4343, &link, err,
                                          sizeof(err));
        if (rc == 0)
            print_link(&link);
    } else if (strcmp(cmd, "nfs") == 0 && a + 3 == argc) {
        if (net_link_of_address(net_worker_pool(), argv[a], argv[a + 1], &link) < 0)
            return die("nfs", "not a Sandbox address of the pool");
        rc = net_sandbox_set_nfs(&link, strcmp(argv[a + 2], "on") == 0, err, sizeof(err));
    } else if (strcmp(cmd, "release") == 0 && (a + 1 == argc || a + 2 == argc)) {
        rc = net_sandbox_release(argv[a], a + 2 == argc ? argv[a + 1] : NULL, err, sizeof(err));
    } else if (strcmp(cmd, "reconcile") == 0) {
        struct live_ids live = {argv + a, argc - a};
        struct net_reconcile_report rep;
        rc = net_reconcile(listed, &live, &rep, err, sizeof(err));
        if (rc == 0)
            printf("links %zu elements %zu\n", rep.links_removed, rep.elements_removed);
    } else if (strcmp(cmd, "counters") == 0) {
        int r = print_counters(net_firewall());
        net_shutdown();
        return r;
    } else if (strcmp(cmd, "list") == 0) {
        rc = fw_list(net_firewall(), stdout, err, sizeof(err));
    } else if (strcmp(cmd, "egress") == 0 && a + 2 == argc) {
        struct egress_settings es;
        rc = egress_settings_parse(argv[a], argv[a + 1], &es, err, sizeof err);
        if (rc == 0)
            rc = fw_set_egress(net_firewall(), es.ports, es.nports, es.resolvers, es.nresolvers,
                               err, sizeof err);
    } else if (strcmp(cmd, "policy") == 0 && a < argc) {
        struct fw_allow_net allow[64];
        size_t n = 0;
        for (int i = a + 1; i < argc && n < 64; i++, n++) {
            char net[32] = "";
            int len = 32;
            unsigned port = 0;
            if (sscanf(argv[i], "%31[0-9.]/%d:%u", net, &len, &port) < 2 ||
                inet_pton(AF_INET, net, &allow[n].net) != 1)
                return die("policy", "entries are a.b.c.d/len[:port]");
            allow[n].len = len;
            allow[n].port = (uint16_t)port;
        }
        rc = fw_app_policy_set(net_firewall(), argv[a], allow, n, err, sizeof err);
    } else if (strcmp(cmd, "sandbox-egress") == 0 && a + 3 <= argc) {
        if (net_link_of_address(net_worker_pool(), argv[a], argv[a + 1], &link) < 0)
            return die("sandbox-egress", "not a Sandbox address of the pool");
        struct fw_sandbox sb = net_link_fw(&link);
        const char *mode = argv[a + 2];
        enum fw_egress_mode m = strcmp(mode, "none") == 0        ? FW_EGRESS_NONE
                                : strcmp(mode, "allowlist") == 0 ? FW_EGRESS_ALLOWLIST
                                                                 : FW_EGRESS_PUBLIC;
        rc = fw_sandbox_set_egress(net_firewall(), &sb, m, a + 3 < argc ? argv[a + 3] : NULL, err,
                                   sizeof err);
    } else if (strcmp(cmd, "secret-proxy") == 0 && a + 3 == argc) {
        if (net_link_of_address(net_worker_pool(), argv[a], argv[a + 1], &link) < 0)
            return die("secret-proxy", "not a Sandbox address of the pool");
        struct fw_sandbox sb = net_link_fw(&link);
        rc = fw_sandbox_set_secret_proxy(net_firewall(), &sb, (uint16_t)atoi(argv[a + 2]), err,
                                         sizeof err);
    } else if (strcmp(cmd, "destroy") == 0) {
        rc = fw_destroy(net_firewall(), err, sizeof(err));
    } else {
        net_shutdown();
        return die("usage", "see the comment at the top of net_ctl.c");
    }
    net_shutdown();
    return rc == 0 ? 0 : die(cmd, err);
}
