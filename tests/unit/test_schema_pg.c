/*
 * test_schema_pg.c: the PostgreSQL schema must be exactly what migrations/postgres/ builds
 * (schema/postgres.sql), with the tables, columns, indexes, foreign keys and views of the SQLite
 * schema, an append-only events table, and auditor views that answer the same rows as SQLite's
 * for the same data.
 *
 * Runs under tests/pg-run.sh, which starts a throwaway cluster and sets SBX_TEST_PG_URL and
 * SBX_TEST_PG_ADMIN_URL; each test creates its own fresh databases in it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "migrations.h"
#include "store.h"
#include "clock.h"

#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers: strings ---- */

struct strbuf {
    char *s;
    size_t len, cap;
};

static void sb_add(struct strbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        assert_true(n >= 0);
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->s = realloc(b->s, b->cap);
        assert_non_null(b->s);
        if (b->len == 0)
            b->s[0] = '\0';
    }
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A list of rows as strings, to be sorted and joined. */
struct rows {
    char **v;
    size_t n;
};

static void rows_add(struct rows *r, char *row)
{
    r->v = realloc(r->v, (r->n + 1) * sizeof *r->v);
    assert_non_null(r->v);
    r->v[r->n++] = row;
}

/* Sorts the rows and joins them with newlines; frees the rows. */
static char *rows_join(struct rows *r)
{
    struct strbuf b = {0};
    sb_add(&b, "%s", "");
    if (r->n > 1)
        qsort(r->v, r->n, sizeof *r->v, cmp_str);
    for (size_t i = 0; i < r->n; i++) {
        sb_add(&b, "%s\n", r->v[i]);
        free(r->v[i]);
    }
    free(r->v);
    r->v = NULL;
    r->n = 0;
    return b.s;
}

static void assert_same_text(const char *what, const char *a_name, const char *a,
                             const char *b_name, const char *b)
{
    if (strcmp(a, b) != 0)
        fprintf(stderr, "--- %s: %s gives:\n%s\n--- %s gives:\n%s\n", what, a_name, a, b_name, b);
    assert_string_equal(a, b);
}

/* ---- helpers: PostgreSQL ---- */

static const char *env_or_fail(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        fprintf(stderr, "%s is not set: run this test under tests/pg-run.sh\n", name);
        fail();
    }
    return v;
}

static PGconn *pg_connect_db(const char *dbname)
{
    const char *keys[] = {"dbname", "dbname", NULL};
    const char *vals[] = {env_or_fail("SBX_TEST_PG_URL"), dbname, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (PQstatus(c) != CONNECTION_OK)
        fprintf(stderr, "cannot connect to %s: %s\n", dbname, PQerrorMessage(c));
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    PQsetNoticeProcessor(c, NULL, NULL);
    return c;
}

/* Runs sql (one or more statements); fails the test on error. */
static void pg_ok(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        fprintf(stderr, "PostgreSQL refused \"%.200s\": %s\n", sql, PQerrorMessage(c));
    assert_true(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK);
    PQclear(r);
}

/* Runs sql, which must fail with an error whose message contains want. */
static void pg_refused(PGconn *c, const char *sql, const char *want)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        fprintf(stderr, "PostgreSQL accepted \"%s\"\n", sql);
    assert_int_equal(st, PGRES_FATAL_ERROR);
    assert_non_null(strstr(PQerrorMessage(c), want));
    PQclear(r);
}

static PGresult *pg_query(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        fprintf(stderr, "PostgreSQL refused \"%.200s\": %s\n", sql, PQerrorMessage(c));
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    return r;
}

/* A fresh empty database owned by the test role; its name is written to name. */
static void pg_create_db(char *name, size_t len)
{
    static int n;
    char sql[128];
    PGconn *admin = PQconnectdb(env_or_fail("SBX_TEST_PG_ADMIN_URL"));
    assert_int_equal(PQstatus(admin), CONNECTION_OK);
    snprintf(name, len, "t_schema_%d_%d", (int)getpid(), n++);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s OWNER sbx", name);
    pg_ok(admin, sql);
    PQfinish(admin);
}

static void pg_drop_db(const char *name)
{
    char sql[128];
    PGconn *admin = PQconnectdb(env_or_fail("SBX_TEST_PG_ADMIN_URL"));
    assert_int_equal(PQstatus(admin), CONNECTION_OK);
    snprintf(sql, sizeof sql, "DROP DATABASE %s WITH (FORCE)", name);
    pg_ok(admin, sql);
    PQfinish(admin);
}

/* Applies the embedded PostgreSQL migrations in order, each in its own transaction, as the
 * store does. */
static void pg_migrate(PGconn *c)
{
    assert_true(sbx_pg_migrations_count > 0);
    for (size_t i = 0; i < sbx_pg_migrations_count; i++) {
        pg_ok(c, "BEGIN");
        pg_ok(c, sbx_pg_migrations[i].sql);
        pg_ok(c, "COMMIT");
    }
}

