/*
 * egress.c: the worker's side of per-App egress policies (egress.h): from the store's policy text
 * to firewall calls (host/firewall.h), for one Sandbox at activation and for all of an App's live
 * Sandboxes when an App's policy changed.
 *
 * When a live Sandbox's policy changes to none or an allowlist, the connections it opened before
 * are ended too (net_sandbox_drop_egress_flows, after the rules): the firewall accepts an
 * established flow before any policy rule, so one opened under the old policy would otherwise
 * keep flowing. Those to the host's side of its link (callback API, NFS) stay.
 *
 * Each Sandbox remembers the digest of the policy text applied to it (sb->egress_applied) and its
 * mode, so a poll that finds the same text does nothing and one that finds another mode moves the
 * Sandbox. Names in an allowlist open nothing here: they are for the DNS side; until a name is
 * resolved through sbx, a connection to its address is dropped like any other not on the list.
 */
#include "sandbox/egress.h"
#include "store_apps.h"

#include "egress_policy.h"
#include "host/firewall.h"
#include "host/links.h"
#include "log.h"
#include "sandbox/sandbox.h"

#include <nettle/base16.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void digest_of(const char *text, char out[65])
{
    struct sha256_ctx c;
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_init(&c);
    if (text)
        sha256_update(&c, strlen(text), (const uint8_t *)text);
    sha256_digest(&c, sizeof d, d);
    base16_encode_update(out, sizeof d, d);
    out[BASE16_ENCODE_LENGTH(SHA256_DIGEST_SIZE)] = '\0';
}

static enum fw_egress_mode fw_mode(enum egress_mode m)
{
    return m == EGRESS_NONE        ? FW_EGRESS_NONE
           : m == EGRESS_ALLOWLIST ? FW_EGRESS_ALLOWLIST
                                   : FW_EGRESS_PUBLIC;
}

/* The App's chain from the policy's address entries (one batch). */
static int apply_app_chain(const char *app_id, const struct egress_policy *p, char *err,
                           size_t errlen)
{
    struct fw_allow_net nets[EGRESS_POLICY_MAX_ALLOW];
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++)
        if (!p->allow[i].is_name)
            nets[n++] = (struct fw_allow_net){p->allow[i].net, p->allow[i].len, p->allow[i].port};
    return fw_app_policy_set(net_firewall(), app_id, nets, n, err, errlen);
}

static int move_sandbox(struct sandbox *sb, const char *app_id, enum egress_mode mode, char *err,
                        size_t errlen)
{
    struct net_link link;
    if (net_link_of_address(net_worker_pool(), sb->rt.sandbox_id, sb->rt.net_address, &link) < 0) {
        snprintf(err, errlen, "egress: %s is not a Sandbox address of the pool",
                 sb->rt.net_address);
        return -1;
    }
    struct fw_sandbox fsb = net_link_fw(&link);
    return fw_sandbox_set_egress(net_firewall(), &fsb, fw_mode(mode), app_id, err, errlen);
}

/* Ends the flows the Sandbox opened under its old policy (see the top of the file). */
static int drop_flows(struct sandbox *sb, char *err, size_t errlen)
{
    struct net_link link;
    if (net_link_of_address(net_worker_pool(), sb->rt.sandbox_id, sb->rt.net_address, &link) < 0) {
        snprintf(err, errlen, "egress: %s is not a Sandbox address of the pool",
                 sb->rt.net_address);
        return -1;
    }
    return net_sandbox_drop_egress_flows(&link, err, errlen);
}

bool sandbox_egress_current(const struct sandbox *sb, const char *network_json)
{
    char digest[65];
    if (!sb->egress_applied[0])
        return false;
    digest_of(network_json, digest);
    return strcmp(digest, sb->egress_applied) == 0;
}

/* Without the worker's network (not root) a Sandbox has loopback only: nothing to narrow. */
static bool has_network(const struct sandbox *sb)
{
    return net_firewall() && sb->rt.net_address[0];
}

