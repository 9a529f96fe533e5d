/*
 * test_store_api.c: the gateway side of the store on a real database (a SQLite file, or a
 * PostgreSQL database when run under tests/pg-run.sh: see store_fixture.h): migrations, Apps and
 * keys, Sessions, enqueue order and idempotency, group commit under concurrent threads, App
 * scoping, session deletion scrubbing, and that every mutation leaves its audit event.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "id.h"
#include "sandbox_context.h"
#include "store.h"
#include "store_fixture.h"
#include "store_secrets.h"
#include "clock.h"

#include <jansson.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A key's hash as the gateway stores it (auth_hash: SHA-256 of the token). */
static void key_hash(const char *token, uint8_t out[SHA256_DIGEST_SIZE])
{
    struct sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, strlen(token), (const uint8_t *)token);
    sha256_digest(&c, SHA256_DIGEST_SIZE, out);
}

static const struct store_ctx admin = {"admin", "req_test"};

static int setup(void **state)
{
    *state = store_fixture_open("store", 5000, "FULL");
    return 0;
}

static int teardown(void **state)
{
    store_fixture_close(*state);
    return 0;
}

static void make_app(struct store *st, const char *name, struct store_app *a)
{
    store_app_defaults(a, name, "process");
    a->command_json = "[\"/usr/bin/sbx-echo-agent\"]";
    assert_int_equal(store_app_create(st, &admin, a), STORE_OK);
    a->command_json = NULL;
}

static void make_session(struct store *st, const char *app_id, struct store_session *s)
{
    bool created = false;
    assert_int_equal(store_session_create(st, &admin, app_id, NULL, 0, NULL, NULL, s, &created),
                     STORE_OK);
    assert_true(created);
}

static void test_migrations_applied(void **state)
{
    struct store_fixture *f = *state;
    assert_int_equal(db_schema_version(f), store_schema_version());
    assert_true(db_has_table(f, "messages"));
    assert_false(db_has_table(f, "no_such_table"));
}

static void test_app_crud_and_events(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a, b, got;
    make_app(st, "alpha", &a);
    assert_memory_equal(a.id, "app_", 4);

    /* Name taken among live Apps. */
    struct store_app dup = a;
    dup.command_json = "[\"x\"]";
    assert_int_equal(store_app_create(st, &admin, &dup), STORE_CONFLICT);

    int64_t ka = 120;
    struct store_app_patch p = {.keep_alive_seconds = &ka, .image = "custom"};
    assert_int_equal(store_app_update(st, &admin, a.id, &p, &got), STORE_OK);
    assert_int_equal(got.keep_alive_seconds, 120);
    assert_string_equal(got.image, "custom");
    assert_string_equal(got.command_json, "[\"/usr/bin/sbx-echo-agent\"]");
    store_app_clear(&got);

    int64_t bad = 0;
    struct store_app_patch pb = {.vcpu_count = &bad};
    assert_int_equal(store_app_update(st, &admin, a.id, &pb, &got), STORE_INVALID);

    make_app(st, "beta", &b);
    struct store_session s;
    make_session(st, b.id, &s);
    store_session_clear(&s);
    assert_int_equal(store_app_delete(st, &admin, b.id), STORE_CONFLICT);

    uint8_t hash[32];
    key_hash("secret-alpha", hash);
    struct store_key k, found;
    assert_int_equal(store_key_create(st, &admin, a.id, "ci", "sbx_abcdef", hash, &k), STORE_OK);
    assert_int_equal(store_key_lookup(st, hash, &found), STORE_OK);
    assert_string_equal(found.id, k.id);
    assert_int_equal(store_app_delete(st, &admin, a.id), STORE_OK);
    /* Deleting the App revoked its keys: the key fails at once. */
    assert_int_equal(store_key_lookup(st, hash, &found), STORE_NOT_FOUND);
    assert_int_equal(store_app_get(st, a.id, &got), STORE_NOT_FOUND);
    /* The name is free again. */
    make_app(st, "alpha", &got);

    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind='app.created'"), 3);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind='app.updated'"), 1);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind='app.deleted'"), 1);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind='key.revoked' "
                               "AND actor='admin' AND request_id='req_test'"),
                     1);
}

/* The store, not its caller, refuses an App env that sets one of the App's secrets or, for an App
 * with secrets, a reserved name: in the update's transaction, so a secret PUT racing the update
 * cannot leave both (the PUT checks the env in its own transaction). */
static void test_app_env_refused_with_secrets(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    static const char *const reserved[] = {"SSL_CERT_FILE", NULL};
    struct store_app a, got;
    make_app(st, "env-secrets", &a);
    char clash[STORE_SECRET_NAME_LEN] = "";
    struct store_app_patch p = {.env_json = "{\"SSL_CERT_FILE\":\"/x\",\"MODEL_KEY\":\"v\"}",
                                .env_reserved = reserved,
                                .env_clash = clash,
                                .env_clash_len = sizeof clash};
    /* No secrets yet: any name goes. */
    assert_int_equal(store_app_update_within(st, &admin, a.id, &p, NULL, &got), STORE_OK);
    store_app_clear(&got);
    assert_string_equal(clash, "");
    struct store_app_patch plain = {.env_json = "{}"};
    assert_int_equal(store_app_update(st, &admin, a.id, &plain, &got), STORE_OK);
    store_app_clear(&got);

    uint8_t sealed[4] = {1, 2, 3, 4};
    struct store_secret in = {.hosts_json = "[\"api.example.test\"]",
                              .ciphertext = sealed,
                              .ciphertext_len = sizeof sealed};
    snprintf(in.app_id, sizeof in.app_id, "%s", a.id);
    snprintf(in.name, sizeof in.name, "MODEL_KEY");
    snprintf(in.key_id, sizeof in.key_id, "k1");
    bool created = false;
    char conflict[STORE_SECRET_NAME_LEN];
    struct store_secret out;
    assert_int_equal(
        store_secret_put(st, &admin, &in, reserved, 8, &created, conflict, sizeof conflict, &out),
        STORE_OK);
    store_secret_clear(&out);

    /* The secret's name, then a reserved one: refused, named, nothing written. */
    assert_int_equal(store_app_update_within(st, &admin, a.id, &p, NULL, &got), STORE_INVALID);
    assert_string_equal(clash, "MODEL_KEY");
    clash[0] = '\0';
    struct store_app_patch reserved_only = p;
    reserved_only.env_json = "{\"SSL_CERT_FILE\":\"/x\"}";
    assert_int_equal(store_app_update_within(st, &admin, a.id, &reserved_only, NULL, &got),
                     STORE_INVALID);
    assert_string_equal(clash, "SSL_CERT_FILE");
    assert_int_equal(store_app_get(st, a.id, &got), STORE_OK);
    assert_string_equal(got.env_json, "{}");
    store_app_clear(&got);
    clash[0] = '\0';
    struct store_app_patch other = p;
    other.env_json = "{\"PLAIN\":\"ok\"}";
    assert_int_equal(store_app_update_within(st, &admin, a.id, &other, NULL, &got), STORE_OK);
    store_app_clear(&got);
    assert_string_equal(clash, "");
}

