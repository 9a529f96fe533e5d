/*
 * notify_pg.c: wake-ups across hosts through PostgreSQL LISTEN/NOTIFY (see notify.h).
 *
 * A listener owns one connection that does nothing but LISTEN. Its caller waits on an epoll fd
 * that holds that connection's socket and a retry timer, so the fd the caller registered once
 * (with poll or libevent) stays valid while the connection underneath is lost and made again:
 * a lost connection arms the timer, the timer makes the fd readable, and notify_recv() advances
 * a non-blocking reconnection (PQconnectStart/PQconnectPoll, then LISTEN) one step per call.
 * (Only a host name's lookup inside PQconnectStart can block: URLs with an address or a socket
 * directory avoid it.)
 *
 * A sender owns another connection and a thread that runs SELECT pg_notify(channel, msg) on it,
 * with deadlines on every wait; callers only queue their message. An unreachable server costs the
 * thread about a second per attempt, and messages are dropped until the next one.
 */
#include "notify_pg.h"
#include "log.h"
#include "clock.h"

#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define CONNECT_TIMEOUT_MS 5000 /* one attempt: libpq ignores connect_timeout when polled */
#define RETRY_MIN_MS 200        /* the first retry after a loss (a restart takes about a second) */
#define RETRY_MAX_MS 5000
#define SEND_TIMEOUT_MS 1000 /* a whole send, connection included */
#define SEND_RETRY_MS 1000   /* sends dropped without trying after a failed connection */

/* Settings under the URL's own: it may override them. Keepalives notice a peer host that is gone
 * without a word (no FIN), which would otherwise leave a LISTEN connection silent for hours. */
static const char *const conn_keys[] = {
    "application_name", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
    "dbname",           NULL};

/* libpq prints notices, and the FATAL a server sends as it shuts down, on stderr; here they go
 * to the log (the loss itself is logged when notify_recv() sees it). */
static void log_notice(void *arg, const char *message)
{
    (void)arg;
    log_debug("notify: PostgreSQL says: %.*s", (int)strcspn(message, "\n"), message);
}

static PGconn *connect_start(const char *url, const char *app)
{
    const char *values[] = {app, "1", "30", "10", "3", url, NULL};
    PGconn *c = PQconnectStartParams(conn_keys, values, 1);
    if (c)
        PQsetNoticeProcessor(c, log_notice, NULL);
    return c;
}

/* The error of a connection, on one line. */
static const char *conn_error(const PGconn *c)
{
    static __thread char line[256];
    const char *e = c ? PQerrorMessage(c) : "out of memory";
    size_t n = 0;
    for (; *e && n + 1 < sizeof line; e++) {
        char ch = (*e == '\n' || *e == '\t') ? ' ' : *e;
        if (ch != ' ' || (n > 0 && line[n - 1] != ' '))
            line[n++] = ch;
    }
    while (n > 0 && line[n - 1] == ' ')
        n--;
    line[n] = '\0';
    return line;
}

