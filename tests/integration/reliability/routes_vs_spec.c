/*
 * routes_vs_spec.c: checks the gateway's route table (gateway_routes[] in gateway/router.c)
 * against openapi.yaml in both directions, with each route's auth kind against the operation's
 * security list. The auth matrix test walks the spec; this check makes sure the spec holds every
 * route the gateway serves, so a route added to the table without the spec fails here rather
 * than escaping the matrix. Operations tagged "Sandbox callbacks" are the workers' callback API
 * (callback/), not the gateway's, and are left out. Usage: routes_vs_spec <openapi.yaml>. Exit 0
 * when they agree.
 */
#include "gateway.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OPS 128

struct spec_op {
    char method[8];
    char path[128];
    char security[64]; /* "", "adminToken", "appKey" or "adminToken appKey" */
    int matched;
    int callback; /* tagged "Sandbox callbacks" */
};

static void scheme_list(const char *flow, char *out, size_t outlen)
{
    out[0] = '\0';
    if (strstr(flow, "adminToken"))
        snprintf(out, outlen, "adminToken");
    if (strstr(flow, "appKey"))
        snprintf(out + strlen(out), outlen - strlen(out), "%sappKey", out[0] ? " " : "");
}

/* The layout openapi.yaml uses: "paths:" at column 0, paths at 2 spaces, methods at 4, an
 * operation's "security:" and "tags:" at 6 (without security, the top-level list: either kind of
 * token). Operations tagged "Sandbox callbacks" are dropped at the end. */
static int read_spec(FILE *f, struct spec_op *ops)
{
    char line[1024], path[128] = "";
    int n = 0, in_paths = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] && !isspace((unsigned char)line[0])) {
            in_paths = strncmp(line, "paths:", 6) == 0;
            continue;
        }
        if (!in_paths)
            continue;
        char word[128];
        if (strncmp(line, "  /", 3) == 0 && sscanf(line + 2, "%127[^:]:", word) == 1) {
            snprintf(path, sizeof path, "%s", word);
        } else if (strncmp(line, "    ", 4) == 0 && line[4] != ' ' &&
                   sscanf(line + 4, "%7[a-z]:", word) == 1 && path[0] && n < MAX_OPS &&
                   strchr(line, ':')[1] == '\0' &&
                   (!strcmp(word, "get") || !strcmp(word, "post") || !strcmp(word, "put") ||
                    !strcmp(word, "patch") || !strcmp(word, "delete"))) {
            struct spec_op *o = &ops[n++];
            for (size_t i = 0; word[i]; i++)
                o->method[i] = (char)toupper((unsigned char)word[i]), o->method[i + 1] = '\0';
            snprintf(o->path, sizeof o->path, "%s", path);
            snprintf(o->security, sizeof o->security, "adminToken appKey");
        } else if (strncmp(line, "      security:", 15) == 0 && n > 0) {
            scheme_list(line + 15, ops[n - 1].security, sizeof ops[n - 1].security);
        } else if (strncmp(line, "      tags:", 11) == 0 && n > 0 &&
                   strstr(line, "Sandbox callbacks")) {
            ops[n - 1].callback = 1; /* the workers' callback API: not routed by the gateway */
        }
    }
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (!ops[i].callback)
            ops[kept++] = ops[i];
    return kept;
}

static const char *expected_security(enum auth_kind k)
{
    switch (k) {
    case AUTH_NONE:
        return "";
    case AUTH_ADMIN:
        return "adminToken";
    case AUTH_KEY:
        return "appKey";
    case AUTH_EITHER:
        return "adminToken appKey";
    }
    return "?";
}

int main(int argc, char **argv)
{
    static struct spec_op ops[MAX_OPS];
    if (argc != 2) {
        fprintf(stderr, "usage: %s openapi.yaml\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    int n = read_spec(f, ops), failures = 0;
    fclose(f);
    if (n < 10) {
        fprintf(stderr, "only %d operations read from %s\n", n, argv[1]);
        return 1;
    }
    for (int i = 0; i < gateway_route_count; i++) {
        const struct route *rt = &gateway_routes[i];
        int found = 0;
        for (int j = 0; j < n; j++) {
            if (strcmp(ops[j].method, rt->method) != 0 || strcmp(ops[j].path, rt->path) != 0)
                continue;
            found = ops[j].matched = 1;
            if (strcmp(ops[j].security, expected_security(rt->auth)) != 0) {
                fprintf(stderr, "%s %s: the gateway wants \"%s\", openapi.yaml says \"%s\"\n",
                        rt->method, rt->path, expected_security(rt->auth), ops[j].security);
                failures++;
            }
        }
        if (!found) {
            fprintf(stderr, "%s %s is routed by the gateway but missing from openapi.yaml\n",
                    rt->method, rt->path);
            failures++;
        }
    }
    for (int j = 0; j < n; j++)
        if (!ops[j].matched) {
            fprintf(stderr, "%s %s is in openapi.yaml but the gateway does not route it\n",
                    ops[j].method, ops[j].path);
            failures++;
        }
    printf("%d routes, %d operations, %d disagreements\n", gateway_route_count, n, failures);
    return failures ? 1 : 0;
}