/* An App's optional VMM host caps (apps.limits): kept, left alone by a patch that does not name
 * them, replaced, and removed by "" (the gateway's null). */
static void test_app_limits(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a, got;
    memset(&a, 0, sizeof a);
    snprintf(a.name, sizeof a.name, "capped");
    a.keep_alive_seconds = 60;
    a.vcpu_count = 1;
    a.mem_size_mib = 256;
    snprintf(a.driver, sizeof a.driver, "qemu");
    snprintf(a.image, sizeof a.image, "default");
    a.max_attempts = 3;
    a.command_json = "[\"x\"]";
    a.limits_json = "{\"vmmCpus\":1,\"vmmMemoryMib\":512}";
    assert_int_equal(store_app_create(st, &admin, &a), STORE_OK);
    assert_int_equal(store_app_get(st, a.id, &got), STORE_OK);
    assert_string_equal(got.limits_json, "{\"vmmCpus\":1,\"vmmMemoryMib\":512}");
    store_app_clear(&got);
    int64_t ka = 30;
    struct store_app_patch keep = {.keep_alive_seconds = &ka};
    assert_int_equal(store_app_update(st, &admin, a.id, &keep, &got), STORE_OK);
    assert_string_equal(got.limits_json, "{\"vmmCpus\":1,\"vmmMemoryMib\":512}");
    store_app_clear(&got);
    struct store_app_patch replace = {.limits_json = "{\"vmmCpus\":2}"};
    assert_int_equal(store_app_update(st, &admin, a.id, &replace, &got), STORE_OK);
    assert_string_equal(got.limits_json, "{\"vmmCpus\":2}");
    store_app_clear(&got);
    struct store_app_patch clear = {.limits_json = ""};
    assert_int_equal(store_app_update(st, &admin, a.id, &clear, &got), STORE_OK);
    assert_null(got.limits_json);
    store_app_clear(&got);
    make_app(st, "uncapped", &a);
    assert_int_equal(store_app_get(st, a.id, &got), STORE_OK);
    assert_null(got.limits_json);
    store_app_clear(&got);
}

static void test_app_list_pagination(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    char name[32], cursor[STORE_CURSOR_LEN] = "";
    struct store_app a;
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "app%d", i);
        make_app(st, name, &a);
    }
    size_t seen = 0, pages = 0;
    do {
        struct store_app *items;
        size_t n;
        char after[STORE_CURSOR_LEN];
        snprintf(after, sizeof after, "%s", cursor);
        assert_int_equal(store_app_list(st, after, 2, &items, &n, cursor), STORE_OK);
        for (size_t i = 0; i < n; i++) {
            snprintf(name, sizeof name, "app%zu", seen + i);
            assert_string_equal(items[i].name, name);
        }
        seen += n;
        pages++;
        store_app_list_free(items, n);
    } while (cursor[0]);
    assert_int_equal(seen, 5);
    assert_int_equal(pages, 3);
    struct store_app *items;
    size_t n;
    assert_int_equal(store_app_list(st, "x1", 2, &items, &n, cursor), STORE_INVALID);
}

