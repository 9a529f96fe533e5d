/*
 * store_sqlite_int.h: what the files of the SQLite store backend share. Not for the gateway or the
 * workers: they see only store.h.
 *
 * The backend is split by who calls it:
 *   store_sqlite.c        opening, pragmas, migrations, connections, statements, events, clear()s;
 *   store_sqlite_api.c    what the gateway calls (apps, keys, sessions, messages, listing);
 *   store_sqlite_queue.c  what the workers call (queue claims, leases, Sandbox lifecycle, workers).
 */
#ifndef SBX_STORE_SQLITE_INT_H
#define SBX_STORE_SQLITE_INT_H

#include "store.h"

#include <pthread.h>
#include <sqlite3.h>

struct sq_conn;

struct sq_store {
    char path[1024];
    int busy_timeout_ms;
    char synchronous[16];
    pthread_key_t conn_key; /* this thread's connection */
    pthread_mutex_t conns_lock;
    struct sq_conn *conns; /* every open connection, to close them all */
    void *api;             /* store_sqlite_api.c's own state (group commit) */
};

/* The calling thread's connection (opened on first use). NULL on failure (logged). */
sqlite3 *sq_db(struct store *st);
/* A prepared statement for sql on the calling thread's connection, cached: sql must be a string
 * literal (its address is the cache key). Reset it with sq_done() when finished. NULL on failure
 * (logged). */
sqlite3_stmt *sq_stmt(struct store *st, const char *sql);
void sq_done(sqlite3_stmt *stmt);

/* BEGIN IMMEDIATE (writers) or BEGIN (readers), COMMIT, ROLLBACK. */
enum store_status sq_begin(sqlite3 *db);
enum store_status sq_commit(sqlite3 *db);
void sq_rollback(sqlite3 *db);

/* Maps an SQLite result code to a store status (logging unexpected ones with sqlite's message). */
enum store_status sq_status(sqlite3 *db, int rc);

/* Appends an audit event inside the caller's transaction. data_json may be NULL. */
enum store_status sq_event(struct store *st, const struct store_ctx *ctx, const char *kind,
                           const char *object_type, const char *object_id, const char *app_id,
                           const char *session_id, const char *data_json);

/* Column helpers: copy text into a fixed buffer ("" for NULL), or strdup it (NULL for NULL). */
void sq_col_copy(sqlite3_stmt *s, int col, char *out, size_t outlen);
char *sq_col_dup(sqlite3_stmt *s, int col);
/* Binds text, or NULL for NULL or "". */
int sq_bind_text_or_null(sqlite3_stmt *s, int idx, const char *v);

/* One page of a list (limit SIZE_MAX: every row): steps s (bound, asking for limit + 1 rows) and
 * turns each row into an item of elem_size with from_row, which returns the row's cursor key. A row
 * beyond limit only means that there is a next page: its cursor is the last item's key. out is the
 * caller's `struct store_x **`. On failure the items read so far are released with free_items. */
struct sq_page {
    size_t elem_size;
    int64_t (*from_row)(sqlite3_stmt *s, void *item);
    void (*free_items)(void *items, size_t n);
};
enum store_status sq_read_page(struct store *st, sqlite3_stmt *s, size_t limit,
                               const struct sq_page *pg, void *out, size_t *n, char *next_cursor);

/* Filled in by the two other files. */
void store_sqlite_api_init(struct store *st);
void store_sqlite_api_fini(struct store *st);
void store_sqlite_queue_init(struct store *st);

#endif
