/*
 * store_open.c: picks the store backend that the `store` setting names.
 */
#include "store.h"

#include <stdio.h>
#include <string.h>

struct store *store_open(const char *store, const char *sqlite_path, int busy_timeout_ms,
                         const char *synchronous, char *err, size_t errlen)
{
    if (!store || !*store || strcmp(store, "sqlite") == 0)
        return store_sqlite_open(sqlite_path, busy_timeout_ms, synchronous, err, errlen);
    if (strncmp(store, "postgres://", 11) == 0 || strncmp(store, "postgresql://", 13) == 0)
        return store_pg_open(store, err, errlen);
    snprintf(err, errlen, "unknown store \"%.64s\": sqlite or a postgres:// URL", store);
    return NULL;
}
