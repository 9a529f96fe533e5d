/*
 * sql_pg_stmt.c: the PostgreSQL engine's statements (sql_pg_internal.h): the store's ?N rewritten
 * to $N, a per-connection cache of statements prepared once per list of parameter types,
 * bindings, execution (again after a lost connection when read-only) and reading rows.
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

struct sql_stmt *pg_stmt(struct store *st, const char *sql)
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

void pg_bind_text(struct sql_stmt *ss, int idx, const char *v, bool copy)
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

void pg_bind_text_array(struct sql_stmt *ss, int idx, const char *literal)
{
    struct pg_stmt *s = pg_s(ss);
    int i = pg_param(s, idx);
    if (i < 0)
        return;
    pg_bind_text(ss, idx, literal, false);
    s->types[i] = PG_OID_TEXT_ARRAY;
    s->null_types[i] = PG_OID_TEXT_ARRAY;
}

void pg_bind_int64(struct sql_stmt *ss, int idx, int64_t v)
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
void pg_bind_null(struct sql_stmt *ss, int idx)
{
    struct pg_stmt *s = pg_s(ss);
    int i = pg_param(s, idx);
    if (i < 0)
        return;
    s->types[i] = s->null_types[i] ? s->null_types[i] : PG_OID_INT8;
    s->values[i] = NULL;
    s->formats[i] = 0;
}

void pg_bind_blob(struct sql_stmt *ss, int idx, const void *v, size_t len)
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

int pg_step(struct sql_stmt *ss)
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
int pg_step_commit(struct sql_stmt *ss)
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

bool pg_col_null(struct sql_stmt *ss, int col)
{
    return !pg_has_value(pg_s(ss), col);
}

/* Text to int64: integers, numeric results of count()/sum() ("12", "12.0" -> 12) and booleans
 * ("t"/"f", from EXISTS and comparisons). */
int64_t pg_col_int64(struct sql_stmt *ss, int col)
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

const char *pg_col_text(struct sql_stmt *ss, int col)
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
size_t pg_col_blob(struct sql_stmt *ss, int col, void *out, size_t outlen)
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

void pg_done(struct sql_stmt *ss)
{
    struct pg_stmt *s = pg_s(ss);
    pg_stmt_clear_result(s);
    pg_bind_reset(s);
}

int64_t pg_changes(struct store *st)
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
int pg_exec(struct store *st, const char *sql)
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
