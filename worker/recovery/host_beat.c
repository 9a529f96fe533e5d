/*
 * host_beat.c: the host heartbeat thread of host_beat.h. The thread sleeps on a condition variable
 * (so that stopping is immediate) and wakes the event loop through an eventfd when the host was
 * declared lost; store calls are safe from any thread (each has its own connection).
 */
#include "recovery/host_beat.h"
#include "store_hosts.h"
#include "log.h"
#include "clock.h"

#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

struct host_beat {
    struct store *st;
    char host_id[STORE_HOST_ID_LEN];
    int64_t interval_ms;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool quit;
    int efd;
    struct event *ev;
    void (*on_lost)(void *arg);
    void *arg;
};

/* Waits interval_ms or until asked to quit; true when asked to quit. Called with the lock held. */
static bool wait_or_quit(struct host_beat *hb)
{
    struct timespec until = clock_mono_deadline(hb->interval_ms);
    while (!hb->quit &&
           pthread_cond_clockwait(&hb->cond, &hb->lock, CLOCK_MONOTONIC, &until) != ETIMEDOUT)
        ;
    return hb->quit;
}

static void *host_beat_thread(void *arg)
{
    struct host_beat *hb = arg;
    pthread_mutex_lock(&hb->lock);
    while (!hb->quit) {
        pthread_mutex_unlock(&hb->lock);
        enum store_status rc = store_host_heartbeat(hb->st, hb->host_id);
        pthread_mutex_lock(&hb->lock);
        if (rc == STORE_CONFLICT) {
            uint64_t one = 1;
            if (write(hb->efd, &one, sizeof one) < 0)
                log_error("host heartbeat: cannot wake the event loop: %m");
            break; /* declared lost: nothing more to say */
        }
        if (rc != STORE_OK)
            log_warn("worker: host %s heartbeat failed: %s", hb->host_id, store_status_name(rc));
        if (wait_or_quit(hb))
            break;
    }
    pthread_mutex_unlock(&hb->lock);
    return NULL;
}

static void host_beat_on_lost(evutil_socket_t fd, short what, void *arg)
{
    struct host_beat *hb = arg;
    uint64_t n;
    (void)what;
    if (read(fd, &n, sizeof n) < 0 && errno != EAGAIN)
        log_error("host heartbeat: eventfd read: %m");
    event_del(hb->ev);
    hb->on_lost(hb->arg);
}

struct host_beat *host_beat_start(struct store *st, const char *host_id, int64_t interval_ms,
                                  struct event_base *base, void (*on_lost)(void *arg), void *arg)
{
    struct host_beat *hb = calloc(1, sizeof *hb);
    if (!hb)
        return NULL;
    hb->st = st;
    snprintf(hb->host_id, sizeof hb->host_id, "%s", host_id);
    hb->interval_ms = interval_ms;
    hb->on_lost = on_lost;
    hb->arg = arg;
    hb->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&hb->lock, NULL);
    pthread_cond_init(&hb->cond, NULL);
    if (hb->efd < 0 ||
        !(hb->ev = event_new(base, hb->efd, EV_READ | EV_PERSIST, host_beat_on_lost, hb))) {
        int saved = errno;
        host_beat_stop(hb);
        errno = saved;
        return NULL;
    }
    event_add(hb->ev, NULL);
    if ((errno = pthread_create(&hb->thread, NULL, host_beat_thread, hb)) != 0) {
        int saved = errno;
        event_free(hb->ev);
        hb->ev = NULL;
        host_beat_stop(hb);
        errno = saved;
        return NULL;
    }
    return hb;
}

void host_beat_stop(struct host_beat *hb)
{
    if (!hb)
        return;
    if (hb->ev) {
        pthread_mutex_lock(&hb->lock);
        hb->quit = true;
        pthread_cond_signal(&hb->cond);
        pthread_mutex_unlock(&hb->lock);
        pthread_join(hb->thread, NULL);
        event_free(hb->ev);
    }
    if (hb->efd >= 0)
        close(hb->efd);
    pthread_cond_destroy(&hb->cond);
    pthread_mutex_destroy(&hb->lock);
    free(hb);
}
