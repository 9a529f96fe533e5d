/*
 * server.c: the callback API's server (callback.h): the listener and its TLS, who may connect,
 * each request's way through (route, size, token, rate), the replies, and the counts written to
 * the store in batches.
 *
 * TLS: a Sandbox dials the host side of its own link by address (SBX_API_URL), which sends no
 * server name, and the host side has one address per Sandbox slot. So the certificate is chosen
 * by the connection's local address: issued by the installation CA for that one address the first
 * time it is asked for, then kept for the life of the process (at most one per slot of net_pool).
 */
#include "callback_int.h"
#include "store_sandboxes.h"

#include "id.h"
#include "json_text.h"
#include "log.h"
#include "pki.h"
#include "problem.h"
#include "sandbox_context.h"
#include "clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* How long a certificate issued for a local address is valid; the process re-issues none, so
 * this is also the longest a worker may run (it is restarted long before in practice). */
#define CERT_VALID_SECONDS (10 * 365 * 86400LL)
/* How often the counts are written; a stop writes what is left. */
#define FLUSH_MS 1000
/* Rate buckets idle this long are dropped at a flush. */
#define BUCKET_IDLE_MS 60000

/* ---- certificates by local address ---- */

struct cert_entry {
    uint32_t addr;
    gnutls_pcert_st pcert;
    gnutls_privkey_t key;
};

struct cert_cache {
    pthread_mutex_t lock;
    struct cert_entry *entries; /* never moved once handed out: see cert_for */
    size_t n, cap;
};

/* GnuTLS calls the certificate callback with no argument of ours; one server per process. */
static struct callback_server *the_server;

static struct cert_entry *cert_find(struct cert_cache *c, uint32_t addr)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->entries[i].addr == addr)
            return &c->entries[i];
    return NULL;
}

/* The entry for addr, issued now when there is none. GnuTLS keeps the pointers it is given for
 * the session's life, so entries live in fixed blocks: the array is allocated once, for every
 * slot the pool can have. NULL on failure (logged). */
static struct cert_entry *cert_for(struct callback_server *cs, uint32_t addr)
{
    struct cert_cache *c = cs->certs;
    pthread_mutex_lock(&c->lock);
    struct cert_entry *e = cert_find(c, addr);
    if (e || c->n == c->cap) {
        if (!e)
            log_error("callback: no room for a certificate of another local address");
        pthread_mutex_unlock(&c->lock);
        return e;
    }
    char ip[INET_ADDRSTRLEN], err[256];
    struct in_addr a = {.s_addr = addr};
    inet_ntop(AF_INET, &a, ip, sizeof ip);
    const char *ips[] = {ip};
    char *cert_pem = NULL, *key_pem = NULL;
    e = &c->entries[c->n];
    int ok = pki_issue_server_cert(cs->pki, ips, 1, NULL, 0, CERT_VALID_SECONDS, &cert_pem,
                                   &key_pem, err, sizeof err) == 0;
    if (!ok)
        log_error("callback: cannot issue a certificate for %s: %s", ip, err);
    if (ok) {
        gnutls_datum_t cd = {(unsigned char *)cert_pem, (unsigned)strlen(cert_pem)};
        gnutls_datum_t kd = {(unsigned char *)key_pem, (unsigned)strlen(key_pem)};
        int rc = gnutls_pcert_import_x509_raw(&e->pcert, &cd, GNUTLS_X509_FMT_PEM, 0);
        if (rc == 0 && (rc = gnutls_privkey_init(&e->key)) == 0 &&
            (rc = gnutls_privkey_import_x509_raw(e->key, &kd, GNUTLS_X509_FMT_PEM, NULL, 0)) != 0)
            gnutls_privkey_deinit(e->key);
        if (rc != 0) {
            log_error("callback: cannot load the certificate for %s: %s", ip, gnutls_strerror(rc));
            ok = 0;
        }
    }
    free(cert_pem);
    free(key_pem);
    if (ok) {
        e->addr = addr;
        c->n++;
    } else {
        e = NULL;
    }
    pthread_mutex_unlock(&c->lock);
    return e;
}

