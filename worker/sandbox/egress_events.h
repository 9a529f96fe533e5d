/*
 * egress_events.h: the firewall's denials as audit events and metrics. The worker that
 * holds the host's NFLOG reader (host/egress_log.h; one per host, the others retry) attributes
 * each denial to its Sandbox (the firewall element's owner), records it as an event
 * `sandbox.egress_denied` in batches, at most EGRESS_EVENTS_PER_WINDOW per Sandbox per
 * EGRESS_EVENT_WINDOW_MS (the number suppressed is recorded with the next event, or in a summary
 * event when the window ends), and counts every denial per App and rule for /metrics (settings key
 * "egress_metrics", Prometheus text the gateway appends).
 *
 * Hidden state: the reader, its libevent event, the per-Sandbox windows and the counters, for the
 * life of the worker process (one worker per process).
 */
#ifndef SBX_EGRESS_EVENTS_H
#define SBX_EGRESS_EVENTS_H

#include "worker.h"

#include <netinet/in.h>

#define EGRESS_EVENTS_PER_WINDOW 10
#define EGRESS_EVENT_WINDOW_MS 10000

/* On the worker's poll: opens the reader once the worker's network exists (and again later when
 * another worker of the host held it), writes the summaries of ended windows and publishes the
 * counters when they changed. */
void egress_events_tick(struct worker *w);
/* A lookup sbx's DNS forwarder refused (any thread): recorded like a denial, with rule "name",
 * the name, dst (the resolver the Sandbox sent it to) as its destination, port 53 and protocol
 * (IPPROTO_UDP or IPPROTO_TCP), at the next tick. */
void egress_events_refused_lookup(const char *ifname, struct in_addr src, struct in_addr dst,
                                  int protocol, const char *qname);
/* At worker exit. */
void egress_events_stop(void);

#endif
