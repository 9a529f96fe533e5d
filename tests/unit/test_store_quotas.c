/*
 * test_store_quotas.c: an App's quotas in the store (docs/tenants.md), on a SQLite file or on
 * PostgreSQL under tests/pg-run.sh (store_fixture.h): the quota columns read and patched, the
 * checks of Session and Workspace creates and keep-alive values inside their transaction (the
 * host's defaults for Apps without their own, STORE_OVER_QUOTA naming the quota and nothing
 * written), the disk budget over every App's Workspaces, one winner among concurrent creates for
 * the last slot, what counts as use, and (SQLite) that the counts read the partial indexes of
 * live rows only.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "quota_sql.h"
#include "store.h"
#include "store_fixture.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct store_ctx admin = {"admin", "req_test"};

static int setup(void **state)
{
    *state = store_fixture_open("quotas", 10000, "NORMAL");
    return 0;
}

static int teardown(void **state)
{
    store_fixture_close(*state);
    return 0;
}

static void make_app(struct store *st, const char *name, const int64_t quotas[STORE_QUOTA_COUNT],
                     struct store_app *a)
{
    store_app_defaults(a, name, "process");
    if (quotas)
        memcpy(a->quotas, quotas, sizeof a->quotas);
    a->command_json = "[\"/usr/bin/sbx-echo-agent\"]";
    assert_int_equal(store_app_create(st, &admin, a), STORE_OK);
    a->command_json = NULL;
}

/* The host's side of a check: these defaults, no disk budget. */
static struct store_quotas host(int64_t sessions, int64_t keep_alive)
{
    struct store_quotas q = {
        .defaults = {0, sessions, 0, 0, keep_alive}, .disk_budget_mib = -1, .hit = -1};
    return q;
}

static enum store_status new_session(struct store *st, const char *app_id, const char *name,
                                     int64_t keep_alive, struct store_quotas *q,
                                     struct store_session *out)
{
    bool created = false;
    struct store_session s;
    enum store_status r = store_session_create_within(st, &admin, app_id, name, keep_alive, NULL,
                                                      NULL, q, &s, &created);
    if (r == STORE_OK && out)
        *out = s;
    else if (r == STORE_OK)
        store_session_clear(&s);
    return r;
}

static void test_quota_columns_read_and_patched(void **state)
{
    struct store_fixture *f = *state;
    struct store_app a, got;
    const int64_t mine[STORE_QUOTA_COUNT] = {4, -1, 0, 512, 120};
    make_app(f->st, "q", mine, &a);
    assert_int_equal(store_app_get(f->st, a.id, &got), STORE_OK);
    assert_memory_equal(got.quotas, mine, sizeof mine);
    store_app_clear(&got);
    assert_int_equal(db_int(f,
                            "SELECT CASE WHEN quota_sessions IS NULL THEN 1 ELSE 0 END FROM apps "
                            "WHERE id = '%s'",
                            a.id),
                     1);

    /* KEEP leaves a quota, -1 sets it back to the default, a value replaces it. */
    const int64_t patch[STORE_QUOTA_COUNT] = {STORE_QUOTA_KEEP, 7, -1, STORE_QUOTA_KEEP, 90};
    struct store_app_patch p = {.quotas = patch};
    struct store_quotas q = host(0, 0);
    assert_int_equal(store_app_update_within(f->st, &admin, a.id, &p, &q, &got), STORE_OK);
    const int64_t want[STORE_QUOTA_COUNT] = {4, 7, -1, 512, 90};
    assert_memory_equal(got.quotas, want, sizeof want);
    store_app_clear(&got);
    /* A patch without quotas keeps them all. */
    struct store_app_patch rename = {.name = "q2"};
    assert_int_equal(store_app_update_within(f->st, &admin, a.id, &rename, &q, &got), STORE_OK);
    assert_memory_equal(got.quotas, want, sizeof want);
    store_app_clear(&got);
}

