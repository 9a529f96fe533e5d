/*
 * egress_events.c: denials from the firewall's log to events and counters (egress_events.h).
 */
#include "sandbox/egress_events.h"
#include "store_egress.h"
#include "store_sandboxes.h"
#include "store_settings.h"

#include "host/egress_log.h"
#include "host/firewall.h"
#include "host/links.h"
#include "log.h"
#include "timefmt.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often a worker that found the reader taken tries again (it may be the last one left). */
#define REOPEN_MS 5000
/* A Sandbox's window is forgotten after this long without a denial. */
#define FORGET_MS 300000
#define MAX_SERIES 1024

struct tracked {
    char sandbox_id[STORE_ID_LEN];
    char app_id[STORE_ID_LEN];
    bool app_known;
    int64_t window_start; /* ms */
    int emitted;          /* events in this window */
    int64_t suppressed;   /* denials not recorded since the last recorded one */
    int64_t last_seen;
};

struct series {
    char app_id[STORE_ID_LEN];
    char reason[16];
    int64_t count;
};

struct pending {
    struct store_egress_denial d;
    char *data;
};

/* Refused lookups handed over by the forwarder's thread. */
struct refused_lookup {
    struct egress_denial d;
    char name[256];
};
#define MAX_REFUSED_QUEUE 1024
static pthread_mutex_t refused_lock = PTHREAD_MUTEX_INITIALIZER;
static struct refused_lookup refused_queue[MAX_REFUSED_QUEUE];
static size_t refused_n, refused_dropped;

static struct {
    struct egress_log *log;
    struct event *ev;
    struct worker *w;
    int64_t next_open;
    bool said_busy;
    struct tracked *t;
    size_t nt, tcap;
    struct fw_element *owners;
    size_t nowners;
    int64_t owners_at;
    struct series series[MAX_SERIES];
    size_t nseries;
    bool series_changed;
    struct pending *batch;
    size_t nbatch, bcap;
    size_t lost;
} ee;

static int64_t mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The Sandbox that owns the element of (ifname, src), else the one of ifname alone (a spoofed
 * source still comes in through its Sandbox's interface); NULL for another installation's (its
 * own store records it, not this one). The table is read again on a miss, at most every 500 ms. */
static const char *owner_element(const struct egress_denial *d);
static const char *owner_of(const struct egress_denial *d)
{
    const char *owner = owner_element(d);
    return owner ? net_owner_sandbox_id(owner) : NULL;
}

static const char *owner_element(const struct egress_denial *d)
{
    for (int pass = 0; pass < 2; pass++) {
        const char *by_if = NULL;
        for (size_t i = 0; i < ee.nowners; i++) {
            if (strcmp(ee.owners[i].ifname, d->ifname) != 0 || !ee.owners[i].owner[0])
                continue;
            if (ee.owners[i].addr.s_addr == d->src.s_addr)
                return ee.owners[i].owner;
            by_if = ee.owners[i].owner;
        }
        if (by_if)
            return by_if;
        int64_t now = mono_now();
        if (pass == 1 || now - ee.owners_at < 500)
            break;
        ee.owners_at = now;
        struct fw_element *v;
        size_t n;
        char err[256];
        if (!net_firewall() || fw_elements(net_firewall(), &v, &n, err, sizeof err) != 0)
            break;
        free(ee.owners);
        ee.owners = v;
        ee.nowners = n;
    }
    return NULL;
}

static struct tracked *track(const char *sandbox_id, int64_t now)
{
    for (size_t i = 0; i < ee.nt; i++)
        if (strcmp(ee.t[i].sandbox_id, sandbox_id) == 0)
            return &ee.t[i];
    if (ee.nt == ee.tcap) {
        size_t cap = ee.tcap ? ee.tcap * 2 : 64;
        struct tracked *t = realloc(ee.t, cap * sizeof *t);
        if (!t)
            return NULL;
        ee.t = t;
        ee.tcap = cap;
    }
    struct tracked *t = &ee.t[ee.nt++];
    memset(t, 0, sizeof *t);
    snprintf(t->sandbox_id, sizeof t->sandbox_id, "%s", sandbox_id);
    t->window_start = now;
    return t;
}

/* The App a Sandbox serves, from the store (a warm one serves none yet: asked again later). */
static void learn_app(struct tracked *t)
{
    if (t->app_known)
        return;
    struct store_sandbox rec;
    if (store_sandbox_get(ee.w->st, "", t->sandbox_id, &rec) == STORE_OK) {
        snprintf(t->app_id, sizeof t->app_id, "%s", rec.app_id);
        t->app_known = rec.app_id[0] != '\0';
    }
}

static void count(const char *app_id, const char *reason)
{
    for (size_t i = 0; i < ee.nseries; i++)
        if (strcmp(ee.series[i].app_id, app_id) == 0 && strcmp(ee.series[i].reason, reason) == 0) {
            ee.series[i].count++;
            ee.series_changed = true;
            return;
        }
    if (ee.nseries == MAX_SERIES)
        return;
    struct series *s = &ee.series[ee.nseries++];
    snprintf(s->app_id, sizeof s->app_id, "%s", app_id);
    snprintf(s->reason, sizeof s->reason, "%s", reason);
    s->count = 1;
    ee.series_changed = true;
}

static void queue_event(const char *sandbox_id, char *data)
{
    if (!data)
        return;
    if (ee.nbatch == ee.bcap) {
        size_t cap = ee.bcap ? ee.bcap * 2 : 32;
        struct pending *b = realloc(ee.batch, cap * sizeof *b);
        if (!b) {
            free(data);
            return;
        }
        ee.batch = b;
        ee.bcap = cap;
    }
    struct pending *p = &ee.batch[ee.nbatch++];
    memset(p, 0, sizeof *p);
    snprintf(p->d.sandbox_id, sizeof p->d.sandbox_id, "%s", sandbox_id);
    p->data = data;
    p->d.data_json = data;
}

static char *denial_json(const struct egress_denial *d, const char *name, int64_t suppressed)
{
    char dst[INET_ADDRSTRLEN], src[INET_ADDRSTRLEN], pbuf[8];
    inet_ntop(AF_INET, &d->dst, dst, sizeof dst);
    inet_ntop(AF_INET, &d->src, src, sizeof src);
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}", "destination", dst, "protocol",
                          egress_proto_name(d->proto, pbuf), "rule", d->reason, "source", src,
                          "interface", d->ifname, "suppressed", (json_int_t)suppressed);
    if (o && d->dport)
        json_object_set_new(o, "port", json_integer(d->dport));
    if (o && name)
        json_object_set_new(o, "name", json_string(name));
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

