/*
 * store_sessions.h: the store's operations on sessions (sessions.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_SESSIONS_H
#define SBX_STORE_SESSIONS_H

#include "store_records.h"

struct store;

/* The gateway creates, reads, patches and deletes them; the workers touch them. */
/* With a name that already exists in the App: writes the existing Session and *created=false.
 */
enum store_status store_session_create(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id, const char *name,
                                       int64_t keep_alive_seconds /* 0: App's */,
                                       const char *workspace_id /* NULL: none */,
                                       const char *metadata_json /* NULL: {} */,
                                       struct store_session *out, bool *created);
/* store_session_create within the App's quotas (q's defaults for those it has none of): a new
 * Session is STORE_OVER_QUOTA when the App has its Sessions quota of live Sessions already, or
 * when keep_alive_seconds is above its keep-alive quota (q->hit says which); nothing is written.
 * Finding a Session by its name is never refused. */
enum store_status store_session_create_within(struct store *st, const struct store_ctx *ctx,
                                              const char *app_id, const char *name,
                                              int64_t keep_alive_seconds, const char *workspace_id,
                                              const char *metadata_json, struct store_quotas *q,
                                              struct store_session *out, bool *created);
enum store_status store_session_get(struct store *st, const char *app_id, const char *session_id,
                                    struct store_session *out);
enum store_status store_session_list(struct store *st, const char *app_id, const char *after,
                                     size_t limit, struct store_session **out, size_t *n,
                                     char *next_cursor);
enum store_status store_session_update(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id, const char *session_id,
                                       const struct store_session_patch *patch,
                                       struct store_session *out);
/* store_session_update refusing (STORE_OVER_QUOTA) a keepAliveSeconds above the App's keep-alive
 * quota. */
enum store_status store_session_update_within(struct store *st, const struct store_ctx *ctx,
                                              const char *app_id, const char *session_id,
                                              const struct store_session_patch *patch,
                                              struct store_quotas *q, struct store_session *out);
/* Marks the Session deleted, fails its unfinished messages and asks the owning worker (through
 * stop_requested_at) to terminate its Sandbox. */
enum store_status store_session_delete(struct store *st, const struct store_ctx *ctx,
                                       const char *app_id, const char *session_id);
/* Keep-alive deadline of the Session's current Sandbox; last_activity_at = now. */
enum store_status store_session_touch(struct store *st, const char *session_id, int64_t expires_at);

#endif
