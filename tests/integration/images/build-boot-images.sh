#!/usr/bin/env bash
# build-boot-images.sh: the images the boot tests run, placed in an image cache exactly as the
# importer leaves one (worker/images/image_cache.h): <OUT>/data/images/sha256/<hex>/{rootfs/,
# config.json,ready}, <hex> being the SHA-256 of config.json.
#
#   build-boot-images.sh OUT_DIR DEFAULT_ROOTFS ARCHIVES_DIR
#
#  - debian: Debian 12 (bookworm) with python3-minimal and its standard library (json): layer 1 of
#    the Images tests' archives (tests/images/build-test-images.sh ARCHIVES_DIR, which makes it
#    with mmdebstrap once and is a no-op when it is up to date), unpacked, plus /opt/agent/agent.py
#    (the Python agent of the tests). One mmdebstrap run serves both sets of tests;
#  - tiny: the built-in busybox rootfs (DEFAULT_ROOTFS) without sbx-agent and with an
#    /etc/os-release of its own, so that two Sandboxes of different images can tell theirs apart,
#    and a user of its own, app (1000), whose /home/app only app may enter: its config's User.
# Writes OUT_DIR/images.env (DATA_DIR, DEBIAN_DIGEST, TINY_DIGEST). Cached: nothing is rebuilt
# while OUT_DIR/images.env exists and this script, the agent and layer 1 are unchanged.
set -euo pipefail

if [ $# -ne 3 ]; then
    echo "usage: $0 OUT_DIR DEFAULT_ROOTFS ARCHIVES_DIR" >&2
    exit 2
fi
out=$(mkdir -p "$1" && cd "$1" && pwd)
default_rootfs=$2
archives=$3
here=$(cd "$(dirname "$0")" && pwd)
step() { printf 'build-boot-images: %s\n' "$*" >&2; }
die() {
    printf 'build-boot-images: error: %s\n' "$*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || die "needs root (the trees keep their owners, as the importer's do)"
[ -x "$default_rootfs/bin/busybox" ] || die "$default_rootfs has no busybox (build target rootfs)"
# Layer 1 first (cached, and locked against a concurrent build by build-test-images.sh itself).
"$here/../../images/build-test-images.sh" "$archives" || die "the test image archives failed"
layer1=$(cd "$archives" && pwd)/layer1.tar
stamp=$(cat "$0" "$here/agent.py" "$archives/.layer1.stamp" | sha256sum | cut -d' ' -f1)
if [ -f "$out/images.env" ] && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
    step "using the cached images in $out"
    exit 0
fi

rm -rf "$out/data" "$out/work" "$out/images.env"
mkdir -p "$out/work" "$out/data/images/sha256"

# place NAME TREE CONFIG_JSON -> prints the digest; moves TREE into the cache.
place() {
    local tree=$2 config=$3 hex dir
    hex=$(printf '%s' "$config" | sha256sum | cut -d' ' -f1)
    dir=$out/data/images/sha256/$hex
    mkdir -p "$dir"
    printf '%s' "$config" >"$dir/config.json"
    mv "$tree" "$dir/rootfs"
    : >"$dir/ready"
    step "$1: sha256:$hex ($(du -sh "$dir/rootfs" | cut -f1))"
    printf 'sha256:%s\n' "$hex"
}

step "debian: unpacking $layer1"
mkdir -p "$out/work/debian"
# As root, tar keeps the archive's owners, modes and device nodes, as mmdebstrap left them.
tar -C "$out/work/debian" --numeric-owner -xpf "$layer1" || die "unpacking $layer1 failed"
install -D -m 0755 "$here/agent.py" "$out/work/debian/opt/agent/agent.py"
debian_config='{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/bin:/usr/bin:/bin","AGENT_FLAVOUR=debian"],"Cmd":["python3","/opt/agent/agent.py"],"WorkingDir":"/opt/agent"},"rootfs":{"type":"layers","diff_ids":[]},"comment":"sbx boot test '"$stamp"'"}'
debian_digest=$(place debian "$out/work/debian" "$debian_config")

step "tiny: the built-in rootfs with an os-release of its own"
cp -a "$default_rootfs" "$out/work/tiny"
rm -f "$out/work/tiny/usr/bin/sbx-agent" "$out/work/tiny/etc/os-release"
printf 'ID=sbx-tiny\nNAME="sbx tiny test image"\n' >"$out/work/tiny/etc/os-release"
echo 'app:x:1000:1000:app:/home/app:/bin/sh' >>"$out/work/tiny/etc/passwd"
echo 'app:x:1000:' >>"$out/work/tiny/etc/group"
install -d -m 0700 -o 1000 -g 1000 "$out/work/tiny/home/app"
tiny_config='{"architecture":"amd64","os":"linux","config":{"Cmd":["/usr/bin/sbx-echo-agent"],"User":"app"},"rootfs":{"type":"layers","diff_ids":[]},"comment":"sbx boot test '"$stamp"'"}'
tiny_digest=$(place tiny "$out/work/tiny" "$tiny_config")

rm -rf "$out/work"
{
    echo "DATA_DIR=$out/data"
    echo "DEBIAN_DIGEST=$debian_digest"
    echo "TINY_DIGEST=$tiny_digest"
} >"$out/images.env"
echo "$stamp" >"$out/.stamp"
step "done: $out/images.env"
