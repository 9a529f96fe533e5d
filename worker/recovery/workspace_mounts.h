/*
 * workspace_mounts.h: the workers' side of removing a deleted Workspace's filesystem
 * (common/workspace_fs.h) when the gateway could not (it runs without root under systemd).
 */
#ifndef SBX_WORKSPACE_MOUNTS_H
#define SBX_WORKSPACE_MOUNTS_H

#include "worker.h"

/* How many polls (poll_ms) apart the mount table is looked at. */
#define WORKSPACE_MOUNTS_EVERY_POLLS 10

/* Every WORKSPACE_MOUNTS_EVERY_POLLS calls: for each Workspace filesystem mounted on this host
 * (<data_dir>/workspaces/<appId>/<workspaceId> with its .img beside it) whose Workspace the store
 * no longer has, unmounts it (lazily), removes the image and the directory. */
void workspace_mounts_reconcile(struct worker *w);

#endif
