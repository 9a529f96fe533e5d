/*
 * test_store_hosts.c: the host side of the store on a real database (a SQLite file, or a
 * PostgreSQL database when run under tests/pg-run.sh: see store_fixture.h): registration and
 * heartbeat, host loss (one transaction that ends the lost host's Sandboxes "host lost", stops its
 * workers, requeues its leases and sends its Sessions back to idle, and fences it), a lost host's
 * return, and placement in the claim (a warm Sandbox of the shape first, then the least loaded
 * host, never a full or stale one, anyone after the grace).
 *
 * Apps, Sessions and messages are written with plain SQL (as in test_store_queue.c) so these
 * tests depend only on the functions they test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store.h"
#include "store_fixture.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct store_ctx ctx = {"worker:test", NULL};
static const struct store_shape shape = {"process", "default", 1, 256};
static const struct store_placement placement = {2000, 5000, 0};

static int setup(void **state)
{
    struct store_fixture *f = store_fixture_open("hosts", 10000, "NORMAL");
    db_exec(f, "INSERT INTO apps (id, name, command, max_attempts, keep_alive_seconds, created_at, "
               "updated_at) VALUES ('app_a', 'a', '[\"/bin/echo\"]', 3, 5, 1, 1)");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    store_fixture_close(*state);
    return 0;
}

/* A host with one worker, registered as a worker process does at start. */
static void add_host(struct store_fixture *f, const char *host_id, const char *worker_id,
                     int64_t capacity)
{
    struct store_host h = {.capacity = capacity};
    int64_t was_lost = -1;
    snprintf(h.id, sizeof h.id, "%s", host_id);
    snprintf(h.address, sizeof h.address, "10.0.0.1:9000");
    assert_int_equal(store_worker_register(f->st, worker_id, "machine", 1), STORE_OK);
    assert_int_equal(store_host_register(f->st, &ctx, &h, worker_id, &was_lost), STORE_OK);
    assert_int_equal(was_lost, 0);
}

/* An idle Session with one queued message created `age_ms` ago. */
static void add_idle_session_with_message(struct store_fixture *f, const char *sid, int64_t age_ms)
{
    int64_t t = clock_wall_ms() - age_ms;
    db_exec(
        f,
        "INSERT INTO sessions (id, app_id, created_at, updated_at) VALUES ('%s', 'app_a', %lld, "
        "%lld)",
        sid, (long long)t, (long long)t);
    db_exec(f,
            "INSERT INTO messages (id, session_id, app_id, seq, body, max_attempts, created_at, "
            "updated_at) VALUES ('msg_%s', '%s', 'app_a', 1, '{}', 3, %lld, %lld)",
            sid, sid, (long long)t, (long long)t);
}

/* n Sessions served by worker_id (its host's load). */
static void add_served_sessions(struct store_fixture *f, const char *worker_id, int n)
{
    for (int i = 0; i < n; i++)
        db_exec(f,
                "INSERT INTO sessions (id, app_id, state, worker_id, created_at, updated_at) "
                "VALUES ('ses_%s_%d', 'app_a', 'active', '%s', 1, 1)",
                worker_id, i, worker_id);
}

/* A warm Sandbox of `shape` booted by worker_id. */
static void add_warm(struct store_fixture *f, const char *worker_id)
{
    struct store_sandbox sb;
    assert_int_equal(store_sandbox_insert(f->st, &ctx, worker_id, &shape, false, &sb), STORE_OK);
    assert_int_equal(store_sandbox_mark_warm(f->st, &ctx, sb.id, 10), STORE_OK);
}

static enum store_status claim_placed(struct store_fixture *f, const char *worker_id,
                                      const char *want_message)
{
    struct store_delivery d;
    enum store_status rc = store_queue_claim_placed(f->st, &ctx, worker_id, 30000, &placement, &d);
    if (rc == STORE_OK) {
        if (want_message)
            assert_string_equal(d.message.id, want_message);
        store_delivery_clear(&d);
    }
    return rc;
}

