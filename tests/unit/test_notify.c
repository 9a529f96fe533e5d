/*
 * test_notify.c: wake-ups (notify.h) on both transports, through the handles the gateway and the
 * workers use: a message sent from another process reaches every listener of its role and only
 * those, the listener's fd becomes readable, notify_recv() never blocks, and (PostgreSQL) the
 * listeners survive a dropped connection and a server restart, then say NOTIFY_RESYNC once and
 * receive again.
 *
 *   test_notify unix   Unix datagrams in a temporary run dir (no server needed)
 *   test_notify pg     LISTEN/NOTIFY on the throwaway cluster of tests/pg-run.sh
 *                      (SBX_TEST_PG_URL; the restart case uses SBX_TEST_PG_BIN, _DATA, _OWNER)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "notify.h"
#include "clock.h"

#include <event2/event.h>
#include <glob.h>
#include <libpq-fe.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char run_dir[PATH_MAX]; /* the Unix transport's, a fresh temp dir */
static const char *store;      /* "sqlite" or the PostgreSQL URL */

/* ---- helpers ---- */

static bool readable_within(struct notify_listener *l, int ms)
{
    struct pollfd pfd = {notify_listener_fd(l), POLLIN, 0};
    return poll(&pfd, 1, ms) > 0;
}

/* notify_recv() with a check that it returned at once, whatever it had to do. */
static int recv_now(struct notify_listener *l, char *buf, size_t len)
{
    int64_t t0 = clock_mono_ms();
    int n = notify_recv(l, buf, len);
    int64_t took = clock_mono_ms() - t0;
    /* Generous: a blocked call waits for a peer or a server, which takes seconds; a slow one is
     * ASan and other tests on the same cores. */
    if (took > 2000)
        fail_msg("notify_recv blocked for %lld ms", (long long)took);
    return n;
}

/* Waits up to ms for the next message that is not NOTIFY_RESYNC (unless want_resync) and
 * copies it into buf; false when none came. */
static bool next_message(struct notify_listener *l, int ms, bool want_resync, char *buf, size_t len)
{
    int64_t end = clock_mono_ms() + ms;
    for (;;) {
        while (recv_now(l, buf, len) > 0)
            if (want_resync == (strcmp(buf, NOTIFY_RESYNC) == 0))
                return true;
        int64_t left = end - clock_mono_ms();
        if (left <= 0)
            return false;
        readable_within(l, (int)left);
    }
}

static void expect_message(struct notify_listener *l, const char *want)
{
    char buf[256];
    if (!next_message(l, 5000, false, buf, sizeof buf))
        fail_msg("no \"%s\" within 5 s", want);
    assert_string_equal(buf, want);
}

static void expect_resync(struct notify_listener *l, int ms)
{
    char buf[256];
    if (!next_message(l, ms, true, buf, sizeof buf))
        fail_msg("no %s within %d ms of the server being back", NOTIFY_RESYNC, ms);
}

/* Nothing but (at most) NOTIFY_RESYNC arrives within ms. */
static void expect_silence(struct notify_listener *l, int ms)
{
    char buf[256];
    if (next_message(l, ms, false, buf, sizeof buf))
        fail_msg("unexpected message \"%s\"", buf);
}

/* Sends msg to role from a child process: another process, as a gateway is to a worker. */
static void send_from_other_process(const char *role, const char *msg)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct notify_peer *p = notify_peer_new(store, run_dir, role);
        if (!p)
            _exit(1);
        notify_send(p, msg);
        notify_peer_free(p);
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static struct notify_listener *listen_or_fail(const char *role)
{
    char err[512] = "";
    struct notify_listener *l = notify_listen(store, run_dir, role, err, sizeof err);
    if (!l)
        fail_msg("notify_listen(%s): %s", role, err);
    return l;
}

/* ---- both transports ---- */

/* Two listeners of a role (two hosts, or two workers of one) both get a message sent by another
 * process; a listener of the other role does not; and the fd says when to read. */
