/*
 * callback.h: the Sandboxes' callback API (docs/callbacks.md): HTTPS on callback_listen (TCP 443
 * of the host by default), served by every worker process of a host, where the agent in a Sandbox
 * reaches the platform with its bearer token (SBX_TOKEN, sandbox_context.h): its Session and the
 * Session's metadata, its history, messages to sibling Sessions, identity tokens.
 *
 * It meets the rest of sbx only in the store: a request's Sandbox is the one whose token hash the
 * store holds, served by a worker of this host, live, and asking from its own address; so any
 * worker of the host can answer any of the host's Sandboxes (the workers share the port with
 * SO_REUSEPORT). The server runs on libmicrohttpd's threads, never on the worker's event loop.
 */
#ifndef SBX_CALLBACK_H
#define SBX_CALLBACK_H

#include "config.h"
#include "store_records.h"

#include <stddef.h>

struct pki;
struct notify_peer;
struct callback_server;

/* Starts serving cfg->callback_listen with certificates that pki issues for each local address a
 * Sandbox connects to. host_id is this host's (cfg->host_id); workers is where "queue" wake-ups
 * go after an agent's message to a sibling Session (may be NULL: the workers' poll finds it).
 * cfg, st, pki and workers must outlive the server. NULL with the reason in err. */
struct callback_server *callback_server_start(const struct sbx_config *cfg, struct store *st,
                                              struct pki *pki, struct notify_peer *workers,
                                              char *err, size_t errlen);
/* Stops accepting, finishes the requests under way, writes the last counts and frees it. */
void callback_server_stop(struct callback_server *cs);

#endif
