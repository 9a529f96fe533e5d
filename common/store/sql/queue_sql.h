/*
 * queue_sql.h: the statements the worker's queue runs on every poll and every claim
 * (queue.c), exported so that unit.store.plans can check their SQLite query plans: each must
 * reach the messages it concerns through an index, never by walking the messages table, whose
 * size is the installation's whole history.
 *
 * Private to the store (queue.c defines them; only that test reads them).
 */
#ifndef SBX_STORE_QUEUE_SQL_H
#define SBX_STORE_QUEUE_SQL_H

/* The next deliverable messages (the claim's pick; PostgreSQL adds FOR UPDATE ... SKIP LOCKED):
 * of one App (fair claiming serves the Apps one after the other), and of the Sessions this worker
 * owns. */
extern const char queue_claim_pick_app_sql[];
extern const char queue_claim_pick_owned_sql[];
/* The walk over the Apps with queued messages, and each App's live Sandboxes. */
extern const char queue_claim_next_app_sql[];
extern const char queue_claim_live_sql[];
/* The messages whose lease has expired. */
extern const char queue_requeue_expired_sql[];
/* When the earliest queued head of a Session's queue is due. */
extern const char queue_next_due_sql[];

#endif
