/*
 * secret_broker.c: the worker's brokering proxy, its Sandboxes and its audit events
 * (secret_broker.h). The proxy's threads hand their reports over through a bounded queue; the
 * worker's poll turns them into events under the same per-Sandbox bound as egress denials.
 */
#include "sandbox/secret_broker.h"
#include "store_egress.h"

#include "clock.h"
#include "host/firewall.h"
#include "host/links.h"
#include "host/secret_proxy.h"
#include "log.h"
#include "pki.h"
#include "sandbox/egress_events.h"
#include "sandbox/sandbox.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESTART_MS 5000
#define MAX_QUEUE 4096
#define FORGET_MS 300000

struct attached {
    char sandbox_id[STORE_ID_LEN];
    struct in_addr addr;
    struct net_link link;
};

/* One Sandbox's window, per kind. */
struct window {
    char sandbox_id[STORE_ID_LEN];
    int64_t start[2];
    int emitted[2];
    int64_t suppressed[2];
    int64_t last_seen;
};

struct pending {
    struct store_egress_denial d;
    const char *type;
    char *data;
};

static const char *const kind_types[2] = {"sandbox.secret_request", "sandbox.secret_misuse"};

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static struct secret_proxy_record *queue;
static size_t queue_n, queue_lost;

static struct {
    struct secret_proxy *proxy;
    struct secret_proxy_registry *reg;
    struct pki *own_pki; /* when the callback API is off, the worker opened none */
    int64_t next_try;
    char said[512]; /* the last reason the proxy could not start, said once */
    struct attached *att;
    size_t natt, attcap;
    struct window *win;
    size_t nwin, wincap;
    struct pending *batch;
    size_t nbatch, bcap;
} sb_;

static void on_report(const struct secret_proxy_record *r, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&queue_lock);
    if (!queue)
        queue = calloc(MAX_QUEUE, sizeof *queue);
    if (queue && queue_n < MAX_QUEUE)
        queue[queue_n++] = *r;
    else
        queue_lost++;
    pthread_mutex_unlock(&queue_lock);
}

static struct window *window_of(const char *sandbox_id, int64_t now)
{
    for (size_t i = 0; i < sb_.nwin; i++)
        if (strcmp(sb_.win[i].sandbox_id, sandbox_id) == 0)
            return &sb_.win[i];
    if (sb_.nwin == sb_.wincap) {
        size_t cap = sb_.wincap ? sb_.wincap * 2 : 32;
        struct window *v = realloc(sb_.win, cap * sizeof *v);
        if (!v)
            return NULL;
        sb_.win = v;
        sb_.wincap = cap;
    }
    struct window *w = &sb_.win[sb_.nwin++];
    memset(w, 0, sizeof *w);
    snprintf(w->sandbox_id, sizeof w->sandbox_id, "%s", sandbox_id);
    w->start[0] = w->start[1] = now;
    return w;
}

static void queue_event(const char *sandbox_id, int kind, json_t *data)
{
    char *text = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (!text)
        return;
    if (sb_.nbatch == sb_.bcap) {
        size_t cap = sb_.bcap ? sb_.bcap * 2 : 32;
        struct pending *b = realloc(sb_.batch, cap * sizeof *b);
        if (!b) {
            free(text);
            return;
        }
        sb_.batch = b;
        sb_.bcap = cap;
    }
    struct pending *p = &sb_.batch[sb_.nbatch++];
    memset(p, 0, sizeof *p);
    snprintf(p->d.sandbox_id, sizeof p->d.sandbox_id, "%s", sandbox_id);
    p->type = kind_types[kind];
    p->data = text;
    p->d.data_json = text;
}

static json_t *record_json(const struct secret_proxy_record *r, int64_t suppressed)
{
    char dst[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &r->destination, dst, sizeof dst);
    json_t *names = json_array();
    char buf[sizeof r->secrets];
    snprintf(buf, sizeof buf, "%s", r->secrets);
    char *save = NULL;
    for (char *n = strtok_r(buf, ",", &save); n; n = strtok_r(NULL, ",", &save))
        json_array_append_new(names, json_string(n));
    json_t *o = json_pack("{s:o, s:s, s:s, s:i, s:s, s:s, s:i, s:I}", "secrets", names, "host",
                          r->host, "destination", dst, "port", r->port, "method", r->method, "path",
                          r->path, "status", r->status, "suppressed", (json_int_t)suppressed);
    if (o && r->kind == SECRET_PROXY_REQUEST) {
        json_object_set_new(o, "bytesUp", json_integer((json_int_t)r->bytes_up));
        json_object_set_new(o, "bytesDown", json_integer((json_int_t)r->bytes_down));
        json_object_set_new(o, "durationMs", json_integer((json_int_t)r->duration_ms));
    }
    if (o && r->error[0])
        json_object_set_new(o, "error", json_string(r->error));
    return o;
}