static int cert_callback(gnutls_session_t session, const gnutls_datum_t *req_ca_dn, int nreqs,
                         const gnutls_pk_algorithm_t *algos, int n_algos, gnutls_pcert_st **pcert,
                         unsigned int *pcert_length, gnutls_privkey_t *pkey)
{
    (void)req_ca_dn, (void)nreqs, (void)algos, (void)n_algos;
    struct sockaddr_in local;
    socklen_t len = sizeof local;
    int fd = gnutls_transport_get_int(session);
    if (!the_server || getsockname(fd, (struct sockaddr *)&local, &len) != 0 ||
        local.sin_family != AF_INET)
        return -1;
    struct cert_entry *e = cert_for(the_server, local.sin_addr.s_addr);
    if (!e)
        return -1;
    *pcert = &e->pcert;
    *pcert_length = 1;
    *pkey = e->key;
    return 0;
}

static void cert_cache_free(struct cert_cache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++) {
        gnutls_pcert_deinit(&c->entries[i].pcert);
        gnutls_privkey_deinit(c->entries[i].key);
    }
    free(c->entries);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* ---- replies ---- */

static enum MHD_Result queue(struct cb_request *r, unsigned status, struct MHD_Response *resp,
                             const char *content_type)
{
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", content_type);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "X-Request-Id", r->request_id);
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->replied = true;
    return ret;
}

static enum MHD_Result reply_buffer(struct cb_request *r, unsigned status, char *text, size_t len,
                                    const char *content_type, const char *location,
                                    const char *allow)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    if (location)
        MHD_add_response_header(resp, "Location", location);
    if (status == 429 || status == 503)
        MHD_add_response_header(resp, "Retry-After", "1");
    if (allow)
        MHD_add_response_header(resp, "Allow", allow);
    if (status == 401)
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer realm=\"sbx-sandbox\"");
    return queue(r, status, resp, content_type);
}

enum MHD_Result cb_reply_json(struct cb_request *r, unsigned status, json_t *body)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text)
        return cb_reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory");
    return reply_buffer(r, status, text, strlen(text), "application/json", NULL, NULL);
}

enum MHD_Result cb_reply_text(struct cb_request *r, unsigned status, struct json_text *t,
                              const char *location)
{
    size_t len;
    char *text = json_text_take(t, &len);
    if (!text)
        return cb_reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory");
    return reply_buffer(r, status, text, len, "application/json", location, NULL);
}

enum MHD_Result cb_reply_problem(struct cb_request *r, enum problem_code code, const char *field,
                                 const char *fmt, ...)
{
    const struct problem_kind *k = problem_kind(code);
    char detail[512], type[80];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    snprintf(type, sizeof type, "urn:sbx:problem:%s", k->code);
    json_t *p = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s, s:s}", "type", type, "title", k->title,
                          "status", (int)k->status, "detail", detail, "instance", r->path, "code",
                          k->code, "requestId", r->request_id);
    if (p && field)
        json_object_set_new(p, "field", json_string(field));
    if (k->status >= 500)
        log_emit(LOG_LEVEL_ERROR, r->request_id, "callback: %s %s -> %u %s: %s", r->method, r->path,
                 k->status, k->code, detail);
    char *text = p ? json_dumps(p, JSON_COMPACT) : NULL;
    json_decref(p);
    if (!text)
        return MHD_NO;
    return reply_buffer(r, k->status, text, strlen(text), "application/problem+json", NULL,
                        k->status == 405 ? r->allow : NULL);
}

enum MHD_Result cb_reply_store_error(struct cb_request *r, enum store_status st, const char *what)
{
    switch (st) {
    case STORE_NOT_FOUND:
        return cb_reply_problem(r, PROBLEM_NOT_FOUND, NULL, "no such %s", what);
    case STORE_CONFLICT:
        return cb_reply_problem(r, PROBLEM_CONFLICT, NULL,
                                "the %s conflicts with the current state", what);
    case STORE_BUSY:
        return cb_reply_problem(r, PROBLEM_STORE_BUSY, NULL,
                                "the database stayed locked beyond the busy timeout; retry");
    case STORE_FULL:
        return cb_reply_problem(r, PROBLEM_STORAGE_FULL, NULL, "the database disk is full");
    case STORE_INVALID:
        return cb_reply_problem(r, PROBLEM_INVALID_VALUE, NULL,
                                "the %s has a value the store refuses", what);
    default:
        return cb_reply_problem(r, PROBLEM_INTERNAL, NULL, "store error (%s) on %s",
                                store_status_name(st), what);
    }
}

