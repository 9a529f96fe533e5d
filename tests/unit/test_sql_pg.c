/*
 * test_sql_pg.c: the PostgreSQL engine (common/store/sql/sql_pg.c) against a real server: the
 * throwaway cluster tests/pg-run.sh starts (SBX_TEST_PG_URL). It drives the engine through sql.h on
 * a small schema of its own, so it checks the engine's contract, not the store's logic: ?N
 * rewriting, binds and columns, changes(), SQLSTATE mapping, the writers' lock (exclusive for
 * serial writers, shared for concurrent ones), readers' snapshots,
 * reconnection after the server restarts, and migrations (run once, newer schema refused); and
 * the pieces of the store that only concurrent writers exercise: the group commit passing over a
 * Session another transaction holds, and the events horizon.
 */
#include "log.h"
#include "store.h"
#include "clock.h"
#include "store/sql/sql_pg.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const struct sbx_migration test_schema[] = {
    {1, "items",
     "CREATE TABLE items (rowid BIGSERIAL PRIMARY KEY, name TEXT NOT NULL UNIQUE, n BIGINT "
     "CHECK (n IS NULL OR n >= -9223372036854775808), small INTEGER CHECK (small >= 0), "
     "note TEXT, data BYTEA)"},
    {2, "counters",
     "CREATE TABLE counters (id INTEGER PRIMARY KEY, value BIGINT NOT NULL); "
     "INSERT INTO counters (id, value) VALUES (1, 0)"},
};

/* The same and one more, which fails if it runs twice (no IF NOT EXISTS, and a row). */
static const struct sbx_migration test_schema_v3[] = {
    test_schema[0],
    test_schema[1],
    {3, "once", "CREATE TABLE once_t (id INTEGER PRIMARY KEY); INSERT INTO once_t (id) VALUES (1)"},
};

static const char *pg_url(void)
{
    const char *url = getenv("SBX_TEST_PG_URL");
    if (!url || !*url)
        fail_msg("SBX_TEST_PG_URL is not set: run this test under tests/pg-run.sh");
    return url;
}

static struct store *open_store(void)
{
    char err[512];
    struct store *st = sql_pg_store_open(pg_url(), 5000, err, sizeof err);
    if (!st)
        fail_msg("sql_pg_store_open: %s", err);
    return st;
}

/* One statement that must succeed and return no row. */
static void run_ok(struct store *st, const char *sql)
{
    struct sql_stmt *s = sql_stmt(st, sql);
    assert_non_null(s);
    int rc = sql_step(s);
    if (rc != SQL_DONE)
        fail_msg("\"%s\": %d (%s)", sql, rc, store_status_name(sql_status(st, rc)));
    sql_done(s);
}

/* The one int64 a query returns. */
static int64_t query_int(struct store *st, const char *sql)
{
    struct sql_stmt *s = sql_stmt(st, sql);
    int64_t v;
    assert_non_null(s);
    assert_int_equal(sql_step(s), SQL_ROW);
    v = sql_col_int64(s, 0);
    assert_int_equal(sql_step(s), SQL_DONE);
    sql_done(s);
    return v;
}

static int setup(void **state)
{
    char err[512];
    struct store *st = open_store();
    if (sql_pg_migrate(st, test_schema, 2, err, sizeof err) != 0)
        fail_msg("migrate: %s", err);
    run_ok(st, "DELETE FROM items");
    run_ok(st, "DELETE FROM counters WHERE id <> 1");
    run_ok(st, "UPDATE counters SET value = 0");
    *state = st;
    return 0;
}

static int teardown(void **state)
{
    struct store *st = *state;
    store_close(st);
    return 0;
}

static void test_rewrites_numbered_parameters_outside_literals(void **state)
{
    struct store *st = *state;
    struct sql_stmt *s = sql_stmt(st, "SELECT ?1 || '?2 it''s ?3' || ?2, 'a?b', ?10 -- ?11\n");
    assert_non_null(s);
    assert_int_equal(s->eng->dialect, SQL_POSTGRES);
    sql_bind_text(s, 1, "x");
    sql_bind_text(s, 2, "y");
    sql_bind_int64(s, 10, 42);
    assert_int_equal(sql_step(s), SQL_ROW);
    assert_string_equal(sql_col_text(s, 0), "x?2 it's ?3y");
    assert_string_equal(sql_col_text(s, 1), "a?b");
    assert_int_equal(sql_col_int64(s, 2), 42);
    assert_int_equal(sql_step(s), SQL_DONE);
    sql_done(s);

    /* The cache hands back the same statement for the same text, ready for new bindings. */
    assert_ptr_equal(sql_stmt(st, "SELECT ?1 || '?2 it''s ?3' || ?2, 'a?b', ?10 -- ?11\n"), s);
    sql_bind_text(s, 1, "p");
    sql_bind_text(s, 2, "q");
    sql_bind_int64(s, 10, -1);
    assert_int_equal(sql_step(s), SQL_ROW);
    assert_string_equal(sql_col_text(s, 0), "p?2 it's ?3q");
    assert_int_equal(sql_col_int64(s, 2), -1);
    sql_done(s);
}

static void test_binds_and_columns_round_trip(void **state)
{
    struct store *st = *state;
    static const unsigned char blob[] = {0x00, 0xff, 0x5c, 0x78, 0x27, 0x00, 0x80, 0x01};
    unsigned char out[16], small[3];
    char kept[16], copied[16];
    struct sql_stmt *s;

    s = sql_stmt(st, "INSERT INTO items (name, n, small, note, data) VALUES (?1, ?2, ?3, ?4, ?5)");
    assert_non_null(s);
    /* A kept pointer is read when the statement runs; a copy is taken at the bind. */
    snprintf(kept, sizeof kept, "kept");
    snprintf(copied, sizeof copied, "copied");
    sql_bind_text(s, 1, kept);
    sql_bind_int64(s, 2, INT64_MIN);
    sql_bind_int64(s, 3, 7);
    sql_bind_text_copy(s, 4, copied);
    sql_bind_blob(s, 5, blob, sizeof blob);
    snprintf(copied, sizeof copied, "changed");
    assert_int_equal(sql_step(s), SQL_DONE);
    sql_done(s);

    sql_bind_text_or_null(s, 1, "nulls");
    sql_bind_null(s, 2);
    sql_bind_null(s, 3);
    sql_bind_text_or_null(s, 4, "");
    sql_bind_null(s, 5);
    assert_int_equal(sql_step(s), SQL_DONE);
    sql_done(s);

    sql_bind_text(s, 1, "max");
    sql_bind_int64(s, 2, INT64_MAX);
    sql_bind_blob(s, 5, "", 0);
    /* ?3 and ?4 left unbound: NULL, as in SQLite. */
    assert_int_equal(sql_step(s), SQL_DONE);
    sql_done(s);

    s = sql_stmt(st, "SELECT name, n, small, note, data FROM items ORDER BY rowid");
    assert_non_null(s);
    assert_int_equal(sql_step(s), SQL_ROW);
    assert_string_equal(sql_col_text(s, 0), "kept");
    assert_true(sql_col_int64(s, 1) == INT64_MIN);
    assert_int_equal(sql_col_int64(s, 2), 7);
    assert_string_equal(sql_col_text(s, 3), "copied");
    assert_false(sql_col_null(s, 4));
    assert_int_equal(sql_col_blob(s, 4, out, sizeof out), sizeof blob);
    assert_memory_equal(out, blob, sizeof blob);
    /* A short buffer gets the first bytes; the full length is still reported. */
    assert_int_equal(sql_col_blob(s, 4, small, sizeof small), sizeof blob);
    assert_memory_equal(small, blob, sizeof small);

    assert_int_equal(sql_step(s), SQL_ROW);
    assert_string_equal(sql_col_text(s, 0), "nulls");
    for (int col = 1; col <= 4; col++) {
        assert_true(sql_col_null(s, col));
        assert_null(sql_col_text(s, col));
    }
    assert_int_equal(sql_col_int64(s, 1), 0);
    assert_int_equal(sql_col_blob(s, 4, out, sizeof out), 0);

    assert_int_equal(sql_step(s), SQL_ROW);
    assert_true(sql_col_int64(s, 1) == INT64_MAX);
    assert_true(sql_col_null(s, 2));
    assert_false(sql_col_null(s, 4));
    assert_int_equal(sql_col_blob(s, 4, out, sizeof out), 0);
    assert_int_equal(sql_step(s), SQL_DONE);
    sql_done(s);
}

