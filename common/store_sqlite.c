/*
 * store_sqlite.c: the SQLite backend's foundation: opening the file with the pragmas that make a
 * 202 durable, applying migrations, one connection per thread, cached statements, and the audit
 * event writer that every mutation calls inside its own transaction.
 */
#include "store_sqlite_int.h"
#include "log.h"
#include "migrations.h"
#include "timefmt.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SQ_STMT_CACHE 128

struct sq_conn {
    sqlite3 *db;
    struct sq_conn *next;
    size_t nstmts;
    const char *sqls[SQ_STMT_CACHE];
    sqlite3_stmt *stmts[SQ_STMT_CACHE];
};

const char *const store_session_states[4] = {"idle", "activating", "active", "deleted"};
const char *const store_message_states[4] = {"queued", "delivering", "completed", "failed"};
const char *const store_sandbox_states[7] = {"booting",  "warm",       "claimed", "running",
                                             "stopping", "terminated", "failed"};

const char *store_status_name(enum store_status st)
{
    static const char *const names[] = {"ok",   "not found", "conflict", "busy",
                                        "full", "invalid",   "empty",    "error"};
    return (unsigned)st < sizeof names / sizeof names[0] ? names[st] : "unknown";
}

int store_schema_version(void)
{
    return sbx_migrations_count > 0 ? sbx_migrations[sbx_migrations_count - 1].version : 0;
}

static int sq_exec(sqlite3 *db, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "%s", msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
    }
    return rc;
}

static sqlite3 *sq_open_conn(struct sq_store *s, char *err, size_t errlen)
{
    sqlite3 *db = NULL;
    char pragmas[256];
    int rc = sqlite3_open_v2(
        s->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "cannot open %s: %s", s->path,
                 db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, s->busy_timeout_ms);
    sqlite3_extended_result_codes(db, 1);
    snprintf(pragmas, sizeof pragmas,
             "PRAGMA journal_mode=WAL; PRAGMA foreign_keys=ON; PRAGMA synchronous=%s;",
             s->synchronous);
    if (sq_exec(db, pragmas, err, errlen) != SQLITE_OK) {
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

static void sq_conn_close(struct sq_conn *c)
{
    for (size_t i = 0; i < c->nstmts; i++)
        sqlite3_finalize(c->stmts[i]);
    sqlite3_close(c->db);
    free(c);
}

sqlite3 *sq_db(struct store *st)
{
    struct sq_store *s = st->cls;
    struct sq_conn *c = pthread_getspecific(s->conn_key);
    char err[512];

    if (c)
        return c->db;
    c = calloc(1, sizeof *c);
    if (!c) {
        log_error("store: out of memory");
        return NULL;
    }
    c->db = sq_open_conn(s, err, sizeof err);
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
    return c->db;
}

sqlite3_stmt *sq_stmt(struct store *st, const char *sql)
{
    struct sq_store *s = st->cls;
    struct sq_conn *c;
    sqlite3_stmt *stmt = NULL;

    if (!sq_db(st))
        return NULL;
    c = pthread_getspecific(s->conn_key);
    for (size_t i = 0; i < c->nstmts; i++)
        if (c->sqls[i] == sql)
            return c->stmts[i];
    if (sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, NULL) != SQLITE_OK) {
        log_error("store: cannot prepare \"%.80s\": %s", sql, sqlite3_errmsg(c->db));
        return NULL;
    }
    if (c->nstmts < SQ_STMT_CACHE) {
        c->sqls[c->nstmts] = sql;
        c->stmts[c->nstmts++] = stmt;
    } else {
        /* Never expected: the backend has fewer distinct statements than the cache holds. */
        log_error("store: statement cache full");
        sqlite3_finalize(stmt);
        return NULL;
    }
    return stmt;
}

void sq_done(sqlite3_stmt *stmt)
{
    if (stmt) {
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
    }
}

enum store_status sq_status(sqlite3 *db, int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return STORE_OK;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return STORE_BUSY;
    case SQLITE_FULL:
        return STORE_FULL;
    case SQLITE_CONSTRAINT:
        if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY)
            return STORE_CONFLICT;
        return STORE_INVALID;
    default:
        log_error("store: sqlite error %d: %s", rc, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        return STORE_ERROR;
    }
}

enum store_status sq_begin(sqlite3 *db)
{
    return sq_status(db, sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL));
}

