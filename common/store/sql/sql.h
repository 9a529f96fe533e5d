/*
 * sql.h: the SQL engines under the store (SQLite, PostgreSQL) behind one small statement API, so
 * that the store's logic (one file per table, on the shared helpers of store_sql.h) is written
 * once and runs on either database.
 *
 * Not for the gateway or the workers: they see only store.h (and its per-table headers). An engine
 * provides a struct sql_engine; a store opened on it has a struct sql_store as its cls.
 *
 * The SQL the store writes is the common subset of SQLite and PostgreSQL: numbered parameters
 * ?1..?N (the PostgreSQL engine rewrites them to $1..$N), integers for times and booleans, and an
 * explicit `rowid` column where lists page (PostgreSQL has no implicit rowid; its migrations
 * declare one). Where the two dialects differ, sql_dialect() tells which one runs.
 *
 * Connections are per thread (opened on first use). Statements are cached per connection, keyed
 * by the address of their SQL text, which must therefore be a string literal.
 */
#ifndef SBX_SQL_H
#define SBX_SQL_H

#include "store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What sql_step() returns besides an error (which is negative: see sql_status()). */
#define SQL_ROW 100
#define SQL_DONE 101
#define SQL_ERROR (-1) /* details (and the store status) are kept on the thread's connection */
#define SQL_NOMEM (-2) /* out of memory in the caller: STORE_ERROR */

enum sql_dialect { SQL_SQLITE, SQL_POSTGRES };

/* What a transaction is (sql_begin_read, sql_begin, sql_begin_concurrent). */
enum sql_txn {
    SQL_TXN_READ,      /* one snapshot, no locks */
    SQL_TXN_SERIAL,    /* the only writer while it runs: its reads stay true until it commits */
    SQL_TXN_CONCURRENT /* a writer made safe beside other writers by its own row locks */
};

struct sql_stmt; /* an engine's prepared statement; starts with its engine pointer */

struct sql_engine {
    const char *name;
    enum sql_dialect dialect;
    struct sql_stmt *(*stmt)(struct store *st, const char *sql);
    /* Text binds: sql_bind_text keeps the pointer until the statement is stepped or done;
     * sql_bind_text_copy copies. NULL binds SQL NULL. */
    void (*bind_text)(struct sql_stmt *s, int idx, const char *v, bool copy);
    void (*bind_int64)(struct sql_stmt *s, int idx, int64_t v);
    void (*bind_null)(struct sql_stmt *s, int idx);
    void (*bind_blob)(struct sql_stmt *s, int idx, const void *v, size_t len);
    /* A PostgreSQL array literal of texts ({"a","b"}), kept like sql_bind_text's, bound as TEXT[]
     * (SQLite, which has no arrays, binds the literal as text). */
    void (*bind_text_array)(struct sql_stmt *s, int idx, const char *literal);
    int (*step)(struct sql_stmt *s);
    /* The first step of a transaction's last statement (NULL: step): see sql_step_then_commit. */
    int (*step_commit)(struct sql_stmt *s);
    bool (*col_null)(struct sql_stmt *s, int col);
    int64_t (*col_int64)(struct sql_stmt *s, int col);
    const char *(*col_text)(struct sql_stmt *s, int col); /* NULL for NULL */
    /* Copies a blob column into out (up to outlen bytes); returns its full length. */
    size_t (*col_blob)(struct sql_stmt *s, int col, void *out, size_t outlen);
    void (*done)(struct sql_stmt *s);
    /* Rows changed by the last statement this thread stepped to its end. */
    int64_t (*changes)(struct store *st);
    /* A statement with no result rows (BEGIN, SAVEPOINT, ...); sql is a string literal, which
     * an engine may keep prepared like sql_stmt's (SQLite does). */
    int (*exec)(struct store *st, const char *sql);
    /* Serial writers take the database's write lock at BEGIN (SQLite: BEGIN IMMEDIATE;
     * PostgreSQL: BEGIN and the store's transaction-level advisory lock, exclusive), so a
     * writer's reads stay true until it commits, exactly as on SQLite. Concurrent writers take
     * the same lock shared on PostgreSQL (they run beside each other and exclude only serial
     * writers; what keeps them correct is in their own statements: row locks, conditional
     * updates, ON CONFLICT) and are serial writers on SQLite. Readers see one snapshot. */
    enum store_status (*begin)(struct store *st, enum sql_txn kind);
    enum store_status (*commit)(struct store *st); /* rolls back on failure */
    void (*rollback)(struct store *st);
    /* The store status of rc: STORE_OK for SQL_ROW/SQL_DONE, else the last error's (logged). */
    enum store_status (*status)(struct store *st, int rc);
    /* Closes the engine's connections and frees the store (store_close, after store_sql_fini). */
    void (*close)(struct store *st);
};

/* The states of a Sandbox that is not over (schema.sql's CHECK lists them all), for
 * "state IN " SQL_SANDBOX_LIVE: an IN list is a few searches of the sandboxes_state index, where
 * "state NOT IN ('terminated', 'failed')" walks every Sandbox there ever was. */
#define SQL_SANDBOX_LIVE "('booting', 'warm', 'claimed', 'running', 'stopping')"

/* An open store (opaque outside common/store/): its engine's state. The engine is the one
 * dispatch under the store's plain functions. */
