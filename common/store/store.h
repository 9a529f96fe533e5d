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
 * The records are in store_records.h, grouped by table in the order of the function table's
 * sections.
 */
#ifndef SBX_STORE_H
#define SBX_STORE_H

#include "store_records.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
