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
 */
#include "sql_pg.h"
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

/* Type oids of the parameters we send (pg_type.h is not in libpq-dev's public headers). */
#define PG_OID_BYTEA 17
#define PG_OID_INT8 20
#define PG_OID_TEXT 25
#define PG_OID_TEXT_ARRAY 1009

#define PG_STMT_SLOTS 512 /* per-connection statement table (open addressing); power of two */
#define PG_STMT_MAX 384   /* beyond this the table would get slow; the store has ~100 */
#define PG_VARIANTS 4     /* prepared type signatures per statement */
#define PG_PENDING_MAX 8  /* commands held back per connection (BEGIN, lock, savepoints) */
#define PG_PENDING_LEN 64
#define PG_IDLE_IN_TXN_TIMEOUT_MS 30000 /* see pg_session_setup_sql() */

struct pg_conn;

/* One parameter's storage: copied text or blob bytes, or an int64's digits. Reused between
 * executions, so a statement bound in a loop allocates only when a value outgrows its buffer. */
struct pg_param_buf {
    char *data;
    size_t cap;
    char digits[24];
};

struct pg_variant {
    Oid *types; /* nparams type oids this variant was prepared with */
    char name[24];
};

struct pg_stmt {
    struct sql_stmt base;
    struct pg_conn *conn;
    const char *key; /* the store's SQL text (its address is the cache key) */
    char *text;      /* the same with $N for ?N */
    int nparams;
    bool read_only;   /* a plain SELECT: safe to run again after a lost connection */
    bool bind_failed; /* a value could not be bound (out of memory): the step fails */
    /* The current bindings, in PQexecPrepared's form. */
    Oid *types;
    const char **values;
    int *lengths;
    int *formats;
    Oid *null_types; /* each parameter's last bound type, for NULLs: see pg_bind_null() */
    struct pg_param_buf *bufs;
    int nvariants;
    struct pg_variant variants[PG_VARIANTS];
    /* The execution: run once by the first step after binding. */
    bool ran;
    PGresult *res;
    int row; /* the current row; -1 before the first step */
    int nrows;
};

struct pg_conn {
    PGconn *db;
    struct pg_conn *next;
    struct pg_store *store;
    /* Between begin() and commit()/rollback(): a lost connection is not replaced meanwhile, since
     * the statements that follow would run outside the transaction they belong to. */
    bool in_txn;
    int64_t changes;
    enum store_status last_status; /* of the last failure on this connection */
    char last_sqlstate[6];
    char last_error[512];
    /* Commands held back until the transaction's next statement, which carries them in the same
     * round trip: its BEGIN (see pg_begin()) and savepoint commands (see pg_exec()). */
    int npending;
    char pending[PG_PENDING_MAX][PG_PENDING_LEN];
    /* begin() held back its BEGIN (first among pending): the transaction has not reached the
     * server yet, so a connection found dead can be replaced and everything sent again. */
    bool begin_pending;
    /* The statement being run is the transaction's last (pg_step_commit()): its COMMIT goes with
     * it. Once that statement succeeded, committed_ahead is set and ahead_status is the COMMIT's
     * outcome, which commit() reports: the transaction is over on the server. */
    bool commit_ahead;
    bool committed_ahead;
    enum store_status ahead_status;
    unsigned next_prepared; /* names prepared statements uniquely within the session */
    unsigned nstmts;
    struct pg_stmt *slots[PG_STMT_SLOTS];
};

struct pg_store {
    struct sql_store base; /* first: the store's cls is a struct sql_store */
    char *url;
    char *safe_url;          /* without password, for messages */
    char write_lock[64];     /* the writers' lock, exclusive: serial writers */
    char shared_lock[64];    /* the same lock, shared: concurrent writers and single writes */
    char session_setup[512]; /* see pg_session_setup() */
    pthread_key_t conn_key;
    pthread_mutex_t conns_lock;
    struct pg_conn *conns; /* every open connection, to close them all */
};

static const struct sql_engine pg_engine;

/* ---- URL and connections ---- */

/* url without the password of its user-info part or of a password= parameter. */
static char *pg_redact_url(const char *url)
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
static void pg_copy_message(char *out, size_t outlen, const char *msg)
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
static void pg_session_setup_sql(struct pg_store *s, int lock_timeout_ms)
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

