/*
 * notify_pg.c: wake-ups across hosts through PostgreSQL LISTEN/NOTIFY (see notify.h).
 *
 * A process has one connection per channel that does nothing but LISTEN, shared by its listeners
 * of that channel (the gateway's event-stream hub and its long polls), and one connection, with
 * a thread, that sends every channel's NOTIFYs: PostgreSQL signals every listening backend of the
 * database on each NOTIFY transaction, so the server's work grows with senders x listeners, and
 * that is what the sharing keeps down. Both are found again by URL (and channel) in a registry of
 * this process; a forked child does not inherit them.
 *
 * Each listener's caller waits on an epoll fd of its own that holds the shared connection's
 * epoll fd (its socket and a retry timer) and an eventfd, so the fd the caller registered once
 * (with poll or libevent) stays valid while the connection underneath is lost and made again:
 * a lost connection arms the timer, the timer makes the fd readable, and notify_recv() advances
 * a non-blocking reconnection (PQconnectStart/PQconnectPoll, then LISTEN) one step per call.
 * (Only a host name's lookup inside PQconnectStart can block: URLs with an address or a socket
 * directory avoid it.)
 *
 * The sender's thread runs SELECT pg_notify(channel, msg), ... with deadlines on every wait, at
 * most every SEND_GAP_US; callers only queue their message. An unreachable server costs the thread
 * about a second per attempt, and messages are dropped until the next one.
 */
#include "notify_pg.h"
#include "notify.h"
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
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define CONNECT_TIMEOUT_MS 5000 /* one attempt: libpq ignores connect_timeout when polled */
#define RETRY_MIN_MS 200        /* the first retry after a loss (a restart takes about a second) */
#define RETRY_MAX_MS 5000
#define SEND_TIMEOUT_MS 1000 /* a whole send, connection included */
#define SEND_RETRY_MS 1000   /* sends dropped without trying after a failed connection */
#define SEND_GAP_US 2000     /* the least time between the starts of two NOTIFY transactions */

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

/* ---- the LISTEN connection, shared by a process's listeners of one channel ---- */

enum listener_state {
    LISTENER_DOWN,       /* no connection; the timer says when to try again */
    LISTENER_CONNECTING, /* PQconnectPoll in progress */
    LISTENER_LISTENING,  /* LISTEN sent, its result not yet read */
    LISTENER_READY,      /* notifications arrive */
};

struct pg_listener;

struct listen_conn {
    struct listen_conn *next; /* in listen_conns */
    pid_t pid;                /* the process that made it: a forked child makes its own */
    pthread_mutex_t lock;     /* guards the connection, its state and the subscribers' queues */
    struct pg_listener *subscribers;
    char *url;
    char channel[64];
    char listen_sql[96];
    PGconn *conn;
    enum listener_state state;
    PostgresPollingStatusType polling; /* what PQconnectPoll last asked to wait for */
    int epfd;                          /* the socket and the timer (in each subscriber's epfd) */
    int timerfd;                       /* retry, or the deadline of a connection attempt */
    int watched;                       /* the socket registered in epfd, or -1 */
    int64_t deadline;                  /* monotonic ms: retry (DOWN) or give up (connecting) */
    int64_t retry_ms;                  /* the next backoff */
    bool resync_due;                   /* tell the caller once that hints may have been lost */
    bool was_ready;                    /* log a loss once, not each failed retry */
};

static void arm_timer(struct listen_conn *l, int64_t at)
{
    int64_t in = at - clock_mono_ms();
    if (in < 1)
        in = 1; /* zero would disarm it */
    struct itimerspec its = {.it_value = {(time_t)(in / 1000), (long)(in % 1000) * 1000000}};
    l->deadline = at;
    timerfd_settime(l->timerfd, 0, &its, NULL);
}

static void disarm_timer(struct listen_conn *l)
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
static int watch_socket(struct listen_conn *l, uint32_t events)
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

static void drop_connection(struct listen_conn *l)
{
    if (l->watched >= 0)
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, l->watched, NULL);
    l->watched = -1;
    PQfinish(l->conn);
    l->conn = NULL;
}

/* The connection is gone or never came: try again after a growing delay. */
static void lost(struct listen_conn *l, const char *why)
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

