/*
 * chunks.c: the store's side of streaming: an agent's partial output, the message_chunks table
 * (migration 0009_streaming). The worker appends a batch of chunks in one transaction, only while
 * it still holds the message's lease, so a late batch from a delivery that lost its lease cannot
 * mix into another attempt's output. The gateway reads them in index order for
 * GET .../messages/{id}/stream, App-scoped like the message itself.
 */
#include "log.h"
#include "store_sql.h"
#include "clock.h"

#include <stdlib.h>
#include <string.h>

void store_chunk_list_free(struct store_chunk *c, size_t n)
{
    if (!c)
        return;
    for (size_t i = 0; i < n; i++)
        free(c[i].value_json);
    free(c);
}

enum store_status store_chunk_append(struct store *st, const char *message_id,
                                     const char *worker_id, int64_t first_index,
                                     const char *const *values, size_t n, int64_t dropped)
{
    struct sql_stmt *s;
    enum store_status r;
    int64_t now = clock_wall_ms();

    if ((r = sql_begin(st)) != STORE_OK)
        return r;
    /* The lease check and the bump of the drop count in one statement: no row changed means the
     * message is no longer this worker's to write to. */
    s = sql_stmt(st, "UPDATE messages SET chunks_dropped = chunks_dropped + ?3 "
                     "WHERE id = ?1 AND state = 'delivering' AND lease_owner = ?2");
    if (!s) {
        sql_rollback(st);
        return STORE_ERROR;
    }
    sql_bind_text(s, 1, message_id);
    sql_bind_text(s, 2, worker_id);
    sql_bind_int64(s, 3, dropped);
    r = sql_step_done(st, s);
    if (r == STORE_OK && sql_changes(st) != 1)
        r = STORE_CONFLICT;
    for (size_t i = 0; r == STORE_OK && i < n; i++) {
        s = sql_stmt(st, "INSERT INTO message_chunks (message_id, idx, value, at) "
                         "VALUES (?1, ?2, ?3, ?4)");
        if (!s) {
            r = STORE_ERROR;
            break;
        }
        sql_bind_text(s, 1, message_id);
        sql_bind_int64(s, 2, first_index + (int64_t)i);
        sql_bind_text(s, 3, values[i]);
        sql_bind_int64(s, 4, now);
        r = sql_step_done(st, s);
    }
    if (r != STORE_OK) {
        sql_rollback(st);
        return r;
    }
    return sql_commit(st);
}

enum store_status store_chunk_totals(struct store *st, const char *message_id, int64_t *count,
                                     int64_t *bytes)
{
    /* Bytes as the worker counts them: the length of each value's JSON text. SQLite's length()
     * of a text counts characters, of a blob bytes; PostgreSQL's octet_length counts bytes. */
    struct sql_stmt *s =
        sql_dialect(st) == SQL_SQLITE
            ? sql_stmt(st, "SELECT count(*), COALESCE(sum(length(CAST(value AS BLOB))), 0) "
                           "FROM message_chunks WHERE message_id = ?1")
            : sql_stmt(st, "SELECT count(*), COALESCE(sum(octet_length(value)), 0) "
                           "FROM message_chunks WHERE message_id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, message_id);
    int rc = sql_step(s);
    enum store_status r = STORE_OK;
    if (rc == SQL_ROW) {
        *count = sql_col_int64(s, 0);
        *bytes = sql_col_int64(s, 1);
    } else {
        r = sql_status(st, rc);
    }
    sql_done(s);
    return r;
}

enum store_status store_chunk_list(struct store *st, const char *app_id, const char *session_id,
                                   const char *message_id, int64_t from, size_t limit,
                                   struct store_chunk **out, size_t *n, int64_t *dropped)
{
    /* One read: the message row (App and Session scoped, not of a deleted Session) left-joined
     * to its chunks from `from` on, so that an unknown message is told from one without chunks. */
    struct sql_stmt *s =
        sql_stmt(st, "SELECT m.chunks_dropped, c.idx, c.value, c.at FROM messages m "
                     "JOIN sessions s ON s.id = m.session_id "
                     "LEFT JOIN message_chunks c ON c.message_id = m.id AND c.idx >= ?4 "
                     "WHERE m.id = ?1 AND m.session_id = ?2 AND (?3 = '' OR m.app_id = ?3) "
                     "AND s.state <> 'deleted' ORDER BY c.idx LIMIT ?5");
    struct store_chunk *items = NULL;
    size_t count = 0;
    bool found = false;
    int64_t drops = 0;
    int rc;

    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, message_id);
    sql_bind_text_copy(s, 2, session_id);
    sql_bind_text_copy(s, 3, app_id ? app_id : "");
    sql_bind_int64(s, 4, from);
    sql_bind_int64(s, 5, (int64_t)limit);
    while ((rc = sql_step(s)) == SQL_ROW) {
        found = true;
        drops = sql_col_int64(s, 0);
        if (sql_col_null(s, 1))
            continue; /* the message has no chunks from `from` on */
        struct store_chunk *grown = realloc(items, (count + 1) * sizeof *items);
        if (!grown) {
            rc = SQL_NOMEM;
            break;
        }
        items = grown;
        struct store_chunk *c = &items[count++];
        c->index = sql_col_int64(s, 1);
        c->value_json = sql_col_dup(s, 2);
        c->at = sql_col_int64(s, 3);
        if (!c->value_json) {
            rc = SQL_NOMEM;
            break;
        }
    }
    sql_done(s);
    if (rc != SQL_DONE) {
        store_chunk_list_free(items, count);
        return rc == SQL_NOMEM ? STORE_ERROR : sql_status(st, rc);
    }
    if (!found) {
        free(items);
        return STORE_NOT_FOUND;
    }
    *out = items;
    *n = count;
    if (dropped)
        *dropped = drops;
    return STORE_OK;
}
