/*
 * gateway.h: what the files of the gateway share: the daemon's state, one HTTP request in flight,
 * the route table's entry, and the handlers of every endpoint group (one http_*.c file each).
 *
 * A request goes: router.c (match method + path template, check auth, content type and body
 * size, collect the body) -> the route's handler (http_*.c) -> reply.c (JSON or an RFC 9457
 * problem). Long polls park the connection in longpoll.c without holding a thread.
 */
#ifndef SBX_GATEWAY_H
#define SBX_GATEWAY_H

#include "config.h"
#include "store_records.h"

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

struct longpoll;
struct sse_hub;
struct metrics;
struct ratelimit;
struct trusted_proxies;
struct client_conns;
struct notify_peer;
struct key_cache;
struct pki;
struct secret_box;

struct gateway {
    struct sbx_config cfg;
    struct store *st;
    struct notify_peer *workers;  /* "queue" wake-ups after each enqueue */
    struct notify_peer *gateways; /* "keys" to every gateway after a revoke (key_cache.h) */
    struct key_cache *keys;       /* API keys authenticated lately (key_cache.h) */
    struct pki *pki;              /* the installation's keys: the identity tokens' JWKS (pki.h) */
    struct secret_box *secrets;   /* seals App secrets before the store sees them (secret_box.h) */
    struct longpoll *lp;
    struct sse_hub *sse; /* Server-Sent Events streams (sse.h) */
    struct metrics *metrics;
    struct ratelimit *rl;            /* failed auths per client address */
    struct ratelimit *rl_prefix;     /* failed auths per presented token prefix */
    struct trusted_proxies *proxies; /* whose X-Forwarded-For names the client */
    struct client_conns *conns;      /* connections per client address (conn_per_client) */
    uint8_t admin_hash[32];          /* SHA-256 of the admin token */
    uint8_t metrics_hash[32];        /* SHA-256 of metrics_token, when it is set */
    /* The listener of its own for /metrics (metrics_listen), or NULL: /metrics on the API one. */
    struct MHD_Daemon *metrics_daemon;
    volatile int stopping;  /* set before the daemon stops: long polls answer at once */
    int enqueues_suspended; /* POST messages waiting for their commit (http_messages.c) */
    bool claim_overlap;     /* the committer wakes the workers before its fsync (main.c) */
};

enum auth_kind {
    AUTH_NONE,   /* /healthz, /metrics */
    AUTH_ADMIN,  /* /v1/apps* */
    AUTH_KEY,    /* /v1/sessions*, /v1/workspaces* */
    AUTH_EITHER, /* /v1/sandboxes*, /v1/pool, /v1/events */
};

enum body_kind {
    BODY_NONE,     /* the body is ignored */
    BODY_OPTIONAL, /* may be empty; if not, it must be a JSON object */
    BODY_REQUIRED, /* must be a JSON object */
    BODY_UPLOAD,   /* a JSON object, or an image archive streamed to http_images.c */
};

struct request;
typedef enum MHD_Result (*handler_fn)(struct request *r);

struct route {
    const char *method;
    const char *path; /* template: "/v1/sessions/{sessionId}" */
    enum auth_kind auth;
    enum body_kind body;
    handler_fn handler;
};

#define ROUTE_MAX_PARAMS 3
/* A path parameter: an id (shorter than STORE_ID_LEN) or, for a template parameter whose name
 * ends in "Name" ({secretName}), a name of up to 128 characters. */
#define ROUTE_PARAM_LEN 129
#define REQUEST_ID_LEN 65

/* One request in flight: MHD's per-request context (con_cls), freed when it completes. */
struct request {
    struct gateway *gw;
    struct MHD_Connection *conn;
    const struct route *route; /* NULL when none matched */
    int route_index;           /* for metrics: index in the route table, -1 when none */
    const char *method;
    const char *path;
    char params[ROUTE_MAX_PARAMS][ROUTE_PARAM_LEN]; /* path parameters, in template order */
    char request_id[REQUEST_ID_LEN];