static void start_connecting(struct listen_conn *l)
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

static bool socket_ready(const struct listen_conn *l, short events)
{
    struct pollfd pfd = {PQsocket(l->conn), events, 0};
    return poll(&pfd, 1, 0) > 0;
}

static void send_listen(struct listen_conn *l)
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
static void advance_connecting(struct listen_conn *l)
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
static void advance_listening(struct listen_conn *l)
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
static int take_notification(struct listen_conn *l, char *buf, size_t buflen)
{
    PGnotify *n = PQnotifies(l->conn);
    if (!n)
        return 0;
    snprintf(buf, buflen, "%s", n->extra ? n->extra : "");
    PQfreemem(n);
    return buf[0] ? (int)strlen(buf) : -1; /* -1: an empty payload, skipped */
}

static int listen_conn_recv(struct listen_conn *l, char *buf, size_t buflen)
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

static void listen_conn_free(struct listen_conn *l);

static struct listen_conn *listen_conn_new(const char *url, const char *channel, char *err,
                                           size_t errlen)
{
    char *parse_err = NULL;
    PQconninfoOption *opts = PQconninfoParse(url, &parse_err);
    struct listen_conn *l;
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
    l->pid = getpid();
    pthread_mutex_init(&l->lock, NULL);
    snprintf(l->channel, sizeof l->channel, "%s", channel);
    snprintf(l->listen_sql, sizeof l->listen_sql, "LISTEN %s", channel);
    l->watched = -1;
    l->retry_ms = RETRY_MIN_MS;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = l->timerfd};
    if (l->epfd < 0 || l->timerfd < 0 || epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->timerfd, &ev) != 0) {
        snprintf(err, errlen, "cannot make the notify fds: %s", strerror(errno));
        listen_conn_free(l);
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

static void listen_conn_free(struct listen_conn *l)
{
    if (!l)
        return;
    drop_connection(l);
    if (l->timerfd >= 0)
        close(l->timerfd);
    if (l->epfd >= 0)
        close(l->epfd);
    pthread_mutex_destroy(&l->lock);
    free(l->url);
    free(l);
}

/* ---- a listener: one caller's end of a shared LISTEN connection ---- */

/* A gateway has two listeners of "gateway" (the event-stream hub and the long polls) and each
 * NOTIFY signals every listening backend of the database, whatever its channel: one connection
 * per channel and process halves that work on the server. Whichever listener's caller reads
 * drives the connection and copies each notification into every listener's queue, waking the
 * others through their eventfd. A queue that fills (its caller has not read 256 hints) keeps
 * none of the rest and says NOTIFY_RESYNC instead, which is what the caller does for a lost
 * connection: re-read the store. */
#define SUB_QUEUE 256
#define MSG_MAX 128

struct pg_listener {
    struct listen_conn *conn;
    struct pg_listener *next; /* among conn->subscribers */
    int epfd;                 /* what the caller waits on: conn->epfd and wake_fd */
    int wake_fd;              /* eventfd: another listener queued a message here */
    /* Guarded by conn->lock: */
    char queue[SUB_QUEUE][MSG_MAX];
    size_t head, count;
    bool overflowed;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct listen_conn *listen_conns; /* under registry_lock */

static void wake(const struct pg_listener *s)
{
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) {
        /* EAGAIN: the counter is at its maximum, so it is readable anyway. */
    }
}

/* Queues msg for every listener of the connection; from is the one whose caller is reading. */
static void deliver(struct listen_conn *c, const struct pg_listener *from, const char *msg)
{
    for (struct pg_listener *s = c->subscribers; s; s = s->next) {
        if (s->count == SUB_QUEUE) {
            s->overflowed = true;
        } else {
            snprintf(s->queue[(s->head + s->count) % SUB_QUEUE], MSG_MAX, "%s", msg);
            s->count++;
        }
        if (s != from)
            wake(s);
    }
}

int pg_listener_recv(struct pg_listener *s, char *buf, size_t buflen)
{
    struct listen_conn *c = s->conn;
    uint64_t woken;
    char msg[MSG_MAX];
    int n;
    /* Cleared before the queue is looked at: a message queued after the look wakes it again. */
    if (read(s->wake_fd, &woken, sizeof woken) < 0) {
        /* EAGAIN: nobody else queued anything. */
    }
    pthread_mutex_lock(&c->lock);
    /* One notification at a time, so that a burst stays in libpq's list rather than overflowing
     * this queue; the caller reads until 0, which empties that list. */
    while (s->count == 0 && !s->overflowed && (n = listen_conn_recv(c, msg, sizeof msg)) > 0)
        deliver(c, s, msg);
    n = 0;
    if (s->overflowed) {
        s->overflowed = false;
        snprintf(buf, buflen, "%s", NOTIFY_RESYNC);
        n = (int)strlen(buf);
    } else if (s->count > 0) {
        snprintf(buf, buflen, "%s", s->queue[s->head]);
        s->head = (s->head + 1) % SUB_QUEUE;
        s->count--;
        n = (int)strlen(buf);
    }
    pthread_mutex_unlock(&c->lock);
    return n;
}

struct pg_listener *pg_listener_new(const char *url, const char *channel, char *err, size_t errlen)
{
    struct pg_listener *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = s->wake_fd};
    if (s->wake_fd < 0 || s->epfd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->wake_fd, &ev) != 0) {
        snprintf(err, errlen, "cannot make the notify fds: %s", strerror(errno));
        pg_listener_free(s);
        return NULL;
    }
    pthread_mutex_lock(&registry_lock);
    struct listen_conn *c = listen_conns;
    while (c &&
           !(c->pid == getpid() && strcmp(c->url, url) == 0 && strcmp(c->channel, channel) == 0))
        c = c->next;
    bool made = false;
    if (!c && (c = listen_conn_new(url, channel, err, errlen)))
        made = true;
    ev = (struct epoll_event){.events = EPOLLIN, .data.fd = c ? c->epfd : -1};
    if (c && epoll_ctl(s->epfd, EPOLL_CTL_ADD, c->epfd, &ev) != 0) {
        snprintf(err, errlen, "cannot watch the LISTEN connection: %s", strerror(errno));
        if (made)
            listen_conn_free(c);
        c = NULL;
    }
    if (c && made) {
        c->next = listen_conns;
        listen_conns = c;
    }
    if (c) {
        pthread_mutex_lock(&c->lock);
        s->conn = c;
        s->next = c->subscribers;
        c->subscribers = s;
        pthread_mutex_unlock(&c->lock);
    }
    pthread_mutex_unlock(&registry_lock);
    if (!c) {
        pg_listener_free(s);
        return NULL;
    }
    return s;
}

