/*
 * test_store_first_open.c: concurrent first opens of an SQLite store. Several processes (a gateway
 * and workers on a first start) open the same fresh database file at the same instant: each must
 * open it, switch it to WAL and see it migrated once; and a process opening the store while
 * another holds the write lock longer than the busy timeout (as a long migration does) waits.
 */
#include "migrations.h"
#include "store.h"
#include "clock.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 40
#define PROCESSES 4

static char dir[] = "/tmp/sbx-first-open-XXXXXX";

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[64];
    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void sql_text(const char *path, const char *sql, char *out, size_t outlen)
{
    sqlite3 *db;
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    snprintf(out, outlen, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    sqlite3_close(db);
}

/* Forks PROCESSES children that open path together once a pipe says go; the failures. */
static int open_together(const char *path)
{
    int go[2], failures = 0;
    assert_int_equal(pipe(go), 0);
    for (int i = 0; i < PROCESSES; i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            char c, err[512];
            struct store *st;
            close(go[1]);
            if (read(go[0], &c, 1) != 0)
                _exit(3);
            st = store_open("sqlite", path, 5000, "FULL", err, sizeof err);
            if (!st) {
                fprintf(stderr, "open %s: %s\n", path, err);
                _exit(1);
            }
            store_close(st);
            _exit(0);
        }
    }
    close(go[0]);
    close(go[1]); /* go: every child's read returns at once */
    for (int i = 0; i < PROCESSES; i++) {
        int status;
        assert_true(wait(&status) > 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failures++;
    }
    return failures;
}

static void test_processes_opening_a_fresh_store_together_all_succeed(void **state)
{
    char path[128], v[64];
    int failures = 0;
    (void)state;
    for (int r = 0; r < ROUNDS; r++) {
        snprintf(path, sizeof path, "%s/round%d.db", dir, r);
        failures += open_together(path);
        sql_text(path, "PRAGMA journal_mode", v, sizeof v);
        assert_string_equal(v, "wal");
        sql_text(path, "PRAGMA user_version", v, sizeof v);
        assert_int_equal(atoi(v), store_schema_version());
    }
    assert_int_equal(failures, 0);
}

static void test_an_open_waits_for_a_writer_beyond_the_busy_timeout(void **state)
{
    char path[128], err[512], c;
    struct store *st;
    int locked[2], status;
    pid_t pid;
    int64_t t0;
    (void)state;

    snprintf(path, sizeof path, "%s/held.db", dir);
    assert_non_null(st = store_open("sqlite", path, 5000, "FULL", err, sizeof err));
    store_close(st);
    /* Another process holds the write lock for 1.5 s, as a long migration would (SQLite's locks
     * belong to a process, so the holder is a child). */
    assert_int_equal(pipe(locked), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct timespec hold = {1, 500000000L};
        sqlite3 *db;
        close(locked[0]);
        if (sqlite3_open(path, &db) != SQLITE_OK ||
            sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
            _exit(1);
        if (write(locked[1], "l", 1) != 1)
            _exit(1);
        nanosleep(&hold, NULL);
        sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
        sqlite3_close(db);
        _exit(0);
    }
    close(locked[1]);
    assert_int_equal(read(locked[0], &c, 1), 1);
    close(locked[0]);
    t0 = clock_mono_ms();
    st = store_open("sqlite", path, 200, "FULL", err, sizeof err); /* busy timeout 200 ms */
    assert_true(waitpid(pid, &status, 0) == pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!st)
        fail_msg("an open beside a writer failed: %s", err);
    assert_true(clock_mono_ms() - t0 >= 1000); /* it did wait for the writer */
    store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_processes_opening_a_fresh_store_together_all_succeed),
        cmocka_unit_test(test_an_open_waits_for_a_writer_beyond_the_busy_timeout),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
