/*
 * secret_set.h: the App secrets one Sandbox may use, as the worker holds them in memory while the
 * Sandbox lives (docs/secrets.md): each secret's plaintext value, the host names it may be sent
 * to, and the placeholder that stands for it inside that Sandbox only. The worker fills a set when
 * it starts the App's command in a Sandbox; the egress proxy reads it to replace placeholders in
 * requests to the secret's hosts. Values are wiped when the set is freed.
 */
#ifndef SBX_SECRET_SET_H
#define SBX_SECRET_SET_H

#include <stdbool.h>
#include <stddef.h>

/* "sbx_ph_" and 43 base64url characters (256 random bits). */
#define SECRET_PLACEHOLDER_PREFIX "sbx_ph_"
#define SECRET_PLACEHOLDER_LEN 50

struct secret_binding {
    char *name; /* the environment variable the agent sees */
    char placeholder[SECRET_PLACEHOLDER_LEN + 1];
    char *value; /* the plaintext, value_len bytes (not NUL-terminated in general) */
    size_t value_len;
    char **hosts; /* exact names or "*.suffix" wildcards, lowercase */
    size_t n_hosts;
};

struct secret_set {
    struct secret_binding *v;
    size_t n;
};

/* Adds a secret with a fresh placeholder; copies every argument. 0, or -1 (ENOMEM, or the
 * kernel's random source failed). */
int secret_set_add(struct secret_set *s, const char *name, const void *value, size_t value_len,
                   const char *const *hosts, size_t n_hosts);
/* Wipes the values and frees everything; s is empty after. */
void secret_set_clear(struct secret_set *s);
/* The binding whose placeholder is exactly p[0..len), or NULL. */
const struct secret_binding *secret_set_find_placeholder(const struct secret_set *s, const char *p,
                                                         size_t len);
/* Whether host (a DNS name, any case, without a trailing dot) is one of b's hosts: an exact match,
 * or "*.example.org" matching any name that ends in ".example.org" (not "example.org" itself). */
bool secret_binding_allows_host(const struct secret_binding *b, const char *host);

#endif
