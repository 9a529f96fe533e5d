/*
 * store_sql.h: what the store's per-table files (common/store/sql/<table>.c) share, on top of the
 * engines' statement API (sql.h): running a statement to its end, transactions, one-row and
 * paged reads, the audit event every mutation appends, the row readers that several tables' files
 * need, and the steps one table's file takes inside another's transaction. Each table's file
 * defines the plain store_<op> functions of its store_<table>.h.
 *
 * Private to the store, like sql.h: the gateway and the workers see only store.h.
 *
 * Conventions the table files keep: every mutation runs in one writer transaction (sql_begin; the
 * write lock is taken at BEGIN) together with its audit event(s), ended by sql_end; a function
 * named *_in_tx runs inside its caller's transaction; list cursors are the decimal rowid (for
 * messages: the seq) of the last row of the previous page.
 */
#ifndef SBX_STORE_SQL_H
#define SBX_STORE_SQL_H

#include "sql.h"

#include <jansson.h>

/* ---- statements ---- */

/* An integer column, or dflt when it is NULL. */
static inline int64_t sql_col_int64_or(struct sql_stmt *s, int col, int64_t dflt)
{
    return sql_col_null(s, col) ? dflt : sql_col_int64(s, col);
}

/* Column helpers: copy text into a fixed buffer ("" for NULL), or strdup it (NULL for NULL). */
void sql_col_copy(struct sql_stmt *s, int col, char *out, size_t outlen);
char *sql_col_dup(struct sql_stmt *s, int col);

/* Runs a bound statement that returns no rows and resets it. s NULL (sql_stmt failed):
 * STORE_ERROR. */
enum store_status sql_step_done(struct store *st, struct sql_stmt *s);

/* A state transition: runs an UPDATE whose WHERE names the state(s) it starts from, like
 * sql_step_done, and returns if_unchanged when it changed no row (the row is not, or no longer, in
 * such a state, or does not exist). */
enum store_status sql_step_change(struct store *st, struct sql_stmt *s,
                                  enum store_status if_unchanged);

/* Runs a one-integer query ("SELECT count(*) ...") into *out; STORE_NOT_FOUND without a row. */
enum store_status sql_step_int(struct store *st, struct sql_stmt *s, int64_t *out);

/* Ends the writer transaction that sql_begin opened: COMMIT when rc is STORE_OK, otherwise
 * ROLLBACK. Returns the final status (a failed COMMIT's). */
enum store_status sql_end(struct store *st, enum store_status rc);

/* Binds an App scope: "" or NULL binds "" (any App). */
void sql_bind_app(struct sql_stmt *s, int idx, const char *app_id);

/* ---- reads ---- */

/* One page of a list (limit SIZE_MAX: every row): steps s (bound, asking for limit + 1 rows) and
 * turns each row into an item of elem_size with from_row, which returns the row's cursor key. A row
 * beyond limit only means that there is a next page: its cursor is the last item's key. out is the
 * caller's `struct store_x **`. On failure the items read so far are released with free_items. */
struct sql_page {
    size_t elem_size;
    int64_t (*from_row)(struct sql_stmt *s, void *item);
    void (*free_items)(void *items, size_t n);
};
enum store_status sql_read_page(struct store *st, struct sql_stmt *s, size_t limit,
                                const struct sql_page *pg, void *out, size_t *n, char *next_cursor);
/* The same, and the page also ends (early, with a cursor) once its items hold STORE_PAGE_BYTES
 * as item_bytes counts them (NULL: by count only); it always holds at least one item. */
enum store_status sql_read_page_bounded(struct store *st, struct sql_stmt *s, size_t limit,
                                        const struct sql_page *pg,
                                        size_t (*item_bytes)(const void *item), void *out,
                                        size_t *n, char *next_cursor);

/* Every row s (bound) returns, as sql_read_page without a limit or a cursor. */
enum store_status sql_read_all(struct store *st, struct sql_stmt *s, const struct sql_page *pg,
                               void *out, size_t *n);