/* Waits until fd has one of events or deadline (monotonic ms); returns >0, 0 on timeout, <0. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - clock_mono_ms();
        if (left < 0)
            left = 0;
        struct pollfd pfd = {fd, events, 0};
        int rc = poll(&pfd, 1, (int)left);
        if (rc >= 0 || errno != EINTR)
            return rc;
    }
}

/* Connects before deadline, blocking the caller at most until then. */
static PGconn *connect_within(const char *url, const char *app, int64_t deadline, char *err,
                              size_t errlen)
{
    PGconn *c = connect_start(url, app);
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    if (!c || PQstatus(c) == CONNECTION_BAD) {
        snprintf(err, errlen, "%s", conn_error(c));
        PQfinish(c);
        return NULL;
    }
    while (st != PGRES_POLLING_OK) {
        if (st == PGRES_POLLING_FAILED) {
            snprintf(err, errlen, "%s", conn_error(c));
            PQfinish(c);
            return NULL;
        }
        if (wait_fd(PQsocket(c), st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline) <= 0) {
            snprintf(err, errlen, "timed out connecting");
            PQfinish(c);
            return NULL;
        }
        st = PQconnectPoll(c);
    }
    if (PQsetnonblocking(c, 1) != 0) {
        snprintf(err, errlen, "%s", conn_error(c));
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* Collects the results of the query sent on c (non-blocking mode) before deadline; returns 0
 * when every one succeeded. */
static int finish_query(PGconn *c, int64_t deadline)
{
    int ok = 0;
    for (;;) {
        int unsent = PQflush(c); /* 1: part of the query is still to be written */
        if (unsent < 0)
            return -1;
        while (unsent == 0 && !PQisBusy(c)) {
            PGresult *r = PQgetResult(c);
            if (!r)
                return ok;
            ExecStatusType st = PQresultStatus(r);
            if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
                ok = -1;
            PQclear(r);
        }
        if (wait_fd(PQsocket(c), (short)(POLLIN | (unsent ? POLLOUT : 0)), deadline) <= 0)
            return -1;
        if (PQconsumeInput(c) == 0)
            return -1;
    }
}

/* ---- the listener ---- */

enum listener_state {
    LISTENER_DOWN,       /* no connection; the timer says when to try again */
    LISTENER_CONNECTING, /* PQconnectPoll in progress */
    LISTENER_LISTENING,  /* LISTEN sent, its result not yet read */
    LISTENER_READY,      /* notifications arrive */
};

struct pg_listener {
    char *url;
    char channel[64];
    char listen_sql[96];
    PGconn *conn;
    enum listener_state state;
    PostgresPollingStatusType polling; /* what PQconnectPoll last asked to wait for */
    int epfd;                          /* what the caller waits on: the socket and the timer */
    int timerfd;                       /* retry, or the deadline of a connection attempt */
    int watched;                       /* the socket registered in epfd, or -1 */
    int64_t deadline;                  /* monotonic ms: retry (DOWN) or give up (connecting) */
    int64_t retry_ms;                  /* the next backoff */
    bool resync_due;                   /* tell the caller once that hints may have been lost */
    bool was_ready;                    /* log a loss once, not each failed retry */
};

static void arm_timer(struct pg_listener *l, int64_t at)
{
    int64_t in = at - clock_mono_ms();
    if (in < 1)
        in = 1; /* zero would disarm it */
    struct itimerspec its = {.it_value = {(time_t)(in / 1000), (long)(in % 1000) * 1000000}};
    l->deadline = at;
    timerfd_settime(l->timerfd, 0, &its, NULL);
}

static void disarm_timer(struct pg_listener *l)
{
    struct itimerspec off = {0};
    uint64_t expirations;
    timerfd_settime(l->timerfd, 0, &off, NULL);
    if (read(l->timerfd, &expirations, sizeof expirations) < 0) {
        /* EAGAIN: it had not fired; nothing to clear. */
    }
}

/* Registers the connection's socket in epfd for events (the socket may change during a
 * connection attempt, and a closed one leaves epoll by itself, so its number may come back). */
static int watch_socket(struct pg_listener *l, uint32_t events)
{
    int fd = PQsocket(l->conn);
    struct epoll_event ev = {.events = events, .data.fd = fd};
    if (fd < 0)
        return -1;
    if (fd != l->watched && l->watched >= 0)
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, l->watched, NULL);
    if (fd == l->watched && epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
        return 0;
    if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) != 0 &&
        !(errno == EEXIST && epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev) == 0))
        return -1;
    l->watched = fd;
    return 0;
}

static void drop_connection(struct pg_listener *l)
{
    if (l->watched >= 0)
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, l->watched, NULL);
    l->watched = -1;
    PQfinish(l->conn);
    l->conn = NULL;
}

/* The connection is gone or never came: try again after a growing delay. */
static void lost(struct pg_listener *l, const char *why)
{
    if (l->was_ready)
        log_warn("notify: lost the LISTEN connection of %s (%s); polling until it is back",
                 l->channel, why);
    else
        log_debug("notify: %s: no LISTEN connection yet (%s)", l->channel, why);
    l->was_ready = false;
    drop_connection(l);
    l->state = LISTENER_DOWN;
    arm_timer(l, clock_mono_ms() + l->retry_ms);
    l->retry_ms = l->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : l->retry_ms * 2;
}

static void start_connecting(struct pg_listener *l)
{
    l->conn = connect_start(l->url, "sbx-notify-listen");
    if (!l->conn || PQstatus(l->conn) == CONNECTION_BAD) {
        lost(l, conn_error(l->conn));
        return;
    }
    l->state = LISTENER_CONNECTING;
    l->polling = PGRES_POLLING_WRITING;
    arm_timer(l, clock_mono_ms() + CONNECT_TIMEOUT_MS);
    if (watch_socket(l, EPOLLOUT) != 0)
        lost(l, "cannot watch its socket");
}

