/*
 * process_image.c: the overlay root of a process Sandbox on an imported image (process_image.h).
 */
#include "drivers/process_image.h"
#include "image_user.h"
#include "images/image_cache.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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
 * an open descriptor for MOUNT_ATTR_IDMAP; -1 with a reason. A short-lived child makes the
 * namespace (the worker's threads must stay where they are) and waits on a pipe while its maps
 * are written. */
static int idmap_userns(uid_t image_uid, gid_t image_gid, uid_t sandbox_uid, gid_t sandbox_gid,
                        char *err, size_t errlen)
{
    int hold[2];
    if (pipe2(hold, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    /* The raw system call: like fork(), and nothing but system calls in the child. */
    pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, 0);
    if (pid == 0) {
        char b;
        close(hold[1]);
        ssize_t ignored = read(hold[0], &b, 1); /* until the parent closes its end */
        (void)ignored;
        _exit(0);
    }
    close(hold[0]);
    int fd = -1;
    if (pid < 0) {
        snprintf(err, errlen, "clone a user namespace: %s", strerror(errno));
        close(hold[1]);
        return -1;
    }
    char path[64], map[256];
    const struct {
        const char *file;
        unsigned inner, outer;
    } maps[] = {{"uid_map", image_uid, sandbox_uid}, {"gid_map", image_gid, sandbox_gid}};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < 2; i++) {
        snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, maps[i].file);
        int n = swap_map(map, sizeof map, maps[i].inner, maps[i].outer);
        int mfd = open(path, O_WRONLY | O_CLOEXEC);
        if (mfd < 0 || write(mfd, map, (size_t)n) != n) {
            snprintf(err, errlen, "write %s: %s", path, strerror(errno));
            rc = -1;
        }
        if (mfd >= 0)
            close(mfd);
    }
    if (rc == 0) {
        snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            snprintf(err, errlen, "open %s: %s", path, strerror(errno));
    }
    close(hold[1]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    return fd;
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

/* Mounts the cache's tree idmapped (read-only, nosuid, nodev) at lower_mount. Returns 0, 1 when
 * the file system cannot idmap (the tree is then used as it is), -1 on another failure. */
static int mount_idmapped_lower(const struct process_image_plan *p)
{
    if (mkdir(p->lower_mount, 0755) != 0)
        return -1;
    int tree =
        (int)syscall(SYS_open_tree, AT_FDCWD, p->lower_src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0)
        return -1;
    struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
                                          MOUNT_ATTR_NODEV,
                              .userns_fd = (uint64_t)p->userns_fd};
    int rc = 0;
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
        rc = (errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS) ? 1 : -1;
    else if (syscall(SYS_move_mount, tree, "", AT_FDCWD, p->lower_mount, MOVE_MOUNT_F_EMPTY_PATH) !=
             0)
        rc = -1;
    close(tree);
    return rc;
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
    const char *options = p->plain_overlay_options;
    if (p->userns_fd >= 0) {
        int idmapped = mount_idmapped_lower(p);
        if (idmapped < 0)
            return "mount the image's tree idmapped";
        if (idmapped == 0)
            options = p->overlay_options;
    }
    if (mount("overlay", p->root, "overlay", MS_NOSUID | MS_NODEV, options) != 0)
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