/* A fresh database with the migrations applied. */
static PGconn *pg_migrated_db(char *name, size_t len)
{
    pg_create_db(name, len);
    PGconn *c = pg_connect_db(name);
    pg_migrate(c);
    return c;
}

/* Everything in the public schema, one line per object, sorted: each column with its position,
 * type, nullability, default and identity; each constraint, index, view, function and trigger
 * with PostgreSQL's own rendering of its definition. */
static const char pg_catalog_sql[] =
    "SELECT 'column ' || c.relname || '.' || a.attname || ' #' "
    "|| row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum) || ': ' "
    "|| format_type(a.atttypid, a.atttypmod) "
    "|| CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END "
    "|| coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '') "
    "|| CASE a.attidentity WHEN 'a' THEN ' GENERATED ALWAYS AS IDENTITY' "
    "   WHEN 'd' THEN ' GENERATED BY DEFAULT AS IDENTITY' ELSE '' END "
    "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
    "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v') AND a.attnum > 0 "
    "AND NOT a.attisdropped "
    "UNION ALL SELECT 'relation ' || c.relname || ': ' || c.relkind::text "
    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
    "UNION ALL SELECT 'constraint ' || c.relname || '.' || k.conname || ': ' "
    "|| pg_get_constraintdef(k.oid) "
    "FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
    "UNION ALL SELECT 'index ' || indexname || ': ' || indexdef FROM pg_indexes "
    "WHERE schemaname = 'public' "
    "UNION ALL SELECT 'view ' || viewname || ': ' "
    "|| pg_get_viewdef(format('%I.%I', schemaname, viewname)::regclass, true) "
    "FROM pg_views WHERE schemaname = 'public' "
    "UNION ALL SELECT 'function ' || p.proname || ': ' || pg_get_functiondef(p.oid) "
    "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public' "
    "UNION ALL SELECT 'trigger ' || t.tgname || ': ' || pg_get_triggerdef(t.oid) "
    "FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'public' AND NOT t.tgisinternal";

static char *pg_catalog_dump(PGconn *c)
{
    PGresult *r = pg_query(c, pg_catalog_sql);
    struct rows rows = {0};
    for (int i = 0; i < PQntuples(r); i++)
        rows_add(&rows, strdup(PQgetvalue(r, i, 0)));
    PQclear(r);
    return rows_join(&rows);
}

/* ---- helpers: SQLite ---- */

