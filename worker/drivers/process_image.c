/*
 * process_image.c: the overlay root of a process Sandbox on an imported image (process_image.h).
 */
#include "drivers/process_image.h"
#include "host/userns_map.h"
#include "image_user.h"
#include "images/image_cache.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
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

/* The image's User (config.json's config.User; "" is root), resolved inside the cached tree. */
static int image_user_of(const char *dir, const char *lower, struct image_user *user, char *err,
                         size_t errlen)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t jerr;
    json_t *config = json_load_file(path, 0, &jerr);
    if (!config) {
        snprintf(err, errlen, "image config %s: %s", path, jerr.text);
        return -1;
    }
    const char *spec =
        json_string_value(json_object_get(json_object_get(config, "config"), "User"));
    char user_spec[256];
    snprintf(user_spec, sizeof user_spec, "%s", spec && spec[0] ? spec : "0");
    json_decref(config);
    int root_fd = open(lower, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) {
        snprintf(err, errlen, "open %s: %s", lower, strerror(errno));
        return -1;
    }
    int rc = image_user_resolve(user_spec, root_fd, user, err, errlen);
    close(root_fd);
    return rc;
}

/* Writes an id map that swaps image_id and sandbox_id and leaves every other id as it is: the image
 * user's files appear as the Sandbox's, the Sandbox's id (should the image use it) as the image
 * user's, and everything else keeps its owner, so overlayfs can copy up any directory (an id
 * missing from the map would make copy-up fail with EOVERFLOW). Returns the length. */
static int swap_map(char *out, size_t len, unsigned image_id, unsigned sandbox_id)
{
    const unsigned long long end = 4294967295ull; /* (uid_t)-1 is no id */
    if (image_id == sandbox_id)
        return snprintf(out, len, "0 0 %llu\n", end);
    unsigned long long a = image_id < sandbox_id ? image_id : sandbox_id;
    unsigned long long b = image_id < sandbox_id ? sandbox_id : image_id;
    int n = 0;
    if (a > 0)
        n += snprintf(out + n, len - (size_t)n, "0 0 %llu\n", a);
    n += snprintf(out + n, len - (size_t)n, "%llu %llu 1\n", a, b);
    if (b - a > 1)
        n += snprintf(out + n, len - (size_t)n, "%llu %llu %llu\n", a + 1, a + 1, b - a - 1);
    n += snprintf(out + n, len - (size_t)n, "%llu %llu 1\n", b, a);
    if (b + 1 < end)
        n += snprintf(out + n, len - (size_t)n, "%llu %llu %llu\n", b + 1, b + 1, end - b - 1);
    return n;
}

/* A user namespace whose maps swap the image user's uid and gid with the Sandbox's (swap_map), as
 * an open descriptor for MOUNT_ATTR_IDMAP; -1 with a reason. */
static int idmap_userns(uid_t image_uid, gid_t image_gid, uid_t sandbox_uid, gid_t sandbox_gid,
                        char *err, size_t errlen)
{
    char uid_map[256], gid_map[256];
    swap_map(uid_map, sizeof uid_map, image_uid, sandbox_uid);
    swap_map(gid_map, sizeof gid_map, image_gid, sandbox_gid);
    return userns_map_open(uid_map, gid_map, err, errlen);
}

void process_image_release(struct process_image_plan *plan)
{
    if (plan->userns_fd >= 0)
        close(plan->userns_fd);
    plan->userns_fd = -1;
}

int process_image_prepare(const struct sbx_config *cfg, const struct store_shape *shape,
                          const char *root, const char *default_rootfs, bool map_ids,
                          uid_t sandbox_uid, gid_t sandbox_gid, struct process_image_plan *plan,
                          char *image_hash, size_t hashlen, char *err, size_t errlen)
{
    memset(plan, 0, sizeof *plan);
    plan->userns_fd = -1;
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
    snprintf(plan->plain_overlay_options, sizeof plan->plain_overlay_options,
             "lowerdir=%s,upperdir=%s,workdir=%s", lower, plan->upper, plan->work);
    snprintf(plan->overlay_options, sizeof plan->overlay_options, "%s",
             plan->plain_overlay_options);
    if (map_ids) {
        struct image_user user;
        if (image_user_of(dir, lower, &user, err, errlen) != 0)
            return -1;
        plan->userns_fd = idmap_userns(user.uid, user.gid, sandbox_uid, sandbox_gid, err, errlen);
        if (plan->userns_fd < 0)
            return -1;
        snprintf(plan->lower_src, sizeof plan->lower_src, "%s", lower);
        snprintf(plan->lower_mount, sizeof plan->lower_mount, "%s/lower", root);
        snprintf(plan->overlay_options, sizeof plan->overlay_options,
                 "lowerdir=%s,upperdir=%s,workdir=%s", plan->lower_mount, plan->upper, plan->work);
    }
    snprintf(plan->sbx_dir, sizeof plan->sbx_dir, "%s/.sbx", root);
    snprintf(plan->sbx_agent, sizeof plan->sbx_agent, "%s/.sbx/sbx-agent", root);
    for (size_t i = 0; i < 5; i++)
        snprintf(plan->mount_points[i], sizeof plan->mount_points[i], "%s/%s", root,
                 mount_point_names[i]);
    snprintf(image_hash, hashlen, "%s", shape->image);
    return 0;
}
