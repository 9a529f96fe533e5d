/*
 * enqueue.c: writing new messages, with idempotency keys and group commit.
 *
 * With synchronous=FULL every COMMIT is an fsync, so one transaction per message would cap the
 * gateway at the disk's fsync rate. Callers hand their request to one committer thread (with its
 * own connection), which writes up to ENQUEUE_BATCH_MAX queued requests in one transaction, each
 * inside its own SAVEPOINT so that one bad row fails alone, and wakes every caller of the batch
 * once the COMMIT is on disk (or hands an asynchronous caller its result through its callback).
 * On PostgreSQL, where other gateways' committers write at the same time, a batch is taken in
 * Session order, locks its Sessions first (passing over rows another transaction holds: those
 * requests go back to the head of the queue) and writes its requests without a key in one
 * statement (enqueue_pg.c).
 *
 * Hidden state: the committer (struct enqueue_committer: its thread, its queue of requests and
 * their lock) hangs off the store's struct sql_store (api); it is started on the first enqueue and
 * stopped, after draining its queue, by sql_enqueue_fini.
 */
#include "commit_watermark.h"
#include "id.h"
#include "log.h"
#include "clock.h"
#include "store_sql.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENQUEUE_BATCH_MAX 64

#define MSG_COLS SQL_MESSAGE_COLS " "

static void message_row(struct sql_stmt *s, struct store_message *m)
{
    sql_message_from_row(s, 0, m);
}

/* One caller's enqueue, waiting for the committer: either a blocked caller (done_cb NULL: it
 * sleeps on enqueue_committer.done until done is set) or an asynchronous one (heap-allocated, with
 * its own result, handed to done_cb and freed by the committer). */
struct enqueue_req {
    const struct store_ctx *ctx;
    const struct store_enqueue *req;
    struct store_message *out;
    bool *replayed;
    enum store_status status;
    bool done;
    store_enqueue_done_fn done_cb;
    void *done_arg;
    struct store_message own_out; /* async: the result */
    bool own_replayed;
    /* PostgreSQL: passed over by this batch (another transaction held its Session's row), so put
     * back at the head of the queue unanswered; and how often that happened (enqueue_pg.c). */
    bool deferred;
    int defers;
    struct enqueue_req *next;
};

struct enqueue_committer {
    pthread_mutex_t lock;
    pthread_cond_t work; /* the committer waits here for requests */
    pthread_cond_t done; /* callers wait here for their batch */
    struct enqueue_req *head, *tail;
    bool stopping;
    bool thread_started;
    pthread_t committer;
    /* The claim that overlaps the fsync (SQLite, store_enqueue_overlap): set before the thread
     * starts, then the committer's alone. */
    struct commit_watermark *wm;
    char db_path[4096];
    store_batch_fn batch_fn;
    void *batch_arg;
};

/* enqueue_one() on PostgreSQL without an Idempotency-Key: the same reads and writes as below (seq
 * from the Session, the row, next_seq + 1, the audit event, the row back) in one statement of
 * data-modifying CTEs, so one round trip to the server instead of five: on a network each round
 * trip costs more than the work, and the group commit holds the writers' lock meanwhile. SQLite
 * has no data-modifying CTEs and no round trips. No row back: no such Session in this App. */
static enum store_status enqueue_one_pg(struct store *st, struct enqueue_req *e)
{
    const struct store_enqueue *q = e->req;
    char id[STORE_ID_LEN];
    struct sql_stmt *s;
    int rc;

