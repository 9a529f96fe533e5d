/*
 * http_sandboxes.c: /v1/sandboxes (admin: all; an App key: those that served its App): list, get,
 * and DELETE, which asks the owning worker to terminate the Sandbox now.
 */
#include "gateway.h"
#include "store_sandboxes.h"
#include "render.h"
#include "reply.h"
#include "notify.h"

#include <stdlib.h>

enum MHD_Result http_sandbox_list(struct request *r)
{
    enum MHD_Result ret;
    size_t limit, n;
    const char *cursor;
    char next[STORE_CURSOR_LEN];
    struct store_sandbox *items;
    if (!paging_params(r, &limit, &cursor, &ret))
        return ret;
    enum store_status s = store_sandbox_list(r->gw->st, r->app_id, cursor, limit, &items, &n, next);
    if (s != STORE_OK)
        return reply_store_error(r, s, "Sandbox list");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, render_sandbox(&items[i]));
    free(items);
    return reply_json(r, 200, render_page(arr, next));
}

enum MHD_Result http_sandbox_get(struct request *r)
{
    struct store_sandbox b;
    enum store_status s = store_sandbox_get(r->gw->st, r->app_id, r->params[0], &b);
    if (s != STORE_OK)
        return reply_store_error(r, s, "Sandbox");
    return reply_json(r, 200, render_sandbox(&b));
}

enum MHD_Result http_sandbox_delete(struct request *r)
{
    struct store_sandbox b;
    enum store_status s =
        store_sandbox_request_stop(r->gw->st, &r->ctx, r->app_id, r->params[0], &b);
    if (s == STORE_CONFLICT)
        return reply_problem(r, PROBLEM_CONFLICT, NULL, "the Sandbox has already ended");
    if (s != STORE_OK)
        return reply_store_error(r, s, "Sandbox");
    /* The owning worker terminates it: wake the workers now rather than at their next poll. */
    notify_send(r->gw->workers, "stop");
    return reply_json(r, 202, render_sandbox(&b));
}
