/*
 * bounds.c: the workers' account of the Sandbox bounds they cannot apply on their host
 * (workers.unbounded, migration 0008): written once by each worker after its drivers' start-up
 * checks, read by the gateway for GET /v1/pool.
 */
#include "store_sql.h"

#include <stdlib.h>
#include <string.h>

enum store_status store_worker_set_unbounded(struct store *st, const char *worker_id,
                                             const char *unbounded)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE workers SET unbounded = ?2 WHERE id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, worker_id);
    sql_bind_text(s, 2, unbounded);
    return sql_step_done(st, s);
}

/* Appends each comma-separated item of list to *items unless it is there already. */
static int add_items(const char *list, char ***items, size_t *n)
{
    const char *p = list;
    while (*p) {
        size_t len = strcspn(p, ",");
        bool seen = len == 0;
        for (size_t i = 0; i < *n && !seen; i++)
            seen = strlen((*items)[i]) == len && strncmp((*items)[i], p, len) == 0;
        if (!seen) {
            char **grown = realloc(*items, (*n + 1) * sizeof **items);
            if (!grown)
                return -1;
            *items = grown;
            if (!((*items)[*n] = strndup(p, len)))
                return -1;
            (*n)++;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return 0;
}

enum store_status store_sandbox_unbounded(struct store *st, char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    struct sql_stmt *s = sql_stmt(st, "SELECT DISTINCT unbounded FROM workers WHERE stopped_at IS "
                                      "NULL AND unbounded IS NOT NULL AND unbounded <> ''");
    if (!s)
        return STORE_ERROR;
    enum store_status r = STORE_OK;
    int rc;
    while ((rc = sql_step(s)) == SQL_ROW)
        if (add_items(sql_col_text(s, 0), out, n) != 0) {
            r = STORE_ERROR;
            break;
        }
    if (r == STORE_OK && rc != SQL_DONE)
        r = sql_status(st, rc);
    sql_done(s);
    if (r != STORE_OK) {
        store_strings_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return r;
}

void store_strings_free(char **items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(items[i]);
    free(items);
}
