/*
 * store_messages.h: the store's operations on messages (messages.c, enqueue.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_MESSAGES_H
#define SBX_STORE_MESSAGES_H

#include "store_records.h"

struct store;

/* The gateway writes and reads them; the queue (store_queue.h) moves them through their states. */
/* Commits the message durably before returning (group commit: concurrent callers share one
 * transaction). With an idempotency key already used in this Session: the original message and
 * *replayed=true when request_hash matches, STORE_CONFLICT when it does not. STORE_NOT_FOUND
 * when the Session does not exist in this App or is deleted. */
enum store_status store_message_enqueue(struct store *st, const struct store_ctx *ctx,
                                        const struct store_enqueue *req, struct store_message *out,
                                        bool *replayed);
/* The same enqueue without blocking the caller: the request joins the next group commit and
 * done() runs on the store's committer thread once that COMMIT is on disk (or failed), with
 * the status store_message_enqueue would have returned; on STORE_OK *m is the message, which the
 * callback owns (store_message_clear). ctx and req (and the strings they point to) must stay
 * valid until done() runs. Returns STORE_OK when accepted (done() will run exactly once),
 * otherwise an error and done() never runs. The callback must not call into the store's
 * enqueue functions (it runs on the committer, which would wait for itself). */
enum store_status store_message_enqueue_async(struct store *st, const struct store_ctx *ctx,
                                              const struct store_enqueue *req,
                                              store_enqueue_done_fn done, void *arg);
/* SQLite only, before the first enqueue: the claim that overlaps the enqueue's fsync
 * (commit_watermark.h). The committer then commits each batch unsynced, calls fn(arg, false) once
 * it is visible (wake the workers), syncs db_path's WAL, raises the watermark in
 * <run_dir>/commit-watermark, calls fn(arg, true) if a worker waits for it, and only then calls
 * the requests' done(). 0, or -1 with the reason in err. */
typedef void (*store_batch_fn)(void *arg, bool durable);
int store_enqueue_overlap(struct store *st, const char *db_path, const char *run_dir,
                          store_batch_fn fn, void *arg, char *err, size_t errlen);
/* Without the overlap: a watermark left by an earlier overlapping gateway is settled (the WAL
 * synced, every batch durable), so no worker waits for it. 0, or -1 with errno. */
int store_enqueue_settle_watermark(const char *db_path, const char *run_dir);
enum store_status store_message_get(struct store *st, const char *app_id, const char *session_id,
                                    const char *message_id, struct store_message *out);
enum store_status store_message_list(struct store *st, const char *app_id, const char *session_id,
                                     const char *after, size_t limit, struct store_message **out,
                                     size_t *n, char *next_cursor);

#endif