/* ---- limits and counts ---- */

/* Takes a token from addr's bucket: false when it is empty (429). */
static bool rate_take(struct callback_server *cs, uint32_t addr)
{
    int64_t now = clock_mono_ms();
    double rate = (double)cs->cfg->callback_rate, burst = 2 * rate;
    pthread_mutex_lock(&cs->lock);
    struct rate_bucket *b = NULL;
    for (size_t i = 0; i < cs->n_buckets && !b; i++)
        if (cs->buckets[i].addr == addr)
            b = &cs->buckets[i];
    if (!b && cs->n_buckets == cs->cap_buckets) {
        size_t cap = cs->cap_buckets ? 2 * cs->cap_buckets : 64;
        struct rate_bucket *nb = realloc(cs->buckets, cap * sizeof *nb);
        if (nb) {
            cs->buckets = nb;
            cs->cap_buckets = cap;
        }
    }
    if (!b && cs->n_buckets < cs->cap_buckets) {
        b = &cs->buckets[cs->n_buckets++];
        *b = (struct rate_bucket){addr, burst, now};
    }
    bool ok = true;
    if (b) {
        b->tokens += (double)(now - b->at_ms) * rate / 1000.0;
        if (b->tokens > burst)
            b->tokens = burst;
        b->at_ms = now;
        ok = b->tokens >= 1.0;
        if (ok)
            b->tokens -= 1.0;
    }
    pthread_mutex_unlock(&cs->lock);
    return ok;
}

/* Adds calls at last_at to sandbox_id's count; cs->lock held. A count that finds no memory is
 * lost (logged): the calls were answered, only their tally is short. */
static void count_add(struct callback_server *cs, const char *sandbox_id, int64_t calls,
                      int64_t last_at)
{
    struct store_callback_count *c = NULL;
    for (size_t i = 0; i < cs->n_counts && !c; i++)
        if (strcmp(cs->counts[i].sandbox_id, sandbox_id) == 0)
            c = &cs->counts[i];
    if (!c && cs->n_counts == cs->cap_counts) {
        size_t cap = cs->cap_counts ? 2 * cs->cap_counts : 64;
        struct store_callback_count *nc = realloc(cs->counts, cap * sizeof *nc);
        if (nc) {
            cs->counts = nc;
            cs->cap_counts = cap;
        }
    }
    if (!c && cs->n_counts < cs->cap_counts) {
        c = &cs->counts[cs->n_counts++];
        memset(c, 0, sizeof *c);
        snprintf(c->sandbox_id, sizeof c->sandbox_id, "%s", sandbox_id);
    }
    if (!c) {
        log_warn("callback: out of memory counting the calls of %s", sandbox_id);
        return;
    }
    c->calls += calls;
    if (last_at > c->last_at)
        c->last_at = last_at;
}

static void count_call(struct callback_server *cs, const char *sandbox_id)
{
    int64_t now = clock_wall_ms();
    pthread_mutex_lock(&cs->lock);
    count_add(cs, sandbox_id, 1, now);
    pthread_mutex_unlock(&cs->lock);
}

static void count_refused(struct callback_server *cs)
{
    pthread_mutex_lock(&cs->lock);
    cs->refused++;
    pthread_mutex_unlock(&cs->lock);
}

/* Writes the counts gathered since the last flush; on a store error they are kept for the next. */
static void flush_counts(struct callback_server *cs)
{
    pthread_mutex_lock(&cs->lock);
    struct store_callback_count *counts = cs->counts;
    size_t n = cs->n_counts;
    int64_t refused = cs->refused;
    cs->counts = NULL;
    cs->n_counts = cs->cap_counts = 0;
    cs->refused = 0;
    int64_t now = clock_mono_ms();
    for (size_t i = 0; i < cs->n_buckets;)
        if (now - cs->buckets[i].at_ms > BUCKET_IDLE_MS)
            cs->buckets[i] = cs->buckets[--cs->n_buckets];
        else
            i++;
    pthread_mutex_unlock(&cs->lock);
    if (n == 0 && refused == 0) {
        free(counts);
        return;
    }
    enum store_status rc =
        store_sandbox_callbacks_add(cs->st, counts, n, cs->cfg->host_id, refused);
    if (rc != STORE_OK) {
        log_warn("callback: cannot record the callback counts (%s); retried at the next flush",
                 store_status_name(rc));
        pthread_mutex_lock(&cs->lock);
        cs->refused += refused;
        for (size_t i = 0; i < n; i++)
            count_add(cs, counts[i].sandbox_id, counts[i].calls, counts[i].last_at);
        pthread_mutex_unlock(&cs->lock);
    }
    free(counts);
}