static void test_message_reaches_every_listener_of_its_role(void **state)
{
    (void)state;
    struct notify_listener *w1 = listen_or_fail("worker"), *w2 = listen_or_fail("worker");
    struct notify_listener *gw = listen_or_fail("gateway");
    char buf[64];

    /* Datagrams can be dropped; PostgreSQL queues notifications for a listening connection. */
    assert_int_equal(notify_listener_reliable(w1), strcmp(store, "sqlite") != 0);
    assert_false(readable_within(w1, 0) && recv_now(w1, buf, sizeof buf) > 0);
    send_from_other_process("worker", "queue");
    assert_true(readable_within(w1, 5000));
    assert_true(readable_within(w2, 5000));
    expect_message(w1, "queue");
    expect_message(w2, "queue");
    assert_int_equal(recv_now(w1, buf, sizeof buf), 0);
    assert_int_equal(recv_now(w2, buf, sizeof buf), 0);

    send_from_other_process("gateway", "msg msg_123");
    expect_message(gw, "msg msg_123");
    expect_silence(w1, 300);
    expect_silence(w2, 0);

    notify_listener_close(w1);
    notify_listener_close(w2);
    notify_listener_close(gw);
}

/* A burst from one sender arrives whole and in order; a message longer than the buffer is cut,
 * NUL-terminated. A Unix socket queues only net.unix.max_dgram_qlen (10) datagrams, beyond which
 * sends are dropped (hints); PostgreSQL queues notifications for the listener's connection. */
static void test_burst_arrives_in_order(void **state)
{
    (void)state;
    int burst = strcmp(store, "sqlite") == 0 ? 8 : 500;
    struct notify_listener *l = listen_or_fail("gateway");
    struct notify_peer *p = notify_peer_new(store, run_dir, "gateway");
    char msg[64], buf[8];
    assert_non_null(p);
    for (int i = 0; i < burst; i++) {
        snprintf(msg, sizeof msg, "msg m%03d", i);
        notify_send(p, msg);
    }
    for (int i = 0; i < burst; i++) {
        snprintf(msg, sizeof msg, "msg m%03d", i);
        expect_message(l, msg);
    }
    notify_send(p, "sandbox sbx_0123456789");
    assert_true(next_message(l, 5000, false, buf, sizeof buf));
    assert_string_equal(buf, "sandbox");
    notify_peer_free(p);
    notify_listener_close(l);
}

static void test_invalid_roles_are_refused(void **state)
{
    (void)state;
    char err[256] = "";
    assert_null(notify_listen(store, run_dir, "Worker; DROP", err, sizeof err));
    assert_non_null(strstr(err, "role"));
    assert_null(notify_listen(store, run_dir, "", err, sizeof err));
    assert_null(notify_peer_new(store, run_dir, "a\"b"));
}

/* ---- Unix datagrams ---- */

/* A listener that starts after a sender has listed the run directory (a worker started beside a
 * running gateway) gets the sender's very next hint, not only those after the next listing; and
 * one that has gone stops being sent to. Back-to-back starts (both within one mtime tick) are
 * each seen too. */
static void test_unix_new_listener_gets_the_next_hint(void **state)
{
    (void)state;
    struct notify_listener *first = listen_or_fail("worker");
    struct notify_peer *p = notify_peer_new(store, run_dir, "worker");
    assert_non_null(p);
    notify_send(p, "queue"); /* lists the directory: one listener */
    expect_message(first, "queue");
    for (int round = 0; round < 3; round++) {
        struct notify_listener *late = listen_or_fail("worker");
        struct notify_listener *later = listen_or_fail("worker");
        notify_send(p, "queue");
        expect_message(first, "queue");
        expect_message(late, "queue");
        expect_message(later, "queue");
        notify_listener_close(late);
        notify_listener_close(later);
    }
    notify_send(p, "queue");
    expect_message(first, "queue");
    notify_peer_free(p);
    notify_listener_close(first);
}