/* A SQLite database migrated by the store itself; its path is written to path. */
static sqlite3 *sqlite_migrated_db(char *path, size_t len)
{
    char err[512];
    sqlite3 *db;
    snprintf(path, len, "/tmp/sbx-test-schema-pg-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    unlink(path);
    struct store *st = store_sqlite_open(path, 1000, "FULL", err, sizeof err);
    if (!st)
        fprintf(stderr, "store_sqlite_open: %s\n", err);
    assert_non_null(st);
    store_close(st);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    return db;
}

static void sqlite_remove(sqlite3 *db, const char *path)
{
    char p[600];
    sqlite3_close(db);
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
}

static void sqlite_ok(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        fprintf(stderr, "SQLite refused \"%.200s\": %s\n", sql, msg);
    assert_null(msg);
}

/* Every row of a one-column text query, sorted and joined. */
static char *sqlite_lines(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *s;
    struct rows rows = {0};
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    while (sqlite3_step(s) == SQLITE_ROW)
        rows_add(&rows, strdup((const char *)sqlite3_column_text(s, 0)));
    sqlite3_finalize(s);
    return rows_join(&rows);
}

static char *pg_lines(PGconn *c, const char *sql)
{
    PGresult *r = pg_query(c, sql);
    struct rows rows = {0};
    for (int i = 0; i < PQntuples(r); i++)
        rows_add(&rows, strdup(PQgetvalue(r, i, 0)));
    PQclear(r);
    return rows_join(&rows);
}

/* ---- the schema file ---- */

static void test_migrations_match_postgres_sql(void **state)
{
    (void)state;
    char migrated[64], documented[64];
    PGconn *a = pg_migrated_db(migrated, sizeof migrated);

    pg_create_db(documented, sizeof documented);
    PGconn *b = pg_connect_db(documented);
    char *sql = read_file(SBX_SOURCE_DIR "/schema/postgres.sql");
    pg_ok(b, sql);
    free(sql);

    char *da = pg_catalog_dump(a), *db = pg_catalog_dump(b);
    assert_same_text("the PostgreSQL schema", "migrations/postgres", da, "schema/postgres.sql", db);
    /* The dump is not trivially empty: it saw the tables, views and triggers. */
    assert_non_null(strstr(da, "relation events: r"));
    assert_non_null(strstr(da, "view sandbox_reuse_violations: "));
    assert_non_null(strstr(da, "trigger events_no_update: "));
    free(da);
    free(db);
    PQfinish(a);
    PQfinish(b);
    pg_drop_db(migrated);
    pg_drop_db(documented);
}

static void test_versions_match_sqlite(void **state)
{
    (void)state;
    assert_int_equal(sbx_pg_migrations_count, sbx_migrations_count);
    for (size_t i = 0; i < sbx_migrations_count; i++) {
        assert_int_equal(sbx_pg_migrations[i].version, sbx_migrations[i].version);
        assert_string_equal(sbx_pg_migrations[i].name, sbx_migrations[i].name);
    }
}

/* ---- the same tables, columns, indexes, keys and views as SQLite ---- */

/* The tables whose lists page by rowid: SQLite's is implicit, PostgreSQL's declared. */
static const char *const paged_by_rowid[] = {"apps",     "api_keys",  "workspaces",
                                             "sessions", "sandboxes", "images"};

/* Tables: "table.column type NULL|NOT NULL" per column, in column order within each table, with
 * SQLite's types named as PostgreSQL's (INTEGER: bigint, BLOB: bytea). A SQLite PRIMARY KEY column
 * counts as NOT NULL, as it does in PostgreSQL (SQLite alone lets a TEXT key be NULL; sbx never
 * writes one). */
static const char sqlite_columns_sql[] =
    "SELECT m.name || '.' || printf('%02d', p.cid) || ' ' || p.name || ' ' "
    "|| CASE upper(p.type) WHEN 'INTEGER' THEN 'bigint' WHEN 'TEXT' THEN 'text' "
    "   WHEN 'BLOB' THEN 'bytea' ELSE '?' || p.type END "
    "|| CASE WHEN p.\"notnull\" OR p.pk THEN ' NOT NULL' ELSE ' NULL' END "
    "FROM sqlite_master m JOIN pragma_table_info(m.name) p "
    "WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'";
static const char pg_columns_sql[] =
    "SELECT c.relname || '.' || lpad((row_number() OVER (PARTITION BY c.oid "
    "ORDER BY a.attnum) - 1)::text, 2, '0') || ' ' || a.attname || ' ' "
    "|| format_type(a.atttypid, a.atttypmod) "
    "|| CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE ' NULL' END "
    "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped "
    "AND a.attname <> 'rowid'";

/* Views: "view.NN column" in column order. */
static const char sqlite_view_columns_sql[] =
    "SELECT m.name || '.' || printf('%02d', p.cid) || ' ' || p.name "
    "FROM sqlite_master m JOIN pragma_table_info(m.name) p WHERE m.type = 'view'";
static const char pg_view_columns_sql[] =
    "SELECT c.relname || '.' || lpad((a.attnum - 1)::text, 2, '0') || ' ' || a.attname "
    "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'public' AND c.relkind = 'v' AND a.attnum > 0";

/* Indexes sbx created by name (not those behind PRIMARY KEY/UNIQUE constraints, which each
 * database names its own way), with their table and uniqueness. */
static const char sqlite_indexes_sql[] =
    "SELECT name || ' on ' || tbl_name || CASE WHEN sql LIKE 'CREATE UNIQUE%' THEN ' unique' "
    "ELSE '' END || CASE WHEN sql LIKE '% WHERE %' THEN ' partial' ELSE '' END "
    "FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL";
static const char pg_indexes_sql[] =
    "SELECT i.relname || ' on ' || t.relname || CASE WHEN x.indisunique THEN ' unique' ELSE '' "
    "END || CASE WHEN x.indpred IS NOT NULL THEN ' partial' ELSE '' END "
    "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = "
    "x.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = 'public' "
    "AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid)";

/* Foreign keys: "table.column -> table.column". */
static const char sqlite_fks_sql[] =
    "SELECT m.name || '.' || f.\"from\" || ' -> ' || f.\"table\" || '.' || f.\"to\" "
    "FROM sqlite_master m JOIN pragma_foreign_key_list(m.name) f WHERE m.type = 'table'";
static const char pg_fks_sql[] =
    "SELECT c.relname || '.' || a.attname || ' -> ' || r.relname || '.' || ra.attname "
    "FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid "
    "JOIN pg_class r ON r.oid = k.confrelid "
    "JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1] "
    "JOIN pg_attribute ra ON ra.attrelid = k.confrelid AND ra.attnum = k.confkey[1] "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'public' AND k.contype = 'f'";

/* PRIMARY KEY and UNIQUE constraints with their columns: "table primary|unique (a, b)". In
 * SQLite they are the automatic indexes; in PostgreSQL the constraints, minus the rowid columns
 * (SQLite's rowid is unique by nature). */
static const char sqlite_keys_sql[] =
    "SELECT m.name || CASE l.origin WHEN 'pk' THEN ' primary' ELSE ' unique' END || ' (' "
    "|| (SELECT group_concat(name, ', ') FROM (SELECT name FROM pragma_index_info(l.name) "
    "ORDER BY seqno)) || ')' "
    "FROM sqlite_master m JOIN pragma_index_list(m.name) l "
    "WHERE m.type = 'table' AND l.origin IN ('pk', 'u') "
    /* An INTEGER PRIMARY KEY is the rowid itself: it has no index. */
    "UNION ALL SELECT m.name || ' primary (' || p.name || ')' "
    "FROM sqlite_master m JOIN pragma_table_info(m.name) p "
    "WHERE m.type = 'table' AND p.pk = 1 AND upper(p.type) = 'INTEGER'";
static const char pg_keys_sql[] =
    "SELECT c.relname || CASE k.contype WHEN 'p' THEN ' primary' ELSE ' unique' END || ' (' "
    "|| (SELECT string_agg(a.attname, ', ' ORDER BY u.i) FROM unnest(k.conkey) WITH ORDINALITY "
    "u(attnum, i) JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.attnum) || ')' "
    "FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'public' AND k.contype IN ('p', 'u') "
    "AND NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = k.conrelid "
    "AND attname = 'rowid' AND k.conkey = ARRAY[attnum])";

/* CHECK constraints per table: how many. (Their text differs by dialect; what they refuse is
 * checked below.) */
static const char pg_checks_sql[] =
    "SELECT c.relname || ' ' || count(*) FROM pg_constraint k JOIN pg_class c ON c.oid = "
    "k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
    "AND k.contype = 'c' GROUP BY c.relname";

/* The number of "CHECK (" in each table's CREATE TABLE. */
static char *sqlite_checks(sqlite3 *db)
{
    sqlite3_stmt *s;
    struct rows rows = {0};
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT name, sql FROM sqlite_master WHERE type = 'table' "
                                        "AND name NOT LIKE 'sqlite_%'",
                                        -1, &s, NULL),
                     SQLITE_OK);
    while (sqlite3_step(s) == SQLITE_ROW) {
        int n = 0;
        for (const char *p = (const char *)sqlite3_column_text(s, 1); (p = strstr(p, "CHECK ("));
             p++)
            n++;
        if (n > 0) {
            char line[128];
            snprintf(line, sizeof line, "%s %d", sqlite3_column_text(s, 0), n);
            rows_add(&rows, strdup(line));
        }
    }
    sqlite3_finalize(s);
    return rows_join(&rows);
}

