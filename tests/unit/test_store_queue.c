/*
 * test_store_queue.c: the worker side of the store on a real database (a SQLite file, or a
 * PostgreSQL database when run under tests/pg-run.sh: see store_fixture.h): per-Session order,
 * leases and their expiry, retries with backoff, maxAttempts, exactly-once completion, no double
 * claims from concurrent claim loops, fair claims between Apps and the live-Sandbox quota, the
 * Sandbox lifecycle (and the warm path's folded claim and first completion), worker adoption and
 * /metrics' counts of messages by state.
 *
 * Apps, Sessions and messages are written with plain SQL so these tests depend only on the
 * worker-side functions they test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "id.h"
#include "store.h"
#include "store_fixture.h"
#include "clock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct store_ctx ctx = {"worker:test", NULL};
static const struct store_shape shape = {"process", "default", 1, 256};

static int setup(void **state)
{
    struct store_fixture *f = store_fixture_open("queue", 10000, "NORMAL");
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

static void add_session(struct store_fixture *f, const char *id)
{
    db_exec(
        f, "INSERT INTO sessions (id, app_id, created_at, updated_at) VALUES ('%s', 'app_a', 1, 1)",
        id);
}

/* Enqueues like the gateway: the Session's next seq. */
static void add_message(struct store_fixture *f, const char *session, int seq, int max_attempts)
{
    db_exec(f,
            "INSERT INTO messages (id, session_id, app_id, seq, body, max_attempts, created_at, "
            "updated_at) VALUES ('msg_%s_%d', '%s', 'app_a', %d, '{\"n\":%d}', %d, %d, %d)",
            session, seq, session, seq, seq, max_attempts, seq, seq);
}

static enum store_status claim(struct store_fixture *f, const char *worker,
                               struct store_delivery *d)
{
    return store_queue_claim_placed(f->st, &ctx, worker, 30000, NULL, d);
}

static void test_claims_in_seq_order_one_at_a_time(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    add_session(f, "ses_1");
    add_message(f, "ses_1", 2, 3);
    add_message(f, "ses_1", 1, 3);
    add_message(f, "ses_1", 3, 3);

    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_1_1");
    assert_string_equal(d.message.state, "delivering");
    assert_int_equal(d.message.attempts, 1);
    assert_string_equal(d.session.state, "activating");
    assert_string_equal(d.session.worker_id, "wrk_a");
    assert_string_equal(d.app.id, "app_a");
    assert_int_equal(d.session.effective_keep_alive_seconds, 5);
    assert_string_equal(d.message.body_json, "{\"n\":1}");
    store_delivery_clear(&d);

    /* seq 2 waits while seq 1 is delivering, even for the owning worker. */
    assert_int_equal(claim(f, "wrk_a", &d), STORE_EMPTY);
    assert_int_equal(store_queue_complete(f->st, &ctx, "msg_ses_1_1", "wrk_a", NULL, "{\"r\":1}"),
                     STORE_OK);
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_1_2");
    store_delivery_clear(&d);
}

