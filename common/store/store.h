/*
 * store.h: the one interface through which the gateway and the workers reach durable state.
 *
 * The gateway and the workers never talk to each other directly: they meet in the store (and are
 * woken by notify.h). A backend is a table of function pointers, as in GNU Taler's database
 * plugins. The one implementation is SQL, written once in common/store/sql/ (one file per table,
 * named in the sections below) over two engines, SQLite (sql_sqlite.c) and PostgreSQL
 * (sql_pg.c); store_open() picks one.
 *
 * Conventions:
 * - Every function returns an enum store_status. Output parameters are written only on STORE_OK.
 * - Every mutation writes its audit event(s) in the same transaction. The actor and request id of
 *   those events come from the struct store_ctx argument.
 * - Records with heap strings are released with their *_clear() function; fixed-size ids live
 *   inline. A list is an array the caller releases with the matching *_list_free().
 * - Times are int64 milliseconds since the epoch (UTC).
 * - Every App-scoped lookup takes the caller's app id: an object of another App is STORE_NOT_FOUND,
 *   exactly like one that does not exist. An empty app id ("") means "any App" (admin, workers).
 * - The store is safe to call from several threads at once.
 *
 * The records come first, grouped by table in the order of the function table's sections.
 */
#ifndef SBX_STORE_H
#define SBX_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ==== statuses, ids, callers and cursors ==== */

enum store_status {
    STORE_OK = 0,
    STORE_NOT_FOUND, /* no such object (or it belongs to another App) */
    STORE_CONFLICT,  /* uniqueness or state conflict (name taken, attached Workspace, ...) */
    STORE_BUSY,      /* the database stayed locked beyond the busy timeout */
    STORE_FULL,      /* the disk is full */
    STORE_INVALID,   /* a value the schema refuses */
    STORE_EMPTY,     /* nothing to claim (queue or pool) */
    STORE_ERROR,     /* anything else; logged by the store */
};

const char *store_status_name(enum store_status st);

#define STORE_ID_LEN 32 /* ids are "<prefix>_" + 20 base32 chars; room to spare */
#define STORE_NAME_LEN 128
#define STORE_DIGEST_LEN 80 /* "sha256:" + 64 hex digits, or "default" */

/* Who causes a change, for the audit trail. */
struct store_ctx {
    const char *actor;      /* "admin", "key:<keyId>", "gateway", "worker:<workerId>" */
    const char *request_id; /* may be NULL */
};

/* Cursor pagination: list functions return up to limit rows after `after` (an opaque cursor, ""
 * for the start) and write the cursor of the next page to next_cursor ("" at the end). */
#define STORE_CURSOR_LEN 32
/* The message and Session lists end a page early (with a cursor) once it holds this many bytes
 * of stored text (bodies, replies, errors, metadata), so that one answer stays bounded whatever
 * the page size asked for; a page always holds at least one item. */
#define STORE_PAGE_BYTES (4u << 20)

/* ==== apps ==== */

struct store_app {
    char id[STORE_ID_LEN];
    char name[STORE_NAME_LEN];
    int64_t keep_alive_seconds;
    int64_t vcpu_count;
    int64_t mem_size_mib;
    char driver[16];
    char image[STORE_NAME_LEN]; /* as the App names it: an Image's id or name, or "default" */
    int64_t max_attempts;
    char *command_json; /* JSON array of strings; [] runs the image's entrypoint + cmd */
    char *network_json; /* JSON object: the egress policy in its normal form (egress_policy.h) */
    int64_t created_at;
    int64_t updated_at;
    /* Optional host caps of its microVMs' VMM process, {"vmmMemoryMib":N,"vmmCpus":N} (each
     * optional); NULL: none. */
    char *limits_json;
    char image_id[STORE_ID_LEN];         /* the Image it resolved to ("" for "default") */
    char image_digest[STORE_DIGEST_LEN]; /* that Image's digest, or "default": the shape's image */
    char *env_json;                      /* JSON object of the App's environment ({} when none) */
};
void store_app_clear(struct store_app *a);
/* Zeroes a and sets what an App created without those fields gets (the same as the schema's
 * column defaults): keep-alive 60 s, 1 vCPU, 256 MiB, 3 attempts, the default image, on driver
 * (copied). Owns nothing: command_json and the other strings are the caller's to set. */
void store_app_defaults(struct store_app *a, const char *name, const char *driver);
void store_app_list_free(struct store_app *a, size_t n);

/* Which fields of an App a PATCH changes. */
struct store_app_patch {
    const char *name;
    const int64_t *keep_alive_seconds;
    const int64_t *vcpu_count;
    const int64_t *mem_size_mib;
    const char *driver;
    const char *image;
    const int64_t *max_attempts;
    const char *command_json;
    const char *limits_json; /* NULL: unchanged; "": removed */
    /* With image: the Image it resolved to ("" for "default") and its digest; both or neither. */
    const char *image_id;
    const char *image_digest;
    const char *env_json;
    const char *network_json; /* the normal form (egress_policy_json) */
};

/* A Sandbox's shape: what the warm pool keeps per kind. */
struct store_shape {
    char driver[16];
    char image[STORE_NAME_LEN];
    int64_t vcpu_count;
    int64_t mem_size_mib;
};

/* ==== api keys ==== */

struct store_key {
    char id[STORE_ID_LEN];
    char app_id[STORE_ID_LEN];
    char name[STORE_NAME_LEN];
    char prefix[16];
    int64_t created_at;
    int64_t revoked_at; /* 0: active */
};

/* ==== workspaces ==== */

struct store_workspace {
    char id[STORE_ID_LEN];
    char app_id[STORE_ID_LEN];
    char name[STORE_NAME_LEN];
    char path[512];
    int64_t size_mib; /* its filesystem's size; 0: a plain directory (made before sizes) */
    int64_t created_at;
    int64_t attached_sessions; /* live Sessions that name it */
};

