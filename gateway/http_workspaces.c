/*
 * http_workspaces.c: /v1/workspaces (App keys only): create (and its directory
 * <data_dir>/workspaces/<appId>/<workspaceId>, owned by the Sandbox uid:gid, mode 0770, with an
 * ext4 filesystem of sizeMib mounted on it: common/workspace_fs.h), list, get, delete (refused
 * while a live Session names it or a Sandbox that had it has not stopped; unmounts and removes the
 * filesystem, then the directory by directory fds, see fs.h).
 */
#include "app_quotas.h"
#include "fs.h"
#include "store_workspaces.h"
#include "gateway.h"
#include "json_input.h"
#include "log.h"
#include "render.h"
#include "reply.h"
#include "workspace_disk.h"
#include "workspace_fs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir that accepts an existing directory. */
static int mkdir_exist_ok(const char *path, mode_t mode)
{
    return mkdir(path, mode) == 0 || errno == EEXIST ? 0 : -1;
}

/* Creates the Workspace directory. Parents belong to root (0711: the Sandbox user may pass but
 * not list them); the directory itself to the Sandbox user, so the agent can write /workspace. */
static int workspace_mkdir(const struct gateway *gw, const struct store_workspace *w)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/workspaces", gw->cfg.data_dir);
    if (mkdir_exist_ok(path, 0711) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/workspaces/%s", gw->cfg.data_dir, w->app_id);
    if (mkdir_exist_ok(path, 0711) != 0)
        return -1;
    if (mkdir(w->path, 0770) != 0)
        return -1;
    if (chmod(w->path, 0770) != 0)
        return -1;
    if (chown(w->path, (uid_t)gw->cfg.sandbox_uid, (gid_t)gw->cfg.sandbox_gid) != 0 &&
        geteuid() == 0)
        return -1; /* not root (a developer's run): the directory stays the gateway user's */
    return 0;
}

enum MHD_Result http_workspace_create(struct request *r)
{
    static const char *const fields[] = {"name", "sizeMib", NULL};
    enum MHD_Result ret;
    struct input_error e;
    const char *name = NULL;
    int64_t size_mib = r->gw->cfg.workspace_size_mib;
    struct store_workspace w;
    char location[96];
    json_t *obj = request_json(r, fields, &ret);
    if (!obj)
        return ret;
    if (input_string(obj, "name", 1, 128, true, &name, NULL, &e) < 0 ||
        input_int(obj, "sizeMib", WORKSPACE_MIN_MIB, WORKSPACE_MAX_MIB, false, &size_mib, NULL,
                  &e) < 0) {
        json_decref(obj);
        return reply_input_error(r, &e);
    }
    char name_copy[STORE_NAME_LEN + 1];
    if (name)
        snprintf(name_copy, sizeof name_copy, "%s", name);
    name = name ? name_copy : NULL;
    json_decref(obj);
    if (size_mib > r->gw->cfg.workspace_max_mib)
        return reply_problem(r, PROBLEM_INVALID_VALUE, "sizeMib",
                             "sizeMib %lld is above this host's largest Workspace, %lld MiB "
                             "(workspace_max_mib)",
                             (long long)size_mib, (long long)r->gw->cfg.workspace_max_mib);
    /* The disk's budget is read before the transaction: the filesystem's free space moves with
     * every write anyway; what keeps two creates from both taking the last of it is the sum of
     * the promised sizes, which the store reads inside the transaction. */
    struct store_quotas q;
    char disk_err[256];
    app_quotas_init(&q, &r->gw->cfg);
    if (workspace_disk_budget(r->gw->cfg.data_dir, r->gw->cfg.disk_reserve_mib, &q.disk_budget_mib,
                              disk_err, sizeof disk_err) != 0) {
        log_emit(LOG_LEVEL_ERROR, r->request_id, "workspace: %s", disk_err);
        return reply_problem(r, PROBLEM_INTERNAL, NULL,
                             "cannot read the free space of the Workspaces' filesystem; the "
                             "operator's log has the details (request %s)",
                             r->request_id);
    }
    enum store_status s = store_workspace_create_within(r->gw->st, &r->ctx, r->app_id, name,
                                                        size_mib, r->gw->cfg.data_dir, &q, &w);
    if (s == STORE_OVER_QUOTA)
        return reply_over_quota(r, &q, q.hit == STORE_QUOTA_WORKSPACES ? 1 : size_mib,
                                q.hit == STORE_QUOTA_WORKSPACES ? NULL : "sizeMib");
    if (s != STORE_OK)
        return reply_store_error(r, s, "Workspace");
    if (workspace_mkdir(r->gw, &w) != 0) {
        int err = errno;
        /* Without its directory the Workspace is useless: take the row back. */
        store_workspace_delete(r->gw->st, &r->ctx, r->app_id, w.id, NULL);
        /* The host's path goes to the log, never to the caller. */
        log_emit(LOG_LEVEL_ERROR, r->request_id, "workspace %s: cannot create %s: %s", w.id, w.path,
                 strerror(err));
        return reply_problem(r, PROBLEM_INTERNAL, NULL,
                             "cannot create the Workspace's directory (%s); the operator's log "
                             "has the details (request %s)",
                             strerror(err), r->request_id);
    }
    /* Loop devices and mounts need root: without it (the systemd unit) the first worker to
     * attach the Workspace makes its filesystem. */
    char fs_err[256];
    if (geteuid() == 0 &&
        workspace_fs_ensure(w.path, size_mib, (uid_t)r->gw->cfg.sandbox_uid,
                            (gid_t)r->gw->cfg.sandbox_gid, fs_err, sizeof fs_err) != 0) {
        rmdir(w.path);
        store_workspace_delete(r->gw->st, &r->ctx, r->app_id, w.id, NULL);
        log_emit(LOG_LEVEL_ERROR, r->request_id, "workspace %s: cannot create its filesystem: %s",
                 w.id, fs_err);
        return reply_problem(r, PROBLEM_INTERNAL, NULL,
                             "cannot create the Workspace's filesystem; the operator's log has "
                             "the details (request %s)",
                             r->request_id);
    }
    snprintf(location, sizeof location, "/v1/workspaces/%s", w.id);
    return reply_json_header(r, 201, render_workspace(&w), "Location", location);
}

