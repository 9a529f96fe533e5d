#!/usr/bin/env bash
# tests/images/build-test-images.sh: builds the test image of the Images tests (and of the drivers'
# image boot tests) from Debian packages, once, cached in OUTDIR.
#
#   tests/images/build-test-images.sh OUTDIR
#
# The image is a real Debian 12 userspace with python3 and a Python agent, in the two archive
# formats users' tools write:
#
#   OUTDIR/layer1.tar       layer 1: `mmdebstrap --variant=essential --include=python3-minimal,
#                           libpython3.11-stdlib bookworm` (python3-minimal alone has no json
#                           module; from the host's apt sources; without /usr/share/doc, man,
#                           locale, info), as root, so owners, modes and device nodes are those
#                           of a real Debian tree
#   OUTDIR/layer2.tar       layer 2: /opt/agent/py-agent.py (0755, the agent), a symlink
#                           /opt/agent/agent -> py-agent.py, a hard link /opt/agent/py-agent.link,
#                           /opt/agent/owned (0640, owner 1234:1234) and the whiteout
#                           etc/.wh.issue.net, which deletes layer 1's /etc/issue.net
#   OUTDIR/config.json      the image config: Cmd ["/usr/bin/python3","/opt/agent/py-agent.py"],
#                           Env (PATH, SBX_TEST_IMAGE=py), WorkingDir /opt/agent
#   OUTDIR/py.docker.tar    docker-archive (manifest.json, <config hex>.json, <diff id>/layer.tar),
#                           what `docker save` writes
#   OUTDIR/py.oci.tar       the same image as an OCI image layout archive, converted by
#                           `skopeo copy docker-archive:... oci-archive:...`
#   OUTDIR/rootfs/          the expected result of applying both layers (layer 1 without its
#                           device nodes, then layer 2 with the whiteout applied), to compare with
#   OUTDIR/digest.docker    "sha256:<hex>" of the config blob in py.docker.tar
#   OUTDIR/digest.oci       "sha256:<hex>" of the config blob in py.oci.tar
#
# The layout above is stable: other tests read it. Nothing is rebuilt while OUTDIR/.stamp matches
# this script and py-agent.py (layer 1, the slow part, is kept while its own stamp matches). A
# lock on OUTDIR/.lock makes concurrent callers wait for one build.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)

step() { printf 'build-test-images: %s\n' "$*" >&2; }
die() {
    printf 'build-test-images: error: %s\n' "$*" >&2
    exit 1
}

for tool in mmdebstrap skopeo tar sha256sum jq flock; do
    command -v "$tool" >/dev/null || die "$tool is required"
done
[ "$(id -u)" = 0 ] || die "must run as root (layer 1 keeps Debian's owners and device nodes)"

exec 9>"$out/.lock"
flock 9

