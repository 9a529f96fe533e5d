/*
 * egress.h: an App's egress policy (its `network`, egress_policy.h) applied to the firewall state
 * of the Sandboxes that serve it, at activation and whenever the App's policy changes.
 */
#ifndef SBX_SANDBOX_EGRESS_H
#define SBX_SANDBOX_EGRESS_H

#include "worker.h"

#include <stddef.h>

struct sandbox;

/* Before the App's command starts in sb: puts sb under the App's policy (network_json, the
 * App's stored normal form). -1 with the reason: the Sandbox must not serve then (fail closed). */
/* Whether the App's policy network_json is the one applied to sb already (a pre-started
 * Sandbox got its App's policy at its start). */
bool sandbox_egress_current(const struct sandbox *sb, const char *network_json);
int sandbox_egress_apply(struct sandbox *sb, const char *app_id, const char *network_json,
                         char *err, size_t errlen);

/* On the worker's poll: reads the policy of every App this worker serves and applies what
 * changed to its live Sandboxes, without restarting them. An allowlist change is one firewall
 * batch per App whatever its number of Sandboxes; a mode change moves each Sandbox. A Sandbox
 * whose new policy cannot be applied is stopped. */
void sandbox_egress_refresh(struct worker *w);

#endif
