/*
 * egress_policy.h: an App's `network` object, {"egress": "public"|"none"|"allowlist", "allow":
 * [...]}: parsed and validated (the gateway refuses a bad one with 422 naming the field), and
 * written back in one normal form (what the store keeps and the workers read).
 *
 * An allow entry is a CIDR ("203.0.113.0/24", a bare address is a /32), a host name
 * ("api.example.com") or a wildcard name ("*.example.org": its subdomains), each with an optional
 * ":port" (TCP). An entry inside a range no Sandbox may reach (ipv4_ranges.h) is refused: the
 * policy narrows the host-wide rule, never widens it.
 */
#ifndef SBX_EGRESS_POLICY_H
#define SBX_EGRESS_POLICY_H

#include <jansson.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EGRESS_POLICY_MAX_ALLOW 64
#define EGRESS_NAME_MAX 253

enum egress_mode { EGRESS_PUBLIC, EGRESS_NONE, EGRESS_ALLOWLIST };

struct egress_allow {
    bool is_name;
    bool wildcard;                  /* "*.": subdomains of name, not name itself */
    char name[EGRESS_NAME_MAX + 1]; /* lower case, without "*." and without a trailing dot */
    struct in_addr net;             /* CIDR entries */
    int len;
    uint16_t port; /* 0: any port egress_ports allows */
};

struct egress_policy {
    enum egress_mode mode;
    struct egress_allow allow[EGRESS_POLICY_MAX_ALLOW];
    size_t n;
};

/* "public", "none", "allowlist". */
const char *egress_mode_name(enum egress_mode m);

/* What egress_policy_parse refused: a value (422 invalid-value), a JSON type (400 invalid-field),
 * a member it does not know (400 unknown-field). */
#define EGRESS_POLICY_BAD_VALUE (-1)
#define EGRESS_POLICY_BAD_TYPE (-2)
#define EGRESS_POLICY_UNKNOWN_FIELD (-3)

/* Parses the `network` object. 0, or one of the codes above with the field ("network.egress",
 * "network.allow[3]") and a sentence for the caller. */
int egress_policy_parse(json_t *network, struct egress_policy *out, char *field, size_t fieldlen,
                        char *detail, size_t detaillen);
/* The same from the stored JSON text (NULL or "" is public); 0 or -1. */
int egress_policy_parse_text(const char *json, struct egress_policy *out, char *detail,
                             size_t detaillen);
/* The normal form as a new JSON object: {"egress": ..., "allow": [...]} ("allow" only for an
 * allowlist); entries written back as "a.b.c.d/len[:port]", "name[:port]", "*.name[:port]". */
json_t *egress_policy_json(const struct egress_policy *p);
/* One entry in that form. */
void egress_allow_text(const struct egress_allow *a, char *out, size_t outlen);

#endif