int pg_listener_fd(const struct pg_listener *s)
{
    return s->epfd;
}

bool pg_listener_ready(const struct pg_listener *s)
{
    pthread_mutex_lock(&s->conn->lock);
    bool ready = s->conn->state == LISTENER_READY;
    pthread_mutex_unlock(&s->conn->lock);
    return ready;
}

void pg_listener_free(struct pg_listener *s)
{
    if (!s)
        return;
    struct listen_conn *c = s->conn;
    if (c) {
        pthread_mutex_lock(&registry_lock);
        pthread_mutex_lock(&c->lock);
        for (struct pg_listener **p = &c->subscribers; *p; p = &(*p)->next)
            if (*p == s) {
                *p = s->next;
                break;
            }
        /* Notifications this caller had read into libpq but not handed out would wait for the
         * socket's next data: the others look now. */
        for (struct pg_listener *o = c->subscribers; o; o = o->next)
            wake(o);
        bool last = c->subscribers == NULL;
        pthread_mutex_unlock(&c->lock);
        if (last) {
            for (struct listen_conn **p = &listen_conns; *p; p = &(*p)->next)
                if (*p == c) {
                    *p = c->next;
                    break;
                }
            listen_conn_free(c);
        }
        pthread_mutex_unlock(&registry_lock);
    }
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    free(s);
}

/* ---- the sender ---- */

/* One connection and one thread per process send every channel's messages: callers only queue
 * theirs and return, and the thread sends whatever queued meanwhile, for every channel, in one
 * statement, so one transaction (one commit, one round of signals to the listening backends)
 * carries a gateway's "queue" to the workers and its "events" to the gateways and the workers.
 * Each message is still sent after its caller's commit, so no wake-up comes too early; a burst
 * of enqueues from many HTTP threads costs a few round trips, and no caller ever waits for
 * PostgreSQL. Equal messages to one channel waiting together are sent once (PostgreSQL folds
 * them within one transaction anyway). */
