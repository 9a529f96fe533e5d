/*
 * sql_pg_conn.c: the PostgreSQL engine's connections (sql_pg_internal.h): the URL without its
 * password, one connection per thread set up for the store's session and replaced when the server
 * restarted, SQLSTATEs mapped to store statuses, and queries sent with the commands held back
 * for them in one round trip (libpq's pipeline mode).
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

/* ---- URL and connections ---- */

/* url without the password of its user-info part or of a password= parameter. */
char *pg_redact_url(const char *url)
{
    char *out = strdup(url);
    char *scheme, *auth_end, *colon, *at, *p;
    if (!out)
        return NULL;
    scheme = strstr(out, "://");
    if (scheme) {
        auth_end = scheme + 3 + strcspn(scheme + 3, "/?");
        at = memchr(scheme + 3, '@', (size_t)(auth_end - (scheme + 3)));
        colon = at ? memchr(scheme + 3, ':', (size_t)(at - (scheme + 3))) : NULL;
        if (colon)
            memmove(colon, at, strlen(at) + 1);
    }
    while ((p = strstr(out, "password=")) &&
           (p == out || p[-1] == '?' || p[-1] == '&' || p[-1] == ' ')) {
        char *end = p + strcspn(p, "& ");
        if (*end)
            end++;
        memmove(p, end, strlen(end) + 1);
    }
    size_t len = strlen(out);
    while (len > 0 && (out[len - 1] == '?' || out[len - 1] == '&'))
        out[--len] = '\0';
    return out;
}

/* libpq's messages end in a newline; ours are one line. */
void pg_copy_message(char *out, size_t outlen, const char *msg)
{
    size_t n;
    snprintf(out, outlen, "%s", msg && *msg ? msg : "unknown error");
    n = strlen(out);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
        out[--n] = '\0';
    for (char *p = out; *p; p++)
        if (*p == '\n')
            *p = ' ';
}

static void pg_notice(void *arg, const char *message)
{
    char line[512];
    (void)arg;
    pg_copy_message(line, sizeof line, message);
    log_debug("store: postgres: %s", line);
}

/* What every session of sbx runs with, set again after each reconnection (one round trip):
 * - synchronous_commit on (PostgreSQL's default, but a server or role may have changed it) is what
 *   makes a 202 durable: COMMIT returns once the commit record is flushed;
 * - times are integers in the schema, but now() and log lines stay in UTC;
 * - bytea in hex is what pg_col_blob() decodes;
 * - lock_timeout, unless the URL's options or the role's or database's settings give one: a lock
 *   wait beyond it fails with 55P03 (STORE_BUSY), like SQLite's busy timeout;
 * - idle_in_transaction_session_timeout, likewise: a process that stops in the middle of a writer
 *   transaction (SIGSTOP, a paused VM) would otherwise hold the one write lock of every host until
 *   it died; the server ends its session instead (sbx's transactions last milliseconds). */
void pg_session_setup_sql(struct pg_store *s, int lock_timeout_ms)
{
    snprintf(s->session_setup, sizeof s->session_setup,
             "SET synchronous_commit = on; SET TIME ZONE 'UTC'; SET bytea_output = 'hex'; "
             "SELECT set_config('lock_timeout', '%d', false) "
             "WHERE current_setting('lock_timeout') = '0'; "
             "SELECT set_config('idle_in_transaction_session_timeout', '%d', false) "
             "WHERE current_setting('idle_in_transaction_session_timeout') = '0'",
             lock_timeout_ms, PG_IDLE_IN_TXN_TIMEOUT_MS);
}

static int pg_session_setup(const struct pg_store *s, PGconn *db, char *err, size_t errlen)
{
    PGresult *res = PQexec(db, s->session_setup);
    ExecStatusType rs = PQresultStatus(res);
    int rc = rs == PGRES_COMMAND_OK || rs == PGRES_TUPLES_OK ? 0 : -1;
    if (rc != 0)
        pg_copy_message(err, errlen, PQerrorMessage(db));
    PQclear(res);
    return rc;
}