/* ==== sessions ==== */

struct store_session {
    char id[STORE_ID_LEN];
    char app_id[STORE_ID_LEN];
    char name[STORE_NAME_LEN]; /* "" when none */
    char state[16];
    char sandbox_id[STORE_ID_LEN];        /* "" when none */
    int64_t keep_alive_seconds;           /* the override, 0 when the App's applies */
    int64_t effective_keep_alive_seconds; /* override or the App's */
    char workspace_id[STORE_ID_LEN];      /* "" when none */
    char *metadata_json;                  /* JSON object */
    int64_t activation_count;
    int64_t cpu_usec;
    int64_t mem_peak_bytes; /* -1 when never measured */
    char worker_id[STORE_ID_LEN];
    int64_t expires_at;
    int64_t stop_requested_at;
    int64_t created_at;
    int64_t updated_at;
    int64_t last_activity_at; /* 0: never */
};
void store_session_clear(struct store_session *s);
void store_session_list_free(struct store_session *s, size_t n);

struct store_session_patch {
    const char *metadata_json;         /* replaces the metadata object */
    const int64_t *keep_alive_seconds; /* 0 clears the override */
    /* A JSON merge patch (RFC 7396, an object) applied to the metadata in the same transaction,
     * instead of metadata_json; a result of more than metadata_max_bytes of compact JSON is
     * STORE_INVALID and nothing is written. */
    const char *metadata_merge_json;
    size_t metadata_max_bytes;
};

/* ==== messages ==== */

struct store_message {
    char id[STORE_ID_LEN];
    char session_id[STORE_ID_LEN];
    char app_id[STORE_ID_LEN];
    int64_t seq;
    char state[16];
    char *body_json;
    char *reply_json; /* NULL until completed */
    char *error;      /* NULL unless an attempt failed */
    int64_t attempts;
    int64_t max_attempts;
    char idempotency_key[256];
    char request_id[64];
    char sandbox_id[STORE_ID_LEN];
    char lease_owner[STORE_ID_LEN];
    int64_t lease_expires_at;
    int64_t not_before;
    int64_t created_at;
    int64_t updated_at;
    int64_t completed_at;
    int64_t chunks_dropped; /* read by message_get and message_list only (0 elsewhere) */
};
void store_message_clear(struct store_message *m);
void store_message_list_free(struct store_message *m, size_t n);

/* What a new message is: the enqueue request. */
struct store_enqueue {
    const char *app_id;
    const char *session_id;
    const char *body_json;
    const char *idempotency_key; /* may be NULL */
    const char *request_hash;    /* hex SHA-256 of the request, with an idempotency key */
};

/* How message_enqueue_async reports: m is the message on STORE_OK (the callback owns it). */
typedef void (*store_enqueue_done_fn)(void *arg, enum store_status status, struct store_message *m,
                                      bool replayed);

/* ==== the queue ==== */

/* How a worker's claim places idle Sessions on hosts (queue_claim_placed). The claim's result,
 * struct store_delivery, follows struct store_sandbox below (it may carry one). */
struct store_placement {
    int64_t grace_ms;     /* after this wait for the chosen host, any host may take the message */
    int64_t host_lost_ms; /* a host whose heartbeat is older is not chosen */
};

/* ==== sandboxes ==== */

struct store_sandbox {
    char id[STORE_ID_LEN];
    char state[16];
    struct store_shape shape;
    char image_hash[80];
    char worker_id[STORE_ID_LEN];
    char app_id[STORE_ID_LEN];     /* "" while warm */
    char session_id[STORE_ID_LEN]; /* "" while warm */
    int64_t pid;
    char jail_dir[512];
    char cgroup_path[512];
    char net_address[64];
    bool cold;
    int64_t boot_ms;
    int64_t cpu_usec;       /* -1 when not measured */
    int64_t mem_peak_bytes; /* -1 when not measured */
    char termination_reason[128];
    int64_t stop_requested_at;
    int64_t created_at;
    int64_t ready_at;
    int64_t claimed_at;
    int64_t terminated_at;
    /* The callback API (docs/callbacks.md): the SHA-256 (hex) of the Sandbox's bearer token, an
     * input of sandbox_set_runtime only ("" keeps what is recorded); its calls, counted in
     * batches, and the last one's time (0: none). */
    char callback_token_hash[65];
    int64_t callback_calls;
    int64_t callback_last_at;
};

/* A callback server's counts since its last flush (sandbox_callbacks_add). */
struct store_callback_count {
    char sandbox_id[STORE_ID_LEN];
    int64_t calls;
    int64_t last_at;
};

/* What a worker claims: the next message to deliver, with its Session and App. */
struct store_delivery {
    struct store_message message;
    struct store_session session;
    struct store_app app;
    /* queue_claim_with_sandbox only: whether it looked for a warm Sandbox (the Session was idle)
     * and the one it claimed for the Session in the same transaction (id "" when none was warm). */
    bool warm_claim_tried;
    struct store_sandbox sandbox;
};
void store_delivery_clear(struct store_delivery *d);

/* Usage measured at a Sandbox's end. */
struct store_usage {
    int64_t cpu_usec;       /* -1: not measured */
    int64_t mem_peak_bytes; /* -1: not measured */
};

struct store_pool_stat {
    struct store_shape shape;
    int64_t warm;
    int64_t booting;
    int64_t claimed; /* claimed or running */
    int64_t cold_activations;
    int64_t boot_failures;
};

/* ==== workers ==== */

/* A worker process as registered in the store. */
struct store_worker {
    char id[STORE_ID_LEN];
    char host[256];
    int64_t pid;
    int64_t started_at;
    int64_t heartbeat_at;
    char host_id[STORE_NAME_LEN]; /* the host it belongs to ("" for a worker before hosts) */
};

/* ==== hosts ==== */

