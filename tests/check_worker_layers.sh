#!/bin/sh
# check_worker_layers.sh: every #include "..." between worker/'s folders goes down the worker's
# layers (docs/worker.md, "Where it is in the code"), so calls go one way and news comes back up
# only through the callbacks loop.c sets. Prints each edge the graph does not have.
#   check_worker_layers.sh <worker dir>
#
# The layers, top first; a file may include its own folder's headers and any lower layer's:
#   top        loop.c, main.c, process_init.c and the loop's job glue beside them (worker/*.[ch])
#   delivery/  recovery/   (side by side: neither includes the other)
#   sandbox/
#   worker.h   the worker's shared state: for the layers above, never below
#   drivers/
#   images/
#   host/
# Headers that are not the worker's (common/, agent/, the system's) are not layers.
set -eu
dir=${1:?usage: check_worker_layers.sh <worker dir>}
cd "$dir"

rank() {
    case "$1" in
    top) echo 0 ;;
    delivery | recovery) echo 10 ;;
    sandbox) echo 20 ;;
    worker.h) echo 25 ;;
    drivers) echo 30 ;;
    images) echo 40 ;;
    host) echo 50 ;;
    *) echo "" ;;
    esac
}

# The layer a file of the worker is in ("." paths as find prints them).
layer_of() {
    case "$1" in
    ./worker.h) echo worker.h ;;
    ./*/*) p=${1#./}; echo "${p%%/*}" ;;
    *) echo top ;;
    esac
}

status=0
edges=0
for f in $(find . -name '*.[ch]' | sort); do
    from=$(layer_of "$f")
    if [ -z "$(rank "$from")" ]; then
        echo "worker/${f#./}: folder $from is not in the layer graph (add it here and in docs/worker.md)"
        status=1
        continue
    fi
    folder=$(dirname "$f")
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
        case "$inc" in
        */*)
            top_dir=${inc%%/*}
            [ -d "./$top_dir" ] || continue # common/ or agent/ headers by a path of their own
            to=$(layer_of "./$inc")
            ;;
        *)
            if [ "$folder" != . ] && [ -f "$folder/$inc" ]; then
                to=$from
            elif [ -f "./$inc" ]; then
                to=$(layer_of "./$inc")
            else
                continue # common/, agent/
            fi
            ;;
        esac
        edges=$((edges + 1))
        [ "$to" = "$from" ] && continue
        rf=$(rank "$from")
        rt=$(rank "$to")
        if [ -z "$rt" ] || [ "$rf" -ge "$rt" ]; then
            echo "worker/${f#./}: $from -> $to (#include \"$inc\") is not an edge of the layer graph"
            status=1
        fi
    done
done
[ "$edges" -gt 0 ] || { echo "no #include between worker/'s files found in $dir" >&2; exit 1; }
exit $status