    if (id_new_ordered("msg", id, sizeof id) != 0)
        return STORE_ERROR;
    s = sql_stmt(
        st,
        "WITH s AS (UPDATE sessions SET next_seq = sessions.next_seq + 1 FROM apps a "
        "WHERE sessions.id = ?2 AND (?3 = '' OR sessions.app_id = ?3) "
        "AND sessions.state <> 'deleted' AND a.id = sessions.app_id "
        "RETURNING sessions.next_seq - 1 AS seq, a.max_attempts, sessions.app_id), "
        "m AS (INSERT INTO messages (id, session_id, app_id, seq, body, max_attempts, "
        "request_id, created_at, updated_at) "
        "SELECT ?1, ?2, s.app_id, s.seq, ?4, s.max_attempts, ?5, ?6, ?6 FROM s RETURNING *), "
        "e AS (INSERT INTO events (at, actor, kind, object_type, object_id, app_id, session_id, "
        "request_id, data) SELECT ?6, ?7, 'message.queued', 'message', m.id, m.app_id, "
        "m.session_id, ?5, '{\"seq\":' || m.seq || '}' FROM m) "
        "SELECT " MSG_COLS "FROM m");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, id);
    sql_bind_text(s, 2, q->session_id);
    sql_bind_app(s, 3, q->app_id);
    sql_bind_text(s, 4, q->body_json);
    sql_bind_text_or_null(s, 5, e->ctx ? e->ctx->request_id : NULL);
    sql_bind_int64(s, 6, clock_wall_ms());
    sql_bind_text(s, 7, e->ctx && e->ctx->actor ? e->ctx->actor : "unknown");
    rc = sql_step(s);
    if (rc == SQL_ROW) {
        message_row(s, e->out);
        *e->replayed = false;
    }
    sql_done(s);
    if (rc == SQL_ROW)
        return STORE_OK;
    return rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);
}

/* The message just written, from the values bound to its INSERT rather than read back: the
 * columns the INSERT leaves to their defaults are the defaults of a new row (queued, no attempt,
 * no reply). */
static void message_written(struct store_message *m, const char *id, const struct store_enqueue *q,
                            const char *app_id, int64_t seq, int64_t max_attempts,
                            const struct store_ctx *ctx, int64_t now)
{
    memset(m, 0, sizeof *m);
    snprintf(m->id, sizeof m->id, "%s", id);
    snprintf(m->session_id, sizeof m->session_id, "%s", q->session_id);
    snprintf(m->app_id, sizeof m->app_id, "%s", app_id);
    m->seq = seq;
    snprintf(m->state, sizeof m->state, "queued");
    m->body_json = strdup(q->body_json);
    m->max_attempts = max_attempts;
    if (q->idempotency_key && *q->idempotency_key)
        snprintf(m->idempotency_key, sizeof m->idempotency_key, "%s", q->idempotency_key);
    if (ctx && ctx->request_id)
        snprintf(m->request_id, sizeof m->request_id, "%s", ctx->request_id);
    m->created_at = m->updated_at = now;
}

/* Writes one message inside the committer's open transaction. *wrote tells whether anything was
 * written before a failure: a row that fails after its first write leaves the transaction with
 * part of it (see commit_batch). */
static enum store_status enqueue_one(struct store *st, struct enqueue_req *e, bool *wrote)
{
    const struct store_enqueue *q = e->req;
    struct sql_stmt *s;
    enum store_status r;
    int64_t seq = 0, max_attempts = 0, now = clock_wall_ms();
    char id[STORE_ID_LEN], data[64], app_id[STORE_ID_LEN];
    int rc;

    *wrote = false;
    if (sql_dialect(st) == SQL_POSTGRES && !(q->idempotency_key && *q->idempotency_key)) {
        /* One statement: no row back (no such Session) wrote nothing; a failure aborted it. */
        r = enqueue_one_pg(st, e);
        *wrote = r != STORE_NOT_FOUND;
        return r;
    }