static void *flusher_main(void *arg)
{
    struct callback_server *cs = arg;
    pthread_mutex_lock(&cs->stop_lock);
    while (!cs->stopping) {
        struct timespec until = clock_mono_deadline(FLUSH_MS);
        pthread_cond_clockwait(&cs->stop_cond, &cs->stop_lock, CLOCK_MONOTONIC, &until);
        pthread_mutex_unlock(&cs->stop_lock);
        flush_counts(cs);
        pthread_mutex_lock(&cs->stop_lock);
    }
    pthread_mutex_unlock(&cs->stop_lock);
    return NULL;
}

/* ---- requests ---- */

/* Matches path against the template tmpl, copying its {param}s. */
static bool path_match(const char *tmpl, const char *path, char params[][STORE_ID_LEN])
{
    size_t np = 0;
    while (*tmpl && *path) {
        if (*tmpl == '{') {
            const char *end = strchr(path, '/');
            size_t len = end ? (size_t)(end - path) : strlen(path);
            if (len == 0 || len >= STORE_ID_LEN || np == CB_MAX_PARAMS)
                return false;
            memcpy(params[np], path, len);
            params[np++][len] = '\0';
            path += len;
            tmpl = strchr(tmpl, '}') + 1;
        } else if (*tmpl++ != *path++) {
            return false;
        }
    }
    return *tmpl == '\0' && *path == '\0';
}

/* Finds the route; a known path with another method is 405. */
static enum MHD_Result route_request(struct cb_request *r)
{
    bool path_known = false;
    for (const struct cb_route *rt = cb_routes; rt->method; rt++) {
        if (!path_match(rt->path, r->path, r->params))
            continue;
        path_known = true;
        if (strcmp(rt->method, r->method) == 0) {
            r->route = rt;
            return MHD_YES;
        }
        size_t n = strlen(r->allow);
        snprintf(r->allow + n, sizeof r->allow - n, "%s%s", n ? ", " : "", rt->method);
    }
    if (path_known)
        return cb_reply_problem(r, PROBLEM_METHOD_NOT_ALLOWED, NULL, "%s is not allowed on %s",
                                r->method, r->path);
    return cb_reply_problem(r, PROBLEM_NOT_FOUND, NULL, "no route %s", r->path);
}

/* The caller's Sandbox from its bearer token: live (claimed or running, so serving a Session),
 * served by a worker of this host, and asking from its own address. Anything else is 401 and
 * counted; which of these failed is logged at debug level, never told to the caller. */
