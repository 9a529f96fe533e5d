/*
 * store.h: the one interface through which the gateway and the workers reach durable state, and
 * the umbrella header for a caller that needs all of it.
 *
 * The gateway and the workers never talk to each other directly: they meet in the store (and are
 * woken by notify.h). The store's operations are plain functions, store_<op>(st, ...), declared
 * by table in store_<table>.h (store_sessions.h, store_messages.h, store_queue.h, ...) on the
 * records of store_records.h; a header that only names records includes store_records.h alone.
 * They are written once in common/store/sql/ (one file per table, named in each header) over two
 * engines, SQLite (sql_sqlite.c) and PostgreSQL (sql_pg.c): the engine (struct sql_engine in
 * sql/sql.h) is the one dispatch, and store_open() picks it.
 *
 * Conventions:
 * - Every function returns an enum store_status. Output parameters are written only on STORE_OK.
 * - Every mutation writes its audit event(s) in the same transaction. The actor and request id of
 *   those events come from the struct store_ctx argument.
 * - Records with heap strings are released with their *_clear() function; fixed-size ids live
 *   inline. A list is an array the caller releases with the matching *_list_free().
 * - Times are int64 milliseconds since the epoch (UTC).
 * - Every App-scoped lookup takes the caller's app id: an object of another App is STORE_NOT_FOUND,
 *   exactly like one that does not exist. An empty app id ("") means "any App" (admin, workers).
 * - The store is safe to call from several threads at once.
 */
#ifndef SBX_STORE_H
#define SBX_STORE_H

#include "store_records.h"
#include "store_settings.h"
#include "store_apps.h"
#include "store_keys.h"
#include "store_workspaces.h"
#include "store_sessions.h"
#include "store_messages.h"
#include "store_queue.h"
#include "store_sandboxes.h"
#include "store_workers.h"
#include "store_hosts.h"
#include "store_images.h"
#include "store_events.h"
#include "store_stream.h"
#include "store_webhooks.h"
#include "store_bounds.h"
#include "store_worker_drivers.h"
#include "store_egress.h"

#include <stddef.h>

/* ==== opening a store ==== */

/* Opens the backend that `store` names: "sqlite" (the file sqlite_path, on one host) or a
 * postgres:// (postgresql://) libpq connection URL (several hosts). busy_timeout_ms applies to
 * both (how long a writer waits for the write lock before STORE_BUSY); synchronous to SQLite. On
 * failure writes a human-readable reason to err and returns NULL. */
struct store *store_open(const char *store, const char *sqlite_path, int busy_timeout_ms,
                         const char *synchronous, char *err, size_t errlen);

/* Opens the PostgreSQL backend on a libpq connection URL (applying migrations under an advisory
 * lock). busy_timeout_ms becomes the sessions' lock_timeout (unless the URL's options or the
 * role's or database's settings give one). A database newer than this binary is refused. */
struct store *store_pg_open(const char *url, int busy_timeout_ms, char *err, size_t errlen);

/* Opens the SQLite backend on path (creating it and applying migrations). On failure writes a
 * human-readable reason to err and returns NULL. A database newer than this binary is refused. */
struct store *store_sqlite_open(const char *path, int busy_timeout_ms, const char *synchronous,
                                char *err, size_t errlen);

/* The schema version this binary's migrations reach. */
int store_schema_version(void);

/* Closes a store that store_open() (or store_pg_open, store_sqlite_open) returned: stops its group
 * commit, closes its connections and frees it. NULL is allowed. */
void store_close(struct store *st);

#endif
