/*
 * test_webhooks.c: webhooks below the HTTP layer. The Standard Webhooks signature against the
 * specification's own example; secrets; which URLs and addresses the policy refuses; and the
 * store's outbox on a real database (a SQLite file, or PostgreSQL under tests/pg-run.sh): only
 * events after the endpoint's creation and of the kinds it wants, in event order, one worker per
 * endpoint under a lease, retries not before their time, failing after N failed attempts in a
 * row, a lost lease records nothing, a deleted endpoint gets nothing, the delivery list with its
 * attempts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store.h"
#include "clock.h"
#include "store_fixture.h"
#include "webhook_sign.h"
#include "webhook_target.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_signature_matches_the_specification_example(void **state)
{
    (void)state;
    char sig[WEBHOOK_SIGNATURE_LEN];
    const char *body = "{\"test\": 2432232314}";
    assert_int_equal(webhook_sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                                  "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, strlen(body),
                                  sig),
                     0);
    assert_string_equal(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    assert_int_equal(webhook_sign("nope", "id", 1, "x", 1, sig), -1);
    assert_int_equal(webhook_sign("whsec_***", "id", 1, "x", 1, sig), -1);
}

static void test_secrets_are_random_and_usable(void **state)
{
    (void)state;
    char a[WEBHOOK_SECRET_LEN], b[WEBHOOK_SECRET_LEN], sig[WEBHOOK_SIGNATURE_LEN];
    assert_int_equal(webhook_secret_new(a), 0);
    assert_int_equal(webhook_secret_new(b), 0);
    assert_int_equal(strlen(a), 6 + 32);
    assert_memory_equal(a, "whsec_", 6);
    assert_string_not_equal(a, b);
    assert_int_equal(webhook_sign(a, "whd_x", 1, "{}", 2, sig), 0);
}

static void test_url_policy(void **state)
{
    (void)state;
    char why[512];
    static const char *const inside[] = {
        "http://127.0.0.1/",
        "http://127.9.9.9:8080/x",
        "http://localhost/",
        "http://[::1]/",
        "http://10.0.0.1/",
        "http://172.31.255.255/",
        "http://192.168.0.10/",
        "http://169.254.169.254/",
        "http://100.64.0.1/",
        "http://0.0.0.0/",
        "http://[fe80::1]/",
        "http://[fd12:3456::1]/",
        "http://[::ffff:10.0.0.1]/",
        "http://224.0.0.1/",
        "http://255.255.255.255/",
        /* IPv4 behind translators and tunnels: NAT64, local-use NAT64, 6to4, IPv4-compatible,
         * Teredo */
        "http://[64:ff9b::10.0.0.1]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[64:ff9b:1::5]/",
        "http://[2002:c0a8:0001::1]/",
        "http://[2002:7f00:1::1]/",
        "http://[::10.0.0.1]/",
        "http://[::127.0.0.1]/",
        "http://[2001:0:4136:e378::1]/",
    };
    static const char *const malformed[] = {
        "",
        "ftp://203.0.113.5/",
        "203.0.113.5/hook",
        "http://",
        "http:///path",
        "http://a b/",
        "http://user:pw@203.0.113.5/",
        "http://203.0.113.5:/",
        "http://203.0.113.5:65536/",
        "http://203.0.113.5:12a/",
        "http://[::1/",
    };
    for (size_t i = 0; i < sizeof inside / sizeof inside[0]; i++) {
        assert_int_equal(webhook_url_check(inside[i], false, why, sizeof why), -1);
        assert_non_null(strstr(why, "webhook_allow_private"));
        assert_int_equal(webhook_url_check(inside[i], true, why, sizeof why), 0);
    }
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++)
        assert_int_equal(webhook_url_check(malformed[i], true, why, sizeof why), -1);
    assert_int_equal(webhook_url_check("https://203.0.113.5/hook?x=1", false, why, sizeof why), 0);
    assert_int_equal(webhook_url_check("HTTP://198.51.100.7:8443", false, why, sizeof why), 0);
    assert_int_equal(webhook_url_check("http://[2001:db8::5]:80/", false, why, sizeof why), 0);
    /* A public IPv4 address behind NAT64 or 6to4 is as good as itself. */
    assert_int_equal(webhook_url_check("http://[64:ff9b::5db8:d822]/", false, why, sizeof why), 0);
    assert_int_equal(webhook_url_check("http://[2002:5db8:d822::1]/", false, why, sizeof why), 0);

    struct sockaddr_in v4 = {.sin_family = AF_INET};
    inet_pton(AF_INET, "169.254.169.254", &v4.sin_addr);
    assert_false(webhook_address_allowed((struct sockaddr *)&v4, false));
    assert_true(webhook_address_allowed((struct sockaddr *)&v4, true));
    inet_pton(AF_INET, "93.184.216.34", &v4.sin_addr);
    assert_true(webhook_address_allowed((struct sockaddr *)&v4, false));
}