/* A worker host: one machine's (or one host id's) workers, which share its kernel state. */
#define STORE_HOST_ID_LEN 128
struct store_host {
    char id[STORE_HOST_ID_LEN];
    char address[256];        /* "" when none */
    int64_t capacity;         /* Sessions it serves at once; placement skips it when full */
    int64_t registered_at;    /* (out) */
    int64_t heartbeat_at;     /* (out) */
    int64_t lost_at;          /* (out) 0: live */
    int64_t workers;          /* (out) its live workers */
    int64_t serving;          /* (out) Sessions its workers own (activating or active) */
    int64_t live_sandboxes;   /* (out) its Sandboxes not ended */
    int64_t callback_refused; /* (out) callback requests its servers refused for their token */
};

/* ==== audit and metrics ==== */

struct store_event {
    int64_t id;
    int64_t at;
    char actor[64];
    char kind[64];
    char object_type[16];
    char object_id[STORE_ID_LEN];
    char app_id[STORE_ID_LEN];
    char session_id[STORE_ID_LEN];
    char request_id[64];
    char *data_json; /* NULL or a JSON object */
};
void store_event_list_free(struct store_event *e, size_t n);

/* ==== egress denials ==== */

/* One firewall denial to record (egress_denials_record). */
struct store_egress_denial {
    char sandbox_id[STORE_ID_LEN];
    const char *data_json; /* the event's data object */
};

/* Upper bounds (ms) of the Sandbox duration histograms in struct store_counts. */
#define STORE_DURATION_BUCKETS 10
extern const int64_t store_duration_bounds_ms[STORE_DURATION_BUCKETS];

/* A histogram of durations: counts per bucket (not cumulative; the last bucket is +Inf). */
struct store_histogram {
    int64_t buckets[STORE_DURATION_BUCKETS + 1];
    int64_t count;
    int64_t sum_ms;
};

/* Counts for /metrics. */
struct store_counts {
    int64_t sessions_by_state[4]; /* idle, activating, active, deleted */
    int64_t messages_by_state[4]; /* queued, delivering, completed, failed */
    int64_t sandboxes_by_state[7];
    int64_t oldest_queued_at;        /* 0 when the queue is empty */
    int64_t retrying;                /* queued messages waiting for another attempt */
    int64_t callback_calls;          /* the Sandboxes' callback requests, as counted so far */
    struct store_histogram boot;     /* Sandboxes' boot to agent-ready */
    struct store_histogram lifetime; /* ended Sandboxes' claim to termination */
};
extern const char *const store_session_states[4];
extern const char *const store_message_states[4];
extern const char *const store_sandbox_states[7];

/* ==== streaming: an agent's partial output ==== */

/* One {"id":..,"chunk":..} line of an agent, as stored: its partial output for a message. */
struct store_chunk {
    int64_t index; /* 0, 1, 2, ... per message, in the order the agent printed them */
    int64_t at;    /* when the worker received it */
    char *value_json;
};
void store_chunk_list_free(struct store_chunk *c, size_t n);

/* ==== webhooks ==== */

#define STORE_URL_LEN 2048

/* An App's webhook endpoint. */
struct store_webhook {
    char id[STORE_ID_LEN];
    char app_id[STORE_ID_LEN];
    char url[STORE_URL_LEN];
    char *event_types_json; /* JSON array of kinds, "prefix.*" or "*" */
    char secret[80];        /* whsec_<base64>; only create and the worker's claim fill it */
    char state[16];         /* active, failing */
    int64_t consecutive_failures;
    int64_t created_at;
    int64_t updated_at;
};
void store_webhook_clear(struct store_webhook *w);
void store_webhook_list_free(struct store_webhook *w, size_t n);

/* One attempt to deliver an event to an endpoint. */
struct store_webhook_attempt {
    int64_t attempt; /* 1, 2, ... */
    int64_t at;
    int64_t status; /* HTTP status; 0: no answer */
    char error[256];
    int64_t duration_ms;
};

/* One event for one endpoint: the outbox row and its attempts. */
struct store_webhook_delivery {
    char id[STORE_ID_LEN]; /* the webhook-id header, the same on every attempt */
    char webhook_id[STORE_ID_LEN];
    int64_t event_id;
    char kind[64];
    char state[16]; /* pending, delivered, failed */
    int64_t attempts;
    int64_t next_attempt_at;
    int64_t last_status; /* 0: none */
    char last_error[256];
    int64_t created_at;
    int64_t finished_at; /* 0: pending */
    struct store_webhook_attempt *log;
    size_t n_log;
};
void store_webhook_delivery_list_free(struct store_webhook_delivery *d, size_t n);

/* What a worker claims: the endpoint (with its secret), its oldest pending delivery that is due,
 * and that delivery's event. The endpoint is leased to the worker until it records the attempt. */
struct store_webhook_job {
    struct store_webhook hook;
    char delivery_id[STORE_ID_LEN];
    int64_t attempt; /* the number of this attempt */
    struct store_event event;
};
void store_webhook_job_clear(struct store_webhook_job *j);

/* How one attempt went, for webhook_record. */
struct store_webhook_result {
    const char *webhook_id;
    const char *delivery_id;
    int64_t attempt;
    int64_t status; /* HTTP status; 0: no answer */
    const char *error;
    int64_t duration_ms;
    bool ok;               /* a 2xx answer */
    int64_t retry_at;      /* when to try again after a failure; 0: give up (failed) */
    int64_t failing_after; /* consecutive failed attempts that mark the endpoint failing */
};

/* ==== images ==== */

