/*
 * secrets.h: a Sandbox's App secrets (docs/secrets.md) as the worker holds them while the Sandbox
 * serves: opened from the store into sb->secrets (common/secret_set.h: the values and a fresh
 * placeholder each) at each activation, or at the start of a pre-started agent, and at once handed
 * to this worker's brokering proxy (sandbox/secret_broker.h), which finds them by the Sandbox's
 * address; named to the agent by their placeholders in the start line's env; detached and wiped
 * when the Sandbox ends.
 */
#ifndef SBX_SANDBOX_SECRETS_H
#define SBX_SANDBOX_SECRETS_H

#include "secret_set.h"
#include "worker.h"

#include <jansson.h>
#include <stddef.h>

struct sandbox;

/* Fills sb->secrets with the App's secrets (emptied first): each value unsealed with the
 * worker's key (w->secrets) and given a placeholder new to this Sandbox; then, for an App with
 * secrets, attaches the Sandbox to the proxy (its registry gets a copy of the set, the firewall
 * redirects its TCP 80/443). Call it after the App's egress policy is applied and before the start
 * line is sent. An App without secrets leaves it empty and unattached. -1 with the reason (a value
 * that does not open: another key, or a changed row; the proxy does not run or the firewall
 * refused): the Sandbox must not serve then. */
int sandbox_secrets_load(struct sandbox *sb, const char *app_id, char *err, size_t errlen);

/* Takes the Sandbox out of the proxy and wipes and frees sb->secrets (the Sandbox ends). */
void sandbox_secrets_clear(struct sandbox *sb);

/* For a Sandbox with secrets: sets each secret's name to its placeholder in env (the start line's
 * "K=V" array, replacing any K already there), and, when the installation CA is known, the CA
 * bundle variables (secret_rules.h: NODE_EXTRA_CA_CERTS to the CA alone, the others to the
 * bundle); adds that bundle's entry to files (the start line's "files" array, which holds the CA
 * at SANDBOX_CA_PATH then). Nothing for a Sandbox without secrets. -1: out of memory. */
int sandbox_secrets_start_line(const struct sandbox *sb, json_t *env, json_t *files);

#endif
