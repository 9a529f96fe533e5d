/*
 * webhook_sender.c: webhook delivery threads (see webhook_sender.h).
 */
#include "delivery/webhook_sender.h"
#include "store_webhooks.h"
#include "delivery/delivery.h"
#include "log.h"
#include "clock.h"
#include "timefmt.h"
#include "webhook_sign.h"
#include "webhook_target.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

/* How much of an endpoint's answer is read (and thrown away). */
#define ANSWER_MAX (64u << 10)
/* Events moved into the outbox per endpoint per round. */
#define FILL_LIMIT 500

struct webhook_sender {
    struct store *st;
    struct sbx_config cfg;
    char worker_id[STORE_ID_LEN];
    pthread_mutex_t lock;
    pthread_cond_t wake;
    uint64_t wakes; /* webhook_sender_wake() calls so far: a thread sleeps until it moves */
    bool stopping;
    pthread_t *threads;
    size_t n_threads;
};

/* The event as the API renders it (docs/api.md: Event). */
static json_t *event_json(const struct store_event *e)
{
    char at[32];
    time_format_ms(e->at, at, sizeof at);
    json_t *data = e->data_json ? json_loads(e->data_json, 0, NULL) : NULL;
    if (!json_is_object(data)) {
        json_decref(data);
        data = json_null();
    }
#define OR_NULL(s) ((s)[0] ? json_string(s) : json_null())
    return json_pack("{s:I, s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o}", "id", (json_int_t)e->id,
                     "at", at, "actor", e->actor, "kind", e->kind, "objectType", e->object_type,
                     "objectId", e->object_id, "appId", OR_NULL(e->app_id), "sessionId",
                     OR_NULL(e->session_id), "requestId", OR_NULL(e->request_id), "data", data);
#undef OR_NULL
}

static size_t discard_answer(char *p, size_t size, size_t n, void *arg)
{
    size_t *seen = arg;
    (void)p;
    *seen += size * n;
    return *seen > ANSWER_MAX ? 0 : size * n; /* 0 ends the transfer: enough is read */
}

/* Ends an attempt in flight when the worker stops (it is sent again after its lease, with the
 * same webhook-id), so that SIGTERM does not wait out a hanging endpoint's timeout. */
static int abort_when_stopping(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                               curl_off_t ulnow)
{
    struct webhook_sender *ws = arg;
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    pthread_mutex_lock(&ws->lock);
    bool stop = ws->stopping;
    pthread_mutex_unlock(&ws->lock);
    return stop ? 1 : 0;
}

