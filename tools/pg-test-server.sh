#!/usr/bin/env bash
# A throw-away PostgreSQL server for trying sessionlog and for its tests: a
# private cluster in a temporary folder, listening on a free loopback port and
# on a unix socket in that folder, trusted for local connections only.
#
#   tools/pg-test-server.sh start [DIR]   start one (or start DIR's again); prints its URL
#   tools/pg-test-server.sh env   [DIR]   prints `export SESSIONLOG_TEST_PG=URL`
#   tools/pg-test-server.sh crash [DIR]   stops it as a crash would
#                                         (`pg_ctl stop -m immediate`), keeping DIR
#   tools/pg-test-server.sh stop  [DIR]   stops it and removes DIR
#
# DIR defaults to $SESSIONLOG_PG_DIR, else /tmp/sessionlog-pg. Run as root, the
# server runs as the `postgres` user (PostgreSQL refuses to run as root).
#
# Settings, and why:
#   fsync=on, synchronous_commit=on  acknowledged appends are durable, as in
#                                    production; the benchmarks measure that.
#   commit_delay=0                   a flush leader does not sleep waiting for
#                                    siblings: concurrent commits already share
#                                    a flush (the ones that queue behind a flush
#                                    in progress go out with the next one), and
#                                    on a disk that flushes fast a sleep costs
#                                    the lone appender more than it saves.
#                                    Measured: commit_delay=2000 (siblings 5)
#                                    doubled the commits per flush of 64
#                                    appenders without making them faster
#                                    (they are CPU-bound); docs/FORMAT.md.
#   max_connections=300              every open writer holds a connection (it
#                                    carries the session's lock); the group
#                                    commit bench opens 64 at once, the
#                                    parallel tests more.
#   listen_addresses=127.0.0.1       loopback only; auth is `trust`, so the
#                                    server must never be reachable from outside.
set -euo pipefail

bin=${PG_BIN:-/usr/lib/postgresql/15/bin}
command=${1:-}
dir=${2:-${SESSIONLOG_PG_DIR:-/tmp/sessionlog-pg}}

as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 - <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 20000))
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
PY
}

url() {
    local port
    port=$(cat "$dir/port")
    echo "postgres://postgres@127.0.0.1:${port}/postgres"
}

case "$command" in
start)
    if [ ! -x "$bin/initdb" ]; then
        echo "error: no PostgreSQL binaries in $bin; install them (apt-get install postgresql) or set PG_BIN" >&2
        exit 1
    fi
    if [ -f "$dir/data/postmaster.pid" ]; then
        url
        exit 0
    fi
    if [ ! -f "$dir/port" ]; then
        mkdir -p "$dir"
        if [ "$(id -u)" -eq 0 ]; then
            chown postgres "$dir"
        fi
        chmod 0700 "$dir"
        as_postgres "$bin/initdb" -D "$dir/data" -U postgres --auth=trust \
            --encoding=UTF8 --locale=C >"$dir/initdb.log" 2>&1 || {
            cat "$dir/initdb.log" >&2
            exit 1
        }
        free_port >"$dir/port"
    fi
    port=$(cat "$dir/port")
    as_postgres "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=300 \
            -c fsync=on -c synchronous_commit=on -c commit_delay=0 \
            -c shared_buffers=64MB" >/dev/null || {
        cat "$dir/server.log" >&2
        exit 1
    }
    url
    ;;
crash)
    as_postgres "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
    ;;
env)
    echo "export SESSIONLOG_TEST_PG=$(url)"
    ;;
stop)
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_postgres "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    fi
    rm -rf "$dir"
    ;;
*)
    echo "usage: $0 start|env|stop [DIR]" >&2
    exit 1
    ;;
esac
