/*
 * secret_proxy_run.c: runs the brokering proxy (worker/host/secret_proxy.h) on its own, for
 * it_secret_proxy.py and tools/bench/secret_proxy.py: Sandboxes are addresses given on the
 * command line, each with its secrets, put in the proxy's registry as the worker does at
 * activation. Prints one JSON line {"port":N,"sandboxes":{"<addr>":{"NAME":"<placeholder>"}}},
 * then one JSON line per report (what the worker turns into events), and exits when stdin ends.
 * With --dns, sbx's DNS forwarder runs beside it on FW_DNS_FORWARDER_PORT toward that resolver,
 * over the firewall table `inet sbx` that exists already (net_ctl init), as the worker runs it;
 * its App policy allows no name (an allowlist Sandbox's queries are REFUSED).
 *   secret_proxy_run --ca-dir DIR [--upstream-ca FILE] [--max-per-sandbox N] [--dns RESOLVER]
 *                    (--sandbox ADDR (--secret NAME=VALUE@host,host...)...)...
 */
#include "host/dns_forwarder.h"
#include "host/firewall.h"
#include "host/secret_proxy.h"

#include "pki.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_report(const struct secret_proxy_record *r, void *arg)
{
    (void)arg;
    char dst[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &r->destination, dst, sizeof dst);
    json_t *o =
        json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:i, s:I, s:I, s:I, s:s}", "kind",
                  r->kind == SECRET_PROXY_MISUSE ? "misuse" : "request", "sandbox", r->sandbox_id,
                  "app", r->app_id, "secrets", r->secrets, "host", r->host, "destination", dst,
                  "port", r->port, "method", r->method, "path", r->path, "status", r->status,
                  "bytesUp", (json_int_t)r->bytes_up, "bytesDown", (json_int_t)r->bytes_down,
                  "durationMs", (json_int_t)r->duration_ms, "error", r->error);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    pthread_mutex_lock(&out_lock);
    if (s)
        printf("%s\n", s);
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
    free(s);
    json_decref(o);
}

static bool allow_none(const char *app_id, const char *qname, uint16_t *ports, size_t *nports,
                       void *arg)
{
    (void)app_id;
    (void)qname;
    (void)ports;
    (void)arg;
    *nports = 0;
    return false;
}

static int usage(void)
{
    fprintf(stderr, "usage: secret_proxy_run --ca-dir DIR [--upstream-ca FILE] "
                    "[--max-per-sandbox N] [--dns RESOLVER] (--sandbox ADDR (--secret "
                    "NAME=VALUE@host,...)...)...\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *ca_dir = NULL, *upstream_ca = NULL, *dns = NULL;
    size_t max_per = 0;
    struct secret_proxy_registry *reg = secret_proxy_registry_new();
    json_t *sandboxes = json_object();
    struct secret_set set = {0};
    struct in_addr addr = {0};
    char sid[64] = "";
    int nsb = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        i++;
        if (strcmp(a, "--ca-dir") == 0) {
            ca_dir = v;
        } else if (strcmp(a, "--upstream-ca") == 0) {
            upstream_ca = v;
        } else if (strcmp(a, "--dns") == 0) {
            dns = v;
        } else if (strcmp(a, "--max-per-sandbox") == 0) {
            max_per = (size_t)atoi(v);
        } else if (strcmp(a, "--sandbox") == 0) {
            if (nsb && secret_proxy_registry_put(reg, addr, sid, "app_test", &set) != 0)
                return 1;
            secret_set_clear(&set);
            if (inet_pton(AF_INET, v, &addr) != 1)
                return usage();
            snprintf(sid, sizeof sid, "sbx_test%d", ++nsb);
            json_object_set_new(sandboxes, v, json_object());
        } else if (strcmp(a, "--secret") == 0 && nsb) {
            char *s = strdup(v), *eq = strchr(s, '='), *at = strrchr(s, '@');
            if (!eq || !at || at < eq)
                return usage();
            *eq = *at = '\0';
            const char *hosts[16];
            size_t nh = 0;
            for (char *h = strtok(at + 1, ","); h && nh < 16; h = strtok(NULL, ","))
                hosts[nh++] = h;
            if (secret_set_add(&set, s, eq + 1, strlen(eq + 1), hosts, nh) != 0)
                return 1;
            char ip[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &addr, ip, sizeof ip);
            json_object_set_new(json_object_get(sandboxes, ip), s,
                                json_string(set.v[set.n - 1].placeholder));
            free(s);
        } else {
            return usage();
        }
    }
    if (!ca_dir || !nsb)
        return usage();
    if (secret_proxy_registry_put(reg, addr, sid, "app_test", &set) != 0)
        return 1;
    secret_set_clear(&set);
    char err[512];
    struct pki *pki;
    if (pki_open(ca_dir, &pki, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    struct secret_proxy_params p = {
        .pki = pki,
        .upstream_ca_file = upstream_ca,
        .no_system_ca = true,
        .max_per_sandbox = max_per,
        .lookup = secret_proxy_registry_lookup,
        .lookup_arg = reg,
        .report = on_report,
    };
    struct secret_proxy *sp = secret_proxy_start(&p, err, sizeof err);
    if (!sp) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    struct fw *fw = NULL;
    struct dns_forwarder *fwd = NULL;
    struct in_addr resolver;
    if (dns) {
        if (inet_pton(AF_INET, dns, &resolver) != 1)
            return usage();
        struct dns_forwarder_params dp = {
            .upstream = &resolver,
            .nupstream = 1,
            .port = FW_DNS_FORWARDER_PORT,
            .grace_ms = DNS_TTL_GRACE_MS,
            .allow = allow_none,
        };
        if (!(fw = fw_open(err, sizeof err)) ||
            !(fwd = dns_forwarder_start(fw, &dp, err, sizeof err))) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
    }
    json_t *hello = json_pack("{s:i, s:O}", "port", secret_proxy_port(sp), "sandboxes", sandboxes);
    char *s = json_dumps(hello, JSON_COMPACT);
    pthread_mutex_lock(&out_lock);
    printf("%s\n", s);
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
    free(s);
    json_decref(hello);
    json_decref(sandboxes);
    char buf[256];
    while (read(0, buf, sizeof buf) > 0) {
    }
    struct secret_proxy_stats st;
    secret_proxy_stats(sp, &st);
    secret_proxy_stop(sp);
    fprintf(stderr,
            "secret proxy: %llu connections, %llu refused by the bound, %llu requests, %llu "
            "brokered, %llu misuses, %llu upstream failures\n",
            (unsigned long long)st.connections, (unsigned long long)st.refused_bound,
            (unsigned long long)st.requests, (unsigned long long)st.brokered,
            (unsigned long long)st.misuses, (unsigned long long)st.upstream_failures);
    if (fwd) {
        struct dns_forwarder_stats ds;
        dns_forwarder_stats(fwd, &ds);
        dns_forwarder_stop(fwd);
        fw_close(fw);
        fprintf(stderr, "dns forwarder: %llu forwarded, %llu refused, %llu failed\n",
                (unsigned long long)ds.forwarded, (unsigned long long)ds.refused,
                (unsigned long long)ds.failed);
    }
    secret_proxy_registry_free(reg);
    pki_free(pki);
    return 0;
}
