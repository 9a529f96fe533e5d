/*
 * pki.h: the installation's keys, kept in one directory (ca_dir) that every host and gateway of
 * an installation shares: a CA (ECDSA P-256) that issues the certificates the Sandboxes' callback
 * servers present, and an Ed25519 key that signs the identity tokens (JWTs) the gateway publishes
 * as a JWKS. Every function is thread-safe.
 */
#ifndef SBX_PKI_H
#define SBX_PKI_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct pki;

/* Opens the installation's keys in dir (cfg->ca_dir), creating them at first start:
 * dir 0700 (config_private_mode), ca.key (ECDSA P-256, 0600), ca.pem (0644, the CA cert,
 * 10 years, CN "sbx installation CA <installation-id-or-any>"), jwt.key (Ed25519 seed,
 * 0600). Creation is atomic against another process doing the same at once (write temp
 * files, link()/rename into place; the loser loads the winner's). A directory that holds some
 * of the files but not all, or one that cannot be read, is an error naming the file: keys that
 * others may already trust are never made anew. Returns 0, or -1 with the reason in err. */
int pki_open(const char *dir, struct pki **out, char *err, size_t errlen);
void pki_free(struct pki *p);
const char *pki_ca_pem(const struct pki *p);  /* the CA certificate, PEM */
const char *pki_ca_file(const struct pki *p); /* path of ca.pem */
/* A server certificate signed by the CA for the IPv4 addresses and DNS names given
 * (SANs; CN = the first), valid from now-1h for valid_seconds; new PEM strings (free() them):
 * the certificate alone, and its ECDSA P-256 key as unencrypted PKCS#8. */
int pki_issue_server_cert(struct pki *p, const char *const *ips, size_t n_ips,
                          const char *const *names, size_t n_names, int64_t valid_seconds,
                          char **cert_pem, char **key_pem, char *err, size_t errlen);
/* A compact JWS (alg EdDSA, typ JWT, kid) over claims (a JSON object, not stolen); *jwt is a
 * new string (free() it). */
int pki_jwt_sign(struct pki *p, json_t *claims, char **jwt, char *err, size_t errlen);
/* {"keys":[{"kty":"OKP","crv":"Ed25519","x":...,"kid":...,"alg":"EdDSA","use":"sig"}]}, a new
 * reference (NULL when out of memory). */
json_t *pki_jwks(const struct pki *p);

#endif