/* A socket left by a process that died is removed by the next send, not sent to forever. */
static void test_unix_removes_sockets_of_dead_processes(void **state)
{
    (void)state;
    char pattern[PATH_MAX + 64];
    glob_t left;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char err[256];
        /* Bind and exit without closing: what a SIGKILLed worker leaves behind. */
        _exit(notify_listen(store, run_dir, "worker", err, sizeof err) ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_int_equal(WEXITSTATUS(status), 0);
    snprintf(pattern, sizeof pattern, "%s/worker-%d-*.sock", run_dir, (int)pid);
    assert_int_equal(glob(pattern, 0, NULL, &left), 0);
    assert_int_equal(left.gl_pathc, 1);
    globfree(&left);
    send_from_other_process("worker", "queue");
    assert_int_equal(glob(pattern, 0, NULL, &left), GLOB_NOMATCH);
}

/* A reader draining its socket while a burst far beyond the queue's 10 datagrams comes in (a
 * burst of 100 activations sends three hints each) gets every hint, the sender waiting for room;
 * or, when the reader could not keep up within the sender's wait (a loaded machine), a resync
 * after the ones it lost, so that nothing waits for the slow recheck. */
struct drained {
    struct notify_listener *l;
    int hints, resyncs;
    bool done;
};

static void *drain_hints(void *arg)
{
    struct drained *d = arg;
    char buf[64];
    int64_t end = clock_mono_ms() + 20000;
    while (clock_mono_ms() < end) {
        readable_within(d->l, 100);
        while (recv_now(d->l, buf, sizeof buf) > 0) {
            if (strcmp(buf, "msg final") == 0) {
                __atomic_store_n(&d->done, true, __ATOMIC_SEQ_CST);
                return NULL;
            }
            if (strcmp(buf, NOTIFY_RESYNC) == 0)
                d->resyncs++;
            else
                d->hints++;
        }
    }
    d->hints = -1; /* "msg final" never came */
    __atomic_store_n(&d->done, true, __ATOMIC_SEQ_CST);
    return NULL;
}

static void test_unix_full_queue_waits_for_a_draining_reader(void **state)
{
    (void)state;
    struct drained d = {listen_or_fail("gateway"), 0, 0, false};
    struct notify_peer *p = notify_peer_new(store, run_dir, "gateway");
    pthread_t reader;
    assert_non_null(p);
    assert_int_equal(pthread_create(&reader, NULL, drain_hints, &d), 0);
    for (int i = 0; i < 300; i++)
        notify_send(p, "msg m");
    /* Until it got through (it may itself meet a full queue, once) */
    while (!__atomic_load_n(&d.done, __ATOMIC_SEQ_CST)) {
        notify_send(p, "msg final");
        usleep(20000);
    }
    assert_int_equal(pthread_join(reader, NULL), 0);
    assert_true(d.hints >= 0);
    if (d.hints < 300)
        assert_true(d.resyncs > 0);
    else
        assert_int_equal(d.resyncs, 0);
    notify_peer_free(p);
    notify_listener_close(d.l);
}

/* A reader that does not read for a while loses hints beyond its queue, but not the news that it
 * lost some: the next hint that gets through comes after NOTIFY_RESYNC (re-read everything). */
static void test_unix_refused_hints_are_made_up_for_by_a_resync(void **state)
{
    (void)state;
    struct notify_listener *l = listen_or_fail("gateway");
    struct notify_peer *p = notify_peer_new(store, run_dir, "gateway");
    char buf[64];
    assert_non_null(p);
    for (int i = 0; i < 30; i++)
        notify_send(p, "msg early");
    while (recv_now(l, buf, sizeof buf) > 0)
        assert_string_equal(buf, "msg early");
    notify_send(p, "msg late");
    expect_resync(l, 5000);
    expect_message(l, "msg late");
    /* Made up for once: the next hint comes alone. */
    notify_send(p, "msg next");
    assert_true(readable_within(l, 5000));
    assert_true(recv_now(l, buf, sizeof buf) > 0);
    assert_string_equal(buf, "msg next");
    notify_peer_free(p);
    notify_listener_close(l);
}

static int unix_setup(void **state)
{
    (void)state;
    snprintf(run_dir, sizeof run_dir, "/tmp/sbx-notify-XXXXXX");
    if (!mkdtemp(run_dir))
        return -1;
    store = "sqlite";
    return 0;
}

static int unix_teardown(void **state)
{
    char cmd[PATH_MAX + 16];
    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", run_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- PostgreSQL ---- */

static void sql_or_fail(const char *url, const char *sql)
{
    PGconn *c = PQconnectdb(url);
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("connect %s: %s", url, PQerrorMessage(c));
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
}

/* pg_ctl ACTION on the fixture's cluster, as the user that owns it (pg_ctl refuses root). */
static void pg_ctl(const char *action)
{
    const char *bin = getenv("SBX_TEST_PG_BIN"), *data = getenv("SBX_TEST_PG_DATA");
    const char *owner = getenv("SBX_TEST_PG_OWNER"), *port = getenv("SBX_TEST_PG_PORT");
    char pg_ctl_path[PATH_MAX], log_path[PATH_MAX], opts[64];
    if (!bin || !data || !port)
        fail_msg(
            "SBX_TEST_PG_BIN, SBX_TEST_PG_DATA and SBX_TEST_PG_PORT come from tests/pg-run.sh");
    snprintf(pg_ctl_path, sizeof pg_ctl_path, "%s/pg_ctl", bin);
    snprintf(log_path, sizeof log_path, "%s/../server.log", data);
    snprintf(opts, sizeof opts, "-p %s", port);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        const char *args[] = {pg_ctl_path, "-D", data, "-w", "-t",     "60",   "-m",
                              "fast",      "-o", opts, "-l", log_path, action, NULL};
        if (getuid() == 0 && owner && strcmp(owner, "root") != 0) {
            const char *as_owner[32] = {"runuser", "-u", owner, "--"};
            for (size_t i = 0; args[i]; i++)
                as_owner[4 + i] = args[i];
            execvp("runuser", (char **)as_owner);
        } else {
            execv(pg_ctl_path, (char **)args);
        }
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("pg_ctl %s failed (status %d)", action, status);
}

/* The server drops the LISTEN connections (a failover, an idle-connection killer): each listener
 * connects again by itself, says NOTIFY_RESYNC once, and receives again. */
static void test_pg_listeners_reconnect_after_a_dropped_connection(void **state)
{
    (void)state;
    struct notify_listener *a = listen_or_fail("worker"), *b = listen_or_fail("worker");
    const char *admin = getenv("SBX_TEST_PG_ADMIN_URL");
    sql_or_fail(admin ? admin : store, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                       "WHERE application_name = 'sbx-notify-listen'");
    /* Reading the loss and reconnecting both happen inside notify_recv(), driven by the fd. */
    expect_resync(a, 5000);
    expect_resync(b, 5000);
    send_from_other_process("worker", "queue");
    expect_message(a, "queue");
    expect_message(b, "queue");
    notify_listener_close(a);
    notify_listener_close(b);
}

/* A restart: the listeners come back by themselves; the sender's connection, stale after the
 * restart, is replaced within the same send, so the first message after it is not lost. */
static void test_pg_listeners_and_sender_survive_a_restart(void **state)
{
    (void)state;
    struct notify_listener *a = listen_or_fail("gateway"), *b = listen_or_fail("gateway");
    struct notify_peer *p = notify_peer_new(store, run_dir, "gateway");
    assert_non_null(p);
    notify_send(p, "msg before");
    expect_message(a, "msg before");
    expect_message(b, "msg before");

    pg_ctl("restart");
    expect_resync(a, 10000);
    expect_resync(b, 10000);
    notify_send(p, "msg after");
    expect_message(a, "msg after");
    expect_message(b, "msg after");

    notify_peer_free(p);
    notify_listener_close(a);
    notify_listener_close(b);
}

/* While the server is down nobody blocks: notify_recv() returns at once whenever the fd wakes the
 * caller (retry timer), a send gives up within its deadline; once it is back, both work again. */
static void test_pg_nothing_blocks_while_the_server_is_down(void **state)
{
    (void)state;
    struct notify_listener *l = listen_or_fail("worker");
    struct notify_peer *p = notify_peer_new(store, run_dir, "worker");
    char buf[64];
    assert_non_null(p);
    notify_send(p, "queue");
    expect_message(l, "queue");

    pg_ctl("stop");
    for (int64_t end = clock_mono_ms() + 3000; clock_mono_ms() < end;) {
        readable_within(l, 500);
        while (recv_now(l, buf, sizeof buf) > 0)
            assert_string_equal(buf, NOTIFY_RESYNC); /* nothing else can come now */
    }
    assert_false(notify_listener_reliable(l));
    int64_t t0 = clock_mono_ms();
    notify_send(p, "queue");
    notify_send(p, "stop");
    /* Queued: the peer's thread meets the refusal, not the caller. The bound only catches a
     * caller held up (generous: ASan on a loaded machine takes its time too). */
    assert_true(clock_mono_ms() - t0 < 2000);

    pg_ctl("start");
    expect_resync(l, 10000);
    assert_true(notify_listener_reliable(l));
    /* A sender that failed to connect drops hints for a second before it tries again. */
    usleep(1100 * 1000);
    notify_send(p, "stop");
    expect_message(l, "stop");

    notify_peer_free(p);
    notify_listener_close(l);
}

/* A listener made while the server is unreachable is not an error: it connects once it can. */
static void test_pg_listener_made_while_unreachable_connects_later(void **state)
{
    (void)state;
    struct notify_listener *l;
    struct notify_peer *p = notify_peer_new(store, run_dir, "worker");
    assert_non_null(p);
    pg_ctl("stop");
    l = listen_or_fail("worker");
    pg_ctl("start");
    expect_resync(l, 10000);
    usleep(1100 * 1000); /* the sender's connection died with the server: see above */
    notify_send(p, "queue");
    expect_message(l, "queue");
    notify_peer_free(p);
    notify_listener_close(l);
}

/* Many threads of one process (the gateway's HTTP threads) send at once through one peer: every
 * distinct message arrives exactly once, each thread's in its order, and no caller waits for the
 * round trips (the peer's thread batches what queued meanwhile). */
#define SENDERS 16
#define PER_SENDER 60

struct sender_arg {
    struct notify_peer *p;
    int index;
    int64_t slowest_ms;
};

static void *send_many(void *arg)
{
    struct sender_arg *a = arg;
    char msg[64];
    for (int i = 0; i < PER_SENDER; i++) {
        snprintf(msg, sizeof msg, "msg t%02d-%03d", a->index, i);
        int64_t t0 = clock_mono_ms();
        notify_send(a->p, msg);
        if (clock_mono_ms() - t0 > a->slowest_ms)
            a->slowest_ms = clock_mono_ms() - t0;
    }
    return NULL;
}

static void test_pg_concurrent_senders_lose_nothing(void **state)
{
    (void)state;
    struct notify_listener *l = listen_or_fail("gateway");
    struct notify_peer *p = notify_peer_new(store, run_dir, "gateway");
    pthread_t threads[SENDERS];
    struct sender_arg args[SENDERS];
    int next[SENDERS] = {0};
    char buf[64];
    assert_non_null(p);
    for (int t = 0; t < SENDERS; t++) {
        args[t] = (struct sender_arg){p, t, 0};
        assert_int_equal(pthread_create(&threads[t], NULL, send_many, &args[t]), 0);
    }
    for (int t = 0; t < SENDERS; t++) {
        assert_int_equal(pthread_join(threads[t], NULL), 0);
        if (args[t].slowest_ms > 2000) /* generous: senders share the cores with the test run */
            fail_msg("notify_send waited %lld ms", (long long)args[t].slowest_ms);
    }
    for (int got = 0; got < SENDERS * PER_SENDER; got++) {
        int t, i;
        if (!next_message(l, 5000, false, buf, sizeof buf))
            fail_msg("only %d of %d messages arrived", got, SENDERS * PER_SENDER);
        assert_int_equal(sscanf(buf, "msg t%d-%d", &t, &i), 2);
        assert_true(t >= 0 && t < SENDERS);
        assert_int_equal(i, next[t]); /* in order, none twice, none skipped */
        next[t]++;
    }
    expect_silence(l, 300);
    notify_peer_free(p);
    notify_listener_close(l);
}

/* The worker waits on the fd in libevent (an epoll of its own): the fd wakes the loop for a
 * message, keeps waking it through a lost connection until it is back, then for a message again. */
struct loop_seen {
    struct notify_listener *l;
    char last[64];
    int messages, resyncs;
    struct event_base *base;
};

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct loop_seen *seen = arg;
    char buf[64];
    (void)fd;
    (void)what;
    while (recv_now(seen->l, buf, sizeof buf) > 0) {
        if (strcmp(buf, NOTIFY_RESYNC) == 0) {
            seen->resyncs++;
        } else {
            seen->messages++;
            snprintf(seen->last, sizeof seen->last, "%s", buf);
        }
        event_base_loopbreak(seen->base);
    }
}

/* Runs the loop until on_readable has seen *counter reach want, or ms pass. */
static bool loop_until(struct loop_seen *seen, int *counter, int want, int ms)
{
    struct timeval slice = {0, 100 * 1000};
    for (int64_t end = clock_mono_ms() + ms; *counter < want && clock_mono_ms() < end;) {
        event_base_loopexit(seen->base, &slice);
        event_base_dispatch(seen->base);
    }
    return *counter >= want;
}

static void test_pg_fd_drives_a_libevent_loop(void **state)
{
    (void)state;
    struct loop_seen seen = {.l = listen_or_fail("worker"), .base = event_base_new()};
    assert_non_null(seen.base);
    struct event *ev =
        event_new(seen.base, notify_listener_fd(seen.l), EV_READ | EV_PERSIST, on_readable, &seen);
    assert_non_null(ev);
    assert_int_equal(event_add(ev, NULL), 0);

    send_from_other_process("worker", "queue");
    assert_true(loop_until(&seen, &seen.messages, 1, 5000));
    assert_string_equal(seen.last, "queue");

    const char *admin = getenv("SBX_TEST_PG_ADMIN_URL");
    sql_or_fail(admin ? admin : store, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                       "WHERE application_name = 'sbx-notify-listen'");
    assert_true(loop_until(&seen, &seen.resyncs, 1, 5000));
    send_from_other_process("worker", "stop");
    assert_true(loop_until(&seen, &seen.messages, 2, 5000));
    assert_string_equal(seen.last, "stop");

    event_free(ev);
    event_base_free(seen.base);
    notify_listener_close(seen.l);
}

/* Waits up to 5 s for want connections of app (application_name) to this test's database:
 * a closed connection's backend leaves pg_stat_activity shortly after, not at once. */
static void expect_connections(const char *app, int want)
{
    char sql[256];
    int n = -1;
    PGconn *c = PQconnectdb(store);
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("connect: %s", PQerrorMessage(c));
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM pg_stat_activity WHERE application_name = '%s' AND datname = "
             "current_database()",
             app);
    for (int64_t end = clock_mono_ms() + 5000; n != want && clock_mono_ms() < end;) {
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            fail_msg("%s: %s", sql, PQerrorMessage(c));
        n = atoi(PQgetvalue(r, 0, 0));
        PQclear(r);
        if (n != want)
            usleep(20 * 1000);
    }
    PQfinish(c);
    if (n != want)
        fail_msg("%d connections named %s, not %d", n, app, want);
}

