/*
 * test_sbxctl.c: sbxctl and the auditor views against a live database.
 *
 * The fixture builds a real SQLite file through the real store: store_sqlite_open applies the
 * migrations; Apps, keys, Sessions, messages, revocation and deletion go through the gateway-side
 * store functions, and the workers' part (registration, the warm pool, queue claims, warm and
 * cold activations, replies, a failed delivery, keep-alive expiry and termination with usage)
 * through the worker-side ones, in the order sbx-worker calls them. Only the breaches that
 * test_violations_are_flagged needs are written by hand with SQL. The store stays open while
 * sbxctl runs, as sbx would be. Every sbxctl run is a real process (build/tools/sbxctl) whose
 * stdout, stderr and exit code are checked, in human and --json form.
 *
 * The scenario: App "audit-app"; key "ci" (kept) and key "laptop" (revoked); Session "alice" sends
 * m1, m2 (served by warm Sandbox sbA, which expires), then m3 (served by cold Sandbox sbB, whose
 * agent crashes: m3 fails); Session "bob" sends m4 (served by sbC, terminated when bob is
 * deleted); sbD waits warm in the pool.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "clock.h"
#include "host/firewall.h"
#include "store.h"
#include "timefmt.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct fixture {
    char dir[256];
    char db[512];
    struct store *st;
    sqlite3 *raw; /* the worker's side, written with SQL */
    char app[STORE_ID_LEN], key_ci[STORE_ID_LEN], key_laptop[STORE_ID_LEN];
    char alice[STORE_ID_LEN], bob[STORE_ID_LEN];
    char m1[STORE_ID_LEN], m2[STORE_ID_LEN], m3[STORE_ID_LEN], m4[STORE_ID_LEN];
    char sbA[STORE_ID_LEN], sbB[STORE_ID_LEN], sbC[STORE_ID_LEN], sbD[STORE_ID_LEN];
    int64_t t_end; /* before the last step, the pool refill */
};

/* ---- running sbxctl ---- */

struct run {
    int exit_code;
    char *out;
    char *err;
};

static char *slurp_fd(int fd)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    ssize_t r;
    lseek(fd, 0, SEEK_SET);
    while ((r = read(fd, buf + n, cap - n - 1)) > 0) {
        n += (size_t)r;
        if (n + 1 >= cap)
            buf = realloc(buf, cap *= 2);
    }
    buf[n] = '\0';
    return buf;
}

/* Runs sbxctl --db <fixture db> args... and waits for it. */
static struct run ctl_run(const struct fixture *f, const char *first, ...)
{
    const char *argv[40];
    int argc = 0;
    va_list ap;
    argv[argc++] = SBXCTL_BIN;
    argv[argc++] = "--db";
    argv[argc++] = f->db;
    va_start(ap, first);
    for (const char *a = first; a && argc < 39; a = va_arg(ap, const char *))
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;

    char outp[] = "/tmp/sbxctl-out-XXXXXX", errp[] = "/tmp/sbxctl-err-XXXXXX";
    int out = mkstemp(outp), err = mkstemp(errp);
    assert_true(out >= 0 && err >= 0);
    unlink(outp);
    unlink(errp);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(out, 1);
        dup2(err, 2);
        execv(SBXCTL_BIN, (char *const *)argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    struct run r = {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp_fd(out),
                    slurp_fd(err)};
    close(out);
    close(err);
    return r;
}

static void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
}

/* Parses r's stdout as JSON, failing the test (with sbxctl's output) when it is not. */
static json_t *run_json(struct run *r, int want_exit)
{
    if (r->exit_code != want_exit)
        fprintf(stderr, "sbxctl exited %d (want %d)\nstdout:\n%s\nstderr:\n%s\n", r->exit_code,
                want_exit, r->out, r->err);
    assert_int_equal(r->exit_code, want_exit);
    json_error_t e;
    json_t *v = json_loads(r->out, 0, &e);
    if (!v)
        fprintf(stderr, "not JSON (%s):\n%s\n", e.text, r->out);
    assert_non_null(v);
    return v;
}