static bool authenticate(struct cb_request *r, const char *peer)
{
    struct callback_server *cs = r->cs;
    const char *auth = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    const char *why = NULL;
    char hash[65], host[STORE_HOST_ID_LEN];
    if (!auth || strncasecmp(auth, "Bearer ", 7) != 0)
        why = "no bearer token";
    else if (strlen(auth + 7) != CALLBACK_TOKEN_LEN ||
             strncmp(auth + 7, CALLBACK_TOKEN_PREFIX, strlen(CALLBACK_TOKEN_PREFIX)) != 0)
        why = "not a callback token";
    if (!why) {
        callback_token_hash(auth + 7, CALLBACK_TOKEN_LEN, hash);
        enum store_status rc =
            store_sandbox_by_callback_token(cs->st, hash, &r->sb, host, sizeof host);
        if (rc == STORE_NOT_FOUND)
            why = "unknown token";
        else if (rc != STORE_OK) {
            cb_reply_store_error(r, rc, "Sandbox");
            return false;
        } else if (strcmp(r->sb.state, "claimed") != 0 && strcmp(r->sb.state, "running") != 0)
            why = "its Sandbox is not serving a Session";
        else if (strcmp(host, cs->cfg->host_id) != 0)
            why = "its Sandbox is on another host";
        else if (strcmp(r->sb.net_address, peer) != 0)
            why = "another Sandbox's token";
        else if (!r->sb.session_id[0] || !r->sb.app_id[0])
            why = "its Sandbox serves no Session";
    }
    if (why) {
        count_refused(cs);
        log_emit(LOG_LEVEL_DEBUG, r->request_id, "callback: %s %s from %s refused: %s", r->method,
                 r->path, peer, why);
        cb_reply_problem(r, PROBLEM_UNAUTHORIZED, NULL,
                         "a valid Authorization: Bearer $SBX_TOKEN of this Sandbox is required");
        return false;
    }
    snprintf(r->actor, sizeof r->actor, "sandbox:%s", r->sb.id);
    r->ctx = (struct store_ctx){r->actor, r->request_id};
    count_call(cs, r->sb.id);
    return true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    struct callback_server *cs = cls;
    struct cb_request *r = *con_cls;
    if (!r) {
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        r->cs = cs;
        r->conn = conn;
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->path, sizeof r->path, "%s", url);
        if (id_new("req", r->request_id, sizeof r->request_id) != 0)
            snprintf(r->request_id, sizeof r->request_id, "req_unknown");
        *con_cls = r;
        /* A body announced over the bound is refused before it is read. */
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoll(cl, NULL, 10) > cs->cfg->callback_body_limit)
            return cb_reply_problem(r, PROBLEM_BODY_TOO_LARGE, NULL,
                                    "the body is over callback_body_limit (%lld bytes)",
                                    (long long)cs->cfg->callback_body_limit);
        return MHD_YES;
    }
    if (r->replied) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->body_too_large || r->body_len + n > (size_t)cs->cfg->callback_body_limit) {
            r->body_too_large = true;
            return MHD_YES;
        }
        if (r->body_len + n + 1 > r->body_cap) {
            size_t cap = (r->body_len + n + 1) * 2;
            char *b = realloc(r->body, cap);
            if (!b)
                return MHD_NO;
            r->body = b;
            r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, upload_data, n);
        r->body_len += n;
        r->body[r->body_len] = '\0';
        return MHD_YES;
    }
    /* The whole request is in. */
    if (r->body_too_large)
        return cb_reply_problem(r, PROBLEM_BODY_TOO_LARGE, NULL,
                                "the body is over callback_body_limit (%lld bytes)",
                                (long long)cs->cfg->callback_body_limit);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char peer[INET_ADDRSTRLEN] = "";
    uint32_t peer_addr = 0;
    if (ci && ci->client_addr && ci->client_addr->sa_family == AF_INET) {
        peer_addr = ((const struct sockaddr_in *)ci->client_addr)->sin_addr.s_addr;
        inet_ntop(AF_INET, &peer_addr, peer, sizeof peer);
    }
    if (!rate_take(cs, peer_addr))
        return cb_reply_problem(r, PROBLEM_TOO_MANY_REQUESTS, NULL,
                                "over callback_rate (%lld requests a second)",
                                (long long)cs->cfg->callback_rate);
    if (route_request(r) != MHD_YES || r->replied)
        return r->replied ? MHD_YES : MHD_NO;
    if (!authenticate(r, peer))
        return MHD_YES;
    if (!r->route->body && r->body_len)
        return cb_reply_problem(r, PROBLEM_INVALID_FIELD, NULL, "%s %s takes no body", r->method,
                                r->route->path);
    return r->route->handler(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)conn, (void)toe;
    struct cb_request *r = *con_cls;
    if (!r)
        return;
    free(r->body);
    free(r);
    *con_cls = NULL;
}

/* Only Sandboxes connect: an address outside net_pool is refused at accept. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    struct callback_server *cs = cls;
    if (addr->sa_family != AF_INET || addrlen < sizeof(struct sockaddr_in))
        return MHD_NO;
    uint32_t a = ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr);
    return (a & cs->pool_mask) == ntohl(cs->pool_net.s_addr) ? MHD_YES : MHD_NO;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    log_debug("callback: libmicrohttpd: %s", msg);
}

/* "a.b.c.d:port" or "a.b.c.d/len": 0, or -1. */
static int parse_ipv4_with(const char *s, char sep, struct in_addr *addr, long *num)
{
    char host[64];
    const char *at = strrchr(s, sep);
    if (!at || (size_t)(at - s) >= sizeof host)
        return -1;
    memcpy(host, s, (size_t)(at - s));
    host[at - s] = '\0';
    char *end;
    *num = strtol(at + 1, &end, 10);
    return inet_pton(AF_INET, host, addr) == 1 && *end == '\0' && at[1] ? 0 : -1;
}