/* ---- the store's outbox ---- */

static const struct store_ctx admin = {"admin", NULL};

static int setup(void **state)
{
    struct store_fixture *f = store_fixture_open("webhooks", 10000, "NORMAL");
    db_exec(f, "INSERT INTO apps (id, name, command, created_at, updated_at) VALUES "
               "('app_a', 'a', '[\"sh\"]', 1, 1), ('app_b', 'b', '[\"sh\"]', 1, 1)");
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    store_fixture_close(*state);
    return 0;
}

static void event(struct store_fixture *f, const char *app, const char *kind)
{
    db_exec(f,
            "INSERT INTO events (at, actor, kind, object_type, object_id, app_id) VALUES "
            "(%lld, 'test', '%s', 'session', 'ses_x', '%s')",
            (long long)clock_wall_ms(), kind, app);
}

static void fill(struct store_fixture *f, size_t want)
{
    size_t added = 99;
    assert_int_equal(store_webhook_fill(f->st, 100, &added), STORE_OK);
    assert_int_equal(added, want);
}

static void test_outbox_order_lease_retry_failing(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_webhook w;
    struct store_webhook_job job, other;

    event(f, "app_a", "session.created"); /* before the endpoint: never sent */
    assert_int_equal(store_webhook_create(st, &admin, "app_a", "http://203.0.113.5/h",
                                          "[\"session.*\",\"message.completed\"]",
                                          "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &w),
                     STORE_OK);
    assert_string_equal(w.secret, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    assert_string_equal(w.state, "active");
    char hook[STORE_ID_LEN];
    snprintf(hook, sizeof hook, "%s", w.id);
    store_webhook_clear(&w);
    assert_int_equal(store_webhook_create(st, &admin, "app_nope", "http://203.0.113.5/h", "[\"*\"]",
                                          "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &w),
                     STORE_NOT_FOUND);

    fill(f, 0); /* its own webhook.created is before its cursor */
    event(f, "app_a", "session.idle");
    event(f, "app_a", "message.queued");  /* not wanted */
    event(f, "app_b", "session.created"); /* another App's */
    event(f, "app_a", "message.completed");
    fill(f, 2);
    fill(f, 0); /* the cursor moved: nothing twice */

    int64_t due = 0;
    assert_int_equal(store_webhook_next_due(st, &due), STORE_OK);
    assert_true(due > 0 && due <= clock_wall_ms());
    assert_int_equal(store_webhook_claim(st, "wrk_1", 60000, &job), STORE_OK);
    assert_string_equal(job.hook.id, hook);
    assert_string_equal(job.event.kind, "session.idle"); /* event order */
    assert_int_equal(job.attempt, 1);
    assert_string_equal(job.hook.secret, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    /* The endpoint is leased: nobody else gets its next delivery meanwhile. */
    assert_int_equal(store_webhook_claim(st, "wrk_2", 60000, &other), STORE_EMPTY);

    /* Two failures; not claimable before its retry time; failing after 2 here. */
    struct store_webhook_result res = {job.hook.id, job.delivery_id,         1, 500, "HTTP 500", 12,
                                       false,       clock_wall_ms() + 60000, 2};
    assert_int_equal(store_webhook_record(st, "wrk_2", &res), STORE_CONFLICT); /* not its lease */
    assert_int_equal(store_webhook_record(st, "wrk_1", &res), STORE_OK);
    assert_int_equal(store_webhook_claim(st, "wrk_2", 60000, &other), STORE_EMPTY);
    assert_int_equal(store_webhook_get(st, "app_a", hook, &w), STORE_OK);
    assert_string_equal(w.state, "active");
    assert_int_equal(w.consecutive_failures, 1);
    assert_string_equal(w.secret, ""); /* only create and claim read it */
    store_webhook_clear(&w);
    db_exec(f, "UPDATE webhook_deliveries SET next_attempt_at = 0 WHERE id = '%s'",
            job.delivery_id);
    char first[STORE_ID_LEN];
    snprintf(first, sizeof first, "%s", job.delivery_id);
    store_webhook_job_clear(&job);
    assert_int_equal(store_webhook_claim(st, "wrk_2", 60000, &job), STORE_OK);
    assert_string_equal(job.delivery_id, first); /* the same delivery: the same webhook-id */
    assert_int_equal(job.attempt, 2);
    res = (struct store_webhook_result){job.hook.id, job.delivery_id,     2, 0, "timeout", 1500,
                                        false,       clock_wall_ms() - 1, 2};
    assert_int_equal(store_webhook_record(st, "wrk_2", &res), STORE_OK);
    assert_int_equal(store_webhook_get(st, "app_a", hook, &w), STORE_OK);
    assert_string_equal(w.state, "failing");
    assert_int_equal(w.consecutive_failures, 2);
    store_webhook_clear(&w);
    store_webhook_job_clear(&job);

    /* A success: delivered, the endpoint active again, the next event's turn. */
    assert_int_equal(store_webhook_claim(st, "wrk_1", 60000, &job), STORE_OK);
    assert_int_equal(job.attempt, 3);
    res = (struct store_webhook_result){job.hook.id, job.delivery_id, 3, 204, NULL, 5, true, 0, 2};
    assert_int_equal(store_webhook_record(st, "wrk_1", &res), STORE_OK);
    store_webhook_job_clear(&job);
    assert_int_equal(store_webhook_get(st, "app_a", hook, &w), STORE_OK);
    assert_string_equal(w.state, "active");
    assert_int_equal(w.consecutive_failures, 0);
    store_webhook_clear(&w);
    assert_int_equal(store_webhook_claim(st, "wrk_1", 60000, &job), STORE_OK);
    assert_string_equal(job.event.kind, "message.completed");
    /* Given up (retry_at 0): failed, and the outbox is empty. */
    res = (struct store_webhook_result){job.hook.id, job.delivery_id, 1, 410, "HTTP 410",
                                        3,           false,           0, 2};
    assert_int_equal(store_webhook_record(st, "wrk_1", &res), STORE_OK);
    store_webhook_job_clear(&job);
    assert_int_equal(store_webhook_claim(st, "wrk_1", 60000, &job), STORE_EMPTY);

    /* The delivery list: oldest event first, each with its attempts; the cursor pages. */
    struct store_webhook_delivery *d = NULL;
    size_t n = 0;
    char next[STORE_CURSOR_LEN];
    assert_int_equal(store_webhook_delivery_list(st, "app_a", hook, 0, 1, &d, &n, next), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].id, first);
    assert_string_equal(d[0].kind, "session.idle");
    assert_string_equal(d[0].state, "delivered");
    assert_int_equal(d[0].n_log, 3);
    assert_int_equal(d[0].log[0].status, 500);
    assert_string_equal(d[0].log[1].error, "timeout");
    assert_int_equal(d[0].log[1].status, 0);
    assert_int_equal(d[0].log[2].status, 204);
    assert_true(next[0] != '\0');
    int64_t after = strtoll(next, NULL, 10);
    store_webhook_delivery_list_free(d, n);
    assert_int_equal(store_webhook_delivery_list(st, "app_a", hook, after, 10, &d, &n, next),
                     STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(d[0].state, "failed");
    assert_int_equal(d[0].last_status, 410);
    assert_string_equal(next, "");
    store_webhook_delivery_list_free(d, n);
    assert_int_equal(store_webhook_delivery_list(st, "app_b", hook, 0, 10, &d, &n, next),
                     STORE_NOT_FOUND);

    /* Deleted: new events are not queued, nothing is claimed. */
    assert_int_equal(store_webhook_delete(st, &admin, "app_a", hook), STORE_OK);
    assert_int_equal(store_webhook_delete(st, &admin, "app_a", hook), STORE_NOT_FOUND);
    event(f, "app_a", "session.deleted");
    fill(f, 0);
    assert_int_equal(store_webhook_claim(st, "wrk_1", 60000, &job), STORE_EMPTY);
    struct store_webhook *list = NULL;
    assert_int_equal(store_webhook_list(st, "app_a", &list, &n), STORE_OK);
    assert_int_equal(n, 0);
    store_webhook_list_free(list, n);
}

static void test_expired_lease_is_claimed_again_with_the_same_id(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_webhook w;
    struct store_webhook_job job, again;
    assert_int_equal(store_webhook_create(st, &admin, "app_a", "http://203.0.113.5/h", "[\"*\"]",
                                          "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &w),
                     STORE_OK);
    store_webhook_clear(&w);
    event(f, "app_a", "sandbox.running");
    fill(f, 1);
    /* A worker claims and dies mid-POST: its lease runs out (1 ms here). */
    assert_int_equal(store_webhook_claim(st, "wrk_dead", 1, &job), STORE_OK);
    db_exec(f, "UPDATE webhooks SET lease_expires_at = 0");
    assert_int_equal(store_webhook_claim(st, "wrk_new", 60000, &again), STORE_OK);
    assert_string_equal(again.delivery_id, job.delivery_id);
    assert_int_equal(again.attempt, 1); /* the cut attempt was never recorded */
    struct store_webhook_result late = {job.hook.id, job.delivery_id, 1, 200, NULL, 9, true, 0, 5};
    assert_int_equal(store_webhook_record(st, "wrk_dead", &late), STORE_CONFLICT);
    store_webhook_job_clear(&job);
    store_webhook_job_clear(&again);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signature_matches_the_specification_example),
        cmocka_unit_test(test_secrets_are_random_and_usable),
        cmocka_unit_test(test_url_policy),
        cmocka_unit_test_setup_teardown(test_outbox_order_lease_retry_failing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expired_lease_is_claimed_again_with_the_same_id, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
