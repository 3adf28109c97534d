#!/usr/bin/env bash
# A local MongoDB-compatible server for the mongo sink's tests and local development:
# FerretDB (Apache-2.0) with its SQLite backend, built from the Go module proxy. It speaks the
# MongoDB wire protocol (wire version 21), so the sink talks to it with the same PyMongo client
# it uses against MongoDB.
#
#   hack/services/mongo.sh up       build if missing, start (or reuse) the server;
#                                   prints exactly KNARR_TEST_MONGO_URI=mongodb://127.0.0.1:PORT/
#   hack/services/mongo.sh down     stop it (SIGTERM, then SIGKILL after a deadline)
#   hack/services/mongo.sh status   exit 0 and print the URI if it answers
#   hack/services/mongo.sh logs [-f|N]   tail the server log
#
# Only the KNARR_TEST_MONGO_URI line goes to stdout; progress and errors go to stderr.
#
# Binary: ${XDG_CACHE_HOME:-~/.cache}/knarr/ferretdb/<version>/ferretdb (shared by all checkouts;
#         a cold build downloads the module and its dependencies and compiles for ~2 minutes).
# State:  <repo>/.cache/mongo/ (gitignored): data/ (SQLite files), server.pid, server.log, port.
#         KNARR_MONGO_STATE_DIR names another state directory: a second, independent server
#         (fault tests stop and kill their own server, never the shared one).
#         A restart keeps the data and, when it is still free, the previous port.
#
# Tunables (env): MONGO_START_TIMEOUT (s, default 30), MONGO_STOP_TIMEOUT (s, default 15).
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd -- "$SCRIPT_DIR/../.." && pwd)

FERRETDB_MODULE=github.com/FerretDB/FerretDB
FERRETDB_VERSION=v1.24.0
BUILD_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/knarr/ferretdb/$FERRETDB_VERSION
BIN=$BUILD_CACHE/ferretdb

STATE_DIR=${KNARR_MONGO_STATE_DIR:-$ROOT/.cache/mongo}
DATA_DIR=$STATE_DIR/data
PID_FILE=$STATE_DIR/server.pid
LOG_FILE=$STATE_DIR/server.log
PORT_FILE=$STATE_DIR/port
LOCK_FILE=$STATE_DIR/lock

START_TIMEOUT=${MONGO_START_TIMEOUT:-30}
STOP_TIMEOUT=${MONGO_STOP_TIMEOUT:-15}

# The Go toolchain is the local one: a module asking for a newer Go fails loudly instead of
# downloading a toolchain. CGO is not needed (the SQLite driver is pure Go).
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0
export PATH="$PATH:/usr/local/go/bin"

NAME=mongo
ADDRESS_VAR=KNARR_TEST_MONGO_URI
REUSE_GRACE=5  # FerretDB may take a moment to answer after a busy spell
LOCK_TIMEOUT=900  # a first `up` builds the server for minutes while holding the lock
# shellcheck source=hack/services/_common.bash
source "$SCRIPT_DIR/_common.bash"

usage() {
    sed -n '6,11p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# The project's venv python has pymongo. Before `make setup` there is no venv: create it the
# way `make setup` does (hack/uv.sh finds or installs uv).
py() {
    if [[ ! -x $ROOT/.venv/bin/python ]]; then
        local uv
        uv=$("$ROOT/hack/uv.sh")
        log "no $ROOT/.venv yet: creating it ($uv sync --all-packages --frozen)"
        (cd "$ROOT" && "$uv" sync --all-packages --frozen >&2)
    fi
    "$ROOT/.venv/bin/python" "$@"
}

# Serialise up/down/status across concurrent callers: fd 9 holds an exclusive lock until exit.
# Every child we leave running must close fd 9 (9>&-), or it would keep the lock forever.

# ---------------------------------------------------------------- build

# FerretDB embeds build/version/version.txt, which its release process generates: the module
# as the proxy serves it lacks it, so the build runs in a writable copy that has it.
build() {
    command -v go >/dev/null || die "go not found (need Go 1.22+ at /usr/local/go/bin or on PATH) to build FerretDB once"
    mkdir -p "$BUILD_CACHE"
    exec 8>"$BUILD_CACHE/.build.lock"
    flock -w 1800 8 || die "timed out waiting for $BUILD_CACHE/.build.lock (another build running?)"
    if [[ -x $BIN ]]; then exec 8>&-; return 0; fi
    local started=$SECONDS src dir
    log "building FerretDB $FERRETDB_VERSION into $BIN (once; downloads and compiles for a few minutes)"
    local json
    json=$(go mod download -json "$FERRETDB_MODULE@$FERRETDB_VERSION") ||
        die "go mod download $FERRETDB_MODULE@$FERRETDB_VERSION failed: $json"
    dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$json")
    [[ -n $dir && -d $dir ]] || die "go mod download $FERRETDB_MODULE@$FERRETDB_VERSION gave no source directory"
    src=$(mktemp -d "$BUILD_CACHE/src.XXXXXX")
    cp -r "$dir/." "$src/"
    chmod -R u+w "$src"
    echo "$FERRETDB_VERSION" >"$src/build/version/version.txt"
    log "module source ready after $((SECONDS - started))s; compiling (go build -trimpath ./cmd/ferretdb)"
    if ! (cd "$src" && go build -trimpath -o "$BIN.tmp" ./cmd/ferretdb >&2); then
        rm -rf "$src" "$BIN.tmp"
        die "building FerretDB failed (go output above)"
    fi
    rm -rf "$src"
    mv "$BIN.tmp" "$BIN"
    exec 8>&-
    log "built FerretDB $FERRETDB_VERSION in $((SECONDS - started))s"
}

# ---------------------------------------------------------------- process

# True if $1 is a live server started for this state directory: its command line must name both
# our binary and our state directory, so a recycled pid or another checkout's server never matches.
is_our_server() {
    local pid=$1 cmdline
    [[ -n $pid && -r /proc/$pid/cmdline ]] || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ $cmdline == "$BIN "* && $cmdline == *" --state-dir=$STATE_DIR "* ]]
}