static bool socket_ready(const struct pg_listener *l, short events)
{
    struct pollfd pfd = {PQsocket(l->conn), events, 0};
    return poll(&pfd, 1, 0) > 0;
}

static void send_listen(struct pg_listener *l)
{
    int unsent;
    if (PQsetnonblocking(l->conn, 1) != 0 || PQsendQuery(l->conn, l->listen_sql) == 0 ||
        (unsent = PQflush(l->conn)) < 0) {
        lost(l, conn_error(l->conn));
        return;
    }
    l->state = LISTENER_LISTENING;
    if (watch_socket(l, EPOLLIN | (unsent ? EPOLLOUT : 0)) != 0)
        lost(l, "cannot watch its socket");
}

/* One step of PQconnectPoll when the socket is ready for what it last asked. */
static void advance_connecting(struct pg_listener *l)
{
    short want = l->polling == PGRES_POLLING_READING ? POLLIN : POLLOUT;
    if (!socket_ready(l, want))
        return;
    l->polling = PQconnectPoll(l->conn);
    switch (l->polling) {
    case PGRES_POLLING_OK:
        send_listen(l);
        break;
    case PGRES_POLLING_FAILED:
        lost(l, conn_error(l->conn));
        break;
    default:
        if (watch_socket(l, l->polling == PGRES_POLLING_READING ? EPOLLIN : EPOLLOUT) != 0)
            lost(l, "cannot watch its socket");
        break;
    }
}

/* Reads LISTEN's result once it is there; from then on notifications arrive. */
static void advance_listening(struct pg_listener *l)
{
    int unsent = PQflush(l->conn);
    if (unsent < 0 || PQconsumeInput(l->conn) == 0) {
        lost(l, conn_error(l->conn));
        return;
    }
    if (unsent == 0 && watch_socket(l, EPOLLIN) != 0) {
        lost(l, "cannot watch its socket");
        return;
    }
    int failed = 0;
    while (!PQisBusy(l->conn)) {
        PGresult *r = PQgetResult(l->conn);
        if (!r) {
            if (failed) {
                lost(l, "LISTEN failed");
                return;
            }
            l->state = LISTENER_READY;
            l->resync_due = true;
            l->was_ready = true;
            l->retry_ms = RETRY_MIN_MS;
            disarm_timer(l);
            log_info("notify: listening on %s", l->channel);
            return;
        }
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            failed = 1;
        PQclear(r);
    }
}

/* Takes the next notification already read, if any. */
static int take_notification(struct pg_listener *l, char *buf, size_t buflen)
{
    PGnotify *n = PQnotifies(l->conn);
    if (!n)
        return 0;
    snprintf(buf, buflen, "%s", n->extra ? n->extra : "");
    PQfreemem(n);
    return buf[0] ? (int)strlen(buf) : -1; /* -1: an empty payload, skipped */
}

int pg_listener_recv(struct pg_listener *l, char *buf, size_t buflen)
{
    bool consumed = false;
    uint64_t expirations;
    /* The timer's expiry is what is due, not a clock comparison: a timer that fires a fraction of
     * a millisecond early must still start the retry, or nothing would wake the caller again. */
    bool timer_fired = read(l->timerfd, &expirations, sizeof expirations) > 0;
    for (;;) {
        enum listener_state before = l->state;
        switch (l->state) {
        case LISTENER_DOWN:
            if (!timer_fired && clock_mono_ms() < l->deadline)
                return 0;
            timer_fired = false; /* that was the retry timer; next it measures the attempt */
            start_connecting(l);
            break;
        case LISTENER_CONNECTING:
        case LISTENER_LISTENING:
            if (timer_fired || clock_mono_ms() >= l->deadline) {
                lost(l, "timed out");
                return 0;
            }
            if (l->state == LISTENER_CONNECTING)
                advance_connecting(l);
            else
                advance_listening(l);
            if (l->state == before)
                return 0;
            break;
        case LISTENER_READY: {
            if (l->resync_due) {
                l->resync_due = false;
                snprintf(buf, buflen, "%s", "resync");
                return (int)strlen(buf);
            }
            int n = take_notification(l, buf, buflen);
            if (n > 0)
                return n;
            if (n < 0)
                break;
            if (consumed)
                return 0;
            consumed = true;
            /* A server that shuts down sends an error and closes: both end here. */
            if (PQconsumeInput(l->conn) == 0 || PQstatus(l->conn) != CONNECTION_OK)
                lost(l, conn_error(l->conn));
            break;
        }
        }
    }
}