static void test_keep_alive_quota(void **state)
{
    struct store_fixture *f = *state;
    struct store_app a, got;
    struct store_session s;
    make_app(f->st, "ka", NULL, &a); /* keep-alive 60, every quota the host's */
    struct store_quotas q = host(0, 300);

    assert_int_equal(new_session(f->st, a.id, NULL, 301, &q, NULL), STORE_OVER_QUOTA);
    assert_int_equal(q.hit, STORE_QUOTA_KEEP_ALIVE);
    assert_int_equal(q.limit, 300);
    assert_int_equal(q.used, 301);
    assert_int_equal(db_int(f, "SELECT count(*) FROM sessions WHERE app_id = '%s'", a.id), 0);
    assert_int_equal(new_session(f->st, a.id, NULL, 300, &q, &s), STORE_OK);

    int64_t more = 400;
    struct store_session_patch sp = {.keep_alive_seconds = &more};
    struct store_session out;
    assert_int_equal(store_session_update_within(f->st, &admin, a.id, s.id, &sp, &q, &out),
                     STORE_OVER_QUOTA);
    assert_int_equal(q.hit, STORE_QUOTA_KEEP_ALIVE);
    store_session_clear(&s);

    /* The App's own value above the quota: refused, nothing changed. */
    int64_t long_ka = 301;
    struct store_app_patch p = {.keep_alive_seconds = &long_ka};
    assert_int_equal(store_app_update_within(f->st, &admin, a.id, &p, &q, &got), STORE_OVER_QUOTA);
    assert_int_equal(db_int(f, "SELECT keep_alive_seconds FROM apps WHERE id = '%s'", a.id), 60);
    /* A quota set on the App lowers its Sessions' overrides above it. */
    const int64_t lower[STORE_QUOTA_COUNT] = {STORE_QUOTA_KEEP, STORE_QUOTA_KEEP, STORE_QUOTA_KEEP,
                                              STORE_QUOTA_KEEP, 100};
    struct store_app_patch lp = {.quotas = lower};
    assert_int_equal(store_app_update_within(f->st, &admin, a.id, &lp, &q, &got), STORE_OK);
    store_app_clear(&got);
    assert_int_equal(db_int(f, "SELECT keep_alive_seconds FROM sessions WHERE app_id = '%s'", a.id),
                     100);
    /* Without a check (workers, tools) nothing is refused. */
    assert_int_equal(new_session(f->st, a.id, NULL, 3600, NULL, NULL), STORE_OK);

    /* An App above a host default lowered since: its other fields stay patchable. */
    struct store_app over;
    make_app(f->st, "over", NULL, &over);
    struct store_quotas lowered = host(0, 30);
    struct store_app_patch rename = {.name = "over2"};
    assert_int_equal(store_app_update_within(f->st, &admin, over.id, &rename, &lowered, &got),
                     STORE_OK);
    store_app_clear(&got);
    int64_t fifty = 50;
    struct store_app_patch longer = {.keep_alive_seconds = &fifty};
    assert_int_equal(store_app_update_within(f->st, &admin, over.id, &longer, &lowered, &got),
                     STORE_OVER_QUOTA);
}

static void test_sessions_quota(void **state)
{
    struct store_fixture *f = *state;
    struct store_app a, b;
    struct store_session s;
    const int64_t three[STORE_QUOTA_COUNT] = {-1, 3, -1, -1, -1};
    make_app(f->st, "own", three, &a);
    make_app(f->st, "host", NULL, &b);
    struct store_quotas q = host(1, 0);

    assert_int_equal(new_session(f->st, a.id, "first", 0, &q, &s), STORE_OK);
    assert_int_equal(new_session(f->st, a.id, NULL, 0, &q, NULL), STORE_OK);
    assert_int_equal(new_session(f->st, a.id, NULL, 0, &q, NULL), STORE_OK);
    assert_int_equal(new_session(f->st, a.id, NULL, 0, &q, NULL), STORE_OVER_QUOTA);
    assert_int_equal(q.hit, STORE_QUOTA_SESSIONS);
    assert_int_equal(q.limit, 3);
    assert_int_equal(q.used, 3);
    /* Finding a Session by its name is not a new one. */
    assert_int_equal(new_session(f->st, a.id, "first", 0, &q, NULL), STORE_OK);
    /* A deleted Session frees its place. */
    assert_int_equal(store_session_delete(f->st, &admin, a.id, s.id), STORE_OK);
    store_session_clear(&s);
    assert_int_equal(new_session(f->st, a.id, NULL, 0, &q, NULL), STORE_OK);
    /* The host's default for the App without its own; 0 is no bound. */
    assert_int_equal(new_session(f->st, b.id, NULL, 0, &q, NULL), STORE_OK);
    assert_int_equal(new_session(f->st, b.id, NULL, 0, &q, NULL), STORE_OVER_QUOTA);
    q.defaults[STORE_QUOTA_SESSIONS] = 0;
    assert_int_equal(new_session(f->st, b.id, NULL, 0, &q, NULL), STORE_OK);
}