    /* PostgreSQL: the Session's row is locked until COMMIT (if the batch has not locked it
     * already), so two gateways writing to one Session take turns on it: the seq read here stays
     * true, and the key's lookup below sees the other gateway's committed row. */
    if (sql_dialect(st) == SQL_POSTGRES)
        s = sql_stmt(st, "SELECT s.next_seq, a.max_attempts, s.app_id FROM sessions s JOIN apps a "
                         "ON a.id = s.app_id WHERE s.id = ?1 AND (?2 = '' OR s.app_id = ?2) "
                         "AND s.state <> 'deleted' FOR NO KEY UPDATE OF s");
    else
        s = sql_stmt(st, "SELECT s.next_seq, a.max_attempts, s.app_id FROM sessions s JOIN apps a "
                         "ON a.id = s.app_id WHERE s.id = ?1 AND (?2 = '' OR s.app_id = ?2) "
                         "AND s.state <> 'deleted'");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, q->session_id);
    sql_bind_app(s, 2, q->app_id);
    rc = sql_step(s);
    if (rc == SQL_ROW) {
        seq = sql_col_int64(s, 0);
        max_attempts = sql_col_int64(s, 1);
        sql_col_copy(s, 2, app_id, sizeof app_id);
    }
    sql_done(s);
    if (rc != SQL_ROW)
        return rc == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, rc);

    if (q->idempotency_key && *q->idempotency_key) {
        s = sql_stmt(st, "SELECT " MSG_COLS ", m.request_hash FROM messages m "
                         "WHERE m.session_id = ?1 AND m.idempotency_key = ?2");
        if (!s)
            return STORE_ERROR;
        sql_bind_text(s, 1, q->session_id);
        sql_bind_text(s, 2, q->idempotency_key);
        rc = sql_step(s);
        if (rc == SQL_ROW) {
            const char *hash = sql_col_text(s, 19);
            if (hash && q->request_hash && strcmp(hash, q->request_hash) == 0) {
                message_row(s, e->out);
                *e->replayed = true;
                r = STORE_OK;
            } else {
                r = STORE_CONFLICT;
            }
            sql_done(s);
            return r;
        }
        sql_done(s);
        if (rc != SQL_DONE)
            return sql_status(st, rc);
    }

    if (id_new_ordered("msg", id, sizeof id) != 0)
        return STORE_ERROR;
    s = sql_stmt(st, "INSERT INTO messages (id, session_id, app_id, seq, body, max_attempts, "
                     "idempotency_key, request_hash, request_id, created_at, updated_at) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, id);
    sql_bind_text(s, 2, q->session_id);
    sql_bind_text(s, 3, app_id);
    sql_bind_int64(s, 4, seq);
    sql_bind_text(s, 5, q->body_json);
    sql_bind_int64(s, 6, max_attempts);
    sql_bind_text_or_null(s, 7, q->idempotency_key);
    sql_bind_text_or_null(s, 8, q->idempotency_key ? q->request_hash : NULL);
    sql_bind_text_or_null(s, 9, e->ctx ? e->ctx->request_id : NULL);
    sql_bind_int64(s, 10, now);
    *wrote = true;
    if ((r = sql_step_done(st, s)) != STORE_OK)
        return r;
    s = sql_stmt(st, "UPDATE sessions SET next_seq = next_seq + 1 WHERE id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, q->session_id);
    if ((r = sql_step_done(st, s)) != STORE_OK)
        return r;
    snprintf(data, sizeof data, "{\"seq\":%" PRId64 "}", seq);
    if ((r = sql_event(st, e->ctx, "message.queued", "message", id, app_id, q->session_id, data)) !=
        STORE_OK)
        return r;
    message_written(e->out, id, q, app_id, seq, max_attempts, e->ctx, now);
    *e->replayed = false;
    return e->out->body_json ? STORE_OK : STORE_ERROR;
}

/* The batch in Session id order, arrival order kept within a Session (insertion sort: a batch is
 * at most ENQUEUE_BATCH_MAX). On PostgreSQL each enqueue locks its Session's row until COMMIT, and
 * other gateways' batches run at the same time: taking the rows in one global order means two
 * batches never wait for each other in a cycle. */
static void sort_by_session(struct enqueue_req **batch, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        struct enqueue_req *e = batch[i];
        size_t j = i;
        while (j > 0 && strcmp(batch[j - 1]->req->session_id, e->req->session_id) > 0) {
            batch[j] = batch[j - 1];
            j--;
        }
        batch[j] = e;
    }
}