static void pg_stmt_clear_result(struct pg_stmt *s)
{
    PQclear(s->res);
    s->res = NULL;
    s->ran = false;
    s->row = -1;
    s->nrows = 0;
}

static void pg_stmt_free(struct pg_stmt *s)
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

static void pg_conn_close(struct pg_conn *c)
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

static void pg_set_error(struct pg_conn *c, enum store_status status, const char *msg)
{
    c->last_status = status;
    c->last_sqlstate[0] = '\0';
    pg_copy_message(c->last_error, sizeof c->last_error, msg);
}

/* Makes sure c has a working session: after a lost connection (a restarted or failed-over server)
 * tries one reconnection, so that sbx recovers without a restart. Not inside a transaction, whose
 * statements must not silently continue in a new session: rollback() ends it first. */
static bool pg_conn_usable(struct pg_conn *c)
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
static struct pg_conn *pg_conn(struct store *st)
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
static void pg_fail(struct pg_conn *c, const PGresult *res)
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
static int pg_run(struct pg_conn *c, const char *sql)
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

/* One query to send: a prepared statement (name), or text with parameters (types may be NULL). */
struct pg_query {
    const char *name;
    const char *text;
    int nparams;
    const Oid *types;
    const char *const *values;
    const int *lengths;
    const int *formats;
};

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
static PGresult *pg_pipeline(struct pg_conn *c, const char *const *pre, int npre,
                             const struct pg_query *q, PGresult **commit)
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
static enum store_status pg_commit_status(struct pg_conn *c, PGresult *res)
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
static PGresult *pg_query_run(struct pg_conn *c, const struct pg_query *q)
{
    if (c->npending > 0)
        return pg_pipeline(c, NULL, 0, q, NULL);
    if (q->name)
        return PQexecPrepared(c->db, q->name, q->nparams, q->values, q->lengths, q->formats, 0);
    return PQexecParams(c->db, q->text, q->nparams, q->types, q->values, q->lengths, q->formats, 0);
}

/* ---- statements ---- */

/* Writes the store's SQL to out (when not NULL) with ?N turned into $N, outside '...' literals,
 * "..." identifiers and -- comments; marks in referenced (when not NULL, nparams long) the N that
 * occur. Returns the highest N. */
static int pg_rewrite(const char *sql, char *out, bool *referenced)
{
    char quote = 0;
    int max = 0;
    for (size_t i = 0; sql[i]; i++) {
        char ch = sql[i];
        if (out)
            out[i] = ch;
        if (quote) {
            if (ch == quote)
                quote = 0; /* a doubled quote closes and reopens: same result */
        } else if (ch == '\'' || ch == '"') {
            quote = ch;
        } else if (ch == '-' && sql[i + 1] == '-') {
            while (sql[i + 1] && sql[i + 1] != '\n') {
                i++;
                if (out)
                    out[i] = sql[i];
            }
        } else if (ch == '?' && isdigit((unsigned char)sql[i + 1])) {
            int n = 0;
            if (out)
                out[i] = '$';
            while (isdigit((unsigned char)sql[i + 1])) {
                i++;
                if (out)
                    out[i] = sql[i];
                if (n < 100000)
                    n = n * 10 + (sql[i] - '0');
            }
            if (n > max)
                max = n;
            if (referenced && n > 0)
                referenced[n - 1] = true;
        }
    }
    return max;
}

static unsigned pg_slot_of(const char *key)
{
    uint64_t h = (uint64_t)(uintptr_t)key * UINT64_C(0x9E3779B97F4A7C15);
    return (unsigned)(h >> 40) & (PG_STMT_SLOTS - 1);
}

static void pg_bind_reset(struct pg_stmt *s)
{
    s->bind_failed = false;
    for (int i = 0; i < s->nparams; i++) {
        s->types[i] = s->null_types[i];
        s->values[i] = NULL;
        s->lengths[i] = 0;
        s->formats[i] = 0;
    }
}