/* An Image: a userspace imported from an uploaded archive or pulled from a registry. */
struct store_image {
    char id[STORE_ID_LEN];
    char name[STORE_NAME_LEN];
    char state[16];                /* importing, ready, failed */
    char source[512];              /* "upload" or the registry reference */
    char upload_path[512];         /* the uploaded archive ("" for a pull, or once imported) */
    char upload_sha256[80];        /* "sha256:<hex>" of the uploaded body ("" for a pull) */
    int64_t upload_bytes;          /* its size (0 for a pull) */
    char problem_code[64];         /* "" unless failed */
    char *problem_detail;          /* NULL unless failed */
    char digest[STORE_DIGEST_LEN]; /* "" until ready */
    int64_t layer_count;
    int64_t unpacked_bytes;
    char *entrypoint_json; /* the image config's Entrypoint, a JSON array; NULL when none */
    char *cmd_json;        /* its Cmd, a JSON array; NULL when none */
    char *env_json;        /* its Env, a JSON array of "K=V"; NULL when none */
    char working_dir[512]; /* "" when none */
    char user[128];        /* "" when none */
    char manifest_digest[STORE_DIGEST_LEN]; /* a pull's image manifest ("" for an upload) */
    /* {"username","password"} for a pull: only image_claim_import fills it */
    char *credentials_json;
    char claimed_by[STORE_ID_LEN];
    int64_t created_at;
    int64_t ready_at; /* 0 while importing */
    int64_t last_used_at;
    int64_t app_count; /* (out) live Apps that name it */
};
void store_image_clear(struct store_image *im);
void store_image_list_free(struct store_image *im, size_t n);

/* How an import ended: ready with what the image is, or failed with a stable problem code. */
struct store_image_result {
    bool ok;
    const char *problem_code;   /* when !ok */
    const char *problem_detail; /* when !ok */
    const char *digest;         /* when ok */
    int64_t layer_count;
    int64_t unpacked_bytes;
    const char *entrypoint_json, *cmd_json, *env_json; /* NULL when the image has none */
    const char *working_dir, *user;                    /* NULL or "" when none */
    const char *manifest_digest; /* a pull's image manifest; NULL for an upload */
};

/* ==== the function table ==== */

struct store {
    void *cls; /* the backend's own state */

    void (*close)(struct store *st);

    /* ---- settings (settings.c) ---- */
    /* A key-value map that every process of one database shares. */
    enum store_status (*setting_get)(struct store *st, const char *key, char *out, size_t outlen);
    enum store_status (*setting_put)(struct store *st, const char *key, const char *value);
    /* Stores value under key unless the key has a value already; either way writes the value the
     * store now holds to out. Several gateways starting at once on one database agree on one
     * value (the first one's). */
    enum store_status (*setting_init)(struct store *st, const char *key, const char *value,
                                      char *out, size_t outlen);

    /* ---- apps (apps.c) ---- */
    /* Created and changed by the admin; the workers read their shapes. */
    enum store_status (*app_create)(struct store *st, const struct store_ctx *ctx,
                                    struct store_app *app /* in: fields; out: id, times */);
    enum store_status (*app_get)(struct store *st, const char *app_id, struct store_app *out);
    enum store_status (*app_list)(struct store *st, const char *after, size_t limit,
                                  struct store_app **out, size_t *n, char *next_cursor);
    enum store_status (*app_update)(struct store *st, const struct store_ctx *ctx,
                                    const char *app_id, const struct store_app_patch *patch,
                                    struct store_app *out);
    /* Refused with STORE_CONFLICT while the App has live Sessions or Workspaces. Revokes its keys.
     */
    enum store_status (*app_delete)(struct store *st, const struct store_ctx *ctx,
                                    const char *app_id);
    /* The distinct shapes of live Apps: what the warm pool keeps ready. */
    enum store_status (*app_shapes)(struct store *st, struct store_shape **out, size_t *n);

    /* ---- api keys (keys.c) ---- */
    enum store_status (*key_create)(struct store *st, const struct store_ctx *ctx,
                                    const char *app_id, const char *name, const char *prefix,
                                    const uint8_t hash[32], struct store_key *out);
    enum store_status (*key_list)(struct store *st, const char *app_id, struct store_key **out,
                                  size_t *n);
    enum store_status (*key_revoke)(struct store *st, const struct store_ctx *ctx,
                                    const char *app_id, const char *key_id);
    /* Finds an active (not revoked) key by the SHA-256 of the presented token. */
    enum store_status (*key_lookup)(struct store *st, const uint8_t hash[32],
                                    struct store_key *out);

    /* ---- workspaces (workspaces.c) ---- */
    enum store_status (*workspace_create)(struct store *st, const struct store_ctx *ctx,
                                          const char *app_id, const char *name, int64_t size_mib,
                                          const char *data_dir, struct store_workspace *out);
    enum store_status (*workspace_get)(struct store *st, const char *app_id, const char *ws_id,
                                       struct store_workspace *out);
    enum store_status (*workspace_list)(struct store *st, const char *app_id, const char *after,
                                        size_t limit, struct store_workspace **out, size_t *n,
                                        char *next_cursor);
    /* STORE_CONFLICT while a live Session names it. The caller removes the directory after OK. */
    enum store_status (*workspace_delete)(struct store *st, const struct store_ctx *ctx,
                                          const char *app_id, const char *ws_id,
                                          struct store_workspace *out);

    /* ---- sessions (sessions.c) ---- */
    /* The gateway creates, reads, patches and deletes them; the workers touch them. */
    /* With a name that already exists in the App: writes the existing Session and *created=false.
     */
    enum store_status (*session_create)(struct store *st, const struct store_ctx *ctx,
                                        const char *app_id, const char *name,
                                        int64_t keep_alive_seconds /* 0: App's */,
                                        const char *workspace_id /* NULL: none */,
                                        const char *metadata_json /* NULL: {} */,
                                        struct store_session *out, bool *created);
    enum store_status (*session_get)(struct store *st, const char *app_id, const char *session_id,
                                     struct store_session *out);
    enum store_status (*session_list)(struct store *st, const char *app_id, const char *after,
                                      size_t limit, struct store_session **out, size_t *n,
                                      char *next_cursor);
    enum store_status (*session_update)(struct store *st, const struct store_ctx *ctx,
                                        const char *app_id, const char *session_id,
                                        const struct store_session_patch *patch,
                                        struct store_session *out);
    /* Marks the Session deleted, fails its unfinished messages and asks the owning worker (through
     * stop_requested_at) to terminate its Sandbox. */
    enum store_status (*session_delete)(struct store *st, const struct store_ctx *ctx,
                                        const char *app_id, const char *session_id);
    /* Keep-alive deadline of the Session's current Sandbox; last_activity_at = now. */
    enum store_status (*session_touch)(struct store *st, const char *session_id,
                                       int64_t expires_at);