static bool has_key(const struct enqueue_req *e)
{
    return e->req->idempotency_key && *e->req->idempotency_key;
}

/* Whether a row's failure is its own (this Session, this key, this row's values) rather than the
 * database's (locked, full, an I/O error), which would fail the other rows of the batch too. */
static bool row_failure(enum store_status r)
{
    return r == STORE_NOT_FOUND || r == STORE_CONFLICT || r == STORE_INVALID;
}

/* PostgreSQL, inside the batch's transaction (the batch sorted by Session). First the Sessions of
 * requests passed over too often are locked, waiting (sql_enqueue_pg_lock). Then one statement
 * (sql_enqueue_pg_batch) locks every Session of the batch, passing over rows another transaction
 * holds (their requests are marked deferred), and writes the requests of the Sessions it holds
 * that have no request with a key (marked done). It is sent with the BEGIN and, when it writes
 * every row of the pass, with the COMMIT too: the whole pass in one round trip. When every Session
 * has a key, or that statement failed for one of its rows, the Sessions are locked alone
 * (sql_enqueue_pg_lock, passing over) instead, and what is left goes one by one: the requests with
 * a key and the others of their Sessions, or all of them. Only the rows not yet settled take part;
 * passed-over rows are settled (and deferred), rows written are done for this pass. */