static void on_record(const struct secret_proxy_record *r, int64_t now)
{
    int kind = r->kind == SECRET_PROXY_MISUSE ? 1 : 0;
    struct window *w = window_of(r->sandbox_id, now);
    if (!w)
        return;
    w->last_seen = now;
    if (now - w->start[kind] >= EGRESS_EVENT_WINDOW_MS) {
        w->start[kind] = now;
        w->emitted[kind] = 0;
    }
    if (w->emitted[kind] >= EGRESS_EVENTS_PER_WINDOW) {
        w->suppressed[kind]++;
        return;
    }
    w->emitted[kind]++;
    queue_event(r->sandbox_id, kind, record_json(r, w->suppressed[kind]));
    w->suppressed[kind] = 0;
}

/* Ended windows with suppressed reports: a summary event each; quiet Sandboxes forgotten. */
static void flush_windows(int64_t now)
{
    size_t keep = 0;
    for (size_t i = 0; i < sb_.nwin; i++) {
        struct window *w = &sb_.win[i];
        for (int k = 0; k < 2; k++)
            if (w->suppressed[k] > 0 && now - w->start[k] >= EGRESS_EVENT_WINDOW_MS) {
                queue_event(w->sandbox_id, k,
                            json_pack("{s:b, s:I, s:I}", "summary", 1, "suppressed",
                                      (json_int_t)w->suppressed[k], "windowMs",
                                      (json_int_t)EGRESS_EVENT_WINDOW_MS));
                w->suppressed[k] = 0;
            }
        if (now - w->last_seen < FORGET_MS || w->suppressed[0] || w->suppressed[1])
            sb_.win[keep++] = *w;
    }
    sb_.nwin = keep;
}

static void flush_batch(struct worker *w)
{
    if (!sb_.nbatch)
        return;
    struct store_egress_denial *v = malloc(sb_.nbatch * sizeof *v);
    const char **types = malloc(sb_.nbatch * sizeof *types);
    enum store_status rc = STORE_ERROR;
    if (v && types) {
        for (size_t i = 0; i < sb_.nbatch; i++) {
            v[i] = sb_.batch[i].d;
            types[i] = sb_.batch[i].type;
        }
        rc = store_sandbox_events_record(w->st, &w->ctx, types, v, sb_.nbatch);
    }
    free(v);
    free(types);
    if (rc == STORE_BUSY && sb_.nbatch < MAX_QUEUE)
        return; /* the next tick tries again */
    if (rc != STORE_OK)
        log_warn("secrets: %zu proxy event(s) not recorded: %s", sb_.nbatch, store_status_name(rc));
    for (size_t i = 0; i < sb_.nbatch; i++)
        free(sb_.batch[i].data);
    sb_.nbatch = 0;
}

static void drain(struct worker *w)
{
    static struct secret_proxy_record taken[MAX_QUEUE];
    pthread_mutex_lock(&queue_lock);
    size_t n = queue_n, lost = queue_lost;
    if (n)
        memcpy(taken, queue, n * sizeof *taken);
    queue_n = queue_lost = 0;
    pthread_mutex_unlock(&queue_lock);
    if (lost)
        log_warn("secrets: %zu proxy report(s) lost (queue full)", lost);
    int64_t now = clock_mono_ms();
    for (size_t i = 0; i < n; i++)
        on_record(&taken[i], now);
    flush_windows(now);
    flush_batch(w);
}

static void try_start(struct worker *w)
{
    int64_t now = clock_mono_ms();
    if (sb_.proxy || !net_firewall() || now < sb_.next_try)
        return;
    sb_.next_try = now + RESTART_MS;
    char err[512];
    struct pki *pki = w->pki ? w->pki : sb_.own_pki;
    if (!pki) {
        if (pki_open(w->cfg.ca_dir, &sb_.own_pki, err, sizeof err) != 0) {
            log_warn("secrets: no proxy: cannot open the installation's keys: %s", err);
            return;
        }
        pki = sb_.own_pki;
        /* the Sandboxes trust the proxy through the CA the start line gives them */
        if (!w->ca_pem)
            w->ca_pem = pki_ca_pem(pki);
    }
    if (!sb_.reg && !(sb_.reg = secret_proxy_registry_new()))
        return;
    struct secret_proxy_params p = {
        .listen = {htonl(INADDR_ANY)},
        .pki = pki,
        .upstream_ca_file = w->cfg.upstream_ca_file,
        .max_per_sandbox = (size_t)w->cfg.secret_proxy_connections,
        .lookup = secret_proxy_registry_lookup,
        .lookup_arg = sb_.reg,
        .report = on_report,
    };
    sb_.proxy = secret_proxy_start(&p, err, sizeof err);
    if (!sb_.proxy) {
        if (strcmp(err, sb_.said) != 0) /* once per reason, not every RESTART_MS */
            log_warn("secrets: %s (Apps with secrets cannot serve here until it starts)", err);
        snprintf(sb_.said, sizeof sb_.said, "%s", err);
        return;
    }
    sb_.said[0] = '\0';
    log_info("secrets: brokering proxy on TCP %u", (unsigned)secret_proxy_port(sb_.proxy));
}

