#!/bin/sh
# tools/test-costs.sh: rewrites tests/test_costs.txt, the tests' ctest COST on a fresh build
# directory, from the costs ctest measured in a full run of the suite (tools/sbx test) in BUILD_DIR
# (default build-test): Testing/Temporary/CTestCostData.txt, "name runs average-seconds" per test.
#
#   tools/test-costs.sh [BUILD_DIR]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
data=${1:-$root/build-test}/Testing/Temporary/CTestCostData.txt
[ -f "$data" ] || {
    echo "test-costs: no $data (run tools/sbx test first)" >&2
    exit 1
}
out=$root/tests/test_costs.txt
{
    sed -n '1,/^# Refresh/p' "$out"
    # Up to the "---" line that starts the list of failed tests; under 1 s is left out.
    sed '/^---$/,$d' "$data" | awk '$3 >= 1 { printf "%d %s\n", $3 + 0.5, $1 }' | sort -k1,1nr -k2
} >"$out.tmp"
mv "$out.tmp" "$out"
echo "test-costs: $(grep -vc '^#' "$out") tests in $out"
