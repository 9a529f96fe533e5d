/*
 * jail.c: create, attach a Workspace to, and remove per-Sandbox jail directories (see jail.h).
 */
#include "fs.h"
#include "host/host_tag.h"
#include "host/jail.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* Ids come from id_new() ("sbx_" + base32), but a path component is only built from a safe one. */
static bool safe_component(const char *s)
{
    if (!s[0] || strcmp(s, ".") == 0 || strcmp(s, "..") == 0 || strlen(s) > 64)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-'))
            return false;
    return true;
}

/* <chroot_base>/<driver>/<name> when every part is safe and it fits with room for "/workspace". */
static int jail_path_named(const char *chroot_base, const char *driver, const char *name, char *out,
                           size_t outlen)
{
    if (!safe_component(driver) || !safe_component(name) || chroot_base[0] != '/')
        return -1;
    int n = snprintf(out, outlen, "%s/%s/%s", chroot_base, driver, name);
    return n > 0 && (size_t)n < outlen - 16 ? 0 : -1;
}

int jail_path(const char *chroot_base, const char *driver, const char *sandbox_id, char *out,
              size_t outlen)
{
    char name[128];
    if (host_tag_name(sandbox_id, name, sizeof name) != 0)
        return -1;
    return jail_path_named(chroot_base, driver, name, out, outlen);
}

bool jail_path_is(const char *chroot_base, const char *driver, const char *sandbox_id,
                  const char *jail_dir)
{
    char expected[1024];
    if (jail_path(chroot_base, driver, sandbox_id, expected, sizeof expected) == 0 &&
        strcmp(expected, jail_dir) == 0)
        return true;
    /* A jail made before jails were tagged with the installation. */
    return jail_path_named(chroot_base, driver, sandbox_id, expected, sizeof expected) == 0 &&
           strcmp(expected, jail_dir) == 0;
}

void jail_root_path(const char *jail_dir, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/root", jail_dir);
}

void jail_slot_path(const char *jail_dir, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/workspace", jail_dir);
}

/* Unmounts everything stacked on path (lazily, so a busy mount cannot stop it); EINVAL means
 * nothing is mounted there any more. */
static void unmount_all(const char *path)
{
    for (int i = 0; i < 16; i++)
        if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) != 0)
            break;
}

int jail_create(const char *jail_dir, bool shared_slot, char *err, size_t errlen)
{
    char root[1100], slot[1100];
    jail_root_path(jail_dir, root, sizeof root);
    jail_slot_path(jail_dir, slot, sizeof slot);
    if (fs_mkdir_p(jail_dir, 0711) != 0 || mkdir(root, 0755) != 0 || mkdir(slot, 0755) != 0) {
        snprintf(err, errlen, "create jail %s: %s", jail_dir, strerror(errno));
        return -1;
    }
    if (!shared_slot)
        return 0;
    /* A self bind makes the slot its own mount; private first so it starts a new peer group
     * instead of joining its parent's, then shared so later mounts on it propagate into the
     * Sandbox (whose copy is a slave: nothing propagates back). */
    if (mount(slot, slot, NULL, MS_BIND, NULL) != 0 ||
        mount(NULL, slot, NULL, MS_PRIVATE, NULL) != 0 ||
        mount(NULL, slot, NULL, MS_SHARED, NULL) != 0) {
        snprintf(err, errlen, "make %s a shared mount point: %s", slot, strerror(errno));
        umount2(slot, MNT_DETACH);
        return -1;
    }
    return 0;
}

int jail_attach_workspace(const char *jail_dir, const char *host_dir, char *err, size_t errlen)
{
    char slot[1100];
    struct stat st;
    jail_slot_path(jail_dir, slot, sizeof slot);
    if (stat(host_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "workspace %s is not a directory", host_dir);
        return -1;
    }
    if (mount(host_dir, slot, NULL, MS_BIND, NULL) != 0) {
        snprintf(err, errlen, "bind %s on %s: %s", host_dir, slot, strerror(errno));
        return -1;
    }
    return 0;
}

int jail_remove(const char *jail_dir, char *err, size_t errlen)
{
    char root[1100], slot[1100];
    jail_root_path(jail_dir, root, sizeof root);
    jail_slot_path(jail_dir, slot, sizeof slot);
    /* The Workspace bind and the slot's self bind (the root has mounts only in the Sandbox's own
     * namespace, but a half-made jail may differ). */
    unmount_all(slot);
    unmount_all(root);
    const char *dirs[] = {slot, root, jail_dir};
    for (size_t i = 0; i < 3; i++) {
        if (rmdir(dirs[i]) != 0 && errno != ENOENT) {
            snprintf(err, errlen, "remove %s: %s", dirs[i], strerror(errno));
            return -1;
        }
    }
    return 0;
}

int jail_remove_tree(const char *jail_dir, char *err, size_t errlen)
{
    if (fs_remove_tree(jail_dir) != 0) {
        snprintf(err, errlen, "remove %s: %s", jail_dir, strerror(errno));
        return -1;
    }
    return 0;
}

int jail_sweep(const char *chroot_base, const char *driver,
               int (*remove)(const char *jail_dir, char *err, size_t errlen),
               bool (*is_live)(const char *sandbox_id, void *arg), void *arg, size_t *removed)
{
    char dir[1024], (*names)[128] = NULL;
    size_t count = 0, cap = 0;
    *removed = 0;
    if (!safe_component(driver) || chroot_base[0] != '/')
        return -1;
    snprintf(dir, sizeof dir, "%s/%s", chroot_base, driver);
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    /* Read whole before is_live() is asked: a jail made meanwhile has its Sandbox recorded. */
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char sandbox_id[128];
        if (host_tag_owner(e->d_name, sandbox_id, sizeof sandbox_id) != HOST_TAG_OURS)
            continue;
        if (count == cap) {
            void *grown = realloc(names, (cap = cap ? cap * 2 : 16) * sizeof *names);
            if (!grown)
                break;
            names = grown;
        }
        snprintf(names[count++], sizeof *names, "%s", e->d_name);
    }
    closedir(d);
    for (size_t i = 0; i < count; i++) {
        char sandbox_id[128], jail_dir[1200], err[512];
        host_tag_owner(names[i], sandbox_id, sizeof sandbox_id);
        if (is_live(sandbox_id, arg))
            continue;
        snprintf(jail_dir, sizeof jail_dir, "%s/%s", dir, names[i]);
        if (remove(jail_dir, err, sizeof err) != 0)
            log_warn("jail: leftover of %s: %s", sandbox_id, err);
        else
            (*removed)++;
    }
    free(names);
    return 0;
}