    /* ---- messages (messages.c, enqueue.c) ---- */
    /* The gateway writes and reads them; the queue below moves them through their states. */
    /* Commits the message durably before returning (group commit: concurrent callers share one
     * transaction). With an idempotency key already used in this Session: the original message and
     * *replayed=true when request_hash matches, STORE_CONFLICT when it does not. STORE_NOT_FOUND
     * when the Session does not exist in this App or is deleted. */
    enum store_status (*message_enqueue)(struct store *st, const struct store_ctx *ctx,
                                         const struct store_enqueue *req, struct store_message *out,
                                         bool *replayed);
    /* The same enqueue without blocking the caller: the request joins the next group commit and
     * done() runs on the store's committer thread once that COMMIT is on disk (or failed), with
     * the status message_enqueue would have returned; on STORE_OK *m is the message, which the
     * callback owns (store_message_clear). ctx and req (and the strings they point to) must stay
     * valid until done() runs. Returns STORE_OK when accepted (done() will run exactly once),
     * otherwise an error and done() never runs. The callback must not call into the store's
     * enqueue functions (it runs on the committer, which would wait for itself). */
    enum store_status (*message_enqueue_async)(struct store *st, const struct store_ctx *ctx,
                                               const struct store_enqueue *req,
                                               store_enqueue_done_fn done, void *arg);
    enum store_status (*message_get)(struct store *st, const char *app_id, const char *session_id,
                                     const char *message_id, struct store_message *out);
    enum store_status (*message_list)(struct store *st, const char *app_id, const char *session_id,
                                      const char *after, size_t limit, struct store_message **out,
                                      size_t *n, char *next_cursor);

    /* ---- the queue (queue.c) ---- */
    /* What the workers consume: claims with leases, and how each attempt ends. */
    /* Claims the next deliverable message: queued, not_before <= now, the lowest unfinished seq of
     * its Session, and its Session either idle or owned by this worker. Marks it delivering with a
     * lease until now + lease_ms, counts the attempt, and on an idle Session marks the Session
     * activating and owned by this worker. STORE_EMPTY when nothing is deliverable.
     * With placement, a message of an idle Session is claimed only when this worker's host is
     * where it belongs (a live host with a warm Sandbox of the App's shape, least loaded first;
     * else the least loaded live host; never a full one), or once the message has waited longer
     * than grace_ms for that host; messages of Sessions this worker owns are always claimable; and
     * STORE_EMPTY too when this worker was stopped. placement NULL: no placement (one host), the
     * first deliverable message. */
    enum store_status (*queue_claim_placed)(struct store *st, const struct store_ctx *ctx,
                                            const char *worker_id, int64_t lease_ms,
                                            const struct store_placement *placement,
                                            struct store_delivery *out);
    /* queue_claim_placed, and when the message's Session was idle (out->warm_claim_tried), one
     * of this worker's warm Sandboxes of its App's shape claimed for the Session in the same
     * transaction, as sandbox_claim_warm does: out->sandbox, id "" when none was warm (the worker
     * then boots one cold). One commit instead of two on the way to a warm activation. */
    enum store_status (*queue_claim_with_sandbox)(struct store *st, const struct store_ctx *ctx,
                                                  const char *worker_id, int64_t lease_ms,
                                                  const struct store_placement *placement,
                                                  struct store_delivery *out);
    /* Like queue_claim_placed without placement, but only messages of Sessions this worker
     * already owns (it is at its Sandbox limit and can serve only Sessions whose Sandbox it
     * holds). */
    enum store_status (*queue_claim_owned)(struct store *st, const struct store_ctx *ctx,
                                           const char *worker_id, int64_t lease_ms,
                                           struct store_delivery *out);
    enum store_status (*queue_extend_lease)(struct store *st, const char *message_id,
                                            const char *worker_id, int64_t lease_ms);
    /* Records the reply; the message becomes completed (only if still leased by worker_id,
     * otherwise STORE_CONFLICT: another delivery owns it now). */
    enum store_status (*queue_complete)(struct store *st, const struct store_ctx *ctx,
                                        const char *message_id, const char *worker_id,
                                        const char *sandbox_id, const char *reply_json);
    /* sandbox_mark_running and queue_complete in one transaction (events in that order): the
     * reply of the first message a claimed Sandbox answered. STORE_CONFLICT when either refuses
     * (the Session was deleted, the lease moved on); then nothing is written. */
    enum store_status (*queue_complete_first)(struct store *st, const struct store_ctx *ctx,
                                              const char *message_id, const char *worker_id,
                                              const char *sandbox_id, const char *session_id,
                                              const char *reply_json);
    /* A failed attempt: back to queued with not_before = now + backoff_ms, or failed with the
     * reason when attempts reached max_attempts (*final=true). */
    enum store_status (*queue_fail)(struct store *st, const struct store_ctx *ctx,
                                    const char *message_id, const char *worker_id,
                                    const char *sandbox_id, const char *reason, int64_t backoff_ms,
                                    bool *final);
    /* Gives back a lease without counting the attempt (the message was not handed to an agent,
     * e.g. at shutdown): delivering -> queued at once. STORE_CONFLICT if no longer ours. */
    enum store_status (*queue_release)(struct store *st, const struct store_ctx *ctx,
                                       const char *message_id, const char *worker_id);
    /* Leases that expired (their worker died or hung) go back to queued. *n: how many. */
    enum store_status (*queue_requeue_expired)(struct store *st, const struct store_ctx *ctx,
                                               size_t *n);
    /* Earliest time a queued message becomes deliverable (0: none queued), for the retry timer. */
    enum store_status (*queue_next_due)(struct store *st, int64_t *at);