static const char *str(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static json_int_t num(json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

/* The element of array whose key equals value, or NULL. */
static json_t *find_row(json_t *array, const char *key, const char *value)
{
    size_t i;
    json_t *o;
    json_array_foreach(array, i, o)
    {
        const char *v = str(o, key);
        if (v && strcmp(v, value) == 0)
            return o;
    }
    return NULL;
}

/* ---- the scenario ---- */

static void sql(sqlite3 *db, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *q = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    char *msg = NULL;
    if (sqlite3_exec(db, q, NULL, NULL, &msg) != SQLITE_OK)
        fprintf(stderr, "SQL failed: %s\n%s\n", msg, q);
    assert_null(msg);
    sqlite3_free(q);
}

/* A strictly increasing clock, so that the rows written by hand have a definite order. */
static int64_t tick(void)
{
    static int64_t last;
    int64_t t = clock_wall_ms();
    last = t > last ? t : last + 1;
    return last;
}

static void worker_event(struct fixture *f, const char *kind, const char *type, const char *id,
                         const char *session, const char *data)
{
    sql(f->raw,
        "INSERT INTO events (at, actor, kind, object_type, object_id, app_id, session_id, "
        "request_id, data) VALUES (%lld, 'worker:wrk_test', %Q, %Q, %Q, %Q, %Q, NULL, %Q)",
        (long long)tick(), kind, type, id, session ? f->app : NULL, session, data);
}

static void enqueue(struct fixture *f, const char *session, const char *body, const char *req,
                    char *id_out)
{
    struct store_ctx ctx = {"key:x", req};
    char actor[64];
    snprintf(actor, sizeof actor, "key:%s", f->key_ci);
    ctx.actor = actor;
    struct store_enqueue e = {f->app, session, body, NULL, NULL};
    struct store_message m = {0};
    bool replayed = false;
    assert_int_equal(store_message_enqueue(f->st, &ctx, &e, &m, &replayed), STORE_OK);
    snprintf(id_out, STORE_ID_LEN, "%s", m.id);
    store_message_clear(&m);
}

/* ---- the worker's side, through the worker-side store functions, in the order sbx-worker
 * calls them ---- */

static const struct store_ctx worker_ctx = {"worker:wrk_test", NULL};
static const struct store_shape shape = {"process", "default", 1, 256};
static const struct store_usage usage = {12000, 3145728};

/* A Sandbox boots; a pool Sandbox becomes warm, a cold one stays booting until assigned. */
static void sandbox_boot(struct fixture *f, char *id_out, bool cold)
{
    struct store_sandbox sb = {0};
    assert_int_equal(store_sandbox_insert(f->st, &worker_ctx, "wrk_test", &shape, cold, &sb),
                     STORE_OK);
    snprintf(sb.jail_dir, sizeof sb.jail_dir, "/nonexistent/jail/%s", sb.id);
    snprintf(sb.cgroup_path, sizeof sb.cgroup_path, "/nonexistent/cgroup/%s", sb.id);
    sb.pid = 4242;
    assert_int_equal(store_sandbox_set_runtime(f->st, &sb), STORE_OK);
    if (!cold)
        assert_int_equal(store_sandbox_mark_warm(f->st, &worker_ctx, sb.id, 41), STORE_OK);
    snprintf(id_out, STORE_ID_LEN, "%s", sb.id);
}

/* Claims the next message, which must be want_msg. */
static void claim_message(struct fixture *f, const char *want_msg)
{
    struct store_delivery d = {0};
    assert_int_equal(store_queue_claim_placed(f->st, &worker_ctx, "wrk_test", 30000, NULL, &d),
                     STORE_OK);
    assert_string_equal(d.message.id, want_msg);
    store_delivery_clear(&d);
}

/* Activates session with a warm Sandbox of the pool (want: which), or with a cold one. */
static void activate(struct fixture *f, const char *session, const char *want_warm, char *cold_out)
{
    struct store_sandbox sb = {0};
    enum store_status rc =
        store_sandbox_claim_warm(f->st, &worker_ctx, "wrk_test", &shape, f->app, 0, session, &sb);
    if (want_warm) {
        assert_int_equal(rc, STORE_OK);
        assert_string_equal(sb.id, want_warm);
    } else {
        assert_int_equal(rc, STORE_EMPTY);
        sandbox_boot(f, cold_out, true);
        snprintf(sb.id, sizeof sb.id, "%s", cold_out);
        assert_int_equal(store_sandbox_assign(f->st, &worker_ctx, sb.id, f->app, session),
                         STORE_OK);
    }
    assert_int_equal(store_sandbox_mark_running(f->st, &worker_ctx, sb.id, session), STORE_OK);
}

static void complete(struct fixture *f, const char *msg, const char *session, const char *sandbox,
                     const char *reply)
{
    assert_int_equal(store_queue_complete(f->st, &worker_ctx, msg, "wrk_test", sandbox, reply),
                     STORE_OK);
    assert_int_equal(store_session_touch(f->st, session, clock_wall_ms() + 60000), STORE_OK);
}

static void sandbox_end(struct fixture *f, const char *id, bool failed, const char *reason)
{
    assert_int_equal(store_sandbox_mark_stopping(f->st, &worker_ctx, id, reason), STORE_OK);
    assert_int_equal(store_sandbox_finish(f->st, &worker_ctx, id, failed, NULL, &usage), STORE_OK);
}

static void build_scenario(struct fixture *f)
{
    struct store_ctx admin = {"admin", "req_admin_1"};
    struct store_app app = {0};
    struct store_key k = {0};
    struct store_session s = {0};
    uint8_t hash1[32] = {1}, hash2[32] = {2};
    bool created, final = false;

    snprintf(app.name, sizeof app.name, "audit-app");
    app.keep_alive_seconds = 60;
    app.vcpu_count = 1;
    app.mem_size_mib = 256;
    snprintf(app.driver, sizeof app.driver, "process");
    snprintf(app.image, sizeof app.image, "default");
    app.max_attempts = 1;
    app.command_json = strdup("[\"/usr/bin/sbx-echo-agent\"]");
    assert_int_equal(store_app_create(f->st, &admin, &app), STORE_OK);
    snprintf(f->app, sizeof f->app, "%s", app.id);
    store_app_clear(&app);

    assert_int_equal(store_key_create(f->st, &admin, f->app, "ci", "sbx_AAAAAA", hash1, &k),
                     STORE_OK);
    snprintf(f->key_ci, sizeof f->key_ci, "%s", k.id);
    admin.request_id = "req_admin_2";
    assert_int_equal(store_key_create(f->st, &admin, f->app, "laptop", "sbx_BBBBBB", hash2, &k),
                     STORE_OK);
    snprintf(f->key_laptop, sizeof f->key_laptop, "%s", k.id);
    admin.request_id = "req_revoke";
    assert_int_equal(store_key_revoke(f->st, &admin, f->app, f->key_laptop), STORE_OK);

    char actor[64];
    snprintf(actor, sizeof actor, "key:%s", f->key_ci);
    struct store_ctx key = {actor, "req_ses_alice"};
    assert_int_equal(
        store_session_create(f->st, &key, f->app, "alice", 0, NULL, NULL, &s, &created), STORE_OK);
    snprintf(f->alice, sizeof f->alice, "%s", s.id);
    store_session_clear(&s);
    key.request_id = "req_ses_bob";
    assert_int_equal(store_session_create(f->st, &key, f->app, "bob", 0, NULL, NULL, &s, &created),
                     STORE_OK);
    snprintf(f->bob, sizeof f->bob, "%s", s.id);
    store_session_clear(&s);

    /* The worker registers and fills its pool. */
    assert_int_equal(store_worker_register(f->st, "wrk_test", "localhost", getpid()), STORE_OK);
    sandbox_boot(f, f->sbA, false);
    sandbox_boot(f, f->sbC, false);

    /* alice: m1 and m2 on the warm sbA, which then expires. */
    enqueue(f, f->alice, "{\"n\":1}", "req_m1", f->m1);
    enqueue(f, f->alice, "{\"n\":2}", "req_m2", f->m2);
    claim_message(f, f->m1);
    activate(f, f->alice, f->sbA, NULL);
    complete(f, f->m1, f->alice, f->sbA, "{\"echo\":{\"n\":1}}");
    claim_message(f, f->m2);
    complete(f, f->m2, f->alice, f->sbA, "{\"echo\":{\"n\":2}}");
    /* Its agent called back three times, the last at 2026-12-06T08:30:00Z. */
    struct store_callback_count calls = {.calls = 3, .last_at = 1796545800000};
    snprintf(calls.sandbox_id, sizeof calls.sandbox_id, "%s", f->sbA);
    assert_int_equal(store_sandbox_callbacks_add(f->st, &calls, 1, "", 0), STORE_OK);
    sandbox_end(f, f->sbA, false, "keep-alive expired");

    /* bob: m4 on the warm sbC. */
    enqueue(f, f->bob, "{\"n\":4}", "req_m4", f->m4);
    claim_message(f, f->m4);
    activate(f, f->bob, f->sbC, NULL);
    complete(f, f->m4, f->bob, f->sbC, "{\"echo\":{\"n\":4}}");

    /* alice again: the pool is empty, so a cold sbB; its agent crashes and m3 fails. */
    enqueue(f, f->alice, "{\"crash\":true}", "req_m3", f->m3);
    claim_message(f, f->m3);
    activate(f, f->alice, NULL, f->sbB);
    assert_int_equal(store_queue_fail(f->st, &worker_ctx, f->m3, "wrk_test", f->sbB,
                                      "agent exited with status 3", 0, &final),
                     STORE_OK);
    assert_true(final);
    sandbox_end(f, f->sbB, true, "agent crashed");

    /* bob is deleted; his worker terminates his Sandbox. */
    key.request_id = "req_del_bob";
    assert_int_equal(store_session_delete(f->st, &key, f->app, f->bob), STORE_OK);
    sandbox_end(f, f->sbC, false, "session deleted");

    /* The pool refills, strictly after t_end. */
    usleep(2000);
    f->t_end = clock_wall_ms();
    usleep(2000);
    sandbox_boot(f, f->sbD, false);
}

static int setup(void **state)
{
    static struct fixture f;
    char err[512];
    memset(&f, 0, sizeof f);
    snprintf(f.dir, sizeof f.dir, "/tmp/sbx-it-sbxctl-XXXXXX");
    assert_non_null(mkdtemp(f.dir));
    snprintf(f.db, sizeof f.db, "%s/sbx.db", f.dir);
    f.st = store_sqlite_open(f.db, 5000, "FULL", err, sizeof err);
    if (!f.st)
        fprintf(stderr, "store: %s\n", err);
    assert_non_null(f.st);
    assert_int_equal(sqlite3_open(f.db, &f.raw), SQLITE_OK);
    sqlite3_busy_timeout(f.raw, 5000);
    build_scenario(&f);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    char cmd[400];
    sqlite3_close(f->raw);
    store_close(f->st);
    /* SBX_TEST_KEEP=1 keeps the scenario's database to look at with sbxctl or sqlite3. */
    if (getenv("SBX_TEST_KEEP")) {
        fprintf(stderr, "kept %s\n", f->db);
        return 0;
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->dir);
    return 0;
}

/* ---- the subcommands ---- */

static void test_sessions(void **state)
{
    struct fixture *f = *state;
    struct run r = ctl_run(f, "sessions", "--json", NULL);
    json_t *rows = run_json(&r, 0);
    /* bob is deleted: hidden by default, like the API does. */
    assert_int_equal(json_array_size(rows), 1);
    json_t *alice = find_row(rows, "id", f->alice);
    assert_non_null(alice);
    assert_string_equal(str(alice, "state"), "idle");
    assert_string_equal(str(alice, "name"), "alice");
    assert_string_equal(str(alice, "app_name"), "audit-app");
    assert_int_equal(num(alice, "activation_count"), 2);
    assert_int_equal(num(alice, "messages"), 3);
    assert_int_equal(num(alice, "failed"), 1);
    assert_int_equal(num(alice, "cpu_usec"), 24000);
    json_decref(rows);
    run_free(&r);

    r = ctl_run(f, "sessions", "--all", "--json", NULL);
    rows = run_json(&r, 0);
    assert_int_equal(json_array_size(rows), 2);
    assert_string_equal(str(find_row(rows, "id", f->bob), "state"), "deleted");
    json_decref(rows);
    run_free(&r);

    r = ctl_run(f, "sessions", "--all", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "ID"));
    assert_non_null(strstr(r.out, "ACTIVATIONS"));
    assert_non_null(strstr(r.out, f->alice));
    assert_non_null(strstr(r.out, f->bob));
    run_free(&r);
}

/* `session ID` answers "what happened to Session X, which Sandboxes served it, why did they end".
 */
static void test_session_timeline(void **state)
{
    struct fixture *f = *state;
    struct run r = ctl_run(f, "session", f->alice, "--json", NULL);
    json_t *v = run_json(&r, 0);
    assert_string_equal(str(json_object_get(v, "session"), "id"), f->alice);

    json_t *msgs = json_object_get(v, "messages");
    assert_int_equal(json_array_size(msgs), 3);
    assert_string_equal(str(find_row(msgs, "message_id", f->m1), "sandbox_id"), f->sbA);
    assert_string_equal(str(find_row(msgs, "message_id", f->m2), "sandbox_id"), f->sbA);
    json_t *m3 = find_row(msgs, "message_id", f->m3);
    assert_string_equal(str(m3, "sandbox_id"), f->sbB);
    assert_string_equal(str(m3, "state"), "failed");
    assert_string_equal(str(m3, "error"), "agent exited with status 3");
    /* Bodies and replies come back as JSON, not as strings. */
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(find_row(msgs, "message_id", f->m1), "body"), "n")),
                     1);

    json_t *sbs = json_object_get(v, "sandboxes");
    assert_int_equal(json_array_size(sbs), 2);
    json_t *a = find_row(sbs, "sandbox_id", f->sbA), *b = find_row(sbs, "sandbox_id", f->sbB);
    assert_non_null(a);
    assert_non_null(b);
    assert_string_equal(str(a, "termination_reason"), "keep-alive expired");
    assert_string_equal(str(a, "activation"), "warm");
    assert_int_equal(num(a, "messages_served"), 2);
    assert_string_equal(str(b, "termination_reason"), "agent crashed");
    assert_string_equal(str(b, "state"), "failed");
    assert_string_equal(str(b, "activation"), "cold");

    /* The timeline is in time order and holds the Session's whole story. */
    json_t *tl = json_object_get(v, "timeline");
    size_t i;
    json_t *e;
    json_int_t prev = 0;
    int saw_created = 0, saw_queued = 0, saw_claim_a = 0, saw_end_b = 0;
    json_array_foreach(tl, i, e)
    {
        assert_true(num(e, "at") >= prev);
        prev = num(e, "at");
        /* at_utc is at as ISO 8601 UTC with milliseconds. */
        char want[32];
        time_format_ms(num(e, "at"), want, sizeof want);
        assert_string_equal(str(e, "at_utc"), want);
        const char *kind = str(e, "kind");
        if (strcmp(kind, "session.created") == 0) {
            saw_created = 1;
            assert_string_equal(str(e, "request_id"), "req_ses_alice");
        }
        if (strcmp(kind, "message.queued") == 0)
            saw_queued++;
        if (strcmp(kind, "sandbox claimed") == 0 && strcmp(str(e, "object_id"), f->sbA) == 0)
            saw_claim_a = 1;
        if (strcmp(kind, "sandbox.failed") == 0) {
            saw_end_b = 1;
            assert_non_null(strstr(str(e, "detail"), "agent crashed"));
        }
        /* Nothing of bob's leaks into alice's timeline. */
        assert_true(!str(e, "object_id") || strcmp(str(e, "object_id"), f->sbC) != 0);
    }
    assert_true(saw_created && saw_claim_a && saw_end_b);
    assert_int_equal(saw_queued, 3);
    json_decref(v);
    run_free(&r);

    /* By name, in human form. */
    r = ctl_run(f, "session", "alice", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "Sandboxes that served it (2)"));
    assert_non_null(strstr(r.out, "keep-alive expired"));
    assert_non_null(strstr(r.out, "Timeline"));
    run_free(&r);

    r = ctl_run(f, "session", "ses_doesnotexist", NULL);
    assert_int_equal(r.exit_code, 1);
    assert_non_null(strstr(r.err, "no Session"));
    run_free(&r);
}