int sandbox_egress_apply(struct sandbox *sb, const char *app_id, const char *network_json,
                         char *err, size_t errlen)
{
    struct egress_policy *p = malloc(sizeof *p);
    if (!p) {
        snprintf(err, errlen, "egress: out of memory");
        return -1;
    }
    int rc = egress_policy_parse_text(network_json, p, err, errlen);
    /* A Sandbox fresh from its boot (never under an App's policy: egress_applied "") is under the
     * public policy already, as fw_sandbox_add leaves it: for such an App nothing is to change,
     * and the warm path saves the firewall's two netlink round trips. */
    bool public_already = rc == 0 && !sb->egress_applied[0] && p->mode == EGRESS_PUBLIC;
    if (rc == 0 && has_network(sb) && !public_already) {
        if (p->mode == EGRESS_ALLOWLIST)
            rc = apply_app_chain(app_id, p, err, errlen);
        if (rc == 0)
            rc = move_sandbox(sb, app_id, p->mode, err, errlen);
    }
    if (rc == 0) {
        digest_of(network_json, sb->egress_applied);
        sb->egress_mode = (int)p->mode;
    }
    free(p);
    return rc;
}

static bool serving(const struct sandbox *sb)
{
    return sb->app_id[0] && sb->egress_applied[0] &&
           (sb->state == SB_ACTIVATING || sb->state == SB_IDLE || sb->state == SB_BUSY);
}

/* Applies app's current policy to this worker's Sandboxes of it that have another one. */
static void refresh_app(struct worker *w, const struct store_app *app)
{
    char digest[65], err[512];
    digest_of(app->network_json, digest);
    struct egress_policy *p = NULL;
    bool chain_done = false;
    for (struct sandbox *sb = w->sandboxes; sb; sb = sb->next) {
        if (!serving(sb) || strcmp(sb->app_id, app->id) != 0 ||
            strcmp(sb->egress_applied, digest) == 0)
            continue;
        int rc = 0;
        if (!p) {
            p = malloc(sizeof *p);
            if (!p)
                return; /* the next poll tries again */
            rc = egress_policy_parse_text(app->network_json, p, err, sizeof err);
        }
        if (rc == 0 && has_network(sb) && p->mode == EGRESS_ALLOWLIST && !chain_done) {
            rc = apply_app_chain(app->id, p, err, sizeof err);
            chain_done = rc == 0;
        }
        /* Same mode, other entries: the App's chain was all there was to change. */
        if (rc == 0 && has_network(sb) && sb->egress_mode != (int)p->mode)
            rc = move_sandbox(sb, app->id, p->mode, err, sizeof err);
        /* A change to public only widens; any other may narrow (entries removed, or fewer
         * allowed than before): what the new rules still allow is tracked again as it goes on. */
        if (rc == 0 && has_network(sb) && p->mode != EGRESS_PUBLIC)
            rc = drop_flows(sb, err, sizeof err);
        if (rc != 0) {
            log_error("egress: App %s's new policy cannot be applied to %s: %s; stopping it",
                      app->id, sb->rt.sandbox_id, err);
            sandbox_terminate(sb, "egress policy could not be applied", true);
            break; /* the list may have changed */
        }
        log_info("egress: %s now under App %s's %s policy", sb->rt.sandbox_id, app->id,
                 egress_mode_name(p->mode));
        memcpy(sb->egress_applied, digest, sizeof digest);
        sb->egress_mode = (int)p->mode;
    }
    free(p);
}

void sandbox_egress_refresh(struct worker *w)
{
    /* The distinct Apps this worker serves (collected first: refreshing may stop Sandboxes),
     * each read once per poll; beyond the array's room, the next polls take the rest. */
    char(*apps)[STORE_ID_LEN] = calloc(256, STORE_ID_LEN);
    size_t napps = 0;
    if (!apps)
        return;
    for (struct sandbox *sb = w->sandboxes; sb && napps < 256; sb = sb->next) {
        bool dup = !serving(sb);
        for (size_t i = 0; i < napps && !dup; i++)
            dup = strcmp(apps[i], sb->app_id) == 0;
        if (!dup)
            memcpy(apps[napps++], sb->app_id, STORE_ID_LEN);
    }
    for (size_t i = 0; i < napps; i++) {
        struct store_app app;
        if (store_app_get(w->st, apps[i], &app) != STORE_OK)
            continue; /* deleted, or the store is busy: the next poll */
        refresh_app(w, &app);
        store_app_clear(&app);
    }
    free(apps);
}