static void test_keys_revoke(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a;
    struct store_key k, found, *keys;
    size_t n;
    uint8_t hash[32];
    make_app(st, "k", &a);
    key_hash("key-1", hash);
    assert_int_equal(store_key_create(st, &admin, a.id, NULL, "sbx_123456", hash, &k), STORE_OK);
    assert_int_equal(store_key_lookup(st, hash, &found), STORE_OK);
    assert_int_equal(store_key_revoke(st, &admin, a.id, k.id), STORE_OK);
    assert_int_equal(store_key_lookup(st, hash, &found), STORE_NOT_FOUND);
    /* Revoking twice is fine and writes one event. */
    assert_int_equal(store_key_revoke(st, &admin, a.id, k.id), STORE_OK);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind='key.revoked'"), 1);
    assert_int_equal(store_key_revoke(st, &admin, a.id, "key_nope"), STORE_NOT_FOUND);
    assert_int_equal(store_key_list(st, a.id, &keys, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_true(keys[0].revoked_at > 0);
    free(keys);
    /* The same hash cannot be stored twice. */
    assert_int_equal(store_key_create(st, &admin, a.id, NULL, "sbx_123456", hash, &k),
                     STORE_CONFLICT);
}

static void test_enqueue_order_and_idempotency(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a;
    struct store_session s;
    struct store_message m;
    bool replayed;
    make_app(st, "q", &a);
    make_session(st, a.id, &s);

    for (int i = 1; i <= 3; i++) {
        struct store_enqueue e = {a.id, s.id, "{\"n\":1}", NULL, NULL};
        assert_int_equal(store_message_enqueue(st, &admin, &e, &m, &replayed), STORE_OK);
        assert_int_equal(m.seq, i);
        assert_string_equal(m.state, "queued");
        assert_false(replayed);
        store_message_clear(&m);
    }
    struct store_enqueue ik = {a.id, s.id, "{\"n\":2}", "key-1", "hash-a"};
    assert_int_equal(store_message_enqueue(st, &admin, &ik, &m, &replayed), STORE_OK);
    char first_id[STORE_ID_LEN];
    strcpy(first_id, m.id);
    assert_int_equal(m.seq, 4);
    store_message_clear(&m);
    /* Same key, same request: the original. */
    assert_int_equal(store_message_enqueue(st, &admin, &ik, &m, &replayed), STORE_OK);
    assert_true(replayed);
    assert_string_equal(m.id, first_id);
    assert_int_equal(m.seq, 4);
    store_message_clear(&m);
    /* Same key, different request: conflict, and nothing written. */
    struct store_enqueue ic = {a.id, s.id, "{\"n\":3}", "key-1", "hash-b"};
    assert_int_equal(store_message_enqueue(st, &admin, &ic, &m, &replayed), STORE_CONFLICT);
    struct store_enqueue after = {a.id, s.id, "5", NULL, NULL};
    assert_int_equal(store_message_enqueue(st, &admin, &after, &m, &replayed), STORE_OK);
    assert_int_equal(m.seq, 5);
    store_message_clear(&m);

    struct store_message *items;
    size_t n;
    char cursor[STORE_CURSOR_LEN];
    assert_int_equal(store_message_list(st, a.id, s.id, "", 3, &items, &n, cursor), STORE_OK);
    assert_int_equal(n, 3);
    assert_int_equal(items[2].seq, 3);
    assert_string_equal(cursor, "3");
    store_message_list_free(items, n);
    assert_int_equal(store_message_list(st, a.id, s.id, cursor, 3, &items, &n, cursor), STORE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(items[0].seq, 4);
    assert_string_equal(cursor, "");
    store_message_list_free(items, n);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind='message.queued'"), 5);
    store_session_clear(&s);
}

struct enqueue_thread {
    struct store *st;
    const char *app_id, *session_id;
    int count;
    int64_t seqs[50];
    enum store_status status;
};

static void *enqueue_worker(void *arg)
{
    struct enqueue_thread *t = arg;
    for (int i = 0; i < t->count; i++) {
        struct store_enqueue e = {t->app_id, t->session_id, "{\"load\":true}", NULL, NULL};
        struct store_message m;
        bool replayed;
        t->status = store_message_enqueue(t->st, &admin, &e, &m, &replayed);
        if (t->status != STORE_OK)
            return NULL;
        t->seqs[i] = m.seq;
        store_message_clear(&m);
    }
    return NULL;
}

static void test_group_commit_concurrent(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a;
    struct store_session s;
    enum { THREADS = 16, EACH = 25 };
    struct enqueue_thread t[THREADS];
    pthread_t th[THREADS];
    make_app(st, "gc", &a);
    make_session(st, a.id, &s);

    for (int i = 0; i < THREADS; i++) {
        t[i] = (struct enqueue_thread){st, a.id, s.id, EACH, {0}, STORE_OK};
        assert_int_equal(pthread_create(&th[i], NULL, enqueue_worker, &t[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);

    static char seen[THREADS * EACH + 1];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < THREADS; i++) {
        assert_int_equal(t[i].status, STORE_OK);
        for (int j = 0; j < EACH; j++) {
            assert_true(t[i].seqs[j] >= 1 && t[i].seqs[j] <= THREADS * EACH);
            assert_int_equal(seen[t[i].seqs[j]], 0); /* every seq distinct */
            seen[t[i].seqs[j]] = 1;
            if (j > 0) /* one caller's messages keep their order */
                assert_true(t[i].seqs[j] > t[i].seqs[j - 1]);
        }
    }
    /* Every acknowledged message is in the file, read by an independent connection. */
    assert_int_equal(db_int(f, "SELECT count(*) FROM messages"), THREADS * EACH);
    assert_int_equal(db_int(f, "SELECT count(DISTINCT seq) FROM messages"), THREADS * EACH);
    assert_int_equal(db_int(f, "SELECT next_seq FROM sessions"), THREADS * EACH + 1);
    /* Fewer transactions than messages: the committer batched them (events record each). */
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind='message.queued'"),
                     THREADS * EACH);
    store_session_clear(&s);
}

/* Enqueues that pile up while the database is locked go out in one transaction, not one each. */
static void test_group_commit_batches(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a;
    struct store_session s;
    enum { THREADS = 16 };
    struct enqueue_thread t[THREADS];
    pthread_t th[THREADS];
    make_app(st, "batch", &a);
    make_session(st, a.id, &s);

    db_mark_transactions(f);
    /* Hold the write lock so that every request queues up behind the committer. */
    db_lock_writers(f);
    for (int i = 0; i < THREADS; i++) {
        t[i] = (struct enqueue_thread){st, a.id, s.id, 1, {0}, STORE_ERROR};
        assert_int_equal(pthread_create(&th[i], NULL, enqueue_worker, &t[i]), 0);
    }
    usleep(300 * 1000);
    db_unlock_writers(f);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(t[i].status, STORE_OK);
    }
    int64_t commits = db_message_transactions(f);
    /* One transaction for the request the committer held while blocked, one for the rest. */
    assert_true(commits >= 1);
    assert_true(commits <= 3);
    assert_int_equal(db_int(f, "SELECT count(*) FROM messages"), THREADS);
    store_session_clear(&s);
}

/* Message ids sort by creation time (their B-tree indexes grow at one edge) and keep the shape
 * of every other id: "msg_" + 20 base32 characters. */
static void test_ordered_ids(void **state)
{
    static const char alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";
    char a[STORE_ID_LEN], b[STORE_ID_LEN], c[STORE_ID_LEN];
    (void)state;
    assert_int_equal(id_new_ordered("msg", a, sizeof a), 0);
    usleep(2000);
    assert_int_equal(id_new_ordered("msg", b, sizeof b), 0);
    assert_int_equal(id_new_ordered("msg", c, sizeof c), 0);
    assert_int_equal(strlen(a), 24);
    assert_memory_equal(a, "msg_", 4);
    for (size_t i = 4; i < 24; i++)
        assert_non_null(strchr(alphabet, a[i]));
    assert_true(strcmp(a, b) < 0);
    assert_string_not_equal(b, c); /* same millisecond: the random part differs */
    /* The time part is now, in ms. */
    uint64_t ms = 0;
    for (size_t i = 4; i < 13; i++)
        ms = ms << 5 | (uint64_t)(strchr(alphabet, a[i]) - alphabet);
    int64_t now = clock_wall_ms();
    assert_true((int64_t)ms <= now && (int64_t)ms > now - 1000);
}

/* Results of message_enqueue_async, filled in by its callback on the committer thread. */
struct async_results {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    enum store_status status[64];
    int64_t seq[64];
};

struct async_slot {
    struct async_results *res;
    int index;
};

static void async_done(void *arg, enum store_status status, struct store_message *m, bool replayed)
{
    struct async_slot *slot = arg;
    struct async_results *res = slot->res;
    pthread_mutex_lock(&res->lock);
    res->status[slot->index] = status;
    if (status == STORE_OK) {
        res->seq[slot->index] = replayed ? -1 : m->seq;
        store_message_clear(m);
    }
    res->done++;
    pthread_cond_signal(&res->cond);
    pthread_mutex_unlock(&res->lock);
}

/* Waits until n of the enqueues reporting to res have had their callback. */
static void async_wait(struct async_results *res, int n)
{
    pthread_mutex_lock(&res->lock);
    while (res->done < n)
        pthread_cond_wait(&res->cond, &res->lock);
    pthread_mutex_unlock(&res->lock);
}

/* One caller thread hands many enqueues to the committer without waiting for each: they share
 * one transaction, a bad one fails alone through its callback, and all are on disk after. */
static void test_enqueue_async_one_caller_batches(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a;
    struct store_session s;
    enum { N = 40, BAD = 17 };
    static struct async_results res;
    struct async_slot slots[N];
    struct store_enqueue reqs[N];
    make_app(st, "async", &a);
    make_session(st, a.id, &s);
    memset(&res, 0, sizeof res);
    pthread_mutex_init(&res.lock, NULL);
    pthread_cond_init(&res.cond, NULL);

    db_mark_transactions(f);
    db_lock_writers(f);
    for (int i = 0; i < N; i++) {
        slots[i] = (struct async_slot){&res, i};
        reqs[i] =
            (struct store_enqueue){a.id, i == BAD ? "ses_missing" : s.id, "{\"a\":1}", NULL, NULL};
        assert_int_equal(store_message_enqueue_async(st, &admin, &reqs[i], async_done, &slots[i]),
                         STORE_OK);
    }
    usleep(200 * 1000);
    pthread_mutex_lock(&res.lock);
    assert_int_equal(res.done, 0); /* nothing is answered before its commit */
    pthread_mutex_unlock(&res.lock);
    db_unlock_writers(f);
    async_wait(&res, N);

    static char seen[N];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < N; i++) {
        if (i == BAD) {
            assert_int_equal(res.status[i], STORE_NOT_FOUND);
            continue;
        }
        assert_int_equal(res.status[i], STORE_OK);
        assert_true(res.seq[i] >= 1 && res.seq[i] <= N - 1);
        assert_int_equal(seen[res.seq[i]], 0);
        seen[res.seq[i]] = 1;
    }
    /* The first request (taken while the lock was held) alone, then the rest together. */
    assert_true(db_message_transactions(f) <= 3);
    assert_int_equal(db_int(f, "SELECT count(*) FROM messages"), N - 1);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind='message.queued'"), N - 1);
    pthread_mutex_destroy(&res.lock);
    pthread_cond_destroy(&res.cond);
    store_session_clear(&s);
}

static void test_batch_failure_is_isolated(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a;
    struct store_session s;
    enum { GOOD = 6 };
    struct enqueue_thread good[GOOD], bad = {0};
    pthread_t th[GOOD], bad_th;
    make_app(st, "iso", &a);
    make_session(st, a.id, &s);

    /* Hold the lock so that the good requests and a failing one (unknown Session) share a
     * batch: the failing row is rolled back to its savepoint, the others commit. */
    db_lock_writers(f);
    for (int i = 0; i < GOOD / 2; i++) {
        good[i] = (struct enqueue_thread){st, a.id, s.id, 1, {0}, STORE_ERROR};
        assert_int_equal(pthread_create(&th[i], NULL, enqueue_worker, &good[i]), 0);
    }
    usleep(100 * 1000);
    bad = (struct enqueue_thread){st, a.id, "ses_missing", 1, {0}, STORE_ERROR};
    assert_int_equal(pthread_create(&bad_th, NULL, enqueue_worker, &bad), 0);
    usleep(50 * 1000);
    for (int i = GOOD / 2; i < GOOD; i++) {
        good[i] = (struct enqueue_thread){st, a.id, s.id, 1, {0}, STORE_ERROR};
        assert_int_equal(pthread_create(&th[i], NULL, enqueue_worker, &good[i]), 0);
    }
    usleep(100 * 1000);
    db_unlock_writers(f);
    pthread_join(bad_th, NULL);
    assert_int_equal(bad.status, STORE_NOT_FOUND);
    for (int i = 0; i < GOOD; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(good[i].status, STORE_OK);
    }
    /* Seqs 1..GOOD, no gap left by the failed row. */
    assert_int_equal(db_int(f, "SELECT count(*) FROM messages"), GOOD);
    assert_int_equal(db_int(f, "SELECT max(seq) FROM messages"), GOOD);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind='message.queued'"), GOOD);
    store_session_clear(&s);
}

/* Requests to a few Sessions handed over at once, interleaved, round after round, commit in the
 * order they were handed over within each Session, each once: the batch is reordered by Session
 * on PostgreSQL (enqueue.c), and each Session's seqs are then given in one statement by request
 * order (enqueue_pg.c). */
static void test_enqueue_order_within_sessions(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a;
    enum { SESSIONS = 4, N = 48, ROUNDS = 20 };
    struct store_session s[SESSIONS];
    int64_t last[SESSIONS] = {0};
    static struct async_results res;
    struct async_slot slots[N];
    struct store_enqueue reqs[N];
    make_app(st, "order", &a);
    for (int k = 0; k < SESSIONS; k++)
        make_session(st, a.id, &s[k]);
    pthread_mutex_init(&res.lock, NULL);
    pthread_cond_init(&res.cond, NULL);

    for (int round = 0; round < ROUNDS; round++) {
        pthread_mutex_lock(&res.lock);
        res.done = 0;
        pthread_mutex_unlock(&res.lock);
        for (int i = 0; i < N; i++) {
            slots[i] = (struct async_slot){&res, i};
            reqs[i] = (struct store_enqueue){a.id, s[i % SESSIONS].id, "{\"o\":1}", NULL, NULL};
            assert_int_equal(
                store_message_enqueue_async(st, &admin, &reqs[i], async_done, &slots[i]), STORE_OK);
        }
        async_wait(&res, N);
        for (int i = 0; i < N; i++) {
            assert_int_equal(res.status[i], STORE_OK);
            if (res.seq[i] != last[i % SESSIONS] + 1)
                fail_msg("round %d: request %d of Session %d got seq %lld, after %lld", round, i,
                         i % SESSIONS, (long long)res.seq[i], (long long)last[i % SESSIONS]);
            last[i % SESSIONS] = res.seq[i];
        }
    }
    assert_int_equal(db_int(f, "SELECT count(*) FROM messages"), ROUNDS * N);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind='message.queued'"),
                     ROUNDS * N);
    pthread_mutex_destroy(&res.lock);
    pthread_cond_destroy(&res.cond);
    for (int k = 0; k < SESSIONS; k++)
        store_session_clear(&s[k]);
}

/* A row without an Idempotency-Key runs without a savepoint (enqueue.c): when it fails after its
 * first write (here its audit event is refused, after its message row went in), the batch is
 * rolled back and written again without it. The other rows of the batch, before and after it,
 * commit with their seqs in order; the failed one leaves nothing, not even its message row. */
static void test_batch_row_failing_after_its_write(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a;
    struct store_session s, poisoned;
    enum { N = 12, BAD = 5 };
    static struct async_results res;
    struct async_slot slots[N];
    struct store_enqueue reqs[N];
    make_app(st, "rowfail", &a);
    make_session(st, a.id, &s);
    make_session(st, a.id, &poisoned);
    if (f->pg) {
        db_exec(f,
                "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF NEW.kind = 'message.queued' AND NEW.session_id = '%s' THEN "
                "RAISE EXCEPTION 'poisoned' USING ERRCODE = 'check_violation'; END IF; "
                "RETURN NEW; END $$",
                poisoned.id);
        db_exec(f, "CREATE TRIGGER poison BEFORE INSERT ON events FOR EACH ROW "
                   "EXECUTE FUNCTION poison()");
    } else {
        db_exec(f,
                "CREATE TRIGGER poison BEFORE INSERT ON events WHEN NEW.kind = 'message.queued' "
                "AND NEW.session_id = '%s' BEGIN SELECT RAISE(ABORT, 'poisoned'); END",
                poisoned.id);
    }
    memset(&res, 0, sizeof res);
    pthread_mutex_init(&res.lock, NULL);
    pthread_cond_init(&res.cond, NULL);

    db_mark_transactions(f);
    db_lock_writers(f);
    /* The committer takes the first request and waits for the lock; the others queue meanwhile
     * and make one batch, the poisoned row in its middle. */
    for (int i = 0; i < N; i++) {
        slots[i] = (struct async_slot){&res, i};
        reqs[i] =
            (struct store_enqueue){a.id, i == BAD ? poisoned.id : s.id, "{\"r\":1}", NULL, NULL};
        assert_int_equal(store_message_enqueue_async(st, &admin, &reqs[i], async_done, &slots[i]),
                         STORE_OK);
        if (i == 0)
            usleep(100 * 1000);
    }
    usleep(100 * 1000);
    db_unlock_writers(f);
    async_wait(&res, N);

    for (int i = 0, want = 1; i < N; i++) {
        if (i == BAD) {
            assert_int_equal(res.status[i], STORE_INVALID);
            continue;
        }
        assert_int_equal(res.status[i], STORE_OK);
        assert_int_equal(res.seq[i], want++); /* in order, no gap where the bad row was */
    }
    assert_int_equal(db_int(f, "SELECT count(*) FROM messages WHERE session_id = '%s'", s.id),
                     N - 1);
    assert_int_equal(
        db_int(f, "SELECT count(*) FROM messages WHERE session_id = '%s'", poisoned.id), 0);
    assert_int_equal(db_int(f, "SELECT next_seq FROM sessions WHERE id = '%s'", poisoned.id), 1);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind='message.queued'"), N - 1);
    /* The first request alone (taken while the lock was held), then the batch: its first pass
     * rolled back, its second committed. */
    assert_true(db_message_transactions(f) <= 3);
    pthread_mutex_destroy(&res.lock);
    pthread_cond_destroy(&res.cond);
    store_session_clear(&s);
    store_session_clear(&poisoned);
}

static void test_cross_app_scoping(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a, b;
    struct store_session s, got;
    struct store_message m, gm;
    struct store_workspace w, gw;
    bool replayed, created;
    make_app(st, "owner", &a);
    make_app(st, "other", &b);
    make_session(st, a.id, &s);
    struct store_enqueue e = {a.id, s.id, "{}", NULL, NULL};
    assert_int_equal(store_message_enqueue(st, &admin, &e, &m, &replayed), STORE_OK);
    assert_int_equal(store_workspace_create(st, &admin, a.id, "w", 64, "/tmp/x", &w), STORE_OK);

    assert_int_equal(store_session_get(st, b.id, s.id, &got), STORE_NOT_FOUND);
    assert_int_equal(store_message_get(st, b.id, s.id, m.id, &gm), STORE_NOT_FOUND);
    assert_int_equal(store_workspace_get(st, b.id, w.id, &gw), STORE_NOT_FOUND);
    assert_int_equal(store_session_delete(st, &admin, b.id, s.id), STORE_NOT_FOUND);
    struct store_enqueue e2 = {b.id, s.id, "{}", NULL, NULL};
    assert_int_equal(store_message_enqueue(st, &admin, &e2, &gm, &replayed), STORE_NOT_FOUND);
    assert_int_equal(store_workspace_delete(st, &admin, b.id, w.id, NULL), STORE_NOT_FOUND);
    /* Another App's Workspace cannot be attached. */
    assert_int_equal(store_session_create(st, &admin, b.id, NULL, 0, w.id, NULL, &got, &created),
                     STORE_INVALID);
    /* Another App's list is empty. */
    struct store_session *items;
    size_t n;
    char cursor[STORE_CURSOR_LEN];
    assert_int_equal(store_session_list(st, b.id, "", 50, &items, &n, cursor), STORE_OK);
    assert_int_equal(n, 0);
    free(items);
    /* The owner still sees everything. */
    assert_int_equal(store_message_get(st, a.id, s.id, m.id, &gm), STORE_OK);
    store_message_clear(&gm);
    store_message_clear(&m);
    store_session_clear(&s);
}

static void test_session_names_and_workspaces(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a;
    struct store_session s1, s2;
    struct store_workspace w;
    bool created;
    make_app(st, "names", &a);
    assert_int_equal(store_workspace_create(st, &admin, a.id, NULL, 64, "/tmp/d", &w), STORE_OK);
    struct store_workspace got_ws;
    assert_int_equal(store_workspace_get(st, a.id, w.id, &got_ws), STORE_OK);
    assert_int_equal(got_ws.size_mib, 64); /* the Workspace's size is kept */
    assert_int_equal(
        store_session_create(st, &admin, a.id, "bob", 30, w.id, "{\"k\":1}", &s1, &created),
        STORE_OK);
    assert_true(created);
    assert_int_equal(s1.effective_keep_alive_seconds, 30);
    assert_string_equal(s1.workspace_id, w.id);
    assert_int_equal(store_session_create(st, &admin, a.id, "bob", 0, NULL, NULL, &s2, &created),
                     STORE_OK);
    assert_false(created);
    assert_string_equal(s2.id, s1.id);
    store_session_clear(&s2);

    /* Attached: the Workspace cannot go. */
    assert_int_equal(store_workspace_delete(st, &admin, a.id, w.id, NULL), STORE_CONFLICT);

    int64_t clear = 0;
    struct store_session_patch p = {.metadata_json = "{\"x\":2}", .keep_alive_seconds = &clear};
    assert_int_equal(store_session_update(st, &admin, a.id, s1.id, &p, &s2), STORE_OK);
    assert_int_equal(s2.keep_alive_seconds, 0);
    assert_int_equal(s2.effective_keep_alive_seconds, 60);
    assert_string_equal(s2.metadata_json, "{\"x\":2}");
    store_session_clear(&s2);

    struct store_message m;
    bool replayed;
    struct store_enqueue e = {a.id, s1.id, "{\"secret\":\"body\"}", NULL, NULL};
    assert_int_equal(store_message_enqueue(st, &admin, &e, &m, &replayed), STORE_OK);
    assert_int_equal(store_session_delete(st, &admin, a.id, s1.id), STORE_OK);
    assert_int_equal(store_session_get(st, a.id, s1.id, &s2), STORE_NOT_FOUND);
    struct store_message gm;
    assert_int_equal(store_message_get(st, a.id, s1.id, m.id, &gm), STORE_NOT_FOUND);
    /* Scrubbed: no body, no metadata; the unfinished message failed; stop requested. */
    assert_int_equal(db_int(f, "SELECT count(*) FROM messages WHERE body LIKE '%%secret%%'"), 0);
    assert_int_equal(db_int(f, "SELECT count(*) FROM messages WHERE state='failed'"), 1);
    assert_int_equal(db_int(f, "SELECT count(*) FROM sessions WHERE state='deleted' "
                               "AND stop_requested_at IS NOT NULL AND metadata='{}'"),
                     1);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind IN "
                               "('session.deleted','message.failed')"),
                     2);
    /* Detached now: the Workspace can go, and the name is free. */
    assert_int_equal(store_workspace_delete(st, &admin, a.id, w.id, NULL), STORE_OK);
    assert_int_equal(store_session_create(st, &admin, a.id, "bob", 0, NULL, NULL, &s2, &created),
                     STORE_OK);
    assert_true(created);
    store_session_clear(&s2);
    store_message_clear(&m);
    store_session_clear(&s1);
}