# SOURCE_DATE_EPOCH makes mmdebstrap's and tar's timestamps fixed.
export SOURCE_DATE_EPOCH=1700000000
# Documentation, manual pages and translations are left out: they only make the tests slower.
layer1_args=(--variant=essential --include=python3-minimal,libpython3.11-stdlib --mode=root
    --format=tar
    --dpkgopt=path-exclude=/usr/share/doc/* --dpkgopt=path-exclude=/usr/share/man/*
    --dpkgopt=path-exclude=/usr/share/locale/* --dpkgopt=path-exclude=/usr/share/info/* bookworm)
layer1_key=$(printf '%s\n' "${layer1_args[@]}" | sha256sum | cut -d' ' -f1)
key=$(cat "$0" "$here/py-agent.py" | sha256sum | cut -d' ' -f1)

if [ "$(cat "$out/.stamp" 2>/dev/null)" = "$key" ] && [ -f "$out/py.oci.tar" ] &&
    [ -f "$out/py.docker.tar" ] && [ -d "$out/rootfs" ]; then
    step "up to date in $out"
    exit 0
fi
rm -f "$out/.stamp"

sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
[ -f "$sources" ] || die "no apt sources on this host to build layer 1 from"

if [ "$(cat "$out/.layer1.stamp" 2>/dev/null)" != "$layer1_key" ] || [ ! -f "$out/layer1.tar" ]; then
    step "layer 1: mmdebstrap ${layer1_args[*]} (Debian packages from $sources)"
    rm -rf "$out/layer1.tar" "$out/layer1.tmp.tar" "$out/.layer1.stamp"
    mmdebstrap --quiet "${layer1_args[@]}" "$out/layer1.tmp.tar" "$sources" >&2 ||
        die "mmdebstrap failed"
    mv "$out/layer1.tmp.tar" "$out/layer1.tar"
    printf '%s\n' "$layer1_key" >"$out/.layer1.stamp"
else
    step "layer 1: using cached $out/layer1.tar"
fi
tar -tf "$out/layer1.tar" | grep -x './etc/issue.net' >/dev/null || die "layer 1 has no ./etc/issue.net"

work=$out/work
rm -rf "$work"
mkdir -p "$work/layer2/opt/agent" "$work/layer2/etc"
step "layer 2: the Python agent and a whiteout"
install -m 0755 "$here/py-agent.py" "$work/layer2/opt/agent/py-agent.py"
ln -s py-agent.py "$work/layer2/opt/agent/agent"
ln "$work/layer2/opt/agent/py-agent.py" "$work/layer2/opt/agent/py-agent.link"
printf 'owned by 1234:1234, mode 0640\n' >"$work/layer2/opt/agent/owned"
chown 1234:1234 "$work/layer2/opt/agent/owned"
chmod 0640 "$work/layer2/opt/agent/owned"
: >"$work/layer2/etc/.wh.issue.net"
chmod 0755 "$work/layer2/opt" "$work/layer2/opt/agent" "$work/layer2/etc"
touch -h -d @"$SOURCE_DATE_EPOCH" "$work/layer2/etc/.wh.issue.net" "$work/layer2/opt/agent"/* \
    "$work/layer2/opt/agent" "$work/layer2/opt" "$work/layer2/etc"
(cd "$work/layer2" && tar --sort=name --numeric-owner --format=pax --pax-option=delete=atime,delete=ctime \
    --mtime=@"$SOURCE_DATE_EPOCH" -cf "$out/layer2.tar" etc opt)

diff1=$(sha256sum "$out/layer1.tar" | cut -d' ' -f1)
diff2=$(sha256sum "$out/layer2.tar" | cut -d' ' -f1)

jq -cn --arg d1 "sha256:$diff1" --arg d2 "sha256:$diff2" '{
    architecture: "amd64", os: "linux", created: "2023-11-14T22:13:20Z",
    config: {
        Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SBX_TEST_IMAGE=py"],
        Cmd: ["/usr/bin/python3", "/opt/agent/py-agent.py"],
        WorkingDir: "/opt/agent"
    },
    rootfs: {type: "layers", diff_ids: [$d1, $d2]},
    history: [
        {created: "2023-11-14T22:13:20Z", created_by: "mmdebstrap --variant=essential --include=python3-minimal,libpython3.11-stdlib bookworm"},
        {created: "2023-11-14T22:13:20Z", created_by: "add /opt/agent, delete /etc/issue.net"}
    ]
}' | tr -d '\n' >"$out/config.json"
config_hex=$(sha256sum "$out/config.json" | cut -d' ' -f1)

step "docker-archive: $out/py.docker.tar (config sha256:$config_hex)"
mkdir -p "$work/docker/$diff1" "$work/docker/$diff2"
cp "$out/layer1.tar" "$work/docker/$diff1/layer.tar"
cp "$out/layer2.tar" "$work/docker/$diff2/layer.tar"
cp "$out/config.json" "$work/docker/$config_hex.json"
jq -cn --arg c "$config_hex.json" --arg l1 "$diff1/layer.tar" --arg l2 "$diff2/layer.tar" \
    '[{Config: $c, RepoTags: ["sbx-test/py:latest"], Layers: [$l1, $l2]}]' >"$work/docker/manifest.json"
(cd "$work/docker" && tar --sort=name --numeric-owner --owner=0 --group=0 --mtime=@"$SOURCE_DATE_EPOCH" \
    -cf "$out/py.docker.tar.tmp" manifest.json "$config_hex.json" "$diff1" "$diff2")
mv "$out/py.docker.tar.tmp" "$out/py.docker.tar"
printf 'sha256:%s\n' "$config_hex" >"$out/digest.docker"

step "oci-archive: $out/py.oci.tar (skopeo copy)"
rm -f "$out/py.oci.tar" "$out/py.oci.tar.tmp"
skopeo --insecure-policy copy --quiet "docker-archive:$out/py.docker.tar" \
    "oci-archive:$out/py.oci.tar.tmp:sbx-test/py:latest" >&2 || die "skopeo copy failed"
mv "$out/py.oci.tar.tmp" "$out/py.oci.tar"
mkdir -p "$work/oci"
tar -xf "$out/py.oci.tar" -C "$work/oci"
manifest=$(jq -r '.manifests[0].digest' "$work/oci/index.json")
jq -r '.config.digest' "$work/oci/blobs/${manifest/://}" >"$out/digest.oci"

step "rootfs: the expected tree in $out/rootfs"
rm -rf "$out/rootfs"
mkdir -p "$out/rootfs"
tar -xpf "$out/layer1.tar" -C "$out/rootfs" --numeric-owner --exclude='./dev/*'
rm -f "$out/rootfs/etc/issue.net"
tar -xpf "$out/layer2.tar" -C "$out/rootfs" --numeric-owner --exclude='*/.wh.*'

rm -rf "$work"
printf '%s\n' "$key" >"$out/.stamp"
step "done: $(cat "$out/digest.docker") (docker), $(cat "$out/digest.oci") (oci)"
