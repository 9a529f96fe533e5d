/*
 * dns_forwarder.h: sbx's own DNS forwarder for the Sandboxes of allowlist Apps and of Apps with
 * secrets. Their UDP DNS, to whatever resolver they name, is redirected here by the firewall
 * (FW_DNS_FORWARDER_PORT). For an allowlist Sandbox, a query for a name its App allows is
 * forwarded to the host's dns_resolvers; the A records of the answer open `address . port` for
 * that App only, in its set names_<app> (fw_app_names_add), for the record's TTL plus a grace,
 * before the answer goes back. Any other query is answered REFUSED and never leaves the host, so
 * DNS carries no data out. A Sandbox with secrets under the public policy (in the map
 * secret_proxy, not under an allowlist) has every query forwarded to the same resolvers, and
 * nothing opened: its public egress reaches any address already. Which Sandbox is which comes
 * from the firewall's sets, read again at most twice a second.
 *
 * DNS over TCP (RFC 7766) is served the same way on the same port: a resolver library retries
 * over TCP when an answer did not fit in UDP, and the firewall redirects a Sandbox's TCP DNS here
 * too. Such a query is asked upstream over TCP, and its answer opens the same addresses.
 *
 * One forwarder per host: the first worker to bind the port runs it; the others' start fails
 * with EADDRINUSE and they try again later. A thread of its own serves the queries, many at once:
 * each allowed query waits for its resolver on a socket of its own (2 s per resolver, then the
 * next, then SERVFAIL), at most 16 per Sandbox and 256 in all (past that: SERVFAIL at once), so a
 * slow lookup holds up no other. TCP connections: at most 4 per Sandbox and 64 in all (past that
 * a connection is closed at once), one query of each served at a time, and a connection idle for
 * 10 s (no query in, or its answer not taken) is closed. No store and no event loop here: which
 * names an App allows and what to do with a refusal come from the caller's callbacks, called on
 * that thread.
 */
#ifndef SBX_DNS_FORWARDER_H
#define SBX_DNS_FORWARDER_H

#include "host/firewall.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DNS_TTL_GRACE_MS 5000
#define DNS_TTL_MAX_S 86400

struct dns_forwarder_params {
    const struct in_addr *upstream; /* dns_resolvers, tried in order */
    size_t nupstream;
    uint16_t port;     /* FW_DNS_FORWARDER_PORT; tests may pick another */
    uint32_t grace_ms; /* added to each record's TTL */
    /* Whether app_id allows qname (lower case, no trailing dot); on true, the TCP ports its
     * addresses open (at most 64) in ports/nports. Called on the forwarder's thread. */
    bool (*allow)(const char *app_id, const char *qname, uint16_t *ports, size_t *nports,
                  void *arg);
    /* A refused lookup, for the audit trail (may be NULL): dst is the resolver the Sandbox sent
     * it to, before the redirect (UDP: conntrack_origin.h; TCP: the connection's original
     * destination; 0.0.0.0 if unknown), protocol IPPROTO_UDP or IPPROTO_TCP. Called on the
     * forwarder's thread. */
    void (*refused)(const char *ifname, struct in_addr client, struct in_addr dst, int protocol,
                    const char *app_id, const char *qname, void *arg);
    void *arg;
};

struct dns_forwarder;

/* Binds 0.0.0.0:port (UDP and TCP) and starts the thread. NULL with the reason (errno
 * EADDRINUSE: another worker of the host runs it). */
struct dns_forwarder *dns_forwarder_start(struct fw *fw, const struct dns_forwarder_params *p,
                                          char *err, size_t errlen);
void dns_forwarder_stop(struct dns_forwarder *f);

/* Queries answered: forwarded, refused, failed (SERVFAIL: no upstream answer, or the firewall
 * could not be told). */
struct dns_forwarder_stats {
    uint64_t forwarded, refused, failed;
};
void dns_forwarder_stats(struct dns_forwarder *f, struct dns_forwarder_stats *out);

/* The wire format helpers, for tests: the question's name of a query (lower case, dotted; labels
 * of letters, digits, '-' and '_' only), or -1;
 * and the A records of an answer, up to max, with their TTLs. */
int dns_question_name(const unsigned char *msg, size_t len, char *name, size_t namelen,
                      uint16_t *qtype);
size_t dns_answer_a_records(const unsigned char *msg, size_t len, struct in_addr *addrs,
                            uint32_t *ttls, size_t max);
/* A standard query (recursion desired) for the A records of name (dotted, no trailing dot) into
 * out; its length, or 0 when it does not fit in cap or a label is empty or over 63 bytes. */
size_t dns_query_a(unsigned char *out, size_t cap, uint16_t id, const char *name);

#endif
