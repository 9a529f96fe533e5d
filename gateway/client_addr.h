/*
 * client_addr.h: who a request comes from. The peer address, unless the peer is one of the
 * configured trusted proxies (trusted_proxies: addresses or CIDRs, IPv4 or IPv6): then the
 * client is the right-most address of X-Forwarded-For that is not itself a trusted proxy (what
 * the nearest untrusted hop connected from; the entries left of it are whatever the client
 * wrote). X-Forwarded-For from any other peer is ignored: anyone can send one.
 */
#ifndef SBX_CLIENT_ADDR_H
#define SBX_CLIENT_ADDR_H

#include <microhttpd.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>

#define CLIENT_ADDR_LEN (INET6_ADDRSTRLEN + 1)

struct trusted_proxies;

/* Parses a comma-separated list ("" gives an empty one). NULL with the reason in err. */
struct trusted_proxies *trusted_proxies_parse(const char *list, char *err, size_t errlen);
void trusted_proxies_free(struct trusted_proxies *tp);
/* Whether the textual address addr is one of them. */
bool trusted_proxies_match(const struct trusted_proxies *tp, const char *addr);

/* The client address of xff (the X-Forwarded-For value, or NULL) sent by peer, in out. Pure
 * (fuzzable, unit-tested). */
void client_addr_resolve(const struct trusted_proxies *tp, const char *peer, const char *xff,
                         char out[CLIENT_ADDR_LEN]);
/* The client address of a connection: its peer, resolved through X-Forwarded-For as above (every
 * X-Forwarded-For header, in order). */
void client_addr_of(const struct trusted_proxies *tp, struct MHD_Connection *conn,
                    char out[CLIENT_ADDR_LEN]);

#endif
