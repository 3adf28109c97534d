#!/usr/bin/env bash
# Local throwaway Redis (Debian's packaged server) for the test suite and local development.
#
#   hack/services/redis.sh up       start, or reuse the server this script started; prints exactly
#                                   KNARR_TEST_REDIS_URL=redis://127.0.0.1:PORT/0
#   hack/services/redis.sh down     stop it (SIGTERM, then SIGKILL after a deadline)
#   hack/services/redis.sh status   exit 0 and print the URL if it answers
#   hack/services/redis.sh logs [-f|N]   tail the server log
#
# The server listens on 127.0.0.1 only, without a password. It writes no snapshots while running
# (--save '') and no append-only file; only a shutdown (SIGTERM, `down`) saves one, so a down/up
# keeps the keys (a restart keeps its port when it is still free). Delete the state directory for
# a fresh one. apt-get installs redis-server when it is missing; the package's own service is not
# used (it is not started here, and ours runs on its own port).
#
# State: <repo>/.cache/redis/ (gitignored): dump.rdb, redis.pid, redis.log, port.
#        KNARR_REDIS_STATE_DIR names another state directory: a second, independent server (fault
#        tests stop and freeze their own server, never the shared one).
#
# Tunables (env): REDIS_START_TIMEOUT (s, default 20), REDIS_STOP_TIMEOUT (s, default 20).
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd)

NAME=redis
ADDRESS_VAR=KNARR_TEST_REDIS_URL
STATE_DIR=${KNARR_REDIS_STATE_DIR:-$ROOT/.cache/redis}
PID_FILE=$STATE_DIR/redis.pid
LOG_FILE=$STATE_DIR/redis.log
PORT_FILE=$STATE_DIR/port
LOCK_FILE=$STATE_DIR/lock

START_TIMEOUT=${REDIS_START_TIMEOUT:-20}
STOP_TIMEOUT=${REDIS_STOP_TIMEOUT:-20}

# shellcheck source=hack/services/_common.bash
source "$SCRIPT_DIR/_common.bash"

usage() {
    sed -n '4,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

SERVER="" CLI=""
find_binaries() {
    if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
        apt_install redis-server
    fi
    SERVER=$(command -v redis-server) || die "redis-server installed, yet not on PATH"
    CLI=$(command -v redis-cli) || die "redis-cli (package redis-tools) not on PATH"
}

# ---------------------------------------------------------------- process

# Our server, if it is running: the pid file's process, a redis-server whose working directory is
# our state directory (Redis changes into --dir), so a recycled pid or another checkout's never matches.
server_pid() {
    local pid
    [[ -s $PID_FILE ]] || return 1
    pid=$(<"$PID_FILE")
    [[ -n $pid && -r /proc/$pid/cmdline ]] || return 1
    [[ $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) == *redis-server* ]] || return 1
    [[ $(readlink "/proc/$pid/cwd" 2>/dev/null) == "$(cd "$STATE_DIR" && pwd -P)" ]] || return 1
    echo "$pid"
}

answering() {
    [[ $("$CLI" -h 127.0.0.1 -p "$1" ping 2>/dev/null) == PONG ]]
}

# ---------------------------------------------------------------- commands

fail_start() {
    log "error: $1"
    log_tail 40
    stop_server quiet >/dev/null 2>&1 || true
    log "Redis did not start; fix the cause above, then rerun: hack/services/redis.sh up"
    exit 1
}

start_server() {
    local port
    port=$(free_port "$(cat "$PORT_FILE" 2>/dev/null || true)") || die "could not find a free loopback port"
    : >"$LOG_FILE"
    log "starting Redis on 127.0.0.1:$port, log: $LOG_FILE"
    # setsid: Ctrl-C in the terminal running pytest/make must not reach the server. The inner
    # shell writes its own pid and execs the server, so the pid file holds the server's pid.
    # shellcheck disable=SC2016  # $$ is the inner shell's
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_FILE" \
        "$SERVER" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$STATE_DIR" \
        --shutdown-on-sigterm save --daemonize no --logfile '' \
        </dev/null >>"$LOG_FILE" 2>&1 9>&- &
    echo "$port" >"$PORT_FILE"

    local deadline=$((SECONDS + START_TIMEOUT)) pid=""
    while :; do
        if [[ -z $pid && -s $PID_FILE ]]; then pid=$(<"$PID_FILE"); fi
        if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
            fail_start "the server exited during startup"
        fi
        if [[ -n $pid ]] && answering "$port"; then
            break
        fi
        ((SECONDS < deadline)) || fail_start "not answering on 127.0.0.1:$port after ${START_TIMEOUT}s"
        sleep 0.1
    done
    log "ready: 127.0.0.1:$port (pid $pid)"
}

stop_server() {
    local pid
    if ! pid=$(server_pid); then
        rm -f "$PID_FILE"
        [[ ${1:-} == quiet ]] || log "not running"
        return 0
    fi
    log "stopping Redis (pid $pid)"
    stop_process "$pid" TERM "$STOP_TIMEOUT"
    rm -f "$PID_FILE"
    log "stopped"
}

address() { echo "redis://127.0.0.1:$1/0"; }

main "$@"
