/*
 * sql_pg.c: the PostgreSQL engine under the store (sql.h), on libpq: one connection per thread
 * (reconnected after the server restarts), the store's ?N statements rewritten to $N and run as
 * server-side prepared statements, the writers' advisory lock (exclusive for serial writers and
 * migrations, shared for concurrent writers), SQLSTATEs mapped to store statuses, and the
 * migrations of a PostgreSQL database (sql_pg_migrate()).
 *
 * Every execution is one round trip: a statement is prepared on its connection the first time it
 * runs with a given list of parameter types (one more round trip, once), then executed with
 * PQexecPrepared; results come back in text format and are read row by row from the PGresult.
 * Commands that return nothing (a transaction's BEGIN and its lock, savepoints) are held back and
 * sent with the next statement in the same round trip (libpq's pipeline mode), and a
 * transaction's last statement can carry its COMMIT too (pg_step_commit()).
 *
 * Where PostgreSQL behaves differently from SQLite under the same calls:
 * - A failed statement aborts its whole transaction (until ROLLBACK TO a savepoint taken before
 *   it); on SQLite only the statement fails. The transaction's later statements fail too, and
 *   commit() rolls back and returns the first failure's status.
 * - Parameters are typed: text binds are text, int64 binds int8, blobs bytea; a NULL takes the
 *   type its position was last bound with (int8 if never), since `?N IS NULL` alone gives the
 *   server no type. SQL that mixes types must say so (CAST) where SQLite would convert silently.
 * - Rows come from the server all at once when the statement runs, not one per step.
 *
 * This file has transactions, the engine's table, opening and migrations; connections and
 * statements are in the files sql_pg_internal.h lists.
 */
#include "sql_pg_internal.h"
#include "log.h"
#include "clock.h"

#include <ctype.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- transactions ---- */

static void pg_rollback(struct store *st)
{
    struct pg_conn *c = pg_conn(st);
    PGresult *res;
    if (!c)
        return;
    c->in_txn = false;
    c->npending = 0; /* the held-back commands go with the transaction */
    c->commit_ahead = false;
    if (c->committed_ahead) {
        c->committed_ahead = false; /* over on the server already: nothing left to undo */
        return;
    }
    if (c->begin_pending) {
        c->begin_pending = false; /* the server never saw the transaction */
        return;
    }
    if (PQstatus(c->db) != CONNECTION_OK || PQtransactionStatus(c->db) == PQTRANS_IDLE)
        return;
    res = PQexec(c->db, "ROLLBACK");
    PQclear(res);
}

/* Serial writers: BEGIN (READ COMMITTED) and the writers' advisory lock, exclusive. Holding it, a
 * writer is the only one, and each of its statements sees everything committed before it, so
 * what it reads stays true until it commits: SQLite's BEGIN IMMEDIATE, which the store's logic
 * relies on. (REPEATABLE READ would be wrong here: its snapshot would be taken by the lock's
 * SELECT, before the lock is granted.) Concurrent writers: BEGIN (READ COMMITTED) and the same
 * lock shared, so that they run beside each other and wait only for a serial writer (and it for
 * them). Readers: one snapshot, no locks.
 *
 * Both are held back and sent with the transaction's first statement, in its round trip: a
 * failure to begin (the lock's timeout: STORE_BUSY) is reported by that statement. */
static enum store_status pg_begin(struct store *st, enum sql_txn kind)
{
    struct pg_conn *c = pg_conn(st);

    if (!c)
        return STORE_ERROR;
    if (c->in_txn ||
        (PQstatus(c->db) == CONNECTION_OK && PQtransactionStatus(c->db) != PQTRANS_IDLE)) {
        log_error("store: begin inside a transaction: rolling the old one back");
        pg_rollback(st);
    }
    if (!pg_conn_usable(c))
        return c->last_status;
    if (kind != SQL_TXN_READ) {
        snprintf(c->pending[0], PG_PENDING_LEN, "BEGIN");
        snprintf(c->pending[1], PG_PENDING_LEN, "%s",
                 kind == SQL_TXN_SERIAL ? c->store->write_lock : c->store->shared_lock);
        c->npending = 2;
    } else {
        snprintf(c->pending[0], PG_PENDING_LEN, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
        c->npending = 1;
    }
    c->begin_pending = true;
    c->in_txn = true;
    c->commit_ahead = c->committed_ahead = false;
    return STORE_OK;
}

static enum store_status pg_commit(struct store *st)
{
    struct pg_conn *c = pg_conn(st);
    PGresult *res;
    enum store_status r = STORE_OK;

