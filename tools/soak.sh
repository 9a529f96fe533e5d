#!/bin/sh
# tools/soak.sh (`tools/sbx soak`): a soak run, not part of CI. Starts sbx-gateway and sbx-worker
# from a build tree on a temporary data directory, drives mixed traffic for N minutes and prints
# each daemon's RSS and open file descriptors every 10 s; exits 1 when either keeps growing.
#
#   tools/soak.sh [--minutes N] [--workers N] [--clients N] [--build-dir DIR]
#
# Use a build without sanitizers for meaningful RSS (ASan's quarantine grows by design). The
# process driver needs root.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build="$src/build"
minutes=5 workers=1 clients=4
while [ $# -gt 0 ]; do
    case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "soak: unknown argument $1" >&2; exit 2 ;;
    esac
done
for bin in "$build/gateway/sbx-gateway" "$build/worker/sbx-worker"; do
    [ -x "$bin" ] || { echo "soak: $bin not built (cmake --build $build)" >&2; exit 2; }
done
command -v node >/dev/null || { echo "soak: node is required" >&2; exit 2; }
SOAK_MINUTES=$minutes SOAK_WORKERS=$workers SOAK_CONCURRENCY=$clients \
SOAK_GATEWAY_BIN="$build/gateway/sbx-gateway" SOAK_WORKER_BIN="$build/worker/sbx-worker" \
    exec node "$src/tools/soak/soak.mjs"