static void test_sandboxes(void **state)
{
    struct fixture *f = *state;
    struct run r = ctl_run(f, "sandboxes", "--json", NULL);
    json_t *rows = run_json(&r, 0);
    assert_int_equal(json_array_size(rows), 4);
    assert_string_equal(str(find_row(rows, "sandbox_id", f->sbC), "termination_reason"),
                        "session deleted");
    assert_string_equal(str(find_row(rows, "sandbox_id", f->sbC), "session_id"), f->bob);
    json_t *d = find_row(rows, "sandbox_id", f->sbD);
    assert_string_equal(str(d, "state"), "warm");
    assert_true(json_is_null(json_object_get(d, "session_id")));
    assert_int_equal(num(find_row(rows, "sandbox_id", f->sbA), "cpu_usec"), 12000);
    assert_int_equal(num(find_row(rows, "sandbox_id", f->sbA), "callback_calls"), 3);
    assert_int_equal(num(d, "callback_calls"), 0);
    assert_true(json_is_null(json_object_get(d, "callback_last_utc")));
    json_decref(rows);
    run_free(&r);

    r = ctl_run(f, "sandboxes", "--live", "--json", NULL);
    rows = run_json(&r, 0);
    assert_int_equal(json_array_size(rows), 1);
    assert_string_equal(str(json_array_get(rows, 0), "sandbox_id"), f->sbD);
    json_decref(rows);
    run_free(&r);

    r = ctl_run(f, "sandboxes", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "REASON"));
    assert_non_null(strstr(r.out, "agent crashed"));
    assert_non_null(strstr(r.out, "CALLBACKS"));
    run_free(&r);

    r = ctl_run(f, "sandbox", f->sbA, "--json", NULL);
    json_t *v = run_json(&r, 0);
    assert_string_equal(str(json_object_get(v, "sandbox"), "session_id"), f->alice);
    assert_int_equal(num(json_object_get(v, "sandbox"), "pid"), 4242);
    assert_int_equal(num(json_object_get(v, "sandbox"), "callback_calls"), 3);
    assert_string_equal(str(json_object_get(v, "sandbox"), "callback_last_utc"),
                        "2026-12-06T08:30:00.000Z");
    assert_int_equal(json_array_size(json_object_get(v, "messages")), 2);
    assert_int_equal(json_array_size(json_object_get(v, "violations")), 0);
    assert_true(json_array_size(json_object_get(v, "events")) >= 5);
    json_decref(v);
    run_free(&r);

    r = ctl_run(f, "sandbox", f->sbA, NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "callbacks:"));
    const char *last = strstr(r.out, "last callback:");
    assert_non_null(last);
    assert_true(strcspn(last, "\n") > strcspn(last, "2") &&
                strncmp(last + strcspn(last, "2"), "2026-12-06T08:30:00.000Z\n", 25) == 0);
    run_free(&r);

    r = ctl_run(f, "sandbox", "sbx_nope", NULL);
    assert_int_equal(r.exit_code, 1);
    run_free(&r);
}

