/*
 * longpoll.h: GET .../messages/{id}?wait=N without holding a thread. The handler parks the
 * request (MHD_suspend_connection); one thread listens for "msg <messageId>" wake-ups from
 * workers (notify.h: a Unix socket on one host, LISTEN on PostgreSQL across hosts) and resumes the
 * requests waiting for that message, or those whose wait ran out. Wake-ups are hints that can be
 * lost, so the thread also re-reads the state of every waited-for message from the store: once a
 * second (every 5 s while a LISTEN connection is up), and at once when a lost one is back. A
 * wake-up that comes while a request is between its read of the store and its park is not lost:
 * the thread keeps the last wake-ups it took in, and a park checks them.
 *
 * A waiter's App key is checked on the "keys" wake-up and on each re-read (through the key
 * cache): once revoked, or its App deleted, the request is resumed to answer 401.
 */
#ifndef SBX_LONGPOLL_H
#define SBX_LONGPOLL_H

#include "gateway.h"

#include <stdbool.h>
#include <stddef.h>

struct longpoll *longpoll_start(struct gateway *gw, char *err, size_t errlen);
/* Resumes every parked request (they answer with the current state), waits up to timeout_ms for
 * them to leave, and stops the thread. Call before MHD_stop_daemon(). */
void longpoll_stop(struct longpoll *lp, int timeout_ms);
void longpoll_free(struct longpoll *lp);
/* How many wake-ups the thread has taken in so far. The handler stores it in r->wait_hints
 * before it reads the message from the store, so that longpoll_park() can tell whether the
 * message's "msg" wake-up came between that read and the park (it would otherwise be lost, and
 * the request would wait for the next re-read of the store). */
uint64_t longpoll_hints_seen(struct longpoll *lp);
/* Parks r until message_id ends or r->wait_deadline_ms, or resumes it at once when its wake-up
 * came after r->wait_hints was taken. Called from the handler, which then returns MHD_YES; the
 * handler runs again when the request is resumed. */
void longpoll_park(struct longpoll *lp, struct request *r, const char *message_id);
/* The router calls this when a parked request runs again. */
void longpoll_unparked(struct longpoll *lp);

#endif
