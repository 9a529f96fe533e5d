/*
 * http_events.c: GET /v1/events: the audit trail, oldest first, optionally for one Session; the
 * cursor is the id of the last event seen. An App key sees only its App's events.
 */
#include "gateway.h"
#include "store_events.h"
#include "json_input.h"
#include "render.h"
#include "reply.h"
#include "sse.h"

#include <ctype.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The form openapi.yaml gives Session ids: "ses_" and 1 to STORE_ID_LEN - 5 letters or digits. */
static bool is_session_id(const char *s)
{
    size_t n = strlen(s);
    if (n < 5 || n >= STORE_ID_LEN || strncmp(s, "ses_", 4) != 0)
        return false;
    for (size_t i = 4; i < n; i++)
        if (!isalnum((unsigned char)s[i]))
            return false;
    return true;
}

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
    if (session_id && !is_session_id(session_id))
        return reply_problem(r, PROBLEM_INVALID_PARAMETER, "sessionId",
                             "sessionId must be a Session id (ses_ and letters or digits)");
    int64_t after = *cursor ? strtoll(cursor, NULL, 10) : 0;
    if (sse_wanted(r)) /* the live feed (http_event_stream.c): from the cursor, else from now */
        return http_event_stream(r, session_id, *cursor ? after : -1);
    /* One more than asked tells whether there is a next page. */
    enum store_status s =
        store_event_list(r->gw->st, r->app_id, session_id, after, limit + 1, &items, &n);
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