/* Refuses a connection to an address the policy does not allow, whatever the name resolved to. */
static curl_socket_t open_checked(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
    const struct webhook_sender *ws = arg;
    (void)purpose;
    if (!webhook_address_allowed(&a->addr, ws->cfg.webhook_allow_private != 0))
        return CURL_SOCKET_BAD;
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

/* One attempt. Fills status (0: no answer) and error ("" on success). */
static bool post(struct webhook_sender *ws, const struct store_webhook_job *job, const char *body,
                 int64_t *status, char *error, size_t errlen)
{
    char sig[WEBHOOK_SIGNATURE_LEN], h_id[96], h_ts[64], h_sig[96];
    int64_t ts = clock_wall_ms() / 1000;
    char curl_err[CURL_ERROR_SIZE] = "";
    size_t seen = 0;
    bool ok = false;

    *status = 0;
    error[0] = '\0';
    if (webhook_sign(job->hook.secret, job->delivery_id, ts, body, strlen(body), sig) != 0) {
        snprintf(error, errlen, "the endpoint's secret is malformed");
        return false;
    }
    snprintf(h_id, sizeof h_id, "webhook-id: %s", job->delivery_id);
    snprintf(h_ts, sizeof h_ts, "webhook-timestamp: %" PRId64, ts);
    snprintf(h_sig, sizeof h_sig, "webhook-signature: %s", sig);
    CURL *c = curl_easy_init();
    struct curl_slist *hdrs = NULL;
    hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
    hdrs = curl_slist_append(hdrs, h_id);
    hdrs = curl_slist_append(hdrs, h_ts);
    hdrs = curl_slist_append(hdrs, h_sig);
    hdrs = curl_slist_append(hdrs, "Expect:");
    if (!c || !hdrs) {
        snprintf(error, errlen, "out of memory");
        goto out;
    }
    curl_easy_setopt(c, CURLOPT_URL, job->hook.url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    /* The whole attempt: name resolution, connect, TLS, sending and the answer, however slowly
     * an endpoint accepts or drips; what bounds how long one endpoint holds a thread. */
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)ws->cfg.webhook_timeout_ms);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(c, CURLOPT_USERAGENT, "sbx-webhooks/1");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard_answer);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &seen);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_checked);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, ws);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_err);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, abort_when_stopping);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, ws);
    CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_ABORTED_BY_CALLBACK) {
        snprintf(error, errlen, "worker stopping");
        *status = -1; /* not an attempt: not recorded */
        goto out;
    }
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    *status = code;
    bool whole = rc == CURLE_OK || rc == CURLE_WRITE_ERROR; /* WRITE_ERROR: enough was read */
    if (code >= 200 && code < 300 && whole) {
        ok = true;
    } else if (code > 0 && !whole) {
        /* An answer that started but did not end (a slow drip cut by the time limit): its status
         * alone would read as a success. */
        snprintf(error, errlen, "HTTP %ld, answer cut: %s", code,
                 curl_err[0] ? curl_err : curl_easy_strerror(rc));
    } else if (code > 0) {
        snprintf(error, errlen, "HTTP %ld", code);
    } else if (rc == CURLE_COULDNT_CONNECT && !curl_err[0]) {
        snprintf(error, errlen, "connection refused");
    } else {
        snprintf(error, errlen, "%s", curl_err[0] ? curl_err : curl_easy_strerror(rc));
    }
out:
    curl_slist_free_all(hdrs);
    if (c)
        curl_easy_cleanup(c);
    return ok;
}

static void deliver(struct webhook_sender *ws, struct store_webhook_job *job)
{
    char at[32], error[256];
    int64_t status = 0;
    time_format_ms(job->event.at, at, sizeof at);
    /* Standard Webhooks' payload: type, timestamp and the event as the API shows it. */
    json_t *payload = json_pack("{s:s, s:s, s:o}", "type", job->event.kind, "timestamp", at, "data",
                                event_json(&job->event));
    char *body = payload ? json_dumps(payload, JSON_COMPACT) : NULL;
    json_decref(payload);
    int64_t start = clock_mono_ms();
    bool ok = body && post(ws, job, body, &status, error, sizeof error);
    if (!body)
        snprintf(error, sizeof error, "out of memory");
    free(body);
    int64_t took = clock_mono_ms() - start;
    if (status < 0) {
        log_info("webhooks: %s to %s cut by the worker's stop; sent again after its lease",
                 job->delivery_id, job->hook.url);
        return;
    }
    int64_t retry_at = 0;
    if (!ok && job->attempt < ws->cfg.webhook_max_attempts)
        retry_at = clock_wall_ms() + backoff_delay_ms(job->attempt, ws->cfg.webhook_retry_base_ms,
                                                      ws->cfg.webhook_retry_max_ms);
    struct store_webhook_result res = {
        job->hook.id, job->delivery_id,  job->attempt,
        status,       ok ? NULL : error, took,
        ok,           retry_at,          ws->cfg.webhook_failing_after,
    };
    enum store_status rc = store_webhook_record(ws->st, ws->worker_id, &res);
    if (rc != STORE_OK)
        log_warn("webhooks: attempt %lld of %s to %s not recorded: %s", (long long)job->attempt,
                 job->delivery_id, job->hook.id, store_status_name(rc));
    else if (!ok)
        log_info("webhooks: %s to %s failed (attempt %lld, %s)%s", job->delivery_id, job->hook.url,
                 (long long)job->attempt, error, retry_at ? "" : "; giving up");
}

/* Waits up to ms, until woken after *seen (webhook_sender_wake) or until stopped; returns false
 * once stopping. *seen is updated to the wake-ups served by the round that follows. */