struct store {
    void *cls; /* the engine's struct sql_store (extended) */
};

/* What every engine's store keeps as its cls; engines extend it (first member). */
struct sql_store {
    const struct sql_engine *eng;
    void *api; /* the group commit's state (enqueue.c) */
};

struct sql_stmt {
    const struct sql_engine *eng;
};

static inline const struct sql_engine *sql_eng(struct store *st)
{
    return ((struct sql_store *)st->cls)->eng;
}
static inline enum sql_dialect sql_dialect(struct store *st)
{
    return sql_eng(st)->dialect;
}
/* A cached statement for sql (a string literal) on this thread's connection; NULL on failure. */
static inline struct sql_stmt *sql_stmt(struct store *st, const char *sql)
{
    return sql_eng(st)->stmt(st, sql);
}
static inline void sql_bind_text(struct sql_stmt *s, int idx, const char *v)
{
    s->eng->bind_text(s, idx, v, false);
}
static inline void sql_bind_text_copy(struct sql_stmt *s, int idx, const char *v)
{
    s->eng->bind_text(s, idx, v, true);
}
/* Binds text, or NULL for NULL or "" (copied). */
static inline void sql_bind_text_or_null(struct sql_stmt *s, int idx, const char *v)
{
    s->eng->bind_text(s, idx, v && *v ? v : NULL, true);
}
static inline void sql_bind_int64(struct sql_stmt *s, int idx, int64_t v)
{
    s->eng->bind_int64(s, idx, v);
}
static inline void sql_bind_null(struct sql_stmt *s, int idx)
{
    s->eng->bind_null(s, idx);
}
static inline void sql_bind_blob(struct sql_stmt *s, int idx, const void *v, size_t len)
{
    s->eng->bind_blob(s, idx, v, len);
}
/* Binds an array literal as TEXT[] (on SQLite, as text). Typed so, `CAST(?N AS TEXT[])` is no
 * conversion at all: bound as text it would be one at run time, parsing the literal again each
 * time it is evaluated (for every row of a scan, when the planner scans the table). */
static inline void sql_bind_text_array(struct sql_stmt *s, int idx, const char *literal)
{
    s->eng->bind_text_array(s, idx, literal);
}
static inline int sql_step(struct sql_stmt *s)
{
    return s->eng->step(s);
}
/* The first step of the statement that ends its transaction: the caller then calls sql_commit()
 * (or sql_rollback()) with no statement or command in between. Where a statement is a round trip
 * (PostgreSQL), the COMMIT goes with it: when the statement succeeds, the transaction is
 * committed, or failed to commit, on the server already; sql_commit() reports which, and
 * sql_rollback() undoes nothing. When it fails, the COMMIT did not run and the transaction is
 * open, as after any failed statement (ROLLBACK TO a savepoint taken before it is allowed, and
 * the transaction goes on). Elsewhere (SQLite) it is sql_step(). */
static inline int sql_step_then_commit(struct sql_stmt *s)
{
    return s->eng->step_commit ? s->eng->step_commit(s) : s->eng->step(s);
}
static inline bool sql_col_null(struct sql_stmt *s, int col)
{
    return s->eng->col_null(s, col);
}
static inline int64_t sql_col_int64(struct sql_stmt *s, int col)
{
    return s->eng->col_int64(s, col);
}
static inline const char *sql_col_text(struct sql_stmt *s, int col)
{
    return s->eng->col_text(s, col);
}
static inline size_t sql_col_blob(struct sql_stmt *s, int col, void *out, size_t outlen)
{
    return s->eng->col_blob(s, col, out, outlen);
}
/* Resets the statement (and its bindings) for its next use; NULL is allowed. */
static inline void sql_done(struct sql_stmt *s)
{
    if (s)
        s->eng->done(s);
}
static inline int64_t sql_changes(struct store *st)
{
    return sql_eng(st)->changes(st);
}
static inline int sql_exec(struct store *st, const char *sql)
{
    return sql_eng(st)->exec(st, sql);
}
/* A serial writer: no other writer runs until it commits (see struct sql_engine's begin). */
static inline enum store_status sql_begin(struct store *st)
{
    return sql_eng(st)->begin(st, SQL_TXN_SERIAL);
}
/* A writer whose every read-then-write is protected by its own statements under READ COMMITTED
 * (docs/postgres.md lists what each relies on): on PostgreSQL it runs beside other concurrent
 * writers; on SQLite it is a serial writer. */
static inline enum store_status sql_begin_concurrent(struct store *st)
{
    return sql_eng(st)->begin(st, SQL_TXN_CONCURRENT);
}
static inline enum store_status sql_begin_read(struct store *st)
{
    return sql_eng(st)->begin(st, SQL_TXN_READ);
}
static inline enum store_status sql_commit(struct store *st)
{
    return sql_eng(st)->commit(st);
}
static inline void sql_rollback(struct store *st)
{
    sql_eng(st)->rollback(st);
}
static inline enum store_status sql_status(struct store *st, int rc)
{
    return sql_eng(st)->status(st, rc);
}

/* Sets up the engine-independent logic's state (the group commit, enqueue.c); called by each
 * engine's open function once its struct sql_store is the store's cls. store_sql_fini undoes it:
 * store_close() calls it before the engine's close. */
void store_sql_init(struct store *st);
void store_sql_fini(struct store *st);

#endif
