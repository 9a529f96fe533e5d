/*
 * test_claim_overlap.c: the claim that overlaps the enqueue's fsync (commit_watermark.h, SQLite).
 * The committer wakes the workers once a batch is visible and before it is synced: at that moment
 * a worker's connection sees the message while the watermark says its batch is not on disk; the
 * 202 (the request's done()) comes only after the watermark reached the batch; and a worker that
 * waits is woken ("durable") once it did.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "commit_watermark.h"
#include "store.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const struct store_ctx ctx = {"admin", "req_test"};

struct probe {
    struct store *reader; /* a worker's connection */
    struct commit_watermark *wm;
    const char *app_id, *session_id;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int visible_calls, durable_calls, done;
    size_t seen_at_visible;   /* messages the worker's connection saw when woken */
    bool reached_at_visible;  /* whether the watermark said "on disk" then */
    uint64_t gen_at_visible;  /* what a worker would read after its claim */
    bool reached_at_done;     /* whether that batch was on disk when the 202 went out */
    enum store_status status; /* the enqueue's */
};

static void on_batch(void *arg, bool durable)
{
    struct probe *p = arg;
    if (durable) {
        p->durable_calls++;
        return;
    }
    p->visible_calls++;
    p->gen_at_visible = commit_watermark_written(p->wm);
    p->reached_at_visible = commit_watermark_reached(p->wm, p->gen_at_visible);
    struct store_message *items;
    size_t n;
    char next[STORE_CURSOR_LEN];
    if (store_message_list(p->reader, p->app_id, p->session_id, NULL, 100, &items, &n, next) ==
        STORE_OK) {
        p->seen_at_visible = n;
        store_message_list_free(items, n);
    }
}

static void on_done(void *arg, enum store_status status, struct store_message *m, bool replayed)
{
    struct probe *p = arg;
    (void)replayed;
    pthread_mutex_lock(&p->lock);
    p->status = status;
    p->reached_at_done = commit_watermark_reached(p->wm, p->gen_at_visible);
    if (status == STORE_OK)
        store_message_clear(m);
    p->done++;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

static void enqueue_and_wait(struct store *st, struct probe *p, struct store_enqueue *q)
{
    int before = p->done;
    assert_int_equal(store_message_enqueue_async(st, &ctx, q, on_done, p), STORE_OK);
    pthread_mutex_lock(&p->lock);
    while (p->done == before)
        pthread_cond_wait(&p->cond, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

static void test_visible_before_durable_and_202_after(void **state)
{
    (void)state;
    char dir[] = "/tmp/sbx-test-overlap-XXXXXX", path[128], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/sbx.db", dir);
    struct store *st = store_sqlite_open(path, 5000, "FULL", err, sizeof err);
    assert_non_null(st);
    struct store_app a = {0};
    snprintf(a.name, sizeof a.name, "overlap");
    a.keep_alive_seconds = 60;
    a.vcpu_count = 1;
    a.mem_size_mib = 256;
    snprintf(a.driver, sizeof a.driver, "process");
    snprintf(a.image, sizeof a.image, "default");
    a.max_attempts = 3;
    a.command_json = "[\"/bin/true\"]";
    assert_int_equal(store_app_create(st, &ctx, &a), STORE_OK);
    struct store_session s;
    bool created;
    assert_int_equal(store_session_create(st, &ctx, a.id, NULL, 0, NULL, NULL, &s, &created),
                     STORE_OK);

    /* A worker started before any overlapping gateway finds no watermark: nothing to wait for. */
    assert_null(commit_watermark_open(dir, false, err, sizeof err));
    assert_string_equal(err, "");

    static struct probe p = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
    assert_int_equal(store_enqueue_overlap(st, path, dir, on_batch, &p, err, sizeof err), 0);
    p.reader = store_sqlite_open(path, 5000, "NORMAL", err, sizeof err);
    assert_non_null(p.reader);
    p.wm = commit_watermark_open(dir, false, err, sizeof err);
    assert_non_null(p.wm);
    p.app_id = a.id;
    p.session_id = s.id;

    struct store_enqueue q = {a.id, s.id, "{\"n\":1}", NULL, NULL};
    enqueue_and_wait(st, &p, &q);
    assert_int_equal(p.status, STORE_OK);
    assert_int_equal(p.visible_calls, 1);
    assert_int_equal(p.seen_at_visible, 1); /* a worker can claim it during the fsync */
    assert_false(p.reached_at_visible);     /* and must not hand it to the agent yet */
    assert_true(p.reached_at_done);         /* on disk before the 202 */
    assert_int_equal(p.durable_calls, 0);   /* no worker waited: no wake-up */

    /* A worker waiting for a batch is woken once it is on disk. */
    commit_watermark_waiting(p.wm, 1);
    enqueue_and_wait(st, &p, &q);
    assert_int_equal(p.seen_at_visible, 2);
    assert_false(p.reached_at_visible);
    assert_true(p.reached_at_done);
    assert_int_equal(p.durable_calls, 1);
    commit_watermark_waiting(p.wm, -1);

    /* A gateway that starts again with the overlap off settles what an earlier one left. */
    assert_int_equal(store_enqueue_settle_watermark(path, dir), 0);
    assert_true(commit_watermark_reached(p.wm, commit_watermark_written(p.wm)));

    store_session_clear(&s);
    commit_watermark_close(p.wm);
    store_close(p.reader);
    store_close(st);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_visible_before_durable_and_202_after),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