static void test_messages(void **state)
{
    struct fixture *f = *state;
    struct run r = ctl_run(f, "messages", "--session", f->alice, "--json", NULL);
    json_t *rows = run_json(&r, 0);
    assert_int_equal(json_array_size(rows), 3);
    assert_int_equal(num(json_array_get(rows, 0), "seq"), 1);
    assert_int_equal(num(json_array_get(rows, 2), "seq"), 3);
    assert_string_equal(str(json_array_get(rows, 0), "request_id"), "req_m1");
    assert_int_equal(
        json_integer_value(json_object_get(
            json_object_get(json_object_get(json_array_get(rows, 0), "reply"), "echo"), "n")),
        1);
    json_decref(rows);
    run_free(&r);

    r = ctl_run(f, "messages", "--state", "failed", "--json", NULL);
    rows = run_json(&r, 0);
    assert_int_equal(json_array_size(rows), 1);
    assert_string_equal(str(json_array_get(rows, 0), "message_id"), f->m3);
    json_decref(rows);
    run_free(&r);

    r = ctl_run(f, "messages", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, f->m4));
    assert_non_null(strstr(r.out, "agent exited with status 3"));
    run_free(&r);
}

static void test_events(void **state)
{
    struct fixture *f = *state;
    struct run r = ctl_run(f, "events", "--session", f->bob, "--json", NULL);
    json_t *rows = run_json(&r, 0);
    size_t i;
    json_t *e;
    json_int_t prev = 0;
    int deleted = 0;
    json_array_foreach(rows, i, e)
    {
        assert_string_equal(str(e, "session_id"), f->bob);
        assert_true(num(e, "id") > prev);
        prev = num(e, "id");
        if (strcmp(str(e, "kind"), "session.deleted") == 0) {
            deleted = 1;
            assert_string_equal(str(e, "request_id"), "req_del_bob");
        }
    }
    assert_true(deleted);
    json_decref(rows);
    run_free(&r);

    /* --since in the future: nothing; --since a time: only what came after. */
    r = ctl_run(f, "events", "--since", "2999-01-01T00:00:00Z", "--json", NULL);
    rows = run_json(&r, 0);
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);
    run_free(&r);

    char since[40];
    snprintf(since, sizeof since, "%lld", (long long)f->t_end);
    r = ctl_run(f, "events", "--since", since, "--json", NULL);
    rows = run_json(&r, 0);
    assert_int_equal(json_array_size(rows), 2);
    assert_string_equal(str(json_array_get(rows, 0), "kind"), "sandbox.booting");
    assert_string_equal(str(json_array_get(rows, 1), "kind"), "sandbox.warm");
    json_array_foreach(rows, i, e) assert_string_equal(str(e, "object_id"), f->sbD);
    json_decref(rows);
    run_free(&r);

    r = ctl_run(f, "events", "--kind", "key", "--json", NULL);
    rows = run_json(&r, 0);
    assert_int_equal(json_array_size(rows), 3); /* two creations, one revocation */
    json_decref(rows);
    run_free(&r);

    r = ctl_run(f, "events", "--since", "not-a-time", NULL);
    assert_int_equal(r.exit_code, 2);
    run_free(&r);
}

/* --follow prints events committed after it started, until SIGTERM. */
static void test_events_follow(void **state)
{
    struct fixture *f = *state;
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], 1);
        close(pipefd[0]);
        execl(SBXCTL_BIN, SBXCTL_BIN, "--db", f->db, "events", "--follow", "--json", "--session",
              f->alice, "--limit", "1", NULL);
        _exit(127);
    }
    close(pipefd[1]);
    FILE *in = fdopen(pipefd[0], "r");
    char line[8192];
    /* The one newest existing event first. */
    assert_non_null(fgets(line, sizeof line, in));
    json_t *first = json_loads(line, 0, NULL);
    assert_non_null(first);
    json_decref(first);

    /* A change made through the store while sbxctl follows. */
    struct store_ctx ctx = {"admin", "req_follow"};
    struct store_session_patch patch = {.metadata_json = "{\"tier\":\"gold\"}"};
    struct store_session out = {0};
    assert_int_equal(store_session_update(f->st, &ctx, f->app, f->alice, &patch, &out), STORE_OK);
    store_session_clear(&out);

    assert_non_null(fgets(line, sizeof line, in));
    json_t *e = json_loads(line, 0, NULL);
    assert_non_null(e);
    assert_string_equal(str(e, "kind"), "session.updated");
    assert_string_equal(str(e, "request_id"), "req_follow");
    json_decref(e);

    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    fclose(in);
}

static void test_pool(void **state)
{
    struct fixture *f = *state;
    struct run r = ctl_run(f, "pool", "--json", NULL);
    json_t *rows = run_json(&r, 0);
    assert_int_equal(json_array_size(rows), 1);
    json_t *p = json_array_get(rows, 0);
    assert_string_equal(str(p, "driver"), "process");
    assert_int_equal(num(p, "warm"), 1);
    assert_int_equal(num(p, "in_use"), 0);
    assert_int_equal(num(p, "cold_activations"), 1);
    assert_int_equal(num(p, "warm_activations"), 2);
    /* The pool Sandboxes booted in 41 ms; the cold one's boot time is what the store measured
     * from its creation to its assignment. */
    assert_int_equal(num(p, "boot_ms_max"), 41);
    assert_true(num(p, "boot_ms_avg") > 0 && num(p, "boot_ms_avg") <= 41);
    json_decref(rows);
    run_free(&r);
}

