/*
 * store_queue.h: the store's operations on the queue (queue.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_QUEUE_H
#define SBX_STORE_QUEUE_H

#include "store_records.h"

struct store;

/* What the workers consume: claims with leases, and how each attempt ends. */
/* Claims the next deliverable message: queued, not_before <= now, the lowest unfinished seq of
 * its Session, and its Session either idle or owned by this worker. Marks it delivering with a
 * lease until now + lease_ms, counts the attempt, and on an idle Session marks the Session
 * activating and owned by this worker. STORE_EMPTY when nothing is deliverable.
 * With placement, a message of an idle Session is claimed only when this worker's host is
 * where it belongs (a live host with a warm Sandbox of the App's shape, least loaded first;
 * else the least loaded live host; never a full one), or once the message has waited longer
 * than grace_ms for that host; messages of Sessions this worker owns are always claimable; and
 * STORE_EMPTY too when this worker was stopped. placement NULL: no placement (one host) and no
 * default live-Sandbox quota. Which deliverable message comes first: fair claiming, below. */
enum store_status store_queue_claim_placed(struct store *st, const struct store_ctx *ctx,
                                           const char *worker_id, int64_t lease_ms,
                                           const struct store_placement *placement,
                                           struct store_delivery *out);
/* store_queue_claim_placed, and when the message's Session was idle (out->warm_claim_tried), one
 * of this worker's warm Sandboxes of its App's shape claimed for the Session in the same
 * transaction, as store_sandbox_claim_warm does: out->sandbox, id "" when none was warm (the worker
 * then boots one cold). One commit instead of two on the way to a warm activation. */
enum store_status store_queue_claim_with_sandbox(struct store *st, const struct store_ctx *ctx,
                                                 const char *worker_id, int64_t lease_ms,
                                                 const struct store_placement *placement,
                                                 struct store_delivery *out);
/* Fair claiming (docs/worker.md, "Sharing Sandboxes between Apps"): every claim above serves
 * the Apps with deliverable messages in the order of their live Sandboxes (their Sessions
 * activating or active, on every worker), fewest first, ties by App id, each App's messages in
 * their queue's order; so one App's backlog never keeps another App's messages waiting for a
 * free Sandbox. An App at its live-Sandbox quota (apps.quota_live_sandboxes, NULL:
 * placement->default_live_quota; 0: no bound) gets no new Sandbox: only messages of its
 * Sessions that hold one are claimed, the others stay queued, their attempts not counted. */

/* Which App the next claim of a message for an idle Session would serve (the first in the
 * order above that has one this worker may claim, below its quota), read without the write
 * lock: what a worker at its Sandbox limit asks before it ends an idle Sandbox for another App.
 * STORE_EMPTY when none, or (with placement) when some live host still serves fewer Sessions
 * than its capacity: a worker there has a free slot for the message. */
enum store_status store_queue_waiting_app(struct store *st, const char *worker_id,
                                          const struct store_placement *placement,
                                          struct store_waiting_app *out);
/* Like store_queue_claim_placed without placement, but only messages of Sessions this worker
 * already owns (it is at its Sandbox limit and can serve only Sessions whose Sandbox it
 * holds). */
enum store_status store_queue_claim_owned(struct store *st, const struct store_ctx *ctx,
                                          const char *worker_id, int64_t lease_ms,
                                          struct store_delivery *out);
enum store_status store_queue_extend_lease(struct store *st, const char *message_id,
                                           const char *worker_id, int64_t lease_ms);
/* Records the reply; the message becomes completed (only if still leased by worker_id,
 * otherwise STORE_CONFLICT: another delivery owns it now). */
enum store_status store_queue_complete(struct store *st, const struct store_ctx *ctx,
                                       const char *message_id, const char *worker_id,
                                       const char *sandbox_id, const char *reply_json);
/* store_sandbox_mark_running and store_queue_complete in one transaction (events in that order):
 * the reply of the first message a claimed Sandbox answered. STORE_CONFLICT when either refuses
 * (the Session was deleted, the lease moved on); then nothing is written. */
enum store_status store_queue_complete_first(struct store *st, const struct store_ctx *ctx,
                                             const char *message_id, const char *worker_id,
                                             const char *sandbox_id, const char *session_id,
                                             const char *reply_json);
/* A failed attempt: back to queued with not_before = now + backoff_ms, or failed with the
 * reason when attempts reached max_attempts (*final=true). */
enum store_status store_queue_fail(struct store *st, const struct store_ctx *ctx,
                                   const char *message_id, const char *worker_id,
                                   const char *sandbox_id, const char *reason, int64_t backoff_ms,
                                   bool *final);
/* Gives back a lease without counting the attempt (the message was not handed to an agent,
 * e.g. at shutdown): delivering -> queued at once. STORE_CONFLICT if no longer ours. */
enum store_status store_queue_release(struct store *st, const struct store_ctx *ctx,
                                      const char *message_id, const char *worker_id);
/* Leases that expired (their worker died or hung) go back to queued. *n: how many. */
enum store_status store_queue_requeue_expired(struct store *st, const struct store_ctx *ctx,
                                              size_t *n);
/* Earliest time a queued message becomes deliverable (0: none queued), for the retry timer. */
enum store_status store_queue_next_due(struct store *st, int64_t *at);

#endif