static void test_text_arrays_bind_as_text_arrays(void **state)
{
    struct store *st = *state;
    struct sql_stmt *s;

    /* Typed TEXT[] at the bind, so the CAST is none; quotes, backslashes, commas, braces and
     * NULL elements come back as they were written in the literal. */
    s = sql_stmt(st, "SELECT pg_typeof(?1)::text, x, n FROM unnest(CAST(?1 AS TEXT[])) "
                     "WITH ORDINALITY AS u (x, n) ORDER BY n");
    assert_non_null(s);
    sql_bind_text_array(s, 1, "{\"a,b\",\"say \\\"hi\\\"\",\"back\\\\slash\",NULL,\"{}\"}");
    static const char *const want[] = {"a,b", "say \"hi\"", "back\\slash", NULL, "{}"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_int_equal(sql_step(s), SQL_ROW);
        assert_string_equal(sql_col_text(s, 0), "text[]");
        if (want[i])
            assert_string_equal(sql_col_text(s, 1), want[i]);
        else
            assert_true(sql_col_null(s, 1));
        assert_int_equal(sql_col_int64(s, 2), (int64_t)i + 1);
    }
    assert_int_equal(sql_step(s), SQL_DONE);
    sql_done(s);

    /* A malformed literal is the server's error, not a crash or a silent empty array. */
    assert_non_null(s = sql_stmt(st, "SELECT cardinality(CAST(?1 AS TEXT[]))"));
    sql_bind_text_array(s, 1, "{\"unterminated}");
    assert_true(sql_step(s) < 0);
    sql_done(s);
}

static void test_nulls_are_typed_for_is_null(void **state)
{
    struct store *st = *state;
    struct sql_stmt *s;

    run_ok(st, "INSERT INTO items (name, n) VALUES ('typed', 5)");
    /* `?N IS NULL` alone does not tell PostgreSQL a type: the engine must. */
    s = sql_stmt(st, "UPDATE items SET n = CASE WHEN ?2 IS NULL THEN n ELSE GREATEST(n, ?2) END, "
                     "note = COALESCE(?3, note) WHERE name = ?1 AND (?4 IS NULL OR note = ?4)");
    assert_non_null(s);
    sql_bind_text(s, 1, "typed");
    sql_bind_null(s, 2);
    sql_bind_text(s, 3, NULL);
    sql_bind_text(s, 4, NULL);
    assert_int_equal(sql_step(s), SQL_DONE);
    assert_int_equal(sql_changes(st), 1);
    sql_done(s);
    sql_bind_text(s, 1, "typed");
    sql_bind_int64(s, 2, 9);
    sql_bind_text(s, 3, "noted");
    assert_int_equal(sql_step(s), SQL_DONE);
    sql_done(s);
    assert_int_equal(query_int(st, "SELECT n FROM items WHERE name = 'typed' AND note = 'noted'"),
                     9);
}

static void test_aggregates_and_booleans_read_as_integers(void **state)
{
    struct store *st = *state;
    struct sql_stmt *s;

    run_ok(st, "INSERT INTO items (name, n) VALUES ('a', 1), ('b', 2), ('c', 4)");
    s = sql_stmt(st, "SELECT count(*), sum(n), sum(n) / 2.0, EXISTS (SELECT 1 FROM items WHERE "
                     "n = ?1), ?1 = 3 FROM items");
    assert_non_null(s);
    sql_bind_int64(s, 1, 3);
    assert_int_equal(sql_step(s), SQL_ROW);
    assert_int_equal(sql_col_int64(s, 0), 3);
    assert_int_equal(sql_col_int64(s, 1), 7); /* numeric */
    assert_int_equal(sql_col_int64(s, 2), 3); /* 3.5: truncated, like SQLite's int64 read */
    assert_int_equal(sql_col_int64(s, 3), 0); /* false */
    assert_int_equal(sql_col_int64(s, 4), 1); /* true */
    sql_done(s);
}

static void test_changes_counts_the_last_write(void **state)
{
    struct store *st = *state;
    struct sql_stmt *s;

    run_ok(st, "INSERT INTO items (name, n) VALUES ('a', 1), ('b', 1), ('c', 2)");
    assert_int_equal(sql_changes(st), 3);
    run_ok(st, "UPDATE items SET note = 'x' WHERE n = 1");
    assert_int_equal(sql_changes(st), 2);
    /* A SELECT in between does not count (as with sqlite3_changes()). */
    assert_int_equal(query_int(st, "SELECT count(*) FROM items"), 3);
    assert_int_equal(sql_changes(st), 2);
    run_ok(st, "DELETE FROM items WHERE n = 99");
    assert_int_equal(sql_changes(st), 0);

    s = sql_stmt(st, "UPDATE items SET n = n + 10 WHERE n >= ?1 RETURNING name");
    assert_non_null(s);
    sql_bind_int64(s, 1, 1);
    assert_int_equal(sql_step(s), SQL_ROW);
    assert_int_equal(sql_step(s), SQL_ROW);
    assert_int_equal(sql_step(s), SQL_ROW);
    assert_int_equal(sql_step(s), SQL_DONE);
    sql_done(s);
    assert_int_equal(sql_changes(st), 3);
}

static void test_constraint_violations_map_to_statuses(void **state)
{
    struct store *st = *state;
    struct sql_stmt *s;
    int rc;

    run_ok(st, "INSERT INTO items (name) VALUES ('taken')");
    s = sql_stmt(st, "INSERT INTO items (name, small) VALUES (?1, ?2)");
    assert_non_null(s);
    sql_bind_text(s, 1, "taken");
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(rc, SQL_ERROR);
    assert_int_equal(sql_status(st, rc), STORE_CONFLICT);

    sql_bind_text(s, 1, "negative");
    sql_bind_int64(s, 2, -1);
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(sql_status(st, rc), STORE_INVALID); /* check */

    sql_bind_null(s, 1);
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(sql_status(st, rc), STORE_INVALID); /* not null */

    /* Text that is not UTF-8 (a hostile header or path) is a value the database refuses. */
    s = sql_stmt(st, "SELECT count(*) FROM items WHERE name = ?1");
    sql_bind_text(s, 1, "\xff\xfe");
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(sql_status(st, rc), STORE_INVALID);

    s = sql_stmt(st, "SELECT no_such_column FROM items");
    assert_non_null(s);
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(sql_status(st, rc), STORE_ERROR);
    assert_int_equal(sql_status(st, SQL_NOMEM), STORE_ERROR);
    assert_int_equal(sql_status(st, SQL_ROW), STORE_OK);
    assert_int_equal(sql_status(st, SQL_DONE), STORE_OK);

    /* In a transaction the failure aborts it: commit reports it and keeps nothing. */
    assert_int_equal(sql_begin(st), STORE_OK);
    run_ok(st, "INSERT INTO items (name) VALUES ('in-tx')");
    s = sql_stmt(st, "INSERT INTO items (name, small) VALUES (?1, ?2)");
    sql_bind_text(s, 1, "taken");
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(sql_status(st, rc), STORE_CONFLICT);
    assert_int_equal(sql_commit(st), STORE_CONFLICT);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items WHERE name = 'in-tx'"), 0);
    /* And the connection is usable afterwards. */
    assert_int_equal(sql_begin(st), STORE_OK);
    run_ok(st, "INSERT INTO items (name) VALUES ('after')");
    assert_int_equal(sql_commit(st), STORE_OK);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items WHERE name = 'after'"), 1);
}