static struct pg_stmt *pg_stmt_new(struct pg_conn *c, const char *sql)
{
    struct pg_stmt *s = calloc(1, sizeof *s);
    size_t len = strlen(sql), n;
    bool *referenced = NULL;
    if (!s)
        return NULL;
    s->base.eng = &pg_engine;
    s->conn = c;
    s->key = sql;
    s->row = -1;
    s->nparams = pg_rewrite(sql, NULL, NULL);
    n = s->nparams > 0 ? (size_t)s->nparams : 1;
    s->text = malloc(len + 1);
    s->types = calloc(n, sizeof *s->types);
    s->values = calloc(n, sizeof *s->values);
    s->lengths = calloc(n, sizeof *s->lengths);
    s->formats = calloc(n, sizeof *s->formats);
    s->null_types = calloc(n, sizeof *s->null_types);
    s->bufs = calloc(n, sizeof *s->bufs);
    referenced = calloc(n, sizeof *referenced);
    if (!s->text || !s->types || !s->values || !s->lengths || !s->formats || !s->null_types ||
        !s->bufs || !referenced) {
        free(referenced);
        pg_stmt_free(s);
        return NULL;
    }
    pg_rewrite(sql, s->text, referenced);
    s->text[len] = '\0';
    /* A parameter that the SQL skips ($3 of "$2, $4") needs a type, which no context gives. */
    for (int i = 0; i < s->nparams; i++)
        if (!referenced[i])
            s->null_types[i] = PG_OID_TEXT;
    free(referenced);
    pg_bind_reset(s);
    s->read_only = strncasecmp(s->text + strspn(s->text, " \t\n"), "SELECT", 6) == 0 &&
                   !strstr(s->text, "FOR UPDATE");
    return s;
}

static struct sql_stmt *pg_stmt(struct store *st, const char *sql)
{
    struct pg_conn *c = pg_conn(st);
    unsigned slot;
    if (!c)
        return NULL;
    for (slot = pg_slot_of(sql); c->slots[slot]; slot = (slot + 1) & (PG_STMT_SLOTS - 1))
        if (c->slots[slot]->key == sql)
            return &c->slots[slot]->base;
    if (c->nstmts == PG_STMT_MAX) {
        /* Never expected: the store has far fewer distinct statements. */
        log_error("store: statement cache full");
        return NULL;
    }
    if (!(c->slots[slot] = pg_stmt_new(c, sql))) {
        log_error("store: out of memory");
        return NULL;
    }
    c->nstmts++;
    return &c->slots[slot]->base;
}

static struct pg_stmt *pg_s(struct sql_stmt *s)
{
    return (struct pg_stmt *)s;
}

/* The index of parameter idx (1-based), or -1 when the SQL has no such ?N. A bind after the
 * statement ran starts a new execution, as a reset would. */
static int pg_param(struct pg_stmt *s, int idx)
{
    if (idx < 1 || idx > s->nparams)
        return -1;
    if (s->ran)
        pg_stmt_clear_result(s);
    return idx - 1;
}

/* Makes the parameter's buffer hold len bytes; false when out of memory. */
static bool pg_param_reserve(struct pg_param_buf *b, size_t len)
{
    char *grown;
    size_t cap;
    if (len <= b->cap && b->data)
        return true;
    cap = len < 64 ? 64 : len + len / 2;
    if (!(grown = realloc(b->data, cap)))
        return false;
    b->data = grown;
    b->cap = cap;
    return true;
}

static void pg_bind_text(struct sql_stmt *ss, int idx, const char *v, bool copy)
{
    struct pg_stmt *s = pg_s(ss);
    int i = pg_param(s, idx);
    if (i < 0)
        return;
    s->types[i] = PG_OID_TEXT; /* also for NULL: `?N IS NULL` needs a type to parse */
    s->null_types[i] = PG_OID_TEXT;
    s->formats[i] = 0;
    s->values[i] = v;
    if (v && copy) {
        size_t len = strlen(v) + 1;
        if (!pg_param_reserve(&s->bufs[i], len)) {
            log_error("store: out of memory binding parameter %d", idx);
            s->bind_failed = true;
            return;
        }
        memcpy(s->bufs[i].data, v, len);
        s->values[i] = s->bufs[i].data;
    }
}

static void pg_bind_text_array(struct sql_stmt *ss, int idx, const char *literal)
{
    struct pg_stmt *s = pg_s(ss);
    int i = pg_param(s, idx);
    if (i < 0)
        return;
    pg_bind_text(ss, idx, literal, false);
    s->types[i] = PG_OID_TEXT_ARRAY;
    s->null_types[i] = PG_OID_TEXT_ARRAY;
}

