#!/bin/sh
# check_doc_paths.sh: every repository path the docs name (in backticks or as a link target) that
# starts with one of the project's top folders must exist, so that a renamed or deleted file
# cannot leave the docs pointing at nothing. A trailing ":function" or "#anchor" is allowed, and
# so is the "[ch]" shorthand ("worker/sandbox/links.[ch]" names links.c and links.h).
#   check_doc_paths.sh <source dir>
set -eu
src=${1:?usage: check_doc_paths.sh <source dir>}
cd "$src"
tops='agent|callback|common|gateway|worker|tools|tests|docs|schema|migrations'
status=0
checked=0
for doc in README.md docs/*.md docs/decisions/*.md schema/README.md tests/README.md; do
    [ -f "$doc" ] || continue
    # Candidates: `...` spans and (...) link targets; relative links inside docs/ are resolved
    # against the page's own folder.
    for ref in $( (grep -o '`[^`]*`' "$doc" | tr -d '`' | tr ' ' '\n'
        grep -o '](\([^)]*\))' "$doc" | sed 's/^](//; s/)$//') |
        grep -E "^(\./)?($tops)/[][A-Za-z0-9_.@+/*:#-]*$" | sort -u); do
        path=${ref#./}
        path=${path%%#*}
        path=${path%%:*}
        path=${path%/}
        path=${path%.}
        path=${path%,}
        case "$path" in *'*'*|*'<'*|*'{'*|*NNNN*) continue ;; esac
        checked=$((checked + 1))
        # path:function must name a function (or any identifier) the file has.
        fn=
        case "$ref" in *:*) fn=${ref#*:} ;; esac
        case "$path" in
        *'[ch]')
            base=${path%'[ch]'}
            [ -e "${base}c" ] && [ -e "${base}h" ] && continue ;;
        *)
            if [ -f "$path" ] && [ -n "$fn" ] && echo "$fn" | grep -qE '^[A-Za-z_][A-Za-z0-9_]*$'; then
                grep -qw "$fn" "$path" && continue
                echo "$doc: names $ref, but $path has no $fn" >&2
                status=1
                continue
            fi
            [ -e "$path" ] && continue ;;
        esac
        echo "$doc: names $ref, which does not exist" >&2
        status=1
    done
    # Relative links from a page in docs/ (e.g. [worker](worker.md)) must exist beside it.
    case "$doc" in
    docs/*)
        dir=$(dirname "$doc")
        for ref in $(grep -o '](\([^)#:]*\)\(#[^)]*\)\?)' "$doc" | sed 's/^](//; s/)$//; s/#.*//' |
            grep -vE '^(https?|mailto)' | grep -E '\.(md|png|svg|c|h|sh|yaml)$' | sort -u); do
            checked=$((checked + 1))
            [ -e "$dir/$ref" ] && continue
            echo "$doc: links to $ref, which does not exist" >&2
            status=1
        done
        ;;
    esac
done
[ $status -eq 0 ] && echo "every path named in the docs exists ($checked checked)"
exit $status
