/*
 * store_stream.h: the store's operations on streaming: partial output (chunks.c) and the live event
 * feed (event_feed.c).
 *
 * Plain functions over the one store implementation (common/store/sql/); the conventions of
 * store.h apply.
 */
#ifndef SBX_STORE_STREAM_H
#define SBX_STORE_STREAM_H

#include "store_records.h"

struct store;

/* Worker: stores values[0..n) (JSON texts) as chunks first_index.. of message_id and adds
 * dropped to the message's chunks_dropped, in one transaction, only while worker_id holds
 * the message's lease (STORE_CONFLICT otherwise, and nothing is stored). */
enum store_status store_chunk_append(struct store *st, const char *message_id,
                                     const char *worker_id, int64_t first_index,
                                     const char *const *values, size_t n, int64_t dropped);
/* Worker: how many chunks message_id has and their bytes (where a new attempt continues). */
enum store_status store_chunk_totals(struct store *st, const char *message_id, int64_t *count,
                                     int64_t *bytes);
/* Gateway: the message's chunks with index >= from, oldest first, at most limit, and its
 * chunks_dropped (dropped may be NULL). App- and Session-scoped like store_message_get:
 * STORE_NOT_FOUND for an unknown message, another App's or a deleted Session's. */
enum store_status store_chunk_list(struct store *st, const char *app_id, const char *session_id,
                                   const char *message_id, int64_t from, size_t limit,
                                   struct store_chunk **out, size_t *n, int64_t *dropped);
/* Gateway: the newest event's id (0 when none), so that a waiting event stream reads the
 * list again only when something was committed. */
enum store_status store_event_last_id(struct store *st, int64_t *id);
/* Gateway: where a feed that starts now (no cursor) begins: an id such that every event
 * committed from now on is after it. The newest event's id on SQLite; on PostgreSQL, where
 * writers commit ids out of order, the settled id (it waits for the writers in progress, and
 * is STORE_BUSY when one of them is stuck). */
enum store_status store_event_feed_start(struct store *st, int64_t *id);

#endif
