/*
 * longpoll.c: parked long polls and the thread that resumes them (see longpoll.h).
 */
#include "longpoll.h"
#include "auth.h"
#include "store_messages.h"
#include "gateway.h"
#include "key_cache.h"
#include "log.h"
#include "notify.h"
#include "clock.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* How often the store is re-read for every waiter, in case a wake-up was lost: each second when
 * wake-ups are datagrams (a burst overflows a socket's queue) or while a LISTEN connection is
 * being made again; every 5 s while PostgreSQL queues them for us, so that thousands of parked
 * requests on several gateways are not a loop of queries against the shared database. */
#define RECHECK_MS 1000
#define RECHECK_RELIABLE_MS 5000

struct waiter {
    struct request *r;
    char message_id[STORE_ID_LEN];
    char session_id[STORE_ID_LEN];
    char app_id[STORE_ID_LEN];
    bool has_key; /* an App key's request: its key is re-checked (key_hash) */
    uint8_t key_hash[32];
    int64_t deadline_ms; /* monotonic */
    bool resume;         /* chosen to be resumed in this round */
    struct waiter *next;
};

/* The wake-ups a park checks (see longpoll_park): more than this many between a request's read
 * of the store and its park, and it is resumed to read again. */
#define RECENT_HINTS 256

struct longpoll {
    struct gateway *gw;
    struct notify_listener *notify; /* "msg <id>" from workers, on any host */
    int wake_fd;                    /* eventfd: stop, or a new waiter with its own deadline */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t lock;
    struct waiter *waiters;
    int parked; /* requests suspended and not yet run again */
    bool stopping;
    /* The wake-ups taken in so far ("msg <id>" and resyncs), and the last RECENT_HINTS of them:
     * recent[k % RECENT_HINTS] is the k-th (from 1), its message id or "" for a resync, which
     * may stand for any message. Under lock. */
    uint64_t hints;
    char recent[RECENT_HINTS][STORE_ID_LEN];
    /* A test hook (SBX_TEST_PARK_DELAY_MS): how long a park waits before it takes the lock, to
     * hold a request between its read of the store and its park. 0 otherwise. */
    int park_delay_ms;
    /* A test hook (SBX_TEST_RECHECK_MS): the recheck's period instead of RECHECK_MS and
     * RECHECK_RELIABLE_MS, so that a test can tell a wake-up from the recheck without a clock
     * window. 0 otherwise. */
    int recheck_ms;
};

static int64_t recheck_every(const struct longpoll *lp)
{
    if (lp->recheck_ms > 0)
        return lp->recheck_ms;
    return notify_listener_reliable(lp->notify) ? RECHECK_RELIABLE_MS : RECHECK_MS;
}

uint64_t longpoll_hints_seen(struct longpoll *lp)
{
    pthread_mutex_lock(&lp->lock);
    uint64_t n = lp->hints;
    pthread_mutex_unlock(&lp->lock);
    return n;
}

/* Whether a wake-up for message_id (or a resync) was taken in after the seen-th. Under lock. */
static bool woken_since(const struct longpoll *lp, uint64_t seen, const char *message_id)
{
    if (lp->hints - seen >= RECENT_HINTS)
        return true; /* the ones after seen are no longer all kept: read again to be sure */
    for (uint64_t k = seen + 1; k <= lp->hints; k++) {
        const char *id = lp->recent[k % RECENT_HINTS];
        if (id[0] == '\0' || strcmp(id, message_id) == 0)
            return true;
    }
    return false;
}

/* Keeps a wake-up taken in (message_id, or "" for a resync). Under lock. */
static void note_hint(struct longpoll *lp, const char *message_id)
{
    lp->hints++;
    snprintf(lp->recent[lp->hints % RECENT_HINTS], STORE_ID_LEN, "%s", message_id);
}

void longpoll_park(struct longpoll *lp, struct request *r, const char *message_id)
{
    if (lp->park_delay_ms > 0)
        usleep((useconds_t)lp->park_delay_ms * 1000);
    struct waiter *w = calloc(1, sizeof *w);
    /* Suspend first: once the waiter is visible the thread may resume it at any moment, and
     * MHD only accepts a resume for a connection that is already suspended. */
    MHD_suspend_connection(r->conn);
    r->parked = true;
    pthread_mutex_lock(&lp->lock);
    lp->parked++;
    if (!w || lp->stopping) {
        pthread_mutex_unlock(&lp->lock);
        free(w);
        MHD_resume_connection(r->conn);
        return;
    }
    w->r = r;
    snprintf(w->message_id, sizeof w->message_id, "%s", message_id);
    snprintf(w->session_id, sizeof w->session_id, "%s", r->params[0]);
    snprintf(w->app_id, sizeof w->app_id, "%s", r->app_id);
    w->has_key = !r->is_admin;
    memcpy(w->key_hash, r->key_hash, sizeof w->key_hash);
    w->deadline_ms = r->wait_deadline_ms;
    /* Its wake-up may have come since the handler read the store: the thread then resumes it
     * at once (the write below wakes it), and the handler reads the store again. */
    w->resume = woken_since(lp, r->wait_hints, message_id);
    w->next = lp->waiters;
    lp->waiters = w;
    pthread_mutex_unlock(&lp->lock);
    /* The thread may be asleep until a later re-check (5 s while LISTEN is up): a deadline
     * sooner than that must end its poll, or the wait would outlast max_wait. */
    uint64_t one = 1;
    if (write(lp->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        log_warn("longpoll: cannot wake the thread: %s", strerror(errno));
}

void longpoll_unparked(struct longpoll *lp)
{
    pthread_mutex_lock(&lp->lock);
    lp->parked--;
    pthread_mutex_unlock(&lp->lock);
}

/* Unlinks the waiters marked resume (under the lock) and resumes them (outside it). */
static void resume_marked(struct longpoll *lp)
{
    struct waiter *done = NULL, **pp;
    pthread_mutex_lock(&lp->lock);
    for (pp = &lp->waiters; *pp;) {
        struct waiter *w = *pp;
        if (w->resume) {
            *pp = w->next;
            w->next = done;
            done = w;
        } else {
            pp = &w->next;
        }
    }
    pthread_mutex_unlock(&lp->lock);
    while (done) {
        struct waiter *next = done->next;
        MHD_resume_connection(done->r->conn);
        free(done);
        done = next;
    }
}

/* Marks the waiters of a message (all of them when id is NULL) and those past their deadline;
 * a message id that is a wake-up (hint) is kept for the parks to come. */
static void mark(struct longpoll *lp, const char *message_id, int64_t now, bool hint)
{
    pthread_mutex_lock(&lp->lock);
    if (hint)
        note_hint(lp, message_id);
    for (struct waiter *w = lp->waiters; w; w = w->next)
        if (!message_id || strcmp(w->message_id, message_id) == 0 || w->deadline_ms <= now)
            w->resume = true;
    pthread_mutex_unlock(&lp->lock);
}

/* The fallback for lost wake-ups, and the re-check after a key change: reads each waited-for
 * message's state from the store, and checks each waiter's key (through the key cache, so a
 * store read only after a change or once per auth_cache_ms). A waiter whose key was revoked, or
 * whose App was deleted, is resumed to answer 401. Only this thread unlinks waiters, so the
 * snapshot's pointers stay valid without the lock. */
static void recheck(struct longpoll *lp)
{
    struct store *st = lp->gw->st;
    struct waiter **snap = NULL;
    size_t n = 0, cap = 0;

    pthread_mutex_lock(&lp->lock);
    for (struct waiter *w = lp->waiters; w; w = w->next) {
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            struct waiter **grown = realloc(snap, cap * sizeof *snap);
            if (!grown)
                break;
            snap = grown;
        }
        snap[n++] = w;
    }
    pthread_mutex_unlock(&lp->lock);
    for (size_t i = 0; i < n; i++) {
        struct store_key key;
        if (snap[i]->has_key &&
            auth_key_check(lp->gw, snap[i]->key_hash, &key) == STORE_NOT_FOUND) {
            pthread_mutex_lock(&lp->lock);
            snap[i]->r->key_revoked = true; /* read by the handler's thread once resumed */
            snap[i]->resume = true;
            pthread_mutex_unlock(&lp->lock);
            continue;
        }
        struct store_message m;
        enum store_status s =
            store_message_get(st, snap[i]->app_id, snap[i]->session_id, snap[i]->message_id, &m);
        bool finished =
            s != STORE_OK || strcmp(m.state, "completed") == 0 || strcmp(m.state, "failed") == 0;
        if (s == STORE_OK)
            store_message_clear(&m);
        if (finished) {
            pthread_mutex_lock(&lp->lock);
            snap[i]->resume = true;
            pthread_mutex_unlock(&lp->lock);
        }
    }
    free(snap);
}

static int64_t next_deadline(struct longpoll *lp)
{
    int64_t d = INT64_MAX;
    pthread_mutex_lock(&lp->lock);
    for (struct waiter *w = lp->waiters; w; w = w->next)
        if (w->deadline_ms < d)
            d = w->deadline_ms;
    pthread_mutex_unlock(&lp->lock);
    return d;
}

static void *longpoll_main(void *arg)
{
    struct longpoll *lp = arg;
    int64_t last_recheck = clock_mono_ms();
    char buf[128];

    for (;;) {
        int64_t now = clock_mono_ms();
        int64_t every = recheck_every(lp);
        int64_t timeout = last_recheck + every - now;
        int64_t d = next_deadline(lp);
        if (d != INT64_MAX && d - now < timeout)
            timeout = d - now;
        if (timeout < 0)
            timeout = 0;
        struct pollfd fds[2] = {{notify_listener_fd(lp->notify), POLLIN, 0},
                                {lp->wake_fd, POLLIN, 0}};
        int rc = poll(fds, 2, (int)timeout);
        if (rc < 0 && errno != EINTR) {
            log_error("longpoll: poll: %s", strerror(errno));
            break;
        }
        if (fds[1].revents) {
            uint64_t v;
            if (read(lp->wake_fd, &v, sizeof v) < 0 && errno != EAGAIN)
                log_warn("longpoll: wake-up: %s", strerror(errno));
            pthread_mutex_lock(&lp->lock);
            bool stopping = lp->stopping;
            pthread_mutex_unlock(&lp->lock);
            if (stopping)
                break;
        }
        now = clock_mono_ms();
        bool resync = false, keys = false;
        while (fds[0].revents && notify_recv(lp->notify, buf, sizeof buf) > 0) {
            if (strncmp(buf, "msg ", 4) == 0 && buf[4] != '\0')
                mark(lp, buf + 4, now, true);
            else if (strcmp(buf, "keys") == 0)
                keys = true;
            else if (strcmp(buf, NOTIFY_RESYNC) == 0)
                resync = true;
        }
        /* Deadlines only (no message id is ""); after a resync, any park to come reads the store
         * again, as the recheck below does for the parked ones. */
        mark(lp, "", now, resync);
        /* This thread takes the gateway's "keys" too; after a lost LISTEN connection, "msg" and
         * "keys" hints may have been missed. The waiters' keys are checked again at once. */
        if (resync || keys)
            key_cache_clear(lp->gw->keys);
        every = recheck_every(lp);
        if (resync || keys || now - last_recheck >= every) {
            recheck(lp);
            last_recheck = now;
        }
        resume_marked(lp);
    }
    return NULL;
}

struct longpoll *longpoll_start(struct gateway *gw, char *err, size_t errlen)
{
    struct longpoll *lp = calloc(1, sizeof *lp);
    char run_dir[600], why[512];
    if (!lp) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    lp->gw = gw;
    lp->wake_fd = -1;
    const char *delay = getenv("SBX_TEST_PARK_DELAY_MS");
    lp->park_delay_ms = delay ? atoi(delay) : 0;
    const char *recheck = getenv("SBX_TEST_RECHECK_MS");
    lp->recheck_ms = recheck ? atoi(recheck) : 0;
    pthread_mutex_init(&lp->lock, NULL);
    lp->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (lp->wake_fd < 0) {
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        longpoll_free(lp);
        return NULL;
    }
    snprintf(run_dir, sizeof run_dir, "%s/run", gw->cfg.data_dir);
    lp->notify = notify_listen(gw->cfg.store, run_dir, "gateway", why, sizeof why);
    if (!lp->notify) {
        snprintf(err, errlen, "cannot listen for wake-ups: %s", why);
        longpoll_free(lp);
        return NULL;
    }
    if (pthread_create(&lp->thread, NULL, longpoll_main, lp) != 0) {
        snprintf(err, errlen, "cannot start the long-poll thread");
        longpoll_free(lp);
        return NULL;
    }
    lp->thread_started = true;
    return lp;
}

void longpoll_stop(struct longpoll *lp, int timeout_ms)
{
    uint64_t one = 1;
    if (!lp)
        return;
    pthread_mutex_lock(&lp->lock);
    lp->stopping = true;
    pthread_mutex_unlock(&lp->lock);
    if (lp->thread_started) {
        if (write(lp->wake_fd, &one, sizeof one) < 0)
            log_warn("longpoll: cannot wake the thread: %s", strerror(errno));
        pthread_join(lp->thread, NULL);
        lp->thread_started = false;
    }
    mark(lp, NULL, clock_mono_ms(), false);
    resume_marked(lp);
    /* MHD must not be stopped while a connection is suspended: wait for them to run again. */
    for (int64_t end = clock_mono_ms() + timeout_ms; clock_mono_ms() < end;) {
        pthread_mutex_lock(&lp->lock);
        int parked = lp->parked;
        pthread_mutex_unlock(&lp->lock);
        if (parked <= 0)
            break;
        usleep(10000);
    }
}

void longpoll_free(struct longpoll *lp)
{
    if (!lp)
        return;
    if (lp->thread_started)
        longpoll_stop(lp, 0);
    notify_listener_close(lp->notify);
    if (lp->wake_fd >= 0)
        close(lp->wake_fd);
    pthread_mutex_destroy(&lp->lock);
    free(lp);
}
