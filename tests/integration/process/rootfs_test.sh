#!/bin/sh
# rootfs_test.sh: tools/build-rootfs makes the tree the process driver expects, and the same inputs
# give the same content hash (it is recorded as each Sandbox's image_hash).
#   rootfs_test.sh BUILD_ROOTFS SBX_AGENT SBX_ECHO_AGENT
set -eu
build=$1
agent=$2
echo_agent=$3
work=$(mktemp -d /tmp/sbx-rootfs-test-XXXXXX)
trap 'rm -rf "$work"' EXIT

"$build" "$work/a" "$agent" "$echo_agent"
"$build" "$work/b" "$agent" "$echo_agent" 4242 4343

fail() {
    echo "FAIL: $*" >&2
    exit 1
}
[ -x "$work/a/usr/bin/sbx-agent" ] || fail "no /usr/bin/sbx-agent"
[ -x "$work/a/usr/bin/sbx-echo-agent" ] || fail "no /usr/bin/sbx-echo-agent"
[ "$(readlink "$work/a/bin/sh")" = /bin/busybox ] || fail "/bin/sh is not busybox"
for d in workspace tmp proc dev; do
    [ -d "$work/a/$d" ] || fail "no /$d"
    [ -z "$(ls -A "$work/a/$d")" ] || fail "/$d is not empty"
done
[ "$(stat -c %a "$work/a/tmp")" = 1777 ] || fail "/tmp is not 1777"
grep -q '^sandbox:x:65534:65534:' "$work/a/etc/passwd" || fail "no default sandbox user"
grep -q '^sandbox:x:4242:4343:' "$work/b/etc/passwd" || fail "uid/gid arguments ignored"
grep -Eq '^sha256:[0-9a-f]{64}$' "$work/a.sha256" || fail "bad hash file: $(cat "$work/a.sha256")"

# Reproducible: a rebuild gives the same hash; any change of content changes it.
first=$(cat "$work/a.sha256")
"$build" "$work/a" "$agent" "$echo_agent"
[ "$(cat "$work/a.sha256")" = "$first" ] || fail "rebuild changed the hash"
[ "$(cat "$work/b.sha256")" != "$first" ] || fail "a different passwd gave the same hash"
[ ! -e "$work/a.tmp" ] || fail "temporary tree left behind"
echo "ok: $first"