    /* Who is calling (set by auth.c). */
    bool is_admin;
    char app_id[STORE_ID_LEN]; /* the App key's App; "" for admin (sees every App) */
    char actor[64];            /* "admin" or "key:<keyId>" */
    uint8_t key_hash[32];      /* the App key's SHA-256, re-checked by streams and long polls */
    struct store_ctx ctx;      /* actor + request id for the audit trail */

    /* The body, collected up to body_limit. */
    char *body;
    size_t body_len, body_cap;
    bool body_present;    /* the client announced or sent a body */
    bool body_too_large;  /* a body without Content-Length went over the limit */
    size_t body_received; /* bytes received, including dropped ones */

    bool replied;     /* a response is queued */
    unsigned status;  /* the status replied, for metrics */
    int64_t start_us; /* monotonic, for the latency histogram */

    /* Long poll (GET message ?wait=N): when it runs out, whether it is parked, and how many
     * wake-ups the long-poll thread had taken in before this run read the store
     * (longpoll_hints_seen). */
    int64_t wait_deadline_ms; /* monotonic ms; 0 when not waiting */
    bool parked;
    uint64_t wait_hints;
    bool key_revoked; /* set by the long-poll thread: the key was revoked while it was parked */

    /* POST messages: the enqueue handed to the store's committer while the connection is
     * suspended (http_messages.c); freed with the request. */
    struct pending_enqueue *enqueue;

    /* POST /v1/images with an archive: the upload being written to disk (http_images.c); freed
     * with the request. */
    struct image_upload *upload;
};

/* ---- router.c ---- */
extern const struct route gateway_routes[];
extern const int gateway_route_count;
/* Matches method + path against the route table: the route's index with its {parameters} written
 * to params, or -1. On -1, allow lists the methods the path has ("" when none: 404) and path_route
 * is the first route of that path (-1 when none). Pure: no MHD, no store (fuzzable). */
int gateway_route_match(const char *method, const char *path,
                        char params[ROUTE_MAX_PARAMS][ROUTE_PARAM_LEN], char *allow,
                        size_t allowlen, int *path_route);
enum MHD_Result gateway_access_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                       const char *method, const char *version,
                                       const char *upload_data, size_t *upload_data_size,
                                       void **con_cls);
void gateway_request_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                               enum MHD_RequestTerminationCode toe);

/* ---- handlers, one group per file ---- */
enum MHD_Result http_healthz(struct request *r);
enum MHD_Result http_metrics(struct request *r);
enum MHD_Result http_jwks(struct request *r);
enum MHD_Result http_openid_configuration(struct request *r);
enum MHD_Result http_app_create(struct request *r);
enum MHD_Result http_app_list(struct request *r);
enum MHD_Result http_app_get(struct request *r);
enum MHD_Result http_app_patch(struct request *r);
enum MHD_Result http_app_delete(struct request *r);
enum MHD_Result http_key_create(struct request *r);
enum MHD_Result http_key_list(struct request *r);
enum MHD_Result http_key_delete(struct request *r);
/* After a revoke or an App delete: every gateway's key cache forgets what it holds (key_cache.h).
 */
void http_keys_changed(struct gateway *gw);
/* A store refusal over an App's quota or the Workspaces' disk (q->hit, app_quotas.h): 429 naming
 * the quota, 422 for keepAliveSeconds (field names the field), 507 for the disk. wanted: what the
 * request asked (1 Session or Workspace, its MiB, its keep-alive). (http_quotas.c) */
struct store_quotas;
enum MHD_Result reply_over_quota(struct request *r, const struct store_quotas *q, int64_t wanted,
                                 const char *field);
