/*
 * sql_pg.h: the PostgreSQL engine's own entry points, for store_open.c (which assembles
 * store_pg_open() from them and the engine-independent store logic) and for the engine's tests,
 * which drive the engine on a schema of their own. Not for the gateway or the workers.
 */
#ifndef SBX_SQL_PG_H
#define SBX_SQL_PG_H

#include "migrations.h"
#include "sql.h"

/* The transaction-level advisory lock every sbx writer (and every migration) takes right after
 * BEGIN: "sbx\0WRIT" as a big-endian int64. One key for the whole database makes PostgreSQL
 * writers as serial as SQLite's, which the store's logic was written for. */
#define SQL_PG_WRITE_LOCK_KEY INT64_C(0x7362780057524954)

/* A store whose cls is the PostgreSQL engine's struct sql_store, connected once to check the URL,
 * whose close (store_close, or sql_pg_store_close) is sql_pg_store_close, without the group
 * commit's state (store_sql_init). Lock waits longer
 * than lock_timeout_ms fail with STORE_BUSY (unless the URL's options, or the role's or
 * database's settings, give a lock_timeout). On
 * failure writes a reason naming the URL (without its password) to err and returns NULL. */
struct store *sql_pg_store_open(const char *url, int lock_timeout_ms, char *err, size_t errlen);

/* Closes every thread's connection and frees the store. */
void sql_pg_store_close(struct store *st);

/* Applies the migrations of list (in version order) that the database lacks, each in its own
 * transaction under SQL_PG_WRITE_LOCK_KEY (so that processes starting together migrate once),
 * recording each in the table schema_version (version INTEGER PRIMARY KEY, name TEXT, applied_at
 * BIGINT ms), which this function creates: migrations must not. The database's version is the
 * highest recorded. Refuses a database whose version is newer than the last of list. 0, or -1
 * with a reason in err. */
int sql_pg_migrate(struct store *st, const struct sbx_migration *list, size_t n, char *err,
                   size_t errlen);

/* The store's URL with any password removed, for messages. */
const char *sql_pg_store_url(struct store *st);

#endif
