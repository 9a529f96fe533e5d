/*
 * metrics.c: counters and histograms kept in memory, rendered in the Prometheus text format
 * (version 0.0.4). Route labels are the templates of the route table, never raw paths, so the
 * number of series stays bounded whatever callers send.
 */
#include "metrics.h"
#include "app_quotas.h"
#include "store_apps.h"
#include "store_events.h"
#include "store_hosts.h"
#include "store_sandboxes.h"
#include "store_settings.h"
#include "gateway.h"
#include "clock.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_BUCKETS 14
static const double buckets[N_BUCKETS] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                          0.5,   1,     2.5,  5,     10,   30,  60};
#define MAX_ROUTES 64
#define MAX_COUNTERS 1024

struct counter {
    int route; /* -1: none */
    char method[8];
    unsigned status;
    uint64_t count;
};

struct histogram {
    uint64_t bucket[N_BUCKETS];
    uint64_t count;
    double sum;
};

struct metrics {
    pthread_mutex_t lock;
    size_t ncounters;
    struct counter counters[MAX_COUNTERS];
    struct histogram hist[MAX_ROUTES + 1]; /* [0]: no route; [i + 1]: route i */
};

int64_t metrics_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

struct metrics *metrics_new(void)
{
    struct metrics *m = calloc(1, sizeof *m);
    if (m)
        pthread_mutex_init(&m->lock, NULL);
    return m;
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* Methods outside the route table are counted as "other" to keep the label set bounded. */
static const char *method_label(const char *method)
{
    static const char *const known[] = {"GET", "POST", "PATCH", "DELETE", "PUT", "HEAD", "OPTIONS"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(method, known[i]) == 0)
            return known[i];
    return "other";
}

void metrics_observe(struct metrics *m, int route_index, const char *method, unsigned status,
                     double seconds)
{
    const char *ml = method_label(method);
    if (!m || route_index >= MAX_ROUTES)
        return;
    pthread_mutex_lock(&m->lock);
    struct counter *c = NULL;
    for (size_t i = 0; i < m->ncounters && !c; i++)
        if (m->counters[i].route == route_index && m->counters[i].status == status &&
            strcmp(m->counters[i].method, ml) == 0)
            c = &m->counters[i];
    if (!c && m->ncounters < MAX_COUNTERS) {
        c = &m->counters[m->ncounters++];
        c->route = route_index;
        snprintf(c->method, sizeof c->method, "%s", ml);
        c->status = status;
    }
    if (c)
        c->count++;
    struct histogram *h = &m->hist[route_index + 1];
    for (int i = 0; i < N_BUCKETS; i++)
        if (seconds <= buckets[i])
            h->bucket[i]++;
    h->count++;
    h->sum += seconds;
    pthread_mutex_unlock(&m->lock);
}

struct buf {
    char *p;
    size_t len, cap;
    int failed;
};

static void out(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void out(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        if (b->failed)
            return;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)(n > 0 ? n : 0);
        char *grown = realloc(b->p, cap);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->p = grown;
        b->cap = cap;
    }
}

static const char *route_label(int route)
{
    return route < 0 ? "unmatched" : gateway_routes[route].path;
}

static void render_http(struct metrics *m, struct buf *b)
{
    out(b, "# HELP sbx_http_requests_total HTTP requests answered, by route template, method "
           "and status.\n# TYPE sbx_http_requests_total counter\n");
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->ncounters; i++) {
        const struct counter *c = &m->counters[i];
        out(b, "sbx_http_requests_total{route=\"%s\",method=\"%s\",status=\"%u\"} %llu\n",
            route_label(c->route), c->method, c->status, (unsigned long long)c->count);
    }
    out(b, "# HELP sbx_http_request_duration_seconds Time from request to response, by route.\n"
           "# TYPE sbx_http_request_duration_seconds histogram\n");
    for (int r = -1; r < gateway_route_count && r < MAX_ROUTES; r++) {
        const struct histogram *h = &m->hist[r + 1];
        if (h->count == 0)
            continue;
        for (int i = 0; i < N_BUCKETS; i++)
            out(b, "sbx_http_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %llu\n",
                route_label(r), buckets[i], (unsigned long long)h->bucket[i]);
        out(b, "sbx_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %llu\n",
            route_label(r), (unsigned long long)h->count);
        out(b, "sbx_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n", route_label(r),
            h->sum);
        out(b, "sbx_http_request_duration_seconds_count{route=\"%s\"} %llu\n", route_label(r),
            (unsigned long long)h->count);
    }
    pthread_mutex_unlock(&m->lock);
}