    /* ---- sandboxes (sandboxes.c) ---- */
    /* The gateway reads them and asks for stops; the workers record their lifecycle, one transition
     * per function: booting -> warm -> claimed -> running, booting -> claimed (cold), then stopping
     * and terminated or failed. */
    enum store_status (*sandbox_get)(struct store *st, const char *app_id, const char *sandbox_id,
                                     struct store_sandbox *out);
    /* app_id "" lists all (admin); an App sees only the Sandboxes that served it. */
    enum store_status (*sandbox_list)(struct store *st, const char *app_id, const char *after,
                                      size_t limit, struct store_sandbox **out, size_t *n,
                                      char *next_cursor);
    /* Asks the owning worker to terminate the Sandbox now (sets stop_requested_at). */
    enum store_status (*sandbox_request_stop)(struct store *st, const struct store_ctx *ctx,
                                              const char *app_id, const char *sandbox_id,
                                              struct store_sandbox *out);
    enum store_status (*pool_stats)(struct store *st, struct store_pool_stat **out, size_t *n);
    enum store_status (*sandbox_insert)(struct store *st, const struct store_ctx *ctx,
                                        const char *worker_id, const struct store_shape *shape,
                                        bool cold, struct store_sandbox *out /* out: id */);
    /* Records what the driver made (pid, jail, cgroup, address, image hash) while booting. */
    enum store_status (*sandbox_set_runtime)(struct store *st, const struct store_sandbox *sb);
    /* booting -> warm, recording boot_ms. */
    enum store_status (*sandbox_mark_warm)(struct store *st, const struct store_ctx *ctx,
                                           const char *sandbox_id, int64_t boot_ms);
    /* warm -> claimed for this Session, in one transaction with the Session's activating ->
     * sandbox assignment: one of this worker's warm Sandboxes of the shape. STORE_EMPTY if none. */
    enum store_status (*sandbox_claim_warm)(struct store *st, const struct store_ctx *ctx,
                                            const char *worker_id, const struct store_shape *shape,
                                            const char *app_id, const char *session_id,
                                            struct store_sandbox *out);
    /* A cold Sandbox (booted for this Session): booting -> claimed for the Session. */
    enum store_status (*sandbox_assign)(struct store *st, const struct store_ctx *ctx,
                                        const char *sandbox_id, const char *app_id,
                                        const char *session_id);
    /* claimed -> running; the Session becomes active, activation_count + 1. */
    enum store_status (*sandbox_mark_running)(struct store *st, const struct store_ctx *ctx,
                                              const char *sandbox_id, const char *session_id);
    enum store_status (*sandbox_mark_stopping)(struct store *st, const struct store_ctx *ctx,
                                               const char *sandbox_id, const char *reason);
    /* -> terminated (or failed when failed=true) with reason and usage; if it served a Session
     * that still points at it, that Session goes back to idle (not if deleted) and accumulates
     * the usage, and its worker ownership is released. */
    enum store_status (*sandbox_finish)(struct store *st, const struct store_ctx *ctx,
                                        const char *sandbox_id, bool failed, const char *reason,
                                        const struct store_usage *usage);
    /* Non-terminal Sandboxes owned by worker_id ("" for all). */
    enum store_status (*sandbox_list_live)(struct store *st, const char *worker_id,
                                           struct store_sandbox **out, size_t *n);
    /* Live Sandboxes of this worker with stop_requested_at set, or serving a deleted Session. */
    enum store_status (*sandbox_list_stop_requested)(struct store *st, const char *worker_id,
                                                     struct store_sandbox **out, size_t *n);
    /* Sandboxes of host_id's workers that its loss at lost_at terminated in the store, with
     * `host lost` or the reason of a stop under way when the host died (their processes, jails,
     * cgroups and network state may still be on the machine). */
    enum store_status (*sandbox_list_host_lost)(struct store *st, const char *host_id,
                                                int64_t lost_at, struct store_sandbox **out,
                                                size_t *n);
    /* The callback API: the Sandbox whose token has this SHA-256 (hex), whatever its state, and
     * the host its worker belongs to ("" when unknown). STORE_NOT_FOUND for no such token. */
    enum store_status (*sandbox_by_callback_token)(struct store *st, const char *token_hash,
                                                   struct store_sandbox *out, char *host_id,
                                                   size_t host_len);
    /* Adds a callback server's counts: each Sandbox's calls and last call, and the requests
     * host_id refused for their token; one transaction. */
    enum store_status (*sandbox_callbacks_add)(struct store *st,
                                               const struct store_callback_count *counts, size_t n,
                                               const char *host_id, int64_t refused);

    /* ---- workers (workers.c) ---- */
    /* Worker processes: registration, liveness, adoption of a dead one's work. */
    enum store_status (*worker_register)(struct store *st, const char *worker_id, const char *host,
                                         int64_t pid);
    /* STORE_CONFLICT when the worker was adopted (taken for dead) or stopped: it must exit. */
    enum store_status (*worker_heartbeat)(struct store *st, const char *worker_id);
    enum store_status (*worker_stop)(struct store *st, const char *worker_id);
    /* Workers that have not stopped (stopped_at unset), this one included, so that a worker can
     * tell a dead peer by its pid on this host without waiting for its heartbeat to go stale. */
    enum store_status (*worker_list_active)(struct store *st, struct store_worker **out, size_t *n);
    /* The host worker_id belongs to ("" for a worker registered before hosts), stopped or not.
     * STORE_NOT_FOUND for an unknown worker. */
    enum store_status (*worker_host)(struct store *st, const char *worker_id, char *host_id,
                                     size_t len);
    /* Moves the Sandboxes and Sessions of a dead worker to new_owner (for reconciliation), in one
     * transaction that also requeues the dead worker's leases at once, sends its Sessions back to
     * idle and marks it stopped. STORE_NOT_FOUND when it is already stopped (another worker
     * adopted it first). */
    enum store_status (*worker_adopt)(struct store *st, const struct store_ctx *ctx,
                                      const char *dead_worker_id, const char *new_owner);