enum store_status sq_commit(sqlite3 *db)
{
    int rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        enum store_status st = sq_status(db, rc);
        sq_rollback(db);
        return st;
    }
    return STORE_OK;
}

void sq_rollback(sqlite3 *db)
{
    if (!sqlite3_get_autocommit(db))
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
}

int sq_bind_text_or_null(sqlite3_stmt *s, int idx, const char *v)
{
    if (!v || !*v)
        return sqlite3_bind_null(s, idx);
    return sqlite3_bind_text(s, idx, v, -1, SQLITE_TRANSIENT);
}

void sq_col_copy(sqlite3_stmt *s, int col, char *out, size_t outlen)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    snprintf(out, outlen, "%s", t ? (const char *)t : "");
}

char *sq_col_dup(sqlite3_stmt *s, int col)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    return t ? strdup((const char *)t) : NULL;
}

enum store_status sq_event(struct store *st, const struct store_ctx *ctx, const char *kind,
                           const char *object_type, const char *object_id, const char *app_id,
                           const char *session_id, const char *data_json)
{
    sqlite3_stmt *s = sq_stmt(st, "INSERT INTO events (at, actor, kind, object_type, object_id, "
                                  "app_id, session_id, request_id, data) "
                                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    int rc;
    if (!s)
        return STORE_ERROR;
    sqlite3_bind_int64(s, 1, now_ms());
    sqlite3_bind_text(s, 2, ctx && ctx->actor ? ctx->actor : "unknown", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, object_type, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 5, object_id, -1, SQLITE_STATIC);
    sq_bind_text_or_null(s, 6, app_id);
    sq_bind_text_or_null(s, 7, session_id);
    sq_bind_text_or_null(s, 8, ctx ? ctx->request_id : NULL);
    sq_bind_text_or_null(s, 9, data_json);
    rc = sqlite3_step(s);
    sq_done(s);
    return rc == SQLITE_DONE ? STORE_OK : sq_status(sq_db(st), rc);
}

enum store_status sq_read_page(struct store *st, sqlite3_stmt *s, size_t limit,
                               const struct sq_page *pg, void *out, size_t *n, char *next_cursor)
{
    char *items = NULL;
    size_t count = 0;
    int64_t last = 0;
    int rc;

    next_cursor[0] = '\0';
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (count == limit) {
            snprintf(next_cursor, STORE_CURSOR_LEN, "%" PRId64, last);
            break;
        }
        char *grown = realloc(items, (count + 1) * pg->elem_size);
        if (!grown) {
            rc = SQLITE_NOMEM;
            break;
        }
        items = grown;
        memset(items + count * pg->elem_size, 0, pg->elem_size);
        last = pg->from_row(s, items + count++ * pg->elem_size);
    }
    sq_done(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        pg->free_items(items, count);
        return sq_status(sq_db(st), rc);
    }
    /* out is the caller's `struct store_x **`: every object pointer has the same representation
     * here, and storing through a void * would be an aliasing violation. */
    memcpy(out, &items, sizeof items);
    *n = count;
    return STORE_OK;
}

/* ---- records ---- */

void store_app_clear(struct store_app *a)
{
    free(a->command_json);
    a->command_json = NULL;
}

void store_app_list_free(struct store_app *a, size_t n)
{
    for (size_t i = 0; a && i < n; i++)
        store_app_clear(&a[i]);
    free(a);
}

void store_session_clear(struct store_session *s)
{
    free(s->metadata_json);
    s->metadata_json = NULL;
}

void store_session_list_free(struct store_session *s, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        store_session_clear(&s[i]);
    free(s);
}

void store_message_clear(struct store_message *m)
{
    free(m->body_json);
    free(m->reply_json);
    free(m->error);
    m->body_json = m->reply_json = m->error = NULL;
}

void store_message_list_free(struct store_message *m, size_t n)
{
    for (size_t i = 0; m && i < n; i++)
        store_message_clear(&m[i]);
    free(m);
}

void store_event_list_free(struct store_event *e, size_t n)
{
    for (size_t i = 0; e && i < n; i++)
        free(e[i].data_json);
    free(e);
}

void store_delivery_clear(struct store_delivery *d)
{
    store_message_clear(&d->message);
    store_session_clear(&d->session);
    store_app_clear(&d->app);
}