static void test_keys(void **state)
{
    struct fixture *f = *state;
    struct run r = ctl_run(f, "keys", "--json", NULL);
    json_t *rows = run_json(&r, 0);
    assert_int_equal(json_array_size(rows), 2);
    assert_string_equal(str(find_row(rows, "id", f->key_ci), "status"), "active");
    assert_string_equal(str(find_row(rows, "id", f->key_laptop), "status"), "revoked");
    assert_null(strstr(r.out, "hash"));
    json_decref(rows);
    run_free(&r);

    r = ctl_run(f, "keys", "--history", "--json", NULL);
    rows = run_json(&r, 0);
    assert_int_equal(json_array_size(rows), 3);
    size_t i;
    json_t *e;
    int revoked = 0;
    json_array_foreach(rows, i, e)
    {
        assert_string_equal(str(e, "actor"), "admin");
        if (strcmp(str(e, "action"), "revoked") == 0) {
            revoked++;
            assert_string_equal(str(e, "key_id"), f->key_laptop);
            assert_string_equal(str(e, "request_id"), "req_revoke");
        }
    }
    assert_int_equal(revoked, 1);
    json_decref(rows);
    run_free(&r);

    r = ctl_run(f, "keys", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "sbx_BBBBBB"));
    assert_non_null(strstr(r.out, "revoked"));
    run_free(&r);
}

static void test_help_and_usage(void **state)
{
    struct fixture *f = *state;
    static const char *const cmds[] = {"apps",    "sessions", "session", "sandboxes",
                                       "sandbox", "messages", "events",  "pool",
                                       "keys",    "db",       "firewall"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        struct run r = ctl_run(f, cmds[i], "--help", NULL);
        assert_int_equal(r.exit_code, 0);
        assert_non_null(strstr(r.out, "usage: sbxctl"));
        run_free(&r);
    }
    struct run r = ctl_run(f, "sessions", "--bogus", NULL);
    assert_int_equal(r.exit_code, 2);
    run_free(&r);
    r = ctl_run(f, "frobnicate", NULL);
    assert_int_equal(r.exit_code, 2);
    run_free(&r);
    r = ctl_run(f, "session", NULL);
    assert_int_equal(r.exit_code, 2);
    run_free(&r);

    /* A database that does not exist: an error, not an empty answer (and nothing created). */
    const char *argv[] = {SBXCTL_BIN, "--db", "/tmp/sbx-no-such-dir/sbx.db", "sessions", NULL};
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        execv(SBXCTL_BIN, (char *const *)argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    assert_int_equal(WEXITSTATUS(status), 3);
    assert_int_not_equal(access("/tmp/sbx-no-such-dir/sbx.db", F_OK), 0);
}

/* ---- the auditor views, as an auditor would query them ---- */

static json_t *view_rows(struct fixture *f, const char *q)
{
    sqlite3_stmt *s;
    json_t *rows = json_array();
    if (sqlite3_prepare_v2(f->raw, q, -1, &s, NULL) != SQLITE_OK)
        fprintf(stderr, "%s: %s\n", q, sqlite3_errmsg(f->raw));
    assert_non_null(s);
    while (sqlite3_step(s) == SQLITE_ROW) {
        json_t *row = json_object();
        for (int c = 0; c < sqlite3_column_count(s); c++) {
            const char *t = (const char *)sqlite3_column_text(s, c);
            json_object_set_new(row, sqlite3_column_name(s, c), t ? json_string(t) : json_null());
        }
        json_array_append_new(rows, row);
    }
    sqlite3_finalize(s);
    return rows;
}

static void test_views(void **state)
{
    struct fixture *f = *state;
    char q[512];

    snprintf(q, sizeof q,
             "SELECT message_id, sandbox_id, served_by_own_session FROM message_deliveries "
             "WHERE session_id = '%s' ORDER BY seq",
             f->alice);
    json_t *rows = view_rows(f, q);
    assert_int_equal(json_array_size(rows), 3);
    assert_string_equal(str(json_array_get(rows, 0), "sandbox_id"), f->sbA);
    assert_string_equal(str(json_array_get(rows, 2), "sandbox_id"), f->sbB);
    assert_string_equal(str(json_array_get(rows, 0), "served_by_own_session"), "1");
    json_decref(rows);

    rows = view_rows(f, "SELECT sandbox_id, session_id, activation, termination_reason, "
                        "lifetime_ms, served_ms, terminated_utc FROM sandbox_lifetimes "
                        "ORDER BY created_at");
    assert_int_equal(json_array_size(rows), 4);
    json_t *b = find_row(rows, "sandbox_id", f->sbB);
    assert_string_equal(str(b, "activation"), "cold");
    assert_string_equal(str(b, "termination_reason"), "agent crashed");
    assert_true(atoll(str(b, "lifetime_ms")) >= 0);
    assert_int_equal(strlen(str(b, "terminated_utc")), 24);
    assert_true(
        json_is_null(json_object_get(find_row(rows, "sandbox_id", f->sbD), "terminated_utc")));
    json_decref(rows);

    rows =
        view_rows(f, "SELECT action, key_id, key_name, actor FROM key_audit ORDER BY at, action");
    assert_int_equal(json_array_size(rows), 3);
    assert_string_equal(str(json_array_get(rows, 2), "action"), "revoked");
    assert_string_equal(str(json_array_get(rows, 2), "key_name"), "laptop");
    json_decref(rows);

    /* The one query of schema/README.md: what happened to a Session on a given day. */
    char day[16], want[32];
    time_format_ms(f->t_end, want, sizeof want);
    snprintf(day, sizeof day, "%.10s", want);
    snprintf(q, sizeof q,
             "SELECT at_utc, source, kind, object_id, actor, detail FROM session_timeline "
             "WHERE session_id = '%s' AND at_utc >= '%s' AND at_utc < date('%s', '+1 day') "
             "ORDER BY at, ord",
             f->alice, day, day);
    rows = view_rows(f, q);
    assert_true(json_array_size(rows) >= 15);
    int ended = 0;
    size_t i;
    json_t *e;
    json_array_foreach(rows, i, e)
    {
        if (strcmp(str(e, "kind"), "sandbox terminated") == 0) {
            ended = 1;
            assert_non_null(strstr(str(e, "detail"), "keep-alive expired"));
        }
    }
    assert_true(ended);
    json_decref(rows);

    rows = view_rows(f, "SELECT * FROM sandbox_reuse_violations");
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);
    rows = view_rows(f, "SELECT * FROM orphan_rows");
    if (json_array_size(rows))
        fprintf(stderr, "%s\n", json_dumps(rows, 0));
    assert_int_equal(json_array_size(rows), 0);
    json_decref(rows);
}

