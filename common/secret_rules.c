/*
 * secret_rules.c: the validation of App secrets' names and hosts (secret_rules.h).
 */
#include "secret_rules.h"

#include "ipv4_ranges.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

const char *const secret_ca_bundle_vars[] = {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE",
                                             "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", NULL};

const char *const secret_image_ca_bundles[] = {
    "/etc/ssl/certs/ca-certificates.crt",                /* Debian, Ubuntu, Alpine's package */
    "/etc/pki/tls/certs/ca-bundle.crt",                  /* Fedora, RHEL */
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", /* RHEL without the link above */
    "/etc/ssl/ca-bundle.pem",                            /* openSUSE */
    "/etc/ssl/cert.pem",                                 /* Alpine, others */
    NULL};

bool secret_ca_bundle_var(const char *name)
{
    for (size_t i = 0; secret_ca_bundle_vars[i]; i++)
        if (strcmp(name, secret_ca_bundle_vars[i]) == 0)
            return true;
    return false;
}

bool secret_name_ok(const char *name, char *why, size_t whylen)
{
    size_t len = strlen(name);
    bool ok = len > 0 && len <= SECRET_NAME_MAX && !isdigit((unsigned char)name[0]);
    for (size_t i = 0; ok && i < len; i++)
        ok = name[i] == '_' || (name[i] >= 'A' && name[i] <= 'Z') ||
             (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9');
    if (!ok) {
        snprintf(why, whylen,
                 "\"%.60s\" is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*, at most "
                 "%d characters)",
                 name, SECRET_NAME_MAX);
        return false;
    }
    if (strncmp(name, "SBX_", 4) == 0) {
        snprintf(why, whylen, "%.60s: names starting with SBX_ are sbx's own", name);
        return false;
    }
    if (secret_ca_bundle_var(name)) {
        snprintf(why, whylen,
                 "%.60s is set by sbx for an App with secrets (the CA bundle its proxy needs)",
                 name);
        return false;
    }
    return true;
}

/* A DNS host name: labels of letters, digits and inner hyphens (1..63), at least two labels,
 * 253 characters at most, the last label not all digits (that would be an address). */
static bool dns_name_ok(const char *s)
{
    size_t len = strlen(s), labels = 0;
    if (len == 0 || len > 253)
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

/* Whether name is suffix or ends in ".suffix". */
static bool under(const char *name, const char *suffix)
{
    size_t n = strlen(name), s = strlen(suffix);
    return (n == s && strcmp(name, suffix) == 0) ||
           (n > s && name[n - s - 1] == '.' && strcmp(name + n - s, suffix) == 0);
}

bool secret_host_parse(const char *text, char *out, char *why, size_t whylen)
{
    char name[SECRET_HOST_MAX + 1];
    size_t len = strlen(text);
    bool wildcard = strncmp(text, "*.", 2) == 0;
    const char *body = wildcard ? text + 2 : text;
    size_t blen = len - (wildcard ? 2 : 0);
    if (blen > 0 && body[blen - 1] == '.')
        blen--;
    if (blen == 0 || blen > 253) {
        snprintf(why, whylen, "\"%.80s\" is not a host name", text);
        return false;
    }
    for (size_t i = 0; i < blen; i++)
        name[i] = (char)tolower((unsigned char)body[i]);
    name[blen] = '\0';
    struct in_addr a4;
    struct in6_addr a6;
    char bare[SECRET_HOST_MAX + 1];
    snprintf(bare, sizeof bare, "%s", name);
    if (bare[0] == '[' && blen > 1 && bare[blen - 1] == ']') {
        bare[blen - 1] = '\0';
        memmove(bare, bare + 1, blen - 1);
    }
    if (inet_pton(AF_INET, bare, &a4) == 1) {
        const struct ipv4_range *r = ipv4_blocked_overlap(a4, 32);
        if (r)
            snprintf(why, whylen,
                     "\"%.80s\" is an address in the blocked %s range %s/%d, and a secret's hosts "
                     "are names",
                     text, ipv4_range_kind_name(r->kind), r->net, r->len);
        else
            snprintf(why, whylen,
                     "\"%.80s\" is an IP address: a secret's hosts are names (the proxy matches "
                     "the name the client asked for)",
                     text);
        return false;
    }
    if (strchr(bare, ':') || inet_pton(AF_INET6, bare, &a6) == 1) {
        snprintf(why, whylen, "\"%.80s\" is an IPv6 address, blocked from every Sandbox", text);
        return false;
    }
    if (!dns_name_ok(name)) {
        snprintf(why, whylen,
                 "\"%.80s\" is not a host name (letters, digits, '-', two labels or more; a "
                 "wildcard only as a leading \"*.\")",
                 text);
        return false;
    }
    static const char *const local[] = {"localhost", "local",     "internal",
                                        "arpa",      "home.arpa", NULL};
    for (size_t i = 0; local[i]; i++) {
        if (under(name, local[i])) {
            snprintf(why, whylen,
                     "\"%.80s\" names the host or its network (.%s), which Sandboxes cannot reach",
                     text, local[i]);
            return false;
        }
    }
    snprintf(out, SECRET_HOST_MAX + 1, "%s%s", wildcard ? "*." : "", name);
    return true;
}
