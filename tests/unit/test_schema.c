/*
 * test_schema.c: schema/schema.sql must be exactly what the migrations build, and the store must
 * refuse a database newer than itself.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store.h"

#include <ctype.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Drops "--" comments and folds white space, so formatting and documentation may differ. */
static void normalize_sql(const char *in, char *out, size_t outlen)
{
    size_t n = 0;
    int space = 0;
    for (const char *p = in; *p && n + 2 < outlen; p++) {
        if (p[0] == '-' && p[1] == '-') {
            while (*p && *p != '\n')
                p++;
            if (!*p)
                break;
        }
        if (isspace((unsigned char)*p)) {
            space = 1;
            continue;
        }
        /* Keep a space only between two word characters. */
        if (space && n > 0 && (isalnum((unsigned char)out[n - 1]) || out[n - 1] == '_') &&
            (isalnum((unsigned char)*p) || *p == '_' || *p == '\''))
            out[n++] = ' ';
        space = 0;
        out[n++] = *p;
    }
    out[n] = '\0';
}

/* The schema of db as one string: every object, sorted, with normalized SQL. */
static char *schema_dump(sqlite3 *db)
{
    sqlite3_stmt *s;
    size_t cap = 1 << 20, len = 0;
    char *out = calloc(1, cap), *norm = malloc(cap);
    assert_non_null(out);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT type, name, sql FROM sqlite_master WHERE sql IS "
                                        "NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type, name",
                                        -1, &s, NULL),
                     SQLITE_OK);
    while (sqlite3_step(s) == SQLITE_ROW) {
        normalize_sql((const char *)sqlite3_column_text(s, 2), norm, cap);
        len += (size_t)snprintf(out + len, cap - len, "%s %s: %s\n", sqlite3_column_text(s, 0),
                                sqlite3_column_text(s, 1), norm);
    }
    sqlite3_finalize(s);
    free(norm);
    return out;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void temp_db(char *path, size_t len)
{
    snprintf(path, len, "/tmp/sbx-test-schema-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    unlink(path);
}

static void remove_db(const char *path)
{
    char p[600];
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
}

static void test_migrations_match_schema_sql(void **state)
{
    (void)state;
    char migrated[256], documented[256], err[512];
    sqlite3 *a, *b;

    temp_db(migrated, sizeof migrated);
    struct store *st = store_sqlite_open(migrated, 1000, "FULL", err, sizeof err);
    assert_non_null(st);
    store_close(st);

    temp_db(documented, sizeof documented);
    char *sql = read_file(SBX_SOURCE_DIR "/schema/schema.sql");
    assert_int_equal(sqlite3_open(documented, &b), SQLITE_OK);
    assert_int_equal(sqlite3_exec(b, sql, NULL, NULL, NULL), SQLITE_OK);
    free(sql);

    assert_int_equal(sqlite3_open(migrated, &a), SQLITE_OK);
    char *da = schema_dump(a), *db = schema_dump(b);
    if (strcmp(da, db) != 0)
        fprintf(stderr, "--- migrations give:\n%s\n--- schema/schema.sql gives:\n%s\n", da, db);
    assert_string_equal(da, db);
    free(da);
    free(db);
    sqlite3_close(a);
    sqlite3_close(b);
    remove_db(migrated);
    remove_db(documented);
}

static void test_newer_database_is_refused(void **state)
{
    (void)state;
    char path[256], err[512], pragma[64];
    sqlite3 *db;

    temp_db(path, sizeof path);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", store_schema_version() + 1);
    assert_int_equal(sqlite3_exec(db, pragma, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);

    err[0] = '\0';
    assert_null(store_sqlite_open(path, 1000, "FULL", err, sizeof err));
    assert_non_null(strstr(err, "newer than this sbx"));
    remove_db(path);
}

/* A database at schema version 9 (events.id AUTOINCREMENT), made from the migration files
 * themselves, as an older sbx left it. */
static void database_at_version_9(const char *path)
{
    sqlite3 *db;
    char file[512];
    static const char *const names[] = {"0001_init",   "0002_auditor_views", "0003_queue_indexes",
                                        "0004_hosts",  "0005_claim_order",   "0006_images",
                                        "0007_egress", "0008_hardening",     "0009_streaming"};
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(file, sizeof file, "%s/migrations/%s.sql", SBX_SOURCE_DIR, names[i]);
        char *sql = read_file(file);
        char *msg = NULL;
        if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
            fail_msg("%s: %s", names[i], msg);
        free(sql);
    }
    assert_int_equal(sqlite3_exec(db,
                                  "PRAGMA user_version = 9; "
                                  "INSERT INTO events (at, actor, kind, object_type, object_id) "
                                  "VALUES (1, 'admin', 'app.created', 'app', 'app_a'), "
                                  "(2, 'admin', 'app.created', 'app', 'app_b'), "
                                  "(3, 'admin', 'app.created', 'app', 'app_c');",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
}

static int64_t one_int(const char *path, const char *sql)
{
    sqlite3 *db;
    sqlite3_stmt *s;
    int64_t v = -1;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    if (sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

/* An event through the store (an App's creation writes app.created); returns the newest id. */
static int64_t store_event(const char *path, const char *name)
{
    char err[512];
    struct store *st = store_sqlite_open(path, 1000, "FULL", err, sizeof err);
    static const struct store_ctx ctx = {"admin", "req_test"};
    struct store_app a = {0};
    int64_t id = 0;
    assert_non_null(st);
    snprintf(a.name, sizeof a.name, "%s", name);
    a.keep_alive_seconds = 60;
    a.vcpu_count = 1;
    a.mem_size_mib = 256;
    snprintf(a.driver, sizeof a.driver, "process");
    snprintf(a.image, sizeof a.image, "default");
    a.max_attempts = 3;
    a.command_json = "[\"/bin/true\"]";
    assert_int_equal(store_app_create(st, &ctx, &a), STORE_OK);
    assert_int_equal(store_event_last_id(st, &id), STORE_OK);
    store_close(st);
    return id;
}

/* Migration 0010 drops AUTOINCREMENT from events.id: the events of an older database keep their
 * ids, and new ones (through restarts of the store) take larger ids than every one before. */
static void test_events_ids_keep_growing_across_0010(void **state)
{
    (void)state;
    char path[256];
    temp_db(path, sizeof path);
    database_at_version_9(path);
    assert_int_equal(one_int(path, "SELECT seq FROM sqlite_sequence WHERE name = 'events'"), 3);

    int64_t first = store_event(path, "after-0010"); /* the open applies 0010 */
    assert_int_equal(one_int(path, "PRAGMA user_version"), store_schema_version());
    assert_int_equal(
        one_int(path, "SELECT count(*) FROM sqlite_master WHERE name = 'events' AND sql LIKE "
                      "'%AUTOINCREMENT%'"),
        0);
    assert_int_equal(one_int(path, "SELECT count(*) FROM sqlite_sequence WHERE name = 'events'"),
                     0);
    /* The old rows, their ids and their order. */
    assert_int_equal(one_int(path, "SELECT count(*) FROM events WHERE id <= 3"), 3);
    assert_int_equal(one_int(path, "SELECT at FROM events WHERE object_id = 'app_c'"), 3);
    assert_int_equal(one_int(path, "SELECT id FROM events WHERE object_id = 'app_c'"), 3);
    assert_int_equal(first, 4);

    /* Restarted twice: the next ids go on from the table's largest. */
    int64_t second = store_event(path, "second-start");
    int64_t third = store_event(path, "third-start");
    assert_true(second > first);
    assert_true(third > second);
    assert_int_equal(one_int(path, "SELECT count(*) FROM events"), 6);
    /* Still append-only, so the largest id never goes away. */
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_not_equal(sqlite3_exec(db, "DELETE FROM events", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(one_int(path, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND "
                                   "tbl_name = 'events'"),
                     3);
    sqlite3_close(db);
    remove_db(path);
}

static void test_events_are_append_only(void **state)
{
    (void)state;
    char path[256], err[512];
    sqlite3 *db;

    temp_db(path, sizeof path);
    struct store *st = store_sqlite_open(path, 1000, "FULL", err, sizeof err);
    assert_non_null(st);
    store_close(st);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "INSERT INTO events (at, actor, kind, object_type, object_id) "
                                  "VALUES (1, 'admin', 'app.created', 'app', 'app_x')",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_not_equal(sqlite3_exec(db, "UPDATE events SET actor = 'x'", NULL, NULL, NULL),
                         SQLITE_OK);
    assert_int_not_equal(sqlite3_exec(db, "DELETE FROM events", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    remove_db(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_migrations_match_schema_sql),
        cmocka_unit_test(test_newer_database_is_refused),
        cmocka_unit_test(test_events_are_append_only),
        cmocka_unit_test(test_events_ids_keep_growing_across_0010),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