static void pg_bind_int64(struct sql_stmt *ss, int idx, int64_t v)
{
    struct pg_stmt *s = pg_s(ss);
    int i = pg_param(s, idx);
    char *end, *p;
    uint64_t u;
    if (i < 0)
        return;
    end = s->bufs[i].digits + sizeof s->bufs[i].digits - 1;
    *end = '\0';
    p = end;
    u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    s->types[i] = PG_OID_INT8;
    s->null_types[i] = PG_OID_INT8;
    s->formats[i] = 0;
    s->values[i] = p;
}

/* A NULL needs a type for the server to parse `?N IS NULL`: the type this position was last bound
 * with, else int8, since the store binds NULL this way only for a missing number (a missing text
 * comes through bind_text, which types it as text). A parameter left unbound is NULL of its last
 * type too, or of none (the server infers it) if it was never bound. */
static void pg_bind_null(struct sql_stmt *ss, int idx)
{
    struct pg_stmt *s = pg_s(ss);
    int i = pg_param(s, idx);
    if (i < 0)
        return;
    s->types[i] = s->null_types[i] ? s->null_types[i] : PG_OID_INT8;
    s->values[i] = NULL;
    s->formats[i] = 0;
}

static void pg_bind_blob(struct sql_stmt *ss, int idx, const void *v, size_t len)
{
    struct pg_stmt *s = pg_s(ss);
    int i = pg_param(s, idx);
    if (i < 0)
        return;
    if (len > INT32_MAX || !pg_param_reserve(&s->bufs[i], len ? len : 1)) {
        log_error("store: cannot bind a blob of %zu bytes to parameter %d", len, idx);
        s->bind_failed = true;
        return;
    }
    if (len)
        memcpy(s->bufs[i].data, v, len);
    s->types[i] = PG_OID_BYTEA;
    s->null_types[i] = PG_OID_BYTEA;
    s->values[i] = s->bufs[i].data;
    s->lengths[i] = (int)len;
    s->formats[i] = 1; /* binary: the bytes as they are */
}

/* The prepared statement for the current parameter types, preparing it on first use. */
static const char *pg_prepared_name(struct pg_stmt *s)
{
    struct pg_conn *c = s->conn;
    size_t sig = (size_t)s->nparams * sizeof(Oid);
    struct pg_variant *v;
    PGresult *res;

    for (int i = 0; i < s->nvariants; i++)
        if (memcmp(s->variants[i].types, s->types, sig) == 0)
            return s->variants[i].name;
    if (s->nvariants == PG_VARIANTS)
        return NULL; /* unusual signatures: run unprepared */
    v = &s->variants[s->nvariants];
    snprintf(v->name, sizeof v->name, "sbx_%u", c->next_prepared++);
    res = PQprepare(c->db, v->name, s->text, s->nparams, s->types);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        pg_fail(c, res);
        PQclear(res);
        return "";
    }
    PQclear(res);
    if (!(v->types = malloc(sig ? sig : 1)))
        return v->name; /* prepared but not remembered: a later execution prepares anew */
    memcpy(v->types, s->types, sig);
    s->nvariants++;
    return v->name;
}

/* Runs the statement with its bindings: one round trip (two the first time a type signature is
 * seen on this connection). */
static int pg_execute_once(struct pg_stmt *s)
{
    struct pg_conn *c = s->conn;
    const char *name;
    ExecStatusType rs;
    bool ahead = c->commit_ahead && c->in_txn;

    c->commit_ahead = false;
    if (c->committed_ahead) {
        pg_set_error(c, STORE_ERROR, "a statement after its transaction's last");
        return SQL_ERROR;
    }
    if (!pg_conn_usable(c))
        return SQL_ERROR;
    name = pg_prepared_name(s);
    if (name && !*name)
        return SQL_ERROR; /* the prepare failed: recorded */
    struct pg_query q = {name, s->text, s->nparams, s->types, s->values, s->lengths, s->formats};
    if (!c->in_txn && !s->read_only) {
        /* A write outside a transaction is one statement, made safe beside concurrent writers by
         * its own WHERE (re-checked on the row it locks): it takes the writers' lock shared, so
         * that a serial writer still excludes it. The lock and the statement run as one implicit
         * transaction, in the same one round trip. */
        const char *lock = c->store->shared_lock;
        s->res = pg_pipeline(c, &lock, 1, &q, NULL);
    } else if (ahead) {
        PGresult *commit;
        s->res = pg_pipeline(c, NULL, 0, &q, &commit);
        rs = PQresultStatus(s->res);
        if (rs == PGRES_TUPLES_OK || rs == PGRES_COMMAND_OK) {
            c->committed_ahead = true;
            c->ahead_status = pg_commit_status(c, commit);
        }
        PQclear(commit);
    } else {
        s->res = pg_query_run(c, &q);
    }
    rs = PQresultStatus(s->res);
    if (rs != PGRES_TUPLES_OK && rs != PGRES_COMMAND_OK) {
        pg_fail(c, s->res);
        PQclear(s->res);
        s->res = NULL;
        return SQL_ERROR;
    }
    s->nrows = PQntuples(s->res);
    /* Like sqlite3_changes(): only what an INSERT, UPDATE or DELETE (also with RETURNING) changed,
     * so that a SELECT between a write and the check leaves the count alone. */
    if (strncmp(PQcmdStatus(s->res), "SELECT", 6) != 0)
        c->changes = strtoll(PQcmdTuples(s->res), NULL, 10);
    return SQL_DONE;
}

