#!/bin/sh
# check_config_reference.sh: the configuration reference in the README and in docs/operations.md
# must be exactly what the binary prints with --help, so the docs cannot drift from config.c.
#   check_config_reference.sh <sbx-gateway> <source dir>
set -eu
gateway=$1
src=$2
expected=$(mktemp)
trap 'rm -f "$expected"' EXIT
"$gateway" --help 2>&1 | sed -n '/^setting /,$p' >"$expected"
[ -s "$expected" ] || { echo "no reference table in $gateway --help" >&2; exit 1; }
status=0
for doc in README.md docs/operations.md; do
    if ! grep -qxF -f "$expected" "$src/$doc" ||
        [ "$(grep -cxF -f "$expected" "$src/$doc")" -ne "$(wc -l <"$expected")" ]; then
        echo "$doc: the configuration table differs from '$(basename "$gateway") --help':" >&2
        grep -vxF -f "$src/$doc" "$expected" | sed 's/^/  missing: /' >&2 || true
        status=1
    fi
done
[ $status -eq 0 ] && echo "configuration reference matches --help ($(wc -l <"$expected") lines)"
exit $status