struct pg_listener *pg_listener_new(const char *url, const char *channel, char *err, size_t errlen)
{
    char *parse_err = NULL;
    PQconninfoOption *opts = PQconninfoParse(url, &parse_err);
    struct pg_listener *l;
    if (!opts) {
        snprintf(err, errlen, "malformed store URL: %s", parse_err ? parse_err : "out of memory");
        PQfreemem(parse_err);
        return NULL;
    }
    PQconninfoFree(opts);
    if (!(l = calloc(1, sizeof *l)) || !(l->url = strdup(url))) {
        free(l);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(l->channel, sizeof l->channel, "%s", channel);
    snprintf(l->listen_sql, sizeof l->listen_sql, "LISTEN %s", channel);
    l->watched = -1;
    l->retry_ms = RETRY_MIN_MS;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = l->timerfd};
    if (l->epfd < 0 || l->timerfd < 0 || epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->timerfd, &ev) != 0) {
        snprintf(err, errlen, "cannot make the notify fds: %s", strerror(errno));
        pg_listener_free(l);
        return NULL;
    }
    /* The first connection is made here, so that a caller that returns from notify_listen()
     * is listening already; when it cannot be, the background retries take over. */
    int64_t deadline = clock_mono_ms() + CONNECT_TIMEOUT_MS;
    char why[256];
    l->conn = connect_within(url, "sbx-notify-listen", deadline, why, sizeof why);
    if (!l->conn) {
        lost(l, why);
        log_warn("notify: cannot LISTEN on %s yet (%s); retrying in the background", channel, why);
        return l;
    }
    if (PQsendQuery(l->conn, l->listen_sql) == 0 || finish_query(l->conn, deadline) != 0 ||
        watch_socket(l, EPOLLIN) != 0) {
        snprintf(why, sizeof why, "LISTEN: %s", conn_error(l->conn));
        lost(l, why);
        log_warn("notify: cannot LISTEN on %s yet (%s); retrying in the background", channel, why);
        return l;
    }
    l->state = LISTENER_READY;
    l->was_ready = true;
    return l;
}

int pg_listener_fd(const struct pg_listener *l)
{
    return l->epfd;
}

bool pg_listener_ready(const struct pg_listener *l)
{
    return l->state == LISTENER_READY;
}

void pg_listener_free(struct pg_listener *l)
{
    if (!l)
        return;
    drop_connection(l);
    if (l->timerfd >= 0)
        close(l->timerfd);
    if (l->epfd >= 0)
        close(l->epfd);
    free(l->url);
    free(l);
}

/* ---- the sender ---- */

/* Callers only queue their message and return: one thread per sender makes the round trips, and
 * sends whatever queued meanwhile in one statement. Each message is still sent after its caller's
 * commit, so no wake-up comes too early; a burst of enqueues from many HTTP threads costs a few
 * round trips, and no caller ever waits for PostgreSQL. Equal messages waiting together are sent
 * once (PostgreSQL folds them within one transaction anyway). */
#define SEND_QUEUE 256
#define SEND_MSG_MAX 128

struct pg_sender {
    pthread_mutex_t lock; /* guards the queue and stopping */
    pthread_cond_t work;  /* the queue got a message, or stopping */
    pthread_cond_t space; /* the queue was taken */
    char queue[SEND_QUEUE][SEND_MSG_MAX];
    size_t n_queued;
    bool stopping;
    pthread_t thread;
    char *url;
    char channel[64];
    /* Only the thread touches these: */
    char batch[SEND_QUEUE][SEND_MSG_MAX]; /* the queue it took */
    const char *params[SEND_QUEUE + 1];
    char sql[SEND_QUEUE * 24 + 16];
    PGconn *conn;
    int64_t retry_at; /* monotonic ms: no connection attempt before (sends are dropped) */
    bool logged_down; /* one warning per outage */
};

/* Makes the connection if there is none, unless a recent attempt failed; 0 when there is one. */
static int ensure_connection(struct pg_sender *s, int64_t deadline)
{
    char why[256];
    if (s->conn)
        return 0;
    if (clock_mono_ms() < s->retry_at)
        return -1;
    s->conn = connect_within(s->url, "sbx-notify-send", deadline, why, sizeof why);
    if (!s->conn) {
        if (!s->logged_down)
            log_warn("notify: cannot reach PostgreSQL to notify %s (%s); dropping wake-ups, "
                     "receivers poll",
                     s->channel, why);
        s->logged_down = true;
        s->retry_at = clock_mono_ms() + SEND_RETRY_MS;
        return -1;
    }
    if (s->logged_down)
        log_info("notify: PostgreSQL reachable again for %s", s->channel);
    s->logged_down = false;
    return 0;
}