    if (!c)
        return STORE_ERROR;
    c->commit_ahead = false;
    if (c->committed_ahead) {
        /* Sent with the transaction's last statement; failed, it rolled back on the server. */
        c->committed_ahead = false;
        c->in_txn = false;
        c->npending = 0;
        return c->ahead_status;
    }
    if (c->begin_pending) {
        pg_rollback(st); /* nothing was sent: nothing to commit */
        return STORE_OK;
    }
    if (PQstatus(c->db) != CONNECTION_OK) {
        pg_set_error(c, STORE_BUSY, "the connection to PostgreSQL was lost before COMMIT");
        pg_rollback(st); /* forgets the transaction's state; nothing to send */
        return STORE_BUSY;
    }
    if (PQtransactionStatus(c->db) == PQTRANS_INERROR && c->npending == 0) {
        /* A statement failed and aborted the transaction: COMMIT would only roll it back. (With
         * savepoint commands held back, a ROLLBACK TO among them may undo the failure.) */
        r = c->last_status != STORE_OK ? c->last_status : STORE_ERROR;
        pg_rollback(st);
        return r;
    }
    if (c->npending > 0) {
        struct pg_query q = {.text = "COMMIT"};
        res = pg_pipeline(c, NULL, 0, &q, NULL);
    } else {
        res = PQexec(c->db, "COMMIT");
    }
    r = pg_commit_status(c, res);
    PQclear(res);
    if (r != STORE_OK)
        pg_rollback(st);
    c->in_txn = false;
    return r;
}

static enum store_status pg_status(struct store *st, int rc)
{
    struct pg_conn *c;
    if (rc >= 0)
        return STORE_OK;
    if (rc == SQL_NOMEM) {
        log_error("store: out of memory");
        return STORE_ERROR;
    }
    if (!(c = pg_conn(st)))
        return STORE_ERROR;
    if (c->last_status == STORE_ERROR)
        log_error("store: postgres: %s", c->last_error);
    else if (c->last_status == STORE_INVALID && strncmp(c->last_sqlstate, "22", 2) == 0)
        log_warn("store: postgres: %s", c->last_error); /* also a store bug's symptom */
    else if (c->last_status == STORE_BUSY || c->last_status == STORE_FULL)
        log_warn("store: postgres: %s", c->last_error);
    return c->last_status == STORE_OK ? STORE_ERROR : c->last_status;
}

const struct sql_engine pg_engine = {
    .name = "postgres",
    .dialect = SQL_POSTGRES,
    .stmt = pg_stmt,
    .bind_text = pg_bind_text,
    .bind_int64 = pg_bind_int64,
    .bind_null = pg_bind_null,
    .bind_blob = pg_bind_blob,
    .bind_text_array = pg_bind_text_array,
    .step = pg_step,
    .step_commit = pg_step_commit,
    .col_null = pg_col_null,
    .col_int64 = pg_col_int64,
    .col_text = pg_col_text,
    .col_blob = pg_col_blob,
    .done = pg_done,
    .changes = pg_changes,
    .exec = pg_exec,
    .begin = pg_begin,
    .commit = pg_commit,
    .rollback = pg_rollback,
    .status = pg_status,
    .close = sql_pg_store_close,
};

/* ---- opening, closing, migrations ---- */

const char *sql_pg_store_url(struct store *st)
{
    return ((struct pg_store *)st->cls)->safe_url;
}

void sql_pg_store_close(struct store *st)
{
    struct pg_store *s = st->cls;
    struct pg_conn *c, *next;

    pthread_mutex_lock(&s->conns_lock);
    for (c = s->conns; c; c = next) {
        next = c->next;
        pg_conn_close(c);
    }
    s->conns = NULL;
    pthread_mutex_unlock(&s->conns_lock);
    pthread_key_delete(s->conn_key);
    pthread_mutex_destroy(&s->conns_lock);
    free(s->url);
    free(s->safe_url);
    free(s);
    free(st);
}

struct store *sql_pg_store_open(const char *url, int lock_timeout_ms, char *err, size_t errlen)
{
    struct store *st = calloc(1, sizeof *st);
    struct pg_store *s = calloc(1, sizeof *s);
    struct pg_conn *c;

    if (!st || !s || !(s->url = strdup(url)) || !(s->safe_url = pg_redact_url(url))) {
        snprintf(err, errlen, "out of memory");
        if (s)
            free(s->url);
        free(st);
        free(s);
        return NULL;
    }
    s->base.eng = &pg_engine;
    /* 0 means "do not wait" for SQLite's busy timeout, but "wait forever" for lock_timeout. */
    pg_session_setup_sql(s, lock_timeout_ms > 0 ? lock_timeout_ms : 1);
    snprintf(s->write_lock, sizeof s->write_lock, "SELECT pg_advisory_xact_lock(%" PRId64 ")",
             SQL_PG_WRITE_LOCK_KEY);
    snprintf(s->shared_lock, sizeof s->shared_lock,
             "SELECT pg_advisory_xact_lock_shared(%" PRId64 ")", SQL_PG_WRITE_LOCK_KEY);
    pthread_mutex_init(&s->conns_lock, NULL);
    /* Connections are closed by sql_pg_store_close(), not when their thread exits: closing from
     * a destructor would race with it. */
    pthread_key_create(&s->conn_key, NULL);
    st->cls = s;