/* A process's listeners of one channel share one LISTEN connection, and its senders one
 * connection for every channel (each NOTIFY transaction signals every listening backend of the
 * database: fewer of both is less work for the server). Each listener still gets every message
 * of its role, and only those, whichever listener's caller reads first; a listener whose caller
 * does not read holds nobody up, and once more hints came than it keeps it says NOTIFY_RESYNC
 * (re-read the store), then receives again. */
static void test_pg_listeners_and_senders_share_connections(void **state)
{
    (void)state;
    struct notify_listener *g1 = listen_or_fail("gateway"), *g2 = listen_or_fail("gateway");
    struct notify_listener *w = listen_or_fail("worker");
    struct notify_peer *to_gw = notify_peer_new(store, run_dir, "gateway");
    struct notify_peer *to_gw2 = notify_peer_new(store, run_dir, "gateway");
    struct notify_peer *to_w = notify_peer_new(store, run_dir, "worker");
    char buf[64];
    assert_non_null(to_gw);
    assert_non_null(to_gw2);
    assert_non_null(to_w);
    expect_connections("sbx-notify-listen", 2);

    notify_send(to_gw, "msg a");
    notify_send(to_w, "queue");
    notify_send(to_gw2, "events");
    /* g1's caller reads first: g2 is woken by g1's reading, not by the socket. */
    expect_message(g1, "msg a");
    expect_message(g1, "events");
    assert_true(readable_within(g2, 0));
    expect_message(g2, "msg a");
    expect_message(g2, "events");
    expect_message(w, "queue");
    expect_silence(w, 200);
    expect_connections("sbx-notify-send", 1);

    /* g2's caller stops reading while 300 hints come; g1 gets each of them, in order. */
    for (int i = 0; i < 300; i++) {
        snprintf(buf, sizeof buf, "msg m%03d", i);
        notify_send(to_gw, buf);
    }
    for (int i = 0; i < 300; i++) {
        char want[64];
        snprintf(want, sizeof want, "msg m%03d", i);
        expect_message(g1, want);
    }
    /* g2 says first that it could not keep them all, then gives the first 256. */
    assert_true(recv_now(g2, buf, sizeof buf) > 0);
    assert_string_equal(buf, NOTIFY_RESYNC);
    for (int i = 0; i < 256; i++) {
        char want[64];
        snprintf(want, sizeof want, "msg m%03d", i);
        assert_true(recv_now(g2, buf, sizeof buf) > 0);
        assert_string_equal(buf, want);
    }
    assert_int_equal(recv_now(g2, buf, sizeof buf), 0);
    notify_send(to_gw, "msg after");
    expect_message(g2, "msg after");
    expect_message(g1, "msg after");

    /* The last listener of a channel closes its connection; the others' stays. */
    notify_listener_close(g1);
    notify_send(to_gw2, "msg alone");
    expect_message(g2, "msg alone");
    notify_listener_close(g2);
    notify_peer_free(to_gw);
    notify_peer_free(to_gw2);
    notify_send(to_w, "stop");
    expect_message(w, "stop");
    notify_peer_free(to_w);
    expect_connections("sbx-notify-listen", 1);
    expect_connections("sbx-notify-send", 0);
    notify_listener_close(w);
}

