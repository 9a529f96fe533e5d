/*
 * egress_dns.c: runs sbx's DNS forwarder for the host and answers its question "does this App
 * allow this name, and on which ports?" (egress_dns.h).
 */
#include "sandbox/egress_dns.h"
#include "store_apps.h"

#include "egress_policy.h"
#include "host/dns_forwarder.h"
#include "host/egress.h"
#include "host/links.h"
#include "log.h"
#include "sandbox/egress_events.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLICY_CACHE_MS 1000
#define POLICY_CACHE_SIZE 64
#define RESTART_MS 5000

struct cached_policy {
    char app_id[STORE_ID_LEN];
    int64_t at; /* mono ms; 0: empty */
    bool found;
    struct egress_policy policy;
};

static struct {
    struct dns_forwarder *fwd;
    struct store *st;
    int64_t next_try;
    bool said_busy;
    pthread_mutex_t lock;
    struct cached_policy *cache; /* POLICY_CACHE_SIZE entries */
} ed = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int64_t mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The App's policy, read from the store at most once a second (a PATCH reaches the forwarder
 * within that). Called with ed.lock held. */
static const struct egress_policy *policy_of(const char *app_id)
{
    int64_t now = mono_now();
    struct cached_policy *slot = &ed.cache[0];
    for (size_t i = 0; i < POLICY_CACHE_SIZE; i++) {
        struct cached_policy *c = &ed.cache[i];
        if (c->at && strcmp(c->app_id, app_id) == 0) {
            slot = c;
            break;
        }
        if (c->at < slot->at)
            slot = c; /* the oldest (or an empty) one, if the App is not cached */
    }
    if (slot->at && strcmp(slot->app_id, app_id) == 0 && now - slot->at < POLICY_CACHE_MS)
        return slot->found ? &slot->policy : NULL;
    struct store_app app;
    char why[256];
    snprintf(slot->app_id, sizeof slot->app_id, "%s", app_id);
    slot->at = now;
    bool got = store_app_get(ed.st, app_id, &app) == STORE_OK;
    slot->found =
        got && egress_policy_parse_text(app.network_json, &slot->policy, why, sizeof why) == 0;
    if (got)
        store_app_clear(&app);
    return slot->found ? &slot->policy : NULL;
}

static bool name_matches(const struct egress_allow *a, const char *qname)
{
    if (!a->is_name)
        return false;
    if (!a->wildcard)
        return strcmp(a->name, qname) == 0;
    size_t q = strlen(qname), n = strlen(a->name);
    return q > n + 1 && qname[q - n - 1] == '.' && strcmp(qname + q - n, a->name) == 0;
}

static void add_port(uint16_t *ports, size_t *n, uint16_t port)
{
    for (size_t i = 0; i < *n; i++)
        if (ports[i] == port)
            return;
    if (*n < 64)
        ports[(*n)++] = port;
}

/* On the forwarder's thread. */
static bool allow(const char *app_id, const char *qname, uint16_t *ports, size_t *nports, void *arg)
{
    (void)arg;
    *nports = 0;
    const struct egress_settings *host = net_egress_settings();
    pthread_mutex_lock(&ed.lock);
    const struct egress_policy *p = policy_of(app_id);
    for (size_t i = 0; p && p->mode == EGRESS_ALLOWLIST && i < p->n; i++) {
        if (!name_matches(&p->allow[i], qname))
            continue;
        if (p->allow[i].port)
            add_port(ports, nports, p->allow[i].port);
        else
            for (size_t k = 0; host && k < host->nports; k++)
                add_port(ports, nports, host->ports[k]);
    }
    pthread_mutex_unlock(&ed.lock);
    return *nports > 0;
}

static void refused(const char *ifname, struct in_addr client, struct in_addr dst, int protocol,
                    const char *app_id, const char *qname, void *arg)
{
    (void)app_id;
    (void)arg;
    egress_events_refused_lookup(ifname, client, dst, protocol, qname);
}

void egress_dns_tick(struct worker *w)
{
    const struct egress_settings *s = net_egress_settings();
    int64_t now = mono_now();
    if (ed.fwd || !net_firewall() || !s || now < ed.next_try)
        return;
    ed.next_try = now + RESTART_MS;
    if (!ed.cache && !(ed.cache = calloc(POLICY_CACHE_SIZE, sizeof *ed.cache)))
        return;
    ed.st = w->st;
    struct dns_forwarder_params p = {
        .upstream = s->resolvers,
        .nupstream = s->nresolvers,
        .port = FW_DNS_FORWARDER_PORT,
        .grace_ms = DNS_TTL_GRACE_MS,
        .allow = allow,
        .refused = refused,
    };
    char err[256];
    ed.fwd = dns_forwarder_start(net_firewall(), &p, err, sizeof err);
    if (!ed.fwd) {
        if (errno != EADDRINUSE || !ed.said_busy)
            log_info("egress: %s%s", err,
                     errno == EADDRINUSE ? " (another worker of this host runs the forwarder)"
                                         : "");
        ed.said_busy = ed.said_busy || errno == EADDRINUSE;
        return;
    }
    log_info("egress: DNS forwarder for allowlist Apps and Apps with secrets on UDP %u, "
             "toward %zu resolver(s)",
             (unsigned)p.port, s->nresolvers);
}

void egress_dns_stop(void)
{
    dns_forwarder_stop(ed.fwd);
    ed.fwd = NULL;
    free(ed.cache);
    ed.cache = NULL;
}
