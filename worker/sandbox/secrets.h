/*
 * secrets.h: a Sandbox's App secrets (docs/secrets.md) as the worker holds them while the Sandbox
 * serves: opened from the store at each activation into sb->secrets (common/secret_set.h: the
 * values and a fresh placeholder each), named to the agent by their placeholders in the start
 * line's env, wiped when the Sandbox ends; and the lookup the egress proxy uses to find the set of
 * the Sandbox a connection comes from.
 */
#ifndef SBX_SANDBOX_SECRETS_H
#define SBX_SANDBOX_SECRETS_H

#include "secret_set.h"
#include "worker.h"

#include <jansson.h>
#include <netinet/in.h>
#include <stddef.h>

struct sandbox;

/* Fills sb->secrets with the App's secrets (emptied first): each value unsealed with the
 * worker's key (w->secrets) and given a placeholder new to this Sandbox. An App without secrets
 * leaves it empty. -1 with the reason (a value that does not open: another key, or a changed
 * row): the Sandbox must not serve then. */
int sandbox_secrets_load(struct sandbox *sb, const char *app_id, char *err, size_t errlen);

/* Wipes and frees sb->secrets (the Sandbox ends). */
void sandbox_secrets_clear(struct sandbox *sb);

/* For a Sandbox with secrets: sets each secret's name to its placeholder in env (the start line's
 * "K=V" array, replacing any K already there), and, when the installation CA is known, the CA
 * bundle variables (secret_rules.h) to the bundle; adds that bundle's entry to files (the start
 * line's "files" array). Nothing for a Sandbox without secrets. -1: out of memory. */
int sandbox_secrets_start_line(const struct sandbox *sb, json_t *env, json_t *files);

/* The lookup the egress proxy is given (a pointer to this function and the worker as ctx): the
 * Sandbox of this worker whose address (its end of its link, sb->rt.net_address) is peer and that
 * serves a Session (activating, idle or busy). 0 with its id and App id copied out and *set its
 * secrets (possibly empty: n == 0); -1 when none. Call it on the worker's event loop thread only:
 * *set stays valid until control returns to the loop (the Sandbox may end then), so a caller
 * that needs a value longer copies it. */
typedef int (*sandbox_secrets_lookup_fn)(void *ctx, struct in_addr peer,
                                         char sandbox_id[STORE_ID_LEN], char app_id[STORE_ID_LEN],
                                         const struct secret_set **set);
int sandbox_secrets_lookup(void *worker, struct in_addr peer, char sandbox_id[STORE_ID_LEN],
                           char app_id[STORE_ID_LEN], const struct secret_set **set);

#endif
