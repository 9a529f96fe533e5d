/*
 * sse.c: the streams' hub thread and the content reader every stream shares (see sse.h).
 */
#include "sse.h"
#include "auth.h"
#include "key_cache.h"
#include "store_stream.h"
#include "log.h"
#include "clock.h"
#include "notify.h"
#include "reply.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* The fallback re-read for lost wake-ups, as for long polls (longpoll.c). */
#define RECHECK_MS 1000
#define RECHECK_RELIABLE_MS 5000
/* Largest piece MHD asks the reader for at once. */
#define SSE_BLOCK 1024
/* At most one "events" hint per this many ms from a gateway: under a stream of writes (thousands
 * of enqueues a second), one hint per write would cost every gateway's hub and long-poll threads
 * a wake-up and the hub a store read each. The first write after a quiet spell is hinted at once.
 */
#define EVENTS_HINT_MS 5

/* The last event of a stream whose key was revoked (or whose App was deleted): a Problem, as
 * the 401 its next request gets. */
#define REVOKED_DATA                                                                               \
    "{\"type\":\"urn:sbx:problem:unauthorized\",\"title\":\"Missing, invalid or revoked "          \
    "token\",\"status\":401,\"detail\":\"the API key of this stream was revoked or its App "       \
    "deleted\",\"code\":\"unauthorized\"}"

struct sse_stream {
    struct sse_hub *hub;
    struct MHD_Connection *conn;
    int fd; /* the connection's socket, watched for a hang-up while suspended */
    enum sse_topic topic;
    char key[STORE_ID_LEN];
    char client[64];
    bool has_key; /* opened with an App key: re-checked when keys change (check_keys) */
    uint8_t key_hash[32];
    sse_produce_fn produce;
    void *ctx;
    void (*free_ctx)(void *);
    /* Output not yet handed to MHD; only the MHD thread running the reader touches it. */
    char *buf;
    size_t len, off, cap;
    bool ended;
    /* Under the hub's lock. */
    int64_t keepalive_due_ms; /* monotonic */
    bool suspended;
    bool woken;   /* marked while it was not suspended: produce again before suspending */
    bool hung_up; /* the client closed the connection while it was suspended */
    bool revoked; /* its key was revoked or its App deleted: it ends with a "revoked" event */
    struct sse_stream *prev, *next;
};

struct sse_hub {
    struct gateway *gw;
    struct notify_listener *notify; /* "chunk <id>", "msg <id>", ... from workers and gateways */
    struct notify_peer *gateways;   /* "events" to every gateway's hub, this one's too */
    int wake_fd;                    /* eventfd: stop, or an earlier keep-alive deadline */
    int epoll_fd; /* the suspended streams' sockets: MHD does not watch them, so a client that
                   * leaves would stay counted (and in memory) until its next keep-alive */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t lock;
    struct sse_stream *streams;
    size_t n_suspended;
    int64_t sleep_until_ms; /* when the hub thread wakes next by itself */
    bool stopping;
    int64_t last_event_id; /* hub thread only: the newest event id it has seen */
    bool hint_pending;     /* atomic: a write of this gateway awaits its "events" hint */
    int64_t last_hint_ms;  /* hub thread only: when it last sent one (monotonic) */
    /* A test hook (SBX_TEST_RECHECK_MS): the re-read's period instead of RECHECK_MS and
     * RECHECK_RELIABLE_MS, so that a test can tell a wake-up from the re-read without a clock
     * window. 0 otherwise. */
    int recheck_ms;
};

