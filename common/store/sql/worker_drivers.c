/*
 * worker_drivers.c: the drivers each worker can run on its host (workers.drivers, migration
 * 0020). A worker writes them at start and again when they change (a guest image built while it
 * runs); the gateway reads the live workers' when an App is created or changes its driver.
 */
#include "store_sql.h"

#include <jansson.h>
#include <string.h>

enum store_status store_worker_set_drivers(struct store *st, const char *worker_id,
                                           const char *drivers_json)
{
    struct sql_stmt *s = sql_stmt(st, "UPDATE workers SET drivers = ?2 WHERE id = ?1");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, worker_id);
    sql_bind_text(s, 2, drivers_json);
    return sql_step_done(st, s);
}

enum store_status store_driver_support(struct store *st, const char *driver, int64_t fresh_after,
                                       size_t *recorded, size_t *runnable, char *why,
                                       size_t why_len)
{
    *recorded = *runnable = 0;
    if (why_len)
        why[0] = '\0';
    struct sql_stmt *s = sql_stmt(st, "SELECT drivers FROM workers WHERE stopped_at IS NULL AND "
                                      "heartbeat_at >= ?1 AND drivers IS NOT NULL");
    if (!s)
        return STORE_ERROR;
    sql_bind_int64(s, 1, fresh_after);
    int rc;
    while ((rc = sql_step(s)) == SQL_ROW) {
        json_t *all = json_loads(sql_col_text(s, 0), 0, NULL);
        json_t *one = json_object_get(all, driver);
        if (json_is_object(all)) {
            (*recorded)++;
            if (json_is_true(one))
                (*runnable)++;
            else if (why_len && !why[0])
                snprintf(why, why_len, "%s",
                         json_is_string(one) ? json_string_value(one) : "not in its build");
        }
        json_decref(all);
    }
    enum store_status r = rc == SQL_DONE ? STORE_OK : sql_status(st, rc);
    sql_done(s);
    return r;
}