static void test_commit_keeps_and_rollback_discards(void **state)
{
    struct store *st = *state;

    assert_int_equal(sql_begin(st), STORE_OK);
    run_ok(st, "INSERT INTO items (name) VALUES ('rolled back')");
    sql_rollback(st);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items"), 0);

    assert_int_equal(sql_begin(st), STORE_OK);
    run_ok(st, "INSERT INTO items (name) VALUES ('committed')");
    /* Savepoints, as the group commit uses them. */
    assert_int_equal(sql_exec(st, "SAVEPOINT enqueue"), SQL_DONE);
    run_ok(st, "INSERT INTO items (name) VALUES ('undone')");
    assert_int_equal(sql_exec(st, "ROLLBACK TO enqueue"), SQL_DONE);
    assert_int_equal(sql_exec(st, "RELEASE enqueue"), SQL_DONE);
    assert_int_equal(sql_commit(st), STORE_OK);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items"), 1);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items WHERE name = 'committed'"), 1);

    assert_int_equal(sql_exec(st, "SELECT no_such_function()"), SQL_ERROR);
    assert_int_equal(sql_status(st, SQL_ERROR), STORE_ERROR);
}

/* The group commit's pattern: each request in its own savepoint, a failed one undone alone. */
static int insert_in_savepoint(struct store *st, const char *name)
{
    struct sql_stmt *s;
    int rc;
    assert_int_equal(sql_exec(st, "SAVEPOINT enqueue"), SQL_DONE);
    s = sql_stmt(st, "INSERT INTO items (name) VALUES (?1)");
    sql_bind_text(s, 1, name);
    rc = sql_step(s);
    sql_done(s);
    if (rc != SQL_DONE)
        assert_int_equal(sql_exec(st, "ROLLBACK TO enqueue"), SQL_DONE);
    assert_int_equal(sql_exec(st, "RELEASE enqueue"), SQL_DONE);
    return rc;
}

static void test_savepoints_isolate_a_failed_request(void **state)
{
    struct store *st = *state;
    int rc;

    run_ok(st, "INSERT INTO items (name) VALUES ('taken')");
    assert_int_equal(sql_begin(st), STORE_OK);
    assert_int_equal(insert_in_savepoint(st, "first"), SQL_DONE);
    rc = insert_in_savepoint(st, "taken");
    assert_int_equal(sql_status(st, rc), STORE_CONFLICT);
    assert_int_equal(insert_in_savepoint(st, "third"), SQL_DONE);
    rc = insert_in_savepoint(st, "taken"); /* the last one fails: COMMIT follows its ROLLBACK TO */
    assert_int_equal(sql_status(st, rc), STORE_CONFLICT);
    assert_int_equal(sql_commit(st), STORE_OK);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items"), 3);

    /* A savepoint command that fails is reported by the statement that follows it. */
    assert_int_equal(sql_begin(st), STORE_OK);
    assert_int_equal(sql_exec(st, "RELEASE no_such_savepoint"), SQL_DONE);
    struct sql_stmt *s = sql_stmt(st, "INSERT INTO items (name) VALUES (?1)");
    sql_bind_text(s, 1, "never");
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(rc, SQL_ERROR);
    assert_int_equal(sql_status(st, rc), STORE_ERROR);
    assert_int_not_equal(sql_commit(st), STORE_OK);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items WHERE name = 'never'"), 0);
}

/* sql_step_then_commit: the COMMIT goes with the transaction's last statement, so another
 * connection sees its rows before sql_commit(), which reports the outcome. Nothing runs after
 * that statement. A last statement that fails leaves the transaction open, to be undone to a
 * savepoint and go on; a rollback after one that succeeded undoes nothing. */
static void test_the_last_statement_carries_the_commit(void **state)
{
    struct store *st = *state, *other = open_store();
    struct sql_stmt *s;

    assert_int_equal(sql_begin_concurrent(st), STORE_OK);
    run_ok(st, "INSERT INTO items (name) VALUES ('first')");
    s = sql_stmt(st, "INSERT INTO items (name) VALUES (?1) RETURNING rowid");
    assert_non_null(s);
    sql_bind_text(s, 1, "last");
    assert_int_equal(sql_step_then_commit(s), SQL_ROW);
    assert_int_equal(sql_step(s), SQL_DONE);
    sql_done(s);
    assert_int_equal(query_int(other, "SELECT count(*) FROM items"), 2);
    assert_int_equal(sql_exec(st, "SAVEPOINT after_the_last"), SQL_ERROR);
    s = sql_stmt(st, "INSERT INTO items (name) VALUES ('after the last')");
    assert_int_equal(sql_step(s), SQL_ERROR);
    sql_done(s);
    assert_int_equal(sql_commit(st), STORE_OK);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items"), 2);

    /* Failed (a duplicate name): not committed, and the transaction goes on. */
    assert_int_equal(sql_begin_concurrent(st), STORE_OK);
    assert_int_equal(sql_exec(st, "SAVEPOINT enqueue_batch"), SQL_DONE);
    s = sql_stmt(st, "INSERT INTO items (name) VALUES (?1)");
    sql_bind_text(s, 1, "first");
    assert_int_equal(sql_step_then_commit(s), SQL_ERROR);
    assert_int_equal(sql_status(st, SQL_ERROR), STORE_CONFLICT);
    sql_done(s);
    assert_int_equal(sql_exec(st, "ROLLBACK TO enqueue_batch; RELEASE enqueue_batch"), SQL_DONE);
    run_ok(st, "INSERT INTO items (name) VALUES ('after the failure')");
    assert_int_equal(query_int(other, "SELECT count(*) FROM items"), 2);
    assert_int_equal(sql_commit(st), STORE_OK);
    assert_int_equal(query_int(other, "SELECT count(*) FROM items"), 3);

    /* A rollback after the last statement: it is committed all the same, and the next
     * transaction is an ordinary one. */
    assert_int_equal(sql_begin_concurrent(st), STORE_OK);
    s = sql_stmt(st, "INSERT INTO items (name) VALUES (?1)");
    sql_bind_text(s, 1, "kept");
    assert_int_equal(sql_step_then_commit(s), SQL_DONE);
    sql_done(s);
    sql_rollback(st);
    assert_int_equal(sql_begin_concurrent(st), STORE_OK);
    run_ok(st, "INSERT INTO items (name) VALUES ('rolled back')");
    sql_rollback(st);
    assert_int_equal(query_int(other, "SELECT count(*) FROM items"), 4);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items WHERE name = 'kept'"), 1);
    store_close(other);
}

static void test_session_settings(void **state)
{
    struct store *st = *state;
    struct sql_stmt *s = sql_stmt(st, "SELECT current_setting('synchronous_commit'), "
                                      "current_setting('TimeZone'), "
                                      "current_setting('application_name'), "
                                      "current_setting('lock_timeout'), "
                                      "current_setting('idle_in_transaction_session_timeout')");
    assert_non_null(s);
    assert_int_equal(sql_step(s), SQL_ROW);
    assert_string_equal(sql_col_text(s, 0), "on");
    assert_string_equal(sql_col_text(s, 1), "UTC");
    assert_string_equal(sql_col_text(s, 2), "sbx");
    assert_string_equal(sql_col_text(s, 3), "5s");
    assert_string_equal(sql_col_text(s, 4), "30s");
    sql_done(s);
}