/* Settings (the admin token's hash lives there) are read back as written and overwritten in
 * place; Workspaces list in creation order, a page at a time, per App. */
static void test_settings_and_workspace_list(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a, b;
    struct store_workspace w, *items;
    char value[64], cursor[STORE_CURSOR_LEN], after[STORE_CURSOR_LEN], name[16];
    size_t n;

    assert_int_equal(store_setting_get(st, "admin_token_hash", value, sizeof value),
                     STORE_NOT_FOUND);
    assert_int_equal(store_setting_put(st, "admin_token_hash", "aa11"), STORE_OK);
    assert_int_equal(store_setting_put(st, "other", "x"), STORE_OK);
    assert_int_equal(store_setting_put(st, "admin_token_hash", "bb22"), STORE_OK);
    assert_int_equal(store_setting_get(st, "admin_token_hash", value, sizeof value), STORE_OK);
    assert_string_equal(value, "bb22");
    assert_int_equal(db_int(f, "SELECT count(*) FROM settings"), 2);
    /* setting_init: the first value stays; every caller learns which one it is. */
    assert_int_equal(store_setting_init(st, "first", "one", value, sizeof value), STORE_OK);
    assert_string_equal(value, "one");
    assert_int_equal(store_setting_init(st, "first", "two", value, sizeof value), STORE_OK);
    assert_string_equal(value, "one");
    assert_int_equal(store_setting_get(st, "first", value, sizeof value), STORE_OK);
    assert_string_equal(value, "one");
    assert_int_equal(db_int(f, "SELECT count(*) FROM settings"), 3);

    make_app(st, "ws", &a);
    make_app(st, "ws-other", &b);
    assert_int_equal(store_workspace_create(st, &admin, b.id, "theirs", 64, "/tmp/b", &w),
                     STORE_OK);
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "w%d", i);
        assert_int_equal(store_workspace_create(st, &admin, a.id, name, 64, "/tmp/a", &w),
                         STORE_OK);
    }
    assert_int_equal(store_workspace_list(st, a.id, "", 2, &items, &n, cursor), STORE_OK);
    assert_int_equal(n, 2);
    assert_string_equal(items[0].name, "w0");
    assert_string_equal(items[1].name, "w1");
    assert_string_not_equal(cursor, "");
    free(items);
    snprintf(after, sizeof after, "%s", cursor);
    assert_int_equal(store_workspace_list(st, a.id, after, 2, &items, &n, cursor), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(items[0].name, "w2");
    assert_string_equal(items[0].app_id, a.id);
    assert_string_equal(cursor, "");
    free(items);
}