/* Steps s (bound) for at most one row: STORE_OK with the row in out (through pg->from_row, on a
 * zeroed item), STORE_NOT_FOUND without one. Resets s. */
enum store_status sql_read_one(struct store *st, struct sql_stmt *s, const struct sql_page *pg,
                               void *out);

/* free_items for items that hold no heap memory of their own. */
void sql_free_items(void *items, size_t n);

/* A cursor as the lists take it ("" or NULL: the start): its key, or -1 when malformed. */
int64_t sql_cursor_parse(const char *after);

/* One page of an App-scoped list whose statement sql takes (?1 the App id or "", ?2 the cursor's
 * key, ?3 the row limit): what the workspace, Session and Sandbox lists share. A malformed cursor
 * is STORE_INVALID. */
enum store_status sql_app_list_page(struct store *st, const char *sql, const char *app_id,
                                    const char *after, size_t limit, const struct sql_page *pg,
                                    void *out, size_t *n, char *next_cursor);
/* The same, bounded in bytes as sql_read_page_bounded. */
enum store_status sql_app_list_page_bounded(struct store *st, const char *sql, const char *app_id,
                                            const char *after, size_t limit,
                                            const struct sql_page *pg,
                                            size_t (*item_bytes)(const void *item), void *out,
                                            size_t *n, char *next_cursor);

/* The ids (the first column, STORE_ID_LEN each) of every row s (bound) returns. */
enum store_status sql_read_ids(struct store *st, struct sql_stmt *s, char (**ids)[STORE_ID_LEN],
                               size_t *n);

/* ---- audit events ---- */

/* Appends an audit event inside the caller's transaction. data_json may be NULL. */
enum store_status sql_event(struct store *st, const struct store_ctx *ctx, const char *kind,
                            const char *object_type, const char *object_id, const char *app_id,
                            const char *session_id, const char *data_json);

/* sql_event with its data as a JSON object (jansson escapes the strings in it), which it takes
 * over (data may be NULL: no data). */
enum store_status sql_event_json(struct store *st, const struct store_ctx *ctx, const char *kind,
                                 const char *object_type, const char *object_id, const char *app_id,
                                 const char *session_id, json_t *data);

/* The highest event id a reader paging by id (after its cursor `after`) may return without ever
 * skipping an event that commits later with a smaller id (event_horizon.c): INT64_MAX on SQLite;
 * on PostgreSQL it waits for the writers in progress, and is `after` (nothing new) if one of
 * them is stuck. Not inside a REPEATABLE READ transaction: the read that follows must see what
 * committed meanwhile. */
enum store_status sql_events_settled(struct store *st, int64_t after, int64_t *upto);

/* ---- the group commit on PostgreSQL (enqueue_pg.c, used by enqueue.c) ---- */

/* A request passed over this many times because another transaction held its Session's row is
 * then waited for. */
#define ENQUEUE_PG_MAX_DEFERS 4

/* Locks the rows of these Sessions (sorted by id, no duplicates) until COMMIT, in id order. wait:
 * waits for each. Otherwise passes over the rows another transaction holds and sets skipped[i]
 * for those; a Session that does not exist is not skipped. */
enum store_status sql_enqueue_pg_lock(struct store *st, const char *const *session_ids, size_t n,
                                      bool wait, bool *skipped);

/* One request of sql_enqueue_pg_batch: in, and its status and message out. */
struct sql_enqueue_pg_item {
    const struct store_ctx *ctx;
    const struct store_enqueue *req; /* without an Idempotency-Key */
    struct store_message *out;
    /* STORE_OK; STORE_NOT_FOUND: no such Session in the App; STORE_BUSY: its Session was
     * passed over (not written) */
    enum store_status status;
};
/* In one statement, inside the caller's transaction: locks the rows of these Sessions until
 * COMMIT as sql_enqueue_pg_lock does without waiting (rows this transaction holds already are
 * never passed over; skipped[i] as there), and writes the requests whose Session it holds, in
 * their order. Every request's Session must be among session_ids. On failure nothing of it is
 * written and nothing locked (if the caller took a savepoint before it), every item has the
 * failure's status and no Session is marked skipped. last: the statement ends the transaction
 * (sql_step_then_commit): on success the caller's next call is sql_commit(), which reports
 * whether it committed. */