void secret_broker_tick(struct worker *w)
{
    try_start(w);
    drain(w);
}

uint16_t secret_broker_port(void)
{
    return sb_.proxy ? secret_proxy_port(sb_.proxy) : 0;
}

static struct attached *find_attached(const char *sandbox_id)
{
    for (size_t i = 0; i < sb_.natt; i++)
        if (strcmp(sb_.att[i].sandbox_id, sandbox_id) == 0)
            return &sb_.att[i];
    return NULL;
}

int secret_broker_attach(struct worker *w, struct sandbox *sb, const struct secret_set *set,
                         char *err, size_t errlen)
{
    if (!net_firewall() || !sb->rt.net_address[0])
        return 0;
    try_start(w);
    if (!sb_.proxy) {
        snprintf(err, errlen, "secrets: the brokering proxy does not run on this worker");
        return -1;
    }
    struct attached a = {0};
    snprintf(a.sandbox_id, sizeof a.sandbox_id, "%s", sb->rt.sandbox_id);
    if (inet_pton(AF_INET, sb->rt.net_address, &a.addr) != 1 ||
        net_link_of_address(net_worker_pool(), sb->rt.sandbox_id, sb->rt.net_address, &a.link) <
            0) {
        snprintf(err, errlen, "secrets: %s is not a Sandbox address of the pool",
                 sb->rt.net_address);
        return -1;
    }
    if (secret_proxy_registry_put(sb_.reg, a.addr, sb->rt.sandbox_id, sb->app_id, set) != 0) {
        snprintf(err, errlen, "secrets: out of memory");
        return -1;
    }
    struct fw_sandbox fsb = net_link_fw(&a.link);
    if (fw_sandbox_set_secret_proxy(net_firewall(), &fsb, secret_proxy_port(sb_.proxy), err,
                                    errlen) != 0) {
        secret_proxy_registry_remove(sb_.reg, a.addr);
        return -1;
    }
    struct attached *old = find_attached(a.sandbox_id);
    if (old) {
        *old = a;
        return 0;
    }
    if (sb_.natt == sb_.attcap) {
        size_t cap = sb_.attcap ? sb_.attcap * 2 : 16;
        struct attached *v = realloc(sb_.att, cap * sizeof *v);
        if (!v) {
            secret_broker_detach(w, sb);
            snprintf(err, errlen, "secrets: out of memory");
            return -1;
        }
        sb_.att = v;
        sb_.attcap = cap;
    }
    sb_.att[sb_.natt++] = a;
    return 0;
}

static void detach_at(size_t i)
{
    struct attached *a = &sb_.att[i];
    char err[256];
    secret_proxy_registry_remove(sb_.reg, a->addr);
    struct fw_sandbox fsb = net_link_fw(&a->link);
    if (net_firewall() &&
        fw_sandbox_set_secret_proxy(net_firewall(), &fsb, 0, err, sizeof err) != 0)
        log_warn("secrets: %s: %s (reconciliation removes it)", a->sandbox_id, err);
    sb_.att[i] = sb_.att[--sb_.natt];
}

void secret_broker_detach(struct worker *w, struct sandbox *sb)
{
    (void)w;
    for (size_t i = 0; i < sb_.natt; i++)
        if (strcmp(sb_.att[i].sandbox_id, sb->rt.sandbox_id) == 0) {
            detach_at(i);
            return;
        }
}

void secret_broker_stop(struct worker *w)
{
    while (sb_.natt)
        detach_at(0);
    secret_proxy_stop(sb_.proxy);
    sb_.proxy = NULL;
    drain(w);
    for (size_t i = 0; i < sb_.nbatch; i++)
        free(sb_.batch[i].data);
    secret_proxy_registry_free(sb_.reg);
    if (sb_.own_pki && w->ca_pem == pki_ca_pem(sb_.own_pki))
        w->ca_pem = NULL;
    pki_free(sb_.own_pki);
    free(sb_.att);
    free(sb_.win);
    free(sb_.batch);
    memset(&sb_, 0, sizeof sb_);
    pthread_mutex_lock(&queue_lock);
    free(queue);
    queue = NULL;
    queue_n = queue_lost = 0;
    pthread_mutex_unlock(&queue_lock);
}