static void render_histogram(struct buf *b, const char *name, const char *help,
                             const struct store_histogram *h)
{
    long long cumulative = 0;
    out(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < STORE_DURATION_BUCKETS; i++) {
        cumulative += h->buckets[i];
        out(b, "%s_bucket{le=\"%g\"} %lld\n", name, (double)store_duration_bounds_ms[i] / 1000.0,
            cumulative);
    }
    out(b, "%s_bucket{le=\"+Inf\"} %lld\n", name, (long long)h->count);
    out(b, "%s_sum %.3f\n%s_count %lld\n", name, (double)h->sum_ms / 1000.0, name,
        (long long)h->count);
}

static void render_store(struct store *st, struct buf *b)
{
    struct store_counts c;
    if (store_counts(st, &c) != STORE_OK) {
        out(b, "# HELP sbx_store_up Whether the store answered this scrape.\n"
               "# TYPE sbx_store_up gauge\nsbx_store_up 0\n");
        return;
    }
    out(b, "# HELP sbx_store_up Whether the store answered this scrape.\n"
           "# TYPE sbx_store_up gauge\nsbx_store_up 1\n");
    out(b, "# HELP sbx_queue_depth Unfinished messages by state.\n"
           "# TYPE sbx_queue_depth gauge\n");
    out(b, "sbx_queue_depth{state=\"queued\"} %lld\n", (long long)c.messages_by_state[0]);
    out(b, "sbx_queue_depth{state=\"delivering\"} %lld\n", (long long)c.messages_by_state[1]);
    out(b, "# HELP sbx_queue_oldest_age_seconds Age of the oldest queued message.\n"
           "# TYPE sbx_queue_oldest_age_seconds gauge\n");
    out(b, "sbx_queue_oldest_age_seconds %.3f\n",
        c.oldest_queued_at ? (double)(clock_wall_ms() - c.oldest_queued_at) / 1000.0 : 0.0);
    out(b, "# HELP sbx_sessions Sessions by state.\n# TYPE sbx_sessions gauge\n");
    for (int i = 0; i < 4; i++)
        out(b, "sbx_sessions{state=\"%s\"} %lld\n", store_session_states[i],
            (long long)c.sessions_by_state[i]);
    out(b, "# HELP sbx_sandboxes Sandboxes by state.\n# TYPE sbx_sandboxes gauge\n");
    for (int i = 0; i < 7; i++)
        out(b, "sbx_sandboxes{state=\"%s\"} %lld\n", store_sandbox_states[i],
            (long long)c.sandboxes_by_state[i]);
    out(b, "# HELP sbx_messages Messages by state.\n# TYPE sbx_messages gauge\n");
    for (int i = 0; i < 4; i++)
        out(b, "sbx_messages{state=\"%s\"} %lld\n", store_message_states[i],
            (long long)c.messages_by_state[i]);
    out(b,
        "# HELP sbx_queue_retrying Queued messages waiting for another attempt.\n"
        "# TYPE sbx_queue_retrying gauge\nsbx_queue_retrying %lld\n",
        (long long)c.retrying);
    out(b,
        "# HELP sbx_callback_requests_total Callback API requests the Sandboxes made with their "
        "token, written by the workers about once a second.\n"
        "# TYPE sbx_callback_requests_total counter\nsbx_callback_requests_total %lld\n",
        (long long)c.callback_calls);
    render_histogram(b, "sbx_sandbox_boot_seconds",
                     "Time from a Sandbox's start to its agent being ready.", &c.boot);
    render_histogram(b, "sbx_sandbox_lifetime_seconds",
                     "Time from a Sandbox's claim to its termination, for ended Sandboxes.",
                     &c.lifetime);
}