/* SELECT pg_notify($1, $2), pg_notify($1, $3), ... for msgs, in one round trip on the current
 * connection (made first if needed); 0 when it was sent. */
static int send_batch_once(struct pg_sender *s, size_t n, int64_t deadline)
{
    size_t len = (size_t)snprintf(s->sql, sizeof s->sql, "SELECT ");
    if (ensure_connection(s, deadline) != 0)
        return -1;
    s->params[0] = s->channel;
    for (size_t i = 0; i < n; i++) {
        s->params[i + 1] = s->batch[i];
        len += (size_t)snprintf(s->sql + len, sizeof s->sql - len, "%spg_notify($1, $%zu)",
                                i ? ", " : "", i + 2);
    }
    if (PQsendQueryParams(s->conn, s->sql, (int)n + 1, NULL, s->params, NULL, NULL, 0) == 0 ||
        finish_query(s->conn, deadline) != 0) {
        PQfinish(s->conn);
        s->conn = NULL;
        return -1;
    }
    return 0;
}

/* Sends the first n messages of s->batch. */
static void send_batch(struct pg_sender *s, size_t n)
{
    int64_t deadline = clock_mono_ms() + SEND_TIMEOUT_MS;
    bool had_connection = s->conn != NULL;
    /* A connection idle across a server restart fails on its first use: one more try on a new
     * connection, within the same deadline. */
    if (send_batch_once(s, n, deadline) != 0 && had_connection && clock_mono_ms() < deadline)
        send_batch_once(s, n, deadline);
}

static void *sender_main(void *arg)
{
    struct pg_sender *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->n_queued == 0 && !s->stopping)
            pthread_cond_wait(&s->work, &s->lock);
        size_t n = s->n_queued;
        if (n == 0)
            break; /* stopping, and everything queued was sent */
        memcpy(s->batch, s->queue, n * sizeof s->queue[0]);
        s->n_queued = 0;
        pthread_cond_broadcast(&s->space);
        pthread_mutex_unlock(&s->lock);
        send_batch(s, n);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

struct pg_sender *pg_sender_new(const char *url, const char *channel)
{
    char *parse_err = NULL;
    PQconninfoOption *opts = PQconninfoParse(url, &parse_err);
    struct pg_sender *s;
    PQfreemem(parse_err);
    if (!opts)
        return NULL;
    PQconninfoFree(opts);
    if (!(s = calloc(1, sizeof *s)) || !(s->url = strdup(url))) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->space, NULL);
    snprintf(s->channel, sizeof s->channel, "%s", channel);
    if (pthread_create(&s->thread, NULL, sender_main, s) != 0) {
        pthread_cond_destroy(&s->space);
        pthread_cond_destroy(&s->work);
        pthread_mutex_destroy(&s->lock);
        free(s->url);
        free(s);
        return NULL;
    }
    return s;
}

void pg_sender_send(struct pg_sender *s, const char *msg)
{
    pthread_mutex_lock(&s->lock);
    for (;;) {
        bool queued = false;
        for (size_t i = 0; i < s->n_queued && !queued; i++)
            queued = strncmp(s->queue[i], msg, SEND_MSG_MAX - 1) == 0;
        if (queued)
            break;
        if (s->n_queued < SEND_QUEUE) {
            /* Longer messages are cut: they are hints, and ours are ids of a few dozen bytes. */
            snprintf(s->queue[s->n_queued++], SEND_MSG_MAX, "%s", msg);
            pthread_cond_signal(&s->work);
            break;
        }
        /* Full: the thread is in a round trip (bounded by SEND_TIMEOUT_MS); it takes the whole
         * queue next. */
        pthread_cond_wait(&s->space, &s->lock);
    }
    pthread_mutex_unlock(&s->lock);
}

void pg_sender_free(struct pg_sender *s)
{
    if (!s)
        return;
    /* The thread sends what is queued before it ends (a process's last wake-ups matter too). */
    pthread_mutex_lock(&s->lock);
    s->stopping = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    PQfinish(s->conn);
    pthread_cond_destroy(&s->space);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    free(s->url);
    free(s);
}
