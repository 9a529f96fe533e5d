/*
 * workspace_mounts.c: removes the filesystems of deleted Workspaces that are still mounted on this
 * host (see workspace_mounts.h). The mount table is the authority on what is mounted, the store on
 * what still exists; a Workspace is only deleted once no live Session names it, so nothing serves
 * from it any more (a Sandbox still ending keeps its own bind until it is gone: lazy unmount).
 * Hidden state: the poll counter.
 */
#include "recovery/workspace_mounts.h"
#include "store_workspaces.h"

#include "fs.h"
#include "log.h"
#include "workspace_fs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned polls;

/* The Workspace id when mount_point is <root>/<appId>/<workspaceId>, else NULL. */
static const char *workspace_of(const char *mount_point, const char *root)
{
    size_t n = strlen(root);
    if (strncmp(mount_point, root, n) != 0 || mount_point[n] != '/')
        return NULL;
    const char *app = mount_point + n + 1, *slash = strchr(app, '/');
    if (!slash || slash == app || !slash[1] || strchr(slash + 1, '/'))
        return NULL;
    return slash + 1;
}

void workspace_mounts_reconcile(struct worker *w)
{
    if (polls++ % WORKSPACE_MOUNTS_EVERY_POLLS != 0)
        return;
    char data_dir[PATH_MAX], root[PATH_MAX + 16];
    if (!realpath(w->cfg.data_dir, data_dir))
        return;
    snprintf(root, sizeof root, "%s/workspaces", data_dir);
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        /* "<id> <parent> <major:minor> <root> <mount point> ..."; a point with an escaped
         * character (\040) is not one of ours. */
        char mount_point[PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", mount_point) != 1 || strchr(mount_point, '\\'))
            continue;
        const char *ws_id = workspace_of(mount_point, root);
        char image[PATH_MAX + 8], err[256];
        snprintf(image, sizeof image, "%s.img", mount_point);
        if (!ws_id || access(image, F_OK) != 0)
            continue;
        struct store_workspace ws;
        if (store_workspace_get(w->st, "", ws_id, &ws) != STORE_NOT_FOUND)
            continue;
        if (workspace_fs_remove(mount_point, err, sizeof err) != 0) {
            log_warn("worker: deleted Workspace %s: %s", ws_id, err);
            continue;
        }
        if (fs_remove_tree(mount_point) != 0)
            log_warn("worker: deleted Workspace %s: cannot remove %s: %s", ws_id, mount_point,
                     strerror(errno));
        else
            log_info("worker: removed the filesystem of deleted Workspace %s", ws_id);
    }
    fclose(f);
}
