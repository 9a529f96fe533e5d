/*
 * process_image.c: the overlay root of a process Sandbox on an imported image (process_image.h).
 */
#include "drivers/process_image.h"
#include "images/image_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* The mount points the driver mounts on inside the root (process.c), and /.sbx. */
static const char *const mount_point_names[5] = {"tmp", "proc", "dev", "workspace", ".sbx"};

/* The writable layer of a Sandbox without a memory size. */
#define DEFAULT_RW_MIB 256

/* overlayfs splits its options at ',' and its layer lists at ':'; such paths are refused rather
 * than escaped. */
static bool overlay_safe(const char *path)
{
    return strpbrk(path, ",:\\") == NULL;
}

int process_image_prepare(const struct sbx_config *cfg, const struct store_shape *shape,
                          const char *root, const char *default_rootfs,
                          struct process_image_plan *plan, char *image_hash, size_t hashlen,
                          char *err, size_t errlen)
{
    memset(plan, 0, sizeof *plan);
    if (image_is_default(shape->image))
        return 0;
    char dir[PATH_MAX], lower[PATH_MAX + 16];
    if (image_cache_dir(cfg, shape->image, dir, sizeof dir, err, errlen) != 0)
        return -1;
    if (!image_cache_ready(cfg, shape->image)) {
        snprintf(err, errlen, "image %s is not in this host's image cache (%s has no ready marker)",
                 shape->image, dir);
        return -1;
    }
    snprintf(lower, sizeof lower, "%s/rootfs", dir);
    struct stat st;
    if (lstat(lower, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "image %s: %s is not a directory", shape->image, lower);
        return -1;
    }
    if (!overlay_safe(lower) || !overlay_safe(root)) {
        snprintf(err, errlen,
                 "the image cache %s or jail %s holds ',', ':' or '\\', which overlayfs "
                 "cannot take",
                 lower, root);
        return -1;
    }
    snprintf(plan->agent, sizeof plan->agent, "%s/usr/bin/sbx-agent", default_rootfs);
    if (access(plan->agent, X_OK) != 0) {
        snprintf(err, errlen, "no sbx-agent at %s for the image's Sandbox", plan->agent);
        return -1;
    }
    plan->enabled = true;
    snprintf(plan->root, sizeof plan->root, "%s", root);
    int64_t mib = shape->mem_size_mib > 0 ? shape->mem_size_mib : DEFAULT_RW_MIB;
    snprintf(plan->rw_options, sizeof plan->rw_options, "size=%lldm,mode=0700", (long long)mib);
    snprintf(plan->upper, sizeof plan->upper, "%s/upper", root);
    snprintf(plan->work, sizeof plan->work, "%s/work", root);
    snprintf(plan->overlay_options, sizeof plan->overlay_options,
             "lowerdir=%s,upperdir=%s,workdir=%s", lower, plan->upper, plan->work);
    snprintf(plan->sbx_dir, sizeof plan->sbx_dir, "%s/.sbx", root);
    snprintf(plan->sbx_agent, sizeof plan->sbx_agent, "%s/.sbx/sbx-agent", root);
    for (size_t i = 0; i < 5; i++)
        snprintf(plan->mount_points[i], sizeof plan->mount_points[i], "%s/%s", root,
                 mount_point_names[i]);
    snprintf(image_hash, hashlen, "%s", shape->image);
    return 0;
}

/* Makes path a real directory in the overlay. Whatever the image has there instead (a symlink,
 * perhaps to a host path, or a file) is removed in the upper layer only. */
static int ensure_directory(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return 0;
        if (unlink(path) != 0)
            return -1;
    } else if (errno != ENOENT) {
        return -1;
    }
    return mkdir(path, 0755);
}

const char *process_image_mount(const struct process_image_plan *p, bool chown_root,
                                uid_t owner_uid, gid_t owner_gid)
{
    /* The writable layer first, on the root's own mount point; the overlay then covers it and
     * keeps its layers alive after the old root is detached. */
    if (mount("sbx-rw", p->root, "tmpfs", MS_NOSUID | MS_NODEV, p->rw_options) != 0)
        return "mount the image's writable layer";
    if (mkdir(p->upper, 0755) != 0 || mkdir(p->work, 0700) != 0)
        return "make the overlay's upper and work directories";
    if (chown_root && chown(p->upper, owner_uid, owner_gid) != 0)
        return "give the image's root to the Sandbox's uid";
    if (mount("overlay", p->root, "overlay", MS_NOSUID | MS_NODEV, p->overlay_options) != 0)
        return "mount the image's overlay";
    if (mount(NULL, p->root, NULL, MS_PRIVATE, NULL) != 0)
        return "make the image's root private";
    for (size_t i = 0; i < 5; i++)
        if (ensure_directory(p->mount_points[i]) != 0)
            return "make a mount point in the image";
    /* /.sbx: a read-only tmpfs holding sbx's agent, bound read-only from the built-in rootfs. */
    if (mount("sbx", p->sbx_dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=16k,mode=0755") != 0)
        return "mount /.sbx";
    int fd = open(p->sbx_agent, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0755);
    if (fd < 0)
        return "create /.sbx/sbx-agent";
    close(fd);
    if (mount(p->agent, p->sbx_agent, NULL, MS_BIND, NULL) != 0 ||
        mount(NULL, p->sbx_agent, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
              NULL) != 0)
        return "bind sbx-agent read-only";
    if (mount(NULL, p->sbx_dir, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0)
        return "remount /.sbx read-only";
    return NULL;
}