/* The workers fork and exec Sandboxes: a database connection must never leak into one. */
static void test_connections_are_closed_on_exec(void **state)
{
    struct store *st = *state;
    char path[64], target[256];
    struct dirent *e;
    DIR *d;
    int sockets = 0;

    assert_int_equal(query_int(st, "SELECT 1"), 1);
    assert_non_null(d = opendir("/proc/self/fd"));
    while ((e = readdir(d))) {
        int fd = atoi(e->d_name);
        ssize_t n;
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        n = readlink(path, target, sizeof target - 1);
        if (n <= 0 || fd == dirfd(d))
            continue;
        target[n] = '\0';
        if (strncmp(target, "socket:", 7) != 0)
            continue;
        sockets++;
        assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    }
    closedir(d);
    assert_true(sockets >= 1);
}

/* ---- concurrency ---- */

#define INCREMENTS 25

/* What the helper threads below share with the test (cmocka's asserts work only on the test's own
 * thread, so the threads count failures instead). */
struct worker_arg {
    struct store *st;
    int failures;
};

/* The one int64 a query returns, or -1 (counted as a failure) in a helper thread. */
static int64_t thread_query_int(struct worker_arg *w, const char *sql)
{
    struct sql_stmt *s = sql_stmt(w->st, sql);
    int64_t v = -1;
    if (s && sql_step(s) == SQL_ROW)
        v = sql_col_int64(s, 0);
    else
        w->failures++;
    sql_done(s);
    return v;
}

static void thread_run(struct worker_arg *w, const char *sql, int64_t arg)
{
    struct sql_stmt *s = sql_stmt(w->st, sql);
    if (!s) {
        w->failures++;
        return;
    }
    sql_bind_int64(s, 1, arg);
    if (sql_step(s) != SQL_DONE)
        w->failures++;
    sql_done(s);
}

/* Read-modify-write of one counter in writer transactions, with a pause between the read and the
 * write: without the writers' lock, READ COMMITTED loses updates. */
static void *increment_counter(void *arg)
{
    struct worker_arg *w = arg;
    for (int i = 0; i < INCREMENTS; i++) {
        if (sql_begin(w->st) != STORE_OK) {
            w->failures++;
            continue;
        }
        int64_t v = thread_query_int(w, "SELECT value FROM counters WHERE id = 1");
        usleep(2000);
        thread_run(w, "UPDATE counters SET value = ?1 WHERE id = 1", v + 1);
        if (sql_commit(w->st) != STORE_OK)
            w->failures++;
    }
    return NULL;
}