/* A new connection (also when it failed: PQstatus says so, and PQreset() can retry it). */
static PGconn *pg_connect(const struct pg_store *s)
{
    /* Ours first: with expand_dbname, what the URL says overrides them. */
    const char *const keys[] = {"fallback_application_name",
                                "connect_timeout",
                                "keepalives_idle",
                                "keepalives_interval",
                                "keepalives_count",
                                "dbname",
                                NULL};
    const char *const values[] = {"sbx", "10", "30", "10", "3", s->url, NULL};
    PGconn *db = PQconnectdbParams(keys, values, 1);
    if (db)
        PQsetNoticeProcessor(db, pg_notice, NULL);
    return db;
}

void pg_stmt_clear_result(struct pg_stmt *s)
{
    PQclear(s->res);
    s->res = NULL;
    s->ran = false;
    s->row = -1;
    s->nrows = 0;
}

void pg_stmt_free(struct pg_stmt *s)
{
    pg_stmt_clear_result(s);
    for (int i = 0; s->bufs && i < s->nparams; i++)
        free(s->bufs[i].data);
    for (int v = 0; v < s->nvariants; v++)
        free(s->variants[v].types);
    free(s->bufs);
    free(s->types);
    free(s->values);
    free(s->lengths);
    free(s->formats);
    free(s->null_types);
    free(s->text);
    free(s);
}

void pg_conn_close(struct pg_conn *c)
{
    for (unsigned i = 0; i < PG_STMT_SLOTS; i++)
        if (c->slots[i])
            pg_stmt_free(c->slots[i]);
    PQfinish(c->db);
    free(c);
}

/* Prepared statements die with their session: a reconnected session prepares them again. */
static void pg_conn_forget_prepared(struct pg_conn *c)
{
    for (unsigned i = 0; i < PG_STMT_SLOTS; i++) {
        struct pg_stmt *s = c->slots[i];
        if (!s)
            continue;
        for (int v = 0; v < s->nvariants; v++)
            free(s->variants[v].types);
        s->nvariants = 0;
    }
}

void pg_set_error(struct pg_conn *c, enum store_status status, const char *msg)
{
    c->last_status = status;
    c->last_sqlstate[0] = '\0';
    pg_copy_message(c->last_error, sizeof c->last_error, msg);
}

/* Makes sure c has a working session: after a lost connection (a restarted or failed-over server)
 * tries one reconnection, so that sbx recovers without a restart. Not inside a transaction, whose
 * statements must not silently continue in a new session: rollback() ends it first. */
bool pg_conn_usable(struct pg_conn *c)
{
    char err[256];
    if (PQstatus(c->db) == CONNECTION_OK)
        return true;
    if (c->in_txn) {
        pg_set_error(c, STORE_BUSY, "the connection to PostgreSQL was lost in a transaction");
        return false;
    }
    PQreset(c->db);
    pg_conn_forget_prepared(c);
    if (PQstatus(c->db) != CONNECTION_OK) {
        pg_copy_message(err, sizeof err, PQerrorMessage(c->db));
        log_warn("store: cannot reconnect to %s: %s", c->store->safe_url, err);
        pg_set_error(c, STORE_BUSY, err);
        return false;
    }
    if (pg_session_setup(c->store, c->db, err, sizeof err) != 0) {
        log_warn("store: cannot set up the session on %s: %s", c->store->safe_url, err);
        pg_set_error(c, STORE_BUSY, err);
        return false;
    }
    log_info("store: reconnected to %s", c->store->safe_url);
    return true;
}

/* The calling thread's connection, opened on first use. NULL only when out of memory; a
 * connection that could not be established is kept and retried by pg_conn_usable(). */
struct pg_conn *pg_conn(struct store *st)
{
    struct pg_store *s = st->cls;
    struct pg_conn *c = pthread_getspecific(s->conn_key);
    char err[256];

