#!/bin/sh
# tools/fuzz.sh (`tools/sbx fuzz`): builds the libFuzzer targets in their own clang build tree
# (-DSBX_FUZZ=ON; the normal build uses gcc) and runs each for a while from its seed corpus.
#
#   tools/fuzz.sh [--time SECONDS] [--build-dir DIR] [--build-only] [TARGET...]
#
# --time: seconds per target (default 300). Targets: json_bodies route_query auth_header
# idempotency_key agent_channel agent_relay egress_policy dns_wire secret_proxy_http (default: all). Exit 77 when
# clang-14 or its libFuzzer runtime is missing, non-zero when a target finds a crash, leak or sanitizer report (the
# reproducer is printed; rerun it with `<build-dir>/tests/fuzz_<target> <file>`).
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build="$src/build-fuzz"
seconds=300
build_only=0
while [ $# -gt 0 ]; do
    case "$1" in
    --time) seconds=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "fuzz: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
targets=${*:-json_bodies route_query auth_header idempotency_key agent_channel agent_relay egress_policy dns_wire secret_proxy_http}

cc=$(command -v clang-14 || command -v clang || true)
if [ -z "$cc" ]; then
    echo "SKIP: clang is not installed (apt-get install clang-14 libclang-rt-14-dev)"
    exit 77
fi
if ! "$cc" -print-file-name=libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
    [ ! -f "$("$cc" -print-file-name=libclang_rt.fuzzer-x86_64.a)" ] &&
    ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
    echo "SKIP: the libFuzzer runtime is missing (apt-get install libclang-rt-14-dev)"
    exit 77
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
    # clang does not know gcc's -Wno-format-truncation: tolerate unknown warning options.
    cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Debug \
        -DCMAKE_C_FLAGS=-Wno-unknown-warning-option -DSBX_SANITIZE=ON -DSBX_FUZZ=ON >/dev/null
fi
# One build of every target, so that make runs their compiles and links side by side.
fuzz_targets=
for t in $targets; do fuzz_targets="$fuzz_targets fuzz_$t"; done
# shellcheck disable=SC2086 # one word per target
cmake --build "$build" -j2 --target $fuzz_targets
[ "$build_only" = 1 ] && exit 0

failed=0
for t in $targets; do
    echo "== fuzz_$t for ${seconds}s"
    "$src/tests/fuzz/run_fuzz.sh" "$build/tests/fuzz_$t" "$src/tests/fuzz/corpus/$t" "$seconds" ||
        failed=1
done
exit $failed
