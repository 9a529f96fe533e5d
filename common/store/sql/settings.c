/*
 * settings.c: the store's settings table, a key-value map for what the gateways and workers of
 * one database must agree on (the admin token, for one). No hidden state.
 */
#include "store_sql.h"

enum store_status store_setting_get(struct store *st, const char *key, char *out, size_t outlen)
{
    struct sql_stmt *s = sql_stmt(st, "SELECT value FROM settings WHERE key = ?1");
    enum store_status rc;
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, key);
    int r = sql_step(s);
    if (r == SQL_ROW) {
        sql_col_copy(s, 0, out, outlen);
        rc = STORE_OK;
    } else {
        rc = r == SQL_DONE ? STORE_NOT_FOUND : sql_status(st, r);
    }
    sql_done(s);
    return rc;
}

enum store_status store_setting_put(struct store *st, const char *key, const char *value)
{
    struct sql_stmt *s = sql_stmt(st, "INSERT INTO settings (key, value) VALUES (?1, ?2) "
                                      "ON CONFLICT (key) DO UPDATE SET value = excluded.value");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, key);
    sql_bind_text(s, 2, value);
    return sql_step_done(st, s);
}

enum store_status store_setting_init(struct store *st, const char *key, const char *value,
                                     char *out, size_t outlen)
{
    struct sql_stmt *s = sql_stmt(st, "INSERT INTO settings (key, value) VALUES (?1, ?2) "
                                      "ON CONFLICT (key) DO NOTHING");
    if (!s)
        return STORE_ERROR;
    sql_bind_text(s, 1, key);
    sql_bind_text(s, 2, value);
    int r = sql_step(s);
    sql_done(s);
    if (r != SQL_DONE)
        return sql_status(st, r);
    return store_setting_get(st, key, out, outlen);
}