static enum store_status lock_and_write_pg(struct store *st, struct enqueue_req **all, size_t nall,
                                           bool *settled, bool *done, bool *any_ok)
{
    /* The rows this pass has left (still in Session order), and where each is in the batch. */
    struct enqueue_req *batch[ENQUEUE_BATCH_MAX];
    size_t at[ENQUEUE_BATCH_MAX], n = 0;
    for (size_t i = 0; i < nall; i++)
        if (!settled[i]) {
            at[n] = i;
            batch[n++] = all[i];
        }
    const char *wait_ids[ENQUEUE_BATCH_MAX], *sess_ids[ENQUEUE_BATCH_MAX] = {0};
    bool waited[ENQUEUE_BATCH_MAX], keyed[ENQUEUE_BATCH_MAX], passed[ENQUEUE_BATCH_MAX];
    struct sql_enqueue_pg_item items[ENQUEUE_BATCH_MAX];
    size_t nwait = 0, nitems = 0, first[ENQUEUE_BATCH_MAX], nsess = 0;
    enum store_status r;

    /* One entry per Session (the batch is sorted): waited for if any of its requests was passed
     * over too often, and whether any of them has a key. */
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || strcmp(batch[i]->req->session_id, batch[i - 1]->req->session_id) != 0) {
            first[nsess] = i;
            sess_ids[nsess] = batch[i]->req->session_id;
            keyed[nsess] = false;
            waited[nsess++] = false;
        }
        keyed[nsess - 1] |= has_key(batch[i]);
        waited[nsess - 1] |= batch[i]->defers >= ENQUEUE_PG_MAX_DEFERS;
    }
    for (size_t k = 0; k < nsess; k++) {
        if (waited[k])
            wait_ids[nwait++] = sess_ids[k];
        size_t end = k + 1 < nsess ? first[k + 1] : n;
        for (size_t i = first[k]; !keyed[k] && i < end; i++)
            items[nitems++] =
                (struct sql_enqueue_pg_item){batch[i]->ctx, batch[i]->req, batch[i]->out, STORE_OK};
    }
    /* The waited-for rows first, so that this batch holds none of the others while it waits.
     * The statements after it lock them again, which a row this transaction holds never
     * passes over. */
    if (nwait && (r = sql_enqueue_pg_lock(st, wait_ids, nwait, true, passed)) != STORE_OK)
        return r;
    bool written = false;
    if (nitems) {
        /* When it writes every row of the pass, nothing follows it but the COMMIT, which goes
         * with it. (Its failure leaves the transaction open, aborted.) When it is the
         * transaction's first statement, as it is unless some Session was waited for, a failure
         * has nothing before it to keep: the transaction is rolled back and begun again, and the
         * common case spares a savepoint (a subtransaction on the server) per batch. Otherwise a
         * savepoint keeps the waited-for locks. */
        bool last = nitems == n, first_write = nwait == 0;
        if (!first_write) {
            int x = sql_exec(st, "SAVEPOINT enqueue_batch");
            if (x != SQL_DONE)
                return sql_status(st, x);
        }
        if ((r = sql_enqueue_pg_batch(st, sess_ids, nsess, passed, items, nitems, last)) ==
            STORE_OK) {
            if (!last && !first_write)
                sql_exec(st, "RELEASE enqueue_batch");
            written = true;
        } else if (!row_failure(r)) {
            return r; /* the database's (the writers' lock not granted in time, say): every row's */
        } else if (first_write) {
            /* Nothing of it was written or locked: the Sessions are locked alone below, in a
             * new transaction, and each request goes one by one, and fails alone. */
            sql_rollback(st);
            if ((r = sql_begin_concurrent(st)) != STORE_OK)
                return r;
        } else {
            /* The same, in this transaction. Sent now, not held back for the next statement:
             * that one may first need preparing, which an aborted transaction would refuse. */
            int y = sql_exec(st, "ROLLBACK TO enqueue_batch; RELEASE enqueue_batch");
            if (y != SQL_DONE)
                return sql_status(st, y);
        }
    }
    if (!written && (r = sql_enqueue_pg_lock(st, sess_ids, nsess, false, passed)) != STORE_OK)
        return r;
    /* Back from the Sessions to their requests. */
    for (size_t k = 0, j = 0; k < nsess; k++) {
        bool pass = !waited[k] && passed[k];
        size_t end = k + 1 < nsess ? first[k + 1] : n;
        for (size_t i = first[k]; i < end; i++) {
            if (pass) {
                batch[i]->deferred = true;
                batch[i]->defers++;
                settled[at[i]] = true;
            } else if (written && !keyed[k]) {
                /* Written by this pass: again by the next one if it rolls back. */
                batch[i]->status = items[j].status;
                *batch[i]->replayed = false;
                *any_ok |= items[j].status == STORE_OK;
                done[at[i]] = true;
            }
            if (written && !keyed[k])
                j++;
        }
    }
    return STORE_OK;
}

static void clear_out(struct enqueue_req *e)
{
    store_message_clear(e->out);
}

/* Writes one pass over the batch's unsettled rows in one transaction. A row with an
 * Idempotency-Key runs inside a savepoint, so that it fails alone. A row without one runs bare,
 * which spares two statements and the savepoint's page journal per message: when such a row fails
 * after its first write, the transaction holds part of it, so the pass rolls back, settles that
 * row with its failure, and returns true for another pass over the rest. A failure that is the
 * database's settles every unsettled row with it. Returns false once every row is settled. */