# Print the pid of our running server, if any. Falls back to scanning /proc so a lost pid file
# does not leave an orphan nobody can stop.
server_pid() {
    local pid dir
    if [[ -f $PID_FILE ]]; then
        pid=$(<"$PID_FILE")
        if is_our_server "$pid"; then echo "$pid"; return 0; fi
    fi
    for dir in /proc/[0-9]*; do
        pid=${dir#/proc/}
        if is_our_server "$pid"; then echo "$pid"; return 0; fi
    done
    return 1
}

# Free for a listener: binds with SO_REUSEADDR as the server does (a TIME_WAIT left by the
# previous run does not count, a listener does).
port_free() { py -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
' "$1"; }

pick_port() {
    py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A real round trip through PyMongo: the server answers ping on the wire protocol.
answering() {
    py - "$(address "$1")" 2>/dev/null <<'EOF'
import sys
from pymongo import MongoClient
client = MongoClient(sys.argv[1], serverSelectionTimeoutMS=2000, connectTimeoutMS=2000, socketTimeoutMS=2000)
try:
    client.admin.command("ping")
finally:
    client.close()
EOF
}

address() { echo "mongodb://127.0.0.1:$1/"; }

# ---------------------------------------------------------------- commands

fail_start() {
    log "error: $1"
    if [[ -f $LOG_FILE ]]; then
        log "last 60 lines of $LOG_FILE:"
        tail -n 60 "$LOG_FILE" >&2
    fi
    stop_server quiet >/dev/null 2>&1 || true
    log "FerretDB did not start; fix the cause above, then rerun: hack/services/mongo.sh up"
    exit 1
}

start_server() {
    local port=""
    if [[ -s $PORT_FILE ]] && port_free "$(<"$PORT_FILE")"; then
        port=$(<"$PORT_FILE")
    else
        port=$(pick_port) || die "could not pick a free loopback port"
    fi
    mkdir -p "$DATA_DIR"
    echo "$port" >"$PORT_FILE"
    log "starting FerretDB $FERRETDB_VERSION (SQLite) on 127.0.0.1:$port, data: $DATA_DIR, log: $LOG_FILE"
    # setsid: own session, so Ctrl-C in the terminal running pytest/make does not reach it. The
    # inner shell writes its own pid and then execs the server. 9>&- releases our lock fd.
    # shellcheck disable=SC2016  # $$ is the inner shell's
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_FILE" \
        "$BIN" --state-dir="$STATE_DIR" --handler=sqlite --sqlite-url="file:$DATA_DIR/" \
        --listen-addr="127.0.0.1:$port" --debug-addr=- --telemetry=disable \
        --log-level=INFO --log-format=text \
        </dev/null >>"$LOG_FILE" 2>&1 9>&- &

    local uri deadline=$((SECONDS + START_TIMEOUT)) pid=""
    uri=$(address "$port")
    while :; do
        if [[ -z $pid && -s $PID_FILE ]]; then pid=$(<"$PID_FILE"); fi
        if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
            fail_start "server process $pid exited during startup"
        fi
        if [[ -n $pid ]] && answering "$port"; then break; fi
        ((SECONDS < deadline)) || fail_start "server not answering ping on $uri after ${START_TIMEOUT}s"
        sleep 0.2
    done
    log "ready: $uri (pid $pid)"
}

# Stop our server if running. Prints nothing on stdout; idempotent. The data stays.
stop_server() {
    local pid
    if ! pid=$(server_pid); then
        rm -f "$PID_FILE"
        [[ ${1:-} == quiet ]] || log "not running"
        return 0
    fi
    log "stopping FerretDB (pid $pid)"
    kill -CONT "$pid" 2>/dev/null || true  # a SIGSTOPped server would otherwise sit on the TERM
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            log "still alive after ${STOP_TIMEOUT}s, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
    while [[ -e /proc/$pid ]] && is_our_server "$pid"; do sleep 0.1; done
    rm -f "$PID_FILE"
    log "stopped"
}

# Built on first use (the Go toolchain and module cache do the work).
find_binaries() { [[ -x $BIN ]] || build; }

main "$@"
