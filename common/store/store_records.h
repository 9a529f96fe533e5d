/*
 * store_records.h: the records the store's operations take and return (store.h), grouped by table
 * in the order of the per-table headers, with their statuses, ids, limits and release functions.
 *
 * For a header that only names records (a driver's, the worker's): it does not declare the
 * operations; include the table's store_<table>.h (or store.h, all of them) to call them.
 */
#ifndef SBX_STORE_RECORDS_H
#define SBX_STORE_RECORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ==== statuses, ids, callers and cursors ==== */

struct store; /* an open store (store.h) */

enum store_status {
    STORE_OK = 0,
    STORE_NOT_FOUND, /* no such object (or it belongs to another App) */
    STORE_CONFLICT,  /* uniqueness or state conflict (name taken, attached Workspace, ...) */
    STORE_BUSY,      /* the database stayed locked beyond the busy timeout */
    STORE_FULL,      /* the disk is full */
    STORE_INVALID,   /* a value the schema refuses */
    STORE_EMPTY,     /* nothing to claim (queue or pool) */
    STORE_ERROR,     /* anything else; logged by the store */
    /* an App's quota or the Workspaces' disk refused it (struct store_quotas) */
    STORE_OVER_QUOTA,
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

/* An App's quotas (migration 0016, docs/tenants.md), in the order of store_app.quotas. Each is
 * the App's own value, or the host's default when the App has none (-1); 0 is no bound. */
enum store_quota {
    STORE_QUOTA_LIVE_SANDBOXES, /* Sandboxes claimed by or running its Sessions */
    STORE_QUOTA_SESSIONS,       /* its live Sessions: every state but deleted */
    STORE_QUOTA_WORKSPACES,     /* its Workspaces that are not deleted */
    STORE_QUOTA_WORKSPACE_MIB,  /* the sum of their sizeMib */
    STORE_QUOTA_KEEP_ALIVE,     /* the largest keepAliveSeconds of the App and its Sessions */
    STORE_QUOTA_COUNT,
    /* Not an App's: the Workspaces' reservation on the data filesystem (disk_budget_mib). */
    STORE_QUOTA_DISK = STORE_QUOTA_COUNT,
};
#define STORE_QUOTA_KEEP (-2) /* in store_app_patch.quotas: leave that quota as it is */

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
    int64_t quotas[STORE_QUOTA_COUNT];   /* enum store_quota's order; -1: the host's default */
    /* Pre-started agents (docs/worker.md): with prestart, each worker keeps warm_pool Sandboxes
     * whose agent already runs the App's command; readiness_line: one is offered to a claim only
     * once its agent printed {"type":"ready"}. definition_rev counts the changes of what they are
     * started from (driver, image, size, command, env). */
    bool prestart;
    int64_t warm_pool;
    bool readiness_line;
    int64_t definition_rev;
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
    /* With env_json: the names sbx sets for an App with secrets (NULL-terminated), which its env
     * may not set then, as it may not set a secret's name. A refusal (STORE_INVALID) writes the
     * name into env_clash (env_clash_len bytes). */
    const char *const *env_reserved;
    char *env_clash;
    size_t env_clash_len;
    const char *network_json; /* the normal form (egress_policy_json) */
    /* NULL: unchanged; else STORE_QUOTA_COUNT values: STORE_QUOTA_KEEP (that one unchanged), -1
     * (back to the host's default) or the quota (0: no bound). */
    const int64_t *quotas;
    const bool *prestart;
    const int64_t *warm_pool;
    const char *readiness; /* "none" or "line" */
};

/* The host's side of the quota checks the store makes inside the transaction of a create or
 * update (the *_within functions), and what a refusal (STORE_OVER_QUOTA) hit. */