static void compare(const char *what, sqlite3 *lite, const char *lite_sql, PGconn *pg,
                    const char *pg_sql)
{
    char *a = sqlite_lines(lite, lite_sql), *b = pg_lines(pg, pg_sql);
    assert_true(strlen(a) > 0);
    assert_same_text(what, "SQLite", a, "PostgreSQL", b);
    free(a);
    free(b);
}

static void test_same_tables_as_sqlite(void **state)
{
    (void)state;
    char path[64], name[64];
    sqlite3 *lite = sqlite_migrated_db(path, sizeof path);
    PGconn *pg = pg_migrated_db(name, sizeof name);

    compare("table columns", lite, sqlite_columns_sql, pg, pg_columns_sql);
    compare("view columns", lite, sqlite_view_columns_sql, pg, pg_view_columns_sql);
    compare("indexes", lite, sqlite_indexes_sql, pg, pg_indexes_sql);
    compare("foreign keys", lite, sqlite_fks_sql, pg, pg_fks_sql);
    compare("primary and unique keys", lite, sqlite_keys_sql, pg, pg_keys_sql);
    char *a = sqlite_checks(lite), *b = pg_lines(pg, pg_checks_sql);
    assert_same_text("CHECK constraints per table", "SQLite", a, "PostgreSQL", b);
    free(a);
    free(b);

    /* Exactly the tables that page by rowid have one, an identity that only grows. */
    char *rowids = pg_lines(pg, "SELECT c.relname || ' ' || a.attidentity::text || ' ' "
                                "|| format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                                "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON "
                                "n.oid = c.relnamespace WHERE n.nspname = 'public' "
                                "AND c.relkind = 'r' AND a.attname = 'rowid'");
    struct rows want = {0};
    for (size_t i = 0; i < sizeof paged_by_rowid / sizeof paged_by_rowid[0]; i++) {
        char line[64];
        snprintf(line, sizeof line, "%s a bigint", paged_by_rowid[i]);
        rows_add(&want, strdup(line));
    }
    char *w = rows_join(&want);
    assert_same_text("rowid columns", "wanted", w, "PostgreSQL", rowids);
    free(w);
    free(rowids);

    /* The CHECKs refuse what SQLite's refuse. */
    pg_ok(pg, "INSERT INTO apps (id, name, command, created_at, updated_at) "
              "VALUES ('app_1', 'a', '[]', 1, 1)");
    pg_refused(pg, "UPDATE apps SET driver = 'docker'", "apps_driver_check");
    pg_refused(pg, "UPDATE apps SET vcpu_count = 33", "apps_vcpu_count_check");
    pg_refused(pg, "UPDATE apps SET keep_alive_seconds = 0", "apps_keep_alive_seconds_check");
    pg_refused(pg,
               "INSERT INTO sessions (id, app_id, state, created_at, updated_at) "
               "VALUES ('ses_1', 'app_1', 'sleeping', 1, 1)",
               "sessions_state_check");
    pg_refused(pg,
               "INSERT INTO sessions (id, app_id, created_at, updated_at) "
               "VALUES ('ses_1', 'app_gone', 1, 1)",
               "sessions_app_id_fkey");

    PQfinish(pg);
    pg_drop_db(name);
    sqlite_remove(lite, path);
}

