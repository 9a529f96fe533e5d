/*
 * notify.c: the handles of notify.h and their Unix datagram transport (one host); the PostgreSQL
 * transport is in notify_pg.c. The Unix sender caches the directory listing while the directory
 * is unchanged (one stat() per send) and for at most a second, so a burst of enqueues costs one
 * sendto() per receiver and not a readdir() each, and a receiver that has just started (a worker,
 * a gateway) gets the very next hint, not only those after the next listing. A receiver's queue
 * holds few datagrams (net.unix.max_dgram_qlen, 10 by default): a burst of hints can fill it. A
 * hint that names something ("msg <id>") is then worth waiting for: the sender waits briefly, and
 * one still refused is made up for by NOTIFY_RESYNC to every receiver on the next send
 * (resync_due), so a long poll never waits for its slow recheck because of a burst. A plain hint
 * ("queue") is not: a full queue means the receiver has hints to read and will look anyway.
 */
#include "notify.h"
#include "notify_pg.h"
#include "clock.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define NOTIFY_MAX_PEERS 256

struct notify_listener {
    struct pg_listener *pg; /* the PostgreSQL transport, or NULL for the Unix one: */
    int fd;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

struct notify_peer {
    struct pg_sender *pg; /* the PostgreSQL transport, or NULL for the Unix one: */
    pthread_mutex_t lock;
    char run_dir[400];
    char role[32];
    int fd;
    int64_t listed_at;
    struct timespec listed_mtime; /* the run directory's mtime when it was listed */
    bool resync_due; /* a hint was refused by a full queue: NOTIFY_RESYNC goes first next time */
    size_t n;
    struct sockaddr_un addrs[NOTIFY_MAX_PEERS];
};

/* How long a sender waits for a receiver's full queue, in steps: 20 x 100 us. The receivers are
 * threads that do nothing but drain their socket, so a full queue empties in microseconds unless
 * the receiver is stuck; then the hint is dropped and made up for (resync_due). */
#define FULL_QUEUE_TRIES 20
#define FULL_QUEUE_WAIT_NS 100000

static bool store_is_postgres(const char *store)
{
    return store &&
           (strncmp(store, "postgres://", 11) == 0 || strncmp(store, "postgresql://", 13) == 0);
}

/* Roles become channel names (sbx_<role>) and file names: keep them plain identifiers. */
static bool role_is_valid(const char *role)
{
    size_t n = strlen(role);
    if (n == 0 || n > 24)
        return false;
    for (const char *c = role; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
            return false;
    return true;
}

static int unix_bind(struct notify_listener *l, const char *run_dir, const char *role, char *err,
                     size_t errlen)
{
    /* Several listeners of one role may live in one process (tests do): each gets its own name. */
    static unsigned seq;
    unsigned n = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};

    if (mkdir(run_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot make %s: %s", run_dir, strerror(errno));
        return -1;
    }
    if ((size_t)snprintf(sa.sun_path, sizeof sa.sun_path, "%s/%s-%d-%u.sock", run_dir, role,
                         (int)getpid(), n) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "the notify socket path in %s is too long", run_dir);
        return -1;
    }
    l->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    unlink(sa.sun_path);
    if (bind(l->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        snprintf(err, errlen, "cannot bind %s: %s", sa.sun_path, strerror(errno));
        return -1;
    }
    snprintf(l->path, sizeof l->path, "%s", sa.sun_path);
    return 0;
}

struct notify_listener *notify_listen(const char *store, const char *run_dir, const char *role,
                                      char *err, size_t errlen)
{
    struct notify_listener *l;
    if (!role_is_valid(role)) {
        snprintf(err, errlen, "invalid notify role \"%.32s\"", role);
        return NULL;
    }
    if (!(l = calloc(1, sizeof *l))) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->fd = -1;
    if (store_is_postgres(store)) {
        char channel[32];
        snprintf(channel, sizeof channel, "sbx_%s", role);
        l->pg = pg_listener_new(store, channel, err, errlen);
        if (!l->pg) {
            free(l);
            return NULL;
        }
        return l;
    }
    if (unix_bind(l, run_dir, role, err, errlen) != 0) {
        notify_listener_close(l);
        return NULL;
    }
    return l;
}

int notify_listener_fd(const struct notify_listener *l)
{
    return l->pg ? pg_listener_fd(l->pg) : l->fd;
}

bool notify_listener_reliable(const struct notify_listener *l)
{
    return l->pg && pg_listener_ready(l->pg);
}

int notify_recv(struct notify_listener *l, char *buf, size_t buflen)
{
    if (buflen == 0)
        return 0;
    if (l->pg)
        return pg_listener_recv(l->pg, buf, buflen);
    ssize_t n = recv(l->fd, buf, buflen - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return (int)n;
}

void notify_listener_close(struct notify_listener *l)
{
    if (!l)
        return;
    pg_listener_free(l->pg);
    if (l->fd >= 0)
        close(l->fd);
    if (l->path[0])
        unlink(l->path);
    free(l);
}

struct notify_peer *notify_peer_new(const char *store, const char *run_dir, const char *role)
{
    struct notify_peer *p;
    if (!role_is_valid(role) || !(p = calloc(1, sizeof *p)))
        return NULL;
    p->fd = -1;
    pthread_mutex_init(&p->lock, NULL);
    if (store_is_postgres(store)) {
        char channel[32];
        snprintf(channel, sizeof channel, "sbx_%s", role);
        if (!(p->pg = pg_sender_new(store, channel))) {
            notify_peer_free(p);
            return NULL;
        }
        return p;
    }
    snprintf(p->run_dir, sizeof p->run_dir, "%s", run_dir);
    snprintf(p->role, sizeof p->role, "%s", role);
    p->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p->fd < 0) {
        notify_peer_free(p);
        return NULL;
    }
    return p;
}

void notify_peer_free(struct notify_peer *p)
{
    if (!p)
        return;
    pg_sender_free(p->pg);
    if (p->fd >= 0)
        close(p->fd);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* Whether the cached listing may be out of date: more than a second old, or the directory
 * changed since (a socket was bound or removed). An mtime is as coarse as the kernel's tick, so a
 * listing taken less than LISTING_SETTLE_MS after the change it saw may have missed a second
 * change in the same tick: it is taken again until the change is older than that. */
#define LISTING_SETTLE_MS 50

static bool unix_listing_stale(const struct notify_peer *p)
{
    struct stat st;
    if (clock_mono_ms() - p->listed_at > 1000 || stat(p->run_dir, &st) != 0)
        return true;
    if (st.st_mtim.tv_sec != p->listed_mtime.tv_sec ||
        st.st_mtim.tv_nsec != p->listed_mtime.tv_nsec)
        return true;
    int64_t changed_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
    return clock_wall_ms() - changed_ms < LISTING_SETTLE_MS;
}

static void unix_refresh(struct notify_peer *p)
{
    struct stat st;
    /* The mtime before the listing: a change during the readdir shows as a new mtime next time. */
    if (stat(p->run_dir, &st) == 0)
        p->listed_mtime = st.st_mtim;
    DIR *d = opendir(p->run_dir);
    struct dirent *de;
    size_t rlen = strlen(p->role);

    p->n = 0;
    p->listed_at = clock_mono_ms();
    if (!d)
        return;
    while ((de = readdir(d)) && p->n < NOTIFY_MAX_PEERS) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, p->role, rlen) != 0 || de->d_name[rlen] != '-' || len < 5 ||
            strcmp(de->d_name + len - 5, ".sock") != 0)
            continue;
        struct sockaddr_un *sa = &p->addrs[p->n];
        sa->sun_family = AF_UNIX;
        if ((size_t)snprintf(sa->sun_path, sizeof sa->sun_path, "%s/%s", p->run_dir, de->d_name) <
            sizeof sa->sun_path)
            p->n++;
    }
    closedir(d);
}