/* A plain SELECT outside a transaction that failed because the connection was gone (the server
 * restarted since this connection's last use) runs again on a new connection: it changed
 * nothing. So does a transaction's first statement, whole with its held-back BEGIN: a
 * transaction the server never committed is rolled back when its connection goes. Not one that
 * carries its COMMIT (pg_step_commit()): the server may have committed it before the connection
 * went. Anything else reports STORE_BUSY, since a write may or may not have happened, and the
 * next use reconnects. */
static int pg_execute(struct pg_stmt *s)
{
    struct pg_conn *c = s->conn;
    bool was_connected = PQstatus(c->db) == CONNECTION_OK;
    bool first_of_txn = c->begin_pending, ahead = c->commit_ahead;
    char held[PG_PENDING_MAX][PG_PENDING_LEN];
    int nheld = c->npending;
    int rc;

    if (first_of_txn)
        memcpy(held, c->pending, (size_t)nheld * sizeof held[0]);
    rc = pg_execute_once(s);
    if (rc == SQL_DONE || !was_connected || PQstatus(c->db) == CONNECTION_OK) {
        s->ran = true;
        return rc;
    }
    if (first_of_txn && !ahead) {
        /* The transaction's first statement found the connection dead: nothing of it was
         * committed, so it starts again, whole, on a new connection. */
        c->in_txn = false;
        if (pg_conn_usable(c)) {
            memcpy(c->pending, held, (size_t)nheld * sizeof held[0]);
            c->npending = nheld;
            c->begin_pending = true;
            c->in_txn = true;
            rc = pg_execute_once(s);
        }
        c->in_txn = true; /* ended by the caller's rollback, as for any failure */
    } else if (s->read_only && !c->in_txn) {
        rc = pg_execute_once(s);
    }
    s->ran = true;
    return rc;
}

static int pg_step(struct sql_stmt *ss)
{
    struct pg_stmt *s = pg_s(ss);
    if (s->bind_failed)
        return SQL_NOMEM; /* not run with a value missing */
    if (!s->ran && pg_execute(s) != SQL_DONE)
        return SQL_ERROR;
    if (!s->res)
        return SQL_ERROR; /* stepped again after a failure */
    if (s->row < s->nrows)
        s->row++;
    return s->row < s->nrows ? SQL_ROW : SQL_DONE;
}

/* The first step of the transaction's last statement: its COMMIT is sent right behind it, in the
 * same round trip (see sql_step_then_commit()). */
static int pg_step_commit(struct sql_stmt *ss)
{
    struct pg_stmt *s = pg_s(ss);
    if (!s->bind_failed && !s->ran)
        s->conn->commit_ahead = true;
    return pg_step(ss);
}

static bool pg_has_value(struct pg_stmt *s, int col)
{
    return s->res && s->row >= 0 && s->row < s->nrows && col >= 0 && col < PQnfields(s->res) &&
           !PQgetisnull(s->res, s->row, col);
}

static bool pg_col_null(struct sql_stmt *ss, int col)
{
    return !pg_has_value(pg_s(ss), col);
}

/* Text to int64: integers, numeric results of count()/sum() ("12", "12.0" -> 12) and booleans
 * ("t"/"f", from EXISTS and comparisons). */