/* ---- events are append-only ---- */

static void test_events_are_append_only(void **state)
{
    (void)state;
    char name[64];
    PGconn *pg = pg_migrated_db(name, sizeof name);

    pg_ok(pg, "INSERT INTO events (at, actor, kind, object_type, object_id) "
              "VALUES (1, 'admin', 'app.created', 'app', 'app_x'), "
              "(2, 'admin', 'app.deleted', 'app', 'app_x')");
    pg_refused(pg, "UPDATE events SET actor = 'x'", "events is append-only");
    pg_refused(pg, "UPDATE events SET actor = 'x' WHERE id = 1", "events is append-only");
    pg_refused(pg, "DELETE FROM events", "events is append-only");
    pg_refused(pg, "DELETE FROM events WHERE id = 2", "events is append-only");
    pg_refused(pg, "TRUNCATE events", "events is append-only");
    /* ids come from the sequence (the events_assign_id trigger): a caller cannot pick one. */
    pg_refused(pg,
               "INSERT INTO events (id, at, actor, kind, object_type, object_id) "
               "VALUES (7, 3, 'admin', 'app.created', 'app', 'app_y')",
               "GENERATED ALWAYS");
    char *left = pg_lines(pg, "SELECT id || ' ' || actor || ' ' || kind FROM events");
    assert_string_equal(left, "1 admin app.created\n2 admin app.deleted\n");
    free(left);
    PQfinish(pg);
    pg_drop_db(name);
}

/* ---- the auditor views answer alike ---- */

/* The same rows for both databases (plain SQL in the common dialect); ids in events come from
 * AUTOINCREMENT and the identity, both 1, 2, ... in insertion order. The data breaks every rule
 * the integrity views check, and has events whose data is not JSON, not an object, or names a
 * Sandbox by a number. */