static void hub_poke(struct sse_hub *h)
{
    uint64_t one = 1;
    if (write(h->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        log_warn("sse: cannot wake the hub thread: %s", strerror(errno));
}

int sse_append(struct sse_stream *s, const char *text, size_t len)
{
    if (s->len + len > s->cap) {
        size_t cap = s->cap ? s->cap : 1024;
        while (cap < s->len + len)
            cap *= 2;
        char *grown = realloc(s->buf, cap);
        if (!grown)
            return -1;
        s->buf = grown;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, text, len);
    s->len += len;
    return 0;
}

int sse_append_event(struct sse_stream *s, int64_t id, const char *event, const char *data)
{
    char head[96];
    int n = 0;
    if (id >= 0)
        n += snprintf(head + n, sizeof head - (size_t)n, "id: %" PRId64 "\n", id);
    if (event)
        n += snprintf(head + n, sizeof head - (size_t)n, "event: %.60s\n", event);
    /* data is compact JSON: one line, so one data: field. */
    if (sse_append(s, head, (size_t)n) != 0 || sse_append(s, "data: ", 6) != 0 ||
        sse_append(s, data, strlen(data)) != 0 || sse_append(s, "\n\n", 2) != 0)
        return -1;
    return 0;
}

/* MHD's content reader: hands out what is buffered, produces more, or suspends until the hub
 * resumes the connection. */
static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max)
{
    struct sse_stream *s = cls;
    struct sse_hub *h = s->hub;
    (void)pos;
    for (;;) {
        if (s->off < s->len) {
            size_t n = s->len - s->off < max ? s->len - s->off : max;
            memcpy(out, s->buf + s->off, n);
            s->off += n;
            return (ssize_t)n;
        }
        s->off = s->len = 0;
        if (s->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&h->lock);
        if (s->hung_up) {
            pthread_mutex_unlock(&h->lock);
            return MHD_CONTENT_READER_END_WITH_ERROR; /* MHD closes the connection */
        }
        s->woken = false;
        bool stopping = h->stopping, revoked = s->revoked;
        pthread_mutex_unlock(&h->lock);
        if (revoked) {
            s->ended = true;
            if (sse_append_event(s, -1, "revoked", REVOKED_DATA) != 0)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        if (stopping) {
            s->ended = true;
            continue;
        }
        if (s->produce(s, s->ctx, &s->ended) != 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        int64_t now = clock_mono_ms();
        pthread_mutex_lock(&h->lock);
        if (s->len > 0) {
            s->keepalive_due_ms = now + h->gw->cfg.stream_keepalive * 1000;
            pthread_mutex_unlock(&h->lock);
            continue;
        }
        if (s->ended) {
            pthread_mutex_unlock(&h->lock);
            continue;
        }
        if (now >= s->keepalive_due_ms) {
            s->keepalive_due_ms = now + h->gw->cfg.stream_keepalive * 1000;
            pthread_mutex_unlock(&h->lock);
            if (sse_append(s, ": keep-alive\n\n", 14) != 0)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        if (s->woken || h->stopping) {
            pthread_mutex_unlock(&h->lock);
            continue;
        }
        /* Suspended under the lock: the hub resumes only streams it saw suspended. */
        s->suspended = true;
        h->n_suspended++;
        if (s->fd >= 0) {
            struct epoll_event ev = {.events = EPOLLRDHUP, .data.ptr = s};
            if (epoll_ctl(h->epoll_fd, EPOLL_CTL_ADD, s->fd, &ev) != 0)
                log_debug("sse: cannot watch a stream's socket: %s", strerror(errno));
        }
        MHD_suspend_connection(s->conn);
        bool poke = s->keepalive_due_ms < h->sleep_until_ms;
        pthread_mutex_unlock(&h->lock);
        if (poke)
            hub_poke(h);
        return 0;
    }
}

/* The response is gone (the request ended): the stream leaves the hub. */
static void sse_release(void *cls)
{
    struct sse_stream *s = cls;
    struct sse_hub *h = s->hub;
    pthread_mutex_lock(&h->lock);
    if (s->prev)
        s->prev->next = s->next;
    else
        h->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    pthread_mutex_unlock(&h->lock);
    if (s->free_ctx)
        s->free_ctx(s->ctx);
    free(s->buf);
    free(s);
}

enum MHD_Result sse_reply(struct request *r, enum sse_topic topic, const char *key,
                          sse_produce_fn produce, void *ctx, void (*free_ctx)(void *))
{
    struct sse_hub *h = r->gw->sse;
    struct sse_stream *s = calloc(1, sizeof *s);
    int64_t open = 0;
    if (!s) {
        free_ctx(ctx);
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory");
    }
    s->hub = h;
    s->conn = r->conn;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    s->fd = ci ? ci->connect_fd : -1;
    s->topic = topic;
    snprintf(s->key, sizeof s->key, "%s", key ? key : "");
    snprintf(s->client, sizeof s->client, "%s", r->actor);
    s->has_key = !r->is_admin;
    memcpy(s->key_hash, r->key_hash, sizeof s->key_hash);
    s->produce = produce;
    s->ctx = ctx;
    s->free_ctx = free_ctx;
    pthread_mutex_lock(&h->lock);
    for (struct sse_stream *o = h->streams; o; o = o->next)
        open += strcmp(o->client, s->client) == 0;
    /* While stopping, a new stream is still answered: its reader ends it at once. */
    bool refused = open >= r->gw->cfg.stream_limit;
    if (!refused) {
        s->keepalive_due_ms = clock_mono_ms() + r->gw->cfg.stream_keepalive * 1000;
        s->next = h->streams;
        if (h->streams)
            h->streams->prev = s;
        h->streams = s;
    }
    pthread_mutex_unlock(&h->lock);
    if (refused) {
        free_ctx(ctx);
        free(s);
        return reply_problem_header(r, PROBLEM_TOO_MANY_STREAMS, NULL, "Retry-After", "1",
                                    "this caller has %" PRId64 " open streams; the limit is %lld",
                                    open, (long long)r->gw->cfg.stream_limit);
    }
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK, sse_read, s, sse_release);
    if (!resp) {
        sse_release(s);
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "cannot create the stream");
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    /* Proxies that buffer responses (nginx) are asked not to. */
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    return reply_response(r, 200, resp);
}

/* Marks one stream (under the lock): resumed when suspended, else produced again before it
 * suspends. A suspended one's connection is added to resume[]. */
static void mark_one(struct sse_hub *h, struct sse_stream *s, struct MHD_Connection ***resume,
                     size_t *n, size_t *cap)
{
    if (!s->suspended) {
        s->woken = true;
        return;
    }
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        struct MHD_Connection **grown = realloc(*resume, c * sizeof *grown);
        if (!grown) {
            s->woken = true; /* resumed at the next round */
            return;
        }
        *resume = grown;
        *cap = c;
    }
    s->suspended = false;
    h->n_suspended--;
    if (s->fd >= 0)
        epoll_ctl(h->epoll_fd, EPOLL_CTL_DEL, s->fd, NULL);
    (*resume)[(*n)++] = s->conn;
}

struct marks {
    const char *const *messages; /* message ids with news */
    size_t n_messages;
    struct sse_stream *const *hung; /* streams whose client hung up, sorted */
    size_t n_hung;
    bool all_messages; /* a re-read for lost wake-ups */
    bool events;       /* the newest event id moved */
};

static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

/* Resumes what the marks name and what is due for a keep-alive; returns the next keep-alive
 * deadline of a suspended stream (INT64_MAX: none). */
static int64_t mark_and_resume(struct sse_hub *h, const struct marks *mk, bool everything)
{
    struct MHD_Connection **resume = NULL;
    size_t n = 0, cap = 0;
    int64_t now = clock_mono_ms(), next = INT64_MAX;
    pthread_mutex_lock(&h->lock);
    for (struct sse_stream *s = h->streams; s; s = s->next) {
        bool hit = everything || s->revoked || s->keepalive_due_ms <= now;
        if (mk->n_hung && s->suspended &&
            bsearch(&s, mk->hung, mk->n_hung, sizeof *mk->hung, ptr_cmp)) {
            s->hung_up = true;
            hit = true;
        }
        if (s->topic == SSE_TOPIC_EVENTS)
            hit = hit || mk->events;
        else if (mk->all_messages)
            hit = true;
        else
            for (size_t i = 0; !hit && i < mk->n_messages; i++)
                hit = strcmp(s->key, mk->messages[i]) == 0;
        if (hit)
            mark_one(h, s, &resume, &n, &cap);
        else if (s->suspended && s->keepalive_due_ms < next)
            next = s->keepalive_due_ms;
    }
    pthread_mutex_unlock(&h->lock);
    for (size_t i = 0; i < n; i++)
        MHD_resume_connection(resume[i]);
    free(resume);
    return next;
}

/* Whether an event was committed since the hub last looked. */
static bool events_moved(struct sse_hub *h)
{
    int64_t id = 0;
    if (store_event_last_id(h->gw->st, &id) != STORE_OK || id <= h->last_event_id)
        return false;
    h->last_event_id = id;
    return true;
}

static int hash_cmp(const void *a, const void *b)
{
    return memcmp(a, b, 32);
}

/* Checks the key of every stream opened with one (through the key cache: a store read per
 * distinct key after a change, else at most once per auth_cache_ms) and marks those whose key
 * is gone revoked; mark_and_resume then resumes them to end. The store is read without the lock:
 * the streams are matched again by key afterwards, so one closed meanwhile is simply not found. */
static void check_keys(struct sse_hub *h)
{
    uint8_t(*keys)[32] = NULL;
    size_t n = 0, cap = 0, gone = 0;
    pthread_mutex_lock(&h->lock);
    for (struct sse_stream *s = h->streams; s; s = s->next) {
        if (!s->has_key || s->revoked)
            continue;
        if (n == cap) {
            size_t c = cap ? cap * 2 : 16;
            uint8_t(*grown)[32] = realloc(keys, c * sizeof *grown);
            if (!grown)
                break; /* the rest at the next round */
            keys = grown;
            cap = c;
        }
        memcpy(keys[n++], s->key_hash, 32);
    }
    pthread_mutex_unlock(&h->lock);
    if (n == 0) {
        free(keys);
        return;
    }
    qsort(keys, n, sizeof *keys, hash_cmp);
    /* The distinct keys whose check says they are gone are gathered at the front. */
    uint8_t last[32];
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && memcmp(keys[i], last, 32) == 0)
            continue;
        memcpy(last, keys[i], 32);
        struct store_key key;
        if (auth_key_check(h->gw, keys[i], &key) == STORE_NOT_FOUND)
            memmove(keys[gone++], keys[i], 32);
    }
    if (gone > 0) {
        pthread_mutex_lock(&h->lock);
        for (struct sse_stream *s = h->streams; s; s = s->next)
            if (s->has_key && bsearch(s->key_hash, keys, gone, sizeof *keys, hash_cmp))
                s->revoked = true;
        pthread_mutex_unlock(&h->lock);
    }
    free(keys);
}