static int64_t pg_col_int64(struct sql_stmt *ss, int col)
{
    struct pg_stmt *s = pg_s(ss);
    const char *v;
    if (!pg_has_value(s, col))
        return 0;
    v = PQgetvalue(s->res, s->row, col);
    if (v[0] == 't' && v[1] == '\0')
        return 1;
    if (v[0] == 'f' && v[1] == '\0')
        return 0;
    return strtoll(v, NULL, 10);
}

static const char *pg_col_text(struct sql_stmt *ss, int col)
{
    struct pg_stmt *s = pg_s(ss);
    return pg_has_value(s, col) ? PQgetvalue(s->res, s->row, col) : NULL;
}

static int pg_hex(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* A bytea column comes as \x and hex digits (bytea_output = hex); any other column's text is
 * returned as its bytes. */
static size_t pg_col_blob(struct sql_stmt *ss, int col, void *out, size_t outlen)
{
    struct pg_stmt *s = pg_s(ss);
    const char *v;
    unsigned char *o = out;
    size_t len, n = 0;
    if (!pg_has_value(s, col))
        return 0;
    v = PQgetvalue(s->res, s->row, col);
    len = (size_t)PQgetlength(s->res, s->row, col);
    if (PQftype(s->res, col) != PG_OID_BYTEA || len < 2 || v[0] != '\\' || v[1] != 'x') {
        memcpy(out, v, len < outlen ? len : outlen);
        return len;
    }
    for (size_t i = 2; i + 1 < len; i += 2, n++) {
        int hi = pg_hex(v[i]), lo = pg_hex(v[i + 1]);
        if (hi < 0 || lo < 0)
            break;
        if (n < outlen)
            o[n] = (unsigned char)(hi << 4 | lo);
    }
    return n;
}

static void pg_done(struct sql_stmt *ss)
{
    struct pg_stmt *s = pg_s(ss);
    pg_stmt_clear_result(s);
    pg_bind_reset(s);
}

static int64_t pg_changes(struct store *st)
{
    struct pg_conn *c = pg_conn(st);
    return c ? c->changes : 0;
}

/* A command inside a transaction that can wait for the next statement. */
static bool pg_deferrable(struct pg_conn *c, const char *sql)
{
    return c->in_txn && c->npending < PG_PENDING_MAX && strlen(sql) < PG_PENDING_LEN &&
           !strchr(sql, ';') &&
           (strncasecmp(sql, "SAVEPOINT ", 10) == 0 || strncasecmp(sql, "RELEASE ", 8) == 0 ||
            strncasecmp(sql, "ROLLBACK TO ", 12) == 0) &&
           PQstatus(c->db) == CONNECTION_OK;
}

/* Savepoint commands (the group commit takes one around its batch statement and around each
 * request with a key) are held back and sent with the transaction's next statement or COMMIT, in
 * one round trip: they return no rows, and a failure is reported by that statement, which could
 * not have run after it anyway. Each would otherwise be a round trip of its own. */
static int pg_exec(struct store *st, const char *sql)
{
    struct pg_conn *c = pg_conn(st);
    if (!c)
        return SQL_NOMEM;
    if (c->committed_ahead) {
        pg_set_error(c, STORE_ERROR, "a command after its transaction's last statement");
        return SQL_ERROR;
    }
    if (pg_deferrable(c, sql)) {
        snprintf(c->pending[c->npending++], PG_PENDING_LEN, "%s", sql);
        return SQL_DONE;
    }
    if (!pg_conn_usable(c))
        return SQL_ERROR;
    if (c->npending > 0 && !strchr(sql, ';')) {
        struct pg_query q = {.text = sql};
        PGresult *res = pg_pipeline(c, NULL, 0, &q, NULL);
        ExecStatusType rs = PQresultStatus(res);
        int rc = rs == PGRES_COMMAND_OK || rs == PGRES_TUPLES_OK ? SQL_DONE : SQL_ERROR;
        if (rc != SQL_DONE)
            pg_fail(c, res);
        PQclear(res);
        return rc;
    }
    if (c->npending > 0) {
        PGresult *res = pg_pipeline(c, NULL, 0, NULL, NULL);
        if (res) {
            pg_fail(c, res);
            PQclear(res);
            return SQL_ERROR;
        }
    }
    return pg_run(c, sql);
}

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

static const struct sql_engine pg_engine = {
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
    st->close = sql_pg_store_close;

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
