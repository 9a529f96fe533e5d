/*
 * store_sandboxes.h: the store's operations on sandboxes (sandboxes.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_SANDBOXES_H
#define SBX_STORE_SANDBOXES_H

#include "store_records.h"

struct store;

/* The gateway reads them and asks for stops; the workers record their lifecycle, one transition
 * per function: booting -> warm -> claimed -> running, booting -> claimed (cold), then stopping
 * and terminated or failed. */
enum store_status store_sandbox_get(struct store *st, const char *app_id, const char *sandbox_id,
                                    struct store_sandbox *out);
/* app_id "" lists all (admin); an App sees only the Sandboxes that served it. */
enum store_status store_sandbox_list(struct store *st, const char *app_id, const char *after,
                                     size_t limit, struct store_sandbox **out, size_t *n,
                                     char *next_cursor);
/* Asks the owning worker to terminate the Sandbox now (sets stop_requested_at). */
enum store_status store_sandbox_request_stop(struct store *st, const struct store_ctx *ctx,
                                             const char *app_id, const char *sandbox_id,
                                             struct store_sandbox *out);
enum store_status store_pool_stats(struct store *st, struct store_pool_stat **out, size_t *n);
/* The pools of pre-started Sandboxes, per App (GET /v1/pool). */
enum store_status store_pool_app_stats(struct store *st, struct store_pool_app_stat **out,
                                       size_t *n);
enum store_status store_sandbox_insert(struct store *st, const struct store_ctx *ctx,
                                       const char *worker_id, const struct store_shape *shape,
                                       bool cold, struct store_sandbox *out /* out: id */);
/* A new booting Sandbox pre-started for app_id at its definition revision rev (docs/worker.md):
 * its app_id is set now, its Session at its claim. */
enum store_status store_sandbox_insert_prestarted(struct store *st, const struct store_ctx *ctx,
                                                  const char *worker_id,
                                                  const struct store_shape *shape,
                                                  const char *app_id, int64_t rev,
                                                  struct store_sandbox *out /* out: id */);
/* Records what the driver made (pid, jail, cgroup, address, image hash) while booting. */
enum store_status store_sandbox_set_runtime(struct store *st, const struct store_sandbox *sb);
/* booting -> warm, recording boot_ms. */
enum store_status store_sandbox_mark_warm(struct store *st, const struct store_ctx *ctx,
                                          const char *sandbox_id, int64_t boot_ms);
/* warm -> claimed for this Session, in one transaction with the Session's activating ->
 * sandbox assignment: one of this worker's warm Sandboxes of the shape. With prestart_rev (the
 * App's definition_rev when it pre-starts, else 0), one pre-started for the App at that revision
 * first; an ordinary pool Sandbox otherwise (never another App's pre-started one). STORE_EMPTY if
 * none. */
enum store_status store_sandbox_claim_warm(struct store *st, const struct store_ctx *ctx,
                                           const char *worker_id, const struct store_shape *shape,
                                           const char *app_id, int64_t prestart_rev,
                                           const char *session_id, struct store_sandbox *out);
/* A cold Sandbox (booted for this Session): booting -> claimed for the Session. */
enum store_status store_sandbox_assign(struct store *st, const struct store_ctx *ctx,
                                       const char *sandbox_id, const char *app_id,
                                       const char *session_id);
/* claimed -> running; the Session becomes active, activation_count + 1. */
enum store_status store_sandbox_mark_running(struct store *st, const struct store_ctx *ctx,
                                             const char *sandbox_id, const char *session_id);
enum store_status store_sandbox_mark_stopping(struct store *st, const struct store_ctx *ctx,
                                              const char *sandbox_id, const char *reason);
/* -> terminated (or failed when failed=true) with reason and usage; if it served a Session
 * that still points at it, that Session goes back to idle (not if deleted) and accumulates
 * the usage, and its worker ownership is released. */
enum store_status store_sandbox_finish(struct store *st, const struct store_ctx *ctx,
                                       const char *sandbox_id, bool failed, const char *reason,
                                       const struct store_usage *usage);
/* The OOM killer has ended total processes inside the Sandbox, its agent not among them: a
 * rise over what is recorded is written, with a sandbox.oom_killed event ({"killed": the rise,
 * "total"}); the same or a lower total writes nothing. */
enum store_status store_sandbox_oom_killed(struct store *st, const struct store_ctx *ctx,
                                           const char *sandbox_id, int64_t total);
/* Non-terminal Sandboxes owned by worker_id ("" for all). */
enum store_status store_sandbox_list_live(struct store *st, const char *worker_id,
                                          struct store_sandbox **out, size_t *n);
/* Live Sandboxes of this worker with stop_requested_at set, or serving a deleted Session. */
enum store_status store_sandbox_list_stop_requested(struct store *st, const char *worker_id,
                                                    struct store_sandbox **out, size_t *n);
/* Sandboxes of host_id's workers that its loss at lost_at terminated in the store, with
 * `host lost` or the reason of a stop under way when the host died (their processes, jails,
 * cgroups and network state may still be on the machine). */
enum store_status store_sandbox_list_host_lost(struct store *st, const char *host_id,
                                               int64_t lost_at, struct store_sandbox **out,
                                               size_t *n);
/* The callback API: the Sandbox whose token has this SHA-256 (hex), whatever its state, and
 * the host its worker belongs to ("" when unknown). STORE_NOT_FOUND for no such token. */
enum store_status store_sandbox_by_callback_token(struct store *st, const char *token_hash,
                                                  struct store_sandbox *out, char *host_id,
                                                  size_t host_len);
/* Adds a callback server's counts: each Sandbox's calls and last call, and the requests
 * host_id refused for their token; one transaction. */
enum store_status store_sandbox_callbacks_add(struct store *st,
                                              const struct store_callback_count *counts, size_t n,
                                              const char *host_id, int64_t refused);

#endif