#define MAX_MARKS 64

/* Sends the pending "events" hint when its interval has passed; true when one is still pending
 * (the hub wakes for it at last_hint_ms + EVENTS_HINT_MS). */
static bool send_hint(struct sse_hub *h, int64_t now)
{
    if (!__atomic_load_n(&h->hint_pending, __ATOMIC_SEQ_CST))
        return false;
    if (now - h->last_hint_ms < EVENTS_HINT_MS)
        return true;
    /* Cleared before sending: a write committed after this sees no pending hint and pokes. */
    __atomic_store_n(&h->hint_pending, false, __ATOMIC_SEQ_CST);
    h->last_hint_ms = now;
    notify_send(h->gateways, "events");
    /* The workers' webhook threads too: the events committed may have an endpoint. */
    if (h->gw->workers)
        notify_send(h->gw->workers, "events");
    return false;
}

static void *hub_main(void *arg)
{
    struct sse_hub *h = arg;
    int64_t last_recheck = clock_mono_ms(), next_keepalive = INT64_MAX;
    char bufs[MAX_MARKS + 1][128]; /* the last one takes what is not kept */
    const char *ids[MAX_MARKS];

    for (;;) {
        int64_t now = clock_mono_ms();
        int64_t every = h->recheck_ms > 0                     ? h->recheck_ms
                        : notify_listener_reliable(h->notify) ? RECHECK_RELIABLE_MS
                                                              : RECHECK_MS;
        int64_t until = last_recheck + every;
        if (next_keepalive < until)
            until = next_keepalive;
        if (send_hint(h, now) && h->last_hint_ms + EVENTS_HINT_MS < until)
            until = h->last_hint_ms + EVENTS_HINT_MS;
        pthread_mutex_lock(&h->lock);
        h->sleep_until_ms = until;
        pthread_mutex_unlock(&h->lock);
        int64_t timeout = until > now ? until - now : 0;
        struct pollfd fds[3] = {{notify_listener_fd(h->notify), POLLIN, 0},
                                {h->wake_fd, POLLIN, 0},
                                {h->epoll_fd, POLLIN, 0}};
        int rc = poll(fds, 3, (int)timeout);
        if (rc < 0 && errno != EINTR) {
            log_error("sse: poll: %s", strerror(errno));
            break;
        }
        if (fds[1].revents) {
            uint64_t v;
            if (read(h->wake_fd, &v, sizeof v) < 0 && errno != EAGAIN)
                log_warn("sse: eventfd: %s", strerror(errno));
        }
        pthread_mutex_lock(&h->lock);
        bool stopping = h->stopping;
        pthread_mutex_unlock(&h->lock);
        if (stopping)
            break;
        struct marks mk = {ids, 0, NULL, 0, false, false};
        bool any = false, resync = false, keys = false;
        struct epoll_event evs[256];
        struct sse_stream *hung[256];
        int nh = fds[2].revents ? epoll_wait(h->epoll_fd, evs, 256, 0) : 0;
        for (int i = 0; i < nh; i++)
            hung[i] = evs[i].data.ptr;
        if (nh > 0) {
            /* Pointers only: mark_and_resume uses those still suspended (still alive). */
            qsort(hung, (size_t)nh, sizeof *hung, ptr_cmp);
            mk.hung = hung;
            mk.n_hung = (size_t)nh;
        }
        while (fds[0].revents && notify_recv(h->notify, bufs[mk.n_messages], 128) > 0) {
            char *b = bufs[mk.n_messages];
            any = true;
            if (strcmp(b, NOTIFY_RESYNC) == 0) {
                resync = true;
                continue;
            }
            if (strcmp(b, "keys") == 0) {
                keys = true;
                continue;
            }
            const char *id = strncmp(b, "chunk ", 6) == 0 ? b + 6
                             : strncmp(b, "msg ", 4) == 0 ? b + 4
                                                          : NULL;
            if (id && mk.n_messages < MAX_MARKS)
                ids[mk.n_messages++] = id;
            else if (id)
                mk.all_messages = true;
        }
        now = clock_mono_ms();
        bool recheck = resync || now - last_recheck >= every;
        if (recheck) {
            mk.all_messages = true;
            any = true;
            last_recheck = now;
        }
        /* A key revoked or an App deleted ("keys", from whichever gateway did it; after a lost
         * LISTEN connection it may have been missed): the cache is cleared here too, since the
         * long-poll thread may take its copy of the wake-up later, and every stream's key is
         * checked against the store. The slow re-read checks them too (through the cache), for
         * a key revoked in the database behind the gateways' back. */
        if (keys || resync)
            key_cache_clear(h->gw->keys);
        if (keys || recheck)
            check_keys(h);
        /* Only streams wait for events: with none open, a hint costs no store read (under a
         * stream of writes every gateway hints every other one every EVENTS_HINT_MS). A stream
         * opened later reads the store itself, and the first hint after it finds the id moved
         * on (at worst one wake-up for nothing). */
        pthread_mutex_lock(&h->lock);
        bool watched = h->streams != NULL;
        pthread_mutex_unlock(&h->lock);
        if (any && watched)
            mk.events = events_moved(h);
        next_keepalive = mark_and_resume(h, &mk, false);
    }
    return NULL;
}

