/*
 * notify.h: wake-ups between the gateway and the workers, which otherwise meet only in the store.
 *
 * Each process that wants to be woken binds a Unix datagram socket <run_dir>/<role>-<pid>.sock.
 * After a commit, the other side sends a short datagram to every socket of that role:
 *   - the gateway tells "worker" sockets "queue" after it enqueues a message;
 *   - a worker tells "gateway" sockets "msg <messageId>" when a message ends, to answer long polls.
 * A datagram is a hint, never the truth: the receiver re-reads the store, and both sides keep a
 * slow poll as a fallback, so a lost datagram only delays. Sockets whose owner died are removed.
 */
#ifndef SBX_NOTIFY_H
#define SBX_NOTIFY_H

#include <stddef.h>

struct notify_peer; /* the sender's cached list of receivers */

/* Binds this process's socket; returns a non-blocking fd or -1. path_out receives its path. */
int notify_listen(const char *run_dir, const char *role, char *path_out, size_t pathlen);
/* Reads one datagram into buf (NUL-terminated); returns its length, 0 when none is pending. */
int notify_recv(int fd, char *buf, size_t buflen);
void notify_close(int fd, const char *path);

/* A sender for one role; thread-safe. */
struct notify_peer *notify_peer_new(const char *run_dir, const char *role);
void notify_peer_free(struct notify_peer *p);
/* Sends msg to every receiver of the role. Never blocks; failures are dropped (hints only). */
void notify_send(struct notify_peer *p, const char *msg);

#endif
