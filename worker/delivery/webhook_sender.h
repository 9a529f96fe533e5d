/*
 * webhook_sender.h: the worker's webhook delivery threads. Each thread, in a loop: moves new
 * events into the store's outbox (webhook_fill), and when a delivery is due, leases its endpoint
 * (webhook_claim: one endpoint is served by one thread of one worker at a time, in event order),
 * POSTs the event with libcurl following Standard Webhooks (webhook-id, webhook-timestamp,
 * webhook-signature; common/webhook_sign.h), bounded by webhook_timeout_ms in all (connect and a
 * slowly dripped answer included: a slow endpoint holds one thread for at most that long per
 * attempt, and the other threads serve the other endpoints meanwhile), and records the
 * attempt (webhook_record): delivered on a 2xx, else retried after an exponential, jittered
 * backoff until webhook_max_attempts, the endpoint marked failing after webhook_failing_after
 * failed attempts in a row. Delivery is at least once: a worker killed during a POST leaves the
 * delivery pending, and when the lease (webhook_timeout_ms + 5 s) runs out any worker sends it
 * again, with the same webhook-id. With nothing due, a thread sleeps until the next delivery is
 * due or until woken (webhook_sender_wake: the worker calls it when it commits events itself and
 * when a wake-up from a gateway arrives, notify.h), at most webhook_poll_ms (the fallback for a
 * lost wake-up).
 *
 * Stopping cuts an attempt in flight (not recorded; sent again once its lease has run out).
 *
 * Connections go only to addresses common/webhook_target.h allows (checked at each connect, not
 * only when the URL was registered); environment proxies are not used.
 */
#ifndef SBX_WEBHOOK_SENDER_H
#define SBX_WEBHOOK_SENDER_H

#include "config.h"
#include "store_records.h"

struct webhook_sender;

/* Starts cfg->webhook_threads threads (none: returns a sender that does nothing). NULL on
 * failure. */
struct webhook_sender *webhook_sender_start(struct store *st, const struct sbx_config *cfg,
                                            const char *worker_id);
/* Wakes the sleeping threads: events may have been committed. Thread-safe, never blocks for long;
 * wake-ups closer together than WEBHOOK_WAKE_SPACING_MS are served by one round. */
void webhook_sender_wake(struct webhook_sender *ws);
#define WEBHOOK_WAKE_SPACING_MS 5

/* Stops the threads (an attempt in flight is cut within about a second, not recorded) and frees
 * it. */
void webhook_sender_stop(struct webhook_sender *ws);

#endif