enum MHD_Result http_webhook_create(struct request *r);
enum MHD_Result http_webhook_list(struct request *r);
enum MHD_Result http_webhook_get(struct request *r);
enum MHD_Result http_webhook_delete(struct request *r);
enum MHD_Result http_webhook_deliveries(struct request *r);
enum MHD_Result http_secret_put(struct request *r);
enum MHD_Result http_secret_list(struct request *r);
enum MHD_Result http_secret_get(struct request *r);
enum MHD_Result http_secret_delete(struct request *r);
/* The refusal of an App update whose env sets name: one of the App's secrets or, for an App with
 * secrets, a variable sbx sets for them (the store checks, store_app_patch.env_reserved). */
enum MHD_Result http_secrets_env_refused(struct request *r, const char *name);
enum MHD_Result http_session_create(struct request *r);
enum MHD_Result http_session_list(struct request *r);
enum MHD_Result http_session_get(struct request *r);
enum MHD_Result http_session_patch(struct request *r);
enum MHD_Result http_session_delete(struct request *r);
enum MHD_Result http_message_create(struct request *r);
enum MHD_Result http_message_list(struct request *r);
enum MHD_Result http_message_get(struct request *r);
void http_message_request_free(struct request *r);
/* Call after setting gw->stopping and before MHD_stop_daemon(): waits up to timeout_ms for the
 * enqueues whose connections are suspended to be committed and run again (MHD must not stop
 * while a connection is suspended). Enqueues that start after stopping is set block instead. */
void http_message_drain(struct gateway *gw, int timeout_ms);
enum MHD_Result http_sandbox_list(struct request *r);
enum MHD_Result http_sandbox_get(struct request *r);
enum MHD_Result http_sandbox_delete(struct request *r);
enum MHD_Result http_pool_get(struct request *r);
enum MHD_Result http_workspace_create(struct request *r);
enum MHD_Result http_workspace_list(struct request *r);
enum MHD_Result http_workspace_get(struct request *r);
enum MHD_Result http_workspace_delete(struct request *r);
enum MHD_Result http_event_list(struct request *r);
/* GET /v1/events as text/event-stream (http_event_stream.c): after event id `after` (-1: from
 * now), or after Last-Event-ID when given. */
enum MHD_Result http_event_stream(struct request *r, const char *session_id, int64_t after);
enum MHD_Result http_message_stream(struct request *r);
enum MHD_Result http_image_create(struct request *r);
enum MHD_Result http_image_list(struct request *r);
enum MHD_Result http_image_get(struct request *r);
enum MHD_Result http_image_delete(struct request *r);
/* Uploads (BODY_UPLOAD routes, router.c): whether a Content-Type is an image archive's; begin
 * (after auth, before the body: checks ?name= and the announced length, opens the file; false
 * with a reply queued on refusal); each chunk; whether it went over image_upload_limit; and
 * the request's upload state freed (the file removed unless the store has it). */
bool http_image_is_upload_type(const char *content_type);
bool http_image_upload_begin(struct request *r, long long content_length, enum MHD_Result *ret);
void http_image_upload_chunk(struct request *r, const char *data, size_t len);
bool http_image_upload_too_large(const struct request *r);
void http_image_request_free(struct request *r);
/* An App's `image` (an Image's id or name, or "default") to the Image's id ("" for default) and
 * digest ("default"): 0, or -1 with 422 (no such Image) or 409 (not ready) replied. */
int http_image_resolve(struct request *r, const char *image, char *image_id, size_t idlen,
                       char *digest, size_t digestlen, enum MHD_Result *ret);

/* The request body as a JSON object with only the allowed fields (NULL-terminated list); an
 * empty body is {} on routes whose body is optional. On failure replies 400 and returns NULL. */
#include <jansson.h>
json_t *request_json(struct request *r, const char *const *allowed, enum MHD_Result *ret);

/* ---- router.c: ?limit= and ?cursor= ---- */
/* Reads limit (1..200, default 50) and cursor; on a bad one replies 400 and returns false. */
bool paging_params(struct request *r, size_t *limit, const char **cursor, enum MHD_Result *replied);

#endif