static bool nap(struct webhook_sender *ws, int64_t ms, uint64_t *seen)
{
    struct timespec until = clock_mono_deadline(ms);
    pthread_mutex_lock(&ws->lock);
    while (!ws->stopping && ws->wakes == *seen &&
           pthread_cond_clockwait(&ws->wake, &ws->lock, CLOCK_MONOTONIC, &until) == 0) {
    }
    bool woken = ws->wakes != *seen;
    *seen = ws->wakes;
    bool go_on = !ws->stopping;
    pthread_mutex_unlock(&ws->lock);
    if (woken && go_on) {
        /* A burst of events is one round, not one per event. */
        struct timespec spacing = {0, WEBHOOK_WAKE_SPACING_MS * 1000000L};
        nanosleep(&spacing, NULL);
    }
    return go_on;
}

static void *sender_main(void *arg)
{
    struct webhook_sender *ws = arg;
    int64_t lease = ws->cfg.webhook_timeout_ms + 5000, poll = ws->cfg.webhook_poll_ms;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&ws->lock);
        bool stop = ws->stopping;
        seen = ws->wakes; /* what this round's fill will see */
        pthread_mutex_unlock(&ws->lock);
        if (stop)
            break;
        size_t added = 0;
        enum store_status rc = store_webhook_fill(ws->st, FILL_LIMIT, &added);
        if (rc != STORE_OK && rc != STORE_BUSY)
            log_warn("webhooks: cannot fill the outbox: %s", store_status_name(rc));
        /* A read first: claiming takes the write lock, not to be taken for nothing. */
        int64_t due = 0, now = clock_wall_ms();
        if (store_webhook_next_due(ws->st, &due) != STORE_OK || due == 0 || due > now) {
            int64_t wait = due > now && due - now < poll ? due - now : poll;
            if (!nap(ws, wait, &seen))
                break;
            continue;
        }
        struct store_webhook_job job;
        rc = store_webhook_claim(ws->st, ws->worker_id, lease, &job);
        if (rc == STORE_OK) {
            deliver(ws, &job);
            store_webhook_job_clear(&job);
            continue;
        }
        /* Due, but every due endpoint is leased (by another thread or worker). */
        if (!nap(ws, rc == STORE_EMPTY ? 50 : poll, &seen))
            break;
    }
    return NULL;
}

struct webhook_sender *webhook_sender_start(struct store *st, const struct sbx_config *cfg,
                                            const char *worker_id)
{
    struct webhook_sender *ws = calloc(1, sizeof *ws);
    if (!ws)
        return NULL;
    ws->st = st;
    ws->cfg = *cfg;
    snprintf(ws->worker_id, sizeof ws->worker_id, "%s", worker_id);
    pthread_mutex_init(&ws->lock, NULL);
    pthread_cond_init(&ws->wake, NULL);
    if (cfg->webhook_threads == 0)
        return ws;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        log_error("webhooks: libcurl did not initialise; no webhooks from this worker");
        return ws;
    }
    ws->threads = calloc((size_t)cfg->webhook_threads, sizeof *ws->threads);
    for (size_t i = 0; ws->threads && i < (size_t)cfg->webhook_threads; i++) {
        if (pthread_create(&ws->threads[i], NULL, sender_main, ws) != 0) {
            log_error("webhooks: cannot start a delivery thread: %s", strerror(errno));
            break;
        }
        ws->n_threads++;
    }
    return ws;
}

void webhook_sender_wake(struct webhook_sender *ws)
{
    if (!ws || ws->n_threads == 0)
        return;
    pthread_mutex_lock(&ws->lock);
    ws->wakes++;
    pthread_cond_broadcast(&ws->wake);
    pthread_mutex_unlock(&ws->lock);
}

void webhook_sender_stop(struct webhook_sender *ws)
{
    if (!ws)
        return;
    pthread_mutex_lock(&ws->lock);
    ws->stopping = true;
    pthread_cond_broadcast(&ws->wake);
    pthread_mutex_unlock(&ws->lock);
    for (size_t i = 0; i < ws->n_threads; i++)
        pthread_join(ws->threads[i], NULL);
    free(ws->threads);
    if (ws->cfg.webhook_threads > 0)
        curl_global_cleanup();
    pthread_cond_destroy(&ws->wake);
    pthread_mutex_destroy(&ws->lock);
    free(ws);
}
