/*
 * notify_pg.h: the PostgreSQL LISTEN/NOTIFY transport behind notify.h (private to notify.c). A
 * process shares one LISTEN connection per channel among its listeners and one sending connection
 * among its senders (notify_pg.c).
 */
#ifndef SBX_NOTIFY_PG_H
#define SBX_NOTIFY_PG_H

#include <stdbool.h>
#include <stddef.h>

struct pg_listener;
struct pg_sender;

/* channel is already validated (an identifier that needs no quoting). */
struct pg_listener *pg_listener_new(const char *url, const char *channel, char *err, size_t errlen);
int pg_listener_fd(const struct pg_listener *l);
bool pg_listener_ready(const struct pg_listener *l);
int pg_listener_recv(struct pg_listener *l, char *buf, size_t buflen);
void pg_listener_free(struct pg_listener *l);

struct pg_sender *pg_sender_new(const char *url, const char *channel);
void pg_sender_send(struct pg_sender *s, const char *msg);
void pg_sender_free(struct pg_sender *s);

#endif