    /* ---- hosts (hosts.c) ---- */
    /* Several worker hosts on one store. */
    /* Registers (or refreshes) host->id with its address and capacity, heartbeat now, and records
     * that worker_id (registered before) runs on it. A host that had been declared lost comes
     * back: lost_at is cleared and *was_lost_at (may be NULL) says when it was lost (0: it was
     * not), so that its worker can reap what the loss left on this machine. */
    enum store_status (*host_register)(struct store *st, const struct store_ctx *ctx,
                                       const struct store_host *host, const char *worker_id,
                                       int64_t *was_lost_at);
    /* Heartbeats the host. STORE_CONFLICT when it was declared lost: its workers must exit. */
    enum store_status (*host_heartbeat)(struct store *st, const char *host_id);
    /* Every registered host, lost ones too, by id. */
    enum store_status (*host_list)(struct store *st, struct store_host **out, size_t *n);
    /* In one writer transaction, for each host other than self_host_id whose heartbeat is older
     * than stale_ms and that is not lost yet: lost_at = now; its live Sandboxes are terminated
     * with reason "host lost"; its workers are stopped; the messages they were delivering go back
     * to the queue (the attempt counts, as for a lost worker); their Sessions go back to idle so
     * that their next message activates on another host. *n_lost (may be NULL): how many hosts.
     * Reads first without the write lock, so that the common case (nothing lost) writes nothing. */
    enum store_status (*host_declare_lost)(struct store *st, const struct store_ctx *ctx,
                                           const char *self_host_id, int64_t stale_ms,
                                           size_t *n_lost);

    /* ---- images (images.c): the admin's, and the workers' that import them ---- */
    /* Inserts an importing Image from im's name, source, upload_path, upload_sha256,
     * upload_bytes and credentials_json (may be NULL); writes its id and times back.
     * STORE_CONFLICT when the name is taken. */
    enum store_status (*image_create)(struct store *st, const struct store_ctx *ctx,
                                      struct store_image *im);
    /* By id, or by name when no id matches; deleted Images are STORE_NOT_FOUND. */
    enum store_status (*image_get)(struct store *st, const char *id_or_name,
                                   struct store_image *out);
    enum store_status (*image_list)(struct store *st, const char *after, size_t limit,
                                    struct store_image **out, size_t *n, char *next_cursor);
    /* Marks it deleted (its name becomes free). STORE_CONFLICT while a live App names it. out
     * (may be NULL) is the Image as it was, so that the caller can remove its upload. */
    enum store_status (*image_delete)(struct store *st, const struct store_ctx *ctx,
                                      const char *image_id, struct store_image *out);
    /* Claims the oldest importing Image that no live worker is importing (unclaimed, or claimed
     * by a worker that stopped or whose heartbeat is older than stale_ms) for worker_id. out
     * carries the credentials. STORE_EMPTY when there is none. */
    enum store_status (*image_claim_import)(struct store *st, const struct store_ctx *ctx,
                                            const char *worker_id, int64_t stale_ms,
                                            struct store_image *out);
    /* Ends worker_id's import: ready or failed as res says, with its event (image.imported or
     * image.failed); clears the credentials and the upload path. STORE_CONFLICT when the Image
     * is no longer importing under this worker (deleted, or reclaimed). */
    enum store_status (*image_finish_import)(struct store *st, const struct store_ctx *ctx,
                                             const char *image_id, const char *worker_id,
                                             const struct store_image_result *res);
    /* last_used_at = now for the Images of this digest (a Sandbox booted on it). */
    enum store_status (*image_touch)(struct store *st, const char *digest);
    /* The digests that a host's cache must keep: those of Images that live Apps name, and the
     * images of live Sandboxes (warm ones included). */
    enum store_status (*image_digests_in_use)(struct store *st, char (**digests)[STORE_DIGEST_LEN],
                                              size_t *n);
    /* For a ready, pulled Image of this digest: its source reference and the manifest digest it
     * was pulled by, so that another host can pull the same image. STORE_NOT_FOUND when no pulled
     * Image has the digest. */
    enum store_status (*image_pull_source)(struct store *st, const char *digest, char *source,
                                           size_t sourcelen, char *manifest_digest,
                                           size_t manifestlen);
    /* The digests of ready, not deleted Images (what a host's cache may hold), least recently
     * used (last_used_at, else ready_at) first. */
    enum store_status (*image_digests_ready)(struct store *st, char (**digests)[STORE_DIGEST_LEN],
                                             size_t *n);

    /* ---- audit and metrics (events.c, counts.c) ---- */
    /* session_id NULL: all of the App's events (app_id "": everything). after: last event id. */
    enum store_status (*event_list)(struct store *st, const char *app_id, const char *session_id,
                                    int64_t after, size_t limit, struct store_event **out,
                                    size_t *n);
    enum store_status (*counts)(struct store *st, struct store_counts *out);