    /* Connect now, so that a wrong URL or a server that is down fails at start. */
    c = pg_conn(st);
    if (!c || PQstatus(c->db) != CONNECTION_OK) {
        char msg[256];
        pg_copy_message(msg, sizeof msg, c ? PQerrorMessage(c->db) : "out of memory");
        snprintf(err, errlen, "cannot connect to PostgreSQL at %s: %s", s->safe_url, msg);
        sql_pg_store_close(st);
        return NULL;
    }
    return st;
}

/* Opens a migration transaction: BEGIN, the write lock (waited for without limit: another
 * process may be migrating, which can take longer than lock_timeout; so the transaction's
 * lock_timeout is lifted before the lock is asked for, not after), schema_version created if
 * needed, and its version read. The transaction stays open. The version, or -1 with
 * c->last_error. */
static int pg_locked_version(struct pg_conn *c)
{
    char sql[512];
    PGresult *res;
    int version = -1;

    snprintf(sql, sizeof sql,
             "BEGIN; SET LOCAL lock_timeout = 0; SELECT pg_advisory_xact_lock(%" PRId64 "); "
             "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
             "name TEXT NOT NULL, applied_at BIGINT NOT NULL); "
             "SELECT COALESCE(max(version), 0) FROM schema_version",
             SQL_PG_WRITE_LOCK_KEY);
    res = PQexec(c->db, sql);
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
        version = atoi(PQgetvalue(res, 0, 0));
    else
        pg_fail(c, res);
    PQclear(res);
    if (version < 0 && PQstatus(c->db) == CONNECTION_OK &&
        PQtransactionStatus(c->db) != PQTRANS_IDLE)
        PQclear(PQexec(c->db, "ROLLBACK"));
    return version;
}

/* Applies m inside the open migration transaction and commits it with its version row. */
static int pg_apply_migration(struct pg_conn *c, const struct sbx_migration *m)
{
    char version[16], at[24];
    const char *params[3] = {version, m->name, at};
    PGresult *res;
    int ok;

    if (pg_run(c, m->sql) != SQL_DONE)
        return -1;
    snprintf(version, sizeof version, "%d", m->version);
    snprintf(at, sizeof at, "%" PRId64, clock_wall_ms());
    res = PQexecParams(c->db,
                       "INSERT INTO schema_version (version, name, applied_at) "
                       "VALUES ($1::integer, $2, $3::bigint)",
                       3, NULL, params, NULL, NULL, 0);
    ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok)
        pg_fail(c, res);
    PQclear(res);
    if (!ok)
        return -1;
    res = PQexec(c->db, "COMMIT");
    ok = PQresultStatus(res) == PGRES_COMMAND_OK && strcmp(PQcmdStatus(res), "COMMIT") == 0;
    if (!ok)
        pg_fail(c, res);
    PQclear(res);
    return ok ? 0 : -1;
}

int sql_pg_migrate(struct store *st, const struct sbx_migration *list, size_t n, char *err,
                   size_t errlen)
{
    struct pg_store *s = st->cls;
    struct pg_conn *c = pg_conn(st);
    int latest = n > 0 ? list[n - 1].version : 0;
    int have;

    if (!c || !pg_conn_usable(c)) {
        snprintf(err, errlen, "cannot connect to PostgreSQL at %s: %s", s->safe_url,
                 c ? c->last_error : "out of memory");
        return -1;
    }
    if ((have = pg_locked_version(c)) < 0) {
        snprintf(err, errlen, "%s: cannot read the schema version: %s", s->safe_url, c->last_error);
        return -1;
    }
    pg_run(c, "COMMIT");
    if (have > latest) {
        snprintf(err, errlen,
                 "%s has schema version %d, newer than this sbx (which knows up to %d): "
                 "run a newer sbx, or restore a backup made by this version",
                 s->safe_url, have, latest);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const struct sbx_migration *m = &list[i];
        if (m->version <= have)
            continue;
        /* Re-read under the lock: another process may have migrated meanwhile. */
        if ((have = pg_locked_version(c)) < 0) {
            snprintf(err, errlen, "%s: cannot lock for migration: %s", s->safe_url, c->last_error);
            return -1;
        }
        if (have >= m->version) {
            pg_run(c, "COMMIT");
            continue;
        }
        if (pg_apply_migration(c, m) != 0) {
            if (PQstatus(c->db) == CONNECTION_OK && PQtransactionStatus(c->db) != PQTRANS_IDLE)
                PQclear(PQexec(c->db, "ROLLBACK"));
            snprintf(err, errlen, "%s: migration %04d_%s failed: %s", s->safe_url, m->version,
                     m->name, c->last_error);
            return -1;
        }
        have = m->version;
        log_info("store: applied migration %04d_%s", m->version, m->name);
    }
    return 0;
}
