/*
 * test_store_plans.c: unit.store.plans: the statements the worker's queue runs on every poll and
 * every claim (queue_sql.h), and /metrics' counts of messages by state (counts_sql.h), reach the
 * messages they concern through an index on SQLite, on a fresh database and once ANALYZE has
 * statistics of a long-running one (most messages completed, a few delivering or queued). A plan
 * that walks the messages table costs time in proportion to the installation's whole history,
 * inside a write transaction, on every poll: on a million messages the lease-expiry sweep did so
 * and held every other writer up for 100 ms and more.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "counts_sql.h"
#include "queue_sql.h"
#include "store.h"

#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64], path[128];
static sqlite3 *db;

static void exec_ok(const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("%s: %s", sql, msg ? msg : "?");
}

/* Fails the test if the plan of sql has a step that scans messages (under any alias) rather than
 * searching one of its indexes; also requires that messages is read at all, so that a statement
 * whose text no longer names the table fails here rather than passes. */
static void assert_indexed(const char *name, const char *sql)
{
    char eqp[4096];
    snprintf(eqp, sizeof eqp, "EXPLAIN QUERY PLAN %s", sql);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, eqp, -1, &s, NULL), SQLITE_OK);
    int searches = 0;
    char plan[2048] = "";
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *detail = (const char *)sqlite3_column_text(s, 3);
        size_t used = strlen(plan);
        snprintf(plan + used, sizeof plan - used, "  %s\n", detail);
        /* The messages table is aliased m and e in the claim and next-due statements. */
        if (strncmp(detail, "SCAN messages", 13) == 0 || strncmp(detail, "SCAN m ", 7) == 0 ||
            strcmp(detail, "SCAN m") == 0 || strncmp(detail, "SCAN e ", 7) == 0 ||
            strcmp(detail, "SCAN e") == 0)
            fail_msg("%s walks the messages table:\n%s", name, plan);
        if (strncmp(detail, "SEARCH messages USING", 21) == 0 ||
            strncmp(detail, "SEARCH m USING", 14) == 0 ||
            strncmp(detail, "SEARCH e USING", 14) == 0)
            searches++;
    }
    sqlite3_finalize(s);
    if (searches == 0)
        fail_msg("%s does not search messages by an index:\n%s", name, plan);
}

/* /metrics' messages by state, at every scrape: each of the small states counted through its
 * partial index, the total through an index, and no step that reads the table's rows in full. */
static void assert_counts_indexed(void)
{
    char eqp[1024];
    snprintf(eqp, sizeof eqp, "EXPLAIN QUERY PLAN %s", counts_messages_sql);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, eqp, -1, &s, NULL), SQLITE_OK);
    const char *want[] = {"messages_queued", "messages_delivering", "messages_failed"};
    static const char total_scan[] = "SCAN messages USING COVERING INDEX sqlite_autoindex_messages";
    int found[3] = {0}, total = 0;
    char plan[2048] = "";
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *detail = (const char *)sqlite3_column_text(s, 3);
        size_t used = strlen(plan);
        snprintf(plan + used, sizeof plan - used, "  %s\n", detail);
        if (strcmp(detail, "SCAN messages") == 0)
            fail_msg("the metrics counts walk the messages table:\n%s", plan);
        for (int i = 0; i < 3; i++)
            if (strstr(detail, want[i]))
                found[i]++;
        if (strncmp(detail, total_scan, sizeof total_scan - 1) == 0)
            total++;
    }
    sqlite3_finalize(s);
    for (int i = 0; i < 3; i++)
        if (found[i] != 1)
            fail_msg("the metrics counts do not read %s once:\n%s", want[i], plan);
    if (total != 1)
        fail_msg("the metrics counts' total is not read from an index alone:\n%s", plan);
}

/* Fails the test unless the plan of sql reads index (or searches alt) and walks nothing else in
 * full (a walk of a partial index of live rows is what it is for): the fair claim's statements must
 * not walk another App's backlog nor the idle Sessions. */