static void on_denial(const struct egress_denial *d, void *arg)
{
    const char *name = arg;
    const char *owner = owner_of(d);
    int64_t now = mono_now();
    struct tracked *t = owner ? track(owner, now) : NULL;
    if (!t) {
        count("", d->reason);
        return;
    }
    learn_app(t);
    count(t->app_id, d->reason);
    t->last_seen = now;
    if (now - t->window_start >= EGRESS_EVENT_WINDOW_MS) {
        t->window_start = now;
        t->emitted = 0;
    }
    if (t->emitted >= EGRESS_EVENTS_PER_WINDOW) {
        t->suppressed++;
        return;
    }
    t->emitted++;
    queue_event(t->sandbox_id, denial_json(d, name, t->suppressed));
    t->suppressed = 0;
}

/* Writes the queued events in one transaction. A busy store keeps them for the next try (up to
 * MAX_PENDING: the rate limit keeps the queue short, whatever the flood). */
#define MAX_PENDING 4096
static void flush_batch(void)
{
    if (!ee.nbatch)
        return;
    struct store_egress_denial *v = malloc(ee.nbatch * sizeof *v);
    if (!v)
        return; /* the next flush tries again */
    for (size_t i = 0; i < ee.nbatch; i++)
        v[i] = ee.batch[i].d;
    enum store_status rc = store_egress_denials_record(ee.w->st, &ee.w->ctx, v, ee.nbatch);
    free(v);
    if (rc == STORE_BUSY && ee.nbatch < MAX_PENDING)
        return;
    if (rc != STORE_OK)
        log_warn("egress: %zu denial event(s) not recorded: %s", ee.nbatch, store_status_name(rc));
    for (size_t i = 0; i < ee.nbatch; i++)
        free(ee.batch[i].data);
    ee.nbatch = 0;
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    char err[256];
    size_t lost_before = ee.lost;
    if (egress_log_read(ee.log, on_denial, NULL, &ee.lost, err, sizeof err) < 0)
        log_warn("egress: %s", err);
    if (ee.lost != lost_before)
        log_warn("egress: the firewall's log overflowed (a flood): some denials were not seen; "
                 "the drop counters still count them");
    flush_batch();
}

