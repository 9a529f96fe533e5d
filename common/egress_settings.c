/*
 * egress_settings.c: parsing of egress_ports and dns_resolvers, and the default resolvers read
 * from the host's resolv.conf (egress_settings.h).
 */
#include "egress_settings.h"

#include "ipv4_ranges.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_ports(const char *text, struct egress_settings *out, char *err, size_t errlen)
{
    const char *p = text;
    out->nports = 0;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 1 || v > 65535 || (*end && *end != ',')) {
            snprintf(err, errlen,
                     "egress_ports must be a comma-separated list of ports 1..65535, not \"%.64s\"",
                     text);
            return -1;
        }
        bool dup = false;
        for (size_t i = 0; i < out->nports; i++)
            dup = dup || out->ports[i] == (uint16_t)v;
        if (!dup) {
            if (out->nports == EGRESS_MAX_PORTS) {
                snprintf(err, errlen, "egress_ports: at most %d ports", EGRESS_MAX_PORTS);
                return -1;
            }
            out->ports[out->nports++] = (uint16_t)v;
        }
        if (*end == ',' && end[1] == '\0') {
            snprintf(err, errlen, "egress_ports: \"%.64s\" ends with a comma", text);
            return -1;
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* A resolver must be an IPv4 address a Sandbox can reach: not in a blocked range. */
static int check_resolver(const char *text, struct in_addr *a, const char *source, char *err,
                          size_t errlen)
{
    if (inet_pton(AF_INET, text, a) != 1) {
        snprintf(err, errlen, "%s: \"%.64s\" is not an IPv4 address", source, text);
        return -1;
    }
    const struct ipv4_range *r = ipv4_blocked_overlap(*a, 32);
    if (r) {
        snprintf(err, errlen, "%s: %s is in the blocked %s range %s/%d, which no Sandbox may reach",
                 source, text, ipv4_range_kind_name(r->kind), r->net, r->len);
        return -1;
    }
    return 0;
}

static int add_resolver(struct egress_settings *out, struct in_addr a, char *err, size_t errlen)
{
    for (size_t i = 0; i < out->nresolvers; i++)
        if (out->resolvers[i].s_addr == a.s_addr)
            return 0;
    if (out->nresolvers == EGRESS_MAX_RESOLVERS) {
        snprintf(err, errlen, "dns_resolvers: at most %d resolvers", EGRESS_MAX_RESOLVERS);
        return -1;
    }
    out->resolvers[out->nresolvers++] = a;
    return 0;
}

static int parse_resolvers(const char *text, struct egress_settings *out, char *err, size_t errlen)
{
    out->nresolvers = 0;
    out->resolvers_from_host = text[0] == '\0';
    if (text[0] == '\0' || strcmp(text, "none") == 0)
        return 0;
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, ",");
        char one[INET_ADDRSTRLEN + 1];
        if (n == 0 || n >= sizeof one) {
            snprintf(err, errlen,
                     "dns_resolvers must be comma-separated IPv4 addresses (or none), not "
                     "\"%.64s\"",
                     text);
            return -1;
        }
        memcpy(one, p, n);
        one[n] = '\0';
        struct in_addr a;
        if (check_resolver(one, &a, "dns_resolvers", err, errlen) < 0 ||
            add_resolver(out, a, err, errlen) < 0)
            return -1;
        p += n;
        if (*p == ',' && *++p == '\0') {
            snprintf(err, errlen,
                     "dns_resolvers must be comma-separated IPv4 addresses, not \"%.64s\"", text);
            return -1;
        }
    }
    return 0;
}

int egress_settings_parse(const char *ports, const char *resolvers, struct egress_settings *out,
                          char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (parse_ports(ports, out, err, errlen) < 0 ||
        parse_resolvers(resolvers, out, err, errlen) < 0)
        return -1;
    return 0;
}

/* "nameserver a.b.c.d" lines of resolv_conf whose address a Sandbox could reach. */
static void read_host_resolvers(const char *resolv_conf, struct egress_settings *out)
{
    FILE *f = fopen(resolv_conf, "re");
    if (!f)
        return;
    char line[512], why[256];
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (strncmp(p, "nameserver", 10) != 0 || !isspace((unsigned char)p[10]))
            continue;
        p += 10;
        while (isspace((unsigned char)*p))
            p++;
        p[strcspn(p, " \t\r\n#;")] = '\0';
        struct in_addr a;
        if (check_resolver(p, &a, "resolv.conf", why, sizeof why) == 0)
            add_resolver(out, a, why, sizeof why); /* beyond the cap: ignored, as libc does */
    }
    fclose(f);
}

int egress_settings_load(const char *ports, const char *resolvers, const char *resolv_conf,
                         struct egress_settings *out, char *err, size_t errlen)
{
    if (egress_settings_parse(ports, resolvers, out, err, errlen) < 0)
        return -1;
    if (out->resolvers_from_host)
        read_host_resolvers(resolv_conf, out);
    return 0;
}

int egress_resolv_conf_text(const struct egress_settings *s, char *out, size_t outlen)
{
    size_t n = 0;
    int w = snprintf(out, outlen, "# written by sbx: the DNS resolvers this Sandbox may use\n");
    if (w < 0 || (size_t)w >= outlen)
        return -1;
    n = (size_t)w;
    for (size_t i = 0; i < s->nresolvers; i++) {
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &s->resolvers[i], a, sizeof a);
        w = snprintf(out + n, outlen - n, "nameserver %s\n", a);
        if (w < 0 || (size_t)w >= outlen - n)
            return -1;
        n += (size_t)w;
    }
    if (s->nresolvers == 0) {
        w = snprintf(out + n, outlen - n, "# none configured: DNS is refused\n");
        if (w < 0 || (size_t)w >= outlen - n)
            return -1;
    }
    return 0;
}