struct sse_hub *sse_start(struct gateway *gw, char *err, size_t errlen)
{
    struct sse_hub *h = calloc(1, sizeof *h);
    char run_dir[600], why[512];
    if (!h) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->gw = gw;
    h->wake_fd = -1;
    h->epoll_fd = -1;
    const char *recheck = getenv("SBX_TEST_RECHECK_MS");
    h->recheck_ms = recheck ? atoi(recheck) : 0;
    pthread_mutex_init(&h->lock, NULL);
    h->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    h->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (h->wake_fd < 0 || h->epoll_fd < 0) {
        snprintf(err, errlen, "eventfd/epoll: %s", strerror(errno));
        sse_free(h);
        return NULL;
    }
    snprintf(run_dir, sizeof run_dir, "%s/run", gw->cfg.data_dir);
    h->notify = notify_listen(gw->cfg.store, run_dir, "gateway", why, sizeof why);
    h->gateways = notify_peer_new(gw->cfg.store, run_dir, "gateway");
    if (!h->notify || !h->gateways) {
        snprintf(err, errlen, "cannot listen for stream wake-ups: %s",
                 h->notify ? "no wake-up sender" : why);
        sse_free(h);
        return NULL;
    }
    if (store_event_last_id(gw->st, &h->last_event_id) != STORE_OK)
        h->last_event_id = 0;
    if (pthread_create(&h->thread, NULL, hub_main, h) != 0) {
        snprintf(err, errlen, "cannot start the stream thread");
        sse_free(h);
        return NULL;
    }
    h->thread_started = true;
    return h;
}

