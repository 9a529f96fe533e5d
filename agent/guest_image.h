/*
 * guest_image.h: the App's image as a microVM guest's root (sbx.image=<block device>).
 *
 * The host attaches the digest's rootfs.erofs read-only (worker/images/image_erofs.h). The guest
 * init, before it starts sbx-agent: loads the modules of /etc/modules.image (block device, erofs,
 * overlay; only guests of an image pay for them), mounts the device read-only as the lower layer
 * of an overlay whose upper and work directories are on a tmpfs (the guest's memory bounds it),
 * binds the initramfs itself read-only at GUEST_IMAGE_SBX_DIR (sbx's agent, init, modules: never
 * the image's), moves /dev, /proc, /sys, /run and /tmp into the overlay and makes it the root.
 * Everything the App writes is in guest memory and vanishes with the VM.
 */
#ifndef SBX_GUEST_IMAGE_H
#define SBX_GUEST_IMAGE_H

#include <stdbool.h>
#include <stddef.h>

/* Where the initramfs is seen from inside an image's root. */
#define GUEST_IMAGE_SBX_DIR "/.sbx"

/* When the kernel command line names sbx.image=<device>, makes the image on it the root, as
 * above, and sets *entered. Returns 0 (also when there is no image), or -1 with a reason in why
 * (the guest then has no usable root: the init powers off). */
int guest_image_enter(bool *entered, char *why, size_t whylen);

#endif
