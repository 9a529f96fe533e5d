#!/bin/sh
# guest_image_test.sh: the guest_image fixture. Builds the guest image (the guest-image target,
# incremental) and checks what the drivers rely on: the bzImage for qemu, the uncompressed kernel
# Firecracker on x86_64 boots (an ELF64 x86-64 executable), the initramfs (with the modules an App's
# image needs), and image.sha256 being the hash of exactly those three.
#
#   guest_image_test.sh BUILD_DIR
set -eu
build=$1
guest=$build/guest
fail() {
    echo "guest_image_test: FAIL: $*" >&2
    exit 1
}

cmake --build "$build" --target guest-image

for f in vmlinuz vmlinux initramfs.cpio.gz image.sha256; do
    [ -s "$guest/$f" ] || fail "$guest/$f is missing or empty"
done
[ "$(dd if="$guest/vmlinuz" bs=1 skip=514 count=4 status=none)" = HdrS ] ||
    fail "vmlinuz is not a bzImage (no HdrS at 0x202)"
# e_ident: \x7fELF, ELFCLASS64 (2), little endian (1); e_type ET_EXEC (2), e_machine EM_X86_64 (62).
ident=$(od -An -tx1 -N6 "$guest/vmlinux" | tr -d ' \n')
[ "$ident" = 7f454c460201 ] || fail "vmlinux is not a little-endian ELF64 (e_ident $ident)"
type_machine=$(od -An -tu2 -j 16 -N4 "$guest/vmlinux" | tr -s ' ')
[ "$type_machine" = " 2 62" ] ||
    fail "vmlinux is not an x86-64 executable (e_type, e_machine:$type_machine)"
# The uncompressed kernel is the bzImage's payload: larger than the bzImage that carries it.
[ "$(wc -c <"$guest/vmlinux")" -gt "$(wc -c <"$guest/vmlinuz")" ] ||
    fail "vmlinux is not larger than vmlinuz: not the decompressed payload"
want="sha256:$(cat "$guest/vmlinuz" "$guest/vmlinux" "$guest/initramfs.cpio.gz" | sha256sum | cut -d' ' -f1)"
[ "$(cat "$guest/image.sha256")" = "$want" ] ||
    fail "image.sha256 is $(cat "$guest/image.sha256"), the three files hash to $want"
# An App's image needs its block device, erofs and overlay in the guest (agent/guest_image.c):
# listed in etc/modules.image, each shipped in lib/modules.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
(cd "$scratch" && gzip -dc "$guest/initramfs.cpio.gz" | cpio --quiet -id etc/modules.image 'lib/modules/*')
[ -s "$scratch/etc/modules.image" ] || fail "the initramfs has no etc/modules.image"
for m in virtio_blk erofs overlay; do
    grep -qx "/lib/modules/$m.ko" "$scratch/etc/modules.image" ||
        fail "etc/modules.image does not load $m"
    [ -s "$scratch/lib/modules/$m.ko" ] || fail "the initramfs has no lib/modules/$m.ko"
done
echo "guest_image_test: vmlinuz, vmlinux (ELF64 x86-64 executable), initramfs, $want"
