/*
 * notify.h: wake-ups between the gateways and the workers, which otherwise meet only in the store.
 *
 * The messages:
 *   - a gateway tells role "worker" "queue" after it enqueues a message, "stop" after a DELETE,
 *     "images" after an Image upload or pull request, "durable" when a commit a worker waits for
 *     is on disk (commit_watermark.h), and "events" after any other successful write (for the
 *     webhook threads);
 *   - a worker tells role "gateway" "msg <messageId>" when a message ends and "sandbox <id>" when
 *     a Sandbox changes, to answer long polls;
 *   - a gateway tells role "gateway" (every gateway, itself too) "events" after its writes (at
 *     most one per 5 ms, sse.c) and "keys" after a key revoke or an App delete (key_cache.h).
 * A message is a hint, never the truth: the receiver re-reads the store, and both sides keep a
 * slow poll as a fallback, so a lost message only delays.
 *
 * Two transports, chosen by the `store` setting, behind the same handles:
 *   - "sqlite" (or empty): Unix datagrams, one host. Each listener binds
 *     <run_dir>/<role>-<pid>-<n>.sock; a sender sends to every socket of the role and removes
 *     sockets whose owner died.
 *   - a postgres:// URL: LISTEN/NOTIFY, any number of hosts. Channel "sbx_<role>", payload = the
 *     message. A process's listeners of one role share one LISTEN connection, which is
 *     re-established when it is lost; meanwhile callers rely on their slow poll, and once it
 *     listens again notify_recv() returns NOTIFY_RESYNC (hints may have been lost: re-read the
 *     store). So does a listener whose caller left more than 256 hints unread. A process's
 *     peers share one sending connection, whatever their role.
 */
#ifndef SBX_NOTIFY_H
#define SBX_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>

/* What notify_recv() returns after a lost LISTEN connection is back: re-read the store. */
#define NOTIFY_RESYNC "resync"

struct notify_listener; /* one receiving end; used by one thread */
struct notify_peer;     /* a sender to one role; thread-safe */

/* Starts listening for the messages of role (lowercase letters, digits, '_'). store is the
 * `store` setting; run_dir (<data_dir>/run) is used by the Unix transport only. Returns NULL with
 * the reason in err when it cannot (no socket, a malformed URL); an unreachable PostgreSQL is not
 * an error: the listener keeps trying in the background. */
struct notify_listener *notify_listen(const char *store, const char *run_dir, const char *role,
                                      char *err, size_t errlen);
/* The fd to wait on for readability (poll, libevent); it stays the same for the listener's life,
 * across reconnections. When it is readable, call notify_recv() until it returns 0. */
int notify_listener_fd(const struct notify_listener *l);
/* True while a message to this listener can be lost only when its sender cannot reach the server:
 * PostgreSQL with the LISTEN connection up (the server queues notifications for it). False for
 * Unix datagrams (a full receive queue drops them: 10 by default) and while reconnecting. A caller
 * may re-read the store less often while it is true. */
bool notify_listener_reliable(const struct notify_listener *l);
/* Copies the next pending message into buf (NUL-terminated, truncated to buflen - 1) and returns
 * its length; 0 when none is pending. Never blocks; also drives the reconnection. */
int notify_recv(struct notify_listener *l, char *buf, size_t buflen);
void notify_listener_close(struct notify_listener *l);

/* A sender to every listener of role; see notify_listen() for store and run_dir. Returns NULL
 * when out of memory or sockets, or for a malformed URL. Connects lazily, on the first send. */
struct notify_peer *notify_peer_new(const char *store, const char *run_dir, const char *role);
void notify_peer_free(struct notify_peer *p);
/* Sends msg (under 128 bytes) to every listener of the role, after whatever the caller committed
 * before. Never waits for the network: a Unix datagram is sent at once (dropped when a receiver's
 * queue is full); on PostgreSQL, msg is queued for the peer's thread, which sends what queued in
 * one round trip, starts such a NOTIFY transaction at most every 2 ms (a first one after a quiet
 * spell at once, so a message waits at most that long), drops msg when the server cannot be
 * reached within a second (hints only), and connects again for a later send.
 * notify_peer_free() sends what is still queued first. */
void notify_send(struct notify_peer *p, const char *msg);

#endif
