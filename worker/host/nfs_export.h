/*
 * nfs_export.h: sbx's own NFS server (nfs-ganesha, VFS backend, NFSv4 only) and the per-Sandbox
 * exports through which microVM Sandboxes mount their Workspace (docs/workspaces.md).
 *
 * sbx starts and configures ganesha itself; everything lives under <data_dir>/run/ganesha/:
 *   ganesha.conf        generated: the server settings, then every export below, inlined
 *   exports/<tag>.export one EXPORT block per Sandbox with an attached Workspace, <tag> being
 *                       "<installation>-<sandboxId>" (host_tag.h; the block's comment names both):
 *                       Path = the Workspace directory, Pseudo = /sbx/<sandboxId>, Access_Type =
 *                       None for everyone and RW only in a CLIENT block naming the Sandbox's
 *                       address, All_Squash to sandbox_uid:sandbox_gid (the Workspace's owner)
 *   ganesha.pid, ganesha.log, recovery/, lock (flock: worker processes and threads take turns)
 * The export files are the state: reconciliation removes those of Sandboxes that no longer run.
 * Changes reach the running server by rewriting ganesha.conf and SIGHUP (ganesha rereads its
 * exports and logs "Reread exports complete", which the caller waits for): there is no system
 * D-Bus on these hosts for ganesha's AddExport/RemoveExport.
 * Functions return 0, or -1 with a human-readable reason in err; all are thread-safe.
 */
#ifndef SBX_NFS_EXPORT_H
#define SBX_NFS_EXPORT_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NFS_EXPORT_PSEUDO_ROOT "/sbx" /* a Sandbox's export is /sbx/<sandboxId> */

/* Exports dir (Workspace, host path) to client_addr alone, as export export_id (1..65535,
 * unique among live Sandboxes: the driver passes its network slot + 1), starting ganesha first
 * if it is not running. Returns once ganesha serves the export. pseudo_out receives the path the
 * client mounts ("/sbx/<sandboxId>"). Replaces an earlier export of the same Sandbox. */
int nfs_export_add(const struct sbx_config *cfg, const char *sandbox_id, const char *client_addr,
                   const char *dir, uint16_t export_id, char *pseudo_out, size_t pseudo_len,
                   char *err, size_t errlen);

/* Removes the Sandbox's export; nothing to remove is not an error (and touches nothing). */
int nfs_export_remove(const struct sbx_config *cfg, const char *sandbox_id, char *err,
                      size_t errlen);

/* True if the Sandbox has an export file (for tests and inspection). */
bool nfs_export_exists(const struct sbx_config *cfg, const char *sandbox_id);

/* Reconciliation: removes the exports of every Sandbox of this installation (or untagged, from an
 * older sbx of this data directory) for which is_live(id) is false.
 * *removed (may be NULL): how many. */
int nfs_export_reconcile(const struct sbx_config *cfg,
                         bool (*is_live)(const char *sandbox_id, void *arg), void *arg,
                         size_t *removed, char *err, size_t errlen);

/* Stops the ganesha this data_dir started (tests, `sbx down`); not running is not an error. */
int nfs_export_stop(const struct sbx_config *cfg, char *err, size_t errlen);

#endif