#define SEND_QUEUE 256

struct wakeup {
    char channel[32];
    char msg[MSG_MAX];
};

struct send_conn {
    struct send_conn *next; /* in send_conns */
    pid_t pid;              /* the process that made it: a forked child makes its own */
    int refs;               /* pg_senders using it, under registry_lock */
    pthread_mutex_t lock;   /* guards the queue and stopping */
    pthread_cond_t work;    /* the queue got a message, or stopping */
    pthread_cond_t space;   /* the queue was taken */
    struct wakeup queue[SEND_QUEUE];
    size_t n_queued;
    bool stopping;
    pthread_t thread;
    char *url;
    /* Only the thread touches these: */
    struct wakeup batch[SEND_QUEUE]; /* the queue it took */
    const char *params[2 * SEND_QUEUE];
    char sql[SEND_QUEUE * 32 + 16];
    PGconn *conn;
    int64_t retry_at; /* monotonic ms: no connection attempt before (sends are dropped) */
    bool logged_down; /* one warning per outage */
};

struct pg_sender {
    struct send_conn *conn;
    char channel[32];
};

static struct send_conn *send_conns; /* under registry_lock */

/* Makes the connection if there is none, unless a recent attempt failed; 0 when there is one. */
static int ensure_connection(struct send_conn *s, int64_t deadline)
{
    char why[256];
    if (s->conn)
        return 0;
    if (clock_mono_ms() < s->retry_at)
        return -1;
    s->conn = connect_within(s->url, "sbx-notify-send", deadline, why, sizeof why);
    if (!s->conn) {
        if (!s->logged_down)
            log_warn("notify: cannot reach PostgreSQL to send wake-ups (%s); dropping them, "
                     "receivers poll",
                     why);
        s->logged_down = true;
        s->retry_at = clock_mono_ms() + SEND_RETRY_MS;
        return -1;
    }
    if (s->logged_down)
        log_info("notify: PostgreSQL reachable again for wake-ups");
    s->logged_down = false;
    return 0;
}

/* SELECT pg_notify($1, $2), pg_notify($3, $4), ... for the first n of s->batch, in one round
 * trip on the current connection (made first if needed); 0 when it was sent. */
static int send_batch_once(struct send_conn *s, size_t n, int64_t deadline)
{
    size_t len = (size_t)snprintf(s->sql, sizeof s->sql, "SELECT ");
    if (ensure_connection(s, deadline) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        s->params[2 * i] = s->batch[i].channel;
        s->params[2 * i + 1] = s->batch[i].msg;
        len += (size_t)snprintf(s->sql + len, sizeof s->sql - len, "%spg_notify($%zu, $%zu)",
                                i ? ", " : "", 2 * i + 1, 2 * i + 2);
    }
    if (PQsendQueryParams(s->conn, s->sql, (int)(2 * n), NULL, s->params, NULL, NULL, 0) == 0 ||
        finish_query(s->conn, deadline) != 0) {
        PQfinish(s->conn);
        s->conn = NULL;
        return -1;
    }
    return 0;
}