struct store_quotas {
    int64_t defaults[STORE_QUOTA_COUNT]; /* the host's default of each quota (0: no bound) */
    /* Workspace creates: the MiB the data filesystem can promise to all the store's Workspaces
     * together (their sizes summed); -1: not checked. */
    int64_t disk_budget_mib;
    /* Out, on STORE_OVER_QUOTA: which (an enum store_quota, or STORE_QUOTA_DISK), its value and
     * what was in use without the refused request. */
    int hit;
    int64_t limit, used;
};

/* An App's use of its quotas, beside their values (the App's own, or -1 for the default). */
struct store_app_usage {
    char app_id[STORE_ID_LEN];
    int64_t quotas[STORE_QUOTA_COUNT];
    int64_t used[STORE_QUOTA_COUNT]; /* used[STORE_QUOTA_KEEP_ALIVE] is always 0 */
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
    int64_t
        chunks_dropped; /* read by store_message_get and store_message_list only (0 elsewhere) */
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

/* How store_message_enqueue_async reports: m is the message on STORE_OK (the callback owns it). */
typedef void (*store_enqueue_done_fn)(void *arg, enum store_status status, struct store_message *m,
                                      bool replayed);

/* ==== the queue ==== */

/* How a worker's claim places idle Sessions on hosts (store_queue_claim_placed). The claim's
 * result, struct store_delivery, follows struct store_sandbox below (it may carry one). */
struct store_placement {
    int64_t grace_ms;     /* after this wait for the chosen host, any host may take the message */
    int64_t host_lost_ms; /* a host whose heartbeat is older is not chosen */
    /* An App's live-Sandbox quota when its own (apps.quota_live_sandboxes) is NULL; 0: no bound.
     * Without placement (NULL), 0. */
    int64_t default_live_quota;
};

/* An App with a message waiting for a Sandbox (store_queue_waiting_app). */
struct store_waiting_app {
    char app_id[STORE_ID_LEN];
    int64_t live;  /* its Sessions holding a Sandbox (activating or active), on every worker */
    int64_t quota; /* its effective live-Sandbox quota; 0: no bound */
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
     * input of store_sandbox_set_runtime only ("" keeps what is recorded); its calls, counted in
     * batches, and the last one's time (0: none). */
    char callback_token_hash[65];
    int64_t callback_calls;
    int64_t callback_last_at;
    /* Processes the OOM killer ended inside it while its agent went on (sandbox_oom_killed). */
    int64_t oom_kills;
    /* A pre-started Sandbox: the App's definition_rev it was started with (0: not pre-started);
     * its app_id is set from its boot on. */
    int64_t prestart_rev;
};

/* A callback server's counts since its last flush (store_sandbox_callbacks_add). */
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
    /* store_queue_claim_with_sandbox only: whether it looked for a warm Sandbox (the Session was
     * idle) and the one it claimed for the Session in the same transaction (id "" when none was
     * warm). */
    bool warm_claim_tried;
    struct store_sandbox sandbox;
    /* The worker's: the gateway's commit batch the message was at most in (commit_watermark.h);
     * its line goes to the agent once that batch is on disk. 0: nothing to wait for. */
    uint64_t durable_gen;
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

/* One App's pool of pre-started Sandboxes (store_pool_app_stats): counts over every Sandbox ever
 * pre-started for it. */
struct store_pool_app_stat {
    char app_id[STORE_ID_LEN];
    bool prestart;
    int64_t warm_pool;
    bool readiness_line;
    int64_t warm;       /* ready, offered to claims */
    int64_t starting;   /* booting, or its agent started and not ready yet */
    int64_t claimed;    /* claimed or running: serving the one Session each ever serves */
    int64_t not_ready;  /* ended because their agent was not ready in time */
    int64_t retired;    /* ended because the App's definition changed or its pool shrank */
    int64_t ended_warm; /* ended without a claim for another reason (the agent exited, ...) */
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

/* One firewall denial to record (store_egress_denials_record). */
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

/* How one attempt went, for store_webhook_record. */
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
    /* {"username","password"} for a pull: only store_image_claim_import fills it */
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

#endif
