/*
 * jobs.c: the thread pool of jobs.h. Finished jobs go on a done list and an eventfd wakes the
 * event loop, which runs their done() callbacks in submission order of completion. A background
 * pool's threads lower their own nice level once, at start (Linux's nice is per thread).
 */
#include "sandbox/jobs.h"
#include "log.h"
#include "clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct job {
    struct job *next;
    job_fn work, done;
    void *arg;
};

struct jobs {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct job *queue_head, *queue_tail; /* waiting for a thread */
    struct job *done_head, *done_tail;   /* finished, waiting for the loop */
    bool quit;
    int nice;
    size_t nthreads;
    pthread_t *threads;
    int efd;
    struct event *ev;
};

static void list_push(struct job **head, struct job **tail, struct job *jb)
{
    jb->next = NULL;
    if (*tail)
        (*tail)->next = jb;
    else
        *head = jb;
    *tail = jb;
}

static void *jobs_thread(void *arg)
{
    struct jobs *j = arg;
    if (j->nice > 0 && setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), j->nice) != 0)
        log_warn("jobs: cannot lower a background thread's priority: %m");
    pthread_mutex_lock(&j->lock);
    for (;;) {
        while (!j->queue_head && !j->quit)
            pthread_cond_wait(&j->cond, &j->lock);
        if (!j->queue_head)
            break;
        struct job *jb = j->queue_head;
        j->queue_head = jb->next;
        if (!j->queue_head)
            j->queue_tail = NULL;
        pthread_mutex_unlock(&j->lock);
        jb->work(jb->arg);
        pthread_mutex_lock(&j->lock);
        list_push(&j->done_head, &j->done_tail, jb);
        uint64_t one = 1;
        if (write(j->efd, &one, sizeof one) < 0 && errno != EAGAIN)
            log_error("jobs: cannot wake the event loop: %m");
    }
    pthread_mutex_unlock(&j->lock);
    return NULL;
}

static void jobs_on_done(evutil_socket_t fd, short what, void *arg)
{
    struct jobs *j = arg;
    uint64_t n;
    (void)what;
    if (read(fd, &n, sizeof n) < 0 && errno != EAGAIN)
        log_error("jobs: eventfd read: %m");
    pthread_mutex_lock(&j->lock);
    struct job *list = j->done_head;
    j->done_head = j->done_tail = NULL;
    pthread_mutex_unlock(&j->lock);
    while (list) {
        struct job *jb = list;
        list = jb->next;
        if (jb->done)
            jb->done(jb->arg);
        free(jb);
    }
}

struct jobs *jobs_new(struct event_base *base, size_t nthreads, int nice)
{
    struct jobs *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->nice = nice;
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->cond, NULL);
    j->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    j->threads = calloc(nthreads, sizeof *j->threads);
    if (j->efd < 0 || !j->threads)
        goto fail;
    j->ev = event_new(base, j->efd, EV_READ | EV_PERSIST, jobs_on_done, j);
    if (!j->ev || event_add(j->ev, NULL) != 0)
        goto fail;
    for (; j->nthreads < nthreads; j->nthreads++)
        if (pthread_create(&j->threads[j->nthreads], NULL, jobs_thread, j) != 0)
            goto fail;
    return j;
fail:
    jobs_free(j, -1);
    return NULL;
}

int jobs_submit(struct jobs *j, job_fn work, job_fn done, void *arg)
{
    struct job *jb = calloc(1, sizeof *jb);
    if (!jb)
        return -1;
    jb->work = work;
    jb->done = done;
    jb->arg = arg;
    pthread_mutex_lock(&j->lock);
    list_push(&j->queue_head, &j->queue_tail, jb);
    pthread_cond_signal(&j->cond);
    pthread_mutex_unlock(&j->lock);
    return 0;
}

/* Pools whose threads did not all end in time: kept, since those threads still use them. */
static struct jobs *stuck_pools[8];

/* Joins the thread within the wall-clock deadline (NULL: however long it takes). */
static bool join_by(pthread_t t, const struct timespec *deadline)
{
    if (!deadline)
        return pthread_join(t, NULL) == 0;
    return pthread_clockjoin_np(t, NULL, CLOCK_MONOTONIC, deadline) == 0;
}

bool jobs_free(struct jobs *j, int wait_ms)
{
    if (!j)
        return true;
    pthread_mutex_lock(&j->lock);
    j->quit = true;
    pthread_cond_broadcast(&j->cond);
    pthread_mutex_unlock(&j->lock);
    struct timespec deadline, *by = NULL;
    if (wait_ms >= 0) {
        deadline = clock_mono_deadline(wait_ms);
        by = &deadline;
    }
    size_t stuck = 0;
    for (size_t i = 0; i < j->nthreads; i++)
        if (!join_by(j->threads[i], by)) {
            pthread_detach(j->threads[i]);
            stuck++;
        }
    if (j->ev)
        event_free(j->ev);
    j->ev = NULL;
    if (stuck > 0) {
        /* A job stuck in a system call (a boot the deadline gave up on): the process is ending,
         * and its exit ends the thread; the pool stays for it to finish into. */
        log_error("jobs: %zu job thread(s) still busy after %d ms; not waiting for them", stuck,
                  wait_ms);
        for (size_t i = 0; i < sizeof stuck_pools / sizeof *stuck_pools; i++)
            if (!stuck_pools[i]) {
                stuck_pools[i] = j;
                break;
            }
        return false;
    }
    for (struct job *jb = j->done_head; jb;) {
        struct job *next = jb->next;
        free(jb);
        jb = next;
    }
    if (j->efd >= 0)
        close(j->efd);
    free(j->threads);
    pthread_cond_destroy(&j->cond);
    pthread_mutex_destroy(&j->lock);
    free(j);
    return true;
}
