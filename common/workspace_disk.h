/*
 * workspace_disk.h: how much the data filesystem can promise to Workspaces (docs/tenants.md).
 * A Workspace's image is sparse (workspace_fs.h): it takes blocks as its Sandboxes write, up to
 * its size. Sizes are promises, so a create is checked against what the filesystem could still
 * give them all: its free space, plus the blocks their images hold already (part of what was
 * promised), less the reserve kept for the store and everything else on that filesystem. The
 * store compares that budget with the sum of all Workspaces' sizes inside the create's
 * transaction (store_workspace_create_within).
 */
#ifndef SBX_WORKSPACE_DISK_H
#define SBX_WORKSPACE_DISK_H

#include <stddef.h>
#include <stdint.h>

/* The budget in MiB (never below 0) of the filesystem of <data_dir>/workspaces (of data_dir
 * until that exists): its free space for unprivileged users, plus the blocks the Workspace images
 * under it hold (<data_dir>/workspaces/<appId>/<workspaceId>.img), less reserve_mib. Returns 0,
 * or -1 with the reason in err. */
int workspace_disk_budget(const char *data_dir, int64_t reserve_mib, int64_t *budget_mib, char *err,
                          size_t errlen);

#endif
