/*
 * sbx-bench-store-enqueue: the ingestion benchmarks' store-alone baseline. It writes messages
 * through the store's own enqueue (message_enqueue_async: the gateway's group commit, its
 * statements, on SQLite its checkpointer; synchronous=FULL) with up to a given number of requests
 * in flight, and no HTTP at all. Its CPU per message beside the gateway's CPU per request says how
 * much of a durable 202 is the store's and how much the HTTP side's, and its throughput is the
 * most one gateway's store takes on this machine.
 *
 *   sbx-bench-store-enqueue DB SESSIONS MESSAGES IN_FLIGHT
 *
 * DB is a SQLite file, created here (it must not exist), or the postgres:// URL of an empty
 * database. It gets one App and SESSIONS Sessions, as the ingestion scenario makes them over
 * HTTP; the messages go to the Sessions in turn, as tools/bench/post.lua sends them, with the same
 * body. Prints one JSON line:
 * {"messages":N,"failed":F,"seconds":S,"cpuUsPerMessage":C,"perSecond":R}, where the CPU is this
 * process's (every thread: the submitting loop, the committer, the checkpointer), not that of a
 * PostgreSQL server.
 */
#include "store.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_SESSIONS 1000

struct flight {
    pthread_mutex_t lock;
    pthread_cond_t room;
    long in_flight, failed;
    long low_water; /* the submitter, once IN_FLIGHT are out, waits until only this many are */
};

/* One request's strings: they must live until its callback (store.h). */
struct request {
    struct flight *f;
    struct store_enqueue req;
    struct store_ctx ctx;
    char request_id[32];
};

static void done(void *arg, enum store_status status, struct store_message *m, bool replayed)
{
    struct request *r = arg;
    struct flight *f = r->f;
    (void)replayed;
    if (m)
        store_message_clear(m);
    pthread_mutex_lock(&f->lock);
    f->in_flight--;
    if (status != STORE_OK)
        f->failed++;
    if (f->in_flight == f->low_water)
        pthread_cond_signal(&f->room);
    pthread_mutex_unlock(&f->lock);
    free(r);
}

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + (double)u.ru_stime.tv_sec +
           u.ru_stime.tv_usec / 1e6;
}

static double wall_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* The App and Sessions the messages go to, as the ingestion scenario creates them. */
static int make_sessions(struct store *st, char ids[][STORE_ID_LEN], int n)
{
    const struct store_ctx admin = {.actor = "admin"};
    struct store_app app;
    store_app_defaults(&app, "bench", "process");
    app.command_json = "[\"/usr/bin/sbx-echo-agent\"]";
    if (store_app_create(st, &admin, &app) != STORE_OK)
        return -1;
    app.command_json = NULL; /* not ours to free */
    for (int i = 0; i < n; i++) {
        struct store_session s;
        bool created = false;
        enum store_status rc =
            store_session_create(st, &admin, app.id, NULL, 0, NULL, NULL, &s, &created);
        if (rc != STORE_OK) {
            store_app_clear(&app);
            return -1;
        }
        snprintf(ids[i], STORE_ID_LEN, "%s", s.id);
        store_session_clear(&s);
    }
    store_app_clear(&app);
    return 0;
}

int main(int argc, char **argv)
{
    static char sessions[MAX_SESSIONS][STORE_ID_LEN];
    char err[256];

    if (argc != 5) {
        fprintf(stderr, "usage: %s DB SESSIONS MESSAGES IN_FLIGHT\n", argv[0]);
        return 2;
    }
    int ns = atoi(argv[2]);
    long total = atol(argv[3]), max_flight = atol(argv[4]);
    if (ns <= 0 || ns > MAX_SESSIONS || total <= 0 || max_flight <= 0) {
        fprintf(stderr, "%s: SESSIONS must be 1-%d, MESSAGES and IN_FLIGHT positive\n", argv[0],
                MAX_SESSIONS);
        return 2;
    }
    bool pg =
        strncmp(argv[1], "postgres://", 11) == 0 || strncmp(argv[1], "postgresql://", 13) == 0;
    if (!pg && access(argv[1], F_OK) == 0) {
        fprintf(stderr, "%s: %s exists: give a new file\n", argv[0], argv[1]);
        return 2;
    }
    struct store *st = pg ? store_pg_open(argv[1], 5000, err, sizeof err)
                          : store_sqlite_open(argv[1], 5000, "FULL", err, sizeof err);
    if (!st) {
        fprintf(stderr, "%s: %s\n", argv[0], err);
        return 1;
    }
    if (make_sessions(st, sessions, ns) != 0) {
        fprintf(stderr, "%s: cannot create the App and its Sessions in %s\n", argv[0], argv[1]);
        store_close(st);
        return 1;
    }
    /* Refilled from half: a wake-up per completed request would cost the submitter and the
     * committer a context switch each, which HTTP clients on their own threads do not. */
    struct flight f = {.lock = PTHREAD_MUTEX_INITIALIZER,
                       .room = PTHREAD_COND_INITIALIZER,
                       .low_water = max_flight / 2};
    double c0 = cpu_seconds(), w0 = wall_seconds();
    for (long i = 0; i < total; i++) {
        struct request *r = calloc(1, sizeof *r);
        if (!r) {
            fprintf(stderr, "%s: out of memory\n", argv[0]);
            return 1;
        }
        r->f = &f;
        snprintf(r->request_id, sizeof r->request_id, "req_bench%011ld", i);
        r->ctx = (struct store_ctx){.actor = "key:bench", .request_id = r->request_id};
        r->req = (struct store_enqueue){
            .app_id = "", .session_id = sessions[i % ns], .body_json = "{\"n\":1}"};
        pthread_mutex_lock(&f.lock);
        if (f.in_flight >= max_flight)
            while (f.in_flight > f.low_water)
                pthread_cond_wait(&f.room, &f.lock);
        f.in_flight++;
        pthread_mutex_unlock(&f.lock);
        if (store_message_enqueue_async(st, &r->ctx, &r->req, done, r) != STORE_OK) {
            pthread_mutex_lock(&f.lock);
            f.in_flight--;
            f.failed++;
            pthread_mutex_unlock(&f.lock);
            free(r);
        }
    }
    pthread_mutex_lock(&f.lock);
    f.low_water = 0;
    while (f.in_flight > 0)
        pthread_cond_wait(&f.room, &f.lock);
    pthread_mutex_unlock(&f.lock);
    double secs = wall_seconds() - w0, cpu = cpu_seconds() - c0;
    store_close(st);
    printf("{\"messages\":%ld,\"failed\":%ld,\"seconds\":%.3f,\"cpuUsPerMessage\":%.2f,"
           "\"perSecond\":%.0f}\n",
           total, f.failed, secs, cpu * 1e6 / (double)total, (double)total / secs);
    return f.failed ? 1 : 0;
}
