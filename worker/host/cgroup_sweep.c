/*
 * cgroup_sweep.c: the start-up sweep of leftover Sandbox cgroups (cgroup.h). A Sandbox's cgroups
 * normally go with it (cgroup_remove) or with the reap of a dead worker's Sandboxes; this catches
 * what no live store record leads to (a remove that timed out, a worker killed between the two).
 * Only names tagged with this installation are judged (host_tag.h): another sbx on this host may
 * have live Sandboxes under the same <root>/sbx.
 */
#include "host/cgroup.h"
#include "host/host_tag.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Kills what is left in dir and removes it, waiting up to a second for the kernel to empty it. */
static bool remove_leftover(const char *dir)
{
    for (int waited = 0; waited <= 1000; waited += 10) {
        if (rmdir(dir) == 0 || errno == ENOENT)
            return true;
        if (errno != EBUSY)
            break;
        cgroup_kill_all(dir);
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    log_warn("cgroup: cannot remove leftover %s: %s", dir, strerror(errno));
    return false;
}

/* Sweeps one hierarchy's sbx directory; counts the Sandboxes whose cgroup went. The directory is
 * read whole before is_live() is first asked, so a Sandbox whose cgroup is made meanwhile is
 * already recorded in the store (it is, before it boots) when its liveness is read. */
static size_t sweep_dir(const char *sbx, bool (*is_live)(const char *, void *), void *arg)
{
    char(*names)[CGROUP_NAME_LEN] = NULL;
    size_t n = 0, count = 0, cap = 0;
    DIR *d = opendir(sbx);
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char sandbox_id[CGROUP_NAME_LEN];
        if (host_tag_owner(e->d_name, sandbox_id, sizeof sandbox_id) != HOST_TAG_OURS)
            continue;
        if (count == cap) {
            void *grown = realloc(names, (cap = cap ? cap * 2 : 16) * sizeof *names);
            if (!grown)
                break;
            names = grown;
        }
        snprintf(names[count++], CGROUP_NAME_LEN, "%s", e->d_name);
    }
    closedir(d);
    for (size_t i = 0; i < count; i++) {
        char sandbox_id[CGROUP_NAME_LEN], dir[1200];
        host_tag_owner(names[i], sandbox_id, sizeof sandbox_id);
        if (is_live(sandbox_id, arg))
            continue;
        snprintf(dir, sizeof dir, "%s/%s", sbx, names[i]);
        if (remove_leftover(dir)) {
            log_info("cgroup: removed leftover %s (its Sandbox no longer runs)", dir);
            n++;
        }
    }
    free(names);
    return n;
}

size_t cgroup_sweep(const struct cgroup_host *h, bool (*is_live)(const char *sandbox_id, void *arg),
                    void *arg)
{
    char sbx[600];
    size_t n = 0;
    if (h->v2_root[0]) {
        snprintf(sbx, sizeof sbx, "%s/sbx", h->v2_root);
        n = sweep_dir(sbx, is_live, arg);
    }
    /* The v1 twins (already "<root>/sbx"); counted only where there is no v2 directory. */
    const char *v1[] = {h->v1_memory_root, h->v1_pids_root, h->v1_cpu_root};
    for (size_t i = 0; i < sizeof v1 / sizeof *v1; i++) {
        if (!v1[i][0])
            continue;
        size_t k = sweep_dir(v1[i], is_live, arg);
        if (!h->v2_root[0] && k > n)
            n = k;
    }
    return n;
}
