/*
 * egress_policy.c: parsing, validation and the normal form of an App's `network` object
 * (egress_policy.h).
 */
#include "egress_policy.h"

#include "ipv4_ranges.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *egress_mode_name(enum egress_mode m)
{
    return m == EGRESS_NONE ? "none" : m == EGRESS_ALLOWLIST ? "allowlist" : "public";
}

/* A DNS host name: labels of letters, digits and inner hyphens (1..63), at least two labels,
 * 253 characters at most, the last label not all digits (that would be an address). */
static bool valid_host_name(const char *s)
{
    size_t len = strlen(s), labels = 0;
    if (len == 0 || len > EGRESS_NAME_MAX)
        return false;
    const char *label = s;
    for (;;) {
        size_t l = strcspn(label, ".");
        if (l == 0 || l > 63 || label[0] == '-' || label[l - 1] == '-')
            return false;
        bool digits = true;
        for (size_t i = 0; i < l; i++) {
            if (!isalnum((unsigned char)label[i]) && label[i] != '-')
                return false;
            digits = digits && isdigit((unsigned char)label[i]);
        }
        labels++;
        if (label[l] == '\0')
            return labels >= 2 && !digits;
        label += l + 1;
    }
}

static int parse_entry(const char *text, struct egress_allow *a, char *why, size_t whylen)
{
    memset(a, 0, sizeof *a);
    char host[EGRESS_NAME_MAX + 8];
    const char *colon = strrchr(text, ':');
    if (colon && strchr(text, ':') != colon) {
        snprintf(why, whylen, "\"%.80s\": IPv6 stays blocked in every mode", text);
        return -1;
    }
    size_t hlen = colon ? (size_t)(colon - text) : strlen(text);
    if (hlen == 0 || hlen >= sizeof host) {
        snprintf(why, whylen, "must be a CIDR, a host name or *.name, with an optional :port");
        return -1;
    }
    memcpy(host, text, hlen);
    host[hlen] = '\0';
    if (colon) {
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (!colon[1] || *end || port < 1 || port > 65535 || !isdigit((unsigned char)colon[1])) {
            snprintf(why, whylen, "port \"%s\" is not in 1..65535", colon + 1);
            return -1;
        }
        a->port = (uint16_t)port;
    }
    if (isdigit((unsigned char)host[0]) && strspn(host, "0123456789./") == hlen) {
        char *slash = strchr(host, '/');
        long len = 32;
        if (slash) {
            char *end;
            *slash = '\0';
            len = strtol(slash + 1, &end, 10);
            if (!slash[1] || *end || len < 0 || len > 32) {
                snprintf(why, whylen, "\"%s\": the prefix length must be 0..32", text);
                return -1;
            }
        }
        if (inet_pton(AF_INET, host, &a->net) != 1) {
            snprintf(why, whylen, "\"%s\" is not an IPv4 address or CIDR", text);
            return -1;
        }
        uint32_t mask = len ? htonl(~0u << (32 - len)) : 0;
        if (a->net.s_addr & ~mask) {
            snprintf(why, whylen, "\"%s\" has host bits set beyond /%ld", text, len);
            return -1;
        }
        a->len = (int)len;
        const struct ipv4_range *r = ipv4_blocked_overlap(a->net, a->len);
        if (r) {
            snprintf(why, whylen,
                     "\"%s\" reaches into the blocked %s range %s/%d, which stays blocked in every "
                     "mode",
                     text, ipv4_range_kind_name(r->kind), r->net, r->len);
            return -1;
        }
        return 0;
    }
    a->is_name = true;
    const char *name = host;
    if (strncmp(name, "*.", 2) == 0) {
        a->wildcard = true;
        name += 2;
    }
    size_t nlen = strlen(name);
    if (nlen > 0 && name[nlen - 1] == '.')
        nlen--;
    if (nlen > EGRESS_NAME_MAX) {
        snprintf(why, whylen, "\"%s\" is longer than %d characters", text, EGRESS_NAME_MAX);
        return -1;
    }
    for (size_t i = 0; i < nlen; i++)
        a->name[i] = (char)tolower((unsigned char)name[i]);
    a->name[nlen] = '\0';
    if (!valid_host_name(a->name)) {
        snprintf(why, whylen,
                 "\"%s\" is not a CIDR nor a host name (letters, digits, '-', two labels or more; "
                 "a wildcard only as a leading \"*.\")",
                 text);
        return -1;
    }
    return 0;
}

