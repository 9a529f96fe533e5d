/*
 * store_fixture.c: the store unit tests' fixture on SQLite or PostgreSQL (see store_fixture.h):
 * a fresh database per test, a raw connection beside the store's for the tests' own SQL, and the
 * few engine-specific probes (schema version, the writers' lock, counting commits).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store_fixture.h"
#include "store.h"

#include "id.h"
#include "store/sql/sql_pg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- PostgreSQL ---- */

static const char *env_or_fail(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        fail_msg("%s is not set: run this test under tests/pg-run.sh", name);
    return v;
}

/* A connection to url (fails the test when there is none), quiet about NOTICEs. */
static PGconn *pg_connect(const char *url)
{
    PGconn *c = PQconnectdb(url);
    if (PQstatus(c) != CONNECTION_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", PQerrorMessage(c));
        PQfinish(c);
        fail_msg("cannot connect to PostgreSQL: %s", msg);
    }
    PQsetNoticeProcessor(c, NULL, NULL);
    return c;
}

/* Runs sql on c and returns its result, which must be a success (else the test fails). */
static PGresult *pg_run(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType rs = PQresultStatus(r);
    if (rs != PGRES_COMMAND_OK && rs != PGRES_TUPLES_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", PQerrorMessage(c));
        PQclear(r);
        fail_msg("PostgreSQL refused \"%.300s\": %s", sql, msg);
    }
    return r;
}

/* Runs a statement on the fixture's admin connection (CREATE/DROP DATABASE). */
static void pg_admin(const char *sql)
{
    PGconn *admin = pg_connect(env_or_fail("SBX_TEST_PG_ADMIN_URL"));
    PQclear(pg_run(admin, sql));
    PQfinish(admin);
}

/* base (a postgres:// URL) with its database replaced by dbname; any ?query is kept. */
static void url_with_db(const char *base, const char *dbname, char *out, size_t outlen)
{
    const char *scheme_end = strstr(base, "://");
    const char *path = strchr(scheme_end ? scheme_end + 3 : base, '/');
    const char *query = strchr(base, '?');
    if (!path || (query && query < path))
        fail_msg("SBX_TEST_PG_URL \"%s\" names no database", base);
    if ((size_t)snprintf(out, outlen, "%.*s/%s%s", (int)(path - base), base, dbname,
                         query ? query : "") >= outlen)
        fail_msg("SBX_TEST_PG_URL is too long");
}

static void pg_open(struct store_fixture *f, int busy_timeout_ms)
{
    unsigned char rnd[8];
    char err[512], sql[128];
    assert_int_equal(random_bytes(rnd, sizeof rnd), 0);
    snprintf(f->dbname, sizeof f->dbname, "t_");
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(f->dbname + strlen(f->dbname), sizeof f->dbname - strlen(f->dbname), "%02x",
                 rnd[i]);
    url_with_db(env_or_fail("SBX_TEST_PG_URL"), f->dbname, f->url, sizeof f->url);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s OWNER sbx", f->dbname);
    pg_admin(sql);
    f->st = store_pg_open(f->url, busy_timeout_ms, err, sizeof err);
    if (!f->st)
        fail_msg("store_pg_open: %s", err);
    f->raw_pg = pg_connect(f->url);
    snprintf(sql, sizeof sql, "SET lock_timeout = %d", busy_timeout_ms);
    PQclear(pg_run(f->raw_pg, sql));
}

static void pg_close(struct store_fixture *f)
{
    char sql[128];
    if (f->writer_lock_pg)
        PQfinish(f->writer_lock_pg);
    if (f->raw_pg)
        PQfinish(f->raw_pg);
    if (f->st)
        store_close(f->st);
    /* FORCE: a test that failed half-way may leave a connection open; the database goes anyway. */
    snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", f->dbname);
    pg_admin(sql);
}

/* ---- SQLite ---- */

static void sqlite_open(struct store_fixture *f, const char *name, int busy_timeout_ms,
                        const char *synchronous)
{
    char err[512];
    snprintf(f->dir, sizeof f->dir, "/tmp/sbx-test-%s-XXXXXX", name);
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/sbx.db", f->dir);
    f->st = store_sqlite_open(f->path, busy_timeout_ms, synchronous, err, sizeof err);
    if (!f->st)
        fail_msg("store_sqlite_open: %s", err);
    assert_int_equal(sqlite3_open(f->path, &f->raw_sqlite), SQLITE_OK);
    sqlite3_busy_timeout(f->raw_sqlite, busy_timeout_ms);
}