void sse_committed(struct sse_hub *h)
{
    /* The hub thread sends it (send_hint); only the first write since its last hint wakes it. */
    if (h && h->gateways && !__atomic_exchange_n(&h->hint_pending, true, __ATOMIC_SEQ_CST))
        hub_poke(h);
}

void sse_stop(struct sse_hub *h, int timeout_ms)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->lock);
    h->stopping = true;
    pthread_mutex_unlock(&h->lock);
    if (h->thread_started) {
        hub_poke(h);
        pthread_join(h->thread, NULL);
        h->thread_started = false;
    }
    if (__atomic_exchange_n(&h->hint_pending, false, __ATOMIC_SEQ_CST)) {
        notify_send(h->gateways, "events"); /* the other gateways' feeds */
        if (h->gw->workers)
            notify_send(h->gw->workers, "events"); /* the workers' webhook threads */
    }
    struct marks none = {NULL, 0, NULL, 0, false, false};
    mark_and_resume(h, &none, true);
    /* MHD must not be stopped while a connection is suspended. */
    for (int64_t end = clock_mono_ms() + timeout_ms; clock_mono_ms() < end;) {
        pthread_mutex_lock(&h->lock);
        size_t left = h->n_suspended;
        pthread_mutex_unlock(&h->lock);
        if (left == 0)
            break;
        mark_and_resume(h, &none, true);
        usleep(10000);
    }
}

void sse_free(struct sse_hub *h)
{
    if (!h)
        return;
    if (h->thread_started)
        sse_stop(h, 0);
    notify_listener_close(h->notify);
    notify_peer_free(h->gateways);
    if (h->wake_fd >= 0)
        close(h->wake_fd);
    if (h->epoll_fd >= 0)
        close(h->epoll_fd);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

bool sse_last_event_id(struct request *r, int64_t *id)
{
    const char *v = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Last-Event-ID");
    *id = -1;
    if (!v)
        return true;
    while (*v == ' ')
        v++;
    size_t n = strlen(v);
    while (n > 0 && v[n - 1] == ' ')
        n--;
    if (n == 0 || n > 18)
        return false;
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)v[i]))
            return false;
        x = x * 10 + (v[i] - '0');
    }
    *id = x;
    return true;
}

bool sse_wanted(struct request *r)
{
    const char *a = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Accept");
    for (; a && *a; a++)
        if (strncasecmp(a, "text/event-stream", 17) == 0)
            return true;
    return false;
}
