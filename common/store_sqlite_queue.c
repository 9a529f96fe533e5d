/*
 * store_sqlite_queue.c: the SQLite backend's functions that the workers call.
 */
#include "store_sqlite_int.h"

void store_sqlite_queue_init(struct store *st)
{
    (void)st;
}