/* Under a stream of sends the sender starts a NOTIFY transaction at most every 2 ms (each costs
 * the server a commit and a signal to every listener), and what queued meanwhile rides in the
 * next one. PostgreSQL delivers a repeated message once per transaction, so the number of
 * "events" received counts the transactions that carried one. Without the spacing this machine
 * sends one per round trip (a few tenths of a millisecond on loopback). */
static void test_pg_sender_spaces_its_transactions(void **state)
{
    (void)state;
    struct notify_listener *l = listen_or_fail("gateway");
    struct notify_peer *p = notify_peer_new(store, run_dir, "gateway");
    char buf[64];
    int received = 0;
    assert_non_null(p);
    notify_send(p, "msg warm-up"); /* the connection is made outside the measured span */
    expect_message(l, "msg warm-up");
    int64_t t0 = clock_mono_ms();
    while (clock_mono_ms() - t0 < 100) {
        notify_send(p, "events");
        usleep(100);
    }
    int64_t span = clock_mono_ms() - t0;
    notify_send(p, "msg end");
    for (;;) {
        if (!next_message(l, 5000, false, buf, sizeof buf))
            fail_msg("no \"msg end\" within 5 s");
        if (strcmp(buf, "msg end") == 0)
            break;
        assert_string_equal(buf, "events");
        received++;
    }
    /* Transactions started within the span, 2 ms apart, and the one after it with the rest. */
    assert_true(received >= 1);
    if (received > span / 2 + 2)
        fail_msg("%d NOTIFY transactions in %lld ms", received, (long long)span);
    notify_peer_free(p);
    notify_listener_close(l);
}

