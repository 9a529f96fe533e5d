#!/bin/sh
# run_fuzz.sh: runs one libFuzzer target for a bounded time from its checked-in seed corpus.
# Usage: run_fuzz.sh <fuzz binary> <seed corpus dir> <seconds> [extra libFuzzer flags...]
# New inputs go to a scratch copy (the checked-in corpus stays small). Exit 0 when the run ended
# cleanly, 1 on a crash, leak or sanitizer report (the reproducer is
# kept under $SBX_FUZZ_ARTIFACTS, default /tmp/sbx-fuzz-artifacts), 77 when the binary is missing.
set -u
bin=$1 seeds=$2 seconds=$3
shift 3
if [ ! -x "$bin" ]; then
    echo "SKIP: $bin was not built (needs clang-14 and libclang-rt-14-dev; see tools/fuzz.sh)"
    exit 77
fi
name=$(basename "$bin")
artifacts=${SBX_FUZZ_ARTIFACTS:-/tmp/sbx-fuzz-artifacts}/$name
mkdir -p "$artifacts"
work=$(mktemp -d "/tmp/sbx-fuzz-$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$seeds"/. "$work"/ 2>/dev/null || true
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 -print_final_stats=1 \
    -error_exitcode=1 -timeout_exitcode=1 \
    -artifact_prefix="$artifacts/" "$@" "$work"
status=$?
if [ $status -ne 0 ]; then
    echo "FAIL: $name exited $status; reproducer(s) in $artifacts:"
    ls -l "$artifacts"
fi
exit $status