static void test_register_heartbeat_and_list(void **state)
{
    struct store_fixture *f = *state;
    struct store_host *hosts = NULL;
    struct store_worker *workers = NULL;
    size_t n = 0;
    add_host(f, "host-a", "wrk_a", 8);
    add_host(f, "host-b", "wrk_b", 4);
    add_served_sessions(f, "wrk_b", 1);
    add_warm(f, "wrk_b");
    assert_int_equal(store_host_heartbeat(f->st, "host-a"), STORE_OK);
    assert_int_equal(store_host_heartbeat(f->st, "host-nowhere"), STORE_CONFLICT);

    assert_int_equal(store_host_list(f->st, &hosts, &n), STORE_OK);
    assert_int_equal(n, 2);
    assert_string_equal(hosts[0].id, "host-a");
    assert_string_equal(hosts[0].address, "10.0.0.1:9000");
    assert_int_equal(hosts[0].capacity, 8);
    assert_int_equal(hosts[0].workers, 1);
    assert_int_equal(hosts[0].serving, 0);
    assert_int_equal(hosts[0].lost_at, 0);
    assert_string_equal(hosts[1].id, "host-b");
    assert_int_equal(hosts[1].serving, 1);
    assert_int_equal(hosts[1].live_sandboxes, 1);
    free(hosts);

    assert_int_equal(store_worker_list_active(f->st, &workers, &n), STORE_OK);
    assert_int_equal(n, 2);
    assert_string_equal(workers[0].host_id, "host-a");
    assert_string_equal(workers[1].host_id, "host-b");
    free(workers);
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM events WHERE kind = 'host.registered'"), 2);

    /* Each worker knows its host; one registered without a host has none. */
    char host[STORE_HOST_ID_LEN];
    assert_int_equal(store_worker_host(f->st, "wrk_b", host, sizeof host), STORE_OK);
    assert_string_equal(host, "host-b");
    assert_int_equal(store_worker_register(f->st, "wrk_solo", "machine", 3), STORE_OK);
    assert_int_equal(store_worker_host(f->st, "wrk_solo", host, sizeof host), STORE_OK);
    assert_string_equal(host, "");
    assert_int_equal(store_worker_host(f->st, "wrk_nobody", host, sizeof host), STORE_NOT_FOUND);
}

