/*
 * store_open.c: picks the store backend that the `store` setting names, assembles the PostgreSQL
 * one (its engine, sql_pg.c, under the store's engine-independent logic), and closes either.
 */
#include "log.h"
#include "migrations.h"
#include "store/sql/sql_pg.h"
#include "store.h"

#include <stdio.h>
#include <string.h>

struct store *store_open(const char *store, const char *sqlite_path, int busy_timeout_ms,
                         const char *synchronous, char *err, size_t errlen)
{
    if (!store || !*store || strcmp(store, "sqlite") == 0)
        return store_sqlite_open(sqlite_path, busy_timeout_ms, synchronous, err, errlen);
    if (strncmp(store, "postgres://", 11) == 0 || strncmp(store, "postgresql://", 13) == 0)
        return store_pg_open(store, busy_timeout_ms, err, errlen);
    snprintf(err, errlen, "unknown store \"%.64s\": sqlite or a postgres:// URL", store);
    return NULL;
}

struct store *store_pg_open(const char *url, int busy_timeout_ms, char *err, size_t errlen)
{
    struct store *st = sql_pg_store_open(url, busy_timeout_ms, err, errlen);
    if (!st)
        return NULL;
    if (sql_pg_migrate(st, sbx_pg_migrations, sbx_pg_migrations_count, err, errlen) != 0) {
        sql_pg_store_close(st);
        return NULL;
    }
    store_sql_init(st);
    log_info("store: PostgreSQL at %s", sql_pg_store_url(st));
    return st;
}

void store_close(struct store *st)
{
    if (!st)
        return;
    store_sql_fini(st);
    sql_eng(st)->close(st);
}
