/*
 * events.c: reading the audit trail (the events table) by App, Session and id. Events are written
 * by every mutation inside its own transaction (sql_event, store_sql.c), so an event exists
 * exactly when its change does. A page ends at the settled id (sql_events_settled), so a cursor
 * never passes an event that commits later with a smaller id. No hidden state.
 */
#include "store_sql.h"

#include <stdlib.h>

void store_event_list_free(struct store_event *e, size_t n)
{
    for (size_t i = 0; e && i < n; i++)
        free(e[i].data_json);
    free(e);
}

static int64_t event_from_row(struct sql_stmt *s, void *item)
{
    struct store_event *e = item;
    e->id = sql_col_int64(s, 0);
    e->at = sql_col_int64(s, 1);
    sql_col_copy(s, 2, e->actor, sizeof e->actor);
    sql_col_copy(s, 3, e->kind, sizeof e->kind);
    sql_col_copy(s, 4, e->object_type, sizeof e->object_type);
    sql_col_copy(s, 5, e->object_id, sizeof e->object_id);
    sql_col_copy(s, 6, e->app_id, sizeof e->app_id);
    sql_col_copy(s, 7, e->session_id, sizeof e->session_id);
    sql_col_copy(s, 8, e->request_id, sizeof e->request_id);
    e->data_json = sql_col_dup(s, 9);
    return e->id;
}

static void event_items_free(void *items, size_t n)
{
    store_event_list_free(items, n);
}

static const struct sql_page event_page = {sizeof(struct store_event), event_from_row,
                                           event_items_free};

enum store_status store_event_list(struct store *st, const char *app_id, const char *session_id,
                                   int64_t after, size_t limit, struct store_event **out, size_t *n)
{
    int64_t upto;
    enum store_status r = sql_events_settled(st, after, &upto);
    if (r != STORE_OK)
        return r;
    struct sql_stmt *s =
        sql_stmt(st, "SELECT id, at, actor, kind, object_type, object_id, app_id, "
                     "session_id, request_id, data FROM events WHERE id > ?1 AND id <= ?5 "
                     "AND (?2 = '' OR app_id = ?2) AND (?3 = '' OR session_id = ?3) "
                     "ORDER BY id LIMIT ?4");
    if (!s)
        return STORE_ERROR;
    sql_bind_int64(s, 5, upto);
    sql_bind_int64(s, 1, after);
    sql_bind_app(s, 2, app_id);
    sql_bind_text_copy(s, 3, session_id ? session_id : "");
    sql_bind_int64(s, 4, (int64_t)limit);
    return sql_read_all(st, s, &event_page, (void *)out, n);
}
