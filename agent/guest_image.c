/*
 * guest_image.c: an App's image as the guest's root (guest_image.h).
 */
#include "guest_image.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MODULES_IMAGE "/etc/modules.image"
#define STAGE "/sbx-image"
#define LOWER STAGE "/lower"
#define RW STAGE "/rw"
#define ROOT STAGE "/root"
/* The block device appears once virtio_blk has probed it; TCG guests can be slow at that. */
#define DEVICE_WAIT_MS 10000

/* The mounts the initramfs made (guest_init.c) that the App's root takes over. */
static const char *const moved_mounts[] = {"/dev", "/proc", "/sys", "/run", "/tmp"};

static int fail(char *why, size_t whylen, const char *step, const char *what)
{
    snprintf(why, whylen, "%s %s: %s", step, what, strerror(errno));
    return -1;
}

/* Loads the image's modules (in dependency order, as tools/build-guest-image lists them);
 * built-in or already loaded is fine. */
static int load_image_modules(char *why, size_t whylen)
{
    FILE *f = fopen(MODULES_IMAGE, "re");
    if (!f)
        return 0; /* a kernel with them built in */
    char path[256];
    int rc = 0;
    while (rc == 0 && fgets(path, sizeof path, f)) {
        path[strcspn(path, "\n")] = '\0';
        if (!path[0])
            continue;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST))
            rc = fail(why, whylen, "load module", path);
        if (fd >= 0)
            close(fd);
    }
    fclose(f);
    return rc;
}

static int wait_for_device(const char *device, char *why, size_t whylen)
{
    for (int waited = 0; access(device, F_OK) != 0; waited += 20) {
        if (waited >= DEVICE_WAIT_MS)
            return fail(why, whylen, "wait for", device);
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Makes path a real directory in the overlay; an image's symlink or file there is removed in the
 * upper layer only, so that no mount follows a link the image chose. */
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

/* The device's name from sbx.image=<device> on the kernel command line, "" when absent. */
static void device_from_cmdline(char *device, size_t len)
{
    char cmdline[4096] = "";
    device[0] = '\0';
    int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, cmdline, sizeof cmdline - 1);
        cmdline[n > 0 ? n : 0] = '\0';
        close(fd);
    }
    char *save = NULL;
    for (char *tok = strtok_r(cmdline, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save))
        if (strncmp(tok, "sbx.image=/dev/", 15) == 0 && !strstr(tok, ".."))
            snprintf(device, len, "%s", tok + 10);
}

int guest_image_enter(bool *entered, char *why, size_t whylen)
{
    char device[128], path[256];
    *entered = false;
    device_from_cmdline(device, sizeof device);
    if (!device[0])
        return 0;
    if (load_image_modules(why, whylen) != 0 || wait_for_device(device, why, whylen) != 0)
        return -1;
    static const char *const dirs[] = {STAGE, LOWER, RW, ROOT};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
        if (mkdir(dirs[i], 0755) != 0 && errno != EEXIST)
            return fail(why, whylen, "mkdir", dirs[i]);
    if (mount(device, LOWER, "erofs", MS_RDONLY | MS_NODEV, NULL) != 0)
        return fail(why, whylen, "mount erofs from", device);
    /* No size: tmpfs takes half the guest's memory, which the VM's size already bounds. */
    if (mount("sbx-rw", RW, "tmpfs", MS_NODEV, "mode=0755") != 0)
        return fail(why, whylen, "mount", RW);
    if (mkdir(RW "/upper", 0755) != 0 || mkdir(RW "/work", 0700) != 0)
        return fail(why, whylen, "mkdir", RW "/upper and work");
    if (mount("overlay", ROOT, "overlay", MS_NODEV,
              "lowerdir=" LOWER ",upperdir=" RW "/upper,workdir=" RW "/work") != 0)
        return fail(why, whylen, "mount the overlay on", ROOT);
    /* sbx's own files, never the image's: the initramfs, read-only. */
    if (ensure_directory(ROOT GUEST_IMAGE_SBX_DIR) != 0 ||
        mount("/", ROOT GUEST_IMAGE_SBX_DIR, NULL, MS_BIND, NULL) != 0 ||
        mount(NULL, ROOT GUEST_IMAGE_SBX_DIR, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NODEV,
              NULL) != 0)
        return fail(why, whylen, "bind the initramfs at", GUEST_IMAGE_SBX_DIR);
    if (ensure_directory(ROOT "/workspace") != 0)
        return fail(why, whylen, "mkdir", "/workspace");
    for (size_t i = 0; i < sizeof moved_mounts / sizeof *moved_mounts; i++) {
        snprintf(path, sizeof path, ROOT "%s", moved_mounts[i]);
        if (ensure_directory(path) != 0 || mount(moved_mounts[i], path, NULL, MS_MOVE, NULL) != 0)
            return fail(why, whylen, "move the mount", moved_mounts[i]);
    }
    /* switch_root: the overlay becomes "/" (the initramfs cannot be pivoted away from). */
    if (chdir(ROOT) != 0 || mount(".", "/", NULL, MS_MOVE, NULL) != 0 || chroot(".") != 0 ||
        chdir("/") != 0)
        return fail(why, whylen, "switch the root to", ROOT);
    *entered = true;
    return 0;
}