static void test_db_check_clean(void **state)
{
    struct fixture *f = *state;
    struct run r = ctl_run(f, "db", "check", "--json", "--stale-after", "3600", NULL);
    json_t *v = run_json(&r, 0);
    assert_true(json_is_true(json_object_get(v, "ok")));
    assert_int_equal(num(v, "schema_version"), store_schema_version());
    assert_int_equal(num(v, "expected_schema_version"), store_schema_version());
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(v, "checks"), i, c)
        assert_string_equal(str(c, "status"), "ok");
    json_decref(v);
    run_free(&r);

    r = ctl_run(f, "db", "check", "--stale-after", "3600", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "integrity"));
    assert_non_null(strstr(r.out, "OK"));
    run_free(&r);

    /* A worker silent for longer than allowed that still owns a live Sandbox (sbD): its Sandbox
     * is orphaned until another worker adopts it. */
    usleep(2000);
    r = ctl_run(f, "db", "check", "--json", "--stale-after", "0", NULL);
    v = run_json(&r, 1);
    json_t *w = find_row(json_object_get(v, "checks"), "name", "workers");
    assert_string_equal(str(w, "status"), "fail");
    assert_string_equal(str(json_array_get(json_object_get(w, "rows"), 0), "worker_id"),
                        "wrk_test");
    assert_int_equal(num(json_array_get(json_object_get(w, "rows"), 0), "live_sandboxes"), 1);
    json_decref(v);
    run_free(&r);
}

/* Breaches written by hand are flagged by the views and by `sbxctl db check` (exit 1). Runs on a
 * copy so the other tests keep the clean scenario. */
static void test_violations_are_flagged(void **state)
{
    struct fixture *f = *state;
    struct fixture copy = *f;
    char path[400];
    snprintf(path, sizeof path, "%s/tampered.db", f->dir);
    snprintf(copy.db, sizeof copy.db, "%s", path);
    struct run r = ctl_run(f, "db", "backup", path, NULL);
    assert_int_equal(r.exit_code, 0);
    run_free(&r);
    assert_int_equal(sqlite3_open(path, &copy.raw), SQLITE_OK);

    /* Two Sessions, one Sandbox: a message of bob's recorded as served by alice's sbA. */
    sql(copy.raw, "UPDATE messages SET sandbox_id = %Q WHERE id = %Q", f->sbA, f->m4);
    /* Reuse after termination: sbB, failed, is claimed again and put back in the pool. */
    sql(copy.raw,
        "UPDATE sandboxes SET claimed_at = terminated_at + 5000 WHERE id = %Q;"
        "UPDATE sandboxes SET state = 'warm' WHERE id = %Q",
        f->sbB, f->sbC);
    worker_event(&copy, "sandbox.claimed", "sandbox", f->sbB, f->alice, NULL);

    json_t *rows = view_rows(&copy, "SELECT sandbox_id, violation, session_ids FROM "
                                    "sandbox_reuse_violations ORDER BY sandbox_id, violation");
    int two = 0, claimed_after = 0, used_after = 0, back_in_pool = 0, alive_after = 0;
    size_t i;
    json_t *v;
    json_array_foreach(rows, i, v)
    {
        const char *kind = str(v, "violation"), *sb = str(v, "sandbox_id");
        if (strcmp(kind, "served-two-sessions") == 0 && strcmp(sb, f->sbA) == 0) {
            two = 1;
            assert_non_null(strstr(str(v, "session_ids"), f->alice));
            assert_non_null(strstr(str(v, "session_ids"), f->bob));
        }
        claimed_after |= strcmp(kind, "claimed-after-termination") == 0 && !strcmp(sb, f->sbB);
        used_after |= strcmp(kind, "used-after-termination") == 0 && !strcmp(sb, f->sbB);
        back_in_pool |= strcmp(kind, "back-in-pool-after-use") == 0 && !strcmp(sb, f->sbC);
        alive_after |= strcmp(kind, "alive-after-termination") == 0 && !strcmp(sb, f->sbC);
    }
    assert_true(two && claimed_after && used_after && back_in_pool && alive_after);
    json_decref(rows);

    r = ctl_run(&copy, "db", "check", "--json", "--stale-after", "3600", NULL);
    json_t *out = run_json(&r, 1);
    assert_true(json_is_false(json_object_get(out, "ok")));
    json_t *reuse = find_row(json_object_get(out, "checks"), "name", "sandbox-reuse");
    assert_string_equal(str(reuse, "status"), "fail");
    assert_true(json_array_size(json_object_get(reuse, "rows")) >= 5);
    json_decref(out);
    run_free(&r);

    r = ctl_run(&copy, "db", "check", NULL);
    assert_int_equal(r.exit_code, 1);
    assert_non_null(strstr(r.out, "served-two-sessions"));
    assert_non_null(strstr(r.out, "FAILED"));
    run_free(&r);

    /* And `sandbox ID` shows the breach. */
    r = ctl_run(&copy, "sandbox", f->sbA, NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "INTEGRITY VIOLATIONS"));
    run_free(&r);

    /* An orphan: a live Sandbox of a worker that has stopped. */
    sql(copy.raw, "UPDATE workers SET stopped_at = %lld", (long long)tick());
    r = ctl_run(&copy, "db", "check", "--json", "--stale-after", "3600", NULL);
    out = run_json(&r, 1);
    json_t *orph = find_row(json_object_get(out, "checks"), "name", "orphans");
    assert_string_equal(str(orph, "status"), "fail");
    assert_non_null(
        find_row(json_object_get(orph, "rows"), "problem", "sandbox-of-stopped-worker"));
    json_decref(out);
    run_free(&r);
    sqlite3_close(copy.raw);
}

/* A writer that keeps committing while the backup runs. */
struct writer {
    const char *db;
    volatile int stop;
    long commits;
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    sqlite3 *db;
    if (sqlite3_open(w->db, &db) != SQLITE_OK)
        return NULL;
    sqlite3_busy_timeout(db, 5000);
    while (!w->stop) {
        if (sqlite3_exec(db,
                         "BEGIN IMMEDIATE; INSERT INTO events (at, actor, kind, object_type, "
                         "object_id) VALUES (1, 'gateway', 'test.write', 'app', 'app_x'); "
                         "INSERT INTO settings (key, value) VALUES ('backup-test', 'x') ON "
                         "CONFLICT (key) DO UPDATE SET value = value || 'x'; COMMIT",
                         NULL, NULL, NULL) == SQLITE_OK)
            w->commits++;
    }
    sqlite3_close(db);
    return NULL;
}