enum MHD_Result http_workspace_list(struct request *r)
{
    enum MHD_Result ret;
    size_t limit, n;
    const char *cursor;
    char next[STORE_CURSOR_LEN];
    struct store_workspace *items;
    if (!paging_params(r, &limit, &cursor, &ret))
        return ret;
    enum store_status s =
        store_workspace_list(r->gw->st, r->app_id, cursor, limit, &items, &n, next);
    if (s != STORE_OK)
        return reply_store_error(r, s, "Workspace list");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, render_workspace(&items[i]));
    free(items);
    return reply_json(r, 200, render_page(arr, next));
}

enum MHD_Result http_workspace_get(struct request *r)
{
    struct store_workspace w;
    enum store_status s = store_workspace_get(r->gw->st, r->app_id, r->params[0], &w);
    if (s != STORE_OK)
        return reply_store_error(r, s, "Workspace");
    return reply_json(r, 200, render_workspace(&w));
}

enum MHD_Result http_workspace_delete(struct request *r)
{
    struct store_workspace w;
    enum store_status s = store_workspace_delete(r->gw->st, &r->ctx, r->app_id, r->params[0], &w);
    if (s == STORE_CONFLICT)
        return reply_problem(r, PROBLEM_CONFLICT, NULL,
                             "the Workspace is attached to a live Session, or a Sandbox that "
                             "has it mounted has not stopped yet; delete the Session, wait for "
                             "its Sandbox to stop, then retry");
    if (s != STORE_OK)
        return reply_store_error(r, s, "Workspace");
    char fs_err[256];
    if (workspace_fs_remove(w.path, fs_err, sizeof fs_err) != 0)
        log_warn("workspace: %s", fs_err);
    /* By directory fds (fs.h): a Sandbox that had the Workspace may have planted symlinks in it,
     * and cannot steer the removal out of it. */
    if (fs_remove_tree(w.path) != 0)
        log_emit(LOG_LEVEL_WARN, r->request_id, "workspace %s: cannot remove %s: %s", w.id, w.path,
                 strerror(errno));
    return reply_empty(r, 204);
}