static void test_writers_are_serialised(void **state)
{
    struct worker_arg wa = {*state, 0}, wb = {*state, 0};
    pthread_t a, b;

    assert_int_equal(pthread_create(&a, NULL, increment_counter, &wa), 0);
    assert_int_equal(pthread_create(&b, NULL, increment_counter, &wb), 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    assert_int_equal(wa.failures + wb.failures, 0);
    assert_int_equal(query_int(wa.st, "SELECT value FROM counters WHERE id = 1"), 2 * INCREMENTS);
}

struct slow_writer {
    struct worker_arg w;
    sem_t holding;   /* posted once the writer holds the lock and has read the counter */
    bool concurrent; /* sql_begin_concurrent instead of sql_begin */
    /* Set: hold the transaction until `released` is posted rather than for 300 ms. A holder that
     * is never released (the other writer waited for it) gives up after 30 s and counts a failure.
     */
    bool wait_release;
    sem_t released;
};

/* A writer that reads the counter, waits, and writes what it read plus one. */
static void *slow_increment(void *arg)
{
    struct slow_writer *sw = arg;
    struct worker_arg *w = &sw->w;
    int64_t v;
    if ((sw->concurrent ? sql_begin_concurrent(w->st) : sql_begin(w->st)) != STORE_OK) {
        w->failures++;
        sem_post(&sw->holding);
        return NULL;
    }
    v = thread_query_int(w, "SELECT value FROM counters WHERE id = 1");
    sem_post(&sw->holding);
    if (sw->wait_release) {
        struct timespec until = clock_mono_deadline(30000);
        while (sem_clockwait(&sw->released, CLOCK_MONOTONIC, &until) != 0) {
            if (errno != EINTR) {
                w->failures++;
                break;
            }
        }
    } else {
        usleep(300 * 1000);
    }
    thread_run(w, "UPDATE counters SET value = ?1 WHERE id = 1", v + 1);
    if (sql_commit(w->st) != STORE_OK)
        w->failures++;
    return NULL;
}

static void test_writes_outside_transactions_wait_for_writers(void **state)
{
    struct store *st = *state;
    struct slow_writer sw = {.w = {st, 0}};
    pthread_t t;

    assert_int_equal(sem_init(&sw.holding, 0, 0), 0);
    assert_int_equal(pthread_create(&t, NULL, slow_increment, &sw), 0);
    sem_wait(&sw.holding);
    /* On SQLite this write would wait for the writer's lock; it must here too, or the writer
     * overwrites it with what it read before. */
    run_ok(st, "UPDATE counters SET value = value + 100 WHERE id = 1");
    assert_int_equal(sql_changes(st), 1);
    pthread_join(t, NULL);
    sem_destroy(&sw.holding);
    assert_int_equal(sw.w.failures, 0);
    assert_int_equal(query_int(st, "SELECT value FROM counters WHERE id = 1"), 101);
}

/* Concurrent writers (the writers' lock shared) do not wait for each other; a serial writer (the
 * lock exclusive) waits until the concurrent writer in flight has committed, so what it reads is
 * everything. */
static void test_concurrent_writers_run_side_by_side(void **state)
{
    struct store *st = *state;
    struct slow_writer sw = {.w = {st, 0}, .concurrent = true, .wait_release = true};
    pthread_t t;

    run_ok(st, "INSERT INTO counters (id, value) VALUES (2, 0)");
    assert_int_equal(sem_init(&sw.holding, 0, 0), 0);
    assert_int_equal(sem_init(&sw.released, 0, 0), 0);
    assert_int_equal(pthread_create(&t, NULL, slow_increment, &sw), 0);
    sem_wait(&sw.holding);
    /* The other writer holds its transaction open until this one has committed: had this one
     * waited for it, the holder would have given up (a failure below). */
    assert_int_equal(sql_begin_concurrent(st), STORE_OK);
    run_ok(st, "UPDATE counters SET value = value + 1 WHERE id = 2");
    assert_int_equal(sql_commit(st), STORE_OK);
    sem_post(&sw.released);
    /* A serial writer waits for it, then sees its write. */
    assert_int_equal(sql_begin(st), STORE_OK);
    assert_int_equal(query_int(st, "SELECT value FROM counters WHERE id = 1"), 1);
    assert_int_equal(sql_commit(st), STORE_OK);
    pthread_join(t, NULL);
    sem_destroy(&sw.holding);
    sem_destroy(&sw.released);
    assert_int_equal(sw.w.failures, 0);
    assert_int_equal(query_int(st, "SELECT value FROM counters WHERE id = 2"), 1);
}

static void *write_counter(void *arg)
{
    struct worker_arg *w = arg;
    if (sql_begin(w->st) != STORE_OK) {
        w->failures++;
        return NULL;
    }
    thread_run(w, "UPDATE counters SET value = value + ?1 WHERE id = 1", 100);
    if (sql_commit(w->st) != STORE_OK)
        w->failures++;
    return NULL;
}

static void test_lock_wait_beyond_lock_timeout_is_busy(void **state)
{
    struct store *holder = *state, *waiter;
    char url[1024], err[512];
    int rc;

    /* A URL's options override the engine's default lock_timeout (5 s). */
    snprintf(url, sizeof url, "%s%soptions=-c%%20lock_timeout%%3D200", pg_url(),
             strchr(pg_url(), '?') ? "&" : "?");
    if (!(waiter = sql_pg_store_open(url, 5000, err, sizeof err)))
        fail_msg("%s", err);
    assert_int_equal(sql_begin(holder), STORE_OK);
    run_ok(holder, "UPDATE counters SET value = 1");
    assert_int_equal(sql_begin(waiter), STORE_OK);
    struct sql_stmt *s = sql_stmt(waiter, "SELECT value FROM counters");
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(rc, SQL_ERROR);
    assert_int_equal(sql_status(waiter, rc), STORE_BUSY);
    assert_int_not_equal(sql_commit(waiter), STORE_OK);
    assert_int_equal(sql_commit(holder), STORE_OK);
    /* Free again once the holder committed. */
    assert_int_equal(sql_begin(waiter), STORE_OK);
    assert_int_equal(query_int(waiter, "SELECT value FROM counters"), 1);
    assert_int_equal(sql_commit(waiter), STORE_OK);
    /* An empty transaction sends nothing and commits. */
    assert_int_equal(sql_begin(waiter), STORE_OK);
    assert_int_equal(sql_commit(waiter), STORE_OK);
    assert_int_equal(sql_begin_read(waiter), STORE_OK);
    assert_int_equal(sql_commit(waiter), STORE_OK);
    store_close(waiter);

    /* Without options in the URL, the lock timeout is the one given (the busy_timeout_ms
     * setting). */
    if (!(waiter = sql_pg_store_open(pg_url(), 300, err, sizeof err)))
        fail_msg("%s", err);
    s = sql_stmt(waiter, "SELECT current_setting('lock_timeout')");
    assert_int_equal(sql_step(s), SQL_ROW);
    assert_string_equal(sql_col_text(s, 0), "300ms");
    sql_done(s);
    store_close(waiter);
}

/* A process stopped in the middle of a transaction must not hold the write lock for ever: the
 * server ends its session (here after 300 ms, set by the URL), and the process recovers. */
static void test_a_transaction_left_idle_is_ended_by_the_server(void **state)
{
    struct store *other = *state, *idle;
    char url[1024], err[512];
    int rc;

    snprintf(url, sizeof url, "%s%soptions=-c%%20idle_in_transaction_session_timeout%%3D300",
             pg_url(), strchr(pg_url(), '?') ? "&" : "?");
    if (!(idle = sql_pg_store_open(url, 5000, err, sizeof err)))
        fail_msg("%s", err);
    assert_int_equal(sql_begin(idle), STORE_OK);
    run_ok(idle, "UPDATE counters SET value = 7");
    usleep(1000 * 1000);
    /* The lock was released with the session: another writer goes ahead. */
    assert_int_equal(sql_begin(other), STORE_OK);
    assert_int_equal(query_int(other, "SELECT value FROM counters"), 0);
    assert_int_equal(sql_commit(other), STORE_OK);
    struct sql_stmt *s = sql_stmt(idle, "SELECT value FROM counters");
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(sql_status(idle, rc), STORE_BUSY);
    sql_rollback(idle);
    assert_int_equal(sql_begin(idle), STORE_OK);
    assert_int_equal(query_int(idle, "SELECT value FROM counters"), 0);
    assert_int_equal(sql_commit(idle), STORE_OK);
    store_close(idle);
}

static void test_readers_see_one_snapshot(void **state)
{
    struct store *st = *state;
    struct worker_arg wa = {st, 0};
    pthread_t w;
    int64_t before;
    int rc;

    assert_int_equal(sql_begin_read(st), STORE_OK);
    before = query_int(st, "SELECT value FROM counters WHERE id = 1");
    /* Another connection commits meanwhile (and is not blocked by the reader). */
    assert_int_equal(pthread_create(&w, NULL, write_counter, &wa), 0);
    pthread_join(w, NULL);
    assert_int_equal(wa.failures, 0);
    assert_int_equal(query_int(st, "SELECT value FROM counters WHERE id = 1"), before);
    /* A reader cannot write. */
    struct sql_stmt *s = sql_stmt(st, "UPDATE counters SET value = 0");
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(rc, SQL_ERROR);
    assert_int_not_equal(sql_status(st, rc), STORE_OK);
    sql_rollback(st);
    assert_int_equal(query_int(st, "SELECT value FROM counters WHERE id = 1"), before + 100);
}

/* ---- server restarts ---- */

/* Runs pg_ctl on the fixture's cluster as the user that owns it. */
static void pg_ctl(const char *action)
{
    const char *bin = getenv("SBX_TEST_PG_BIN"), *data = getenv("SBX_TEST_PG_DATA");
    const char *owner = getenv("SBX_TEST_PG_OWNER"), *port = getenv("SBX_TEST_PG_PORT");
    char cmd[2048];
    if (!bin || !data || !port)
        fail_msg("SBX_TEST_PG_BIN, SBX_TEST_PG_DATA and SBX_TEST_PG_PORT must be set");
    snprintf(cmd, sizeof cmd,
             "%s%s%s %s/pg_ctl -D %s -o '-p %s' -l %s/../server.log -w -m fast %s "
             ">/dev/null",
             getuid() == 0 && owner ? "runuser -u " : "", getuid() == 0 && owner ? owner : "",
             getuid() == 0 && owner ? " --" : "", bin, data, port, data, action);
    if (system(cmd) != 0)
        fail_msg("%s failed", cmd);
}

static void test_reconnects_after_the_server_restarts(void **state)
{
    struct store *st = *state;
    struct sql_stmt *s;
    int rc;

    run_ok(st, "INSERT INTO items (name) VALUES ('before restart')");

    /* A transaction after a restart begins on a new connection at once. */
    pg_ctl("restart");
    assert_int_equal(sql_begin(st), STORE_OK);
    run_ok(st, "INSERT INTO items (name) VALUES ('after restart')");
    assert_int_equal(sql_commit(st), STORE_OK);
    test_session_settings(state); /* set again on the new session */

    /* Not one whose first statement carries its COMMIT (sql_step_then_commit): the server may
     * have committed it before the connection went, so it is busy, and never sent twice. */
    pg_ctl("restart");
    assert_int_equal(sql_begin_concurrent(st), STORE_OK);
    s = sql_stmt(st, "INSERT INTO items (name) VALUES (?1)");
    sql_bind_text(s, 1, "carried");
    rc = sql_step_then_commit(s);
    sql_done(s);
    assert_int_equal(rc, SQL_ERROR);
    assert_int_equal(sql_status(st, rc), STORE_BUSY);
    sql_rollback(st);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items WHERE name = 'carried'"), 0);

    /* So does a plain SELECT, which is safe to run again. */
    pg_ctl("restart");
    assert_int_equal(query_int(st, "SELECT count(*) FROM items"), 2);

    /* A write outside a transaction may or may not have happened: busy, then the next works. */
    pg_ctl("restart");
    s = sql_stmt(st, "INSERT INTO items (name) VALUES (?1)");
    sql_bind_text(s, 1, "maybe");
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(rc, SQL_ERROR);
    assert_int_equal(sql_status(st, rc), STORE_BUSY);
    sql_bind_text(s, 1, "surely");
    assert_int_equal(sql_step(s), SQL_DONE);
    sql_done(s);

    /* While the server is down: busy, and no reconnection loop; then back. */
    pg_ctl("stop");
    /* begin() sends nothing yet: the transaction's first statement, which carries its BEGIN,
     * finds the server gone and cannot reconnect. */
    assert_int_equal(sql_begin(st), STORE_OK);
    s = sql_stmt(st, "SELECT count(*) FROM items");
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(sql_status(st, rc), STORE_BUSY);
    sql_rollback(st);
    /* Now known to be lost: begin() tries to reconnect, once, at once. */
    assert_int_equal(sql_begin(st), STORE_BUSY);
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(sql_status(st, rc), STORE_BUSY);
    pg_ctl("start");
    assert_int_equal(sql_begin(st), STORE_OK);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items WHERE name <> 'maybe'"), 3);
    assert_int_equal(sql_commit(st), STORE_OK);

    /* A connection lost inside a transaction (after its first statement) is not replaced until
     * the transaction ends. */
    assert_int_equal(sql_begin(st), STORE_OK);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items WHERE name = 'surely'"), 1);
    pg_ctl("restart");
    s = sql_stmt(st, "SELECT count(*) FROM items");
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(sql_status(st, rc), STORE_BUSY);
    /* Nor does a later statement of the transaction run on a new connection, outside it. */
    s = sql_stmt(st, "INSERT INTO items (name) VALUES (?1)");
    sql_bind_text(s, 1, "outside the transaction");
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(sql_status(st, rc), STORE_BUSY);
    assert_int_equal(sql_commit(st), STORE_BUSY);
    assert_int_equal(sql_begin(st), STORE_OK);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items WHERE name LIKE 'outside%'"), 0);
    assert_int_equal(sql_commit(st), STORE_OK);

    /* Lost with a savepoint command held back: the statement carrying it reports it. */
    assert_int_equal(sql_begin(st), STORE_OK);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items WHERE name = 'surely'"), 1);
    assert_int_equal(sql_exec(st, "SAVEPOINT enqueue"), SQL_DONE);
    pg_ctl("restart");
    s = sql_stmt(st, "INSERT INTO items (name) VALUES (?1)");
    sql_bind_text(s, 1, "lost");
    rc = sql_step(s);
    sql_done(s);
    assert_int_equal(sql_status(st, rc), STORE_BUSY);
    sql_rollback(st);
    assert_int_equal(sql_begin(st), STORE_OK);
    assert_int_equal(sql_exec(st, "SAVEPOINT enqueue"), SQL_DONE);
    sql_bind_text(s, 1, "found");
    assert_int_equal(sql_step(s), SQL_DONE);
    sql_done(s);
    assert_int_equal(sql_exec(st, "RELEASE enqueue"), SQL_DONE);
    assert_int_equal(sql_commit(st), STORE_OK);
    assert_int_equal(query_int(st, "SELECT count(*) FROM items WHERE name IN ('lost', 'found')"),
                     1);
}

/* ---- opening and migrations ---- */

static void test_connection_error_names_the_url_without_password(void **state)
{
    char err[512];
    (void)state;
    struct store *st = sql_pg_store_open("postgres://sbx:s3cret@127.0.0.1:1/sbx?connect_timeout=2",
                                         5000, err, sizeof err);
    assert_null(st);
    assert_non_null(strstr(err, "postgres://sbx@127.0.0.1:1/sbx"));
    assert_null(strstr(err, "s3cret"));

    st = sql_pg_store_open("postgresql://127.0.0.1:1/sbx?user=sbx&password=s3cret&sslmode=disable",
                           5000, err, sizeof err);
    assert_null(st);
    assert_non_null(strstr(err, "postgresql://127.0.0.1:1/sbx?user=sbx&sslmode=disable"));
    assert_null(strstr(err, "s3cret"));
}

static void *migrate_v3(void *arg)
{
    char err[512];
    struct store *st = sql_pg_store_open(getenv("SBX_TEST_PG_URL"), 5000, err, sizeof err);
    int *rc = arg;
    *rc = st ? sql_pg_migrate(st, test_schema_v3, 3, err, sizeof err) : -1;
    if (*rc != 0)
        fprintf(stderr, "migrate: %s\n", err);
    if (st)
        store_close(st);
    return NULL;
}

static void test_migrations_run_once_and_newer_schemas_are_refused(void **state)
{
    struct store *st = *state;
    pthread_t t[4];
    int rc[4];
    char err[512];

    /* Four processes' worth of stores migrating at once: each migration runs exactly once. */
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, migrate_v3, &rc[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(rc[i], 0);
    }
    assert_int_equal(query_int(st, "SELECT count(*) FROM once_t"), 1);
    assert_int_equal(query_int(st, "SELECT max(version) FROM schema_version"), 3);

    /* A binary that knows only up to version 2 refuses the database. */
    assert_int_equal(sql_pg_migrate(st, test_schema, 2, err, sizeof err), -1);
    assert_non_null(strstr(err, "has schema version 3, newer than this sbx (which knows up to 2)"));
    assert_null(strstr(err, "s3cret"));

    /* A failing migration leaves the database at the last whole version. */
    static const struct sbx_migration bad[] = {
        test_schema_v3[0],
        test_schema_v3[1],
        test_schema_v3[2],
        {4, "bad", "CREATE TABLE half_done (id INTEGER); SELECT no_such_function()"},
    };
    assert_int_equal(sql_pg_migrate(st, bad, 4, err, sizeof err), -1);
    assert_non_null(strstr(err, "migration 0004_bad failed"));
    assert_int_equal(query_int(st, "SELECT max(version) FROM schema_version"), 3);
    assert_int_equal(query_int(st, "SELECT count(*) FROM pg_tables WHERE tablename = 'half_done'"),
                     0);

    run_ok(st, "DROP TABLE once_t");
    run_ok(st, "DELETE FROM schema_version WHERE version = 3");
}

/* ---- the whole store on the engine ---- */

/* A fresh, empty database `name` of the fixture's cluster; its URL in url. */
static void create_database(const char *name, char *url, size_t urllen)
{
    const char *admin_url = getenv("SBX_TEST_PG_ADMIN_URL"), *slash;
    char err[512], sql[128];
    struct store *admin;

    if (!admin_url)
        fail_msg("SBX_TEST_PG_ADMIN_URL is not set: run this test under tests/pg-run.sh");
    if (!(admin = sql_pg_store_open(admin_url, 5000, err, sizeof err)))
        fail_msg("admin: %s", err);
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", name);
    assert_int_equal(sql_exec(admin, sql), SQL_DONE);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s OWNER sbx", name);
    assert_int_equal(sql_exec(admin, sql), SQL_DONE);
    store_close(admin);
    slash = strrchr(pg_url(), '/');
    snprintf(url, urllen, "%.*s/%s", (int)(slash - pg_url()), pg_url(), name);
}

/* An App "alpha" of the echo agent, created through the store. */
static void create_app(struct store *st, struct store_app *a)
{
    static const struct store_ctx admin = {"admin", "req_test"};
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "alpha");
    a->keep_alive_seconds = 60;
    a->vcpu_count = 1;
    a->mem_size_mib = 256;
    snprintf(a->driver, sizeof a->driver, "process");
    snprintf(a->image, sizeof a->image, "default");
    a->max_attempts = 3;
    a->command_json = "[\"/usr/bin/sbx-echo-agent\"]";
    assert_int_equal(store_app_create(st, &admin, a), STORE_OK);
    a->command_json = NULL;
}

