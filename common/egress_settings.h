/*
 * egress_settings.h: the host-wide egress settings, parsed: `egress_ports` (the TCP ports a
 * Sandbox may open to public IPv4) and `dns_resolvers` (the only addresses it may send DNS to).
 *
 * config.c refuses malformed values at start through egress_settings_parse; the worker resolves
 * the resolvers' default (the host's own public nameservers) through egress_settings_load.
 */
#ifndef SBX_EGRESS_SETTINGS_H
#define SBX_EGRESS_SETTINGS_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EGRESS_MAX_PORTS 64
#define EGRESS_MAX_RESOLVERS 8
#define EGRESS_HOST_RESOLV_CONF "/etc/resolv.conf"

struct egress_settings {
    uint16_t ports[EGRESS_MAX_PORTS];
    size_t nports;
    struct in_addr resolvers[EGRESS_MAX_RESOLVERS];
    size_t nresolvers;
    bool resolvers_from_host; /* dns_resolvers was empty: taken from the host's resolv.conf */
};

/* Parses "80,443" (ports 1..65535, at most EGRESS_MAX_PORTS, duplicates folded) and a resolver
 * list ("a.b.c.d,..." of public IPv4 addresses, "none" for none). An empty resolvers value leaves
 * nresolvers 0 with resolvers_from_host set (egress_settings_load fills them). -1 with the reason
 * (naming the setting) in err. */
int egress_settings_parse(const char *ports, const char *resolvers, struct egress_settings *out,
                          char *err, size_t errlen);

/* egress_settings_parse, then, when resolvers is empty, the nameservers of resolv_conf (normally
 * EGRESS_HOST_RESOLV_CONF) that are public IPv4 addresses (loopback stubs, private and special-use
 * addresses are skipped: a Sandbox could not reach them). Finding none is not an error. */
int egress_settings_load(const char *ports, const char *resolvers, const char *resolv_conf,
                         struct egress_settings *out, char *err, size_t errlen);

/* The text of a Sandbox's /etc/resolv.conf for these resolvers ("nameserver a.b.c.d" lines; a
 * comment only when there are none). -1 when outlen is too small. */
int egress_resolv_conf_text(const struct egress_settings *s, char *out, size_t outlen);

#endif
