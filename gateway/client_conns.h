/*
 * client_conns.h: connections per client address. libmicrohttpd's accept policy refuses a new
 * connection from an address that already holds conn_per_client of them (it is closed at once);
 * the connection notifications keep the count. Trusted proxies (trusted_proxies) are not limited:
 * every client behind them shares their address. Hidden state: the counts, under one mutex.
 */
#ifndef SBX_CLIENT_CONNS_H
#define SBX_CLIENT_CONNS_H

#include <microhttpd.h>
#include <stdint.h>
#include <sys/socket.h>

struct trusted_proxies;
struct client_conns;

struct client_conns *client_conns_new(int64_t per_client, const struct trusted_proxies *exempt);
void client_conns_free(struct client_conns *cc);
/* The callbacks to give MHD_start_daemon (apc, with cc as apc_cls) and MHD_OPTION_NOTIFY_CONNECTION
 * (with cc). */
enum MHD_Result client_conns_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);
void client_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                         enum MHD_ConnectionNotificationCode code);

#endif
