/*
 * sqlite_checkpoint.c: the SQLite store's WAL checkpointer thread (see sqlite_checkpoint.h for the
 * policy and the bound it keeps on the WAL).
 *
 * Hidden state: struct sq_checkpointer (its thread, started on first need, and the thread's own
 * connection, opened by the thread); the WAL hook only records the work and wakes the thread.
 */
#include "sqlite_checkpoint.h"
#include "log.h"
#include "clock.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct sq_checkpointer {
    pthread_mutex_t lock;
    pthread_cond_t work;
    int pages;     /* the most pages a commit left in the WAL since the thread last looked */
    int seen;      /* the pages the last commit left (fewer than before: the WAL started over) */
    int next_at;   /* the WAL size at which the next round is due */
    bool wanted;   /* a round is due */
    bool stopping; /* sq_checkpointer_free waits for the thread */
    bool started;
    pthread_t thread;
    struct sq_checkpoint_counts counts;
    int busy_timeout_ms;
    char synchronous[16];
    pthread_rwlock_t *write_gate;
    char path[];
};

struct sq_checkpointer *sq_checkpointer_new(const char *path, int busy_timeout_ms,
                                            const char *synchronous, pthread_rwlock_t *write_gate)
{
    size_t len = strlen(path);
    struct sq_checkpointer *c = calloc(1, sizeof *c + len + 1);
    if (!c)
        return NULL;
    memcpy(c->path, path, len + 1);
    c->busy_timeout_ms = busy_timeout_ms;
    c->write_gate = write_gate;
    c->next_at = SQLCHECKPOINT_PASSIVE_PAGES;
    snprintf(c->synchronous, sizeof c->synchronous, "%s", synchronous ? synchronous : "FULL");
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->work, NULL);
    return c;
}

int sq_busy_wait(int tries, int wait_ms, int step_us)
{
    if ((long)tries * step_us >= (long)wait_ms * 1000)
        return 0;
    usleep((useconds_t)step_us);
    return 1;
}

/* The busy handler of the checkpointer's connection: steps of 200 µs, since while a RESTART waits
 * for a reader to move on, it holds the write gate and the committer waits with it, so it should
 * notice at once. */
static int checkpoint_busy(void *arg, int tries)
{
    struct sq_checkpointer *c = arg;
    return sq_busy_wait(tries, c->busy_timeout_ms, 200);
}

/* The thread's connection. Its synchronous setting is the store's: a checkpoint syncs the
 * database file before the WAL may start over only when its connection's setting says so. */
static sqlite3 *checkpoint_conn(struct sq_checkpointer *c)
{
    sqlite3 *db = NULL;
    char pragma[64];
    if (sqlite3_open_v2(c->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK) {
        log_error("store: the checkpointer cannot open %s: %s", c->path,
                  db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_handler(db, checkpoint_busy, c);
    snprintf(pragma, sizeof pragma, "PRAGMA synchronous=%s", c->synchronous);
    if (sqlite3_exec(db, pragma, NULL, NULL, NULL) != SQLITE_OK) {
        log_error("store: the checkpointer cannot set %s: %s", pragma, sqlite3_errmsg(db));
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

/* One round: PASSIVE, or RESTART when the WAL is over its bound. */
static void checkpoint_round(struct sq_checkpointer *c, sqlite3 *db, int pages)
{
    bool restart = pages >= SQLCHECKPOINT_RESTART_PAGES, gated = false;
    if (restart) {
        struct timespec until = clock_mono_deadline(c->busy_timeout_ms);
        /* Not had in time (a writer transaction of this process that does not end): checkpoint
         * anyway, as far as SQLite's own locks let it. */
        gated = pthread_rwlock_clockwrlock(c->write_gate, CLOCK_MONOTONIC, &until) == 0;
    }
    int rc = sqlite3_wal_checkpoint_v2(
        db, NULL, restart ? SQLITE_CHECKPOINT_RESTART : SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    if (gated)
        pthread_rwlock_unlock(c->write_gate);
    pthread_mutex_lock(&c->lock);
    if (rc == SQLITE_OK && restart)
        c->counts.restart++;
    else if (rc == SQLITE_OK)
        c->counts.passive++;
    pthread_mutex_unlock(&c->lock);
    /* BUSY: another connection was checkpointing, or the wait for a reader ran out. */
    if (rc != SQLITE_OK) {
        pthread_mutex_lock(&c->lock);
        c->counts.failed++;
        if (restart)
            c->next_at = 0; /* over the bound still: the next commit asks again */
        pthread_mutex_unlock(&c->lock);
        if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED)
            log_warn("store: WAL checkpoint of %s failed: %s", c->path, sqlite3_errmsg(db));
    }
}

static void *checkpoint_main(void *arg)
{
    struct sq_checkpointer *c = arg;
    sqlite3 *db = checkpoint_conn(c);

    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->wanted && !c->stopping)
            pthread_cond_wait(&c->work, &c->lock);
        if (c->stopping)
            break;
        int pages = c->pages;
        c->wanted = false;
        c->pages = 0;
        pthread_mutex_unlock(&c->lock);
        if (!db)
            db = checkpoint_conn(c); /* failed before (logged): try again */
        if (db)
            checkpoint_round(c, db, pages);
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    sqlite3_close(db);
    return NULL;
}

int sq_checkpoint_wal_hook(void *checkpointer, sqlite3 *db, const char *db_name, int pages)
{
    struct sq_checkpointer *c = checkpointer;
    pthread_mutex_lock(&c->lock);
    if (pages < c->seen)
        c->next_at = SQLCHECKPOINT_PASSIVE_PAGES; /* the WAL started over */
    c->seen = pages;
    /* One PASSIVE round once the WAL reaches its threshold, then none until the RESTART bound
     * (not one per commit): under a steady stream of commits further PASSIVE rounds copy the same
     * hot pages again and sync the database each time, and the WAL does not start over anyway. */
    if (pages < c->next_at) {
        pthread_mutex_unlock(&c->lock);
        return SQLITE_OK;
    }
    c->next_at = pages < SQLCHECKPOINT_RESTART_PAGES ? SQLCHECKPOINT_RESTART_PAGES
                                                     : pages + SQLCHECKPOINT_PASSIVE_PAGES;
    if (!c->started && !c->stopping) {
        if (pthread_create(&c->thread, NULL, checkpoint_main, c) == 0) {
            c->started = true;
        } else {
            pthread_mutex_unlock(&c->lock);
            log_warn("store: cannot start the checkpointer thread: this commit checkpoints");
            sqlite3_wal_checkpoint_v2(db, db_name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
            return SQLITE_OK;
        }
    }
    if (pages > c->pages)
        c->pages = pages;
    c->wanted = true;
    pthread_cond_signal(&c->work);
    pthread_mutex_unlock(&c->lock);
    return SQLITE_OK;
}

void sq_checkpointer_counts(struct sq_checkpointer *c, struct sq_checkpoint_counts *out)
{
    pthread_mutex_lock(&c->lock);
    *out = c->counts;
    pthread_mutex_unlock(&c->lock);
}

void sq_checkpointer_free(struct sq_checkpointer *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    c->stopping = true;
    bool started = c->started;
    pthread_cond_signal(&c->work);
    pthread_mutex_unlock(&c->lock);
    if (started)
        pthread_join(c->thread, NULL);
    pthread_cond_destroy(&c->work);
    pthread_mutex_destroy(&c->lock);
    free(c);
}