static void create_session(struct store *st, const char *app_id, struct store_session *sess)
{
    static const struct store_ctx admin = {"admin", "req_test"};
    bool created = false;
    assert_int_equal(store_session_create(st, &admin, app_id, NULL, 0, NULL, NULL, sess, &created),
                     STORE_OK);
    assert_true(created);
}

static void test_store_pg_open_migrates_and_runs_the_store(void **state)
{
    static const struct store_ctx admin = {"admin", "req_test"};
    char url[512], err[512];
    struct store *st;
    struct store_app a;
    struct store_session sess;
    struct store_message m;
    bool replayed = false;
    (void)state;

    create_database("t_store", url, sizeof url);
    if (!(st = store_pg_open(url, 5000, err, sizeof err)))
        fail_msg("store_pg_open: %s", err);
    assert_int_equal(query_int(st, "SELECT max(version) FROM schema_version"),
                     sbx_pg_migrations[sbx_pg_migrations_count - 1].version);

    create_app(st, &a);
    create_session(st, a.id, &sess);
    for (int i = 1; i <= 3; i++) {
        struct store_enqueue e = {a.id, sess.id, "{\"n\":1}", NULL, NULL};
        assert_int_equal(store_message_enqueue(st, &admin, &e, &m, &replayed), STORE_OK);
        assert_int_equal(m.seq, i);
        store_message_clear(&m);
    }
    struct store_enqueue ik = {a.id, sess.id, "{\"n\":2}", "key-1", "hash-a"};
    assert_int_equal(store_message_enqueue(st, &admin, &ik, &m, &replayed), STORE_OK);
    assert_int_equal(m.seq, 4);
    store_message_clear(&m);
    assert_int_equal(store_message_enqueue(st, &admin, &ik, &m, &replayed), STORE_OK);
    assert_true(replayed);
    assert_int_equal(m.seq, 4);
    store_message_clear(&m);
    struct store_enqueue ic = {a.id, sess.id, "{\"n\":3}", "key-1", "hash-b"};
    assert_int_equal(store_message_enqueue(st, &admin, &ic, &m, &replayed), STORE_CONFLICT);
    store_session_clear(&sess);
    store_close(st);

    /* Opening again applies nothing; a database newer than this binary is refused. */
    if (!(st = store_pg_open(url, 5000, err, sizeof err)))
        fail_msg("store_pg_open again: %s", err);
    run_ok(st, "INSERT INTO schema_version (version, name, applied_at) VALUES (9999, 'future', 0)");
    store_close(st);
    assert_null(store_pg_open(url, 5000, err, sizeof err));
    assert_non_null(strstr(err, "has schema version 9999, newer than this sbx"));
}