enum store_status sql_enqueue_pg_batch(struct store *st, const char *const *session_ids,
                                       size_t nsess, bool *skipped,
                                       struct sql_enqueue_pg_item *items, size_t n, bool last);

/* ---- rows that several tables' files read ---- */

/* The columns (with the aliases a, s and m) and their readers, which start at column c (a
 * statement may select several objects in one row). NULL times read as 0, NULL usage as -1 (not
 * measured). SQL_SESSION_COLS needs the Session's App joined as a (for the effective keep-alive).
 */
#define SQL_APP_COLS                                                                               \
    "a.id, a.name, a.keep_alive_seconds, a.vcpu_count, a.mem_size_mib, a.driver, a.image, "        \
    "a.max_attempts, a.command, a.created_at, a.updated_at, a.limits, a.image_id, "                \
    "a.image_digest, a.env, a.network, a.quota_live_sandboxes, a.quota_sessions, "                 \
    "a.quota_workspaces, a.quota_workspace_mib, a.quota_keep_alive_seconds, a.prestart, "          \
    "a.warm_pool, a.readiness, a.definition_rev"
#define SQL_SESSION_COLS                                                                           \
    "s.id, s.app_id, s.name, s.state, s.sandbox_id, s.keep_alive_seconds, "                        \
    "COALESCE(s.keep_alive_seconds, a.keep_alive_seconds), s.workspace_id, s.metadata, "           \
    "s.activation_count, s.cpu_usec, s.mem_peak_bytes, s.worker_id, s.expires_at, "                \
    "s.stop_requested_at, s.created_at, s.updated_at, s.last_activity_at"
#define SQL_MESSAGE_COLS                                                                           \
    "m.id, m.session_id, m.app_id, m.seq, m.state, m.body, m.reply, m.error, m.attempts, "         \
    "m.max_attempts, m.idempotency_key, m.request_id, m.sandbox_id, m.lease_owner, "               \
    "m.lease_expires_at, m.not_before, m.created_at, m.updated_at, m.completed_at"
void sql_app_from_row(struct sql_stmt *s, int c, struct store_app *a);         /* apps.c */
void sql_session_from_row(struct sql_stmt *s, int c, struct store_session *o); /* sessions.c */
void sql_message_from_row(struct sql_stmt *s, int c, struct store_message *m); /* messages.c */

/* A Sandbox row: SELECT SQL_SANDBOX_COLS FROM sandboxes ..., read with sql_sandbox_page (from_row
 * returns the rowid, the lists' cursor). NULL usage reads as -1 (not measured), NULL times as 0.
 * (sandboxes.c) */
#define SQL_SANDBOX_COLS                                                                           \
    "rowid, id, state, driver, image, image_hash, vcpu_count, mem_size_mib, worker_id, app_id, "   \
    "session_id, pid, jail_dir, cgroup_path, net_address, cold, boot_ms, cpu_usec, "               \
    "mem_peak_bytes, termination_reason, stop_requested_at, created_at, ready_at, claimed_at, "    \
    "terminated_at, callback_calls, callback_last_at, oom_kills, prestart_rev "
extern const struct sql_page sql_sandbox_page;
/* How many columns SQL_SANDBOX_COLS names: the index of a column selected after them. */
#define SQL_SANDBOX_NCOLS 29

/* ---- steps that one table's file takes inside another's transaction ---- */

/* STORE_OK when the App exists and is not deleted. (apps.c) */
enum store_status sql_app_exists(struct store *st, const char *app_id);

/* The Session goes back to idle and stops pointing at its Sandbox; its worker lets go of it
 * (nothing when it is deleted). (sessions.c) */
enum store_status sql_session_to_idle_in_tx(struct store *st, const struct store_ctx *ctx,
                                            const char *session_id, const char *app_id,
                                            const char *sandbox_id);
/* Points the Session at its new Sandbox (still activating) while worker_id owns it;
 * STORE_CONFLICT when it was deleted meanwhile or is no longer that worker's. (sessions.c) */