static bool commit_pass(struct store *st, struct enqueue_req **batch, size_t n, bool *settled)
{
    bool done[ENQUEUE_BATCH_MAX] = {false};
    enum store_status r = sql_begin_concurrent(st);
    bool any_ok = false;

    if (r == STORE_OK && sql_dialect(st) == SQL_POSTGRES &&
        (r = lock_and_write_pg(st, batch, n, settled, done, &any_ok)) != STORE_OK)
        sql_rollback(st);
    if (r != STORE_OK) {
        for (size_t i = 0; i < n; i++)
            if (!settled[i])
                batch[i]->status = r, settled[i] = true;
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        struct enqueue_req *e = batch[i];
        const char *key = e->req->idempotency_key;
        bool keyed = key && *key, wrote;
        if (settled[i] || done[i])
            continue;
        if (keyed) {
            int x = sql_exec(st, "SAVEPOINT enqueue");
            if (x != SQL_DONE) {
                r = sql_status(st, x);
                goto abandon;
            }
        }
        e->status = enqueue_one(st, e, &wrote);
        if (e->status == STORE_OK) {
            any_ok = true;
        } else if (keyed) {
            sql_exec(st, "ROLLBACK TO enqueue");
            settled[i] = true;
        } else if (!wrote) {
            settled[i] = true;
        } else {
            r = e->status;
            settled[i] = true;
            goto abandon;
        }
        if (keyed)
            sql_exec(st, "RELEASE enqueue");
    }
    r = any_ok ? sql_commit(st) : (sql_rollback(st), STORE_OK);
    for (size_t i = 0; i < n; i++) {
        settled[i] = true;
        if (r != STORE_OK && batch[i]->status == STORE_OK) {
            /* The COMMIT failed (disk full, I/O error): nothing of the batch is durable. */
            clear_out(batch[i]);
            batch[i]->status = r;
        }
    }
    return false;

abandon:
    sql_rollback(st);
    bool again = row_failure(r);
    for (size_t i = 0; i < n; i++) {
        if (batch[i]->status == STORE_OK && !settled[i])
            clear_out(batch[i]); /* rolled back: written again by the next pass */
        if (!again && !settled[i]) {
            batch[i]->status = r;
            settled[i] = true;
        }
    }
    return again;
}

/* Writes a batch in one transaction; each request gets its own status. A request that fails does
 * not fail the others (see commit_pass): each pass settles at least one row, so there are at
 * most n + 1 passes, and one in the common case. */
static void commit_batch(struct store *st, struct enqueue_req **batch, size_t n)
{
    bool settled[ENQUEUE_BATCH_MAX] = {false};
    if (sql_dialect(st) == SQL_POSTGRES)
        sort_by_session(batch, n);
    for (size_t i = 0; i < n; i++)
        batch[i]->status = STORE_ERROR;
    while (commit_pass(st, batch, n, settled))
        ;
}

/* With the overlap: the batch is committed without a sync and visible; the workers are woken
 * (they may claim now), then the WAL is synced and the watermark raised before any 202. A failed
 * sync fails the batch's requests: nothing says their rows are on disk (commit_watermark.h). */
static void commit_batch_overlapped(struct store *st, struct enqueue_committer *api,
                                    struct enqueue_req **batch, size_t n)
{
    uint64_t g = commit_watermark_begin(api->wm);
    commit_batch(st, batch, n);
    bool any = false;
    for (size_t i = 0; i < n && !any; i++)
        any = batch[i]->status == STORE_OK && !batch[i]->deferred;
    if (!any) {
        /* Nothing of it became visible: it is as durable as the batch before. */
        if (commit_watermark_reached(api->wm, g - 1))
            commit_watermark_durable(api->wm, g);
        return;
    }
    api->batch_fn(api->batch_arg, false);
    if (commit_watermark_sync_wal(api->db_path) != 0) {
        log_error("store: cannot sync the WAL after an enqueue: %s", strerror(errno));
        for (size_t i = 0; i < n; i++)
            if (batch[i]->status == STORE_OK) {
                clear_out(batch[i]);
                batch[i]->status = STORE_ERROR;
            }
        return;
    }
    if (commit_watermark_durable(api->wm, g))
        api->batch_fn(api->batch_arg, true);
}

