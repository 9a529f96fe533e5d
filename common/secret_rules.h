/*
 * secret_rules.h: what an App secret may be (docs/secrets.md): its name (an environment variable
 * the agent sees, not one sbx sets), its hosts (public DNS names or "*." wildcards, never an
 * address) and its size; and the environment an App with secrets gets from sbx (the CA bundle
 * variables). The gateway refuses anything else with 422 naming the field.
 */
#ifndef SBX_SECRET_RULES_H
#define SBX_SECRET_RULES_H

#include <stdbool.h>
#include <stddef.h>

#define SECRET_NAME_MAX 128
#define SECRET_VALUE_MAX 65536
#define SECRET_HOSTS_MAX 16
#define SECRET_HOST_MAX 255 /* "*." and a 253-character name */
#define SECRETS_PER_APP_MAX 64

/* Where the guest agent writes the CA bundle of an App with secrets: the image's own bundle (the
 * first of secret_image_ca_bundles that exists in the Sandbox) followed by the installation CA. */
#define SECRET_CA_BUNDLE_PATH "/tmp/sbx-ca-bundle.pem"

/* SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, CURL_CA_BUNDLE; NULL-terminated: what
 * sbx sets for an App with secrets (so neither its env nor a secret may name them).
 * NODE_EXTRA_CA_CERTS is the installation CA alone (SANDBOX_CA_PATH: Node adds it to its own
 * roots), the others SECRET_CA_BUNDLE_PATH (they replace the library's roots). */
extern const char *const secret_ca_bundle_vars[];
/* The usual places of a distribution's CA bundle (Debian, Fedora, RHEL, openSUSE, Alpine);
 * NULL-terminated. */
extern const char *const secret_image_ca_bundles[];

/* Whether name is one of secret_ca_bundle_vars. */
bool secret_ca_bundle_var(const char *name);

/* Whether name may be a secret's: [A-Za-z_][A-Za-z0-9_]*, at most SECRET_NAME_MAX characters,
 * not SBX_* (sbx's own) nor a CA bundle variable. false with a sentence in why. */
bool secret_name_ok(const char *name, char *why, size_t whylen);

/* Checks one host entry and writes its normal form (lower case, no trailing dot) to out
 * (SECRET_HOST_MAX + 1 bytes): a DNS name of two labels or more, or "*." and such a name. An IP
 * address (v4 or v6) is refused, naming the blocked range when it is in one, and so are names
 * that never leave the host or its network (localhost, *.local, *.internal, *.arpa). */
bool secret_host_parse(const char *text, char *out, char *why, size_t whylen);

#endif