static void test_backup_while_writing(void **state)
{
    struct fixture *f = *state;
    char path[400], src[400];
    /* A database of its own, so the writer's rows do not change the other tests' scenario. */
    snprintf(src, sizeof src, "%s/busy.db", f->dir);
    struct fixture busy = *f;
    snprintf(busy.db, sizeof busy.db, "%s", src);
    struct run r = ctl_run(f, "db", "backup", src, NULL);
    assert_int_equal(r.exit_code, 0);
    run_free(&r);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(src, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);

    struct writer w = {src, 0, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, writer_main, &w), 0);
    while (w.commits < 50)
        usleep(1000);
    snprintf(path, sizeof path, "%s/backup.db", f->dir);
    r = ctl_run(&busy, "db", "backup", path, "--json", NULL);
    long during = w.commits;
    json_t *out = run_json(&r, 0);
    assert_string_equal(str(out, "integrity"), "ok");
    json_decref(out);
    run_free(&r);
    usleep(20000);
    w.stop = 1;
    pthread_join(t, NULL);
    /* The writer was not blocked by the backup. */
    assert_true(w.commits > during);

    /* The copy stands alone and is whole: integrity_check, and the two tables written in one
     * transaction agree (a torn copy would not). */
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *s;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "ok");
    sqlite3_finalize(s);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT (SELECT count(*) FROM events WHERE kind = "
                                        "'test.write'), (SELECT length(value) FROM settings WHERE "
                                        "key = 'backup-test')",
                                        -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_true(sqlite3_column_int(s, 0) >= 50);
    assert_int_equal(sqlite3_column_int(s, 0), sqlite3_column_int(s, 1));
    sqlite3_finalize(s);
    sqlite3_close(db);
    char wal[420];
    snprintf(wal, sizeof wal, "%s-wal", path);
    assert_int_not_equal(access(wal, F_OK), 0);

    /* It refuses to overwrite without --force. */
    r = ctl_run(&busy, "db", "backup", path, NULL);
    assert_int_equal(r.exit_code, 1);
    run_free(&r);
}

/* --terminate asks the gateway: DELETE /v1/sandboxes/ID with the admin token, over HTTP/1.1 on
 * the configured listen address. A one-shot listener stands in for the gateway and records the
 * request, so the test sees exactly what sbxctl sends. */
struct one_shot {
    int fd;
    char request[2048];
};

static void *one_shot_main(void *arg)
{
    struct one_shot *o = arg;
    int c = accept(o->fd, NULL, NULL);
    if (c < 0)
        return NULL;
    size_t n = 0;
    while (n + 1 < sizeof o->request && !strstr(o->request, "\r\n\r\n")) {
        ssize_t r = read(c, o->request + n, sizeof o->request - n - 1);
        if (r <= 0)
            break;
        n += (size_t)r;
        o->request[n] = '\0';
    }
    const char *resp = "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\n"
                       "Content-Length: 16\r\nConnection: close\r\n\r\n{\"state\":\"run\"}\n";
    if (write(c, resp, strlen(resp)) < 0)
        perror("write");
    close(c);
    return NULL;
}

static void test_terminate_via_gateway(void **state)
{
    struct fixture *f = *state;
    struct one_shot o = {0};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    o.fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(bind(o.fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(o.fd, 1), 0);
    getsockname(o.fd, (struct sockaddr *)&a, &len);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, one_shot_main, &o), 0);

    char listen_addr[64];
    snprintf(listen_addr, sizeof listen_addr, "127.0.0.1:%d", ntohs(a.sin_port));
    setenv("SBX_ADMIN_TOKEN", "sbx_admin_testtoken", 1);
    struct run r = ctl_run(f, "--listen", listen_addr, "sandbox", f->sbD, "--terminate", NULL);
    unsetenv("SBX_ADMIN_TOKEN");
    pthread_join(t, NULL);
    close(o.fd);
    if (r.exit_code != 0)
        fprintf(stderr, "%s%s", r.out, r.err);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "termination of"));
    char want[128];
    snprintf(want, sizeof want, "DELETE /v1/sandboxes/%s HTTP/1.1\r\n", f->sbD);
    assert_non_null(strstr(o.request, want));
    assert_non_null(strstr(o.request, "Authorization: Bearer sbx_admin_testtoken\r\n"));
    run_free(&r);

    /* Without a token it says what is missing; with no gateway it is an error (3). */
    r = ctl_run(f, "--listen", listen_addr, "sandbox", f->sbD, "--terminate", NULL);
    assert_int_equal(r.exit_code, 3);
    assert_non_null(strstr(r.err, "SBX_ADMIN_TOKEN"));
    run_free(&r);
    setenv("SBX_ADMIN_TOKEN", "sbx_admin_testtoken", 1);
    r = ctl_run(f, "--listen", listen_addr, "sandbox", f->sbD, "--terminate", NULL);
    unsetenv("SBX_ADMIN_TOKEN");
    assert_int_equal(r.exit_code, 3);
    run_free(&r);
}

/* The database as sbx leaves it when it is down: WAL mode, no -wal or -shm file; sbxctl reads it
 * and changes nothing. */