static void test_workspace_quotas_and_disk(void **state)
{
    struct store_fixture *f = *state;
    struct store_app a, b;
    struct store_workspace w;
    const int64_t two[STORE_QUOTA_COUNT] = {-1, -1, 2, 100, -1};
    make_app(f->st, "ws", two, &a);
    make_app(f->st, "other", NULL, &b);
    struct store_quotas q = host(0, 0);

    assert_int_equal(store_workspace_create_within(f->st, &admin, a.id, NULL, 64, "/tmp/q", &q, &w),
                     STORE_OK);
    assert_int_equal(store_workspace_create_within(f->st, &admin, a.id, NULL, 64, "/tmp/q", &q, &w),
                     STORE_OVER_QUOTA);
    assert_int_equal(q.hit, STORE_QUOTA_WORKSPACE_MIB);
    assert_int_equal(q.limit, 100);
    assert_int_equal(q.used, 64);
    assert_int_equal(store_workspace_create_within(f->st, &admin, a.id, NULL, 36, "/tmp/q", &q, &w),
                     STORE_OK);
    assert_int_equal(store_workspace_create_within(f->st, &admin, a.id, NULL, 16, "/tmp/q", &q, &w),
                     STORE_OVER_QUOTA);
    assert_int_equal(q.hit, STORE_QUOTA_WORKSPACES);
    assert_int_equal(db_int(f, "SELECT count(*) FROM workspaces WHERE app_id = '%s'", a.id), 2);

    /* The disk's budget counts every App's Workspaces: 100 promised of 150. */
    q.disk_budget_mib = 150;
    assert_int_equal(store_workspace_create_within(f->st, &admin, b.id, NULL, 51, "/tmp/q", &q, &w),
                     STORE_OVER_QUOTA);
    assert_int_equal(q.hit, STORE_QUOTA_DISK);
    assert_int_equal(q.limit, 150);
    assert_int_equal(q.used, 100);
    assert_int_equal(store_workspace_create_within(f->st, &admin, b.id, NULL, 50, "/tmp/q", &q, &w),
                     STORE_OK);
    /* A deleted Workspace gives its size back. */
    assert_int_equal(store_workspace_delete(f->st, &admin, b.id, w.id, NULL), STORE_OK);
    assert_int_equal(store_workspace_create_within(f->st, &admin, b.id, NULL, 50, "/tmp/q", &q, &w),
                     STORE_OK);
}

struct racer {
    struct store *st;
    const char *app_id;
    enum store_status status;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    struct store_quotas q = host(0, 0);
    r->status = new_session(r->st, r->app_id, NULL, 0, &q, NULL);
    return NULL;
}