/* An asynchronous enqueue's outcome, reported by the committer's thread. */
struct enqueued {
    pthread_mutex_t *lock;
    pthread_cond_t *cond;
    bool done;
    enum store_status status;
    int64_t seq;
};

static void enqueued_done(void *arg, enum store_status status, struct store_message *m,
                          bool replayed)
{
    struct enqueued *e = arg;
    (void)replayed;
    pthread_mutex_lock(e->lock);
    e->status = status;
    e->seq = m ? m->seq : -1;
    e->done = true;
    pthread_cond_broadcast(e->cond);
    pthread_mutex_unlock(e->lock);
    if (m)
        store_message_clear(m);
}

/* Waits up to 20 s for each of es[0..n) to be reported; fails naming what. */
static void wait_enqueued(struct enqueued *es, size_t n, const char *what)
{
    struct timespec until = clock_mono_deadline(20000);
    pthread_mutex_lock(es[0].lock);
    for (size_t i = 0; i < n; i++)
        while (!es[i].done)
            if (pthread_cond_clockwait(es[i].cond, es[i].lock, CLOCK_MONOTONIC, &until) ==
                ETIMEDOUT) {
                pthread_mutex_unlock(es[0].lock);
                fail_msg("%s: request %zu not written after 20 s", what, i);
            }
    pthread_mutex_unlock(es[0].lock);
}

/* The group commit on PostgreSQL locks the Sessions of a batch and writes it in one statement,
 * passing over a Session whose row another transaction holds: that Session's requests wait for
 * it (in their order), and the other Sessions' requests, plain and with a key, are written
 * meanwhile. A Session deleted by the transaction that held it gets nothing. */
static void test_enqueue_passes_over_a_session_another_transaction_holds(void **state)
{
    static const struct store_ctx admin = {"admin", "req_test"};
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    char url[512], err[512];
    struct store *st, *holder;
    struct store_app a;
    struct store_session held, other;
    (void)state;

    create_database("t_pass_over", url, sizeof url);
    /* A lock timeout beyond the waits below: a batch that waited for the held row would not
     * give up and pass it over within them. */
    if (!(st = store_pg_open(url, 60000, err, sizeof err)))
        fail_msg("store_pg_open: %s", err);
    if (!(holder = sql_pg_store_open(url, 5000, err, sizeof err)))
        fail_msg("holder: %s", err);
    create_app(st, &a);
    create_session(st, a.id, &held);
    create_session(st, a.id, &other);

    /* Another transaction holds the Session's row, as another gateway's batch would (begun by
     * hand: without the writers' lock, which the serial writer below takes exclusive). */
    char sql[256];
    snprintf(sql, sizeof sql, "BEGIN; SELECT id FROM sessions WHERE id = '%s' FOR UPDATE", held.id);
    assert_int_equal(sql_exec(holder, sql), SQL_DONE);

    /* All five requests below go to the committer in one batch (with the first request, or in
     * the batch after it): a serial writer (the writers' lock, exclusive) holds the committer
     * at the BEGIN of its first batch while they are queued. The other Session's requests come
     * first, so that none of them could be queued behind a batch that waits for the held row
     * (one passed over too often). */
    struct store *serial;
    if (!(serial = sql_pg_store_open(url, 5000, err, sizeof err)))
        fail_msg("serial writer: %s", err);
    assert_int_equal(sql_begin(serial), STORE_OK);
    run_ok(serial, "SELECT 1 WHERE false");
    struct enqueued first = {&lock, &cond, false, STORE_ERROR, -1};
    const struct store_enqueue first_req = {a.id, other.id, "{\"n\":0}", NULL, NULL};
    assert_int_equal(store_message_enqueue_async(st, &admin, &first_req, enqueued_done, &first),
                     STORE_OK);
    struct enqueued outs[5];
    for (size_t i = 0; i < 5; i++)
        outs[i] = (struct enqueued){&lock, &cond, false, STORE_ERROR, -1};
    const struct store_enqueue reqs[5] = {
        {a.id, other.id, "{\"n\":1}", NULL, NULL}, {a.id, other.id, "{\"n\":2}", "key-1", "hash-a"},
        {a.id, other.id, "{\"n\":3}", NULL, NULL}, {a.id, held.id, "{\"n\":4}", NULL, NULL},
        {a.id, held.id, "{\"n\":5}", NULL, NULL},
    };
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(store_message_enqueue_async(st, &admin, &reqs[i], enqueued_done, &outs[i]),
                         STORE_OK);
    assert_int_equal(sql_commit(serial), STORE_OK);
    store_close(serial);
    wait_enqueued(&first, 1, "the first request");
    assert_int_equal(first.status, STORE_OK);
    assert_int_equal(first.seq, 1);
    wait_enqueued(outs, 3, "the Session nobody holds");
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(outs[i].status, STORE_OK);
        assert_int_equal(outs[i].seq, (int64_t)i + 2);
    }
    pthread_mutex_lock(&lock);
    assert_false(outs[3].done);
    assert_false(outs[4].done);
    pthread_mutex_unlock(&lock);

    /* Released: the held Session's requests are written, in the order they came. */
    assert_int_equal(sql_exec(holder, "COMMIT"), SQL_DONE);
    wait_enqueued(outs + 3, 2, "the Session released");
    assert_int_equal(outs[3].status, STORE_OK);
    assert_int_equal(outs[3].seq, 1);
    assert_int_equal(outs[4].status, STORE_OK);
    assert_int_equal(outs[4].seq, 2);

    /* Deleted by the transaction that held it: the request waiting for it finds no Session. */
    snprintf(sql, sizeof sql, "BEGIN; UPDATE sessions SET state = 'deleted' WHERE id = '%s'",
             held.id);
    assert_int_equal(sql_exec(holder, sql), SQL_DONE);
    struct enqueued gone = {&lock, &cond, false, STORE_ERROR, -1};
    const struct store_enqueue late = {a.id, held.id, "{\"n\":6}", NULL, NULL};
    assert_int_equal(store_message_enqueue_async(st, &admin, &late, enqueued_done, &gone),
                     STORE_OK);
    assert_int_equal(sql_exec(holder, "COMMIT"), SQL_DONE);
    wait_enqueued(&gone, 1, "the Session deleted");
    assert_int_equal(gone.status, STORE_NOT_FOUND);
    assert_int_equal(query_int(st, "SELECT count(*) FROM messages"), 6);
    assert_int_equal(query_int(st, "SELECT count(*) FROM events WHERE kind = 'message.queued'"), 6);

    store_session_clear(&held);
    store_session_clear(&other);
    store_close(holder);
    store_close(st);
}