static const char *const fixture_sql[] = {
    "INSERT INTO workers (id, host, pid, started_at, heartbeat_at, stopped_at) VALUES "
    "('wrk_live', 'h1', 10, 1764403200000, 1764403260000, NULL), "
    "('wrk_gone', 'h2', 11, 1764403100000, 1764403150000, 1764403155999)",
    "INSERT INTO apps (id, name, command, created_at, updated_at) VALUES "
    "('app_1', 'first', '[\"agent\"]', 1764403200001, 1764403200001), "
    "('app_2', 'second', '[\"agent\"]', 1764403200002, 1764403200002)",
    "INSERT INTO sessions (id, app_id, name, state, sandbox_id, worker_id, created_at, "
    "updated_at) VALUES "
    "('ses_1', 'app_1', 'one', 'active', 'sbx_1', 'wrk_live', 1764403201000, 1764403209000), "
    "('ses_2', 'app_1', NULL, 'idle', NULL, NULL, 1764403201001, 1764403209001), "
    "('ses_3', 'app_2', 'three', 'active', 'sbx_missing', 'wrk_live', 1764403201002, "
    "1764403209002), "
    "('ses_4', 'app_2', NULL, 'active', 'sbx_4', 'wrk_gone', 1764403201003, 1764403209003)",
    "INSERT INTO sandboxes (id, state, driver, image, vcpu_count, mem_size_mib, worker_id, "
    "app_id, session_id, cold, boot_ms, cpu_usec, mem_peak_bytes, termination_reason, "
    "created_at, ready_at, claimed_at, terminated_at, updated_at) VALUES "
    "('sbx_1', 'running', 'process', 'default', 1, 256, 'wrk_live', 'app_1', 'ses_1', 1, 80, "
    "NULL, NULL, NULL, 1764403202000, 1764403202080, 1764403202080, NULL, 1764403202080), "
    "('sbx_2', 'terminated', 'qemu', 'img', 2, 512, 'wrk_live', 'app_1', 'ses_2', 0, NULL, "
    "123456, 7340032, 'keep-alive expired', 1764403202001, 1764403202500, 1764403299999, "
    "1764403290000, 1764403290000), "
    "('sbx_3', 'warm', 'process', 'default', 1, 256, 'wrk_gone', 'app_2', 'ses_4', 0, 999, NULL, "
    "NULL, 'agent crashed', 1764403202002, 1764403202999, 1764403203000, 1764403204000, "
    "1764403204000), "
    "('sbx_4', 'terminated', 'process', 'default', 1, 256, 'wrk_live', 'app_1', 'ses_2', 0, 5, "
    "1, 2, 'session deleted', 1764403202003, 1764403202008, 1764403202009, 1764403203009, "
    "1764403203009), "
    "('sbx_5', 'booting', 'firecracker', 'default', 4, 1024, 'wrk_unknown', NULL, NULL, 1, NULL, "
    "NULL, NULL, NULL, 1764403202004, NULL, NULL, NULL, 1764403202004)",
    "INSERT INTO messages (id, session_id, app_id, seq, state, body, reply, error, attempts, "
    "max_attempts, idempotency_key, request_id, sandbox_id, lease_owner, lease_expires_at, "
    "created_at, updated_at, completed_at) VALUES "
    "('msg_1', 'ses_1', 'app_1', 1, 'completed', '{}', '{\"ok\":1}', NULL, 1, 3, 'idem-1', "
    "'req_1', 'sbx_1', NULL, NULL, 1764403203000, 1764403203500, 1764403203500), "
    "('msg_2', 'ses_1', 'app_1', 2, 'delivering', '{}', NULL, NULL, 1, 3, NULL, 'req_2', "
    "'sbx_1', 'wrk_gone', 1764403299000, 1764403204000, 1764403204000, NULL), "
    "('msg_3', 'ses_2', 'app_1', 1, 'completed', '{}', '{}', NULL, 2, 3, NULL, NULL, 'sbx_2', "
    "NULL, NULL, 1764403205000, 1764403295000, 1764403295000), "
    "('msg_4', 'ses_2', 'app_1', 2, 'failed', '{}', NULL, 'agent crashed', 3, 3, NULL, NULL, "
    "'sbx_nope', NULL, NULL, 1764403206000, 1764403207000, 1764403207000), "
    "('msg_5', 'ses_1', 'app_1', 3, 'completed', '{}', '{}', NULL, 1, 3, NULL, NULL, 'sbx_4', "
    "NULL, NULL, 1764403208000, 1764403208100, 1764403208100), "
    "('msg_6', 'ses_2', 'app_1', 3, 'queued', '{}', NULL, NULL, 0, 3, NULL, NULL, NULL, NULL, "
    "NULL, 1764403209000, 1764403209000, NULL)",
    "INSERT INTO events (at, actor, kind, object_type, object_id, app_id, session_id, "
    "request_id, data) VALUES "
    "(1764403200001, 'admin', 'app.created', 'app', 'app_1', 'app_1', NULL, 'req_a', "
    "'{\"name\":\"first\"}'), "
    "(1764403200500, 'admin', 'key.created', 'key', 'key_1', 'app_1', NULL, 'req_k', "
    "'{\"prefix\":\"sbx_k1\"}'), "
    "(1764403200600, 'admin', 'key.created', 'key', 'key_1', 'app_1', NULL, 'req_k2', NULL), "
    "(1764403201000, 'key:key_1', 'session.created', 'session', 'ses_1', 'app_1', 'ses_1', "
    "'req_s', NULL), "
    "(1764403202000, 'worker:wrk_live', 'sandbox.booting', 'sandbox', 'sbx_1', NULL, NULL, NULL, "
    "'{\"cold\":true}'), "
    "(1764403202080, 'worker:wrk_live', 'sandbox.claimed', 'sandbox', 'sbx_1', 'app_1', 'ses_1', "
    "NULL, '{\"cold\":true}'), "
    "(1764403203000, 'key:key_1', 'message.queued', 'message', 'msg_1', 'app_1', 'ses_1', "
    "'req_1', '{\"seq\":1}'), "
    "(1764403203100, 'worker:wrk_live', 'message.delivering', 'message', 'msg_1', 'app_1', "
    "'ses_1', NULL, '{\"sandboxId\":\"sbx_1\",\"attempt\":1}'), "
    "(1764403203200, 'worker:wrk_live', 'message.retry', 'message', 'msg_1', 'app_1', 'ses_1', "
    "NULL, 'not json {'), "
    "(1764403203300, 'worker:wrk_live', 'message.retry', 'message', 'msg_1', 'app_1', 'ses_1', "
    "NULL, '[\"sbx_1\"]'), "
    "(1764403203400, 'worker:wrk_live', 'message.retry', 'message', 'msg_1', 'app_1', 'ses_1', "
    "NULL, '{\"sandboxId\":7}'), "
    "(1764403290000, 'worker:wrk_live', 'sandbox.terminated', 'sandbox', 'sbx_2', 'app_1', "
    "'ses_2', NULL, '{\"reason\":\"keep-alive expired\"}'), "
    "(1764403291000, 'worker:wrk_live', 'sandbox.claimed', 'sandbox', 'sbx_2', 'app_1', NULL, "
    "NULL, NULL), "
    "(1764403292000, 'worker:wrk_live', 'message.completed', 'message', 'msg_3', 'app_1', "
    "'ses_2', NULL, '{\"sandboxId\":\"sbx_2\"}'), "
    "(1764403292500, 'worker:wrk_live', 'session.idle', 'session', 'ses_2', 'app_1', 'ses_2', "
    "NULL, '{\"sandboxId\":\"sbx_2\"}'), "
    "(1764403293000, 'worker:wrk_live', 'message.completed', 'message', 'msg_x', 'app_1', "
    "'ses_3', NULL, '{\"sandboxId\":\"sbx_4\"}'), "
    "(1764403294000, 'admin', 'key.revoked', 'key', 'key_1', 'app_1', NULL, 'req_r', NULL)",
    /* Partial output (0009_streaming): bytes, not characters, for a value with an accent. */
    "UPDATE messages SET chunks_dropped = 2 WHERE id = 'msg_1'",
    "INSERT INTO message_chunks (message_id, idx, value, at) VALUES "
    "('msg_1', 0, '{\"text\":\"caf\u00e9\"}', 1764403203150), "
    "('msg_1', 1, '\"\xc3\xa9t\xc3\xa9\"', 1764403203160), "
    "('msg_5', 0, 'null', 1764403208050)",
};