static void test_declare_lost_ends_the_hosts_work_in_one_transaction(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    struct store_sandbox running, warm, mine;
    size_t lost = 99;

    add_host(f, "host-a", "wrk_a", 8);
    add_host(f, "host-b", "wrk_b", 8);
    /* host-b serves ses_1 (running Sandbox, a message in delivery) and is activating ses_2 (no
     * Sandbox yet); it also holds a warm Sandbox. host-a holds a warm Sandbox of its own. */
    add_idle_session_with_message(f, "ses_1", 0);
    add_idle_session_with_message(f, "ses_2", 0);
    assert_int_equal(store_queue_claim_placed(f->st, &ctx, "wrk_b", 30000, NULL, &d), STORE_OK);
    assert_string_equal(d.session.id, "ses_1");
    store_delivery_clear(&d);
    assert_int_equal(store_sandbox_insert(f->st, &ctx, "wrk_b", &shape, true, &running), STORE_OK);
    assert_int_equal(store_sandbox_assign(f->st, &ctx, running.id, "app_a", "ses_1"), STORE_OK);
    assert_int_equal(store_sandbox_mark_running(f->st, &ctx, running.id, "ses_1"), STORE_OK);
    assert_int_equal(store_queue_claim_placed(f->st, &ctx, "wrk_b", 30000, NULL, &d), STORE_OK);
    assert_string_equal(d.session.id, "ses_2");
    store_delivery_clear(&d);
    assert_int_equal(store_sandbox_insert(f->st, &ctx, "wrk_b", &shape, false, &warm), STORE_OK);
    assert_int_equal(store_sandbox_insert(f->st, &ctx, "wrk_a", &shape, false, &mine), STORE_OK);

    /* Nothing is stale yet: nothing happens (and nothing is written). */
    int64_t events = db_int(f, "SELECT COUNT(*) FROM events");
    assert_int_equal(store_host_declare_lost(f->st, &ctx, "host-a", 5000, &lost), STORE_OK);
    assert_int_equal(lost, 0);
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM events"), events);

    /* host-b stops heartbeating. A host never declares itself lost. */
    db_exec(f, "UPDATE hosts SET heartbeat_at = heartbeat_at - 60000");
    assert_int_equal(store_host_heartbeat(f->st, "host-a"), STORE_OK);
    assert_int_equal(store_host_declare_lost(f->st, &ctx, "host-b", 5000, &lost), STORE_OK);
    assert_int_equal(lost, 0);
    assert_int_equal(store_host_declare_lost(f->st, &ctx, "host-a", 5000, &lost), STORE_OK);
    assert_int_equal(lost, 1);

    assert_int_equal(db_int(f, "SELECT CASE WHEN lost_at IS NOT NULL THEN 1 ELSE 0 END FROM hosts "
                               "WHERE id = 'host-b'"),
                     1);
    assert_int_equal(db_int(f, "SELECT CASE WHEN lost_at IS NULL THEN 1 ELSE 0 END FROM hosts "
                               "WHERE id = 'host-a'"),
                     1);
    /* Its Sandboxes: terminated "host lost", with an audit event each; host-a's untouched. */
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM sandboxes WHERE worker_id = 'wrk_b' AND "
                               "state = 'terminated' AND termination_reason = 'host lost' AND "
                               "terminated_at IS NOT NULL"),
                     2);
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM events WHERE kind = 'sandbox.terminated' AND "
                               "data LIKE '%%\"reason\":\"host lost\"%%'"),
                     2);
    assert_int_equal(db_int(f,
                            "SELECT CASE WHEN state = 'booting' THEN 1 ELSE 0 END FROM sandboxes "
                            "WHERE id = '%s'",
                            mine.id),
                     1);
    /* Its workers: stopped, and fenced. */
    assert_int_equal(
        db_int(f, "SELECT CASE WHEN stopped_at IS NOT NULL THEN 1 ELSE 0 END FROM workers "
                  "WHERE id = 'wrk_b'"),
        1);
    assert_int_equal(store_worker_heartbeat(f->st, "wrk_b"), STORE_CONFLICT);
    assert_int_equal(store_host_heartbeat(f->st, "host-b"), STORE_CONFLICT);
    assert_int_equal(store_sandbox_insert(f->st, &ctx, "wrk_b", &shape, false, &warm),
                     STORE_CONFLICT);
    assert_int_equal(claim_placed(f, "wrk_b", NULL), STORE_EMPTY);
    /* Its leases: both back in the queue; the attempt counts, with the reason. */
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM messages WHERE state = 'queued' AND "
                               "attempts = 1 AND lease_owner IS NULL AND "
                               "error = 'host lost while delivering'"),
                     2);
    /* Its Sessions: idle and unowned, so their next message activates elsewhere. */
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM sessions WHERE state = 'idle' AND "
                               "worker_id IS NULL AND sandbox_id IS NULL"),
                     2);
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM events WHERE kind = 'host.lost' AND "
                               "object_id = 'host-b' AND (data LIKE '%%\"requeued\":2,%%' OR "
                               "data LIKE '%%\"requeued\":2}')"),
                     1);
    /* The store's integrity views agree. */
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM orphan_rows"), 0);
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM sandbox_reuse_violations"), 0);
    /* Another live host now takes both Sessions. */
    assert_int_equal(claim_placed(f, "wrk_a", "msg_ses_1"), STORE_OK);
    assert_int_equal(claim_placed(f, "wrk_a", "msg_ses_2"), STORE_OK);
    /* Declared once only. */
    assert_int_equal(store_host_declare_lost(f->st, &ctx, "host-a", 5000, &lost), STORE_OK);
    assert_int_equal(lost, 0);
}