static void *committer_main(void *arg)
{
    struct store *st = arg;
    struct sql_store *s = st->cls;
    struct enqueue_committer *api = s->api;
    struct enqueue_req *batch[ENQUEUE_BATCH_MAX];

    /* The overlap syncs the WAL itself, after waking the workers. */
    if (api->wm && sql_exec(st, "PRAGMA synchronous=NORMAL") != SQL_DONE)
        log_error("store: the enqueue committer cannot set synchronous=NORMAL");
    pthread_mutex_lock(&api->lock);
    for (;;) {
        while (!api->head && !api->stopping)
            pthread_cond_wait(&api->work, &api->lock);
        if (!api->head && api->stopping)
            break;
        size_t n = 0;
        while (api->head && n < ENQUEUE_BATCH_MAX) {
            batch[n++] = api->head;
            api->head = api->head->next;
        }
        if (!api->head)
            api->tail = NULL;
        pthread_mutex_unlock(&api->lock);
        if (api->wm)
            commit_batch_overlapped(st, api, batch, n);
        else
            commit_batch(st, batch, n);
        /* Requests the batch passed over (PostgreSQL) go back to the head of the queue, in their
         * order, unanswered: the next batch takes them first. */
        struct enqueue_req *back = NULL, *last = NULL;
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            struct enqueue_req *e = batch[i];
            if (!e->deferred) {
                batch[kept++] = e;
                continue;
            }
            e->deferred = false;
            e->next = NULL;
            if (last)
                last->next = e;
            else
                back = e;
            last = e;
        }
        if (back) {
            pthread_mutex_lock(&api->lock);
            last->next = api->head;
            if (!api->head)
                api->tail = last;
            api->head = back;
            pthread_mutex_unlock(&api->lock);
        }
        n = kept;
        /* Asynchronous callers first, outside the lock: their callbacks may take their own locks
         * (the gateway resumes an HTTP connection). The request is unlinked from the queue, so
         * nothing else refers to it once the callback is called. */
        size_t blocked = 0;
        for (size_t i = 0; i < n; i++) {
            struct enqueue_req *e = batch[i];
            if (!e->done_cb) {
                batch[blocked++] = e;
                continue;
            }
            e->done_cb(e->done_arg, e->status, e->status == STORE_OK ? e->out : NULL,
                       e->own_replayed);
            free(e);
        }
        pthread_mutex_lock(&api->lock);
        for (size_t i = 0; i < blocked; i++)
            batch[i]->done = true;
        if (blocked)
            pthread_cond_broadcast(&api->done);
    }
    pthread_mutex_unlock(&api->lock);
    return NULL;
}

/* Appends e to the committer's queue, starting the committer on first use. False when the store
 * is stopping or the thread cannot start: e was not queued. Called with api->lock held. */
static bool queue_for_commit(struct store *st, struct enqueue_committer *api, struct enqueue_req *e)
{
    /* Started on first use: processes that never enqueue (workers, sbxctl) have no committer. */
    if (!api->thread_started && !api->stopping) {
        if (pthread_create(&api->committer, NULL, committer_main, st) == 0)
            api->thread_started = true;
        else
            log_error("store: cannot start the enqueue committer thread");
    }
    if (api->stopping || !api->thread_started)
        return false;
    if (api->tail)
        api->tail->next = e;
    else
        api->head = e;
    api->tail = e;
    pthread_cond_signal(&api->work);
    return true;
}

enum store_status store_message_enqueue(struct store *st, const struct store_ctx *ctx,
                                        const struct store_enqueue *req, struct store_message *out,
                                        bool *replayed)
{
    struct sql_store *s = st->cls;
    struct enqueue_committer *api = s->api;
    struct store_message m = {0};
    bool rep = false;
    struct enqueue_req e = {.ctx = ctx, .req = req, .out = &m, .replayed = &rep};

    if (!api || !req->session_id || !req->body_json)
        return STORE_ERROR;
    pthread_mutex_lock(&api->lock);
    if (!queue_for_commit(st, api, &e)) {
        pthread_mutex_unlock(&api->lock);
        return STORE_ERROR;
    }
    while (!e.done)
        pthread_cond_wait(&api->done, &api->lock);
    pthread_mutex_unlock(&api->lock);
    if (e.status == STORE_OK) {
        *out = m;
        *replayed = rep;
    }
    return e.status;
}