/* Concurrent writers commit event ids out of order; a reader paging GET /v1/events by its cursor
 * (the store's event_list, bounded by sbx_events_settled) must still see every id. The writers
 * never roll back, so ids have no gaps: any id the reader gets that is not cursor + 1 means it
 * passed over one that committed later. (Migration 0011's horizon failed this within a second.) */
#define HORIZON_WRITERS 8
#define HORIZON_MS 3000

struct event_writer {
    const char *url;
    atomic_bool *stop;
    long written;
    int failures;
};

static void *write_events(void *arg)
{
    struct event_writer *w = arg;
    char err[512];
    struct store *st = sql_pg_store_open(w->url, 5000, err, sizeof err);
    if (!st) {
        fprintf(stderr, "writer: %s\n", err);
        w->failures++;
        return NULL;
    }
    while (!atomic_load(w->stop)) {
        struct sql_stmt *s;
        if (sql_begin_concurrent(st) != STORE_OK ||
            !(s = sql_stmt(st, "INSERT INTO events (at, actor, kind, object_type, object_id) "
                               "VALUES (0, 'test', 'test.written', 'test', 'o')"))) {
            w->failures++;
            break;
        }
        int rc = sql_step(s);
        sql_done(s);
        if (rc != SQL_DONE || sql_commit(st) != STORE_OK) {
            w->failures++;
            break;
        }
        w->written++;
    }
    store_close(st);
    return NULL;
}

static void test_event_reader_never_passes_an_event_in_flight(void **state)
{
    char url[512], err[512];
    struct event_writer w[HORIZON_WRITERS];
    pthread_t t[HORIZON_WRITERS];
    atomic_bool stop = false;
    struct store *st;
    int64_t cursor = 0, skips = 0, pages = 0, first_skip = -1, first_skip_got = -1;
    (void)state;

    create_database("t_horizon", url, sizeof url);
    if (!(st = store_pg_open(url, 5000, err, sizeof err)))
        fail_msg("store_pg_open: %s", err);
    for (int i = 0; i < HORIZON_WRITERS; i++) {
        w[i] = (struct event_writer){url, &stop, 0, 0};
        assert_int_equal(pthread_create(&t[i], NULL, write_events, &w[i]), 0);
    }
    int64_t end = clock_mono_ms() + HORIZON_MS;
    bool done = false;
    long written = 0;
    while (!done) {
        done = clock_mono_ms() >= end && atomic_exchange(&stop, true);
        if (done)
            for (int i = 0; i < HORIZON_WRITERS; i++) {
                pthread_join(t[i], NULL);
                assert_int_equal(w[i].failures, 0);
                written += w[i].written;
            }
        struct store_event *items = NULL;
        size_t n = 0;
        /* After the writers have stopped, one last pass reads to the end. An empty page does not
         * mean the end: the horizon also waits for transactions of other databases on the same
         * server (xids are cluster-wide), and gives up after a second, so a page can come back
         * empty while other tests run; the pass goes on until every written id is read. */
        int64_t give_up = clock_mono_ms() + 60000;
        do {
            assert_int_equal(store_event_list(st, NULL, NULL, cursor, 200, &items, &n), STORE_OK);
            for (size_t i = 0; i < n; i++) {
                if (items[i].id != cursor + 1 && skips++ == 0)
                    first_skip = cursor, first_skip_got = items[i].id;
                cursor = items[i].id;
            }
            store_event_list_free(items, n);
            pages++;
        } while (done && cursor < written && clock_mono_ms() < give_up);
    }
    if (skips)
        fail_msg("the reader passed over %lld events in flight in %lld pages (first: after %lld "
                 "it got %lld)",
                 (long long)skips, (long long)pages, (long long)first_skip,
                 (long long)first_skip_got);
    assert_true(written > 100); /* the writers did write side by side meanwhile */
    assert_int_equal(cursor, written);
    assert_int_equal(query_int(st, "SELECT count(*) FROM events"), written);
    store_close(st);
}

/* A process that opens the store while another one migrates it (or holds the write lock, as a
 * migration does) waits for it, however long that takes beyond the lock timeout: a gateway and a
 * worker starting together on a fresh database must both come up. */
struct lock_holder {
    const char *url;
    int hold_ms;
    atomic_int locked;
    int rc;
};

static void *hold_write_lock(void *arg)
{
    struct lock_holder *h = arg;
    char err[512];
    struct store *st = sql_pg_store_open(h->url, 5000, err, sizeof err);
    struct timespec hold = {h->hold_ms / 1000, (long)(h->hold_ms % 1000) * 1000000L};
    h->rc = -1;
    if (!st) {
        fprintf(stderr, "holder: %s\n", err);
        atomic_store(&h->locked, -1);
        return NULL;
    }
    if (sql_begin(st) == STORE_OK && query_int(st, "SELECT 1") == 1) {
        atomic_store(&h->locked, 1);
        nanosleep(&hold, NULL);
        h->rc = sql_commit(st) == STORE_OK ? 0 : -1;
    } else {
        atomic_store(&h->locked, -1);
    }
    store_close(st);
    return NULL;
}

static void test_first_open_waits_for_a_migration_beyond_lock_timeout(void **state)
{
    struct lock_holder h = {.hold_ms = 1500};
    char url[512], err[512];
    struct store *st;
    pthread_t t;
    int64_t t0;
    (void)state;

    create_database("t_first_open", url, sizeof url);
    h.url = url;
    assert_int_equal(pthread_create(&t, NULL, hold_write_lock, &h), 0);
    while (atomic_load(&h.locked) == 0)
        usleep(1000);
    assert_int_equal(atomic_load(&h.locked), 1);
    t0 = clock_mono_ms();
    st = store_pg_open(url, 200, err, sizeof err); /* lock_timeout 200 ms */
    pthread_join(t, NULL);
    if (!st)
        fail_msg("a first open beside a migration failed: %s", err);
    assert_true(clock_mono_ms() - t0 >= 1000); /* it did wait for the holder */
    assert_int_equal(h.rc, 0);
    assert_int_equal(query_int(st, "SELECT max(version) FROM schema_version"),
                     sbx_pg_migrations[sbx_pg_migrations_count - 1].version);
    store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rewrites_numbered_parameters_outside_literals, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_binds_and_columns_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_arrays_bind_as_text_arrays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nulls_are_typed_for_is_null, setup, teardown),
        cmocka_unit_test_setup_teardown(test_aggregates_and_booleans_read_as_integers, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_changes_counts_the_last_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_constraint_violations_map_to_statuses, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_commit_keeps_and_rollback_discards, setup, teardown),
        cmocka_unit_test_setup_teardown(test_savepoints_isolate_a_failed_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_last_statement_carries_the_commit, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_session_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connections_are_closed_on_exec, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writers_are_serialised, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_writers_run_side_by_side, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writes_outside_transactions_wait_for_writers, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_lock_wait_beyond_lock_timeout_is_busy, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_transaction_left_idle_is_ended_by_the_server, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_readers_see_one_snapshot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reconnects_after_the_server_restarts, setup, teardown),
        cmocka_unit_test(test_connection_error_names_the_url_without_password),
        cmocka_unit_test_setup_teardown(test_migrations_run_once_and_newer_schemas_are_refused,
                                        setup, teardown),
        cmocka_unit_test(test_store_pg_open_migrates_and_runs_the_store),
        cmocka_unit_test(test_enqueue_passes_over_a_session_another_transaction_holds),
        cmocka_unit_test(test_first_open_waits_for_a_migration_beyond_lock_timeout),
        cmocka_unit_test(test_event_reader_never_passes_an_event_in_flight),
    };
    log_init("test", "warn");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