    if (c)
        return c;
    c = calloc(1, sizeof *c);
    if (!c || !(c->db = pg_connect(s))) {
        log_error("store: out of memory");
        free(c);
        return NULL;
    }
    c->store = s;
    if (PQstatus(c->db) != CONNECTION_OK) {
        pg_copy_message(err, sizeof err, PQerrorMessage(c->db));
        log_error("store: cannot connect to %s: %s", s->safe_url, err);
    } else if (pg_session_setup(c->store, c->db, err, sizeof err) != 0) {
        log_error("store: cannot set up the session on %s: %s", s->safe_url, err);
        PQfinish(c->db);
        free(c);
        return NULL;
    }
    pthread_mutex_lock(&s->conns_lock);
    c->next = s->conns;
    s->conns = c;
    pthread_mutex_unlock(&s->conns_lock);
    pthread_setspecific(s->conn_key, c);
    return c;
}

/* ---- errors ---- */

static enum store_status pg_sqlstate_status(const char *code)
{
    if (!code || strlen(code) != 5)
        return STORE_ERROR;
    if (strcmp(code, "23505") == 0)
        return STORE_CONFLICT; /* unique_violation */
    if (strncmp(code, "23", 2) == 0)
        return STORE_INVALID; /* not null, check, foreign key */
    /* Data exceptions: a value the database refuses that SQLite would have stored or compared,
     * such as text that is not UTF-8 (22021) from a hostile header or path. */
    if (strncmp(code, "22", 2) == 0)
        return STORE_INVALID;
    if (strncmp(code, "53", 2) == 0)
        return STORE_FULL; /* disk_full, out of memory, too many connections */
    if (strcmp(code, "40001") == 0 || strcmp(code, "40P01") == 0 || strcmp(code, "55P03") == 0 ||
        strcmp(code, "57014") == 0)
        return STORE_BUSY; /* serialization, deadlock, lock timeout, statement timeout */
    if (strncmp(code, "08", 2) == 0 || strcmp(code, "57P01") == 0 || strcmp(code, "57P02") == 0 ||
        strcmp(code, "57P03") == 0)
        return STORE_BUSY; /* the connection or the server went away: reconnected on next use */
    return STORE_ERROR;
}

/* Records why res (NULL: no result at all) failed on c. */
void pg_fail(struct pg_conn *c, const PGresult *res)
{
    const char *code = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    enum store_status status = pg_sqlstate_status(code);
    if (PQstatus(c->db) != CONNECTION_OK)
        status = STORE_BUSY;
    pg_set_error(c, status, res ? PQresultErrorMessage(res) : PQerrorMessage(c->db));
    snprintf(c->last_sqlstate, sizeof c->last_sqlstate, "%s", code ? code : "");
    if (!*c->last_error || strcmp(c->last_error, "unknown error") == 0)
        pg_copy_message(c->last_error, sizeof c->last_error, PQerrorMessage(c->db));
}

/* Runs sql (no parameters, possibly several statements) on c: SQL_DONE or SQL_ERROR. */
int pg_run(struct pg_conn *c, const char *sql)
{
    PGresult *res = PQexec(c->db, sql);
    ExecStatusType rs = PQresultStatus(res);
    int rc = SQL_DONE;
    if (rs != PGRES_COMMAND_OK && rs != PGRES_TUPLES_OK) {
        pg_fail(c, res);
        rc = SQL_ERROR;
    }
    PQclear(res);
    return rc;
}

static int pg_send(struct pg_conn *c, const struct pg_query *q)
{
    if (q->name)
        return PQsendQueryPrepared(c->db, q->name, q->nparams, q->values, q->lengths, q->formats,
                                   0);
    return PQsendQueryParams(c->db, q->text, q->nparams, q->types, q->values, q->lengths,
                             q->formats, 0);
}