enum store_status store_message_enqueue_async(struct store *st, const struct store_ctx *ctx,
                                              const struct store_enqueue *req,
                                              store_enqueue_done_fn done, void *arg)
{
    struct sql_store *s = st->cls;
    struct enqueue_committer *api = s->api;
    struct enqueue_req *e;

    if (!api || !done || !req->session_id || !req->body_json)
        return STORE_ERROR;
    if (!(e = calloc(1, sizeof *e)))
        return STORE_ERROR;
    e->ctx = ctx;
    e->req = req;
    e->out = &e->own_out;
    e->replayed = &e->own_replayed;
    e->done_cb = done;
    e->done_arg = arg;
    pthread_mutex_lock(&api->lock);
    bool queued = queue_for_commit(st, api, e);
    pthread_mutex_unlock(&api->lock);
    if (!queued) {
        free(e);
        return STORE_ERROR;
    }
    return STORE_OK;
}

int store_enqueue_overlap(struct store *st, const char *db_path, const char *run_dir,
                          store_batch_fn fn, void *arg, char *err, size_t errlen)
{
    struct sql_store *s = st->cls;
    struct enqueue_committer *api = s->api;
    if (!api || sql_dialect(st) != SQL_SQLITE) {
        snprintf(err, errlen, "the overlapped claim needs a SQLite store");
        return -1;
    }
    pthread_mutex_lock(&api->lock);
    bool started = api->thread_started;
    pthread_mutex_unlock(&api->lock);
    if (started || api->wm) {
        snprintf(err, errlen, "the enqueue committer has started already");
        return -1;
    }
    struct commit_watermark *wm = commit_watermark_open(run_dir, true, err, errlen);
    if (!wm)
        return -1;
    /* What an earlier gateway committed and did not sync (it crashed) is synced now, so the
     * workers that wait for it go on. */
    if (commit_watermark_sync_wal(db_path) != 0) {
        snprintf(err, errlen, "cannot sync %s-wal: %s", db_path, strerror(errno));
        commit_watermark_close(wm);
        return -1;
    }
    commit_watermark_durable(wm, commit_watermark_written(wm));
    snprintf(api->db_path, sizeof api->db_path, "%s", db_path);
    api->batch_fn = fn;
    api->batch_arg = arg;
    api->wm = wm;
    return 0;
}

int store_enqueue_settle_watermark(const char *db_path, const char *run_dir)
{
    char err[256];
    struct commit_watermark *wm = commit_watermark_open(run_dir, false, err, sizeof err);
    if (!wm)
        return 0; /* never overlapped here */
    int rc = commit_watermark_sync_wal(db_path);
    if (rc == 0)
        commit_watermark_durable(wm, commit_watermark_written(wm));
    commit_watermark_close(wm);
    return rc;
}

void sql_enqueue_init(struct store *st)
{
    struct sql_store *s = st->cls;
    struct enqueue_committer *api = calloc(1, sizeof *api);

    s->api = api;
    if (!api) {
        log_error("store: out of memory for the enqueue committer");
        return;
    }
    pthread_mutex_init(&api->lock, NULL);
    pthread_cond_init(&api->work, NULL);
    pthread_cond_init(&api->done, NULL);
}

void sql_enqueue_fini(struct store *st)
{
    struct sql_store *s = st->cls;
    struct enqueue_committer *api = s->api;

    if (!api)
        return;
    pthread_mutex_lock(&api->lock);
    api->stopping = true;
    bool started = api->thread_started;
    pthread_cond_signal(&api->work);
    pthread_mutex_unlock(&api->lock);
    /* The committer drains what is queued before it exits, so no caller is left waiting. */
    if (started)
        pthread_join(api->committer, NULL);
    pthread_mutex_destroy(&api->lock);
    pthread_cond_destroy(&api->work);
    pthread_cond_destroy(&api->done);
    commit_watermark_close(api->wm);
    free(api);
    s->api = NULL;
}