static void test_a_lost_host_comes_back_and_finds_what_it_left(void **state)
{
    struct store_fixture *f = *state;
    struct store_sandbox sb, *left = NULL;
    struct store_host h = {.capacity = 4};
    int64_t was_lost = 0;
    size_t n = 0;
    add_host(f, "host-a", "wrk_a", 8);
    add_host(f, "host-b", "wrk_b", 8);
    assert_int_equal(store_sandbox_insert(f->st, &ctx, "wrk_b", &shape, false, &sb), STORE_OK);
    /* One host-b was stopping when it died: the verdict keeps its reason, and its jail is on
     * host-b all the same, so host-b must find it too. */
    struct store_sandbox stopping;
    assert_int_equal(store_sandbox_insert(f->st, &ctx, "wrk_b", &shape, false, &stopping),
                     STORE_OK);
    assert_int_equal(store_sandbox_mark_stopping(f->st, &ctx, stopping.id, "keep-alive expired"),
                     STORE_OK);
    db_exec(f, "UPDATE hosts SET heartbeat_at = heartbeat_at - 60000 WHERE id = 'host-b'");
    assert_int_equal(store_host_declare_lost(f->st, &ctx, "host-a", 5000, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(db_int(f,
                            "SELECT COUNT(*) FROM sandboxes WHERE id = '%s' AND state = "
                            "'terminated' AND termination_reason = 'keep-alive expired'",
                            stopping.id),
                     1);
    int64_t lost_at = db_int(f, "SELECT lost_at FROM hosts WHERE id = 'host-b'");

    /* A new worker of host-b registers: the host is live again and learns when it was lost. */
    snprintf(h.id, sizeof h.id, "host-b");
    assert_int_equal(store_worker_register(f->st, "wrk_b2", "machine", 2), STORE_OK);
    assert_int_equal(store_host_register(f->st, &ctx, &h, "wrk_b2", &was_lost), STORE_OK);
    assert_int_equal(was_lost, lost_at);
    assert_int_equal(db_int(f, "SELECT CASE WHEN lost_at IS NULL THEN 1 ELSE 0 END FROM hosts "
                               "WHERE id = 'host-b'"),
                     1);
    assert_int_equal(store_host_heartbeat(f->st, "host-b"), STORE_OK);
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM events WHERE kind = 'host.returned'"), 1);
    assert_int_equal(store_sandbox_list_host_lost(f->st, "host-b", was_lost, &left, &n), STORE_OK);
    assert_int_equal(n, 2);
    assert_true((strcmp(left[0].id, sb.id) == 0 && strcmp(left[1].id, stopping.id) == 0) ||
                (strcmp(left[0].id, stopping.id) == 0 && strcmp(left[1].id, sb.id) == 0));
    free(left);
    /* host-a's list is its own (empty). */
    assert_int_equal(store_sandbox_list_host_lost(f->st, "host-a", was_lost, &left, &n), STORE_OK);
    assert_int_equal(n, 0);
    free(left);
    /* A second registration while live says it was not lost. */
    assert_int_equal(store_host_register(f->st, &ctx, &h, "wrk_b2", &was_lost), STORE_OK);
    assert_int_equal(was_lost, 0);
}

static void test_placement_prefers_a_warm_sandbox_of_the_shape(void **state)
{
    struct store_fixture *f = *state;
    add_host(f, "host-a", "wrk_a", 8);
    add_host(f, "host-b", "wrk_b", 8);
    add_warm(f, "wrk_b");
    add_served_sessions(f, "wrk_b", 3); /* more loaded, but it has the warm Sandbox */
    add_idle_session_with_message(f, "ses_1", 0);
    assert_int_equal(claim_placed(f, "wrk_a", NULL), STORE_EMPTY);
    assert_int_equal(claim_placed(f, "wrk_b", "msg_ses_1"), STORE_OK);
    /* Placement does not apply to the unplaced claim. */
    add_idle_session_with_message(f, "ses_2", 0);
    struct store_delivery d;
    assert_int_equal(store_queue_claim_placed(f->st, &ctx, "wrk_a", 30000, NULL, &d), STORE_OK);
    store_delivery_clear(&d);
}

static void test_placement_takes_the_least_loaded_host_and_skips_full_ones(void **state)
{
    struct store_fixture *f = *state;
    add_host(f, "host-a", "wrk_a", 10);
    add_host(f, "host-b", "wrk_b", 2);
    /* host-a serves 3 of 10, host-b 1 of 2: host-a is less loaded although it serves more. */
    add_served_sessions(f, "wrk_a", 3);
    add_served_sessions(f, "wrk_b", 1);
    add_idle_session_with_message(f, "ses_1", 0);
    assert_int_equal(claim_placed(f, "wrk_b", NULL), STORE_EMPTY);
    assert_int_equal(claim_placed(f, "wrk_a", "msg_ses_1"), STORE_OK);

    /* A full host is never chosen, even with a warm Sandbox of the shape. */
    db_exec(f, "UPDATE hosts SET capacity = 1 WHERE id = 'host-b'");
    add_warm(f, "wrk_b");
    add_idle_session_with_message(f, "ses_2", 0);
    assert_int_equal(claim_placed(f, "wrk_b", NULL), STORE_EMPTY);
    assert_int_equal(claim_placed(f, "wrk_a", "msg_ses_2"), STORE_OK);

    /* Nor is a host whose heartbeat is older than host_lost_ms (not yet declared lost). */
    db_exec(f, "UPDATE hosts SET capacity = 10");
    db_exec(f, "UPDATE hosts SET heartbeat_at = heartbeat_at - 60000 WHERE id = 'host-a'");
    add_idle_session_with_message(f, "ses_3", 0);
    assert_int_equal(claim_placed(f, "wrk_a", NULL), STORE_EMPTY);
    assert_int_equal(claim_placed(f, "wrk_b", "msg_ses_3"), STORE_OK);
    add_host(f, "host-c", "wrk_c", 10);
    add_served_sessions(f, "wrk_c", 9);
    add_idle_session_with_message(f, "ses_4", 0);
    assert_int_equal(claim_placed(f, "wrk_a", NULL), STORE_EMPTY);
    assert_int_equal(claim_placed(f, "wrk_b", "msg_ses_4"), STORE_OK); /* warm */
}

static void test_placement_grace_lets_any_host_take_a_waiting_message(void **state)
{
    struct store_fixture *f = *state;
    add_host(f, "host-a", "wrk_a", 8);
    add_host(f, "host-b", "wrk_b", 8);
    add_warm(f, "wrk_b");
    /* Placed on host-b, but waiting longer than the grace: host-a may take it. */
    add_idle_session_with_message(f, "ses_1", placement.grace_ms + 500);
    assert_int_equal(claim_placed(f, "wrk_a", "msg_ses_1"), STORE_OK);
    /* A message of a Session owned by a worker is that worker's, placement or not. */
    add_served_sessions(f, "wrk_a", 1);
    db_exec(f, "INSERT INTO messages (id, session_id, app_id, seq, body, max_attempts, created_at, "
               "updated_at) VALUES ('msg_owned', 'ses_wrk_a_0', 'app_a', 1, '{}', 3, 1, 1)");
    assert_int_equal(claim_placed(f, "wrk_b", NULL), STORE_EMPTY);
    assert_int_equal(claim_placed(f, "wrk_a", "msg_owned"), STORE_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_register_heartbeat_and_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_declare_lost_ends_the_hosts_work_in_one_transaction,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_lost_host_comes_back_and_finds_what_it_left, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_placement_prefers_a_warm_sandbox_of_the_shape, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_placement_takes_the_least_loaded_host_and_skips_full_ones, setup, teardown),
        cmocka_unit_test_setup_teardown(test_placement_grace_lets_any_host_take_a_waiting_message,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
