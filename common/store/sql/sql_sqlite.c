/*
 * sql_sqlite.c: the SQLite engine under the store (sql.h) and store_sqlite_open(): opening the file
 * with the pragmas that make a 202 durable, applying migrations, one connection per thread, and
 * cached statements.
 */
#include "sql.h"
#include "sqlite_checkpoint.h"
#include "config.h"
#include "log.h"
#include "migrations.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SQ_STMT_CACHE 128
/* How long opening the store waits for another process that holds the database (switching it to
 * WAL, or migrating it: a migration of a large database may take longer than busy_timeout_ms). */
#define SQ_OPEN_WAIT_MS 60000

struct sq_conn;

struct sq_stmt {
    struct sql_stmt base;
    sqlite3_stmt *h;
    struct sq_conn *conn;
};

struct sq_conn {
    sqlite3 *db;
    struct sq_conn *next;
    int last_rc;     /* the extended result code of the last failure on this connection */
    bool holds_gate; /* inside a writer transaction: holds the store's write gate (shared) */
    size_t nstmts;
    const char *sqls[SQ_STMT_CACHE];
    struct sq_stmt stmts[SQ_STMT_CACHE];
};

struct sq_store {
    struct sql_store base; /* first: the store's cls is a struct sql_store */
    char path[1024];
    int busy_timeout_ms;
    char synchronous[16];
    pthread_key_t conn_key; /* this thread's connection */
    pthread_mutex_t conns_lock;
    struct sq_conn *conns;                /* every open connection, to close them all */
    struct sq_checkpointer *checkpointer; /* every connection's WAL hook (sqlite_checkpoint.h) */
    /* Held shared by this process's writer transactions, exclusively by a RESTART checkpoint:
     * SQLite's write lock is free only between two of the committer's transactions, too briefly
     * for a checkpoint's busy handler to catch it, so the checkpoint queues here instead. */
    pthread_rwlock_t write_gate;
};

static const struct sql_engine sq_engine;
static void sq_close(struct store *st);

int store_schema_version(void)
{
    return sbx_migrations_count > 0 ? sbx_migrations[sbx_migrations_count - 1].version : 0;
}

static int sq_exec_err(sqlite3 *db, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "%s", msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
    }
    return rc;
}

/* Switches db to WAL. Changing the journal mode needs the database to itself and, unlike other
 * statements, gives up at once with SQLITE_BUSY instead of calling the busy handler: two
 * processes opening a fresh database together (the gateway and a worker on a first start) would
 * see "database is locked". So retry here, with a short jittered sleep, for as long as the busy
 * timeout allows. Once the file is in WAL (persistent), the switch is a no-op that only reads. */
static int sq_enable_wal(sqlite3 *db, int busy_timeout_ms, char *err, size_t errlen)
{
    int64_t deadline = clock_mono_ms() + (busy_timeout_ms > 0 ? busy_timeout_ms : 0);
    unsigned seed = (unsigned)getpid() ^ (unsigned)clock_mono_ms();

    for (;;) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &st, NULL);
        const char *mode = NULL;
        bool wal = false;
        if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            mode = (const char *)sqlite3_column_text(st, 0);
            wal = mode && strcmp(mode, "wal") == 0;
            rc = SQLITE_OK;
        }
        if (rc == SQLITE_OK && !wal) {
            snprintf(err, errlen, "cannot switch to WAL: journal mode stays %s",
                     mode ? mode : "unknown");
            sqlite3_finalize(st);
            return -1;
        }
        sqlite3_finalize(st);
        if (rc == SQLITE_OK)
            return 0;
        if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) {
            snprintf(err, errlen, "cannot switch to WAL: %s", sqlite3_errmsg(db));
            return -1;
        }
        if (clock_mono_ms() >= deadline) {
            snprintf(err, errlen, "cannot switch to WAL within %d ms: %s", busy_timeout_ms,
                     sqlite3_errmsg(db));
            return -1;
        }
        usleep(1000 + rand_r(&seed) % 9000);
    }
}