/* Sends the first n messages of s->batch. */
static void send_batch(struct send_conn *s, size_t n)
{
    int64_t deadline = clock_mono_ms() + SEND_TIMEOUT_MS;
    bool had_connection = s->conn != NULL;
    /* A connection idle across a server restart fails on its first use: one more try on a new
     * connection, within the same deadline. */
    if (send_batch_once(s, n, deadline) != 0 && had_connection && clock_mono_ms() < deadline)
        send_batch_once(s, n, deadline);
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Each NOTIFY transaction costs the server a commit record, the cluster-wide lock that
 * serialises the commits of all transactions with a NOTIFY queued, and a signal to every listening
 * backend, whatever it carries. Not a WAL flush: the transaction writes no other WAL, so its commit
 * takes the asynchronous path (200 NOTIFY transactions, pg_stat_wal: 200 records, 2 syncs), and
 * synchronous_commit=off on this connection would change nothing.
 * Under a stream of enqueues the thread would send one almost per batch, as fast as round trips
 * allow: measured with one gateway at 16 connections, more NOTIFY transactions than enqueue
 * transactions. So a transaction starts no sooner than SEND_GAP_US after the one before, and
 * what queues meanwhile goes in the next one. The first wake-up after a quiet spell goes at once:
 * only wake-ups under a stream of them wait, at most SEND_GAP_US, and the receivers they wake are
 * busy then anyway. */
static void *sender_main(void *arg)
{
    struct send_conn *s = arg;
    int64_t next_send_us = 0;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->n_queued == 0 && !s->stopping)
            pthread_cond_wait(&s->work, &s->lock);
        size_t n = s->n_queued;
        if (n == 0)
            break; /* stopping, and everything queued was sent */
        int64_t early_us = next_send_us - mono_us();
        if (early_us > 0 && !s->stopping) {
            pthread_mutex_unlock(&s->lock);
            struct timespec gap = {0, (long)early_us * 1000};
            while (nanosleep(&gap, &gap) != 0 && errno == EINTR)
                ;
            pthread_mutex_lock(&s->lock);
            continue; /* take what queued meanwhile too */
        }
        next_send_us = mono_us() + SEND_GAP_US;
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

static struct send_conn *send_conn_new(const char *url)
{
    struct send_conn *s = calloc(1, sizeof *s);
    if (!s || !(s->url = strdup(url))) {
        free(s);
        return NULL;
    }
    s->pid = getpid();
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->space, NULL);
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

static void send_conn_free(struct send_conn *s)
{
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

struct pg_sender *pg_sender_new(const char *url, const char *channel)
{
    char *parse_err = NULL;
    PQconninfoOption *opts = PQconninfoParse(url, &parse_err);
    struct pg_sender *p;
    PQfreemem(parse_err);
    if (!opts)
        return NULL;
    PQconninfoFree(opts);
    if (!(p = calloc(1, sizeof *p)))
        return NULL;
    snprintf(p->channel, sizeof p->channel, "%s", channel);
    pthread_mutex_lock(&registry_lock);
    struct send_conn *s = send_conns;
    while (s && !(s->pid == getpid() && strcmp(s->url, url) == 0))
        s = s->next;
    if (!s && (s = send_conn_new(url))) {
        s->next = send_conns;
        send_conns = s;
    }
    if (s)
        s->refs++;
    pthread_mutex_unlock(&registry_lock);
    if (!s) {
        free(p);
        return NULL;
    }
    p->conn = s;
    return p;
}

void pg_sender_send(struct pg_sender *p, const char *msg)
{
    struct send_conn *s = p->conn;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        bool queued = false;
        for (size_t i = 0; i < s->n_queued && !queued; i++)
            queued = strcmp(s->queue[i].channel, p->channel) == 0 &&
                     strncmp(s->queue[i].msg, msg, MSG_MAX - 1) == 0;
        if (queued)
            break;
        if (s->n_queued < SEND_QUEUE) {
            /* Longer messages are cut: they are hints, and ours are ids of a few dozen bytes. */
            struct wakeup *w = &s->queue[s->n_queued++];
            snprintf(w->channel, sizeof w->channel, "%s", p->channel);
            snprintf(w->msg, sizeof w->msg, "%s", msg);
            pthread_cond_signal(&s->work);
            break;
        }
        /* Full: the thread is in a round trip (bounded by SEND_TIMEOUT_MS); it takes the whole
         * queue next. */
        pthread_cond_wait(&s->space, &s->lock);
    }
    pthread_mutex_unlock(&s->lock);
}

void pg_sender_free(struct pg_sender *p)
{
    if (!p)
        return;
    struct send_conn *s = p->conn;
    pthread_mutex_lock(&registry_lock);
    bool last = --s->refs == 0;
    if (last)
        for (struct send_conn **q = &send_conns; *q; q = &(*q)->next)
            if (*q == s) {
                *q = s->next;
                break;
            }
    pthread_mutex_unlock(&registry_lock);
    /* What this sender queued goes with the others' messages, or now with the last one. */
    if (last)
        send_conn_free(s);
    free(p);
}
