#!/usr/bin/env bash
# Local throwaway PostgreSQL (Debian's packaged server) for the test suite and local development.
#
#   hack/services/postgres.sh up       start, or reuse the server this script started; prints exactly
#                                      KNARR_TEST_POSTGRES_DSN=postgresql://knarr@127.0.0.1:PORT/knarr
#   hack/services/postgres.sh down     stop it (fast shutdown, then SIGKILL after a deadline)
#   hack/services/postgres.sh status   exit 0 and print the DSN if it answers
#   hack/services/postgres.sh logs [-f|N]   tail the server log
#
# The server listens on 127.0.0.1 only (trust authentication: no passwords) and on a unix socket
# inside the state directory. Its data survives down/up (a restart keeps its port when it is still
# free); delete the state directory for a fresh one.
#
# State: <repo>/.cache/postgres/ (gitignored): data/, run/ (socket), postgres.log, port.
#        KNARR_POSTGRES_STATE_DIR names another state directory: a second, independent server
#        (fault tests stop and freeze their own server, never the shared one).
# Binaries: the newest /usr/lib/postgresql/<version>/bin; apt-get installs postgresql if none.
# PostgreSQL refuses to run as root: as root, the server runs as the 'postgres' user.
#
# Tunables (env): POSTGRES_START_TIMEOUT (s, default 30), POSTGRES_STOP_TIMEOUT (s, default 20).
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd)

NAME=postgres
ADDRESS_VAR=KNARR_TEST_POSTGRES_DSN
STATE_DIR=${KNARR_POSTGRES_STATE_DIR:-$ROOT/.cache/postgres}
DATA_DIR=$STATE_DIR/data
SOCKET_DIR=$STATE_DIR/run
LOG_FILE=$STATE_DIR/postgres.log
PORT_FILE=$STATE_DIR/port
LOCK_FILE=$STATE_DIR/lock
DATABASE=knarr
ROLE=knarr

START_TIMEOUT=${POSTGRES_START_TIMEOUT:-30}
STOP_TIMEOUT=${POSTGRES_STOP_TIMEOUT:-20}

# shellcheck source=hack/services/_common.bash
source "$SCRIPT_DIR/_common.bash"

usage() {
    sed -n '4,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

BIN=""
find_binaries() {
    BIN=$(find_bin_dir)
    if [[ -z $BIN ]]; then
        apt_install postgresql
        BIN=$(find_bin_dir)
        [[ -n $BIN ]] || die "postgresql installed, yet no /usr/lib/postgresql/*/bin/postgres"
    fi
}

find_bin_dir() {
    local dir
    dir=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
    [[ -x $dir/postgres && -x $dir/initdb ]] && echo "$dir"
    return 0
}

# As root, the server's files and processes belong to the 'postgres' user.
AS_SERVER=()
((EUID != 0)) || AS_SERVER=(setpriv --reuid=postgres --regid=postgres --init-groups --)
as_server() { "${AS_SERVER[@]}" "$@"; }

psql_at() {
    "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U "$ROLE" -d "$2" -tA -c "$3"
}

# ---------------------------------------------------------------- process

# The postmaster started on our data directory, if it is running.
server_pid() {
    local pid cmdline
    [[ -r $DATA_DIR/postmaster.pid ]] || return 1
    pid=$(head -n 1 "$DATA_DIR/postmaster.pid" 2>/dev/null) || return 1
    [[ -n $pid && -r /proc/$pid/cmdline ]] || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmdline == *"/postgres -D $DATA_DIR "* ]] || return 1
    echo "$pid"
}

answering() {
    psql_at "$1" "$DATABASE" "select 1" >/dev/null 2>&1
}

# ---------------------------------------------------------------- commands

