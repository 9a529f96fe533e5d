/*
 * sse.h: Server-Sent Events without a thread per stream. A stream is an MHD response whose
 * content reader asks the stream's producer for more text; when there is none, the reader
 * suspends the connection (MHD_suspend_connection) and returns 0. One hub thread resumes it when
 * the store may hold more: on the wake-ups workers and gateways send (notify.h: "chunk <id>",
 * "msg <id>" for message streams; any wake-up for the event feed, once the newest event id has
 * moved), when its keep-alive comment is due (stream_keepalive seconds without output), and, as
 * long polls do, on a slow re-read in case a wake-up was lost (each second on Unix datagrams,
 * every 5 s while a PostgreSQL LISTEN connection is up).
 *
 * MHD does not watch a suspended connection's socket, so the hub does (epoll, for a hang-up): a
 * client that leaves ends its stream at once rather than at its next keep-alive.
 *
 * A stream opened with an App key ends with `event: revoked` (a 401 Problem) once that key is
 * revoked or its App deleted: on the "keys" wake-up, and on the slow re-read (through the key
 * cache), the hub checks every stream's key.
 *
 * Hidden state: the hub's list of open streams (under its lock), which also counts each caller's
 * streams for stream_limit.
 */
#ifndef SBX_SSE_H
#define SBX_SSE_H

#include "gateway.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sse_hub;

/* What a stream waits for: one message's progress, or any new audit event. */
enum sse_topic { SSE_TOPIC_MESSAGE, SSE_TOPIC_EVENTS };

struct sse_stream;

/* Appends more of the stream to s (sse_append). Sets *ended once the stream is complete (after
 * what it appended). Returns 0, or -1 to close the connection (a store failure). Runs on an MHD
 * thread, never two at once for one stream. */
typedef int (*sse_produce_fn)(struct sse_stream *s, void *ctx, bool *ended);

struct sse_hub *sse_start(struct gateway *gw, char *err, size_t errlen);
/* Ends every stream (they close after what they have) and waits up to timeout_ms until none is
 * suspended. Call before MHD_stop_daemon(). */
void sse_stop(struct sse_hub *h, int timeout_ms);
void sse_free(struct sse_hub *h);

/* Replies to r with a new stream, or with 429 when the caller (r->actor) has stream_limit open
 * ones already. key is the message id for SSE_TOPIC_MESSAGE. ctx (heap) belongs to the stream
 * from now on, also on failure, and is released with free_ctx. */
enum MHD_Result sse_reply(struct request *r, enum sse_topic topic, const char *key,
                          sse_produce_fn produce, void *ctx, void (*free_ctx)(void *));

/* For producers: appends text to the stream's output. Returns 0 or -1 (out of memory). */
int sse_append(struct sse_stream *s, const char *text, size_t len);
/* Appends one event: optional id (id < 0: none) and event name (NULL: none), data on one line. */
int sse_append_event(struct sse_stream *s, int64_t id, const char *event, const char *data);

/* Something was committed that event feeds may show (called after a gateway's own writes; sent
 * to every gateway, this one included). */
void sse_committed(struct sse_hub *h);

/* Reads Last-Event-ID: true with *id (-1 when absent); false when it is not a decimal number
 * (the caller answers 400). */
bool sse_last_event_id(struct request *r, int64_t *id);
/* Whether the caller asked for text/event-stream in Accept. */
bool sse_wanted(struct request *r);

#endif