static void test_pg_malformed_url_is_an_error(void **state)
{
    (void)state;
    char err[256] = "";
    assert_null(notify_listen("postgres://x:y:z@[", run_dir, "worker", err, sizeof err));
    assert_non_null(strstr(err, "URL"));
    assert_null(notify_peer_new("postgres://x:y:z@[", run_dir, "worker"));
}

static int pg_setup(void **state)
{
    (void)state;
    store = getenv("SBX_TEST_PG_URL");
    if (!store || !*store) {
        fprintf(stderr, "SBX_TEST_PG_URL is not set: run under tests/pg-run.sh\n");
        return -1;
    }
    snprintf(run_dir, sizeof run_dir, "/nonexistent"); /* the PG transport must not use it */
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest common_tests[] = {
        cmocka_unit_test(test_message_reaches_every_listener_of_its_role),
        cmocka_unit_test(test_burst_arrives_in_order),
        cmocka_unit_test(test_invalid_roles_are_refused),
    };
    const struct CMUnitTest unix_tests[] = {
        cmocka_unit_test(test_unix_new_listener_gets_the_next_hint),
        cmocka_unit_test(test_unix_removes_sockets_of_dead_processes),
        cmocka_unit_test(test_unix_full_queue_waits_for_a_draining_reader),
        cmocka_unit_test(test_unix_refused_hints_are_made_up_for_by_a_resync),
    };
    const struct CMUnitTest pg_tests[] = {
        cmocka_unit_test(test_pg_malformed_url_is_an_error),
        cmocka_unit_test(test_pg_concurrent_senders_lose_nothing),
        cmocka_unit_test(test_pg_listeners_and_senders_share_connections),
        cmocka_unit_test(test_pg_sender_spaces_its_transactions),
        cmocka_unit_test(test_pg_fd_drives_a_libevent_loop),
        cmocka_unit_test(test_pg_listeners_reconnect_after_a_dropped_connection),
        cmocka_unit_test(test_pg_listeners_and_sender_survive_a_restart),
        cmocka_unit_test(test_pg_nothing_blocks_while_the_server_is_down),
        cmocka_unit_test(test_pg_listener_made_while_unreachable_connects_later),
    };
    int failed = 0;
    if (argc == 2 && strcmp(argv[1], "unix") == 0) {
        failed += cmocka_run_group_tests_name("notify_unix_common", common_tests, unix_setup,
                                              unix_teardown);
        failed += cmocka_run_group_tests_name("notify_unix", unix_tests, unix_setup, unix_teardown);
    } else if (argc == 2 && strcmp(argv[1], "pg") == 0) {
        failed += cmocka_run_group_tests_name("notify_pg_common", common_tests, pg_setup, NULL);
        failed += cmocka_run_group_tests_name("notify_pg", pg_tests, pg_setup, NULL);
    } else {
        fprintf(stderr, "usage: %s unix|pg\n", argv[0]);
        return 2;
    }
    return failed ? 1 : 0;
}