static void test_sandbox_stop_and_pool(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    struct store_app a, b;
    struct store_session s;
    struct store_sandbox sb;
    make_app(st, "sb", &a);
    make_app(st, "sb2", &b);
    make_session(st, a.id, &s);
    /* Sandboxes are written by workers; insert them as a worker would. */
    db_exec(f,
            "INSERT INTO sandboxes (id, state, driver, image, vcpu_count, mem_size_mib, "
            "worker_id, app_id, session_id, created_at, updated_at) VALUES "
            "('sbx_run', 'running', 'process', 'default', 1, 256, 'wrk_1', '%s', '%s', 1, 1),"
            "('sbx_warm', 'warm', 'process', 'default', 1, 256, 'wrk_1', NULL, NULL, 1, 1),"
            "('sbx_dead', 'terminated', 'process', 'default', 1, 256, 'wrk_1', '%s', '%s', 1, 1)",
            a.id, s.id, a.id, s.id);

    assert_int_equal(store_sandbox_get(st, b.id, "sbx_run", &sb), STORE_NOT_FOUND);
    assert_int_equal(store_sandbox_get(st, a.id, "sbx_warm", &sb), STORE_NOT_FOUND);
    assert_int_equal(store_sandbox_get(st, "", "sbx_warm", &sb), STORE_OK);
    assert_int_equal(store_sandbox_request_stop(st, &admin, a.id, "sbx_dead", &sb), STORE_CONFLICT);
    assert_int_equal(store_sandbox_request_stop(st, &admin, a.id, "sbx_run", &sb), STORE_OK);
    assert_true(sb.stop_requested_at > 0);
    assert_int_equal(store_sandbox_request_stop(st, &admin, a.id, "sbx_run", &sb), STORE_OK);
    assert_int_equal(db_int(f, "SELECT count(*) FROM events WHERE kind='sandbox.stop_requested'"),
                     1);

    struct store_sandbox *items;
    size_t n;
    char cursor[STORE_CURSOR_LEN];
    assert_int_equal(store_sandbox_list(st, a.id, "", 50, &items, &n, cursor), STORE_OK);
    assert_int_equal(n, 2);
    free(items);
    assert_int_equal(store_sandbox_list(st, "", "", 50, &items, &n, cursor), STORE_OK);
    assert_int_equal(n, 3);
    free(items);

    struct store_pool_stat *ps;
    assert_int_equal(store_pool_stats(st, &ps, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ps[0].warm, 1);
    assert_int_equal(ps[0].claimed, 1);
    free(ps);

    struct store_counts c;
    assert_int_equal(store_counts(st, &c), STORE_OK);
    assert_int_equal(c.sandboxes_by_state[1], 1); /* warm */
    assert_int_equal(c.sandboxes_by_state[3], 1); /* running */
    assert_int_equal(c.sessions_by_state[0], 1);  /* idle */

    struct store_event *ev;
    assert_int_equal(store_event_list(st, b.id, NULL, 0, 100, &ev, &n), STORE_OK);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(ev[i].app_id, b.id);
    store_event_list_free(ev, n);
    assert_int_equal(store_event_list(st, a.id, s.id, 0, 100, &ev, &n), STORE_OK);
    assert_true(n >= 2);
    assert_string_equal(ev[0].kind, "session.created");
    assert_true(ev[1].id > ev[0].id);
    store_event_list_free(ev, n);
    store_session_clear(&s);
}

/* The callback API's Sandbox lookup: a Sandbox given a token at boot is found by the token's hash
 * with the host of its worker (the callback server binds the token to that host's Sandboxes); an
 * unknown hash finds nothing; a later runtime update without a hash keeps the token. */
static void test_sandbox_callback_token(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    static const struct store_ctx wctx = {"worker:wrk_cb", NULL};
    static const struct store_shape shape = {"process", "default", 1, 256};
    struct store_host h = {.capacity = 2};
    int64_t was_lost = -1;
    snprintf(h.id, sizeof h.id, "host_cb");
    snprintf(h.address, sizeof h.address, "10.0.0.1:9000");
    assert_int_equal(store_worker_register(st, "wrk_cb", "machine", 1), STORE_OK);
    assert_int_equal(store_host_register(st, &wctx, &h, "wrk_cb", &was_lost), STORE_OK);

    char token[CALLBACK_TOKEN_LEN + 1], hash[65], other[65];
    assert_int_equal(callback_token_new(token, hash), 0);
    struct store_sandbox sb = {0}, plain = {0}, got = {0};
    assert_int_equal(store_sandbox_insert(st, &wctx, "wrk_cb", &shape, false, &sb), STORE_OK);
    /* A Sandbox without a token, which no hash may find. */
    assert_int_equal(store_sandbox_insert(st, &wctx, "wrk_cb", &shape, false, &plain), STORE_OK);
    assert_int_equal(store_sandbox_set_runtime(st, &plain), STORE_OK);
    sb.pid = 4242;
    snprintf(sb.net_address, sizeof sb.net_address, "10.200.0.2");
    snprintf(sb.callback_token_hash, sizeof sb.callback_token_hash, "%s", hash);
    assert_int_equal(store_sandbox_set_runtime(st, &sb), STORE_OK);

    char host_id[STORE_HOST_ID_LEN] = "unset";
    assert_int_equal(store_sandbox_by_callback_token(st, hash, &got, host_id, sizeof host_id),
                     STORE_OK);
    assert_string_equal(got.id, sb.id);
    assert_string_equal(got.state, "booting");
    assert_string_equal(got.net_address, "10.200.0.2");
    assert_string_equal(host_id, "host_cb");
    assert_int_equal(got.callback_calls, 0);
    assert_int_equal(got.callback_last_at, 0);

    callback_token_hash(token, strlen(token) - 1, other);
    assert_int_equal(store_sandbox_by_callback_token(st, other, &got, host_id, sizeof host_id),
                     STORE_NOT_FOUND);
    assert_int_equal(store_sandbox_by_callback_token(st, "", &got, host_id, sizeof host_id),
                     STORE_NOT_FOUND);

    /* The worker records the runtime again (no hash this time): the token still finds it. */
    sb.callback_token_hash[0] = '\0';
    sb.pid = 4343;
    assert_int_equal(store_sandbox_set_runtime(st, &sb), STORE_OK);
    memset(&got, 0, sizeof got);
    assert_int_equal(store_sandbox_by_callback_token(st, hash, &got, host_id, sizeof host_id),
                     STORE_OK);
    assert_string_equal(got.id, sb.id);
    assert_int_equal(got.pid, 4343);
    assert_int_equal(
        db_int(f, "SELECT count(*) FROM sandboxes WHERE callback_token_hash = '%s'", hash), 1);

    /* A Sandbox whose worker has no host (a worker that never registered one): found, host "". */
    char hash2[65];
    assert_int_equal(store_worker_register(st, "wrk_nohost", "machine", 2), STORE_OK);
    struct store_sandbox lone = {0};
    assert_int_equal(store_sandbox_insert(st, &wctx, "wrk_nohost", &shape, true, &lone), STORE_OK);
    assert_int_equal(callback_token_new(token, hash2), 0);
    snprintf(lone.callback_token_hash, sizeof lone.callback_token_hash, "%s", hash2);
    assert_int_equal(store_sandbox_set_runtime(st, &lone), STORE_OK);
    assert_int_equal(store_sandbox_by_callback_token(st, hash2, &got, host_id, sizeof host_id),
                     STORE_OK);
    assert_string_equal(got.id, lone.id);
    assert_string_equal(host_id, "");
}

/* The callback servers' counts: each flush adds to a Sandbox's calls and keeps its latest call
 * (flushes of several servers arrive in any order), and adds the host's refused requests. */
static void test_sandbox_callbacks_add(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    static const struct store_ctx wctx = {"worker:wrk_cb", NULL};
    static const struct store_shape shape = {"process", "default", 1, 256};
    struct store_host h = {.capacity = 2};
    int64_t was_lost = -1;
    snprintf(h.id, sizeof h.id, "host_cb");
    assert_int_equal(store_worker_register(st, "wrk_cb", "machine", 1), STORE_OK);
    assert_int_equal(store_host_register(st, &wctx, &h, "wrk_cb", &was_lost), STORE_OK);
    struct store_sandbox a = {0}, b = {0}, got = {0};
    assert_int_equal(store_sandbox_insert(st, &wctx, "wrk_cb", &shape, false, &a), STORE_OK);
    assert_int_equal(store_sandbox_insert(st, &wctx, "wrk_cb", &shape, false, &b), STORE_OK);

    struct store_callback_count first[2] = {{.calls = 3, .last_at = 1000},
                                            {.calls = 1, .last_at = 900}};
    snprintf(first[0].sandbox_id, sizeof first[0].sandbox_id, "%s", a.id);
    snprintf(first[1].sandbox_id, sizeof first[1].sandbox_id, "%s", b.id);
    assert_int_equal(store_sandbox_callbacks_add(st, first, 2, "host_cb", 2), STORE_OK);
    /* An older flush arriving later, and a Sandbox the store does not know: the batch still lands.
     */
    struct store_callback_count second[2] = {{.calls = 4, .last_at = 500},
                                             {.calls = 9, .last_at = 1}};
    snprintf(second[0].sandbox_id, sizeof second[0].sandbox_id, "%s", a.id);
    snprintf(second[1].sandbox_id, sizeof second[1].sandbox_id, "sbx_gone");
    assert_int_equal(store_sandbox_callbacks_add(st, second, 2, "host_cb", 5), STORE_OK);

    assert_int_equal(store_sandbox_get(st, "", a.id, &got), STORE_OK);
    assert_int_equal(got.callback_calls, 7);
    assert_int_equal(got.callback_last_at, 1000);
    assert_int_equal(store_sandbox_get(st, "", b.id, &got), STORE_OK);
    assert_int_equal(got.callback_calls, 1);
    assert_int_equal(got.callback_last_at, 900);
    assert_int_equal(db_int(f, "SELECT callback_refused FROM hosts WHERE id = 'host_cb'"), 7);

    /* A newer call moves last_at forward; a flush with refusals only touches the host. */
    struct store_callback_count third = {.calls = 1, .last_at = 2000};
    snprintf(third.sandbox_id, sizeof third.sandbox_id, "%s", b.id);
    assert_int_equal(store_sandbox_callbacks_add(st, &third, 1, "host_cb", 0), STORE_OK);
    assert_int_equal(store_sandbox_callbacks_add(st, NULL, 0, "host_cb", 1), STORE_OK);
    assert_int_equal(store_sandbox_get(st, "", b.id, &got), STORE_OK);
    assert_int_equal(got.callback_calls, 2);
    assert_int_equal(got.callback_last_at, 2000);
    assert_int_equal(db_int(f, "SELECT callback_refused FROM hosts WHERE id = 'host_cb'"), 8);

    /* /metrics: the sum over the Sandboxes (booting ones too: these never booted), and the
     * refusals per host. */
    struct store_counts c;
    assert_int_equal(store_counts(st, &c), STORE_OK);
    assert_int_equal(c.callback_calls, 9);
    struct store_host *hosts;
    size_t n;
    assert_int_equal(store_host_list(st, &hosts, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_string_equal(hosts[0].id, "host_cb");
    assert_int_equal(hosts[0].callback_refused, 8);
    free(hosts);

    /* The auditor view lists who called back. */
    assert_int_equal(db_int(f, "SELECT calls FROM sandbox_callbacks WHERE sandbox_id = '%s'", a.id),
                     7);
    assert_int_equal(db_int(f, "SELECT count(*) FROM sandbox_callbacks"), 2);
}

/* Parses a JSON text (NULL: null) and compares it with want. */
static void assert_json(const char *text, const char *want)
{
    json_t *g = text ? json_loads(text, 0, NULL) : json_null();
    json_t *w = json_loads(want, 0, NULL);
    assert_non_null(g);
    assert_non_null(w);
    bool same = json_equal(g, w);
    json_decref(g);
    json_decref(w);
    if (!same)
        fail_msg("got %s, want %s", text, want);
}

/* PATCH /sandbox/v1/session/metadata: a merge patch applied by the store (other members kept,
 * null removes, objects merge), refused whole when the result is over the limit or not an object,
 * and audited with the Sandbox as the actor. */
static void test_session_metadata_merge(void **state)
{
    struct store_fixture *f = *state;
    struct store *st = f->st;
    static const struct store_ctx sbx_ctx = {"sandbox:sbx_x", "req_cb"};
    struct store_app a;
    struct store_session s, out = {0}, cur = {0};
    make_app(st, "meta", &a);
    make_session(st, a.id, &s);
    struct store_session_patch set = {.metadata_json =
                                          "{\"keep\":\"k\",\"a\":1,\"n\":{\"x\":1,\"y\":2}}"};
    assert_int_equal(store_session_update(st, &admin, a.id, s.id, &set, &out), STORE_OK);
    store_session_clear(&out);

    struct store_session_patch merge = {.metadata_merge_json =
                                            "{\"a\":null,\"n\":{\"y\":null,\"z\":3},\"new\":true}",
                                        .metadata_max_bytes = 1024};
    assert_int_equal(store_session_update(st, &sbx_ctx, a.id, s.id, &merge, &out), STORE_OK);
    const char *want = "{\"keep\":\"k\",\"n\":{\"x\":1,\"z\":3},\"new\":true}";
    assert_json(out.metadata_json, want);
    store_session_clear(&out);
    assert_int_equal(store_session_get(st, a.id, s.id, &cur), STORE_OK);
    assert_json(cur.metadata_json, want);
    size_t now_len = strlen(cur.metadata_json);
    store_session_clear(&cur);

    /* Over the limit: refused, nothing written. A result of exactly the limit is fine. */
    struct store_session_patch big = {.metadata_merge_json =
                                          "{\"blob\":\"0123456789012345678901234567890123456789\"}",
                                      .metadata_max_bytes = now_len + 20};
    assert_int_equal(store_session_update(st, &sbx_ctx, a.id, s.id, &big, &out), STORE_INVALID);
    struct store_session_patch not_object = {.metadata_merge_json = "[1,2]",
                                             .metadata_max_bytes = 1024};
    assert_int_equal(store_session_update(st, &sbx_ctx, a.id, s.id, &not_object, &out),
                     STORE_INVALID);
    assert_int_equal(store_session_get(st, a.id, s.id, &cur), STORE_OK);
    assert_json(cur.metadata_json, want);
    store_session_clear(&cur);
    struct store_session_patch exact = {.metadata_merge_json = "{\"b\":1}",
                                        .metadata_max_bytes = now_len + strlen(",\"b\":1")};
    assert_int_equal(store_session_update(st, &sbx_ctx, a.id, s.id, &exact, &out), STORE_OK);
    assert_int_equal(strlen(out.metadata_json), exact.metadata_max_bytes);
    store_session_clear(&out);

    /* Another App's Session is not found. */
    struct store_app other;
    make_app(st, "meta2", &other);
    assert_int_equal(store_session_update(st, &sbx_ctx, other.id, s.id, &merge, &out),
                     STORE_NOT_FOUND);

    /* One session.updated per write that landed, by the Sandbox, none for the refused ones. */
    struct store_event *ev;
    size_t n, by_sandbox = 0;
    assert_int_equal(store_event_list(st, a.id, s.id, 0, 100, &ev, &n), STORE_OK);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].kind, "session.updated") != 0 || strcmp(ev[i].actor, "sandbox:sbx_x") != 0)
            continue;
        by_sandbox++;
        assert_string_equal(ev[i].request_id, "req_cb");
        assert_string_equal(ev[i].object_id, s.id);
        assert_json(ev[i].data_json, "{\"fields\":[\"metadata\"]}");
    }
    store_event_list_free(ev, n);
    assert_int_equal(by_sandbox, 2);
    store_session_clear(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_migrations_applied, setup, teardown),
        cmocka_unit_test_setup_teardown(test_app_crud_and_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_app_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_app_env_refused_with_secrets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_app_list_pagination, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keys_revoke, setup, teardown),
        cmocka_unit_test_setup_teardown(test_enqueue_order_and_idempotency, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_commit_concurrent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_commit_batches, setup, teardown),
        cmocka_unit_test(test_ordered_ids),
        cmocka_unit_test_setup_teardown(test_enqueue_async_one_caller_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_failure_is_isolated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_row_failing_after_its_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_enqueue_order_within_sessions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cross_app_scoping, setup, teardown),
        cmocka_unit_test_setup_teardown(test_session_names_and_workspaces, setup, teardown),
        cmocka_unit_test_setup_teardown(test_settings_and_workspace_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sandbox_stop_and_pool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sandbox_callback_token, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sandbox_callbacks_add, setup, teardown),
        cmocka_unit_test_setup_teardown(test_session_metadata_merge, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
