/*
 * registry_pull.h: pulls an image from an OCI distribution registry (libcurl) into the per-host
 * cache: the manifest by tag or digest (an index or manifest list picks linux/amd64), then the
 * config and layer blobs by digest, each verified as it is written, then importer.h unpacks them.
 *
 * A reference is HOST[:PORT]/REPOSITORY[:TAG] or HOST[:PORT]/REPOSITORY@sha256:<hex> (the tag
 * defaults to latest). https is used unless HOST[:PORT] is listed in insecure_registries; only
 * http and https are ever spoken. Registries that answer 401 are retried once with the given
 * credentials: basic auth, or a bearer token fetched from the realm the registry names. All the
 * requests of a pull together get registry_pull_timeout, and each fails once the registry sends
 * less than registry_low_speed_limit bytes a second for registry_low_speed_time
 * (registry_too_slow).
 */
#ifndef SBX_REGISTRY_PULL_H
#define SBX_REGISTRY_PULL_H

#include "config.h"
#include "images/importer.h"

/* credentials_json: {"username","password"} or NULL. Returns 0, or -1 with res->problem
 * (registry_unreachable, registry_too_slow, registry_unauthorized, registry_not_found,
 * image_digest_mismatch,
 * image_unsupported, or one of the importer's). */
int registry_pull(const struct sbx_config *cfg, const char *work_id, const char *reference,
                  const char *credentials_json, struct import_result *res);

/* The reference's parts; 0, or -1 when it does not parse. Exposed for tests. */
struct registry_ref {
    char host[256]; /* host[:port] */
    char repo[512]; /* repository path */
    char ref[160];  /* tag or sha256:<hex> */
    int by_digest;
};
int registry_ref_parse(const char *reference, struct registry_ref *out);

#endif