/* One datagram to peer i: 0, -1 when its queue stayed full (waiting for it when wait), -2 when
 * nobody is bound there. */
static int send_one(struct notify_peer *p, size_t i, const char *msg, size_t len, bool wait)
{
    for (int tries = 0;; tries++) {
        if (sendto(p->fd, msg, len, 0, (struct sockaddr *)&p->addrs[i], sizeof p->addrs[i]) >= 0)
            return 0;
        if (errno == ECONNREFUSED)
            return -2;
        if ((errno != EAGAIN && errno != EWOULDBLOCK) || !wait || tries >= FULL_QUEUE_TRIES)
            return -1;
        struct timespec ts = {0, FULL_QUEUE_WAIT_NS};
        nanosleep(&ts, NULL);
    }
}

static void unix_send(struct notify_peer *p, const char *msg)
{
    size_t len = strlen(msg);
    pthread_mutex_lock(&p->lock);
    if (unix_listing_stale(p))
        unix_refresh(p);
    bool names = strchr(msg, ' ') != NULL; /* "msg <id>": worth waiting for */
    bool resync = p->resync_due, refused = false;
    p->resync_due = false;
    for (size_t i = 0; i < p->n; i++) {
        int rc = resync ? send_one(p, i, NOTIFY_RESYNC, strlen(NOTIFY_RESYNC), true) : 0;
        if (rc == 0)
            rc = send_one(p, i, msg, len, names);
        if (rc == -2) {
            /* Nobody is bound there any more: the process died without cleaning up. */
            unlink(p->addrs[i].sun_path);
            p->addrs[i] = p->addrs[--p->n];
            i--;
        } else if (rc == -1 && (names || resync)) {
            refused = true;
        }
    }
    p->resync_due = refused;
    pthread_mutex_unlock(&p->lock);
}

void notify_send(struct notify_peer *p, const char *msg)
{
    if (p->pg)
        pg_sender_send(p->pg, msg);
    else
        unix_send(p, msg);
}