enum store_status sql_session_point_at_in_tx(struct store *st, const char *session_id,
                                             const char *sandbox_id, const char *worker_id);

/* Requeues (or fails, when out of attempts) each leased message of ids, whoever holds it: the
 * attempt ends like any failed attempt, with reason. (queue.c) */
enum store_status sql_queue_requeue_in_tx(struct store *st, const struct store_ctx *ctx,
                                          char (*ids)[STORE_ID_LEN], size_t n, const char *reason);

/* Claims one of worker_id's warm Sandboxes of the shape for the Session, as
 * store_sandbox_claim_warm does (store_sandboxes.h); STORE_EMPTY when none is warm. (sandboxes.c)
 */
enum store_status sql_sandbox_claim_warm_in_tx(struct store *st, const struct store_ctx *ctx,
                                               const char *worker_id,
                                               const struct store_shape *shape, const char *app_id,
                                               int64_t prestart_rev, const char *session_id,
                                               struct store_sandbox *out);
/* claimed -> running and the Session active, as store_sandbox_mark_running does
 * (store_sandboxes.h). (sandboxes.c) */
enum store_status sql_sandbox_mark_running_in_tx(struct store *st, const struct store_ctx *ctx,
                                                 const char *sandbox_id, const char *session_id);

/* Ends a Sandbox as store_sandbox_finish does (store_sandboxes.h). (sandboxes.c) */
enum store_status sql_sandbox_finish_in_tx(struct store *st, const struct store_ctx *ctx,
                                           const char *sandbox_id, bool failed, const char *reason,
                                           const struct store_usage *usage);

/* Lets go of everything a worker that is gone held (see store_worker_adopt in store_workers.h) but
 * its Sandboxes; *requeued grows by the leases requeued. STORE_NOT_FOUND when it was stopped
 * already. (workers.c) */
enum store_status sql_worker_release_in_tx(struct store *st, const struct store_ctx *ctx,
                                           const char *worker_id, int64_t now, const char *reason,
                                           size_t *requeued);

/* STORE_INVALID, with the name in clash, when env_json (an App's env, a JSON object's text) sets
 * the name of one of the App's secrets or, if it has any, one of reserved (NULL-terminated);
 * read in the caller's transaction, so a secret PUT cannot slip in between. (secrets.c) */
enum store_status sql_app_env_check(struct store *st, const char *app_id, const char *env_json,
                                    const char *const *reserved, char *clash, size_t clashlen);

/* STORE_OK when image_id is NULL or "" (the built-in rootfs) or names a ready, not deleted Image
 * whose digest is digest; STORE_CONFLICT otherwise. (images.c) */
enum store_status sql_image_check_ready(struct store *st, const char *image_id, const char *digest);

/* An App's quotas and use (quota_usage_one_sql) read in the caller's transaction;
 * STORE_NOT_FOUND when the App does not exist or is deleted. (quotas.c) */
enum store_status sql_app_usage_in_tx(struct store *st, const char *app_id,
                                      struct store_app_usage *out);
/* Whether adding `wanted` to the App's use of quota `which` (for the keep-alive quota: a value of
 * `wanted` seconds) goes over its effective value; if so, fills q's hit, limit and used. (quotas.c)
 */
bool sql_quota_over(struct store_quotas *q, const struct store_app_usage *u, enum store_quota which,
                    int64_t wanted);
/* STORE_OVER_QUOTA (q's hit STORE_QUOTA_DISK) when size_mib more would take the sizes of all the
 * store's Workspaces beyond q->disk_budget_mib; STORE_OK without a budget (q NULL, or -1).
 * (quotas.c) */
enum store_status sql_disk_check_in_tx(struct store *st, struct store_quotas *q, int64_t size_mib);

/* ---- setting up ---- */

/* The group commit (enqueue.c) has state to set up and a thread to stop (store_sql_init and
 * store_sql_fini call them). */
void sql_enqueue_init(struct store *st);
void sql_enqueue_fini(struct store *st);

#endif
