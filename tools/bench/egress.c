/*
 * tools/bench/egress.c: the costs of per-App egress policies.
 *
 * 1. Policy change cost by live Sandboxes: an App's allowlist changed while 10, 100 and 1,000 of
 *    its Sandboxes are live (all jumping to its one chain), and one Sandbox moved between modes.
 *    Neither should grow with the number of Sandboxes: a list change is one batch on the App's
 *    chain, a move one batch of the Sandbox's elements.
 * 2. DNS lookup latency through sbx's forwarder (host/dns_forwarder.c: policy check, upstream
 *    query, the answer's addresses added to the App's set, answer) beside a direct lookup to the
 *    same resolver (Debian's dnsmasq on a loopback address), and their ratio.
 *
 * In a network namespace of its own (root; the host's ruleset is never touched).
 *   sbx-bench-egress [--samples N] [--max N]     (defaults 200 and 1000)
 */
#include "host/dns_forwarder.h"
#include "host/firewall.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define APP "app_bench0000000000000000"
#define RESOLVER "11.11.11.53"

static void die(const char *what, const char *err)
{
    fprintf(stderr, "sbx-bench-egress: %s: %s\n", what, err);
    exit(1);
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void stats(double *t, int n, double *median, double *p90)
{
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    *median = t[n / 2];
    *p90 = t[n * 9 / 10];
}

struct sandbox {
    char id[32];
    char ifname[IFNAMSIZ];
    struct fw_sandbox fw;
};

static void sandbox_make(struct sandbox *s, unsigned k)
{
    snprintf(s->id, sizeof(s->id), "sbx_bench%06u", k);
    snprintf(s->ifname, sizeof(s->ifname), FW_IFNAME_PREFIX "%u", k);
    s->fw.sandbox_id = s->id;
    s->fw.ifname = s->ifname;
    s->fw.addr.s_addr = htonl((10u << 24) | (213u << 16) | (k * 4 + 2));
}

/* Eight entries, shifted by i: a different list each time. */
static void policy_list(int i, struct fw_allow_net *v)
{
    for (int k = 0; k < 8; k++) {
        v[k].net.s_addr = htonl((11u << 24) | ((unsigned)(i + k) % 250u << 16));
        v[k].len = 16;
        v[k].port = k % 2 ? 443 : 0;
    }
}

static void policy_changes(struct fw *fw, int samples, unsigned max)
{
    char err[512];
    struct fw_allow_net list[8];
    policy_list(0, list);
    if (fw_app_policy_set(fw, APP, list, 8, err, sizeof err) < 0)
        die("policy", err);
    const unsigned sizes[] = {10, 100, 1000};
    struct sandbox *live = calloc(max + 1, sizeof(*live));
    double *t = calloc((size_t)samples, sizeof(double)),
           *m = calloc((size_t)samples, sizeof(double));
    double base = 0, base_move = 0;
    unsigned n = 0;
    printf("policy change time (microseconds) by live Sandboxes of the App, %d samples each\n",
           samples);
    printf("%6s  %-16s %9s %9s %8s\n", "live", "change", "median", "p90", "ratio");
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0] && sizes[si] <= max; si++) {
        for (; n < sizes[si]; n++) {
            sandbox_make(&live[n], n);
            if (fw_sandbox_add(fw, &live[n].fw, err, sizeof err) < 0 ||
                fw_sandbox_set_egress(fw, &live[n].fw, FW_EGRESS_ALLOWLIST, APP, err, sizeof err) <
                    0)
                die("add", err);
        }
        struct sandbox extra;
        sandbox_make(&extra, 60000);
        if (fw_sandbox_add(fw, &extra.fw, err, sizeof err) < 0)
            die("add", err);
        for (int i = 0; i < samples; i++) {
            policy_list(i + 1, list);
            double a = now_us();
            if (fw_app_policy_set(fw, APP, list, 8, err, sizeof err) < 0)
                die("policy", err);
            double b = now_us();
            enum fw_egress_mode mode = i % 2 ? FW_EGRESS_NONE : FW_EGRESS_ALLOWLIST;
            if (fw_sandbox_set_egress(fw, &extra.fw, mode, APP, err, sizeof err) < 0)
                die("move", err);
            double c = now_us();
            t[i] = b - a;
            m[i] = c - b;
        }
        if (fw_sandbox_remove(fw, &extra.fw, err, sizeof err) < 0)
            die("remove", err);
        double med, p90;
        stats(t, samples, &med, &p90);
        if (si == 0)
            base = med;
        printf("%6u  %-16s %9.1f %9.1f %8.2f\n", n, "App's list", med, p90, med / base);
        stats(m, samples, &med, &p90);
        if (si == 0)
            base_move = med;
        printf("%6u  %-16s %9.1f %9.1f %8.2f\n", n, "a Sandbox's mode", med, p90, med / base_move);
    }
    for (unsigned i = 0; i < n; i++)
        fw_sandbox_remove(fw, &live[i].fw, err, sizeof err);
    free(live);
    free(t);
    free(m);
}

/* ---- DNS ---- */

