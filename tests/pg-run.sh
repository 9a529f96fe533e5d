#!/usr/bin/env bash
# pg-run.sh: runs a command beside a throwaway PostgreSQL cluster of its own, so that tests of the
# PostgreSQL store never touch (or need) the system's cluster.
#
#   tests/pg-run.sh COMMAND [ARGS...]   initdb a cluster in a fresh temp dir, start it on a free
#                                       loopback port and a unix socket in that dir, create the
#                                       role and database `sbx`, run COMMAND with the variables
#                                       below, then stop the cluster and remove it (also when the
#                                       command fails, or this script is interrupted or killed).
#                                       Exits with COMMAND's status (128+N if a signal N ended it).
#   tests/pg-run.sh --createdb [NAME]   inside a running fixture: create a fresh, empty database
#                                       owned by `sbx` (NAME, default t_<random>) and print its URL.
#   tests/pg-run.sh --dropdb NAME       inside a running fixture: drop that database.
#   tests/pg-run.sh --shared-start DIR  start a cluster as above, leave it running and write its
#                                       variables to DIR/env; it is stopped by --shared-stop DIR,
#                                       or once this script's parent (ctest) is gone.
#   tests/pg-run.sh --shared-stop DIR   stop that cluster and remove it.
#
# Run inside a running fixture (SBX_TEST_PG_ADMIN_URL set), the first form starts no cluster: it
# gives COMMAND a fresh database of the existing one and drops it afterwards. So it does with
# SBX_TEST_PG_SHARED=DIR while the cluster of --shared-start DIR runs: ctest starts one for the
# PostgreSQL tests that leave the cluster alone (tests/CMakeLists.txt), instead of an initdb and
# a server start per test.
#
# COMMAND sees:
#   SBX_TEST_PG_URL        postgres://sbx@127.0.0.1:PORT/sbx (role sbx: owner of sbx, CREATEDB)
#   SBX_TEST_PG_SOCKET_URL the same database over the unix socket (works from other network
#                          namespaces, e.g. under tests/in-netns.sh)
#   SBX_TEST_PG_ADMIN_URL  postgres://postgres@127.0.0.1:PORT/postgres (superuser)
#   SBX_TEST_PG_HOST, SBX_TEST_PG_PORT, SBX_TEST_PG_SOCKET_DIR, SBX_TEST_PG_BIN (initdb, pg_ctl,
#   psql, pg_dump...), SBX_TEST_PG_DATA (the data directory; a test may stop/start the cluster
#   with "$SBX_TEST_PG_BIN/pg_ctl" -D "$SBX_TEST_PG_DATA", as the user that owns it)
# Authentication is trust, on loopback and the socket only. fsync and synchronous_commit stay on:
# durability tests depend on a commit being on disk when it returns.
set -euo pipefail

find_pg_bin() {
    local d
    for d in "${SBX_TEST_PG_BIN:-}" /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
        if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/psql" ]; then
            echo "$d"
            return 0
        fi
    done
    echo "pg-run.sh: no PostgreSQL server found (install Debian's postgresql package)" >&2
    return 1
}

# psql against the fixture's admin URL: one statement, no psqlrc, stop on the first error.
admin_psql() {
    "$(find_pg_bin)/psql" -X -q -v ON_ERROR_STOP=1 -d "$SBX_TEST_PG_ADMIN_URL" "$@"
}

# The fixture's URL with its database replaced by $1.
url_with_db() {
    local base=$1 db=$2
    echo "${base%/*}/$db"
}

