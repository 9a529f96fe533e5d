/*
 * test_store_checkpoint.c: the SQLite store checkpoints its WAL on a thread of its own
 * (common/store/sql/sqlite_checkpoint.h), and that keeps the WAL file under its stated bound while
 * the committer writes without a pause: ~80 MB of messages through group commits, which would
 * leave a WAL of that size without checkpoints (PASSIVE ones alone never catch up with a writer
 * that never stops, so the bound is the RESTART checkpoint's).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* sqlite_checkpoint.h: SQLCHECKPOINT_RESTART_PAGES, and a page is a WAL frame of 4096 + 24 bytes.
 * What the commits add while the RESTART waits for the writer in progress: a batch or two. */
#define BOUND_PAGES 8000
#define FRAME_BYTES (4096 + 24)
#define SLACK_PAGES 2000

enum { N = 2400, BODY = 32 * 1024 };

static const struct store_ctx ctx = {"admin", "req_test"};

struct results {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done, failed;
};

static void done_cb(void *arg, enum store_status status, struct store_message *m, bool replayed)
{
    struct results *r = arg;
    (void)replayed;
    pthread_mutex_lock(&r->lock);
    if (status == STORE_OK)
        store_message_clear(m);
    else
        r->failed++;
    r->done++;
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

static off_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? sb.st_size : 0;
}

static void test_wal_stays_bounded_under_steady_writes(void **state)
{
    (void)state;
    char dir[] = "/tmp/sbx-test-checkpoint-XXXXXX", path[128], wal[160], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/sbx.db", dir);
    snprintf(wal, sizeof wal, "%s-wal", path);
    struct store *st = store_sqlite_open(path, 5000, "FULL", err, sizeof err);
    assert_non_null(st);

    struct store_app a = {0};
    snprintf(a.name, sizeof a.name, "wal");
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

    /* One JSON string body of BODY bytes, shared by every request. */
    char *body = malloc(BODY + 3);
    assert_non_null(body);
    body[0] = '"';
    memset(body + 1, 'x', BODY);
    body[BODY + 1] = '"';
    body[BODY + 2] = '\0';
    static struct store_enqueue reqs[N];
    static struct results res;
    pthread_mutex_init(&res.lock, NULL);
    pthread_cond_init(&res.cond, NULL);
    for (int i = 0; i < N; i++) {
        reqs[i] = (struct store_enqueue){a.id, s.id, body, NULL, NULL};
        assert_int_equal(store_message_enqueue_async(st, &ctx, &reqs[i], done_cb, &res), STORE_OK);
    }
    off_t most = 0;
    pthread_mutex_lock(&res.lock);
    while (res.done < N) {
        pthread_mutex_unlock(&res.lock);
        off_t now = file_size(wal);
        if (now > most)
            most = now;
        usleep(2000);
        pthread_mutex_lock(&res.lock);
    }
    pthread_mutex_unlock(&res.lock);
    assert_int_equal(res.failed, 0);

    /* What went through the WAL: every body at least once. */
    long long written = (long long)N * BODY;
    fprintf(stderr, "wrote %lld MB of bodies; the WAL file reached %lld MB (bound %lld MB)\n",
            written >> 20, (long long)most >> 20,
            ((long long)(BOUND_PAGES + SLACK_PAGES) * FRAME_BYTES) >> 20);
    assert_true(written > 2LL * BOUND_PAGES * FRAME_BYTES);
    assert_true(most <= (off_t)(BOUND_PAGES + SLACK_PAGES) * FRAME_BYTES);
    /* Nothing lost on the way. */
    struct store_message *items;
    size_t n;
    char next[STORE_CURSOR_LEN];
    assert_int_equal(store_message_list(st, a.id, s.id, "2399", 200, &items, &n, next), STORE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(items[0].seq, N);
    store_message_list_free(items, n);

    store_session_clear(&s);
    store_close(st);
    free(body);
    pthread_mutex_destroy(&res.lock);
    pthread_cond_destroy(&res.cond);
    unlink(wal);
    snprintf(wal, sizeof wal, "%s-shm", path);
    unlink(wal);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wal_stays_bounded_under_steady_writes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
