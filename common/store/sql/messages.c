/*
 * messages.c: the messages table as the gateway reads it: one message of a Session, and a
 * Session's messages in delivery order (paged by seq), with the message row reader that the
 * enqueue and the queue share. Messages are written by the enqueue (enqueue.c) and moved through
 * their states by the queue (queue.c). No hidden state.
 */
#include "store_sql.h"

#include <stdlib.h>
#include <string.h>

void sql_message_from_row(struct sql_stmt *s, int c, struct store_message *m)
{
    memset(m, 0, sizeof *m);
    sql_col_copy(s, c + 0, m->id, sizeof m->id);
    sql_col_copy(s, c + 1, m->session_id, sizeof m->session_id);
    sql_col_copy(s, c + 2, m->app_id, sizeof m->app_id);
    m->seq = sql_col_int64(s, c + 3);
    sql_col_copy(s, c + 4, m->state, sizeof m->state);
    m->body_json = sql_col_dup(s, c + 5);
    m->reply_json = sql_col_dup(s, c + 6);
    m->error = sql_col_dup(s, c + 7);
    m->attempts = sql_col_int64(s, c + 8);
    m->max_attempts = sql_col_int64(s, c + 9);
    sql_col_copy(s, c + 10, m->idempotency_key, sizeof m->idempotency_key);
    sql_col_copy(s, c + 11, m->request_id, sizeof m->request_id);
    sql_col_copy(s, c + 12, m->sandbox_id, sizeof m->sandbox_id);
    sql_col_copy(s, c + 13, m->lease_owner, sizeof m->lease_owner);
    m->lease_expires_at = sql_col_int64_or(s, c + 14, 0);
    m->not_before = sql_col_int64(s, c + 15);
    m->created_at = sql_col_int64(s, c + 16);
    m->updated_at = sql_col_int64(s, c + 17);
    m->completed_at = sql_col_int64_or(s, c + 18, 0);
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

/* SQL_MESSAGE_COLS ", m.chunks_dropped": what the gateway renders. */
#define MESSAGE_READ_COLS SQL_MESSAGE_COLS ", m.chunks_dropped"

static void message_from_row(struct sql_stmt *s, struct store_message *m)
{
    sql_message_from_row(s, 0, m);
    m->chunks_dropped = sql_col_int64(s, 19);
}

static int64_t message_page_row(struct sql_stmt *s, void *item)
{
    struct store_message *m = item;
    message_from_row(s, m);
    return m->seq;
}

static void message_page_free(void *items, size_t n)
{
    store_message_list_free(items, n);
}

static const struct sql_page message_page = {sizeof(struct store_message), message_page_row,
                                             message_page_free};

/* What a message holds of stored text, for the list's byte bound (STORE_PAGE_BYTES). */
static size_t message_page_bytes(const void *item)
{
    const struct store_message *m = item;
    return (m->body_json ? strlen(m->body_json) : 0) + (m->reply_json ? strlen(m->reply_json) : 0) +
           (m->error ? strlen(m->error) : 0);
}

enum store_status store_message_get(struct store *st, const char *app_id, const char *session_id,
                                    const char *message_id, struct store_message *out)
{
    struct sql_stmt *s =
        sql_stmt(st, "SELECT " MESSAGE_READ_COLS " FROM messages m JOIN sessions s ON "
                     "s.id = m.session_id WHERE m.id = ?1 AND m.session_id = ?2 "
                     "AND (?3 = '' OR m.app_id = ?3) AND s.state <> 'deleted'");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, message_id);
    sql_bind_text_copy(s, 2, session_id);
    sql_bind_app(s, 3, app_id);
    return sql_read_one(st, s, &message_page, out);
}

enum store_status store_message_list(struct store *st, const char *app_id, const char *session_id,
                                     const char *after, size_t limit, struct store_message **out,
                                     size_t *n, char *next_cursor)
{
    struct sql_stmt *s;
    int64_t from = sql_cursor_parse(after);
    struct store_session ses;
    enum store_status r;

    if (from < 0)
        return STORE_INVALID;
    r = store_session_get(st, app_id, session_id, &ses);
    if (r != STORE_OK)
        return r;
    store_session_clear(&ses);
    /* Messages page by seq (their delivery order), not rowid. */
    s = sql_stmt(st, "SELECT " MESSAGE_READ_COLS
                     " FROM messages m WHERE m.session_id = ?1 AND m.seq > ?2 "
                     "ORDER BY m.seq LIMIT ?3");
    if (!s)
        return STORE_ERROR;
    sql_bind_text_copy(s, 1, session_id);
    sql_bind_int64(s, 2, from);
    sql_bind_int64(s, 3, (int64_t)limit + 1);
    return sql_read_page_bounded(st, s, limit, &message_page, message_page_bytes, (void *)out, n,
                                 next_cursor);
}