static void sqlite_close(struct store_fixture *f)
{
    char cmd[128];
    sqlite3_close(f->writer_lock_sqlite);
    sqlite3_close(f->raw_sqlite);
    if (f->st)
        store_close(f->st);
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    assert_int_equal(system(cmd), 0);
}

/* Runs sql on db; fails the test on error. */
static void sqlite_run(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", err ? err : "?");
        sqlite3_free(err);
        fail_msg("SQLite refused \"%.300s\": %s", sql, msg);
    }
}

/* Commits recorded in the WAL file: frames whose header says "database size after commit". */
static int64_t sqlite_wal_commits(const char *db_path)
{
    char wal[300];
    unsigned char hdr[32], fh[24];
    int64_t commits = 0;
    snprintf(wal, sizeof wal, "%s-wal", db_path);
    FILE *f = fopen(wal, "rb");
    if (!f)
        return 0;
    if (fread(hdr, 1, 32, f) == 32) {
        uint32_t page = (uint32_t)hdr[8] << 24 | hdr[9] << 16 | hdr[10] << 8 | hdr[11];
        while (fread(fh, 1, 24, f) == 24) {
            if (fh[4] | fh[5] | fh[6] | fh[7])
                commits++;
            if (fseek(f, (long)page, SEEK_CUR) != 0)
                break;
        }
    }
    fclose(f);
    return commits;
}

/* ---- the fixture ---- */

struct store_fixture *store_fixture_open(const char *name, int busy_timeout_ms,
                                         const char *synchronous)
{
    struct store_fixture *f = calloc(1, sizeof *f);
    const char *pg_url = getenv("SBX_TEST_PG_URL");
    assert_non_null(f);
    f->pg = pg_url && *pg_url;
    if (f->pg)
        pg_open(f, busy_timeout_ms);
    else
        sqlite_open(f, name, busy_timeout_ms, synchronous);
    return f;
}

void store_fixture_close(struct store_fixture *f)
{
    if (f->pg)
        pg_close(f);
    else
        sqlite_close(f);
    free(f);
}

static void format_sql(char *buf, size_t len, const char *fmt, va_list ap)
{
    if ((size_t)vsnprintf(buf, len, fmt, ap) >= len)
        fail_msg("test SQL longer than %zu bytes: %.100s...", len, buf);
}

void db_exec(struct store_fixture *f, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    format_sql(sql, sizeof sql, fmt, ap);
    va_end(ap);
    if (f->pg)
        PQclear(pg_run(f->raw_pg, sql));
    else
        sqlite_run(f->raw_sqlite, sql);
}

/* The first column of the first row of sql as text into out ("" for NULL); false when there is
 * no row. */
static bool query_text(struct store_fixture *f, const char *sql, char *out, size_t outlen)
{
    bool row = false;
    out[0] = '\0';
    if (f->pg) {
        PGresult *r = pg_run(f->raw_pg, sql);
        if (PQntuples(r) > 0 && PQnfields(r) > 0) {
            row = true;
            if (PQftype(r, 0) == 16 /* BOOLOID */) {
                PQclear(r);
                fail_msg("\"%.300s\" returns a boolean: write CASE WHEN ... THEN 1 ELSE 0 END",
                         sql);
            }
            if (!PQgetisnull(r, 0, 0))
                snprintf(out, outlen, "%s", PQgetvalue(r, 0, 0));
        }
        PQclear(r);
        return row;
    }
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(f->raw_sqlite, sql, -1, &s, NULL) != SQLITE_OK)
        fail_msg("SQLite refused \"%.300s\": %s", sql, sqlite3_errmsg(f->raw_sqlite));
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        row = true;
        if (sqlite3_column_text(s, 0))
            snprintf(out, outlen, "%s", (const char *)sqlite3_column_text(s, 0));
    } else if (rc != SQLITE_DONE) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", sqlite3_errmsg(f->raw_sqlite));
        sqlite3_finalize(s);
        fail_msg("SQLite failed on \"%.300s\": %s", sql, msg);
    }
    sqlite3_finalize(s);
    return row;
}