prepare_data_dir() {
    mkdir -p "$DATA_DIR" "$SOCKET_DIR"
    if ((EUID == 0)); then
        id postgres >/dev/null 2>&1 || die "no 'postgres' user to run the server as (PostgreSQL refuses root); reinstall postgresql"
        chown postgres:postgres "$DATA_DIR" "$SOCKET_DIR"
    fi
    chmod 700 "$DATA_DIR" "$SOCKET_DIR"
    as_server test -w "$DATA_DIR" ||
        die "the 'postgres' user cannot write $DATA_DIR (PostgreSQL refuses to run as root, so it runs as that user):" \
            "put the checkout where that user can reach it, or set KNARR_POSTGRES_STATE_DIR to such a directory"
    local version
    version=$("$BIN/postgres" --version | sed -n 's/.* \([0-9][0-9]*\)\..*/\1/p')
    if [[ -s $DATA_DIR/PG_VERSION && $(<"$DATA_DIR/PG_VERSION") != "$version" ]]; then
        log "data directory is from PostgreSQL $(<"$DATA_DIR/PG_VERSION"), the server is $version: starting afresh"
        find "$DATA_DIR" -mindepth 1 -delete
    fi
    if [[ ! -s $DATA_DIR/PG_VERSION ]]; then
        find "$DATA_DIR" -mindepth 1 -delete
        log "initialising $DATA_DIR (PostgreSQL $version)"
        as_server "$BIN/initdb" -D "$DATA_DIR" -U "$ROLE" --auth=trust -E UTF8 --locale=C --no-sync \
            </dev/null >>"$LOG_FILE" 2>&1 || fail_start "initdb failed"
        printf '%s\n' '# Written by hack/services/postgres.sh: a throwaway server, loopback and its own socket only.' \
            'local all all trust' 'host all all 127.0.0.1/32 trust' | as_server tee "$DATA_DIR/pg_hba.conf" >/dev/null
    fi
}

fail_start() {
    log "error: $1"
    log_tail 40
    stop_server quiet >/dev/null 2>&1 || true
    log "PostgreSQL did not start; fix the cause above, then rerun: hack/services/postgres.sh up"
    exit 1
}

start_server() {
    local port
    port=$(free_port "$(cat "$PORT_FILE" 2>/dev/null || true)") || die "could not find a free loopback port"
    : >"$LOG_FILE"
    prepare_data_dir
    log "starting PostgreSQL on 127.0.0.1:$port, log: $LOG_FILE"
    # setsid: Ctrl-C in the terminal running pytest/make must not reach the server. Durability is
    # switched off: the data is throwaway and the tests should not wait for a disk.
    setsid -w "${AS_SERVER[@]}" "$BIN/postgres" -D "$DATA_DIR" -c listen_addresses=127.0.0.1 -c port="$port" \
        -c unix_socket_directories="$SOCKET_DIR" -c fsync=off -c synchronous_commit=off \
        -c full_page_writes=off -c max_connections=200 -c shared_buffers=64MB \
        </dev/null >>"$LOG_FILE" 2>&1 9>&- &
    local launcher=$!
    echo "$port" >"$PORT_FILE"

    local deadline=$((SECONDS + START_TIMEOUT)) created=""
    while :; do
        if ! kill -0 "$launcher" 2>/dev/null && ! server_pid >/dev/null; then
            fail_start "the server exited during startup"
        fi
        if [[ -z $created ]] && psql_at "$port" postgres "select 1" >/dev/null 2>&1; then
            if [[ -z $(psql_at "$port" postgres "select 1 from pg_database where datname = '$DATABASE'") ]]; then
                psql_at "$port" postgres "create database $DATABASE" >/dev/null 2>>"$LOG_FILE" ||
                    fail_start "could not create database $DATABASE"
            fi
            created=1
        fi
        if [[ -n $created ]] && answering "$port"; then
            break
        fi
        ((SECONDS < deadline)) || fail_start "not answering on 127.0.0.1:$port after ${START_TIMEOUT}s"
        sleep 0.1
    done
    log "ready: 127.0.0.1:$port (pid $(server_pid))"
}

# Stop our server if running; idempotent. Fast shutdown (SIGINT: roll back open transactions and
# disconnect clients) rather than PostgreSQL's SIGTERM, a "smart" shutdown that waits for every
# client to leave, which a connected worker never does.
stop_server() {
    local pid
    if ! pid=$(server_pid); then
        [[ ${1:-} == quiet ]] || log "not running"
        return 0
    fi
    log "stopping PostgreSQL (pid $pid)"
    stop_process "$pid" INT "$STOP_TIMEOUT"
    log "stopped"
}

address() { echo "postgresql://$ROLE@127.0.0.1:$1/$DATABASE"; }

main "$@"