struct callback_server *callback_server_start(const struct sbx_config *cfg, struct store *st,
                                              struct pki *pki, struct notify_peer *workers,
                                              char *err, size_t errlen)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    struct in_addr net;
    long port, len;
    if (parse_ipv4_with(cfg->callback_listen, ':', &sa.sin_addr, &port) != 0 || port < 1 ||
        port > 65535) {
        snprintf(err, errlen, "callback_listen \"%s\" is not an IPv4 address:port or off",
                 cfg->callback_listen);
        return NULL;
    }
    if (parse_ipv4_with(cfg->net_pool, '/', &net, &len) != 0 || len < 8 || len > 30) {
        snprintf(err, errlen, "net_pool \"%s\" is not an IPv4 CIDR", cfg->net_pool);
        return NULL;
    }
    sa.sin_port = htons((uint16_t)port);
    struct callback_server *cs = calloc(1, sizeof *cs);
    struct cert_cache *certs = calloc(1, sizeof *certs);
    size_t slots = ((size_t)1 << (32 - len)) / 4;
    if (certs)
        certs->entries = calloc(slots, sizeof *certs->entries);
    if (!cs || !certs || !certs->entries) {
        free(cs);
        if (certs)
            free(certs->entries);
        free(certs);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    certs->cap = slots;
    pthread_mutex_init(&certs->lock, NULL);
    cs->cfg = cfg;
    cs->st = st;
    cs->pki = pki;
    cs->workers = workers;
    cs->certs = certs;
    cs->pool_mask = len ? 0xffffffffu << (32 - len) : 0;
    cs->pool_net.s_addr = htonl(ntohl(net.s_addr) & cs->pool_mask);
    pthread_mutex_init(&cs->lock, NULL);
    pthread_mutex_init(&cs->stop_lock, NULL);
    pthread_cond_init(&cs->stop_cond, NULL);
    the_server = cs;
    /* SO_REUSEPORT: every worker of the host listens, and any of them can answer any of the
     * host's Sandboxes (they meet in the store). Two installations on one host must not both
     * use the same callback_listen (docs/callbacks.md). */
    cs->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_TLS | MHD_USE_ERROR_LOG, 0,
        on_accept, cs, on_request, cs, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)&sa, MHD_OPTION_LISTENING_ADDRESS_REUSE,
        (unsigned)1, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)2, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)60, MHD_OPTION_NOTIFY_COMPLETED, on_completed, cs, MHD_OPTION_HTTPS_CERT_CALLBACK,
        cert_callback, MHD_OPTION_HTTPS_PRIORITIES, "NORMAL:-VERS-TLS1.0:-VERS-TLS1.1",
        MHD_OPTION_END);
    if (!cs->daemon) {
        snprintf(err, errlen, "cannot listen on %s: %s", cfg->callback_listen, strerror(errno));
        the_server = NULL;
        cert_cache_free(certs);
        free(cs);
        return NULL;
    }
    if (pthread_create(&cs->flusher, NULL, flusher_main, cs) != 0) {
        snprintf(err, errlen, "cannot start the callback counts' thread");
        MHD_stop_daemon(cs->daemon);
        the_server = NULL;
        cert_cache_free(certs);
        free(cs);
        return NULL;
    }
    log_info("callback API on https://%s (Sandboxes of %s)", cfg->callback_listen, cfg->net_pool);
    return cs;
}

void callback_server_stop(struct callback_server *cs)
{
    if (!cs)
        return;
    MHD_stop_daemon(cs->daemon);
    pthread_mutex_lock(&cs->stop_lock);
    cs->stopping = true;
    pthread_cond_signal(&cs->stop_cond);
    pthread_mutex_unlock(&cs->stop_lock);
    pthread_join(cs->flusher, NULL);
    flush_counts(cs);
    the_server = NULL;
    cert_cache_free(cs->certs);
    free(cs->buckets);
    free(cs->counts);
    pthread_mutex_destroy(&cs->lock);
    pthread_mutex_destroy(&cs->stop_lock);
    pthread_cond_destroy(&cs->stop_cond);
    free(cs);
}
