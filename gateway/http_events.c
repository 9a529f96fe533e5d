/*
 * http_events.c: GET /v1/events: the audit trail, oldest first, optionally for one Session; the
 * cursor is the id of the last event seen. An App key sees only its App's events.
 */
#include "gateway.h"
#include "json_input.h"
#include "render.h"
#include "reply.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum MHD_Result http_event_list(struct request *r)
{
    enum MHD_Result ret;
    size_t limit, n;
    const char *cursor;
    char next[STORE_CURSOR_LEN] = "";
    struct store_event *items;
    const char *session_id =
        MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "sessionId");

    if (!paging_params(r, &limit, &cursor, &ret))
        return ret;
    if (session_id && (strlen(session_id) == 0 || strlen(session_id) >= STORE_ID_LEN))
        return reply_problem(r, "invalid-parameter", "sessionId", "sessionId must be a Session id");
    int64_t after = *cursor ? strtoll(cursor, NULL, 10) : 0;
    /* One more than asked tells whether there is a next page. */
    enum store_status s =
        r->gw->st->event_list(r->gw->st, r->app_id, session_id, after, limit + 1, &items, &n);
    if (s != STORE_OK)
        return reply_store_error(r, s, "event list");
    json_t *arr = json_array();
    for (size_t i = 0; i < n && i < limit; i++)
        json_array_append_new(arr, render_event(&items[i]));
    if (n > limit)
        snprintf(next, sizeof next, "%" PRId64, items[limit - 1].id);
    store_event_list_free(items, n);
    return reply_json(r, 200, render_page(arr, next));
}
