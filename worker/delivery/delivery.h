/*
 * delivery.h: the delivery of messages, from the queue to a Sandbox and back to the store. A
 * delivery is one claimed message (struct store_delivery, with its App and Session) and this
 * folder is its sole owner: it is made by a claim (claim.c), carried by a Sandbox while it is
 * activated and answered (sb->delivery), and ended in one place (delivery_end, deliver.c), which
 * frees it and gives its place back (w->n_deliveries). The walk of one message:
 *
 *   claim.c     consumer_run: claim as capacity allows; route each message to the Session's idle
 *               Sandbox (sandbox_send_message) or activate one (activate.c)
 *   activate.c  a warm Sandbox claimed in the store, else a cold boot; the Workspace attached;
 *               the App's command started; "started": the message is sent
 *   deliver.c   the reply recorded, or the attempt failed with backoff
 *               (backoff.c), or handed back (released) while the worker stops; leases renewed
 *
 * Sandboxes (sandbox/) report back through the hooks of sandbox.h, which these files implement.
 */
#ifndef SBX_DELIVERY_H
#define SBX_DELIVERY_H

#include "sandbox/sandbox.h"

/* ---- gateway_hints.c ---- */
/* Tells the gateways about a message ("msg <id>": its long polls and streams; "chunk <id>": its
 * streams), a hint over notify.h. Such a hint names what it is about, so a sender waits briefly
 * for a receiver's full queue and makes up for one refused with a resync (notify.c). The change
 * committed events, so this worker's webhook threads are woken too. */
void worker_notify_gateway(struct worker *w, const char *kind, const char *id);
/* Tells the gateways' event feeds that events were committed (a claim, a Sandbox's change; the
 * loop passes it to sandbox/ as sandbox_hooks.events): the plain hint "events", as the gateways
 * send each other. It names nothing, since a feed reads whatever is new, so a full queue is not
 * waited for: in a burst, a claim's and a boot's hints used to stall the worker's loop up to 2 ms
 * each and then resync every long poll. */
void worker_notify_feeds(struct worker *w);

/* ---- claim.c ---- */
/* Claims now, as much as capacity allows (consumer_kick, worker.h, asks for it soon). */
void consumer_run(struct worker *w);

/* ---- activate.c ---- */
/* Gives the claimed delivery d a Sandbox: a warm one, else a cold boot (or ends d failed). */
void delivery_activate(struct worker *w, struct store_delivery *d);
/* sandbox_hooks: a cold boot for sb->delivery is done; the App has started. */
void activation_continue(struct sandbox *sb);
void activation_started(struct sandbox *sb);

/* ---- deliver.c ---- */
/* sandbox_hooks: the agent answered sb->delivery; sb ends while carrying it. */
void delivery_replied(struct sandbox *sb, json_t *line);
void delivery_lost(struct sandbox *sb, const char *reason);
/* Records a failed attempt (with backoff before the retry, or failed for good) and ends d. */
void delivery_fail(struct worker *w, struct store_delivery *d, const char *sandbox_id,
                   const char *reason);
/* The delivery is over: frees d and gives its place back; with kick, claims again soon. */
void delivery_end(struct worker *w, struct store_delivery *d, bool kick);
/* Renews the leases of the messages this worker is delivering (on the heartbeat). */
void delivery_renew_leases(struct worker *w);
/* worker_fini: ends every delivery still carried, recording nothing (its lease expires). */
void delivery_drop_all(struct worker *w);

/* ---- backoff.c: the delay before retry number `attempt` (1 = first retry): base *
 * 2^(attempt-1), capped at max, with "equal jitter" (a uniform draw from the upper half) so that
 * many messages failing together do not retry together. ---- */
int64_t backoff_delay_ms(int64_t attempt, int64_t base_ms, int64_t max_ms);

#endif