/* The key rows: a BLOB literal is X'..' in SQLite and '\x..' in PostgreSQL. */
static const char sqlite_keys_fixture[] =
    "INSERT INTO api_keys (id, app_id, name, prefix, hash, created_at, revoked_at) VALUES "
    "('key_1', 'app_1', 'ci', 'sbx_k1', X'01', 1764403200500, 1764403294000), "
    "('key_2', 'app_2', NULL, 'sbx_k2', X'02', 1764403200700, NULL)";
static const char pg_keys_fixture[] =
    "INSERT INTO api_keys (id, app_id, name, prefix, hash, created_at, revoked_at) VALUES "
    "('key_1', 'app_1', 'ci', 'sbx_k1', '\\x01', 1764403200500, 1764403294000), "
    "('key_2', 'app_2', NULL, 'sbx_k2', '\\x02', 1764403200700, NULL)";

/* Splits a comma-separated list and sorts it: group_concat() and string_agg() may list the
 * elements in different orders. */
static char *sorted_list(const char *v)
{
    struct rows parts = {0};
    char *copy = strdup(v), *save = NULL;
    for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save))
        rows_add(&parts, strdup(p));
    free(copy);
    char *joined = rows_join(&parts);
    for (char *p = joined; *p; p++)
        if (*p == '\n')
            *p = ',';
    return joined;
}

/* One view's value, normalised where the two databases may legitimately differ: lists
 * (sorted), and lifetime_ms of a Sandbox that has not ended (it runs to "now": checked against
 * the clock instead). */
static char *view_value(const char *view, const char *column, const char *value,
                        const char *created_at, bool ended)
{
    if (!value)
        return strdup("NULL");
    if (strcmp(view, "sandbox_reuse_violations") == 0 &&
        (strcmp(column, "session_ids") == 0 || strcmp(column, "detail") == 0))
        return sorted_list(value);
    if (strcmp(column, "lifetime_ms") == 0 && !ended) {
        long long lifetime = atoll(value), want = (long long)clock_wall_ms() - atoll(created_at);
        assert_true(lifetime <= want + 1000 && lifetime >= want - 60000);
        return strdup("(until now)");
    }
    return strdup(value);
}

struct view_row_reader {
    const char *view;
    int ncols;
    const char *(*name)(void *res, int col);
    const char *(*value)(void *res, int col);
    void *res;
};

static char *view_row(const struct view_row_reader *r)
{
    struct strbuf b = {0};
    const char *created = NULL;
    bool ended = true;
    for (int i = 0; i < r->ncols; i++) {
        if (strcmp(r->name(r->res, i), "created_at") == 0)
            created = r->value(r->res, i);
        if (strcmp(r->name(r->res, i), "terminated_at") == 0)
            ended = r->value(r->res, i) != NULL;
    }
    sb_add(&b, "%s", "");
    for (int i = 0; i < r->ncols; i++) {
        char *v = view_value(r->view, r->name(r->res, i), r->value(r->res, i), created, ended);
        sb_add(&b, "%s%s=%s", i ? " | " : "", r->name(r->res, i), v);
        free(v);
    }
    return b.s;
}

static const char *sqlite_col_name(void *res, int col)
{
    return sqlite3_column_name(res, col);
}
static const char *sqlite_col_value(void *res, int col)
{
    return (const char *)sqlite3_column_text(res, col);
}