/* ---- settings ---- */

static enum store_status sq_setting_get(struct store *st, const char *key, char *out, size_t outlen)
{
    sqlite3_stmt *s = sq_stmt(st, "SELECT value FROM settings WHERE key = ?1");
    enum store_status rc;
    if (!s)
        return STORE_ERROR;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    int r = sqlite3_step(s);
    if (r == SQLITE_ROW) {
        sq_col_copy(s, 0, out, outlen);
        rc = STORE_OK;
    } else {
        rc = r == SQLITE_DONE ? STORE_NOT_FOUND : sq_status(sq_db(st), r);
    }
    sq_done(s);
    return rc;
}

static enum store_status sq_setting_put(struct store *st, const char *key, const char *value)
{
    sqlite3_stmt *s = sq_stmt(st, "INSERT INTO settings (key, value) VALUES (?1, ?2) "
                                  "ON CONFLICT (key) DO UPDATE SET value = excluded.value");
    if (!s)
        return STORE_ERROR;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, value, -1, SQLITE_STATIC);
    int r = sqlite3_step(s);
    sq_done(s);
    return r == SQLITE_DONE ? STORE_OK : sq_status(sq_db(st), r);
}

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

    if (sq_exec(db, "BEGIN IMMEDIATE", msg, sizeof msg) != SQLITE_OK) {
        snprintf(err, errlen, "%s: cannot lock for migration: %s", path, msg);
        return -1;
    }
    have = sq_user_version(db);
    sq_exec(db, "COMMIT", msg, sizeof msg);
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
        if (sq_exec(db, "BEGIN IMMEDIATE", msg, sizeof msg) != SQLITE_OK) {
            snprintf(err, errlen, "%s: cannot lock for migration: %s", path, msg);
            return -1;
        }
        /* Re-read under the lock: another process may have migrated meanwhile. */
        if (sq_user_version(db) >= m->version) {
            sq_exec(db, "COMMIT", msg, sizeof msg);
            continue;
        }
        snprintf(bump, sizeof bump, "PRAGMA user_version = %d", m->version);
        if (sq_exec(db, m->sql, msg, sizeof msg) != SQLITE_OK ||
            sq_exec(db, bump, msg, sizeof msg) != SQLITE_OK) {
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            snprintf(err, errlen, "%s: migration %04d_%s failed: %s", path, m->version, m->name,
                     msg);
            return -1;
        }
        if (sq_exec(db, "COMMIT", msg, sizeof msg) != SQLITE_OK) {
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

    store_sqlite_api_fini(st);
    pthread_mutex_lock(&s->conns_lock);
    for (c = s->conns; c; c = next) {
        next = c->next;
        sq_conn_close(c);
    }
    s->conns = NULL;
    pthread_mutex_unlock(&s->conns_lock);
    pthread_key_delete(s->conn_key);
    pthread_mutex_destroy(&s->conns_lock);
    free(s);
    free(st);
}

struct store *store_sqlite_open(const char *path, int busy_timeout_ms, const char *synchronous,
                                char *err, size_t errlen)
{
    struct store *st = calloc(1, sizeof *st);
    struct sq_store *s = calloc(1, sizeof *s);
    sqlite3 *db;

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
    strcpy(s->path, path);
    s->busy_timeout_ms = busy_timeout_ms;
    snprintf(s->synchronous, sizeof s->synchronous, "%s", synchronous ? synchronous : "FULL");
    pthread_mutex_init(&s->conns_lock, NULL);
    /* Connections are closed by sq_close(), not when their thread exits: the store may outlive
     * short-lived threads only as long as it is open, and closing from a destructor would race
     * with sq_close(). */
    pthread_key_create(&s->conn_key, NULL);
    st->cls = s;

    db = sq_open_conn(s, err, errlen);
    if (!db) {
        pthread_key_delete(s->conn_key);
        free(s);
        free(st);
        return NULL;
    }
    if (sq_migrate(db, path, err, errlen) != 0) {
        sqlite3_close(db);
        pthread_key_delete(s->conn_key);
        free(s);
        free(st);
        return NULL;
    }
    sqlite3_close(db);

    st->close = sq_close;
    st->setting_get = sq_setting_get;
    st->setting_put = sq_setting_put;
    store_sqlite_api_init(st);
    store_sqlite_queue_init(st);
    return st;
}