/* The busy handler of the store's connections (sq_busy_wait): a try every millisecond for up to
 * wait_ms (ctx). With SQLite's own back-off a waiter kept missing the gaps between the
 * committer's, the workers' and the heartbeats' transactions: in it.hosts.two_hosts a host
 * heartbeat's write waited up to 143 ms, p99 79 ms; polling: 85 and 38 ms. */
static int sq_busy_poll(void *ctx, int tries)
{
    return sq_busy_wait(tries, (int)(intptr_t)ctx, 1000);
}

/* A connection to s's file, in WAL mode with the store's pragmas; it waits wait_ms for locks. */
static sqlite3 *sq_open_conn(struct sq_store *s, int wait_ms, char *err, size_t errlen)
{
    sqlite3 *db = NULL;
    char pragmas[256], why[256];
    int rc = sqlite3_open_v2(
        s->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "cannot open %s: %s", s->path,
                 db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_handler(db, sq_busy_poll, (void *)(intptr_t)wait_ms);
    sqlite3_extended_result_codes(db, 1);
    /* Instead of SQLite's automatic checkpoint inside the COMMIT that crosses its threshold. */
    if (s->checkpointer)
        sqlite3_wal_hook(db, sq_checkpoint_wal_hook, s->checkpointer);
    if (sq_enable_wal(db, wait_ms, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: %s", s->path, why);
        sqlite3_close(db);
        return NULL;
    }
    snprintf(pragmas, sizeof pragmas, "PRAGMA foreign_keys=ON; PRAGMA synchronous=%s;",
             s->synchronous);
    if (sq_exec_err(db, pragmas, err, errlen) != SQLITE_OK) {
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

static void sq_conn_close(struct sq_conn *c)
{
    for (size_t i = 0; i < c->nstmts; i++)
        sqlite3_finalize(c->stmts[i].h);
    sqlite3_close(c->db);
    free(c);
}

/* The calling thread's connection, opened on first use; NULL on failure (logged). */
static struct sq_conn *sq_conn(struct store *st)
{
    struct sq_store *s = st->cls;
    struct sq_conn *c = pthread_getspecific(s->conn_key);
    char err[512];

    if (c)
        return c;
    c = calloc(1, sizeof *c);
    if (!c) {
        log_error("store: out of memory");
        return NULL;
    }
    c->db = sq_open_conn(s, s->busy_timeout_ms, err, sizeof err);
    if (!c->db) {
        log_error("store: %s", err);
        free(c);
        return NULL;
    }
    pthread_mutex_lock(&s->conns_lock);
    c->next = s->conns;
    s->conns = c;
    pthread_mutex_unlock(&s->conns_lock);
    pthread_setspecific(s->conn_key, c);
    return c;
}

static struct sql_stmt *sq_stmt(struct store *st, const char *sql)
{
    struct sq_conn *c = sq_conn(st);
    sqlite3_stmt *h = NULL;

    if (!c)
        return NULL;
    for (size_t i = 0; i < c->nstmts; i++)
        if (c->sqls[i] == sql)
            return &c->stmts[i].base;
    if (c->nstmts == SQ_STMT_CACHE) {
        /* Never expected: the store has fewer distinct statements than the cache holds. */
        log_error("store: statement cache full");
        return NULL;
    }
    if (sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &h, NULL) != SQLITE_OK) {
        log_error("store: cannot prepare \"%.80s\": %s", sql, sqlite3_errmsg(c->db));
        return NULL;
    }
    c->sqls[c->nstmts] = sql;
    c->stmts[c->nstmts] = (struct sq_stmt){{&sq_engine}, h, c};
    return &c->stmts[c->nstmts++].base;
}

static sqlite3_stmt *sq_h(struct sql_stmt *s)
{
    return ((struct sq_stmt *)s)->h;
}

static void sq_bind_text(struct sql_stmt *s, int idx, const char *v, bool copy)
{
    if (!v)
        sqlite3_bind_null(sq_h(s), idx);
    else
        sqlite3_bind_text(sq_h(s), idx, v, -1, copy ? SQLITE_TRANSIENT : SQLITE_STATIC);
}

/* SQLite has no arrays: the literal is bound as the text it is (no statement of the store's
 * does this on SQLite; it is here so that one would get text, not a crash). */
static void sq_bind_text_array(struct sql_stmt *s, int idx, const char *literal)
{
    sq_bind_text(s, idx, literal, false);
}

static void sq_bind_int64(struct sql_stmt *s, int idx, int64_t v)
{
    sqlite3_bind_int64(sq_h(s), idx, v);
}

static void sq_bind_null(struct sql_stmt *s, int idx)
{
    sqlite3_bind_null(sq_h(s), idx);
}

static void sq_bind_blob(struct sql_stmt *s, int idx, const void *v, size_t len)
{
    sqlite3_bind_blob(sq_h(s), idx, v, (int)len, SQLITE_TRANSIENT);
}

static int sq_step(struct sql_stmt *s)
{
    int rc = sqlite3_step(sq_h(s));
    if (rc == SQLITE_ROW)
        return SQL_ROW;
    if (rc == SQLITE_DONE)
        return SQL_DONE;
    ((struct sq_stmt *)s)->conn->last_rc = rc;
    return SQL_ERROR;
}

static bool sq_col_null(struct sql_stmt *s, int col)
{
    return sqlite3_column_type(sq_h(s), col) == SQLITE_NULL;
}

static int64_t sq_col_int64(struct sql_stmt *s, int col)
{
    return sqlite3_column_int64(sq_h(s), col);
}

static const char *sq_col_text(struct sql_stmt *s, int col)
{
    return (const char *)sqlite3_column_text(sq_h(s), col);
}

static size_t sq_col_blob(struct sql_stmt *s, int col, void *out, size_t outlen)
{
    const void *b = sqlite3_column_blob(sq_h(s), col);
    size_t n = (size_t)sqlite3_column_bytes(sq_h(s), col);
    if (b)
        memcpy(out, b, n < outlen ? n : outlen);
    return b ? n : 0;
}

static void sq_done(struct sql_stmt *s)
{
    sqlite3_reset(sq_h(s));
    sqlite3_clear_bindings(sq_h(s));
}

static int64_t sq_changes(struct store *st)
{
    struct sq_conn *c = sq_conn(st);
    return c ? sqlite3_changes(c->db) : 0;
}

/* sql is a string literal (sql.h): prepared once per connection and kept, like sq_stmt, so that
 * the BEGIN, COMMIT and savepoint of every transaction are not compiled again each time. */
static int sq_exec(struct store *st, const char *sql)
{
    struct sq_conn *c = sq_conn(st);
    struct sql_stmt *s;
    int rc;
    if (!c)
        return SQL_NOMEM;
    if (!(s = sq_stmt(st, sql))) {
        c->last_rc = sqlite3_extended_errcode(c->db);
        return SQL_ERROR;
    }
    rc = sqlite3_step(sq_h(s));
    sqlite3_reset(sq_h(s));
    if (rc == SQLITE_DONE || rc == SQLITE_ROW)
        return SQL_DONE;
    c->last_rc = sqlite3_extended_errcode(c->db);
    return SQL_ERROR;
}

static enum store_status sq_status(struct store *st, int rc)
{
    struct sq_conn *c;
    int code;
    if (rc == SQL_ROW || rc == SQL_DONE)
        return STORE_OK;
    if (rc != SQL_ERROR || !(c = sq_conn(st)))
        return STORE_ERROR;
    code = c->last_rc;
    switch (code & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return STORE_BUSY;
    case SQLITE_FULL:
        return STORE_FULL;
    case SQLITE_CONSTRAINT:
        if (code == SQLITE_CONSTRAINT_UNIQUE || code == SQLITE_CONSTRAINT_PRIMARYKEY)
            return STORE_CONFLICT;
        return STORE_INVALID;
    default:
        log_error("store: sqlite error %d: %s", code, sqlite3_errmsg(c->db));
        return STORE_ERROR;
    }
}

static void sq_gate_release(struct store *st, struct sq_conn *c)
{
    struct sq_store *s = st->cls;
    if (c && c->holds_gate) {
        c->holds_gate = false;
        pthread_rwlock_unlock(&s->write_gate);
    }
}

/* Writers (serial and concurrent alike: SQLite has one writer at a time) take SQLite's one write
 * lock at BEGIN (IMMEDIATE), not at their first write: what a writer read stays true until it
 * commits, which the store's claims rely on. */
static enum store_status sq_begin(struct store *st, enum sql_txn kind)
{
    bool writer = kind != SQL_TXN_READ;
    struct sq_store *s = st->cls;
    struct sq_conn *c = sq_conn(st);
    if (!c)
        return STORE_ERROR;
    if (writer && !c->holds_gate) {
        pthread_rwlock_rdlock(&s->write_gate);
        c->holds_gate = true;
    }
    int rc = sq_exec(st, writer ? "BEGIN IMMEDIATE" : "BEGIN");
    enum store_status r = sq_status(st, rc);
    if (r != STORE_OK)
        sq_gate_release(st, c);
    return r;
}

static void sq_rollback(struct store *st)
{
    struct sq_conn *c = sq_conn(st);
    if (c && !sqlite3_get_autocommit(c->db))
        sq_exec(st, "ROLLBACK");
    sq_gate_release(st, c);
}

static enum store_status sq_commit(struct store *st)
{
    int rc = sq_exec(st, "COMMIT");
    if (rc != SQL_DONE) {
        enum store_status r = sq_status(st, rc);
        sq_rollback(st);
        return r;
    }
    sq_gate_release(st, sq_conn(st));
    return STORE_OK;
}

static const struct sql_engine sq_engine = {
    .name = "sqlite",
    .dialect = SQL_SQLITE,
    .stmt = sq_stmt,
    .bind_text = sq_bind_text,
    .bind_int64 = sq_bind_int64,
    .bind_null = sq_bind_null,
    .bind_blob = sq_bind_blob,
    .bind_text_array = sq_bind_text_array,
    .step = sq_step,
    .col_null = sq_col_null,
    .col_int64 = sq_col_int64,
    .col_text = sq_col_text,
    .col_blob = sq_col_blob,
    .done = sq_done,
    .changes = sq_changes,
    .exec = sq_exec,
    .begin = sq_begin,
    .commit = sq_commit,
    .rollback = sq_rollback,
    .status = sq_status,
    .close = sq_close,
};

/* ---- opening and migrations ---- */

static int sq_user_version(sqlite3 *db)
{
    sqlite3_stmt *s;
    int v = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return v;
}

/* Applies every migration newer than the database's user_version, each in its own transaction
 * together with the user_version bump, so a crash leaves the database at a whole version. */
static int sq_migrate(sqlite3 *db, const char *path, char *err, size_t errlen)
{
    char msg[512], bump[64];
    int have;

    if (sq_exec_err(db, "BEGIN IMMEDIATE", msg, sizeof msg) != SQLITE_OK) {
        snprintf(err, errlen, "%s: cannot lock for migration: %s", path, msg);
        return -1;
    }
    have = sq_user_version(db);
    sq_exec_err(db, "COMMIT", msg, sizeof msg);
    if (have < 0) {
        snprintf(err, errlen, "%s: cannot read the schema version", path);
        return -1;
    }
    if (have > store_schema_version()) {
        snprintf(err, errlen,
                 "%s has schema version %d, newer than this sbx (which knows up to %d): "
                 "run a newer sbx, or restore a backup made by this version",
                 path, have, store_schema_version());
        return -1;
    }
    for (size_t i = 0; i < sbx_migrations_count; i++) {
        const struct sbx_migration *m = &sbx_migrations[i];
        if (sq_exec_err(db, "BEGIN IMMEDIATE", msg, sizeof msg) != SQLITE_OK) {
            snprintf(err, errlen, "%s: cannot lock for migration: %s", path, msg);
            return -1;
        }
        /* Re-read under the lock: another process may have migrated meanwhile. */
        if (sq_user_version(db) >= m->version) {
            sq_exec_err(db, "COMMIT", msg, sizeof msg);
            continue;
        }
        snprintf(bump, sizeof bump, "PRAGMA user_version = %d", m->version);
        if (sq_exec_err(db, m->sql, msg, sizeof msg) != SQLITE_OK ||
            sq_exec_err(db, bump, msg, sizeof msg) != SQLITE_OK) {
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            snprintf(err, errlen, "%s: migration %04d_%s failed: %s", path, m->version, m->name,
                     msg);
            return -1;
        }
        if (sq_exec_err(db, "COMMIT", msg, sizeof msg) != SQLITE_OK) {
            snprintf(err, errlen, "%s: migration %04d_%s did not commit: %s", path, m->version,
                     m->name, msg);
            return -1;
        }
        log_info("store: applied migration %04d_%s", m->version, m->name);
    }
    return 0;
}

static void sq_close(struct store *st)
{
    struct sq_store *s = st->cls;
    struct sq_conn *c, *next;

    /* First, so that the connection closed last (which checkpoints the WAL and removes it) is one
     * of the store's. */
    sq_checkpointer_free(s->checkpointer);
    pthread_mutex_lock(&s->conns_lock);
    for (c = s->conns; c; c = next) {
        next = c->next;
        sq_conn_close(c);
    }
    s->conns = NULL;
    pthread_mutex_unlock(&s->conns_lock);
    pthread_key_delete(s->conn_key);
    pthread_mutex_destroy(&s->conns_lock);
    pthread_rwlock_destroy(&s->write_gate);
    free(s);
    free(st);
}

/* SQLite counts every allocation under one global mutex unless told not to: the committer, the
 * HTTP threads' reads and the checkpointer then queue on it. The store reads no memory figures. */
static void sq_configure_library(void)
{
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

struct store *store_sqlite_open(const char *path, int busy_timeout_ms, const char *synchronous,
                                char *err, size_t errlen)
{
    static pthread_once_t configured = PTHREAD_ONCE_INIT;
    struct store *st = calloc(1, sizeof *st);
    struct sq_store *s = calloc(1, sizeof *s);
    sqlite3 *db;
    int fd;

    pthread_once(&configured, sq_configure_library);
    if (!st || !s) {
        snprintf(err, errlen, "out of memory");
        free(st);
        free(s);
        return NULL;
    }
    if (strlen(path) >= sizeof s->path) {
        snprintf(err, errlen, "database path too long");
        free(st);
        free(s);
        return NULL;
    }
    s->base.eng = &sq_engine;
    strcpy(s->path, path);
    s->busy_timeout_ms = busy_timeout_ms;
    snprintf(s->synchronous, sizeof s->synchronous, "%s", synchronous ? synchronous : "FULL");
    pthread_mutex_init(&s->conns_lock, NULL);
    pthread_rwlockattr_t gate_attr;
    pthread_rwlockattr_init(&gate_attr);
    /* A waiting checkpoint goes before new writers (not behind a stream of them). */
    pthread_rwlockattr_setkind_np(&gate_attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&s->write_gate, &gate_attr);
    pthread_rwlockattr_destroy(&gate_attr);
    /* Connections are closed by sq_close(), not when their thread exits: the store may outlive
     * short-lived threads only as long as it is open, and closing from a destructor would race
     * with sq_close(). */
    pthread_key_create(&s->conn_key, NULL);
    st->cls = s;

    /* A new database is created private (0600, or 0660 where the unit asks for a shared group)
     * rather than with SQLite's 0644: it holds every App's messages. SQLite gives the -wal and
     * -shm files the database's own mode. */
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, config_private_mode(0600));
    if (fd >= 0)
        close(fd);
    else if (errno != EEXIST)
        log_warn("store: cannot create %s: %s (SQLite will try)", path, strerror(errno));
    db =
        sq_open_conn(s, s->busy_timeout_ms > SQ_OPEN_WAIT_MS ? s->busy_timeout_ms : SQ_OPEN_WAIT_MS,
                     err, errlen);
    if (db && !(s->checkpointer =
                    sq_checkpointer_new(path, s->busy_timeout_ms, s->synchronous, &s->write_gate)))
        snprintf(err, errlen, "out of memory");
    if (!db || !s->checkpointer || sq_migrate(db, path, err, errlen) != 0) {
        sq_checkpointer_free(s->checkpointer);
        sqlite3_close(db);
        pthread_key_delete(s->conn_key);
        pthread_mutex_destroy(&s->conns_lock);
        pthread_rwlock_destroy(&s->write_gate);
        free(s);
        free(st);
        return NULL;
    }
    sqlite3_close(db);

    store_sql_init(st);
    return st;
}