static void test_concurrent_creates_take_the_last_place_once(void **state)
{
    struct store_fixture *f = *state;
    struct store_app a;
    const int64_t five[STORE_QUOTA_COUNT] = {-1, 5, -1, -1, -1};
    make_app(f->st, "race", five, &a);
    struct store_quotas q = host(0, 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(new_session(f->st, a.id, NULL, 0, &q, NULL), STORE_OK);
    enum { N = 8 };
    pthread_t t[N];
    struct racer r[N];
    for (int i = 0; i < N; i++) {
        r[i] = (struct racer){f->st, a.id, STORE_ERROR};
        assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    int ok = 0, over = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        ok += r[i].status == STORE_OK;
        over += r[i].status == STORE_OVER_QUOTA;
    }
    assert_int_equal(ok, 1);
    assert_int_equal(over, N - 1);
    assert_int_equal(
        db_int(f, "SELECT count(*) FROM sessions WHERE app_id = '%s' AND state <> 'deleted'", a.id),
        5);
}

static void test_usage_counts_live_rows(void **state)
{
    struct store_fixture *f = *state;
    struct store_app a, b;
    struct store_session s1, s2;
    struct store_workspace w;
    make_app(f->st, "used", NULL, &a);
    make_app(f->st, "idle", NULL, &b);
    assert_int_equal(new_session(f->st, a.id, NULL, 0, NULL, &s1), STORE_OK);
    assert_int_equal(new_session(f->st, a.id, NULL, 0, NULL, &s2), STORE_OK);
    assert_int_equal(store_session_delete(f->st, &admin, a.id, s2.id), STORE_OK);
    assert_int_equal(store_workspace_create(f->st, &admin, a.id, NULL, 40, "/tmp/u", &w), STORE_OK);
    assert_int_equal(store_workspace_create(f->st, &admin, a.id, NULL, 24, "/tmp/u", &w), STORE_OK);
    assert_int_equal(store_workspace_delete(f->st, &admin, a.id, w.id, NULL), STORE_OK);
    /* Claimed and running Sandboxes count; the warm pool's and ended ones do not. */
    db_exec(f,
            "INSERT INTO sandboxes (id, state, driver, image, vcpu_count, mem_size_mib, "
            "worker_id, app_id, session_id, created_at, updated_at) VALUES "
            "('sbx_run', 'running', 'process', 'default', 1, 256, 'wrk_1', '%s', '%s', 1, 1),"
            "('sbx_claim', 'claimed', 'process', 'default', 1, 256, 'wrk_1', '%s', '%s', 1, 1),"
            "('sbx_warm', 'warm', 'process', 'default', 1, 256, 'wrk_1', NULL, NULL, 1, 1),"
            "('sbx_dead', 'terminated', 'process', 'default', 1, 256, 'wrk_1', '%s', '%s', 1, 1)",
            a.id, s1.id, a.id, s2.id, a.id, s2.id);

    struct store_app_usage u;
    assert_int_equal(store_app_usage(f->st, a.id, &u), STORE_OK);
    assert_string_equal(u.app_id, a.id);
    assert_int_equal(u.used[STORE_QUOTA_LIVE_SANDBOXES], 2);
    assert_int_equal(u.used[STORE_QUOTA_SESSIONS], 1);
    assert_int_equal(u.used[STORE_QUOTA_WORKSPACES], 1);
    assert_int_equal(u.used[STORE_QUOTA_WORKSPACE_MIB], 40);
    assert_int_equal(u.quotas[STORE_QUOTA_SESSIONS], -1);

    struct store_app_usage *all = NULL;
    size_t n = 0;
    assert_int_equal(store_app_usage_list(f->st, &all, &n), STORE_OK);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++)
        if (strcmp(all[i].app_id, b.id) == 0)
            assert_int_equal(all[i].used[STORE_QUOTA_SESSIONS], 0);
    free(all);
    store_session_clear(&s1);
    store_session_clear(&s2);
    assert_int_equal(store_app_usage(f->st, "app_none", &u), STORE_NOT_FOUND);
}

/* SQLite's plans: each count searches its partial index of live rows (migration 0021) and no step
 * walks a table. */
static void test_counts_read_the_live_indexes(void **state)
{
    struct store_fixture *f = *state;
    if (f->pg)
        skip();
    const char *const stmts[] = {quota_usage_one_sql, quota_usage_all_sql, quota_disk_promised_sql};
    for (size_t k = 0; k < sizeof stmts / sizeof stmts[0]; k++) {
        char eqp[2048], plan[2048] = "";
        snprintf(eqp, sizeof eqp, "EXPLAIN QUERY PLAN %s", stmts[k]);
        sqlite3_stmt *s = NULL;
        assert_int_equal(sqlite3_prepare_v2(f->raw_sqlite, eqp, -1, &s, NULL), SQLITE_OK);
        while (sqlite3_step(s) == SQLITE_ROW) {
            size_t used = strlen(plan);
            snprintf(plan + used, sizeof plan - used, "  %s\n",
                     (const char *)sqlite3_column_text(s, 3));
        }
        sqlite3_finalize(s);
        const char *live[] = {"sessions_app_live", "workspaces_app_live", "sandboxes_app_live"};
        for (size_t i = 0; i < (k == 2 ? 0 : 3); i++)
            if (!strstr(plan, live[i]))
                fail_msg("statement %zu does not read %s:\n%s", k, live[i], plan);
        if (k == 2 && !strstr(plan, "workspaces_app_live"))
            fail_msg("the promised MiB do not read workspaces_app_live:\n%s", plan);
        /* A SCAN is of the apps (few, each counted) or of a live index; nothing else is walked. */
        for (const char *line = plan; line && *line; line = strchr(line + 1, '\n')) {
            const char *scan = strstr(line, "SCAN ");
            const char *end = strchr(line + 1, '\n');
            if (!scan || (end && scan > end))
                continue;
            char step[256];
            snprintf(step, sizeof step, "%.*s", (int)(end ? end - scan : (long)strlen(scan)), scan);
            if (strncmp(step, "SCAN a", 6) != 0 && !strstr(step, "_live"))
                fail_msg("statement %zu walks a table (%s):\n%s", k, step, plan);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_quota_columns_read_and_patched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_alive_quota, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sessions_quota, setup, teardown),
        cmocka_unit_test_setup_teardown(test_workspace_quotas_and_disk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_creates_take_the_last_place_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_usage_counts_live_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_counts_read_the_live_indexes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
