/*
 * egress_dns.h: the worker's side of sbx's DNS forwarder (host/dns_forwarder.h): started by the
 * first worker of a host that can bind its port (the others try again later), told by this file
 * which names each App's allowlist allows (from the store, cached for a second) and handing its
 * refusals to egress_events.h.
 *
 * Hidden state: the forwarder and the policy cache, for the life of the worker process.
 */
#ifndef SBX_EGRESS_DNS_H
#define SBX_EGRESS_DNS_H

#include "worker.h"

/* On the worker's poll: starts the forwarder once the worker's network exists, when no other
 * worker of the host runs it. */
void egress_dns_tick(struct worker *w);
void egress_dns_stop(void);

#endif