/* Runs the held-back commands (BEGIN, savepoints), then the commands of pre, then q (NULL: none),
 * then, when commit is not NULL, COMMIT, all in one round trip (libpq's pipeline mode). Returns
 * q's result, or the first failure before or in q (q did not run after it: a held-back command's
 * failure is reported as q's); NULL when the connection failed. *commit is the COMMIT's result
 * (NULL when it did not run: after a failure the transaction block stays open, aborted). Outside
 * a transaction block, all of it is one implicit transaction, committed at its end. */
PGresult *pg_pipeline(struct pg_conn *c, const char *const *pre, int npre, const struct pg_query *q,
                      PGresult **commit)
{
    PGresult *first_failure = NULL, *main = NULL, *r;
    int nsent = 0, nbefore = c->npending + npre, npending = c->npending;
    const struct pg_query commit_q = {.text = "COMMIT"};

    if (commit)
        *commit = NULL;

    c->npending = 0;
    c->begin_pending = false;
    if (!PQenterPipelineMode(c->db))
        return NULL;
    for (int i = 0; i < nbefore; i++, nsent++) {
        struct pg_query cmd = {.text = i < npending ? c->pending[i] : pre[i - npending]};
        if (!pg_send(c, &cmd))
            break;
    }
    if (nsent == nbefore && q && pg_send(c, q))
        nsent++;
    if (nsent == nbefore + 1 && q && commit && pg_send(c, &commit_q))
        nsent++;
    if (!PQpipelineSync(c->db)) {
        PQexitPipelineMode(c->db);
        return NULL;
    }
    for (int i = 0; i < nsent; i++) {
        bool is_main = q && i == nbefore, is_commit = q && commit && i == nbefore + 1;
        while ((r = PQgetResult(c->db))) {
            ExecStatusType rs = PQresultStatus(r);
            if (is_main && !main && rs != PGRES_PIPELINE_ABORTED) {
                main = r;
            } else if (is_commit && !*commit && rs != PGRES_PIPELINE_ABORTED) {
                *commit = r;
            } else if (!first_failure && rs == PGRES_FATAL_ERROR) {
                first_failure = r;
            } else {
                PQclear(r);
            }
        }
        if (PQstatus(c->db) != CONNECTION_OK)
            break;
    }
    /* The end of the pipeline (where an implicit transaction commits, or fails to), then back to
     * one query at a time. */
    while ((r = PQgetResult(c->db))) {
        ExecStatusType rs = PQresultStatus(r);
        if (!first_failure && rs == PGRES_FATAL_ERROR) {
            first_failure = r;
            continue;
        }
        PQclear(r);
        if (rs == PGRES_PIPELINE_SYNC)
            break;
    }
    PQexitPipelineMode(c->db);
    if (first_failure) {
        PQclear(main);
        return first_failure;
    }
    return main;
}

/* What a COMMIT's result says (NULL: it never came back): STORE_OK, or the failure (recorded). */
enum store_status pg_commit_status(struct pg_conn *c, PGresult *res)
{
    if (!res) {
        pg_set_error(c, STORE_BUSY, "the connection to PostgreSQL was lost at COMMIT");
        return STORE_BUSY;
    }
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        pg_fail(c, res);
        return c->last_status;
    }
    if (strcmp(PQcmdStatus(res), "COMMIT") != 0) {
        pg_set_error(c, STORE_ERROR, "COMMIT rolled back");
        return STORE_ERROR;
    }
    return STORE_OK;
}

/* Runs q, after any held-back commands: one round trip either way. */
PGresult *pg_query_run(struct pg_conn *c, const struct pg_query *q)
{
    if (c->npending > 0)
        return pg_pipeline(c, NULL, 0, q, NULL);
    if (q->name)
        return PQexecPrepared(c->db, q->name, q->nparams, q->values, q->lengths, q->formats, 0);
    return PQexecParams(c->db, q->text, q->nparams, q->types, q->values, q->lengths, q->formats, 0);
}