    /* ---- streaming: partial output (chunks.c) and the live event feed (event_feed.c) ---- */
    /* Worker: stores values[0..n) (JSON texts) as chunks first_index.. of message_id and adds
     * dropped to the message's chunks_dropped, in one transaction, only while worker_id holds
     * the message's lease (STORE_CONFLICT otherwise, and nothing is stored). */
    enum store_status (*chunk_append)(struct store *st, const char *message_id,
                                      const char *worker_id, int64_t first_index,
                                      const char *const *values, size_t n, int64_t dropped);
    /* Worker: how many chunks message_id has and their bytes (where a new attempt continues). */
    enum store_status (*chunk_totals)(struct store *st, const char *message_id, int64_t *count,
                                      int64_t *bytes);
    /* Gateway: the message's chunks with index >= from, oldest first, at most limit, and its
     * chunks_dropped (dropped may be NULL). App- and Session-scoped like message_get:
     * STORE_NOT_FOUND for an unknown message, another App's or a deleted Session's. */
    enum store_status (*chunk_list)(struct store *st, const char *app_id, const char *session_id,
                                    const char *message_id, int64_t from, size_t limit,
                                    struct store_chunk **out, size_t *n, int64_t *dropped);
    /* Gateway: the newest event's id (0 when none), so that a waiting event stream reads the
     * list again only when something was committed. */
    enum store_status (*event_last_id)(struct store *st, int64_t *id);
    /* Gateway: where a feed that starts now (no cursor) begins: an id such that every event
     * committed from now on is after it. The newest event's id on SQLite; on PostgreSQL, where
     * writers commit ids out of order, the settled id (it waits for the writers in progress, and
     * is STORE_BUSY when one of them is stuck). */
    enum store_status (*event_feed_start)(struct store *st, int64_t *id);

    /* ---- webhooks (webhooks.c) ---- */
    /* Admin: a new endpoint of app_id (STORE_NOT_FOUND for an unknown or deleted App) for the
     * events committed from now on; out gets it with its secret. */
    enum store_status (*webhook_create)(struct store *st, const struct store_ctx *ctx,
                                        const char *app_id, const char *url,
                                        const char *event_types_json, const char *secret,
                                        struct store_webhook *out);
    enum store_status (*webhook_get)(struct store *st, const char *app_id, const char *webhook_id,
                                     struct store_webhook *out);
    enum store_status (*webhook_list)(struct store *st, const char *app_id,
                                      struct store_webhook **out, size_t *n);
    /* Its pending deliveries are not attempted any more; the record stays. */
    enum store_status (*webhook_delete)(struct store *st, const struct store_ctx *ctx,
                                        const char *app_id, const char *webhook_id);
    /* The endpoint's deliveries with their attempts, oldest event first, after event id `after`
     * (the cursor). */
    enum store_status (*webhook_delivery_list)(struct store *st, const char *app_id,
                                               const char *webhook_id, int64_t after, size_t limit,
                                               struct store_webhook_delivery **out, size_t *n,
                                               char *next_cursor);
    /* Worker: moves the events committed since each live endpoint's cursor that it wants into
     * the outbox (one transaction; at most `limit` events per endpoint). *added: deliveries. */
    enum store_status (*webhook_fill)(struct store *st, size_t limit, size_t *added);
    /* Worker: leases an endpoint that no other worker holds (or whose lease expired) and whose
     * oldest pending delivery is due, until now + lease_ms. STORE_EMPTY when none. */
    enum store_status (*webhook_claim)(struct store *st, const char *worker_id, int64_t lease_ms,
                                       struct store_webhook_job *out);
    /* Worker: records the attempt and releases the lease (STORE_CONFLICT when the lease was lost
     * meanwhile: nothing is recorded, the delivery stays pending). */
    enum store_status (*webhook_record)(struct store *st, const char *worker_id,
                                        const struct store_webhook_result *res);
    /* Worker: the earliest time a pending delivery of a live endpoint comes due (0: none). */
    enum store_status (*webhook_next_due)(struct store *st, int64_t *at);
    /* ---- Sandbox bounds a host cannot apply (workers.unbounded; bounds.c) ---- */
    /* Records what worker_id's drivers cannot bound on its host: "driver:bound" items,
     * comma-separated ("process:cpu"), "" when every bound applies. */
    enum store_status (*worker_set_unbounded)(struct store *st, const char *worker_id,
                                              const char *unbounded);
    /* The distinct items that live workers recorded; *out (n strings) for store_strings_free. */
    enum store_status (*sandbox_unbounded)(struct store *st, char ***out, size_t *n);
    /* ---- egress denials (egress_denials.c; the worker that reads the host's firewall log) ---- */
    /* Records n events `sandbox.egress_denied` in one transaction, each with the App and Session
     * its Sandbox serves (none for a warm one) and data_json as its data. */
    enum store_status (*egress_denials_record)(struct store *st, const struct store_ctx *ctx,
                                               const struct store_egress_denial *v, size_t n);
};

/* Frees what sandbox_unbounded returned. */
void store_strings_free(char **items, size_t n);

/* ==== opening a store ==== */

/* Opens the backend that `store` names: "sqlite" (the file sqlite_path, on one host) or a
 * postgres:// (postgresql://) libpq connection URL (several hosts). busy_timeout_ms applies to
 * both (how long a writer waits for the write lock before STORE_BUSY); synchronous to SQLite. On
 * failure writes a human-readable reason to err and returns NULL. */
struct store *store_open(const char *store, const char *sqlite_path, int busy_timeout_ms,
                         const char *synchronous, char *err, size_t errlen);

/* Opens the PostgreSQL backend on a libpq connection URL (applying migrations under an advisory
 * lock). busy_timeout_ms becomes the sessions' lock_timeout (unless the URL's options or the
 * role's or database's settings give one). A database newer than this binary is refused. */
struct store *store_pg_open(const char *url, int busy_timeout_ms, char *err, size_t errlen);

/* Opens the SQLite backend on path (creating it and applying migrations). On failure writes a
 * human-readable reason to err and returns NULL. A database newer than this binary is refused. */
struct store *store_sqlite_open(const char *path, int busy_timeout_ms, const char *synchronous,
                                char *err, size_t errlen);

/* The schema version this binary's migrations reach. */
int store_schema_version(void);

#endif