/* The warm pool per shape, as GET /v1/pool shows it. */
static void render_pool(struct store *st, struct buf *b)
{
    struct store_pool_stat *shapes = NULL;
    size_t n = 0;
    if (store_pool_stats(st, &shapes, &n) != STORE_OK)
        return;
    static const struct {
        const char *name, *type, *help;
    } metric[3] = {
        {"sbx_pool_sandboxes", "gauge",
         "Sandboxes of the pool by shape and state (claimed: serving a Session)."},
        {"sbx_pool_cold_activations_total", "counter",
         "Activations that booted a Sandbox because the pool was empty."},
        {"sbx_pool_boot_failures_total", "counter", "Sandbox boots that failed."},
    };
    for (int k = 0; k < 3; k++) {
        const char *name = metric[k].name;
        out(b, "# HELP %s %s\n# TYPE %s %s\n", name, metric[k].help, name, metric[k].type);
        for (size_t i = 0; i < n; i++) {
            const struct store_shape *sh = &shapes[i].shape;
            char labels[300];
            snprintf(labels, sizeof labels,
                     "driver=\"%s\",image=\"%s\",vcpus=\"%lld\",mem_mib=\"%lld\"", sh->driver,
                     sh->image, (long long)sh->vcpu_count, (long long)sh->mem_size_mib);
            if (k == 0) {
                out(b, "%s{%s,state=\"warm\"} %lld\n", name, labels, (long long)shapes[i].warm);
                out(b, "%s{%s,state=\"booting\"} %lld\n", name, labels,
                    (long long)shapes[i].booting);
                out(b, "%s{%s,state=\"claimed\"} %lld\n", name, labels,
                    (long long)shapes[i].claimed);
            } else {
                out(b, "%s{%s} %lld\n", name, labels,
                    (long long)(k == 1 ? shapes[i].cold_activations : shapes[i].boot_failures));
            }
        }
    }
    free(shapes);
}

/* The pools of pre-started Sandboxes per App (docs/worker.md), as GET /v1/pool's apps. */
static void render_prestart(struct store *st, struct buf *b)
{
    struct store_pool_app_stat *apps = NULL;
    size_t n = 0;
    if (store_pool_app_stats(st, &apps, &n) != STORE_OK)
        return;
    out(b, "# HELP sbx_prestart_sandboxes Pre-started Sandboxes by App and state (starting: "
           "booting or not ready yet; claimed: serving a Session).\n"
           "# TYPE sbx_prestart_sandboxes gauge\n");
    for (size_t i = 0; i < n; i++) {
        out(b, "sbx_prestart_sandboxes{app=\"%s\",state=\"warm\"} %lld\n", apps[i].app_id,
            (long long)apps[i].warm);
        out(b, "sbx_prestart_sandboxes{app=\"%s\",state=\"starting\"} %lld\n", apps[i].app_id,
            (long long)apps[i].starting);
        out(b, "sbx_prestart_sandboxes{app=\"%s\",state=\"claimed\"} %lld\n", apps[i].app_id,
            (long long)apps[i].claimed);
    }
    out(b, "# HELP sbx_prestart_ended_total Pre-started Sandboxes that ended unclaimed, by App and "
           "why (not_ready, retired, other).\n# TYPE sbx_prestart_ended_total counter\n");
    for (size_t i = 0; i < n; i++) {
        out(b, "sbx_prestart_ended_total{app=\"%s\",reason=\"not_ready\"} %lld\n", apps[i].app_id,
            (long long)apps[i].not_ready);
        out(b, "sbx_prestart_ended_total{app=\"%s\",reason=\"retired\"} %lld\n", apps[i].app_id,
            (long long)apps[i].retired);
        out(b, "sbx_prestart_ended_total{app=\"%s\",reason=\"other\"} %lld\n", apps[i].app_id,
            (long long)apps[i].ended_warm);
    }
    free(apps);
}

/* The worker hosts (docs/hosts.md): whether each is live, its capacity and load, its heartbeat's
 * age, the callback requests it refused. A lost host stays listed with up 0 until it comes back. */