static void assert_uses(const char *name, const char *sql, const char *index, const char *alt)
{
    char eqp[4096], plan[2048] = "";
    snprintf(eqp, sizeof eqp, "EXPLAIN QUERY PLAN %s", sql);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, eqp, -1, &s, NULL), SQLITE_OK);
    bool found = false, scans = false;
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *detail = (const char *)sqlite3_column_text(s, 3);
        size_t used = strlen(plan);
        snprintf(plan + used, sizeof plan - used, "  %s\n", detail);
        found = found || strstr(detail, index) != NULL ||
                (alt && strncmp(detail, "SEARCH ", 7) == 0 && strstr(detail, alt));
        scans = scans || (strncmp(detail, "SCAN ", 5) == 0 && !strstr(detail, index));
    }
    sqlite3_finalize(s);
    if (!found || scans)
        fail_msg("%s does not search %s alone:\n%s", name, index, plan);
}

static void assert_all_indexed(void)
{
    assert_indexed("the claim's pick of one App", queue_claim_pick_app_sql);
    assert_uses("the claim's pick of one App", queue_claim_pick_app_sql, "messages_queued_app",
                NULL);
    assert_indexed("the claim's pick of owned Sessions", queue_claim_pick_owned_sql);
    assert_uses("the claim's pick of owned Sessions", queue_claim_pick_owned_sql,
                "messages_queued_session", NULL);
    assert_uses("the walk over the Apps with queued messages", queue_claim_next_app_sql,
                "messages_queued_app", NULL);
    assert_uses("the Apps' live Sandboxes", queue_claim_live_sql, "sessions_live",
                "sessions_state");
    assert_indexed("the lease-expiry sweep", queue_requeue_expired_sql);
    assert_indexed("the next due time", queue_next_due_sql);
    assert_counts_indexed();
}

static void test_fresh_database(void **state)
{
    (void)state;
    assert_all_indexed();
}

/* A long-running installation's shape: 20,000 completed messages over 2,000 Sessions, then a few
 * of them delivering and queued; ANALYZE gives the planner its statistics of each. */
static void test_analyzed_history(void **state)
{
    (void)state;
    exec_ok("INSERT INTO apps (id, name, command, created_at, updated_at) VALUES "
            "('app_p', 'p', '[\"/bin/echo\"]', 1, 1)");
    exec_ok("BEGIN");
    exec_ok("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) "
            "INSERT INTO sessions (id, app_id, state, next_seq, created_at, updated_at) "
            "SELECT printf('ses_p%06d', i), 'app_p', 'idle', 11, 1, 1 FROM n");
    exec_ok("WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 19999) "
            "INSERT INTO messages (id, session_id, app_id, seq, state, body, reply, attempts, "
            "max_attempts, created_at, updated_at, completed_at) SELECT printf('msg_p%08d', i), "
            "printf('ses_p%06d', i / 10 + 1), 'app_p', i % 10 + 1, 'completed', '{}', '{}', 1, 3, "
            "1, 1, 1 FROM n");
    exec_ok("COMMIT");
    /* Statistics of an idle installation (nothing delivering or queued), then of a busy one. */
    exec_ok("ANALYZE");
    assert_all_indexed();
    exec_ok("BEGIN");
    exec_ok("UPDATE messages SET state = 'delivering', completed_at = NULL, lease_owner = 'wrk_x', "
            "lease_expires_at = 5 WHERE id IN ('msg_p00000009', 'msg_p00000019')");
    exec_ok("UPDATE messages SET state = 'queued', completed_at = NULL WHERE id IN "
            "('msg_p00000029', 'msg_p00000039')");
    exec_ok("COMMIT");
    exec_ok("ANALYZE");
    assert_all_indexed();
}

int main(void)
{
    char err[256];
    snprintf(dir, sizeof dir, "/tmp/sbx-test-plans-XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    snprintf(path, sizeof path, "%s/sbx.db", dir);
    /* The store makes the schema, exactly as an installation's first start does. */
    struct store *st = store_open("sqlite", path, 5000, "NORMAL", err, sizeof err);
    if (!st) {
        fprintf(stderr, "store_open: %s\n", err);
        return 1;
    }
    store_close(st);
    if (sqlite3_open(path, &db) != SQLITE_OK)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fresh_database),
        cmocka_unit_test(test_analyzed_history),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    sqlite3_close(db);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        rc = rc ? rc : 1;
    return rc;
}
