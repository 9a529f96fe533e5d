/*
 * tls.h: the certificate and key the gateway's HTTPS listener presents (tls_cert_file,
 * tls_key_file), reloadable while it runs. libmicrohttpd asks tls_cert_callback for the pair at
 * each handshake; tls_reload() (on SIGHUP) reads both files again and, when they load and match,
 * makes them the pair new handshakes get. A pair that fails keeps the old one in use.
 *
 * Hidden state: the process's one pair set (the callback gets no argument of ours), the current
 * pair behind an atomic pointer. Pairs replaced by a reload stay allocated until tls_close(): a
 * handshake that picked one up may still be using it, and libmicrohttpd tells nothing that would
 * say when the last such session has ended. Only a pair whose files changed is kept, so repeated
 * reloads of the same files cost nothing.
 */
#ifndef SBX_TLS_H
#define SBX_TLS_H

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <stddef.h>

/* TLS 1.2 and 1.3 only, GnuTLS's default ("NORMAL") algorithms within them. */
#define TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

/* Loads the pair; 0, or -1 with err naming the file and why (nothing is kept then). */
int tls_open(const char *cert_file, const char *key_file, char *err, size_t errlen);
/* Reads both files again: 1 when they are the new pair, 0 when they are unchanged, -1 when they
 * are refused (msg says which file and why; the pair in use stays). msg also describes a new
 * pair. */
int tls_reload(char *msg, size_t msglen);
/* A line about the pair in use (subject, expiry, SHA-256 fingerprint), for the logs. */
void tls_describe(char *out, size_t outlen);
/* Frees every pair; only once no listener uses them (after MHD_stop_daemon). */
void tls_close(void);

/* The gnutls_certificate_retrieve_function2 to give MHD_OPTION_HTTPS_CERT_CALLBACK. */
int tls_cert_callback(gnutls_session_t session, const gnutls_datum_t *req_ca_rdn, int nreqs,
                      const gnutls_pk_algorithm_t *pk_algos, int pk_algos_length,
                      gnutls_pcert_st **pcert, unsigned int *pcert_length,
                      gnutls_privkey_t *privkey);

#endif