int egress_policy_parse(json_t *network, struct egress_policy *out, char *field, size_t fieldlen,
                        char *detail, size_t detaillen)
{
    memset(out, 0, sizeof *out);
    snprintf(field, fieldlen, "network");
    if (!json_is_object(network)) {
        snprintf(detail, detaillen, "field \"network\" must be an object");
        return EGRESS_POLICY_BAD_TYPE;
    }
    const char *key;
    json_t *v;
    json_object_foreach(network, key, v)
    {
        if (strcmp(key, "egress") != 0 && strcmp(key, "allow") != 0) {
            snprintf(field, fieldlen, "network.%.60s", key);
            snprintf(detail, detaillen, "unknown field \"network.%.60s\" (egress, allow)", key);
            return EGRESS_POLICY_UNKNOWN_FIELD;
        }
    }
    json_t *egress = json_object_get(network, "egress");
    if (egress) {
        const char *m = json_string_value(egress);
        snprintf(field, fieldlen, "network.egress");
        if (!m) {
            snprintf(detail, detaillen, "field \"network.egress\" must be a string");
            return EGRESS_POLICY_BAD_TYPE;
        }
        if (m && strcmp(m, "public") == 0)
            out->mode = EGRESS_PUBLIC;
        else if (m && strcmp(m, "none") == 0)
            out->mode = EGRESS_NONE;
        else if (m && strcmp(m, "allowlist") == 0)
            out->mode = EGRESS_ALLOWLIST;
        else {
            snprintf(detail, detaillen,
                     "field \"network.egress\" must be public, none or allowlist");
            return -1;
        }
    }
    json_t *allow = json_object_get(network, "allow");
    snprintf(field, fieldlen, "network.allow");
    if (allow && !json_is_array(allow)) {
        snprintf(detail, detaillen, "field \"network.allow\" must be an array of strings");
        return EGRESS_POLICY_BAD_TYPE;
    }
    size_t n = allow ? json_array_size(allow) : 0;
    if (out->mode != EGRESS_ALLOWLIST && n > 0) {
        snprintf(detail, detaillen,
                 "field \"network.allow\" applies only to \"egress\": \"allowlist\"");
        return -1;
    }
    if (out->mode == EGRESS_ALLOWLIST && n == 0) {
        snprintf(detail, detaillen,
                 "an allowlist needs \"network.allow\" entries (use \"egress\": \"none\" for no "
                 "egress at all)");
        return -1;
    }
    if (n > EGRESS_POLICY_MAX_ALLOW) {
        snprintf(detail, detaillen, "field \"network.allow\" holds at most %d entries, not %zu",
                 EGRESS_POLICY_MAX_ALLOW, n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const char *text = json_string_value(json_array_get(allow, i));
        snprintf(field, fieldlen, "network.allow[%zu]", i);
        char why[200];
        if (!text) {
            snprintf(detail, detaillen, "field \"%s\" must be a string", field);
            return EGRESS_POLICY_BAD_TYPE;
        }
        if (parse_entry(text, &out->allow[out->n], why, sizeof why) < 0) {
            snprintf(detail, detaillen, "field \"%s\": %s", field, why);
            return -1;
        }
        out->n++;
    }
    field[0] = '\0';
    return 0;
}

int egress_policy_parse_text(const char *json, struct egress_policy *out, char *detail,
                             size_t detaillen)
{
    if (!json || !*json) {
        memset(out, 0, sizeof *out);
        return 0;
    }
    json_error_t jerr;
    json_t *v = json_loads(json, 0, &jerr);
    char field[64];
    if (!v) {
        snprintf(detail, detaillen, "network: %s", jerr.text);
        return -1;
    }
    int rc = egress_policy_parse(v, out, field, sizeof field, detail, detaillen);
    json_decref(v);
    return rc < 0 ? -1 : 0;
}

void egress_allow_text(const struct egress_allow *a, char *out, size_t outlen)
{
    char host[EGRESS_NAME_MAX + 8];
    if (a->is_name) {
        snprintf(host, sizeof host, "%s%s", a->wildcard ? "*." : "", a->name);
    } else {
        char addr[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &a->net, addr, sizeof addr);
        snprintf(host, sizeof host, "%s/%d", addr, a->len);
    }
    if (a->port)
        snprintf(out, outlen, "%s:%u", host, (unsigned)a->port);
    else
        snprintf(out, outlen, "%s", host);
}

json_t *egress_policy_json(const struct egress_policy *p)
{
    json_t *o = json_pack("{s:s}", "egress", egress_mode_name(p->mode));
    if (!o || p->mode != EGRESS_ALLOWLIST)
        return o;
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < p->n; i++) {
        char text[EGRESS_NAME_MAX + 16];
        egress_allow_text(&p->allow[i], text, sizeof text);
        json_array_append_new(arr, json_string(text));
    }
    if (!arr || json_object_set_new(o, "allow", arr) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}