static void test_session_owned_by_another_worker_is_not_claimable(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    add_session(f, "ses_1");
    add_session(f, "ses_2");
    add_message(f, "ses_1", 1, 3);
    add_message(f, "ses_1", 2, 3);
    add_message(f, "ses_2", 1, 3);

    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_1_1");
    store_delivery_clear(&d);
    assert_int_equal(store_queue_complete(f->st, &ctx, "msg_ses_1_1", "wrk_a", NULL, "1"),
                     STORE_OK);
    /* ses_1 still belongs to wrk_a (its Sandbox is there): wrk_b gets only ses_2. */
    assert_int_equal(claim(f, "wrk_b", &d), STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_2_1");
    store_delivery_clear(&d);
    assert_int_equal(claim(f, "wrk_b", &d), STORE_EMPTY);
    /* claim_owned gives wrk_a only its own Sessions' messages. */
    assert_int_equal(store_queue_claim_owned(f->st, &ctx, "wrk_a", 30000, &d), STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_1_2");
    store_delivery_clear(&d);
}

static void test_completion_is_exactly_once_and_only_for_the_lease_holder(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    char reply[64];
    add_session(f, "ses_1");
    add_message(f, "ses_1", 1, 3);
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    store_delivery_clear(&d);

    assert_int_equal(store_queue_complete(f->st, &ctx, "msg_ses_1_1", "wrk_b", NULL, "\"x\""),
                     STORE_CONFLICT);
    assert_int_equal(
        store_queue_complete(f->st, &ctx, "msg_ses_1_1", "wrk_a", "sbx_1", "{\"ok\":true}"),
        STORE_OK);
    assert_int_equal(store_queue_complete(f->st, &ctx, "msg_ses_1_1", "wrk_a", "sbx_1", "\"y\""),
                     STORE_CONFLICT);
    db_text(f, reply, sizeof reply, "SELECT reply FROM messages WHERE id = 'msg_ses_1_1'");
    assert_string_equal(reply, "{\"ok\":true}");
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM events WHERE kind = 'message.completed'"), 1);
    assert_int_equal(
        db_int(f, "SELECT CASE WHEN completed_at > 0 AND lease_owner IS NULL THEN 1 ELSE 0 END "
                  "FROM messages"),
        1);
}

static void test_expired_lease_is_requeued_and_old_holder_cannot_complete(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    size_t n = 99;
    add_session(f, "ses_1");
    add_message(f, "ses_1", 1, 3);
    assert_int_equal(store_queue_claim_placed(f->st, &ctx, "wrk_a", 1, NULL, &d), STORE_OK);
    store_delivery_clear(&d);
    /* A 1 ms lease: wait it out, then requeue. */
    usleep(5000);
    assert_int_equal(store_queue_requeue_expired(f->st, &ctx, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(
        db_int(f, "SELECT CASE WHEN state = 'queued' AND lease_owner IS NULL THEN 1 ELSE 0 END "
                  "FROM messages"),
        1);
    assert_int_equal(store_queue_complete(f->st, &ctx, "msg_ses_1_1", "wrk_a", NULL, "1"),
                     STORE_CONFLICT);
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM events WHERE kind = 'message.retry'"), 1);
}

static void test_extend_lease_keeps_it_from_expiring(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    size_t n = 99;
    add_session(f, "ses_1");
    add_message(f, "ses_1", 1, 3);
    assert_int_equal(store_queue_claim_placed(f->st, &ctx, "wrk_a", 1, NULL, &d), STORE_OK);
    store_delivery_clear(&d);
    assert_int_equal(store_queue_extend_lease(f->st, "msg_ses_1_1", "wrk_a", 60000), STORE_OK);
    assert_int_equal(store_queue_extend_lease(f->st, "msg_ses_1_1", "wrk_b", 60000),
                     STORE_CONFLICT);
    usleep(5000);
    assert_int_equal(store_queue_requeue_expired(f->st, &ctx, &n), STORE_OK);
    assert_int_equal(n, 0);
}

static void test_failed_attempt_backs_off_then_retries(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    bool final = true;
    int64_t due = 0, before = clock_wall_ms();
    add_session(f, "ses_1");
    add_message(f, "ses_1", 1, 3);
    add_message(f, "ses_1", 2, 3);
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    store_delivery_clear(&d);
    assert_int_equal(store_queue_fail(f->st, &ctx, "msg_ses_1_1", "wrk_a", "sbx_x",
                                      "agent error: boom", 100000, &final),
                     STORE_OK);
    assert_false(final);
    /* Backing off: nothing of the Session is deliverable, and seq 2 does not overtake seq 1. */
    assert_int_equal(claim(f, "wrk_a", &d), STORE_EMPTY);
    assert_int_equal(store_queue_next_due(f->st, &due), STORE_OK);
    assert_true(due >= before + 100000);
    /* Once due it is claimed again, and the attempt counts. */
    db_exec(f, "UPDATE messages SET not_before = 0 WHERE id = 'msg_ses_1_1'");
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_1_1");
    assert_int_equal(d.message.attempts, 2);
    assert_string_equal(d.message.error, "agent error: boom");
    store_delivery_clear(&d);
}

static void test_max_attempts_fails_with_reason_and_unblocks_next(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    bool final = false;
    char error[128], state_text[16];
    add_session(f, "ses_1");
    add_message(f, "ses_1", 1, 2);
    add_message(f, "ses_1", 2, 2);
    for (int attempt = 1; attempt <= 2; attempt++) {
        assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
        assert_string_equal(d.message.id, "msg_ses_1_1");
        store_delivery_clear(&d);
        assert_int_equal(store_queue_fail(f->st, &ctx, "msg_ses_1_1", "wrk_a", NULL,
                                          "agent exited with status 3", 0, &final),
                         STORE_OK);
        assert_int_equal(final, attempt == 2);
    }
    db_text(f, state_text, sizeof state_text, "SELECT state FROM messages WHERE seq = 1");
    db_text(f, error, sizeof error, "SELECT error FROM messages WHERE seq = 1");
    assert_string_equal(state_text, "failed");
    assert_string_equal(error, "agent exited with status 3");
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM events WHERE kind = 'message.failed'"), 1);
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM events WHERE kind = 'message.retry'"), 1);
    /* A failed message is finished: the next one flows. */
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_1_2");
    store_delivery_clear(&d);
}

/* /metrics' messages by state: each state counted as the message moves (completed is derived from
 * the total, so a wrong total or a state left out shows here). */
static void assert_message_counts(struct store_fixture *f, int64_t queued, int64_t delivering,
                                  int64_t completed, int64_t failed)
{
    struct store_counts c;
    assert_int_equal(store_counts(f->st, &c), STORE_OK);
    assert_int_equal(c.messages_by_state[0], queued);
    assert_int_equal(c.messages_by_state[1], delivering);
    assert_int_equal(c.messages_by_state[2], completed);
    assert_int_equal(c.messages_by_state[3], failed);
}

static void test_counts_follow_each_message_state(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    bool final = false;
    assert_message_counts(f, 0, 0, 0, 0);
    add_session(f, "ses_1");
    add_session(f, "ses_2");
    add_session(f, "ses_3");
    add_message(f, "ses_1", 1, 3);
    assert_message_counts(f, 1, 0, 0, 0);
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    store_delivery_clear(&d);
    assert_message_counts(f, 0, 1, 0, 0);
    assert_int_equal(store_queue_complete(f->st, &ctx, "msg_ses_1_1", "wrk_a", NULL, "1"),
                     STORE_OK);
    assert_message_counts(f, 0, 0, 1, 0);
    add_message(f, "ses_2", 1, 1);
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_2_1");
    store_delivery_clear(&d);
    assert_int_equal(
        store_queue_fail(f->st, &ctx, "msg_ses_2_1", "wrk_a", NULL, "exit 3", 0, &final), STORE_OK);
    assert_true(final);
    assert_message_counts(f, 0, 0, 1, 1);
    add_message(f, "ses_3", 1, 3);
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_3_1");
    store_delivery_clear(&d);
    add_message(f, "ses_1", 2, 3);
    add_message(f, "ses_3", 2, 3);
    assert_message_counts(f, 2, 1, 1, 1);
}

static void test_release_gives_back_without_counting(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    add_session(f, "ses_1");
    add_message(f, "ses_1", 1, 1);
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    store_delivery_clear(&d);
    assert_int_equal(store_queue_release(f->st, &ctx, "msg_ses_1_1", "wrk_b"), STORE_CONFLICT);
    assert_int_equal(store_queue_release(f->st, &ctx, "msg_ses_1_1", "wrk_a"), STORE_OK);
    assert_int_equal(db_int(f, "SELECT attempts FROM messages"), 0);
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    store_delivery_clear(&d);
}

/* A warm Sandbox of worker's, booted and ready in the pool. */
static void add_warm(struct store_fixture *f, const char *worker, struct store_sandbox *sb)
{
    assert_int_equal(store_sandbox_insert(f->st, &ctx, worker, &shape, false, sb), STORE_OK);
    assert_int_equal(store_sandbox_mark_warm(f->st, &ctx, sb->id, 5), STORE_OK);
}

/* The event kinds of the Session's activation, in the order they were written (one row at a
 * time: the same SQL on SQLite and PostgreSQL). */
static void session_event_kinds(struct store_fixture *f, const char *session, char *out,
                                size_t outlen)
{
    int64_t n = db_int(f, "SELECT COUNT(*) FROM events WHERE session_id = '%s'", session);
    size_t len = 0;
    out[0] = '\0';
    for (int64_t i = 0; i < n && len < outlen; i++) {
        char kind[64];
        db_text(f, kind, sizeof kind,
                "SELECT kind FROM events WHERE session_id = '%s' ORDER BY id LIMIT 1 OFFSET %lld",
                session, (long long)i);
        len += (size_t)snprintf(out + len, outlen - len, "%s%s", i ? " " : "", kind);
    }
}

/* The warm path's one claim: the idle Session's message and this worker's warm Sandbox of the
 * App's shape in one transaction; another worker's warm Sandbox is never taken, and without one
 * of its own the worker is told to boot (id ""). */
static void test_claim_with_sandbox_takes_the_warm_one_in_the_same_transaction(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    struct store_sandbox mine, theirs;
    char text[512];
    add_session(f, "ses_1");
    add_session(f, "ses_2");
    add_message(f, "ses_1", 1, 3);
    add_warm(f, "wrk_b", &theirs);
    add_warm(f, "wrk_a", &mine);

    assert_int_equal(store_queue_claim_with_sandbox(f->st, &ctx, "wrk_a", 30000, NULL, &d),
                     STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_1_1");
    assert_true(d.warm_claim_tried);
    assert_string_equal(d.sandbox.id, mine.id);
    assert_string_equal(d.sandbox.state, "claimed");
    assert_string_equal(d.sandbox.session_id, "ses_1");
    store_delivery_clear(&d);
    db_text(f, text, sizeof text,
            "SELECT state || ':' || sandbox_id FROM sessions WHERE id = "
            "'ses_1'");
    char want[128];
    snprintf(want, sizeof want, "activating:%s", mine.id);
    assert_string_equal(text, want);
    db_text(f, text, sizeof text, "SELECT state FROM sandboxes WHERE id = '%s'", theirs.id);
    assert_string_equal(text, "warm");
    session_event_kinds(f, "ses_1", text, sizeof text);
    assert_string_equal(text, "session.activating message.delivering sandbox.claimed");

    /* No warm Sandbox of wrk_a's left: the claim says so, and leaves wrk_b's alone. */
    add_message(f, "ses_2", 1, 3);
    assert_int_equal(store_queue_claim_with_sandbox(f->st, &ctx, "wrk_a", 30000, NULL, &d),
                     STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_2_1");
    assert_true(d.warm_claim_tried);
    assert_string_equal(d.sandbox.id, "");
    store_delivery_clear(&d);
    db_text(f, text, sizeof text, "SELECT state FROM sandboxes WHERE id = '%s'", theirs.id);
    assert_string_equal(text, "warm");

    /* The next message of a Session the worker owns: no Sandbox to look for. */
    assert_int_equal(
        store_queue_fail(f->st, &ctx, "msg_ses_2_1", "wrk_a", NULL, "x", 0, &(bool){false}),
        STORE_OK);
    assert_int_equal(store_queue_claim_with_sandbox(f->st, &ctx, "wrk_a", 30000, NULL, &d),
                     STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_2_1");
    assert_false(d.warm_claim_tried);
    store_delivery_clear(&d);
}

/* The first reply of a claimed Sandbox: `running` (Sandbox running, Session active) and the
 * completion in one transaction, events in that order; a refusal writes nothing. */
static void test_complete_first_records_running_with_the_reply(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    struct store_sandbox sb;
    char text[512];
    add_session(f, "ses_1");
    add_message(f, "ses_1", 1, 3);
    add_warm(f, "wrk_a", &sb);
    assert_int_equal(store_queue_claim_with_sandbox(f->st, &ctx, "wrk_a", 30000, NULL, &d),
                     STORE_OK);
    assert_string_equal(d.sandbox.id, sb.id);

    /* Another worker's lease: refused, and the Sandbox is still only claimed. */
    assert_int_equal(
        store_queue_complete_first(f->st, &ctx, d.message.id, "wrk_b", sb.id, "ses_1", "1"),
        STORE_CONFLICT);
    db_text(f, text, sizeof text, "SELECT state FROM sandboxes WHERE id = '%s'", sb.id);
    assert_string_equal(text, "claimed");
    db_text(f, text, sizeof text, "SELECT state FROM sessions");
    assert_string_equal(text, "activating");

    assert_int_equal(store_queue_complete_first(f->st, &ctx, d.message.id, "wrk_a", sb.id, "ses_1",
                                                "{\"ok\":1}"),
                     STORE_OK);
    store_delivery_clear(&d);
    db_text(f, text, sizeof text, "SELECT state FROM sandboxes WHERE id = '%s'", sb.id);
    assert_string_equal(text, "running");
    db_text(f, text, sizeof text, "SELECT state || ':' || activation_count FROM sessions");
    assert_string_equal(text, "active:1");
    db_text(f, text, sizeof text, "SELECT state || ':' || reply FROM messages");
    assert_string_equal(text, "completed:{\"ok\":1}");
    session_event_kinds(f, "ses_1", text, sizeof text);
    assert_string_equal(text, "session.activating message.delivering sandbox.claimed "
                              "sandbox.running session.active message.completed");
    /* Only once: the Sandbox runs already. */
    add_message(f, "ses_1", 2, 3);
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    assert_int_equal(
        store_queue_complete_first(f->st, &ctx, d.message.id, "wrk_a", sb.id, "ses_1", "2"),
        STORE_CONFLICT);
    assert_int_equal(store_queue_complete(f->st, &ctx, d.message.id, "wrk_a", sb.id, "2"),
                     STORE_OK);
    store_delivery_clear(&d);
}

/* Pre-started Sandboxes: a claim for their App takes one started at the App's current definition
 * first, else a plain one; a plain claim never takes a pre-started one; a change of what they are
 * started from (env here) raises the App's definition_rev, a keep-alive change does not. */
static void test_prestarted_sandboxes_serve_their_app_at_its_revision(void **state)
{
    struct store_fixture *f = *state;
    struct store_sandbox plain, pre, old, claimed;
    struct store_app app;
    const char *env = "{\"A\":\"1\"}";
    int64_t keep = 9;
    add_session(f, "ses_1");
    add_session(f, "ses_2");
    add_session(f, "ses_3");
    db_exec(f, "UPDATE sessions SET worker_id = 'wrk_a'");
    struct store_app_patch change = {.env_json = env}, keep_only = {.keep_alive_seconds = &keep};
    assert_int_equal(store_app_update(f->st, &ctx, "app_a", &change, &app), STORE_OK);
    assert_int_equal(app.definition_rev, 2);
    store_app_clear(&app);
    assert_int_equal(store_app_update(f->st, &ctx, "app_a", &keep_only, &app), STORE_OK);
    assert_int_equal(app.definition_rev, 2);
    store_app_clear(&app);

    assert_int_equal(store_sandbox_insert(f->st, &ctx, "wrk_a", &shape, false, &plain), STORE_OK);
    assert_int_equal(
        store_sandbox_insert_prestarted(f->st, &ctx, "wrk_a", &shape, "app_a", 1, &old), STORE_OK);
    assert_int_equal(
        store_sandbox_insert_prestarted(f->st, &ctx, "wrk_a", &shape, "app_a", 2, &pre), STORE_OK);
    assert_string_equal(pre.app_id, "app_a");
    assert_int_equal(pre.prestart_rev, 2);
    assert_int_equal(store_sandbox_mark_warm(f->st, &ctx, old.id, 1), STORE_OK);
    assert_int_equal(store_sandbox_mark_warm(f->st, &ctx, plain.id, 1), STORE_OK);
    assert_int_equal(store_sandbox_mark_warm(f->st, &ctx, pre.id, 1), STORE_OK);

    assert_int_equal(
        store_sandbox_claim_warm(f->st, &ctx, "wrk_a", &shape, "app_a", 2, "ses_1", &claimed),
        STORE_OK);
    assert_string_equal(claimed.id, pre.id);
    /* The one of the old definition is left out: the plain pool serves. */
    assert_int_equal(
        store_sandbox_claim_warm(f->st, &ctx, "wrk_a", &shape, "app_a", 2, "ses_2", &claimed),
        STORE_OK);
    assert_string_equal(claimed.id, plain.id);
    assert_int_equal(claimed.prestart_rev, 0);
    assert_int_equal(
        store_sandbox_claim_warm(f->st, &ctx, "wrk_a", &shape, "app_a", 0, "ses_3", &claimed),
        STORE_EMPTY);
}

/* The whole lifecycle of one activation: warm -> claimed -> running -> stopping -> terminated, with
 * the Session following along and accumulating usage. */
static void test_sandbox_lifecycle_moves_the_session(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    struct store_sandbox sb, claimed;
    struct store_usage usage = {1500, 4096};
    char text[64];
    add_session(f, "ses_1");
    add_message(f, "ses_1", 1, 3);

    assert_int_equal(store_sandbox_insert(f->st, &ctx, "wrk_a", &shape, false, &sb), STORE_OK);
    assert_string_equal(sb.state, "booting");
    strcpy(sb.jail_dir, "/tmp/jail/x");
    sb.pid = 4242;
    assert_int_equal(store_sandbox_set_runtime(f->st, &sb), STORE_OK);
    assert_int_equal(store_sandbox_mark_warm(f->st, &ctx, sb.id, 12), STORE_OK);
    assert_int_equal(store_sandbox_mark_warm(f->st, &ctx, sb.id, 12), STORE_CONFLICT);

    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    /* Another worker's warm Sandbox is not ours to claim. */
    assert_int_equal(
        store_sandbox_claim_warm(f->st, &ctx, "wrk_b", &shape, "app_a", 0, "ses_1", &claimed),
        STORE_EMPTY);
    assert_int_equal(
        store_sandbox_claim_warm(f->st, &ctx, "wrk_a", &shape, "app_a", 0, "ses_1", &claimed),
        STORE_OK);
    assert_string_equal(claimed.id, sb.id);
    assert_string_equal(claimed.state, "claimed");
    assert_string_equal(claimed.jail_dir, "/tmp/jail/x");
    assert_int_equal(claimed.pid, 4242);
    /* Used or claimed Sandboxes never go back to the pool. */
    assert_int_equal(
        store_sandbox_claim_warm(f->st, &ctx, "wrk_a", &shape, "app_a", 0, "ses_1", &claimed),
        STORE_EMPTY);
    assert_int_equal(store_sandbox_mark_running(f->st, &ctx, sb.id, "ses_1"), STORE_OK);
    db_text(f, text, sizeof text, "SELECT state FROM sessions");
    assert_string_equal(text, "active");
    assert_int_equal(db_int(f, "SELECT activation_count FROM sessions"), 1);
    assert_int_equal(
        db_int(f, "SELECT CASE WHEN sandbox_id = '%s' THEN 1 ELSE 0 END FROM sessions", sb.id), 1);
    assert_int_equal(store_queue_complete(f->st, &ctx, d.message.id, "wrk_a", sb.id, "1"),
                     STORE_OK);
    store_delivery_clear(&d);
    assert_int_equal(store_session_touch(f->st, "ses_1", 123456), STORE_OK);
    assert_int_equal(db_int(f, "SELECT expires_at FROM sessions"), 123456);

    assert_int_equal(store_sandbox_mark_stopping(f->st, &ctx, sb.id, "keep-alive expired"),
                     STORE_OK);
    /* The Session is idle again at once, free for any worker. */
    db_text(f, text, sizeof text, "SELECT state FROM sessions");
    assert_string_equal(text, "idle");
    assert_int_equal(
        db_int(f, "SELECT CASE WHEN sandbox_id IS NULL AND worker_id IS NULL THEN 1 ELSE 0 END "
                  "FROM sessions"),
        1);
    assert_int_equal(store_sandbox_finish(f->st, &ctx, sb.id, false, "ignored", &usage), STORE_OK);
    assert_int_equal(store_sandbox_finish(f->st, &ctx, sb.id, false, NULL, &usage), STORE_CONFLICT);
    db_text(f, text, sizeof text, "SELECT state || ':' || termination_reason FROM sandboxes");
    assert_string_equal(text, "terminated:keep-alive expired");
    assert_int_equal(db_int(f, "SELECT cpu_usec FROM sessions"), 1500);
    assert_int_equal(db_int(f, "SELECT mem_peak_bytes FROM sessions"), 4096);
    for (const char *kind = "sandbox.booting sandbox.warm sandbox.claimed sandbox.running "
                            "sandbox.stopping sandbox.terminated session.activating "
                            "session.active session.idle message.delivering message.completed";
         *kind;) {
        char one[40];
        size_t len = strcspn(kind, " ");
        snprintf(one, sizeof one, "%.*s", (int)len, kind);
        if (db_int(f, "SELECT COUNT(*) FROM events WHERE kind = '%s'", one) != 1)
            fail_msg("expected exactly one %s event", one);
        kind += len + (kind[len] == ' ');
    }
    struct store_sandbox *live = NULL;
    size_t n = 9;
    assert_int_equal(store_sandbox_list_live(f->st, "wrk_a", &live, &n), STORE_OK);
    assert_int_equal(n, 0);
    free(live);
}

static void test_cold_assign_and_stop_requests(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    struct store_sandbox sb, *list = NULL;
    size_t n = 0;
    add_session(f, "ses_1");
    add_message(f, "ses_1", 1, 3);
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    store_delivery_clear(&d);
    assert_int_equal(store_sandbox_insert(f->st, &ctx, "wrk_a", &shape, true, &sb), STORE_OK);
    assert_int_equal(store_sandbox_assign(f->st, &ctx, sb.id, "app_a", "ses_1"), STORE_OK);
    assert_int_equal(db_int(f, "SELECT cold FROM sandboxes"), 1);
    assert_int_equal(
        db_int(f, "SELECT CASE WHEN sandbox_id = '%s' THEN 1 ELSE 0 END FROM sessions", sb.id), 1);
    assert_int_equal(store_sandbox_list_stop_requested(f->st, "wrk_a", &list, &n), STORE_OK);
    assert_int_equal(n, 0);
    free(list);
    /* DELETE /v1/sessions marks the Session deleted: its worker must see the Sandbox to stop. */
    db_exec(f, "UPDATE sessions SET state = 'deleted', stop_requested_at = 1");
    assert_int_equal(store_sandbox_list_stop_requested(f->st, "wrk_a", &list, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(list[0].id, sb.id);
    free(list);
    assert_int_equal(store_sandbox_list_stop_requested(f->st, "wrk_b", &list, &n), STORE_OK);
    assert_int_equal(n, 0);
    free(list);
}

/* The workers that have not stopped and whose heartbeat is older than stale_ms, oldest first:
 * how a worker tells a dead peer on another machine (reconcile.c, from worker_list_active). */
static enum store_status list_dead(struct store_fixture *f, int64_t stale_ms,
                                   char (**ids)[STORE_ID_LEN], size_t *n)
{
    struct store_worker *workers = NULL;
    size_t count = 0, dead = 0;
    enum store_status rc = store_worker_list_active(f->st, &workers, &count);
    if (rc != STORE_OK)
        return rc;
    *ids = calloc(count ? count : 1, STORE_ID_LEN);
    assert_non_null(*ids);
    for (size_t i = 0; i < count; i++)
        if (workers[i].heartbeat_at < clock_wall_ms() - stale_ms)
            snprintf((*ids)[dead++], STORE_ID_LEN, "%s", workers[i].id);
    free(workers);
    *n = dead;
    return STORE_OK;
}

static void test_adopt_requeues_and_frees_a_dead_workers_work(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    struct store_sandbox sb, *live = NULL;
    struct store_worker *workers = NULL;
    size_t n = 0;
    char(*dead)[STORE_ID_LEN] = NULL;
    add_session(f, "ses_1");
    add_message(f, "ses_1", 1, 3);
    assert_int_equal(store_worker_register(f->st, "wrk_dead", "host", 1), STORE_OK);
    assert_int_equal(store_worker_register(f->st, "wrk_new", "host", 2), STORE_OK);
    assert_int_equal(store_queue_claim_placed(f->st, &ctx, "wrk_dead", 30000, NULL, &d), STORE_OK);
    store_delivery_clear(&d);
    assert_int_equal(store_sandbox_insert(f->st, &ctx, "wrk_dead", &shape, true, &sb), STORE_OK);
    assert_int_equal(store_sandbox_assign(f->st, &ctx, sb.id, "app_a", "ses_1"), STORE_OK);

    db_exec(f, "UPDATE workers SET heartbeat_at = 1 WHERE id = 'wrk_dead'");
    assert_int_equal(list_dead(f, 10000, &dead, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(dead[0], "wrk_dead");
    free(dead);

    assert_int_equal(store_worker_adopt(f->st, &ctx, "wrk_dead", "wrk_new"), STORE_OK);
    assert_int_equal(store_worker_adopt(f->st, &ctx, "wrk_dead", "wrk_other"), STORE_NOT_FOUND);
    /* Fenced: if it was only slow, its next heartbeat tells it to go. */
    assert_int_equal(store_worker_heartbeat(f->st, "wrk_dead"), STORE_CONFLICT);
    assert_int_equal(store_worker_heartbeat(f->st, "wrk_new"), STORE_OK);
    assert_int_equal(db_int(f, "SELECT CASE WHEN state = 'queued' THEN 1 ELSE 0 END FROM messages"),
                     1);
    assert_int_equal(
        db_int(f, "SELECT CASE WHEN state = 'idle' AND worker_id IS NULL THEN 1 ELSE 0 END "
                  "FROM sessions"),
        1);
    assert_int_equal(store_sandbox_list_live(f->st, "wrk_new", &live, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(live[0].id, sb.id);
    free(live);
    assert_int_equal(store_worker_list_active(f->st, &workers, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(workers[0].id, "wrk_new");
    free(workers);
    /* The message is deliverable again, by anyone. */
    assert_int_equal(claim(f, "wrk_new", &d), STORE_OK);
    store_delivery_clear(&d);
}

/* A worker that shuts down says so: it is neither active nor taken for dead, and its heartbeat
 * tells it (or a twin with its id) to exit. */
static void test_worker_stop_leaves_the_active_and_dead_lists(void **state)
{
    struct store_fixture *f = *state;
    struct store_worker *workers = NULL;
    char(*dead)[STORE_ID_LEN] = NULL;
    size_t n = 9;
    assert_int_equal(store_worker_register(f->st, "wrk_a", "host", 1), STORE_OK);
    assert_int_equal(store_worker_register(f->st, "wrk_b", "host", 2), STORE_OK);
    assert_int_equal(store_worker_stop(f->st, &ctx, "wrk_a", NULL), STORE_OK);
    assert_int_equal(
        db_int(f,
               "SELECT CASE WHEN stopped_at > 0 THEN 1 ELSE 0 END FROM workers WHERE id = 'wrk_a'"),
        1);
    assert_int_equal(store_worker_heartbeat(f->st, "wrk_a"), STORE_CONFLICT);
    assert_int_equal(store_worker_heartbeat(f->st, "wrk_b"), STORE_OK);
    assert_int_equal(store_worker_list_active(f->st, &workers, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(workers[0].id, "wrk_b");
    free(workers);
    db_exec(f, "UPDATE workers SET heartbeat_at = 1");
    assert_int_equal(list_dead(f, 10000, &dead, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(dead[0], "wrk_b");
    free(dead);
}

/* A worker stopped while it was booting a cold Sandbox for a Session: the shutdown ended the
 * Sandbox before it was the Session's and released the message, which leaves the Session
 * activating and owned by the worker. The stop hands the Session back, and another worker
 * delivers the message; a lease the worker kept is requeued with its attempt counted. */
static void test_worker_stop_hands_back_what_it_still_owns(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    size_t requeued = 9;
    char text[128];
    assert_int_equal(store_worker_register(f->st, "wrk_a", "host", 1), STORE_OK);
    assert_int_equal(store_worker_register(f->st, "wrk_b", "host", 2), STORE_OK);
    add_session(f, "ses_1");
    add_message(f, "ses_1", 1, 3);
    add_session(f, "ses_2");
    add_message(f, "ses_2", 1, 3);
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_1_1");
    store_delivery_clear(&d);
    assert_int_equal(claim(f, "wrk_a", &d), STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_2_1");
    store_delivery_clear(&d);
    assert_int_equal(store_queue_release(f->st, &ctx, "msg_ses_1_1", "wrk_a"), STORE_OK);
    /* Queued, but its Session is still wrk_a's: wrk_b cannot have it. */
    assert_int_equal(claim(f, "wrk_b", &d), STORE_EMPTY);

    assert_int_equal(store_worker_stop(f->st, &ctx, "wrk_a", &requeued), STORE_OK);
    assert_int_equal(requeued, 1); /* msg_ses_2_1's lease, never given back */
    for (int i = 1; i <= 2; i++) {
        db_text(f, text, sizeof text,
                "SELECT state || ':' || COALESCE(worker_id, '-') FROM sessions WHERE id = 'ses_%d'",
                i);
        assert_string_equal(text, "idle:-");
    }
    assert_int_equal(db_int(f, "SELECT attempts FROM messages WHERE id = 'msg_ses_1_1'"), 0);
    assert_int_equal(db_int(f, "SELECT attempts FROM messages WHERE id = 'msg_ses_2_1'"), 1);
    assert_int_equal(claim(f, "wrk_b", &d), STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_1_1");
    store_delivery_clear(&d);
    assert_int_equal(claim(f, "wrk_b", &d), STORE_OK);
    assert_string_equal(d.message.id, "msg_ses_2_1");
    store_delivery_clear(&d);
    /* A second stop, or one after a peer took it for dead, changes nothing. */
    assert_int_equal(store_worker_stop(f->st, &ctx, "wrk_a", &requeued), STORE_OK);
    assert_int_equal(requeued, 0);
}

/* ---- concurrency ---- */

#define CONC_THREADS 4
#define CONC_SESSIONS 20
#define CONC_PER_SESSION 10

struct claimer {
    struct store_fixture *f;
    char worker_id[STORE_ID_LEN];
    int completed;
    int errors;
};

/* One worker's claim loop: claim, give the Session a Sandbox when it is new, complete, and
 * sometimes let the Session go (as keep-alive expiry would) so Sessions move between workers. */
static void *claim_loop(void *arg)
{
    struct claimer *c = arg;
    struct store *st = c->f->st;
    int idle_rounds = 0;
    while (idle_rounds < 200) {
        struct store_delivery d;
        enum store_status rc = store_queue_claim_placed(st, &ctx, c->worker_id, 30000, NULL, &d);
        if (rc == STORE_EMPTY) {
            idle_rounds++;
            usleep(1000);
            continue;
        }
        if (rc != STORE_OK) {
            c->errors++;
            continue;
        }
        idle_rounds = 0;
        char sandbox_id[STORE_ID_LEN] = "";
        if (!d.session.sandbox_id[0]) {
            struct store_sandbox sb;
            if (store_sandbox_insert(st, &ctx, c->worker_id, &shape, true, &sb) != STORE_OK ||
                store_sandbox_assign(st, &ctx, sb.id, d.app.id, d.session.id) != STORE_OK ||
                store_sandbox_mark_running(st, &ctx, sb.id, d.session.id) != STORE_OK)
                c->errors++;
            strcpy(sandbox_id, sb.id);
        } else {
            strcpy(sandbox_id, d.session.sandbox_id);
        }
        char reply[64];
        snprintf(reply, sizeof reply, "\"%s\"", c->worker_id);
        if (store_queue_complete(st, &ctx, d.message.id, c->worker_id, sandbox_id, reply) ==
            STORE_OK)
            c->completed++;
        else
            c->errors++;
        if (d.message.seq % 3 == 0) {
            struct store_usage u = {1, -1};
            if (store_sandbox_mark_stopping(st, &ctx, sandbox_id, "expired") != STORE_OK ||
                store_sandbox_finish(st, &ctx, sandbox_id, false, NULL, &u) != STORE_OK)
                c->errors++;
        }
        store_delivery_clear(&d);
    }
    return NULL;
}

static void test_concurrent_claim_loops_never_double_claim(void **state)
{
    struct store_fixture *f = *state;
    struct claimer c[CONC_THREADS];
    pthread_t t[CONC_THREADS];
    int total = 0;

    db_exec(f, "BEGIN");
    for (int s = 0; s < CONC_SESSIONS; s++) {
        char id[32];
        snprintf(id, sizeof id, "ses_%d", s);
        add_session(f, id);
        for (int m = 1; m <= CONC_PER_SESSION; m++)
            add_message(f, id, m, 3);
    }
    db_exec(f, "COMMIT");
    for (int i = 0; i < CONC_THREADS; i++) {
        memset(&c[i], 0, sizeof c[i]);
        c[i].f = f;
        snprintf(c[i].worker_id, sizeof c[i].worker_id, "wrk_%d", i);
        assert_int_equal(pthread_create(&t[i], NULL, claim_loop, &c[i]), 0);
    }
    for (int i = 0; i < CONC_THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(c[i].errors, 0);
        total += c[i].completed;
    }
    assert_int_equal(total, CONC_SESSIONS * CONC_PER_SESSION);
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM messages WHERE state = 'completed'"),
                     CONC_SESSIONS * CONC_PER_SESSION);
    /* Each message was claimed once and completed once. */
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM events WHERE kind = 'message.delivering'"),
                     CONC_SESSIONS * CONC_PER_SESSION);
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM events WHERE kind = 'message.completed'"),
                     CONC_SESSIONS * CONC_PER_SESSION);
    /* In each Session, completion order is seq order. */
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM messages a JOIN messages b ON "
                               "a.session_id = b.session_id AND a.seq < b.seq "
                               "WHERE a.completed_at > b.completed_at"),
                     0);
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM events e1 JOIN events e2 ON "
                               "e1.session_id = e2.session_id AND e1.kind = 'message.completed' "
                               "AND e2.kind = 'message.completed' AND e1.id < e2.id "
                               "JOIN messages m1 ON m1.id = e1.object_id "
                               "JOIN messages m2 ON m2.id = e2.object_id WHERE m1.seq > m2.seq"),
                     0);
    /* Each Sandbox served one Session only. */
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM (SELECT sandbox_id FROM messages GROUP BY "
                               "sandbox_id HAVING COUNT(DISTINCT session_id) > 1) AS shared"),
                     0);
}

struct warm_claimer {
    struct store_fixture *f;
    int index;
    int claimed;
    char ids[64][STORE_ID_LEN];
};

static void *warm_claim_loop(void *arg)
{
    struct warm_claimer *c = arg;
    for (int i = 0;; i++) {
        struct store_sandbox sb;
        char session[32];
        snprintf(session, sizeof session, "ses_w%d_%d", c->index, i);
        enum store_status rc =
            store_sandbox_claim_warm(c->f->st, &ctx, "wrk_a", &shape, "app_a", 0, session, &sb);
        if (rc == STORE_EMPTY)
            break;
        /* The Session is not owned by wrk_a, so the claim is refused and rolled back. */
        if (rc == STORE_CONFLICT)
            continue;
        if (rc != STORE_OK || c->claimed >= 64)
            break;
        strcpy(c->ids[c->claimed++], sb.id);
    }
    return NULL;
}

static void test_concurrent_warm_claims_never_share_a_sandbox(void **state)
{
    struct store_fixture *f = *state;
    struct warm_claimer c[CONC_THREADS];
    pthread_t t[CONC_THREADS];
    const int warm = 40;
    int total = 0;

    for (int i = 0; i < warm; i++) {
        struct store_sandbox sb;
        assert_int_equal(store_sandbox_insert(f->st, &ctx, "wrk_a", &shape, false, &sb), STORE_OK);
        assert_int_equal(store_sandbox_mark_warm(f->st, &ctx, sb.id, 1), STORE_OK);
    }
    db_exec(f, "BEGIN");
    for (int i = 0; i < CONC_THREADS; i++)
        for (int k = 0; k < 64; k++)
            db_exec(f,
                    "INSERT INTO sessions (id, app_id, worker_id, state, created_at, updated_at) "
                    "VALUES ('ses_w%d_%d', 'app_a', 'wrk_a', 'activating', 1, 1)",
                    i, k);
    db_exec(f, "COMMIT");
    for (int i = 0; i < CONC_THREADS; i++) {
        memset(&c[i], 0, sizeof c[i]);
        c[i].f = f;
        c[i].index = i;
        assert_int_equal(pthread_create(&t[i], NULL, warm_claim_loop, &c[i]), 0);
    }
    for (int i = 0; i < CONC_THREADS; i++) {
        pthread_join(t[i], NULL);
        total += c[i].claimed;
    }
    assert_int_equal(total, warm);
    for (int i = 0; i < CONC_THREADS; i++)
        for (int a = 0; a < c[i].claimed; a++)
            for (int j = 0; j < CONC_THREADS; j++)
                for (int b = 0; b < c[j].claimed; b++)
                    if ((i != j || a != b) && strcmp(c[i].ids[a], c[j].ids[b]) == 0)
                        fail_msg("Sandbox %s claimed twice", c[i].ids[a]);
    assert_int_equal(db_int(f, "SELECT COUNT(*) FROM sandboxes WHERE state = 'claimed'"), warm);
}

static void test_app_shapes_lists_distinct_live_shapes(void **state)
{
    struct store_fixture *f = *state;
    struct store_shape *shapes = NULL;
    size_t n = 0;
    db_exec(f, "INSERT INTO apps (id, name, command, created_at, updated_at) VALUES "
               "('app_b', 'b', '[]', 1, 1)");
    db_exec(f, "INSERT INTO apps (id, name, command, mem_size_mib, created_at, updated_at) VALUES "
               "('app_c', 'c', '[]', 512, 1, 1)");
    db_exec(f, "INSERT INTO apps (id, name, command, mem_size_mib, created_at, updated_at, "
               "deleted_at) VALUES ('app_d', 'd', '[]', 1024, 1, 1, 5)");
    assert_int_equal(store_app_shapes(f->st, &shapes, &n), STORE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(shapes[0].mem_size_mib, 256);
    assert_int_equal(shapes[1].mem_size_mib, 512);
    assert_string_equal(shapes[0].driver, "process");
    free(shapes);
}

/* ---- fair claims and the live-Sandbox quota ---- */

static void add_app(struct store_fixture *f, const char *id, const char *quota)
{
    db_exec(f,
            "INSERT INTO apps (id, name, command, max_attempts, keep_alive_seconds, "
            "quota_live_sandboxes, created_at, updated_at) VALUES ('%s', '%s', '[\"/bin/echo\"]', "
            "3, 5, %s, 1, 1)",
            id, id, quota);
}

/* A Session of app with its first message, created at `at` (the queue's order). */
static void add_waiting(struct store_fixture *f, const char *app, const char *session, int at)
{
    db_exec(f,
            "INSERT INTO sessions (id, app_id, created_at, updated_at) VALUES ('%s', '%s', 1, 1)",
            session, app);
    db_exec(f,
            "INSERT INTO messages (id, session_id, app_id, seq, body, max_attempts, created_at, "
            "updated_at) VALUES ('msg_%s_1', '%s', '%s', 1, '{}', 3, %d, %d)",
            session, session, app, at, at);
}

static void claim_expect(struct store_fixture *f, const struct store_placement *p,
                         const char *session)
{
    struct store_delivery d;
    assert_int_equal(store_queue_claim_placed(f->st, &ctx, "wrk_a", 30000, p, &d), STORE_OK);
    assert_string_equal(d.session.id, session);
    store_delivery_clear(&d);
}

/* A hostile App's backlog came first; another App's one message still gets the next Sandbox,
 * and from then on the two take turns while both wait: the App with the fewest live Sandboxes is
 * served first. */
static void test_fair_claims_serve_the_app_with_fewest_live_sandboxes(void **state)
{
    struct store_fixture *f = *state;
    add_app(f, "app_b", "NULL");
    for (int i = 0; i < 4; i++) {
        char sid[32];
        snprintf(sid, sizeof sid, "ses_a%d", i);
        add_waiting(f, "app_a", sid, 10 + i);
    }
    add_waiting(f, "app_b", "ses_b0", 100);
    add_waiting(f, "app_b", "ses_b1", 101);
    claim_expect(f, NULL, "ses_a0"); /* both Apps hold none: by id */
    claim_expect(f, NULL, "ses_b0"); /* app_a holds 1, app_b none */
    claim_expect(f, NULL, "ses_a1"); /* 1 each */
    claim_expect(f, NULL, "ses_b1");
    claim_expect(f, NULL, "ses_a2"); /* app_b has nothing left: app_a's backlog goes on */
    claim_expect(f, NULL, "ses_a3");
    /* A Session that holds a Sandbox is served whatever its App holds. */
    db_exec(f, "UPDATE messages SET state = 'completed' WHERE id = 'msg_ses_a0_1'");
    add_message(f, "ses_a0", 2, 3);
    claim_expect(f, NULL, "ses_a0");
}

/* An App at its live-Sandbox quota: its idle Sessions' messages wait (queued, no attempt
 * counted) while another App's are claimed; its Sessions that hold a Sandbox are still served;
 * the host default applies to an App without a quota of its own, and 0 is no bound. Which App
 * waits for a Sandbox (what eviction asks): one below its quota, and only while no live host has
 * room for it. */
static void test_quota_holds_idle_sessions_messages(void **state)
{
    struct store_fixture *f = *state;
    struct store_delivery d;
    struct store_waiting_app wa;
    const struct store_placement one = {0, 60000, 1}; /* no placement to speak of; default 1 */
    add_app(f, "app_b", "NULL");
    add_app(f, "app_c", "0");
    db_exec(f, "UPDATE apps SET quota_live_sandboxes = 2 WHERE id = 'app_a'");
    add_waiting(f, "app_a", "ses_a0", 10);
    add_waiting(f, "app_a", "ses_a1", 11);
    add_waiting(f, "app_a", "ses_a2", 12);
    claim_expect(f, &one, "ses_a0");
    claim_expect(f, &one, "ses_a1");
    /* app_a holds its 2: nothing else of it is claimable, and its message stays as it was. */
    assert_int_equal(store_queue_claim_placed(f->st, &ctx, "wrk_a", 30000, &one, &d), STORE_EMPTY);
    assert_int_equal(store_queue_waiting_app(f->st, "wrk_a", &one, &wa), STORE_EMPTY);
    assert_int_equal(db_int(f, "SELECT attempts FROM messages WHERE id = 'msg_ses_a2_1'"), 0);
    /* Another App proceeds: app_b by the default (1), app_c without a bound. */
    add_waiting(f, "app_b", "ses_b0", 20);
    add_waiting(f, "app_b", "ses_b1", 21);
    add_waiting(f, "app_c", "ses_c0", 30);
    add_waiting(f, "app_c", "ses_c1", 31);
    assert_int_equal(store_queue_waiting_app(f->st, "wrk_a", &one, &wa), STORE_OK);
    assert_string_equal(wa.app_id, "app_b");
    assert_int_equal(wa.live, 0);
    assert_int_equal(wa.quota, 1);
    /* Not waiting for an eviction while a live host has room: its worker claims the message. */
    db_exec(f,
            "INSERT INTO hosts (id, capacity, registered_at, heartbeat_at) VALUES "
            "('host_b', 10, 1, %lld)",
            (long long)clock_wall_ms());
    db_exec(f, "INSERT INTO workers (id, host, pid, started_at, heartbeat_at, host_id) VALUES "
               "('wrk_b', 'b', 1, 1, 1, 'host_b')");
    assert_int_equal(store_queue_waiting_app(f->st, "wrk_a", &one, &wa), STORE_EMPTY);
    db_exec(f, "UPDATE hosts SET capacity = 0 WHERE id = 'host_b'");
    assert_int_equal(store_queue_waiting_app(f->st, "wrk_a", &one, &wa), STORE_OK);
    assert_string_equal(wa.app_id, "app_b");
    claim_expect(f, &one, "ses_b0");
    claim_expect(f, &one, "ses_c0");
    claim_expect(f, &one, "ses_c1");
    assert_int_equal(store_queue_claim_placed(f->st, &ctx, "wrk_a", 30000, &one, &d), STORE_EMPTY);
    /* Without the default (no placement), app_b has no bound. */
    claim_expect(f, NULL, "ses_b1");
    /* A Session of app_a that holds a Sandbox gets its next message. */
    db_exec(f, "UPDATE messages SET state = 'completed' WHERE id = 'msg_ses_a0_1'");
    add_message(f, "ses_a0", 2, 3);
    claim_expect(f, &one, "ses_a0");
    /* Once one of its Sandboxes lets go, the waiting message is claimed, its first attempt. */
    db_exec(f, "UPDATE sessions SET state = 'idle', worker_id = NULL WHERE id = 'ses_a1'");
    assert_int_equal(store_queue_claim_placed(f->st, &ctx, "wrk_a", 30000, &one, &d), STORE_OK);
    assert_string_equal(d.session.id, "ses_a2");
    assert_int_equal(d.message.attempts, 1);
    store_delivery_clear(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_claims_in_seq_order_one_at_a_time, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fair_claims_serve_the_app_with_fewest_live_sandboxes,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_quota_holds_idle_sessions_messages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_session_owned_by_another_worker_is_not_claimable,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_completion_is_exactly_once_and_only_for_the_lease_holder, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_expired_lease_is_requeued_and_old_holder_cannot_complete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_extend_lease_keeps_it_from_expiring, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_attempt_backs_off_then_retries, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_max_attempts_fails_with_reason_and_unblocks_next,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_gives_back_without_counting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sandbox_lifecycle_moves_the_session, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_claim_with_sandbox_takes_the_warm_one_in_the_same_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_complete_first_records_running_with_the_reply, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cold_assign_and_stop_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adopt_requeues_and_frees_a_dead_workers_work, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_worker_stop_leaves_the_active_and_dead_lists, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_worker_stop_hands_back_what_it_still_owns, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_claim_loops_never_double_claim, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_warm_claims_never_share_a_sandbox, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_counts_follow_each_message_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prestarted_sandboxes_serve_their_app_at_its_revision,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_app_shapes_lists_distinct_live_shapes, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