static void render_hosts(struct store *st, struct buf *b)
{
    struct store_host *hosts = NULL;
    size_t n = 0;
    int64_t now = clock_wall_ms();
    if (store_host_list(st, &hosts, &n) != STORE_OK)
        return;
    static const struct {
        const char *name, *help;
    } metric[5] = {
        {"sbx_host_up", "1 while the host is live, 0 once it was declared lost."},
        {"sbx_host_capacity", "Sessions the host serves at once (placement skips it when full)."},
        {"sbx_host_serving", "Sessions activating or active on the host."},
        {"sbx_host_workers", "Running worker processes of the host."},
        {"sbx_host_heartbeat_age_seconds", "Time since the host's last heartbeat."},
    };
    for (int k = 0; k < 5; k++) {
        out(b, "# HELP %s %s\n# TYPE %s gauge\n", metric[k].name, metric[k].help, metric[k].name);
        for (size_t i = 0; i < n; i++) {
            const struct store_host *h = &hosts[i];
            if (k == 4)
                out(b, "%s{host=\"%s\"} %.3f\n", metric[k].name, h->id,
                    (double)(now - h->heartbeat_at) / 1000.0);
            else
                out(b, "%s{host=\"%s\"} %lld\n", metric[k].name, h->id,
                    (long long)(k == 0   ? h->lost_at == 0
                                : k == 1 ? h->capacity
                                : k == 2 ? h->serving
                                         : h->workers));
        }
    }
    out(b, "# HELP sbx_callback_refused_total Callback API requests the host refused for their "
           "token (401).\n# TYPE sbx_callback_refused_total counter\n");
    for (size_t i = 0; i < n; i++)
        out(b, "sbx_callback_refused_total{host=\"%s\"} %lld\n", hosts[i].id,
            (long long)hosts[i].callback_refused);
    free(hosts);
}

/* The firewall's drop counters per reason, as the workers last published them in the store
 * (settings key firewall_metrics, Prometheus text written by worker/loop.c). Absent until a worker
 * with a firewall has run. */
static void render_firewall(struct store *st, struct buf *b)
{
    char text[4096];
    if (store_setting_get(st, "firewall_metrics", text, sizeof text) == STORE_OK)
        out(b, "%s", text);
}

/* The firewall's denials per App and rule, as the host's reading worker last
 * published them (settings key egress_metrics, worker/sandbox/egress_events.c). */
static void render_egress(struct store *st, struct buf *b)
{
    size_t cap = 128 * 1024;
    char *text = malloc(cap);
    if (text && store_setting_get(st, "egress_metrics", text, cap) == STORE_OK)
        out(b, "%s", text);
    free(text);
}

/* Each App's use of its quotas and their values (docs/tenants.md): one series per App and quota,
 * labelled by the App's id (its name can change). */
static void render_quotas(struct store *st, const int64_t defaults[STORE_QUOTA_COUNT],
                          struct buf *b)
{
    struct store_app_usage *apps = NULL;
    size_t n = 0;
    if (store_app_usage_list(st, &apps, &n) != STORE_OK)
        return;
    out(b, "# HELP sbx_app_quota_usage What an App uses of a quota: live Sandboxes, live "
           "Sessions, Workspaces, Workspace MiB.\n# TYPE sbx_app_quota_usage gauge\n");
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < STORE_QUOTA_COUNT; k++)
            if (k != STORE_QUOTA_KEEP_ALIVE)
                out(b, "sbx_app_quota_usage{app=\"%s\",quota=\"%s\"} %lld\n", apps[i].app_id,
                    app_quota_field(k), (long long)apps[i].used[k]);
    out(b, "# HELP sbx_app_quota An App's quota: its own or the host's default (0: no bound).\n"
           "# TYPE sbx_app_quota gauge\n");
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < STORE_QUOTA_COUNT; k++)
            out(b, "sbx_app_quota{app=\"%s\",quota=\"%s\"} %lld\n", apps[i].app_id,
                app_quota_field(k),
                (long long)store_quota_effective(apps[i].quotas[k], defaults[k]));
    free(apps);
}

char *metrics_render(struct metrics *m, struct store *st,
                     const int64_t quota_defaults[STORE_QUOTA_COUNT], size_t *len)
{
    struct buf b = {malloc(8192), 0, 8192, 0};
    if (!b.p)
        return NULL;
    render_http(m, &b);
    render_store(st, &b);
    render_pool(st, &b);
    render_prestart(st, &b);
    render_hosts(st, &b);
    render_firewall(st, &b);
    render_egress(st, &b);
    render_quotas(st, quota_defaults, &b);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}
