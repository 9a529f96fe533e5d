/*
 * store_sqlite_api.c: the SQLite backend's functions that the gateway calls.
 */
#include "store_sqlite_int.h"

void store_sqlite_api_init(struct store *st)
{
    (void)st;
}

void store_sqlite_api_fini(struct store *st)
{
    (void)st;
}