create_db() {
    local name=${1:-t_$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')}
    [[ $name =~ ^[a-z_][a-z0-9_]*$ ]] || {
        echo "pg-run.sh: bad database name \"$name\"" >&2
        return 2
    }
    admin_psql -c "CREATE DATABASE $name OWNER sbx" >/dev/null
    url_with_db "$SBX_TEST_PG_URL" "$name"
}

drop_db() {
    [[ $1 =~ ^[a-z_][a-z0-9_]*$ ]] || return 2
    admin_psql -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null
}

need_fixture() {
    if [ -z "${SBX_TEST_PG_ADMIN_URL:-}" ] || [ -z "${SBX_TEST_PG_URL:-}" ]; then
        echo "pg-run.sh: $1 needs a running fixture (run under tests/pg-run.sh)" >&2
        exit 2
    fi
}

# Runs "$@" as the clusters' owner: initdb refuses to run as root, so as root they belong to
# postgres.
if [ "$(id -u)" -eq 0 ]; then
    as_owner() { runuser -u postgres -- "$@"; }
    owner=postgres
else
    as_owner() { "$@"; }
    owner=$(id -un)
fi

# Runs "$@" as a child, forwarding INT/TERM/HUP to it, and returns its status.
run_child() {
    local child rc
    "$@" &
    child=$!
    # shellcheck disable=SC2064
    trap "kill -TERM $child 2>/dev/null || true" INT TERM HUP
    while true; do
        rc=0
        wait "$child" || rc=$?
        # wait returns early (status > 128) when a trapped signal arrives; the child still runs.
        if ! kill -0 "$child" 2>/dev/null; then
            break
        fi
    done
    trap - INT TERM HUP
    return "$rc"
}

case "${1:-}" in
--createdb)
    need_fixture --createdb
    create_db "${2:-}"
    exit
    ;;
--dropdb)
    need_fixture --dropdb
    drop_db "${2:?--dropdb NAME}"
    exit
    ;;
--shared-stop)
    shared=${2:?--shared-stop DIR}
    if [ -f "$shared/env" ]; then
        # shellcheck disable=SC1091
        . "$shared/env"
        rm -f "$shared/env"
        as_owner "$SBX_TEST_PG_BIN/pg_ctl" -D "$SBX_TEST_PG_DATA" -m immediate -w -t 60 stop \
            >/dev/null
        rm -rf "${SBX_TEST_PG_DATA%/data}"
    fi
    exit
    ;;
"" | -h | --help)
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
    [ -n "${1:-}" ]
    exit
    ;;
esac

shared=
if [ "${1:-}" = --shared-start ]; then
    shared=${2:?--shared-start DIR}
    mkdir -p "$shared"
    rm -f "$shared/env"
elif [ -n "${SBX_TEST_PG_SHARED:-}" ] && [ -z "${SBX_TEST_PG_ADMIN_URL:-}" ] &&
    [ -f "$SBX_TEST_PG_SHARED/env" ]; then
    # shellcheck disable=SC1091
    . "$SBX_TEST_PG_SHARED/env" # then nested in it, below (a cluster of our own if it is gone)
fi

