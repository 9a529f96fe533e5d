/*
 * http_wellknown.c: what a relying party (a service an agent presents its identity token to)
 * fetches to check the token without asking sbx: GET /.well-known/jwks.json, the key that signs
 * the tokens, and GET /.well-known/openid-configuration, the issuer and where that key is (OpenID
 * Connect Discovery). No authentication: both are public by nature. Caches may keep them for five
 * minutes.
 */
#include "gateway.h"
#include "pki.h"
#include "reply.h"

#include <stdio.h>
#include <string.h>

#define CACHE_CONTROL "max-age=300"

enum MHD_Result http_jwks(struct request *r)
{
    json_t *jwks = pki_jwks(r->gw->pki);
    if (!jwks)
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory");
    return reply_json_header(r, 200, jwks, "Cache-Control", CACHE_CONTROL);
}

enum MHD_Result http_openid_configuration(struct request *r)
{
    /* The issuer is public_url as configured, as the tokens' iss carries it; the key's URL is
     * built on it without doubling a trailing slash. */
    const char *issuer = r->gw->cfg.public_url;
    size_t len = strlen(issuer);
    while (len > 0 && issuer[len - 1] == '/')
        len--;
    char jwks_uri[sizeof r->gw->cfg.public_url + 32];
    snprintf(jwks_uri, sizeof jwks_uri, "%.*s/.well-known/jwks.json", (int)len, issuer);
    json_t *doc =
        json_pack("{s:s, s:s, s:[s], s:[s], s:[s]}", "issuer", issuer, "jwks_uri", jwks_uri,
                  "id_token_signing_alg_values_supported", "EdDSA", "response_types_supported",
                  "id_token", "subject_types_supported", "public");
    if (!doc)
        return reply_problem(r, PROBLEM_INTERNAL, NULL, "out of memory");
    return reply_json_header(r, 200, doc, "Cache-Control", CACHE_CONTROL);
}
