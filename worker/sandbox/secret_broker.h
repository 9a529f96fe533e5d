/*
 * secret_broker.h: the worker's side of the brokering egress proxy (host/secret_proxy.h,
 * docs/secrets.md). Each worker process runs its own proxy on a port of its own (its
 * Sandboxes' secrets live in its memory only); a Sandbox whose App has secrets is attached when
 * its set is opened (sandbox/secrets.h: at activation, or at the start of a pre-started agent):
 * its address, ids and a copy of its set go into the proxy's registry, and the firewall sends its
 * TCP 80/443 to this worker's port (fw_sandbox_set_secret_proxy). It is detached when it stops.
 *
 * What the proxy reports becomes events, written in batches on the worker's poll and bounded per
 * Sandbox as the firewall's denials are (EGRESS_EVENTS_PER_WINDOW per EGRESS_EVENT_WINDOW_MS each
 * of the two kinds; the rest counted into the next event's `suppressed`, or a summary event):
 *   sandbox.secret_request  a brokered request: secrets, host, destination, port, method, path
 *                           (no query), status, bytesUp, bytesDown, durationMs (and error when
 *                           the proxy answered itself: 502 for an upstream that failed TLS
 *                           verification or could not be reached)
 *   sandbox.secret_misuse   a placeholder toward a host its secret does not name: refused (403)
 * Never a header value nor a body.
 *
 * Hidden state for the life of the worker process (one worker per process).
 */
#ifndef SBX_SECRET_BROKER_H
#define SBX_SECRET_BROKER_H

#include "secret_set.h"
#include "worker.h"

struct sandbox;

/* On the worker's poll: starts the proxy once the worker's firewall exists (again later if it
 * could not), and records what it reported since the last tick. */
void secret_broker_tick(struct worker *w);
/* Brokers the Sandbox's HTTP(S) egress with set (copied; the caller keeps its own). 0, or -1
 * with the reason (the proxy is not running, the firewall refused): the caller fails the
 * activation. A Sandbox without a network (no firewall) has no egress to broker: 0. */
int secret_broker_attach(struct worker *w, struct sandbox *sb, const struct secret_set *set,
                         char *err, size_t errlen);
/* Ends brokering for the Sandbox (nothing when it was not attached). */
void secret_broker_detach(struct worker *w, struct sandbox *sb);
/* The proxy's port, 0 while it does not run (for tests). */
uint16_t secret_broker_port(void);
/* At worker exit: stops the proxy, writes what is left. */
void secret_broker_stop(struct worker *w);

#endif