# Nested: a fresh database in the running cluster, dropped afterwards.
if [ -z "$shared" ] && [ -n "${SBX_TEST_PG_ADMIN_URL:-}" ] && [ -n "${SBX_TEST_PG_URL:-}" ] &&
    admin_psql -c "SELECT 1" >/dev/null 2>&1; then
    db=$(create_db)
    name=${db##*/}
    trap 'drop_db "$name" || true' EXIT
    rc=0
    SBX_TEST_PG_URL=$db \
        SBX_TEST_PG_SOCKET_URL="postgres:///$name?host=$SBX_TEST_PG_SOCKET_DIR&port=$SBX_TEST_PG_PORT&user=sbx" \
        run_child "$@" || rc=$?
    exit "$rc"
fi

bin=$(find_pg_bin)
# /tmp, not $TMPDIR: the server runs as postgres, which must reach the directory; and the unix
# socket's path must stay short (108 bytes).
dir=$(mktemp -d /tmp/sbx-pg.XXXXXX)
chmod 755 "$dir"
mkdir "$dir/data" "$dir/sock"

if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$dir" "$dir/data" "$dir/sock"
fi

# Stops the cluster and removes it. The watchdog below does the same if this script is killed
# with SIGKILL, so a crashed test leaves no server behind.
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT

# Watchdog: if this script disappears without cleaning up (SIGKILL, e.g. a test timeout), stop
# the cluster and remove it. In its own session, so a kill of our process group misses it. A
# shared cluster outlives this script: its watchdog waits for our parent (ctest) instead.
watch_pid=$$
[ -z "$shared" ] || watch_pid=$PPID
# shellcheck disable=SC2016 # expanded by the watchdog's own shell
setsid bash -c '
    while kill -0 "$1" 2>/dev/null; do sleep 1; done
    if [ -d "$3/data" ]; then
        if [ "$(id -u)" -eq 0 ]; then
            runuser -u postgres -- "$2/pg_ctl" -D "$3/data" -m immediate -w -t 30 stop
        else
            "$2/pg_ctl" -D "$3/data" -m immediate -w -t 30 stop
        fi
        rm -rf "$3"
    fi' pg-run-watchdog "$watch_pid" "$bin" "$dir" </dev/null >/dev/null 2>&1 &

# Fast: initdb's own fsync of the fresh cluster is skipped (-N); if the machine crashed now the
# cluster would be thrown away anyway. The server's fsync stays on.
if ! as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 -N \
    >"$dir/initdb.log" 2>&1; then
    cat "$dir/initdb.log" >&2
    echo "pg-run.sh: initdb failed" >&2
    exit 1
fi
# A shared cluster serves up to three tests at a time (ctest -j3), each with its gateways and
# workers.
max_connections=200
[ -z "$shared" ] || max_connections=600
cat >>"$dir/data/postgresql.conf" <<EOF
# pg-run.sh: a throwaway test cluster
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir/sock'
max_connections = $max_connections
shared_buffers = 32MB
fsync = on
synchronous_commit = on
full_page_writes = on
logging_collector = off
log_min_messages = warning
log_line_prefix = '%m [%p] %d '
EOF
cat >"$dir/data/pg_hba.conf" <<EOF
local all all              trust
host  all all 127.0.0.1/32 trust
EOF

# A free port: pick one nobody listens on, and try another if someone takes it first (another
# fixture starting at the same time).
started=
for _ in 1 2 3 4 5 6 7 8 9 10; do
    port=$((20000 + $(od -An -tu2 -N2 /dev/urandom | tr -d ' ') % 40000))
    if ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
        continue
    fi
    if as_owner "$bin/pg_ctl" -D "$dir/data" -o "-p $port" -l "$dir/server.log" -w -t 60 \
        start >/dev/null 2>&1; then
        started=1
        break
    fi
    # Port taken meanwhile (the log says so): try another; any other failure is fatal.
    if ! grep -q "could not bind\|could not create any TCP/IP sockets" "$dir/server.log" \
        2>/dev/null; then
        break
    fi
    : >"$dir/server.log"
done
if [ -z "$started" ]; then
    cat "$dir/server.log" >&2 2>/dev/null || true
    cat "$dir/initdb.log" >&2 2>/dev/null || true
    echo "pg-run.sh: could not start PostgreSQL" >&2
    exit 1
fi

export SBX_TEST_PG_BIN=$bin
export SBX_TEST_PG_DATA=$dir/data
export SBX_TEST_PG_HOST=127.0.0.1
export SBX_TEST_PG_PORT=$port
export SBX_TEST_PG_SOCKET_DIR=$dir/sock
export SBX_TEST_PG_ADMIN_URL="postgres://postgres@127.0.0.1:$port/postgres"
export SBX_TEST_PG_URL="postgres://sbx@127.0.0.1:$port/sbx"
export SBX_TEST_PG_SOCKET_URL="postgres:///sbx?host=$dir/sock&port=$port&user=sbx"
export SBX_TEST_PG_OWNER=$owner

admin_psql -c "CREATE ROLE sbx LOGIN CREATEDB" -c "CREATE DATABASE sbx OWNER sbx" >/dev/null

if [ -n "$shared" ]; then
    for v in SBX_TEST_PG_BIN SBX_TEST_PG_DATA SBX_TEST_PG_HOST SBX_TEST_PG_PORT \
        SBX_TEST_PG_SOCKET_DIR SBX_TEST_PG_ADMIN_URL SBX_TEST_PG_URL SBX_TEST_PG_SOCKET_URL \
        SBX_TEST_PG_OWNER; do
        printf 'export %s=%q\n' "$v" "${!v}"
    done >"$shared/env.tmp"
    mv "$shared/env.tmp" "$shared/env"
    trap - EXIT # the cluster stays, for --shared-stop or the watchdog
    exit 0
fi

rc=0
run_child "$@" || rc=$?
exit "$rc"
