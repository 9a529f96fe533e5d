/*
 * callback_int.h: what the callback API's files share: the server, one request in flight, the
 * replies, and the handlers of its routes (routes.c). server.c accepts, authenticates, limits
 * and counts; routes.c does what each route says.
 */
#ifndef SBX_CALLBACK_INT_H
#define SBX_CALLBACK_INT_H

#include "callback.h"
#include "problem.h"

#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct json_text;
struct cert_cache;

/* Requests per address, token bucket (callback_rate per second, a burst of twice that). */
struct rate_bucket {
    uint32_t addr;
    double tokens;
    int64_t at_ms; /* mono ms of the last refill */
};

struct callback_server {
    const struct sbx_config *cfg;
    struct store *st;
    struct pki *pki;
    struct notify_peer *workers;
    struct MHD_Daemon *daemon;
    struct in_addr pool_net; /* Sandboxes' addresses (net_pool): nobody else is served */
    uint32_t pool_mask;
    struct cert_cache *certs;

    pthread_mutex_t lock; /* the buckets and the counts below */
    struct rate_bucket *buckets;
    size_t n_buckets, cap_buckets;
    struct store_callback_count *counts; /* calls since the last flush */
    size_t n_counts, cap_counts;
    int64_t refused; /* 401s since the last flush */

    pthread_t flusher;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    bool stopping;
};

#define CB_MAX_PARAMS 1

/* One request in flight (MHD's con_cls). */
struct cb_request {
    struct callback_server *cs;
    struct MHD_Connection *conn;
    char method[16];
    char path[256];
    char request_id[STORE_ID_LEN]; /* X-Request-Id, and requestId in problems */
    bool replied;
    const struct cb_route *route;
    char allow[64]; /* the path's methods, for a 405's Allow */
    char params[CB_MAX_PARAMS][STORE_ID_LEN];
    char *body; /* NUL-terminated */
    size_t body_len, body_cap;
    bool body_too_large;
    struct store_sandbox sb; /* the caller, once authenticated */
    char actor[64];          /* "sandbox:<sandboxId>" */
    struct store_ctx ctx;
};

typedef enum MHD_Result (*cb_handler_fn)(struct cb_request *r);

struct cb_route {
    const char *method;
    const char *path; /* template: "/sandbox/v1/sessions/{sessionId}/messages" */
    bool body;        /* takes a JSON body */
    cb_handler_fn handler;
};

/* replies (server.c) */
enum MHD_Result cb_reply_json(struct cb_request *r, unsigned status, json_t *body);
enum MHD_Result cb_reply_text(struct cb_request *r, unsigned status, struct json_text *t,
                              const char *location);
/* A problem (common/problem.h codes); field may be NULL. */
enum MHD_Result cb_reply_problem(struct cb_request *r, enum problem_code code, const char *field,
                                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));
enum MHD_Result cb_reply_store_error(struct cb_request *r, enum store_status st, const char *what);

/* routes.c */
extern const struct cb_route cb_routes[];
enum MHD_Result cb_session_get(struct cb_request *r);
enum MHD_Result cb_metadata_patch(struct cb_request *r);
enum MHD_Result cb_history(struct cb_request *r);
enum MHD_Result cb_sibling_message(struct cb_request *r);
enum MHD_Result cb_identity_token(struct cb_request *r);

#endif