static void try_open(struct worker *w)
{
    int64_t now = mono_now();
    if (ee.log || !net_firewall() || now < ee.next_open)
        return;
    ee.next_open = now + REOPEN_MS;
    char err[256];
    struct egress_log *l = egress_log_open(err, sizeof err);
    if (!l) {
        if (errno != EBUSY || !ee.said_busy)
            log_info("egress: %s%s", err,
                     errno == EBUSY ? " (that worker records this host's denials)" : "");
        ee.said_busy = ee.said_busy || errno == EBUSY;
        return;
    }
    ee.ev = event_new(w->base, egress_log_fd(l), EV_READ | EV_PERSIST, on_readable, NULL);
    if (!ee.ev || event_add(ee.ev, NULL) != 0) {
        log_warn("egress: cannot watch the firewall's log");
        if (ee.ev)
            event_free(ee.ev);
        ee.ev = NULL;
        egress_log_close(l);
        return;
    }
    ee.log = l;
    log_info("egress: this worker records the host's denials (NFLOG group %d)", FW_NFLOG_GROUP);
}

/* Ended windows with suppressed denials: one summary event each; long-quiet Sandboxes forgotten. */
static void flush_windows(int64_t now)
{
    size_t keep = 0;
    for (size_t i = 0; i < ee.nt; i++) {
        struct tracked *t = &ee.t[i];
        if (t->suppressed > 0 && now - t->window_start >= EGRESS_EVENT_WINDOW_MS) {
            json_t *o =
                json_pack("{s:b, s:I, s:I}", "summary", 1, "suppressed", (json_int_t)t->suppressed,
                          "windowMs", (json_int_t)EGRESS_EVENT_WINDOW_MS);
            queue_event(t->sandbox_id, o ? json_dumps(o, JSON_COMPACT) : NULL);
            json_decref(o);
            t->suppressed = 0;
        }
        if (now - t->last_seen < FORGET_MS || t->suppressed > 0)
            ee.t[keep++] = *t;
    }
    ee.nt = keep;
    flush_batch();
}

static void publish_series(struct worker *w)
{
    if (!ee.series_changed)
        return;
    size_t cap = 256 + ee.nseries * 96, n = 0;
    char *text = malloc(cap);
    if (!text)
        return;
    n += (size_t)snprintf(text, cap,
                          "# HELP sbx_egress_denied_total Packets from Sandboxes the firewall "
                          "dropped, by App and rule, as read from its log.\n"
                          "# TYPE sbx_egress_denied_total counter\n");
    for (size_t i = 0; i < ee.nseries && n < cap; i++)
        n += (size_t)snprintf(
            text + n, cap - n, "sbx_egress_denied_total{app=\"%s\",reason=\"%s\"} %lld\n",
            ee.series[i].app_id, ee.series[i].reason, (long long)ee.series[i].count);
    if (n < cap && store_setting_put(w->st, "egress_metrics", text) == STORE_OK)
        ee.series_changed = false;
    free(text);
}

void egress_events_refused_lookup(const char *ifname, struct in_addr src, struct in_addr dst,
                                  int protocol, const char *qname)
{
    pthread_mutex_lock(&refused_lock);
    if (refused_n < MAX_REFUSED_QUEUE) {
        struct refused_lookup *r = &refused_queue[refused_n++];
        memset(r, 0, sizeof *r);
        snprintf(r->d.ifname, sizeof r->d.ifname, "%s", ifname);
        r->d.src = src;
        r->d.dst = dst;
        r->d.proto = protocol == IPPROTO_TCP ? IPPROTO_TCP : IPPROTO_UDP;
        r->d.dport = 53;
        snprintf(r->d.reason, sizeof r->d.reason, "name");
        snprintf(r->name, sizeof r->name, "%s", qname);
    } else {
        refused_dropped++;
    }
    pthread_mutex_unlock(&refused_lock);
}

/* The forwarder's refusals, through the same per-Sandbox rate limit as the firewall's. */
static void drain_refused(void)
{
    static struct refused_lookup batch[MAX_REFUSED_QUEUE];
    pthread_mutex_lock(&refused_lock);
    size_t n = refused_n;
    memcpy(batch, refused_queue, n * sizeof *batch);
    refused_n = 0;
    pthread_mutex_unlock(&refused_lock);
    for (size_t i = 0; i < n; i++)
        on_denial(&batch[i].d, batch[i].name);
}

void egress_events_tick(struct worker *w)
{
    ee.w = w;
    drain_refused();
    try_open(w);
    if (!ee.log) {
        flush_batch();
        return;
    }
    flush_windows(mono_now());
    publish_series(w);
}

void egress_events_stop(void)
{
    if (ee.ev)
        event_free(ee.ev);
    ee.ev = NULL;
    egress_log_close(ee.log);
    ee.log = NULL;
    if (ee.w)
        flush_batch();
    free(ee.t);
    free(ee.owners);
    free(ee.batch);
    memset(&ee, 0, sizeof ee);
}
