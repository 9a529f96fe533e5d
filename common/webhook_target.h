/*
 * webhook_target.h: where sbx may send webhooks. A webhook URL must be http or https with a host
 * and no user info; unless the operator allows it (webhook_allow_private), every address its host
 * resolves to must be a public one: not loopback, private (RFC 1918, unique local), link-local
 * (which holds cloud metadata, 169.254.169.254), shared, unspecified, multicast or reserved. The
 * gateway checks a URL when it is registered; the worker checks each address again when it
 * connects, so a name that later resolves elsewhere cannot reach inside either.
 */
#ifndef SBX_WEBHOOK_TARGET_H
#define SBX_WEBHOOK_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* Returns 0 when url may be used, else -1 with the reason (for a 422) in why. */
int webhook_url_check(const char *url, bool allow_private, char *why, size_t whylen);

/* Whether a connection to sa may be made. */
bool webhook_address_allowed(const struct sockaddr *sa, bool allow_private);

#endif