static void test_reads_when_sbx_is_down(void **state)
{
    struct fixture *f = *state;
    char path[400], wal[420];
    sqlite3 *db;
    snprintf(path, sizeof path, "%s/down.db", f->dir);
    struct run r = ctl_run(f, "db", "backup", path, NULL);
    assert_int_equal(r.exit_code, 0);
    run_free(&r);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    snprintf(wal, sizeof wal, "%s-wal", path);
    assert_int_not_equal(access(wal, F_OK), 0);
    struct stat before, after;
    assert_int_equal(stat(path, &before), 0);

    struct fixture down = *f;
    snprintf(down.db, sizeof down.db, "%s", path);
    r = ctl_run(&down, "sandboxes", "--json", NULL);
    json_t *rows = run_json(&r, 0);
    assert_int_equal(json_array_size(rows), 4);
    json_decref(rows);
    run_free(&r);
    r = ctl_run(&down, "db", "check", "--stale-after", "3600", NULL);
    assert_int_equal(r.exit_code, 0);
    run_free(&r);
    assert_int_equal(stat(path, &after), 0);
    assert_int_equal(before.st_size, after.st_size);
    assert_int_equal(before.st_mtim.tv_sec, after.st_mtim.tv_sec);
    assert_int_equal(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);

    /* An auditor who may read the file but not write its directory (so SQLite cannot create the
     * -shm file a WAL reader needs) still reads it while sbx is down. */
    if (geteuid() != 0)
        return;
    char rodir[400], ropath[420];
    snprintf(rodir, sizeof rodir, "%s/readonly", f->dir);
    assert_int_equal(mkdir(rodir, 0755), 0);
    snprintf(ropath, sizeof ropath, "%s/sbx.db", rodir);
    assert_int_equal(rename(path, ropath), 0);
    assert_int_equal(chmod(ropath, 0644), 0);
    assert_int_equal(chmod(f->dir, 0711), 0);
    char outp[] = "/tmp/sbxctl-ro-XXXXXX";
    int out = mkstemp(outp);
    assert_true(out >= 0);
    unlink(outp);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(out, 1);
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(100);
        execl(SBXCTL_BIN, SBXCTL_BIN, "--db", ropath, "sandboxes", "--json", NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    char *text = slurp_fd(out);
    close(out);
    chmod(f->dir, 0700);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    json_t *ro = json_loads(text, 0, NULL);
    free(text);
    assert_int_equal(json_array_size(ro), 4);
    json_decref(ro);
    char shm[440];
    snprintf(shm, sizeof shm, "%s-shm", ropath);
    assert_int_not_equal(access(shm, F_OK), 0);
}

/* `sbxctl firewall` against the real table: the network area's own fw_init()/fw_sandbox_add()
 * program `table inet sbx` in a fresh network namespace (the host's ruleset is never touched),
 * with one element for a live Sandbox, one left over from an ended one, and a live Sandbox with
 * an address but no element. sbxctl must name the owner of each and flag the two problems. */
static void test_firewall(void **state)
{
    struct fixture *f = *state;
    if (geteuid() != 0 || access("/usr/sbin/nft", X_OK) != 0) {
        fprintf(stderr, "skipped: needs root and nft\n");
        skip();
    }
    char path[400], outp[] = "/tmp/sbxctl-fw-XXXXXX";
    snprintf(path, sizeof path, "%s/fw.db", f->dir);
    struct run r = ctl_run(f, "db", "backup", path, NULL);
    assert_int_equal(r.exit_code, 0);
    run_free(&r);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sql(db,
        "UPDATE sandboxes SET net_address = '10.213.0.2' WHERE id = %Q;"
        "INSERT INTO sandboxes (id, state, driver, image, vcpu_count, mem_size_mib, worker_id, "
        "app_id, session_id, net_address, created_at, updated_at) VALUES "
        "('sbx_eeeeeeeeeeeeeeeeeeee', 'running', 'process', 'default', 1, 256, 'wrk_test', "
        "%Q, %Q, '10.213.0.6', 1, 1)",
        f->sbD, f->app, f->alice);
    sqlite3_close(db);

    int out = mkstemp(outp);
    assert_true(out >= 0);
    unlink(outp);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char err[256];
        if (unshare(CLONE_NEWNET) != 0)
            _exit(100);
        struct fw *fw = fw_init("10.213.0.0/16", err, sizeof err);
        if (!fw) {
            fprintf(stderr, "fw_init: %s\n", err);
            _exit(101);
        }
        struct fw_sandbox live = {f->sbD, "sbx1", {0}}, stale = {f->sbA, "sbx2", {0}};
        inet_pton(AF_INET, "10.213.0.2", &live.addr);
        inet_pton(AF_INET, "10.213.0.10", &stale.addr);
        if (fw_sandbox_add(fw, &live, err, sizeof err) != 0 ||
            fw_sandbox_add(fw, &stale, err, sizeof err) != 0) {
            fprintf(stderr, "fw_sandbox_add: %s\n", err);
            _exit(102);
        }
        fw_close(fw);
        dup2(out, 1);
        execl(SBXCTL_BIN, SBXCTL_BIN, "--db", path, "firewall", "--json", NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    char *text = slurp_fd(out);
    close(out);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 1)
        fprintf(stderr, "exit %d\n%s\n", WEXITSTATUS(status), text);
    assert_int_equal(WEXITSTATUS(status), 1);
    json_t *v = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(v);
    assert_true(json_is_true(json_object_get(v, "table_present")));
    json_t *els = json_object_get(v, "elements");
    assert_int_equal(json_array_size(els), 2);
    json_t *d = find_row(els, "owner", f->sbD);
    assert_non_null(d);
    assert_string_equal(str(d, "address"), "10.213.0.2");
    assert_string_equal(str(d, "ifname"), "sbx1");
    assert_string_equal(str(d, "state"), "warm");
    assert_string_equal(str(find_row(els, "owner", f->sbA), "state"), "terminated");
    json_t *problems = json_object_get(v, "problems");
    assert_int_equal(json_array_size(problems), 2);
    assert_string_equal(str(find_row(problems, "sandbox_id", f->sbA), "problem"),
                        "leftover-element");
    assert_string_equal(
        str(find_row(problems, "sandbox_id", "sbx_eeeeeeeeeeeeeeeeeeee"), "problem"),
        "missing-element");
    assert_non_null(find_row(json_object_get(v, "counters"), "name", "drop_host"));
    json_decref(v);
}

/* A database at another migration level than this build, missing an auditor view: db check
 * says which, and the commands that need the view say why they cannot answer. */
static void test_schema_mismatch(void **state)
{
    struct fixture *f = *state;
    struct fixture old = *f;
    snprintf(old.db, sizeof old.db, "%s/old.db", f->dir);
    struct run r = ctl_run(f, "db", "backup", old.db, NULL);
    assert_int_equal(r.exit_code, 0);
    run_free(&r);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(old.db, &db), SQLITE_OK);
    sql(db, "DROP VIEW session_timeline; PRAGMA user_version = %d", store_schema_version() - 1);
    sqlite3_close(db);

    r = ctl_run(&old, "db", "check", "--json", "--stale-after", "3600", NULL);
    json_t *v = run_json(&r, 1);
    json_t *checks = json_object_get(v, "checks");
    assert_string_equal(str(find_row(checks, "name", "schema-version"), "status"), "fail");
    json_t *audit = find_row(checks, "name", "audit-objects");
    assert_string_equal(str(audit, "status"), "fail");
    assert_non_null(find_row(json_object_get(audit, "rows"), "name", "session_timeline"));
    assert_string_equal(str(find_row(checks, "name", "integrity"), "status"), "ok");
    json_decref(v);
    run_free(&r);

    r = ctl_run(&old, "session", f->alice, NULL);
    assert_int_equal(r.exit_code, 3);
    assert_non_null(strstr(r.err, "session_timeline"));
    assert_non_null(strstr(r.err, "db check"));
    run_free(&r);
}

/* The human forms of the commands not covered above, and `apps`. */
static void test_apps_and_human_tables(void **state)
{
    struct fixture *f = *state;
    struct run r = ctl_run(f, "apps", "--json", NULL);
    json_t *rows = run_json(&r, 0);
    json_t *a = find_row(rows, "id", f->app);
    assert_non_null(a);
    assert_string_equal(str(a, "name"), "audit-app");
    assert_int_equal(num(a, "sessions"), 1);    /* bob is deleted */
    assert_int_equal(num(a, "active_keys"), 1); /* laptop is revoked */
    assert_string_equal(json_string_value(json_array_get(json_object_get(a, "command"), 0)),
                        "/usr/bin/sbx-echo-agent");
    json_decref(rows);
    run_free(&r);

    r = ctl_run(f, "apps", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "KEEP-ALIVE-S"));
    assert_non_null(strstr(r.out, "audit-app"));
    run_free(&r);

    r = ctl_run(f, "pool", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "WARM"));
    assert_non_null(strstr(r.out, "process  default"));
    run_free(&r);

    r = ctl_run(f, "events", "--session", f->bob, NULL);
    assert_int_equal(r.exit_code, 0);
    assert_true(strncmp(r.out, "ID ", 3) == 0);
    assert_non_null(strstr(r.out, "session.deleted"));
    assert_non_null(strstr(r.out, "req_del_bob"));
    assert_null(strstr(r.out, f->alice));
    run_free(&r);

    r = ctl_run(f, "events", "--since", "2999-01-01", NULL);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "(none)"));
    run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sessions),
        cmocka_unit_test(test_session_timeline),
        cmocka_unit_test(test_sandboxes),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_help_and_usage),
        cmocka_unit_test(test_apps_and_human_tables),
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_db_check_clean),
        cmocka_unit_test(test_violations_are_flagged),
        cmocka_unit_test(test_backup_while_writing),
        cmocka_unit_test(test_terminate_via_gateway),
        cmocka_unit_test(test_reads_when_sbx_is_down),
        cmocka_unit_test(test_schema_mismatch),
        cmocka_unit_test(test_firewall),
        cmocka_unit_test(test_events_follow),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