static int64_t query_int(struct store_fixture *f, const char *sql)
{
    char text[64], *end;
    if (!query_text(f, sql, text, sizeof text))
        return -1;
    if (!text[0])
        return 0;
    long long v = strtoll(text, &end, 10);
    if (*end)
        fail_msg("\"%.300s\" returns \"%s\", not an integer", sql, text);
    return v;
}

int64_t db_int(struct store_fixture *f, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    format_sql(sql, sizeof sql, fmt, ap);
    va_end(ap);
    return query_int(f, sql);
}

void db_text(struct store_fixture *f, char *out, size_t outlen, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    va_start(ap, fmt);
    format_sql(sql, sizeof sql, fmt, ap);
    va_end(ap);
    query_text(f, sql, out, outlen);
}

int64_t db_schema_version(struct store_fixture *f)
{
    return query_int(f, f->pg ? "SELECT max(version) FROM schema_version" : "PRAGMA user_version");
}

bool db_has_table(struct store_fixture *f, const char *table)
{
    if (f->pg)
        return db_int(f,
                      "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() "
                      "AND tablename = '%s'",
                      table) == 1;
    return db_int(f, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '%s'",
                  table) == 1;
}

void db_lock_writers(struct store_fixture *f)
{
    if (f->pg) {
        char sql[128];
        assert_null(f->writer_lock_pg);
        f->writer_lock_pg = pg_connect(f->url);
        snprintf(sql, sizeof sql, "BEGIN; SELECT pg_advisory_xact_lock(%lld)",
                 (long long)SQL_PG_WRITE_LOCK_KEY);
        PQclear(pg_run(f->writer_lock_pg, sql));
        return;
    }
    assert_null(f->writer_lock_sqlite);
    assert_int_equal(sqlite3_open(f->path, &f->writer_lock_sqlite), SQLITE_OK);
    sqlite_run(f->writer_lock_sqlite, "BEGIN IMMEDIATE");
}

void db_unlock_writers(struct store_fixture *f)
{
    if (f->pg) {
        assert_non_null(f->writer_lock_pg);
        PQclear(pg_run(f->writer_lock_pg, "COMMIT"));
        PQfinish(f->writer_lock_pg);
        f->writer_lock_pg = NULL;
        return;
    }
    assert_non_null(f->writer_lock_sqlite);
    sqlite_run(f->writer_lock_sqlite, "COMMIT");
    sqlite3_close(f->writer_lock_sqlite);
    f->writer_lock_sqlite = NULL;
}

/* PostgreSQL: a row's xmin would name the savepoint that inserted it (group commit gives each
 * request its own), so a trigger records the top-level transaction (txid_current()) of every
 * message inserted from the mark on. */
static void pg_record_message_xacts(struct store_fixture *f)
{
    PQclear(pg_run(f->raw_pg,
                   "CREATE TABLE IF NOT EXISTS test_message_xacts (xact BIGINT NOT NULL);"
                   "TRUNCATE test_message_xacts;"
                   "CREATE OR REPLACE FUNCTION test_record_message_xact() RETURNS trigger "
                   "LANGUAGE plpgsql AS $$ BEGIN "
                   "INSERT INTO test_message_xacts VALUES (txid_current()); RETURN NULL; END $$;"
                   "CREATE OR REPLACE TRIGGER test_message_xacts AFTER INSERT ON messages "
                   "FOR EACH ROW EXECUTE FUNCTION test_record_message_xact()"));
}

void db_mark_transactions(struct store_fixture *f)
{
    if (f->pg) {
        pg_record_message_xacts(f);
        return;
    }
    sqlite_run(f->raw_sqlite, "PRAGMA wal_checkpoint(TRUNCATE)");
    assert_int_equal(sqlite_wal_commits(f->path), 0);
}

int64_t db_message_transactions(struct store_fixture *f)
{
    if (f->pg)
        return query_int(f, "SELECT count(DISTINCT xact) FROM test_message_xacts");
    return sqlite_wal_commits(f->path);
}