/* One lookup's round trip in microseconds, or -1 when it got no A answer. */
static double lookup(int s, const struct sockaddr_in *to, uint16_t id)
{
    unsigned char q[512], a[1500];
    size_t qn = dns_query_a(q, sizeof q, id, "bench.test");
    double t0 = now_us();
    if (sendto(s, q, qn, 0, (const struct sockaddr *)to, sizeof *to) != (ssize_t)qn)
        return -1;
    struct pollfd p = {s, POLLIN, 0};
    if (poll(&p, 1, 3000) != 1)
        return -1;
    ssize_t n = recv(s, a, sizeof a, 0);
    double t1 = now_us();
    if (n < 12 || a[0] != q[0] || a[1] != q[1] || (a[3] & 0x0f) != 0 || (a[6] << 8 | a[7]) == 0)
        return -1;
    return t1 - t0;
}

static bool allow_all(const char *app_id, const char *qname, uint16_t *ports, size_t *nports,
                      void *arg)
{
    (void)app_id;
    (void)qname;
    (void)arg;
    ports[0] = 443;
    *nports = 1;
    return true;
}

static void dns_latency(struct fw *fw, int samples)
{
    char err[512];
    if (system("ip link set lo up && ip addr add " RESOLVER "/32 dev lo") != 0)
        die("ip", "cannot put " RESOLVER " on lo");
    char pidfile[] = "/tmp/sbx-bench-egress-dns.XXXXXX";
    int pfd = mkstemp(pidfile);
    if (pfd < 0)
        die("mkstemp", "no temporary file");
    close(pfd);
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "dnsmasq --conf-file=/dev/null --no-resolv --no-hosts --bind-interfaces "
             "--listen-address=" RESOLVER " --user=root --group=root --pid-file=%s "
             "--address=/bench.test/11.11.11.11",
             pidfile);
    if (system(cmd) != 0)
        die("dnsmasq", "cannot start Debian's dnsmasq (package dnsmasq-base)");
    /* The client (this process, from 127.0.0.1) is an allowlist Sandbox of APP to the
     * forwarder: the map egress_app says so. */
    struct fw_sandbox client = {"sbx_benchclient", FW_IFNAME_PREFIX "99999", {0}};
    inet_pton(AF_INET, "127.0.0.1", &client.addr);
    struct in_addr upstream;
    inet_pton(AF_INET, RESOLVER, &upstream);
    if (fw_sandbox_add(fw, &client, err, sizeof err) < 0 ||
        fw_sandbox_set_egress(fw, &client, FW_EGRESS_ALLOWLIST, APP, err, sizeof err) < 0)
        die("client", err);
    struct dns_forwarder_params p = {
        &upstream, 1, FW_DNS_FORWARDER_PORT, DNS_TTL_GRACE_MS, allow_all, NULL, NULL};
    struct dns_forwarder *f = dns_forwarder_start(fw, &p, err, sizeof err);
    if (!f)
        die("forwarder", err);
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in direct = {
        .sin_family = AF_INET, .sin_port = htons(53), .sin_addr = upstream};
    struct sockaddr_in via = {.sin_family = AF_INET, .sin_port = htons(FW_DNS_FORWARDER_PORT)};
    inet_pton(AF_INET, "127.0.0.1", &via.sin_addr);
    double *td = calloc((size_t)samples, sizeof(double)),
           *tf = calloc((size_t)samples, sizeof(double));
    for (int i = 0; i < samples; i++) { /* interleaved, so both see the same load */
        td[i] = lookup(s, &direct, (uint16_t)(2 * i));
        tf[i] = lookup(s, &via, (uint16_t)(2 * i + 1));
        if (td[i] < 0 || tf[i] < 0)
            die("lookup", td[i] < 0 ? "no answer from the resolver" : "no answer through sbx");
    }
    double dm, dp, fm, fp;
    stats(td, samples, &dm, &dp);
    stats(tf, samples, &fm, &fp);
    printf("\nDNS lookup latency (microseconds), %d lookups each\n", samples);
    printf("%-28s %9s %9s %8s\n", "path", "median", "p90", "ratio");
    printf("%-28s %9.1f %9.1f %8.2f\n", "direct to the resolver", dm, dp, 1.0);
    printf("%-28s %9.1f %9.1f %8.2f\n", "through sbx's forwarder", fm, fp, fm / dm);
    close(s);
    dns_forwarder_stop(f);
    free(td);
    free(tf);
    FILE *pf = fopen(pidfile, "r");
    int pid = 0;
    if (pf && fscanf(pf, "%d", &pid) == 1 && pid > 0)
        kill(pid, SIGTERM);
    if (pf)
        fclose(pf);
    unlink(pidfile);
}

int main(int argc, char **argv)
{
    int samples = 200;
    unsigned max = 1000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--samples") == 0)
            samples = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--max") == 0)
            max = (unsigned)atoi(argv[i + 1]);
    }
    if (samples < 10 || max < 10)
        die("usage", "sbx-bench-egress [--samples N>=10] [--max N>=10]");
    if (unshare(CLONE_NEWNET) < 0)
        die("unshare(CLONE_NEWNET)", "a network namespace of its own needs root");
    char err[512];
    struct fw *fw = fw_init("10.213.0.0/16", err, sizeof(err));
    if (!fw)
        die("fw_init", err);
    policy_changes(fw, samples, max);
    dns_latency(fw, samples);
    fw_close(fw);
    return 0;
}