struct pg_row {
    PGresult *r;
    int row;
};
static const char *pg_col_name(void *res, int col)
{
    return PQfname(((struct pg_row *)res)->r, col);
}
static const char *pg_col_value(void *res, int col)
{
    struct pg_row *p = res;
    return PQgetisnull(p->r, p->row, col) ? NULL : PQgetvalue(p->r, p->row, col);
}

static char *sqlite_view_rows(sqlite3 *db, const char *view)
{
    char sql[128];
    sqlite3_stmt *s;
    struct rows rows = {0};
    snprintf(sql, sizeof sql, "SELECT * FROM %s", view);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    struct view_row_reader r = {view, sqlite3_column_count(s), sqlite_col_name, sqlite_col_value,
                                s};
    while (sqlite3_step(s) == SQLITE_ROW)
        rows_add(&rows, view_row(&r));
    sqlite3_finalize(s);
    return rows_join(&rows);
}

static char *pg_view_rows(PGconn *c, const char *view)
{
    char sql[128];
    struct rows rows = {0};
    snprintf(sql, sizeof sql, "SELECT * FROM %s", view);
    PGresult *res = pg_query(c, sql);
    struct pg_row cur = {res, 0};
    struct view_row_reader r = {view, PQnfields(res), pg_col_name, pg_col_value, &cur};
    for (cur.row = 0; cur.row < PQntuples(res); cur.row++)
        rows_add(&rows, view_row(&r));
    PQclear(res);
    return rows_join(&rows);
}

static void test_views_answer_alike(void **state)
{
    (void)state;
    char path[64], name[64];
    sqlite3 *lite = sqlite_migrated_db(path, sizeof path);
    PGconn *pg = pg_migrated_db(name, sizeof name);
    /* Every view of SQLite's schema, which PostgreSQL must have too. */
    char *views = sqlite_lines(lite, "SELECT name FROM sqlite_master WHERE type = 'view'");
    char *pg_views = pg_lines(pg, "SELECT viewname FROM pg_views WHERE schemaname = 'public'");
    assert_same_text("views", "SQLite", views, "PostgreSQL", pg_views);
    assert_non_null(strstr(views, "session_timeline\n"));

    sqlite_ok(lite, "BEGIN");
    for (size_t i = 0; i < sizeof fixture_sql / sizeof fixture_sql[0]; i++) {
        sqlite_ok(lite, fixture_sql[i]);
        pg_ok(pg, fixture_sql[i]);
    }
    sqlite_ok(lite, sqlite_keys_fixture);
    pg_ok(pg, pg_keys_fixture);
    sqlite_ok(lite, "COMMIT");

    size_t nonempty = 0;
    char *save = NULL;
    for (char *v = strtok_r(views, "\n", &save); v; v = strtok_r(NULL, "\n", &save)) {
        char *a = sqlite_view_rows(lite, v), *b = pg_view_rows(pg, v);
        char what[128];
        snprintf(what, sizeof what, "rows of %s", v);
        assert_same_text(what, "SQLite", a, "PostgreSQL", b);
        nonempty += *a != '\0';
        free(a);
        free(b);
    }
    /* Every view had rows to compare: the fixture reaches each of them. */
    assert_int_equal(nonempty, 8);
    /* Spot checks that the comparison saw what it should: every integrity breach, and the UTC
     * text (with milliseconds). */
    char *v = pg_lines(pg, "SELECT DISTINCT violation FROM sandbox_reuse_violations");
    assert_string_equal(v, "alive-after-termination\nback-in-pool-after-use\n"
                           "claimed-after-termination\nserved-two-sessions\n"
                           "used-after-termination\n");
    free(v);
    v = pg_lines(pg, "SELECT DISTINCT problem FROM orphan_rows");
    assert_string_equal(v, "lease-of-stopped-worker\nmessage-of-missing-sandbox\n"
                           "sandbox-of-stopped-worker\nsession-on-ended-sandbox\n"
                           "session-without-sandbox\n");
    free(v);
    v = pg_lines(pg, "SELECT created_utc FROM message_deliveries WHERE message_id = 'msg_1'");
    assert_string_equal(v, "2025-11-29T08:00:03.000Z\n");
    free(v);
    v = pg_lines(pg, "SELECT bytes FROM message_output WHERE message_id = 'msg_1' ORDER BY "
                     "chunk_index");
    assert_string_equal(v, "16\n7\n");
    free(v);
    v = pg_lines(pg, "SELECT at_utc FROM key_audit WHERE action = 'revoked'");
    assert_string_equal(v, "2025-11-29T08:01:34.000Z\n");
    free(v);

    free(views);
    free(pg_views);
    PQfinish(pg);
    pg_drop_db(name);
    sqlite_remove(lite, path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_versions_match_sqlite),
        cmocka_unit_test(test_migrations_match_postgres_sql),
        cmocka_unit_test(test_same_tables_as_sqlite),
        cmocka_unit_test(test_events_are_append_only),
        cmocka_unit_test(test_views_answer_alike),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
