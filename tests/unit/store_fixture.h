/*
 * store_fixture.h: the fixture of the store's unit tests (test_store_api.c, test_store_queue.c,
 * test_store_hosts.c), so that the same tests run on both SQL engines.
 *
 * When SBX_TEST_PG_URL is set (tests/pg-run.sh sets it, with SBX_TEST_PG_ADMIN_URL), every test
 * gets a fresh PostgreSQL database of the fixture's cluster, opened with store_pg_open() and
 * dropped afterwards; otherwise a fresh SQLite file in a temporary directory, as before.
 *
 * Tests reach the database behind the store's back (to set up a state, or to read what the store
 * wrote, as an auditor would) only through the db_* helpers below, over a second connection of
 * their own. Their SQL must be in the subset both engines speak: no SQLite-only functions,
 * `FROM (subquery) AS x`, and booleans as CASE WHEN ... THEN 1 ELSE 0 END (db_int fails on a
 * PostgreSQL boolean rather than guess).
 */
#ifndef SBX_TEST_STORE_FIXTURE_H
#define SBX_TEST_STORE_FIXTURE_H

#include "store.h"

#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

struct store_fixture {
    struct store *st;
    bool pg; /* the store runs on PostgreSQL */
    /* SQLite: the database file, in a temporary directory of its own. */
    char dir[64];
    char path[128];
    sqlite3 *raw_sqlite;
    sqlite3 *writer_lock_sqlite; /* a connection holding the write lock (db_lock_writers) */
    /* PostgreSQL: the test's own database of the fixture's cluster. */
    char dbname[40];
    char url[1024];
    PGconn *raw_pg;
    PGconn *writer_lock_pg;
};

/* Opens a fresh store on the engine the environment selects (see above); name tags the SQLite
 * directory (/tmp/sbx-test-<name>-XXXXXX). busy_timeout_ms is the store's (and the raw
 * connection's) lock wait; synchronous applies to SQLite. Fails the test on error. */
struct store_fixture *store_fixture_open(const char *name, int busy_timeout_ms,
                                         const char *synchronous);

/* Closes the store and the raw connections and removes the database (file or PostgreSQL
 * database). */
void store_fixture_close(struct store_fixture *f);

/* Runs one SQL statement (printf-style) on the raw connection; fails the test on error. */
void db_exec(struct store_fixture *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The first column of the first row as an integer: -1 when there is no row, 0 for NULL. */
int64_t db_int(struct store_fixture *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The first column of the first row as text into out: "" when there is no row or for NULL. */
void db_text(struct store_fixture *f, char *out, size_t outlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The schema version the database records (SQLite: PRAGMA user_version; PostgreSQL: the highest
 * version in schema_version). */
int64_t db_schema_version(struct store_fixture *f);

/* Whether the database has a table named table. */
bool db_has_table(struct store_fixture *f, const char *table);

/* Holds the writers' lock from a connection of the test's own, so that every writer of the store
 * waits (SQLite: BEGIN IMMEDIATE; PostgreSQL: the store's transaction-level advisory lock
 * SQL_PG_WRITE_LOCK_KEY), until db_unlock_writers(). */
void db_lock_writers(struct store_fixture *f);
void db_unlock_writers(struct store_fixture *f);

/* Counting the transactions in which the store wrote messages, to see group commit batch them.
 * db_mark_transactions() starts the count; db_message_transactions() says how many transactions
 * since then inserted rows into messages. SQLite: the commits in the WAL since the mark (a
 * checkpoint empties it), so the test must write nothing else meanwhile; PostgreSQL: the distinct
 * top-level transactions that a trigger on messages (installed by the mark) saw insert. */
void db_mark_transactions(struct store_fixture *f);
int64_t db_message_transactions(struct store_fixture *f);

#endif
